#!/bin/sh
# Benchmark (make bench): how fast podsim lowers, writes and reads step
# traces. A per-device program with a 20000-iteration loop (counter, matmul,
# all-reduce, convert, loop test) on a 32x64 mesh unrolls to 100001 events;
# the script prints the size and the wall time of each stage. It asserts
# only that every stage succeeds, never a time.
. "$PS_SRCDIR/tests/lib.sh"
now () { date +%s.%N; }
cat >"$PS_TMP/loop.hlo" <<'HLO'
HloModule bench_loop, num_partitions=2048
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
cond {
  p = (s32[], bf16[512,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(20000)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], bf16[512,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x = bf16[512,1024] get-tuple-element(p), index=1
  c = bf16[] constant(1)
  w = bf16[1024,1024] broadcast(c), dimensions={}
  d = f32[512,1024] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ar = f32[512,1024] all-reduce(d), replica_groups=[32,64]<=[2048], to_apply=add
  y = bf16[512,1024] convert(ar)
  ROOT t = (s32[], bf16[512,1024]) tuple(i2, y)
}
ENTRY main {
  a = bf16[512,1024] parameter(0)
  z = s32[] constant(0)
  t = (s32[], bf16[512,1024]) tuple(z, a)
  w = (s32[], bf16[512,1024]) while(t), condition=cond, body=body
  ROOT r = bf16[512,1024] get-tuple-element(w), index=1
}
HLO
t0=$(now)
expect_status 0 "$PODSIM" trace lower "$PS_TMP/loop.hlo" --mesh 32x64 -o "$PS_TMP/loop.pst.gz"
t1=$(now)
expect_status 0 "$PODSIM" trace check "$PS_TMP/loop.pst.gz"
t2=$(now)
expect_grep "events:            100001" "$PS_TMP/out"
expect_status 0 "$PODSIM" trace dump "$PS_TMP/loop.pst.gz"
t3=$(now)
gz=$(wc -c <"$PS_TMP/loop.pst.gz")
txt=$(wc -c <"$PS_TMP/out")
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v gz="$gz" -v txt="$txt" 'BEGIN {
  printf "trace: 100001 events, %d bytes gzip (%d bytes of text)\n", gz, txt
  printf "parse + lower + write:  %.3f s\n", b - a
  printf "stream and validate:    %.3f s (%.0f events/s)\n", c - b, 100001 / (c - b)
  printf "read whole + print:     %.3f s\n", d - c }'
finish
