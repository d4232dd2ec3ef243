#!/bin/sh
# The corpus of dumps of tests/data/hlo/ (README.md there): every file reads,
# prints as a fixed point, is checked on the interpreter where it is a
# single-device program, and simulates; several_modules.hlo's second module
# too (--module). Errors for what is not HLO text are in tests/data/bad/
# (hlo_bad.sh).
. "$PS_SRCDIR/tests/lib.sh"
D="$PS_SRCDIR/tests/data/hlo"
for f in "$D"/*.hlo; do
  b=$(basename "$f")
  expect_status 0 "$PODSIM" hlo "$f"
  cp "$PS_TMP/out" "$PS_TMP/once.hlo"
  expect_status 0 "$PODSIM" hlo "$PS_TMP/once.hlo"
  cmp -s "$PS_TMP/out" "$PS_TMP/once.hlo" || fail "$b: printing is not a fixed point"
  extra=
  case "$b" in
    while_unknown_trip.hlo) extra="--trip-count 3" ;;
    unbounded_dims.hlo)
      # no size to simulate: every stage after reading stops at the first
      # '?', naming file, line, column and instruction
      for cmd in "run" "partition -n 2" "verify -n 2" "propagate" "trace lower -n 2 -o $PS_TMP/u.pst"; do
        expect_status 2 "$PODSIM" $cmd "$f"
        expect_grep "unbounded_dims.hlo:9:3: arg1: shape f32[?] has an unbounded dynamic dimension '?'" "$PS_TMP/err"
      done
      continue ;;
  esac
  expect_status 0 "$PODSIM" run "$f" -q $extra
  expect_grep "step time" "$PS_TMP/out"
done
# StableHLO (JAX's default text) reads into the IR of the HLO text of the
# same program, verifies and simulates.
S="$PS_SRCDIR/tests/data/stablehlo"
expect_status 0 "$PODSIM" hlo "$S/mlp_step.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/mlp_step.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "mlp_step.mlir and mlp_step.hlo read differently"
expect_status 0 "$PODSIM" verify -n 2 "$S/mlp_step.mlir"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/mlp_step.mlir" -q
expect_grep "mesh 2 (arange), slice v3-8" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo "$S/reduce_region.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/reduce_region.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "reduce_region.mlir and reduce_region.hlo read differently"
expect_status 0 "$PODSIM" verify -n 2 "$S/reduce_region.mlir"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/reduce_region.mlir" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo "$S/callees.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/callees.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "callees.mlir and callees.hlo read differently"
expect_status 0 "$PODSIM" verify -n 2 "$S/callees.mlir"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/callees.mlir" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo "$S/sdy.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/sdy_mhlo.mlir"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "sdy.mlir and sdy_mhlo.mlir read differently"
expect_status 0 "$PODSIM" verify -n 8 "$S/sdy.mlir"
expect_grep "agrees on 8 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/sdy.mlir" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo "$S/chlo.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/chlo.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "chlo.mlir and chlo.hlo read differently"
expect_status 0 "$PODSIM" verify -n 2 "$S/chlo.mlir"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/chlo.mlir" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo "$S/scan.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/scan.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "scan.mlir and scan.hlo read differently"
expect_status 0 "$PODSIM" verify -n 2 "$S/scan.mlir"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/scan.mlir" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo "$S/argmax.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/argmax.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "argmax.mlir and argmax.hlo read differently"
expect_status 0 "$PODSIM" verify -n 2 "$S/argmax.mlir"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/argmax.mlir" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo "$S/slices.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/slices.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "slices.mlir and slices.hlo read differently"
expect_status 0 "$PODSIM" verify -n 2 "$S/slices.mlir"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$S/slices.mlir" -q
expect_grep "step time" "$PS_TMP/out"
# gather (an embedding lookup), scatter (its gradient), convolution and
# functions of several results: each pair prints the same, verifies, runs.
for f in gather scatter scatter2 sort conv results; do
  expect_status 0 "$PODSIM" hlo "$S/$f.mlir"
  cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
  expect_status 0 "$PODSIM" hlo "$S/$f.hlo"
  cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "$f.mlir and $f.hlo read differently"
  expect_status 0 "$PODSIM" verify -n 2 "$S/$f.mlir"
  expect_grep " on 2 devices" "$PS_TMP/out"
  expect_status 0 "$PODSIM" run "$S/$f.mlir" -q
  expect_grep "step time" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" propagate "$S/mlp_step.mlir" -o "$PS_TMP/prop.hlo"
expect_status 0 "$PODSIM" hlo "$PS_TMP/prop.hlo"
# Single-device programs: the partitioned program agrees with the original.
for f in fusion.hlo narrow_types.hlo xla_types.hlo several_modules.hlo; do
  expect_status 0 "$PODSIM" verify -n 2 "$D/$f"
  expect_grep "agree" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" verify -n 2 --module second_module "$D/several_modules.hlo"
expect_grep "the output agrees on 2 devices (32 elements compared)" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$D/several_modules.hlo" --module second_module -q
expect_grep "mesh 2 (arange), slice v3-8" "$PS_TMP/out"
# ragged-dot in its three modes partitions by its own rule (no fallback):
# the contraction split over 2 devices is summed, no operand is gathered
# in the non-contracting mode; original and partitioned agree.
expect_status 0 "$PODSIM" verify -n 4 "$D/ragged_dot.hlo"
expect_grep "all 3 outputs agree on 4 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" partition -n 4 --stats "$D/ragged_dot.hlo"
expect_grep "fallbacks: 0" "$PS_TMP/err"
expect_grep "%ragged-dot.5 = f32[16,6] ragged-dot(%tokens, %experts, %sizes)" "$PS_TMP/out"
# Propagation through ragged-dot: only the parameters are annotated; the
# forward ragged-dot takes the experts' output-dim split and not the
# tokens' ragged-row split, the weight gradient's rhs is sharded from its
# user on the free dim only, the batch-mode dot keeps its batch split;
# original and partitioned agree.
expect_status 0 "$PODSIM" propagate "$D/ragged_propagate.hlo"
expect_grep "lhs_ragged_dims={0}, rhs_group_dims={0}, sharding={devices=[1,4]<=[4]}" "$PS_TMP/out"
expect_grep "%g2 = f32[16,12] broadcast(%gvec), dimensions={1}, sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}" "$PS_TMP/out"
expect_grep "lhs_ragged_dims={0}, sharding={devices=[4,1,1]<=[4]}" "$PS_TMP/out"
expect_status 0 "$PODSIM" verify -n 4 "$D/ragged_propagate.hlo"
expect_grep "all 3 outputs agree on 4 devices" "$PS_TMP/out"
# collective-broadcast simulates as one permute per other group member
# (a flat tree), all in flight at once.
expect_status 0 "$PODSIM" run "$D/collective_broadcast.hlo" -q
expect_grep "3 collectives" "$PS_TMP/out"
expect_grep "collective-permute 128.00 KiB per device, 1 group of 1  (b.bcast3)" "$PS_TMP/out"
# An all-reduce over groups of different sizes simulates each group of
# two or more as its own bidirectional ring of permutes.
expect_status 0 "$PODSIM" run "$D/ragged_groups.hlo" -q
expect_grep "4 collectives" "$PS_TMP/out"
expect_grep "collective-permute  16.00 KiB per device, 1 group of 2  (r.ring2.f0)" "$PS_TMP/out"
expect_grep "3 compute events" "$PS_TMP/out"
# Groups of sizes 3 and 2 run their rings at the same time: 4 steps of
# the groups of 3, the first 2 with the groups of 2 beside them (12
# permutes), then one event of the adds (3 compute events).
expect_status 0 "$PODSIM" run "$D/ragged_groups_mixed.hlo"
expect_grep "12 collectives" "$PS_TMP/out"
expect_grep "3 compute events" "$PS_TMP/out"
expect_grep "10.67 KiB per device, 1 group of 3  (r.ring3.f0)" "$PS_TMP/out"
expect_grep "16.00 KiB per device, 1 group of 4  (r.ring2.f0)" "$PS_TMP/out"
expect_status 0 "$PODSIM" trace lower -n 8 "$D/ragged_groups_mixed.hlo" -o "$PS_TMP/rgm.pst"
expect_status 0 "$PODSIM" trace dump "$PS_TMP/rgm.pst"
tr '\n' ' ' <"$PS_TMP/out" | grep -q "name=r.ring2.b0 [^ ]* [^ ]* [^ ]* [^ ]* async=2 collective collective-permute name=r.ring3.f0" \
  || fail "step 0 of the groups of 2 and of 3 are not started together"
expect_grep "compute elementwise name=r.adds dtype=f32 precision=default flops=0 read_bytes=0 write_bytes=0 vector_ops=10922" "$PS_TMP/out"
# Constants of the narrow types round as ml_dtypes does when read.
expect_status 0 "$PODSIM" hlo "$D/xla_types.hlo"
expect_grep "f4e2m1fn[10]{0} constant({0, 0.5, 1, 1.5, 2, 3, 4, 6, 4, 6})" "$PS_TMP/out"
expect_grep "f8e8m0fnu[3]{0} constant({0.5, 1, 1024})" "$PS_TMP/out"
# Per-device programs are simulated as written, with their own device count.
expect_status 0 "$PODSIM" run "$D/async_collectives.hlo" -q
expect_grep "already partitioned: lowered as written" "$PS_TMP/out"
expect_grep "mesh 4 (arange), slice v3-8" "$PS_TMP/out"
expect_grep "4 collectives" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$D/pytorch_xla_coalesced.hlo" -q
expect_grep "already partitioned" "$PS_TMP/out"
# A bounded dynamic dim and the dimension-size ops in StableHLO: the same as
# their HLO text, simulated.
expect_status 0 "$PODSIM" hlo "$S/dynamic.mlir"
cp "$PS_TMP/out" "$PS_TMP/from_mlir.hlo"
expect_status 0 "$PODSIM" hlo "$S/dynamic.hlo"
cmp -s "$PS_TMP/out" "$PS_TMP/from_mlir.hlo" || fail "dynamic.mlir and dynamic.hlo read differently"
expect_status 0 "$PODSIM" run "$S/dynamic.mlir" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" verify -n 2 "$S/dynamic.mlir"
expect_grep " on 2 devices" "$PS_TMP/out"
# ragged-dot, rng-get-and-update-state and the dynamic-size ops simulate and
# run on the interpreter.
expect_status 0 "$PODSIM" run "$D/dynamic_ops.hlo" -q
expect_grep "1 compute events" "$PS_TMP/out"
expect_status 0 "$PODSIM" verify -n 2 "$D/dynamic_ops.hlo"
expect_grep "all 2 outputs agree on 2 devices" "$PS_TMP/out"
expect_status 2 "$PODSIM" verify -n 4 "$D/async_collectives.hlo"
expect_grep "already partitioned" "$PS_TMP/err"
# The header's spmd_parameters_shardings and spmd_output_sharding annotate
# the unannotated entry parameters and root: the root stays split (no
# collective; 1 all-gather without the header), and the program verifies.
expect_status 0 "$PODSIM" partition -n 2 --stats "$D/spmd_shardings.hlo"
expect_grep "collectives: 0" "$PS_TMP/err"
sed 's/, spmd_parameters_shardings=.*$//' "$D/spmd_shardings.hlo" >"$PS_TMP/nohdr.hlo"
expect_status 0 "$PODSIM" partition -n 2 --stats "$PS_TMP/nohdr.hlo"
expect_grep "collectives: 1" "$PS_TMP/err"
expect_status 0 "$PODSIM" verify -n 2 "$D/spmd_shardings.hlo"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" verify -n 2 "$PS_SRCDIR/tests/data/hloproto/spmd.pbtxt"
expect_grep "agrees on 2 devices" "$PS_TMP/out"
# HloModuleProto text (tests/data/hloproto/, written by hand from
# xla/service/hlo.proto) reads into the IR of the HLO text beside it,
# verifies and simulates; --module picks a module of a split file.
H="$PS_SRCDIR/tests/data/hloproto"
for b in step conv collectives literals spmd; do
  expect_status 0 "$PODSIM" hlo "$H/$b.pbtxt"
  cp "$PS_TMP/out" "$PS_TMP/from_proto.hlo"
  expect_status 0 "$PODSIM" hlo "$H/$b.hlo"
  cmp -s "$PS_TMP/out" "$PS_TMP/from_proto.hlo" || fail "$b.pbtxt and $b.hlo read differently"
done
expect_status 0 "$PODSIM" verify -n 2 "$H/step.pbtxt"
expect_grep "all 2 outputs agree on 2 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" verify -n 1 "$H/conv.pbtxt"
expect_grep "agrees on 1 device" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$H/step.pbtxt" -q --mesh 2 --idle-cores
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" verify -n 1 "$H/literals.pbtxt"
expect_grep "all 5 outputs agree on 1 device" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$H/literals.pbtxt" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$H/conv.pbtxt" -q
expect_grep "step time" "$PS_TMP/out"
expect_status 0 "$PODSIM" run "$H/collectives.pbtxt" -q --idle-cores
expect_grep "already partitioned" "$PS_TMP/out"
expect_status 0 "$PODSIM" hlo --module second "$H/split.pbtxt"
expect_grep "HloModule second" "$PS_TMP/out"
finish
