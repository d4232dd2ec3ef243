#!/bin/sh
# podsim simulate and podsim bench collective from the command line: reports,
# output files, and one clear error line (exit 2) for what a user gets wrong.
. "$PS_SRCDIR/tests/lib.sh"
GEN="$PS_BUILDDIR/tests/gen_trace"
T="$PS_TMP/t.pst.gz"
"$GEN" "$T" --mesh 4x8 --collectives 14 --computes 70 --async || fail "gen_trace"

expect_status 0 "$PODSIM" simulate --help
expect_grep "--no-cache" "$PS_TMP/out"
expect_status 0 "$PODSIM" simulate "$T" --slice v3-32
expect_grep "step time:" "$PS_TMP/out"
expect_grep "MXU utilization:" "$PS_TMP/out"
cp "$PS_TMP/out" "$PS_TMP/cached.txt"

# The same trace without the collective cache gives the same report.
expect_status 0 "$PODSIM" simulate "$T" --slice v3-32 --no-cache
grep -v '^program' "$PS_TMP/out" >"$PS_TMP/a"; grep -v '^program' "$PS_TMP/cached.txt" >"$PS_TMP/b"
cmp -s "$PS_TMP/a" "$PS_TMP/b" || fail "--no-cache changed the report"

expect_status 0 "$PODSIM" simulate "$T" --slice v3-32 --json \
  --timeline "$PS_TMP/tl.json" --links "$PS_TMP/links.csv"
for key in '"step_time_s"' '"exposed_communication_s"' '"mxu_utilization"' '"peak_hbm_bytes"' \
           '"hbm_capacity_bytes"' '"busiest_link"' '"per_device"'; do
  expect_grep "$key" "$PS_TMP/out"
done
expect_grep '{"traceEvents":[' "$PS_TMP/tl.json"
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert any(e.get("ph") == "X" for e in d["traceEvents"])' \
    "$PS_TMP/tl.json" || fail "timeline is not valid trace-event JSON"
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["per_device"]) == 32' \
    "$PS_TMP/out" || fail "--json is not one valid JSON object"
fi
expect_grep "link,kind,src_x,src_y,dst_x,dst_y,bytes,busy_s,utilization" "$PS_TMP/links.csv"
# 4x4 chips without wrap: 48 ICI ports + 32 on-chip links, plus the header.
[ "$(wc -l <"$PS_TMP/links.csv")" = 81 ] || fail "links.csv has $(wc -l <"$PS_TMP/links.csv") lines"

# Deterministic output.
"$PODSIM" simulate "$T" --slice v3-32 --json >"$PS_TMP/j2" 2>/dev/null
cmp -s "$PS_TMP/out" "$PS_TMP/j2" || fail "two runs differ"

