#!/bin/sh
# podsim run FILE.hlo: a user's own HLO module through the same pipeline and
# report as the built-in models, with annotations from the command line.
. "$PS_SRCDIR/tests/lib.sh"
cat >"$PS_TMP/mm.hlo" <<'HLO'
HloModule mm

ENTRY main {
  x = f32[256,512] parameter(0)
  w = f32[512,1024] parameter(1)
  ROOT d = f32[256,1024] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
HLO
json_value () {  # KEY FILE: the number after "KEY" : in podsim's pretty JSON
  sed -n "s/^  \"$1\" : \\([0-9.e+-]*\\),*\$/\\1/p" "$2" | head -1
}

# Unannotated: replicated, no collectives; one axis of all cores.
expect_status 0 "$PODSIM" run -q "$PS_TMP/mm.hlo"
expect_grep "model        mm.hlo: HLO module mm.hlo, 3 entry instructions" "$PS_TMP/out"
expect_grep "mesh 8 (arange), slice v3-8; 0 --shard annotations" "$PS_TMP/out"
expect_grep "0 collectives" "$PS_TMP/out"
expect_grep "steps/s" "$PS_TMP/out"
# --shard as a dims mapping over --mesh and as XLA text: the partitioner
# derives the collectives (x split over mesh axis 0, w over all 8 devices).
expect_status 0 "$PODSIM" run -q "$PS_TMP/mm.hlo" --slice v3-8 --mesh 2x4 --shard 'x=[0,-1]' \
  --shard 'w={devices=[1,8]<=[8]}'
expect_grep "mesh 2x4 (arange), slice v3-8; 2 --shard annotations; 2 annotated tensors" "$PS_TMP/out"
expect_grep "2 collectives" "$PS_TMP/out"
expect_grep "all-gather" "$PS_TMP/out"

# A built model dumped with --dump-hlo runs to the same step as the model:
# the dump says what propagation the run allowed.
expect_status 0 "$PODSIM" run -q --layers 1 --json --dump-hlo "$PS_TMP/dense.hlo"
step_model=$(json_value step_time_s "$PS_TMP/out")
expect_status 0 "$PODSIM" run -q "$PS_TMP/dense.hlo" --mesh 2x4 --json
step_dump=$(json_value step_time_s "$PS_TMP/out")
[ -n "$step_model" ] && [ "$step_model" = "$step_dump" ] || fail "dense model: step $step_model s, its HLO dump: $step_dump s"
expect_grep '"model" : "dense.hlo"' "$PS_TMP/out"
expect_grep '"throughput_unit" : "steps"' "$PS_TMP/out"

# Model files work for HLO runs too (the path is written absolute).
expect_status 0 "$PODSIM" run "$PS_TMP/mm.hlo" --mesh 2x4 --shard 'x=[0,-1]' --print-config
cp "$PS_TMP/out" "$PS_TMP/mm.ini"
expect_grep "family = hlo" "$PS_TMP/mm.ini"
expect_grep "shard = x=[0,-1]" "$PS_TMP/mm.ini"
expect_status 0 "$PODSIM" run -q --config "$PS_TMP/mm.ini" --shard 'w=[-1,1]'
expect_grep "2 --shard annotations" "$PS_TMP/out"

# Errors: one line naming the option or FILE:LINE:COL, exit 2.
expect_status 2 "$PODSIM" run "$PS_TMP/mm.hlo" --shard 'y=[0,-1]'
expect_grep "--shard y=[0,-1]: the module has no instruction named 'y'" "$PS_TMP/err"
expect_status 2 "$PODSIM" run "$PS_TMP/mm.hlo" --shard 'x=[0]'
expect_grep "[0] has 1 entries but the tensor has 2 dims" "$PS_TMP/err"
expect_status 2 "$PODSIM" run "$PS_TMP/mm.hlo" --mesh 2x4 --shard 'x=[0,2]'
expect_grep "'2' is not a mesh axis (0 .. 1) or -1" "$PS_TMP/err"
expect_status 2 "$PODSIM" run "$PS_TMP/mm.hlo" --shard 'x={devices=[2,1,1]0,1}'
expect_status 2 "$PODSIM" run "$PS_TMP/mm.hlo" --shard 'x'
expect_grep "expected NAME=SHARDING" "$PS_TMP/err"
expect_status 2 "$PODSIM" run "$PS_TMP/mm.hlo" --mesh 4x4
expect_grep "--mesh 4x4 has 16 devices but slice v3-8 has 8 cores" "$PS_TMP/err"
expect_status 2 "$PODSIM" run "$PS_TMP/mm.hlo" --device-order nonpod2d
expect_grep "nonpod2d needs a 2-D --mesh" "$PS_TMP/err"
expect_status 2 "$PODSIM" run "$PS_TMP/nosuch.hlo"
expect_grep "nosuch.hlo" "$PS_TMP/err"
printf 'HloModule bad\n\nENTRY main {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] frobnicate(x)\n}\n' >"$PS_TMP/bad.hlo"
expect_status 2 "$PODSIM" run "$PS_TMP/bad.hlo"
expect_grep "bad.hlo:5:" "$PS_TMP/err"
# A module for fewer devices than the slice has runs on its first cores;
# one for more is refused.
sed 's/HloModule mm/HloModule mm, num_partitions=4/' "$PS_TMP/mm.hlo" >"$PS_TMP/mm4.hlo"
expect_status 0 "$PODSIM" run "$PS_TMP/mm4.hlo"
expect_grep "mesh 4 (arange), slice v3-8" "$PS_TMP/out"
sed 's/HloModule mm/HloModule mm, num_partitions=16/' "$PS_TMP/mm.hlo" >"$PS_TMP/mm16.hlo"
expect_status 2 "$PODSIM" run "$PS_TMP/mm16.hlo"
expect_grep "num_partitions=16 but slice v3-8 has 8 cores" "$PS_TMP/err"
# --idle-cores places a smaller mesh on the first cores; without it the
# error says so.
expect_status 0 "$PODSIM" run "$PS_SRCDIR/tests/data/hlo/fusion.hlo" --mesh 2 --idle-cores
expect_grep "mesh 2 (arange), slice v3-8" "$PS_TMP/out"
expect_status 2 "$PODSIM" run "$PS_SRCDIR/tests/data/hlo/fusion.hlo" --mesh 2
expect_grep "(--idle-cores runs it on the first cores, the rest idle)" "$PS_TMP/err"
# A loop whose trip count cannot be found: an error naming it, located in
# the file, unless --trip-count gives one (run and partition alike).
WL="$PS_SRCDIR/tests/data/hlo/while_unknown_trip.hlo"
expect_status 2 "$PODSIM" run "$WL"
expect_grep "while_unknown_trip.hlo:28:3: while.16: while loop: trip count unknown" "$PS_TMP/err"
expect_grep "give one with --trip-count N" "$PS_TMP/err"
expect_status 0 "$PODSIM" run "$WL" --trip-count 3
expect_grep "step time" "$PS_TMP/out"
expect_status 2 "$PODSIM" partition -n 8 --memory "$WL"
expect_grep "while_unknown_trip.hlo:28:3" "$PS_TMP/err"
expect_status 0 "$PODSIM" partition -n 8 --memory --trip-count 3 "$WL"
expect_status 0 "$PODSIM" partition -n 8 --trace "$PS_TMP/wl.pst.gz" --trip-count 3 "$WL"
expect_status 2 "$PODSIM" run --preset DenseLm128B8x8 "$PS_TMP/mm.hlo"
expect_grep "a file only for hlo runs" "$PS_TMP/err"
finish
