#!/usr/bin/env bash
# Build kustomize (sigs.k8s.io/kustomize/kustomize/v5) from the Go module proxy, the same way
# scripts/build-control-plane.sh builds the control plane, and cache the binary outside the work tree.
#
# First `go install <module>@<version>`; if that is refused (a release whose go.mod carries replace
# directives cannot be installed that way), a throwaway wrapper module requires the version and builds it.
#
# Usage: scripts/build-kustomize.sh
#   KUSTOMIZE_VERSION  exact version (default: v5.8.2, the newest that builds with Go 1.26; "latest" asks the proxy for the newest v5.x.y)
#   PODTAILOR_CACHE    cache root (default ~/.cache/podtailor)
# Prints the path of the kustomize binary on its last line.
set -euo pipefail

CACHE_ROOT="${PODTAILOR_CACHE:-$HOME/.cache/podtailor}"
MODULE=sigs.k8s.io/kustomize/kustomize/v5
VERSION="${KUSTOMIZE_VERSION:-v5.8.2}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-kustomize %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-kustomize] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "$VERSION" == latest ]]; then
  command -v go >/dev/null || die "go is not on PATH; install Go >= 1.22"
  VERSION=$(go list -m -versions "$MODULE" 2>/dev/null | tr ' ' '\n' | grep -E '^v5\.[0-9]+\.[0-9]+$' \
            | sort -t. -k2,2n -k3,3n | tail -1) || true
  [[ -n "$VERSION" ]] || die "cannot list versions of $MODULE on the Go module proxy"
fi
[[ "$VERSION" =~ ^v5\.[0-9]+\.[0-9]+$ ]] || die "KUSTOMIZE_VERSION must look like v5.X.Y, not '$VERSION'"

OUT="$CACHE_ROOT/kustomize-${VERSION}"
BIN="$OUT/bin/kustomize"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || die "go is not on PATH; install Go >= 1.22 (or put kustomize ${VERSION} at $BIN)"
mkdir -p "$OUT/bin"

log "building kustomize ${VERSION} (a cold build downloads ~100 MB of modules and takes a minute or two)"
if GOBIN="$OUT/bin" go install -trimpath -ldflags "-s -w" "${MODULE}@${VERSION}" >&2; then
  :
else
  log "go install refused; building through a wrapper module"
  wd="$CACHE_ROOT/work/kustomize-${VERSION}"; rm -rf "$wd"; mkdir -p "$wd"; cd "$wd"
  go mod init local/kustomizebin >/dev/null 2>&1
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
GO
  go get "${MODULE}@${VERSION}" >&2 || die "go get ${MODULE}@${VERSION} failed"
  go mod tidy -e >&2 || true
  go build -trimpath -ldflags "-s -w" -o "$BIN.tmp.$$" "$MODULE" >&2 || die "building kustomize failed"
  mv "$BIN.tmp.$$" "$BIN"
fi
[[ -x "$BIN" ]] || die "kustomize missing after build"
log "kustomize built: $("$BIN" version 2>/dev/null || echo "$VERSION")"
echo "$BIN"
