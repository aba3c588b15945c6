#!/bin/sh
# models.sh AXLC SRCDIR MPIRUN CKPT_DUMP WORKDIR CASE: compiled models on a mesh under mpirun,
# against one process. Trainers and the one-process reference runs are kept in WORKDIR (per
# model and mesh), so each test compiles at most what it needs.
#   ref_MODEL          the one-process trainer, 10 steps: reference losses and parameters
#   MODEL_MESH         the same 10 steps on MESH: losses and final parameters within 1e-4 of
#                      the one-process run with the same microbatches (tests/layouts.sh ref_mesh)
#   run                axlc run --target cpu-2 starts mpirun itself; without mpirun, says how
#   signal             SIGTERM to axlc run alone: its ranks save and stop, mpirun ends, its
#                      temporary directory goes, status 143, the lock is free; SIGKILL to axlc
#                      run: the job ends within seconds all the same; SIGTERM while the ranks
#                      tokenize a 100 MB text (before any step): all end within 3 s, 143
#   resume             tiny-lm: a data=2 x model=2 checkpoint of step 5 resumes under fsdp=4
#                      and under one process on the same curve (1e-4), and under data=2 x
#                      model=2 bit for bit (metrics and checkpoint files)
#   ppresume           fuji-test: a pipeline=2 x data=2 checkpoint of step 5 (each parameter
#                      written by the stage that updates it) resumes on one process, on
#                      pipeline=4 and on fsdp=4 on the same curve (1e-4), and a one-process
#                      checkpoint on pipeline=2 x data=2
#   ppmemory           tiny-lm on pipeline=2, GPipe and 1F1B: stage 0's rank allocates its
#                      stage's slab, its measured heap within 5% of memcheck's stage 0
#   ocl_MODEL_MESH     the same with an OpenCL trainer (--target opencl-N, one rank per device;
#                      PoCL's one CPU device is shared by the ranks): within the CPU's tolerances
#   ocl_run            axlc run --target opencl-2 starts mpirun on an OpenCL trainer itself
#   ocl_handover       an OpenCL fsdp=2 run's step-5 checkpoint resumes on one CPU process, and a
#                      CPU run's step 5 on OpenCL under fsdp=2, on the one-process curve (1e-4);
#                      the latter's ranks without the launcher's local rank take MPI's
# MODEL and MESH: tests/layouts.sh (tiny_lm, moe, fuji, tiny_moe, fuji_moe, the *_bf16 models;
# data4, fsdp4, model2, data2model2, expert2, expert2fsdp2, fsdp2, fsdp2mb2, fsdp2mb4,
# seq2, seq2model2, spmodel2, spseq2model2).
set -u
AXLC=$1 SRC=$2 MPIRUN=$3 DUMP=$4 W=$5 CASE=$6
PY=${TORCH_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
. "$SRC/tests/lib.sh"
. "$SRC/tests/layouts.sh"
scratch mpi-models
need_numpy
mkdir -p "$W"
STEPS=10
# ocl_*: the same cases with OpenCL trainers (--target opencl-N) in place of the CPU's
OCL=
case $CASE in
ocl_*) OCL=ocl- CASE=${CASE#ocl_} ;;
esac
# cpu CMD...: CMD with the CPU's trainers
cpu() {
  cpu_ocl=$OCL
  OCL=
  "$@"
  cpu_rc=$?
  OCL=$cpu_ocl
  return $cpu_rc
}
# tokens below 32 (fuji-test's vocabulary), an llm.c token file
DATA="$W/tokens.bin"
if [ ! -f "$DATA" ]; then
  tokens "$T/tokens.bin" 20000
  mv "$T/tokens.bin" "$DATA"
fi

# trainer MODEL MESH: the path of its compiled trainer (compiled once, kept in $W)
trainer() {
  exe="$W/$OCL$1-$2.trainer"
  if [ ! -x "$exe" ]; then
    set -- "$1" "$2" $(mesh "$2")
    target=cpu
    [ "$3" -gt 1 ] && target=cpu-$3
    [ -n "$OCL" ] && target=opencl-$3
    "$AXLC" compile "$(model_file "$1")" $(model_args "$1") --target $target --set "/mesh/shape=$4" --set /input/seq_len=16 \
      --set "/precision/compute=$(precision "$1")" $(shift 4; sets "$@") -o "$T/exe" > "$T/compile.log" 2>&1 || { fail "compile $1 on $2"; cat "$T/compile.log" >&2; return 1; }
    mv "$T/exe" "$exe"
  fi
  echo "$exe"
}
# train MODEL MESH DIR ARGS...: the trainer on its mesh, checkpoints and metrics in DIR
train() {
  exe=$(trainer "$1" "$2") || return 1
  np=$(mesh "$2" | cut -d' ' -f1)
  dir=$3
  shift 3
  mkdir -p "$dir"
  if [ "$np" -eq 1 ]; then
    "$exe" --data "$DATA" --threads 1 --ckpt-dir "$dir/ck" --metrics "$dir/m.jsonl" "$@"
  else
    "$MPIRUN" -np "$np" --oversubscribe ${WRAP:-} "$exe" --data "$DATA" --threads 1 --ckpt-dir "$dir/ck" \
      --metrics "$dir/m.jsonl" "$@"
  fi
}
# reference MODEL [MESH]: the one-process run (MESH: one, or onemb2 / onemb4 / onemb8), once.
# Tests running at once may both make it: each in a directory of its own, the first renamed
# into place, the others dropped (a rename onto a directory with files fails).
reference() {
  ref="$W/ref-$1"
  [ "${2:-one}" = one ] || ref="$ref-$2"
  if [ ! -f "$ref/params.safetensors" ]; then
    tmp="$ref.tmp.$$"
    rm -rf "$tmp"
    cpu must train "$1" "${2:-one}" "$tmp" --steps $STEPS
    must "$DUMP" "$tmp/ck" "$tmp/params.safetensors"
    mv -T "$tmp" "$ref" 2> /dev/null || rm -rf "$tmp"
  fi
}

case $CASE in
ppmemory)
  # a pipeline rank's memory against memcheck's plan of its stage (docs/pipeline.md, "The
  # slab"): tiny-lm on pipeline=2 at 8 microbatches of 2 sequences, GPipe (stage 0 the lighter)
  # and 1F1B (stage 0 the heavier). Rank 0, of stage 0, allocates its stage's slab; its heap at
  # the peak (the slab, the collectives' scratch, the MPI library) is within 5% of memcheck's
  # peak of stage 0
  for sched in gpipe 1f1b; do
    set -- "$SRC/models/tiny-lm.json" --target cpu-2 --set '/mesh/shape=[2,1,1,1,1,1]' \
      --set /learner/microbatches=8 --set /input/global_batch_size=16 --set /mesh/pipeline_schedule=$sched
    "$AXLC" memcheck "$@" --json > "$T/mc.json" 2> "$T/err" || { fail "$sched: memcheck"; cat "$T/err" >&2; }
    must "$AXLC" compile "$@" -o "$T/pp-$sched"
    "$MPIRUN" -np 2 --oversubscribe "$T/pp-$sched" --data "$DATA" --steps 3 --threads 1 > "$T/out" 2>&1 ||
      { fail "$sched: the trainer"; tail -5 "$T/out" >&2; }
    "$PY" - "$T/mc.json" "$T/out" "$sched" <<'PY' || fail "$sched: stage 0's memory against memcheck's"
