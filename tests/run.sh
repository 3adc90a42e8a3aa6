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

# Disk first: a full disk fails deep inside rustc with an error that names only the crate.
# A run from an empty target/ grows it to about 6 GB without incremental compilation (as
# .ci/run runs) and about 11 GB with it (cargo's default for the dev profile), measured on
# 2026-11-29 with `du -s target` every 20 s through a fresh clone's run. Go's build cache, which
# the Go builds fill on a fresh machine, held 9.2 GB on the development machine that day
# (`du -sh "$(go env GOCACHE)"`).
target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir"
if [ "${CARGO_INCREMENTAL:-1}" = 0 ]; then need_gb=7; else need_gb=13; fi
have_gb=$(( $(du -sk "$target_dir" | cut -f1) / 1048576 ))
free_gb=$(( $(df -Pk "$target_dir" | awk 'NR == 2 { print $4 }') / 1048576 ))
min_gb=${OCM_MIN_FREE_GB:-$(( need_gb > have_gb ? need_gb - have_gb : 1 ))}
if (( free_gb < min_gb )); then
  echo "tests/run.sh: ${free_gb} GB free where $target_dir is; this run needs about ${min_gb} GB more" \
    "(set OCM_MIN_FREE_GB to override)" >&2
  exit 1
fi
# When a step fails, the disk and memory it had, for the failure's reader.
trap 'rc=$?; if [ "$rc" != 0 ]; then df -h "$target_dir" "${GOCACHE:-$(go env GOCACHE)}" >&2; free -g >&2; fi' EXIT

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
trap 'rc=$?; rm -f "$log" "$images_log"; if [ "$rc" != 0 ]; then df -h "$target_dir" >&2; free -g >&2; fi' EXIT
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
