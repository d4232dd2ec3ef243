#!/bin/sh
# podsim run end to end on the small dense model (v3-8): the summary, --json,
# dumps that other commands read back, and option errors with exit status 2.
. "$PS_SRCDIR/tests/lib.sh"
expect_status 0 "$PODSIM" run --help
expect_grep "--preset" "$PS_TMP/out"

expect_status 0 "$PODSIM" run -q --dump-hlo "$PS_TMP/m.hlo" --trace "$PS_TMP/t.pst.gz"
for key in "step time" "tokens/s" "MXU util" "peak HBM" "exposed communication"; do
  expect_grep "$key" "$PS_TMP/out"
done
# The dumped program reads back; the trace replays on its own.
expect_status 0 "$PODSIM" hlo "$PS_TMP/m.hlo"
expect_status 0 "$PODSIM" trace check "$PS_TMP/t.pst.gz"
expect_status 0 "$PODSIM" simulate "$PS_TMP/t.pst.gz" --slice v3-8

# The layer stack is a loop (the trace has loop lines): the partitioned loop
# agrees with the original on the interpreter, and with remat the step
# equals the unrolled form's (--unroll) within 0.1 %. A tiny model's step
# is a few hundred ops of about 1 us each, so the loop's own ops (the copy
# of each layer's input into its stack, in-place state updates) are
# compared with the per-op overhead set to 0; the published presets are
# compared as they are in the benchmark (tests/bench_loops.sh).
zcat "$PS_TMP/t.pst.gz" | grep -q "^loop trips=2 " || fail "no loop in the trace"
expect_status 0 "$PODSIM" verify "$PS_TMP/m.hlo" --devices 8
expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
sed 's/^per_op_s = .*/per_op_s = 0/' "$PS_SRCDIR/topology/tpu-v3.ini" > "$PS_TMP/no-op.ini"
step_of () { sed -n 's/.*"step_time_s" : \([0-9.e+-]*\).*/\1/p' "$PS_TMP/out"; }
for opts in "" "--microbatches 2 --optimizer adam" "--sharding 1d --heads 8 --layers 3"; do
  expect_status 0 "$PODSIM" run -q --json --hw "$PS_TMP/no-op.ini" $opts
  loop=$(step_of)
  expect_status 0 "$PODSIM" run -q --json --hw "$PS_TMP/no-op.ini" --unroll $opts
  unrolled=$(step_of)
  # 0.5 %: XLA's fusion duplicates a cheap producer only when every user
  # can fuse it, and the two forms give some producers different users (a
  # value saved for the backward pass is a stack update in the loop, a
  # plain operand unrolled): 0.23 % on '--sharding 1d --heads 8 --layers 3',
  # 0.02 % with --fusion producer
  awk -v a="$loop" -v b="$unrolled" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.005 * b) }' \
    || fail "step time with '$opts': loop $loop s, unrolled $unrolled s"
done
# Without remat the loop saves what the backward reads and that partitions
# differently (see doc/models.md); it still verifies.
expect_status 0 "$PODSIM" run -q --no-remat --microbatches 2 --dump-hlo "$PS_TMP/nr.hlo"
expect_status 0 "$PODSIM" verify "$PS_TMP/nr.hlo" --devices 8

expect_status 0 "$PODSIM" run -q dense --json --no-remat --optimizer adam --microbatches 2
for key in '"step_time_s"' '"tokens_per_s"' '"mxu_utilization"' '"peak_hbm_bytes"' '"exposed_communication_s"'; do
  expect_grep "$key" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" run -q --sharding dp --weight-update-sharding
expect_status 0 "$PODSIM" run -q --async-collectives
expect_grep "exposed communication" "$PS_TMP/out"
expect_status 0 "$PODSIM" run -q --sharding 1d --heads 8

# The published configs on their own slices, cut to one layer to stay quick:
# 2048 devices with the arange order, 128 with Lingvo's non-pod order.
expect_status 0 "$PODSIM" run -q --preset DenseLm128B32x32 --layers 1
expect_grep "mesh 32x64 (arange), slice v3-2048" "$PS_TMP/out"
expect_grep "DenseLm128B32x32 modified (layers)" "$PS_TMP/out"
expect_status 0 "$PODSIM" run -q --preset DenseLm128B8x8 --layers 1 --optimizer adam
expect_grep "mesh 8x16 (nonpod2d), slice v3-128" "$PS_TMP/out"