import json, re, sys
r = json.load(open(sys.argv[1]))
out, sched = open(sys.argv[2]).read(), sys.argv[3]
stages = [s["peak_memory_in_bytes"] / 2**20 for s in r["pipeline"]["per_stage"]]
assert r["peak_memory_in_bytes"] / 2**20 == max(stages), (r["peak_memory_in_bytes"], stages)
# the slab of stage 0's rank: at most the worst stage's and everything every device holds
slab, plan = float(re.search(r"slab ([0-9.]+) MiB", out).group(1)), r["slab_in_bytes"] / 2**20
assert slab <= 1.10 * plan, f"{sched}: stage 0's slab {slab:.3f} MiB, memcheck's worst stage's {plan:.3f}"
if sched == "gpipe":  # stage 0 is the lighter: it allocates less than the whole program's slab
    assert stages[0] < stages[1] and slab < plan, (stages, slab, plan)
m = re.search(r"measured ([0-9.]+) MiB \(heap", out)
if m:  # the host heap is not measured under the sanitizers
    heap = float(m.group(1))
    assert abs(heap - stages[0]) <= 0.05 * stages[0], f"{sched}: measured {heap:.2f} MiB, memcheck's stage 0 {stages[0]:.2f}"
    print(f"{sched}: stage 0 measured {heap:.2f} MiB, memcheck {stages[0]:.2f} MiB ({100 * (heap - stages[0]) / stages[0]:+.1f}%)")
PY
  done
  ;;
