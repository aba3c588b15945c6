"""memcheck_time.py: how long `axlc memcheck` takes on the big jobs.

For each job MODEL@TARGET it runs `axlc memcheck models/MODEL.json --target TARGET` N times and
prints the median wall time and the median CPU time (user + system) of one run, and whether the
median wall time is under the limit (0.5 s: memcheck is meant to be run while editing a config).
On a loaded machine the wall time exceeds the CPU time; the CPU time is what the run costs.

    /usr/bin/python3 tools/bench/memcheck_time.py --axlc build/tools/axlc [--runs 7]
        [--limit 0.5] [MODEL@TARGET ...]          (default: llama2-70b@gpu-h100-512)

Exit status 1 when a run fails; the timings are reported, never asserted.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))


def one_run(axlc, model, target):
    """(wall seconds, CPU seconds) of one memcheck; raises on a failure other than 'does not fit'."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([axlc, "memcheck", model, "--target", target], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1) or (r.returncode == 1 and r.stderr.strip()):
        raise RuntimeError("%s on %s: exit %d: %s" % (model, target, r.returncode, r.stderr.strip()))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--limit", type=float, default=0.5)
    ap.add_argument("jobs", nargs="*", default=["llama2-70b@gpu-h100-512"])
    a = ap.parse_args()
    failed = False
    print("%-32s %10s %10s  %s" % ("job", "wall (s)", "CPU (s)", "median of %d runs" % a.runs))
    for job in a.jobs:
        name, _, target = job.partition("@")
        model = os.path.join(TOP, "models", name + ".json")
        try:
            runs = [one_run(a.axlc, model, target) for _ in range(a.runs)]
        except RuntimeError as e:
            print("error: %s" % e, file=sys.stderr)
            failed = True
            continue
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print("%-32s %10.3f %10.3f  %s" % (job, wall, cpu,
                                         "under %.2f s" % a.limit if wall < a.limit
                                         else "OVER %.2f s" % a.limit))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
