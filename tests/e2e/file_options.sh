#!/bin/sh
# shellcheck disable=SC2086 # $SMALL and the commands in a variable are lists of words
# file_options.sh AXLC SRCDIR: every file option of every command (axlc's subcommands as its
# usage lists them, and the trainer's options of runtime/train_opts.c) given a FIFO is refused
# within a second with a message naming the file and what it is, never waited on; every option
# that writes, given a symbolic link to a file, is refused and the link's target left as it was.
# Each command runs under `timeout 5`, so a regression fails the case instead of hanging it.
set -u
AXLC=$1 SRC=$2 CASE=file_options
. "$SRC/tests/lib.sh"
scratch files
MODELS=$SRC/models
F=$T/fifo
L=$T/link
mkfifo "$F"
printf 'precious\n' > "$T/precious.txt"
ln -s "$T/precious.txt" "$L"
cp "$MODELS/tiny-lm.json" "$T/m.json"
yes "the fortune of a small model, 1234 words" | head -c 20000 > "$T/text.txt"
printf '{"step": 1, "loss": 2}\n' > "$T/m.jsonl"
SMALL="--set /input/seq_len=16 --set /input/global_batch_size=2 --set /model/decoder/num_layers=1"
"$AXLC" run "$T/m.json" --target interp $SMALL --data "$T/text.txt" --steps 1 \
  --dump "$T/w.safetensors" > "$T/log" 2>&1 || { fail "the weights: $(tail -3 "$T/log")"; exit 1; }
"$AXLC" run "$T/m.json" --apply lora --target interp $SMALL --data "$T/text.txt" --steps 1 \
  --dump "$T/lora.safetensors" > "$T/log" 2>&1 || { fail "the adapters: $(tail -3 "$T/log")"; exit 1; }
# a byte-level BPE without merges (the 256 byte values), for tokenize
byte_tokenizer "$T/bytes.json" || fail "writing the tokenizer"
printf '#!/bin/sh\nexit 0\n' > "$T/fake-trainer" && chmod +x "$T/fake-trainer"

# check WANT CMD...: CMD exits 1 within a second, WANT (a fixed string) on its stderr
check() {
  want=$1
  shift
  t0=$(now_ms)
  timeout 5 "$@" > "$T/out" 2> "$T/err" < /dev/null
  rc=$?
  ms=$(($(now_ms) - t0))
  if [ "$rc" -ne 1 ] || [ "$ms" -ge 1000 ] || ! grep -qF -- "$want" "$T/err"; then
    fail "$* (exit $rc after $ms ms): expected: $want"
    sed 's/^/  | /' "$T/err" | head -5 >&2
  fi
  checked=$((checked + 1))
  [ "$ms" -le "$slowest" ] || { slowest=$ms slow_cmd="$*"; }
}
checked=0 slowest=0
FIFO="$F: not a regular file (a FIFO)"
LINK="$L: is a symbolic link; refusing to write through it into its target"

# the config and what it names: every command that reads a config, --apply, --devices
for cmd in config params ir; do check "$F: not a regular file" "$AXLC" $cmd "$F"; done
check "$F: not a regular file" "$AXLC" compile "$F" --target cpu -o "$T/tr"
check "$F: not a regular file" "$AXLC" memcheck "$F" --target cpu
check "$F: not a regular file" "$AXLC" run "$F" --target interp --data "$T/text.txt"
check "$F: not a regular file" "$AXLC" convert "$F" --to hf "$T/w.safetensors" -o "$T/hf.safetensors"
check "$F: not a regular file" "$AXLC" params "$T/m.json" --apply "$F"
check "$F: not a regular file" "$AXLC" memcheck "$T/m.json" --target cpu --devices "$F"
# outputs
for emit in exe obj llvm asm; do
  check "-o $FIFO" "$AXLC" compile "$T/m.json" --target cpu --emit $emit -o "$F"
  check "-o $LINK" "$AXLC" compile "$T/m.json" --target cpu --emit $emit -o "$L"
