#!/usr/bin/env bash
# The project's test command (the README's, and what .ci/run calls). On a fresh machine it
# builds what the tests need (kube-apiserver, etcd, kube-controller-manager, OCM's agents and its placement
# integration suite from Go modules, the upstream OCM CRDs,
# Debian's prometheus and libfaketime, helm) into the versioned cache, then checks formatting
# and lints, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null || { echo "tests/run.sh: $1 is required ($2)" >&2; exit 1; }; }
need go "to build kube-apiserver, etcd and helm; Go 1.26 or newer (older ones fetch 1.26 through GOTOOLCHAIN=auto)"
need cargo "the Rust toolchain, 1.95 or newer"

# Components the toolchain may lack on a minimal install.
for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then rustup component add "$c"; else echo "tests/run.sh: cargo $c missing" >&2; exit 1; fi
  fi
done

start=$SECONDS
tests/control-plane/build.sh
echo "control plane ready after $((SECONDS - start))s"
tests/prometheus/build.sh
echo "prometheus ready after $((SECONDS - start))s"
tests/thanos/build.sh
echo "thanos ready after $((SECONDS - start))s"
tests/helm/build.sh
echo "helm ready after $((SECONDS - start))s"
tests/faketime/build.sh
echo "libfaketime ready after $((SECONDS - start))s"
# Upstream OCM's klusterlet, hub registration controller and add-on webhook, for the end-to-end
# test through the real agents (tests/e2e/tests/agents.rs).
tests/ocm/build.sh registration-operator registration addon >/dev/null
echo "OCM agents ready after $((SECONDS - start))s"
# Upstream OCM's placement integration suite, built to run against our binary
# (tests/e2e/tests/upstream_placement.rs), and its control run with upstream's own controller.
tests/ocm/placement-suite.sh >/dev/null
echo "upstream's placement suite ready after $((SECONDS - start))s"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
log=$(mktemp)
images_log=$(mktemp)
trap 'rm -f "$log" "$images_log"' EXIT
# The images (buildah; a release build) in the background, at the lowest priority: after a
# change their release build takes minutes of CPU that the tests, which mostly wait, leave
# idle. tests/e2e/tests/images.rs calls the script too and waits for this build (a lock),
# then re-uses its images.
nice -n 19 images/build.sh >"$images_log" 2>&1 &
images=$!
# The test binaries several at a time (OCM_TEST_JOBS, default 3), the slowest first: they
# mostly wait on apiservers and timers. OCM_TEST_JOBS=1 runs them one after another.
tests/run-binaries.sh --workspace 2>&1 | tee "$log"
wait "$images" || { cat "$images_log" >&2; echo "tests/run.sh: images/build.sh failed" >&2; exit 1; }
cat "$images_log"
# One closing line over every test binary (cargo prints one per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
echo "tests/run.sh: all checks passed in $((SECONDS - start))s"
