#!/bin/sh
# launch.sh AXLC SRCDIR CASE: the supervisor (axlc launch, axlc run --target cpu-N) on tiny-lm
# trainers of 2 ranks under mpirun.
#   errors     bad command lines: each exits 1 with its reason, before anything runs (axlc
#              run's supervisor options on a job of one process too)
#   startup    a job that fails before its first step (bad --data) is not restarted
#   samestep   a non-finite loss at the same step twice, the second time past the first's
#              batch (--skip-batches 1): given up after one restart, the cause and the step in
#              the log and the report
#   run        axlc run --target cpu-2 --max-restarts 2: a killed rank, a restart, a finished
#              run on the uninterrupted run's losses (both started past 3 batches); its goodput
#              counts the restart's downtime
#   pipeline   the same for a pipeline job (pipeline=2, 1F1B): a stage's rank killed, the job
#              restarted from the checkpoint its stages wrote, on the uninterrupted run's losses
#   sdc        a bit flipped on rank 1 (AXLC_TEST_SDC_FLIP): restarted, then rank 1 removed
#   nockpt     a job without --ckpt-dir that fails (missing or empty --data under axlc run
#              --target cpu-2, a trainer of 2 ranks launched on 3): the trainer's reason, exit 1,
#              no crash, no temporary directory left
#   report     --report onto the trainer's files (--data, --metrics, inside --ckpt-dir) refused
#              before anything is written; a report that cannot be written is an error
#   plainlog   a 2-rank job logged to a file: plain lines every --log-every steps, no CR or ESC
#   signals    a one-rank trainer's SIGSEGV named as the trainer's; SLURM_JOB_ID said
#   stopped    the supervisor stopped while the job waits on its output: goodput counts the
#              trainer's step times, not the stopped time
#   accounting --restart-downtime out of range refused; --restart-step on a run that loaded no
#              checkpoint loses no steps
#   reworded   every trainer message reworded (AXLC_REWORD_MESSAGES=1): the supervisor still
#              names each cause from the event lines: a non-finite loss (its step and tensor), a
#              rank's silent data corruption (the rank), a rank stopped (the watchdog's rank)
set -u
AXLC=$1 SRC=$2 CASE=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
. "$SRC/tests/lib.sh"
scratch launch
MODEL="$SRC/models/tiny-lm.json"
# tokens below 32, as plain text would not give: an llm.c token file
tokens "$T/tokens.bin" 20000
DATA="$T/tokens.bin"

# refused WHAT EXPECTED ARGS...: axlc launch ARGS exits 1 and says EXPECTED (grep -E)
refused() {
  what=$1 expected=$2
  shift 2
  "$AXLC" launch "$@" > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] || fail "$what: exit $rc, expected 1"
  grep -qE -e "$expected" "$T/err" || { fail "$what: no '$expected'"; cat "$T/err" >&2; }
  [ ! -e "$T/ck" ] || fail "$what: something ran"
}

# kill_and_recover CASE PID: once $T/m.jsonl has 8 steps, kills the last rank of the job that
# axlc run (PID, trainers under $T/tmp) supervises; axlc run must then exit 0, naming the
# signal as the cause and saying it recovered
kill_and_recover() {
  what=$1 axlc=$2
  i=0
  until [ "$(cat "$T/m.jsonl" 2> /dev/null | wc -l)" -ge 8 ] || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  rank=$(for p in /proc/[0-9]*; do
    case $(readlink "$p/exe") in "$T"/tmp/axlc-run-*/trainer) echo "${p#/proc/}" ;; esac
  done | tail -1)
  [ -n "$rank" ] && kill -KILL "$rank" || fail "$what: no rank to kill"
  wait "$axlc"
  rc=$?
  [ $rc -eq 0 ] || { fail "$what: axlc run exited $rc"; tail -20 "$T/err" >&2; }
  grep -q "axlc run: the job failed at step [0-9]*: rank [01] died of signal 9" "$T/err" || { fail "$what: no cause"; cat "$T/err" >&2; }
  grep -q "axlc run: recovered: step" "$T/err" || fail "$what: no recovery"
}

