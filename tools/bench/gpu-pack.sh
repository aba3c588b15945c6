#!/bin/sh
# gpu-pack.sh [options] OUT: the bundle tools/bench/gpu.sh runs on a fresh GPU machine, which
# has no axlc, no package access and maybe no compiler (docs/bench.md, "GPU benchmark").
#
# OUT (a new directory) receives:
#   bin/NAME-PREC       OpenCL trainers (--target opencl), f32, tf32 (/precision/matmul=tf32)
#                       and bf16, of every benchmark
#   bin/ocl_gemm        the products' benchmark (OCL_GEMM=PATH, or the build's), and gemm.txt:
#                       its size (4096; 96 with --tiny)
#   lib/                their shared libraries: the ldd closure without glibc (libc, libm, ld.so,
#                       libpthread, libdl, librt), the OpenCL ICD loader among them
#   data/NAME.bin       random tokens (llm.c format) for steps + 1 batches
#   ref/NAME-PREC.txt   the CPU trainer's losses of the first --ref-steps steps on that data
#                       (tf32: f32's, the CPU has no tf32)
#   configs/NAME.json   the resolved config, for PyTorch (tests/torch/reference.py builds it)
#   tests/torch/{reference.py,stio.py}, tools/bench/torch_bench.py, gpu.sh, bench.txt (the
#   list: name precision batch seq vocab)
#
# The benchmarks: gpt2-124m (batch 8, seq 1024) and small (tools/bench/small.json); with --tiny,
# tiny-lm only (batch 8, seq 64), for testing the bundle on PoCL. The CPU reference of gpt2-124m
# runs in 8 microbatches (1.7 instead of 13 GiB; the same losses to rounding).
#
#   usage: tools/bench/gpu-pack.sh [--axlc PATH] [--tiny] [--steps N] [--ref-steps N] [--no-ref]
#                                  [--tar] OUT
#     --axlc PATH     the compiler (default: build/tools/axlc, else axlc on PATH)
#     --steps N       steps gpu.sh trains (the data holds N + 1 batches; default 10)
#     --ref-steps N   the CPU trainer's steps whose losses gpu.sh checks (default 2)
#     --no-ref        no CPU reference (gpu.sh then checks nothing)
#     --tar           also OUT.tar.gz
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
axlc= tiny=0 steps=10 refsteps=2 tar=0 out=
PY=${PYTHON:-python3}
die() { echo "gpu-pack.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --axlc) [ $# -ge 2 ] || die "--axlc needs a path"; axlc=$2; shift ;;
    --tiny) tiny=1 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a number"; steps=$2; shift ;;
    --ref-steps) [ $# -ge 2 ] || die "--ref-steps needs a number"; refsteps=$2; shift ;;
    --no-ref) refsteps=0 ;;
    --tar) tar=1 ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) [ -z "$out" ] || die "one OUT directory, not '$out' and '$1'"; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || die "usage: gpu-pack.sh [--axlc PATH] [--tiny] [--steps N] [--ref-steps N] [--no-ref] [--tar] OUT"
case $steps$refsteps in *[!0-9]*) die "--steps and --ref-steps take whole numbers" ;; esac
[ "$steps" -ge 2 ] || die "--steps $steps: at least 2 (the first step's time is not measured)"
[ "$refsteps" -le "$steps" ] || die "--ref-steps $refsteps is more than --steps $steps"
if [ -z "$axlc" ]; then
  if [ -x "$top/build/tools/axlc" ]; then axlc=$top/build/tools/axlc; else axlc=$(command -v axlc) || die "no axlc: give --axlc PATH"; fi
fi
[ -x "$axlc" ] || die "--axlc $axlc: not an executable"
"$axlc" backends | grep -q '^opencl ' || die "$axlc has no opencl backend"
[ ! -e "$out" ] || die "$out exists: give a new directory"
mkdir -p "$out/bin" "$out/lib" "$out/data" "$out/ref" "$out/configs" "$out/tests/torch" "$out/tools/bench"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/axlc-gpu-pack.XXXXXX")
trap 'rm -rf "$work"' EXIT

# name|config|sets (space-separated PATH=VALUE)|the CPU reference's extra sets
if [ "$tiny" -eq 1 ]; then
  list="tiny-lm|$top/models/tiny-lm.json||"
else
  list="gpt2-124m|$top/models/gpt2-124m.json|/input/global_batch_size=8 /input/seq_len=1024|/learner/microbatches=8
small|$top/tools/bench/small.json||"
fi

