#!/bin/sh
# Runs the whole test suite: a normal build and an AddressSanitizer +
# UndefinedBehaviorSanitizer build, each through CTest (CUnit unit tests,
# end-to-end tests of the real binaries, golden configs, the fuzz corpus).
# With AXLC_FUZZ_SECONDS=N it also fuzzes the config parser for N seconds.
#   usage: tools/test.sh            (run from anywhere; builds under build/)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)

build() { # DIR CMAKE-ARGS...
  dir=$1; shift
  cmake -S "$top" -B "$top/$dir" "$@" > "$top/$dir.configure.log" 2>&1 ||
    { cat "$top/$dir.configure.log"; exit 1; }
  cmake --build "$top/$dir" -j "$jobs"
}

echo "== build (RelWithDebInfo) and test"
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
ctest --test-dir "$top/build" --output-on-failure -j "$jobs"

echo "== build with ASan + UBSan and test"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DAXLC_SANITIZE=ON
# (tests labelled slow, the full-size interpreter runs, are left to the normal build)
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$top/build-asan" --output-on-failure -j "$jobs" -LE slow

if [ "${AXLC_FUZZ_SECONDS:-0}" -gt 0 ] && command -v clang > /dev/null; then
  echo "== fuzz the config frontend for ${AXLC_FUZZ_SECONDS}s"
  CC=clang build build-fuzz -DAXLC_FUZZ=ON -DAXLC_WERROR=OFF
  corpus=$(mktemp -d)
  cp "$top"/tests/fuzz/corpus/* "$corpus"/
  (cd "$corpus" && "$top/build-fuzz/tests/fuzz/fuzz_config" -dict="$top/tests/fuzz/config.dict" \
     -max_len=8192 -timeout=10 -rss_limit_mb=2048 -max_total_time="$AXLC_FUZZ_SECONDS" "$corpus")
  rm -rf "$corpus"
fi
