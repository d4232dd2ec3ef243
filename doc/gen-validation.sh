#!/bin/sh
# Regenerates the tables in doc/validation.md from `podsim tables NAME
# --markdown`: between <!-- table:begin --> and <!-- table:end --> the dense
# table, between <!-- NAME:begin --> and <!-- NAME:end --> table NAME.
# Usage: doc/gen-validation.sh [PODSIM [NAME...]] (default: dense; the
# pipeline table takes about 5 minutes, bubble half a minute, spatial 7 s,
# speech about 4 minutes).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
podsim=${1:-$here/../build/podsim}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- dense
doc=$here/validation.md
table=$(mktemp)
trap 'rm -f "$table" "$table.new"' EXIT
for name in "$@"; do
  marker=$name
  [ "$name" = dense ] && marker=table
  "$podsim" tables "$name" --markdown > "$table"
  awk -v t="$table" -v m="$marker" '
    $0 == "<!-- " m ":begin -->" { print; while ((getline line < t) > 0) print line; skip = 1; next }
    $0 == "<!-- " m ":end -->" { skip = 0 }
    !skip { print }
  ' "$doc" > "$table.new"
  mv "$table.new" "$doc"
  echo "updated $doc ($name)"
done