sets_args() { for s in $1; do printf ' --set %s' "$s"; done; }
field() { "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["input"]["global_batch_size"], c["input"]["seq_len"], c["model"]["vocab_size"])' "$1"; }

: > "$out/bench.txt"
echo "$list" | while IFS='|' read -r name cfg sets refsets; do
  # shellcheck disable=SC2046
  "$axlc" config "$cfg" --target opencl $(sets_args "$sets") > "$out/configs/$name.json" ||
    die "$name: axlc config failed"
  set -- $(field "$out/configs/$name.json")
  B=$1 S=$2 V=$3
  # random tokens below the vocabulary, (steps + 1) batches and one: every step a new batch
  "$PY" - "$out/data/$name.bin" "$V" $(((steps + 1) * B * S + 1)) <<'EOF'
import random, struct, sys
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(0)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *(rnd.randrange(vocab) for _ in range(n))))
EOF
  for prec in f32 tf32 bf16; do
    p=; [ "$prec" = bf16 ] && p="/precision/compute=bf16"
    [ "$prec" = tf32 ] && p="/precision/matmul=tf32"
    echo "gpu-pack.sh: $name $prec: compiling" >&2
    # shellcheck disable=SC2046
    "$axlc" compile "$cfg" --target opencl $(sets_args "$sets $p") -o "$out/bin/$name-$prec" \
      > "$work/log" 2>&1 || { cat "$work/log" >&2; die "$name $prec: axlc compile failed"; }
    echo "$name $prec $B $S $V" >> "$out/bench.txt"
    [ "$refsteps" -gt 0 ] || continue
    if [ "$prec" = tf32 ]; then # the CPU computes products in f32 only: f32's losses
      cp "$out/ref/$name-f32.txt" "$out/ref/$name-tf32.txt"
      continue
    fi
    echo "gpu-pack.sh: $name $prec: the CPU trainer's first $refsteps steps" >&2
    # shellcheck disable=SC2046
    "$axlc" compile "$cfg" --target cpu $(sets_args "$sets $refsets $p") -o "$work/cpu" \
      > "$work/log" 2>&1 || { cat "$work/log" >&2; die "$name $prec: axlc compile --target cpu failed"; }
    rm -f "$work/m.jsonl"
    (cd "$work" && ./cpu --data "$out/data/$name.bin" --steps "$refsteps" --metrics m.jsonl) \
      > "$work/log" 2>&1 || { cat "$work/log" >&2; die "$name $prec: the CPU trainer failed"; }
    sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/m.jsonl" > "$out/ref/$name-$prec.txt"
    [ "$(wc -l < "$out/ref/$name-$prec.txt")" -eq "$refsteps" ] || die "$name $prec: no losses in the CPU trainer's metrics"
  done
done

# ocl_gemm (the products' GFLOP/s), beside the compiler's build when there is one
gemm=${OCL_GEMM:-}
[ -n "$gemm" ] || for g in "$(dirname "$axlc")/bench/ocl_gemm" "$top/build/tools/bench/ocl_gemm"; do
  [ -x "$g" ] && { gemm=$g; break; }
done
if [ -n "$gemm" ]; then
  cp "$gemm" "$out/bin/ocl_gemm"
  gn=4096; [ "$tiny" -eq 1 ] && gn=96
  echo "$gn" > "$out/gemm.txt"
else
  echo "gpu-pack.sh: no ocl_gemm (build/tools/bench/ocl_gemm or OCL_GEMM=PATH): gpu.sh times no products" >&2
fi

# the libraries: every trainer's ldd closure, glibc's own left out (the machine has its own)
for t in "$out"/bin/*; do ldd "$t"; done | awk '/=> \//{print $1, $3}' | sort -u | while read -r soname path; do
  case $soname in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*|libutil.so.*) continue ;;
  esac
  [ -e "$out/lib/$soname" ] || cp -L "$path" "$out/lib/$soname"
done
[ -e "$out/lib/libOpenCL.so.1" ] || die "the trainers link no libOpenCL.so.1 (the ICD loader)"

cp "$top/tools/bench/gpu.sh" "$out/gpu.sh"
cp "$top/tools/bench/torch_bench.py" "$out/tools/bench/"
cp "$top/tests/torch/reference.py" "$top/tests/torch/stio.py" "$out/tests/torch/"
echo "$steps $refsteps" > "$out/steps.txt"
chmod +x "$out/gpu.sh"
if [ "$tar" -eq 1 ]; then
  tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
fi
echo "gpu-pack.sh: $out: $(du -sk "$out" | cut -f1) KiB$([ "$tar" -eq 1 ] && echo ", $out.tar.gz $(du -k "$out.tar.gz" | cut -f1) KiB")"
