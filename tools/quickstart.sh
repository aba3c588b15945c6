#!/bin/sh
# The main job on the built-in default: install what is needed, build axlc,
# resolve the tiny-lm model and print its parameter table.
#   usage: tools/quickstart.sh
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/install-deps.sh"
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$top/build" -j "$(nproc 2>/dev/null || echo 2)" > /dev/null
axlc="$top/build/tools/axlc"
model="$top/models/tiny-lm.json"
echo "== axlc config models/tiny-lm.json --target cpu"
"$axlc" config "$model" --target cpu
echo "== axlc params models/tiny-lm.json --target cpu"
"$axlc" params "$model" --target cpu
