#!/bin/sh
# sample.sh AXLC SRCDIR CASE [SHARED]: `trainer --sample N` end to end.
#   greedy   tiny-lm (seq_len 32, batch 4: the shared trainer of trainer_build, else compiled
#            here) trained 30 steps on tests/corpus/prose.txt: the tokens for a short and for a
#            longer-than-seq_len prompt, greedy and drawn (temperature 1, seed 5), equal those of
#            an independent forward of the checkpoint (sample_ref.py, plain Python, with the
#            documented draws); the same from --init (a NaN in it refused); seeded draws repeat;
#            a damaged newest checkpoint is skipped; the checkpoint directory is never modified;
#            bad options are clear errors; a vocabulary of 300 reads and prints token ids;
#            `axlc run MODEL --sample` (the JIT) prints what the compiled trainer prints
#   kv       the KV cache: for tiny-lm (learned positions), fuji-test (llama-style: RoPE,
#            grouped-query attention, SwiGLU, RMSNorm; token ids) and moe-test (experts with
#            capacity) and a 1-layer tiny-lm in bf16 (bf16 caches), trained 100 steps: greedy text with the cache equals the text of
#            --no-kv-cache (the whole window per token), past the window too (3 windows long);
#            so do seeded draws, at temperature 2 (where a wrong position or a lost key moves
#            the draws) and under --top-k and --top-p; --top-k 1 at temperature 1 is the
#            greedy text; the stderr line says which path ran; bad --top-k/--top-p values and
#            sampling options without --sample are clear errors
#   english  the README's main job (tiny-lm, 200 steps on the fortunes corpus); its greedy tokens
#            equal the reference's (their logit gaps are 0.3 to 1.4); then the share
#            of sampled words (2+ letters) found in the corpus, against the same share for the
#            untrained model (--steps 0): trained >= 0.5, untrained <= 0.1 (measured: about
#            0.72 and 0.02 at temperature 0.3)
#   words    the quickstart's job (tools/quickstart.sh): a SentencePiece tokenizer of 4096 pieces
#            trained on the fortunes by spm_train, models/words-lm.json trained through it; the
#            share of sampled words (2+ letters) found in the corpus at temperature 0.5: trained
#            >= 0.9 of at least 100 words, untrained (--steps 0) <= 0.6 (measured: 0.94 and 0.47; 0.92 to 0.94
#            with seeds 1 to 4)
#   prompt_bytes  a prompt of invalid UTF-8 (bytes ff fe) through a SentencePiece tokenizer with
#            byte fallback (several ids per byte, more ids than bytes): sampled untrained words-lm
#            (--steps 0) prints the prompt's bytes back, then 5 tokens, exit 0 (it wrote past the
#            prompt buffer, sized one id per byte, before); a token file given with --tokenizer
#            trains with a warning that the tokenizer is not used for it
set -u
AXLC=$1 SRC=$2 CASE=$3 SHARED=${4:-}
PY=/usr/bin/python3
. "$SRC/tests/lib.sh"
scratch sample
# bad MESSAGE ARGS...: the trainer exits 1 with MESSAGE on stderr and nothing on stdout
bad() {
  msg=$1
  shift
  "$TR" "$@" > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$msg" "$T/err" && [ ! -s "$T/out" ] ||
    { fail "$TR $* (exit $rc): expected: $msg"; cat "$T/err" >&2; }
}
# state DIR: every file and directory under DIR with its size, mode, time and checksum
state() {
  find "$1" -printf '%p %s %m %T@\n' | sort
  find "$1" -type f -exec md5sum {} + | sort
}
command -v "$PY" > /dev/null || { echo "SKIP: no $PY"; exit 77; }

