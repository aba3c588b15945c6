#!/bin/sh
# memcheck_accuracy.sh [AXLC] [MODEL SETS...]: axlc memcheck's predicted peak against what the
# trainer measures (heap in use at its peak, printed at the end of a run), for each remat
# preset. With no model, the three of issue 8: tiny-lm, the small bench model (tools/bench/
# small.json) and gpt2-124m at batch 4, seq 64. Prints one row per (model, preset).
#   usage: tools/bench/memcheck_accuracy.sh [build/tools/axlc]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
axlc=${1:-$top/build/tools/axlc}
T=$(mktemp -d "${TMPDIR:-/tmp}/axlc-memacc.XXXXXX")
trap 'rm -rf "$T"' EXIT
cat "$top/README.md" "$top"/docs/*.md > "$T/text.txt"
printf '%-10s %-10s %14s %14s %8s\n' model preset predicted_MiB measured_MiB error
row() { # NAME CONFIG SETS...
  name=$1 cfg=$2; shift 2
  for preset in none full save_dots save_qkvo; do
    pol="/model/decoder/remat_policy=\"$preset\""
    "$axlc" memcheck "$cfg" --target cpu --json --set "$pol" "$@" > "$T/m.json" 2>/dev/null || true
    pred=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_memory_in_bytes'])" "$T/m.json")
    "$axlc" compile "$cfg" --target cpu -o "$T/trainer" --set "$pol" "$@" > /dev/null 2>&1
    "$T/trainer" --data "$T/text.txt" --steps 2 --threads 2 > "$T/out" 2>&1
    meas=$(sed -n 's/.*measured \([0-9.]*\) MiB.*/\1/p' "$T/out")
    python3 -c "import sys; p=int(sys.argv[3])/1048576; m=float(sys.argv[4]); print('%-10s %-10s %14.2f %14.2f %+7.2f%%' % (sys.argv[1], sys.argv[2], p, m, 100*(m-p)/p))" \
      "$name" "$preset" "$pred" "$meas"
  done
}
if [ $# -gt 1 ]; then
  shift; row custom "$@"
else
  row tiny-lm "$top/models/tiny-lm.json"
  row small "$top/tools/bench/small.json"
  row gpt2-124m "$top/models/gpt2-124m.json" --set /input/global_batch_size=4 --set /input/seq_len=64
fi
