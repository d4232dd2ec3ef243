#!/bin/sh
# Benchmark (issue 26): the 30B dense model of the issue (48 layers, d 7168,
# FFN 28672, 56 heads of 128, S 1024, batch 256, ReLU, Adafactor, mesh 32x8
# arange on v3-256, 2d sharding) run synchronously and with every
# collective overlapped (--async-collectives), CPU time of each and their
# ratio (goal: within 3x) and the step times (`podsim simulate --json` of
# the run's --trace reports the replay passes). PS_BENCH_LAYERS changes the
# layer count. Figures only: nothing is asserted.
set -u
: "${PODSIM:?}"
layers=${PS_BENCH_LAYERS:-48}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
args="--layers=$layers --model-dim=7168 --ffn-dim=28672 --heads=56 --head-dim=128 --seq-len=1024
  --batch=256 --vocab=32000 --no-gated-gelu --optimizer=adafactor --mesh=32x8 --device-order=arange
  --slice=v3-256 --sharding=2d -q --json"
key () { sed -n "s/.*\"$1\" *: *\([^,}]*\).*/\1/p" "$2" | head -n 1; }
echo "bench_overlap: podsim run $(echo $args) [--async-collectives]"
for mode in sync async; do
  extra=""
  [ "$mode" = async ] && extra="--async-collectives"
  # shellcheck disable=SC2086
  /usr/bin/env time -f "%U %S %e %M" -o "$TMP/$mode.time" "$PODSIM" run $args $extra \
    >"$TMP/$mode.json" || exit 1
  read -r user sys wall rss <"$TMP/$mode.time"
  cpu=$(echo "$user $sys" | awk '{print $1 + $2}')
  eval "cpu_$mode=$cpu"
  echo "  $mode: step $(key step_time_s "$TMP/$mode.json") s; cpu $cpu s, wall $wall s," \
    "peak $((rss / 1024)) MiB"
done
echo "  async / sync cpu: $(echo "$cpu_async $cpu_sync" | awk '{printf "%.1f", ($2 > 0 ? $1 / $2 : 0)}')x (goal: 3x or less)"
