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
