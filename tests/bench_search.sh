#!/bin/sh
# Benchmark: `podsim search --preset DenseLm128B8x8` (issue 16's target: at
# least 20 strategies ranked on v3-128 in under 5 minutes on this 2-core
# machine). Prints the search's summary and top 10, its wall time, and
# (issue 26) strategies per CPU-second, the CPU of every worker and fork
# included (goal: 100). With PS_BENCH_SEARCH_NO_SHARE=1 it also runs the
# search with --no-share (one podsim run per strategy), prints its rate and
# the ratio, and checks that both print the same ranking.
set -u
: "${PODSIM:?}"
jobs=${PS_BENCH_JOBS:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# search NAME [OPTIONS]: runs it, prints what it printed, sets $rate.
search () {
  name=$1
  shift
  echo "bench_search: podsim search --preset DenseLm128B8x8 --jobs $jobs $*"
  t0=$(date +%s)
  /usr/bin/env time -f "%U %S" -o "$TMP/$name.time" "$PODSIM" search --preset DenseLm128B8x8 -q \
    --jobs "$jobs" "$@" >"$TMP/$name.out" || exit 1
  t1=$(date +%s)
  sed 's/^/  /' "$TMP/$name.out"
  echo "  wall $((t1 - t0)) s; target: at most 300 s: $([ $((t1 - t0)) -le 300 ] && echo met || echo NOT met)"
  read -r user sys <"$TMP/$name.time"
  n=$(sed -n 's/.*: \([0-9][0-9]*\) strategies = .*/\1/p' "$TMP/$name.out" | head -n 1)
  rate=$(echo "${n:-0} $user $sys" | awk '{printf "%.1f", (($2 + $3) > 0 ? $1 / ($2 + $3) : 0)}')
  echo "  ${n:-?} strategies in $(echo "$user $sys" | awk '{print $1 + $2}') s of CPU (user $user, system $sys):" \
    "$rate per CPU-second (goal: 100 or more)"
}

search shared
shared=$rate
if [ "${PS_BENCH_SEARCH_NO_SHARE:-0}" = 1 ]; then
  search alone --no-share
  echo "  batch workers and share groups: $(echo "$shared $rate" | awk '{printf "%.2f", ($2 > 0 ? $1 / $2 : 0)}')x" \
    "the strategies per CPU-second of --no-share"
  # The same ranking; only the wall time on the summary line differs.
  sed -E 's/ in ([0-9]+[hms] ?)+//' "$TMP/shared.out" >"$TMP/a"
  sed -E 's/ in ([0-9]+[hms] ?)+//' "$TMP/alone.out" >"$TMP/b"
  cmp -s "$TMP/a" "$TMP/b" && echo "  same ranking with and without --no-share" \
    || { echo "  the rankings DIFFER"; exit 1; }
fi
