#!/bin/sh
# lora.sh AXLC SRCDIR CASE: LoRA end to end (--apply lora, docs/config.md "LoRA").
#   interp   the interpreter on tiny-lm from trained base weights: the first loss equals the
#            base model's (B starts at zero); after 3 steps only the adapters changed (the base
#            in the dump is the --init file's, bit for bit; gradients only for adapters); the
#            merged weights (axlc convert --merge-lora) give the base model the adapted model's
#            loss; a mesh of fsdp=2 x model=2 trains the adapters as one device does
#   trainer  the compiled trainer (JIT): the interpreter's losses; checkpoints hold only the
#            adapters and their moments, and record the base; resume is bit for bit; a missing
#            or different base is refused, naming the file; --merge-lora of a checkpoint
#            directory with --base; --sample of a LoRA checkpoint gives the merged model's text
#   mpi      4 processes, the adapters split over fsdp=2 x model=2, their sharded checkpoint
#            resumed on one device (registered in tests/mpi)
#   records  what a LoRA checkpoint records is checked (fortunes text, one JIT step):
#            --merge-lora refuses -o naming --base, a --base other than the run's (unless
#            --force-base) and a /lora alpha, rank or params other than the run's; --sample
#            refuses an --init other than the run's base, and any --init for adapters trained
#            on the seeded base; --sample --init of base weights alone gives the base's text
#   errors   a regex that matches nothing, rank 0, a rank above a projection, a weight no
#            linear reads (at axlc params already), alpha 0 or 1e308, --merge-lora of weights without adapters or without /lora;
#            axlc params shows the frozen base's saving
set -u
AXLC=$1 SRC=$2 CASE=$3
PY=${TORCH_PYTHON:-python3}
. "$SRC/tests/lib.sh"
scratch lora
M=$SRC/models/tiny-lm.json
TINY="--set /input/seq_len=16 --set /input/global_batch_size=2"
head -c 20000 "$CORPUS" > "$T/text.txt"
st() { "$PY" "$SRC/tests/e2e/stcheck.py" "$@"; }
command -v "$PY" > /dev/null || { echo "SKIP: no $PY (tests/e2e/stcheck.py reads the files)"; exit 77; }
# loss_at LOG N: the loss of step N in a run's log
loss_at() { sed -n "s/^step $2 loss \([0-9.]*\).*/\1/p" "$1"; }
# expect_error WANT CMD...: CMD exits 1 and says WANT
expect_error() {
  want=$1
  shift
  "$@" > "$T/err" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] || fail "$* exited $rc (expected 1)"
  grep -qF -- "$want" "$T/err" || { fail "$* did not say: $want"; cat "$T/err" >&2; }
}
# base: trained base weights, w0.st (2 interpreter steps of tiny-lm)
base() {
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --target interp $TINY --data "$T/text.txt" --steps 2 --dump "$T/w0.st"
}

case $CASE in
interp)
  base
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --target interp $TINY --data "$T/text.txt" --steps 1 --init "$T/w0.st"
  cp "$T/log" "$T/base.log"
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target interp $TINY --data "$T/text.txt" --steps 3 \
    --init "$T/w0.st" --dump "$T/lora.st"
  cp "$T/log" "$T/lora.log"
  b1=$(loss_at "$T/base.log" 1) l1=$(loss_at "$T/lora.log" 1)
  [ -n "$b1" ] && [ "$b1" = "$l1" ] || fail "first loss: base $b1, LoRA $l1 (expected equal)"
  [ "$(loss_at "$T/lora.log" 3)" != "$l1" ] || fail "the LoRA run's loss did not move"
  # only the adapters change: the dumped base is w0's, bit for bit; gradients only of adapters
  st same "$T/w0.st" "$T/lora.st" new: new: || fail "the base weights changed"
  st nonzero "$T/lora.st" '^new:.*/lora_b$' || fail "lora_b did not move from zero"
  grads=$(st names "$T/lora.st" | grep -c '^grad:')
  [ "$grads" -eq 16 ] || fail "$grads gradients (expected the 16 adapters')"
  st names "$T/lora.st" | grep '^grad:' | grep -v '/lora_[ab]$' && fail "a base weight has a gradient"
  # the merged model's loss is the adapted model's
  must "$AXLC" convert "$M" --apply lora --merge-lora "$T/lora.st" -o "$T/merged.st"
  grep -q "merged the adapters of 8 projections (scale 2)" "$T/log" || fail "merge: $(cat "$T/log")"
  st names "$T/merged.st" | grep -q lora_ && fail "the merged file holds adapters"
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target interp $TINY --data "$T/text.txt" --steps 1 \
    --init "$T/lora.st"
  adapted=$(loss_at "$T/log" 1)
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --target interp $TINY --data "$T/text.txt" --steps 1 --init "$T/merged.st"
  merged=$(loss_at "$T/log" 1)
  [ -n "$adapted" ] && [ "$adapted" = "$merged" ] ||
    fail "adapted loss $adapted, merged model's $merged (expected equal to 6 decimals)"
  [ "$adapted" != "$b1" ] || fail "the adapters changed nothing"
  # 4 devices, fsdp=2 x model=2 (A split like its weight's input dim, B like its output dim):
  # the same losses
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --backend interp --target cpu-4 $TINY --data "$T/text.txt" \
    --steps 3 --init "$T/w0.st" --set '/mesh/shape=[1,1,1,2,1,2]'
  for s in 1 2 3; do
    a=$(loss_at "$T/log" $s) b=$(loss_at "$T/lora.log" $s)
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-5 && d > -1e-5) }' ||
      fail "step $s: fsdp=2 x model=2 loss $a, one device $b"
  done
  ;;
