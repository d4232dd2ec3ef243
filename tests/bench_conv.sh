#!/bin/sh
# podsim bench conv end to end: how a convolution's window and feature
# depths meet the MXU (closed forms in doc/compute-model.md), JSON, bad
# arguments (exit 2, one line).
. "$PS_SRCDIR/tests/lib.sh"

expect_status 0 "$PODSIM" bench conv --help
expect_grep "BATCH SPATIAL CIN COUT" "$PS_TMP/out"
expect_grep "--mapping" "$PS_TMP/out"
expect_status 0 "$PODSIM" bench --help
expect_grep "conv         time one convolution" "$PS_TMP/out"

# 32 -> 32 features, 3x3x3 over 128^3: the depths fill 1/16 of a weight
# tile per window position (27 x 14 passes per MXU); packing window x
# features (864, 7 tiles) is cheaper and wins.
expect_status 0 "$PODSIM" bench conv 1 128x128x128 32 32
expect_grep "mapping          packed (the cheapest): 27 positions x 32 features (padded to 32) = 864 contracted at once, padded to 896" "$PS_TMP/out"
expect_grep "cycles of        positions 29363840 (mxu), packed 8389760 (mxu), vector 56623104 (vector unit)" "$PS_TMP/out"
expect_grep "array fill       24.11 %" "$PS_TMP/out"
expect_status 0 "$PODSIM" bench conv 1 128x128x128 32 32 --mapping positions --json
expect_grep '"mapping" : "positions"' "$PS_TMP/out"
expect_grep '"tile_passes" : 27' "$PS_TMP/out"
expect_grep '"array_fill" : 0.0625' "$PS_TMP/out"
expect_grep '"window" : 27' "$PS_TMP/out"

# Depths that fill the array: the mappings tie, positions needs no relayout.
expect_status 0 "$PODSIM" bench conv 2 32x32x32 256 256 --json
expect_grep '"mapping" : "positions"' "$PS_TMP/out"
expect_grep '"array_fill" : 1' "$PS_TMP/out"
expect_grep '"bound" : "mxu"' "$PS_TMP/out"

# A depthwise 1D conv (Conformer's conv module): 512 groups of one feature,
# 1 x 1 weight tiles: the multiply-adds go to the vector unit.
expect_status 0 "$PODSIM" bench conv 8 1024 512 512 --kernel 32 --groups 512 --json
expect_grep '"groups" : 512' "$PS_TMP/out"
expect_grep '"k" : 1' "$PS_TMP/out"
expect_grep '"mapping" : "vector"' "$PS_TMP/out"
expect_grep '"vector_cycles" : 131072' "$PS_TMP/out"

# Strided valid conv: output sizes.
expect_status 0 "$PODSIM" bench conv 1 9x9 8 16 --kernel 3 --stride 2 --padding valid --json
expect_grep '"output_spatial" : [' "$PS_TMP/out"
expect_status 0 "$PODSIM" bench conv 1 9x9 8 16 --kernel 3 --stride 2 --padding valid
expect_grep "-> [1, 4x4, 16]" "$PS_TMP/out"

"$PODSIM" bench conv 4 64x64 64 128 --json >"$PS_TMP/a.json"
"$PODSIM" bench conv 4 64x64 64 128 --json >"$PS_TMP/b.json"
cmp -s "$PS_TMP/a.json" "$PS_TMP/b.json" || fail "--json output differs between runs"

one_line () { [ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "stderr of '$*' is not one line"; }
for args in "1 8x8 4" "0 8x8 4 4" "1 8xx8 4 4" "1 8x8 4 4 --kernel 3x3x3" "1 8x8 4 4 --groups 3" \
            "1 8x8 4 4 --padding full" "1 8x8 4 4 --mapping im2col" "1 2x2 4 4 --kernel 3 --padding valid" \
            "1 8x8 4 4 --dtype f16" "1 8x8 4 4 --hw /nonexistent/hw.ini"; do
  # shellcheck disable=SC2086
  expect_status 2 "$PODSIM" bench conv $args
  one_line bench conv $args
done
expect_status 2 "$PODSIM" bench conv 1 8x8 4 4 --groups 3
expect_grep "podsim: --groups 3 does not divide the features 4 -> 4" "$PS_TMP/err"
finish
