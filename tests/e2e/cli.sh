#!/bin/sh
# cli.sh AXLC SRCDIR CASE: runs one end-to-end case against the real axlc
# binary. Prints what differed and exits 1 on failure.
set -u
AXLC=$1
SRC=$2
CASE=$3
MODELS=$SRC/models
. "$SRC/tests/lib.sh"
scratch e2e

# run ARGS...: runs axlc, capturing stdout, stderr and the exit status.
run() {
  "$AXLC" "$@" >"$T/out" 2>"$T/err"
  rc=$?
}

expect_rc() {
  [ "$rc" -eq "$1" ] || { fail "exit status $rc, expected $1"; sed 's/^/  stderr: /' "$T/err" >&2; }
}

# expect_in FILE TEXT: FILE contains TEXT (fixed string).
expect_in() {
  grep -qF -- "$2" "$1" || { fail "$(basename "$1") lacks: $2"; sed 's/^/  | /' "$1" | head -20 >&2; }
}

expect_empty() {
  [ ! -s "$1" ] || { fail "$(basename "$1") is not empty"; head -5 "$1" >&2; }
}

# A user error: status 1, nothing on stdout, an "error:" line with TEXT on stderr, and no
# sanitizer report (in the ASan build a leak on an error path keeps the status at 1).
expect_user_error() {
  expect_rc 1
  expect_empty "$T/out"
  expect_in "$T/err" "error: "
  expect_in "$T/err" "$1"
  ! grep -q "Sanitizer" "$T/err" || { fail "sanitizer report"; sed 's/^/  | /' "$T/err" | head -20 >&2; }
}

case $CASE in
config_round_trip)
  run config "$MODELS/tiny-lm.json"
  expect_rc 0
  cp "$T/out" "$T/first.json"
  run config "$T/first.json"
  expect_rc 0
  cmp -s "$T/first.json" "$T/out" || { fail "canonical text changed on the second pass"; diff "$T/first.json" "$T/out" >&2; }
  expect_in "$T/first.json" '"kind": "trainer"'
  expect_in "$T/first.json" '"num_heads": 4,'
  expect_in "$T/first.json" '"b1": 0.9,'
  grep -q '"base"\|"mesh_rules"\|"modifiers"' "$T/first.json" && fail "resolution keys left in the canonical tree"
  ;;
config_target)
  run config "$MODELS/llama2-7b.json" --target gpu-h100-8x32 --apply "$MODELS/modifiers/moe.json" \
    --set /model/decoder/num_layers=2
  expect_rc 0
  expect_in "$T/out" '"kind": "moe"'
  expect_in "$T/out" '"num_layers": 2,'
  expect_in "$T/out" '"remat_policy": "save_qkvo"'
  expect_in "$T/out" '"shape": [1, -1, 1, 8, 1, 1]'
  expect_in "$T/err" 'note: target gpu-h100-8x32 matched mesh rule "gpu-(h100|h200|b200|a100-80gb)-'
  ;;
target_no_rule)
  # a target the rules do not know is an error that lists what they know, not data=N
  for c in config params ir memcheck; do
    run $c "$MODELS/tiny-lm.json" --target tpu-v5p-8
    expect_user_error "models/rules/cpu.json: no mesh rule matches --target tpu-v5p-8 (the rules match \"cpu(-[0-9]+)?\", \"opencl(-.*)?\", \"gpu-.*-[0-9]+\"; device kinds: cpu, opencl, gpu-a100-40gb"
  done
  expect_in "$T/err" "tpu-v5p, tpu-v6e, trn2). Add a rule for it, give the mesh in the config (/mesh, or --set /mesh/shape=[...]), or end the rules with {\"match\": \".*\", ...}"
  run config "$MODELS/llama2-70b.json" --target gpu-h100-128
  expect_user_error 'models/rules/llama-70b.json: no mesh rule matches --target gpu-h100-128'
  # the config says what to do: its mesh stands
  run config "$MODELS/tiny-lm.json" --target tpu-v5p-8 --set '/mesh/shape=[1,1,1,-1,1,1]'
  expect_rc 0
  expect_in "$T/err" 'note: target tpu-v5p-8 matched no mesh rule; the config'"'"'s mesh stands'
  expect_in "$T/out" '"shape": [1, 1, 1, -1, 1, 1]'
  ;;
