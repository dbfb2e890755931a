#!/usr/bin/env bash
# Build a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) and kubectl from the Go module proxy, and cache the binaries outside the work tree.
#
# Why a wrapper module: k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them
# with local replace directives, which Go ignores in a dependency. So we create a throwaway module
# that replaces every staging module named in the release's own go.mod with its published v0.X.Y tag.
#
# The same wrapper module also builds hollow-node, our kubelet main in tests/hollownode (copied into the
# wrapper as package ./hollownode); its cached binary is keyed on a hash of those sources, so an edit
# rebuilds it, and bin/hollow-node links to the current one.
#
# Usage: scripts/build-control-plane.sh [--print-dir]
#   K8S_MINOR      Kubernetes minor to build (default 1.37; the newest patch on the proxy is used)
#   K8S_VERSION    exact version (e.g. v1.37.2); overrides K8S_MINOR
#   ETCD_VERSION   etcd server version (default: newest v3.7.x on the proxy)
#   PODTAILOR_CACHE  cache root (default ~/.cache/podtailor)
# Prints the directory holding the binaries on its last line.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_ROOT="${PODTAILOR_CACHE:-$HOME/.cache/podtailor}"
K8S_MINOR="${K8S_MINOR:-1.37}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-control-plane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-control-plane] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26 (Kubernetes ${K8S_MINOR} needs it)"

newest() {  # newest non-prerelease version of module $1 matching prefix $2
  local versions
  versions=$(go list -m -versions "$1" 2>/dev/null) || die "cannot list versions of $1 on the Go module proxy ($(go env GOPROXY))"
  tr ' ' '\n' <<<"$versions" | grep -E "^$2\.[0-9]+$" | sort -t. -k3,3n | tail -1
}

