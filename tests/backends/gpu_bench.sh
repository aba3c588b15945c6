#!/bin/sh
# gpu_bench.sh BUILDDIR SRCDIR: tools/bench/gpu-pack.sh then tools/bench/gpu.sh, as on a fresh GPU
# machine, on PoCL here: axlc installed into a scratch prefix packs the tiny-lm bundle (f32 and
# bf16 OpenCL trainers, their libraries, the ICD loader, data, the CPU trainer's first losses);
# then the prefix is renamed, and gpu.sh runs from a copy of the bundle with the build and source
# trees hidden under empty directories (a mount namespace, where unshare allows one). Its table
# has a row per trainer with ms/step, tokens/s and the loss check passed, and the profile's top
# kernels; a reference loss moved by 0.01 fails the check (exit 1, the step named).
set -u
B=$1 SRC=$2 CASE=gpu_bench
. "$SRC/tests/lib.sh"
scratch gpu-bench

P=$T/prefix
cmake --install "$B" --prefix "$P" > "$T/install.log" 2>&1 || { cat "$T/install.log"; exit 1; }
if ! "$P/bin/axlc" backends | grep -q '^opencl '; then
  echo "SKIP: this axlc has no opencl backend"
  exit 77
fi
[ -x "$B/tools/bench/ocl_gemm" ] || { fail "no $B/tools/bench/ocl_gemm to pack"; exit 1; }
OCL_GEMM=$B/tools/bench/ocl_gemm sh "$SRC/tools/bench/gpu-pack.sh" --axlc "$P/bin/axlc" --tiny --steps 3 "$T/packed" > "$T/pack.log" 2>&1 ||
  { fail "gpu-pack.sh"; cat "$T/pack.log" >&2; exit 1; }
for f in bin/tiny-lm-f32 bin/tiny-lm-tf32 bin/tiny-lm-bf16 bin/ocl_gemm gemm.txt lib/libOpenCL.so.1 data/tiny-lm.bin ref/tiny-lm-f32.txt \
         ref/tiny-lm-bf16.txt configs/tiny-lm.json gpu.sh tests/torch/reference.py tools/bench/torch_bench.py; do
  [ -e "$T/packed/$f" ] || fail "not in the bundle: $f"
done
[ -e "$T/packed/lib/libc.so.6" ] && fail "the bundle holds glibc's libc.so.6"
[ "$(wc -l < "$T/packed/ref/tiny-lm-f32.txt")" -eq 2 ] || fail "ref/tiny-lm-f32.txt: expected 2 losses"
grep -q '^tiny-lm f32 8 64 256$' "$T/packed/bench.txt" || fail "bench.txt: $(cat "$T/packed/bench.txt")"

# the machine without axlc: the prefix renamed, the bundle copied, the trees hidden
mv "$P" "$P.hidden"
cp -r "$T/packed" "$T/bundle" && rm -rf "$T/packed"
export POCL_CACHE_DIR="$T/pocl-cache" AXLC_CACHE_DIR="$T/axlc-cache"
hide=
if unshare -rm true 2> /dev/null; then
  hide="mount -t tmpfs none '$B' && mount -t tmpfs none '$SRC' &&"
else
  echo "note: no mount namespace here (unshare -rm); the trees stay visible, the prefix is renamed"
fi
gpu() { unshare_ok=$1; shift
  if [ -n "$hide" ] && [ "$unshare_ok" = hide ]; then
    unshare -rm sh -c "$hide"' exec sh "$0" "$@"' "$T/bundle/gpu.sh" "$@"
  else
    sh "$T/bundle/gpu.sh" "$@"
  fi
}
[ -z "$hide" ] || unshare -rm sh -c "$hide"' [ ! -e "$0/CMakeCache.txt" ] && [ ! -e "$1/tools/bench/gpu.sh" ]' "$B" "$SRC" ||
  fail "the build and source trees are not hidden in the mount namespace"
gpu hide "$T/res" > "$T/out" 2>&1; rc=$?
[ "$rc" -eq 0 ] || fail "gpu.sh exited $rc"
cat "$T/out"
row() { grep -qE "$1" "$T/res/table.md" || fail "table.md lacks a row like: $1"; }
row '^\| tiny-lm \| axlc OpenCL f32 \| [0-9.]+ \| [0-9]+ \| ok: 2 steps, max relative difference [0-9.e+-]+ \|$'
row '^\| tiny-lm \| axlc OpenCL tf32 \| [0-9.]+ \| [0-9]+ \| ok: 2 steps, max relative difference [0-9.e+-]+ \|$'
grep -q '^ocl_gemm 96^3 (GFLOP/s):' "$T/res/table.md" || fail "no ocl_gemm in table.md"
grep -qE '^    .*bf16.* [0-9.]+' "$T/res/table.md" || fail "no bf16 product in table.md"
row '^\| tiny-lm \| axlc OpenCL bf16 \| [0-9.]+ \| [0-9]+ \| ok: 2 steps, max relative difference [0-9.e+-]+ \|$'
grep -q '^OpenCL: ' "$T/res/table.md" || fail "table.md does not name the OpenCL device"
grep -q '^tiny-lm-f32: the kernels that took the most device time' "$T/res/table.md" || fail "no profile in table.md"
grep -qE '^ +[0-9.]+ ms  k[0-9]+_' "$T/res/table.md" || fail "no kernel times in table.md"
grep -q 'OpenCL traffic: 2 steps' "$T/res/table.md" || fail "no traffic line in table.md"
grep -q "vendor library" "$T/out" || fail "gpu.sh did not say which vendor library it found"
[ "$(cat "$T/res/icd/vendor.icd")" != "" ] || fail "no ICD file written"
[ -s "$T/res/tiny-lm-f32.jsonl" ] && [ -s "$T/res/tiny-lm-f32.log" ] || fail "no metrics or log in RESULTS"

# a reference that the run does not meet: the check fails, naming the step
awk 'NR == 1 {printf "%.6f\n", $1 + 0.01; next} {print}' "$T/bundle/ref/tiny-lm-f32.txt" > "$T/ref" &&
  mv "$T/ref" "$T/bundle/ref/tiny-lm-f32.txt"
gpu plain "$T/res2" --no-profile --steps 2 > "$T/out2" 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "gpu.sh with a wrong reference exited $rc, expected 1"
grep -qE '^\| tiny-lm \| axlc OpenCL f32 \| [0-9.]+ \| [0-9]+ \| FAILED: step 1 loss ' "$T/res2/table.md" ||
  fail "the failed check is not in table.md: $(cat "$T/res2/table.md")"
grep -qE '^\| tiny-lm \| axlc OpenCL bf16 \| .* \| ok: 2 steps' "$T/res2/table.md" || fail "bf16 row of the second run"
[ "$fails" -eq 0 ] || exit 1
