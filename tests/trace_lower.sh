#!/bin/sh
# podsim trace lower on the real binary: a per-device HLO module becomes a
# valid trace with groups compressed to mesh axes; bad options and bad input
# give one error line, exit status 2 and no output file.
. "$PS_SRCDIR/tests/lib.sh"
hlo="$PS_SRCDIR/tests/data/traces/spmd_2x4.hlo"

expect_status 0 "$PODSIM" trace lower --help
expect_grep "--mesh=AxB" "$PS_TMP/out"

expect_status 0 "$PODSIM" trace lower "$hlo" --mesh 2x4 --slice v3-8 --cost --memory -o "$PS_TMP/t.pst.gz"
expect_grep "dot                              matmul                    65536" "$PS_TMP/out"
expect_grep "per-device peak" "$PS_TMP/out"
expect_status 0 "$PODSIM" trace check "$PS_TMP/t.pst.gz"
expect_grep "events:            16 (compute 3, collective 5 of which async 0, memory 8)" "$PS_TMP/out"
expect_grep "FLOPs per device:  66816" "$PS_TMP/out"
expect_grep "all-to-all             1 events, 1.00 KiB (1024 bytes)" "$PS_TMP/out"
expect_status 0 "$PODSIM" trace dump "$PS_TMP/t.pst.gz"
expect_grep "collective all-reduce name=ar dtype=f32 in_bytes=2048 out_bytes=2048 groups=axes:1" "$PS_TMP/out"
expect_grep "groups=axes:0" "$PS_TMP/out"
expect_grep "pairs=shift:1:1:wrap" "$PS_TMP/out"
expect_grep "groups={{0,2,1,3},{4,6,5,7}}" "$PS_TMP/out"
expect_grep "mxu=1x16x64x32" "$PS_TMP/out"

# the same program twice gives the same bytes
expect_status 0 "$PODSIM" trace lower "$hlo" --mesh 2x4 --slice v3-8 -o "$PS_TMP/u.pst.gz"
cmp -s "$PS_TMP/t.pst.gz" "$PS_TMP/u.pst.gz" || fail "lowering is not deterministic"

# async: the schedule's eager policy (the same stages as podsim run); a
# chain of collectives with no compute beside them has nothing to hide
# behind, so they stay synchronous
expect_status 0 "$PODSIM" trace lower "$hlo" --mesh 2x4 --async -o -
grep -q "async=" "$PS_TMP/out" && fail "a collective with nothing to overlap was made asynchronous"

# a while loop becomes a loop of the trace; --unroll repeats its events
# instead (a version 1 trace); both replay to the same step time
expect_status 0 "$PODSIM" run -q --layers 3 --dump-spmd "$PS_TMP/loop.hlo"

# one module, one trace: trace lower writes what podsim run writes for the
# same per-device module (all but the program line), and with --async the
# collectives that compute can hide get a start and a done
expect_status 0 "$PODSIM" trace lower "$PS_TMP/loop.hlo" --mesh 2x4 --slice v3-8 --async -o "$PS_TMP/la.pst"
expect_status 0 "$PODSIM" run "$PS_TMP/loop.hlo" --mesh 2x4 --slice v3-8 --schedule eager -q --trace "$PS_TMP/ra.pst"
expect_status 0 "$PODSIM" trace dump "$PS_TMP/la.pst"
grep -v '^program \|^end ' "$PS_TMP/out" >"$PS_TMP/la.txt"
grep -q "async=" "$PS_TMP/la.txt" || fail "--async made no collective asynchronous"
# several dones due at one instruction come in one order (they came in the
# order of their addresses, a different trace per process)
expect_status 0 "$PODSIM" trace lower "$PS_TMP/loop.hlo" --mesh 2x4 --slice v3-8 --async -o "$PS_TMP/lb.pst"
cmp -s "$PS_TMP/la.pst" "$PS_TMP/lb.pst" || fail "--async lowering is not deterministic"
expect_status 0 "$PODSIM" trace dump "$PS_TMP/ra.pst"
grep -v '^program \|^end ' "$PS_TMP/out" >"$PS_TMP/ra.txt"
cmp -s "$PS_TMP/la.txt" "$PS_TMP/ra.txt" || fail "trace lower and run wrote different traces of one module"
expect_status 0 "$PODSIM" trace lower "$PS_TMP/loop.hlo" --mesh 2x4 --slice v3-8 -o "$PS_TMP/l.pst"
expect_status 0 "$PODSIM" trace check "$PS_TMP/l.pst"
expect_grep "format version 2" "$PS_TMP/out"
expect_grep "loops:             2 (nested 1 deep)" "$PS_TMP/out"
grep -q "^loop trips=3 name=while" "$PS_TMP/l.pst" || fail "no loop of 3 trips"
expect_status 0 "$PODSIM" trace lower "$PS_TMP/loop.hlo" --mesh 2x4 --slice v3-8 --unroll -o "$PS_TMP/lu.pst"
expect_status 0 "$PODSIM" trace check "$PS_TMP/lu.pst"
expect_grep "format version 1" "$PS_TMP/out"
grep -q "^loop" "$PS_TMP/lu.pst" && fail "--unroll wrote a loop"
expect_status 0 "$PODSIM" simulate "$PS_TMP/l.pst" --slice v3-8 --json
a=$(sed -n 's/.*"step_time_s":\([0-9.e+-]*\).*/\1/p' "$PS_TMP/out")
expect_status 0 "$PODSIM" simulate "$PS_TMP/lu.pst" --slice v3-8 --json
b=$(sed -n 's/.*"step_time_s":\([0-9.e+-]*\).*/\1/p' "$PS_TMP/out")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-9 * b) }' \
  || fail "loop trace $a s, unrolled trace $b s"

# errors: one line, exit 2, nothing written
expect_status 2 "$PODSIM" trace lower "$hlo" --mesh 2x2 -o "$PS_TMP/bad.pst.gz"
expect_grep "podsim: the mesh holds 4 devices but the program runs on 8" "$PS_TMP/err"
[ -e "$PS_TMP/bad.pst.gz" ] && fail "a failed lowering left an output file"
expect_status 2 "$PODSIM" trace lower "$hlo" --mesh 2xq -o "$PS_TMP/bad.pst.gz"
expect_grep "--mesh: '2xq' is not a mesh like 8x16" "$PS_TMP/err"
expect_status 2 "$PODSIM" trace lower "$hlo" --order zigzag -o "$PS_TMP/bad.pst.gz"
expect_status 2 "$PODSIM" trace lower "$hlo"
expect_status 2 "$PODSIM" trace lower "$PS_TMP/missing.hlo" -o "$PS_TMP/bad.pst.gz"
printf 'HloModule x\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n  bogus\n}\n' >"$PS_TMP/bad.hlo"
expect_status 2 "$PODSIM" trace lower "$PS_TMP/bad.hlo" -o "$PS_TMP/bad.pst.gz"
[ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "bad HLO: expected one error line"
[ -e "$PS_TMP/bad.pst.gz" ] && fail "a failed lowering left an output file"
finish