# fortunes_corpus: $T/corpus.txt, four files of the fortunes (the README's job's corpus); exits 77
# (skipped) without them
fortunes_corpus() {
  F=/usr/share/games/fortunes
  for f in fortunes literature wisdom science; do
    [ -r "$F/$f" ] || { echo "SKIP: $F/$f missing (Debian: fortunes-min fortunes)"; exit 77; }
  done
  cat "$F/fortunes" "$F/literature" "$F/wisdom" "$F/science" > "$T/corpus.txt"
}
# word_shares MIN_TRAINED MIN_WORDS MAX_UNTRAINED: of the words (2+ letters) sampled into
# $T/trained.txt, at least the share MIN_TRAINED, and MIN_WORDS, are in $T/corpus.txt; of those
# in $T/untrained.txt at most the share MAX_UNTRAINED
word_shares() {
  "$PY" - "$T/corpus.txt" "$T/trained.txt" "$T/untrained.txt" "$@" <<'EOF' || fail "word shares"
import sys
def words(path):
    out = []
    for w in open(path, encoding="latin-1").read().split():
        w = w.strip(".,;:!?\"'()[]{}-*_`<>|/\\#=+~").lower()
        if len(w) >= 2:
            out.append(w)
    return out
vocab = set(words(sys.argv[1]))
share = {}
for name, path in (("trained", sys.argv[2]), ("untrained", sys.argv[3])):
    ws = words(path)
    share[name] = sum(w in vocab for w in ws) / max(1, len(ws))
    print(f"{name}: {share[name]:.3f} of {len(ws)} words are in the corpus")
print("trained sample:", open(sys.argv[2], encoding="latin-1").read()[:300].replace("\n", " | "))
lo, n, hi = float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
sys.exit(0 if share["trained"] >= lo and len(words(sys.argv[2])) >= n and share["untrained"] <= hi else 1)
EOF
}
case $CASE in
greedy)
  if [ -n "$SHARED" ] && [ -x "$SHARED/tiny" ]; then
    TR=$SHARED/tiny
  else
    TR=$T/tiny
    must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$TR" \
      --set /input/seq_len=32 --set /input/global_batch_size=4
  fi
  cp "$CORPUS" "$T/text.txt"
  ck=$T/ck
  must "$TR" --data "$T/text.txt" --steps 30 --ckpt-every 15 --keep 0 --ckpt-dir "$ck"
  "$TR" --config > "$T/config.json" || fail "--config"
  state "$ck" > "$T/before"
  # the tokens = the reference's, for a short prompt and one longer than seq_len (32), greedy
  # and drawn at temperature 1 with seed 5
  n=0
  for prompt in "The trainer " "A config with a mistake exits with status 1. The message names the file"; do
    n=$((n + 1))
    printf '%s' "$prompt" > "$T/prompt$n"
    for mode in "0 0" "1 5"; do
      # shellcheck disable=SC2086
      set -- $mode
      "$TR" --sample 8 --ckpt-dir "$ck" --prompt "$prompt" --temperature "$1" --seed "$2" > "$T/out" 2> "$T/err" ||
        { fail "--sample (prompt $n, temperature $1)"; cat "$T/err" >&2; }
      grep -q "step_00000030 (step 30)" "$T/err" || fail "prompt $n: not sampled from step 30: $(cat "$T/err")"
      head -c ${#prompt} "$T/out" | cmp -s - "$T/prompt$n" || fail "prompt $n is not echoed"
      # the output is the prompt, the 8 tokens and a newline unless the last token is one
      head -c $((${#prompt} + 8)) "$T/out" | tail -c 8 | od -An -tu1 -v | tr -s ' ' '\n' | grep . > "$T/got"
      "$PY" "$SRC/tests/trainer/sample_ref.py" "$T/config.json" "$ck/step_00000030/state.safetensors" \
        "$T/prompt$n" 8 "$1" "$2" > "$T/want" 2> "$T/margins" || fail "sample_ref.py (prompt $n)"
      [ "$(wc -l < "$T/want")" -eq 8 ] || fail "the reference printed $(wc -l < "$T/want") tokens, not 8"
      # equal up to the first token the rounding of f32 against f64 could decide (a logit gap or
      # a draw's distance to a boundary below 1e-4); the first 4 must be decided
      paste "$T/got" "$T/want" "$T/margins" | awk -v what="prompt $n, temperature $1" '
        $1 != $2 && $4 + 0 >= 1e-4 { print "FAIL: " what ": token " NR ": " $1 ", the reference " $2 " (" $3 " " $4 ")"; bad = 1; exit }
        $1 != $2 { if (NR <= 4) { print "FAIL: " what ": token " NR " undecided (" $3 " " $4 ")"; bad = 1 }
                   else print "note: " what ": token " NR " undecided, " NR - 1 " compared"; exit }
        END { exit bad }' || fail "the tokens differ from the reference's: $(tr '\n' ' ' < "$T/got")/ $(tr '\n' ' ' < "$T/want")"
      [ "$1" = 0 ] && cp "$T/out" "$T/greedy$n"
    done
  done
  # the checkpoint's state file as --init (its optimizer moments are unused tensors)
  "$TR" --sample 8 --init "$ck/step_00000030/state.safetensors" --init-allow-unused \
    --prompt "The trainer " --temperature 0 > "$T/init" 2> "$T/err" || { fail "--init"; cat "$T/err" >&2; }
  cmp -s "$T/init" "$T/greedy1" || fail "--init: $(cat "$T/init") differs from the checkpoint's $(cat "$T/greedy1")"
  bad "tensors unused" --sample 8 --init "$ck/step_00000030/state.safetensors"
  # the same with a NaN in a parameter: refused, naming the tensor and the file
  name=$("$PY" - "$ck/step_00000030/state.safetensors" "$T/nan.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = sorted(k for k in h if not k.startswith("opt/") and k != "__metadata__")[0]
at = 8 + n + h[name]["data_offsets"][0] + 4 * 2
b[at:at + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(b)
print(name)
PY
)
  bad "--init: $T/nan.safetensors: tensor '$name': value 2 of" --sample 8 --init "$T/nan.safetensors" \
    --init-allow-unused
  bad "is NaN; refusing to sample from weights that are not finite" --sample 8 --init "$T/nan.safetensors" \
    --init-allow-unused
  # seeded draws: the same seed repeats, another seed differs (the text: stderr ends with the
  # time it took)
  for s in 7a 7b 8; do
    "$TR" --sample 200 --ckpt-dir "$ck" --seed "${s%[ab]}" --temperature 1 > "$T/s$s" 2> "$T/err" ||
      { fail "--sample 200 --seed ${s%[ab]}"; cat "$T/err" >&2; }
  done
  cmp -s "$T/s7a" "$T/s7b" || fail "--seed 7 twice: different text"
  cmp -s "$T/s7a" "$T/s8" && fail "--seed 7 and --seed 8: the same text"
  # mistakes
  bad "--sample: no checkpoint in $T/none (it does not exist), and no --init FILE" --sample 5 \
    --ckpt-dir "$T/none"
  [ ! -e "$T/none" ] || fail "--sample created $T/none"
  mkdir "$T/empty"
  bad "--sample: no checkpoint in $T/empty, and no --init FILE" --sample 5 --ckpt-dir "$T/empty"
  bad "--sample needs weights: --ckpt-dir DIR (its newest checkpoint) or --init FILE" --sample 5
  bad "--sample: 0 is out of range, expected 1..1073741824" --sample 0 --ckpt-dir "$ck"
  bad "--sample: -3 is out of range" --sample -3 --ckpt-dir "$ck"
  bad "--temperature: -0.5 is negative; expected 0 (greedy) or more" --sample 5 --ckpt-dir "$ck" \
    --temperature -0.5
  bad "--temperature: 'hot' is not a finite number" --sample 5 --ckpt-dir "$ck" --temperature hot
  bad "--prompt needs --sample N" --data "$T/text.txt" --prompt "x"
  bad "--sample generates text and does not train: --data is not used with it" --sample 5 \
    --ckpt-dir "$ck" --data "$T/text.txt"
  bad "--sample generates text and does not train: --resume is not used with it" --sample 5 \
    --ckpt-dir "$ck" --resume
  # a damaged newest checkpoint is skipped and left as it is
  state "$ck" > "$T/after"
  cmp -s "$T/before" "$T/after" || { fail "sampling changed $ck"; diff "$T/before" "$T/after" >&2; }
  printf 'X' | dd of="$ck/step_00000030/state.safetensors" bs=1 seek=200 conv=notrunc 2> /dev/null
  state "$ck" > "$T/before"
  "$TR" --sample 5 --ckpt-dir "$ck" --temperature 0 > "$T/out" 2> "$T/err" || fail "--sample past a damaged checkpoint"
  grep -q "skipping a damaged checkpoint" "$T/err" && grep -q "step_00000015 (step 15)" "$T/err" ||
    fail "a damaged step 30: $(cat "$T/err")"
  state "$ck" > "$T/after"
  cmp -s "$T/before" "$T/after" || { fail "sampling changed $ck (damaged)"; diff "$T/before" "$T/after" >&2; }
  # a vocabulary that is not bytes (300): the prompt and the output are token ids; and
  # axlc run --sample (the JIT) prints what the compiled trainer prints (a small model, quick to compile)
  small="--set /model/decoder/num_layers=1 --set /model/dim=8 --set /model/decoder/layer/self_attention/num_heads=2 --set /input/seq_len=16 --set /input/global_batch_size=2 --set /model/vocab_size=300"
  # shellcheck disable=SC2086
  must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$T/small" $small
  must "$T/small" --data "$T/text.txt" --steps 5 --ckpt-dir "$T/cks"
  "$T/small" --sample 40 --ckpt-dir "$T/cks" --prompt "97 120, 108 299" --temperature 0.5 --seed 3 \
    > "$T/small.out" 2> "$T/err" || { fail "--sample (vocabulary 300)"; cat "$T/err" >&2; }
  [ "$(wc -l < "$T/small.out")" -eq 1 ] && grep -qE '^97 120 108 299( (1?[0-9]?[0-9]|2[0-9][0-9])){40}$' "$T/small.out" ||
    fail "vocabulary 300: expected the prompt's 4 ids and 40 more on one line, got $(cat "$T/small.out")"
  TR=$T/small
  bad "--prompt: '300' is not a token id of this vocabulary (0..299" --sample 4 --ckpt-dir "$T/cks" --prompt "1 300"
  bad "--prompt: 'hello' is not a token id" --sample 4 --ckpt-dir "$T/cks" --prompt "hello"
  # shellcheck disable=SC2086
  "$AXLC" run "$SRC/models/tiny-lm.json" --target cpu $small --sample 40 --ckpt-dir "$T/cks" \
    --prompt "97 120, 108 299" --temperature 0.5 --seed 3 > "$T/jit.out" 2> "$T/err" ||
    { fail "axlc run --sample"; cat "$T/err" >&2; }
  cmp -s "$T/small.out" "$T/jit.out" ||
    fail "axlc run --sample printed $(cat "$T/jit.out"), the trainer $(cat "$T/small.out")"
  ;;
kv)
  cp "$CORPUS" "$T/text.txt"
  tokens "$T/tokens.bin" 20000
  # same NAME OPTS...: the text with the KV cache equals the text without; keeps it in $T/NAME
  same() {
    name=$1
    shift
    "$TR" --sample "$N" --ckpt-dir "$ck" --prompt "$PROMPT" "$@" > "$T/$name" 2> "$T/err" ||
      { fail "$M: --sample $*"; cat "$T/err" >&2; }
    grep -q "tokens/s (KV cache)" "$T/err" || fail "$M: --sample $*: not with the KV cache: $(cat "$T/err")"
    "$TR" --sample "$N" --ckpt-dir "$ck" --prompt "$PROMPT" "$@" --no-kv-cache > "$T/$name.whole" 2> "$T/err" ||
      { fail "$M: --sample $* --no-kv-cache"; cat "$T/err" >&2; }
    grep -q "tokens/s (the whole window per token)" "$T/err" || fail "$M: --no-kv-cache: $(cat "$T/err")"
    cmp -s "$T/$name" "$T/$name.whole" ||
      fail "$M: --sample $*: with the KV cache $(head -c 400 "$T/$name"), without $(head -c 400 "$T/$name.whole")"
  }
  for M in tiny fuji moe tiny_bf16; do
    ck=$T/ck-$M TR=$T/$M DATA=$T/text.txt PROMPT="The trainer " SEQ=32
    case $M in
    tiny)
      if [ -n "$SHARED" ] && [ -x "$SHARED/tiny" ]; then
        TR=$SHARED/tiny
      else
        must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$TR" \
          --set /input/seq_len=32 --set /input/global_batch_size=4
      fi ;;
    fuji)
      SEQ=16 DATA=$T/tokens.bin PROMPT="5 8 1 31 3"
      must "$AXLC" compile "$SRC/models/fuji-test.json" --target cpu -o "$TR" \
        --set /input/seq_len=16 --set /input/global_batch_size=2 ;;
    moe)
      SEQ=16
      must "$AXLC" compile "$SRC/models/moe-test.json" --target cpu -o "$TR" \
        --set /input/seq_len=16 --set /input/global_batch_size=2 ;;
    tiny_bf16)
      SEQ=16
      must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$TR" --set /precision/compute=bf16 \
        --set /model/decoder/num_layers=1 --set /input/seq_len=16 --set /input/global_batch_size=2 ;;
    esac
    N=$((3 * SEQ))
    must "$TR" --data "$DATA" --steps 100 --ckpt-dir "$ck"
    same greedy --temperature 0
    same hot --temperature 2 --seed 6
    [ "$(tr -d ' \n' < "$T/greedy" | wc -c)" -gt 0 ] || fail "$M: no greedy text"
    same topk --temperature 1 --top-k 4 --seed 3
    same topp --temperature 0.8 --top-p 0.9 --seed 4
    same both --temperature 1.2 --top-k 6 --top-p 0.8 --seed 5
    # top-k 1 takes the most likely token at any temperature
    "$TR" --sample "$N" --ckpt-dir "$ck" --prompt "$PROMPT" --temperature 1 --top-k 1 --seed 9 > "$T/k1" 2> "$T/err" ||
      fail "$M: --top-k 1"
    cmp -s "$T/k1" "$T/greedy" || fail "$M: --top-k 1: $(head -c 300 "$T/k1"), greedy $(head -c 300 "$T/greedy")"
    cmp -s "$T/topk" "$T/greedy" && fail "$M: top-k 4 at temperature 1 gave the greedy text"
  done
  TR=$T/tiny
  [ -x "$TR" ] || TR=$SHARED/tiny
  ck=$T/ck-tiny
  bad "--top-k: 0 is out of range, expected 1..1073741824" --sample 5 --ckpt-dir "$ck" --top-k 0
  bad "--top-k: 300 is more than the vocabulary's 256 tokens" --sample 5 --ckpt-dir "$ck" --top-k 300
  bad "--top-p: 0 is out of range, expected a probability above 0 and at most 1" --sample 5 --ckpt-dir "$ck" --top-p 0
  bad "--top-p: 1.5 is out of range" --sample 5 --ckpt-dir "$ck" --top-p 1.5
  bad "--top-p: 'most' is not a finite number" --sample 5 --ckpt-dir "$ck" --top-p most
  bad "--top-k: --temperature 0 takes the most likely token" --sample 5 --ckpt-dir "$ck" --temperature 0 --top-k 3
  bad "--top-p: --temperature 0 takes the most likely token" --sample 5 --ckpt-dir "$ck" --temperature 0 --top-p 0.5
  bad "--top-k needs --sample N" --data "$T/text.txt" --top-k 3
  bad "--no-kv-cache needs --sample N" --data "$T/text.txt" --no-kv-cache
  bad "--no-kv-cache takes no value" --sample 5 --ckpt-dir "$ck" --no-kv-cache=1
  ;;