targets_every_model)
  # every shipped model resolves for the host targets, through a rule of its own rules file
  for m in "$MODELS"/*.json; do
    for t in cpu cpu-2 interp opencl; do
      run config "$m" --target $t
      expect_rc 0
      case $t in
      opencl) expect_in "$T/err" "note: target $t matched mesh rule \"opencl(-.*)?\"" ;;
      *) expect_in "$T/err" 'matched mesh rule "cpu(-[0-9]+)?"' ;;
      esac
    done
  done
  run params "$MODELS/tiny-lm.json" --target interp
  expect_rc 0
  expect_in "$T/out" "on a mesh of 1 devices"
  ;;
device_kinds)
  # every kind of the shipped table has each figure memcheck reads, its bf16 rate included
  python3 - "$MODELS/rules/devices.json" <<'PY' || fail "a device kind lacks a figure"
import json, sys
t = json.load(open(sys.argv[1]))
for kind, d in t.items():
    if kind.startswith("_"): continue
    for key in ("doc", "memory", "memory_bandwidth", "link_bandwidth"):
        assert key in d, (kind, key)
    for dt in ("f32", "bf16"):
        assert d["flops"].get(dt, 0) > 0, (kind, "flops", dt)
PY
  # and every TPU kind whose names the frontend reads is in it
  for t in tpu-v4-8 tpu-v5p-8 tpu-v5e-4 tpu-v6e-4; do
    run memcheck "$MODELS/tiny-lm.json" --target $t --set '/mesh/shape=[1,-1,1,1,1,1]' --json
    expect_rc 0
    expect_in "$T/out" '"devices": 4,'
  done
  ;;
target_naming)
  # TPU v4 and v5p names count TensorCores, two per chip; an axlc device is a chip
  run params "$MODELS/fuji-70b.json" --target tpu-v5p-512
  expect_rc 0
  expect_in "$T/out" "on a mesh of 256 devices (pipeline=1, data=1, expert=1, fsdp=256, seq=1, model=1)"
  run params "$MODELS/llama2-7b.json" --target tpu-v4-1024
  expect_rc 0
  expect_in "$T/out" "on a mesh of 512 devices (pipeline=1, data=32, expert=1, fsdp=16, seq=1, model=1)"
  run params "$MODELS/llama2-7b.json" --target tpu-v5p-7
  expect_user_error 'error: --target tpu-v5p-7: bad count "7" (tpu-v5p names count TensorCores, 2 per chip'
  run memcheck "$MODELS/tiny-lm.json" --target tpu-v5e-4 --set '/mesh/shape=[1,-1,1,1,1,1]'
  expect_rc 0
  expect_in "$T/out" "on tpu-v5e-4 (4 devices: Google Cloud TPU v5e chip, 16.00 GiB of memory each)"
  run memcheck "$MODELS/tiny-lm.json" --target tpu-v5p-8 --set '/mesh/shape=[1,-1,1,1,1,1]'
  expect_rc 0
  expect_in "$T/out" "on tpu-v5p-8 (4 devices: Google Cloud TPU v5p chip, 95.00 GiB of memory each; the name counts TensorCores, 2 per chip)"
  ;;
params_total)
  run params "$MODELS/gpt2-124m.json"
  expect_rc 0
  want='196 tensors, 124,439,808 parameters, 474.70 MiB; 474.70 MiB per device on a mesh of 1 devices (pipeline=1, data=1, expert=1, fsdp=1, seq=1, model=1)'
  got=$(tail -n 2 "$T/out" | head -n 1)
  [ "$got" = "$want" ] || fail "total line
    got:  $got
    want: $want"
  expect_in "$T/out" 'model/emb/weight'
  expect_in "$T/out" 'precision, per device: parameters f32 474.70 MiB (the masters); gradients f32 474.70 MiB (reduced across devices in f32); optimizer state f32 949.40 MiB; activations f32'
  run params "$MODELS/tiny-lm.json" --target cpu-4 --features -avx512bf16
  expect_rc 0
  got=$(tail -n 2 "$T/out" | head -n 1)
  want='24 tensors, 123,520 parameters, 482.50 KiB; 482.50 KiB per device on a mesh of 4 devices (pipeline=1, data=4, expert=1, fsdp=1, seq=1, model=1)'
  [ "$got" = "$want" ] || fail "total line
    got:  $got
    want: $want"
  # bf16 compute: the masters stay f32, a step reads a bf16 copy
  run params "$MODELS/tiny-lm.json" --apply bf16
  expect_rc 0
  expect_in "$T/out" 'precision, per device: parameters f32 482.50 KiB (the masters); read as bf16 241.25 KiB; gradients f32 482.50 KiB (reduced across devices in f32); optimizer state f32 965.00 KiB; activations bf16'
  ;;
precision_auto)
  # the cpu rule's compute: auto is bf16 only on a CPU with AMX-BF16, and says why
  run config "$MODELS/tiny-lm.json" --target cpu --features +amx-bf16
  expect_rc 0
  expect_in "$T/err" 'note: precision: bf16 compute (compute: auto with --features +amx-bf16)'
  expect_in "$T/out" '"compute": "bf16",'
  run config "$MODELS/tiny-lm.json" --target cpu-2 --cpu znver4
  expect_rc 0
  expect_in "$T/err" 'note: precision: f32 compute (compute: auto on a --cpu without AMX-BF16)'
  expect_in "$T/out" '"compute": "f32",'
  run config "$MODELS/tiny-lm.json" --target cpu --cpu sapphirerapids
  expect_in "$T/out" '"compute": "bf16",'
  # a config's own choice (here --apply bf16, after the rule) stands; opencl is not asked
  run config "$MODELS/tiny-lm.json" --target cpu --features -amx-bf16 --apply bf16
  expect_in "$T/out" '"compute": "bf16",'
  run config "$MODELS/tiny-lm.json" --target opencl
  expect_in "$T/out" '"compute": "f32",'
  grep -q 'note: precision' "$T/err" && fail "opencl: a precision note"
  # the GPU rules turn bf16 on, and TF32 for f32 products; the CPU stays f32
  run config "$MODELS/llama2-7b.json" --target gpu-h100-256
  expect_in "$T/out" '"compute": "bf16",'
  expect_in "$T/out" '"matmul": "tf32",'
  run config "$MODELS/tiny-lm.json" --target gpu-h100-1
  expect_in "$T/out" '"matmul": "tf32",'
  run config "$MODELS/tiny-lm.json" --target cpu
  expect_in "$T/out" '"matmul": "f32",'
  # the CPU backend refuses tf32, naming the field
  run compile "$MODELS/tiny-lm.json" --target cpu --set /precision/matmul=tf32 -o "$T/tf32"
  expect_rc 1
  expect_in "$T/err" '/precision/matmul: tf32 is for GPUs with tensor cores; the CPU (LLVM) backend computes products in f32'
  [ -e "$T/tf32" ] && fail "a tf32 CPU trainer was written"
  ;;
params_json)
  run params "$MODELS/gpt2-124m.json" --json
  expect_rc 0
  grep -qxE '  "total_params": 124439808,?' "$T/out" || fail 'no line "total_params": 124439808'
  grep -qxE '  "trainable_params": 124439808,?' "$T/out" || fail 'not every parameter trains'
  expect_in "$T/out" '"devices": 1,'
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys; d = json.load(sys.stdin); assert d["total_params"] == 124439808, d["total_params"]; assert sum(p["count"] for p in d["params"]) == 124439808' <"$T/out" \
      || fail "--json output does not parse or has the wrong total_params"
  else
    echo "note: no python3; skipping the JSON parse check"
  fi
  ;;
err_missing_file)
  run config "$T/absent.json"
  expect_user_error "$T/absent.json: cannot open: No such file or directory"
  run params "$T/absent.json"
  expect_user_error "$T/absent.json: cannot open"
  ;;
err_missing_rules)
  # a mesh_rules file that is missing or broken: a clear error (and, in the ASan build, no leak)
  printf '{"base": "%s", "mesh_rules": "rules/absent.json"}\n' "$MODELS/tiny-lm.json" >"$T/cfg.json"
  run config "$T/cfg.json" --target cpu
  # the message names the config, the key, the name, and every directory searched
  expect_user_error "$T/cfg.json: /mesh_rules: rules/absent.json: no such file (looked in $T, "
  mkdir -p "$T/rules"
  printf '[{"match": "cpu",]\n' >"$T/rules/absent.json"
  run params "$T/cfg.json"
  expect_user_error "$T/rules/absent.json:1:"
  ;;
err_malformed_json)
  printf '{\n  "kind": "trainer",\n  "max_steps": 1,,\n}\n' >"$T/bad.json"
  run config "$T/bad.json"
  expect_user_error "$T/bad.json:3:18: JSON syntax error"
  printf '{"base": "bad.json"}\n' >"$T/derived.json"
  run params "$T/derived.json"
  expect_user_error "$T/bad.json:3:18: JSON syntax error"
  ;;
err_unknown_option)
  run config "$MODELS/tiny-lm.json" --frobnicate
  expect_user_error "unknown option --frobnicate (see axlc --help)"
  run config "$MODELS/tiny-lm.json" --set
  expect_user_error "--set needs a value"
  # a command's own option (the command table) on another command names the one it belongs to
  run ir "$MODELS/tiny-lm.json" --dtype bf16
  expect_user_error "--dtype is an option of axlc convert, not of axlc ir"
  run config "$MODELS/tiny-lm.json" --clear
  expect_user_error "--clear is an option of axlc cache, not of axlc config"
  run memcheck "$MODELS/tiny-lm.json" --target cpu -n 2
  expect_user_error "-n is an option of axlc launch, not of axlc memcheck"
  ;;
err_unknown_command)
  run frobnicate "$MODELS/tiny-lm.json"
  expect_user_error 'unknown command "frobnicate" (see axlc --help)'
  run
  expect_rc 1
  expect_in "$T/err" "usage: axlc"
  ;;
err_bad_set)
  run config "$MODELS/tiny-lm.json" --set max_steps
  expect_user_error '--set: "max_steps" is not PATH=VALUE'
  run config "$MODELS/tiny-lm.json" --set /model/nope/x=1
  expect_user_error "--set: /model/nope/x: the config has no object at /model/nope"
  ;;
err_set_value)
  run params "$MODELS/tiny-lm.json" --set /model/decoder/layer/self_attention/num_heads=5
  expect_user_error "--set: /model/decoder/layer/self_attention/num_heads: num_heads 5 does not divide dim 64 (expected a divisor of 64)"
  run config "$MODELS/tiny-lm.json" --set /model/decoder/layer/feed_forward/activation=gleu
  expect_user_error '--set: /model/decoder/layer/feed_forward/activation: value "gleu" is not allowed (expected one of gelu|relu|swiglu); did you mean "gelu"?'
  ;;
err_step_too_large)
  # tensors of the training step too large for any graph: a config error before composing
  # (it used to be a heap-buffer-overflow in the composer), a warning for config and params
  set -- --set /input/seq_len=16777216 --set /model/pos_emb/max_len=16777216 \
    --set /input/global_batch_size=65536
  msg='--set: /input/seq_len: the attention scores (batch x heads x seq x seq = 65536 x 4 x 16777216 x 16777216) would hold 7.379e+19 elements on each device, more than the limit of 281474976710656 in one tensor (expected a smaller seq_len)'
  run ir "$MODELS/tiny-lm.json" "$@"
  expect_user_error "error: $msg"
  run run "$MODELS/tiny-lm.json" --target interp --data "$CORPUS" "$@"
  expect_user_error "error: $msg"
  run params "$MODELS/tiny-lm.json" "$@"
  expect_rc 0
  expect_in "$T/out" '24 tensors, 1,073,857,152 parameters'
  expect_in "$T/err" "warning: axlc ir, compile and run refuse this config: $msg"
  run config "$MODELS/tiny-lm.json" "$@"
  expect_rc 0
  expect_in "$T/out" '"seq_len": 16777216'
  expect_in "$T/err" "warning: axlc ir, compile and run refuse this config: $msg"
  ;;
deep_model)
  # 500 layers (5,004 parameters): what config and params accept, ir lowers through every
  # pass (the optimizer used to stop at 4096 parameters); the one limit is the schema's
  set -- --set /model/decoder/num_layers=500 --set /model/dim=8 \
    --set /model/decoder/layer/self_attention/num_heads=1 --set /model/pos_emb/max_len=16 \
    --set /input/seq_len=4 --set /input/global_batch_size=1
  run params "$MODELS/tiny-lm.json" "$@"
  expect_rc 0
  expect_in "$T/out" '5004 tensors, 402,192 parameters'
  run ir "$MODELS/tiny-lm.json" "$@"
  expect_rc 0
  expect_in "$T/out" 'output "new:model/decoder/layer_499/feed_forward/linear2/weight" = '
  expect_in "$T/out" 'output "lr" = '
  run params "$MODELS/tiny-lm.json" --set /model/decoder/num_layers=4097
  expect_user_error "--set: /model/decoder/num_layers: value 4097 is out of range (expected 1 to 4096)"
  # past 64 bits: the bound it was read as is not quoted as the user's number
  run params "$MODELS/tiny-lm.json" --set /model/decoder/num_layers=99999999999999999999
  expect_user_error "--set: /model/decoder/num_layers: value 9223372036854775807 (or a number past it: integers are read in 64 bits) is out of range (expected 1 to 4096)"
  ;;
err_no_model)
  run config
  expect_user_error "axlc config needs a MODEL.json"
  run kinds attenton
  expect_user_error 'unknown module kind "attenton"'
  ;;
kinds)
  run kinds
  expect_rc 0
  grep -q '^attention  *causal multi-head' "$T/out" || fail "axlc kinds does not list attention"
  grep -q '^trainer ' "$T/out" || fail "axlc kinds does not list trainer"
  run kinds attention
  expect_rc 0
  expect_in "$T/out" "attention: causal multi-head / grouped-query attention"
  grep -q '^  num_heads  *int  *required' "$T/out" || fail "axlc kinds attention lacks num_heads"
  ;;
help)
  run --help
  expect_rc 0
  expect_in "$T/out" "usage: axlc COMMAND [MODEL.json] [options]"
  expect_in "$T/out" "convert MODEL.json  --from hf IN.safetensors -o OUT.safetensors"
  expect_in "$T/out" "cache               the compile cache: its directory, entries, size and limit;"
  expect_empty "$T/err"
  run -h
  expect_rc 0
  ;;
ir_text)
  run ir "$MODELS/tiny-lm.json" --after compose
  expect_rc 0
  expect_in "$T/out" 'input "ids" : i32[8,64]'
  expect_in "$T/out" 'output "loss" = '
  grep -q 'grad:' "$T/out" && fail "--after compose printed gradients"
  run ir "$MODELS/tiny-lm.json"
  expect_rc 0
  expect_in "$T/out" 'output "new:model/emb/weight" = '
  expect_in "$T/out" '#"attention.q_proj"'
  run ir "$MODELS/tiny-lm.json" --after compose --format dot
  expect_rc 0
  expect_in "$T/out" 'digraph'
  run ir "$MODELS/tiny-lm.json" --after fuse2
  expect_user_error 'unknown pass "fuse2"'
  ;;
metrics_aux_loss)
  # a MoE model's metrics split the loss: ce_loss + aux_loss (load balance) = loss; at step 1
  # (same weights) ce_loss is the loss of the same model without the load-balance term
  cp "$CORPUS" "$T/text.txt"
  set -- "$MODELS/moe-test.json" --target cpu --data "$T/text.txt" --steps 2 --threads 1 \
    --set /input/seq_len=16 --set /input/global_batch_size=2
  run run "$@" --metrics "$T/w.jsonl"
  expect_rc 0
  run run "$@" --metrics "$T/0.jsonl" \
    --set /model/decoder/layer/feed_forward/load_balance_loss_weight=0
  expect_rc 0
  python3 - "$T/w.jsonl" "$T/0.jsonl" <<'PY' || fail "aux_loss in the metrics"
import json, sys
w, z = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
for m in w:
    assert m["aux_loss"] > 0 and abs(m["ce_loss"] + m["aux_loss"] - m["loss"]) <= 1e-6 * m["loss"], m
assert abs(w[0]["ce_loss"] - z[0]["loss"]) <= 1e-5 * z[0]["loss"], (w[0], z[0])
assert "aux_loss" not in z[0] and "ce_loss" not in z[0], z[0]  # no auxiliary term: no split
print("step 1: loss %.6f = ce %.6f + aux %.6f; without the term %.6f" % (w[0]["loss"], w[0]["ce_loss"], w[0]["aux_loss"], z[0]["loss"]))
PY
  ;;
run_loss_falls)
  # tiny-lm, narrowed so the interpreter runs fast, on English prose ($CORPUS)
  cp "$CORPUS" "$T/text.txt"
  run run "$MODELS/tiny-lm.json" --target interp --data "$T/text.txt" --steps 30 \
    --set /input/seq_len=32 --set /input/global_batch_size=4 --set /learner/schedule/warmup_steps=3
  expect_rc 0
  first=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/out")
  last=$(awk '$1 == "step" && $2 == 30 { print $4 }' "$T/out")
  [ -n "$first" ] && [ -n "$last" ] || fail "no loss lines"
  # the first loss is about ln(256) = 5.55; 30 steps must take at least 1.5 nats off
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.4 && a < 5.7 && b < a - 1.5) }' ||
    fail "loss went from $first to $last"
  ;;
run_bad_data)
  run run "$MODELS/tiny-lm.json" --target interp --data "$T/missing.txt" --steps 1
  expect_user_error "missing.txt"
  printf 'too short' > "$T/short.txt"
  run run "$MODELS/tiny-lm.json" --target interp --data "$T/short.txt" --steps 1
  expect_user_error "short.txt"
  # an llm.c token file whose header claims more tokens than it holds
  python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<256i", 20240520, 1, 1000, *([0]*253)) + struct.pack("<10H", *range(10)))' > "$T/trunc.bin"
  run run "$MODELS/tiny-lm.json" --target interp --data "$T/trunc.bin" --steps 1
  expect_user_error "trunc.bin"
  # tokens beyond tiny-lm's vocabulary of 256
  python3 -c 'import struct,sys; n=5000; sys.stdout.buffer.write(struct.pack("<256i", 20240520, 1, n, *([0]*253)) + struct.pack("<%dH" % n, *[(i * 7) % 300 for i in range(n)]))' > "$T/vocab.bin"
  run run "$MODELS/tiny-lm.json" --target interp --data "$T/vocab.bin" --steps 1
  expect_user_error "vocab.bin"
  expect_in "$T/err" "256"
  run run "$MODELS/tiny-lm.json" --target interp --steps 1
  expect_user_error "--data FILE is required"
  run run "$MODELS/tiny-lm.json" --target interp --data "$T/text.txt" --steps abc
  expect_user_error "--steps 'abc'"
  ;;
err_numeric_options)
  # the interpreter's counts: a negative number or a non-number is a bad value, not a missing one
  for v in -1 abc 1.5 +3 '' 1099511627777 99999999999999999999; do
    run run "$MODELS/tiny-lm.json" --target interp --data "$CORPUS" --steps "$v"
    expect_user_error "error: --steps '$v': expected a non-negative integer up to 1099511627776"
  done
  run run "$MODELS/tiny-lm.json" --target interp --data "$CORPUS" --seed -5
  expect_user_error "error: --seed '-5': expected a non-negative integer up to 1099511627776"
  run run "$MODELS/tiny-lm.json" --target interp --steps --data "$CORPUS"
  expect_user_error "error: --steps needs a value"
  run run "$MODELS/tiny-lm.json" --target interp --data "$CORPUS" --seed
  expect_user_error "error: --seed needs a value"
  # checked before lowering: this config's step is too large, but only the option is reported
  run run "$MODELS/tiny-lm.json" --target interp --data "$CORPUS" --steps -1 \
    --set /input/seq_len=16777216 --set /model/pos_emb/max_len=16777216
  expect_user_error "error: --steps '-1': expected a non-negative integer up to 1099511627776"
  ! grep -q "seq_len" "$T/err" || fail "the config was lowered before the options were checked"
  ;;
run_init_dump)
  cp "$CORPUS" "$T/text.txt"
  set -- --target interp --data "$T/text.txt" --steps 2 --set /input/seq_len=16 \
    --set /input/global_batch_size=2
  run run "$MODELS/tiny-lm.json" "$@" --dump "$T/a.safetensors"
  expect_rc 0
  # the dump holds the losses, gradients and new parameters; it loads back as initial
  # weights (its "new:P" as P): step 1 of a run from it is the loss of the trained weights
  run run "$MODELS/tiny-lm.json" "$@" --init "$T/a.safetensors" --steps 1
  expect_rc 0
  expect_in "$T/out" "step 1 loss "
  first=$(sed -n 's/^step 1 loss \([^ ]*\).*/\1/p' "$T/out")
  run run "$MODELS/tiny-lm.json" "$@" --steps 1
  [ "$(sed -n 's/^step 1 loss \([^ ]*\).*/\1/p' "$T/out")" != "$first" ] ||
    fail "--init of the dump gave the untrained loss $first"
  # initial weights by parameter path: zeros (norm scales one) make every logit 0,
  # so the first loss is exactly ln(256)
  run params "$MODELS/tiny-lm.json" --json
  nan=$(python3 - "$T/out" "$T/zero.safetensors" <<'PY'
import json, struct, sys
params = json.load(open(sys.argv[1]))["params"]
header, blobs, off = {}, [], 0
for p in params:
    n = p["count"]
    blob = struct.pack("<%df" % n, *([1.0 if p["init"] == "ones" else 0.0] * n))
    header[p["path"]] = {"dtype": "F32", "shape": p["shape"], "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
h = json.dumps(header).encode()
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
# the same with a NaN as value 3 of the second parameter
blobs[1] = blobs[1][:12] + struct.pack("<f", float("nan")) + blobs[1][16:]
with open(sys.argv[2].replace("zero", "nan"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print("tensor '%s': value 3 of %d is NaN" % (params[1]["path"], params[1]["count"]))
PY
)
  run run "$MODELS/tiny-lm.json" "$@" --init "$T/zero.safetensors" --steps 1
  expect_rc 0
  expect_in "$T/out" "step 1 loss 5.545177"
  # a NaN in --init is refused before step 1, naming the tensor and the file
  run run "$MODELS/tiny-lm.json" "$@" --init "$T/nan.safetensors" --steps 1
  expect_user_error "--init: $T/nan.safetensors: $nan; refusing to start from weights that are not finite"
  ;;
convert_gpt2 | convert_llama | convert_mixtral | convert_dump | convert_bf16 | convert_hf_shards)
  # tests/e2e/hf_convert.py: files in Hugging Face's naming, written there, through axlc convert
  py=${TORCH_PYTHON:-/usr/bin/python3}
  "$py" -c 'import numpy' 2>/dev/null || { echo "SKIP: $py cannot import numpy"; exit 77; }
  if [ "$CASE" = convert_dump ]; then
    set -- "gpt2 dump" "llama dump" "mixtral dump"
  elif [ "$CASE" = convert_hf_shards ]; then
    set -- "gpt2 shards" "mixtral shards"
  elif [ "$CASE" = convert_bf16 ]; then
    set -- "gpt2 dtypes" "llama dtypes" "mixtral dtypes"
  else
    m=${CASE#convert_}
    set -- "$m round_trip" "$m errors"
  fi
  for job in "$@"; do
    set -- $job
    "$py" "$SRC/tests/e2e/hf_convert.py" "$AXLC" "$SRC/tests/torch/$1-tiny.json" "$T/$1-$2" "$2" ||
      fail "hf_convert.py $1 $2"
  done
  ;;
convert_sharded)
  # a sharded checkpoint (2 ranks, written here as the trainer lays it out) converts from its
  # step directory or its checkpoint directory, to the bytes of the same weights in one file;
  # one rank's file alone is refused as what it is
  run params "$MODELS/tiny-lm.json" --json
  expect_rc 0
  python3 - "$T/out" "$T" <<'PY'
import json, os, struct, sys, zlib
params, top = json.load(open(sys.argv[1]))["params"], sys.argv[2]
def st_bytes(tensors, meta=None):
    header, body = {}, b""
    if meta:
        header["__metadata__"] = meta
    for name, shape, values in tensors:
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body) + len(blob)]}
        body += blob
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body
whole, ranks, regions = [], [[], []], {}
for k, p in enumerate(params):
    n, shape = p["count"], p["shape"]
    values = [((i * 7 + k) % 13 - 6) * 0.01 for i in range(n)]
    whole.append((p["path"], shape, values))
    if shape and shape[0] % 2 == 0:  # rows split between the ranks
        half, row = shape[0] // 2, n // shape[0]
        for r in range(2):
            ranks[r].append((p["path"], [half] + shape[1:], values[r * half * row:(r + 1) * half * row]))
            regions.setdefault(r, {})[p["path"]] = {"shape": shape, "start": [r * half] + [0] * (len(shape) - 1)}
    else:  # replicated: rank 0 writes it
        ranks[0].append((p["path"], shape, values))
