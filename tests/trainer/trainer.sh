#!/bin/sh
# trainer.sh AXLC SRCDIR CASE [SHARED]: end-to-end tests of compiled trainers.
#   build        compiles the trainers the other cases share into SHARED (the CTest fixture
#                trainer_build): tiny (tiny-lm, seq_len 32, batch 4) and tiny1 (the same with
#                1 layer). A LLVM -O3 compile takes most of a case's time, so each is made once;
#                without SHARED, a case compiles what it needs itself
#   equiv_MODEL  (equiv_bf16, _bf16_llama, _bf16_moe: tiny-lm, fuji-test, moe-test under bf16 compute) 3 steps of `axlc run --target interp`, of the trainer from `axlc compile`,
#                and of `axlc run --target cpu` (the JIT), from the same init and data: the
#                compiled losses and parameters within 1e-4 relative of the interpreter's, and
#                the JIT's bit-identical to the trainer's
#   equiv_microbatch  equiv on tiny-lm with /learner/microbatches=2, and its interpreter losses
#                and parameters within 1e-5 of the interpreter's without microbatches
#   resume_bf16  the same under bf16 compute, and the checkpoint holds f32 masters only
#   resume       20 steps straight = 10 steps, --resume, 10 more: identical losses and params;
#                the first 10 without huge pages (AXLC_HUGEPAGES=0); a bad AXLC_HUGEPAGES
#   damaged      a flipped byte or a truncated file in the newest checkpoint is refused and the
#                previous one is used; bad options and files are clear errors
#   reliability  SIGTERM saves and resumes; a second trainer on one directory, a checkpoint of
#                another model, a file-size limit and a FIFO are refused clearly
#   async        a checkpoint in flight (AXLC_TEST_SAVE_PAUSE holds it before its index) when
#                the trainer is killed: invisible, and --resume from the one before continues bit
#                for bit; when it is stopped by SIGTERM: waited for, saved, then the final one;
#                --ckpt-sync saves the same bytes
#   goodput      every metrics line's MFU times its step time and the peak gives axlc memcheck's
#                FLOPs; the wall time's parts add up within it; a resumed run with
#                --restart-step and --restart-downtime counts the redone steps as lost work and
#                the downtime, carries the first run's totals, and its last line gives goodput
#   sdc          --sdc-check-every 1 on 2 threads over 40 steps: no false alarm; a bit flipped in
#                one replay (AXLC_TEST_SDC_FLIP) ends the run with status 4, naming the tensor
#   badsteps     --skip-outliers with a low threshold on a short window skips some updates
#                (logged, marked in the metrics); 16 steps straight = 8, --resume, 8 more, byte
#                for byte (the window travels in the checkpoint)
#   init_strict  --init: every missing and unused tensor listed, extras refused unless
#                --init-allow-unused, PyTorch's (out, in) layout called out
#   setup_signal SIGTERM while the trainer tokenizes a 200 MB text (its start, before any step):
#                it ends within 3 s, status 143, saying nothing new was saved, and the checkpoint
#                it resumes from stays as it was (it used to wait for the first step)
#   no_clobber   --metrics naming --data, --eval-data (a hard link), --init or a file of a
#                checkpoint is refused before anything is written, the inputs unchanged; a step
#                directory that is a symbolic link is ignored (said so), never pruned through;
#                --data or --eval-data inside a checkpoint (pruning would delete it) is refused
set -u
AXLC=$1 SRC=$2 CASE=$3 SHARED=${4:-}
PY=${TORCH_PYTHON:-/usr/bin/python3}
. "$SRC/tests/lib.sh"
scratch trainer
need_numpy
cp "$CORPUS" "$T/text.txt"
TINY="--set /input/seq_len=32 --set /input/global_batch_size=4"

# trainer NAME: TR= the shared trainer NAME (tiny, tiny1), compiled into $T without SHARED
trainer() {
  if [ -n "$SHARED" ]; then
    TR=$SHARED/$1
    [ -x "$TR" ] || { fail "$TR: missing (did the trainer_build fixture fail?)"; exit 1; }
  else
    build_one "$T" "$1"
    TR=$T/$1
  fi
}

# build_one DIR NAME: compiles the shared trainer NAME into DIR/NAME
build_one() {
  case $2 in
  tiny) extra="" ;;
  tiny1) extra="--set /model/decoder/num_layers=1" ;;
  esac
  # shellcheck disable=SC2086
  "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$1/$2" $TINY $extra \
    > "$T/build.log" 2>&1 || { fail "compile $2"; tail -20 "$T/build.log" >&2; exit 1; }
}

# equiv MODEL SETS...: the interpreter, the compiled trainer and the JIT agree
equiv() {
  model=$1
  shift
  sets=""
  for s in "$@"; do sets="$sets --set $s"; done
  # shellcheck disable=SC2086
  must "$AXLC" run "$model" --target interp --data "$T/text.txt" --steps 3 $sets \
    --dump "$T/interp.safetensors"
  cp "$T/log" "$T/interp.txt"
  # shellcheck disable=SC2086
  if [ -n "${EQUIV_TRAINER:-}" ]; then
    cp "$EQUIV_TRAINER" "$T/trainer"
  else
    # shellcheck disable=SC2086
    must "$AXLC" compile "$model" --target cpu -o "$T/trainer" $sets
  fi
  must "$T/trainer" --data "$T/text.txt" --steps 3 --ckpt-dir "$T/ck1" --metrics "$T/m1.jsonl"
  # shellcheck disable=SC2086
  must "$AXLC" run "$model" --target cpu $sets --data "$T/text.txt" --steps 3 \
    --ckpt-dir "$T/ck2" --metrics "$T/m2.jsonl"
  compare losses "$T/m1.jsonl" "$T/interp.txt" 1e-4
  compare close "$(newest "$T/ck1")/state.safetensors" "$T/interp.safetensors" "${EQUIV_TOL:-1e-4}"
  compare losses "$T/m2.jsonl" "$T/m1.jsonl" 0
  compare exact "$(newest "$T/ck2")/state.safetensors" "$(newest "$T/ck1")/state.safetensors"
}

case $CASE in
build)
  [ -n "$SHARED" ] || { fail "build needs the SHARED directory"; exit 1; }
  mkdir -p "$SHARED" && rm -f "$SHARED/tiny" "$SHARED/tiny1"
  build_one "$SHARED" tiny
  build_one "$SHARED" tiny1
  ;;
