#!/bin/sh
# podsim verify and podsim conformance partitioner end to end: options, exit
# statuses, messages, and real partitionings checked by the interpreter.
. "$PS_SRCDIR/tests/lib.sh"
D="$PS_SRCDIR/tests/data/verify"

expect_status 0 "$PODSIM" verify --help
expect_grep "--devices" "$PS_TMP/out"
expect_status 2 "$PODSIM" verify "$D/dot_contracting.hlo"
expect_grep "--devices N is required" "$PS_TMP/err"
expect_status 2 "$PODSIM" verify "$D/no-such-file.hlo" --devices 2
expect_status 2 "$PODSIM" verify "$D/dot_contracting.hlo" --devices 2 --seed -1

# Bad HLO: one line naming the file and position, exit 2.
printf 'HloModule m\nENTRY e {\n ROOT p = f32[4 parameter(0)\n}\n' > "$PS_TMP/bad.hlo"
expect_status 2 "$PODSIM" verify "$PS_TMP/bad.hlo" --devices 2
expect_grep "bad.hlo:3:" "$PS_TMP/err"
[ "$(wc -l < "$PS_TMP/err")" = 1 ] || fail "bad HLO: error is not one line"

# An op the interpreter does not run: exit 2 and the instruction is named.
printf 'HloModule m\nENTRY e {\n a = f32[4] parameter(0)\n ROOT f = c64[3] fft(a), fft_type=RFFT, fft_length={4}\n}\n' > "$PS_TMP/fft.hlo"
expect_status 2 "$PODSIM" verify "$PS_TMP/fft.hlo" --devices 2
expect_grep "fft" "$PS_TMP/err"

# Real partitionings: contracting-dim dot on 4 devices, uneven tiles, and
# the same on 2 and 8 devices with other seeds.
expect_status 0 "$PODSIM" verify "$D/dot_contracting.hlo" --devices 4
expect_grep "agrees on 4 devices" "$PS_TMP/out"
# The project's example: its bf16 outputs differ by rounding under
# cancellation and agree in f64 arithmetic (doc/interpreter.md, "Rounding").
for seed in 1 2 3; do
  expect_status 0 "$PODSIM" verify "$PS_SRCDIR/examples/transformer_layer.hlo" --devices 8 --seed $seed
  expect_grep "the output agrees on 8 devices (32768 elements compared) in f64 arithmetic" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" verify "$D/elementwise_uneven.hlo" --devices 4 --seed 7
expect_grep "agrees" "$PS_TMP/out"
for n in 2 8; do
  sed "s/\[1,4\]<=\[4\]/[1,$n]<=[$n]/; s/\[4,1\]<=\[4\]/[$n,1]<=[$n]/" "$D/dot_contracting.hlo" > "$PS_TMP/dot$n.hlo"
  expect_status 0 "$PODSIM" verify "$PS_TMP/dot$n.hlo" --devices $n --seed $n
  expect_grep "agrees on $n devices" "$PS_TMP/out"
done

# Batch norm on an image split 4 x 2 over uneven spatial dims: training,
# grad and inference, the statistics summed across the pieces; and a
# 10^6 times larger copy, checked on a scaled copy.
expect_status 0 "$PODSIM" verify "$D/batch_norm_spatial.hlo" --devices 8
expect_grep "all 7 outputs agree on 8 devices" "$PS_TMP/out"
sed 's/f32\[2,7,5,3\]/f32[2,7000,5000,3]/g' "$D/batch_norm_spatial.hlo" > "$PS_TMP/bn_big.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/bn_big.hlo" --devices 8
expect_grep "checked on a scaled copy" "$PS_TMP/out"

# Over the interpreter's limits: checked on a scaled copy (said so), or, with
# --no-scale, exit 2 naming the limit. --dump-scaled writes the copy.
cat > "$PS_TMP/big.hlo" <<'EOF'
HloModule m
ENTRY e {
  a = f32[1536,65537] parameter(0), sharding={devices=[1,4]<=[4]}
  b = f32[65537,1024] parameter(1), sharding={devices=[4,1]<=[4]}
  ROOT d = f32[1536,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}
}
EOF
expect_status 0 "$PODSIM" verify "$PS_TMP/big.hlo" --devices 4
expect_grep "checked on a scaled copy" "$PS_TMP/out"
expect_grep "agrees on 4 devices" "$PS_TMP/out"
expect_status 2 "$PODSIM" verify "$PS_TMP/big.hlo" --devices 4 --no-scale
expect_grep "over the interpreter's limit" "$PS_TMP/err"
expect_status 0 "$PODSIM" verify "$PS_TMP/big.hlo" --devices 4 --dump-scaled "$PS_TMP/small.hlo"
expect_grep "a: f32[8,9]" "$PS_TMP/small.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/small.hlo" --devices 4

# A reduce over split dims applies its init value once per device: verify
# gives init parameters the reducer's identity (add: 0, max: lowest).
expect_status 0 "$PODSIM" verify "$D/reduce_init.hlo" --devices 4
expect_grep "all 2 outputs agree on 4 devices" "$PS_TMP/out"

