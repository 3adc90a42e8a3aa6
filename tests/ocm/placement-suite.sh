#!/usr/bin/env bash
# Builds upstream OCM's placement integration suite (test/integration/placement of the
# open-cluster-management.io/ocm module at OCM_VERSION) twice, into the versioned cache:
#
#   upstream.test  unchanged: the specs start upstream's own controller in-process;
#   ours.test      with `go test -overlay`: pkg/placement/controllers/manager.go is replaced by
#                  testdata/placement-suite/manager.go, whose RunControllerManager starts our
#                  placement-scheduler binary ($OCM_PLACEMENT_SCHEDULER) against the suite's
#                  apiserver instead, and testdata/placement-suite/debug_endpoint_test.go (ours)
#                  is added to the package.
#
# No upstream file is edited: the module's source, as the module proxy serves it (checked
# against go.sum), is copied out of the module cache (go refuses overlays there) and built
# through a copy of the wrapper module next to this script with `replace` pointing at it.
# Then upstream.test runs once, the control: a spec that fails with upstream's own controller
# is a harness problem, not ours, and this script fails saying so.
#
#   tests/ocm/placement-suite.sh    build (cached), print the suite directory on the last line
#
# The suite directory holds upstream.test, ours.test, control.json (the control run's Ginkgo
# report), assets/ (KUBEBUILDER_ASSETS: our cached kube-apiserver and etcd) and run/ (the
# working directory the specs expect: their CRD paths are ./vendor/open-cluster-management.io/api/...).
# tests/e2e/tests/upstream_placement.rs runs ours.test against our binary.
#
#   OCM_PLACEMENT_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../control-plane/versions.env
. "$here/../control-plane/versions.env"
log() { echo "$*" >&2; }
die() { echo "tests/ocm/placement-suite.sh: $*" >&2; exit 1; }
command -v go >/dev/null || die "Go is required to build upstream's placement suite"

module=open-cluster-management.io/ocm
pkg=$module/test/integration/placement
overlay_src=$here/testdata/placement-suite
root=${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement}
grep -qE "^[[:space:]]*(require[[:space:]]+)?$module $OCM_VERSION([[:space:]]|$)" "$here/go.mod" \
  || die "go.mod does not require $module $OCM_VERSION: run tests/ocm/gen-gomod.sh after changing OCM_VERSION"

# The cache key: everything the two builds and the control run depend on.
key=$( {
  echo "$OCM_VERSION $KUBE_VERSION $ETCD_VERSION"
  go env GOVERSION
  cat "$0" "$here/go.mod" "$here/go.sum" "$overlay_src"/*
} | sha256sum | cut -c1-16)
dir=$root/ocm-$OCM_VERSION/placement-suite-$key
if [ -f "$dir/ready" ]; then
  log "cached: $dir"
  echo "$dir"
  exit 0
fi

cp_dir=$("$here/../control-plane/build.sh" etcd kube-apiserver | tail -n1)
rm -rf "$dir"
mkdir -p "$dir/assets" "$dir/run/vendor/open-cluster-management.io" "$dir/work"
trap 'rm -rf "$dir"' EXIT
start=$SECONDS

# Upstream's module source, unchanged, where an overlay may apply.
src=$(cd "$here" && go mod download -json "$module@$OCM_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$src/test/integration/placement" ] || die "cannot download $module@$OCM_VERSION"
cp -r "$src" "$dir/ocm"
chmod -R u+w "$dir/ocm"
{
  sed 's|^module .*|module ocm-placement/tests/ocm/placement-suite|' "$here/go.mod"
  echo "replace $module => ../ocm"
} >"$dir/work/go.mod"
cp "$here/go.sum" "$dir/work/go.sum"
cat >"$dir/overlay.json" <<JSON
{"Replace": {
  "$dir/ocm/pkg/placement/controllers/manager.go": "$overlay_src/manager.go",
  "$dir/ocm/test/integration/placement/ocm_placement_debug_test.go": "$overlay_src/debug_endpoint_test.go"
}}
JSON
log "building $pkg $OCM_VERSION: upstream's and ours (several minutes on first run)"
(cd "$dir/work" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly" \
  go test -c -trimpath -o "$dir/upstream.test" "$pkg")
(cd "$dir/work" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly" \
  go test -c -trimpath -overlay "$dir/overlay.json" -o "$dir/ours.test" "$pkg")

# envtest's binaries, and the CRDs at the API version upstream's module requires.
ln -s "$cp_dir/kube-apiserver-$KUBE_VERSION/kube-apiserver" "$dir/assets/kube-apiserver"
ln -s "$cp_dir/etcd-$ETCD_VERSION/etcd" "$dir/assets/etcd"
api=$(cd "$dir/work" && go list -m -f '{{.Dir}}' open-cluster-management.io/api)
[ -d "$api/cluster/v1beta1" ] || die "cannot find open-cluster-management.io/api's CRDs (go list: $api)"
ln -s "$api" "$dir/run/vendor/open-cluster-management.io/api"
log "built in $((SECONDS - start))s"

log "control run: upstream's own controller on upstream's specs"
if ! (cd "$dir/run" && KUBEBUILDER_ASSETS=$dir/assets "$dir/upstream.test" \
  -ginkgo.no-color -ginkgo.timeout=30m -ginkgo.json-report="$dir/control.json") >"$dir/control.log" 2>&1; then
  tail -n 60 "$dir/control.log" >&2
  cp "$dir/control.log" "$root/ocm-$OCM_VERSION/placement-suite-control.log"
  die "upstream's own controller failed its own specs (above; the whole log: $root/ocm-$OCM_VERSION/placement-suite-control.log): a harness problem, not a failure of ours"
fi
log "control run passed in $((SECONDS - start))s"
trap - EXIT
touch "$dir/ready"
echo "$dir"
