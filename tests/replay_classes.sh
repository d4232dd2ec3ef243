#!/bin/sh
# Device classes (sim/replay.c, "device classes"): the replay of one device
# per class gives the same report, per-device figures and timeline as the
# replay of every device (PODSIM_REPLAY_CLASSES=off), byte for byte, on
# traces with one class (a full torus), several (no wrap links: groups of
# one collective take different times; mixed group shapes), overlapping
# collectives (where the classified pass falls back to every device), a
# dense and a MoE preset.
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
finish
