#!/bin/sh
# mesh.sh AXLC SRCDIR MODEL: the interpreter's simulated mesh against one device, 10 steps.
# `axlc run --backend interp --target cpu-N --set /mesh/shape=...` trains with the per-device
# program, every device simulated in one process; `axlc run --target interp` is one device.
# Both train MODEL (tests/layouts.sh) on the same tokens; each layout's losses and final
# parameters must be within 1e-4 of one device's with the same microbatches (ref_mesh). The
# layouts of MODEL:
#   tiny_lm, fuji, moe   fsdp2, fsdp2mb2, fsdp2mb4 (1, 2, 4 microbatches), model2 and
#                        data2model2 (vocabulary-parallel), spmodel2 (sequence parallelism),
#                        seq2 and seq2model2 (the seq axis); moe also expert2fsdp2; fuji
#                        also model4 (4 query heads, 2 key heads: broadcast for the split)
#                        and seq4bal (the balanced order over 4 devices)
#   tiny_moe, fuji_moe   expert2fsdp2
set -u
AXLC=$1 SRC=$2 CASE=$3
PY=${TORCH_PYTHON:-/usr/bin/python3}
. "$SRC/tests/lib.sh"
. "$SRC/tests/layouts.sh"
scratch mesh-interp
need_numpy
STEPS=10
# tokens below 32 (fuji-test's vocabulary), an llm.c token file
tokens "$T/tokens.bin" 4000
# train LAYOUT OUT: the interpreter on LAYOUT's mesh (one: a single device); losses in OUT.txt,
# the final parameters in OUT.safetensors
train() {
  set -- "$1" "$2" $(mesh "$1")
  if [ "$3" -eq 1 ]; then
    where="--target interp"
  else
    where="--backend interp --target cpu-$3"
  fi
  must "$AXLC" run "$(model_file "$CASE")" $(model_args "$CASE") $where --set "/mesh/shape=$4" \
    --set /input/seq_len=16 --set "/precision/compute=$(precision "$CASE")" $(shift 4; sets "$@") \
    --data "$T/tokens.bin" --steps $STEPS --dump "$2.safetensors"
  grep "^step " "$T/log" > "$2.txt"
  [ "$(wc -l < "$2.txt")" -eq $STEPS ] || fail "$1: $(wc -l < "$2.txt") steps, expected $STEPS"
}
case $CASE in
tiny_moe | fuji_moe) layouts=expert2fsdp2 ;;
# fuji: model4 splits its 4 query heads over more devices than its 2 key heads divide over, so
# the frontend broadcasts the key heads there (grouped-query attention reads them unbroadcast)
fuji) layouts="fsdp2 fsdp2mb2 fsdp2mb4 model2 model4 data2model2 spmodel2 seq2 seq2model2 seq4bal" ;;
moe) layouts="fsdp2 fsdp2mb2 fsdp2mb4 model2 data2model2 expert2fsdp2 spmodel2 seq2 seq2model2" ;;
*) layouts="fsdp2 fsdp2mb2 fsdp2mb4 model2 data2model2 spmodel2 seq2 seq2model2" ;;
esac
for m in $layouts; do
  r=$(ref_mesh $m)
  [ -f "$T/$r.txt" ] || train $r "$T/$r"
  train $m "$T/$m"
  compare losses "$T/$m.txt" "$T/$r.txt" 1e-4
  compare close "$T/$m.safetensors" "$T/$r.safetensors" 1e-4
  echo "$CASE $m: $(tail -1 "$T/$m.txt")"
done
[ $fails -eq 0 ] || exit 1
echo "PASS [$CASE]"
