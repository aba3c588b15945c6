#!/bin/sh
# slurm.sh AXLC SRCDIR CKPT_DUMP: a one-node Slurm cluster from Debian's packages (slurmctld,
# slurmd, munge), started in a temporary directory as the current user and torn down after,
# then the supervisor in its allocations:
#   - srun --mpi=list offers pmix (Open MPI's trainers start under srun --mpi=pmix);
#   - the short chaos test inside `salloc -n 4`: the supervisor launches with srun, 2 SIGKILLs
#     (one during a save), restarts inside the allocation, final parameters bit-identical;
#   - `salloc -n 2` for a trainer of 4 ranks with --min-ranks 2: the job runs on 2;
#   - docs/slurm/train.sbatch under `sbatch --wait`.
# Exits 77 (skipped) where the packages are missing or the daemons do not start here.
set -u
AXLC=$1 SRC=$2 DUMP=$3 CASE=slurm
case $AXLC in /*) ;; *) AXLC=$PWD/$AXLC ;; esac # the batch script runs in another directory
case $DUMP in /*) ;; *) DUMP=$PWD/$DUMP ;; esac
. "$SRC/tests/lib.sh"
for tool in slurmctld slurmd munged srun salloc sbatch sinfo; do
  command -v $tool > /dev/null || { echo "SKIP: $tool is not installed (tools/install-deps.sh)"; exit 77; }
done
scratch slurm
S=$T/slurm
mkdir -p "$S/state" "$S/spool" "$S/log"
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; done; sleep 0.5; for p in $pids; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT
# munge: a key of its own and a socket in the directory, so nothing of the machine's is used
dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2> /dev/null
chmod 400 "$S/munge.key"
munged --socket="$S/munge.sock" --key-file="$S/munge.key" --pid-file="$S/munged.pid" \
  --log-file="$S/log/munged.log" --seed-file="$S/munge.seed" --force ||
  { echo "SKIP: munged does not start here"; exit 77; }
pids="$(cat "$S/munged.pid")"
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
H=$(hostname)
cat > "$S/slurm.conf" << CONF
ClusterName=axlc
SlurmctldHost=$H
SlurmUser=$(id -un)
SlurmctldPort=$(port)
SlurmdPort=$(port)
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
NodeName=$H CPUs=4 State=UNKNOWN
PartitionName=axlc Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF="$S/slurm.conf"
t0=$(date +%s.%N)
slurmctld -D -i -f "$SLURM_CONF" > "$S/log/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D -f "$SLURM_CONF" -N "$H" > "$S/log/slurmd.out" 2>&1 &
pids="$pids $!"
i=0
until sinfo -h -o %t 2> /dev/null | grep -q idle || [ $i -ge 150 ]; do sleep 0.2; i=$((i + 1)); done
if [ $i -ge 150 ]; then
  echo "SKIP: the Slurm daemons did not come up in 30 s here:"
  tail -5 "$S"/log/* >&2
  exit 77
fi
echo "a one-node cluster in $(awk "BEGIN { print $(date +%s.%N) - $t0 }") s"

srun --mpi=list > "$T/mpi" 2>&1
grep -q pmix "$T/mpi" || { fail "srun --mpi=list offers no pmix"; cat "$T/mpi" >&2; }

# the short chaos test in an allocation of 4 tasks: srun, kills, restarts, the same bits
# (under srun the ranks that outlive a killed one are ended by the watchdog: a 5 s deadline)
AXLC_COMM_TIMEOUT=5 timeout 600 salloc -n 4 /usr/bin/python3 "$SRC/tools/bench/chaos.py" --axlc "$AXLC" --dump "$DUMP" \
  --steps 40 --kills 2 --stops 0 --ckpt-every 5 --work "$T/chaos" > "$T/chaos.out" 2>&1 ||
  { fail "the chaos test under salloc -n 4"; tail -30 "$T/chaos.out" >&2; }
cat "$T/chaos.out"
grep -q '"launcher":"[^"]*srun"' "$T/chaos/report.jsonl" || fail "the supervisor did not launch with srun"
grep -q "bit-identical" "$T/chaos.out" || fail "chaos: the final parameters differ"

# fewer tasks than the trainer's ranks: the job goes on with 2 (the trainer of the chaos test)
timeout 600 salloc -n 2 "$AXLC" launch "$T/chaos/trainer" -n 4 --min-ranks 2 --report "$T/small.jsonl" -- \
  --data "$T/chaos/tokens.bin" --steps 6 --ckpt-dir "$T/small" --threads 1 > "$T/small.out" 2>&1 ||
  { fail "salloc -n 2, --min-ranks 2"; tail -20 "$T/small.out" >&2; }
grep -q '"event":"shrink","from":4,"to":2' "$T/small.jsonl" || { fail "no shrink to the allocation"; cat "$T/small.jsonl" >&2; }
grep -q "done at step 6" "$T/small.out" || fail "salloc -n 2: the job did not finish"
timeout 600 salloc -n 2 "$AXLC" launch "$T/chaos/trainer" -n 4 -- --data "$T/chaos/tokens.bin" \
  --ckpt-dir "$T/small2" > "$T/small2.out" 2>&1
grep -q "the Slurm allocation has 2 tasks.*expected --min-ranks 2 or less" "$T/small2.out" ||
  { fail "salloc -n 2 without --min-ranks: no reason"; cat "$T/small2.out" >&2; }

# the documented batch script
(cd "$T" && AXLC="$AXLC" TRAINER="$T/chaos/trainer" DATA="$T/chaos/tokens.bin" CKPT="$T/batch" STEPS=10 \
  timeout 600 sbatch --wait --export=ALL -o "$T/batch.out" "$SRC/docs/slurm/train.sbatch" > /dev/null) ||
  { fail "sbatch docs/slurm/train.sbatch"; cat "$T/batch.out" >&2; }
grep -q "done at step 10" "$T/batch.out" || { fail "the batch job did not finish"; cat "$T/batch.out" >&2; }
[ "$fails" -eq 0 ] || exit 1
