#!/bin/sh
# Every malformed HLO file tests/data/bad/bad_*.hlo makes `podsim hlo` print
# exactly the one error line in its sidecar bad_*.hlo.err (after "podsim: "),
# exit with status 2 and write nothing on standard output.
. "$PS_SRCDIR/tests/lib.sh"
cd "$PS_SRCDIR/tests/data/bad" || exit 1
n=0
for f in bad_*.hlo; do
  n=$((n + 1))
  if [ ! -f "$f.err" ]; then fail "$f has no $f.err"; continue; fi
  "$PODSIM" hlo "$f" >"$PS_TMP/out" 2>"$PS_TMP/err"; rc=$?
  [ "$rc" = 2 ] || fail "$f: exit status $rc, expected 2"
  [ -s "$PS_TMP/out" ] && fail "$f: wrote to standard output"
  [ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "$f: stderr is not exactly one line"
  want="podsim: $(cat "$f.err")"
  got=$(cat "$PS_TMP/err")
  [ "$got" = "$want" ] || fail "$f: got '$got', want '$want'"
done
# Standard input is named <stdin> in the message.
"$PODSIM" hlo - <bad_unknown_opcode.hlo >"$PS_TMP/out" 2>"$PS_TMP/err"; rc=$?
[ "$rc" = 2 ] || fail "stdin: exit status $rc, expected 2"
expect_grep "podsim: <stdin>:5:19: unknown opcode 'addd'" "$PS_TMP/err"
[ "$n" -ge 15 ] || fail "only $n malformed HLO files"
finish
