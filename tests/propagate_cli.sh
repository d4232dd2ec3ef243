#!/bin/sh
# podsim propagate and the conformance runner's handling of bad input.
. "$PS_SRCDIR/tests/lib.sh"
cat >"$PS_TMP/m.hlo" <<'HLO'
HloModule m
ENTRY e {
  x = f32[16,32] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  w = f32[32,64] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}
  y = f32[16,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[16,64] negate(y)
}
HLO
expect_status 0 "$PODSIM" propagate "$PS_TMP/m.hlo"
# Batch-sharded LHS and feature-sharded RHS: the dot is sharded on both.
expect_grep "dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2]<=[4]}" "$PS_TMP/out"
# Without --to-output the root keeps no sharding; with it, it follows the dot.
grep -F "ROOT %r" "$PS_TMP/out" | grep -qF "sharding=" && fail "root got a sharding without --to-output"
expect_status 0 "$PODSIM" propagate --to-output "$PS_TMP/m.hlo"
grep -F "ROOT %r" "$PS_TMP/out" | grep -qF "sharding={devices=[2,2]<=[4]}" || fail "root not sharded with --to-output"
# The output reads back.
expect_status 0 "$PODSIM" propagate --to-output -o "$PS_TMP/p.hlo" "$PS_TMP/m.hlo"
expect_status 0 "$PODSIM" hlo "$PS_TMP/p.hlo"
expect_status 0 "$PODSIM" propagate --help
expect_grep "to-parameters" "$PS_TMP/out"
# Bad input: one line with the position, exit 2, no output file.
printf 'HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] bogus(x)\n}\n' >"$PS_TMP/bad.hlo"
expect_status 2 "$PODSIM" propagate -o "$PS_TMP/never.hlo" "$PS_TMP/bad.hlo"
expect_grep "bad.hlo:4:" "$PS_TMP/err"
[ ! -e "$PS_TMP/never.hlo" ] || fail "a partial output file was written"
expect_status 2 "$PODSIM" propagate "$PS_TMP/missing.hlo"
# A user error found by the pass itself: one line with the position.
cat >"$PS_TMP/conflict.hlo" <<'HLO'
HloModule m
cond { p = (f32[], token[]) parameter(0)  ROOT t = pred[] constant(true) }
body { p = (f32[], token[]) parameter(0)  tok = token[] get-tuple-element(p), index=1
  r = (f32[], u32[], token[]) recv(tok), channel_id=1, sharding={{maximal device=1}, {maximal device=1}, {maximal device=1}}
  rd = (f32[], token[]) recv-done(r), channel_id=1, sharding={{maximal device=1}, {maximal device=1}}
  ROOT o = (f32[], token[]) copy(rd) }
ENTRY e {
  a = f32[] parameter(0)  tk = token[] after-all()
  t = (f32[], token[]) tuple(a, tk)
  ROOT w = (f32[], token[]) while(t), condition=cond, body=body, sharding={{maximal device=0}, {maximal device=0}}
}
HLO
expect_status 2 "$PODSIM" propagate -o "$PS_TMP/never2.hlo" "$PS_TMP/conflict.hlo"
expect_grep "conflict.hlo:10:" "$PS_TMP/err"
expect_grep "Instruction: w is on device: 0, which conflicts with device: 1 of channel instruction: r" "$PS_TMP/err"
[ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "error is not one line"
[ ! -e "$PS_TMP/never2.hlo" ] || fail "a partial output file was written"
# The conformance runner: a case whose module does not parse counts as
# failed, the others still run; a line that is not JSON is a usage error.
cat >"$PS_TMP/c.jsonl" <<'JSON'
{"name": "good", "hlo": "HloModule m\nENTRY e {\n p = f32[4] parameter(0), sharding={devices=[2]0,1}\n ROOT c = f32[4] copy(p)\n}", "params": {"is_spmd": true, "allow_spmd_sharding_propagation_to_output": [true]}, "expect": [{"kind": "sharding", "ref": "FindInstruction(\"c\")", "instr": "c", "sharding": "{devices=[2]0,1}"}]}
{"name": "broken", "hlo": "HloModule m\nENTRY e {\n ROOT c = f32[4] nope()\n}", "params": {}, "expect": [{"kind": "no_sharding", "ref": "FindInstruction(\"c\")", "instr": "c"}]}
{"name": "wrong", "hlo": "HloModule m\nENTRY e {\n p = f32[4] parameter(0), sharding={devices=[2]0,1}\n ROOT c = f32[4] copy(p)\n}", "params": {"is_spmd": true, "allow_spmd_sharding_propagation_to_output": [true]}, "expect": [{"kind": "sharding", "ref": "FindInstruction(\"c\")", "instr": "c", "sharding": "{replicated}"}]}
JSON
expect_status 1 "$PODSIM" conformance propagation "$PS_TMP/c.jsonl"
expect_grep "1 passed, 2 failed" "$PS_TMP/out"
expect_grep "FAIL broken: module does not parse" "$PS_TMP/out"
expect_grep "FAIL wrong: c: expected {replicated}, got {devices=[2]" "$PS_TMP/out"
echo 'not json' >"$PS_TMP/bad.jsonl"
expect_status 2 "$PODSIM" conformance propagation "$PS_TMP/bad.jsonl"
expect_grep "bad.jsonl:1:" "$PS_TMP/err"
finish
