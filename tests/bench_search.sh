#!/bin/sh
# Benchmark: `podsim search --preset DenseLm128B8x8` (issue 16's target: at
# least 20 strategies ranked on v3-128 in under 5 minutes on this 2-core
# machine). Prints the search's summary and top 10 and its wall time.
set -u
: "${PODSIM:?}"
jobs=${PS_BENCH_JOBS:-2}
echo "bench_search: podsim search --preset DenseLm128B8x8 --jobs $jobs"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
t0=$(date +%s)
/usr/bin/env time -f "%U %S" -o "$TMP/time" "$PODSIM" search --preset DenseLm128B8x8 -q \
  --jobs "$jobs" >"$TMP/out" || exit 1
t1=$(date +%s)
sed 's/^/  /' "$TMP/out"
echo "  wall $((t1 - t0)) s; target: at most 300 s: $([ $((t1 - t0)) -le 300 ] && echo met || echo NOT met)"
# issue 26: strategies per CPU-second, the children's CPU included (goal: 100)
read -r user sys <"$TMP/time"
n=$(sed -n 's/.*: \([0-9][0-9]*\) strategies = .*/\1/p' "$TMP/out" | head -n 1)
echo "  ${n:-?} strategies in $(echo "$user $sys" | awk '{print $1 + $2}') s of CPU:" \
  "$(echo "${n:-0} $user $sys" | awk '{printf "%.1f", (($2 + $3) > 0 ? $1 / ($2 + $3) : 0)}') per CPU-second (goal: 100 or more)"
