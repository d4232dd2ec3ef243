#!/bin/sh
# podsim run unet | conformer end to end: small configurations through the
# whole pipeline (and the reference interpreter), every preset fitting in
# HBM, model files, errors naming the option or FILE:LINE:COL with exit 2,
# and the image and speech tables (one quick row each).
. "$PS_SRCDIR/tests/lib.sh"

json_num () { sed -n "s/^ *\"$1\" : \\([-0-9.e+]*\\),\$/\\1/p" "$2" | head -1; }
positive () { awk -v x="$1" 'BEGIN { exit !(x + 0 > 0) }'; }

expect_status 0 "$PODSIM" run unet --help
for opt in --image --filters --spatial --data --batch; do expect_grep "$opt" "$PS_TMP/out"; done
expect_status 0 "$PODSIM" run conformer --help
for opt in --conv-kernel --mel-bins --sharding --mesh; do expect_grep "$opt" "$PS_TMP/out"; done

# 3D U-Net: spatial partitioning D x H (uneven at the bottleneck: 6 over 4)
# gives halo exchanges (collective-permutes) and batch-norm all-reduces, and
# the dumped step agrees with the single-device one on the interpreter.
expect_status 0 "$PODSIM" run -q unet --image 24x16x16 --filters 4,6 --spatial 4x2 --dump-hlo "$PS_TMP/u.hlo"
for key in "3D U-Net, image 24x16x16" "data 1 x spatial (D, H, W) 4x2x1 (8 devices)" "step time" "images/s" \
           "collective-permute" "all-reduce" " 0 replicate-then-slice fallbacks"; do
  expect_grep "$key" "$PS_TMP/out"
done
# The report's parts by op_name: convolutions and batch norms.
expect_grep "by op_name   convolutions " "$PS_TMP/out"
expect_grep "batch norms " "$PS_TMP/out"
expect_status 0 "$PODSIM" verify "$PS_TMP/u.hlo" --devices 8
expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
# Batch sharding as the alternative, and data x spatial.
expect_status 0 "$PODSIM" run -q unet --data 8 --spatial 1 --batch 8 --json
expect_grep '"family" : "unet"' "$PS_TMP/out"
expect_grep '"spatial" : "1"' "$PS_TMP/out"
positive "$(json_num step_time_s "$PS_TMP/out")" || fail "unet data parallel: no step time"
positive "$(json_num conv_share "$PS_TMP/out")" || fail "unet: conv_share is not positive"
positive "$(json_num batch_norm_share "$PS_TMP/out")" || fail "unet: batch_norm_share is not positive"
expect_status 0 "$PODSIM" run -q unet --data 2 --spatial 2x2 --optimizer adafactor --f32-activations --no-batch-norm
expect_grep "no norm, f32 activations" "$PS_TMP/out"
# Fewer devices than cores only with --idle-cores.
expect_status 0 "$PODSIM" run -q unet --spatial 2 --idle-cores
expect_grep "(2 devices)" "$PS_TMP/out"

# Conformer: each sharding plan runs; 1d verifies on the interpreter.
for s in 2d 1d dp; do
  expect_status 0 "$PODSIM" run -q conformer --sharding "$s" --batch 8 --dump-hlo "$PS_TMP/c-$s.hlo"
  expect_grep "$s sharding on mesh 4x2 [data, model]" "$PS_TMP/out"
  expect_grep " 0 replicate-then-slice fallbacks" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" verify "$PS_TMP/c-1d.hlo" --devices 8
expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run -q conformer --json --no-remat --no-f32-activations --mesh 2x4 --heads 8 --batch 2
expect_grep '"family" : "conformer"' "$PS_TMP/out"
positive "$(json_num throughput_per_s "$PS_TMP/out")" || fail "conformer: no throughput"

# Every preset fits in HBM, and prints to a file that reads back to itself.
for p in Unet3d128 Unet3d128S16 Unet3d256S32 ConformerS ConformerM ConformerL; do
  expect_status 0 "$PODSIM" run -q --preset "$p" --memory-only --json
  expect_grep '"fits" : true' "$PS_TMP/out"
done
expect_status 0 "$PODSIM" run --preset Unet3d256S32 --print-config
cp "$PS_TMP/out" "$PS_TMP/u.ini"
tail -n +2 "$PS_TMP/u.ini" >"$PS_TMP/u.ini.body"
for key in "family = unet" "image = 256x256x256" "filters = 32,64,128,256,320" "spatial = 4x4x2"; do
  expect_grep "$key" "$PS_TMP/u.ini"
done
expect_status 0 "$PODSIM" run --config "$PS_TMP/u.ini" --print-config
# (The first line names the file it came from.)
tail -n +2 "$PS_TMP/out" | cmp -s - "$PS_TMP/u.ini.body" || fail "--config of a printed unet file prints another file"
expect_status 0 "$PODSIM" run --preset ConformerL --print-config
cp "$PS_TMP/out" "$PS_TMP/c.ini"
tail -n +2 "$PS_TMP/c.ini" >"$PS_TMP/c.ini.body"
expect_status 0 "$PODSIM" run --config "$PS_TMP/c.ini" --print-config
tail -n +2 "$PS_TMP/out" | cmp -s - "$PS_TMP/c.ini.body" || fail "--config of a printed conformer file prints another file"
# A preset cut down runs and is named as modified.
expect_status 0 "$PODSIM" run -q --preset ConformerL --layers 1 --frames 256 --batch 8
expect_grep "ConformerL modified (layers, frames, batch)" "$PS_TMP/out"