english)
  fortunes_corpus
  must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$T/tiny"
  must "$T/tiny" --data "$T/corpus.txt" --steps 200 --ckpt-dir "$T/trained"
  must "$T/tiny" --data "$T/corpus.txt" --steps 0 --ckpt-dir "$T/untrained"
  # greedy on the README's model = the reference (the trained model's tokens are not all spaces)
  printf 'The meaning of life is' > "$T/prompt"
  "$T/tiny" --config > "$T/config.json" || fail "--config"
  "$T/tiny" --sample 6 --ckpt-dir "$T/trained" --prompt "The meaning of life is" --temperature 0 2> /dev/null |
    head -c 28 | tail -c 6 | od -An -tu1 -v | tr -s ' ' '\n' | grep . > "$T/got"
  "$PY" "$SRC/tests/trainer/sample_ref.py" "$T/config.json" "$T/trained/step_00000200/state.safetensors" \
    "$T/prompt" 6 > "$T/want" 2> "$T/gaps" || fail "sample_ref.py"
  cmp -s "$T/got" "$T/want" || fail "greedy $(tr '\n' ' ' < "$T/got")/ the reference $(tr '\n' ' ' < "$T/want")(gaps: $(tr '\n' ' ' < "$T/gaps"))"
  for m in trained untrained; do
    "$T/tiny" --sample 1500 --ckpt-dir "$T/$m" --prompt "The " --temperature 0.3 --seed 1 \
      > "$T/$m.txt" 2> "$T/err" || { fail "--sample ($m)"; cat "$T/err" >&2; }
  done
  word_shares 0.5 0 0.1
  ;;
