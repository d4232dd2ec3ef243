#!/bin/sh
# XLA's sharding-propagation test vectors through `podsim conformance
# propagation`: at least 90% of the sharding/no_sharding/has_sharding
# expectations and 75% of the runs must hold (issue 3).
. "$PS_SRCDIR/tests/lib.sh"
corpus="$PS_SRCDIR/tests/data/conformance/xla-propagation_expanded.jsonl"
[ -f "$corpus" ] || { fail "no conformance corpus at $corpus"; finish; }
"$PODSIM" conformance propagation "$corpus" >"$PS_TMP/out" 2>"$PS_TMP/err"
status=$?
# 0 = every run passed, 1 = some failed; anything else is a broken runner.
[ "$status" -le 1 ] || fail "runner exited $status"
last=$(tail -n 1 "$PS_TMP/out")
passed=$(echo "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
failed=$(echo "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
[ -n "$passed" ] && [ -n "$failed" ] || fail "last line is not 'N passed, N failed': $last"
runs=$((passed + failed))
[ "$runs" -gt 600 ] || fail "only $runs runs counted"
[ $((passed * 100)) -ge $((runs * 75)) ] || fail "runs: $passed of $runs passed (< 75%)"
core=$(sed -n 's|^sharding/no_sharding/has_sharding expectations: \([0-9]*\)/\([0-9]*\) held.*|\1 \2|p' "$PS_TMP/out")
held=${core% *}
total=${core#* }
[ -n "$held" ] && [ "$total" -gt 0 ] || fail "no expectation figures in the report"
[ $((held * 100)) -ge $((total * 90)) ] || fail "expectations: $held of $total held (< 90%)"
echo "conformance: $last; expectations $held/$total"
# --json reports every expectation with its result.
"$PODSIM" conformance propagation --json --match DotMergeOperands "$corpus" >"$PS_TMP/json" 2>&1
expect_grep '"kind" : "sharding"' "$PS_TMP/json"
expect_grep '"runs_passed"' "$PS_TMP/json"
finish
