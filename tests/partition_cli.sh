#!/bin/sh
# podsim partition end to end: propagation + partitioning of a small module,
# output to stdout and to a file, --stats, --memory, --trace, windowed einsum,
# and errors.
. "$PS_SRCDIR/tests/lib.sh"
cat >"$PS_TMP/mlp.hlo" <<'HLO'
HloModule mlp

ENTRY main {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]0,1,2,3}
  w = f32[16,32] parameter(1), sharding={devices=[1,4]0,1,2,3}
  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[8,32] negate(d), sharding={devices=[4,1]0,1,2,3}
}
HLO
expect_status 0 "$PODSIM" partition --help
expect_grep "--devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4
expect_grep "f32[2,16]" "$PS_TMP/out"
expect_grep "num_partitions=4" "$PS_TMP/out"
expect_grep "use_global_device_ids=true" "$PS_TMP/out"
# The printed program reads back; partitioning it again is refused (it is
# a per-device program: podsim run simulates it as it is).
cp "$PS_TMP/out" "$PS_TMP/spmd.hlo"
expect_status 0 "$PODSIM" hlo "$PS_TMP/spmd.hlo"
expect_status 2 "$PODSIM" partition "$PS_TMP/spmd.hlo" --devices 1
expect_grep "spmd.hlo: the module is already partitioned" "$PS_TMP/err"
# Same input, same bytes.
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 -o "$PS_TMP/a.hlo"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 -o "$PS_TMP/b.hlo"
cmp -s "$PS_TMP/a.hlo" "$PS_TMP/b.hlo" || fail "output is not deterministic"
cmp -s "$PS_TMP/a.hlo" "$PS_TMP/spmd.hlo" || fail "-o differs from standard output"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 --stats
expect_grep "fallbacks: 0" "$PS_TMP/err"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 -o "$PS_TMP/c.hlo" --memory
expect_grep "peak" "$PS_TMP/out"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 -o "$PS_TMP/d.hlo" --trace "$PS_TMP/t.pst.gz"
[ -s "$PS_TMP/t.pst.gz" ] || fail "no trace written"
# Windowed einsum: the all-gather of w becomes a ring of 3 collective-permutes.
expect_status 0 "$PODSIM" partition --help
expect_grep "--windowed-einsum-threshold" "$PS_TMP/out"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 --windowed-einsum-threshold 0 \
  --trace "$PS_TMP/w.pst.gz" --async-collectives
[ "$(grep -c 'collective-permute(' "$PS_TMP/out")" = 3 ] || fail "windowed einsum: not 3 permutes"
[ "$(grep -c ' dot(' "$PS_TMP/out")" = 4 ] || fail "windowed einsum: not 4 dots"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 --windowed-einsum-threshold 0 \
  --windowed-einsum-bidirectional
[ "$(grep -c 'collective-permute(' "$PS_TMP/out")" = 3 ] || fail "bidirectional: not 3 permutes"
expect_grep "source_target_pairs={{0,3}" "$PS_TMP/out"
expect_status 0 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 4 --windowed-einsum-threshold 100000
grep -q 'collective-permute(' "$PS_TMP/out" && fail "windowed einsum below its threshold"
# Errors: one line, exit 2, no output file.
expect_status 2 "$PODSIM" partition "$PS_TMP/mlp.hlo"
expect_status 2 "$PODSIM" partition "$PS_TMP/mlp.hlo" --devices 2 -o "$PS_TMP/e.hlo"
expect_grep "needs 4 devices" "$PS_TMP/err"
[ -e "$PS_TMP/e.hlo" ] && fail "partial output written"
expect_status 2 "$PODSIM" partition "$PS_TMP/missing.hlo" --devices 2
[ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "error is not one line"
finish
