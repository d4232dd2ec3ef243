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
# From 1 to 2 microbatches the dense loop form gains one accumulator per
# weight and no more (doc/models.md, "Gradient accumulation": Lingvo's
# Accumulator and optax's MultiSteps hold the same buffers, and only when
# accumulating): the rise is bounded by the step's parameter bytes, which
# hold the weights once (one accumulator per microbatch would exceed it).
text_peak () { sed -n 's/.*per-device peak [^(]*(\([0-9]*\) bytes).*/\1/p' "$PS_TMP/out"; }
text_params () {
  sed -n 's/.*: parameters \([0-9.]*\) \([GM]\)iB.*/\1 \2/p' "$PS_TMP/out" \
    | awk '{ printf "%.0f\n", $1 * ($2 == "G" ? 1073741824 : 1048576) }'
}
expect_status 0 "$PODSIM" run -q --memory-only --preset DenseLm128B8x8 --batch 64 --microbatches 1
p1=$(text_peak); params=$(text_params)
expect_status 0 "$PODSIM" run -q --memory-only --preset DenseLm128B8x8 --batch 64 --microbatches 2
p2=$(text_peak)
if [ -z "$p1" ] || [ -z "$p2" ] || [ -z "$params" ]; then
  fail "DenseLm128B8x8: no peak or parameter bytes in the memory line"
else
  echo "DenseLm128B8x8 --batch 64: peak $p1 B (M=1), $p2 B (M=2), parameters $params B"
  [ "$p2" -ge "$p1" ] || fail "the rise from M=1 to M=2 is gone: update doc/models.md ($p1 -> $p2)"
  [ $((p2 - p1)) -le "$params" ] \
    || fail "M=2 adds $((p2 - p1)) bytes, more than one accumulator per weight ($params)"
fi
non_increasing "--preset MoE128E12L" 1 2 4 8
non_increasing "--layers 2" 2 4
non_increasing "--preset Unet3d128 --batch 4 --slice v3-8 --idle-cores" 1 2 4
non_increasing "--preset Unet3d128S16 --batch 2" 1 2
non_increasing "--preset ConformerL" 1 2 4

# The microbatches are one while loop (the dense and MoE default): the
# program does not grow with them; unrolled, it does.
size_of () {
  expect_status 0 "$PODSIM" run -q --memory-only "$@" --dump-hlo "$PS_TMP/size.hlo"
  grep -cE '^[[:space:]]+(ROOT )?%?[a-z0-9_.-]+ = ' "$PS_TMP/size.hlo"
}
for what in "--layers 2 --batch 32" "moe --batch 32"; do
  s2=$(size_of $what --microbatches 2); s4=$(size_of $what --microbatches 4)
  u2=$(size_of $what --microbatches 2 --unroll-microbatches)
  u4=$(size_of $what --microbatches 4 --unroll-microbatches)
  echo "$what: $s2, $s4 instructions as a loop (M = 2, 4), $u2, $u4 unrolled"
  # (not always equal: a reshape of the smaller microbatch may be no reshape)
  [ "$s4" -le "$s2" ] || fail "$what: the loop grows with the microbatches ($s2 -> $s4)"
  [ "$u4" -gt "$u2" ] || fail "$what: the unrolled form does not grow ($u2 -> $u4)"
done

# The accumulation verifies: partitioned on 8 devices, same outputs.
expect_status 0 "$PODSIM" run -q --layers 2 --microbatches 2 --dump-hlo "$PS_TMP/m2.hlo"
expect_grep "microbatches.body" "$PS_TMP/m2.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/m2.hlo" --devices 8
expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
expect_status 0 "$PODSIM" run -q unet --microbatches 2 --image 16x16x16 --filters 4,8 --dump-hlo "$PS_TMP/u2.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/u2.hlo" --devices 8
expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
finish
