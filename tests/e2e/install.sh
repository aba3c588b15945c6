#!/bin/sh
# install.sh BUILDDIR SRCDIR: `cmake --install` into a temporary prefix, then the installed
# commands from a directory outside the source tree: the shipped configs found by name and
# through a copied config's mesh_rules, --apply by name, AXLC_PATH, a miss that says where it
# looked, a trainer compiled and linked against the installed libaxrt, an OpenCL trainer
# compiled by a copy of the prefix that may not touch the build or source tree, the
# pkg-config file, the man pages.
set -u
B=$1 SRC=$2 CASE=install
. "$SRC/tests/lib.sh"
scratch install
run() { "$@" > "$T/out" 2> "$T/err"; rc=$?; }
ok() { # ok WHAT: the last run exited 0
  [ "$rc" -eq 0 ] || { fail "$1: exit $rc"; sed 's/^/  | /' "$T/err" | head -20 >&2; }
}
has() { grep -qF -- "$2" "$1" || { fail "$(basename "$1") lacks: $2"; sed 's/^/  | /' "$1" | head -20 >&2; }; }

P=$T/prefix
cmake --install "$B" --prefix "$P" > "$T/install.log" 2>&1 || { cat "$T/install.log"; exit 1; }
for f in bin/axlc lib/libaxrt.a lib/libaxrt_main.a include/axrt.h lib/pkgconfig/axrt.pc \
         share/axlc/tiny-lm.json share/axlc/rules/cpu.json share/axlc/modifiers/moe.json \
         share/axlc/modifiers/rope.json share/man/man1/axlc.1 share/man/man1/axlc-trainer.1; do
  [ -f "$P/$f" ] || fail "not installed: $f"
done
AXLC=$P/bin/axlc
mkdir "$T/work" && cd "$T/work" || exit 1
unset AXLC_PATH

# a shipped model by name, from anywhere
run "$AXLC" config tiny-lm
ok "config tiny-lm"
has "$T/out" '"num_heads": 4,'
# a config copied out of share/axlc: its "mesh_rules": "rules/cpu.json" is found there
cp "$P/share/axlc/tiny-lm.json" my.json
run "$AXLC" config my.json --target cpu
ok "config my.json"
has "$T/err" 'matched mesh rule'
# --apply by name: the shipped modifier
run "$AXLC" config my.json --apply moe
ok "--apply moe"
has "$T/out" '"kind": "moe"'
# rope.json keeps a model's own theta (mixtral: 1e6), and gives one without rope the default
run "$AXLC" config mixtral-8x7b --apply rope
ok "mixtral --apply rope"
has "$T/out" '"theta": 1e+06'
run "$AXLC" config my.json --apply rope
ok "tiny-lm --apply rope"
has "$T/out" '"theta": 1e+04'
# AXLC_PATH comes before the shipped configs
mkdir "$T/mods"
printf '{"kind": "set", "path": "/max_steps", "value": 70}\n' > "$T/mods/short.json"
AXLC_PATH=$T/nowhere:$T/mods run "$AXLC" config my.json --apply short
ok "AXLC_PATH --apply short"
has "$T/out" '"max_steps": 70,'
# a miss names every directory searched
AXLC_PATH=$T/mods run "$AXLC" config my.json --apply nosuch
[ "$rc" -eq 1 ] || fail "--apply nosuch: exit $rc"
has "$T/err" "error: --apply: nosuch: no such file (looked in ., $T/mods, $P/share/axlc;"
sed 's|rules/cpu.json|rules/gpu.json|' my.json > bad.json
run "$AXLC" config bad.json
[ "$rc" -eq 1 ] || fail "missing rules: exit $rc"
has "$T/err" "error: bad.json: /mesh_rules: rules/gpu.json: no such file (looked in ., $P/share/axlc;"

# a trainer compiled by the installed axlc links the installed libaxrt, and trains
run "$AXLC" compile tiny-lm --target cpu -o tr --set /model/decoder/num_layers=1 \
  --set /model/dim=8 --set /model/decoder/layer/self_attention/num_heads=1 \
  --set /input/seq_len=8 --set /input/global_batch_size=2
