#!/bin/sh
# The main job: install what is needed, build axlc, train a SentencePiece tokenizer on English
# text from the fortunes package (spm_train, seconds), compile models/words-lm.json (a small GPT
# over that tokenizer's 4096 pieces) into a native trainer, train it on the same text through
# the tokenizer, printing the loss as it falls, then sample text from its checkpoint.
#   usage: tools/quickstart.sh [STEPS]      (default: the config's max_steps)
# tests/trainer/sample.sh (case words) runs the same job and measures its words.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/install-deps.sh"
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$top/build" -j "$(nproc 2>/dev/null || echo 2)" > /dev/null
axlc="$top/build/tools/axlc"
model="$top/models/words-lm.json"
corpus="$top/build/fortunes.txt"
tok="$top/build/fortunes-4k"
cat /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature \
    /usr/share/games/fortunes/wisdom /usr/share/games/fortunes/science > "$corpus"
# Lossless: no normalization, white space kept, no space added before a line's first word, and
# bytes outside the pieces (the newline) as byte tokens; so the text decodes to itself.
echo "== spm_train: a tokenizer of 4096 pieces on $(wc -c < "$corpus") bytes of fortunes -> build/fortunes-4k.model"
spm_train --input="$corpus" --model_prefix="$tok" --vocab_size=4096 --model_type=unigram \
  --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false \
  --byte_fallback=true --minloglevel=2 > /dev/null 2>&1
echo "== axlc params models/words-lm.json"
"$axlc" params "$model" | grep " parameters, "
echo "== axlc compile models/words-lm.json --target cpu -o build/words-lm-trainer"
"$axlc" compile "$model" --target cpu -o "$top/build/words-lm-trainer"
echo "== build/words-lm-trainer --data build/fortunes.txt --tokenizer build/fortunes-4k.model"
rm -rf "$top/build/words-lm-ckpt" # this script's own checkpoints, from an earlier run
"$top/build/words-lm-trainer" --data "$corpus" --tokenizer "$tok.model" ${1:+--steps "$1"} --log-every 100 \
  --metrics "$top/build/words-lm-metrics.jsonl" --ckpt-dir "$top/build/words-lm-ckpt"
echo "== build/words-lm-trainer --sample 60 --ckpt-dir build/words-lm-ckpt --tokenizer build/fortunes-4k.model --prompt \"The man who\" --temperature 0.5 --seed 1"
"$top/build/words-lm-trainer" --sample 60 --ckpt-dir "$top/build/words-lm-ckpt" --tokenizer "$tok.model" \
  --prompt "The man who" --temperature 0.5 --seed 1