case $CASE in
errors)
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  refused "no trainer" "usage: axlc launch TRAINER -n N"
  refused "no -n" "usage: axlc launch TRAINER -n N" "$T/t2" -- --data "$DATA"
  refused "-n 0" "-n 0: expected a whole number from 1 to 4096" "$T/t2" -n 0
  refused "missing trainer" "$T/none: No such file or directory" "$T/none" -n 2
  refused "a directory" "$T: not a file" "$T" -n 2
  refused "not executable" "tokens.bin: not executable" "$DATA" -n 2
  refused "--min-ranks above -n" "--min-ranks 3 is more than -n 2" "$T/t2" -n 2 --min-ranks 3
  refused "--max-restarts" "--max-restarts x: expected a whole number from 0" "$T/t2" -n 2 --max-restarts x
  refused "--backoff" "--backoff -1: expected seconds from 0 to 60" "$T/t2" -n 2 --backoff -1
  refused "unknown option" "unknown option --bogus" "$T/t2" -n 2 --bogus
  refused "restarts need checkpoints" "expected --ckpt-dir DIR among the trainer's options" \
    "$T/t2" -n 2 -- --data "$DATA" --steps 2
  refused "--report onto the trainer" "--report.*t2" "$T/t2" -n 2 --report "$T/t2" -- --data "$DATA" --ckpt-dir "$T/ck"
  [ -x "$T/t2" ] || fail "--report destroyed the trainer"
  # axlc run: the supervisor's options on a job of one process, which runs in axlc run itself
  "$AXLC" run "$MODEL" --target cpu --max-restarts 2 --data "$DATA" --steps 1 --ckpt-dir "$T/ck" > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "supervise a job of several processes (--target cpu-N)" "$T/err" ||
    { fail "axlc run --target cpu --max-restarts: exit $rc"; cat "$T/err" >&2; }
  [ ! -e "$T/ck" ] || fail "axlc run --target cpu --max-restarts: it ran"
  ;;
startup)
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  "$AXLC" launch "$T/t2" -n 2 --report "$T/r.jsonl" -- --data "$T/missing.bin" --ckpt-dir "$T/ck" \
    > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] || fail "startup: exit $rc, expected 1"
  grep -q "missing.bin" "$T/err" || fail "startup: the trainer's reason is not shown"
  grep -q "failed before its first step.*not restarting" "$T/err" || { fail "startup: restarted"; cat "$T/err" >&2; }
  [ "$(grep -c '"event":"launch"' "$T/r.jsonl")" -eq 1 ] || fail "startup: more than one launch"
  ;;
samestep)
  # a learning rate that makes the loss non-finite at step 2, every time
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 \
    --set /learner/optimizer/learning_rate=1e30 -o "$T/nan"
  "$AXLC" launch "$T/nan" -n 2 --backoff 0.1 --report "$T/r.jsonl" -- --data "$DATA" --steps 20 \
    --ckpt-dir "$T/ck" --ckpt-every 1 --threads 1 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 3 ] || fail "samestep: exit $rc, expected 3 (the trainer's status for a non-finite loss)"
  grep -q "failed at step 2: a non-finite value (step 2: loss" "$T/err" || { fail "samestep: no cause"; cat "$T/err" >&2; }
  grep -q "failed 2 times at step 2: a restart repeats this failure; giving up" "$T/err" || fail "samestep: not given up"
  [ "$(grep -c '"event":"launch"' "$T/r.jsonl")" -eq 2 ] || fail "samestep: expected 2 launches"
  # the restart goes back to step 1 and passes over the batch of step 2, which fails again
  grep -q "a non-finite value at step 2: back to step 1, passing over 1 batch (the bad one at step 2)" "$T/err" ||
    fail "samestep: no skip"
  grep -q '"event":"launch","launch":2,.*"restart_step":2,"skip_batches":1' "$T/r.jsonl" ||
    { fail "samestep: the restart's options"; cat "$T/r.jsonl" >&2; }
  grep -q '"event":"failure".*"cause":"a non-finite value.*"step":2,"checkpoint":1,"steps_lost":1' "$T/r.jsonl" ||
    { fail "samestep: report"; cat "$T/r.jsonl" >&2; }
  ;;