open(os.path.join(top, "whole.safetensors"), "wb").write(st_bytes(whole))
step = os.path.join(top, "ck", "step_00000003")
os.makedirs(step)
files = []
for r in range(2):
    meta = {"axlc.regions": json.dumps(regions[r])}
    if r == 0:
        meta.update({"axlc.step": "3", "axlc.data_position": "0", "axlc.rng_state": "1"})
    data = st_bytes(ranks[r], meta)
    name = "state-rank%05d.safetensors" % r
    open(os.path.join(step, name), "wb").write(data)
    files.append({"name": name, "bytes": len(data), "crc32": zlib.crc32(data)})
index = {"format": "axlc-checkpoint", "version": 2, "step": 3, "ranks": 2, "files": files}
open(os.path.join(step, "index.json"), "w").write(json.dumps(index))
PY
  [ -f "$T/ck/step_00000003/index.json" ] || fail "the sharded checkpoint was not written"
  run convert "$MODELS/tiny-lm.json" --to hf "$T/ck/step_00000003/state-rank00000.safetensors" -o "$T/x.safetensors"
  expect_user_error "state-rank00000.safetensors: one rank's file of a sharded checkpoint of 2 ranks: it holds only that rank's parts of the tensors; pass the step directory ($T/ck/step_00000003) or the checkpoint directory"
  ! grep -q "shape" "$T/err" || fail "one rank's file: shape mismatches listed"
  run convert "$MODELS/tiny-lm.json" --to hf "$T/ck/step_00000003/index.json" -o "$T/x.safetensors"
  expect_user_error "index.json: an axlc checkpoint's index; pass its step directory ($T/ck/step_00000003)"
  run convert "$MODELS/tiny-lm.json" --to hf "$T/whole.safetensors" -o "$T/whole-hf.safetensors"
  expect_rc 0
  for in in "$T/ck/step_00000003" "$T/ck/step_00000003/" "$T/ck"; do
    rm -f "$T/hf.safetensors"
    run convert "$MODELS/tiny-lm.json" --to hf "$in" -o "$T/hf.safetensors"
    expect_rc 0
    cmp -s "$T/whole-hf.safetensors" "$T/hf.safetensors" || fail "--to hf $in differs from the whole file's"
  done
  mkdir "$T/none"
  run convert "$MODELS/tiny-lm.json" --to hf "$T/none" -o "$T/hf.safetensors"
  expect_user_error "none: a directory without a checkpoint that verifies (expected a safetensors file, a checkpoint directory or one of its step_N directories)"
  ;;
convert_stale_index)
  # one file written over an earlier sharded export under the same name removes that export's
  # index and the shards it names (and nothing else), so --from hf DIR reads the new weights,
  # as transformers does; shards written over an earlier single file remove it; a directory
  # that holds an index and a model.safetensors it does not name is refused
  seq 1 30000 | awk '{ printf "%s %d\n", ($1 % 7 ? "word" : "other"), $1 * 31 % 1000 }' > "$T/text.txt"
  set -- --target interp --data "$T/text.txt" --steps 1 --set /input/seq_len=16 \
    --set /input/global_batch_size=2
  run run "$MODELS/tiny-lm.json" "$@" --dump "$T/a.st"
  expect_rc 0
  run run "$MODELS/tiny-lm.json" "$@" --seed 7 --dump "$T/b.st"
  expect_rc 0
  mkdir "$T/d" "$T/ref"
  : > "$T/d/model-00009-of-00009.safetensors" # not named by the index: left alone
  run convert "$MODELS/tiny-lm.json" --to hf "$T/a.st" --max-shard-size 200KB -o "$T/d/model.safetensors"
  expect_rc 0
  [ -f "$T/d/model-00003-of-00003.safetensors" ] || fail "the export was not sharded: $(ls "$T/d")"
  cp -r "$T/d" "$T/both"
  run convert "$MODELS/tiny-lm.json" --to hf "$T/b.st" -o "$T/d/model.safetensors"
  expect_rc 0
  expect_in "$T/err" "note: removed the earlier sharded export under -o's name: its index $T/d/model.safetensors.index.json and the 3 shards it names"
  [ "$(ls "$T/d" | tr '\n' ' ')" = "config.json model-00009-of-00009.safetensors model.safetensors " ] ||
    fail "left in the directory: $(ls "$T/d")"
  # --from hf DIR reads the new weights: the bytes of b's own round trip
  run convert "$MODELS/tiny-lm.json" --to hf "$T/b.st" -o "$T/ref/model.safetensors"
  expect_rc 0
  run convert "$MODELS/tiny-lm.json" --from hf "$T/d" -o "$T/back.st"
  expect_rc 0
  run convert "$MODELS/tiny-lm.json" --from hf "$T/ref" -o "$T/ref.st"
  expect_rc 0
  cmp -s "$T/back.st" "$T/ref.st" || fail "--from hf DIR did not read the new single file"
  # a directory with both is refused, naming it
  cp "$T/d/model.safetensors" "$T/both/model.safetensors"
  run convert "$MODELS/tiny-lm.json" --from hf "$T/both" -o "$T/x.st"
  expect_user_error "$T/both: holds both model.safetensors.index.json and a model.safetensors that the index does not name"
  [ ! -e "$T/x.st" ] || fail "a refused conversion wrote its output"
  # shards over a single file: the single file goes
  run convert "$MODELS/tiny-lm.json" --to hf "$T/a.st" --max-shard-size 200KB -o "$T/d/model.safetensors"
  expect_rc 0
  expect_in "$T/err" "note: removed $T/d/model.safetensors, an earlier single-file export"
  [ ! -e "$T/d/model.safetensors" ] || fail "the earlier single file is still there"
  # an index that cannot say which shards are its own: refused before anything is written
  echo '{"weight_map": 3}' > "$T/ref/model.safetensors.index.json"
  cp "$T/ref/model.safetensors" "$T/ref.keep"
  run convert "$MODELS/tiny-lm.json" --to hf "$T/a.st" -o "$T/ref/model.safetensors"
  expect_user_error "$T/ref/model.safetensors.index.json: an earlier index beside -o $T/ref/model.safetensors that is not a Hugging Face index"
  cmp -s "$T/ref/model.safetensors" "$T/ref.keep" || fail "the refused export replaced the file"
  ;;
