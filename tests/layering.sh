#!/bin/sh
# The layering test: every #include "..." of the tree against the floor table
# of doc/architecture.md (between <!-- floors:begin --> and <!-- floors:end -->)
# and the private-header rule. Prints one line per violation
#   FILE:LINE: includes HEADER: why
# and exits 1 if there is any. Usage: tests/layering.sh [ROOT]  (default: the
# source tree, $PS_SRCDIR under make check). tests/layering_selftest.sh runs it
# on fixture trees to show it fails where it should.
set -u
root=${1:-${PS_SRCDIR:-$(dirname "$0")/..}}
map="$root/doc/architecture.md"
[ -f "$map" ] || { echo "layering: $map not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The table, as lines "FLOOR FOLDER ALLOWED..." (backquotes and pipes dropped).
sed -n '/<!-- floors:begin -->/,/<!-- floors:end -->/p' "$map" \
  | awk -F'|' 'NF >= 4 && $2 ~ /^ *[0-9]+ *$/ {
      gsub(/`/, "", $3); gsub(/`/, "", $4); print $2 + 0, $3, $4 }' \
  | awk '{ $1 = $1; print }' > "$tmp/table"
[ -s "$tmp/table" ] || { echo "layering: no floor table in $map" >&2; exit 2; }

# Every include of every C file: "FILE LINE HEADER" (not under tests/data/,
# which holds fixtures and data, nor build directories).
( cd "$root" && find . \( -path ./tests/data -o -path './build*' -o -path ./.git \) -prune \
    -o -type f \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort | while read -r f; do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" \
      | sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/' | sed "s|^|$f |"
    echo "$f 0 -"
  done ) > "$tmp/includes"

awk -v TABLE="$tmp/table" '
  function folder(path) { sub(/[^\/]*$/, "", path); return path }
  # The table row a folder belongs to: itself or its nearest listed parent.
  function owner(dir,   t, best) {
    best = ""
    for (t in floor) if (index(dir, t) == 1 && length(t) > length(best)) best = t
    return best
  }
  function base(path) { sub(/.*\//, "", path); return path }
  BEGIN {
    bad = 0
    while ((getline line < TABLE) > 0) {
      n = split(line, f, " ")
      floor[f[2]] = f[1]
      allowed[f[2]] = ""
      for (i = 3; i <= n; i++) allowed[f[2]] = allowed[f[2]] " " f[i]
      order[++rows] = f[2]
    }
    # The table itself: a folder may include only lower floors.
    for (r = 1; r <= rows; r++) {
      d = order[r]; n = split(allowed[d], a, " ")
      for (i = 1; i <= n; i++) {
        if (a[i] == "*") continue
        if (!(a[i] in floor)) { printf "doc/architecture.md: %s may include %s, which is not in the table\n", d, a[i]; bad = 1 }
        else if (floor[a[i]] >= floor[d]) { printf "doc/architecture.md: %s (floor %d) may include %s (floor %d), not lower\n", d, floor[d], a[i], floor[a[i]]; bad = 1 }
      }
    }
  }
  {
    file = $1; line = $2; inc = $3
    src = owner(folder(file))
    if (src == "") {
      if (!(folder(file) in reported)) { print folder(file) ": code in a folder that doc/architecture.md does not place on a floor"; bad = 1 }
      reported[folder(file)] = 1
      next
    }
    if (inc == "-" || inc == "config.h") next
    dst = owner(folder(inc)); name = base(inc)
    where = file ":" line ": includes " inc ": "
    # folder_private.h: shared by the files of its own folder only.
    if (name == "folder_private.h") {
      if (folder(inc) != folder(file)) { print where "private to the files of " folder(inc); bad = 1 }
      next
    }
    if (name ~ /_private\.h$/) {
      stem = name; sub(/_private\.h$/, "", stem)
      if (folder(inc) != folder(file) || index(base(file), stem) != 1) {
        print where "private to " folder(inc) stem "*.c"; bad = 1
      }
      next
    }
    if (name ~ /[-_]internal\.h$|-private\.h$/) { print where "a private header is named <module>_private.h"; bad = 1; next }
    if (dst == src) next
    if (dst == "") { print where "not in a folder of the floor table"; bad = 1; next }
    ok = 0; n = split(allowed[src], a, " ")
    for (i = 1; i <= n; i++)
      if (a[i] == dst || (a[i] == "*" && floor[dst] < floor[src])) ok = 1
    if (!ok) {
      printf "%s%s (floor %d) may not include %s (floor %d)\n", where, src, floor[src], dst, floor[dst]
      bad = 1
    }
  }
  END { exit bad }
' "$tmp/includes"