ref_*)
  # the fixture of every test of this model: trainers of an earlier build are stale
  rm -rf "$W/ref-${CASE#ref_}" "$W/ref-${CASE#ref_}"-* "$W/${CASE#ref_}"-*.trainer "$W/ocl-${CASE#ref_}"-*.trainer
  reference "${CASE#ref_}"
  ;;
run)
  # axlc run --target cpu-2 compiles a temporary trainer and starts mpirun itself
  reference tiny_lm
  tgt=cpu-2
  [ -n "$OCL" ] && tgt=opencl-2 # ocl_run: the OpenCL trainer, one rank per device
  must "$AXLC" run "$SRC/models/tiny-lm.json" --target $tgt --set "/mesh/shape=$(mesh_shape model=2)" \
    --set /input/seq_len=16 --data "$DATA" --steps 3 --threads 1 --metrics "$T/run.jsonl"
  [ -z "$OCL" ] || grep -q "OpenCL device" "$T/log" || fail "axlc run --target opencl-2: no OpenCL device used"
  head -3 "$W/ref-tiny_lm/m.jsonl" > "$T/ref3.jsonl"
  compare losses "$T/run.jsonl" "$T/ref3.jsonl" 1e-4
  # without mpirun on PATH: how to launch by hand, before anything is compiled
  PATH=/nonexistent "$AXLC" run "$SRC/models/tiny-lm.json" --target $tgt --set "/mesh/shape=$(mesh_shape model=2)" \
    --data "$DATA" > "$T/out" 2> "$T/err"
  [ $? -eq 1 ] && grep -q "mpirun was not found.*mpirun -np 2" "$T/err" || { fail "no mpirun: no advice"; cat "$T/err" >&2; }
  ;;
signal)
  mkdir -p "$T/tmp"
  # axlc run in the background (one compile, then training for good); waits for its first step
  start() {
    rm -f "$T/out" "$T/err" # the job's redirections may come after the first look below
    TMPDIR="$T/tmp" "$AXLC" run "$SRC/models/tiny-lm.json" --target cpu-2 --set "/mesh/shape=$(mesh_shape model=2)" \
      --set /input/seq_len=16 --data "$DATA" --steps 100000000 --threads 1 --ckpt-dir "$T/ck" "$@" \
      > "$T/out" 2> "$T/err" &
    axlc=$!
    trap 'kill -9 $axlc 2>/dev/null; pkill -9 -f "$T/tmp/axlc-run" 2>/dev/null; rm -rf "$T"' EXIT
    i=0
    until grep -q "step [0-9]" "$T/out" || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
    [ $i -lt 600 ] || fail "$*: no step in 60 s"
  }
  # gone WHAT: no process of the job is left within 10 s of the signal
  gone() {
    i=0
    while pgrep -f "$T/tmp/axlc-run" > /dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    ! pgrep -af "$T/tmp/axlc-run" >&2 || fail "$1: mpirun or a rank still runs 10 s on"
    echo "$1: the job ended in $((i / 10)).$((i % 10)) s"
  }
  start
  kill -TERM $axlc
  wait $axlc
  rc=$?
  [ $rc -eq 143 ] || fail "SIGTERM: axlc run exited $rc, expected 143"
  gone SIGTERM
  grep -q "SIGTERM: stopped after step [0-9]*; checkpoint .*step_" "$T/err" || { fail "SIGTERM: no checkpoint"; cat "$T/err" >&2; }
  [ -z "$(ls "$T/tmp")" ] || fail "SIGTERM: left $(ls "$T/tmp")"
  # SIGKILL: nothing can remove the temporary directory, but the job must not train on
  start --resume
  grep -q "resumed from" "$T/out" || { fail "no resume after SIGTERM (is the lock free?)"; cat "$T/out" "$T/err" >&2; }
  kill -KILL $axlc
  wait $axlc
  gone SIGKILL
  rm -rf "$T/tmp"/axlc-run-*
  must "$AXLC" run "$SRC/models/tiny-lm.json" --target cpu-2 --set "/mesh/shape=$(mesh_shape model=2)" \
    --set /input/seq_len=16 --data "$DATA" --steps 1 --threads 1 --ckpt-dir "$T/ck" --resume
  grep -q "already reaches --steps" "$T/log" || fail "after SIGKILL: the checkpoint directory is not usable"  # SIGTERM while the ranks tokenize their text (their start, before any step): the job ends
  # within 3 s, 143, rank 0 alone says so, and the temporary directory goes
  byte_tokenizer "$T/bytes.json" || fail "writing the tokenizer"
  yes "the fortune of a large model, 5678 words" | head -c 100000000 > "$T/big.txt"
  rm -rf "$T/tmp" && mkdir "$T/tmp" # what SIGKILL left (mpirun's session directory too)
  TMPDIR="$T/tmp" "$AXLC" run "$SRC/models/tiny-lm.json" --target cpu-2 --set "/mesh/shape=$(mesh_shape model=2)" \
    --data "$T/big.txt" --tokenizer "$T/bytes.json" --steps 5 --threads 1 > "$T/out" 2> "$T/err" &
  axlc=$!
  wait_mapped "$T/big.txt" "[0-9]*" 60 || fail "no rank mapped its data in 60 s"
  sleep 0.3
  term_timed $axlc
  echo "SIGTERM while the ranks tokenize: exit $rc after $ms ms"
  [ $rc -eq 143 ] && [ $ms -lt 3000 ] || { fail "SIGTERM in the start: exit $rc after $ms ms"; cat "$T/err" >&2; }
  [ "$(grep -c "SIGTERM before the first step: stopped at once" "$T/err")" -eq 1 ] ||
    { fail "SIGTERM in the start: not said once"; cat "$T/err" >&2; }
  gone "SIGTERM in the start"
  [ -z "$(ls "$T/tmp")" ] || fail "SIGTERM in the start: left $(ls "$T/tmp")"
  ;;
