#!/bin/sh
# The podsim command's own behaviour: help, version, unknown commands.
. "$PS_SRCDIR/tests/lib.sh"
expect_status 0 "$PODSIM" --help
expect_grep "Usage: podsim COMMAND" "$PS_TMP/out"
expect_status 0 "$PODSIM" --version
expect_grep "podsim " "$PS_TMP/out"
expect_status 2 "$PODSIM"
expect_status 2 "$PODSIM" no-such-command
expect_grep "unknown command 'no-such-command'" "$PS_TMP/err"
finish
