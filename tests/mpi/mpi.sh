#!/bin/sh
# mpi.sh SRCDIR TRAINER CKPT_DUMP MPIRUN CASE: a trainer under mpirun, with the hand-written
# per-device step of fake_mesh_program.c (AXLC_FAKE_MESH="DATA,MODEL" picks the mesh).
#   init      step 0 checkpoints of 1 process, data=2 x model=2 and model=4 hold the same weights;
#             --init FILE on data=2 x model=2 starts from FILE
#   data      10 steps on 1 process, data=4, data=2 x model=2, model=4: the same losses and
#             final parameters within 1e-5
#   ckpt      a data=2 x model=2 checkpoint resumes under model=4 and under one process on the
#             same curve; under data=2 x model=2 bit for bit; a damaged shard is skipped; a
#             step directory that is a symbolic link is never pruned through (--keep 1)
#   mismatch  a program for 4 devices on 2 processes, or on 1 started by hand, says how to launch
#   kill      SIGKILL of one rank ends the job within 30 s; a stopped (hung) rank is named by the
#             others' watchdog; --resume continues from the last complete checkpoint
#   async     a rank killed while the sharded save of step 6 is in flight (its shards written,
#             AXLC_TEST_SAVE_PAUSE holding the index): no index, --resume continues from step 3
#             bit for bit with a run never killed; SIGTERM then waits for the save in flight
#   sdc       --sdc-check-every 1 over 20 steps on data=2 x model=2: no false alarm; a bit flipped
#             in rank 2's replay of step 4 (AXLC_TEST_SDC_FLIP=4@2): every rank stops with status
#             4, and rank 2 names the tensor
#   setup     a start that fails on rank 0 alone under --resume (the directory locked, a file-size
#             limit, --metrics in a missing directory): every rank stops within seconds, not at
#             the watchdog's deadline, and the reason is printed once
#   hang      SIGSTOP of rank 3, then of rank 1: the watchdog names the stopped rank, not the
#             healthy one the namer waited for
set -u
SRC=$1 TRAINER=$2 DUMP=$3 MPIRUN=$4 CASE=$5
PY=${TORCH_PYTHON:-/usr/bin/python3}
. "$SRC/tests/lib.sh"
scratch mpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
need_numpy
# 4000 tokens of a noisy cycle over 16 symbols, as an llm.c token file
tokens "$T/tok.bin" 4000 16 5 3 5 0.8
# run MESH NP ARGS...: the trainer on mesh MESH ("D,M") with NP processes (1: no mpirun)
run() {
  mesh=$1 np=$2
  shift 2
  if [ "$np" -eq 1 ]; then
    AXLC_FAKE_MESH=$mesh "$TRAINER" --data "$T/tok.bin" --threads 1 "$@"
  else
    AXLC_FAKE_MESH=$mesh "$MPIRUN" -np "$np" --oversubscribe "$TRAINER" --data "$T/tok.bin" --threads 1 "$@"
  fi
}

case $CASE in
init)
  for m in "1,1 1" "2,2 4" "1,4 4" "4,1 4"; do
    set -- $m
    must run "$1" "$2" --steps 0 --ckpt-dir "$T/i$1"
    must "$DUMP" "$T/i$1" "$T/i$1.safetensors"
  done
  ls "$T/i2,2/step_00000000/" | grep -q "state-rank00001.safetensors" || fail "no shard of rank 1"
  for m in 2,2 1,4 4,1; do compare exact "$T/i$m.safetensors" "$T/i1,1.safetensors"; done
  # --init: whole tensors, each rank keeps its chunk
  must run 1,1 1 --steps 3 --ckpt-dir "$T/w"
  must "$DUMP" "$T/w" "$T/w.safetensors"
  must run 2,2 4 --steps 0 --ckpt-dir "$T/iw" --init "$T/w.safetensors" --init-allow-unused
  must "$DUMP" "$T/iw" "$T/iw.safetensors"
  compare exact "$T/iw.safetensors" "$T/w.safetensors"
  ;;