backend_unknown)
  run run "$MODELS/tiny-lm.json" --backend nosuch --steps 1
  expect_user_error "unknown backend 'nosuch' (expected one of: interp"
  run compile "$MODELS/tiny-lm.json" --backend nosuch -o "$T/x"
  expect_user_error "unknown backend 'nosuch'"
  run run "$MODELS/tiny-lm.json" --backend
  expect_user_error "--backend needs a value"
  run run "$MODELS/tiny-lm.json" --target interp --backend llvm
  expect_user_error "--target interp means --backend interp"
  ;;
backend_interp_no_compile)
  run compile "$MODELS/tiny-lm.json" --backend interp -o "$T/x"
  expect_user_error "backend interp cannot compile a trainer; use --backend llvm"
  run compile "$MODELS/tiny-lm.json" --target interp -o "$T/x"
  expect_user_error "backend interp cannot compile a trainer; use --backend llvm"
  [ ! -e "$T/x" ] || fail "a file was written"
  ;;
backend_interp_equals_target)
  cp "$CORPUS" "$T/text.txt"
  set -- --data "$T/text.txt" --steps 2 --set /input/seq_len=16 --set /input/global_batch_size=2
  run run "$MODELS/tiny-lm.json" --target interp "$@"
  expect_rc 0
  cp "$T/out" "$T/target.txt"
  run run "$MODELS/tiny-lm.json" --backend interp "$@"
  expect_rc 0
  cmp -s "$T/target.txt" "$T/out" || { fail "--backend interp differs from --target interp"; diff "$T/target.txt" "$T/out" >&2; }
  run run "$MODELS/tiny-lm.json" --target cpu --backend interp "$@"
  expect_rc 0
  cmp -s "$T/target.txt" "$T/out" || fail "--target cpu --backend interp differs from --target interp"
  expect_in "$T/target.txt" "step 2 loss"
  run run "$MODELS/tiny-lm.json" --backend interp --bogus 1
  expect_user_error "--bogus is not an option of --backend interp"
  ;;
pipeline)
  # pipeline=2 x 1F1B: the timeline and each stage's program, then training on the simulated
  # mesh equal to one process, and a compiling backend refused (docs/pipeline.md)
  set -- --set /input/seq_len=16 --set /input/global_batch_size=8 --set /learner/microbatches=4 \
    --set /mesh/pipeline_schedule=1f1b
  run ir "$MODELS/tiny-lm.json" --target cpu-2 --set '/mesh/shape=[2,1,1,1,1,1]' "$@" --after pipeline
  expect_rc 0
  expect_in "$T/out" "# schedule 1f1b: 2 stages, 4 microbatches, 10 time units; bubble 1/5"
  expect_in "$T/out" "# stage 0 | F0  F1  .   B0  F2  B1  F3  B2  .   B3"
  expect_in "$T/out" "# stage 1 | .   F0  B0  F1  B1  F2  B2  F3  B3  ."
  expect_in "$T/out" "= send %"
  expect_in "$T/out" "mesh_axes=[pipeline] peer=0 : f32[2,16,64] stage=1"
  cp "$CORPUS" "$T/text.txt"
  set -- "$@" --data "$T/text.txt" --steps 10
  run run "$MODELS/tiny-lm.json" --backend interp --target cpu "$@"
  expect_rc 0
  cp "$T/out" "$T/one.txt"
  run run "$MODELS/tiny-lm.json" --backend interp --target cpu-2 --set '/mesh/shape=[2,1,1,1,1,1]' "$@"
  expect_rc 0
  expect_in "$T/out" "step 10 loss"
  # the losses of the 10 steps within 1e-4 of one process's (f32 rounding of other sum orders)
  paste "$T/one.txt" "$T/out" | awk '{ d = $4 - $12; if (d < 0) d = -d; if ($2 != $10 || d > 1e-4) bad = 1; n++ }
    END { exit bad || n != 10 }' || { fail "pipeline=2 trains differently from one process"; paste "$T/one.txt" "$T/out" >&2; }
  # compiled trainers run pipelines under mpirun (tests/mpi/models.sh *_pp*): the OpenCL one's
  # table has each parameter's stage (stage 1's layer_1, held by its devices alone; the tied
  # table, which both stages read, on every device, shared from stage 0)
  if "$AXLC" backends | grep -q "^opencl "; then
    run compile "$MODELS/tiny-lm.json" --target opencl-2 --set '/mesh/shape=[2,1,1,1,1,1]' \
      --set /learner/microbatches=2 --emit c -o "$T/ocl.c"
    expect_rc 0
    grep -q 'layer_1/attn_norm/bias", .*\.stage = 2, \.apart = 2}' "$T/ocl.c" || fail "opencl: no stage 1 for layer_1's parameters"
    grep -q 'model/emb/weight", .*\.stage = 1, \.apart = 0}' "$T/ocl.c" || fail "opencl: the tied table not on every device"
    grep -q '\.kind = 7, .*\.axis = 0, \.axis2 = 0, \.rank = 2' "$T/ocl.c" || fail "opencl: no share of the tied table"
  fi
  # memcheck plans each stage (memcheck_pipeline has the details)
  run memcheck "$MODELS/tiny-lm.json" --target cpu-2 --set '/mesh/shape=[2,1,1,1,1,1]' --set /learner/microbatches=2
  expect_rc 0
  expect_in "$T/out" "  stage 1: peak 8.19 MiB, parameters 257.50 KiB, saved activations 2.95 MiB of 2 microbatches (the schedule keeps 2)  <- the largest, below"
  ;;
pipeline_interleaved)
  # interleaved 1F1B: fuji-test's 4 layers in 4 chunks over pipeline=2 (chunks 0 and 2 on
  # stage 0), the timeline with each unit's chunk and the bubble the schedule gives; the ring
  # back from stage 1 to stage 0; 10 interpreter steps equal to one process; M not a multiple
  # of P refused (docs/pipeline.md)
  set -- --set /input/seq_len=16 --set /input/global_batch_size=8 --set /learner/microbatches=4 \
    --set /mesh/pipeline_schedule=interleaved --set /mesh/pipeline_virtual=2 --set /model/vocab_size=256
  run ir "$MODELS/fuji-test.json" --target cpu-2 --set '/mesh/shape=[2,1,1,1,1,1]' "$@" --after pipeline
  expect_rc 0
  expect_in "$T/out" "# schedule interleaved: 2 stages x 2 virtual (4 chunks), 4 microbatches, 18 time units; bubble 1/9"
  expect_in "$T/out" "# stage 0 | F0.0  F1.0  F0.2  F1.2  F2.0  B0.2  F3.0  B1.2  F2.2  B0.0  F3.2  B1.0  .     B2.2  .     B3.2  B2.0  B3.0"
  expect_in "$T/out" "# stage 1 | .     F0.1  F1.1  F0.3  B0.3  F1.3  B1.3  F2.1  B0.1  F3.1  B1.1  F2.3  B2.3  F3.3  B3.3  B2.1  B3.1  ."
  expect_in "$T/out" "mesh_axes=[pipeline] peer=1 : f32[2,16,8] stage=0"
  cp "$CORPUS" "$T/text.txt"
  run run "$MODELS/fuji-test.json" --backend interp --target cpu "$@" --data "$T/text.txt" --steps 10
  expect_rc 0
  cp "$T/out" "$T/one.txt"
  run run "$MODELS/fuji-test.json" --backend interp --target cpu-2 --set '/mesh/shape=[2,1,1,1,1,1]' "$@" \
    --data "$T/text.txt" --steps 10
  expect_rc 0
  expect_in "$T/out" "step 10 loss"
  paste "$T/one.txt" "$T/out" | awk '{ d = $4 - $12; if (d < 0) d = -d; if ($2 != $10 || d > 1e-4) bad = 1; n++ }
    END { exit bad || n != 10 }' || { fail "interleaved trains differently from one process"; paste "$T/one.txt" "$T/out" >&2; }
  run ir "$MODELS/fuji-test.json" --target cpu-2 --set '/mesh/shape=[2,1,1,1,1,1]' "$@" \
    --set /input/global_batch_size=6 --set /learner/microbatches=3 --after pipeline
  expect_user_error "/learner/microbatches: the interleaved schedule runs microbatches in groups of pipeline = 2: 3 microbatches are not a multiple of 2"
  ;;
backends)
  run backends
  expect_rc 0
  expect_in "$T/out" "interp "
  expect_in "$T/out" "run: yes  compile: no"
  run --help
  expect_in "$T/out" "--backend NAME"
  ;;
memcheck)
  run memcheck "$MODELS/tiny-lm.json" --target cpu --plot "$T/mem.svg"
  expect_rc 0
  expect_in "$T/out" "verdict: fits, with"
  expect_in "$T/out" "saved activations"
  expect_in "$T/out" "largest values live at the peak:"
  expect_in "$T/out" "#feed_forward.linear1_0"
  expect_in "$T/mem.svg" "<polyline"
  expect_in "$T/mem.svg" "backward"
  python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$T/mem.svg" ||
    fail "the plot is not well-formed XML"
  # the per-device program of a sharded mesh, as JSON: fewer parameter bytes per device
  run memcheck "$MODELS/tiny-lm.json" --target cpu-4 --set '/mesh/shape=[1,1,1,4,1,1]' --json
  expect_rc 0
  python3 - "$T/out" <<'PY' || fail "memcheck --json on fsdp=4"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["devices"] == 4 and r["mesh"]["fsdp"] == 4, r["mesh"]
assert r["fits"] is True
b = r["breakdown_in_bytes"]
assert b["optimizer_state"] == 2 * b["parameters"], b
assert r["peak_memory_in_bytes"] >= r["argument_size_in_bytes"] + r["temp_size_in_bytes"] - 64 * 1024
assert r["bytes_sent"] > 0 and r["flops"] > 0
assert all(k in r for k in ("argument_size_in_bytes", "temp_size_in_bytes", "generated_code_size_in_bytes"))
PY
  # a job that cannot fit: the verdict, exit 1, and what was tried
  run memcheck "$MODELS/llama2-7b.json" --target cpu
  expect_rc 1
  expect_in "$T/out" "verdict: does not fit: over by"
  expect_in "$T/out" "what would fit"
  ;;
err_bad_target_count)
  # a device count that does not parse is refused by every command, never planned as 1 device
  for t in gpu-h100-0 cpu-0 gpu-h100-4xx gpu-h100-x gpu-h100-4x; do
    kind=${t%-*}
    for c in config params memcheck; do
      run $c "$MODELS/tiny-lm.json" --target $t
      expect_user_error "error: --target $t: bad device count \"${t##*-}\" (expected $kind-N with N a whole number >= 1"
    done
  done
  for c in "compile -o $T/trainer" "run --data $CORPUS"; do
    run $c "$MODELS/tiny-lm.json" --target cpu-0
    expect_user_error 'error: --target cpu-0: bad device count "0" (expected cpu-N with N a whole number >= 1'
    run $c "$MODELS/tiny-lm.json" --target gpu-h100-4x
    expect_rc 1
  done
  [ ! -e "$T/trainer" ] || fail "a trainer was written for a bad target"
  # a kind of the device table then a count that is no number, under rules with a catch-all:
  # refused, not read as one device of an unknown kind "gpu-h100-abc"
  printf '{"base": "%s", "mesh_rules": [{"match": ".*", "modifiers": []}]}\n' "$MODELS/tiny-lm.json" > "$T/catchall.json"
  for t in gpu-h100-abc tpu-v4-abc opencl-abc cpu-x; do
    kind=${t%-*}
    for c in config params memcheck; do
      run $c "$T/catchall.json" --target $t
      expect_user_error "error: --target $t: bad device count \"${t##*-}\" (expected $kind-N with N a whole number >= 1"
    done
  done
  run params "$T/catchall.json" --target interp
  expect_rc 0
  run params "$MODELS/tiny-lm.json" --target cpu-4
  expect_rc 0
  expect_in "$T/out" "on a mesh of 4 devices"
  ;;
