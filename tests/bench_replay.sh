#!/bin/sh
# make bench: replays a synthetic 2048-core step trace (2,000 collectives,
# 10,000 compute events) on v3-2048 and prints wall time, CPU time and peak
# memory (goal: under 5 s and 1 GiB on one core). Then checks that the
# collective cache changes nothing: the cache-off replay simulates every
# collective's transfers (about 0.1 s of CPU each at this size), so that
# comparison runs on the same trace shape cut to 200 collectives.
set -u
: "${PODSIM:?}" "${PS_BUILDDIR:?}"
GEN="$PS_BUILDDIR/tests/gen_trace"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$GEN" "$TMP/big.pst.gz" --mesh 32x64 --collectives 2000 --computes 10000 --async || exit 1
"$GEN" "$TMP/small.pst.gz" --mesh 32x64 --collectives 200 --computes 1000 --async || exit 1

step () { sed -n 's/.*"step_time_s":\([^,]*\),.*/\1/p' "$1"; }

if [ -x /usr/bin/time ]; then
  /usr/bin/time -f "%e %U %S %M" -o "$TMP/time" "$PODSIM" simulate "$TMP/big.pst.gz" \
    --slice v3-2048 --json >"$TMP/big.json" || exit 1
  read -r wall user sys rss <"$TMP/time"
  echo "replay 2048 cores, 2000 collectives, 10000 compute events (cache on):"
  echo "  wall ${wall} s, cpu $(echo "$user $sys" | awk '{print $1 + $2}') s, peak memory $((rss / 1024)) MiB"
else
  start=$(date +%s.%N)
  "$PODSIM" simulate "$TMP/big.pst.gz" --slice v3-2048 --json >"$TMP/big.json" || exit 1
  echo "replay 2048 cores, 2000 collectives, 10000 compute events: wall" \
    "$(echo "$start $(date +%s.%N)" | awk '{print $2 - $1}') s (no /usr/bin/time: memory not measured)"
fi
echo "  step time $(step "$TMP/big.json") s"

"$PODSIM" simulate "$TMP/small.pst.gz" --slice v3-2048 --json >"$TMP/on.json" || exit 1
"$PODSIM" simulate "$TMP/small.pst.gz" --slice v3-2048 --json --no-cache >"$TMP/off.json" || exit 1
on=$(step "$TMP/on.json"); off=$(step "$TMP/off.json")
echo "cache on / off, 2048 cores, 200 collectives: step time $on s / $off s"
awk -v a="$on" -v b="$off" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9 * a) }' \
  || { echo "FAIL: the cache changed the step time"; exit 1; }
