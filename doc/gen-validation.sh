#!/bin/sh
# Regenerates the tables in doc/validation.md from `podsim tables NAME
# --markdown`: between <!-- table:begin --> and <!-- table:end --> the dense
# table, between <!-- NAME:begin --> and <!-- NAME:end --> table NAME.
# NAME `sensitivity` is the dense rows' simulated/published with one
# unpublished constant or one modelling choice changed at a time (about a
# minute of CPU here).
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
}

for name in "$@"; do
  marker=$name
  [ "$name" = dense ] && marker=table
  if [ "$name" = sensitivity ]; then
    sensitivity > "$table"
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