memcheck_microbatches)
  # llama2-7b on gpu-h100-256 as fsdp=32 x model=8 with 128 sequences per device is over; 2
  # microbatches (the smallest count that fits) is offered, and with 4 the saved activations
  # are a quarter
  mesh="/mesh/shape=[1,1,1,32,1,8]"
  run memcheck "$MODELS/llama2-7b.json" --target gpu-h100-256 --set "$mesh" \
    --set /input/global_batch_size=4096
  expect_rc 1
  expect_in "$T/out" "--set '/learner/microbatches=2': peak"
  mv "$T/out" "$T/mb1"
  run memcheck "$MODELS/llama2-7b.json" --target gpu-h100-256 --set "$mesh" \
    --set /input/global_batch_size=4096 --set /learner/microbatches=4
  expect_rc 0
  expect_in "$T/out" "verdict: fits"
  python3 - "$T/mb1" "$T/out" <<'PY' || fail "saved activations do not fall by about 4"
import re, sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def saved(path):
    m = re.search(r"saved activations +([0-9.]+) (B|KiB|MiB|GiB)", open(path).read())
    return float(m.group(1)) * units[m.group(2)]
r = saved(sys.argv[1]) / saved(sys.argv[2])
print(f"saved activations {r:.2f}x less with 4 microbatches")
assert 3.5 < r < 4.5, r
PY
  # a count that does not divide each device's part of the batch
  run memcheck "$MODELS/tiny-lm.json" --target cpu-4 --set '/mesh/shape=[1,4,1,1,1,1]' \
    --set /learner/microbatches=4
  expect_user_error "error: --set: /learner/microbatches: 4 microbatches do not divide the per-device batch: global batch size 8 over the mesh's batch axes (data x expert x fsdp = 4 devices) leaves 2 sequences per device (expected a divisor of 2)"
  ;;
memcheck_recipes)
  # the published recipes of docs/memcheck.md ("Published recipes"), each a known-good job:
  # every verdict is "fits" (exit 0), with the shipped rules or the recipe's mesh
  recipe() {
    run memcheck "$@"
    expect_rc 0
    expect_in "$T/out" "verdict: fits"
  }
  # AXLearn Llama2-7B on 256 H100 (the fuji.py rule: data x fsdp=8, q/k/v/o saved)
  recipe "$MODELS/llama2-7b.json" --target gpu-h100-256
  # MaxText Llama2-7B on 8 H100: fsdp=8, 4 sequences of 4096 per GPU, q/k/v and context saved
  # (the rule for 8 GPUs accumulates 8 microbatches of the model's 1024 sequences; the recipe none)
  recipe "$MODELS/llama2-7b.json" --target gpu-h100-8 --set '/mesh/shape=[1,1,1,8,1,1]' \
    --set /input/global_batch_size=32 --set /learner/microbatches=1 --set /precision/compute=bf16 \
    --set '/model/decoder/remat_policy={"save": ["transformer_layer\\.input", "attention\\.(q|k|v)_proj", "attention\\.context"]}'
  # Llama2-70B on 64 H100: fsdp=64, full remat, 1 sequence per GPU
  recipe "$MODELS/llama2-70b.json" --target gpu-h100-64 --set '/mesh/shape=[1,1,1,64,1,1]' \
    --set /input/global_batch_size=64 --set /learner/microbatches=1 --set /precision/compute=bf16 \
    --set /model/decoder/remat_policy=full
  # AXLearn's 70B rule on tpu-v5p-1024 (512 chips)
  recipe "$MODELS/llama2-70b.json" --target tpu-v5p-1024
  # mixtral-8x7b on 256 H100 with expert parallelism (rules/moe.json: expert=8 x fsdp=32)
  recipe "$MODELS/mixtral-8x7b.json" --target gpu-h100-256
  ;;
memcheck_gpu_nodes)
  # the shipped rules cover one node (8 GPUs), 16, 32 and 64 for every model (docs/memcheck.md,
  # "One node to 64 GPUs"): each model's mesh, peak per device (GiB, within 1%; mesh axes above 1, comma-separated) and verdict, or
  # the error that names what does not divide
  while read -r model n mesh peak verdict; do
    run memcheck "$MODELS/$model.json" --target "gpu-h100-$n" --json
    case $mesh in
    error:*)
      expect_user_error "$(printf '%s' "$mesh $peak $verdict" | sed 's/^error://')"
      continue ;;
    esac
    case $verdict in fits) expect_rc 0 ;; *) expect_rc 1 ;; esac
    python3 - "$T/out" "$model" "$n" "$mesh" "$peak" "$verdict" <<'PY' || fail "$model on gpu-h100-$n"
import json, sys
path, model, n, mesh, peak, verdict = sys.argv[1:]
r = json.load(open(path))
got = ",".join("%s=%d" % (a, k) for a, k in r["mesh"].items() if k > 1)
gib = r["peak_memory_in_bytes"] / 2**30
ok = got == mesh and abs(gib - float(peak)) <= 0.01 * float(peak) and r["fits"] == (verdict == "fits")
if not ok:
    print(f"{model} on gpu-h100-{n}: mesh {got}, peak {gib:.2f} GiB, fits {r['fits']}; "
          f"expected {mesh}, {peak} GiB, {verdict}")
sys.exit(0 if ok else 1)
PY
  done <<'EOF'
llama2-7b 8 fsdp=8 55.92 fits
llama2-7b 16 data=2,fsdp=8 34.33 fits
llama2-7b 32 data=4,fsdp=8 41.09 fits
llama2-7b 64 data=8,fsdp=8 41.09 fits
fuji-7b 8 fsdp=8 55.13 fits
fuji-7b 16 data=2,fsdp=8 33.64 fits
fuji-7b 32 data=4,fsdp=8 32.81 fits
fuji-7b 64 data=8,fsdp=8 32.78 fits
fuji-1b 8 fsdp=8 73.04 over
fuji-1b 16 data=2,fsdp=8 55.13 fits
fuji-1b 32 data=4,fsdp=8 27.58 fits
fuji-1b 64 data=8,fsdp=8 27.58 fits
llama2-70b 8 fsdp=8 405.24 over
llama2-70b 16 fsdp=16 199.64 over
llama2-70b 32 fsdp=32 57.39 fits
llama2-70b 64 fsdp=64 52.76 fits
fuji-70b 8 fsdp=8 405.24 over
fuji-70b 16 fsdp=16 202.64 over
fuji-70b 32 fsdp=32 57.43 fits
fuji-70b 64 fsdp=64 51.81 fits
mixtral-8x7b 8 expert=8 385.63 over
mixtral-8x7b 16 expert=8,fsdp=2 186.79 over
mixtral-8x7b 32 expert=8,fsdp=4 65.93 fits
mixtral-8x7b 64 expert=8,fsdp=8 49.09 fits
gpt2-124m 8 fsdp=8 51.40 fits
gpt2-124m 16 data=2,fsdp=8 18.41 fits
gpt2-124m 32 data=4,fsdp=8 9.36 fits
gpt2-124m 64 data=8,fsdp=8 4.86 fits
tiny-lm 8 data=8 0.00627 fits
words-lm 8 data=8 0.0207 fits
words-lm 16 data=16 0.0277 fits
fuji-test 8 error:models/rules/llama.json: /learner/microbatches: 8 microbatches do not divide the per-device batch: global batch size 8 over the mesh's batch axes (data x expert x fsdp = 8 devices) leaves 1 sequences per device (expected a divisor of 1; --set /learner/microbatches=1 overrides it)
moe-test 8 error:models/rules/llama.json: /learner/microbatches: 8 microbatches do not divide the per-device batch: global batch size 8 over the mesh's batch axes (data x expert x fsdp = 8 devices) leaves 1 sequences per device (expected a divisor of 1; --set /learner/microbatches=1 overrides it)
fuji-test 16 error:models/fuji-test.json: /input/global_batch_size: global batch size 8 does not divide over the mesh's batch axes (data x expert x fsdp = 16 devices; expected a multiple of 16)
moe-test 64 error:models/moe-test.json: /input/global_batch_size: global batch size 8 does not divide over the mesh's batch axes (data x expert x fsdp = 64 devices; expected a multiple of 64)
tiny-lm 16 error:models/tiny-lm.json: /input/global_batch_size: global batch size 8 does not divide over the mesh's batch axes (data x expert x fsdp = 16 devices; expected a multiple of 16)
words-lm 32 error:models/words-lm.json: /input/global_batch_size: global batch size 16 does not divide over the mesh's batch axes (data x expert x fsdp = 32 devices; expected a multiple of 32)
EOF
  # the text report: a verdict on one node, and for one that does not fit, the fix that does
  run memcheck "$MODELS/llama2-7b.json" --target gpu-h100-8
  expect_rc 0
  expect_in "$T/out" "mesh: fsdp=8; fusion plan: opencl"
  expect_in "$T/out" "verdict: fits, with 23.99 GiB headroom of 80.00 GiB"
  run memcheck "$MODELS/fuji-1b.json" --target gpu-h100-8
  expect_rc 1
  expect_in "$T/out" "verdict: does not fit: a tensor of 32.00 GiB is larger than the device's largest buffer, 19.56 GiB (max_alloc in the device table)"
  expect_in "$T/out" "32.00 GiB  saved activation  f32[8,8192,131072] dot_general  /model  #lm_head.logits"
  expect_in "$T/out" "--set '/learner/microbatches=16': peak 55.22 GiB"
  # the node-style names take the same rules
  run config "$MODELS/llama2-70b.json" --target gpu-h100-8x8
  expect_rc 0
  expect_in "$T/err" 'note: target gpu-h100-8x8 matched mesh rule "gpu-(h100|h200|b200|a100-80gb)-(8|16|32|64|8x2|8x4|8x8)"'
  # the gpt family's rule takes every GPU kind the other families do, not the H100 alone
  for t in gpu-h200-8:fsdp=8:86.42 gpu-a100-80gb-16:data=2\ fsdp=8:61.58 \
           gpu-b200-64:data=8\ fsdp=8:162.77; do
    kind=${t%%:*} rest=${t#*:}
    run memcheck "$MODELS/gpt2-124m.json" --target "$kind"
    expect_rc 0
    expect_in "$T/out" "mesh: ${rest%%:*}; fusion plan: opencl"
    expect_in "$T/out" "verdict: fits, with ${rest#*:} GiB headroom"
  done
  ;;
memcheck_mpi_heap)
  # under MPI the plan counts the collectives' scratch (rounds of 1 MiB, whatever the tensor) and
  # the MPI library's own heap, each on a line of its own, and the peak holds them
  run memcheck "$MODELS/tiny-lm.json" --target cpu-2 --set '/mesh/shape=[1,2,1,1,1,1]'
  expect_rc 0
  expect_in "$T/out" "  slab                    5.24 MiB  (every buffer of the step at its planned offset)"
  expect_in "$T/out" "  communication         128.00 KiB  (scratch of the collectives, rounds of 1.00 MiB)"
  expect_in "$T/out" "  MPI library             3.37 MiB  (its own heap, as measured with Open MPI)"
  expect_in "$T/out" "  peak                    8.74 MiB  (the slab and these two;"
  # gpt2-124m at data=2: the 147 MiB embedding gradient's all_reduce takes 2 slots of 1 MiB
  run memcheck "$MODELS/gpt2-124m.json" --target cpu-2 --set '/mesh/shape=[1,2,1,1,1,1]' \
    --set /input/global_batch_size=4 --set /input/seq_len=64 --json
  expect_rc 0
  python3 - "$T/out" <<'PY' || fail "memcheck's MPI lines on gpt2-124m"