run)
  # the uninterrupted run, then the same under axlc run with a rank killed at step 8 or later
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  # both from the 4th batch (--skip-batches 3): the restart resumes from the checkpoint's data
  # position and does not pass over 3 more
  must "$AXLC" launch "$T/t2" -n 2 -- --data "$DATA" --steps 60 --ckpt-dir "$T/ref" --threads 1 --metrics "$T/ref.jsonl" \
    --skip-batches 3
  mkdir "$T/tmp"
  TMPDIR="$T/tmp" "$AXLC" run "$MODEL" --target cpu-2 --set /input/seq_len=16 --max-restarts 2 --backoff 0.1 \
    --report "$T/r.jsonl" --data "$DATA" --steps 60 --ckpt-dir "$T/ck" --ckpt-every 5 --threads 1 \
    --metrics "$T/m.jsonl" --skip-batches 3 > "$T/out" 2> "$T/err" &
  kill_and_recover run $!
  grep -q '"event":"end","status":0,"restarts":1' "$T/r.jsonl" || { fail "run: report"; cat "$T/r.jsonl" >&2; }
  # the losses of the run, resumed, are the uninterrupted run's, step by step (cut back on resume)
  cut -d, -f1-2 "$T/ref.jsonl" > "$T/a"
  cut -d, -f1-2 "$T/m.jsonl" > "$T/b"
  cmp -s "$T/a" "$T/b" || { fail "run: the losses differ from the uninterrupted run's"; diff "$T/a" "$T/b" | head >&2; }
  [ -z "$(ls "$T/tmp")" ] || fail "run: left $(ls "$T/tmp")"
  # goodput covers the whole supervised run: the restart's downtime (the back-off of 0.1 s and
  # more, within the recovery's latency) is in the metrics' last line and the final line
  /usr/bin/python3 - "$T/m.jsonl" "$T/r.jsonl" <<'PYEOF' || fail "run: goodput"
import json, sys
m = json.loads(open(sys.argv[1]).read().splitlines()[-1])
rec = [json.loads(l) for l in open(sys.argv[2]) if '"recovered"' in l][0]
ok = 0.1 <= m["downtime_s"] <= rec["latency_s"] and m["wall_s"] > m["productive_s"] + m["downtime_s"]
ok = ok and abs(m["goodput"] - m["productive_s"] / m["wall_s"]) < 1e-4
print("downtime %.3f s, recovery latency %.3f s, goodput %.4f" % (m["downtime_s"], rec["latency_s"], m["goodput"]))
sys.exit(0 if ok else 1)
PYEOF
  grep -q "goodput [0-9.]*% of .*restart downtime 0\.[1-9]\|goodput [0-9.]*% of .*restart downtime [1-9]" "$T/out" ||
    { fail "run: no downtime in the final line"; tail -2 "$T/out" >&2; }
  ;;
pipeline)
  # a pipeline job (tiny-lm's 2 layers on 2 stages, 1F1B) supervised as any other: a stage's
  # rank killed at step 8 or later, the job restarted from its checkpoint (written by stage),
  # and the losses those of the uninterrupted run, step by step
  set -- --set /input/seq_len=16 --set '/mesh/shape=[2,1,1,1,1,1]' --set /learner/microbatches=2 \
    --set /mesh/pipeline_schedule=1f1b
  must "$AXLC" compile "$MODEL" --target cpu-2 "$@" -o "$T/p2"
  must "$AXLC" launch "$T/p2" -n 2 -- --data "$DATA" --steps 150 --ckpt-dir "$T/ref" --threads 1 --metrics "$T/ref.jsonl"
  mkdir "$T/tmp"
  TMPDIR="$T/tmp" "$AXLC" run "$MODEL" --target cpu-2 "$@" --max-restarts 2 --backoff 0.1 \
    --data "$DATA" --steps 150 --ckpt-dir "$T/ck" --ckpt-every 5 --threads 1 --metrics "$T/m.jsonl" > "$T/out" 2> "$T/err" &
  kill_and_recover pipeline $!
  cut -d, -f1-2 "$T/ref.jsonl" > "$T/a"
  cut -d, -f1-2 "$T/m.jsonl" > "$T/b"
  [ "$(wc -l < "$T/a")" -eq 150 ] || fail "pipeline: $(wc -l < "$T/a") steps in the uninterrupted run"
  cmp -s "$T/a" "$T/b" || { fail "pipeline: the losses differ from the uninterrupted run's"; diff "$T/a" "$T/b" | head >&2; }
  ;;
