#!/bin/sh
# Benchmark: the largest MoE run, `podsim run moe --preset MoE2048E36L`
# (36 layers, 2048 experts on 2048 cores), end to end (issue 12: under 30 s
# on the project's machine). Prints each stage's wall time and peak resident
# memory, then the whole run's. Figures only: nothing is asserted.
set -u
: "${PODSIM:?}"
echo "bench_moe: podsim run moe --preset MoE2048E36L --stats"
/usr/bin/env time -f "bench_moe: whole run %e s wall, %U s user, %M KiB peak RSS" \
  "$PODSIM" run moe --preset MoE2048E36L --stats -q 2>&1 | sed 's/^/  /'
echo "bench_moe: done"
