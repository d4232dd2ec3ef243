#!/bin/sh
# podsim autoshard on a program whose optimum is known by enumerating every
# combination here, independently of the search: both solvers must find it,
# the module written must run to the same step and partition correctly on
# the interpreter; bad input fails with a located error.
. "$PS_SRCDIR/tests/lib.sh"
prog="$PS_SRCDIR/tests/data/autoshard_matmul.hlo"
opts="--slice v3-8 --mesh 2x4"
# The enumeration below is over the parameters: autoshard's internal
# candidates (the dot's result here) off, but for the last check.
aopts="$opts --internal 0"
# Every dims mapping of a rank-2 array over a 2-axis mesh (all dims divide).
maps='[-1,-1] [0,-1] [1,-1] [-1,0] [-1,1] [0,1] [1,0]'
best=
for mx in $maps; do
  for mw in $maps; do
    shard=
    [ "$mx" != "[-1,-1]" ] && shard="x=$mx"
    [ "$mw" != "[-1,-1]" ] && shard="${shard:+$shard;}w=$mw"
    "$PODSIM" run "$prog" $opts ${shard:+--shard=$shard} --json -q >"$PS_TMP/one" 2>/dev/null || continue
    s=$(sed -n 's/.*"step_time_s" *: *\([0-9.e+-]*\).*/\1/p' "$PS_TMP/one" | head -1)
    [ -n "$s" ] || continue
    best=$(awk -v a="$s" -v b="$best" 'BEGIN { print (b == "" || a < b) ? a : b }')
  done
done
[ -n "$best" ] || fail "no combination ran"
for solver in exhaustive dp local; do
  expect_status 0 "$PODSIM" autoshard "$prog" $aopts --json -q --solver $solver
  expect_grep "\"solver\" : \"$(echo $solver | sed s/local/local-search/)\"" "$PS_TMP/out"
  found=$(sed -n 's/.*"step_time_s" *: *\([0-9.e+-]*\).*/\1/p' "$PS_TMP/out" | head -1)
  awk -v a="$found" -v b="$best" 'BEGIN { exit !(a - b <= 1e-9 * b && b - a <= 1e-9 * b) }' \
    || fail "--solver $solver: found $found, enumeration's optimum $best"
  [ -s "$PS_TMP/err" ] && fail "-q: stderr not empty"
done
# auto: the DP above --exhaustive-limit
expect_status 0 "$PODSIM" autoshard "$prog" $aopts --json -q --exhaustive-limit 1
expect_grep '"solver" : "dp"' "$PS_TMP/out"
expect_grep '"dp_chain" : 2' "$PS_TMP/out"
# A two-layer MLP (x, w1, w2 and the first dot's result h) on a 1-D mesh:
# 81 combinations, every one run by the exhaustive solver (which the
# enumeration above checks on the matmul); the DP must find its optimum
# with fewer costed (the Megatron pair: w1 on its columns, w2 on its rows).
mlp="$PS_SRCDIR/tests/data/autoshard_mlp.hlo"
expect_status 0 "$PODSIM" autoshard "$mlp" --slice v3-8 --mesh 8 --json -q --exhaustive-limit 81
expect_grep '"solver" : "exhaustive"' "$PS_TMP/out"
expect_grep '"estimated" : 81' "$PS_TMP/out"
opt=$(sed -n 's/.*"step_time_s" *: *\([0-9.e+-]*\).*/\1/p' "$PS_TMP/out" | head -1)
expect_status 0 "$PODSIM" autoshard "$mlp" --slice v3-8 --mesh 8 --json -q --solver dp -o "$PS_TMP/mlp.hlo"
expect_grep '"solver" : "dp"' "$PS_TMP/out"
found=$(sed -n 's/.*"step_time_s" *: *\([0-9.e+-]*\).*/\1/p' "$PS_TMP/out" | head -1)
awk -v a="$found" -v b="$opt" 'BEGIN { exit !(a - b <= 1e-9 * b && b - a <= 1e-9 * b) }' \
  || fail "mlp: the DP found $found, the enumeration's optimum $opt"
n=$(sed -n 's/.*"estimated" *: *\([0-9]*\).*/\1/p' "$PS_TMP/out")
[ "$n" -lt 81 ] || fail "mlp: the DP costed $n of 81"
expect_status 0 "$PODSIM" verify "$PS_TMP/mlp.hlo" -n 8
expect_grep "agrees on 8 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" autoshard "$mlp" --slice v3-8 --mesh 8 --json -q --solver dp --dp-rounds 1
expect_grep '"dp_rounds" : 1' "$PS_TMP/out"
expect_status 2 "$PODSIM" autoshard "$prog" $opts -q --solver ilp
expect_grep "--solver: 'ilp' is not auto, exhaustive, dp or local" "$PS_TMP/err"
expect_status 2 "$PODSIM" autoshard "$prog" $aopts -q --solver exhaustive --exhaustive-limit 10
expect_grep "--solver exhaustive: 49 combinations, over --exhaustive-limit 10" "$PS_TMP/err"
# Exhaustive: every combination also costed cheaply; on this program
# (no loop, no collective sharing links) the cheap cost is the replay's.
expect_status 0 "$PODSIM" autoshard "$prog" $aopts --json -q --top 49
expect_grep '"cheap_rank_correlation" : 1' "$PS_TMP/out"
expect_grep '"cheap_best_full_rank" : 1' "$PS_TMP/out"
awk -F': *' '/"step_time_s"/ { s = $2 + 0 } /"cheap_step_time_s"/ { c = $2 + 0; n++;
  if (s > 0 && (c - s > 1e-9 * s || s - c > 1e-9 * s)) bad++ }
  END { exit !(n == 49 && bad == 0) }' "$PS_TMP/out" || fail "cheap and full steps differ on the matmul"
