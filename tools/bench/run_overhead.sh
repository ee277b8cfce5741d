#!/usr/bin/env bash
# Superseded by tools/bench/overhead.sh, whose llmsim part is this benchmark
# (llmsim at its limit: nothing, attach, run and daemon in alternating
# rounds). Kept as a shorthand for it.
#
#   sudo tools/bench/run_overhead.sh [rounds] [requests]
set -euo pipefail
[ -z "${2:-}" ] || export BENCH_LLMSIM_REQUESTS=$2
exec "$(dirname "$0")/overhead.sh" "${1:-3}" llmsim
