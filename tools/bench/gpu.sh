#!/bin/sh
# gpu.sh RESULTS [options]: the GPU benchmark, run from a bundle tools/bench/gpu-pack.sh made
# (docs/bench.md, "GPU benchmark"). Needs nothing but sh, awk, sort and an OpenCL driver: the
# trainers, their libraries and the ICD loader come with the bundle, and the ICD file is written
# here, naming the vendor library found on this machine.
#
# For every trainer of the bundle (bench.txt: gpt2-124m and small, f32, tf32 and bf16) it trains
# --steps steps on the bundle's data, checks the first steps' losses against the CPU trainer's
# (ref/), and runs 2 more steps with AXLC_OPENCL_PROFILE=1 for the kernels that took the most
# device time and the bytes each way. Where python3 imports a PyTorch that sees CUDA, it trains
# the same models with tests/torch/reference.py's model (tools/bench/torch_bench.py) in f32,
# TF32, bf16 autocast, and bf16 with scaled_dot_product_attention and fused AdamW. It prints one
# table of ms/step (the median of steps 2..N) and tokens/s, then the products' GFLOP/s
# (bin/ocl_gemm at gemm.txt's size; --no-gemm skips it) and the top kernels.
#
# RESULTS (created) receives table.md, results.tsv, devices.txt, and per run its log, metrics
# and profile. Exit status 0 when every run trained and every loss check passed, else 1.
#
#   usage: gpu.sh RESULTS [--steps N] [--only NAME] [--no-torch] [--no-profile] [--no-gemm] [--device N]
#   environment: AXLC_OPENCL_VENDOR  the vendor's OpenCL library (default: NVIDIA's in
#                                    /usr/local/nvidia/lib64 or the system's, else the first
#                                    /etc/OpenCL/vendors entry)
#                GPU_BENCH_TOL_F32, GPU_BENCH_TOL_TF32, GPU_BENCH_TOL_BF16  the loss check's
#                                    relative tolerance (default 1e-4, 1e-2 (against the
#                                    CPU's f32) and 1e-2)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res= steps= only= torch=1 profile=1 device= gemm=1
die() { echo "gpu.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || die "--steps needs a number"; steps=$2; shift ;;
    --only) [ $# -ge 2 ] || die "--only needs a name"; only=$2; shift ;;
    --no-torch) torch=0 ;;
    --no-profile) profile=0 ;;
    --no-gemm) gemm=0 ;;
    --device) [ $# -ge 2 ] || die "--device needs a value"; device=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) [ -z "$res" ] || die "one RESULTS directory, not '$res' and '$1'"; res=$1 ;;
  esac
  shift
done
[ -n "$res" ] || die "usage: gpu.sh RESULTS [--steps N] [--only NAME] [--no-torch] [--no-profile] [--no-gemm] [--device N]"
[ -f "$here/bench.txt" ] || die "$here/bench.txt: not a bundle of tools/bench/gpu-pack.sh"
read -r packed refsteps < "$here/steps.txt"
steps=${steps:-$packed}
case $steps in '' | *[!0-9]*) die "--steps $steps: expected a whole number" ;; esac
[ "$steps" -ge 2 ] || die "--steps $steps: at least 2 (the first step's time is not measured)"
[ "$refsteps" -le "$steps" ] || refsteps=$steps
mkdir -p "$res/icd" "$res/run" || die "cannot create $res"
res=$(cd "$res" && pwd)
tol_f32=${GPU_BENCH_TOL_F32:-1e-4}
tol_bf16=${GPU_BENCH_TOL_BF16:-1e-2}
tol_tf32=${GPU_BENCH_TOL_TF32:-1e-2}

# the vendor's OpenCL library, named by an ICD file of our own (the bundle's loader reads it)
vendor=${AXLC_OPENCL_VENDOR:-}
if [ -z "$vendor" ]; then
  for f in /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/local/nvidia/lib64/libnvidia-opencl.so \
           /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1; do
    [ -e "$f" ] && { vendor=$f; break; }
  done
