#!/bin/sh
# Malformed StableHLO that once leaked (fuzz_hlo findings) is refused with a
# located error and, under valgrind, frees everything it read: the test suite
# runs ASan with detect_leaks=0 (Makefile.am), so leaks need their own check.
# Skipped (77) where valgrind is absent or podsim is a sanitizer build.
. "$PS_SRCDIR/tests/lib.sh"
cd "$PS_SRCDIR/tests/data/bad" || exit 1
# leak_result_attr.mlir: the second result's attribute dict fails after its
# mhlo.sharding was read (128 bytes lost in sl_attr_dict, session 5).
refused "leak_result_attr.mlir:1:101: expected '}' to close the attributes" \
  "$PODSIM" hlo leak_result_attr.mlir
command -v valgrind >/dev/null 2>&1 || { echo "no valgrind: leak part skipped"; [ "$ps_failures" = 0 ] && exit 77; finish; }
valgrind --version >/dev/null 2>&1 || exit 77
# A sanitizer build cannot run under valgrind.
nm "$PODSIM" 2>/dev/null | grep -q __asan_init && { [ "$ps_failures" = 0 ] && exit 77; finish; }
for f in leak_*.mlir; do
  valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \
    "$PODSIM" hlo "$f" >"$PS_TMP/out" 2>"$PS_TMP/err"; st=$?
  [ "$st" = 99 ] && { fail "$f: valgrind reports a definite leak"; grep "definitely lost" "$PS_TMP/err" | head -3 >&2; }
  [ "$st" = 2 ] || [ "$st" = 99 ] || fail "$f: exit status $st under valgrind, expected 2"
done
finish
