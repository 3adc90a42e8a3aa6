#!/usr/bin/env bash
# Installs libfaketime for the agent's clock-skew test, without root: fetches Debian's
# `libfaketime` package with `apt-get download` and extracts only the multi-threaded preload
# library (the agent runs on a multi-threaded runtime) into a per-version cache outside the work
# tree. The test runs the real agent binary with LD_PRELOAD and FAKETIME=±10m, so its clock is
# off while the apiserver's is not. A cached library is used without network.
# Progress goes to stderr; the library's path is the last line on stdout, and is also written to
# <cache>/faketime/current, where the agent's tests look.
#
#   OCM_PLACEMENT_CACHE      cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
#   OCM_FAKETIME_PACKAGE     apt package to fetch (default: libfaketime; pin a version with
#                            libfaketime=0.9.10-2.1)
#   OCM_FAKETIME_REFRESH     when non-empty, download again even if a cached library works
set -euo pipefail

cache=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}/faketime
pkg=${OCM_FAKETIME_PACKAGE:-libfaketime}
log() { echo "$*" >&2; }
die() { echo "tests/faketime/build.sh: $*" >&2; exit 1; }
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

# Works: `date` under it reports a time a day back.
works() {
  [ -f "$1" ] || return 1
  local real faked
  real=$(date -u +%s)
  faked=$(LD_PRELOAD="$1" FAKETIME=-1d date -u +%s 2>/dev/null) || return 1
  [ $((real - faked)) -ge 86000 ]
}

finish() {
  printf '%s\n' "$1" >"$cache/current.tmp.$$"
  mv -f "$cache/current.tmp.$$" "$cache/current"
  echo "$1"
  exit 0
}

if [ -z "${OCM_FAKETIME_REFRESH:-}" ]; then
  if [[ $pkg == *=* ]]; then
    candidates=("$cache/${pkg#*=}/libfaketimeMT.so.1")
  else
    mapfile -t candidates < <(printf '%s\n' "$cache"/*/libfaketimeMT.so.1 | sort -rV)
  fi
  for l in "${candidates[@]}"; do
    if works "$l"; then
      log "cached: $l"
      finish "$l"
    fi
  done
fi

command -v apt-get >/dev/null || die "apt-get is required to download Debian's libfaketime package (a Debian or Ubuntu machine)"
command -v dpkg-deb >/dev/null || die "dpkg-deb is required to unpack Debian's libfaketime package"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_opts=()
if [ "$(id -u)" != 0 ]; then
  # Private package lists and cache so `apt-get update` needs no root (as tests/prometheus).
  state="$cache/.apt"
  mkdir -p "$state/lists/partial" "$state/archives/partial"
  apt_opts=(-o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state" \
    -o "Dir::Cache::archives=$state/archives" -o Debug::NoLocking=1)
  download_opts=()
else
  state=/var/lib/apt
  download_opts=(-o APT::Sandbox::User=root)
fi

update() {
  log "apt-get update (package lists in $state/lists)"
  apt-get "${apt_opts[@]}" -q update >&2 || die "apt-get update failed (are the Debian mirrors reachable?)"
}
download() {
  (cd "$work" && apt-get "${apt_opts[@]}" "${download_opts[@]}" -q download "$pkg" >&2)
}

if ! apt-cache "${apt_opts[@]}" show "${pkg%%=*}" >/dev/null 2>&1; then
  update
fi
log "downloading $pkg"
if ! download; then
  update
  download || die "apt-get download $pkg failed"
fi

debs=("$work"/*.deb)
[ -f "${debs[0]}" ] || die "apt-get download $pkg left no .deb in $work"
ver=$(dpkg-deb -f "${debs[0]}" Version)
# The library sits under the architecture's multiarch folder (usr/lib/x86_64-linux-gnu/...).
dpkg-deb --fsys-tarfile "${debs[0]}" | tar -x -C "$work" --wildcards './usr/lib/*/faketime/libfaketimeMT.so.1' \
  || die "no libfaketimeMT.so.1 in $(basename "${debs[0]}")"
libs=("$work"/usr/lib/*/faketime/libfaketimeMT.so.1)

dest="$cache/$ver/libfaketimeMT.so.1"
mkdir -p "$(dirname "$dest")"
install -m 0644 "${libs[0]}" "$dest.tmp.$$"
works "$dest.tmp.$$" || { rm -f "$dest.tmp.$$"; die "libfaketime $ver does not move the clock of date(1)"; }
mv -f "$dest.tmp.$$" "$dest"
log "installed libfaketime $ver -> $dest"
finish "$dest"
