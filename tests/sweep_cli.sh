#!/bin/sh
# podsim sweep: a grid of configurations, one child process each; rows in
# grid order whatever --jobs is; resume from the output file; grid files;
# the Slurm layout (script, per-task parts, merge) without Slurm itself.
. "$PS_SRCDIR/tests/lib.sh"
cd "$PS_TMP" || exit 1
grid="--vary mesh=2x4,4x2 --vary microbatches=1,4 --layers 1"

expect_status 0 "$PODSIM" sweep $grid -j 2 -q -o j2.csv
expect_status 0 "$PODSIM" sweep $grid -j 1 -q -o j1.csv
cmp -s j1.csv j2.csv || fail "sweep rows differ between -j 1 and -j 2"
expect_grep "id,mesh,microbatches,model,fits,step_time_s,throughput_per_s,throughput_unit," j2.csv
[ "$(wc -l <j2.csv)" = 5 ] || fail "4 configurations should give 5 lines, got $(wc -l <j2.csv)"
expect_grep "0,2x4,1," j2.csv
expect_grep "3,4x2,4,,,,,,,,,,,,,the microbatch size (global batch / microbatches) = 2 is not divisible by mesh axis 0 (4)" j2.csv
expect_grep "0,2x4,1,dense,true," j2.csv
expect_grep "1,2x4,4,dense modified (microbatches),true," j2.csv
expect_grep ",true," j2.csv
# Without -o the rows go to standard output.
expect_status 0 "$PODSIM" sweep $grid -q
cmp -s out j2.csv || fail "sweep to stdout differs from -o"
# JSONL.
expect_status 0 "$PODSIM" sweep $grid -q -o rows.jsonl
expect_grep '{"id":0,"inputs":{"mesh":"2x4","microbatches":"1"},"model":"dense",' rows.jsonl
expect_grep '"fits":true' rows.jsonl
[ "$(wc -l <rows.jsonl)" = 4 ] || fail "JSONL: 4 rows expected"

# Resume: two whole rows and a partial third, as an interrupted sweep leaves.
head -3 j2.csv >part.csv
sed -n 4p j2.csv | cut -c1-10 | tr -d '\n' >>part.csv
expect_status 2 "$PODSIM" sweep $grid -q -o part.csv
expect_grep "exists: --resume continues it" "$PS_TMP/err"
expect_status 0 "$PODSIM" sweep $grid -q -o part.csv --resume
cmp -s part.csv j2.csv || fail "a resumed sweep differs from an uninterrupted one"
head -3 rows.jsonl >part.jsonl
expect_status 0 "$PODSIM" sweep $grid -q -o part.jsonl --resume
cmp -s part.jsonl rows.jsonl || fail "a resumed JSONL sweep differs"
# A file from another sweep is not resumed.
expect_status 2 "$PODSIM" sweep --vary mesh=4x2,2x4 --vary microbatches=1,4 --layers 1 -q -o j2.csv --resume
expect_grep "is not row 0 of this sweep" "$PS_TMP/err"

# A grid file: [vary] and the base model in one file; the same rows.
"$PODSIM" run --layers 1 --print-config >grid.ini
printf '\n[vary]\nmesh = 2x4, 4x2\nmicrobatches = 1, 4\n' >>grid.ini
expect_status 0 "$PODSIM" sweep --grid grid.ini -q -o grid.csv
sed 's/^\([0-9]*,[^,]*,[^,]*\),[^,]*,/\1,,/' grid.csv >a; sed 's/^\([0-9]*,[^,]*,[^,]*\),[^,]*,/\1,,/' j2.csv >b
cmp -s a b || fail "a grid file gives other figures than --vary"

# A configuration that does not fit still reports its peak.
expect_status 0 "$PODSIM" sweep --vary batch=8,8192 --seq-len 1024 -q -o fit.csv
expect_grep '1,8192,dense modified (batch),false,,,,,,' fit.csv
expect_grep ',,,,,"the model does not fit: per-core peak' fit.csv

# Errors: exit 2 before anything runs.
expect_status 2 "$PODSIM" sweep -q
expect_grep "nothing to vary" "$PS_TMP/err"
expect_status 2 "$PODSIM" sweep --vary nosuch=1,2
expect_grep "--vary nosuch=1,2: 'nosuch' is not a parameter of model family dense" "$PS_TMP/err"
expect_status 2 "$PODSIM" sweep --vary layers=1,0
expect_grep "--vary layers=1,0 must be positive (got 0)" "$PS_TMP/err"
expect_status 2 "$PODSIM" sweep --vary layers=1, --vary layers=2
expect_status 2 "$PODSIM" sweep --vary layers=1 --vary layers=2
expect_grep "layers is varied twice" "$PS_TMP/err"
printf '[vary]\nlayers = 1, x\n' >bad.ini
expect_status 2 "$PODSIM" sweep --grid bad.ini
expect_grep "bad.ini:2:1: layers: 'x' is not an integer" "$PS_TMP/err"
expect_status 2 "$PODSIM" sweep --vary layers=1 --resume
expect_grep "--resume needs -o FILE" "$PS_TMP/err"

# Slurm layout: the script, then each array task by hand, then the merge.
expect_status 0 "$PODSIM" sweep $grid --slurm slurm --tasks 3
expect_grep "sbatch $PS_TMP/slurm/sweep.sbatch" "$PS_TMP/out"
expect_grep "#SBATCH --array=0-2" slurm/sweep.sbatch
expect_grep "[vary]" slurm/sweep.ini
expect_status 1 "$PODSIM" sweep --merge slurm
expect_grep "4 of 4 configurations have no row yet (tasks 0, 1, 2)" "$PS_TMP/err"
for t in 0 1 2; do
  SLURM_ARRAY_TASK_ID=$t SLURM_CPUS_PER_TASK=1 sh slurm/sweep.sbatch || fail "array task $t"
done
expect_status 0 "$PODSIM" sweep --merge slurm -o merged.csv
cmp -s merged.csv j2.csv || fail "merged Slurm parts differ from the local sweep"
finish
