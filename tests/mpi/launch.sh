#!/bin/sh
# launch.sh AXLC SRCDIR CASE: the supervisor (axlc launch, axlc run --target cpu-N) on tiny-lm
# trainers of 2 ranks under mpirun.
#   errors     bad command lines: each exits 1 with its reason, before anything runs (axlc
#              run's supervisor options on a job of one process too)
#   startup    a job that fails before its first step (bad --data) is not restarted
#   samestep   a non-finite loss at the same step twice: given up after one restart, the
#              cause and the step in the log and the report
#   run        axlc run --target cpu-2 --max-restarts 2: a killed rank, a restart, a finished
#              run on the uninterrupted run's losses
set -u
AXLC=$1 SRC=$2 CASE=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
. "$SRC/tests/lib.sh"
scratch launch
MODEL="$SRC/models/tiny-lm.json"
# tokens below 32, as plain text would not give: an llm.c token file
/usr/bin/python3 - "$T/tokens.bin" <<'PYEOF'
import random, struct, sys
r = random.Random(7); n = 20000; toks = []; t = 0
for i in range(n):
    t = (t * 7 + 5) % 32 if r.random() < 0.7 else r.randrange(32)
    toks.append(t)
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + struct.pack("<%dH" % n, *toks))
PYEOF
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
  [ $rc -eq 1 ] || fail "samestep: exit $rc, expected 1"
  grep -q "failed at step 2: a non-finite value (step 2: loss" "$T/err" || { fail "samestep: no cause"; cat "$T/err" >&2; }
  grep -q "failed 2 times at step 2: a restart repeats this failure; giving up" "$T/err" || fail "samestep: not given up"
  [ "$(grep -c '"event":"launch"' "$T/r.jsonl")" -eq 2 ] || fail "samestep: expected 2 launches"
  grep -q '"event":"failure".*"cause":"a non-finite value.*"step":2,"checkpoint":1,"steps_lost":1' "$T/r.jsonl" ||
    { fail "samestep: report"; cat "$T/r.jsonl" >&2; }
  ;;
run)
  # the uninterrupted run, then the same under axlc run with a rank killed at step 8 or later
  must "$AXLC" compile "$MODEL" --target cpu-2 --set /input/seq_len=16 -o "$T/t2"
  must "$AXLC" launch "$T/t2" -n 2 -- --data "$DATA" --steps 60 --ckpt-dir "$T/ref" --threads 1 --metrics "$T/ref.jsonl"
  mkdir "$T/tmp"
  TMPDIR="$T/tmp" "$AXLC" run "$MODEL" --target cpu-2 --set /input/seq_len=16 --max-restarts 2 --backoff 0.1 \
    --report "$T/r.jsonl" --data "$DATA" --steps 60 --ckpt-dir "$T/ck" --ckpt-every 5 --threads 1 \
    --metrics "$T/m.jsonl" > "$T/out" 2> "$T/err" &
  axlc=$!
  i=0
  until [ "$(cat "$T/m.jsonl" 2> /dev/null | wc -l)" -ge 8 ] || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  rank=$(for p in /proc/[0-9]*; do
    case $(readlink "$p/exe") in "$T"/tmp/axlc-run-*/trainer) echo "${p#/proc/}" ;; esac
  done | tail -1)
  [ -n "$rank" ] && kill -KILL "$rank" || fail "run: no rank to kill"
  wait $axlc
  rc=$?
  [ $rc -eq 0 ] || { fail "run: axlc run exited $rc"; tail -20 "$T/err" >&2; }
  grep -q "axlc run: the job failed at step [0-9]*: rank [01] died of signal 9" "$T/err" || { fail "run: no cause"; cat "$T/err" >&2; }
  grep -q "axlc run: recovered: step" "$T/err" || fail "run: no recovery"
  grep -q '"event":"end","status":0,"restarts":1' "$T/r.jsonl" || { fail "run: report"; cat "$T/r.jsonl" >&2; }
  # the losses of the run, resumed, are the uninterrupted run's, step by step (cut back on resume)
  cut -d, -f1-2 "$T/ref.jsonl" > "$T/a"
  cut -d, -f1-2 "$T/m.jsonl" > "$T/b"
  cmp -s "$T/a" "$T/b" || { fail "run: the losses differ from the uninterrupted run's"; diff "$T/a" "$T/b" | head >&2; }
  [ -z "$(ls "$T/tmp")" ] || fail "run: left $(ls "$T/tmp")"
  ;;
esac
[ "$fails" -eq 0 ] || exit 1
