#!/bin/sh
# The main job on the built-in default: install what is needed, build axlc,
# compile tiny-lm into a native trainer and train it on English text from the
# fortunes package, printing the loss as it falls, then sample text from its checkpoint.
#   usage: tools/quickstart.sh [STEPS]      (default 200 steps, the config's max_steps; seconds)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-200}
"$top/tools/install-deps.sh"
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$top/build" -j "$(nproc 2>/dev/null || echo 2)" > /dev/null
axlc="$top/build/tools/axlc"
model="$top/models/tiny-lm.json"
corpus="$top/build/fortunes.txt"
cat /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature \
    /usr/share/games/fortunes/wisdom /usr/share/games/fortunes/science > "$corpus"
echo "== axlc params models/tiny-lm.json"
"$axlc" params "$model" | tail -n 1
echo "== axlc compile models/tiny-lm.json --target cpu -o build/tiny-lm-trainer"
"$axlc" compile "$model" --target cpu -o "$top/build/tiny-lm-trainer"
echo "== build/tiny-lm-trainer: $steps steps on $(wc -c < "$corpus") bytes of fortunes"
rm -rf "$top/build/tiny-lm-ckpt" # this script's own checkpoints, from an earlier run
"$top/build/tiny-lm-trainer" --data "$corpus" --steps "$steps" --log-every 25 \
  --metrics "$top/build/tiny-lm-metrics.jsonl" --ckpt-dir "$top/build/tiny-lm-ckpt"
echo "== build/tiny-lm-trainer --sample 160 --ckpt-dir build/tiny-lm-ckpt --prompt \"The man who \" --temperature 0.5 --seed 1"
"$top/build/tiny-lm-trainer" --sample 160 --ckpt-dir "$top/build/tiny-lm-ckpt" --prompt "The man who " \
  --temperature 0.5 --seed 1