sdc)
  # a bit flipped on rank 1 in the replay of step 3, every time that rank runs it: a failure of
  # rank 1, restarted, then (the second time) the job goes on without it on 1 rank
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  mkdir "$T/tmp"
  TMPDIR="$T/tmp" AXLC_TEST_SDC_FLIP=3@1 "$AXLC" launch "$T/t2" -n 2 --backoff 0.1 --min-ranks 1 \
    --report "$T/r.jsonl" -- --data "$DATA" --steps 5 --ckpt-dir "$T/ck" --ckpt-every 1 --threads 1 \
    --sdc-check-every 3 --metrics "$T/m.jsonl" > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 0 ] || { fail "sdc: exit $rc"; tail -20 "$T/err" >&2; }
  [ "$(grep -c "the job failed at step [0-9]*: rank 1: silent data corruption at step 3" "$T/err")" -eq 2 ] ||
    { fail "sdc: expected 2 failures of rank 1"; cat "$T/err" >&2; }
  grep -q "rank 1 failed 2 times: going on without it" "$T/err" || fail "sdc: rank 1 not removed"
  grep -q '"event":"failure".*"rank":1,"status":4' "$T/r.jsonl" || { fail "sdc: report"; cat "$T/r.jsonl" >&2; }
  grep -q '"event":"shrink","from":2,"to":1' "$T/r.jsonl" || fail "sdc: no shrink"
  grep -q '"event":"end","status":0,"restarts":2,"ranks":1' "$T/r.jsonl" || fail "sdc: end"
  [ -z "$(ls "$T/tmp")" ] || fail "sdc: left $(ls "$T/tmp")"
  # the trainer's wall time spans the three launches (the second saved nothing: its time is
  # downtime too), as the supervisor's does, less the launchers' start before the first
  /usr/bin/python3 - "$T/m.jsonl" "$T/r.jsonl" <<'PYEOF' || fail "sdc: goodput's wall time"
import json, sys
m = json.loads(open(sys.argv[1]).read().splitlines()[-1])
end = [json.loads(l) for l in open(sys.argv[2]) if '"end"' in l][0]
print("trainer wall %.3f s (downtime %.3f s), supervisor wall %.3f s" % (m["wall_s"], m["downtime_s"], end["wall_s"]))
sys.exit(0 if 0.75 * end["wall_s"] <= m["wall_s"] <= end["wall_s"] + 0.05 else 1)
PYEOF
  ;;
nockpt)
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  mkdir "$T/tmp"
  : > "$T/empty.bin"
  for data in "$T/missing.bin" "$T/empty.bin"; do
    TMPDIR="$T/tmp" "$AXLC" run "$MODEL" --target cpu-2 --set /input/seq_len=16 --data "$data" --steps 2 \
      > "$T/out" 2> "$T/err"
    rc=$?
    [ $rc -eq 1 ] || { fail "nockpt: axlc run --data $data: exit $rc, expected 1"; tail -5 "$T/err" >&2; }
    grep -q "trainer: every rank: --data: $data: \(cannot open: No such file\|empty data file\)" "$T/err" ||
      { fail "nockpt: $data: the trainer's reason is not shown"; cat "$T/err" >&2; }
    grep -q "axlc run: the job failed at step 0: the job exited with status 1; no checkpoint yet" "$T/err" ||
      fail "nockpt: $data: no failure line"
    [ -z "$(ls "$T/tmp")" ] || fail "nockpt: $data: left $(ls "$T/tmp")"
  done
  TMPDIR="$T/tmp" "$AXLC" launch "$T/t2" -n 3 --max-restarts 0 -- --data "$DATA" --steps 2 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] || fail "nockpt: 3 ranks: exit $rc, expected 1"
  grep -q "t2: this program runs on 2 devices, one process each, but 3 processes were started" "$T/err" ||
    { fail "nockpt: 3 ranks: the trainer's reason is not shown"; cat "$T/err" >&2; }
  grep -q "axlc launch: it failed before its first step" "$T/err" || fail "nockpt: 3 ranks: no failure line"
  [ -z "$(ls "$T/tmp")" ] || fail "nockpt: 3 ranks: left $(ls "$T/tmp")"
  ;;
