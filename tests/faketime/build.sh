#!/usr/bin/env bash
# Installs libfaketime for the agent's clock-skew test, without root: fetches Debian's
# `libfaketime` package with `apt-get download` and extracts only the multi-threaded preload
# library (the agent runs on a multi-threaded runtime) into a per-version cache outside the work
# tree (tests/lib/debian-file.sh). The test runs the real agent binary with LD_PRELOAD and
# FAKETIME=±10m, so its clock is off while the apiserver's is not. A cached library is used
# without network. Its path is the last line on stdout, and is also written to
# <cache>/faketime/current, where the agent's tests look.
#
#   OCM_PLACEMENT_CACHE      cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement)
#   OCM_FAKETIME_PACKAGE     apt package to fetch (default: libfaketime; pin a version with
#                            libfaketime=0.9.10-2.1)
#   OCM_FAKETIME_REFRESH     when non-empty, download again even if a cached library works
set -euo pipefail
name=faketime
pkg=${OCM_FAKETIME_PACKAGE:-libfaketime}
# Under the architecture's multiarch folder (usr/lib/x86_64-linux-gnu/...).
member='./usr/lib/*/faketime/libfaketimeMT.so.1'
file=libfaketimeMT.so.1
mode=0644
refresh=${OCM_FAKETIME_REFRESH:-}
# Works: `date` under it reports a time a day back.
works() {
  [ -f "$1" ] || return 1
  local real faked
  real=$(date -u +%s)
  faked=$(LD_PRELOAD="$1" FAKETIME=-1d date -u +%s 2>/dev/null) || return 1
  [ $((real - faked)) -ge 86000 ]
}
# shellcheck source=../lib/debian-file.sh
. "$(dirname "$0")/../lib/debian-file.sh"
debian_file_install