# The equivalence cases keep each model's structure (layers, widths, vocabulary) except where
# noted, on a short sequence and a small batch: the interpreter's time grows with B*T, and
# the code generated does not depend on them.
equiv_tiny_lm)
  # the shared tiny trainer is exactly this compile
  trainer tiny
  EQUIV_TRAINER=$TR
  equiv "$SRC/models/tiny-lm.json" /input/seq_len=32 /input/global_batch_size=4
  ;;
equiv_moe) equiv "$SRC/models/moe-test.json" /input/seq_len=32 /input/global_batch_size=4 ;;
equiv_bf16)
  # bf16 compute (docs/precision.md): the trainer, the JIT (which binds the runtime's bf16
  # product and attention kernels) and the interpreter, which rounds where the backend does.
  # The products and attention accumulate in f32 (the interpreter in double), so a few of
  # their bf16 results in ten thousand round the other way; AdamW's first steps, about lr
  # times the gradient's sign, carry that into the parameters at 1e-3 to 2e-3 relative, as
  # much as bf16 against f32 compute moves them: the parameters are checked loosely here,
  # the ops exactly in backend_bf16 and the step closely in backend_step. The losses stay
  # within 1e-4.
  EQUIV_TOL=1e-2 equiv "$SRC/models/tiny-lm.json" /input/seq_len=32 /input/global_batch_size=4 \
    /precision/compute=bf16
  ;;
equiv_bf16_llama)
  # the same for a llama-style model (fuji-test: RoPE, GQA, SwiGLU, RMSNorm; measured: losses
  # 8e-8, parameters 4e-7 apart)
  EQUIV_TOL=1e-3 equiv "$SRC/models/fuji-test.json" /input/seq_len=16 /input/global_batch_size=2 \
    /model/vocab_size=256 /precision/compute=bf16
  ;;
equiv_bf16_moe)
  # and the MoE, whose top-2 routing turns a changed router logit into a changed expert
  # (measured: losses 5e-5, parameters 5e-3 apart)
  EQUIV_TOL=5e-2 equiv "$SRC/models/moe-test.json" /input/seq_len=16 /input/global_batch_size=2 \
    /precision/compute=bf16
  ;;
equiv_microbatch)
  # the step as 2 forward/backward passes of 2 sequences each: the same training as the batch
  # of 4 at once, up to the order of the sums
  must "$AXLC" run "$SRC/models/tiny-lm.json" --target interp --data "$T/text.txt" --steps 3 \
    --set /input/seq_len=32 --set /input/global_batch_size=4 --dump "$T/whole.safetensors"
  cp "$T/log" "$T/whole.txt"
  equiv "$SRC/models/tiny-lm.json" /input/seq_len=32 /input/global_batch_size=4 \
    /learner/microbatches=2
  compare losses "$T/interp.txt" "$T/whole.txt" 1e-5
  compare close "$T/interp.safetensors" "$T/whole.safetensors" 1e-5
  ;;
equiv_gpt2)
  # gpt2-124m at its full width, heads and vocabulary (768, 12, 50257: its largest matrices),
  # 2 of its 12 identical layers, one sequence of 8 tokens: the interpreter's time is in the
  # (T, 768) x (768, 50257) products and AdamW over the 38.6M-entry embedding, so this takes
  # about 2 minutes, not a quarter of an hour (12 layers, T=32)
  equiv "$SRC/models/gpt2-124m.json" /input/global_batch_size=1 /input/seq_len=8 \
    /model/decoder/num_layers=2
  ;;
resume)
  trainer tiny && cp "$TR" "$T/trainer"
  must "$T/trainer" --data "$T/text.txt" --steps 20 --ckpt-dir "$T/a" --ckpt-every 10 \
    --metrics "$T/a.jsonl"
  cp "$T/log" "$T/a.log"
  # the first half without huge pages for the slab: the same bits
  must env AXLC_HUGEPAGES=0 "$T/trainer" --data "$T/text.txt" --steps 10 --ckpt-dir "$T/b" \
    --ckpt-every 10 --metrics "$T/b.jsonl"
  cp "$T/log" "$T/b.log"
  # the kernel gives huge pages where asked: the slab (3.4 MiB) holds at least one (the memory
  # line is there where the C library reports its heap: not under AddressSanitizer)
  if grep -q '\[madvise\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null &&
    grep -q "memory: predicted" "$T/a.log"; then
    grep -q "; [1-9][0-9.]* MiB in huge pages" "$T/a.log" || fail "no huge pages: $(tail -1 "$T/a.log")"
    grep -q "; 0.00 MiB in huge pages" "$T/b.log" || fail "AXLC_HUGEPAGES=0: $(tail -1 "$T/b.log")"
  fi
  env AXLC_HUGEPAGES=yes "$T/trainer" --data "$T/text.txt" --steps 10 --ckpt-dir "$T/c" > "$T/out" 2> "$T/err"
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "AXLC_HUGEPAGES=yes: expected a whole number from 0 to 1" "$T/err" &&
    [ ! -e "$T/c" ] || fail "AXLC_HUGEPAGES=yes: exit $rc, $(cat "$T/err")"
  must "$T/trainer" --data "$T/text.txt" --steps 20 --ckpt-dir "$T/b" --ckpt-every 10 --resume \
    --metrics "$T/b2.jsonl"
  cat "$T/b.jsonl" "$T/b2.jsonl" > "$T/b_all.jsonl"
  compare losses "$T/b_all.jsonl" "$T/a.jsonl" 0
  compare exact "$T/b/step_00000020/state.safetensors" "$T/a/step_00000020/state.safetensors"
  cmp -s "$T/b/step_00000020/state.safetensors" "$T/a/step_00000020/state.safetensors" ||
    fail "the step-20 checkpoints differ byte for byte"
  ;;
resume_bf16)
  # bf16 compute, f32 masters in the checkpoint: 8 steps straight = 4, --resume, 4 more, bit for bit
  must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$T/trainer" $TINY \
    --set /precision/compute=bf16
  must "$T/trainer" --data "$T/text.txt" --steps 8 --ckpt-dir "$T/a" --ckpt-every 4 --metrics "$T/a.jsonl"
  must "$T/trainer" --data "$T/text.txt" --steps 4 --ckpt-dir "$T/b" --ckpt-every 4 --metrics "$T/b.jsonl"
  must "$T/trainer" --data "$T/text.txt" --steps 8 --ckpt-dir "$T/b" --ckpt-every 4 --resume \
    --metrics "$T/b2.jsonl"
  cat "$T/b.jsonl" "$T/b2.jsonl" > "$T/b_all.jsonl"
  compare losses "$T/b_all.jsonl" "$T/a.jsonl" 0
  cmp -s "$T/b/step_00000008/state.safetensors" "$T/a/step_00000008/state.safetensors" ||
    fail "bf16: the step-8 checkpoints differ byte for byte"
  "$PY" - "$T/a/step_00000008/state.safetensors" <<'PYEOF' || fail "bf16: the checkpoint does not hold f32 masters"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