report)
  must "$AXLC" compile "$MODEL" --target cpu --set /input/seq_len=16 -o "$T/t1"
  cp "$DATA" "$T/data.bin"
  mkdir "$T/ck"
  echo 123 > "$T/ck/.lock"
  # refused_report REPORT EXPECTED TRAINER-OPTIONS...: refused before anything runs or is written
  refused_report() {
    rep=$1 expected=$2
    shift 2
    "$AXLC" launch "$T/t1" -n 1 --max-restarts 0 --report "$rep" -- "$@" > "$T/out" 2> "$T/err"
    rc=$?
    [ $rc -eq 1 ] || fail "report $rep: exit $rc, expected 1"
    grep -qF -e "$expected" "$T/err" || { fail "report $rep: no '$expected'"; cat "$T/err" >&2; }
    [ ! -s "$T/out" ] || fail "report $rep: the trainer ran"
  }
  refused_report "$T/data.bin" "error: --report $T/data.bin is the trainer's --data $T/data.bin; refusing" \
    --data "$T/data.bin" --steps 2
  ln "$T/data.bin" "$T/link.bin"
  refused_report "$T/link.bin" "is the trainer's --data $T/data.bin" --data "$T/data.bin" --steps 2
  refused_report "$T/data.bin" "is the trainer's --eval-data $T/data.bin" --data "$DATA" --eval-data="$T/data.bin"
  refused_report "$T/./m.jsonl" "is the trainer's --metrics $T/m.jsonl" --data "$DATA" --metrics "$T/m.jsonl"
  refused_report "$T/ck/.lock" "error: --report $T/ck/.lock lies inside the trainer's --ckpt-dir $T/ck" \
    --data "$DATA" --ckpt-dir "$T/ck"
  refused_report "$T/ck/step_00000001" "lies inside the trainer's --ckpt-dir $T/ck" --data "$DATA" --ckpt-dir "$T/ck"
  # axlc run --target cpu-N checks it the same way, before it compiles
  "$AXLC" run "$MODEL" --target cpu-2 --report "$T/data.bin" --data="$T/data.bin" --steps 2 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] && grep -qF "error: --report $T/data.bin is the trainer's --data $T/data.bin; refusing" "$T/err" ||
    { fail "report: axlc run: exit $rc"; cat "$T/err" >&2; }
  cmp -s "$DATA" "$T/data.bin" || fail "report: the data changed"
  [ "$(cat "$T/ck/.lock")" = 123 ] || fail "report: the lock changed"
  [ ! -e "$T/m.jsonl" ] || fail "report: the metrics were written"
  # a report that cannot be written (a file size limit of 0): an error and exit 1, after the run
  sh -c 'trap "" XFSZ; ulimit -f 0; "$@" > /dev/null 2> /dev/stderr; echo $? > /dev/stderr' sh "$AXLC" launch \
    "$T/t1" -n 1 --max-restarts 0 --report "$T/r.jsonl" -- --data "$DATA" --steps 2 2>&1 | cat > "$T/err"
  grep -q "^axlc launch: error: $T/r.jsonl: cannot write the report: File too large$" "$T/err" ||
    { fail "report: a failed write is not said"; cat "$T/err" >&2; }
  [ "$(tail -1 "$T/err")" = 1 ] || fail "report: a failed write exits $(tail -1 "$T/err"), expected 1"
  ;;
plainlog)
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  for how in launch run; do
    if [ $how = launch ]; then
      "$AXLC" launch "$T/t2" -n 2 --max-restarts 0 -- --data "$DATA" --steps 23 --log-every 5 --threads 1 \
        > "$T/out" 2> "$T/err"
    else
      "$AXLC" run "$MODEL" --target cpu-2 --set /input/seq_len=16 --data "$DATA" --steps 23 --log-every 5 \
        --threads 1 > "$T/out" 2> "$T/err"
    fi
    rc=$?
    [ $rc -eq 0 ] || { fail "plainlog $how: exit $rc"; tail -5 "$T/err" >&2; }
    ! grep -q "$(printf '[\r\033]')" "$T/out" || { fail "plainlog $how: a CR or ESC in the log"; od -c "$T/out" | head >&2; }
    # the first step, every 5th, the last; each a line of its own
    steps=$(grep -o '^step [0-9]* loss' "$T/out" | cut -d' ' -f2 | tr '\n' ' ')
    [ "$steps" = "1 5 10 15 20 23 " ] || fail "plainlog $how: step lines for '$steps', expected 1 5 10 15 20 23"
  done
  # the variable the supervisor sets, checked as the trainer's other variables are
  must "$AXLC" compile "$MODEL" --target cpu --set /input/seq_len=16 -o "$T/t1"
  AXLC_PROGRESS=yes "$T/t1" --data "$DATA" --steps 1 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "^t1: AXLC_PROGRESS=yes: expected terminal or plain" "$T/err" ||
    { fail "plainlog: AXLC_PROGRESS=yes: exit $rc"; cat "$T/err" >&2; }
  [ ! -s "$T/out" ] || fail "plainlog: AXLC_PROGRESS=yes: it ran"
  ;;