handover)
  # OpenCL (fsdp=2, one rank per device) to the CPU trainer (one process) and back
  [ -n "$OCL" ] || { fail "handover is an ocl_ case"; exit 1; }
  reference tiny_lm
  must train tiny_lm fsdp2 "$T/g" --steps $STEPS --ckpt-every 5 --keep 0
  grep -q "OpenCL device" "$T/log" || fail "the fsdp2 trainer is not an OpenCL one"
  compare losses "$T/g/m.jsonl" "$W/ref-tiny_lm/m.jsonl" 1e-4
  mkdir -p "$T/c/ck"
  cp -r "$T/g/ck/step_00000005" "$T/c/ck/"
  head -5 "$T/g/m.jsonl" > "$T/c/m.jsonl"
  cpu must train tiny_lm one "$T/c" --steps $STEPS --resume
  grep -q "resumed from" "$T/log" || fail "the CPU trainer did not resume"
  compare losses "$T/c/m.jsonl" "$T/g/m.jsonl" 1e-4
  compare losses "$T/c/m.jsonl" "$W/ref-tiny_lm/m.jsonl" 1e-4
  must "$DUMP" "$T/c/ck" "$T/c.safetensors"
  must "$DUMP" "$T/g/ck" "$T/g.safetensors"
  compare close "$T/c.safetensors" "$T/g.safetensors" 1e-4
  # the other way: 5 CPU steps (one process), resumed by the OpenCL trainer on fsdp=2; its
  # ranks without the launcher's local rank, which MPI then gives (MPI_COMM_TYPE_SHARED)
  cpu must train tiny_lm one "$T/b" --steps 5
  printf '#!/bin/sh\nunset OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID SLURM_LOCALID PMI_LOCAL_RANK\nexec "$@"\n' > "$T/nolocal"
  chmod +x "$T/nolocal"
  WRAP=$T/nolocal
  must train tiny_lm fsdp2 "$T/b" --steps $STEPS --resume
  WRAP=
  grep -q "resumed from" "$T/log" || fail "the OpenCL trainer did not resume"
  grep -q "local rank 1 of the 2 ranks on this node (MPI_COMM_TYPE_SHARED) shares OpenCL device" "$T/log" ||
    fail "no local rank from MPI: $(cat "$T/log")"
  compare losses "$T/b/m.jsonl" "$W/ref-tiny_lm/m.jsonl" 1e-4
  must "$DUMP" "$T/b/ck" "$T/b.safetensors"
  compare close "$T/b.safetensors" "$W/ref-tiny_lm/params.safetensors" 1e-4
  ;;
