#!/bin/sh
# remat.sh AXLC SRCDIR: the compiled CPU trainer computes the same bits under every remat
# policy as without remat. tiny-lm at seq 32, batch 4, 3 steps: a trainer from `axlc compile`
# per policy, and `axlc run --target cpu` (the JIT) under "full"; the losses (metrics) and the
# final checkpoint (parameters and AdamW moments) must equal the no-remat trainer's exactly.
set -u
AXLC=$1 SRC=$2 CASE=remat
PY=${TORCH_PYTHON:-/usr/bin/python3}
. "$SRC/tests/lib.sh"
scratch remat
need_numpy
cp "$CORPUS" "$T/text.txt"
M=$SRC/models/tiny-lm.json
SETS="--set /input/seq_len=32 --set /input/global_batch_size=4"

# train NAME POLICY: compile under POLICY, 3 steps into $T/NAME
train() {
  # shellcheck disable=SC2086
  must "$AXLC" compile "$M" --target cpu -o "$T/$1.trainer" $SETS --set "/model/decoder/remat_policy=$2"
  must "$T/$1.trainer" --data "$T/text.txt" --steps 3 --ckpt-dir "$T/$1" --metrics "$T/$1.jsonl"
}

train none '"none"'
for p in full save_dots save_qkvo; do
  train "$p" "\"$p\""
  compare losses "$T/$p.jsonl" "$T/none.jsonl" 0
  compare exact "$(newest "$T/$p")/state.safetensors" "$(newest "$T/none")/state.safetensors"
done
# shellcheck disable=SC2086
must "$AXLC" run "$M" --target cpu $SETS --set '/model/decoder/remat_policy="full"' \
  --data "$T/text.txt" --steps 3 --ckpt-dir "$T/jit" --metrics "$T/jit.jsonl"
compare losses "$T/jit.jsonl" "$T/none.jsonl" 0
compare exact "$(newest "$T/jit")/state.safetensors" "$(newest "$T/none")/state.safetensors"
[ "$fails" -eq 0 ] || exit 1
echo "remat: same bits under full, save_dots, save_qkvo"
