#!/bin/sh
# Benchmark: the README's main job, `podsim run --preset DenseLm128B32x32`
# (64 layers, 2048 cores), end to end. Prints each stage's wall time and peak
# resident memory, then the whole run's. Figures only: nothing is asserted.
set -u
: "${PODSIM:?}"
preset=${PS_BENCH_PRESET:-DenseLm128B32x32}
echo "bench_run: podsim run --preset $preset --stats"
start=$(date +%s.%N)
/usr/bin/env time -f "bench_run: whole run %e s wall, %M KiB peak RSS" \
  "$PODSIM" run --preset "$preset" --stats -q 2>&1 | sed 's/^/  /'
end=$(date +%s.%N)
echo "bench_run: done"