data)
  must run 1,1 1 --steps 10 --metrics "$T/m1.jsonl" --ckpt-dir "$T/c1"
  must "$DUMP" "$T/c1" "$T/c1.safetensors"
  for m in "4,1" "2,2" "1,4"; do
    must run "$m" 4 --steps 10 --metrics "$T/m$m.jsonl" --ckpt-dir "$T/c$m"
    must "$DUMP" "$T/c$m" "$T/c$m.safetensors"
    compare losses "$T/m$m.jsonl" "$T/m1.jsonl" 1e-5
    compare close "$T/c$m.safetensors" "$T/c1.safetensors" 1e-5
  done
  # eval on every rank, the same mean loss
  must run 1,1 1 --steps 4 --eval-data "$T/tok.bin" --eval-every 2 --eval-batches 2 --metrics "$T/e1.jsonl"
  must run 2,2 4 --steps 4 --eval-data "$T/tok.bin" --eval-every 2 --eval-batches 2 --metrics "$T/e4.jsonl"
  "$PY" -c "import json,sys; a=[json.loads(l).get('eval_loss') for l in open(sys.argv[1])]; \
b=[json.loads(l).get('eval_loss') for l in open(sys.argv[2])]; \
sys.exit(0 if a[1] and all((x is None) == (y is None) and (x is None or abs(x - y) <= 1e-5 * abs(y)) \
for x, y in zip(a, b)) else 'eval losses differ: %s vs %s' % (a, b))" "$T/e4.jsonl" "$T/e1.jsonl" || fail "eval"
  # rank 0 alone writes metrics and prints progress
  [ "$(wc -l < "$T/m2,2.jsonl")" -eq 10 ] || fail "metrics: not one line per step"
  run 2,2 4 --steps 3 > "$T/out" 2> "$T/err"
  [ "$(grep -c '^step 3 ' "$T/out")" -le 1 ] || fail "progress printed by more than one rank"
  ;;
ckpt)
  must run 2,2 4 --steps 10 --ckpt-every 5 --keep 0 --metrics "$T/a.jsonl" --ckpt-dir "$T/a"
  ls "$T/a/step_00000005" | grep -q index.json || fail "no index in the sharded checkpoint"
  for m in "1,4 4" "1,1 1" "2,2 4"; do
    set -- $m
    d="$T/r$1"
    mkdir -p "$d" && cp -r "$T/a/step_00000005" "$d/"
    must run "$1" "$2" --steps 10 --resume --ckpt-dir "$d" --metrics "$T/r$1.jsonl"
    grep -q "resumed from" "$T/log" || fail "mesh $1: did not resume"
    head -5 "$T/a.jsonl" | cat - "$T/r$1.jsonl" > "$T/r$1_all.jsonl"
    must "$DUMP" "$d" "$T/r$1.safetensors"
    must "$DUMP" "$T/a" "$T/a.safetensors"
    compare losses "$T/r$1_all.jsonl" "$T/a.jsonl" 1e-5
    compare close "$T/r$1.safetensors" "$T/a.safetensors" 1e-5
  done
  # the same mesh: bit for bit, and the same files
  compare losses "$T/r2,2_all.jsonl" "$T/a.jsonl" 0
  for f in index.json state-rank00000.safetensors state-rank00001.safetensors; do
    cmp -s "$T/r2,2/step_00000010/$f" "$T/a/step_00000010/$f" || fail "same-mesh resume: $f differs"
  done
  # a damaged shard of the newest checkpoint: the previous one is used
  f="$T/a/step_00000010/state-rank00001.safetensors"
  printf '\377' | dd of="$f" bs=1 seek=$(($(wc -c < "$f") / 2)) conv=notrunc 2>/dev/null
  run 1,4 4 --steps 12 --resume --ckpt-dir "$T/a" > "$T/out" 2> "$T/err" || fail "resume past a damaged shard failed"
  grep -q "step_00000010" "$T/err" || { fail "the damaged shard is not named"; cat "$T/err" >&2; }
  grep -q "resumed from .*step_00000005" "$T/out" || fail "did not fall back to step 5"
  # 4 ranks saving sharded checkpoints and pruning (--keep 1) past a step link to a directory
  mkdir "$T/victim" "$T/lk" && echo precious > "$T/victim/a.txt" && echo kept > "$T/victim/b.txt"
  ln -s "$T/victim" "$T/lk/step_00000001"
  must run 2,2 4 --steps 3 --ckpt-every 1 --keep 1 --ckpt-dir "$T/lk"
  [ -f "$T/victim/a.txt" ] && [ -f "$T/victim/b.txt" ] && [ -L "$T/lk/step_00000001" ] ||
    fail "pruning followed the link: victim holds $(ls "$T/victim" | tr '\n' ' ')"
  [ -f "$T/lk/step_00000003/index.json" ] && [ ! -e "$T/lk/step_00000002" ] || fail "--keep 1: $(ls "$T/lk")"
  ;;
mismatch)
  run 2,2 2 --steps 1 > "$T/out" 2> "$T/err"
  [ $? -ne 0 ] || fail "4-device program on 2 processes did not fail"
  grep -q "runs on 4 devices.*mpirun -np 4" "$T/err" || { fail "no launch advice"; cat "$T/err" >&2; }
  run 2,2 1 --steps 1 > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] || fail "4-device program started by hand did not exit 1"
  grep -q "runs on 4 devices.*1 process was started.*mpirun -np 4" "$T/err" || { fail "no launch advice (1)"; cat "$T/err" >&2; }
  ;;