# Written entry shardings are kept unless --to-output/--to-parameters (or the
# module header) let propagation change them: the uneven tiled root stays
# tiled (local f32[3,3]); with --to-output XLA's rule replicates an entry
# output that does not split evenly.
expect_status 0 "$PODSIM" partition "$D/elementwise_uneven.hlo" --devices 4
expect_grep "ROOT %add.3 = f32[3,3]" "$PS_TMP/out"
expect_status 0 "$PODSIM" partition "$D/elementwise_uneven.hlo" --devices 4 --to-output
expect_grep "ROOT %add.7 = f32[10,3]" "$PS_TMP/out"
expect_status 0 "$PODSIM" verify "$D/elementwise_uneven.hlo" --devices 4 --to-output --to-parameters
expect_grep "agrees on 4 devices" "$PS_TMP/out"

# A tile assignment over a subset of the devices is rejected (XLA's rule),
# naming the instruction, instead of making collectives that leave devices out.
printf 'HloModule m\nENTRY e {\n p = f32[8] parameter(0), sharding={devices=[2]0,1}\n ROOT n = f32[8] negate(p), sharding={devices=[2]0,1}\n}\n' > "$PS_TMP/subset.hlo"
expect_status 2 "$PODSIM" partition "$PS_TMP/subset.hlo" --devices 4
expect_grep "subset.hlo:3:2: p: the sharding's tile assignment names 2 devices but the program runs on 4" "$PS_TMP/err"

# A conditional in a partially manual region is not partitioned yet: a clear
# error, not a program whose branches keep full-size parameters.
expect_status 2 "$PODSIM" partition "$D/cond_partial_manual.hlo" --devices 4
expect_grep "cond_partial_manual.hlo:20:8: r: conditional with a partially manual sharding is not supported" "$PS_TMP/err"

# Same seed, same output (deterministic).
"$PODSIM" verify "$D/dot_contracting.hlo" --devices 4 --seed 5 > "$PS_TMP/a" 2>&1
"$PODSIM" verify "$D/dot_contracting.hlo" --devices 4 --seed 5 > "$PS_TMP/b" 2>&1
cmp -s "$PS_TMP/a" "$PS_TMP/b" || fail "verify output differs between two identical runs"

# The conformance runner: one good case, one whose root shape is wrong, one
# that does not parse. One line per failing case, then the summary; exit 1.
expect_status 1 "$PODSIM" conformance partitioner "$D/cases.jsonl"
expect_grep "FAIL wrong_root_shape: root has local shape f32[3,3], the upstream test expects f32[10,3]" "$PS_TMP/out"
expect_grep "FAIL broken_hlo: parse: broken_hlo:3:" "$PS_TMP/out"
# Upstream tests that expect partitioning to fail: a rejection with the
# expected words passes; other words, or no rejection, fail.
expect_grep "FAIL expected_rejection_other_text: partitioner: " "$PS_TMP/out"
expect_grep "expects an error containing \"some other reason\"" "$PS_TMP/out"
expect_grep "FAIL expected_rejection_but_partitions: partitioned, but the upstream test expects partitioning to fail" "$PS_TMP/out"
grep -q "FAIL expected_rejection:" "$PS_TMP/out" && fail "an expected rejection was listed as failing"
expect_grep "2 passed, 4 failed" "$PS_TMP/out"
[ "$(tail -n 1 "$PS_TMP/out")" = "2 passed, 4 failed" ] || fail "summary is not the last line"
grep -q "elementwise_uneven" "$PS_TMP/out" && fail "a passing case was listed"
expect_status 0 "$PODSIM" conformance partitioner "$D/cases.jsonl" --case elementwise_uneven
expect_grep "1 passed, 0 failed" "$PS_TMP/out"
expect_status 1 "$PODSIM" conformance partitioner "$D/cases.jsonl" --json
expect_grep '"name" : "broken_hlo"' "$PS_TMP/out"
expect_grep '"failed" : 4' "$PS_TMP/out"
expect_status 0 "$PODSIM" conformance partitioner --help
# A case without num_devices (the propagation files' format) runs on as many
# devices as its shardings name.
expect_status 0 "$PODSIM" conformance partitioner "$D/no_devices.jsonl"
expect_grep "1 passed, 0 failed" "$PS_TMP/out"
# --fallbacks counts, per opcode, what took the replicate-then-slice fallback
# (an rng has no handler).
expect_status 0 "$PODSIM" conformance partitioner "$D/fallback.jsonl" --fallbacks
expect_grep "fallbacks: 1 modules, 1 instructions" "$PS_TMP/out"
expect_grep "rng                    1 in 1 modules" "$PS_TMP/out"
expect_status 0 "$PODSIM" conformance partitioner "$D/no_devices.jsonl" --fallbacks
expect_grep "fallbacks: 0 modules, 0 instructions" "$PS_TMP/out"
# Malformed input file: exit 2 before any case runs.
printf '{"name": "x", "hlo": "HloModule m"}\nnot json\n' > "$PS_TMP/bad.jsonl"
expect_status 2 "$PODSIM" conformance partitioner "$PS_TMP/bad.jsonl"
expect_grep "bad.jsonl:2:" "$PS_TMP/err"
# --max-work takes a count as its help writes it (2e9, 1e8).
expect_status 0 "$PODSIM" verify -n 2 --max-work 1e8 "$PS_SRCDIR/tests/data/hlo/fusion.hlo"
expect_grep "all 2 outputs agree on 2 devices" "$PS_TMP/out"
expect_status 2 "$PODSIM" verify -n 2 --max-work 1.5 "$PS_SRCDIR/tests/data/hlo/fusion.hlo"
expect_grep "expected a whole number" "$PS_TMP/err"
finish