import json, sys
r = json.load(open(sys.argv[1]))
b = r["breakdown_in_bytes"]
assert b["communication_scratch"] == 2 << 20, b
assert b["mpi_library"] == 3450 * 1024, b
assert r["peak_memory_in_bytes"] == r["slab_in_bytes"] + b["communication_scratch"] + b["mpi_library"], r
PY
  # one device: no MPI, no collectives, the peak is the slab
  run memcheck "$MODELS/tiny-lm.json" --target cpu --json
  expect_rc 0
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); b=r['breakdown_in_bytes']; assert b['communication_scratch']==0 and b['mpi_library']==0 and r['peak_memory_in_bytes']==r['slab_in_bytes'], r" "$T/out" \
    || fail "memcheck on one device counts MPI"
  ;;
memcheck_mesh_fixes)
  # tiny-lm on data=2 x model=2 over a device a little too small: among the fixes, the data
  # axis's devices moved onto fsdp; the axes are found by their roles, so a mesh that lists
  # them in another order gets the same fix in its own order
  printf '{"cpu": {"doc": "small", "memory": 7500000, "flops": {"f32": 1e11, "bf16": 1e11}, "memory_bandwidth": 1e10, "link_bandwidth": 1e10}}' > "$T/dev.json"
  run memcheck "$MODELS/tiny-lm.json" --target cpu-4 --devices "$T/dev.json" --set '/mesh/shape=[1,2,1,1,1,2]'
  expect_rc 1
  expect_in "$T/out" "--set '/mesh/sequence_parallel=true': peak"
  expect_in "$T/out" "--set '/mesh/shape=[1,1,1,2,1,2]': peak 7.13 MiB"
  run memcheck "$MODELS/tiny-lm.json" --target cpu-4 --devices "$T/dev.json" \
    --set '/mesh/axes=["model", "data", "fsdp", "pipeline", "expert", "seq"]' --set '/mesh/shape=[2,2,1,1,1,1]'
  expect_rc 1
  expect_in "$T/out" "--set '/mesh/shape=[2,1,2,1,1,1]': peak 7.13 MiB"
  ;;
memcheck_sequence_parallel)
  # a device whose memory lies between fuji-test's peak on model=2 and its peak under sequence
  # parallelism: the fix list offers it, and with it (the shipped modifier) the job fits
  printf '{"cpu": {"doc": "small", "memory": 6050000, "flops": {"f32": 1e11, "bf16": 1e11}, "memory_bandwidth": 1e10, "link_bandwidth": 1e10}}' > "$T/dev.json"
  set -- --target cpu-2 --devices "$T/dev.json" --set '/mesh/shape=[1,1,1,1,1,2]'
  run memcheck "$MODELS/fuji-test.json" "$@"
  expect_rc 1
  expect_in "$T/out" "--set '/mesh/sequence_parallel=true': peak"
  run memcheck "$MODELS/fuji-test.json" "$@" --apply sequence-parallel
  expect_rc 0
  expect_in "$T/out" "verdict: fits"
  # a sequence that does not divide over seq, or its chunks over model
  run memcheck "$MODELS/fuji-test.json" --target cpu-2 --set '/mesh/shape=[1,1,1,1,2,1]' \
    --set /input/seq_len=15
  expect_user_error "/input/seq_len: seq_len 15 does not divide over the mesh's seq axis (2 devices; expected a multiple of 2)"
  run memcheck "$MODELS/fuji-test.json" --target cpu-4 --set '/mesh/shape=[1,1,1,1,2,2]' \
    --set /input/seq_len=6 --set /mesh/sequence_parallel=true
  expect_user_error "/mesh/sequence_parallel: sequence parallelism splits each device's 3 positions (seq_len 6 over seq = 2) over model = 2, which does not divide them (expected a seq_len that is a multiple of 4)"
  # the balanced order cuts the sequence in 2 x seq chunks, and does not take sequence_parallel
  run memcheck "$MODELS/fuji-test.json" --target cpu-2 --set '/mesh/shape=[1,1,1,1,2,1]' \
    --set /input/seq_len=6 --set /mesh/seq_order=balanced
  expect_user_error "/input/seq_len: seq_order balanced cuts seq_len 6 into 2 x 2 chunks, which does not divide it (expected a multiple of 4)"
  run memcheck "$MODELS/fuji-test.json" --target cpu-4 --set '/mesh/shape=[1,1,1,1,2,2]' \
    --set /mesh/seq_order=balanced --set /mesh/sequence_parallel=true
  expect_user_error "/mesh/seq_order: seq_order balanced with sequence_parallel is not supported (the sequence would split over model inside seq's chunks; expected \"contiguous\")"
  run memcheck "$MODELS/fuji-test.json" --target cpu-2 --set '/mesh/shape=[1,1,1,1,2,1]' \
    --set /mesh/seq_order=zigzag
  expect_rc 1
  expect_in "$T/err" "/mesh/seq_order"
  # the balanced order's bound: every device's queries see as many keys
  run memcheck "$MODELS/llama2-7b.json" --target gpu-h100-256 --set '/mesh/shape=[1,1,1,32,8,1]'
  expect_rc 0
  expect_in "$T/out" "lower bound on the step time: 907.79 ms"
  run memcheck "$MODELS/llama2-7b.json" --target gpu-h100-256 --set '/mesh/shape=[1,1,1,32,8,1]' \
    --set /mesh/seq_order=balanced
  expect_rc 0
  expect_in "$T/out" "lower bound on the step time: 837.75 ms"
  ;;
memcheck_errors)
  run memcheck "$MODELS/tiny-lm.json"
  expect_user_error "axlc memcheck needs --target"
  run memcheck "$MODELS/tiny-lm.json" --target nosuch-8
  expect_rc 1
  expect_in "$T/err" 'no mesh rule matches --target nosuch-8 (the rules match "cpu(-[0-9]+)?", "opencl(-.*)?", "gpu-.*-[0-9]+"; device kinds: cpu, opencl, gpu-a100-40gb'
  run memcheck "$MODELS/tiny-lm.json" --target nosuch-8 --set '/mesh/shape=[1,-1,1,1,1,1]'
  expect_rc 1
  expect_in "$T/err" 'no device kind "nosuch" for --target nosuch-8 (expected one of: cpu, opencl, gpu-a100-40gb'
  printf '{"cpu": {"memory": -3}}' > "$T/dev.json"
  run memcheck "$MODELS/tiny-lm.json" --target cpu --devices "$T/dev.json"
  expect_rc 1
  expect_in "$T/err" "/cpu/memory: expected a positive number"
  run memcheck "$MODELS/tiny-lm.json" --target cpu --devices "$T/missing.json"
  expect_rc 1
  expect_in "$T/err" "missing.json"
  ;;
memcheck_pipeline)
  # a pipeline: each stage planned on its own in the schedule's order, the worst one reported,
  # the schedule's live microbatches, the bubble in the step-time bound (docs/pipeline.md)
  pp='--set /mesh/shape=[2,1,1,1,1,1] --set /learner/microbatches=8'
  run memcheck "$MODELS/tiny-lm.json" --target cpu-2 $pp --set /mesh/pipeline_schedule=gpipe
  expect_rc 0
  expect_in "$T/out" "pipeline: 2 stages, gpipe schedule, 8 microbatches; each stage planned on its own"
  expect_in "$T/out" "  stage 0: peak 7.25 MiB, parameters 289.00 KiB, saved activations 2.70 MiB of 8 microbatches (the schedule keeps 8)"
  expect_in "$T/out" "  stage 1: peak 7.83 MiB, parameters 257.50 KiB, saved activations 3.47 MiB of 8 microbatches (the schedule keeps 8)  <- the largest, below"
  expect_in "$T/out" "per device of stage 1:"
  expect_in "$T/out" "(P-1)/(M+P-1) = 1/9 of the step, idle)"
  ! grep -q "an upper bound" "$T/out" || fail "the note of one plan for every stage is back"
  run memcheck "$MODELS/tiny-lm.json" --target cpu-2 $pp --set /mesh/pipeline_schedule=1f1b
  expect_rc 0
  expect_in "$T/out" "pipeline: 2 stages, 1f1b schedule, 8 microbatches"
  expect_in "$T/out" "  stage 0: peak 5.50 MiB, parameters 289.00 KiB, saved activations 660.50 KiB of 2 microbatches (the schedule keeps 2)  <- the largest, below"
  expect_in "$T/out" "  stage 1: peak 4.80 MiB, parameters 257.50 KiB, saved activations 291.06 KiB of 1 microbatch (the schedule keeps 1)"
  # the plot is the worst stage's, and says which
  run memcheck "$MODELS/tiny-lm.json" --target cpu-2 $pp --set /mesh/pipeline_schedule=1f1b --plot "$T/p.svg"
  expect_rc 0
  expect_in "$T/p.svg" "(peak 2.10 MiB, stage 0 of 2)</text>"
  # the bound: the slowest stage's busy time x (M + P - 1) / M
  run memcheck "$MODELS/tiny-lm.json" --target cpu-2 $pp --json
  expect_rc 0
  python3 - "$T/out" <<'PY' || fail "memcheck --json of a pipeline"
import json, sys
r = json.load(open(sys.argv[1]))
p = r["pipeline"]
assert (p["stages"], p["schedule"], p["microbatches"], p["worst_stage"]) == (2, "gpipe", 8, 1), p
assert abs(p["bubble"] - 1 / 9) < 1e-12, p["bubble"]
busy = max(max(s["flops"] / 1.45e11, s["bytes_sent"] / 1e10) for s in p["per_stage"])
assert abs(r["step_time_lower_bound_s"] - busy * 9 / 8) < 1e-9 * busy, (r["step_time_lower_bound_s"], busy)
assert [s["live_microbatches"] for s in p["per_stage"]] == [8, 8], p["per_stage"]
assert r["peak_memory_in_bytes"] == p["per_stage"][1]["peak_memory_in_bytes"]
PY
  # a mesh rule sets the pipeline and its schedule per target
  cat > "$T/pp.json" <<EOF
{"base": "$MODELS/tiny-lm.json",
 "mesh_rules": [
   {"match": "cpu-2", "modifiers": [{"kind": "mesh", "shape": [2, 1, 1, 1, 1, 1], "schedule": "1f1b"},
                                    {"kind": "microbatch", "microbatches": 8}]},
   {"match": "cpu-4", "modifiers": [{"kind": "mesh", "shape": [2, 2, 1, 1, 1, 1]},
                                    {"kind": "microbatch", "microbatches": 1}]}]}
EOF
  run memcheck "$T/pp.json" --target cpu-2
  expect_rc 0
  expect_in "$T/out" "mesh: pipeline=2; fusion plan: llvm"
  expect_in "$T/out" "pipeline: 2 stages, 1f1b schedule, 8 microbatches"
  # the config errors of a pipeline stop memcheck too, naming the path and the numbers
  run memcheck "$T/pp.json" --target cpu-4
  expect_user_error "pp.json: /learner/microbatches: pipeline = 2 stages need at least 2 microbatches to feed them (got 1)"
  run memcheck "$MODELS/fuji-test.json" --target cpu-3 --set '/mesh/shape=[3,1,1,1,1,1]' \
    --set /learner/microbatches=4
  expect_user_error "/mesh/shape: pipeline = 3 stages do not divide /model/decoder/num_layers = 4 (expected a multiple of 3, or /mesh/pipeline_cuts)"
  run memcheck "$MODELS/tiny-lm.json" --target cpu-4 --set '/mesh/shape=[4,1,1,1,1,1]' \
    --set /learner/microbatches=4
  expect_user_error "/mesh/shape: pipeline = 4 stages need a decoder of at least 4 layers (/model/decoder/num_layers is 2)"
  ;;
