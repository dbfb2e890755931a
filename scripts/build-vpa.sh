#!/usr/bin/env bash
# Build the Vertical Pod Autoscaler's three components (recommender, updater, admission controller) from
# the Go module proxy, and cache the binaries outside the work tree. The compatibility tests and the
# disruption benchmark run them against the local cluster (tests/harness/vpa.py).
#
# Why a wrapper module: VPA's go.mod carries exclude directives (and a module's replace and exclude
# directives apply only when it is the main module), so `go install k8s.io/autoscaler/...@v1.8.1` is
# refused. We create a throwaway main module that copies the release's exclude and (non-local) replace
# directives, requires the release, and builds its three main packages there, at exactly the dependency
# versions the release's go.mod selects.
#
# One change to VPA's code, made at build time and checked to apply exactly once: the admission controller's
# webhook server listens on 127.0.0.1 instead of every interface (pkg/admission-controller/main.go builds its
# address as ":<port>" and has no flag for the host), because the tests' servers bind the loopback interface
# only. Its main package is built from a copy with that one line changed; nothing else is patched.
#
# Usage: scripts/build-vpa.sh
#   VPA_VERSION      default v1.8.1 (go 1.26.0, client-go v0.37.1)
#   PODTAILOR_CACHE  cache root (default ~/.cache/podtailor)
# Builds only what is missing in ~/.cache/podtailor/vpa-<version>/bin; prints that directory on its last line.
set -euo pipefail

CACHE_ROOT="${PODTAILOR_CACHE:-$HOME/.cache/podtailor}"
VERSION="${VPA_VERSION:-v1.8.1}"
MODULE=k8s.io/autoscaler/vertical-pod-autoscaler
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-vpa %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-vpa] ERROR: %s\n' "$*" >&2; exit 1; }

# binary name -> main package of the module
declare -A PKGS=(
  [vpa-recommender]=$MODULE/pkg/recommender
  [vpa-updater]=$MODULE/pkg/updater
  [vpa-admission-controller]=$MODULE/pkg/admission-controller
)
BIN="$CACHE_ROOT/vpa-${VERSION}/bin"

missing=()
for b in vpa-recommender vpa-updater vpa-admission-controller; do [[ -x "$BIN/$b" ]] || missing+=("$b"); done
if ((${#missing[@]} == 0)); then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26 (VPA ${VERSION} needs it)"

started=$(date +%s)
wd="$CACHE_ROOT/work/vpa-${VERSION}"
log "building ${MODULE} ${VERSION}: ${missing[*]} (a cold build takes several minutes on 2 cores)"
if [[ ! -f "$wd/.ready" ]]; then
  rm -rf "$wd"; mkdir -p "$wd"; cd "$wd"
  go mod init local/vpabins >/dev/null 2>&1 || die "step 1/4: go mod init failed in $wd"
  log "step 1/4: reading the exclude and replace directives of ${MODULE}@${VERSION}'s go.mod"
  gomod=$(go mod download -json "${MODULE}@${VERSION}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(d.get("Error", "no go.mod in the answer")) if "GoMod" not in d else print(d["GoMod"])') \
    || die "step 1/4: cannot download ${MODULE}@${VERSION} from the Go module proxy ($(go env GOPROXY))"
  go_version=$(go mod edit -json "$gomod" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Go"])')
  edit_args=$(go mod edit -json "$gomod" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for e in d.get("Exclude") or []:
    print("-exclude=" + e["Path"] + "@" + e["Version"])
for r in d.get("Replace") or []:
    old, new = r["Old"], r["New"]
    if not new.get("Version"):
        continue  # a local path of the upstream tree: not in the module zip, nothing to copy
    at = "@" + old["Version"] if old.get("Version") else ""
    print("-replace=" + old["Path"] + at + "=" + new["Path"] + "@" + new["Version"])
') || die "step 1/4: cannot read the directives of $gomod"
  edits=()
  [[ -z "$edit_args" ]] || mapfile -t edits <<<"$edit_args"
  log "step 2/4: copying ${#edits[@]} exclude/replace directives; go ${go_version} as upstream"
  go mod edit -go="$go_version" "${edits[@]}" || die "step 2/4: go mod edit failed"
  log "step 3/4: resolving dependencies (downloads modules on a cold cache)"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for b in "${!PKGS[@]}"; do printf '\t_ "%s"\n' "${PKGS[$b]}"; done
    printf ')\n'
  } > tools.go
  go get "${MODULE}@${VERSION}" >&2 || die "step 3/4: go get ${MODULE}@${VERSION} failed (see the go output above)"
  go mod tidy -e >&2 || true
  touch .ready
fi
cd "$wd"

# The admission controller's main package (main.go, config.go, certs.go; no tests) copied into the wrapper as
# ./admission-controller, with the webhook server's ":<port>" made "127.0.0.1:<port>". (A `go build -overlay` cannot
# replace files of the module cache.) Everything it imports still comes from the module at ${VERSION}.
moddir=$(go list -m -f '{{.Dir}}' "$MODULE") || die "cannot find ${MODULE} in the module cache"
pattern='Addr:      fmt.Sprintf(":%d", config.Port),'
count=$(grep -cF "$pattern" "$moddir/pkg/admission-controller/main.go" || true)
[[ "$count" == 1 ]] || die "expected the line '$pattern' once in pkg/admission-controller/main.go, found it $count times"
rm -rf admission-controller; mkdir admission-controller
for f in "$moddir"/pkg/admission-controller/*.go; do
  [[ "$f" == *_test.go ]] || install -m 0644 "$f" admission-controller/
done
sed -i 's/fmt.Sprintf(":%d", config.Port)/fmt.Sprintf("127.0.0.1:%d", config.Port)/' admission-controller/main.go
PKGS[vpa-admission-controller]=./admission-controller

mkdir -p "$BIN"
ld="-s -w"
for b in "${missing[@]}"; do
  log "step 4/4: compiling ${b} (${PKGS[$b]})"
  go build -trimpath -ldflags "$ld" -o "$BIN/${b}.tmp.$$" "${PKGS[$b]}" >&2 \
    || die "step 4/4: building ${b} failed (see the go output above)"
  mv "$BIN/${b}.tmp.$$" "$BIN/${b}"
done
printf '%s\n' "$VERSION" > "$BIN/../VERSION"
log "built in $(( $(date +%s) - started ))s: $BIN ($(du -sh "$BIN" | cut -f1))"
echo "$BIN"