words)
  fortunes_corpus
  command -v spm_train > /dev/null || { echo "SKIP: spm_train not found (Debian: sentencepiece)"; exit 77; }
  # the tokenizer as tools/quickstart.sh trains it
  spm_train --input="$T/corpus.txt" --model_prefix="$T/tok" --vocab_size=4096 --model_type=unigram \
    --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false \
    --byte_fallback=true --minloglevel=2 > "$T/log" 2>&1 || { fail "spm_train"; tail "$T/log" >&2; }
  must "$AXLC" compile "$SRC/models/words-lm.json" --target cpu -o "$T/words"
  "$T/words" --data "$T/corpus.txt" --tokenizer "$T/tok.model" --ckpt-dir "$T/trained" > "$T/log" 2>&1 || {
    grep -q "without libsentencepiece" "$T/log" && { echo "SKIP: axlc was built without libsentencepiece"; exit 77; }
    fail "training words-lm"
    tail "$T/log" >&2
  }
  grep '^step' "$T/log" | tail -1
  must "$T/words" --data "$T/corpus.txt" --tokenizer "$T/tok.model" --steps 0 --ckpt-dir "$T/untrained"
  for m in trained untrained; do
    "$T/words" --sample 1000 --ckpt-dir "$T/$m" --tokenizer "$T/tok.model" --prompt "The man who" \
      --temperature 0.5 --seed 1 > "$T/$m.txt" 2> "$T/err" || { fail "--sample ($m)"; cat "$T/err" >&2; }
  done
  word_shares 0.9 100 0.6
  ;;
