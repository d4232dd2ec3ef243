#!/bin/sh
# podsim run moe end to end (the small MoE LM on v3-8 and the published
# presets): the report's AllToAll and gating shares, --json, model files,
# option errors, every preset fitting in HBM, and tables moe.
. "$PS_SRCDIR/tests/lib.sh"

# json_num KEY FILE: the number of a "KEY" : N member.
json_num () { sed -n "s/^ *\"$1\" : \\([-0-9.e+]*\\),\$/\\1/p" "$2" | head -1; }
positive () { awk -v x="$1" 'BEGIN { exit !(x + 0 > 0) }'; }

expect_status 0 "$PODSIM" run moe --help
expect_grep "--capacity-factor=X" "$PS_TMP/out"
for opt in --experts --moe-every --top-k --groups; do expect_grep "$opt=N" "$PS_TMP/out"; done

expect_status 0 "$PODSIM" run -q moe
for key in "8 experts, top-2, capacity factor 2" "8 groups of 16 tokens (capacity 4)" "step time" \
           "AllToAll " "% of the step" "by op_name   gating " "dispatch/combine einsums" "expert FFNs" \
           "all-to-all"; do
  expect_grep "$key" "$PS_TMP/out"
done

expect_status 0 "$PODSIM" run -q moe --json
for key in step_time_s tokens_per_s peak_hbm_bytes alltoall_share gating_share alltoall_s gating_s \
           dispatch_combine_share experts_share; do
  expect_grep "\"$key\" : " "$PS_TMP/out"
done
a2a=$(json_num alltoall_share "$PS_TMP/out")
gating=$(json_num gating_share "$PS_TMP/out")
positive "$a2a" || fail "alltoall_share is not positive: '$a2a'"
positive "$gating" || fail "gating_share is not positive: '$gating'"
awk -v a="$a2a" -v g="$gating" 'BEGIN { exit !(a < 1 && g < 1) }' || fail "shares over 1: $a2a $gating"
expect_grep '"family" : "moe"' "$PS_TMP/out"
expect_grep '"capacity_factor" : "2"' "$PS_TMP/out"

# Uneven and top-1 settings: 16 groups and 6 experts over 8 cores, a
# fractional capacity factor, bf16 activations, microbatches.
expect_status 0 "$PODSIM" run -q moe --experts 6 --groups 16 --top-k 1 --capacity-factor 1.25 \
  --no-f32-activations --microbatches 2 --optimizer adam --no-remat
expect_grep "6 experts, top-1, capacity factor 1.25" "$PS_TMP/out"
expect_grep "16 groups of 4 tokens" "$PS_TMP/out"
expect_grep "bf16 activations" "$PS_TMP/out"
expect_grep "AllToAll " "$PS_TMP/out"

# A published preset cut to two layers: 512 experts over v3-512.
expect_status 0 "$PODSIM" run -q --preset MoE512E36L --layers 2
expect_grep "MoE512E36L modified (layers)" "$PS_TMP/out"
expect_grep "512 groups of 2048 tokens (capacity 8)" "$PS_TMP/out"
expect_grep "1 group of 512" "$PS_TMP/out"
if grep -q "published" "$PS_TMP/out"; then fail "a modified preset shows a published ratio"; fi

# Model files: a preset prints with its [published] section (the GSPMD
# series' step time; GShard's throughput is the encoder-decoder's) and
# reads back to itself.
expect_status 0 "$PODSIM" run --preset MoE2048E36L --print-config
cp "$PS_TMP/out" "$PS_TMP/moe.ini"
for key in "family = moe" "capacity_factor = 2" "[published]" "step_time = 1.51" "series = gspmd" "table = moe"; do
  expect_grep "$key" "$PS_TMP/moe.ini"