signals)
  must "$AXLC" compile "$MODEL" --target cpu --set /input/seq_len=16 -o "$T/t1"
  # (under AddressSanitizer the SIGSEGV must kill the trainer, not be reported and turned into exit 1)
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0" \
    "$AXLC" launch "$T/t1" -n 1 --max-restarts 0 -- --data "$DATA" --steps 1000000 --threads 1 > "$T/out" 2> "$T/err" &
  axlc=$!
  i=0
  until grep -q "^step 3 " "$T/out" 2> /dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  trainer=$(pgrep -P $axlc)
  [ -n "$trainer" ] && kill -SEGV "$trainer" || fail "signals: no trainer to kill"
  wait $axlc
  rc=$?
  [ $rc -eq 139 ] || fail "signals: exit $rc, expected 139 (the trainer's)"
  grep -q "axlc launch: the job failed at step [0-9]*: the trainer (rank 0) died of signal 11 (Segmentation fault)" \
    "$T/err" || { fail "signals: the trainer's death is not named"; cat "$T/err" >&2; }
  # a Slurm job id left in the environment: said, with how to launch with mpirun instead
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  SLURM_JOB_ID=4242 "$AXLC" launch "$T/t2" -n 2 --max-restarts 0 -- --data "$DATA" --steps 1 > "$T/out" 2> "$T/err"
  grep -q "^axlc launch: SLURM_JOB_ID=4242 is set: launching with srun inside that Slurm allocation (unset SLURM_JOB_ID to launch with mpirun)$" \
    "$T/err" || { fail "signals: SLURM_JOB_ID not said"; cat "$T/err" >&2; }
  ;;
stopped)
  # a trainer of one rank that takes 20 steps of 50 ms, and after step 10 stops the supervisor
  # for 2 s while it writes more than a pipe holds: it waits on its output meanwhile
  printf '%s\n' '#!/bin/sh' 'i=1' 'while [ $i -le 20 ]; do' \
    '  echo "step $i loss 1.0 grad_norm 1.0 lr 1e-3 tok/s 1000 step_ms 50.000 eta 0:00:01"' \
    '  sleep 0.05' \
    '  if [ $i -eq 10 ]; then' \
    '    kill -STOP $PPID' \
    '    (sleep 2; kill -CONT $PPID) &' \
    "    head -c 300000 /dev/zero | tr '\\\\0' x | fold -w 100" \
    '  fi' \
    '  i=$((i + 1))' \
    'done' > "$T/fake"
  chmod +x "$T/fake"
  "$AXLC" launch "$T/fake" -n 1 --max-restarts 0 --report "$T/r.jsonl" > /dev/null 2> "$T/err"
  rc=$?
  [ $rc -eq 0 ] || { fail "stopped: exit $rc"; cat "$T/err" >&2; }
  # 20 steps of 50 ms kept, over more than 2 s
  /usr/bin/python3 - "$T/r.jsonl" <<'PYEOF' || fail "stopped: goodput"
import json, sys
end = [json.loads(l) for l in open(sys.argv[1]) if '"end"' in l][0]
print("wall %.3f s, goodput %.3f (1.000 s of steps: %.3f)" % (end["wall_s"], end["goodput"], 1.0 / end["wall_s"]))
sys.exit(0 if end["wall_s"] > 2 and abs(end["goodput"] - 1.0 / end["wall_s"]) < 0.01 else 1)
PYEOF
  ;;