trainer)
  "$AXLC" backends | grep -q '^llvm' || { echo "SKIP: no LLVM backend"; exit 77; }
  base
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target interp $TINY --data "$T/text.txt" --steps 3 \
    --init "$T/w0.st"
  cp "$T/log" "$T/interp.log"
  # shellcheck disable=SC2086
  must "$AXLC" compile "$M" --apply lora --target cpu $TINY -o "$T/tr"
  cp "$T/w0.st" "$T/base.st"
  must "$T/tr" --data "$T/text.txt" --steps 3 --init "$T/base.st" --ckpt-dir "$T/ck"
  for s in 1 2 3; do
    i=$(loss_at "$T/interp.log" $s) c=$(sed -n "s/^step $s loss \([0-9.]*\).*/\1/p" "$T/log")
    awk -v a="$i" -v b="$c" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }' ||
      fail "step $s: trainer loss $c, interpreter $i"
  done
  ck=$(newest "$T/ck")/state.safetensors
  n=$(st names "$ck" | wc -l) a=$(st names "$ck" | grep -c '/lora_[ab]$')
  [ "$n" -eq 48 ] && [ "$a" -eq 48 ] || fail "the checkpoint holds $n tensors, $a of adapters (expected 48, only the adapters and their moments)"
  grep -aq "\"axlc.base\":\"init $T/base.st fnv1a64:" "$ck" || fail "the checkpoint does not record its base"
  # resume: bit for bit what a straight run gives
  must "$T/tr" --data "$T/text.txt" --steps 5 --init "$T/base.st" --ckpt-dir "$T/straight"
  cp -r "$T/ck" "$T/ck2"
  must "$T/tr" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/ck2" --resume
  grep -q "the frozen base weights (24 tensors) came from $T/base.st" "$T/log" || fail "resume: $(cat "$T/log")"
  cmp -s "$(newest "$T/straight")/state.safetensors" "$(newest "$T/ck2")/state.safetensors" ||
    fail "resumed and straight runs differ"
  # the base is gone, or another one is given
  mv "$T/base.st" "$T/moved.st"
  expect_error "holds only the adapters of a LoRA run; its base weights came from $T/base.st, which cannot be read" \
    "$T/tr" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/ck" --resume
  must "$AXLC" run "$M" --target interp $TINY --data "$T/text.txt" --steps 1 --dump "$T/other.st"
  expect_error "these base weights differ from the ones the adapters of" \
    "$T/tr" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/ck" --resume --init "$T/other.st"
  must "$T/tr" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/ck" --resume --init "$T/moved.st"
  # a checkpoint directory's adapters onto --base
  expect_error "pass the base weights the run started from with --base" \
    "$AXLC" convert "$M" --apply lora --merge-lora "$T/ck" -o "$T/m.st"
  must "$AXLC" convert "$M" --apply lora --merge-lora "$T/ck" --base "$T/moved.st" -o "$T/m.st"
  # a base run's checkpoint has no adapters to merge
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --target cpu $TINY --data "$T/text.txt" --steps 1 --ckpt-dir "$T/base-ck"
  expect_error "base-ck holds no LoRA adapters (no tensor 'model/decoder/layer_0/self_attention/q_proj/lora_a'" \
    "$AXLC" convert "$M" --apply lora --merge-lora "$T/base-ck" -o "$T/m2.st"
  # sampling: the checkpoint's adapters on the base it records (or --init), greedy, give the
  # merged weights' text on the base model
  "$T/tr" --sample 24 --ckpt-dir "$T/ck" --init "$T/moved.st" --temperature 0 --prompt "The " \
    > "$T/lora.txt" 2> "$T/log" || fail "lora --sample: $(cat "$T/log")"
  # shellcheck disable=SC2086
  "$AXLC" run "$M" --target cpu $TINY --sample 24 --init "$T/m.st" --temperature 0 --prompt "The " \
    > "$T/merged.txt" 2> "$T/log" || fail "merged --sample: $(cat "$T/log")"
  [ -s "$T/lora.txt" ] && cmp -s "$T/lora.txt" "$T/merged.txt" ||
    fail "greedy samples differ: LoRA '$(cat "$T/lora.txt")', merged '$(cat "$T/merged.txt")'"
  ;;
