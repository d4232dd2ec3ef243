#!/bin/sh
# Progress on stderr (issue 26): the long-running commands show a progress
# line, and -q silences it. Progress is only drawn on a terminal, so the
# test forces it with PODSIM_PROGRESS=1 (what a log that wants it sets) and
# checks both ways: something on stderr without -q, nothing with -q.
. "$PS_SRCDIR/tests/lib.sh"
cd "$PS_TMP" || exit 1
PODSIM_PROGRESS=1
export PODSIM_PROGRESS
D="$PS_SRCDIR/tests/data/verify"

# quiet FILE: drop from a captured stderr the three lines ASan itself
# prints once per process in the sanitizer build when SimGrid switches
# stacks ("ASan is ignoring requested __asan_handle_no_return ... False
# positive error reports may follow ... issues/189"): they are the
# sanitizer's, not podsim's, and say nothing about -q.
quiet () {
  sed -i '/==[0-9]*==WARNING: ASan is ignoring requested __asan_handle_no_return/,/github.com\/google\/sanitizers\/issues\/189/d' "$1"
}

# both CMD...: stderr names the progress without -q and is empty with it
both () {
  "$@" >/dev/null 2>"$PS_TMP/e1" || fail "'$*' failed"
  grep -q "podsim" "$PS_TMP/e1" || fail "'$*' showed no progress on stderr"
  "$@" -q >/dev/null 2>"$PS_TMP/e2" || fail "'$* -q' failed"
  quiet "$PS_TMP/e2"
  [ -s "$PS_TMP/e2" ] && { fail "'$* -q' wrote on stderr"; od -c "$PS_TMP/e2" | head -3 >&2; }
  return 0
}

"$PODSIM" run --trace t.pst.gz -q --json >/dev/null 2>err || fail "podsim run --trace failed"
quiet err
[ -s err ] && fail "podsim run -q wrote on stderr"
both "$PODSIM" simulate t.pst.gz --slice v3-8 --json
both "$PODSIM" run --json
both "$PODSIM" tables dense --only DenseLm128B8x8
both "$PODSIM" conformance partitioner "$D/cases.jsonl" --case elementwise_uneven
both "$PODSIM" conformance propagation --match DotMergeOperands \
  "$PS_SRCDIR/tests/data/conformance/xla-propagation_expanded.jsonl"
# search and sweep draw their progress (cli/study.c) on a terminal only
"$PODSIM" search --layers 1 --axes mesh -j 1 -q >/dev/null 2>err || fail "podsim search -q failed"
quiet err
[ -s err ] && fail "podsim search -q wrote on stderr"
finish