memcheck_pipeline_recipe)
  # NeMo's Llama2-70B on 64 H100 (docs/memcheck.md, "Published recipes"): TP4 x PP4 x DP4,
  # 128 sequences of 4096, 1 a microbatch (32 a data replica), sequence parallelism, 1F1B
  nemo="--target gpu-h100-64 --set /input/global_batch_size=128 --set /learner/microbatches=32
    --set /mesh/pipeline_schedule=1f1b --set /precision/compute=bf16 --set /mesh/sequence_parallel=true
    --set /model/decoder/remat_policy=full"
  # the data axis keeps every replica's f32 masters and AdamW moments: over
  run memcheck "$MODELS/llama2-70b.json" $nemo --set '/mesh/shape=[4,4,1,1,1,4]' --json
  expect_rc 1
  python3 - "$T/out" <<'PY' || fail "NeMo Llama2-70B, data=4"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["mesh"]["pipeline"] == 4 and r["mesh"]["data"] == 4 and r["mesh"]["model"] == 4, r["mesh"]
assert not r["fits"], r["fits"]
gib = (r["peak_memory_in_bytes"] + r["generated_code_size_in_bytes"]) / 2**30
assert abs(gib - 87.69) < 0.9, gib
assert [s["schedule_live_microbatches"] for s in r["pipeline"]["per_stage"]] == [4, 3, 2, 1]
PY
  # the replicas' optimizer shards, as NeMo's distributed optimizer keeps them: fsdp=4 fits
  run memcheck "$MODELS/llama2-70b.json" $nemo --set '/mesh/shape=[4,1,1,4,1,4]'
  expect_rc 0
  expect_in "$T/out" "mesh: pipeline=4 fsdp=4 model=4; fusion plan: opencl"
  expect_in "$T/out" "pipeline: 4 stages, 1f1b schedule, 32 microbatches"
  expect_in "$T/out" "  stage 0: peak 23.64 GiB, parameters 4.05 GiB, saved activations 3.28 GiB of 4 microbatches (the schedule keeps 4)  <- the largest, below"
  expect_in "$T/out" "verdict: fits, with 56.14 GiB headroom of 80.00 GiB"
  expect_in "$T/out" "lower bound on the step time: 4.93 s"
  expect_in "$T/out" "(P-1)/(M+P-1) = 3/35 of the step, idle)"
  # NeMo's own schedule: interleaved, 20 chunks of one layer per stage; about as much memory,
  # the bubble 20 times smaller
  run memcheck "$MODELS/llama2-70b.json" $nemo --set '/mesh/shape=[4,1,1,4,1,4]' \
    --set /mesh/pipeline_schedule=interleaved --set /mesh/pipeline_virtual=20
  expect_rc 0
  expect_in "$T/out" "pipeline: 4 stages, interleaved schedule, 32 microbatches"
  expect_in "$T/out" "  stage 0: peak 23.72 GiB, parameters 4.05 GiB, saved activations 3.33 GiB of 4 microbatches  <- the largest, below"
  expect_in "$T/out" "verdict: fits, with 56.05 GiB headroom of 80.00 GiB"
  expect_in "$T/out" "lower bound on the step time: 4.53 s"
  expect_in "$T/out" "(P-1)/(VM+P-1) = 3/643 of the step, idle)"
  ;;
memcheck_matches_trainer)
  # the prediction is the trainer's planned slab; what it measures is within 5%; remat lowers both
  cp "$CORPUS" "$T/text.txt"
  for policy in none full; do
    set -- --target cpu --set /input/seq_len=32 --set /input/global_batch_size=4 \
      --set "/model/decoder/remat_policy=\"$policy\""
    run memcheck "$MODELS/tiny-lm.json" "$@" --json
    expect_rc 0
    cp "$T/out" "$T/mem-$policy.json"
    run run "$MODELS/tiny-lm.json" "$@" --data "$T/text.txt" --steps 2 --threads 1
    expect_rc 0
    expect_in "$T/out" "memory: predicted"
    python3 - "$T/mem-$policy.json" "$T/out" "$policy" <<'PY' || fail "memcheck vs trainer ($policy)"
import json, re, sys
r = json.load(open(sys.argv[1]))
line = [l for l in open(sys.argv[2]) if "memory: predicted" in l][0]
pred, meas = (float(x) for x in re.search(r"predicted ([0-9.]+) MiB.*measured ([0-9.]+) MiB", line).groups())
want = r["peak_memory_in_bytes"] / 1048576
assert abs(pred - want) < 0.01, (pred, want)
assert abs(meas - pred) <= 0.05 * pred, (meas, pred)
print("%s: memcheck %.2f MiB, trainer measured %.2f MiB (%+.2f%%)" % (sys.argv[3], want, meas, 100 * (meas - pred) / pred))
PY
  done
  python3 -c "import json,sys; a,b=(json.load(open(f))['peak_memory_in_bytes'] for f in sys.argv[1:]); assert b < a, (a, b)" \
    "$T/mem-none.json" "$T/mem-full.json" || fail "remat full does not lower the predicted peak"
  # microbatches of 2 sequences, 2 and 8 of them: the prediction still holds, and the heap the
  # trainer measures grows by the batch alone (16 rows of ids and targets, and their reshape:
  # 8 KiB), not by a whole gradient per microbatch (0.24 MiB each: 6.17 MiB with 8 when every
  # microbatch's gradient stayed alive to the step's end)
  for n in 2 8; do
    set -- --target cpu --set /input/seq_len=32 --set "/input/global_batch_size=$((2 * n))" \
      --set "/learner/microbatches=$n"
    run memcheck "$MODELS/tiny-lm.json" "$@" --json
    expect_rc 0
    cp "$T/out" "$T/mem-mb$n.json"
    run run "$MODELS/tiny-lm.json" "$@" --data "$T/text.txt" --steps 2 --threads 1
    expect_rc 0
    grep "memory: predicted" "$T/out" > "$T/run-mb$n" || fail "no memory line with $n microbatches"
  done
  python3 - "$T" <<'PY' || fail "memcheck vs trainer with microbatches"
import json, re, sys
meas = {}
for n in (2, 8):
    r = json.load(open("%s/mem-mb%d.json" % (sys.argv[1], n)))
    line = open("%s/run-mb%d" % (sys.argv[1], n)).read()
    pred, meas[n] = (float(x) for x in re.search(r"predicted ([0-9.]+) MiB.*measured ([0-9.]+) MiB", line).groups())
    want = r["peak_memory_in_bytes"] / 1048576
    assert abs(pred - want) < 0.01, (n, pred, want)
    assert abs(meas[n] - pred) <= 0.05 * pred, (n, meas[n], pred)
    print("%d microbatches: memcheck %.2f MiB, trainer measured %.2f MiB" % (n, want, meas[n]))
assert meas[8] - meas[2] <= 0.1, meas
PY
  ;;
compile_link_full_disk)
  # the linker's "No space left on device" is reported as a full disk, not as missing packages
  "$AXLC" backends | grep -q "^llvm .*trainer executables" || { echo "SKIP: no LLVM backend"; exit 77; }
  small="--set /model/decoder/num_layers=1 --set /model/dim=8
    --set /model/decoder/layer/self_attention/num_heads=1 --set /input/seq_len=4
    --set /input/global_batch_size=1"
  printf '#!/bin/sh\necho "/usr/bin/ld: final link failed: No space left on device" >&2\nexit 1\n' > "$T/full-cc"
  printf '#!/bin/sh\necho "/usr/bin/ld: cannot find -lopenblas" >&2\nexit 1\n' > "$T/bad-cc"
  chmod +x "$T/full-cc" "$T/bad-cc"
  # shellcheck disable=SC2086
  CC="$T/full-cc" && export CC && run compile "$MODELS/tiny-lm.json" --target cpu -o "$T/trainer" $small
  expect_user_error "error: $T/trainer: linking the trainer with $T/full-cc failed: No space left on device (the linker's message above); free space where the trainer is written and in TMPDIR"
  expect_in "$T/err" "/usr/bin/ld: final link failed: No space left on device"
  ! grep -q "libopenblas-dev" "$T/err" || fail "a full disk blamed on missing packages"
  # the file-size limit (ulimit -f); a full disk said first, then buried under a crash report
  printf '#!/bin/sh\necho "ld.lld: error: failed to open x: File too large" >&2\nexit 1\n' > "$T/big-cc"
  cat > "$T/crash-cc" <<'SH'
#!/bin/sh
echo "LLVM ERROR: IO failure on output stream: No space left on device" >&2
i=0
while [ $i -lt 200 ]; do echo "#$i 0x00007f llvm::sys::PrintStackTrace(llvm::raw_ostream&)" >&2; i=$((i + 1)); done
exit 1
SH
  chmod +x "$T/big-cc" "$T/crash-cc"
  # shellcheck disable=SC2086
  CC="$T/big-cc" && run compile "$MODELS/tiny-lm.json" --target cpu -o "$T/trainer" $small
  expect_user_error "failed: File too large (the linker's message above): the trainer is larger than the file-size limit (ulimit -f)"
  # shellcheck disable=SC2086
  CC="$T/crash-cc" && run compile "$MODELS/tiny-lm.json" --target cpu -o "$T/trainer" $small
  expect_user_error "failed: No space left on device (the linker's message above)"
  # shellcheck disable=SC2086
  CC="$T/bad-cc" && run compile "$MODELS/tiny-lm.json" --target cpu -o "$T/trainer" $small
  unset CC
  expect_user_error "linking the trainer with $T/bad-cc failed (it needs libopenblas-dev and libjson-c-dev)"
  expect_in "$T/err" "cannot find -lopenblas"
  ;;
compile_refuses_too_big)
  run compile "$MODELS/llama2-7b.json" --target cpu -o "$T/trainer"
  expect_rc 1
  expect_in "$T/err" "error: the job does not fit --target cpu (compile anyway with --no-memcheck)"
  expect_in "$T/err" "verdict: does not fit"
  [ ! -e "$T/trainer" ] || fail "a trainer was written"
  ;;
plot)
  # 60 steps of metrics as a trainer writes them: eval every 20 steps, a non-finite grad_norm
  awk 'BEGIN { for (i = 1; i <= 60; i++) {
    printf "{\"step\": %d, \"loss\": %.6f, \"grad_norm\": %s, \"lr\": %.6g, \"tokens_per_s\": %.1f, \"step_ms\": 1.0%s}\n",
      i, 2.5 + 3 * exp(-i / 15), i == 33 ? "null" : sprintf("%.4f", 1 + 0.5 * sin(i)),
      i <= 10 ? 0.003 * i / 10 : 0.003 * (1 - (i - 10) / 60), 30000 + 500 * (i % 7),
      i % 20 == 0 ? sprintf(", \"eval_loss\": %.6f", 2.7 + 3 * exp(-i / 15)) : "" } }' > "$T/m.jsonl"
  run plot "$T/m.jsonl" -o "$T/m.svg"
  expect_rc 0
  expect_empty "$T/err"
  for x in ">loss<" ">learning rate<" ">gradient norm (before clipping)<" ">tokens per second<" \
           ">eval_loss<" "m.jsonl: 60 steps (1 to 60)" ">step<"; do
    expect_in "$T/m.svg" "$x"
  done
  ! grep -q "goodput" "$T/m.svg" || fail "a goodput panel without goodput in the file"
  # goodput and MFU, where the file has them: a fifth panel, in percent, MFU dashed
  awk 'BEGIN { for (i = 1; i <= 30; i++)
    printf "{\"step\": %d, \"loss\": 3, \"tokens_per_s\": 1, \"mfu\": %.3f, \"goodput\": %.3f}\n",
      i, 0.25 + 0.01 * (i % 3), 0.5 + i / 100 }' > "$T/g.jsonl"
  run plot "$T/g.jsonl" -o "$T/g.svg"
  expect_rc 0
  for x in ">goodput (solid) and MFU (dashed), %<" ">goodput<" ">mfu<" "stroke-dasharray"; do
    expect_in "$T/g.svg" "$x"
  done
  /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