# Issue 16 regressions. The non-pod order's physical shape follows --slice
# (it used to be the preset's or the small model's: "the slice has 8 cores").
expect_status 0 "$PODSIM" run -q --slice v3-32 --mesh 8x4 --device-order nonpod2d --heads 8
expect_grep "mesh 8x4 (nonpod2d), slice v3-32" "$PS_TMP/out"
expect_status 2 "$PODSIM" run -q --preset DenseLm175B32x32 --slice v3-512 --device-order nonpod2d
expect_grep "--mesh 64x32 has 2048 devices but slice v3-512 has 512 cores" "$PS_TMP/err"
# A preset changed by options is named as modified and has no published ratio.
expect_status 0 "$PODSIM" run -q --preset DenseLm128B8x8 --layers 1 --model-dim 4096
expect_grep "DenseLm128B8x8 modified (layers, model-dim)" "$PS_TMP/out"
if grep -q "published" "$PS_TMP/out"; then fail "a modified preset shows a published ratio"; fi
expect_status 0 "$PODSIM" run -q --json --preset DenseLm128B8x8 --layers 1
expect_grep '"published_tokens_per_s" : 0' "$PS_TMP/out"
# Gated GELU can be switched either way, so every published column can be set.
expect_status 0 "$PODSIM" run -q --no-gated-gelu --layers 1
if grep -q "gated GELU" "$PS_TMP/out"; then fail "--no-gated-gelu still gated"; fi
expect_status 0 "$PODSIM" run -q --preset DenseLm175B32x32 --gated-gelu --layers 1 --seq-len 256
expect_grep "DenseLm175B32x32 modified (layers, seq-len, gated-gelu)" "$PS_TMP/out"
expect_grep "gated GELU" "$PS_TMP/out"
# The last of two contradicting options wins, as for every option.
expect_status 0 "$PODSIM" run -q --preset DenseLm175B32x32 --gated-gelu --no-gated-gelu --print-config
expect_grep "# DenseLm175B32x32 (" "$PS_TMP/out"

# Model files: --print-config writes the run, --config reads it back.
expect_status 0 "$PODSIM" run --preset DenseLm175B32x32 --print-config
cp "$PS_TMP/out" "$PS_TMP/175b.ini"
expect_grep "[published]" "$PS_TMP/175b.ini"
expect_grep "throughput = 51530" "$PS_TMP/175b.ini"
expect_status 0 "$PODSIM" run --config "$PS_TMP/175b.ini" --print-config
cmp -s "$PS_TMP/out" "$PS_TMP/175b.ini" || fail "--config of a printed file prints another file"
# A published row spelled option by option is that row (issue 16).
expect_status 0 "$PODSIM" run --layers 96 --model-dim 12288 --ffn-dim 49152 --heads 96 --head-dim 128 \
  --seq-len 2048 --batch 1024 --vocab 32000 --rel-buckets 32 --no-gated-gelu --mesh 64x32 \
  --device-order arange_T --slice v3-2048 --print-config
cmp -s "$PS_TMP/out" "$PS_TMP/175b.ini" || fail "DenseLm175B32x32 spelled as options is not that row"
expect_status 0 "$PODSIM" run --preset DenseLm128B16x16 --layers 24 --set remat=false --print-config
expect_grep "# DenseLm128B16x16 modified (layers, remat)" "$PS_TMP/out"
if grep -qF "[published]" "$PS_TMP/out"; then fail "a modified preset's file has a [published] section"; fi
# A small model from a file, run with an override on top.
"$PODSIM" run --print-config >"$PS_TMP/small.ini"
expect_status 0 "$PODSIM" run -q --config "$PS_TMP/small.ini" --layers 1 --json
expect_grep '"model" : "small modified (layers)"' "$PS_TMP/out"
expect_grep '"family" : "dense"' "$PS_TMP/out"
expect_grep '"layers" : "1"' "$PS_TMP/out"
# Errors name FILE:LINE:COL or the option, exit 2.
printf '[model]\nfamily = dense\nlayers = x\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:3:10: layers: 'x' is not an integer" "$PS_TMP/err"
printf '[model]\nfamily = dense\nheads = 6\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" run --config "$PS_TMP/bad.ini"
expect_grep "bad.ini:3:9: heads = 6 is not divisible by mesh axis 1 (4)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run --config "$PS_TMP/nosuch.ini"
expect_status 2 "$PODSIM" run --preset DenseLm128B8x8 --config "$PS_TMP/small.ini"
expect_grep "exclude each other" "$PS_TMP/err"
expect_status 2 "$PODSIM" run --set nosuch=1
expect_grep "'nosuch' is not a parameter of model family dense" "$PS_TMP/err"
expect_status 2 "$PODSIM" run --layers 0
expect_grep "--layers must be positive (got 0)" "$PS_TMP/err"