done
if grep -q "throughput =" "$PS_TMP/moe.ini"; then fail "MoE2048E36L prints a throughput"; fi
expect_status 0 "$PODSIM" run --config "$PS_TMP/moe.ini" --print-config
cmp -s "$PS_TMP/out" "$PS_TMP/moe.ini" || fail "--config of a printed moe file prints another file"
expect_status 0 "$PODSIM" run --preset GShard2048E36L --print-config
cp "$PS_TMP/out" "$PS_TMP/encdec.ini"
for key in "family = encdec" "enc_layers = 18" "dec_layers = 18" "experts = 2048" "[published]" \
           "throughput = 3019899" "table = moe"; do
  expect_grep "$key" "$PS_TMP/encdec.ini"
done
expect_status 0 "$PODSIM" run --config "$PS_TMP/encdec.ini" --print-config
cmp -s "$PS_TMP/out" "$PS_TMP/encdec.ini" || fail "--config of a printed encdec file prints another file"

# Errors: one line naming the option or FILE:LINE:COL, exit 2.
expect_status 2 "$PODSIM" run -q moe --capacity-factor 0
expect_grep "--capacity-factor must be positive" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --capacity-factor x
expect_grep "--capacity-factor: 'x' is not a number" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --capacity-factor nan
expect_status 2 "$PODSIM" run -q moe --capacity-factor 1e9
expect_grep "--capacity-factor must be between 0 and 1000000" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --top-k 9
expect_grep "--top-k 9 exceeds --experts 8" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --groups 7
expect_grep "--groups 7 does not divide the 128 tokens" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --batch 12
expect_grep "not divisible by the 8 cores" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --batch 16777216 --seq-len 16777216
expect_grep "FFN activations would have more than 2^40 elements (--batch 16777216" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --batch 8 --seq-len 65536 --capacity-factor 1000000
expect_grep "dispatch tensor would have more than 2^40 elements" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --rel-buckets 1
expect_grep "--rel-buckets must be 0 (no bias) or at least 2" "$PS_TMP/err"
printf '[model]\nfamily = moe\ncapacity_factor = two\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:3:19: capacity_factor: 'two' is not a number" "$PS_TMP/err"
printf '[model]\nfamily = moe\n[parallelism]\ngroups = 7\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:4:10: groups 7 does not divide the 128 tokens" "$PS_TMP/err"
printf '[model]\nfamily = moe\n[published]\nstep_time = -1\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:4:13: step_time: '-1' is not a positive number" "$PS_TMP/err"

# Pipelined MoE strategies in a search (an axis only when --axes names it).
expect_status 0 "$PODSIM" search moe --layers 4 --microbatches 4 --axes pipeline_stages,remat -q -j 2
expect_grep "moe on v3-8: 6 strategies = pipeline_stages (3) x remat (2)" "$PS_TMP/out"
grep -q "^ *1 .*pipeline_stages=2 remat=" "$PS_TMP/out" || fail "search moe: the best strategy is not a 2-stage pipeline"

# Every MoE preset fits in HBM (issue 12; the encoder-decoders: issue 24).
for p in MoE128E12L MoE128E36L MoE512E12L MoE512E36L MoE2048E12L MoE2048E36L GspmdMoE32E GspmdMoE128E \
         GShard128E12L GShard128E36L GShard512E12L GShard512E36L GShard2048E12L GShard2048E36L; do
  expect_status 0 "$PODSIM" run -q --preset "$p" --memory-only --json
  expect_grep '"fits" : true' "$PS_TMP/out"
done

# The 2-D expert layouts (models/moe_layer.h, as encdec's moe_sharding) on
# --mesh 4x2: each partitioned step agrees with the original on the
# interpreter; the AllToAll runs among mesh axis 0's devices (experts-x,
# experts-x-hidden-y) or all 8 (experts-xy, and the 1-D experts);
# experts-x-hidden-y adds the experts' sums over axis 1.
a2a_groups () { grep -o 'all-to-all(.*replica_groups={{[0-9,]*}' "$1" | sed 's/.*replica_groups=//' | sort -u; }
ar_axis1 () { grep -c 'all-reduce(.*replica_groups={{0,1},{2,3}' "$1"; }
for l in experts-x experts-xy experts-x-hidden-y; do
  expect_status 0 "$PODSIM" run moe --sharding $l --mesh 4x2 --dump-hlo "$PS_TMP/l.hlo" --dump-spmd "$PS_TMP/$l.spmd"
  expect_grep "parallelism  $l: 8 groups of 16 tokens (capacity 4)" "$PS_TMP/out"
  expect_grep "dense layers as megatron, mesh 4x2" "$PS_TMP/out"
  expect_status 0 "$PODSIM" verify "$PS_TMP/l.hlo" --devices 8
  expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