# Errors: one line naming the option or FILE:LINE:COL, exit 2.
expect_status 2 "$PODSIM" run -q unet --filters 8,x
expect_grep "--filters '8,x': level 1 ('x') is not a number of features" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q unet --image 20x16x16
expect_grep "--image: D (20) must be a positive multiple of 8" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q unet --image 16x16
expect_grep "--image '16x16' is not an image size DxHxW (3 dims from 1 to 1048576)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q unet --image 16x16x0
expect_grep "--image '16x16x0' is not an image size DxHxW" "$PS_TMP/err"
# Sizes whose arrays would pass 2^40 elements are refused before building.
expect_status 2 "$PODSIM" run -q unet --batch 16777216 --image 1024x1024x1024 --filters 32 --spatial 1 --idle-cores
expect_grep "--batch 16777216 images of --image 1024x1024x1024 with up to 64 features make arrays of more than 2^40" \
  "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q conformer --batch 16777216 --model-dim 1048576 --heads 1 --frames 1048576 --mesh 8x1
expect_grep "would have more than 2^40 elements (--batch 16777216, --frames 1048576, --model-dim 1048576" \
  "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q unet --batch 3 --data 2 --spatial 2x2
expect_grep "--batch 3 is not divisible by --data 2" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q unet --spatial 4x4
expect_grep "--data 1 x --spatial 4x4 has 16 devices but slice v3-8 has 8 cores" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q unet --spatial 1
expect_grep "(--idle-cores leaves the rest idle)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q unet --spatial 2x2x2x2
expect_grep "--spatial: '2x2x2x2' has 4 dims, this model takes 1 to 3" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q conformer --heads 3
expect_grep "--heads 3 does not divide --model-dim 16" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q conformer --frames 26
expect_grep "--frames 26 is not a multiple of 4" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q conformer --mesh 4x4
expect_grep "--mesh 4x4 has 16 devices but slice v3-8 has 8 cores" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q conformer --batch 6
expect_grep "--mesh: its data axis (4) does not divide --batch 6" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q conformer --sharding 3d
expect_grep "--sharding: '3d' is not one of 2d, 1d, dp" "$PS_TMP/err"
printf '[model]\nfamily = unet\nfilters = 8,,16\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:3:11: filters '8,,16': level 1 ('') is not a number of features" "$PS_TMP/err"
printf '[model]\nfamily = unet\nimage = 20x16x16\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:3:9: image: D (20) must be a positive multiple of 8" "$PS_TMP/err"
printf '[model]\nfamily = conformer\n[parallelism]\nmesh = 8x1\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:4:8: mesh: its data axis (8) does not divide --batch 4" "$PS_TMP/err"
printf '[model]\nfamily = conformer\nheads = four\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:3:9: heads: 'four' is not an integer" "$PS_TMP/err"

# The image table (12 child runs, seconds): the 128^3 series with its
# speedups against the 1-partition row, the seed's 15.7x on the 16 row, a
# 256^3 image on one core (since batch norm's normalization is fused into
# its consumers, doc/compute-model.md, its f32 output is no buffer: it fits,
# at 14.4 GiB), and the 32-way
# rows up to the batch that no longer fits (marked, with the peak it would
# need).
expect_status 0 "$PODSIM" tables spatial --csv
expect_grep "image,batch,partitions,split,step_time_s,images_per_s,speedup,seed_speedup,efficiency" "$PS_TMP/out"
[ "$(wc -l <"$PS_TMP/out")" = 13 ] || fail "tables spatial: $(wc -l <"$PS_TMP/out") lines, expected 12"
expect_grep "128^3,1,1,1x1x1," "$PS_TMP/out"
grep -q '^128^3,1,1,1x1x1,[0-9.]*,[0-9.]*,1.0000,,1.0000,' "$PS_TMP/out" || fail "1-partition row: speedup not 1"
grep -q '^128^3,1,16,4x2x2,[0-9.]*,[0-9.]*,[0-9.]*,15.7,' "$PS_TMP/out" || fail "16-partition row lacks the seed's 15.7"
grep -q '^256^3,1,1,1x1x1,[0-9.]*,[0-9.]*,.*,1,[0-9.]*$' "$PS_TMP/out" || fail "256^3 on one core does not fit"
grep -q '^256^3,32,32,4x4x2,,,,,,,,,,0,' "$PS_TMP/out" || fail "256^3 batch 32 is not marked as not fitting"
# Speedups grow with the partitions; the seed's 2x sits on one fitting 32-way row.
awk -F, '$1 == "128^3" { if ($7 + 0 <= last) bad = 1; last = $7 + 0 } END { exit bad }' "$PS_TMP/out" \
  || fail "tables spatial: speedup does not grow with the partitions"
[ "$(grep -c ',2.0,[0-9.]*,1,[0-9.]*$' "$PS_TMP/out")" = 1 ] || fail "tables spatial: the seed's 2x is not on one row"
expect_status 0 "$PODSIM" tables spatial --markdown
expect_grep "| image | batch | partitions |" "$PS_TMP/out"
expect_status 2 "$PODSIM" tables spatial --csv --markdown
expect_status 2 "$PODSIM" tables speech --only ConformerL
expect_grep "--plot, --scaling and --only are for tables of published runs" "$PS_TMP/err"
finish
