#!/bin/sh
# Golden memory reports: `axlc memcheck --json` of the big models on H100 and TPU v5p targets
# must equal the committed files under tests/golden/memcheck/ (regenerate with
# tools/update-golden.sh after an intended change, and review the diff). Independently of
# memcheck, the parameter and optimizer bytes per device are recomputed here from
# `axlc params --json` (each tensor's shape and partition spec over the mesh) and must match
# the report exactly.
#   usage: memcheck_check.sh AXLC SOURCE_DIR
set -u
axlc=$1 top=$2
cd "$top" || exit 1
fail=0 n=0
out=$(mktemp) params=$(mktemp)
for golden in tests/golden/memcheck/*.json; do
  name=$(basename "$golden" .json)
  model=${name%@*} target=${name#*@}
  n=$((n + 1))
  "$axlc" memcheck "models/$model.json" --target "$target" --json > "$out" 2>/dev/null
  rc=$?
  if [ $rc -gt 1 ]; then
    echo "FAIL $name: axlc memcheck exited $rc"; fail=$((fail + 1)); continue
  fi
  if ! diff -u "$golden" "$out"; then
    echo "FAIL $name: the report drifted from $golden"; fail=$((fail + 1))
  fi
  if ! "$axlc" params "models/$model.json" --target "$target" --json > "$params" 2>/dev/null; then
    echo "FAIL $name: axlc params failed"; fail=$((fail + 1)); continue
  fi
  python3 - "$params" "$out" "$name" <<'PY' || fail=$((fail + 1))
import json, sys
p = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2])); name = sys.argv[3]
mesh = p["mesh"]
def split(entry):
    if entry is None: return 1
    axes = [entry] if isinstance(entry, str) else entry
    n = 1
    for a in axes:
        for part in a.split("|"): n *= mesh[part]
    return n
params = 0
for t in p["params"]:
    numel = 1
    for size, entry in zip(t["shape"], t["partition_spec"]):
        assert size % split(entry) == 0, (t["path"], size, entry)
        numel *= size // split(entry)
    params += numel * 4
got = r["breakdown_in_bytes"]
ok = got["parameters"] == params and got["optimizer_state"] == 2 * params and r["devices"] == p["devices"]
print(("ok   " if ok else "FAIL ") + "%s: parameters %d (arithmetic %d), optimizer state %d (arithmetic %d)"
      % (name, got["parameters"], params, got["optimizer_state"], 2 * params))
sys.exit(0 if ok else 1)
PY
done
rm -f "$out" "$params"
echo "$n reports, $fail failures"
[ "$n" -gt 0 ] && [ "$fail" -eq 0 ]
