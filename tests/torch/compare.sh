#!/bin/sh
# compare.sh: trains a model for a few steps with `axlc run --target interp` and with the
# PyTorch reference (reference.py) from the same initial weights and data, and compares
# the losses, the last step's gradients and the updated parameters (compare.py).
#
#   usage: compare.sh AXLC MODEL.json WORKDIR [STEPS]
#   env:   TORCH_PYTHON  the Python with torch and numpy (default /usr/bin/python3)
#          TORCH_SEED    seed of the initial weights (default 1234)
#
# Exit 0: every tensor within 1e-4 relative; 1: a mismatch or a failed run;
# 77: skipped, because TORCH_PYTHON cannot import torch and numpy.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 3 ]; then
  echo "usage: compare.sh AXLC MODEL.json WORKDIR [STEPS]" >&2
  exit 2
fi
axlc=$1 model=$2 work=$3 steps=${4:-3}
py=${TORCH_PYTHON:-/usr/bin/python3}
seed=${TORCH_SEED:-1234}
data=$here/data.txt

if ! "$py" -c 'import torch, numpy' > /dev/null 2>&1; then
  echo "SKIP: $py cannot import torch and numpy (apt-get install python3-torch python3-numpy)"
  exit 77
fi

fail() { echo "FAIL: $*"; exit 1; }
if ! mkdir -p "$work"; then
  fail "cannot make $work"
fi
rm -f "$work"/*.json "$work"/*.safetensors "$work"/*.log "$work"/*.err
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
name=$(basename "$model" .json)
echo "== $name: $steps steps, init seed $seed, data $(basename "$data"), work dir $work"

"$axlc" config "$model" > "$work/config.json" 2> "$work/config.err" ||
  { cat "$work/config.err"; fail "axlc config $model"; }
"$axlc" params "$model" --json > "$work/params.json" 2> "$work/params.err" ||
  { cat "$work/params.err"; fail "axlc params $model --json"; }
"$py" "$here/make_init.py" "$work/params.json" "$work/init.safetensors" --seed "$seed" ||
  fail "make_init.py"

"$axlc" run "$model" --target interp --data "$data" --steps "$steps" \
  --init "$work/init.safetensors" --dump "$work/axlc.safetensors" > "$work/axlc.log" 2> "$work/axlc.err"
rc=$?
sed 's/^/axlc: /' "$work/axlc.log"
if [ $rc -ne 0 ]; then
  sed 's/^/axlc: /' "$work/axlc.err"
  fail "axlc run exited with status $rc"
fi

"$py" "$here/reference.py" "$work/config.json" --init "$work/init.safetensors" --data "$data" \
  --steps "$steps" --dump "$work/ref.safetensors" > "$work/ref.log" 2>&1
rc=$?
sed 's/^/ref:  /' "$work/ref.log"
[ $rc -eq 0 ] || fail "reference.py exited with status $rc"

"$py" "$here/compare.py" "$work/axlc.safetensors" "$work/ref.safetensors" --tol 1e-4 \
  --log "$work/axlc.log" ${TORCH_COMPARE_ALL:+--all} || fail "$name: axlc and the PyTorch reference differ"
echo "PASS: $name"
