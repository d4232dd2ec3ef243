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
# Every command with sub-commands goes through one dispatcher (ps_cli_dispatch).
for group in bench conformance trace; do
  expect_status 0 "$PODSIM" $group --help
  expect_grep "Usage: podsim $group" "$PS_TMP/out"
  expect_status 2 "$PODSIM" $group
  expect_status 2 "$PODSIM" $group no-such
  expect_grep "podsim $group: unknown command 'no-such' (one of: " "$PS_TMP/err"
done
expect_status 0 "$PODSIM" bench matmul --help
expect_grep "podsim bench matmul" "$PS_TMP/out"
finish