done
check "--plot $FIFO" "$AXLC" memcheck "$T/m.json" --target cpu --plot "$F"
check "--plot $LINK" "$AXLC" memcheck "$T/m.json" --target cpu --plot "$L"
# plot: its metrics files and -o
check "$FIFO" "$AXLC" plot "$F" -o "$T/p.svg"
check "$FIFO" "$AXLC" plot "$T/m.jsonl" "$F" -o "$T/p.svg"
check "-o $FIFO" "$AXLC" plot "$T/m.jsonl" -o "$F"
check "-o $LINK" "$AXLC" plot "$T/m.jsonl" -o "$L"
# convert: the weights in, -o, --merge-lora and --base
check "$F: not a regular file (a FIFO)" "$AXLC" convert "$T/m.json" --to hf "$F" -o "$T/hf.safetensors"
check "$F: not a regular file (a FIFO)" "$AXLC" convert "$T/m.json" --from hf "$F" -o "$T/o.safetensors"
check "-o $FIFO" "$AXLC" convert "$T/m.json" $SMALL --to hf "$T/w.safetensors" -o "$F"
check "-o $LINK" "$AXLC" convert "$T/m.json" $SMALL --to hf "$T/w.safetensors" -o "$L"
check "$F: not a regular file (a FIFO)" "$AXLC" convert "$T/m.json" --apply lora --merge-lora "$F" \
  -o "$T/merged.safetensors"
check "$F: not a regular file (a FIFO)" "$AXLC" convert "$T/m.json" --apply lora $SMALL --merge-lora \
  "$T/lora.safetensors" --base "$F" -o "$T/merged.safetensors"
# tokenize: the text, --tokenizer, -o
check "$FIFO" "$AXLC" tokenize "$F" --tokenizer "$T/bytes.json" -o "$T/t.bin"
check "$FIFO" "$AXLC" tokenize "$T/text.txt" --tokenizer "$F" -o "$T/t.bin"
check "-o $FIFO" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/bytes.json" -o "$F"
check "-o $LINK" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/bytes.json" -o "$L"
# run --target interp: --data, --init, --dump
set -- "$AXLC" run "$T/m.json" --target interp $SMALL --steps 1
check "$FIFO" "$@" --data "$F"
check "$FIFO" "$@" --data "$T/text.txt" --init "$F"
check "--dump $FIFO" "$@" --data "$T/text.txt" --dump "$F"
check "--dump $LINK" "$@" --data "$T/text.txt" --dump "$L"
# launch: the trainer, --report
check "$F: not a file (expected a trainer executable" "$AXLC" launch "$F" -n 1 -- --data "$T/text.txt"
check "--report $FIFO" "$AXLC" launch "$T/fake-trainer" -n 1 --report "$F" -- --data "$T/text.txt"
check "--report $LINK" "$AXLC" launch "$T/fake-trainer" -n 1 --report "$L" -- --data "$T/text.txt"

# the trainer's options (runtime/train_opts.c), in a compiled trainer and through axlc run
if "$AXLC" backends | grep -q '^llvm'; then
  "$AXLC" compile "$T/m.json" --target cpu $SMALL -o "$T/tr" > "$T/log" 2>&1 ||
    { fail "compile: $(tail -3 "$T/log")"; exit 1; }
  for tr in "$T/tr" "$AXLC run $T/m.json --target cpu $SMALL"; do
    # shellcheck disable=SC2086
    set -- $tr --steps 1
    check "--data: $FIFO" "$@" --data "$F"
    check "--eval-data: $FIFO" "$@" --data "$T/text.txt" --eval-data "$F"
    check "--init: $FIFO" "$@" --data "$T/text.txt" --init "$F"
    check "--tokenizer: $FIFO" "$@" --data "$T/text.txt" --tokenizer "$F"
    check "--metrics: $FIFO" "$@" --data "$T/text.txt" --metrics "$F"
    check "--metrics: $LINK" "$@" --data "$T/text.txt" --metrics "$L"
    check "$F" "$@" --data "$T/text.txt" --ckpt-dir "$F"
    check "$FIFO" "$@" --sample 4 --init "$F"
    check "--tokenizer: $FIFO" "$@" --sample 4 --init "$T/w.safetensors" --tokenizer "$F"
  done
  check "--report $FIFO" "$AXLC" run "$T/m.json" --target cpu-2 $SMALL --report "$F" --data "$T/text.txt"
  check "--report $LINK" "$AXLC" run "$T/m.json" --target cpu-2 $SMALL --report "$L" --data "$T/text.txt"
fi

[ "$(cat "$T/precious.txt")" = precious ] || fail "a write went through the link: $(head -c 80 "$T/precious.txt")"
[ -p "$F" ] && [ -L "$L" ] || fail "the FIFO or the link was replaced"
echo "$checked commands checked; the slowest answered in $slowest ms: ${slow_cmd:-}"
[ "$fails" -eq 0 ] || exit 1
echo "ok [$CASE]"