tmp_list=$(mktemp -d); trap 'rm -rf "$tmp_list"' EXIT
cd "$tmp_list"
if [[ -z "${K8S_VERSION:-}" ]]; then
  # A cached build of this minor is good enough when the proxy cannot be asked.
  K8S_VERSION=$(newest k8s.io/kubernetes "v${K8S_MINOR}" || true)
  if [[ -z "$K8S_VERSION" ]]; then
    cached=$(ls -d "$CACHE_ROOT"/k8s-v"${K8S_MINOR}".*/bin 2>/dev/null | sort -V | tail -1 || true)
    [[ -n "$cached" ]] || die "no v${K8S_MINOR}.x release of k8s.io/kubernetes found on the proxy"
    K8S_VERSION=$(basename "$(dirname "$cached")"); K8S_VERSION=${K8S_VERSION#k8s-}
  fi
fi
ETCD_VERSION="${ETCD_VERSION:-$(newest go.etcd.io/etcd/server/v3 v3.7 || true)}"
[[ -n "$ETCD_VERSION" ]] || die "no v3.7.x release of go.etcd.io/etcd/server/v3 found on the proxy"

OUT="$CACHE_ROOT/k8s-${K8S_VERSION}"
BIN="$OUT/bin"
ETCD_OUT="$CACHE_ROOT/etcd-${ETCD_VERSION}/bin"
mkdir -p "$BIN" "$ETCD_OUT"

# Commands of k8s.io/kubernetes/cmd built into $BIN; any missing one is built.
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
HOLLOW_SRC="$REPO_ROOT/tests/hollownode"
HOLLOW_HASH=$(cd "$HOLLOW_SRC" && cat $(ls *.go | sort) | sha256sum | cut -c1-16)
HOLLOW_BIN="$BIN/hollow-node-${HOLLOW_HASH}"

missing_cmds() {
  local c
  for c in "${K8S_CMDS[@]}"; do [[ -x "$BIN/$c" ]] || echo "$c"; done
}

have_all() {
  [[ -z "$(missing_cmds)" && -x "$HOLLOW_BIN" && -x "$ETCD_OUT/etcd" ]]
}

if ! [[ -x "$ETCD_OUT/etcd" ]]; then
  log "building etcd ${ETCD_VERSION} (cold builds take a few minutes)"
  wd="$CACHE_ROOT/work/etcd-${ETCD_VERSION}"; rm -rf "$wd"; mkdir -p "$wd"; cd "$wd"
  go mod init local/etcdbin >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2 || die "go get etcd ${ETCD_VERSION} failed"
  go build -trimpath -o "$ETCD_OUT/etcd.tmp.$$" go.etcd.io/etcd/server/v3 >&2 || die "building etcd failed"
  mv "$ETCD_OUT/etcd.tmp.$$" "$ETCD_OUT/etcd"
  log "etcd built: $("$ETCD_OUT/etcd" --version | head -1)"
fi

WRAPPER="$CACHE_ROOT/work/k8s-${K8S_VERSION}"
staging_ver="v0.${K8S_VERSION#v1.}"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ld=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
  ld+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done

prepare_wrapper() {  # (re)create the wrapper module unless a complete one for this version is there
  if [[ -f "$WRAPPER/.ready" ]]; then cd "$WRAPPER"; return; fi
  rm -rf "$WRAPPER"; mkdir -p "$WRAPPER"; cd "$WRAPPER"
  go mod init local/k8sbins >/dev/null 2>&1
  go mod edit -go=1.26.0 -godebug=default=go1.26
  log "step 1/4: reading the staging module list from k8s.io/kubernetes@${K8S_VERSION}'s go.mod"
  gomod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])') \
    || die "cannot download k8s.io/kubernetes@${K8S_VERSION}"
  mapfile -t staging < <(grep -oE 'k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" | awk '{print $1}' | sort -u)
  (( ${#staging[@]} > 10 )) || die "found only ${#staging[@]} staging modules in $gomod; the go.mod layout changed"
  log "step 2/4: pinning ${#staging[@]} staging modules at ${staging_ver}"
  args=()
  for m in "${staging[@]}"; do args+=("-replace=${m}=${m}@${staging_ver}"); done
  go mod edit "${args[@]}"
  log "step 3/4: resolving dependencies (downloads ~1 GB of modules on a cold cache)"
  write_tools || true
  go get "k8s.io/kubernetes@${K8S_VERSION}" >&2 || die "go get k8s.io/kubernetes@${K8S_VERSION} failed"
  go mod tidy -e >&2 || true
  touch .ready
}

write_tools() {  # tools.go imports every command in K8S_CMDS, so go.mod/go.sum cover them all
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in "${K8S_CMDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } > tools.go.new
  if cmp -s tools.go.new tools.go; then rm tools.go.new; return 1; fi
  mv tools.go.new tools.go
}

mapfile -t todo < <(missing_cmds)
if (( ${#todo[@]} )); then
  log "building Kubernetes ${K8S_VERSION} (staging modules ${staging_ver}): ${todo[*]}; a cold build takes 10-30 minutes on 2 cores"
  # A wrapper left by an older version of this script has no .ready marker; it is rebuilt from scratch.
  prepare_wrapper
  if write_tools; then go mod tidy -e >&2 || true; fi  # a command added to K8S_CMDS since the wrapper was made
  for cmd in "${todo[@]}"; do
    log "step 4/4: compiling ${cmd}"
    go build -trimpath -ldflags "-s -w ${ld}" -o "$BIN/${cmd}.tmp.$$" "k8s.io/kubernetes/cmd/${cmd}" >&2 \
      || die "building ${cmd} failed (see the go output above)"
    mv "$BIN/${cmd}.tmp.$$" "$BIN/${cmd}"
  done
  log "kubernetes built: $("$BIN/kube-apiserver" --version)"
fi

if ! [[ -x "$HOLLOW_BIN" ]]; then
  log "building hollow-node ${HOLLOW_HASH} (kubelet ${K8S_VERSION} over the CRI fake runtime) from tests/hollownode"
  [[ -f "$WRAPPER/go.mod" && ! -f "$WRAPPER/.ready" ]] && touch "$WRAPPER/.ready"  # made by the old script: complete
  prepare_wrapper
  rm -rf hollownode; mkdir hollownode; cp "$HOLLOW_SRC"/*.go hollownode/
  go mod tidy -e >&2 || true
  go build -trimpath -ldflags "-s -w ${ld}" -o "$HOLLOW_BIN.tmp.$$" ./hollownode >&2 \
    || die "building hollow-node failed (see the go output above)"
  mv "$HOLLOW_BIN.tmp.$$" "$HOLLOW_BIN"
  find "$BIN" -maxdepth 1 -name 'hollow-node-*' ! -name "hollow-node-${HOLLOW_HASH}" -delete
  log "hollow-node built"
fi
ln -sf "$(basename "$HOLLOW_BIN")" "$BIN/hollow-node"

have_all || die "binaries missing after build"
ln -sf "$ETCD_OUT/etcd" "$BIN/etcd"
printf '%s\n' "$K8S_VERSION" > "$OUT/VERSION"
log "binaries ready in $BIN ($(du -sh "$BIN" "$ETCD_OUT" | awk '{print $1}' | paste -sd+))"
echo "$BIN"
