#!/usr/bin/env bash
# Installs a real Prometheus for the tests of the Prometheus-backed scorer, without root: fetches
# Debian's `prometheus` package with `apt-get download` and extracts only usr/bin/prometheus into
# a per-version cache outside the work tree. A cached binary that runs is used without network.
# Progress goes to stderr; the binary's path is the last line on stdout, and is also written to
# <cache>/prometheus/current, where testenv::prometheus::binary() looks.
#
#   OCM_PLACEMENT_CACHE      cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
#   OCM_PROMETHEUS_PACKAGE   apt package to fetch (default: prometheus; pin a version with
#                            prometheus=2.42.0+ds-5+deb12u1)
#   OCM_PROMETHEUS_REFRESH   when non-empty, download again even if a cached binary runs
set -euo pipefail

cache=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}/prometheus
pkg=${OCM_PROMETHEUS_PACKAGE:-prometheus}
log() { echo "$*" >&2; }
die() { echo "tests/prometheus/build.sh: $*" >&2; exit 1; }
mkdir -p "$cache"
# Absolute, so the path in `current` means the same from the tests' working directory.
cache=$(cd "$cache" && pwd)

runs() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

# Records the binary for testenv and prints it; the tmp + rename keeps a reader from ever seeing
# a half-written file.
finish() {
  printf '%s\n' "$1" >"$cache/current.tmp.$$"
  mv -f "$cache/current.tmp.$$" "$cache/current"
  echo "$1"
  exit 0
}

# Fast path, no network: the pinned version if one is pinned, else the newest cached one.
if [ -z "${OCM_PROMETHEUS_REFRESH:-}" ]; then
  if [[ $pkg == *=* ]]; then
    candidates=("$cache/${pkg#*=}/prometheus")
  else
    mapfile -t candidates < <(printf '%s\n' "$cache"/*/prometheus | sort -rV)
  fi
  for b in "${candidates[@]}"; do
    if runs "$b"; then
      log "cached: $b"
      finish "$b"
    fi
  done
fi

command -v apt-get >/dev/null || die "apt-get is required to download Debian's prometheus package (a Debian or Ubuntu machine)"
command -v dpkg-deb >/dev/null || die "dpkg-deb is required to unpack Debian's prometheus package"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_opts=()
if [ "$(id -u)" != 0 ]; then
  # Private package lists and cache so `apt-get update` needs no root; the sources are still the
  # machine's (/etc/apt/sources.list*). Locking is for the system dirs, which are not touched.
  state="$cache/.apt"
  mkdir -p "$state/lists/partial" "$state/archives/partial"
  apt_opts=(-o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state" \
    -o "Dir::Cache::archives=$state/archives" -o Debug::NoLocking=1)
  download_opts=()
else
  state=/var/lib/apt
  # apt drops to its _apt user to download, which cannot write the private work dir.
  download_opts=(-o APT::Sandbox::User=root)
fi

update() {
  log "apt-get update (package lists in $state/lists)"
  apt-get "${apt_opts[@]}" -q update >&2 || die "apt-get update failed (are the Debian mirrors reachable?)"
}

download() {
  (cd "$work" && apt-get "${apt_opts[@]}" "${download_opts[@]}" -q download "$pkg" >&2)
}

# Lists missing (fresh machine) or stale (the mirror dropped the version they name): update,
# then try once more.
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
dpkg-deb --fsys-tarfile "${debs[0]}" | tar -x -C "$work" ./usr/bin/prometheus \
  || die "no usr/bin/prometheus in $(basename "${debs[0]}")"

dest="$cache/$ver/prometheus"
mkdir -p "$(dirname "$dest")"
# Copied to a temp name next to the destination, then renamed: an interrupted run never leaves a
# half-written binary that looks cached.
install -m 0755 "$work/usr/bin/prometheus" "$dest.tmp.$$"
runs "$dest.tmp.$$" || { rm -f "$dest.tmp.$$"; die "the prometheus of package $ver does not run (--version failed)"; }
mv -f "$dest.tmp.$$" "$dest"
log "installed $("$dest" --version 2>&1 | head -n 1) -> $dest"
finish "$dest"
