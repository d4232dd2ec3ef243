#!/bin/sh
# Benchmark: podsim autoshard's wall time on the cases of doc/manual.md
# ("Automatic sharding"): a matmul (exhaustive enumeration), and the dense
# family's default model without annotations (--sharding none --dump-hlo),
# searched by coordinate descent. Prints each ranking's top 3 and its time.
set -u
: "${PODSIM:?}"
jobs=${PS_BENCH_JOBS:-2}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
case_time () {
  name=$1; shift
  echo "bench_autoshard: $name: podsim autoshard $* --jobs $jobs --top 3"
  t0=$(date +%s)
  "$PODSIM" autoshard "$@" -q --jobs "$jobs" --top 3 | sed 's/^/  /' || return 1
  t1=$(date +%s)
  echo "  wall $((t1 - t0)) s"
}
src=${PS_SRCDIR:-$(dirname "$0")/..}
case_time matmul "$src/tests/data/autoshard_matmul.hlo" --slice v3-8 --mesh 2x4 || exit 1
"$PODSIM" run dense --sharding none --dump-hlo "$tmp/dense.hlo" -q >/dev/null || exit 1
case_time dense-default "$tmp/dense.hlo" --slice v3-8 --mesh 2x4 || exit 1
