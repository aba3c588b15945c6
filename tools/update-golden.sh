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
# tpu-v5p-512 is 256 chips (the name counts TensorCores); llama2-70b on 512 chips too.
for job in llama2-7b@gpu-h100-256 llama2-7b@tpu-v5p-512 llama2-70b@gpu-h100-256 \
  llama2-70b@tpu-v5p-512 llama2-70b@tpu-v5p-1024 fuji-70b@gpu-h100-256 fuji-70b@tpu-v5p-512 \
  mixtral-8x7b@gpu-h100-256 mixtral-8x7b@tpu-v5p-512; do
  "$axlc" memcheck "models/${job%@*}.json" --target "${job#*@}" --json \
    > "tests/golden/memcheck/$job.json" || [ $? -eq 1 ]
  echo "wrote tests/golden/memcheck/$job.json"
done
