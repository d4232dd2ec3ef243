#!/bin/sh
# make bench: the layer stack as a loop (issue 15). Prints, for every
# published dense preset, the loop form's wall time, CPU time and peak RSS
# (targets: DenseLm128B32x32 <= 2 s and <= 512 MiB; every preset < 3 s) and
# its step time and peak HBM next to the unrolled form's (--unroll; target:
# step time within 0.1 %); then DenseLm128B32x32 with 128 layers against 64
# (target: <= 1.2x the time). Figures only: nothing is asserted. On a machine
# shared with other jobs the wall time follows the load; the CPU time
# (user + system) does not.
set -u
: "${PODSIM:?}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run NAME ARGS...: podsim run --json into $TMP/NAME.json, its
# "wall cpu rss_kib" into $TMP/NAME.time
run () {
  name=$1; shift
  /usr/bin/env time -f "%e %U %S %M" -o "$TMP/$name.t" "$PODSIM" run -q --json "$@" \
    >"$TMP/$name.json" 2>"$TMP/$name.err" || { echo "  $name failed: $(head -1 "$TMP/$name.err")"; return 1; }
  awk '{ printf "%.2f %.2f %d\n", $1, $2 + $3, $4 }' "$TMP/$name.t" >"$TMP/$name.time"
}
field () { sed -n "s/.*\"$2\" : \\([0-9.e+-]*\\).*/\\1/p" "$TMP/$1.json" | head -1; }

echo "bench_loops: podsim run --preset P (loop) and --preset P --unroll"
printf '  %-18s %8s %8s %9s  %11s %11s %8s  %9s %9s\n' preset wall_s cpu_s rss_MiB \
  step_loop_s step_unr_s diff_% hbm_loop hbm_unr
for p in DenseLm128B8x8 DenseLm128B16x16 DenseLm128B32x32 DenseLm175B32x32; do
  run "$p" --preset "$p" || continue
  run "$p.u" --preset "$p" --unroll || continue
  read -r wall cpu rss <"$TMP/$p.time"
  a=$(field "$p" step_time_s); b=$(field "$p.u" step_time_s)
  ha=$(field "$p" peak_hbm_bytes); hb=$(field "$p.u" peak_hbm_bytes)
  awk -v p="$p" -v w="$wall" -v c="$cpu" -v r="$rss" -v a="$a" -v b="$b" -v ha="$ha" -v hb="$hb" 'BEGIN {
    printf "  %-18s %8.2f %8.2f %9.1f  %11.6f %11.6f %8.3f  %8.2fG %8.2fG\n", p, w, c, r / 1024,
           a, b, 100 * (a - b) / b, ha / 2^30, hb / 2^30 }'
done
read -r w64 c64 r64 <"$TMP/DenseLm128B32x32.time"
if run L128 --preset DenseLm128B32x32 --layers 128; then
  read -r w128 c128 r128 <"$TMP/L128.time"
  awk -v w64="$w64" -v c64="$c64" -v w128="$w128" -v c128="$c128" 'BEGIN {
    printf "  DenseLm128B32x32, 128 layers against 64: wall %.2f / %.2f s = %.2fx, CPU %.2f / %.2f s = %.2fx\n",
           w128, w64, w128 / w64, c128, c64, c128 / c64 }'
fi
echo "bench_loops: done"