# Every key of every family is documented on the family's doc page (the
# page `podsim run --help` names), as `key`.
"$PODSIM" run --help | sed -n '/^FAMILY is one of/,/^The options/p' | \
  sed -n 's/^  \([a-z0-9_]*\) .*(\(doc\/[^)]*\))$/\1 \2/p' >"$PS_TMP/families"
[ -s "$PS_TMP/families" ] || fail "podsim run --help lists no families"
while read -r fam page; do
  "$PODSIM" run "$fam" --print-config | sed -n 's/^\([a-z0-9_]*\) =.*/\1/p' | while read -r key; do
    grep -qF "\`$key\`" "$PS_SRCDIR/$page" || echo "family $fam: key $key is not in $page"
  done
done <"$PS_TMP/families" >"$PS_TMP/undocumented"
[ -s "$PS_TMP/undocumented" ] && fail "$(cat "$PS_TMP/undocumented")"

# One row of the paper's table, as CSV (each row is a child podsim run).
expect_status 0 "$PODSIM" tables dense --only DenseLm128B8x8 --csv --plot "$PS_TMP/t.png" \
  --scaling "$PS_TMP/s.svg"
expect_grep "name,cores,mesh,step_time_s,tokens_per_s" "$PS_TMP/out"
expect_grep "DenseLm128B8x8,128,8x16," "$PS_TMP/out"
is_png () { [ "$(head -c 8 "$1" | od -An -c | tr -d ' ')" = '211PNG\r\n032\n' ] || fail "$1 is not a PNG"; }
is_png "$PS_TMP/t.png"
expect_grep "<svg" "$PS_TMP/s.svg"
# --buffer-tiling reaches every row: padding the minor dims as written
# (`minor`) raises this row's peak HBM above `best`'s (the default).
peak_best=$(awk -F, '$1 == "DenseLm128B8x8" { print $7 }' "$PS_TMP/out")
expect_status 0 "$PODSIM" tables dense --only DenseLm128B8x8 --csv --buffer-tiling minor
peak_minor=$(awk -F, '$1 == "DenseLm128B8x8" { print $7 }' "$PS_TMP/out")
awk -v b="$peak_best" -v m="$peak_minor" 'BEGIN { exit !(b > 0 && m > b) }' \
  || fail "tables dense --buffer-tiling minor: peak $peak_minor GiB, not above best's $peak_best GiB"
expect_status 2 "$PODSIM" tables dense --only DenseLm128B8x8 --buffer-tiling tiles
expect_grep "buffer-tiling" "$PS_TMP/err"
# Pictures of a run: link utilization and the step's breakdown.
expect_status 0 "$PODSIM" run -q --picture "$PS_TMP/links.png" --plot "$PS_TMP/plot.svg"
is_png "$PS_TMP/links.png"
expect_grep "<svg" "$PS_TMP/plot.svg"
expect_status 2 "$PODSIM" run -q --picture "$PS_TMP/links.gif"
expect_grep "--picture $PS_TMP/links.gif: a picture is FILE.png or FILE.svg" "$PS_TMP/err"
[ -e "$PS_TMP/links.gif" ] && fail "a failed run left a picture"
expect_status 2 "$PODSIM" tables dense --only NoSuchRow

