#!/bin/sh
# podsim bench matmul end to end: text and JSON output, the model's headline
# numbers, bad arguments and malformed hardware files (exit 2, one line).
. "$PS_SRCDIR/tests/lib.sh"

expect_status 0 "$PODSIM" bench matmul --help
expect_grep "M K N" "$PS_TMP/out"
expect_grep "--precision" "$PS_TMP/out"

expect_status 0 "$PODSIM" bench matmul 8192 8192 8192
expect_grep "bound by         mxu" "$PS_TMP/out"
expect_grep "MXU utilization  96.96 %" "$PS_TMP/out"
expect_grep "4096 weight-tile passes of 128x128 over 2 MXUs" "$PS_TMP/out"

# JSON: one object whose numbers carry the claims of the issue.
expect_status 0 "$PODSIM" bench matmul 8192 8192 8192 --json
cp "$PS_TMP/out" "$PS_TMP/big.json"
expect_grep '"bound" : "mxu"' "$PS_TMP/big.json"
expect_grep '"tile_passes" : 4096' "$PS_TMP/big.json"
json_num () { sed -n "s/^ *\"$1\" : \\([-0-9.e+]*\\),*\$/\\1/p" "$2"; }
util=$(json_num mxu_utilization "$PS_TMP/big.json")
awk -v u="$util" 'BEGIN { exit !(u >= 0.95 && u <= 1.0) }' || fail "8192^3 utilization $util < 0.95"
t_bf16=$(json_num time_s "$PS_TMP/big.json")

expect_status 0 "$PODSIM" bench matmul 8192 129 8192 --json
u129=$(json_num mxu_utilization "$PS_TMP/out")
awk -v a="$u129" -v b="$util" 'BEGIN { r = a / b; exit !(r > 0.45 && r < 0.55) }' \
  || fail "K=129 utilization $u129 is not about half of $util"

expect_status 0 "$PODSIM" bench matmul 8192 8192 8192 --dtype f32 --precision highest --json
expect_grep '"mxu_passes" : 6' "$PS_TMP/out"
t_f32=$(json_num time_s "$PS_TMP/out")
awk -v a="$t_f32" -v b="$t_bf16" 'BEGIN { r = a / b; exit !(r > 5.95 && r < 6.05) }' \
  || fail "f32 highest / bf16 time is not 6 ($t_f32 / $t_bf16)"

expect_status 0 "$PODSIM" bench matmul 1 1 1
expect_grep "bound by         overhead" "$PS_TMP/out"

# Deterministic output.
"$PODSIM" bench matmul 1000 3000 5000 --json >"$PS_TMP/a.json"
"$PODSIM" bench matmul 1000 3000 5000 --json >"$PS_TMP/b.json"
cmp -s "$PS_TMP/a.json" "$PS_TMP/b.json" || fail "--json output differs between runs"

# A what-if file: the bundled file with HBM bandwidth halved makes the
# HBM-bound K=128 case slower.
sed 's/^hbm_bw_bytes_per_s_per_core = 450e9$/hbm_bw_bytes_per_s_per_core = 225e9/' \
  "$PS_SRCDIR/topology/tpu-v3.ini" >"$PS_TMP/slow-hbm.ini"
expect_status 0 "$PODSIM" bench matmul 8192 128 8192 --json
t_fast=$(json_num time_s "$PS_TMP/out")
expect_status 0 "$PODSIM" bench matmul 8192 128 8192 --json --hw "$PS_TMP/slow-hbm.ini"
t_slow=$(json_num time_s "$PS_TMP/out")
awk -v a="$t_slow" -v b="$t_fast" 'BEGIN { r = a / b; exit !(r > 1.9 && r < 2.1) }' \
  || fail "halving HBM bandwidth did not double an HBM-bound matmul ($t_slow / $t_fast)"
expect_status 0 "$PODSIM" bench matmul 64 64 64 --hw "$PS_SRCDIR/topology/tpu-v3.ini"

# Bad arguments: one line on stderr, exit 2.
one_line () { [ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "stderr of '$*' is not one line"; }
for args in "8192 8192" "8192 8192 8192 1" "0 1 1" "x 1 1" "1 1 1 --dtype f16" \
            "1 1 1 --precision max" "1 1 1 --batch 0" "1 1 1 --no-such-option" \
            "1 1 1 --hw /nonexistent/hw.ini"; do
  # shellcheck disable=SC2086
  expect_status 2 "$PODSIM" bench matmul $args
  one_line bench matmul $args
done
expect_status 2 "$PODSIM" bench matmul 1 1 1 --dtype f16
expect_grep "podsim: --dtype 'f16' is not bf16 or f32" "$PS_TMP/err"
expect_status 2 "$PODSIM" bench matmul 0 1 1
expect_grep "M '0' is not a whole number" "$PS_TMP/err"

# Malformed hardware files: FILE:LINE: what, exit 2.
bad="$PS_SRCDIR/tests/data/bad"
check_bad () {
  expect_status 2 "$PODSIM" bench matmul 128 128 128 --hw "$bad/$1"
  one_line "$1"
  expect_grep "podsim: $bad/$2" "$PS_TMP/err"
}
check_bad hw-missing-key.ini "hw-missing-key.ini: key [mxu] rows: missing"
check_bad hw-bad-number.ini "hw-bad-number.ini:16:12: [chip] clock_hz: '940 MHz' is not a number"
check_bad hw-negative-bandwidth.ini "hw-negative-bandwidth.ini:69:23: [ici] link_bw_bytes_per_s: must be positive, got -82e9"
check_bad hw-key-typo.ini "hw-key-typo.ini:71:1: unknown key 'hop_latncy_s' in [ici]"
check_bad hw-unknown-section.ini "hw-unknown-section.ini:74:1: unknown section [on-chip]"
check_bad hw-malformed-line.ini "hw-malformed-line.ini:46:1: expected 'key = value'"
check_bad hw-missing-section.ini "hw-missing-section.ini: section [overhead]: missing"
finish