bad = [k for k, v in h.items() if k != "__metadata__" and v["dtype"] != "F32"]
sys.exit(1 if bad else 0)
PYEOF
  ;;
damaged)
  trainer tiny && cp "$TR" "$T/trainer"
  must "$T/trainer" --data "$T/text.txt" --steps 10 --ckpt-dir "$T/c" --ckpt-every 5
  # flip one byte in the middle of the newest checkpoint's tensors
  f="$T/c/step_00000010/state.safetensors"
  size=$(wc -c < "$f")
  printf '\377' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
  "$T/trainer" --data "$T/text.txt" --steps 12 --ckpt-dir "$T/c" --ckpt-every 5 --resume \
    > "$T/out" 2> "$T/err"
  rc=$?
  [ "$rc" -eq 0 ] || { fail "resume past a damaged checkpoint exited $rc"; cat "$T/err" >&2; }
  grep -q "step_00000010" "$T/err" "$T/out" || fail "the damaged checkpoint is not named"
  grep -q "step 6 " "$T/out" || fail "training did not continue from step 5"
  # a truncated newest file, and nothing older to fall back to
  must "$T/trainer" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/d" --ckpt-every 5
  f="$T/d/step_00000005/state.safetensors"
  head -c 100 "$f" > "$T/cut" && cp "$T/cut" "$f"
  "$T/trainer" --data "$T/text.txt" --steps 8 --ckpt-dir "$T/d" --resume > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] || fail "a run with only a truncated checkpoint did not exit 1"
  grep -q "state.safetensors" "$T/err" || { fail "the truncated file is not named"; cat "$T/err" >&2; }
  # bad options and files
  "$T/trainer" --data "$T/missing.txt" > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "missing.txt" "$T/err" || fail "a missing data file is not reported"
  "$T/trainer" --steps abc > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "steps" "$T/err" || fail "--steps abc is not reported"
  "$T/trainer" --config > "$T/out" 2> "$T/err" || fail "--config failed"
  grep -q '"kind": "trainer"' "$T/out" || fail "--config does not print the resolved config"
  ;;
