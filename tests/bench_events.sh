#!/bin/sh
# Benchmark (issue 26): the replay's cost in events. tests/gen_trace writes
# a synthetic step trace of 100 k and of 1 M events on v3-2048 (--mesh 32x64
# --collectives 20000|200000 --computes 80000|800000 --bytes 4) and
# `podsim simulate --json` replays each; prints CPU, wall and peak memory
# (goal for 1 M events: 10 s or less) and the ratio of the two CPU times
# (10 when the replay is linear in events). Figures only.
set -u
: "${PODSIM:?}" "${PS_BUILDDIR:?}"
GEN="$PS_BUILDDIR/tests/gen_trace"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for n in 100k 1m; do
  case $n in
    100k) c=20000; k=80000 ;;
    *) c=200000; k=800000 ;;
  esac
  "$GEN" "$TMP/$n.pst.gz" --mesh 32x64 --collectives $c --computes $k --bytes 4 || exit 1
  /usr/bin/env time -f "%U %S %e %M" -o "$TMP/$n.time" "$PODSIM" simulate "$TMP/$n.pst.gz" \
    --slice v3-2048 --json -q >"$TMP/$n.json" || exit 1
  read -r user sys wall rss <"$TMP/$n.time"
  cpu=$(echo "$user $sys" | awk '{print $1 + $2}')
  eval "cpu_$n=$cpu"
  echo "bench_events: $n events ($c collectives, $k compute): cpu $cpu s, wall $wall s, peak $((rss / 1024)) MiB"
done
echo "bench_events: 1 M / 100 k cpu: $(echo "$cpu_1m $cpu_100k" | awk '{printf "%.1f", ($2 > 0 ? $1 / $2 : 0)}')x (goal for 1 M: 10 s or less)"
