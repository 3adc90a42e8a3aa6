#!/usr/bin/env bash
# Builds upstream OCM's own binaries from the open-cluster-management.io/ocm Go module, through
# the wrapper module next to this script (go.mod/go.sum pin every dependency; gen-gomod.sh
# regenerates them), into a versioned cache outside the work tree, as
# tests/control-plane/build.sh does for kube-apiserver. Not part of tests/run.sh: the scale
# harness (placement-scheduler/examples/scale) builds `placement` on demand for `--controller upstream`.
#
#   tests/ocm/build.sh [binary...]     binaries under the module's cmd/ (default: placement)
#
# A cached binary is used as is. Progress goes to stderr; the last binary's path is the last
# line on stdout (<cache>/ocm-$OCM_VERSION/<binary>).
#
#   OCM_PLACEMENT_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../control-plane/versions.env
. "$here/../control-plane/versions.env"
log() { echo "$*" >&2; }
die() { echo "tests/ocm/build.sh: $*" >&2; exit 1; }

module=open-cluster-management.io/ocm
root=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}
[ $# -gt 0 ] || set -- placement
# The committed go.sum is only good for the version go.mod requires.
grep -qE "^[[:space:]]*(require[[:space:]]+)?$module $OCM_VERSION([[:space:]]|$)" "$here/go.mod" \
  || die "go.mod does not require $module $OCM_VERSION: run tests/ocm/gen-gomod.sh after changing OCM_VERSION"

for bin in "$@"; do
  dest="$root/ocm-$OCM_VERSION/$bin"
  if [ -x "$dest" ]; then
    log "cached: $dest"
    echo "$dest"
    continue
  fi
  command -v go >/dev/null || die "Go is required to build $module/cmd/$bin"
  grep -qE "^tool $module/cmd/$bin\$" "$here/go.mod" \
    || die "go.mod has no 'tool $module/cmd/$bin': add it to gen-gomod.sh's tools and regenerate"
  mkdir -p "$(dirname "$dest")"
  log "building $module/cmd/$bin $OCM_VERSION -> $dest (several minutes on first run)"
  start=$SECONDS
  kv=${OCM_VERSION#v}
  vpkg=$module/pkg/version
  # No cgo (a static binary, no C toolchain), stripped, and the version variables upstream's
  # Makefile sets, so the binary reports the pin. Built into a temp file and renamed, so an
  # interrupted build never leaves a half-written binary that looks cached.
  tmp="$dest.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly" go build -trimpath \
    -ldflags "-s -w -X $vpkg.versionFromGit=$OCM_VERSION -X $vpkg.majorFromGit=${kv%%.*} -X $vpkg.minorFromGit=$(echo "$kv" | cut -d. -f2)" \
    -o "$tmp" "$module/cmd/$bin")
  mv -f "$tmp" "$dest"
  trap - EXIT
  log "built $dest in $((SECONDS - start))s"
  echo "$dest"
done
