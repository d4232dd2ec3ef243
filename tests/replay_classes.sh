#!/bin/sh
# Device classes (sim/replay.c, "device classes"): the replay of one device
# per class gives the same report, per-device figures and timeline as the
# replay of every device (PODSIM_REPLAY_CLASSES=off), byte for byte, on
# traces with one class (a full torus), several (no wrap links: groups of
# one collective take different times; mixed group shapes), overlapping
# collectives (contention passes), a dense and a MoE preset, and one layer
# of issue 26's 30B model (shorter sequence, smaller batch) with every
# collective overlapped on v3-256, where the classes stay on through the
# contention passes and split by the durations the clusters give (2
# classes, then 4).
. "$PS_SRCDIR/tests/lib.sh"
GEN="$PS_BUILDDIR/tests/gen_trace"
"$GEN" "$PS_TMP/a.pst.gz" --mesh 4x8 --collectives 40 --computes 200 || fail "gen_trace"
"$GEN" "$PS_TMP/b.pst.gz" --mesh 4x8 --collectives 40 --computes 200 --async || fail "gen_trace"
"$GEN" "$PS_TMP/c.pst.gz" --mesh 16x16 --collectives 60 --computes 300 --bytes 64KiB || fail "gen_trace"
"$GEN" "$PS_TMP/e.pst.gz" --mesh 2x16 --collectives 30 --computes 100 || fail "gen_trace"
"$PODSIM" run --preset DenseLm128B8x8 -q --trace "$PS_TMP/dense.pst.gz" >/dev/null \
  || fail "run DenseLm128B8x8 --trace"
"$PODSIM" run dense --layers 2 --mesh 2x4 --async-collectives -q --trace "$PS_TMP/async.pst.gz" \
  >/dev/null || fail "run dense --async-collectives --trace"
"$PODSIM" run moe --experts 8 -q --trace "$PS_TMP/moe.pst.gz" >/dev/null || fail "run moe --trace"

same () {
  name=$1; shift
  "$PODSIM" simulate "$@" -q --json --timeline "$PS_TMP/on.tl" --timeline-devices 0,3,5 \
    --links "$PS_TMP/on.csv" >"$PS_TMP/on.json" || fail "$name: simulate"
  PODSIM_REPLAY_CLASSES=off "$PODSIM" simulate "$@" -q --json --timeline "$PS_TMP/off.tl" \
    --timeline-devices 0,3,5 --links "$PS_TMP/off.csv" >"$PS_TMP/off.json" \
    || fail "$name: simulate (classes off)"
  for f in json tl csv; do
    cmp -s "$PS_TMP/on.$f" "$PS_TMP/off.$f" || fail "$name: classes change the $f output"
  done
  expect_grep '"per_device"' "$PS_TMP/on.json"
}
same "4x8 on v3-32, no wrap" "$PS_TMP/a.pst.gz" --slice v3-32
same "4x8 on v3-32, async" "$PS_TMP/b.pst.gz" --slice v3-32
same "16x16 on v3-256" "$PS_TMP/c.pst.gz" --slice v3-256
same "16x16 on v3-256, wrap on" "$PS_TMP/c.pst.gz" --slice v3-256 --wrap on
same "2x16 on v3-32 (idle mesh shape)" "$PS_TMP/e.pst.gz" --slice v3-32
same "4x8 on v3-32, ring" "$PS_TMP/a.pst.gz" --slice v3-32 --collectives ring
same "DenseLm128B8x8" "$PS_TMP/dense.pst.gz" --slice v3-128
same "dense, async" "$PS_TMP/async.pst.gz" --slice v3-8
same "moe" "$PS_TMP/moe.pst.gz" --slice v3-8

"$PODSIM" run --layers 1 --model-dim 7168 --ffn-dim 28672 --heads 56 --head-dim 128 \
  --seq-len 256 --batch 32 --vocab 32000 --no-gated-gelu --optimizer adafactor --mesh 32x8 \
  --device-order arange --slice v3-256 --sharding 2d --async-collectives -q \
  --trace "$PS_TMP/overlap.pst.gz" >/dev/null || fail "run 30B-shaped --async-collectives --trace"
same "30B-shaped layer, async, v3-256" "$PS_TMP/overlap.pst.gz" --slice v3-256
if grep -q '"overlapping_collectives":0,' "$PS_TMP/on.json"; then
  fail "30B-shaped layer: no collectives overlap"
fi
PODSIM_REPLAY_CLASSES_DEBUG=1 "$PODSIM" simulate "$PS_TMP/overlap.pst.gz" --slice v3-256 -q \
  2>"$PS_TMP/debug.txt" >/dev/null || fail "30B-shaped layer: simulate (debug)"
# no timeline here: the first pass has 2 classes, the contention splits them
expect_grep "pass 2: 4 classes of 256 devices" "$PS_TMP/debug.txt"
finish
