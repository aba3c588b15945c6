# lib.sh: what the shell tests share. A test sets SRC (the source tree), CASE (the name its
# failures carry) and, where it runs Python, PY; then
#   . "$SRC/tests/lib.sh"
#   scratch NAME        T: a new directory ${TMPDIR:-/tmp}/axlc-NAME.XXXXXX, removed on exit
# and it has:
#   fail MESSAGE...     counts a failure and prints "FAIL [CASE]: MESSAGE" on stderr
#   must CMD...         runs CMD, its output in $T/log; a failure is counted, with the log's tail
#   compare MODE ARGS   tests/trainer/compare.py under $PY; a difference is counted
#   newest DIR          the newest step_* directory in DIR (empty when none)
#   need_numpy          exits 77 (CTest's skip) unless $PY imports numpy
#   tokens FILE N [VOCAB MUL ADD SEED P]
#                       writes an llm.c token file of N tokens below VOCAB (32): a noisy cycle
#                       t = (t * MUL + ADD) % VOCAB (7, 5) kept with probability P (0.7), else a
#                       random token (Python's random, seeded SEED: 7); learnable, and the same
#                       bytes on every machine
#   byte_tokenizer FILE a byte-level BPE tokenizer.json without merges: the 256 byte values as
#                       ids 0-255 (GPT-2's byte-to-letter map), the vocabulary of tiny-lm
#   now_ms              milliseconds since the epoch
#   wait_mapped FILE PID [S]  waits (up to S seconds, 60) until process PID (a glob: [0-9]* for
#                       any) maps FILE, i.e. reads it; returns 1 if it never does
#   term_timed PID      SIGTERM to PID (a child of this shell), then waits for it: rc = its exit
#                       status, ms = the milliseconds from the signal to its end
#   $CORPUS             the English text tests train on: tests/corpus/prose.txt, a frozen copy
#                       (never the live README.md or docs/, whose edits would move test numbers)
# A test ends with `[ "$fails" -eq 0 ] || exit 1`. CTest runs the tests with sh (dash): POSIX
# only here.
fails=0
CORPUS=$SRC/tests/corpus/prose.txt

scratch() {
  T=$(mktemp -d "${TMPDIR:-/tmp}/axlc-$1.XXXXXX") || exit 1
  trap 'rm -rf "$T"' EXIT
}

fail() {
  echo "FAIL [$CASE]: $*" >&2
  fails=$((fails + 1))
}

must() { "$@" > "$T/log" 2>&1 || { fail "$*"; tail -20 "$T/log" >&2; }; }
compare() { "$PY" "$SRC/tests/trainer/compare.py" "$@" || fail "compare $*"; }
newest() { ls -d "$1"/step_* 2>/dev/null | sort | tail -1; }

need_numpy() {
  if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: $PY cannot import numpy"
    exit 77
  fi
}

tokens() {
  ${PY:-python3} - "$@" <<'PYEOF'
import random, struct, sys
a = sys.argv[1:] + ["32", "7", "5", "7", "0.7"][len(sys.argv) - 3:]
path, n, vocab, mul, add, seed, p = a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]), float(a[6])
r = random.Random(seed); toks = []; t = 0
for i in range(n):
    t = (t * mul + add) % vocab if r.random() < p else r.randrange(vocab)
    toks.append(t)
open(path, "wb").write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + struct.pack("<%dH" % n, *toks))
PYEOF
}

byte_tokenizer() {
  ${PY:-python3} - "$1" << 'PYEOF'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
tok = {"added_tokens": [], "model": {"type": "BPE", "vocab": {chr(c): b for b, c in zip(bs, cs)}, "merges": []},
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}}
json.dump(tok, open(sys.argv[1], "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

wait_mapped() {
  wm_i=0
  until grep -q "$1" /proc/$2/maps 2> /dev/null; do
    [ $wm_i -lt $((${3:-60} * 10)) ] || return 1
    sleep 0.1
    wm_i=$((wm_i + 1))
  done
}

term_timed() {
  tt_t0=$(now_ms)
  kill -TERM "$1"
  wait "$1"
  rc=$?
  ms=$(($(now_ms) - tt_t0))
}