# The memory check alone; and a run that does not fit still gives its
# figures as JSON (status 2).
expect_status 0 "$PODSIM" run -q --memory-only
expect_grep "per core of 16.00 GiB" "$PS_TMP/out"
expect_grep ": fits" "$PS_TMP/out"
expect_status 0 "$PODSIM" run -q --memory-only --json
expect_grep '"fits" : true' "$PS_TMP/out"
if grep -q step_time_s "$PS_TMP/out"; then fail "--memory-only reported a step time"; fi
expect_status 2 "$PODSIM" run -q --batch 8192 --seq-len 1024 --json
expect_grep '"fits" : false' "$PS_TMP/out"
expect_grep '"peak_hbm_bytes" : ' "$PS_TMP/out"

# Option errors: one line, exit 2.
expect_status 2 "$PODSIM" run -q --mesh 2x2
expect_grep "has 4 devices but slice v3-8 has 8 cores" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --heads 6
expect_grep "--heads = 6 is not divisible by mesh axis 1 (4)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --preset NoSuchModel
expect_grep "unknown preset 'NoSuchModel'" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --batch 8192 --seq-len 1024
expect_grep "the model does not fit: per-core peak" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --sharding 3d
expect_status 2 "$PODSIM" run -q resnet
expect_grep "unknown model family 'resnet'" "$PS_TMP/err"
expect_status 2 "$PODSIM" tables nosuch
expect_status 2 "$PODSIM" run -q --mesh 2x4 --device-order nonpod2d --slice v3-32
expect_status 2 "$PODSIM" run -q --kv-heads 3
expect_grep "--kv-heads must divide --heads (4), got 3" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --rel-buckets 1
expect_grep "--rel-buckets must be 0 (none) or 2 .. 254 (got 1)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --position rope --head-dim 7
expect_grep "--position rope needs an even --head-dim (got 7)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --sharding megatron-sp --seq-len 6
expect_grep "--seq-len = 6 is not divisible by mesh axis 1 (4)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --position rope --rotary-dim 3
expect_grep "--rotary-dim must be 0 (all of the head) or even" "$PS_TMP/err"
# A boolean option takes =true / =false (not silently dropped), and a
# pipeline runs with untied embeddings.
expect_status 0 "$PODSIM" run --tie-embeddings=false --print-config
expect_grep "tie_embeddings = false" "$PS_TMP/out"
expect_status 2 "$PODSIM" run -q --tie-embeddings=maybe
expect_grep "--tie-embeddings: 'maybe' is not true or false" "$PS_TMP/err"
expect_status 0 "$PODSIM" run -q --pipeline-stages 2 --mesh 2x2 --microbatches 2 --tie-embeddings=false
# Every boolean option's two forms alike: --x=true|false is honoured, the
# value only after '='; --no-x takes no value (main read --no-x=true as
# false and --x WORD took WORD as its value).
expect_status 0 "$PODSIM" run --tie-embeddings=true --print-config
expect_grep "tie_embeddings = true" "$PS_TMP/out"
expect_status 0 "$PODSIM" run --no-tie-embeddings --print-config
expect_grep "tie_embeddings = false" "$PS_TMP/out"
for v in true false maybe; do
  expect_status 2 "$PODSIM" run -q --no-tie-embeddings=$v
  expect_grep "--no-tie-embeddings takes no value: write --no-tie-embeddings, --tie-embeddings=false or --tie-embeddings=true" "$PS_TMP/err"
done
expect_status 2 "$PODSIM" run -q --remat false
expect_grep "--remat false: a boolean option takes its value after '=' (--remat=false)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run -q --no-cache=false
expect_grep "--no-cache takes no value" "$PS_TMP/err"
expect_status 0 "$PODSIM" run --remat moe --print-config
expect_grep "# moe (podsim run" "$PS_TMP/out"
expect_status 0 "$PODSIM" run moe --remat=false --cache=false --print-config
expect_grep "remat = false" "$PS_TMP/out"
expect_grep "cache = false" "$PS_TMP/out"
expect_status 0 "$PODSIM" search -q --dry-run --remat=false --axes microbatches
expect_grep "strategies" "$PS_TMP/out"

