#!/bin/sh
# podsim search on the small dense model (v3-8): strategies enumerated from
# the family's search axes, the ones that cannot be built dropped, repeats
# run once, memory checked, the rest simulated and ranked; the same ranking
# for any --jobs.
. "$PS_SRCDIR/tests/lib.sh"
cd "$PS_TMP" || exit 1
axes="--layers 1 --axes mesh,sharding,remat"
expect_status 0 "$PODSIM" search $axes -j 2 -q
expect_grep "search       dense on v3-8: 48 strategies = mesh (4) x sharding (6) x remat (2)" out
expect_grep "8 cannot be built, 18 repeat another, 22 memory checks: 0 do not fit; 22 simulated" out
expect_grep "rank       step     tokens/s    compute  exp. comm   peak HBM  strategy" out
expect_grep "   1 " out
expect_grep "the given configuration ranks 22 of 22" out
expect_grep "the given configuration ranks" out
expect_grep "why the others lost:" out
expect_grep "6 x --heads = 4 is not divisible by mesh axis 1 (8)" out
# Every strategy as CSV, identical for -j 1 and -j 2 (ties: enumeration order).
expect_status 0 "$PODSIM" search $axes -j 2 -q --csv
cp out j2.csv
expect_status 0 "$PODSIM" search $axes -j 1 -q --csv
cmp -s out j2.csv || fail "search --csv differs between -j 1 and -j 2"
expect_grep "rank,id,mesh,sharding,remat,status,step_time_s," j2.csv
[ "$(wc -l <j2.csv)" = 49 ] || fail "48 strategies should give 49 CSV lines"
expect_grep ",2,1x8,1d,false,invalid,,,,,,,--heads = 4 is not divisible by the device count (8)" j2.csv
expect_grep "2x4,1d,false,duplicate,,,,,,,the same run as 2" j2.csv
# The best is ranked 1 and said to be; ranks are 1..22.
[ "$(grep -c ',simulated,' j2.csv)" = 22 ] || fail "22 strategies should be simulated"
grep -q '^1,.*,best$' j2.csv || fail "no strategy ranked 1 as best"
grep -q '^22,.*,slower by ' j2.csv || fail "rank 22 does not say how much slower"
# Batch workers and share groups (the default) against one podsim run per
# strategy (--no-share): the same CSV, byte for byte, with strategies that
# cannot be built, repeats, a pruned one and overlap on and off (async_collectives
# is read only after partitioning: its strategies share one partition).
share="--layers 1 --axes mesh,device_order,sharding,microbatches,async_collectives -j 2 -q --csv"
expect_status 0 "$PODSIM" search $share
cp out shared.csv
expect_status 0 "$PODSIM" search $share --no-share
cmp -s out shared.csv || fail "search --csv differs between batch workers and --no-share"
grep -q ',true,simulated,' shared.csv || fail "no strategy with async_collectives was simulated"
grep -q ',invalid,' shared.csv || fail "no strategy that cannot be built"
# No memory does not fit a share group's own, either.
expect_status 0 "$PODSIM" search --seq-len 1024 --batch 8192 --axes remat,async_collectives -q --csv
cp out nofit.csv
expect_status 0 "$PODSIM" search --seq-len 1024 --batch 8192 --axes remat,async_collectives -q --csv --no-share
cmp -s out nofit.csv || fail "no-fit rows differ between batch workers and --no-share"
[ "$(grep -c ',no-fit,' nofit.csv)" = 4 ] || fail "4 strategies should not fit"
# Pipeline stages only when --axes names them; the mesh is then one stage's
# (factorizations of 8, 4 and 2 cores for K = 1, 2, 4: 9 meshes x 3).
expect_status 0 "$PODSIM" search --layers 2 --microbatches 2 --axes mesh,pipeline_stages -q -j 2 --csv
[ "$(wc -l <out)" = 28 ] || fail "9 meshes x 3 stage counts should give 28 CSV lines"
grep -q '^[0-9]*,16,2x2,2,simulated,' out || fail "2 stages x 2x2 (8 cores) was not simulated"
grep -q '^,4,2x4,2,invalid,.*has 16 devices but slice v3-8 has 8 cores' out || fail "2 stages x 2x4 (16 devices on 8 cores) was not refused"
expect_status 0 "$PODSIM" search --layers 2 --axes mesh,remat --dry-run
expect_grep "8 strategies" out
# Memory: a batch too large for remat off and on alike does not fit.
expect_status 0 "$PODSIM" search --seq-len 1024 --batch 8192 --axes remat -q
expect_grep "did not fit in HBM: 2" out
# Counting only.
expect_status 0 "$PODSIM" search --preset DenseLm128B8x8 --dry-run
expect_grep "DenseLm128B8x8 on v3-128: " out
# The lower-bound prune: a device-order variant whose representative's
# compute alone exceeds the best step of the representatives is not run.
# --no-prune runs it: slower than the best, and every other row the same
# but for ranks.
prune="--layers 1 --axes mesh,device_order,microbatches,remat -j 2 -q --csv"
expect_status 0 "$PODSIM" search $prune
cp out pruned.csv
[ "$(grep -c ',pruned,' pruned.csv)" = 4 ] || fail "4 strategies should be pruned"
# (peak 512252 B with TPU buffer tiling: the 1-layer model's small dims padded to tiles; 43880 dense;
# the times too count the tiled bytes its kernels move)
expect_grep ',36,2x4,arange_T,4,false,pruned,,,,,,512252,"pruned: compute alone 914.785 us (that of 28) exceeds the step of 73, 658.736 us"' pruned.csv
expect_status 0 "$PODSIM" search $prune --no-prune
cp out all.csv
[ "$(grep -c ',pruned,' all.csv)" = 0 ] || fail "--no-prune pruned"
best=$(sed -n 's/^1,[0-9]*,[^,]*,[^,]*,[^,]*,[^,]*,simulated,\([^,]*\),.*/\1/p' all.csv)
for id in $(sed -n 's/^,\([0-9]*\),.*,pruned,.*/\1/p' pruned.csv); do
  step=$(sed -n "s/^[0-9]*,$id,[^,]*,[^,]*,[^,]*,[^,]*,simulated,\([^,]*\),.*/\1/p" all.csv)
  awk -v s="$step" -v b="$best" 'BEGIN { exit !(s > b) }' || fail "pruned strategy $id: step $step, best $best"
done
cut -d, -f2- pruned.csv | grep -v ',pruned,' | sed 's/,slower by [^,]*$//;s/,"slower by [^"]*"$//' >a.txt
cut -d, -f2- all.csv | grep -v -E "^($(sed -n 's/^,\([0-9]*\),.*,pruned,.*/\1/p' pruned.csv | paste -sd'|')),"  \
  | sed 's/,slower by [^,]*$//;s/,"slower by [^"]*"$//' >b.txt
cmp -s a.txt b.txt || fail "the prune changed rows it did not mark"
# --time-limit: a child still running after it is stopped and listed.
expect_status 0 "$PODSIM" search --layers 1 --axes remat -j 2 -q --time-limit 0.001
expect_grep "2 stopped at the time limit" out
expect_grep "stopped at the time limit (--time-limit 0.001 s)" out
expect_status 2 "$PODSIM" search --time-limit -1
expect_grep "--time-limit must be between 0 and 1e9 seconds (got -1)" err
# Errors.
expect_status 2 "$PODSIM" search --axes nosuch
expect_grep "--axes: 'nosuch' is not a search axis of family dense" err
expect_status 2 "$PODSIM" search --axes layers
finish