records)
  "$AXLC" backends | grep -q '^llvm' || { echo "SKIP: no LLVM backend"; exit 77; }
  for f in /usr/share/games/fortunes/*; do
    case $f in *.dat | *.u8) ;; *) [ -f "$f" ] && cat "$f" >> "$T/fortunes.txt" ;; esac
  done
  [ -s "$T/fortunes.txt" ] || { echo "SKIP: no fortunes (Debian: fortunes-min fortunes)"; exit 77; }
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --target interp $TINY --data "$T/fortunes.txt" --steps 1 --dump "$T/base.st"
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --target interp $TINY --data "$T/fortunes.txt" --steps 1 --seed 7 \
    --dump "$T/other.st"
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target cpu $TINY --data "$T/fortunes.txt" --steps 1 \
    --init "$T/base.st" --ckpt-dir "$T/ck"
  cp "$T/base.st" "$T/base.keep"
  # -o is the base: refused by file identity (a hard link is the same file), the base intact
  ln "$T/base.st" "$T/link.st"
  expect_error "error: -o $T/link.st is the same file as --base $T/base.st; refusing to overwrite an input" \
    "$AXLC" convert "$M" --apply lora --merge-lora "$T/ck" --base "$T/base.st" -o "$T/link.st"
  cmp -s "$T/base.st" "$T/base.keep" || fail "the merge overwrote its base"
  # another base: refused, naming both hashes and the recorded file; --force-base merges anyway
  h=$(grep -ao '"axlc.base":"init [^"]*"' "$(newest "$T/ck")/state.safetensors" | grep -o 'fnv1a64:[0-9a-f]*')
  [ -n "$h" ] || fail "the checkpoint records no base hash"
  expect_error "error: --merge-lora: --base $T/other.st: the adapters of $(newest "$T/ck") were trained on other base weights (fnv1a64:" \
    "$AXLC" convert "$M" --apply lora --merge-lora "$T/ck" --base "$T/other.st" -o "$T/m.st"
  grep -qF "recorded $h from $T/base.st); pass the base weights that run started from (--force-base merges onto these anyway)" "$T/err" ||
    fail "another base: $(cat "$T/err")"
  [ ! -e "$T/m.st" ] || fail "a refused merge wrote its output"
  must "$AXLC" convert "$M" --apply lora --merge-lora "$T/ck" --base "$T/other.st" --force-base -o "$T/m.st"
  grep -qF "warning: --merge-lora: --base $T/other.st: the adapters of" "$T/log" || fail "--force-base: $(cat "$T/log")"
  grep -qF "merging onto these weights as --force-base says" "$T/log" || fail "--force-base: $(cat "$T/log")"
  must "$AXLC" convert "$M" --apply lora --merge-lora "$T/ck" --base "$T/base.st" -o "$T/m2.st"
  grep -q "warning" "$T/log" && fail "the run's own base warned: $(cat "$T/log")"
  # the adapters' settings: alpha (scale 25 instead of 2), rank, params as the run had them
  expect_error "error: --merge-lora: /lora/alpha is 100, but the adapters of $(newest "$T/ck") were trained with 8 (the scale alpha/rank would be 25 instead of 2; expected the run's --set /lora/alpha=8)" \
    "$AXLC" convert "$M" --apply lora --set /lora/alpha=100 --merge-lora "$T/ck" --base "$T/base.st" -o "$T/m3.st"
  expect_error "error: --merge-lora: /lora/rank is 2, but the adapters of $(newest "$T/ck") were trained with 4 (expected the run's --set /lora/rank=4)" \
    "$AXLC" convert "$M" --apply lora --set /lora/rank=2 --merge-lora "$T/ck" --base "$T/base.st" -o "$T/m3.st"
  expect_error "error: --merge-lora: /lora/params is \"(.+/)?q_proj/weight\", but the adapters of $(newest "$T/ck") were trained with \"(.+/)?[qkvo]_proj/weight\"" \
    "$AXLC" convert "$M" --apply lora --set '/lora/params=(.+/)?q_proj/weight' --merge-lora "$T/ck" --base "$T/base.st" -o "$T/m3.st"
  [ ! -e "$T/m3.st" ] || fail "a refused merge wrote its output"
  # --sample on another base: refused as resume refuses it
  # shellcheck disable=SC2086
  expect_error "--sample: --init $T/other.st: these base weights differ from the ones the adapters of $(newest "$T/ck") were trained on" \
    "$AXLC" run "$M" --apply lora --target cpu $TINY --sample 4 --ckpt-dir "$T/ck" --init "$T/other.st"
  # shellcheck disable=SC2086
  "$AXLC" run "$M" --apply lora --target cpu $TINY --sample 4 --ckpt-dir "$T/ck" --init "$T/base.st" \
    > "$T/out.txt" 2> "$T/log" || fail "--sample on the run's base: $(cat "$T/log")"
  # adapters trained on the seeded base (no --init): --sample --init is refused as resume
  # refuses it, not ignored
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target cpu $TINY --data "$T/fortunes.txt" --steps 1 \
    --ckpt-dir "$T/seeded"
  # shellcheck disable=SC2086
  expect_error "--sample: $(newest "$T/seeded"): its adapters were trained on the seeded base weights (the run had no --init); --init $T/base.st would put them on other weights (drop --init)" \
    "$AXLC" run "$M" --apply lora --target cpu $TINY --sample 4 --ckpt-dir "$T/seeded" --init "$T/base.st"
  # --sample --init of base weights (an interpreter's dump) without a checkpoint: the adapters
  # the file lacks start from their init, as a run's --init does, so the text is the base's
  # shellcheck disable=SC2086
  "$AXLC" run "$M" --apply lora --target cpu $TINY --sample 16 --init "$T/base.st" --temperature 0 \
    --prompt "The " > "$T/lora_init.txt" 2> "$T/log" || fail "LoRA --sample --init: $(cat "$T/log")"
  grep -qF "sampling with the weights of --init $T/base.st; its 16 LoRA adapters the file lacks start from their init" "$T/log" ||
    fail "LoRA --sample --init: $(cat "$T/log")"
  # shellcheck disable=SC2086
  "$AXLC" run "$M" --target cpu $TINY --sample 16 --init "$T/base.st" --temperature 0 --prompt "The " \
    > "$T/base_init.txt" 2> "$T/log" || fail "base --sample --init: $(cat "$T/log")"
  cmp -s "$T/lora_init.txt" "$T/base_init.txt" ||
    fail "LoRA '$(cat "$T/lora_init.txt")' and base '$(cat "$T/base_init.txt")' texts differ"
  ;;
mpi)
  # 4 processes (tests/mpi registers it: mpirun, the LLVM backend), the adapters split over
  # fsdp=2 x model=2: a sharded checkpoint of adapters, resumed on one device, continues as a
  # run on one device does
  base
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target cpu-4 $TINY --set '/mesh/shape=[1,1,1,2,1,2]' \
    --data "$T/text.txt" --steps 3 --init "$T/w0.st" --ckpt-dir "$T/ck"
  grep -q "4 devices (fsdp=2 model=2)" "$T/log" || fail "cpu-4: $(tail -3 "$T/log")"
  [ "$(ls "$(newest "$T/ck")"/state-rank*.safetensors | wc -l)" -ge 2 ] || fail "the checkpoint is not sharded"
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target cpu $TINY --data "$T/text.txt" --steps 4 \
    --ckpt-dir "$T/ck" --resume
  grep -q "the frozen base weights (24 tensors) came from $T/w0.st" "$T/log" || fail "resume: $(cat "$T/log")"
  resumed=$(loss_at "$T/log" 4)
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --apply lora --target cpu $TINY --data "$T/text.txt" --steps 4 \
    --init "$T/w0.st" --ckpt-dir "$T/one"
  straight=$(loss_at "$T/log" 4)
  awk -v a="$resumed" -v b="$straight" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-5 && d > -1e-5) }' ||
    fail "step 4: resumed from 4 devices $resumed, one device throughout $straight"
  ;;
errors)
  expect_error "/lora/params: the regex \"wq\" matches none of the model's 24 parameters" \
    "$AXLC" params "$M" --apply lora --set /lora/params=wq
  expect_error "/lora/rank: value 0 is out of range (expected 1 to 65536)" \
    "$AXLC" params "$M" --apply lora --set /lora/rank=0
  expect_error "/lora/rank: rank 65 is larger than the projection model/decoder/layer_0/self_attention/q_proj/weight (64 x 64) (expected at most 64)" \
    "$AXLC" params "$M" --apply lora --set /lora/rank=65
  expect_error "/lora/params: the regex matches model/emb/weight, which no linear projection reads" \
    "$AXLC" ir "$M" --apply lora --set /lora/params=model/emb/weight
  # refused where the config is checked, not at composing
  expect_error "error: --set: /lora/params: the regex matches model/emb/weight, which no linear projection reads (the vocabulary table of an embedding or an output head; expected only the 2-D (in, out) weights of linear projections)" \
    "$AXLC" params "$M" --apply lora --set '/lora/params=model/emb/weight|(.+/)?q_proj/weight'
  expect_error "error: --set: /lora/alpha: alpha 0 leaves the adapters without effect: the update (alpha / rank) x A B is 0, so the run would train nothing (expected above 0, at most 65536)" \
    "$AXLC" params "$M" --apply lora --set /lora/alpha=0
  expect_error "error: --set: /lora/alpha: alpha 1e+308 is out of range: the scale alpha / rank multiplies every adapter update, and the first step would overflow to NaN (expected above 0, at most 65536)" \
    "$AXLC" params "$M" --apply lora --set /lora/alpha=1e308
  # shellcheck disable=SC2086
  must "$AXLC" run "$M" --target interp $TINY --data "$T/text.txt" --steps 1 --dump "$T/w.st"
  expect_error "holds no LoRA adapters (no tensor 'model/decoder/layer_0/self_attention/q_proj/lora_a'" \
    "$AXLC" convert "$M" --apply lora --merge-lora "$T/w.st" -o "$T/m.st"
  expect_error "has no /lora (expected the config the adapters were trained with" \
    "$AXLC" convert "$M" --merge-lora "$T/w.st" -o "$T/m.st"
  [ ! -e "$T/m.st" ] || fail "a failed merge wrote its output"
  # the frozen base: gradients and AdamW state of the adapters alone
  must "$AXLC" params "$M" --apply lora
  grep -q "trainable: 16 tensors, 4,096 parameters (LoRA adapters on 8 projections); the other 24 tensors are frozen" "$T/log" ||
    fail "params: $(tail -3 "$T/log")"
  grep -q "gradients f32 16.00 KiB.*optimizer state f32 32.00 KiB" "$T/log" || fail "params: $(tail -1 "$T/log")"
  must "$AXLC" memcheck "$M" --target cpu --apply lora --json
  lora=$(sed -n 's/.*"optimizer_state": \([0-9]*\).*/\1/p' "$T/log")
  must "$AXLC" memcheck "$M" --target cpu --json
  full=$(sed -n 's/.*"optimizer_state": \([0-9]*\).*/\1/p' "$T/log")
  [ -n "$lora" ] && [ "$lora" -eq 32768 ] && [ "$full" -gt 900000 ] ||
    fail "memcheck optimizer state: $lora with LoRA, $full without"
  ;;
*)
  fail "unknown case $CASE"
  ;;
esac
[ "$fails" -eq 0 ] || exit 1
