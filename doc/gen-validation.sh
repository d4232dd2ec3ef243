#!/bin/sh
# Regenerates the tables in doc/validation.md from `podsim tables NAME
# --markdown`: between <!-- table:begin --> and <!-- table:end --> the dense
# table, between <!-- NAME:begin --> and <!-- NAME:end --> table NAME.
# NAME `sensitivity` is the dense rows' simulated/published with one
# unpublished constant or one modelling choice changed at a time (about a
# minute of CPU here); `moe-sensitivity` the MoE rows' all-to-all share and
# step with the choices that move all-to-alls (about a minute).
# Usage: doc/gen-validation.sh [PODSIM [NAME...]] (default: dense; the
# pipeline table takes about 5 minutes, bubble half a minute, spatial under 10 s,
# speech 1.5 to 4 minutes).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
podsim=${1:-$here/../build/podsim}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- dense
doc=$here/validation.md
ini=$here/../topology/tpu-v3.ini
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
table=$tmp/table

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

# row LABEL ARGS...: "| LABEL | ratio | ratio ... |" of `podsim tables dense ARGS`
row () {
  label=$1; shift
  "$podsim" tables dense --csv "$@" > "$tmp/csv"
  awk -F, -v l="$label" 'NR > 1 { r = r sprintf(" | %.2f", $NF) } END { print "| " l r " |" }' "$tmp/csv"
}

sensitivity () {
  "$podsim" tables dense --csv > "$tmp/csv"
  awk -F, 'NR > 1 { h = h " | " $1; d = d "|---" }
    END { print "| variant (simulated/published)" h " |"; print "|---" d "|" }' "$tmp/csv"
  row "defaults: on-chip 82 GB/s and 1 us, ICI hop 1 us, launch 1 us, per op 1 us, torus2d, xla"
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
    row "collective launch $(echo "$o" | awk '{ printf "%g", $1 * 1e6 }') us" \
      --hw "$(hw overhead collective_launch_s "$o")"
  done
  for o in 0 2e-6; do
    row "per-op overhead $(echo "$o" | awk '{ printf "%g", $1 * 1e6 }') us" --hw "$(hw overhead per_op_s "$o")"
  done
  for s in sync xla-all eager; do
    row "--schedule $s" --schedule "$s"
  done
  row "--collectives dim-by-dim" --collectives dim-by-dim
  row "ICI link 65.6 GB/s (656 Gbit/s as an 8b/10b line rate)" --hw "$(hw ici link_bw_bytes_per_s 65.6e9)"
  row "ICI link 100 GB/s (the JAX scaling book's v3 one-way figure)" --hw "$(hw ici link_bw_bytes_per_s 100e9)"
  for n in 1 16; do
    row "transcendental $n vector ops" --hw "$(hw vector transcendental_ops "$n")"
  done
  row "MXU weights not double-buffered" --hw "$(hw mxu weight_double_buffered false)"
}

# moe_row LABEL ARGS...: "| LABEL | share / step | ... | 2048 vs 32 |" of
# `podsim tables moe ARGS`: each row's all-to-all share and step time, and
# the GSPMD series' MoE2048E36L step over GspmdMoE32E's
moe_row () {
  label=$1; shift
  "$podsim" tables moe --csv "$@" > "$tmp/csv"
  awk -F, -v l="$label" 'NR > 1 { r = r sprintf(" | %.1f %% / %.3f s", 100 * $8, $5)
                                  if ($1 == "MoE2048E36L") g = sprintf("%.2f", $16) }
    END { print "| " l r " | " g " |" }' "$tmp/csv"
}

moe_sensitivity () {
  "$podsim" tables moe --csv > "$tmp/csv"
  awk -F, 'NR > 1 { h = h " | " $1; d = d "|---" }
    END { print "| variant (all-to-all share / step)" h " | MoE2048E36L vs GspmdMoE32E (published 1.54) |"
          print "|---" d "|---|" }' "$tmp/csv"
  moe_row "defaults: all-to-all straight along each dimension (torus2d)"
  moe_row "--collectives torus2d-wrap-a2a (through the wrap links)" --collectives torus2d-wrap-a2a
  moe_row "--collectives torus2d-staged-a2a (staged per dimension, x then y)" --collectives torus2d-staged-a2a
  moe_row "ICI link 65.6 GB/s" --hw "$(hw ici link_bw_bytes_per_s 65.6e9)"
  moe_row "ICI link 100 GB/s" --hw "$(hw ici link_bw_bytes_per_s 100e9)"
  moe_row "ICI hop latency 2 us" --hw "$(hw ici hop_latency_s 2e-6)"
  moe_row "collective launch 5 us" --hw "$(hw overhead collective_launch_s 5e-6)"
}

for name in "$@"; do
  marker=$name
  [ "$name" = dense ] && marker=table
  if [ "$name" = sensitivity ]; then
    sensitivity > "$table"
  elif [ "$name" = moe-sensitivity ]; then
    moe_sensitivity > "$table"
  else
    "$podsim" tables "$name" --markdown > "$table"
  fi
  awk -v t="$table" -v m="$marker" '
    $0 == "<!-- " m ":begin -->" { print; while ((getline line < t) > 0) print line; skip = 1; next }
    $0 == "<!-- " m ":end -->" { skip = 0 }
    !skip { print }
  ' "$doc" > "$table.new"
  mv "$table.new" "$doc"
  echo "updated $doc ($name)"
done