fi
if [ -z "$vendor" ]; then
  for icd in /etc/OpenCL/vendors/*.icd; do
    [ -r "$icd" ] && { vendor=$(head -n 1 "$icd"); break; }
  done
fi
[ -n "$vendor" ] || die "no OpenCL vendor library: none in /usr/local/nvidia/lib64, the system's library directories or /etc/OpenCL/vendors; set AXLC_OPENCL_VENDOR=/path/to/libVENDOR-opencl.so"
echo "$vendor" > "$res/icd/vendor.icd"
export OCL_ICD_VENDORS="$res/icd"
LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
case $vendor in */*) LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$vendor") ;; esac
export LD_LIBRARY_PATH
export AXLC_CACHE_DIR="${AXLC_CACHE_DIR:-$here/cache}"
devarg=; [ -n "$device" ] && devarg="--device $device"
echo "gpu.sh: OpenCL vendor library $vendor"

first=$(awk 'NR == 1 {print $1 "-" $2}' "$here/bench.txt")
"$here/bin/$first" --list-devices > "$res/devices.txt" 2>&1 || {
  cat "$res/devices.txt" >&2
  die "the trainers find no OpenCL device through $vendor"
}
cat "$res/devices.txt"

fails=0
printf 'benchmark\timplementation\tms_per_step\ttokens_per_s\tloss_check\n' > "$res/results.tsv"
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$res/results.tsv"; }

