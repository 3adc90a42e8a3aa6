#!/usr/bin/env bash
# Builds the real `thanos` (sidecar and Query, one binary) for the tests of the Thanos-backed
# scorer from its Go module, into a versioned cache outside the work tree, as
# tests/helm/build.sh does for helm. A cached binary that runs is used as is. Progress goes to
# stderr; the binary's path is the last line on stdout. testenv::thanos::binary() computes the
# same path from the same pin.
#
# Two traps, both upstream's own build requirements:
# - thanos's go.mod has `replace` lines, so `go install mod@ver` refuses it: the module is
#   downloaded, copied out of the read-only module cache and built inside, where its go.mod and
#   go.sum pin every dependency.
# - it must be built with its release tags `netgo,slicelabels`: without slicelabels the sidecar
#   panics on Query's first call (index out of range in grpc's buffer pool).
# Its go.mod may ask for a newer Go than the local one: GOTOOLCHAIN=<that version> fetches it
# through the Go module proxy.
#
#   OCM_PLACEMENT_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../control-plane/versions.env
. "$here/../control-plane/versions.env"
log() { echo "$*" >&2; }
die() { echo "tests/thanos/build.sh: $*" >&2; exit 1; }

root=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}
dest="$root/thanos-$THANOS_VERSION/thanos"
if [ -x "$dest" ] && "$dest" --version >/dev/null 2>&1; then
  log "cached: $dest"
  echo "$dest"
  exit 0
fi

command -v go >/dev/null || die "Go is required to build thanos"
module=github.com/thanos-io/thanos
mkdir -p "$(dirname "$dest")"
log "building $module/cmd/thanos $THANOS_VERSION -> $dest (a few minutes on first run)"
start=$SECONDS
work=$(mktemp -d)
tmp="$dest.tmp.$$"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work" "$tmp"' EXIT

# Its go.mod first (downloaded even when the local Go is too old to unpack the module): the Go
# it asks for (its `toolchain` line, else its `go` line), when newer than the local one, is
# fetched through the module proxy with GOTOOLCHAIN. Outside any module, so that the caller's
# GOFLAGS (-mod=...) do not apply.
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",*\$/\1/p"; }
gomod=$(cd "$work" && go mod download -json "$module@$THANOS_VERSION" | field GoMod || true)
[ -n "$gomod" ] && [ -f "$gomod" ] || die "go mod download $module@$THANOS_VERSION fetched no go.mod"
want=$(sed -n 's/^toolchain go\([0-9.]*\)$/\1/p' "$gomod")
[ -n "$want" ] || want=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
have=$(go env GOVERSION); have=${have#go}
toolchain=local
if [ -n "$want" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
  toolchain=go$want
fi
log "go.mod asks for Go $want, local is $have: GOTOOLCHAIN=$toolchain"
src=$(cd "$work" && GOTOOLCHAIN=$toolchain go mod download -json "$module@$THANOS_VERSION" | field Dir)
[ -n "$src" ] && [ -d "$src" ] || die "go mod download $module@$THANOS_VERSION found no module directory"
# Built from a copy: the module cache is read-only, and a build inside it would leave nothing
# behind to clean if it failed half-way.
cp -r "$src" "$work/thanos"
chmod -R u+w "$work/thanos"

vpkg=github.com/prometheus/common/version
# Upstream's release flags (its .promu.yml): static, netgo+slicelabels, version stamped so
# `thanos --version` names the pin. Built into a temp file and renamed, so an interrupted build
# never leaves a half-written binary that looks cached.
(cd "$work/thanos" && GOTOOLCHAIN=$toolchain CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" \
  go build -trimpath -tags netgo,slicelabels \
  -ldflags "-s -w -X $vpkg.Version=${THANOS_VERSION#v} -X $vpkg.Branch=HEAD -X $vpkg.Revision=$THANOS_VERSION" \
  -o "$tmp" ./cmd/thanos)
got=$("$tmp" --version 2>&1) || die "the built thanos does not run: $got"
case "$got" in *"${THANOS_VERSION#v}"*) ;; *) die "the built thanos says: $got, not $THANOS_VERSION" ;; esac
mv -f "$tmp" "$dest"
log "built $dest in $((SECONDS - start))s"
echo "$dest"
