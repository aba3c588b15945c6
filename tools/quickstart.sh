#!/bin/sh
# The main job on the built-in default: install what is needed, build axlc,
# then compile tiny-lm and train it on English text from the fortunes
# package, printing the loss as it falls.
#   usage: tools/quickstart.sh [STEPS]      (default 40 steps, about a minute)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-40}
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
echo "== axlc run models/tiny-lm.json --target interp: $steps steps on $(wc -c < "$corpus") bytes of fortunes"
"$axlc" run "$model" --target interp --data "$corpus" --steps "$steps"
