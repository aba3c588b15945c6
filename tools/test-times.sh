#!/bin/sh
# test-times.sh: the measured times per CTest label, as docs/testing.md's table gives them.
#   usage: tools/test-times.sh [-B BUILD] [CTEST ARGS... | -f FILE]
# With CTEST ARGS (e.g. -L unit -j2, or -LE slow -j2) it runs ctest --test-dir BUILD (default
# build) with them first and reports that run's wall time, its CPU time and the load average
# before and after it (a shared machine: wall times grow with its load). With -f FILE it reads a
# saved ctest output; with neither, BUILD/Testing/Temporary/LastTest.log, the last run's. The
# labels come from ctest --show-only=json-v1. Prints a Markdown table: per label, the tests
# that ran, the sum of their times (CTest's sec*proc) and the longest. Run one ctest at a time
# in a build directory: two write the same LastTest.log.
set -eu
B=build
if [ "${1:-}" = "-B" ]; then
  B=$2
  shift 2
fi
[ -d "$B" ] || { echo "test-times: no build directory $B" >&2; exit 1; }
run=""
out=$B/Testing/Temporary/LastTest.log
if [ "${1:-}" = "-f" ]; then
  out=$2
elif [ $# -gt 0 ]; then
  out=$B/Testing/test-times.out
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  t0=$(date +%s)
  rc=0
  cpu=""
  if [ -x /usr/bin/time ]; then # GNU time: the CPU seconds of ctest and all it started
    /usr/bin/time -f '%U %S' -o "$B/Testing/test-times.cpu" ctest --test-dir "$B" "$@" > "$out" 2>&1 || rc=$?
    cpu=$(awk '{ printf ", %.0f s of CPU (user + system)", $1 + $2 }' "$B/Testing/test-times.cpu")
  else
    ctest --test-dir "$B" "$@" > "$out" 2>&1 || rc=$?
  fi
  t1=$(date +%s)
  load1=$(cut -d' ' -f1-3 /proc/loadavg)
  run="ctest $*: $((t1 - t0)) s wall$cpu on $(nproc) cores, exit $rc; load average $load0 before, $load1 after"
  tail -3 "$out"
fi
# ctest -N rewrites LastTest.log (empty): keep the run's, and put it back
log=$B/Testing/Temporary/LastTest.log
cp "$log" "$B/Testing/test-times.log"
ctest --test-dir "$B" --show-only=json-v1 > "$B/Testing/test-times.json"
cp "$B/Testing/test-times.log" "$log"
[ "$out" = "$log" ] && out=$B/Testing/test-times.log
python3 - "$out" "$B/Testing/test-times.json" "$run" << 'EOF'
import json, re, sys
log, meta, run = sys.argv[1], sys.argv[2], sys.argv[3]
labels = {}
for t in json.load(open(meta))["tests"]:
    for p in t.get("properties", []):
        if p["name"] == "LABELS":
            labels[t["name"]] = p["value"]
times, name = {}, None
for line in open(log, errors="replace"):
    # ctest's output: "  7/182 Test  #46: NAME ....   Passed  134.89 sec"
    m = re.match(r"\s*\d+/\d+ Test\s+#\d+: (\S+) .*?([0-9.]+) sec$", line)
    if m:
        times[m.group(1)] = float(m.group(2))
        continue
    # LastTest.log: "7/182 Test: NAME" ... "Test time =   134.89 sec"
    m = re.match(r"\d+/\d+ Test: (\S+)", line)
    if m:
        name = m.group(1)
    m = re.match(r"Test time =\s*([0-9.]+) sec", line)
    if m and name:
        times[name] = float(m.group(1))
        name = None
rows = {}
for t, s in times.items():
    for l in labels.get(t, ["(none)"]) + ["all that ran"]:
        r = rows.setdefault(l, [0, 0.0, 0.0, ""])
        r[0] += 1
        r[1] += s
        if s > r[2]:
            r[2], r[3] = s, t
if run:
    print(run + "\n")
print("| label | tests | sum of test times | longest |")
print("|---|---|---|---|")
for l in sorted(rows, key=lambda l: (l == "all that ran", -rows[l][1])):
    n, s, lo, t = rows[l]
    print(f"| {l} | {n} | {s:.0f} s | {t} ({lo:.0f} s) |")
EOF