reliability)
  # The run survives what users and machines do to it, with the real trainer binary.
  trainer tiny && cp "$TR" "$T/trainer"
  trainer tiny1 && cp "$TR" "$T/trainer1"
  # SIGTERM mid-run: a checkpoint of the step it stopped at, status 143, and --resume goes on
  "$T/trainer" --data "$T/text.txt" --steps 1000000 --ckpt-dir "$T/sig" --metrics "$T/sig.jsonl" \
    > "$T/out" 2> "$T/err" &
  pid=$!
  i=0
  while [ ! -s "$T/sig.jsonl" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  kill -TERM $pid
  wait $pid
  rc=$?
  [ "$rc" -eq 143 ] || { fail "SIGTERM: exit $rc, expected 143"; cat "$T/err" >&2; }
  grep -q "SIGTERM: stopped after step" "$T/err" || fail "SIGTERM: no message"
  last=$(ls -d "$T/sig"/step_* 2>/dev/null | tail -1)
  [ -n "$last" ] && [ -f "$last/index.json" ] || fail "SIGTERM: no complete checkpoint"
  n=$(wc -l < "$T/sig.jsonl")
  must "$T/trainer" --data "$T/text.txt" --steps $((n + 3)) --ckpt-dir "$T/sig" --resume \
    --metrics "$T/sig.jsonl"
  [ "$(wc -l < "$T/sig.jsonl")" -eq $((n + 3)) ] || fail "SIGTERM: metrics after resume"
  # a second trainer on a directory in use is refused; the first finishes undisturbed
  "$T/trainer" --data "$T/text.txt" --steps 1000000 --ckpt-dir "$T/two" --metrics "$T/two.jsonl" \
    > "$T/out1" 2> "$T/err1" &
  pid=$!
  i=0
  while [ ! -s "$T/two.jsonl" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  "$T/trainer" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/two" --resume > "$T/out" 2> "$T/err"
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "locked by another trainer (pid $pid)" "$T/err" ||
    { fail "a second writer: exit $rc"; cat "$T/err" >&2; }
  kill -TERM $pid
  wait $pid
  [ $? -eq 143 ] || fail "the first trainer did not stop cleanly"
  # a 1-layer model does not resume a 2-layer checkpoint, which stays; --partial loads what matches
  must "$T/trainer" --data "$T/text.txt" --steps 4 --ckpt-dir "$T/m" --keep 1
  "$T/trainer1" --data "$T/text.txt" --steps 8 --ckpt-dir "$T/m" --keep 1 --resume > "$T/out" 2> "$T/err"
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "holds another model: /model/decoder/num_layers: 1 here, 2 in the checkpoint" "$T/err" &&
    grep -q "10 parameters only in the checkpoint: model/decoder/layer_1/" "$T/err" ||
    { fail "a 1-layer model resumed a 2-layer checkpoint (exit $rc)"; cat "$T/err" >&2; }
  [ -f "$T/m/step_00000004/index.json" ] || fail "the 2-layer checkpoint was deleted"
  must "$T/trainer1" --data "$T/text.txt" --steps 8 --ckpt-dir "$T/m" --keep 1 --resume --partial
  # a file-size limit too small for a checkpoint: refused before step 1, not killed by SIGXFSZ
  (ulimit -f 8 && exec "$T/trainer" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/fs") \
    > "$T/out" 2> "$T/err"
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "file-size limit" "$T/err" || { fail "ulimit -f: exit $rc"; cat "$T/err" >&2; }
  [ ! -d "$T/fs/step_00000005" ] || fail "ulimit -f: a checkpoint was attempted"
  # a FIFO as --data is refused at once
  mkfifo "$T/fifo"
  timeout 10 "$T/trainer" --data "$T/fifo" --steps 1 > "$T/out" 2> "$T/err"
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "not a regular file (a FIFO)" "$T/err" || fail "a FIFO as --data: exit $rc"
  ;;
async)
  trainer tiny && cp "$TR" "$T/trainer"
  must "$T/trainer" --data "$T/text.txt" --steps 14 --ckpt-dir "$T/ref" --ckpt-every 3 --keep 0
  must "$T/trainer" --data "$T/text.txt" --steps 14 --ckpt-dir "$T/sync" --ckpt-every 3 --keep 0 --ckpt-sync
  for s in 3 6 9 12 14; do
    d=$(printf step_%08d "$s")
    cmp -s "$T/ref/$d/state.safetensors" "$T/sync/$d/state.safetensors" ||
      fail "async and --ckpt-sync checkpoints of step $s differ"
  done
  # in_flight SIGNAL DIR: runs until the save of step 6 is written but for its index, then signals
  in_flight() {
    AXLC_TEST_SAVE_PAUSE=3 "$T/trainer" --data "$T/text.txt" --steps 1000000 --ckpt-dir "$2" \
      --ckpt-every 3 --keep 0 --metrics "$2.jsonl" > "$T/out" 2> "$T/err" &
    pid=$!
    i=0
    while [ ! -f "$2/step_00000006/state.safetensors" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    [ -f "$2/step_00000003/index.json" ] && [ ! -f "$2/step_00000006/index.json" ] ||
      fail "$1: the save of step 6 is not in flight"
    kill -"$1" $pid
    wait $pid
    rc=$?
  }
  in_flight KILL "$T/k"
  [ "$rc" -eq 137 ] || fail "SIGKILL: exit $rc"
  [ ! -f "$T/k/step_00000006/index.json" ] || fail "SIGKILL: the checkpoint in flight was completed"
  must "$T/trainer" --data "$T/text.txt" --steps 14 --ckpt-dir "$T/k" --ckpt-every 3 --keep 0 --resume
  grep -q "resumed from .*step_00000003" "$T/log" || fail "SIGKILL: not resumed from step 3"
  cmp -s "$T/k/step_00000014/state.safetensors" "$T/ref/step_00000014/state.safetensors" ||
    fail "SIGKILL mid-save: the resumed run's step-14 checkpoint differs"
  in_flight TERM "$T/t"
  [ "$rc" -eq 143 ] || { fail "SIGTERM: exit $rc"; cat "$T/err" >&2; }
  [ -f "$T/t/step_00000006/index.json" ] || fail "SIGTERM: the checkpoint in flight was not completed"
  last=$(ls -d "$T/t"/step_* | sort | tail -1)
  [ -f "$last/index.json" ] && [ "$last" != "$T/t/step_00000006" ] || fail "SIGTERM: no final checkpoint"
  must "$T/trainer" --data "$T/text.txt" --steps 14 --ckpt-dir "$T/t" --ckpt-every 3 --keep 0 --resume
  cmp -s "$T/t/step_00000014/state.safetensors" "$T/ref/step_00000014/state.safetensors" ||
    fail "SIGTERM mid-save: the resumed run's step-14 checkpoint differs"
  env AXLC_TEST_SAVE_PAUSE=soon "$T/trainer" --data "$T/text.txt" --steps 1 > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "AXLC_TEST_SAVE_PAUSE=soon: expected a number of seconds" "$T/err" ||
    fail "a bad AXLC_TEST_SAVE_PAUSE is not refused"
  ;;
goodput)
  trainer tiny && cp "$TR" "$T/trainer"
  # shellcheck disable=SC2086
  must "$AXLC" memcheck "$SRC/models/tiny-lm.json" --target cpu $TINY --json
  cp "$T/log" "$T/mem.json"
  must "$T/trainer" --data "$T/text.txt" --steps 8 --ckpt-dir "$T/g" --metrics "$T/g.jsonl" --peak-flops 2e11
  grep -q "^trainer: goodput [0-9.]*% of [0-9.]* s: steps .*; MFU [0-9.]*% (peak 2e+11 FLOP/s per device, --peak-flops)$" \
    "$T/log" || fail "no goodput line: $(tail -1 "$T/log")"
  must "$T/trainer" --data "$T/text.txt" --steps 14 --ckpt-dir "$T/g" --metrics "$T/g.jsonl" --resume \
    --restart-step 11 --restart-downtime 3
  tail -1 "$T/log" | grep -q "goodput [0-9.]*% of [0-9.]* s (the job's, across restarts): .*restart downtime 3.00 s" ||
    fail "resumed: $(tail -1 "$T/log")"
  "$PY" - "$T/mem.json" "$T/g.jsonl" <<'PYEOF' || fail "goodput and MFU in the metrics"
import json, sys
flops = json.load(open(sys.argv[1]))["flops"]
m = [json.loads(l) for l in open(sys.argv[2])]
assert [x["step"] for x in m] == list(range(1, 15)), [x["step"] for x in m]
for x in m[:8]:  # --peak-flops 2e11; then the device table's
    got = x["mfu"] * x["step_ms"] / 1e3 * 2e11
    assert abs(got - flops) <= 0.02 * flops, (x, got, flops)
    assert x["lost_s"] == 0 and x["downtime_s"] == 0, x
for x in m:
    parts = x["productive_s"] + x["startup_s"] + x["ckpt_s"] + x["lost_s"] + x["downtime_s"]
    assert parts <= x["wall_s"] + 1e-5, x
    assert abs(x["goodput"] - x["productive_s"] / x["wall_s"]) < 1e-4, x
lost = sum(x["step_ms"] for x in m[8:11]) / 1e3  # steps 9..11 run again
assert abs(m[-1]["lost_s"] - lost) < 1e-4, (m[-1]["lost_s"], lost)
assert m[-1]["downtime_s"] == 3 and m[-1]["wall_s"] >= m[7]["wall_s"] + 3, m[-1]
assert m[-1]["startup_s"] > m[7]["startup_s"], (m[-1], m[7])  # the second start-up added
steps = sum(x["step_ms"] for x in m[:8]) + sum(x["step_ms"] for x in m[11:])
assert abs(m[-1]["productive_s"] - steps / 1e3) < 1e-4, (m[-1]["productive_s"], steps / 1e3)
PYEOF
  ;;
sdc)
  trainer tiny && cp "$TR" "$T/trainer"
  must "$T/trainer" --data "$T/text.txt" --steps 40 --sdc-check-every 1 --threads 2
  AXLC_TEST_SDC_FLIP=6 "$T/trainer" --data "$T/text.txt" --steps 40 --sdc-check-every 3 --ckpt-dir "$T/s" \
    --ckpt-every 4 > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 4 ] || { fail "a flipped bit: exit $rc, expected 4"; cat "$T/err" >&2; }
  grep -q "rank 0: step 6: silent data corruption: tensor model/.*, value 0 of [0-9]*: 0x" "$T/err" ||
    { fail "the corruption is not named"; cat "$T/err" >&2; }
  [ -f "$T/s/step_00000004/index.json" ] && [ ! -d "$T/s/step_00000008" ] || fail "the checkpoints around it"
  ;;
