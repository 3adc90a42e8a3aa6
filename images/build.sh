#!/usr/bin/env bash
# Builds the OCI images of the three binaries without a Docker daemon: the binaries statically
# linked on the host (cargo, release, +crt-static on the gnu target), then one image each from
# images/Containerfile with Debian's buildah (vfs storage, chroot isolation; installed with
# apt-get when missing, as root). The images are named as the chart names them:
# <registry>/<binary>:<tag>, the tag defaulting to the chart's appVersion (Chart.yaml). No
# images are published: the chart has no default registry (its image.registry is required), and
# without --registry or --push the images are named for this machine only, under localhost/
# (where buildah and podman keep local images).
#
#   images/build.sh                      build all three (localhost/ocm-placement/*:<appVersion>)
#   images/build.sh --push registry.example.com/me
#                                        build, name for that registry and push there
#                                        (log in first: buildah login registry.example.com);
#                                        then: helm install ... --set image.registry=registry.example.com/me
#                                        (a plain-HTTP registry: insecure = true for it in
#                                        registries.conf, e.g. through CONTAINERS_REGISTRIES_CONF)
#   images/build.sh --only resource-usage-agent --tag dev
#   images/build.sh --list               print the image names, build nothing
#
# An image whose inputs (binary, CA bundle, Containerfile, labels) have not changed is not built
# again: the inputs' SHA-256 is the image's label io.ocm-placement.inputs. cargo itself skips an
# unchanged build. Progress goes to stderr; stdout gets one line per image: its name and size.
#
#   OCM_IMAGES_STORAGE_DRIVER   buildah's storage driver (default: vfs, which works everywhere)
#   OCM_IMAGES_SOURCE           the org.opencontainers.image.source label (default: the git
#                               remote `origin` when there is one)
#   OCM_PLACEMENT_CACHE         cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement);
#                               the build contexts go to <cache root>/images
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
all=(placement-scheduler resource-usage-hub resource-usage-agent)

log() { echo "$*" >&2; }
die() { echo "images/build.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-0}"; }

# The tag is the chart's appVersion, as the chart's default image.tag; the registry is local
# until --registry or --push names one.
chart=$root/charts/ocm-placement
registry=localhost/ocm-placement
tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$chart/Chart.yaml")
licenses=$(sed -n 's/^license = "\(.*\)"/\1/p' "$root/Cargo.toml")
if [ -z "$registry" ] || [ -z "$tag" ] || [ -z "$licenses" ]; then
  die "cannot read appVersion or the licence from the chart and Cargo.toml"
fi

push=
only=()
list=
while [ $# -gt 0 ]; do
  case $1 in
    --registry) registry=${2:?--registry needs a value}; shift 2 ;;
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --push) registry=${2:?--push needs a registry}; push=1; shift 2 ;;
    --only) only+=("${2:?--only needs an image name}"); shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) usage 0 ;;
    *) log "images/build.sh: unknown argument $1"; usage 2 ;;
  esac
