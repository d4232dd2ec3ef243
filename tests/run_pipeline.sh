#!/bin/sh
# GSPMD pipelining end to end (podsim run --pipeline-stages, podsim tables
# bubble): the report, the stage shift's hops on the torus, the bubble
# against (K - 1) / (M + K - 1), and option errors.
. "$PS_SRCDIR/tests/lib.sh"

# The small model in 4 stages x 2 in-layer shards on v3-8, 3 microbatches:
# the report names the bubble and where it sits, memory per stage and the
# collective-permutes of the shift.
expect_status 0 "$PODSIM" run -q --pipeline-stages 4 --mesh 1x2 --layers 8 --microbatches 3 --batch 12
for key in "4-stage pipeline x 2d in-layer sharding on mesh 1x2 (8 devices)" \
           "4 stages x 3 microbatches: 6 iterations a loop; bubble (K-1)/(M+K-1) = 50.0 %" \
           "memory/stage" "bubble at" "  stage 3: fwd" "permute      shift:0:1:"; do
  expect_grep "$key" "$PS_TMP/out"
done
# 4 stages of one chip each on v3-8's 2 x 2 chips: the snake puts
# neighbouring stages one hop apart.
expect_grep "permute      shift:0:1: 12 x a step, 6 transfers of 1-1 hops" "$PS_TMP/out"
# On v3-32 (4 x 4 chips) stage k sits on chip column k: one hop along x.
expect_status 0 "$PODSIM" run -q --slice v3-32 --pipeline-stages 4 --mesh 2x4 --layers 4 --microbatches 2 --batch 8
expect_grep "shift:0:1: 10 x a step, 24 transfers of 1-1 hops" "$PS_TMP/out"
# --json has the same under "pipeline".
expect_status 0 "$PODSIM" run -q --json --pipeline-stages 4 --mesh 1x2 --layers 8 --microbatches 3 --batch 12
for key in '"pipeline" : {' '"bubble_formula" : 0.5' '"stage_bubble_s" : [' '"max_hops" : 1'; do
  expect_grep "$key" "$PS_TMP/out"
done
# 1d in-layer sharding in a stage (model parallel on mesh axis 1, data
# parallel on axis 0).
expect_status 0 "$PODSIM" run -q --pipeline-stages 2 --sharding 1d --mesh 2x2 --layers 4 --microbatches 2 --batch 8
expect_grep "2-stage pipeline x 1d in-layer sharding on mesh 2x2" "$PS_TMP/out"

# The MoE LM pipelined (models/moe_lm.c): 4 layers (MoE every 2) in 2
# stages of 4 cores on v3-8; within a stage experts and groups over its 4
# cores, so the partitioner's all-to-alls stay in the stage.
expect_status 0 "$PODSIM" run -q moe --pipeline-stages 2 --layers 4 --microbatches 2
for key in "2-stage pipeline of 4 cores each: experts and 4 groups of 16 tokens (capacity 4)" \
           "2 stages x 2 microbatches: 3 iterations a loop; bubble (K-1)/(M+K-1) = 33.3 %, simulated 33.3 %" \
           "memory/stage" "  stage 1: fwd" "permute      shift:0:1:" "AllToAll" "2 groups of 4"; do
  expect_grep "$key" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" run -q --json moe --pipeline-stages 2 --layers 4 --microbatches 2 --dump-hlo "$PS_TMP/moe.hlo"
for key in '"pipeline" : {' '"bubble_formula" : 0.33' '"max_hops" : 1'; do
  expect_grep "$key" "$PS_TMP/out"
done
# The annotated program it partitioned agrees with its partitioned form
# on the interpreter (a loop body built before the gating's reducers: they
# are printed first, as callees must be).
expect_status 0 "$PODSIM" verify "$PS_TMP/moe.hlo" --devices 8
expect_grep "all 59 outputs agree on 8 devices" "$PS_TMP/out"
# Every stage must run the same layers; the stages split the cores.
expect_status 2 "$PODSIM" run -q moe --pipeline-stages 2
expect_grep "--pipeline-stages 2: a stage's 1 layers are not a whole number of --moe-every = 2" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --pipeline-stages 3 --layers 6
expect_grep "the 8 cores are not divisible by --pipeline-stages (3)" "$PS_TMP/err"

# The bubble sweep: one stage per core of v3-8 (--idle-cores), K in
# {1, 2, 4, 8}, M in {1, 4, 32}. Compute per stage is uniform (one layer
# type, L/K layers a stage), so the simulated idle time of each core in the
# pipeline loops is the formula's within 2 % (absolute).
expect_status 0 "$PODSIM" tables bubble --csv
expect_grep "stages,microbatches,cores,fits,step_time_s" "$PS_TMP/out"
rows=$(awk -F, 'NR > 1 && $1 > 1 && $4 == 1' "$PS_TMP/out" | wc -l)
[ "$rows" = 9 ] || fail "tables bubble: $rows pipelined rows, expected 9"
awk -F, 'NR > 1 && $1 > 1 && $4 == 1 {
  d = $9 - $8; if (d < 0) d = -d
  if (d > 0.02) { print "K=" $1 " M=" $2 ": simulated idle " $9 " vs formula " $8; bad = 1 }
} END { exit bad }' "$PS_TMP/out" || fail "tables bubble: simulated idle off the formula by more than 2 %"

# Option errors: one line, exit 2.
expect_status 2 "$PODSIM" run -q --pipeline-stages 3 --layers 8
expect_grep "--layers = 8 is not divisible by --pipeline-stages (3)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --pipeline-stages 4 --mesh 1x1 --layers 8
expect_grep "has 4 devices but slice v3-8 has 8 cores (--idle-cores leaves the rest idle)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --pipeline-stages 2 --sharding dp --mesh 2x2
expect_grep "the in-layer sharding of a stage is 2d or 1d" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --pipeline-stages 2 --unroll --mesh 2x2
expect_status 2 "$PODSIM" tables nosuch
expect_grep "unknown table 'nosuch' (known: dense, moe, pipeline, bubble, spatial, speech)" "$PS_TMP/err"
finish
