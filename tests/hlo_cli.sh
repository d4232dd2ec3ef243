#!/bin/sh
# podsim hlo on good input: help, the bundled example, standard input, and
# the printed text reading back to the same bytes.
. "$PS_SRCDIR/tests/lib.sh"
ex="$PS_SRCDIR/examples/transformer_layer.hlo"
expect_status 0 "$PODSIM" hlo --help
expect_grep "Usage:" "$PS_TMP/out"
expect_status 2 "$PODSIM" hlo
expect_status 2 "$PODSIM" hlo "$PS_TMP/no-such-file.hlo"
expect_status 2 "$PODSIM" hlo --no-such-option "$ex"

expect_status 0 "$PODSIM" hlo "$ex"
cp "$PS_TMP/out" "$PS_TMP/first.hlo"
expect_grep "ENTRY %" "$PS_TMP/first.hlo"
expect_grep "sharding={devices=[2,1,4]" "$PS_TMP/first.hlo"
# Fixed point: reading the canonical text back prints the same bytes.
"$PODSIM" hlo - <"$PS_TMP/first.hlo" >"$PS_TMP/second.hlo" 2>"$PS_TMP/err" || fail "reprint failed"
cmp -s "$PS_TMP/first.hlo" "$PS_TMP/second.hlo" || fail "printing is not a fixed point"
# The annotated tensors of the example: exactly eight carry a sharding.
[ "$(grep -c 'sharding=' "$PS_TMP/first.hlo")" = 8 ] || fail "example does not have its 8 annotated tensors"
expect_status 0 "$PODSIM" hlo --no-shardings "$ex"
grep -q 'sharding=' "$PS_TMP/out" && fail "--no-shardings kept a sharding"
finish