accounting)
  must "$AXLC" compile "$MODEL" --target cpu --set /input/seq_len=16 -o "$T/t1"
  "$T/t1" --data "$DATA" --steps 1 --restart-downtime 1e308 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "^t1: --restart-downtime: 1e308 is out of range; expected 0 to 1000000000$" "$T/err" ||
    { fail "accounting: --restart-downtime 1e308: exit $rc"; cat "$T/err" >&2; }
  # a run that loaded no checkpoint (none in --ckpt-dir) runs its steps for the first time
  must "$T/t1" --data "$DATA" --steps 4 --threads 1 --resume --ckpt-dir "$T/ck" --restart-step 10 \
    --restart-downtime 0.5 --metrics "$T/m.jsonl"
  /usr/bin/python3 - "$T/m.jsonl" <<'PYEOF' || fail "accounting: --restart-step on a fresh run"
import json, sys
m = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print("lost %.3f s, productive %.3f s, downtime %.3f s" % (m["lost_s"], m["productive_s"], m["downtime_s"]))
sys.exit(0 if m["lost_s"] == 0 and m["productive_s"] > 0 and m["downtime_s"] == 0.5 else 1)
PYEOF
  ;;
reworded)
  # the trainer's messages say none of what the supervisor once looked for; its event lines do
  export AXLC_REWORD_MESSAGES=1
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 \
    --set /learner/optimizer/learning_rate=1e30 -o "$T/nan"
  # cause CASE EXPECTED: the report's one failure names EXPECTED (grep -E), and no trainer line
  # reads as the English the supervisor once matched
  cause() {
    grep -qE "\"event\":\"failure\",\"launch\":1,\"cause\":\"$2" "$T/r.jsonl" ||
      { fail "$1: cause"; cat "$T/r.jsonl" "$T/err" >&2; }
    grep -q "REWORDED" "$T/err" || fail "$1: the trainer's message was not reworded"
    ! grep -qE "not finite; training stopped|: silent data corruption: |no answer from rank" "$T/err" ||
      fail "$1: a message kept its words"
  }
  "$AXLC" launch "$T/nan" -n 2 --max-restarts 0 --report "$T/r.jsonl" -- --data "$DATA" --steps 20 \
    --threads 1 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 3 ] || fail "nonfinite: exit $rc, expected 3"
  cause nonfinite 'a non-finite value \(step 2: loss\)","rank":-1,"status":3,"step":2'
  AXLC_TEST_SDC_FLIP=3@1 "$AXLC" launch "$T/t2" -n 2 --max-restarts 0 --report "$T/r.jsonl" -- \
    --data "$DATA" --steps 5 --threads 1 --sdc-check-every 3 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 4 ] || fail "sdc: exit $rc, expected 4"
  cause sdc 'rank 1: silent data corruption at step 3","rank":1,"status":4'
  # rank 1 stopped (SIGSTOP) after its 20th step: the watchdog of rank 0 names it in 3 s
  AXLC_COMM_TIMEOUT=3 "$AXLC" launch "$T/t2" -n 2 --max-restarts 0 --report "$T/r.jsonl" -- \
    --data "$DATA" --steps 100000000 --threads 1 --metrics "$T/m.jsonl" > "$T/out" 2> "$T/err" &
  axlc=$!
  pid=
  trap 'kill -9 $axlc $pid 2>/dev/null; rm -rf "$T"' EXIT
  i=0
  until [ "$(cat "$T/m.jsonl" 2> /dev/null | wc -l)" -ge 20 ] || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe")" = "$T/t2" ] && tr '\0' '\n' < "$p/environ" 2> /dev/null |
      grep -qx "OMPI_COMM_WORLD_RANK=1" && pid=${p#/proc/}
  done
  [ -n "$pid" ] || fail "watchdog: rank 1 not found"
  kill -STOP "$pid"
  wait $axlc
  rc=$?
  kill -9 "$pid" 2> /dev/null
  [ $rc -ne 0 ] || fail "watchdog: exit 0"
  cause watchdog 'rank 1: stopped answering \(the watchdog\)","rank":1'
  ;;
*)
  fail "unknown case $CASE"
  ;;
esac
[ "$fails" -eq 0 ] || exit 1
