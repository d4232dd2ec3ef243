#!/bin/sh
# Benchmark: podsim autoshard's wall time on the cases of doc/manual.md
# ("Automatic sharding"): a matmul (exhaustive enumeration, with how well
# the cheap cost ranks), the dense family's small default, and the three
# cases of issue 28 (PS_BENCH_AUTOSHARD_BIG=0 skips them: minutes each):
# DenseLm128B8x8 without annotations against its published 2D sharding, a
# small MoE model (2 layers of GspmdMoE32E's size, v3-32) against GShard's
# expert sharding, and Unet3d256S32 without annotations (256^3 images, which
# do not fit one core) against its 4x4x2 spatial partitioning. For each:
# the ranking's top 3, the wall time, the found module run through podsim
# run, and the family's own strategy for comparison.
set -u
: "${PODSIM:?}"
jobs=${PS_BENCH_JOBS:-2}
big=${PS_BENCH_AUTOSHARD_BIG:-1}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
step () { sed -n 's/^step time *//p' "$1" | head -1; }
case_time () {
  name=$1; shift
  echo "bench_autoshard: $name: podsim autoshard $* --jobs $jobs --top 3"
  t0=$(date +%s)
  # the CPU time (user + system, this process and its children) from
  # /usr/bin/time when there is one: the figure a loaded machine does not change
  timer=; [ -x /usr/bin/time ] && timer="/usr/bin/time -o $tmp/cpu -f %U+%S"
  $timer "$PODSIM" autoshard "$@" -q --jobs "$jobs" --top 3 -o "$tmp/$name.hlo" >"$tmp/out" || { cat "$tmp/out"; return 1; }
  t1=$(date +%s)
  sed 's/^/  /' "$tmp/out" | cut -c1-400
  cpu=; [ -s "$tmp/cpu" ] && cpu=", CPU $(awk -F+ '{ printf "%.1f", $1 + $2 }' "$tmp/cpu") s"
  echo "  wall $((t1 - t0)) s$cpu (load average $(cut -d' ' -f1 /proc/loadavg 2>/dev/null); on a loaded machine the wall is longer)"
}
found_run () {
  name=$1; shift
  "$PODSIM" run "$tmp/$name.hlo" "$@" >"$tmp/run" || return 1
  echo "  podsim run of the found module: step $(step "$tmp/run")"
}
# The winner's annotations (row 1's last field) as --shard options.
found_shards () {
  sed -n 's/^ *1  step .*  \([^ ]*\)$/\1/p' "$tmp/out" | tr ';' '\n' | sed 's/^/--shard=/' | tr '\n' ' '
}
# podsim verify of a module: the interpreter runs it and its partitioning.
verify () {
  "$PODSIM" verify "$@" >"$tmp/verify" 2>&1 || { cat "$tmp/verify"; return 1; }
  scaled=; grep -q "checked on a scaled copy" "$tmp/verify" && scaled=" (on a scaled copy)"
  echo "  podsim verify $(basename "$1") $2 $3: $(grep -o 'all [0-9]* outputs agree on [0-9]* devices' "$tmp/verify")$scaled"
}
src=${PS_SRCDIR:-$(dirname "$0")/..}
case_time matmul "$src/tests/data/autoshard_matmul.hlo" --slice v3-8 --mesh 2x4 || exit 1
"$PODSIM" run dense --sharding none --dump-hlo "$tmp/dense.hlo" -q >/dev/null || exit 1
case_time dense-default "$tmp/dense.hlo" --slice v3-8 --mesh 2x4 || exit 1
[ "$big" = 1 ] || exit 0

t="--slice v3-128 --mesh 8x16 --device-order nonpod2d"
"$PODSIM" run --preset DenseLm128B8x8 --sharding none --dump-hlo "$tmp/d128.hlo" -q >/dev/null 2>&1
[ -s "$tmp/d128.hlo" ] || { echo "bench_autoshard: no DenseLm128B8x8 dump"; exit 1; }
case_time DenseLm128B8x8 "$tmp/d128.hlo" $t || exit 1
found_run DenseLm128B8x8 $t || exit 1
verify "$tmp/DenseLm128B8x8.hlo" -n 128 || exit 1
"$PODSIM" run --preset DenseLm128B8x8 >"$tmp/run" || exit 1
echo "  podsim run --preset DenseLm128B8x8 (published 2D sharding): step $(step "$tmp/run")"

moe="--preset GspmdMoE32E --layers 2"
"$PODSIM" run $moe --sharding none --dump-hlo "$tmp/moe.hlo" -q >/dev/null 2>&1
[ -s "$tmp/moe.hlo" ] || { echo "bench_autoshard: no MoE dump"; exit 1; }
case_time moe-small "$tmp/moe.hlo" --slice v3-32 --mesh 32 || exit 1
found_run moe-small --slice v3-32 --mesh 32 || exit 1
# At small size: the same program (same instructions, smaller dims) with
# the found annotations, on the interpreter.
"$PODSIM" run $moe --model-dim 16 --ffn-dim 32 --heads 2 --head-dim 8 --seq-len 8 --vocab 64 --sharding none \
  --dump-hlo "$tmp/moe-tiny.hlo" -q >/dev/null || exit 1
"$PODSIM" run "$tmp/moe-tiny.hlo" --slice v3-32 --mesh 32 $(found_shards) --dump-hlo "$tmp/moe-tiny-found.hlo" -q \
  >/dev/null || exit 1
verify "$tmp/moe-tiny-found.hlo" -n 32 || exit 1
grep '^most expensive\|all-to-all' "$tmp/run" | head -3 | sed 's/^/  /'
"$PODSIM" run $moe >"$tmp/run" || exit 1
echo "  podsim run $moe (GShard's expert sharding): step $(step "$tmp/run")"

"$PODSIM" run --preset Unet3d256S32 --sharding none --dump-hlo "$tmp/unet.hlo" -q >/dev/null 2>&1
[ -s "$tmp/unet.hlo" ] || { echo "bench_autoshard: no U-Net dump"; exit 1; }
case_time Unet3d256S32 "$tmp/unet.hlo" --slice v3-32 --mesh 4x8 || exit 1
found_run Unet3d256S32 --slice v3-32 --mesh 4x8 || exit 1
# At small size (the interpreter cannot scale the 256^3 image): the same
# program at 32^3, 2 features a level, batch 8, with the found annotations.
"$PODSIM" run --preset Unet3d256S32 --image 32x32x32 --filters 2,2,2,2,2 --batch 8 --sharding none \
  --dump-hlo "$tmp/unet-tiny.hlo" -q >/dev/null 2>&1
"$PODSIM" run "$tmp/unet-tiny.hlo" --slice v3-32 --mesh 4x8 $(found_shards) --dump-hlo "$tmp/unet-tiny-found.hlo" -q \
  >/dev/null || exit 1
verify "$tmp/unet-tiny-found.hlo" -n 32 --max-work 2e10 || exit 1
"$PODSIM" run --preset Unet3d256S32 >"$tmp/run" || exit 1
echo "  podsim run --preset Unet3d256S32 (4x4x2 spatial partitioning): step $(step "$tmp/run")"