lines = [e for e in E.parse(sys.argv[1]).getroot().iter() if e.get("stroke") == "#8c564b" and e.get("points")]
assert len(lines) == 1, len(lines)' "$T/g.svg" || fail "goodput: expected one line"
  grep -q "height='1324'" "$T/g.svg" || fail "goodput: not 5 panels: $(grep -o "height='[0-9]*'" "$T/g.svg" | head -1)"
  # the null grad_norm at step 33 splits its line in two, and the panel counts it
  [ "$(grep -c "polyline fill='none' stroke='#d62728'" "$T/m.svg")" -eq 2 ] || fail "grad_norm: expected 2 lines"
  expect_in "$T/m.svg" ">1 value not finite: not drawn<"
  # svg_ok FILE: well-formed XML (python3's parser), an svg, no NaN or Infinity in it
  svg_ok() {
    /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
assert E.parse(sys.argv[1]).getroot().tag.endswith("svg")' "$1" 2> "$T/xml.err" ||
      fail "$1 is not a well-formed SVG: $(tail -1 "$T/xml.err")"
    ! grep -qiE "nan|inf" "$1" || fail "$1 has NaN or Infinity: $(grep -iE -m3 "nan|inf" "$1")"
  }
  svg_ok "$T/m.svg"
  # hostile values: +-1e308 (their difference is over DBL_MAX), NaN and Infinity (json-c reads
  # them), 1e999, a tiny value, steps near 2^63 that doubles cannot tell apart; a name with a
  # control character and bytes that are not UTF-8
  h="$T/h$(printf '\001\377')<&.jsonl"
  printf '%s\n' '{"step": 1, "loss": 1e308, "grad_norm": NaN, "lr": Infinity, "tokens_per_s": 1}' \
    '{"step": 2, "loss": -1e308, "grad_norm": -Infinity, "lr": 1e999, "tokens_per_s": 1}' \
    '' '{"step": 3, "loss": 2.5, "eval_loss": 4.9e-324, "tokens_per_s": 1.0000000000000002}' > "$h"
  run plot "$h" -o "$T/h.svg"
  expect_rc 0
  svg_ok "$T/h.svg"
  expect_in "$T/h.svg" ">2 values not finite: not drawn<" # the lr panel
  printf '%s\n' '{"step": 9223372036854775806, "loss": 1}' '{"step": 9223372036854775807, "loss": 1}' \
    > "$T/s.jsonl"
  run plot "$T/s.jsonl" -o "$T/s.svg"
  expect_rc 0
  svg_ok "$T/s.svg"
  # 200000 steps: thinned to what the panel can show, so the SVG's size does not grow with
  # the file; a spike stays in (the largest value of its pixel column is always drawn)
  awk 'BEGIN { for (i = 1; i <= 200000; i++)
    printf "{\"step\": %d, \"loss\": %s, \"lr\": 0.001, \"grad_norm\": %s, \"tokens_per_s\": 30000}\n",
      i, i == 123457 ? "99.5" : sprintf("%.4f", 3 + sin(i / 999)), i % 1000 ? "1" : "null" }' > "$T/big.jsonl"
  run plot "$T/big.jsonl" -o "$T/big.svg"
  expect_rc 0
  svg_ok "$T/big.svg"
  [ "$(wc -c < "$T/big.svg")" -lt 400000 ] || fail "200000 steps: an SVG of $(wc -c < "$T/big.svg") bytes"
  /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
ys = [float(p.split(",")[1]) for e in E.parse(sys.argv[1]).getroot().iter()
      if e.get("stroke") == "#1f77b4" and e.get("points") for p in e.get("points").split()]
assert min(ys) < 80, min(ys)' "$T/big.svg" || fail "200000 steps: the spike at 99.5 is not drawn"
  # mistakes: each names the file (and line)
  run plot "$T/missing.jsonl" -o "$T/x.svg"
  expect_user_error "$T/missing.jsonl: cannot open"
  printf '{"step": 1, "loss": 2}\nnot json\n' > "$T/bad.jsonl"
  run plot "$T/bad.jsonl" -o "$T/x.svg"
  expect_user_error "$T/bad.jsonl:2: expected a JSON object with an integer \"step\""
  : > "$T/empty.jsonl"
  run plot "$T/empty.jsonl" -o "$T/x.svg"
  expect_user_error "$T/empty.jsonl: no metrics lines"
  run plot "$T/m.jsonl"
  expect_user_error "usage: axlc plot METRICS.jsonl [MORE.jsonl ...] -o FILE.svg"
  run plot "$T/m.jsonl" -o "$T/nodir/x.svg"
  expect_user_error "the directory $T/nodir does not exist"
  # several files share the panels and axes: a color each in every panel, a legend entry each
  # (the file's name, or its --label); m.jsonl has 8 lines (loss, eval_loss as 3 runs of dots,
  # lr, grad_norm split in 2, tokens/s), b.jsonl 4
  awk 'BEGIN { for (i = 1; i <= 40; i++)
    printf "{\"step\": %d, \"loss\": %.6f, \"grad_norm\": 1.2, \"lr\": 0.001, \"tokens_per_s\": 2000}\n",
      i, 2.6 + 3 * exp(-i / 12) }' > "$T/b.jsonl"
  run plot "$T/m.jsonl" "$T/b.jsonl" -o "$T/two.svg"
  expect_rc 0
  expect_empty "$T/err"
  svg_ok "$T/two.svg"
  expect_in "$T/two.svg" ">m.jsonl (60 steps), b.jsonl (40 steps)<"
  [ "$(grep -c ">b.jsonl<" "$T/two.svg")" -eq 4 ] || fail "two files: expected b.jsonl in 4 legends"
  [ "$(grep -c "polyline fill='none' stroke='#1f77b4'" "$T/two.svg")" -eq 8 ] || fail "two files: m.jsonl's lines"
  [ "$(grep -c "polyline fill='none' stroke='#d62728'" "$T/two.svg")" -eq 4 ] || fail "two files: b.jsonl's lines"
  run plot "$T/m.jsonl" "$T/b.jsonl" -o "$T/lab.svg" --label f32 --label 'bf<16>'
  expect_rc 0
  svg_ok "$T/lab.svg"
  expect_in "$T/lab.svg" ">bf&lt;16&gt;<"
  expect_in "$T/lab.svg" ">f32 (60 steps), bf&lt;16&gt; (40 steps)<"
  run plot "$T/m.jsonl" "$T/b.jsonl" -o "$T/x.svg" --label f32
  expect_user_error "1 --label for 2 metrics files"
  run plot "$T/m.jsonl" "$T/bad.jsonl" -o "$T/x.svg"
  expect_user_error "$T/bad.jsonl:2: expected a JSON object"
  [ ! -e "$T/x.svg" ] || fail "a refused second file: an SVG was written"
  run plot "$T/m.jsonl" "$T/b.jsonl" -o "$T/b.jsonl"
  expect_user_error "is the same file as the metrics file $T/b.jsonl"
  # rendered: a picture with every series' color in it
  if ! command -v rsvg-convert > /dev/null; then
    [ "$fails" -eq 0 ] || exit 1
    echo "SKIP: no rsvg-convert (Debian: librsvg2-bin) to render the SVG"
    exit 77
  fi
  rsvg-convert "$T/m.svg" -o "$T/m.png" 2> "$T/rsvg.err" || fail "rsvg-convert: $(cat "$T/rsvg.err")"
  [ ! -s "$T/rsvg.err" ] || fail "rsvg-convert warned: $(cat "$T/rsvg.err")"
  ${TORCH_PYTHON:-/usr/bin/python3} "$SRC/tests/e2e/pngcheck.py" "$T/m.png" '#1f77b4' '#ff7f0e' \
    '#2ca02c' '#d62728' '#9467bd' || fail "the PNG is not the plot"
  ;;
outputs_not_inputs)
  # every command refuses an output that is one of its inputs (by inode: the same name, a hard
  # link, a symbolic link, a base config) before writing anything, and leaves the input as it was
  cp "$CORPUS" "$T/text.txt"
  cp "$MODELS/tiny-lm.json" "$T/my.json"
  printf '{"base": "my.json", "seed": 3}\n' > "$T/derived.json"
  ln "$T/my.json" "$T/hard.json"
  ln -s "$T/text.txt" "$T/text-link.txt"
  printf '{"step": 1, "loss": 2}\n' > "$T/m.jsonl"
  cksum "$T/text.txt" "$T/my.json" "$T/m.jsonl" > "$T/before"
  same() { expect_user_error "is the same file as $1"; }
  run compile "$T/my.json" --target cpu -o "$T/my.json"
  same "the config $T/my.json"
  run compile "$T/my.json" --target cpu -o "$T/hard.json"
  same "the config $T/my.json"
  run compile "$T/derived.json" --target cpu -o "$T/my.json"
  same "the config file"
  run memcheck "$T/my.json" --target cpu --plot "$T/my.json"
  same "the config $T/my.json"
  run plot "$T/m.jsonl" -o "$T/m.jsonl"
  same "the metrics file $T/m.jsonl"
  set -- --target interp --set /input/seq_len=16 --set /input/global_batch_size=2 \
    --set /model/decoder/num_layers=1
  run run "$T/my.json" "$@" --data "$T/text.txt" --dump "$T/text-link.txt"
  same "--data $T/text.txt"
  run run "$T/my.json" "$@" --data "$T/text.txt" --steps 1 --dump "$T/w.safetensors"
  expect_rc 0
  cksum "$T/w.safetensors" > "$T/w.before"
  run run "$T/my.json" "$@" --data "$T/text.txt" --init "$T/w.safetensors" --dump "$T/w.safetensors"
  same "--init $T/w.safetensors"
  run convert "$T/my.json" "$@" --to hf "$T/w.safetensors" -o "$T/w.safetensors"
  same "the weights $T/w.safetensors"
  # run's outputs against the config files too (a trainer knows none of them)
  run run "$T/my.json" "$@" --data "$T/text.txt" --steps 1 --dump "$T/hard.json"
  same "the config $T/my.json"
  run run "$T/derived.json" "$@" --data "$T/text.txt" --steps 1 --dump "$T/my.json"
  same "the config file"
  # a step directory read by convert: nothing inside it is an output
  mkdir "$T/step_00000001" && cp "$T/w.safetensors" "$T/step_00000001/state.safetensors"
  run convert "$T/my.json" "$@" --to hf "$T/step_00000001" -o "$T/step_00000001/state.safetensors"
  expect_user_error "lies inside the weights $T/step_00000001"
  cmp -s "$T/w.safetensors" "$T/step_00000001/state.safetensors" || fail "the step directory's state changed"
  if "$AXLC" backends | grep -q '^llvm'; then # the trainer's own check, before any compiling
    run run "$T/my.json" --target cpu --data "$T/text.txt" --metrics "$T/text-link.txt"
    same "--data $T/text.txt"
    run run "$T/my.json" --target cpu --data "$T/text.txt" --metrics="$T/my.json"
    same "the config $T/my.json"
  fi
  cksum "$T/text.txt" "$T/my.json" "$T/m.jsonl" | cmp -s - "$T/before" || fail "an input changed"
  cksum "$T/w.safetensors" | cmp -s - "$T/w.before" || fail "the weights changed"
  # an output is never what is not a regular file (here a FIFO), nor a link (here to a FIFO),
  # refused before any work (made in the scratch directory, where a regression replaces nothing
  # that matters; runtime_file checks the atomic writer's own refusal)
  mkfifo "$T/fifo" && ln -s "$T/fifo" "$T/fifo-link"
  run convert "$T/my.json" "$@" --to hf "$T/w.safetensors" -o "$T/fifo"
  expect_user_error "-o $T/fifo: not a regular file (a FIFO)"
  run run "$T/my.json" "$@" --data "$T/text.txt" --steps 1 --dump "$T/fifo-link"
  expect_rc 1
  expect_in "$T/err" "--dump $T/fifo-link: is a symbolic link; refusing to write through it"
  [ -p "$T/fifo" ] && [ -L "$T/fifo-link" ] || fail "the FIFO or its link was replaced"
  ;;
*)
  fail "unknown case"
  ;;
esac

[ "$fails" -eq 0 ] || exit 1
echo "ok [$CASE]"
