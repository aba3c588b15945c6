#!/bin/sh
# loc_complexity.sh AXLC SRCDIR: tools/loc-complexity applies every shipped modifier to every
# shipped model (exit 0, a row of N/N each, LoRA's modules: 2 per model, the attention
# projections' owner and the trainer); a modifier that fails on the models fails it (exit 1,
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
