#!/bin/sh
# Runs the whole test suite: a normal build, an AddressSanitizer + UndefinedBehaviorSanitizer
# build (Debug) and a Release build, each through CTest (CUnit unit tests, end-to-end tests
# of the real binaries, golden configs, the fuzz corpora); warnings are errors in all three.
# With AXLC_FUZZ_SECONDS=N it also runs each fuzz target (config parser,
# safetensors reader, checkpoint index, token files, metrics plotter, --sample's prompt path, tokenizer.json) for N
# seconds.
#   usage: tools/test.sh            (run from anywhere; builds under build/)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
t0=$(date +%s)
stage() { echo "== $* (at $(($(date +%s) - t0)) s)"; }

configure() { # DIR CMAKE-ARGS...
  dir=$1; shift
  cmake -S "$top" -B "$top/$dir" "$@" > "$top/$dir.configure.log" 2>&1 ||
    { cat "$top/$dir.configure.log"; exit 1; }
}
build() { # DIR CMAKE-ARGS...
  configure "$@"
  cmake --build "$top/$1" -j "$jobs"
}

stage "format: every C file as .clang-format says"
"$top/tools/check-format.sh"

stage "build (RelWithDebInfo) and test"
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAXLC_WERROR=ON
ctest --test-dir "$top/build" --output-on-failure -j "$jobs"

stage "build with ASan + UBSan and test"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DAXLC_SANITIZE=ON -DAXLC_WERROR=ON
# (tests labelled slow, the full-size interpreter runs, are left to the normal build)
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$top/build-asan" --output-on-failure -j "$jobs" -LE slow

stage "build Release (what users build) and run its end-to-end tests"
# GCC's -O3 sees more (maybe-uninitialized, array bounds) than -O2 does; the release
# binaries run the same command-line cases the other builds do.
build build-release -DCMAKE_BUILD_TYPE=Release -DAXLC_WERROR=ON
ctest --test-dir "$top/build-release" --output-on-failure -j "$jobs" -R '^e2e_' -LE slow

# Fuzzes TARGET for AXLC_FUZZ_SECONDS, from a copy of its kept corpus (what it
# finds is not kept; a crash input goes to build-fuzz/TARGET-crash-..., and the
# script stops).
fuzz() { # TARGET CORPUS-DIR DICT MAX-LEN
  stage "fuzz $1 for ${AXLC_FUZZ_SECONDS}s"
  corpus=$(mktemp -d)
  cp "$top/tests/fuzz/$2"/* "$corpus"/
  (cd "$corpus" && "$top/build-fuzz/tests/fuzz/$1" -dict="$top/tests/fuzz/$3" \
     -max_len="$4" -timeout=10 -rss_limit_mb=2048 -max_total_time="$AXLC_FUZZ_SECONDS" \
     -artifact_prefix="$top/build-fuzz/$1-" "$corpus")
  rm -rf "$corpus"
}

if [ "${AXLC_FUZZ_SECONDS:-0}" -gt 0 ] && command -v clang > /dev/null; then
  # only the fuzz targets: the rest of this instrumented build would never run; none of them
  # reads a SentencePiece model, so the one C++ file (runtime/tok_spm.cc) stays out, and clang++
  # takes any other (g++ knows no -fsanitize=fuzzer-no-link)
  CC=clang CXX=clang++ configure build-fuzz -DAXLC_FUZZ=ON -DAXLC_WERROR=OFF -DAXLC_SENTENCEPIECE=OFF
  cmake --build "$top/build-fuzz" -j "$jobs" \
    --target fuzz_config fuzz_safetensors fuzz_ckpt_index fuzz_tokens fuzz_plot fuzz_prompt fuzz_tokjson
  fuzz fuzz_config corpus config.dict 8192
  fuzz fuzz_safetensors corpus-safetensors safetensors.dict 4096
  fuzz fuzz_ckpt_index corpus-ckpt ckpt.dict 4096
  fuzz fuzz_tokens corpus-tokens tokens.dict 4096
  fuzz fuzz_plot corpus-plot plot.dict 8192
  fuzz fuzz_prompt corpus-prompt prompt.dict 1024
  fuzz fuzz_tokjson corpus-tokjson tokjson.dict 16384
fi
stage "done"
