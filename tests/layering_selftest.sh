#!/bin/sh
# A test of the layering test (tests/layering.sh): it passes on a clean
# fixture tree (tests/data/layering/) and fails, naming the file, line and
# rule, on each kind of bad include planted in a copy; and it fails on a copy
# of the real tree with one include that goes up a floor.
set -u
: "${PS_SRCDIR:=$(dirname "$0")/..}"
check="$PS_SRCDIR/tests/layering.sh"
fixture="$PS_SRCDIR/tests/data/layering"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail () { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

fresh () { rm -rf "$tmp/t"; cp -R "$fixture" "$tmp/t"; }
# expect WANT_STATUS WANT_TEXT: runs the check on $tmp/t.
expect () {
  sh "$check" "$tmp/t" > "$tmp/out" 2>&1; got=$?
  [ "$got" = "$1" ] || { fail "$2: exit $got, expected $1"; sed 's/^/  | /' "$tmp/out" >&2; }
  [ -z "$2" ] || grep -qF -- "$2" "$tmp/out" || { fail "output lacks '$2'"; sed 's/^/  | /' "$tmp/out" >&2; }
}

fresh; expect 0 ""

fresh; printf '#include "mid/m.h"\n' > "$tmp/t/low/up.c"
expect 1 "low/up.c:1: includes mid/m.h: low/ (floor 0) may not include mid/ (floor 1)"

fresh; printf '#include "low/a.h"\n#include "mid/m_private.h"\n' > "$tmp/t/high/peek.c"
expect 1 "high/peek.c:2: includes mid/m_private.h: private to mid/m*.c"

fresh; printf '#include "mid/m_private.h"\n' > "$tmp/t/mid/other.c"
expect 1 "mid/other.c:1: includes mid/m_private.h: private to mid/m*.c"

# folder_private.h: any file of its folder may include it, no other folder.
fresh; printf '/* */\n' > "$tmp/t/mid/folder_private.h"; printf '#include "mid/folder_private.h"\n' > "$tmp/t/mid/other.c"
expect 0 ""
fresh; printf '/* */\n' > "$tmp/t/mid/folder_private.h"; printf '#include "low/a.h"\n#include "mid/folder_private.h"\n' > "$tmp/t/high/peek.c"
expect 1 "high/peek.c:2: includes mid/folder_private.h: private to the files of mid/"

fresh; printf '/* */\n' > "$tmp/t/mid/m_internal.h"; printf '#include "mid/m_internal.h"\n' > "$tmp/t/mid/m2.c"
expect 1 "mid/m2.c:1: includes mid/m_internal.h: a private header is named <module>_private.h"

fresh; mkdir "$tmp/t/side"; printf '#include "low/a.h"\n' > "$tmp/t/side/s.c"
expect 1 "side/: code in a folder that doc/architecture.md does not place on a floor"

fresh; sed -i 's/| 1 | `mid\/` | `low\/` |/| 1 | `mid\/` | `low\/` `high\/` |/' "$tmp/t/doc/architecture.md"
expect 1 "doc/architecture.md: mid/ (floor 1) may include high/ (floor 2), not lower"

# The real tree passes; a copy with partitioner/ir including models/ fails.
sh "$check" "$PS_SRCDIR" > "$tmp/out" 2>&1 || { fail "the source tree breaks its layering:"; cat "$tmp/out" >&2; }
mkdir -p "$tmp/real"
( cd "$PS_SRCDIR" && find . \( -path ./tests/data -o -path './build*' -o -path ./.git \) -prune \
    -o -type f \( -name '*.c' -o -name '*.h' -o -path ./doc/architecture.md \) -print ) \
  | ( cd "$PS_SRCDIR" && while read -r f; do mkdir -p "$tmp/real/$(dirname "$f")"; cp "$f" "$tmp/real/$f"; done )
printf '#include "models/net.h"\n' >> "$tmp/real/partitioner/ir/ir.c"
sh "$check" "$tmp/real" > "$tmp/out" 2>&1 && fail "a partitioner/ir -> models include passed"
grep -qF "partitioner/ir/ir.c" "$tmp/out" && grep -qF "includes models/net.h: partitioner/ir/ (floor 2) may not include models/ (floor 5)" "$tmp/out" \
  || { fail "wrong message for the planted include"; cat "$tmp/out" >&2; }

[ "$failures" = 0 ]