badsteps)
  trainer tiny && cp "$TR" "$T/trainer"
  o="--skip-outliers 0.5 --outlier-window 3"
  # shellcheck disable=SC2086
  must "$T/trainer" --data "$T/text.txt" --steps 16 --ckpt-dir "$T/a" --metrics "$T/a.jsonl" $o
  grep -q "against the last 3 steps: an outlier above 0.5; update skipped" "$T/log" || fail "no step skipped"
  n=$(grep -c '"skipped": true' "$T/a.jsonl")
  [ "$n" -ge 1 ] && [ "$n" -eq "$(grep -c "update skipped" "$T/log")" ] || fail "skipped steps: $n in the metrics"
  # shellcheck disable=SC2086
  must "$T/trainer" --data "$T/text.txt" --steps 8 --ckpt-dir "$T/b" $o
  # shellcheck disable=SC2086
  must "$T/trainer" --data "$T/text.txt" --steps 16 --ckpt-dir "$T/b" --resume $o
  cmp -s "$T/a/step_00000016/state.safetensors" "$T/b/step_00000016/state.safetensors" ||
    fail "--skip-outliers: 8 + resume + 8 differs from 16 straight"
  ;;
init_strict)
  # --init lists every missing and every unused tensor, with the closest names, refuses extras
  # unless --init-allow-unused, and calls out PyTorch's (out, in) layout
  trainer tiny && cp "$TR" "$T/trainer"
  must "$T/trainer" --data "$T/text.txt" --steps 0 --ckpt-dir "$T/c0"
  st="$T/c0/step_00000000/state.safetensors"
  mk() { # mk OUT PYTHON-EXPR-ON-t [METADATA]: t = the checkpoint's parameters (no opt/)
    "$PY" - "$SRC/tests/torch" "$st" "$1" "$2" "${3:-}" <<'PYEOF' || fail "mk $1"
import sys
sys.path.insert(0, sys.argv[1])
import stio
t = {k: v for k, v in stio.read(sys.argv[2]).items() if not k.startswith("opt/")}
exec(sys.argv[4])
stio.write(sys.argv[3], t, {"format": sys.argv[5]} if sys.argv[5] else None)
PYEOF
  }
  init() { # init FILE [OPTIONS]: the trainer's exit status in rc, stderr in $T/err
    f=$1
    shift
    "$T/trainer" --data "$T/text.txt" --steps 1 --init "$f" "$@" > "$T/out" 2> "$T/err"
    rc=$?
  }
  expect() { # expect RC TEXT...: the exit status, and each TEXT in stderr
    want=$1
    shift
    [ "$rc" -eq "$want" ] || { fail "--init: exit $rc, expected $want"; cat "$T/err" >&2; }
    for x in "$@"; do grep -qF -- "$x" "$T/err" || { fail "--init: stderr lacks: $x"; cat "$T/err" >&2; }; done
  }
  mk "$T/good.st" "pass"
  init "$T/good.st"
  expect 0
  [ ! -s "$T/err" ] || { fail "--init of an exact file is not silent"; cat "$T/err" >&2; }
  # the checkpoint itself: every opt/ tensor is unused (48 = 2 x 24 parameters)
  init "$st"
  expect 1 "trainer: --init: $st: 0 of 24 parameters missing, 0 in another shape, 48 tensors unused (--init-allow-unused accepts unused tensors)" \
    "  unused: 'opt/m/model/emb/weight'" "  unused: 'opt/v/model/decoder/output_norm/bias'"
  init "$st" --init-allow-unused
  expect 0 "note: --init $st:" "  unused (allowed): 'opt/m/model/emb/weight'"
  # renamed and deleted tensors: all listed, each with its closest counterpart
  mk "$T/renamed.st" "t['model/embedding/weight'] = t.pop('model/emb/weight'); del t['model/pos_emb/weight']; t['model.decoder.layer_1.ffn_norm.scale'] = t.pop('model/decoder/layer_1/ffn_norm/scale')"
  init "$T/renamed.st"
  expect 1 "3 of 24 parameters missing, 0 in another shape, 2 tensors unused" \
    "  missing: 'model/emb/weight' (closest unused tensor: 'model/embedding/weight')" \
    "  missing: 'model/pos_emb/weight'" \
    "  unused: 'model/embedding/weight' (did you mean 'model/emb/weight'?)" \
    "  unused: 'model.decoder.layer_1.ffn_norm.scale' (did you mean 'model/decoder/layer_1/ffn_norm/scale'?)"
  init "$T/renamed.st" --init-allow-unused
  expect 1 "3 of 24 parameters missing"
  # a (hidden, dim) matrix: PyTorch's layout of a (dim, hidden) projection
  mk "$T/torch.st" "k = 'model/decoder/layer_0/feed_forward/linear1/weight'; t[k] = t[k].T.copy()"
  init "$T/torch.st"
  expect 1 "  tensor 'model/decoder/layer_0/feed_forward/linear1/weight': shape [256,64], expected [64,256]: PyTorch's nn.Linear (out, in) layout? axlc's projections are (in, out); transpose it" \
    "square ones (dim x dim) need transposing too"
  # right shapes, but a PyTorch export by its metadata: loaded, with the layout note
  mk "$T/pt.st" "pass" pt
  init "$T/pt.st"
  expect 0 "note: --init $T/pt.st:" "the file's metadata says \"format\": \"pt\" (PyTorch)"
  "$T/trainer" --data "$T/text.txt" --init-allow-unused > "$T/out" 2> "$T/err"
  rc=$?
  expect 1 "--init-allow-unused needs --init FILE"
  ;;