ppresume)
  reference fuji onemb4
  must train fuji pp2data2mb4 "$T/a" --steps $STEPS --ckpt-every 5 --keep 0
  compare losses "$T/a/m.jsonl" "$W/ref-fuji-onemb4/m.jsonl" 1e-4
  must "$DUMP" "$T/a/ck" "$T/a.safetensors"
  for m in onemb4 pp4f1bmb4 fsdp4; do
    mkdir -p "$T/$m/ck"
    cp -r "$T/a/ck/step_00000005" "$T/$m/ck/"
    head -5 "$T/a/m.jsonl" > "$T/$m/m.jsonl"
    must train fuji $m "$T/$m" --steps $STEPS --resume
    grep -q "resumed from" "$T/log" || fail "$m: did not resume"
    compare losses "$T/$m/m.jsonl" "$T/a/m.jsonl" 1e-4
    must "$DUMP" "$T/$m/ck" "$T/$m.safetensors"
    compare close "$T/$m.safetensors" "$T/a.safetensors" 1e-4
  done
  # the other way: the one-process run's step 5 on pipeline=2 x data=2
  mkdir -p "$T/b/ck"
  cp -r "$T/onemb4/ck/step_00000005" "$T/b/ck/"
  head -5 "$T/a/m.jsonl" > "$T/b/m.jsonl"
  must train fuji pp2data2mb4 "$T/b" --steps $STEPS --resume
  compare losses "$T/b/m.jsonl" "$T/a/m.jsonl" 1e-4
  must "$DUMP" "$T/b/ck" "$T/b.safetensors"
  compare close "$T/b.safetensors" "$T/a.safetensors" 1e-4
  ;;
resume)
  reference tiny_lm
  must train tiny_lm data2model2 "$T/a" --steps $STEPS --ckpt-every 5 --keep 0
  compare losses "$T/a/m.jsonl" "$W/ref-tiny_lm/m.jsonl" 1e-4
  for m in fsdp4 one data2model2; do
    mkdir -p "$T/$m/ck"
    cp -r "$T/a/ck/step_00000005" "$T/$m/ck/"
    head -5 "$T/a/m.jsonl" > "$T/$m/m.jsonl"
    must train tiny_lm $m "$T/$m" --steps $STEPS --resume
    grep -q "resumed from" "$T/log" || fail "$m: did not resume"
    compare losses "$T/$m/m.jsonl" "$T/a/m.jsonl" 1e-4
    must "$DUMP" "$T/$m/ck" "$T/$m.safetensors"
    must "$DUMP" "$T/a/ck" "$T/a.safetensors"
    compare close "$T/$m.safetensors" "$T/a.safetensors" 1e-4
  done
  compare losses "$T/data2model2/m.jsonl" "$T/a/m.jsonl" 0
  for f in "$T/a/ck/step_00000010"/*; do
    cmp -s "$f" "$T/data2model2/ck/step_00000010/${f##*/}" || fail "same-mesh resume: ${f##*/} differs"
  done
  ;;
*_*)
  model=${CASE%_*}
  m=${CASE##*_}
  r=$(ref_mesh $m)
  reference "$model" $r
  ref="$W/ref-$model"
  [ $r = one ] || ref="$ref-$r"
  must train "$model" "$m" "$T/run" --steps $STEPS
  must "$DUMP" "$T/run/ck" "$T/run.safetensors"
  # bf16 compute: a sharded product's partial sums and the bf16 all-reduce of activations over
  # `model` round differently from one process's product, a few elements in ten thousand
  # across a bf16 rounding boundary; AdamW's early steps (about lr times the gradient's sign)
  # carry that into the parameters, most into those near zero (tiny-lm's norm biases), and a
  # MoE's top-2 routing turns a changed router logit into a changed expert (docs/precision.md,
  # "Tolerances"). Measured worst (params): fuji 3e-8 (fsdp4), 3e-4 (data2model2); tiny 9e-4,
  # 5e-3; moe 8e-3, 2.4e-2 (its losses 1.8e-4 on data2model2).
  ltol=1e-4 ptol=1e-4
  case $CASE in
  fuji_bf16_* | tiny_bf16_fsdp4) ptol=1e-3 ;;
  tiny_bf16_*) ptol=1e-2 ;;
  moe_bf16_*) ltol=5e-4 ptol=5e-2 ;;
  esac
  compare losses "$T/run/m.jsonl" "$ref/m.jsonl" $ltol
  compare close "$T/run.safetensors" "$ref/params.safetensors" ${BF16_PARAM_TOL:-$ptol}
  "$PY" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; \
print('%s: %.1f ms/step (median), %d bytes sent per device per step' % (sys.argv[2], \
sorted(x['step_ms'] for x in r)[len(r)//2], r[-1].get('comm_bytes', 0)))" "$T/run/m.jsonl" "$CASE"
  ;;
esac
[ $fails -eq 0 ] || exit 1
echo "PASS [$CASE]"
