#!/bin/sh
# Regenerates the simulated-vs-published tables in doc/validation.md from
# `podsim tables dense --markdown` (between <!-- table:begin/end -->) and
# `podsim tables moe --markdown` (<!-- moe-table:begin/end -->).
# Usage: doc/gen-validation.sh [PODSIM] [TABLE...]   (default: dense moe)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
podsim=${1:-$here/../build/podsim}
[ $# -gt 0 ] && shift
tables=${*:-dense moe}
doc=$here/validation.md
table=$(mktemp)
trap 'rm -f "$table" "$table.new"' EXIT
for t in $tables; do
  case $t in
    dense) marker=table ;;
    *) marker=$t-table ;;
  esac
  "$podsim" tables "$t" --markdown > "$table"
  awk -v t="$table" -v b="<!-- $marker:begin -->" -v e="<!-- $marker:end -->" '
    $0 == b { print; while ((getline line < t) > 0) print line; skip = 1; next }
    $0 == e { skip = 0 }
    !skip { print }
  ' "$doc" > "$table.new"
  mv "$table.new" "$doc"
done
echo "updated $doc"
