"""pipeline.py: the measured bubble of the pipeline schedules against (P-1)/(M+P-1).

For each schedule (gpipe, 1f1b) and microbatch count it compiles a trainer with `axlc compile
--target cpu-P --set /mesh/shape=[P,1,1,1,1,1]`, runs it under `mpirun -np P` on generated
tokens, and reads the lines the trainer prints at the end of a run (runtime/train_report.c):

    trainer: pipeline stage S: waited W s for the other stages of T s in steps (X%)

W is the time stage S's device spent in its recvs (and waiting for its sends to complete), T
its time in steps. The table has each stage's W / T and the schedule's bubble (P-1)/(M+P-1):
the time a stage idles in an ideal pipeline whose stages take the same time per unit. A stage
that does less work than the slowest (stage 0 without the head and loss) waits more.

    /usr/bin/python3 tools/bench/pipeline.py --axlc build/tools/axlc [--model models/fuji-test.json]
        [--stages 2] [--micro 4,8] [--schedules gpipe,1f1b] [--steps 30] [--set /PATH=VALUE]...

Open MPI refuses to run as root unless OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set; this script sets them.
"""
import argparse
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
STAGE = re.compile(r"pipeline stage (\d+): waited ([0-9.]+) s for the other stages of ([0-9.]+) s in steps")


def tokens(path, n, vocab=32):
    r = random.Random(7)
    toks = [r.randrange(vocab) for _ in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + struct.pack("<%dH" % n, *toks))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--axlc", required=True)
    ap.add_argument("--model", default=os.path.join(TOP, "models", "fuji-test.json"))
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--micro", default="4,8")
    ap.add_argument("--schedules", default="gpipe,1f1b")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    P = a.stages
    shape = "[%d,1,1,1,1,1]" % P
    print("%-6s %3s %-7s %8s %8s %8s" % ("sched", "M", "stage", "wait_s", "steps_s", "wait%"), "bubble%")
    with tempfile.TemporaryDirectory(prefix="axlc-pipeline-") as tmp:
        data = os.path.join(tmp, "tokens.bin")
        tokens(data, 200000)
        for sched in a.schedules.split(","):
            for m in [int(x) for x in a.micro.split(",")]:
                exe = os.path.join(tmp, "%s-%d.trainer" % (sched, m))
                cmd = [a.axlc, "compile", a.model, "--target", "cpu-%d" % P, "--set", "/mesh/shape=" + shape,
                       "--set", "/learner/microbatches=%d" % m, "--set", "/mesh/pipeline_schedule=" + sched]
                for s in a.set:
                    cmd += ["--set", s]
                subprocess.run(cmd + ["-o", exe], check=True, env=env)
                out = subprocess.run(["mpirun", "-np", str(P), "--oversubscribe", exe, "--data", data, "--threads", "1",
                                      "--steps", str(a.steps)], check=True, env=env, capture_output=True,
                                     text=True).stdout
                bubble = 100.0 * (P - 1) / (m + P - 1)
                rows = STAGE.findall(out)
                if len(rows) != P:
                    sys.exit("pipeline.py: %s M=%d: %d stage lines in the trainer's output, expected %d" %
                             (sched, m, len(rows), P))
                for s, w, t in rows:
                    w, t = float(w), float(t)
                    print("%-6s %3d %-7s %8.3f %8.3f %8.1f %7.1f" % (sched, m, s, w, t, 100 * w / t if t else 0, bubble))


if __name__ == "__main__":
    main()
