#!/bin/sh
# Ctrl-C of a sweep (issue 27): a terminal's Ctrl-C sends SIGINT to the
# whole process group. The sweep runs in its own group (setsid) and the
# group is signalled a few seconds in, while children simulate: no row may
# come from an interrupted child, the message's count must be the rows
# kept, no child may outlive the sweep, and --resume must finish the grid
# with the rows an uninterrupted sweep writes. Then --resume's own checks:
# rows that are no result run again; ids other than integers are refused.
. "$PS_SRCDIR/tests/lib.sh"
cd "$PS_TMP" || exit 1
command -v setsid >/dev/null 2>&1 || { echo "SKIP: no setsid"; exit 77; }

# The group is signalled when the k-th row is out (so on a slow or a fast
# machine alike, while later children run: with -j 2 two always do; most
# of a child's time is the SimGrid replay, where SimGrid's own SIGINT
# handler exits with status 1).
grid="--preset DenseLm128B8x8 --vary layers=32,64 --vary mesh=4x32,8x16,2x64,16x8,32x4"
mkdir tmp
expect_status 0 env TMPDIR="$PS_TMP/tmp" "$PODSIM" sweep $grid -j 2 -q -o full.jsonl
[ "$(wc -l <full.jsonl)" = 10 ] || fail "the uninterrupted sweep has $(wc -l <full.jsonl) rows, not 10"

n_interrupted=0
for k in 1 3 5 7; do
  rm -f rows.jsonl
  TMPDIR="$PS_TMP/tmp" setsid "$PODSIM" sweep $grid -j 2 -o rows.jsonl 2>sweep.err &
  pid=$!
  i=0
  while [ "$(cat rows.jsonl 2>/dev/null | wc -l)" -lt "$k" ] && [ $i -lt 1200 ]; do
    sleep 0.05; i=$((i + 1))
  done
  env kill -s INT -- "-$pid"   # the external kill: dash's takes no negative pid
  wait "$pid"; rc=$?
  [ "$rc" != 0 ] && n_interrupted=$((n_interrupted + 1))
  [ -f rows.jsonl ] || { fail "after row $k: no rows.jsonl"; continue; }
  rows=$(wc -l <rows.jsonl)
  if grep -q 'without a result\|killed by signal' rows.jsonl; then
    fail "after row $k: an interrupted child was kept as a row:"
    grep 'without a result\|killed by signal' rows.jsonl | sed 's/^/  | /' >&2
  fi
  # Nothing else may be wrong with the rows kept: they are the full run's first ones.
  head -n "$rows" full.jsonl | cmp -s - rows.jsonl || fail "after row $k: the rows kept differ from the full run's"
  if [ "$rc" != 0 ]; then
    [ "$rc" = 130 ] || fail "after row $k: exit status $rc, expected 130 (SIGINT)"
    expect_grep "sweep interrupted by signal 2 (Interrupt): $rows of 10 configurations have a row in rows.jsonl; --resume continues" sweep.err
  fi
  # No child outlives the sweep (they run in their own process groups).
  sleep 0.5
  if pgrep -f "$PS_TMP/tmp/podsim-sweep" >/dev/null 2>&1; then
    fail "after row $k: children of the sweep still run"
    pkill -TERM -f "$PS_TMP/tmp/podsim-sweep"
  fi
  expect_status 0 env TMPDIR="$PS_TMP/tmp" "$PODSIM" sweep $grid -j 2 -q -o rows.jsonl --resume
  cmp -s rows.jsonl full.jsonl || fail "after row $k: the resumed sweep differs from the uninterrupted one"
done

[ "$n_interrupted" -ge 2 ] || fail "only $n_interrupted of 4 sweeps were interrupted before their end"

# --resume runs a row that is no result again (and every row after it):
# an interrupted child's error as an older podsim recorded it, or a row
# with neither figures nor an error.
small="--vary mesh=2x4,4x2 --vary microbatches=1,4 --layers 1"
expect_status 0 "$PODSIM" sweep $small -q -o small.jsonl
expect_status 0 "$PODSIM" sweep $small -q -o small.csv
sed '2s/"error":null/"error":"exit status 1 without a result"/; 2s/"fits":true/"fits":null/' small.jsonl >bad.jsonl
grep -q 'exit status 1 without a result' bad.jsonl || fail "the test's edit did not apply"
expect_status 0 "$PODSIM" sweep $small -q -o bad.jsonl --resume
expect_grep "bad.jsonl:2: row 1 is no result (its error 'exit status 1 without a result' is an interruption's)" "$PS_TMP/err"
cmp -s bad.jsonl small.jsonl || fail "--resume kept an interrupted row"
sed '3s/,dense[^,]*,true,.*/,,,,,,,,,,,,,killed by signal 15/' small.csv >bad.csv
expect_status 0 "$PODSIM" sweep $small -q -o bad.csv --resume
expect_grep "bad.csv:3: row 1 is no result" "$PS_TMP/err"
cmp -s bad.csv small.csv || fail "--resume kept a CSV row of a killed child"
head -1 small.jsonl | sed 's/"fits":true/"fits":null/; s/"model":"[^"]*"/"model":null/' >empty.jsonl
expect_status 0 "$PODSIM" sweep $small -q -o empty.jsonl --resume
expect_grep "row 0 is no result (it has neither a result nor an error)" "$PS_TMP/err"
cmp -s empty.jsonl small.jsonl || fail "--resume kept a row without a result"
# Ids are integers, as the sweep writes them.
for id in '"0"' '0.5' 'true' '-1'; do
  head -1 small.jsonl | sed "s/{\"id\":0,/{\"id\":$id,/" >id.jsonl
  expect_status 2 "$PODSIM" sweep $small -q -o id.jsonl --resume
  expect_grep "id.jsonl:1 is not row 0 of this sweep: not a row of this study" "$PS_TMP/err"
done
# A deeply nested row is refused before json-glib recurses into it.
{ printf '{"id":0,"inputs":{"mesh":"2x4","microbatches":"1"},"x":'
  head -c 100000 /dev/zero | tr '\0' '['; echo; } >deep.jsonl
expect_status 2 "$PODSIM" sweep $small -q -o deep.jsonl --resume
expect_grep "deep.jsonl:1 is not row 0 of this sweep: JSON nested more than" "$PS_TMP/err"
finish