no_clobber)
  trainer tiny && cp "$TR" "$T/trainer"
  cp "$T/text.txt" "$T/eval.txt" && ln "$T/eval.txt" "$T/eval-hard.txt"
  must "$T/trainer" --data "$T/text.txt" --steps 2 --ckpt-dir "$T/ck" --ckpt-every 1 --keep 0
  cksum "$T/text.txt" "$T/eval.txt" "$T/ck"/step_*/* > "$T/before"
  # refuse TEXT ARGS...: the trainer on text.txt with ARGS exits 1 with TEXT on stderr
  refuse() {
    text=$1
    shift
    "$T/trainer" --data "$T/text.txt" "$@" > "$T/out" 2> "$T/err"
    rc=$?
    [ "$rc" -eq 1 ] && grep -qF -- "$text" "$T/err" || fail "$*: exit $rc, $(cat "$T/err")"
  }
  refuse "--metrics $T/text.txt is the same file as --data $T/text.txt" --metrics "$T/text.txt"
  refuse "--metrics $T/eval-hard.txt is the same file as --eval-data $T/eval.txt" \
    --eval-data "$T/eval.txt" --metrics "$T/eval-hard.txt"
  f="$T/ck/step_00000001/state.safetensors"
  refuse "--metrics $f is the same file as --init $f" --init "$f" --metrics "$f"
  f="$T/ck/step_00000002/state.safetensors"
  refuse "--metrics $f lies inside $T/ck/step_00000002 of --ckpt-dir $T/ck" --steps 3 \
    --ckpt-dir "$T/ck" --resume --metrics "$f"
  cksum "$T/text.txt" "$T/eval.txt" "$T/ck"/step_*/* | cmp -s - "$T/before" || fail "an input changed"
  # token files inside a checkpoint, which pruning would delete under the run
  cp "$T/text.txt" "$T/ck/step_00000001/tokens.txt"
  f="$T/ck/step_00000001/tokens.txt"
  "$T/trainer" --data "$f" --steps 3 --ckpt-dir "$T/ck" --resume --keep 1 > "$T/out" 2> "$T/err"
  rc=$?
  [ "$rc" -eq 1 ] && grep -qF -- "--data $f lies inside $T/ck/step_00000001 of --ckpt-dir $T/ck" "$T/err" ||
    fail "--data inside a checkpoint: exit $rc, $(cat "$T/err")"
  refuse "--eval-data $f lies inside" --eval-data "$f" --steps 3 --ckpt-dir "$T/ck" --resume --keep 1
  [ -f "$f" ] || fail "the token file inside a checkpoint was deleted"
  rm "$f"
  must "$T/trainer" --data "$T/text.txt" --steps 3 --ckpt-dir "$T/ck" --resume
  grep -q "resumed from .*step_00000002" "$T/log" || fail "the checkpoint does not resume: $(cat "$T/log")"
  # pruning (--keep 1) with a step directory that is a link to a directory of files (on data of
  # its own, so that a regression above does not hide this one)
  mkdir "$T/victim" "$T/lk" && echo precious > "$T/victim/a.txt" && echo kept > "$T/victim/b.txt"
  ln -s "$T/victim" "$T/lk/step_00000001"
  cp "$CORPUS" "$T/text2.txt"
  must "$T/trainer" --data "$T/text2.txt" --steps 3 --ckpt-dir "$T/lk" --ckpt-every 1 --keep 1
  [ -f "$T/victim/a.txt" ] && [ -f "$T/victim/b.txt" ] && [ -L "$T/lk/step_00000001" ] ||
    fail "pruning followed the link: victim holds $(ls "$T/victim" | tr '\n' ' ')"
  grep -q "ignoring step_00000001 (a symbolic link, not a checkpoint" "$T/log" ||
    fail "the link is not said to be ignored: $(cat "$T/log")"
  [ -f "$T/lk/step_00000003/index.json" ] && [ ! -e "$T/lk/step_00000002" ] || fail "--keep 1: $(ls "$T/lk")"
  ;;
compile_cli)
  m="$SRC/models/tiny-lm.json"
  # the output kinds, on tiny-lm narrowed to one small layer (a compile in seconds)
  small="--set /model/decoder/num_layers=1 --set /model/dim=8
    --set /model/decoder/layer/self_attention/num_heads=1 --set /input/seq_len=4
    --set /input/global_batch_size=1"
  # shellcheck disable=SC2086
  must "$AXLC" compile "$m" --target cpu --emit llvm $small
  grep -q "define.*@axlc_step" "$T/log" || fail "--emit llvm lacks axlc_step"
  # shellcheck disable=SC2086
  must "$AXLC" compile "$m" --target cpu --emit asm $small
  grep -q "^axlc_step:" "$T/log" || fail "--emit asm lacks axlc_step"
  # shellcheck disable=SC2086
  must "$AXLC" compile "$m" --target cpu --emit obj -o "$T/step.o" $small
  [ "$(head -c 4 "$T/step.o" | od -An -c | tr -d ' ')" = "177ELF" ] || fail "--emit obj is not ELF"
  # the compile cache: filled by the first compile, used whole by the second (the same
  # trainer, byte for byte), untouched with --no-cache or AXLC_NO_CACHE=1
  c="$T/cache"
  # shellcheck disable=SC2086
  must env AXLC_CACHE_DIR="$c" "$AXLC" compile "$m" --target cpu -o "$T/t1" $small
  n=$(ls "$c" | grep -c '^llvm-.*\.o$')
  [ "$n" -gt 2 ] || fail "the cache holds $n objects after a compile"
  # shellcheck disable=SC2086
  must env AXLC_CACHE_DIR="$c" "$AXLC" compile "$m" --target cpu -o "$T/t2" $small --jobs 1
  cmp -s "$T/t1" "$T/t2" || fail "the trainer compiled from the cache differs"
  [ "$(ls "$c" | grep -c '^llvm-.*\.o$')" -eq "$n" ] || fail "a compile from the cache added objects"
  # a damaged entry (cut short, a flipped bit) is said, naming it, and compiled again in its
  # place: the same trainer, and the next compile takes every object from the cache again
  e1=$(ls "$c"/llvm-*.o | head -1) e2=$(ls "$c"/llvm-*.o | tail -1)
  size1=$(wc -c < "$e1")
  truncate -s $((size1 / 2)) "$e1"
  /usr/bin/python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(200); b = f.read(1)
