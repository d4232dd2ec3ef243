#!/bin/sh
# Benchmark: a 1,000-configuration sweep of the dense family on 2 jobs
# (issue 15's target: at most 20 minutes on this 2-core machine). The grid
# is DenseLm128B8x8 (v3-128) over every mesh of its 128 cores, 5
# microbatch counts, 5 depths and 5 sequence lengths: 8 x 5 x 5 x 5 = 1000
# configurations, some of which cannot be built (a microbatch the mesh does
# not divide), which a sweep has to report quickly too. Prints the wall
# time, the CPU time of the sweep and all its runs (user + system: on a
# shared machine the figure that does not depend on the load), the rate
# and how many configurations ran, failed or did not fit.
set -u
: "${PODSIM:?}"
out=$(mktemp)
trap 'rm -f "$out" "$out.csv" "$out.time"' EXIT
jobs=${PS_BENCH_JOBS:-2}
echo "bench_sweep: podsim sweep --preset DenseLm128B8x8 (1000 configurations) --jobs $jobs"
t0=$(date +%s)
/usr/bin/env time -f "%U %S" -o "$out.time" \
  "$PODSIM" sweep --preset DenseLm128B8x8 -q --jobs "$jobs" -o "$out.csv" \
  --vary mesh=1x128,2x64,4x32,8x16,16x8,32x4,64x2,128x1 \
  --vary microbatches=1,2,4,8,16 \
  --vary layers=8,16,32,48,64 \
  --vary seq_len=256,512,1024,1536,2048 || exit 1
t1=$(date +%s)
cpu=$(awk '{ printf "%.0f", $1 + $2 }' "$out.time")
rows=$(($(wc -l <"$out.csv") - 1))
ok=$(grep -c ',true,' "$out.csv")
nofit=$(grep -c ',false,' "$out.csv")
err=$((rows - ok - nofit))
wall=$((t1 - t0))
echo "  $rows configurations in ${wall} s ($(awk -v r="$rows" -v w="$wall" 'BEGIN { printf "%.1f", (w > 0 ? 60 * r / w : 0) }') per minute): $ok simulated, $nofit do not fit, $err cannot be built"
echo "  CPU (user + system, the sweep and its runs): $cpu s; on $jobs idle cores that is about $((cpu / jobs)) s of wall time"
echo "  target: 1000 configurations in at most 1200 s: wall $([ "$wall" -le 1200 ] && echo met || echo NOT met), CPU / $jobs $([ $((cpu / jobs)) -le 1200 ] && echo met || echo NOT met)"
rm -f "$out.csv" "$out.time"