# the median of the step_ms of steps 2.. in a metrics file
median_ms() {
  sed -n 's/.*"step": \([0-9]*\),.*"step_ms": \([0-9.]*\),.*/\1 \2/p' "$1" | awk '$1 >= 2 {print $2}' | sort -n |
    awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# "ok: N steps, max relative difference D" or "FAILED: ...", against ref/NAME-PREC.txt
loss_check() { # METRICS REF TOL
  [ -s "$2" ] || { echo "not checked (no CPU reference in the bundle)"; return 0; }
  sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1" | head -n "$refsteps" > "$res/run/got.txt"
  head -n "$refsteps" "$2" | paste - "$res/run/got.txt" | awk -v tol="$3" '
    { n++; if ($2 == "") { miss = 1; next }
      d = $1 - $2; if (d < 0) d = -d; s = $1 < 0 ? -$1 : $1; r = d / (s > 1 ? s : 1)
      if (r > worst) { worst = r; at = n; want = $1; got = $2 } }
    END { if (miss || n == 0) { print "FAILED: the run has fewer losses than the reference"; exit 1 }
          if (worst > tol) { printf "FAILED: step %d loss %s, the CPU trainer %s (relative %.2e > %s)\n", at, got, want, worst, tol; exit 1 }
          printf "ok: %d steps, max relative difference %.2e\n", n, worst }'
}

while read -r name prec B S V; do
  [ -z "$only" ] || [ "$only" = "$name" ] || continue
  tag=$name-$prec
  echo "gpu.sh: $tag: $steps steps, batch $B, seq $S"
  rm -f "$res/$tag.jsonl"
  # shellcheck disable=SC2086
  (cd "$res/run" && "$here/bin/$tag" --data "$here/data/$name.bin" --steps "$steps" --metrics "$res/$tag.jsonl" $devarg < /dev/null) \
    > "$res/$tag.log" 2>&1
  rc=$?
  ms=$(median_ms "$res/$tag.jsonl" 2>/dev/null || echo -)
  if [ "$rc" -ne 0 ] || [ "$ms" = - ]; then
    tail -n 5 "$res/$tag.log" >&2
    row "$name" "axlc OpenCL $prec" - - "FAILED: the trainer exited $rc"
    fails=$((fails + 1))
    continue
  fi
  tol=$tol_f32; [ "$prec" = bf16 ] && tol=$tol_bf16; [ "$prec" = tf32 ] && tol=$tol_tf32
  check=$(loss_check "$res/$tag.jsonl" "$here/ref/$tag.txt" "$tol") || fails=$((fails + 1))
  row "$name" "axlc OpenCL $prec" "$ms" "$(awk -v t=$((B * S)) -v ms="$ms" 'BEGIN {printf "%.0f", t * 1000 / ms}')" "$check"
  if [ "$profile" -eq 1 ]; then
    # shellcheck disable=SC2086
    (cd "$res/run" && AXLC_OPENCL_PROFILE=1 "$here/bin/$tag" --data "$here/data/$name.bin" --steps 2 $devarg < /dev/null) \
      > "$res/$tag.profile" 2>&1 || echo "gpu.sh: $tag: the profiled run failed (see $res/$tag.profile)" >&2
  fi
done < "$here/bench.txt"

# PyTorch on the same models, where it sees a CUDA device
py=$(command -v python3 || true)
# the products: ocl_gemm at gemm.txt's size (f32, tf32 and bf16, SIMT and tensor-core bodies)
if [ "$gemm" -eq 1 ] && [ -x "$here/bin/ocl_gemm" ]; then
  read -r gn < "$here/gemm.txt"
  echo "gpu.sh: ocl_gemm $gn x $gn x $gn"
  # shellcheck disable=SC2086
  (cd "$res/run" && "$here/bin/ocl_gemm" "$gn" "$gn" "$gn" $devarg < /dev/null) > "$res/ocl_gemm.txt" 2>&1 ||
    { tail -n 5 "$res/ocl_gemm.txt" >&2; echo "gpu.sh: ocl_gemm failed (see $res/ocl_gemm.txt)" >&2; fails=$((fails + 1)); }
fi

if [ "$torch" -eq 1 ] && [ -n "$py" ] && "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  for name in $(awk '{print $1}' "$here/bench.txt" | uniq); do
    [ -z "$only" ] || [ "$only" = "$name" ] || continue
    for v in "f32|" "TF32|--tf32" "bf16 autocast|--autocast" "bf16 + SDPA + fused AdamW|--autocast --sdpa --fused-adamw"; do
      label=${v%%|*} flags=${v#*|}
      echo "gpu.sh: $name: PyTorch $label"
      # shellcheck disable=SC2086
      if "$py" "$here/tools/bench/torch_bench.py" "$here/configs/$name.json" --device cuda --steps "$steps" --warmup 2 $flags \
           > "$res/torch-$name-$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_').json" 2> "$res/torch.err"; then
        set -- $("$py" -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("%.3f %.0f" % (r["ms_per_step"], r["tokens_per_s"]))' \
                 "$res/torch-$name-$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_').json")
        row "$name" "PyTorch $label" "$1" "$2" -
      else
        tail -n 3 "$res/torch.err" >&2
        row "$name" "PyTorch $label" - - "FAILED: see torch.err"
      fi
    done
  done
  torchline="PyTorch $("$py" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))' 2>/dev/null)"
else
  torchline="PyTorch with CUDA: not found (python3 with a torch that sees a CUDA device), or --no-torch"
fi

{
  echo "| benchmark | implementation | ms/step | tokens/s | first losses against the CPU trainer |"
  echo "|---|---|---|---|---|"
  awk -F '\t' 'NR > 1 {printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5}' "$res/results.tsv"
  echo
  echo "$torchline"
  echo "OpenCL: $(sed -n 's/^ *0 ([0-9:]*) *//p' "$res/devices.txt" | head -n 1)"
  if [ -s "$res/ocl_gemm.txt" ]; then
    echo
    echo "ocl_gemm $(cat "$here/gemm.txt")^3 (GFLOP/s):"
    sed 's/^/    /' "$res/ocl_gemm.txt"
  fi
  for p in "$res"/*.profile; do
    [ -e "$p" ] || continue
    echo
    echo "$(basename "$p" .profile): the kernels that took the most device time (AXLC_OPENCL_PROFILE=1, 2 steps)"
    grep -E 'OpenCL traffic|OpenCL profile' "$p" | sed 's/^[^:]*: //'
    grep -E '^ +[0-9.]+ ms  ' "$p" | head -n 8
  done
} > "$res/table.md"
cat "$res/table.md"
[ "$fails" -eq 0 ] || { echo "gpu.sh: $fails failure(s)" >&2; exit 1; }
