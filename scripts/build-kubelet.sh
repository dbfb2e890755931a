#!/usr/bin/env bash
# Build the real kubelet (k8s.io/kubernetes/cmd/kubelet) of the control plane's version, for the real node of
# tests/harness/realnode.py, and cache it beside the control plane in ~/.cache/podtailor/k8s-<version>/bin.
#
# It is built from a copy of the control plane's wrapper module (scripts/build-control-plane.sh makes that one:
# the staging modules pinned at their published tags), in a directory of its own, so that adding the kubelet's
# imports to go.mod never races a control-plane or hollow-node build that uses the original wrapper at the same
# time. Everything the kubelet needs beyond the hollow node is a few modules; a warm build takes about 35 s.
#
# Usage: scripts/build-kubelet.sh     (K8S_MINOR, K8S_VERSION, PODTAILOR_CACHE as build-control-plane.sh)
# Prints the kubelet's path on its last line.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_ROOT="${PODTAILOR_CACHE:-$HOME/.cache/podtailor}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-kubelet %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-kubelet] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -n "${PODTAILOR_K8S_BIN:-}" ]]; then
  BIN=$PODTAILOR_K8S_BIN
else
  BIN=$(bash "$REPO_ROOT/scripts/build-control-plane.sh" | tail -n 1) || die "the control plane build failed"
fi
K8S_VERSION=$(cat "$BIN/../VERSION" 2>/dev/null) || die "no VERSION file beside $BIN"
if [[ -x "$BIN/kubelet" ]]; then
  echo "$BIN/kubelet"; exit 0
fi

WRAPPER="$CACHE_ROOT/work/k8s-${K8S_VERSION}"
[[ -f "$WRAPPER/.ready" ]] || die "no complete wrapper module at $WRAPPER (scripts/build-control-plane.sh makes it)"
WD="$CACHE_ROOT/work/kubelet-${K8S_VERSION}"
rm -rf "$WD"; mkdir -p "$WD"; cp "$WRAPPER/go.mod" "$WRAPPER/go.sum" "$WD/"
cd "$WD"
printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kubelet"\n' > tools.go
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ld=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
  ld+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
log "building kubelet ${K8S_VERSION} (a warm build takes about 35 s; cold, several minutes)"
go mod tidy -e >&2 || true
go build -trimpath -ldflags "-s -w ${ld}" -o "$BIN/kubelet.tmp.$$" k8s.io/kubernetes/cmd/kubelet >&2 \
  || die "building the kubelet failed (see the go output above)"
mv "$BIN/kubelet.tmp.$$" "$BIN/kubelet"
log "kubelet built: $("$BIN/kubelet" --version)"
echo "$BIN/kubelet"
