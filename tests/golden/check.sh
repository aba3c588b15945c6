#!/bin/sh
# Golden-file test: every shipped model's resolved config must equal its
# committed golden file, byte for byte, and every golden must belong to a
# shipped model. On drift it prints the diff and how to regenerate.
#   usage: check.sh AXLC SOURCE_DIR
set -u
axlc=$1 top=$2
fail=0 n=0
out=$(mktemp)
for model in "$top"/models/*.json; do
  name=$(basename "$model" .json)
  golden="$top/tests/golden/$name.json"
  n=$((n + 1))
  if [ ! -f "$golden" ]; then
    echo "FAIL $name: no golden file tests/golden/$name.json"
    fail=$((fail + 1))
    continue
  fi
  if ! "$axlc" config "$model" > "$out"; then
    echo "FAIL $name: axlc config exited non-zero"
    fail=$((fail + 1))
  elif ! diff -u "$golden" "$out"; then
    echo "FAIL $name: resolved config drifted from tests/golden/$name.json"
    fail=$((fail + 1))
  fi
done
for golden in "$top"/tests/golden/*.json; do
  name=$(basename "$golden" .json)
  if [ ! -f "$top/models/$name.json" ]; then
    echo "FAIL $name: golden file without a model in models/"
    fail=$((fail + 1))
  fi
done
rm -f "$out"
if [ "$fail" -ne 0 ]; then
  echo "If the change is intended: tools/update-golden.sh $axlc, then review git diff tests/golden"
fi
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
