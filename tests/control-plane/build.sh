#!/usr/bin/env bash
# Builds the real control-plane binaries (kube-apiserver, etcd, kube-controller-manager) from Go modules and unpacks the
# upstream OCM CRDs, into a versioned cache outside the work tree. Only what is missing is built,
# so a second run costs nothing. Prints the cache directory on its last line.
#
#   tests/control-plane/build.sh [etcd|kube-apiserver|kube-controller-manager|crds ...]
#                                 only these (default: all four)
#   OCM_PLACEMENT_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

for c in "$@"; do
  case $c in
    etcd|kube-apiserver|kube-controller-manager|crds) ;;
    *) echo "build.sh: unknown component '$c' (etcd, kube-apiserver, kube-controller-manager, crds)" >&2; exit 2 ;;
  esac
done
# want <component>: whether this run builds it.
want() {
  [ ${#only[@]} -eq 0 ] && return 0
  local c
  for c in "${only[@]}"; do [ "$c" = "$1" ] && return 0; done
  return 1
}
only=("$@")

cache=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}/control-plane
mkdir -p "$cache"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

command -v go >/dev/null || { echo "build.sh: Go is required to build kube-apiserver and etcd" >&2; exit 1; }

# build <dest> <module dir> <package> [go build args...]: builds into a temp file and renames,
# so an interrupted build never leaves a half-written binary that looks cached.
build() {
  local dest=$1 moddir=$2 pkg=$3; shift 3
  if [ -x "$dest" ]; then echo "cached: $dest"; return; fi
  mkdir -p "$(dirname "$dest")"
  echo "building $pkg -> $dest (several minutes on first run)"
  local start=$SECONDS
  (cd "$moddir" && go build -trimpath "$@" -o "$dest.tmp.$$" "$pkg")
  mv "$dest.tmp.$$" "$dest"
  echo "built $dest in $((SECONDS - start))s"
}

want etcd && build "$cache/etcd-$ETCD_VERSION/etcd" "$here/etcd" go.etcd.io/etcd/server/v3

kv=${KUBE_VERSION#v}
vpkg=k8s.io/component-base/version
want kube-apiserver && build "$cache/kube-apiserver-$KUBE_VERSION/kube-apiserver" "$here/kube-apiserver" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  -ldflags "-s -w -X $vpkg.gitVersion=$KUBE_VERSION -X $vpkg.gitMajor=${kv%%.*} -X $vpkg.gitMinor=$(echo "$kv" | cut -d. -f2) -X $vpkg.gitTreeState=clean"

# The CSR signer for the tests with upstream OCM agents (tests/testenv's ocm_agents module): same
# module and version as kube-apiserver, so it shares that build's compiled packages.
want kube-controller-manager && build "$cache/kube-controller-manager-$KUBE_VERSION/kube-controller-manager" "$here/kube-apiserver" \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  -ldflags "-s -w -X $vpkg.gitVersion=$KUBE_VERSION -X $vpkg.gitMajor=${kv%%.*} -X $vpkg.gitMinor=$(echo "$kv" | cut -d. -f2) -X $vpkg.gitTreeState=clean"

crds="$cache/ocm-api-$OCM_API_VERSION/crds"
if ! want crds; then
  :
elif [ -d "$crds" ] && [ -n "$(ls -A "$crds")" ]; then
  echo "cached: $crds"
else
  dir=$(go mod download -json "open-cluster-management.io/api@$OCM_API_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir" ] || { echo "build.sh: cannot download open-cluster-management.io/api@$OCM_API_VERSION" >&2; exit 1; }
  tmp="$crds.tmp.$$"
  mkdir -p "$tmp"
  # Every CRD the module ships but the operator's. addon/v1beta1 holds the multi-version
  # (v1alpha1 storage + v1beta1) file for the same CRDs as addon/v1alpha1: keyed by base name,
  # the sorted copy lets the later v1beta1 file win, as upstream's cluster-manager installs it.
  (cd "$dir" && find . -name '*.crd.yaml' -not -path './operator/*' -print) | sort | while read -r f; do
    cp "$dir/$f" "$tmp/$(basename "$f")"
  done
  chmod -R u+w "$tmp"
  rm -rf "$crds"; mv "$tmp" "$crds"
  echo "unpacked $(ls "$crds" | wc -l) CRDs into $crds"
fi
echo "$cache"
