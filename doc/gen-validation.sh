#!/bin/sh
# Regenerates the generated tables of doc/validation.md:
#   <!-- table:begin/end -->        `podsim tables dense --markdown` (defaults)
#   <!-- sensitivity:begin/end -->  simulated/published of every row with one
#                                   unpublished constant or one modelling
#                                   choice changed at a time
# Usage: doc/gen-validation.sh [PODSIM]   (about 15 minutes of CPU here)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
podsim=${1:-$here/../build/podsim}
doc=$here/validation.md
ini=$here/../topology/tpu-v3.ini
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$podsim" tables dense --markdown > "$tmp/table"

# hw SECTION KEY VALUE: a copy of the hardware file with one value changed
hw () {
  out="$tmp/hw.$1.$2.$3.ini"
  awk -v s="[$1]" -v k="$2" -v v="$3" '
    /^\[/ { sec = $0 }
    sec == s && $1 == k && $2 == "=" { print k " = " v; next }
    { print }' "$ini" > "$out"
  grep -q "^$2 = $3\$" "$out" || { echo "gen-validation: no $2 in [$1]" >&2; exit 1; }
  echo "$out"
}

# row LABEL ARGS...: one line "LABEL | r1 | r2 | ..." of `podsim tables dense ARGS`
row () {
  label=$1; shift
  "$podsim" tables dense --csv "$@" > "$tmp/csv"
  awk -F, -v l="$label" 'NR > 1 { r = r sprintf(" | %.2f", $NF) } END { print "| " l r " |" }' "$tmp/csv"
}

{
  "$podsim" tables dense --csv > "$tmp/csv"
  awk -F, 'NR == 1 { next } { h = h " | " $1; d = d "|---" } END { print "| variant" h " |"; print "|---" d "|" }' "$tmp/csv"
  row "defaults (on-chip 82 GB/s, 1 us; hop 1 us; launch 1 us; per op 1 us; torus2d; xla)"
  for bw in 41e9 164e9 450e9; do
    row "on-chip link $(echo "$bw" | awk '{ printf "%g", $1 / 1e9 }') GB/s" --hw "$(hw onchip bw_bytes_per_s "$bw")"
  done
  for lat in 1e-7 3e-6; do
    row "on-chip latency $(echo "$lat" | awk '{ printf "%g", $1 * 1e6 }') us" --hw "$(hw onchip latency_s "$lat")"
  done
  for lat in 5e-7 2e-6; do
    row "ICI hop latency $(echo "$lat" | awk '{ printf "%g", $1 * 1e6 }') us" --hw "$(hw ici hop_latency_s "$lat")"
  done
  for o in 0 5e-6; do
    row "collective launch $(echo "$o" | awk '{ printf "%g", $1 * 1e6 }') us" --hw "$(hw overhead collective_launch_s "$o")"
  done
  for o in 0 2e-6; do
    row "per-op overhead $(echo "$o" | awk '{ printf "%g", $1 * 1e6 }') us" --hw "$(hw overhead per_op_s "$o")"
  done
  for s in sync xla-all eager; do
    row "--schedule $s" --schedule "$s"
  done
  row "--collectives dim-by-dim" --collectives dim-by-dim
} > "$tmp/sens"

awk -v t="$tmp/table" -v s="$tmp/sens" '
  /<!-- table:begin -->/ { print; while ((getline line < t) > 0) print line; skip = 1; next }
  /<!-- sensitivity:begin -->/ { print; while ((getline line < s) > 0) print line; skip = 1; next }
  /<!-- table:end -->/ || /<!-- sensitivity:end -->/ { skip = 0 }
  !skip { print }
' "$doc" > "$tmp/doc"
mv "$tmp/doc" "$doc"
echo "updated $doc"