kill)
  for how in KILL STOP; do
    d="$T/k$how"
    AXLC_FAKE_MESH=2,2 AXLC_COMM_TIMEOUT=5 "$MPIRUN" -np 4 --oversubscribe "$TRAINER" --data "$T/tok.bin" \
      --threads 1 --steps 100000000 --ckpt-every 50 --ckpt-dir "$d" > "$T/out" 2> "$T/err" &
    mpi=$!
    trap 'kill -9 $mpi 2>/dev/null; rm -rf "$T"' EXIT
    i=0
    while [ "$(ls -d "$d"/step_*/index.json 2>/dev/null | wc -l)" -lt 2 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    victim=$(pgrep -P $mpi -f fake_mesh_trainer | sed -n 2p)
    [ -n "$victim" ] || { fail "$how: no rank to signal"; kill -9 $mpi; continue; }
    t0=$(date +%s)
    kill -$how "$victim"
    wait $mpi
    rc=$?
    t1=$(date +%s)
    [ "$how" = STOP ] && kill -9 "$victim" 2>/dev/null
    [ $rc -ne 0 ] || fail "$how: the job exited 0"
    [ $((t1 - t0)) -lt 30 ] || fail "$how: the job took $((t1 - t0)) s to end"
    echo "$how of rank pid $victim: the job ended in $((t1 - t0)) s (status $rc)"
    if [ $how = STOP ]; then
      grep -q "no answer from rank" "$T/err" || { fail "STOP: the silent rank is not named"; tail -5 "$T/err" >&2; }
    fi
    last=$(ls -d "$d"/step_* | sort | tail -1)
    must run 2,2 4 --steps 200 --ckpt-dir "$d" --resume
    grep -q "resumed from" "$T/log" || fail "$how: no resume"
  done
  ;;
async)
  must run 2,2 4 --steps 12 --ckpt-every 3 --keep 0 --ckpt-dir "$T/ref"
  shards=$(ls "$T/ref/step_00000003"/state-rank*.safetensors | wc -l) # the ranks that own a chunk
  for how in KILL TERM; do
    d="$T/a$how"
    AXLC_FAKE_MESH=2,2 AXLC_TEST_SAVE_PAUSE=3 "$MPIRUN" -np 4 --oversubscribe "$TRAINER" --data "$T/tok.bin" \
      --threads 1 --steps 100000000 --ckpt-every 3 --keep 0 --ckpt-dir "$d" > "$T/out" 2> "$T/err" &
    mpi=$!
    trap 'kill -9 $mpi 2>/dev/null; rm -rf "$T"' EXIT
    i=0
    while [ "$(ls "$d"/step_00000006/state-rank*.safetensors 2>/dev/null | wc -l)" -lt "$shards" ] &&
      [ $i -lt 300 ]; do
      sleep 0.1
      i=$((i + 1))
    done
    [ -f "$d/step_00000003/index.json" ] && [ ! -f "$d/step_00000006/index.json" ] ||
      fail "$how: the save of step 6 is not in flight"
    if [ $how = KILL ]; then
      kill -KILL "$(pgrep -P $mpi -f fake_mesh_trainer | sed -n 2p)"
    else # every rank, as Slurm does (mpirun would follow its SIGTERM with a SIGKILL)
      kill -TERM $(pgrep -P $mpi -f fake_mesh_trainer)
    fi
    wait $mpi
    rc=$?
    if [ $how = KILL ]; then
      [ $rc -ne 0 ] || fail "KILL: the job exited 0"
      [ ! -f "$d/step_00000006/index.json" ] || fail "KILL: the checkpoint in flight got an index"
    else
      [ -f "$d/step_00000006/index.json" ] && grep -q "SIGTERM: stopped after step" "$T/err" ||
        { fail "TERM: exit $rc, the save in flight not completed"; cat "$T/err" >&2; }
    fi
    must run 2,2 4 --steps 12 --ckpt-every 3 --keep 0 --ckpt-dir "$d" --resume
    [ $how = TERM ] || grep -q "resumed from .*step_00000003" "$T/log" || fail "KILL: not resumed from step 3"
    must "$DUMP" "$d" "$T/a$how.safetensors"
    must "$DUMP" "$T/ref" "$T/ref.safetensors"
    compare exact "$T/a$how.safetensors" "$T/ref.safetensors"
  done
  ;;
sdc)
  must run 2,2 4 --steps 20 --sdc-check-every 1
  AXLC_TEST_SDC_FLIP=4@2 run 2,2 4 --steps 20 --sdc-check-every 2 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 4 ] || { fail "a flipped bit: exit $rc, expected 4"; cat "$T/err" >&2; }
  grep -q "rank 2: step 4: silent data corruption: tensor model/" "$T/err" || { fail "rank 2 not named"; cat "$T/err" >&2; }
  [ "$(grep -c "silent data corruption" "$T/err")" -eq 1 ] || fail "another rank than 2 reported"
  ;;
