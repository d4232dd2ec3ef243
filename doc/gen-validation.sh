#!/bin/sh
# Regenerates the simulated-vs-published table in doc/validation.md from
# `podsim tables dense --markdown`. Usage: doc/gen-validation.sh [PODSIM]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
podsim=${1:-$here/../build/podsim}
doc=$here/validation.md
table=$(mktemp)
trap 'rm -f "$table" "$table.new"' EXIT
"$podsim" tables dense --markdown > "$table"
awk -v t="$table" '
  /<!-- table:begin -->/ { print; while ((getline line < t) > 0) print line; skip = 1; next }
  /<!-- table:end -->/ { skip = 0 }
  !skip { print }
' "$doc" > "$table.new"
mv "$table.new" "$doc"
echo "updated $doc"