done
[ "$(a2a_groups "$PS_TMP/experts-x.spmd")" = "{{0,2,4,6}" ] || fail "experts-x: AllToAll not over mesh axis 0"
[ "$(a2a_groups "$PS_TMP/experts-x-hidden-y.spmd")" = "{{0,2,4,6}" ] || fail "experts-x-hidden-y: AllToAll not over axis 0"
[ "$(a2a_groups "$PS_TMP/experts-xy.spmd")" = "{{0,1,2,3,4,5,6,7}" ] || fail "experts-xy: AllToAll not over every device"
[ "$(ar_axis1 "$PS_TMP/experts-x-hidden-y.spmd")" -gt "$(ar_axis1 "$PS_TMP/experts-x.spmd")" ] \
  || fail "experts-x-hidden-y: no more all-reduces over mesh axis 1 than experts-x"
# They print in a model file and read back; search lists them (the 1-D
# layout once, whatever the mesh).
expect_status 0 "$PODSIM" run moe --sharding experts-x-hidden-y --mesh 4x2 --print-config
expect_grep "sharding = experts-x-hidden-y" "$PS_TMP/out"
expect_grep "mesh = 4x2" "$PS_TMP/out"
cp "$PS_TMP/out" "$PS_TMP/moe.ini"
expect_status 0 "$PODSIM" run --config "$PS_TMP/moe.ini" --print-config
cmp -s "$PS_TMP/out" "$PS_TMP/moe.ini" || fail "--config of a printed 2-D layout prints another file"
expect_status 0 "$PODSIM" search moe --axes sharding,mesh --dry-run
expect_grep "16 strategies; 6 cannot be built, 3 repeat another" "$PS_TMP/out"
expect_grep "axis         sharding (4): experts experts-x experts-xy experts-x-hidden-y" "$PS_TMP/out"
expect_grep "axis         mesh (4): 1x8 2x4 4x2 8x1" "$PS_TMP/out"
expect_status 0 "$PODSIM" search --preset MoE128E12L --dry-run
expect_grep "axis         sharding (4): experts experts-x experts-xy experts-x-hidden-y" "$PS_TMP/out"
# Errors name the option.
expect_status 2 "$PODSIM" run -q moe --sharding experts-x
expect_grep "--sharding experts-x needs a 2-D --mesh AxB (A*B = the 8 cores)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --sharding experts-x --mesh 2x2
expect_grep "--mesh 2x2 has 4 devices, the slice 8 cores" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --mesh 4x2
expect_grep "--mesh is for the 2-D layouts" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --sharding experts-xy --mesh 4x2 --experts 4
expect_grep "--experts = 4 is not divisible by the device count (8)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --sharding experts-x --mesh 4x2 --pipeline-stages 2 --layers 4
expect_grep "--pipeline-stages 2: a pipeline runs the 1-D layout" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q moe --sharding experts-x --mesh 2x4
expect_grep "--heads" "$PS_TMP/err"

# One row of the MoE table, as CSV.
expect_status 0 "$PODSIM" tables moe --only GspmdMoE32E --csv
expect_grep "name,experts,layers,cores,step_time_s,steps_per_s,tokens_per_s,alltoall_share,gating_share" \
  "$PS_TMP/out"
expect_grep "GspmdMoE32E,32,36,32," "$PS_TMP/out"
expect_grep ",1.0204,,gspmd,1.0000,1.0000" "$PS_TMP/out"
finish