setup)
  must run 2,2 4 --steps 5 --ckpt-dir "$T/s"
  # start_fails WHAT REASON CMD...: the job fails within 10 s (the watchdog waits 20), REASON once
  start_fails() {
    what=$1 reason=$2
    shift 2
    t0=$(date +%s)
    "$@" > "$T/out" 2> "$T/err"
    rc=$? t1=$(date +%s)
    [ $rc -ne 0 ] || fail "$what: the job exited 0"
    [ $((t1 - t0)) -lt 10 ] || fail "$what: the job took $((t1 - t0)) s to end"
    [ "$(grep -c "$reason" "$T/err")" -eq 1 ] || { fail "$what: '$reason' not printed once"; cat "$T/err" >&2; }
    ! grep -q "no answer from rank" "$T/err" || fail "$what: the watchdog ended the job"
    echo "$what: the job ended in $((t1 - t0)) s (status $rc)"
  }
  # another process holds the directory's lock (held by this python, not passed to mpirun)
  start_fails locked "rank 0: --ckpt-dir: .*locked by another trainer" "$PY" -c '
import fcntl, subprocess, sys
f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX)
sys.exit(subprocess.call(sys.argv[2:]))' "$T/s/.lock" env AXLC_FAKE_MESH=2,2 "$MPIRUN" -np 4 --oversubscribe \
    "$TRAINER" --data "$T/tok.bin" --threads 1 --steps 10 --resume --ckpt-dir "$T/s"
  # no room for a checkpoint: the file-size limit, as on a full disk (the ranks alone: mpirun
  # itself needs larger files)
  start_fails "file-size limit" "rank 0: --ckpt-dir: .*file-size limit" env AXLC_FAKE_MESH=2,2 "$MPIRUN" -np 4 \
    --oversubscribe sh -c 'ulimit -f 8 && exec "$@"' sh "$TRAINER" --data "$T/tok.bin" --threads 1 --steps 10 \
    --resume --ckpt-dir "$T/s"
  # rank 0 opens --metrics after every rank has loaded its checkpoint
  start_fails metrics "rank 0: --metrics: .*cannot open" run 2,2 4 --steps 10 --resume --ckpt-dir "$T/s" \
    --metrics "$T/missing/m.jsonl"
  # the same failure on every rank: printed once, by rank 0
  start_fails "every rank" "every rank: --eval-data: .*cannot open" run 2,2 4 --steps 10 --resume \
    --ckpt-dir "$T/s" --eval-data "$T/missing.bin"
  must run 2,2 4 --steps 10 --resume --ckpt-dir "$T/s"
  grep -q "resumed from .*step_00000005" "$T/log" || fail "no resume after the failed starts"
  ;;
hang)
  for victim in 3 1; do
    rm -f "$T/h.jsonl"
    AXLC_FAKE_MESH=2,2 AXLC_COMM_TIMEOUT=3 "$MPIRUN" -np 4 --oversubscribe "$TRAINER" --data "$T/tok.bin" \
      --threads 1 --steps 100000000 --log-every 1000 --metrics "$T/h.jsonl" > "$T/out" 2> "$T/err" &
    mpi=$!
    trap 'kill -9 $mpi 2>/dev/null; rm -rf "$T"' EXIT
    i=0
    while [ "$(cat "$T/h.jsonl" 2>/dev/null | wc -l)" -lt 100 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    pid=
    for p in $(pgrep -P $mpi); do
      tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim" && pid=$p
    done
    [ -n "$pid" ] || { fail "rank $victim: no pid"; kill -9 $mpi; continue; }
    t0=$(date +%s)
    kill -STOP "$pid"
    wait $mpi
    rc=$? t1=$(date +%s)
    kill -9 "$pid" 2>/dev/null
    [ $rc -ne 0 ] || fail "STOP of rank $victim: the job exited 0"
    [ $((t1 - t0)) -lt 20 ] || fail "STOP of rank $victim: the job took $((t1 - t0)) s to end"
    named=$(grep -o "no answer from rank [0-9, ]* for" "$T/err" | sort -u)
    [ "$named" = "no answer from rank $victim for" ] || { fail "STOP of rank $victim: named '$named'"; cat "$T/err" >&2; }
    echo "STOP of rank $victim: the job ended in $((t1 - t0)) s; $(grep -m1 "no answer" "$T/err")"
  done
  ;;
*) fail "unknown case $CASE" ;;
esac
[ $fails -eq 0 ] || exit 1
echo "PASS [$CASE]"
