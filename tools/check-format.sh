#!/bin/sh
# Checks that the C files listed in .clang-format-files are formatted as .clang-format
# (2 spaces) and runtime/.clang-format (4 spaces) say: prints clang-format's diff and exits 1
# otherwise. The list holds the files already formatted; the rest of the tree joins it in one
# reformatting commit (done by the lead when no branch is in flight), after which this script
# checks every *.c and *.h.
#   usage: tools/check-format.sh [FILE...]   (default: the files in .clang-format-files)
set -eu
cd "$(dirname "$0")/.."
if ! command -v clang-format > /dev/null; then
  echo "check-format: clang-format not found (Debian: clang-format); skipped"
  exit 0
fi
[ $# -gt 0 ] || set -- $(grep -v '^#' .clang-format-files)
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