# The public configurations (models/presets: GPT-3 sizes, Llama 2, GPT-J-sized)
# fit at full size on their slices and print their block options.
for preset in Gpt3Small Gpt3Medium Gpt3Large Gpt3XL Gpt3_2B7 Gpt3_6B7 Gpt3_13B Gpt3_175B Llama2_7B Llama2_13B \
              Llama2_70B GptJ6B; do
  expect_status 0 "$PODSIM" run --preset "$preset" --memory-only
  expect_grep "fits" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" run --preset GptJ6B --print-config
expect_grep "block = parallel" "$PS_TMP/out"
expect_grep "rotary_dim = 64" "$PS_TMP/out"
expect_grep "rotary_pairs = adjacent" "$PS_TMP/out"
# GPT-J's adjacent rotary pairs: original and partitioned agree on the
# interpreter in the moe and encdec families too (dense: check_layers); the
# pairing needs rotary positions.
for fam in "moe --position rope" "encdec --position rope --rel-buckets 0"; do
  expect_status 0 "$PODSIM" run $fam --rotary-pairs adjacent --rotary-dim 2 -q --dump-hlo "$PS_TMP/adj.hlo"
  expect_status 0 "$PODSIM" verify "$PS_TMP/adj.hlo" --devices 8
  expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
done
expect_status 2 "$PODSIM" run -q --rotary-pairs adjacent
expect_grep "--rotary-pairs adjacent needs --position rope" "$PS_TMP/err"
expect_status 0 "$PODSIM" run --preset Llama2_70B --print-config
expect_grep "kv_heads = 8" "$PS_TMP/out"
expect_grep "ffn = swiglu" "$PS_TMP/out"

# The encoder-decoder family: the small step runs, T5 v1.1 fits on v3-32.
expect_status 0 "$PODSIM" run encdec -q --json
expect_grep '"fits" : true' "$PS_TMP/out"
# Its microbatches are one while loop by default (as the dense and MoE
# LMs'): partitioned against the original with dense and MoE FFNs, with and
# without remat; --unroll-microbatches writes them out (no while).
for o in "" "--remat --experts 4"; do
  expect_status 0 "$PODSIM" run encdec --microbatches 2 $o -q --dump-hlo "$PS_TMP/edmb.hlo"
  grep -q "while(" "$PS_TMP/edmb.hlo" || fail "encdec --microbatches 2 $o: no while loop"
  expect_status 0 "$PODSIM" verify "$PS_TMP/edmb.hlo" --devices 8
  expect_grep "outputs agree on 8 devices" "$PS_TMP/out"
done
expect_status 0 "$PODSIM" run encdec --microbatches 2 --unroll-microbatches -q --dump-hlo "$PS_TMP/edmb.hlo"
grep -q "while(" "$PS_TMP/edmb.hlo" && fail "encdec --unroll-microbatches: a while loop"
for preset in T5Base T5Large; do
  expect_status 0 "$PODSIM" run --preset "$preset" --memory-only
  expect_grep "fits" "$PS_TMP/out"
done
expect_status 2 "$PODSIM" run encdec -q --sharding megatron-sp --tgt-len 6
expect_grep "--tgt-len = 6 is not divisible by mesh axis 1 (4)" "$PS_TMP/err"
# Its MoE expert layouts are a search axis when --axes names it; remat and
# microbatches run and are checked.
expect_status 0 "$PODSIM" search encdec --experts 8 --axes moe_sharding -q -j 2
expect_grep "3 strategies = moe_sharding (3)" "$PS_TMP/out"
expect_grep "moe_sharding=experts-x-hidden-y" "$PS_TMP/out"
expect_status 0 "$PODSIM" run encdec -q --experts 8 --moe-sharding experts-xy --remat --microbatches 2
expect_grep "experts-xy" "$PS_TMP/out"
expect_grep "per-layer backward with remat, 2 microbatches" "$PS_TMP/out"
expect_status 2 "$PODSIM" run encdec -q --experts 4 --moe-sharding experts-xy
expect_grep "--experts = 4 is not divisible by the device count (8)" "$PS_TMP/err"
expect_status 2 "$PODSIM" run encdec -q --microbatches 3
expect_grep "--batch = 8 is not divisible by --microbatches (3)" "$PS_TMP/err"
finish
