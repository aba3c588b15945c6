#!/bin/sh
# loc_complexity.sh AXLC SRCDIR: tools/loc-complexity applies every shipped modifier to every
# shipped model (exit 0, a row of N/N each, LoRA's modules: 2 per model, the attention
# projections' owner and the trainer); with history, every commit of a feature counts (LoRA's
# --merge-lora commit among them); a modifier that fails on the models fails it (exit 1,
# naming the model and the error).
set -u
AXLC=$1 SRC=$2 CASE=loc_complexity
PY=${TORCH_PYTHON:-python3}
. "$SRC/tests/lib.sh"
scratch loc
command -v "$PY" > /dev/null || { echo "SKIP: no $PY"; exit 77; }
n=$(ls "$SRC"/models/*.json | wc -l)
must "$PY" "$SRC/tools/loc-complexity" --axlc "$AXLC"
for m in "$SRC"/models/modifiers/*.json; do
  name=$(basename "$m" .json)
  grep -Eq "^$name +$n/$n " "$T/log" || fail "$name does not apply to all $n models: $(grep "^$name" "$T/log")"
done
grep -Eq "^lora +$n/$n +$((2 * n)) +6 " "$T/log" || fail "lora row: $(grep '^lora' "$T/log")"
grep -q "AXLearn          0     0" "$T/log" || fail "the paper's table is missing"
# Every commit of a feature counts, not only the founding one: LoRA's later commits (here
# --merge-lora, 4fa30f8, 35 lines outside its files) are in its row, whose commits column is
# the number of commits --verbose lists for it. A shallow clone has no history: n/a.
if [ "$(git -C "$SRC" rev-parse --is-shallow-repository 2> /dev/null)" = false ] &&
  git -C "$SRC" cat-file -e 4fa30f8 2> /dev/null; then
  "$PY" "$SRC/tools/loc-complexity" --axlc "$AXLC" --verbose > "$T/verbose" 2>&1 || fail "--verbose failed"
  grep -Eq "^  lora: +35 lines, +2 files: 4fa30f8 axlc convert --merge-lora" "$T/verbose" ||
    fail "lora's --merge-lora commit is not counted: $(grep '^  lora:' "$T/verbose")"
  k=$(grep -c '^  lora: ' "$T/verbose")
  grep -Eq "^lora +$n/$n +$((2 * n)) +6 +[0-9]+ +[0-9]+ +$k +[0-9]+ " "$T/log" ||
    fail "lora's commits column is not $k: $(grep '^lora' "$T/log")"
fi
echo '{"kind": "replace", "target": "attention", "config": {"kind": "attention", "num_heads": 7}}' > "$T/bad.json"
"$PY" "$SRC/tools/loc-complexity" --axlc "$AXLC" --modifier "$T/bad.json" > "$T/out" 2>&1
[ $? -eq 1 ] || fail "a modifier that does not apply: exit status not 1"
grep -q "bad on tiny-lm.json: error: .*num_heads 7 does not divide dim 64" "$T/out" ||
  fail "no error named: $(tail -3 "$T/out")"
# Before a build (no axlc where it looks): one line saying to build or to pass --axlc, no traceback.
"$PY" "$SRC/tools/loc-complexity" --axlc "$T/no-axlc" > "$T/out" 2>&1
[ $? -eq 1 ] || fail "no axlc: exit status not 1"
grep -q "^loc-complexity: no axlc at $T/no-axlc: build first (cmake --build build) or pass --axlc PATH$" "$T/out" ||
  fail "no axlc: $(tail -3 "$T/out")"
grep -q Traceback "$T/out" && fail "no axlc: a traceback"
[ "$fails" -eq 0 ] || exit 1