# Errors: one line, exit 2, no output file.
expect_status 2 "$PODSIM" simulate "$T" --slice v3-12
expect_grep "unknown slice 'v3-12'" "$PS_TMP/err"
expect_status 2 "$PODSIM" simulate "$T" --slice v3-8 --links "$PS_TMP/none.csv"
expect_grep "32 devices, more than the 8 cores of slice v3-8" "$PS_TMP/err"
[ -e "$PS_TMP/none.csv" ] && fail "a failed run wrote its output file"
printf '[chip]\nname = broken\n' >"$PS_TMP/bad.ini"
expect_status 2 "$PODSIM" simulate "$T" --slice v3-32 --hw "$PS_TMP/bad.ini"
[ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "a bad hardware file printed more than one line"
expect_status 2 "$PODSIM" simulate "$T" --slice v3-32 --wrap sometimes
expect_status 2 "$PODSIM" simulate "$PS_TMP/missing.pst" --slice v3-32
"$GEN" "$PS_TMP/fat.pst" --mesh 4x8 --collectives 7 --computes 7 --peak 20GiB || fail "gen_trace"
expect_status 2 "$PODSIM" simulate "$PS_TMP/fat.pst" --slice v3-32
expect_grep "peak HBM 20.00 GiB per core exceeds the 16.00 GiB capacity" "$PS_TMP/err"

# bench collective.
expect_status 0 "$PODSIM" bench collective --slice v3-512 --op all-reduce --bytes 64MiB --groups x
expect_grep "simulated time:" "$PS_TMP/out"
expect_grep "bus bandwidth:" "$PS_TMP/out"
expect_status 0 "$PODSIM" bench collective --slice v3-32 --op all-gather --bytes 1MiB \
  --groups "0,1,2,3;4,5,6,7" --json
expect_grep '"group_size":4' "$PS_TMP/out"
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-sum --bytes 1MiB
expect_grep "unknown collective 'all-sum'" "$PS_TMP/err"
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes lots
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --groups "0,1;2"
# --collectives: each algorithm by name, the 2-D algorithm faster than one
# dimension at a time on a whole slice, an unknown name a one-line error.
for alg in torus2d dim-by-dim ring; do
  expect_status 0 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 64MiB \
    --collectives "$alg" --json
  expect_grep "\"collectives\":\"$alg\"" "$PS_TMP/out"
  sed -n 's/.*"time_s":\([^,]*\),.*/\1/p' "$PS_TMP/out" >"$PS_TMP/t.$alg"
done
awk -v a="$(cat "$PS_TMP/t.torus2d")" -v b="$(cat "$PS_TMP/t.dim-by-dim")" 'BEGIN { exit !(a < 0.5 * b) }' \
  || fail "torus2d ($(cat "$PS_TMP/t.torus2d") s) not under half of dim-by-dim ($(cat "$PS_TMP/t.dim-by-dim") s) on v3-32"
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --collectives tree
expect_grep "--collectives: 'tree' is not one of torus2d, dim-by-dim, ring, torus2d-wrap-a2a, torus2d-staged-a2a" "$PS_TMP/err"
[ "$(wc -l <"$PS_TMP/err")" = 1 ] || fail "a bad --collectives printed more than one line"
# All-to-all grows as sqrt(devices) up to the full pod, wrap links or not
# (doc/collectives.md); through the wrap links (torus2d-wrap-a2a) the pod's
# costs what v3-512's does.
a2a_time () {
  expect_status 0 "$PODSIM" bench collective --op all-to-all --bytes 32MB --json "$@"
  sed -n 's/.*"time_s":\([^,]*\),.*/\1/p' "$PS_TMP/out"
}
t512=$(a2a_time --slice v3-512)
t2048=$(a2a_time --slice v3-2048)
t2048off=$(a2a_time --slice v3-2048 --wrap off)
t2048wrap=$(a2a_time --slice v3-2048 --collectives torus2d-wrap-a2a)
awk -v a="$t512" -v b="$t2048" -v c="$t2048off" -v d="$t2048wrap" \
  'BEGIN { exit !(b > 1.9 * a && b < 2.1 * a && b == c && d > 0.95 * a && d < 1.05 * a) }' \
  || fail "all-to-all 32MB: v3-512 $t512 s, v3-2048 $t2048 s, --wrap off $t2048off s, torus2d-wrap-a2a $t2048wrap s"
# Staged per dimension (torus2d-staged-a2a) the square slices take twice the
# one-shot's time and still grow as sqrt(devices), wrap links or not.
s512=$(a2a_time --slice v3-512 --collectives torus2d-staged-a2a)
s2048=$(a2a_time --slice v3-2048 --collectives torus2d-staged-a2a)
s2048off=$(a2a_time --slice v3-2048 --wrap off --collectives torus2d-staged-a2a)
awk -v a="$t512" -v b="$s512" -v c="$s2048" -v d="$s2048off" \
  'BEGIN { exit !(b > 1.9 * a && b < 2.1 * a && c > 1.9 * b && c < 2.1 * b && c == d) }' \
  || fail "staged all-to-all 32MB: v3-512 $s512 s (one-shot $t512 s), v3-2048 $s2048 s, --wrap off $s2048off s"
expect_status 0 "$PODSIM" simulate "$T" --slice v3-32 --json --collectives dim-by-dim
expect_status 2 "$PODSIM" simulate "$T" --slice v3-32 --collectives tree
# Groups from a logical mesh, and the pictures of links and groups.
expect_status 0 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --mesh 4x8 \
  --device-order nonpod2d --axes 1 --picture "$PS_TMP/l.png" --groups-picture "$PS_TMP/g.svg"
expect_grep "groups mesh 4x8 (nonpod2d) axes 1: 4 x 8 devices" "$PS_TMP/out"
[ "$(head -c 4 "$PS_TMP/l.png" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "l.png is not a PNG"
expect_grep "<svg" "$PS_TMP/g.svg"
expect_status 0 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --mesh 4x8 --axes 0
expect_grep "8 x 4 devices" "$PS_TMP/out"
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --mesh 4x4
expect_grep "--mesh 4x4: not a mesh of the 32 cores of v3-32" "$PS_TMP/err"
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --mesh 4xq
expect_grep "--mesh: '4xq' is not a mesh shape" "$PS_TMP/err"
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --mesh 4x8 --axes 2
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --axes 1
expect_status 2 "$PODSIM" bench collective --slice v3-32 --op all-reduce --bytes 1MiB --picture x.bmp
finish