done
registry=${registry%/}
if [ ${#only[@]} -gt 0 ]; then
  for n in "${only[@]}"; do
    [[ " ${all[*]} " == *" $n "* ]] || die "--only $n: not one of ${all[*]}"
  done
  names=("${only[@]}")
else
  names=("${all[@]}")
fi

if [ -n "$list" ]; then
  for n in "${names[@]}"; do echo "$registry/$n:$tag"; done
  exit 0
fi

start=$SECONDS
# One build at a time (tests/run.sh builds in the background while the images test may call
# this script too): a second caller waits, then finds the images built.
lock_dir=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}/images
mkdir -p "$lock_dir"
exec 9>"$lock_dir/.build.lock"
flock 9
driver=${OCM_IMAGES_STORAGE_DRIVER:-vfs}
bah() { buildah --storage-driver "$driver" "$@"; }

# Debian's packages the build needs: buildah, and ca-certificates for the bundle.
missing=()
command -v buildah >/dev/null || missing+=(buildah)
[ -d /usr/share/ca-certificates/mozilla ] || missing+=(ca-certificates)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "needs ${missing[*]}: sudo apt-get install ${missing[*]}"
  command -v apt-get >/dev/null || die "needs ${missing[*]} (apt-get not found: install them with your package manager)"
  log "installing ${missing[*]} with apt-get"
  apt-get -q update >&2 || die "apt-get update failed (are the Debian mirrors reachable?)"
  DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "${missing[@]}" >&2 \
    || die "apt-get install ${missing[*]} failed"
fi

source_url=${OCM_IMAGES_SOURCE:-}
if [ -z "$source_url" ] && url=$(git -C "$root" remote get-url origin 2>/dev/null); then
  # git@host:owner/repo.git -> https://host/owner/repo
  url=${url%.git}
  [[ $url == git@*:* ]] && url="https://${url#git@}" && url=${url/://}
  [[ $url == https://* ]] && source_url=$url
fi
source_url=${source_url:-https://github.com/ocm-placement/ocm-placement}

# The binaries. What `cargo test` sets for a test process (when a test calls this script)
# changes build-script inputs: without it, a test and tests/run.sh share one cargo build.
while read -r v; do
  case $v in CARGO_PKG_*|CARGO_MANIFEST_*|CARGO_CRATE_*|CARGO_BIN_*|CARGO_PRIMARY_*|CARGO_TARGET_TMPDIR) unset "$v" ;; esac
done < <(compgen -e)
cargo=${CARGO:-cargo}
target=$("${RUSTC:-rustc}" -vV | sed -n 's/^host: //p')
[[ $target == *-linux-gnu ]] || die "the host target $target is not a *-linux-gnu target (+crt-static needs glibc's static libraries)"
# All three, even with --only: one feature set for every build, so each is a no-op after any.
pkgs=()
# Each binary is the crate of its name.
for n in "${all[@]}"; do pkgs+=(-p "$n" --bin "$n"); done
log "cargo build --release --target $target (static)"
(cd "$root" && RUSTFLAGS='-C target-feature=+crt-static' CARGO_PROFILE_RELEASE_STRIP=symbols \
  "$cargo" build --release --locked --target "$target" "${pkgs[@]}") \
  || die "cargo build failed"
out=${CARGO_TARGET_DIR:-$root/target}/$target/release
log "binaries ready after $((SECONDS - start))s"

cache=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}/images
mkdir -p "$cache"
# Debian's CA bundle: the certificates of the ca-certificates package, not the machine's own
# additions in /etc/ssl/certs.
certs=$cache/ca-certificates.crt
# In byte order, whatever the locale: the same bundle, the same image.
(LC_ALL=C; cat /usr/share/ca-certificates/mozilla/*.crt) >"$certs.tmp.$$"
mv -f "$certs.tmp.$$" "$certs"
grep -q 'BEGIN CERTIFICATE' "$certs" || die "no certificate in /usr/share/ca-certificates/mozilla"

containerfile=$root/images/Containerfile
for n in "${names[@]}"; do
  ref=$registry/$n:$tag
  bin=$out/$n
  [ -x "$bin" ] || die "cargo left no $bin"
  inputs=$( { sha256sum "$bin" "$certs" "$containerfile" | cut -d' ' -f1; echo "$n $tag $source_url $licenses"; } \
    | sha256sum | cut -d' ' -f1)
  label=io.ocm-placement.inputs
  have=$(bah inspect --type image --format "{{index .OCIv1.Config.Labels \"$label\"}}" "$ref" 2>/dev/null || true)
  if [ "$have" = "$inputs" ]; then
    log "$ref: unchanged (cached)"
  else
    old=$(bah images --noheading --no-trunc --format '{{.ID}}' "$ref" 2>/dev/null || true)
    same=$(bah images --noheading --no-trunc --format '{{.ID}}' --filter "label=$label=$inputs" 2>/dev/null | head -n1 || true)
    if [ -n "$same" ]; then
      # The same image under another name (another registry): name it, no build.
      log "$ref: the same as image $same, tagged"
      bah tag "$same" "$ref" >/dev/null
    else
      log "building $ref"
      ctx=$cache/context/$n
      rm -rf "$ctx"
      mkdir -p "$ctx"
      cp "$bin" "$ctx/$n"
      cp "$certs" "$ctx/ca-certificates.crt"
      bah build --isolation chroot --quiet -f "$containerfile" --target "$n" \
        --build-arg BINARIES=prebuilt --build-arg "VERSION=$tag" \
        --build-arg "SOURCE=$source_url" --build-arg "LICENSES=$licenses" \
        --label "$label=$inputs" -t "$ref" "$ctx" >/dev/null \
        || die "buildah build $ref failed"
      rm -rf "$ctx"
      # The stage images buildah keeps: vfs stores every layer in full.
      bah images --noheading --no-trunc --format '{{.ID}}' --filter dangling=true \
        --filter label=io.ocm-placement.stage=binaries 2>/dev/null \
        | while read -r id; do bah rmi "$id" >/dev/null 2>&1 || true; done
    fi
    # The image this name had (rmi refuses while another name has it).
    [ -z "$old" ] || bah rmi "$old" >/dev/null 2>&1 || true
  fi
  if [ -n "$push" ]; then
    log "pushing $ref"
    bah push --quiet "$ref" "docker://$ref" || die "buildah push $ref failed (logged in? buildah login ${registry%%/*})"
  fi
done

log "images ready after $((SECONDS - start))s"
for n in "${names[@]}"; do
  echo "$registry/$n:$tag $(bah images --noheading --format '{{.Size}}' "$registry/$n:$tag" | head -n1)"
done
