#!/bin/sh
# podsim sweep --slurm on a real Slurm: this test starts munged, slurmctld
# and slurmd on localhost with a generated slurm.conf (no systemd: each
# daemon is a child of this script, stopped by its PID at the end), submits
# the sweep's job array with sbatch, waits, merges the parts and compares
# the rows with the same sweep run locally. setup.sh installs Debian's
# slurm-wlm and munge; without them the test is skipped (exit 77).
. "$PS_SRCDIR/tests/lib.sh"
for cmd in munged munge slurmctld slurmd sbatch sinfo; do
  if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ]; then
    echo "SKIP: $cmd not found: Slurm and munge are not installed (setup.sh installs slurm-wlm and munge)"
    exit 77
  fi
done
PATH=$PATH:/usr/sbin
T=$PS_TMP
pids=""
stop () {
  for p in $pids; do kill "$p" 2>/dev/null; done
  for p in $pids; do
    for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$T"
}
trap stop EXIT

# munge: a fresh key and a private socket.
dd if=/dev/urandom of="$T/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$T/munge.key"
munged -F -f --key-file="$T/munge.key" --socket="$T/munge.sock" --pid-file="$T/munged.pid" \
  --log-file="$T/munged.log" --seed-file="$T/munged.seed" >"$T/munged.out" 2>&1 &
pids="$pids $!"
for i in $(seq 1 40); do [ -S "$T/munge.sock" ] && break; sleep 0.25; done
munge -S "$T/munge.sock" -n | unmunge -S "$T/munge.sock" >/dev/null 2>&1 || {
  fail "munged did not start"; cat "$T/munged.out" >&2; finish; }

# Slurm: one node (this machine) with its cores; ports from this shell's PID
# so two test runs on one machine do not collide.
user=$(id -un)
port=$((20000 + ($$ % 20000) * 2))
cpus=$(nproc)
mkdir -p "$T/state" "$T/spool"
cat >"$T/slurm.conf" <<CONF
ClusterName=podsimtest
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$T/munge.sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
NodeName=podsimnode NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=podsim Nodes=podsimnode Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$T/slurm.conf"
slurmctld -D -i >"$T/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D -N podsimnode >"$T/slurmd.out" 2>&1 &
pids="$pids $!"
up=no
for i in $(seq 1 120); do
  if sinfo -h -o %T 2>/dev/null | grep -q idle; then up=yes; break; fi
  sleep 0.5
done
if [ $up != yes ]; then
  fail "slurmctld and slurmd did not come up"
  tail -5 "$T/slurmctld.out" "$T/slurmd.out" "$T/slurmctld.log" "$T/slurmd.log" >&2
  finish
fi

# The sweep as a job array of 3 tasks, then the merge, against a local run.
cd "$T" || exit 1
grid="--vary mesh=2x4,4x2 --vary microbatches=1,4 --vary layers=1,2 --layers 1"
expect_status 0 "$PODSIM" sweep $grid --slurm "$T/array" --tasks 3
expect_grep "sbatch $T/array/sweep.sbatch" out
if ! timeout 600 sbatch --wait "$T/array/sweep.sbatch" >"$T/sbatch.out" 2>&1; then
  fail "sbatch --wait failed"
  cat "$T/sbatch.out" "$T"/array/logs/* >&2
fi
expect_grep "Submitted batch job" "$T/sbatch.out"
ls "$T"/array/part-000[012].csv >/dev/null 2>&1 || fail "the array tasks wrote no part files"
expect_status 0 "$PODSIM" sweep --merge "$T/array" -o merged.csv
expect_status 0 "$PODSIM" sweep $grid -q -o local.csv
cmp -s merged.csv local.csv || { fail "Slurm rows differ from the local sweep"; diff local.csv merged.csv | head >&2; }
[ "$(wc -l <merged.csv)" = 9 ] || fail "8 configurations should give 9 lines"
finish
