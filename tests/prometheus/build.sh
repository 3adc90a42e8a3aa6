#!/usr/bin/env bash
# Installs a real Prometheus for the tests of the Prometheus-backed scorer, without root: fetches
# Debian's `prometheus` package with `apt-get download` and extracts only usr/bin/prometheus, and
# usr/bin/promtool beside it (the chart test runs `promtool check rules` on the chart's alerts),
# into a per-version cache outside the work tree (tests/lib/debian-file.sh). A cached binary that runs
# is used without network. The binary's path is the last line on stdout, and is also written to
# <cache>/prometheus/current, where testenv::prometheus::binary() looks.
#
#   OCM_PLACEMENT_CACHE      cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
#   OCM_PROMETHEUS_PACKAGE   apt package to fetch (default: prometheus; pin a version with
#                            prometheus=2.42.0+ds-5+deb12u1)
#   OCM_PROMETHEUS_REFRESH   when non-empty, download again even if a cached binary runs
set -euo pipefail
name=prometheus
pkg=${OCM_PROMETHEUS_PACKAGE:-prometheus}
member=./usr/bin/prometheus
file=prometheus
mode=0755
refresh=${OCM_PROMETHEUS_REFRESH:-}
extras=./usr/bin/promtool
# A cached prometheus without its promtool (an older cache) counts as missing.
works() {
  [ -x "$1" ] && "$1" --version >/dev/null 2>&1 \
    && "$(dirname "$1")/promtool" --version >/dev/null 2>&1
}
# shellcheck source=../lib/debian-file.sh
. "$(dirname "$0")/../lib/debian-file.sh"
debian_file_install