prompt_bytes)
  F=/usr/share/games/fortunes/fortunes
  [ -r "$F" ] || { echo "SKIP: $F missing (Debian: fortunes-min)"; exit 77; }
  command -v spm_train > /dev/null || { echo "SKIP: spm_train not found (Debian: sentencepiece)"; exit 77; }
  spm_train --input="$F" --model_prefix="$T/tok" --vocab_size=1000 --model_type=unigram \
    --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false \
    --byte_fallback=true --minloglevel=2 > "$T/log" 2>&1 || { fail "spm_train"; tail "$T/log" >&2; }
  TR=$T/words
  must "$AXLC" compile "$SRC/models/words-lm.json" --target cpu -o "$TR" --set /model/vocab_size=1000
  "$TR" --data "$F" --tokenizer "$T/tok.model" --steps 0 --ckpt-dir "$T/ck" > "$T/log" 2>&1 || {
    grep -q "without libsentencepiece" "$T/log" && { echo "SKIP: axlc was built without libsentencepiece"; exit 77; }
    fail "words-lm --steps 0"
    tail "$T/log" >&2
  }
  # ff fe, the issue's prompt, and 100 times ff fe (far past the old buffer)
  for reps in 1 100; do
    prompt=$(i=0; while [ $i -lt $reps ]; do printf '\377\376'; i=$((i + 1)); done)
    "$TR" --sample 5 --ckpt-dir "$T/ck" --tokenizer "$T/tok.model" --prompt "$prompt" \
      --temperature 0 > "$T/out" 2> "$T/err"
    rc=$?
    [ $rc -eq 0 ] || { fail "--sample with prompt (ff fe) x $reps exited $rc"; cat "$T/err" >&2; }
    # the prompt as SentencePiece decodes it: U+FFFD (ef bf bd) for each invalid byte
    want=$(i=0; while [ $i -lt $((2 * reps)) ]; do printf 'efbfbd'; i=$((i + 1)); done)
    got=$(head -c $((6 * reps)) "$T/out" | od -An -v -tx1 | tr -d ' \n')
    [ "$got" = "$want" ] || fail "(ff fe) x $reps: the output does not start with the prompt decoded: $got"
    grep -q ": 5 tokens in " "$T/err" || fail "(ff fe) x $reps: no '5 tokens' note: $(cat "$T/err")"
  done
  # a token file beside --tokenizer: the tokenizer is not used for it, and the trainer says so
  must "$AXLC" tokenize "$F" --tokenizer "$T/tok.model" -o "$T/tokens.bin"
  "$TR" --data "$T/tokens.bin" --tokenizer "$T/tok.model" --steps 0 > "$T/out" 2> "$T/err" ||
    { fail "--data TOKENS --tokenizer T"; cat "$T/err" >&2; }
  grep -qF -- "warning: --data $T/tokens.bin is a token file, already tokenized: --tokenizer $T/tok.model is not used" \
    "$T/err" || fail "--data TOKENS --tokenizer T: no warning: $(cat "$T/err")"
  "$TR" --data "$F" --tokenizer "$T/tok.model" --steps 0 > "$T/out" 2> "$T/err" || fail "--data TEXT --tokenizer T"
  ! grep -q "is a token file" "$T/err" || fail "--data TEXT --tokenizer T warned: $(cat "$T/err")"
  ;;
*) fail "unknown case" ;;
esac
[ "$fails" -eq 0 ] || exit 1
echo "ok [$CASE]"
