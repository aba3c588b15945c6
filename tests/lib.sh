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
