#!/bin/sh
# Checks that every C file of the tree (*.c, *.h) is formatted as .clang-format (2 spaces)
# and runtime/.clang-format (4 spaces) say: prints clang-format's diff and exits 1 otherwise.
#   usage: tools/check-format.sh [FILE...]   (default: every *.c and *.h that git tracks)
set -eu
cd "$(dirname "$0")/.."
if ! command -v clang-format > /dev/null; then
  echo "check-format: clang-format not found (Debian: clang-format); skipped"
  exit 0
fi
if [ $# -eq 0 ]; then
  if git rev-parse --git-dir > /dev/null 2>&1; then
    set -- $(git ls-files '*.c' '*.h')
  else
    set -- $(find . -name '*.[ch]' -not -path './build*' | sort)
  fi
fi
bad=0
for f in "$@"; do
  if ! clang-format --dry-run --Werror "$f" 2> /dev/null; then
    clang-format "$f" | diff -u "$f" - | sed "1,2s|^\\([-+]*\\) .*|\\1 $f|"
    bad=1
  fi
done
if [ "$bad" -ne 0 ]; then
  echo "check-format: not formatted (fix: clang-format -i FILE)" >&2
  exit 1
fi
echo "check-format: $# files formatted"
