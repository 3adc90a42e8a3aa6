# Sourced by the scripts that install one file of a Debian package into the versioned cache,
# without root (tests/prometheus/build.sh, tests/faketime/build.sh). The caller sets, then calls
# `debian_file_install`:
#
#   name     what the messages call it, and the cache folder (<cache root>/<name>)
#   pkg      the apt package, optionally pinned (prometheus=2.42.0+ds-5+deb12u1)
#   member   the file inside the .deb (a tar pattern: ./usr/bin/prometheus)
#   file     its name in the cache: <cache root>/<name>/<package version>/<file>
#   mode     its mode there (0755, 0644)
#   refresh  when non-empty, download again even if a cached file works
#   works    a function: `works PATH` succeeds when the file at PATH does its job
#   extras   optional: more members of the same package (space-separated tar paths), installed
#            beside `file` under their base names before `works` runs (./usr/bin/promtool)
#
# The newest cached file that works is used without network. Otherwise the package is fetched
# with `apt-get download` and only `member` is extracted. Progress goes to stderr; the file's
# path is the last line on stdout and is also written to <cache root>/<name>/current, where the
# tests look.

log() { echo "$*" >&2; }
die() { echo "tests/$name/build.sh: $*" >&2; exit 1; }

debian_file_install() {
  cache=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}/$name
  mkdir -p "$cache"
  # Absolute, so the path in `current` means the same from the tests' working directory.
  cache=$(cd "$cache" && pwd)

  # Fast path, no network: the pinned version if one is pinned, else the newest cached one.
  if [ -z "${refresh:-}" ]; then
    local candidates f
    if [[ $pkg == *=* ]]; then
      candidates=("$cache/${pkg#*=}/$file")
    else
      mapfile -t candidates < <(printf '%s\n' "$cache"/*/"$file" | sort -rV)
    fi
    for f in "${candidates[@]}"; do
      if works "$f"; then
        log "cached: $f"
        debian_file_finish "$f"
      fi
    done
  fi

  command -v apt-get >/dev/null || die "apt-get is required to download Debian's $pkg package (a Debian or Ubuntu machine)"
  command -v dpkg-deb >/dev/null || die "dpkg-deb is required to unpack Debian's $pkg package"

  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT

  apt_opts=()
  if [ "$(id -u)" != 0 ]; then
    # Private package lists and cache so `apt-get update` needs no root; the sources are still
    # the machine's (/etc/apt/sources.list*). Locking is for the system dirs, not touched here.
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

  # Lists missing (fresh machine) or stale (the mirror dropped the version they name): update,
  # then try once more.
  if ! apt-cache "${apt_opts[@]}" show "${pkg%%=*}" >/dev/null 2>&1; then
    debian_file_update
  fi
  log "downloading $pkg"
  if ! debian_file_download; then
    debian_file_update
    debian_file_download || die "apt-get download $pkg failed"
  fi

  local debs ver found dest
  debs=("$work"/*.deb)
  [ -f "${debs[0]}" ] || die "apt-get download $pkg left no .deb in $work"
  ver=$(dpkg-deb -f "${debs[0]}" Version)
  local -a more
  read -r -a more <<<"${extras:-}"
  dpkg-deb --fsys-tarfile "${debs[0]}" | tar -x -C "$work" --wildcards "$member" "${more[@]}" \
    || die "no $member ${more[*]} in $(basename "${debs[0]}")"
  found=("$work"/$member)

  dest="$cache/$ver/$file"
  mkdir -p "$(dirname "$dest")"
  local extra
  for extra in "${more[@]}"; do
    install -m "$mode" "$work/$extra" "$(dirname "$dest")/$(basename "$extra").tmp.$$"
    mv -f "$(dirname "$dest")/$(basename "$extra").tmp.$$" "$(dirname "$dest")/$(basename "$extra")"
  done
  # Copied to a temp name next to the destination, then renamed: an interrupted run never
  # leaves a half-written file that looks cached.
  install -m "$mode" "${found[0]}" "$dest.tmp.$$"
  works "$dest.tmp.$$" || { rm -f "$dest.tmp.$$"; die "the $file of package $pkg $ver does not work"; }
  mv -f "$dest.tmp.$$" "$dest"
  log "installed $pkg $ver -> $dest"
  debian_file_finish "$dest"
}

debian_file_update() {
  log "apt-get update (package lists in $state/lists)"
  apt-get "${apt_opts[@]}" -q update >&2 || die "apt-get update failed (are the Debian mirrors reachable?)"
}

debian_file_download() {
  (cd "$work" && apt-get "${apt_opts[@]}" "${download_opts[@]}" -q download "$pkg" >&2)
}

# Records the file for the tests and prints it; the tmp + rename keeps a reader from ever
# seeing a half-written `current`.
debian_file_finish() {
  printf '%s\n' "$1" >"$cache/current.tmp.$$"
  mv -f "$cache/current.tmp.$$" "$cache/current"
  echo "$1"
  exit 0
}
