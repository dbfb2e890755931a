#!/usr/bin/env bash
# Build Helm (helm.sh/helm/v4/cmd/helm) from the Go module proxy, the same way scripts/build-kustomize.sh
# builds kustomize, and cache the binary outside the work tree (never committed).
#
# `go install <module>@<version>` first; if that is refused (a release whose go.mod carries replace
# directives cannot be installed that way), a throwaway wrapper module requires the version and builds it.
# The version is stamped into the binary the way Helm's own Makefile does (-X .../internal/version.version).
#
# Usage: bash scripts/build-helm.sh
#   HELM_VERSION     exact version (default: v4.3.2, the newest the proxy serves that builds with Go 1.26;
#                    "latest" asks the proxy for the newest v4.x.y)
#   PODTAILOR_CACHE  cache root (default ~/.cache/podtailor)
# Prints the path of the helm binary on its last line.
set -euo pipefail

CACHE_ROOT="${PODTAILOR_CACHE:-$HOME/.cache/podtailor}"
MODULE=helm.sh/helm/v4
PKG=$MODULE/cmd/helm
VERSION="${HELM_VERSION:-v4.3.2}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-helm] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "$VERSION" == latest ]]; then
  command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"
  VERSION=$(go list -m -versions "$MODULE" 2>/dev/null | tr ' ' '\n' | grep -E '^v4\.[0-9]+\.[0-9]+$' \
            | sort -t. -k2,2n -k3,3n | tail -1) || true
  [[ -n "$VERSION" ]] || die "cannot list versions of $MODULE on the Go module proxy"
fi
[[ "$VERSION" =~ ^v4\.[0-9]+\.[0-9]+$ ]] || die "HELM_VERSION must look like v4.X.Y, not '$VERSION'"

OUT="$CACHE_ROOT/helm-${VERSION}"
BIN="$OUT/bin/helm"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26 (or put helm ${VERSION} at $BIN)"
mkdir -p "$OUT/bin"
LDFLAGS="-s -w -X ${MODULE}/internal/version.version=${VERSION} -X ${MODULE}/internal/version.gitTreeState=clean"

start=$(date +%s)
log "building helm ${VERSION} (a cold build downloads ~150 MB of modules and takes a few minutes)"
if GOBIN="$OUT/bin" go install -trimpath -ldflags "$LDFLAGS" "${PKG}@${VERSION}" >&2; then
  :
else
  log "go install refused; building through a wrapper module"
  wd="$CACHE_ROOT/work/helm-${VERSION}"; rm -rf "$wd"; mkdir -p "$wd"; cd "$wd"
  go mod init local/helmbin >/dev/null 2>&1
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "helm.sh/helm/v4/cmd/helm"
GO
  go get "${PKG}@${VERSION}" >&2 || die "go get ${PKG}@${VERSION} failed"
  go mod tidy -e >&2 || true
  go build -trimpath -ldflags "$LDFLAGS" -o "$BIN.tmp.$$" "$PKG" >&2 || die "building helm failed"
  mv "$BIN.tmp.$$" "$BIN"
fi
[[ -x "$BIN" ]] || die "helm missing after build"
"$BIN" version --short >/dev/null 2>&1 || { rm -f "$BIN"; die "the built helm does not run ($BIN removed)"; }
log "helm built in $(( $(date +%s) - start ))s: $("$BIN" version --short 2>/dev/null)"
echo "$BIN"
