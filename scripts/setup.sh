#!/usr/bin/env bash
# Install everything podtailor's tests and demo need on a fresh Debian machine, idempotently:
# Debian packages (after apt-get update), a virtualenv with the project and its test tools, and the
# control plane built from Go modules (cached in ~/.cache/podtailor). Safe to run again: each step is
# skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

DEB_PACKAGES=(prometheus chromium)
missing=()
for p in "${DEB_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq || die "apt-get update failed"
  # policy-rc.d keeps the package from starting its own Prometheus service: the tests start their own.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null; $SUDO chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { $SUDO rm -f /usr/sbin/policy-rc.d; die "apt-get install ${missing[*]} failed"; }
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
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]' || die "pip install failed"
  rm -f .venv/.installed-*; touch "$stamp"
fi

log "control plane: checking the cache (builds from the Go module proxy when missing)"
bin_dir=$(bash scripts/build-control-plane.sh | tail -1) || die "control plane build failed"
log "control plane binaries in $bin_dir"
