#!/usr/bin/env bash
# Build one Go tool the tests need from the Go module proxy, and cache the binary outside the work tree.
#
# Usage: scripts/build-tools.sh <tool>
#   victoria-metrics   VictoriaMetrics single-node (app/victoria-metrics)
#     VICTORIA_METRICS_VERSION  default v1.151.0 (newer releases need Go >= 1.27)
#   thanos             Thanos (cmd/thanos; the tests run its `query` and `sidecar` commands)
#     THANOS_VERSION            default v0.42.4 (v0.42.5 needs Go >= 1.26.10)
#   PODTAILOR_CACHE    cache root (default ~/.cache/podtailor)
# Builds only when ~/.cache/podtailor/<tool>-<version>/bin/<binary> is missing; prints the binary's path
# on its last line.
#
# Why a wrapper module: a module's replace directives apply only when it is the main module, so
# `go install module/cmd@version` of a release with replace directives fails or builds other code.
# We create a throwaway main module that copies every non-local replace directive of the release's own
# go.mod (as scripts/build-control-plane.sh does for Kubernetes' staging modules) and build from there.
set -euo pipefail

CACHE_ROOT="${PODTAILOR_CACHE:-$HOME/.cache/podtailor}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

TOOL="${1:-}"
log() { printf '[build-tools %s %s] %s\n' "$TOOL" "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-tools %s] ERROR: %s\n' "$TOOL" "$*" >&2; exit 1; }

case "$TOOL" in
  victoria-metrics)
    VERSION="${VICTORIA_METRICS_VERSION:-v1.151.0}"
    MODULE=github.com/VictoriaMetrics/VictoriaMetrics
    PKG=$MODULE/app/victoria-metrics
    BINARY=victoria-metrics
    LDFLAGS="-X $MODULE/lib/buildinfo.Version=victoria-metrics-$VERSION"
    TAGS=""
    ;;
  thanos)
    VERSION="${THANOS_VERSION:-v0.42.4}"
    MODULE=github.com/thanos-io/thanos
    PKG=$MODULE/cmd/thanos
    BINARY=thanos
    LDFLAGS="-X github.com/prometheus/common/version.Version=${VERSION#v}"
    # The tags of the release's own .promu.yml. Without slicelabels, Prometheus' labels package uses
    # another layout than Thanos' labelpb casts assume, and the sidecar panics in its first gRPC answer.
    TAGS="netgo,slicelabels"
    ;;
  *)
    printf 'usage: %s victoria-metrics|thanos\n' "$0" >&2; exit 2 ;;
esac

command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"
BIN="$CACHE_ROOT/${TOOL}-${VERSION}/bin"
if [[ -x "$BIN/$BINARY" ]]; then
  echo "$BIN/$BINARY"
  exit 0
fi

started=$(date +%s)
wd="$CACHE_ROOT/work/${TOOL}-${VERSION}"; rm -rf "$wd"; mkdir -p "$wd"; cd "$wd"
log "building ${MODULE} ${VERSION} (a cold build takes several minutes on 2 cores)"
go mod init "local/${TOOL}bin" >/dev/null 2>&1 || die "step 1/4: go mod init failed in $wd"

log "step 1/4: reading the replace directives of ${MODULE}@${VERSION}'s go.mod"
gomod=$(go mod download -json "${MODULE}@${VERSION}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(d.get("Error", "no go.mod in the answer")) if "GoMod" not in d else print(d["GoMod"])') \
  || die "step 1/4: cannot download ${MODULE}@${VERSION} from the Go module proxy ($(go env GOPROXY))"
replace_args=$(go mod edit -json "$gomod" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    old, new = r["Old"], r["New"]
    if not new.get("Version"):
        continue  # a local path of the upstream tree: not in the module zip, nothing to copy
    at = "@" + old["Version"] if old.get("Version") else ""
    print("-replace=" + old["Path"] + at + "=" + new["Path"] + "@" + new["Version"])
') || die "step 1/4: cannot read the replace directives of $gomod"
replaces=()
[[ -z "$replace_args" ]] || mapfile -t replaces <<<"$replace_args"

log "step 2/4: copying ${#replaces[@]} replace directives"
if ((${#replaces[@]})); then go mod edit "${replaces[@]}" || die "step 2/4: go mod edit failed"; fi

log "step 3/4: resolving dependencies (downloads modules on a cold cache)"
printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$PKG" > tools.go
go get "${MODULE}@${VERSION}" >&2 || die "step 3/4: go get ${MODULE}@${VERSION} failed (see the go output above)"
go mod tidy -e >&2 || true

log "step 4/4: compiling ${PKG}"
mkdir -p "$BIN"
go build -trimpath -tags "${TAGS}" -ldflags "-s -w ${LDFLAGS}" -o "$BIN/${BINARY}.tmp.$$" "$PKG" >&2 \
  || die "step 4/4: building ${PKG} failed (see the go output above)"
mv "$BIN/${BINARY}.tmp.$$" "$BIN/${BINARY}"
printf '%s\n' "$VERSION" > "$BIN/../VERSION"
log "built in $(( $(date +%s) - started ))s: $BIN/$BINARY ($(du -sh "$BIN/$BINARY" | cut -f1))"
echo "$BIN/$BINARY"
