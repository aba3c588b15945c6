#!/bin/sh
# Regenerates the golden resolved configs under tests/golden/ from models/.
# Run it after an intended change to a model, a default or the canonical form,
# then review `git diff tests/golden` before committing.
#   usage: tools/update-golden.sh [PATH/TO/axlc]   (default: build/tools/axlc)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
axlc=${1:-$top/build/tools/axlc}
for model in "$top"/models/*.json; do
  name=$(basename "$model" .json)
  "$axlc" config "$model" > "$top/tests/golden/$name.json"
  echo "wrote tests/golden/$name.json"
done
