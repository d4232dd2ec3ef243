# Helpers for end-to-end test scripts. Source it: . "$PS_SRCDIR/tests/lib.sh"
set -u
: "${PODSIM:?PODSIM must point to the podsim binary}"
: "${PS_SRCDIR:?}"
PS_TMP=$(mktemp -d)
trap 'rm -rf "$PS_TMP"' EXIT
ps_failures=0
fail () { echo "FAIL: $*" >&2; ps_failures=$((ps_failures + 1)); }
# expect_status WANT CMD...: runs CMD, checks its exit status.
expect_status () {
  want=$1; shift
  "$@" >"$PS_TMP/out" 2>"$PS_TMP/err"; got=$?
  if [ "$got" != "$want" ]; then
    fail "'$*' exited $got, expected $want"; sed 's/^/  | /' "$PS_TMP/err" | head -5 >&2
  fi
}
# expect_grep PATTERN FILE: FILE contains PATTERN (fixed string).
expect_grep () {
  grep -qF -- "$1" "$2" || { fail "'$2' lacks '$1'"; sed 's/^/  | /' "$2" | head -5 >&2; }
}
finish () { [ "$ps_failures" = 0 ] && exit 0 || exit 1; }
# A 1 GiB address-space limit (the sanitizer build cannot start under one:
# then none), so that a large allocation fails a test.
ps_limit=""
sh -c "ulimit -v 1048576 && \"\$1\" --version" sh "$PODSIM" >/dev/null 2>&1 && ps_limit="ulimit -v 1048576;"
# refused WANT-SUBSTRING CMD...: exit 2, exactly one line on stderr holding
# WANT, nothing on stdout; a guard (not a measurement) stops a hang.
refused () {
  want=$1; shift
  sh -c "$ps_limit exec timeout 120 \"\$@\"" sh "$@" >"$PS_TMP/out" 2>"$PS_TMP/err"; st=$?
  [ "$st" = 2 ] || fail "'$*' exited $st, expected 2"
  [ "$(wc -l <"$PS_TMP/err")" = 1 ] || { fail "'$*': stderr is not one line"; head -3 "$PS_TMP/err" >&2; }
  expect_grep "$want" "$PS_TMP/err"
  [ -s "$PS_TMP/out" ] && fail "'$*' wrote to standard output"
}
