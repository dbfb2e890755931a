#!/usr/bin/env bash
# Install everything podtailor's tests and demo need on a fresh Debian machine, idempotently:
# Debian packages (after apt-get update), a virtualenv with the project and its test tools, and the
# control plane built from Go modules (cached in ~/.cache/podtailor), the real node's kubelet and local images.
# Safe to run again: each step is skipped when its result is already there.
#
# Usage: scripts/setup.sh [--demo]
#   --demo   only what `make demo` needs: no Helm, VictoriaMetrics, Thanos or VPA builds.
set -euo pipefail
DEMO_ONLY=0
case "${1:-}" in
  --demo) DEMO_ONLY=1 ;;
  "") ;;
  *) printf '[setup] ERROR: unknown argument %s (usage: scripts/setup.sh [--demo])\n' "$1" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

CACHE_ROOT="${PODTAILOR_CACHE:-$HOME/.cache/podtailor}"
LOG_DIR="$CACHE_ROOT/logs"

# build STEP SCRIPT [ARGS]: run one of the repo's cached Go builds. Its whole output goes to
# $LOG_DIR/STEP.log and only its progress lines to the terminal; a failure names the step and the log.
# The binary's path (the script's last line) is left in $built.
build() {
  local step=$1 script=$2; shift 2
  local logf="$LOG_DIR/$step.log" out
  mkdir -p "$LOG_DIR"
  if ! out=$(bash "$script" "$@" 2> >(tee "$logf" | grep --line-buffered -E '^\[build' >&2)); then
    sleep 0.2  # let the progress filter finish printing
    printf '[setup] the last lines of %s:\n' "$logf" >&2; tail -n 15 "$logf" | sed 's/^/    /' >&2
    die "step '$step' ($script) failed; its whole log is $logf"
  fi
  built=$(tail -n 1 <<<"$out")
}

# containerd, runc, the CNI plugins and busybox-static are the real node's runtime (tests/harness/realnode.py).
DEB_PACKAGES=(prometheus chromium containerd runc containernetworking-plugins busybox-static)
missing=()
for p in "${DEB_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq || die "apt-get update failed"
  # policy-rc.d keeps the packages from starting their own Prometheus and containerd services: the tests
  # start their own.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null; $SUDO chmod +x /usr/sbin/policy-rc.d
  mkdir -p "$LOG_DIR"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >"$LOG_DIR/apt.log" 2>&1 \
    || { $SUDO rm -f /usr/sbin/policy-rc.d; tail -n 15 "$LOG_DIR/apt.log" >&2
         die "step 'Debian packages' (apt-get install ${missing[*]}) failed; its whole log is $LOG_DIR/apt.log"; }
  $SUDO rm -f /usr/sbin/policy-rc.d
fi
command -v promtool >/dev/null || die "promtool not found after installing prometheus"

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "Python >= 3.11 is required ($PY is $("$PY" --version))"
if [[ ! -x .venv/bin/python ]]; then
  log "creating virtualenv .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -f $stamp ]]; then
  log "installing podtailor and its test tools into .venv"
  mkdir -p "$LOG_DIR"
  { .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[test]'; } >"$LOG_DIR/pip.log" 2>&1 \
    || { tail -n 15 "$LOG_DIR/pip.log" >&2; die "step 'virtualenv' (pip install -e '.[test]') failed; its whole log is $LOG_DIR/pip.log"; }
  rm -f .venv/.installed-*; touch "$stamp"
fi

if ! compgen -G "$CACHE_ROOT/k8s-v${K8S_MINOR:-1.37}.*/bin/hollow-node" >/dev/null; then
  log "first run: building the Kubernetes control plane, kubectl, the hollow-node kubelet and the real kubelet, then"
  log "  (not for make demo) Helm, VictoriaMetrics, Thanos and VPA, from the Go module proxy. That took about 35 min on a 2-core machine with"
  log "  empty caches, and 757 MB of module downloads. It is a one-time cost: the binaries are cached in"
  log "  $CACHE_ROOT by version, and later runs skip this step."
fi
log "control plane: checking the cache (builds from the Go module proxy when missing)"
build control-plane scripts/build-control-plane.sh
log "control plane binaries in $built"
build kubelet scripts/build-kubelet.sh; log "the real node's kubelet at $built"
log "the real node's local images: $("$PY" scripts/build-images.py | awk '{print $1}' | paste -sd' ')"
if ((DEMO_ONLY)); then log "demo set-up done (Helm, VictoriaMetrics, Thanos and VPA are built by make test)"; exit 0; fi
build helm scripts/build-helm.sh; log "helm at $built (renders and installs manifests/helm/podtailor in the tests)"
for tool in victoria-metrics thanos; do  # the Prometheus-compatible backends of tests/integration/test_backends_real.py
  build "$tool" scripts/build-tools.sh "$tool"; log "$tool at $built"; done
build vpa scripts/build-vpa.sh  # VPA 1.8.1's three components: tests/integration/test_vpa_*.py, make bench
log "VPA's recommender, updater and admission controller in $built"
