#!/bin/sh
# Hostile but small inputs and options (issue 17, doc/robustness.md): each is
# refused with exit status 2 and one located error line, without a large
# allocation (in the normal build, under a 1 GiB address-space limit; the
# sanitizer build cannot start under one and runs them without), and output
# lost on a full disk makes the run fail. The malformed HLO files themselves
# are in tests/data/bad/ and checked by hlo_bad.sh; this script drives them
# through the other commands.
. "$PS_SRCDIR/tests/lib.sh"
bad="$PS_SRCDIR/tests/data/bad"
example="$PS_SRCDIR/tests/data/traces/example.pst"
cd "$bad" || exit 1
# A shape whose element count overflows, through every command that reads it.
f=bad_parameter_overflow.hlo
w="$f:4:7: shape f32[4294967296,4294967296] has more than 2^40 elements"
refused "$w" "$PODSIM" propagate $f
refused "$w" "$PODSIM" partition $f --devices 2
refused "$w" "$PODSIM" partition $f --devices 2 --memory
refused "$w" "$PODSIM" partition $f --devices 2 --trace "$PS_TMP/t.pst.gz"
refused "$w" "$PODSIM" verify $f --devices 2
[ -e "$PS_TMP/t.pst.gz" ] && fail "a trace was written for a refused module"
# Constants far larger than their text.
for f in bad_constant_wrap.hlo bad_constant_null.hlo bad_constant_4tib.hlo bad_constant_8gib.hlo \
         bad_elements_overflow.hlo bad_tuple_deep.hlo bad_tuple_elements.hlo bad_dot_outer.hlo; do
  refused "$(cat $f.err)" "$PODSIM" hlo $f
  refused "$(cat $f.err)" "$PODSIM" verify $f --devices 2
done
# A call graph with a cycle (partition and verify looped) or too deep.
for f in bad_while_cycle.hlo bad_call_depth.hlo; do
  for c in propagate "partition --devices 2" "verify --devices 2"; do
    # shellcheck disable=SC2086
    refused "$(cat $f.err)" "$PODSIM" $c $f
  done
done

# A convolution whose window and output both have a billion positions: its
# cost (lowering, memory) counted every pair and ran for hours.
f=big-conv-window.hlo
sh -c "$ps_limit exec timeout 120 \"\$@\"" sh "$PODSIM" partition $f --devices 1 --trace "$PS_TMP/c.pst.gz" \
  >"$PS_TMP/out" 2>"$PS_TMP/err" || fail "partition --trace of $f: $(cat "$PS_TMP/err")"

# JSON nested deeper than json-glib's recursion can take (300,000 levels
# overflowed the stack; this file has 200).
for c in partitioner propagation; do
  refused "podsim: conformance-deep.jsonl:1:65: JSON nested more than 64 deep" \
    "$PODSIM" conformance $c conformance-deep.jsonl
done

# Inputs without an end: not text, or over the size cap.
refused "podsim: /dev/zero: not a text file (NUL byte at offset 0)" "$PODSIM" hlo /dev/zero
refused "podsim: /dev/zero: not a text file" "$PODSIM" propagate /dev/zero
refused "podsim: /dev/zero: not a text file" "$PODSIM" simulate "$example" --slice v3-8 --hw /dev/zero
refused "podsim: /dev/zero: not a text file" "$PODSIM" bench matmul 128 128 128 --hw /dev/zero
refused "podsim: /dev/zero:1: NUL byte in a text line (not a step trace?)" "$PODSIM" trace check /dev/zero
refused "podsim: /dev/zero:1: NUL byte in a text line" "$PODSIM" simulate /dev/zero --slice v3-8

# Trace totals that only match after wrapping around 2^64.
refused "trace-totals-wrap.pst:8:62: flops of the events so far add up to more than 2^64-1" \
  "$PODSIM" simulate trace-totals-wrap.pst --slice v3-8
# Hardware values that made step times infinite or device counts overflow.
refused "hw-huge-overhead.ini:85:12: [overhead] per_op_s: must be at most 1, got 1e308" \
  "$PODSIM" simulate "$example" --slice v3-8 --hw hw-huge-overhead.ini
refused "hw-tiny-bandwidth.ini:69:23: [ici] link_bw_bytes_per_s: must be between 1000 and 1e+15, got 1e-300" \
  "$PODSIM" simulate "$example" --slice v3-8 --hw hw-tiny-bandwidth.ini
refused "hw-many-cores.ini:18:24: [chip] tensorcores_per_chip: must be at most 64, got 1000000000" \
  "$PODSIM" run --hw hw-many-cores.ini

# Options: no silent defaults for 0, no unbounded work from one number.
refused "podsim: --batch must be positive (got 0)" "$PODSIM" run --batch 0
refused "podsim: --layers must be positive (got 0)" "$PODSIM" run --layers 0
refused "podsim: --model-dim must be positive (got -4)" "$PODSIM" run --model-dim -4
refused "podsim: --layers must be at most 1024 (got 100000)" "$PODSIM" run --layers 100000
refused "podsim: --microbatches must be at most 1024 (got 100000)" "$PODSIM" run --microbatches 100000 --batch 800000
refused "podsim: --seq-len must be at most 16777216" "$PODSIM" run --seq-len 4294967296
refused "podsim: --layers must be in 1 .. 1024 (got -99999999999999999999)" "$PODSIM" run --layers -99999999999999999999
refused "podsim: --mesh 65536x2 has more than 65536 devices" "$PODSIM" run --mesh 65536x2 --sharding dp
refused "must be between 1 and 4096" "$PODSIM" verify "$PS_SRCDIR/tests/data/verify/reduce_init.hlo" --devices 65536
refused "must be between 1 and 65536" "$PODSIM" partition "$PS_SRCDIR/tests/data/verify/reduce_init.hlo" \
  --devices 9223372036854775807

# Standard output on a full device: the run fails with one line, status 2.
if [ -w /dev/full ]; then
  for c in "hlo $PS_SRCDIR/tests/data/verify/reduce_init.hlo" \
           "propagate $PS_SRCDIR/tests/data/verify/reduce_init.hlo" \
           "partition $PS_SRCDIR/tests/data/verify/reduce_init.hlo --devices 4" \
           "trace check $example" "simulate $example --slice v3-8" \
           "bench matmul 128 128 128" "tables dense --only DenseLm128B8x8 --csv" "--help"; do
    # shellcheck disable=SC2086
    "$PODSIM" $c >/dev/full 2>"$PS_TMP/err"; st=$?
    [ "$st" = 2 ] || fail "'podsim $c' to /dev/full exited $st, expected 2"
    expect_grep "podsim: cannot write standard output" "$PS_TMP/err"
  done
fi
finish
