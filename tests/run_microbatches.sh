#!/bin/sh
# Gradient accumulation (issue 21): more microbatches never raise the
# per-core peak HBM once gradients are accumulated (from 2 microbatches on
# for the dense loop form, whose single microbatch updates each layer in
# its backward iteration and so holds no accumulator; from 1 for the MoE
# LM and the 3D U-Net), and the partitioned step with accumulated microbatches still agrees
# with the original on the interpreter.
. "$PS_SRCDIR/tests/lib.sh"
peak_of () { sed -n 's/.*"peak_hbm_bytes" : \([0-9]*\).*/\1/p' "$PS_TMP/out"; }

non_increasing () {
  what=$1; shift
  last=
  for m in "$@"; do
    expect_status 0 "$PODSIM" run -q --json --memory-only $what --microbatches "$m"
    p=$(peak_of)
    [ -n "$p" ] || { fail "$what --microbatches $m: no peak"; continue; }
    echo "$what --microbatches $m: peak $p B"
    if [ -n "$last" ] && [ "$p" -gt "$last" ]; then
      fail "$what: --microbatches $m raises the peak ($last -> $p bytes)"
    fi
    last=$p
  done
}
non_increasing "--preset DenseLm128B8x8 --batch 64" 2 4 8
non_increasing "--preset MoE128E12L" 1 2 4 8
non_increasing "--layers 2" 2 4
non_increasing "--preset Unet3d128 --batch 4 --slice v3-8 --idle-cores" 1 2 4
non_increasing "--preset Unet3d128S16 --batch 2" 1 2

# The accumulation verifies: partitioned on 8 devices, same outputs.
expect_status 0 "$PODSIM" run -q --layers 2 --microbatches 2 --dump-hlo "$PS_TMP/m2.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/m2.hlo" --devices 8
expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run -q unet --microbatches 2 --image 16x16x16 --filters 4,8 --dump-hlo "$PS_TMP/u2.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/u2.hlo" --devices 8
expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
finish