ok "compile with the installed axlc"
cp "$CORPUS" text.txt
run ./tr --data text.txt --steps 3 --metrics m.jsonl --ckpt-dir ck
ok "the trainer"
has "$T/out" "step 3 loss"
# what happened, drawn by the installed axlc; the trained model speaks from its checkpoint
run "$AXLC" plot m.jsonl -o m.svg
ok "axlc plot"
grep -q "<svg" m.svg || fail "axlc plot wrote no SVG"
run ./tr --sample 20 --ckpt-dir ck --prompt "The " --temperature 0
ok "trainer --sample"
[ -s "$T/out" ] || fail "--sample printed nothing"
# weights out to Hugging Face's names and back in: an interpreter dump of the same model,
# converted --to hf and --from hf by the installed axlc, starts the trainer
small="--set /model/decoder/num_layers=1 --set /model/dim=8 --set /model/decoder/layer/self_attention/num_heads=1 --set /input/seq_len=8 --set /input/global_batch_size=2"
# shellcheck disable=SC2086
run "$AXLC" run tiny-lm --target interp $small --data text.txt --steps 1 --dump dump.st
ok "interp --dump"
# shellcheck disable=SC2086
run "$AXLC" convert tiny-lm $small --to hf dump.st -o hf.st
ok "convert --to hf"
# shellcheck disable=SC2086
run "$AXLC" convert tiny-lm $small --from hf hf.st -o back.st
ok "convert --from hf"
run ./tr --data text.txt --steps 1 --init back.st
ok "the trainer from converted weights"
run ./tr --data text.txt --steps 1 --init dump.st
ok "the trainer from an interpreter dump"

# A copy of the prefix, and a compiler that refuses every path of the build and the source
# tree: what an installed axlc links comes from its own lib/ and include/, for every backend.
Q=$T/elsewhere
cp -R "$P" "$Q" || fail "copying the prefix"
cat > "$T/cc" <<SH
#!/bin/sh
for a in "\$@"; do
  case \$a in
  *"$T"*) ;;
  *"$B"*|*"$SRC"*) echo "cc: \$a lies in the build or the source tree" >&2; exit 1 ;;
  esac
done
exec ${CC:-cc} "\$@"
SH
chmod +x "$T/cc"
unset LIBRARY_PATH CPATH C_INCLUDE_PATH PKG_CONFIG_PATH
# shellcheck disable=SC2086
CC=$T/cc run "$Q/bin/axlc" compile tiny-lm --target cpu -o tr2 $small
ok "compile from the copied prefix"
run ./tr2 --data text.txt --steps 1
ok "the trainer of the copied prefix"
if "$Q/bin/axlc" backends | grep -q '^opencl '; then
  [ -f "$Q/lib/libaxrt_opencl.a" ] || fail "not installed: lib/libaxrt_opencl.a"
  # shellcheck disable=SC2086
  CC=$T/cc run "$Q/bin/axlc" compile tiny-lm --target opencl -o ocl $small
  ok "OpenCL compile from the copied prefix"
  if [ "$rc" -ne 0 ]; then
    :
  elif ./ocl --list-devices > "$T/devices" 2>&1; then
    LSAN_OPTIONS=suppressions=$SRC/tests/backends/opencl.supp run ./ocl --data text.txt --steps 2
    ok "the OpenCL trainer"
    has "$T/out" "step 2 loss"
  else
    echo "no OpenCL device: the OpenCL trainer was linked, not run"
  fi
fi

# pkg-config: a program of one's own against libaxrt
cat > crc.c <<'C'
#include <stdio.h>
#include <axrt.h>
int main(void) { printf("%08x\n", (unsigned)rt_crc32(0, "123456789", 9)); return 0; }
C
flags=$(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --cflags --libs axrt) || fail "pkg-config axrt"
# shellcheck disable=SC2086
run cc -o crc crc.c $flags ${AXLC_TEST_LDFLAGS:-}
ok "cc against pkg-config axrt"
[ "$(./crc)" = "cbf43926" ] || fail "rt_crc32 of 123456789: $(./crc), expected cbf43926"

# man pages: no groff warnings, and the sections are there
for m in axlc axlc-trainer; do
  groff -man -Tutf8 -ww -z "$P/share/man/man1/$m.1" > "$T/groff" 2>&1
  [ ! -s "$T/groff" ] || { fail "$m.1: groff warnings"; cat "$T/groff" >&2; }
done
groff -man -Tascii "$P/share/man/man1/axlc.1" 2>/dev/null | col -b > axlc.txt
has axlc.txt "AXLC_PATH"
has axlc.txt "AXLC_CACHE_MAX"
groff -man -Tascii "$P/share/man/man1/axlc-trainer.1" 2>/dev/null | col -b > tr.txt
has tr.txt "--init-allow-unused"
has tr.txt "(experts, in, out)"
has tr.txt "--sdc-check-every"

[ "$fails" -eq 0 ] || exit 1
echo "ok [install]"