# The written module runs to the same step and partitions correctly.
expect_status 0 "$PODSIM" autoshard "$prog" $aopts -o "$PS_TMP/best.hlo"
expect_grep "combinations run; best so far" "$PS_TMP/err"
expect_grep "every one enumerated" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$PS_TMP/best.hlo" $opts --json -q
ran=$(sed -n 's/.*"step_time_s" *: *\([0-9.e+-]*\).*/\1/p' "$PS_TMP/out" | head -1)
awk -v a="$ran" -v b="$best" 'BEGIN { exit !(a - b <= 1e-9 * b && b - a <= 1e-9 * b) }' \
  || fail "podsim run of the written module: $ran, the search's $best"
expect_status 0 "$PODSIM" verify "$PS_TMP/best.hlo" -n 8
expect_grep "agrees on 8 devices" "$PS_TMP/out"
# With the dot's result as a candidate too (the default): at least as fast.
expect_status 0 "$PODSIM" autoshard "$prog" $opts --json -q --exhaustive-limit 1
expect_grep '"internal" : 1' "$PS_TMP/out"
found=$(sed -n 's/.*"step_time_s" *: *\([0-9.e+-]*\).*/\1/p' "$PS_TMP/out" | head -1)
awk -v a="$found" -v b="$best" 'BEGIN { exit !(a <= b * (1 + 1e-9)) }' || fail "--internal: $found, slower than $best"
expect_status 0 "$PODSIM" autoshard "$prog" $opts -q --exhaustive-limit 1 -o "$PS_TMP/inner.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/inner.hlo" -n 8
expect_grep "agrees on 8 devices" "$PS_TMP/out"
# --mesh auto: the 1-D mesh and both 2-D factorizations of v3-8's 8 cores.
expect_status 0 "$PODSIM" autoshard "$prog" --slice v3-8 --mesh auto --internal 0 --exhaustive-limit 1 -q -o "$PS_TMP/auto.hlo"
expect_grep "mesh 8 " "$PS_TMP/out"
expect_grep "mesh 2x4 " "$PS_TMP/out"
expect_grep "mesh 4x2 " "$PS_TMP/out"
expect_grep "mesh 8 wins" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$PS_TMP/auto.hlo" --slice v3-8 --mesh 8 -q
expect_status 2 "$PODSIM" autoshard "$prog" $opts -q --budget -1
expect_grep "--budget must not be negative" "$PS_TMP/err"
# --sharding none: the families' programs without any annotation, dumped
# for autoshard (the dense family's is in bench_autoshard.sh).
for fam in moe unet; do
  expect_status 0 "$PODSIM" run $fam --sharding none --dump-hlo "$PS_TMP/$fam.hlo"
  expect_grep "no annotation (--sharding none)" "$PS_TMP/out"
  expect_grep "; 0 annotated tensors" "$PS_TMP/out"
  grep -q "sharding=" "$PS_TMP/$fam.hlo" && fail "$fam --sharding none: the dump has an annotation"
  expect_status 0 "$PODSIM" run $fam
  grep -q "; 0 annotated tensors" "$PS_TMP/out" && fail "$fam: the default has no annotation"
done
expect_status 2 "$PODSIM" run moe --sharding none --pipeline-stages 2 --layers 4 -q
expect_grep "pipeline is annotated by construction" "$PS_TMP/err"
# Bad input.
expect_status 2 "$PODSIM" autoshard "$PS_TMP/none.hlo" $opts -q
expect_grep "cannot open" "$PS_TMP/err"
expect_status 2 "$PODSIM" autoshard "$PS_SRCDIR/tests/data/bad/bad_rank.hlo" $opts -q
expect_grep "bad_rank.hlo:4:80:" "$PS_TMP/err"
expect_status 2 "$PODSIM" autoshard "$prog" --slice v3-8 -q
expect_grep "--mesh: autoshard needs a mesh" "$PS_TMP/err"
expect_status 2 "$PODSIM" autoshard dense -q
expect_grep "give an HLO module" "$PS_TMP/err"
# --tie-shapes: internal tensors also from the contractions' operands (xt,
# a transpose, and c, which has a's shape and joins its variable): 4
# internal tensors against 2 (a and d), and the module found verifies.
tie="$PS_SRCDIR/tests/data/autoshard_tie.hlo"
expect_status 0 "$PODSIM" autoshard "$tie" --slice v3-8 --mesh 8 --json -q --solver dp
expect_grep '"internal" : 2,' "$PS_TMP/out"
expect_status 0 "$PODSIM" autoshard "$tie" --slice v3-8 --mesh 8 --json -q --solver dp --tie-shapes -o "$PS_TMP/tie.hlo"
expect_grep '"internal" : 4,' "$PS_TMP/out"
expect_status 0 "$PODSIM" verify "$PS_TMP/tie.hlo" -n 8
finish