f.seek(200); f.write(bytes([b[0] ^ 4]))' "$e2"
  # shellcheck disable=SC2086
  env AXLC_CACHE_DIR="$c" "$AXLC" compile "$m" --target cpu -o "$T/t8" $small > "$T/out" 2> "$T/err"
  [ $? -eq 0 ] && cmp -s "$T/t1" "$T/t8" || fail "a compile over damaged entries failed: $(cat "$T/err")"
  for e in "$e1" "$e2"; do
    [ "$(grep -c "^axlc: note: the compile cache entry $e is damaged (.*); compiling it again$" \
      "$T/err")" -eq 1 ] || fail "the damaged entry $e is not named once: $(cat "$T/err")"
  done
  [ "$(wc -c < "$e1")" -eq "$size1" ] || fail "the entry cut short was not compiled again"
  # shellcheck disable=SC2086
  env AXLC_CACHE_DIR="$c" "$AXLC" compile "$m" --target cpu -o "$T/t8" $small > "$T/out" 2> "$T/err"
  [ $? -eq 0 ] && ! grep -q damaged "$T/err" && cmp -s "$T/t1" "$T/t8" ||
    fail "the entries compiled again are not whole: $(cat "$T/err")"
  [ "$(ls "$c" | grep -c '^llvm-.*\.o$')" -eq "$n" ] || fail "damaged entries left extra objects"
  # its upkeep: `axlc cache` counts the entries; a compile that stores objects trims the cache
  # to AXLC_CACHE_MAX, least recently used first (a hit is a use), never an entry used in the
  # last hour; a bad AXLC_CACHE_MAX is refused before any work; --clear empties the cache
  env AXLC_CACHE_DIR="$c" "$AXLC" cache > "$T/out" 2> "$T/err" || fail "axlc cache: $(cat "$T/err")"
  grep -q "^entries: $n (" "$T/out" || fail "axlc cache does not count the $n entries: $(cat "$T/out")"
  touch -d '2 days ago' "$c"/*
  ls "$c" > "$T/old"
  : > "$c/notes.txt" # no entry: never removed
  # another width: some kernels are new, the shape-free ones are hits
  # shellcheck disable=SC2086
  must env AXLC_CACHE_DIR="$c" AXLC_CACHE_MAX=1 "$AXLC" compile "$m" --target cpu -o "$T/t5" $small \
    --set /model/dim=16
  [ -z "$(find "$c" -name '*.o' -mmin +60)" ] || fail "entries unused for 2 days outlived a trim"
  [ "$(ls "$c" | grep -cxFf "$T/old")" -lt "$n" ] || fail "the trim removed none of the old entries"
  [ -e "$c/notes.txt" ] || fail "the trim removed notes.txt, which is no entry"
  n5=$(ls "$c" | grep -c '^llvm-.*\.o$')
  # shellcheck disable=SC2086
  must env AXLC_CACHE_DIR="$c" AXLC_CACHE_MAX=1 "$AXLC" compile "$m" --target cpu -o "$T/t6" $small \
    --set /model/dim=16
  [ "$(ls "$c" | grep -c '^llvm-.*\.o$')" -eq "$n5" ] || fail "the trim removed objects just stored"
  msg="error: AXLC_CACHE_MAX=lots: expected a size in bytes such as 500M or 2G (K, M, G: KiB, MiB,"
  msg="$msg GiB), or 0 for no limit"
  for cmd in "compile -o $T/t7" run; do # a 4-device mesh fails later: only the variable's error
    # shellcheck disable=SC2086
    env AXLC_CACHE_DIR="$c" AXLC_CACHE_MAX=lots "$AXLC" $cmd "$m" --target cpu \
      --set '/mesh/shape=[1,4,1,1,1,1]' > "$T/out" 2> "$T/err"
    [ $? -eq 1 ] && [ "$(cat "$T/err")" = "$msg" ] && [ ! -e "$T/t7" ] ||
      fail "axlc $cmd with AXLC_CACHE_MAX=lots: $(cat "$T/err")"
  done
  : > "$c/.llvm-x.o.1.2.tmp" # a crashed compile's, 2 days ago
  touch -d '2 days ago' "$c/.llvm-x.o.1.2.tmp"
  # a --clear that cannot remove the entries says so, exits 1, and claims no success
  chmod a-w "$c"
  if ! : > "$c/probe" 2> /dev/null; then # (root writes anyway)
    env AXLC_CACHE_DIR="$c" "$AXLC" cache --clear > "$T/out" 2> "$T/err"
    [ $? -eq 1 ] && [ ! -s "$T/out" ] && grep -q "^error: $c/llvm-.*: cannot remove: Permission denied" "$T/err" ||
      fail "axlc cache --clear in a read-only cache: $(cat "$T/out" "$T/err")"
  fi
  rm -f "$c/probe"
  chmod u+w "$c"
  env AXLC_CACHE_DIR="$c" "$AXLC" cache --clear > "$T/out" 2> "$T/err" || fail "axlc cache --clear"
  grep -qx "removed $n5 entries (.*) from $c, and 1 stale temporary file" "$T/out" ||
    fail "axlc cache --clear: $(cat "$T/out" "$T/err")"
  [ "$(ls -A "$c")" = notes.txt ] || fail "axlc cache --clear left $(ls -A "$c")"
  for bad in "$m" --bogus; do
    env AXLC_CACHE_DIR="$c" "$AXLC" cache "$bad" > "$T/out" 2> "$T/err"
    [ $? -eq 1 ] && grep -q "^error: .*$bad" "$T/err" || fail "axlc cache $bad: $(cat "$T/err")"
  done
  rm -rf "$c"
  # shellcheck disable=SC2086
  must env AXLC_CACHE_DIR="$c" "$AXLC" compile "$m" --target cpu -o "$T/t3" $small --no-cache
  # shellcheck disable=SC2086
  must env AXLC_CACHE_DIR="$c" AXLC_NO_CACHE=1 "$AXLC" compile "$m" --target cpu -o "$T/t3" $small
  [ ! -e "$c" ] || fail "--no-cache or AXLC_NO_CACHE=1 wrote the cache"
  # a cache that cannot be made (under a regular file) is said once, and the compile goes on
  : > "$T/file"
  # shellcheck disable=SC2086
  env AXLC_CACHE_DIR="$T/file/cache" "$AXLC" compile "$m" --target cpu -o "$T/t4" $small \
    > "$T/out" 2> "$T/err"
  [ $? -eq 0 ] && cmp -s "$T/t1" "$T/t4" || fail "a compile with an unusable cache failed"
  [ "$(grep -c "compile cache $T/file/cache is not usable (Not a directory)" "$T/err")" -eq 1 ] ||
    fail "an unusable cache is not reported once: $(cat "$T/err")"
  # the cache directory itself a regular file: not a directory, not "Permission denied"
  # shellcheck disable=SC2086
  env AXLC_CACHE_DIR="$T/file" "$AXLC" compile "$m" --target cpu -o "$T/t4" $small \
    > "$T/out" 2> "$T/err"
  [ $? -eq 0 ] && [ "$(grep -c "compile cache $T/file is not usable (Not a directory)" "$T/err")" -eq 1 ] ||
    fail "AXLC_CACHE_DIR a regular file: $(cat "$T/err")"
  env AXLC_CACHE_DIR="$T/file" "$AXLC" cache --clear > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && [ ! -s "$T/out" ] && grep -q "^error: $T/file: .*: Not a directory" "$T/err" ||
    fail "axlc cache --clear with AXLC_CACHE_DIR a regular file: $(cat "$T/out" "$T/err")"
  cmp -s "$T/t1" "$T/t3" || fail "the trainer compiled without the cache differs"
  for j in 0 65 x; do
    "$AXLC" compile "$m" --target cpu -o "$T/x" --jobs $j > "$T/out" 2> "$T/err"
    [ $? -eq 1 ] && grep -qxF "error: --jobs $j: expected a whole number from 1 to 64" "$T/err" ||
      fail "--jobs $j accepted"
  done
  "$AXLC" compile "$m" --target tpu-v5p-8 -o "$T/x" > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "no backend trains on tpu-v5p" "$T/err" || fail "--target tpu-v5p-8 accepted"
  "$AXLC" compile "$m" --target cpu > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "needs -o FILE" "$T/err" || fail "a missing -o is not reported"
  "$AXLC" compile "$m" --target cpu --emit wasm -o "$T/x" > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "expected exe, obj, llvm or asm" "$T/err" || fail "--emit wasm accepted"
  "$AXLC" compile "$m" --target cpu -o "$T/x" --set '/mesh/shape=[1,4,1,1,1,1]' > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "devices" "$T/err" || fail "a 4-device mesh was compiled for one CPU"
  # the output path is checked before compiling: with the 4-device mesh above, compiling
  # would fail on the mesh, so only the path's error shows
  bad() { # bad OUT MESSAGE [--emit E]
    out=$1 msg=$2
    shift 2
    "$AXLC" compile "$m" --target cpu -o "$out" "$@" --set '/mesh/shape=[1,4,1,1,1,1]' \
      > "$T/out" 2> "$T/err"
    [ $? -eq 1 ] && grep -qxF "error: $msg" "$T/err" && ! grep -q "devices" "$T/err" ||
      { fail "-o $out: expected only: error: $msg"; cat "$T/err" >&2; }
  }
  mkdir -p "$T/dir" "$T/ro"
  : > "$T/file"
  bad "$T/dir" "$T/dir: is a directory (expected a file name for the output)"
  bad "$T/dir" "$T/dir: is a directory (expected a file name for the output)" --emit obj
  bad "$T/missing/trainer" "$T/missing/trainer: the directory $T/missing does not exist"
  bad "$T/file/trainer" "$T/file/trainer: $T/file is not a directory"
  bad "" '-o: expected a file name, got ""'
  if [ "$(id -u)" != 0 ]; then # root may write anywhere
    chmod 555 "$T/ro"
    bad "$T/ro/trainer" "$T/ro/trainer: cannot write in the directory $T/ro: Permission denied"
    chmod 755 "$T/ro"
  fi
  # axlc run --target cpu checks the trainer's options before compiling, with the trainer's
  # messages: with the 4-device mesh, compiling would fail, so only the option's error shows
  badrun() { # badrun MESSAGE ARGS...
    msg=$1
    shift
    "$AXLC" run "$m" --target cpu --set '/mesh/shape=[1,4,1,1,1,1]' "$@" > "$T/out" 2> "$T/err"
    [ $? -eq 1 ] && grep -qxF "error: $msg" "$T/err" && ! grep -q "devices" "$T/err" ||
      { fail "axlc run $*: expected only: error: $msg"; cat "$T/err" >&2; }
  }
  badrun "--steps: -1 is out of range, expected 0..9223372036854775807" --data "$T/text.txt" --steps -1
  badrun "unknown option '--stepz' (--help lists the options)" --data "$T/text.txt" --stepz 3
  badrun "--data FILE is required (--help lists the options)" --steps 3
  badrun "--resume needs --ckpt-dir DIR" --data "$T/text.txt" --resume
  # a long output path: the object file's name "$d/trainer.step.o" was cut at 1023 bytes, here
  # right after "$d/", a directory, so writing the object failed
  d="$T"
  while [ $((${#d} + 251)) -lt 1022 ]; do d="$d/$(printf '%0250d' 0)"; done
  d="$d/$(printf '%0*d' $((1022 - ${#d} - 1)) 0)"
  [ ${#d} -eq 1022 ] || fail "the long directory has ${#d} bytes, not 1022"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  must "$AXLC" compile "$m" --target cpu -o "$d/trainer" $small
  "$d/trainer" --config > "$T/out" 2> "$T/err" || fail "the trainer at a long path does not run"
  [ ! -e "$d/trainer.step.o" ] || fail "the object file was left behind"
  ;;
setup_signal)
  trainer tiny
  # a byte-level BPE without merges: the 256 byte values, the vocabulary of tiny-lm
  byte_tokenizer "$T/bytes.json" || fail "writing the tokenizer"
  yes "the fortune of a small model, 1234 words" | head -c 100000 > "$T/small.txt"
  must "$TR" --data "$T/small.txt" --tokenizer "$T/bytes.json" --steps 2 --ckpt-dir "$T/ck"
  ls -l "$T/ck" > "$T/ck.before" && cksum "$T/ck"/step_00000002/* >> "$T/ck.before"
  # about 15 s of tokenizing here: far longer than the 3 s the stop may take
  yes "the fortune of a large model, 5678 words" | head -c 200000000 > "$T/big.txt"
  "$TR" --data "$T/big.txt" --tokenizer "$T/bytes.json" --steps 4 --ckpt-dir "$T/ck" --resume \
    > "$T/out" 2> "$T/err" &
  pid=$!
  # the text is mapped while it is tokenized: from then on the trainer is in its start
  wait_mapped "$T/big.txt" $pid 10 || fail "the trainer did not map its data within 10 s"
  sleep 0.2
  term_timed $pid
  echo "SIGTERM while tokenizing: exit $rc after $ms ms"
  [ "$rc" -eq 143 ] || fail "SIGTERM while tokenizing: exit $rc, expected 143"
  [ "$ms" -lt 3000 ] || fail "SIGTERM while tokenizing: the trainer took $ms ms to stop"
  grep -qF "$(basename "$TR"): SIGTERM before the first step: stopped at once; nothing new to save" "$T/err" ||
    { fail "SIGTERM while tokenizing: no message"; cat "$T/err" >&2; }
  ls -l "$T/ck" > "$T/ck.after" && cksum "$T/ck"/step_00000002/* >> "$T/ck.after"
  cmp -s "$T/ck.before" "$T/ck.after" || fail "the checkpoint changed: $(diff "$T/ck.before" "$T/ck.after")"
  # the run goes on from it afterwards
  must "$TR" --data "$T/small.txt" --tokenizer "$T/bytes.json" --steps 3 --ckpt-dir "$T/ck" --resume
  [ -f "$T/ck/step_00000003/index.json" ] || fail "no resume after the stop"
  ;;
*) fail "unknown case" ;;
esac
[ "$fails" -eq 0 ] || exit 1
echo "ok [$CASE]"
