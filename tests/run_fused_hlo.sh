#!/bin/sh
# An HLO dump taken after XLA's optimizations (fusion instructions) is
# costed with XLA's fusions, one kernel each (issue 21): the step trace of
# tests/data/hlo/fusion.hlo has exactly its three fusions as compute
# events, each reading its operands and writing its result once.
. "$PS_SRCDIR/tests/lib.sh"
# Dense bytes first (--buffer-tiling none), then the default, where each
# kernel moves its arrays as whole TPU tiles.
expect_status 0 "$PODSIM" run -q "$PS_SRCDIR/tests/data/hlo/fusion.hlo" --buffer-tiling none --trace "$PS_TMP/f.pst.gz"
expect_status 0 "$PODSIM" trace dump "$PS_TMP/f.pst.gz"
grep '^compute ' "$PS_TMP/out" > "$PS_TMP/compute"
[ "$(wc -l < "$PS_TMP/compute")" -eq 3 ] || fail "expected 3 compute events, got: $(cat "$PS_TMP/compute")"
# the dot: 2 x 8 x 4 x 16 FLOPs, f32[8,16] + f32[16,4] read, f32[8,4] written
grep -q "^compute matmul .*flops=1024 read_bytes=768 write_bytes=128 .*mxu=1x8x16x4" "$PS_TMP/compute" || fail "the dot kernel"
# add + tanh of the dot's result read once: 2 x 32 vector ops
grep -q "^compute elementwise .*flops=64 read_bytes=128 write_bytes=128 vector_ops=64" "$PS_TMP/compute" || fail "the loop kernel"
grep -q "^compute reduce .*read_bytes=128 write_bytes=32" "$PS_TMP/compute" || fail "the reduce kernel"
# tiled (best layout, tiling.h): f32[8,16] as 8 x 128 (4096 bytes), f32[16,4]
# as 8 (4 padded) x 128 (16 on the lanes: 4096), f32[8,4] as 8 x 128 (4096)
expect_status 0 "$PODSIM" run -q "$PS_SRCDIR/tests/data/hlo/fusion.hlo" --trace "$PS_TMP/t.pst.gz"
expect_status 0 "$PODSIM" trace dump "$PS_TMP/t.pst.gz"
grep -q "^compute matmul .*flops=1024 read_bytes=8192 write_bytes=4096 " "$PS_TMP/out" || fail "the tiled dot kernel"
finish
