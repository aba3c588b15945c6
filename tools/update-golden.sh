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
# Memory reports of the big models on an H100 and a TPU v5p target (tests/golden/memcheck_check.sh).
cd "$top"
for model in llama2-7b llama2-70b fuji-70b mixtral-8x7b; do
  for target in gpu-h100-256 tpu-v5p-512; do
    "$axlc" memcheck "models/$model.json" --target "$target" --json \
      > "tests/golden/memcheck/$model@$target.json" || [ $? -eq 1 ]
    echo "wrote tests/golden/memcheck/$model@$target.json"
  done
done
