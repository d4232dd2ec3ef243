#!/bin/sh
# Golden outputs: podsim's end-to-end results must stay byte-identical unless
# a change means to alter them. Compared here:
#   dense_spmd.hlo        the SPMD program of a small dense model (run --layers 1)
#   dense_trace.txt       `trace check` summary of that model's step trace
#   simulate_example.json `simulate --json` of tests/data/traces/example.pst
#   tables_dense.csv      `tables dense --csv` of the smallest preset
# When a change is meant to alter them, regenerate and commit the new files
# (review the diff first):
#   make golden                        (in a build directory), or
#   PODSIM=build/podsim PS_SRCDIR=. sh tests/golden.sh --update
. "$PS_SRCDIR/tests/lib.sh"
golden="$PS_SRCDIR/tests/data/golden"
update=no
[ "${1:-}" = "--update" ] && update=yes

# Relative names only: outputs must not depend on where the test runs.
case $PODSIM in /*) ;; *) PODSIM=$(pwd)/$PODSIM ;; esac
golden=$(cd "$golden" && pwd)
example=$(cd "$PS_SRCDIR/tests/data/traces" && pwd)/example.pst
cd "$PS_TMP" || exit 1
mkdir new
expect_status 0 "$PODSIM" run -q --layers 1 --dump-spmd new/dense_spmd.hlo --trace dense.pst.gz
expect_status 0 "$PODSIM" trace check dense.pst.gz
cp "$PS_TMP/out" new/dense_trace.txt
cp "$example" example.pst
expect_status 0 "$PODSIM" simulate example.pst --slice v3-8 --json
cp "$PS_TMP/out" new/simulate_example.json
expect_status 0 "$PODSIM" tables dense --csv --only DenseLm128B8x8
cp "$PS_TMP/out" new/tables_dense.csv

for f in dense_spmd.hlo dense_trace.txt simulate_example.json tables_dense.csv; do
  [ -s "new/$f" ] || { fail "$f: no output"; continue; }
  if [ "$update" = yes ]; then
    if ! cmp -s "new/$f" "$golden/$f"; then cp "new/$f" "$golden/$f"; echo "golden: updated $f"; fi
  elif [ ! -f "$golden/$f" ]; then
    fail "$f: no golden file (make golden writes it)"
  elif ! cmp -s "$golden/$f" "new/$f"; then
    fail "$f differs from tests/data/golden/$f (if intended: make golden)"
    diff "$golden/$f" "new/$f" | head -20 | sed 's/^/  | /' >&2
  fi
done
finish
