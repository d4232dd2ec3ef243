#!/bin/sh
# podsim trace check / dump on the real binary: a good trace (plain and
# gzip) gives its summary and dumps to itself; each malformed trace in
# tests/data/bad/ gives exactly its one error line and exit status 2.
# The .gz files were made from tests/data/traces/example.pst: the truncated
# one is the first half of its gzip stream, the corrupt one has the gzip
# trailer's CRC flipped.
. "$PS_SRCDIR/tests/lib.sh"
data="$PS_SRCDIR/tests/data"

expect_status 0 "$PODSIM" trace --help
expect_grep "check" "$PS_TMP/out"
expect_status 0 "$PODSIM" trace check --help
expect_grep "Usage:" "$PS_TMP/out"
expect_status 0 "$PODSIM" trace dump --help
expect_status 2 "$PODSIM" trace
expect_status 2 "$PODSIM" trace frob
expect_status 2 "$PODSIM" trace check
expect_status 2 "$PODSIM" trace check a b
expect_status 2 "$PODSIM" trace check "$PS_TMP/no-such.pst.gz"
expect_grep "cannot open" "$PS_TMP/err"

for f in example.pst example.pst.gz; do
  expect_status 0 "$PODSIM" trace check "$data/traces/$f"
  expect_grep "valid step trace, format version 1" "$PS_TMP/out"
  expect_grep "devices:           8" "$PS_TMP/out"
  expect_grep "mesh:              2x4 order arange" "$PS_TMP/out"
  expect_grep "events:            8 (compute 3, collective 3 of which async 1, memory 1)" "$PS_TMP/out"
  expect_grep "FLOPs per device:  402653184" "$PS_TMP/out"
  expect_grep "all-reduce             1 events, 2.00 MiB (2097152 bytes)" "$PS_TMP/out"
  expect_status 0 "$PODSIM" trace dump "$data/traces/$f"
  cmp -s "$PS_TMP/out" "$data/traces/example.pst" || fail "dump of $f is not the canonical text"
done
# the example in doc/trace-format.md is the test file, byte for byte
sed -n '/(this is `tests\/data\/traces\/example.pst`):$/,/^end /p' "$PS_SRCDIR/doc/trace-format.md" \
  | sed '1,3d' >"$PS_TMP/doc.pst"
cmp -s "$PS_TMP/doc.pst" "$data/traces/example.pst" || fail "doc/trace-format.md example differs from tests/data/traces/example.pst"
# standard input
"$PODSIM" trace check - <"$data/traces/example.pst.gz" >"$PS_TMP/out" 2>&1 || fail "check - failed"
expect_grep "<stdin>: valid step trace" "$PS_TMP/out"

# check_bad FILE 'expected error line'
check_bad () {
  (cd "$data/bad" && "$PODSIM" trace check "$1") >"$PS_TMP/out" 2>"$PS_TMP/err"
  st=$?
  [ "$st" = 2 ] || fail "$1: exit status $st, expected 2"
  [ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "$1: expected exactly one error line"
  [ "$(cat "$PS_TMP/err")" = "podsim: $2" ] || fail "$1: got '$(cat "$PS_TMP/err")', expected 'podsim: $2'"
  [ -s "$PS_TMP/out" ] && fail "$1: printed a summary for a bad trace"
}
check_bad trace-bad-version.pst "trace-bad-version.pst:1:9: unsupported trace version 9 (this podsim reads versions 1 to 2)"
check_bad trace-bad-number.pst "trace-bad-number.pst:10:62: bad number '1.3e8' for flops"
check_bad trace-unknown-event.pst "trace-unknown-event.pst:12:1: unknown event 'barrier' (expected compute, collective, done, memory, loop, endloop or end)"
check_bad trace-unknown-dtype.pst "trace-unknown-dtype.pst:12:47: unknown dtype 'fp32'"
check_bad trace-groups-mesh.pst "trace-groups-mesh.pst:9:93: groups do not fit the mesh: groups name mesh axis 2 but the mesh has 2 axes"
check_bad trace-groups-list.pst "trace-groups-list.pst:12:93: groups do not fit the mesh: device 3 appears twice in replica groups"
check_bad trace-iota-size.pst "trace-iota-size.pst:12:93: groups do not fit the mesh: iota reshape dims hold more than the 8 devices"
check_bad trace-permute-pairs.pst "trace-permute-pairs.pst:13:93: pairs do not fit the mesh: device 1 is the target of two pairs"
check_bad trace-mesh-devices.pst "trace-mesh-devices.pst:4:6: mesh 2x4 holds 8 devices but the trace has 16"
check_bad trace-done-unmatched.pst "trace-done-unmatched.pst:11:6: done for async id 2 that is not in flight"
check_bad trace-totals.pst "trace-totals.pst:15: totals flops=402653185 in the header but the events sum to 402653184"
check_bad trace-missing-end.pst "trace-missing-end.pst: truncated trace: no end line after 8 events (line 14)"
check_bad trace-cut-line.pst "trace-cut-line.pst:14: truncated trace: last line has no newline"
check_bad trace-bad-checksum.pst "trace-bad-checksum.pst:15:20: checksum mismatch: crc32 of the lines before is 94ed5aa5 (file corrupt?)"
check_bad trace-empty.pst "trace-empty.pst: empty file, not a step trace"
check_bad trace-unknown-field.pst "trace-unknown-field.pst:8:121: unknown field 'colour' in a compute line"
check_bad trace-async-open.pst "trace-async-open.pst:14: async collective 1 (event 3) has no done"
check_bad trace-memory-peak.pst "trace-memory-peak.pst:14:8: live bytes 9000000 above the header's peak_bytes 8388608"
check_bad trace-header-order.pst "trace-header-order.pst:2:1: expected the 'program' line, got 'devices'"
check_bad trace-crlf.pst 'trace-crlf.pst:1:10: carriage return (lines end with \n alone, not \r\n)'
check_bad trace-mxu-missing.pst "trace-mxu-missing.pst:10: matmul event without mxu=BxMxKxN dims"
check_bad trace-totals-wrap.pst "trace-totals-wrap.pst:8:62: flops of the events so far add up to more than 2^64-1"
check_bad trace-gather-wrap.pst "trace-gather-wrap.pst:9:81: all-gather over groups of 4 needs out_bytes = 4 x in_bytes"
check_bad trace-truncated.pst.gz "trace-truncated.pst.gz: truncated compressed data (unexpected end of file)"
check_bad trace-corrupt.pst.gz "trace-corrupt.pst.gz: corrupt compressed data (incorrect data check)"
finish
