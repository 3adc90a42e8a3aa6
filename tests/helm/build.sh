#!/usr/bin/env bash
# Builds the real `helm` for the chart tests from its Go module, through the wrapper module next
# to this script (go.mod/go.sum pin every dependency; gen-gomod.sh regenerates them), into a
# versioned cache outside the work tree, as tests/control-plane/build.sh does for kube-apiserver.
# A cached binary is used as is. Progress goes to stderr; the binary's path is the last line on
# stdout. testenv::helm::binary() computes the same path from the same pin.
#
#   OCM_PLACEMENT_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../control-plane/versions.env
. "$here/../control-plane/versions.env"
log() { echo "$*" >&2; }
die() { echo "tests/helm/build.sh: $*" >&2; exit 1; }

root=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}
dest="$root/helm-$HELM_VERSION/helm"
if [ -x "$dest" ]; then
  log "cached: $dest"
  echo "$dest"
  exit 0
fi

command -v go >/dev/null || die "Go is required to build helm"
major=${HELM_VERSION#v}; major=${major%%.*}
module=helm.sh/helm
[ "$major" -ge 2 ] && module="$module/v$major"
# The committed go.sum is only good for the version go.mod requires: building another would
# silently build the wrong helm, or fail on a checksum far from the cause.
grep -qE "^[[:space:]]*(require[[:space:]]+)?$module $HELM_VERSION([[:space:]]|$)" "$here/go.mod" \
  || die "go.mod does not require $module $HELM_VERSION: run tests/helm/gen-gomod.sh after changing HELM_VERSION"

mkdir -p "$(dirname "$dest")"
log "building $module/cmd/helm $HELM_VERSION -> $dest (a minute or more on first run)"
start=$SECONDS
vpkg=$module/internal/version
# Upstream's release flags: no cgo (a static binary, no C toolchain needed), stripped, and the
# version variable set so `helm version` names the pin rather than the bare "v4.3" default.
# Built into a temp file and renamed, so an interrupted build never leaves a half-written binary
# that looks cached.
tmp="$dest.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd "$here" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly" go build -trimpath \
  -ldflags "-s -w -X $vpkg.version=$HELM_VERSION -X $vpkg.gitTreeState=clean" \
  -o "$tmp" "$module/cmd/helm")
got=$("$tmp" version --short 2>&1) || die "the built helm does not run: $got"
[ "$got" = "$HELM_VERSION" ] || die "the built helm says it is $got, not $HELM_VERSION"
mv -f "$tmp" "$dest"
log "built $dest in $((SECONDS - start))s"
echo "$dest"
