#!/usr/bin/env bash
# Builds the test binaries `cargo test` would run, then runs them several at a time instead of
# one after another: most of them wait on apiservers, leases and timers, not on the CPU, and
# each one starts its own control plane and isolates its tests by namespace, so they do not
# share state. Each binary runs in its package's directory, as `cargo test` runs it; its output
# is printed whole when it ends. Then the doc tests (through cargo).
#
#   tests/run-binaries.sh --workspace          what tests/run.sh runs
#   tests/run-binaries.sh -p placement-scheduler --test leader
#                                              any `cargo test` selection
#
#   OCM_TEST_JOBS   binaries at once (default 3; 1 runs them one after another, as cargo does)
#
# The slowest binaries of the previous run start first (their times are kept in
# target/test-binary-times); a binary's failure fails the run after every binary has run.
set -uo pipefail
shopt -s extglob
cd "$(dirname "$0")/.." || exit 1

jobs=${OCM_TEST_JOBS:-3}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "tests/run-binaries.sh: OCM_TEST_JOBS=$jobs is not a positive number" >&2; exit 2; }
target=${CARGO_TARGET_DIR:-target}
times=$target/test-binary-times
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The binaries, as `<manifest dir> <executable> <target name>` lines. cargo's JSON messages
# are one object per line with a stable field order.
cargo test --locked --no-run --message-format=json "$@" >"$work/build.json" || exit 1
grep '"reason":"compiler-artifact"' "$work/build.json" \
  | grep -E '"profile":\{[^}]*"test":true' \
  | grep '"executable":"' \
  | sed -E 's/.*"manifest_path":"([^"]*)".*"target":\{[^}]*"name":"([^"]*)".*"executable":"([^"]*)".*/\1 \3 \2/' \
  | while read -r manifest exe name; do echo "$(dirname "$manifest") $exe $name"; done \
  | sort -u -k2,2 >"$work/binaries"
[ -s "$work/binaries" ] || { echo "tests/run-binaries.sh: no test binaries" >&2; exit 1; }

# The end-to-end tests build the fleet's binaries with `cargo build` (e2e::fleet::binaries),
# whose feature set differs from `cargo test`'s: cargo then swaps target/debug/<binary>, which
# other tests are running. Built here, before any test starts, their builds find nothing to do.
if grep -q '/tests/e2e ' "$work/binaries"; then
  cargo build --locked -p placement-scheduler --bin placement-scheduler \
    -p resource-usage-hub --bin resource-usage-hub \
    -p resource-usage-agent --bin resource-usage-agent || exit 1
fi

# The slowest first (unknown ones first of all: they may be slow too).
while read -r dir exe name; do
  last=$( { grep -F " $exe" "$times" 2>/dev/null || true; } | tail -n1 | cut -d' ' -f1)
  echo "${last:-999999} $dir $exe $name"
done <"$work/binaries" | sort -rn | cut -d' ' -f2- >"$work/ordered"

run_one() {
  local dir=$1 exe=$2 name=$3 out start rc
  out=$work/$(basename "$exe").out
  start=$SECONDS
  (cd "$dir" && "$exe") >"$out" 2>&1
  rc=$?
  (
    flock 9
    echo "     Running $name (${exe#"$PWD/"}), ${dir#"$PWD/"}: $((SECONDS - start)) s"
    cat "$out"
    echo "$((SECONDS - start)) $exe" >>"$work/times"
    [ "$rc" -eq 0 ] || echo "$name ($exe)" >>"$work/failed"
  ) 9>"$work/lock"
}
export -f run_one
export work
# What `cargo test` gives a test process and these tests read at run time.
CARGO=${CARGO:-$(command -v cargo)}
export CARGO

# Binaries that run alone, after the others: upstream's placement suite (its control, upstream's
# own controller, ran alone; some of its specs create an object tens of milliseconds before the
# Placement that must count it, a race with the watches that a loaded machine can lose, with
# either controller).
alone='^upstream_placement$'
start=$SECONDS
awk -v alone="$alone" '$3 !~ alone' "$work/ordered" | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _
awk -v alone="$alone" '$3 ~ alone' "$work/ordered" | xargs -P 1 -L 1 bash -c 'run_one "$@"' _
echo "test binaries: $(wc -l <"$work/binaries") in $((SECONDS - start)) s, $jobs at a time"
{ [ -f "$times" ] && grep -vF -f <(cut -d' ' -f2 "$work/times" | sed 's/^/ /') "$times"; cat "$work/times"; } \
  >"$work/times.new" 2>/dev/null
mv -f "$work/times.new" "$times"

# The doc tests, unless the selection names targets (cargo takes no --doc with those).
if [[ " $* " != *" --"@(test|tests|lib|bin|bins|example|examples|bench|benches)[\ =]* ]]; then
  cargo test --locked --doc "$@" 2>&1 || echo "doc tests" >>"$work/failed"
fi

if [ -s "$work/failed" ]; then
  echo "tests/run-binaries.sh: failed:" >&2
  sed 's/^/  /' "$work/failed" >&2
  exit 1
fi
