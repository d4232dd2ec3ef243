#!/bin/sh
# Benchmark: `podsim search --preset DenseLm128B8x8` (issue 16's target: at
# least 20 strategies ranked on v3-128 in under 5 minutes on this 2-core
# machine). Prints the search's summary and top 10 and its wall time.
set -u
: "${PODSIM:?}"
jobs=${PS_BENCH_JOBS:-2}
echo "bench_search: podsim search --preset DenseLm128B8x8 --jobs $jobs"
t0=$(date +%s)
"$PODSIM" search --preset DenseLm128B8x8 -q --jobs "$jobs" | sed 's/^/  /' || exit 1
t1=$(date +%s)
echo "  wall $((t1 - t0)) s; target: at most 300 s: $([ $((t1 - t0)) -le 300 ] && echo met || echo NOT met)"
