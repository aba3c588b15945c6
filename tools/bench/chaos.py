"""chaos.py: a supervised training job under faults, against the same job left alone
(docs/runtime.md, "The supervisor"; issue 29's chaos test).

    /usr/bin/python3 tools/bench/chaos.py --axlc build/tools/axlc \
        --dump build/tests/mpi/ckpt_dump [--model tiny-lm|moe-test] [--ranks 4]
        [--steps 300] [--kills 5] [--stops 1] [--ckpt-every 10] [--seed 1] [--work DIR]
        [--elastic] [--set /PATH=VALUE ...]

What it does:

1. Compiles MODEL for cpu-RANKS (sequences of 16 tokens, and the --set options: a mesh of fixed
   sizes, say) and writes a token file.
2. The reference: `axlc launch TRAINER -n RANKS --max-restarts 0` for STEPS steps, left alone.
3. The same job under `axlc launch ... --max-restarts N --report R.jsonl` (with SIGSTOPs,
   AXLC_COMM_TIMEOUT 5 s: the watchdog's deadline). At steps drawn from SEED it sends SIGKILL
   to a random rank KILLS times (the second kill waits for a checkpoint being written, a step
   directory without its index, or for the step line of a checkpoint step, which its save
   follows at once, and lands there) and SIGSTOP to a random rank STOPS times (the watchdog
   ends that job).
   Each fault waits for the recovery of the one before.
4. Checks: the supervised job exits 0, its report has one failure per fault, and its final
   parameters (the newest checkpoint, as one file by ckpt_dump) are bit-identical to the
   reference's.
5. Prints each recovery's latency (from the failed job's last step to the first new step) and
   the steps it lost, then the median and worst latency and the goodput the supervisor reports.

With --elastic the faults are SIGKILLs of the last rank, each time; the job is started with
--min-ranks RANKS/2, so after the second it goes on with fewer ranks and more microbatches.
The check is then the loss of the last step against the reference's: within 1e-4 (the sums
run in another order, so not bit for bit), with the same global batch.

Under a Slurm allocation (SLURM_JOB_ID set) the supervisor launches with srun; ranks are found
by SLURM_PROCID. Exit status 0 when every check passed, 1 otherwise, 77 when a tool is missing.
"""

import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time


def tokens(path):
    """Tokens below 32 (every test model's vocabulary holds them), an llm.c token file."""
    r = random.Random(7)
    n, t, toks = 20000, 0, []
    for _ in range(n):
        t = (t * 7 + 5) % 32 if r.random() < 0.7 else r.randrange(32)
        toks.append(t)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))


def ranks_of(exe):
    """{rank: pid} of the processes running exe (by /proc/PID/exe), rank from the environment."""
    real = os.path.realpath(exe)
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/exe" % pid) != real:
                continue
            env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        for var in (b"OMPI_COMM_WORLD_RANK=", b"SLURM_PROCID=", b"PMIX_RANK="):
            hit = [e for e in env if e.startswith(var)]
            if hit:
                found[int(hit[0][len(var):])] = int(pid)
                break
    return found


class Job:
    """axlc launch in the background; its stdout read as it comes (the newest step)."""

    def __init__(self, cmd, env, log):
        self.step = -1
        self.lines = []
        self.log = open(log, "w")
        self.p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=self.log)
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        buf = b""
        for chunk in iter(lambda: self.p.stdout.read1(4096), b""):
            buf += chunk
            *done, buf = buf.replace(b"\r", b"\n").split(b"\n")
            if buf.endswith(b"\x1b[K"):  # a terminal's progress line (rank 0 writes to a pty)
                done, buf = done + [buf], b""
            for line in done:
                s = line.decode(errors="replace")
                self.lines.append(s)
                if s.startswith("step "):
                    try:
                        self.step = int(s.split()[1].split("/")[0])
                    except ValueError:
                        pass

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def report(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return []


def wait_until(cond, timeout, tick=0.01):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(tick)
    return False


def saving(ck):
    """A step directory being written: no index.json yet."""
    try:
        for d in os.listdir(ck):
            if d.startswith("step_") and len(d) == 13 and not os.path.exists(os.path.join(ck, d, "index.json")):
                return True
    except OSError:
        pass
    return False


def last_loss(metrics):
    rows = [json.loads(l) for l in open(metrics) if l.strip()]
    return rows[-1]["step"], rows[-1]["loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", required=True)
    ap.add_argument("--dump", required=True, help="ckpt_dump (tests/mpi)")
    ap.add_argument("--model", default="tiny-lm")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--stops", type=int, default=1)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work")
    ap.add_argument("--elastic", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="for axlc compile")
    a = ap.parse_args()
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    model = os.path.join(src, "models", a.model + ".json")
    work = a.work or tempfile.mkdtemp(prefix="axlc-chaos.")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if a.stops and not a.elastic:  # the watchdog ends a job with a stopped rank sooner
        env["AXLC_COMM_TIMEOUT"] = "5"
    env["TMPDIR"] = os.path.join(work, "tmp")  # the supervisor's elastic trainers go there
    os.makedirs(env["TMPDIR"], exist_ok=True)
    rng = random.Random(a.seed)
    fails = []

    data = os.path.join(work, "tokens.bin")
    tokens(data)
    exe = os.path.join(work, "trainer")
    c = subprocess.run([a.axlc, "compile", model, "--target", "cpu-%d" % a.ranks, "--set",
                        "/input/seq_len=16"] + [x for v in a.set for x in ("--set", v)] + ["-o", exe],
                       capture_output=True, text=True)
    if c.returncode:
        print(c.stderr, file=sys.stderr)
        return 1

    def launch(name, extra, log):
        ck = os.path.join(work, name)
        cmd = [a.axlc, "launch", exe, "-n", str(a.ranks)] + extra + [
            "--", "--data", data, "--steps", str(a.steps), "--ckpt-dir", ck, "--ckpt-every",
            str(a.ckpt_every), "--keep", "3", "--threads", "1", "--log-every", "1",
            "--metrics", os.path.join(work, name + ".jsonl")]
        return ck, Job(cmd, env, log)

    t0 = time.time()
    ref_ck, ref = launch("ref", ["--max-restarts", "0"], os.path.join(work, "ref.log"))
    if ref.wait(600) != 0:
        print(open(os.path.join(work, "ref.log")).read(), file=sys.stderr)
        return 1
    print("reference: %d steps on %d ranks in %.1f s" % (a.steps, a.ranks, time.time() - t0))

    faults = ["kill"] * a.kills + ["stop"] * (0 if a.elastic else a.stops)
    rng.shuffle(faults)
    lo, hi = max(3, a.steps // 10), max(4, a.steps - a.steps // 5)
    at = sorted(rng.sample(range(lo, hi), len(faults))) if hi - lo >= len(faults) else []
    if len(at) != len(faults):
        print("chaos: %d steps are too few for %d faults" % (a.steps, len(faults)), file=sys.stderr)
        return 1
    rep = os.path.join(work, "report.jsonl")
    extra = ["--max-restarts", str(len(faults) + 2), "--backoff", "0.2", "--report", rep]
    if a.elastic:
        extra += ["--min-ranks", str(max(1, a.ranks // 2))]
    log = os.path.join(work, "run.log")
    t0 = time.time()
    ck, job = launch("run", extra, log)
    done = []
    for i, (what, step) in enumerate(zip(faults, at)):
        # past the step of the last failure too: a fault there again could read as one that
        # a restart repeats
        last = max([e["step"] for e in report(rep) if e["event"] == "failure"] + [-1])
        ok = wait_until(lambda: job.step >= max(step, last + 1) or job.p.poll() is not None, 300)
        if job.p.poll() is not None or not ok:
            fails.append("fault %d: the job ended (or stalled) before step %d" % (i + 1, step))
            break
        ranks = ranks_of(job_exe(env["TMPDIR"], exe))
        if not ranks:
            fails.append("fault %d: no rank found" % (i + 1))
            break
        rank = max(ranks) if a.elastic else rng.choice(sorted(ranks))
        note = ""
        if what == "kill" and i == 1 and not a.elastic:
            # a save to land in (the step line of a checkpoint step comes right before its
            # save), but not so late that the job ends first
            wait_until(lambda: saving(ck) or job.step % a.ckpt_every == 0
                       or job.step >= a.steps - 3, 5, tick=0.0002)
            note = (" during a save (a step directory without its index)" if saving(ck) else
                    " as the save of step %d begins" % job.step if job.step % a.ckpt_every == 0
                    else " (no save seen)")
        try:
            os.kill(ranks[rank], signal.SIGKILL if what == "kill" else signal.SIGSTOP)
        except ProcessLookupError:
            fails.append("fault %d: rank %d was gone" % (i + 1, rank))
            break
        done.append((what, rank, job.step))
        print("fault %d: %s rank %d (pid %d) at step %d%s" % (
            i + 1, "SIGKILL" if what == "kill" else "SIGSTOP", rank, ranks[rank], job.step, note))
        # the next fault waits for this one's recovery
        if not wait_until(lambda: sum(e["event"] == "recovered" for e in report(rep)) > i
                          or job.p.poll() is not None, 300):
            fails.append("fault %d: no recovery in 300 s" % (i + 1))
            break
    rc = job.wait(900)
    wall = time.time() - t0
    for pid in list(ranks_of(exe).values()) + list(ranks_of(job_exe(env["TMPDIR"], exe)).values()):  # a stopped rank the launcher left behind
        os.kill(pid, signal.SIGKILL)
        fails.append("a rank (pid %d) outlived its job" % pid)
    if rc != 0:
        fails.append("axlc launch exited %s" % rc)
        sys.stderr.write("".join(open(log).readlines()[-30:]))
    events = report(rep)
    failures = [e for e in events if e["event"] == "failure"]
    recovered = [e for e in events if e["event"] == "recovered"]
    end = [e for e in events if e["event"] == "end"]
    if len(failures) != len(done):
        fails.append("%d faults, %d failures in the report" % (len(done), len(failures)))
    for f, r in zip(failures, recovered):
        print("recovery: %s at step %d; resumed from step %d, %d step%s lost; first new step "
              "%.2f s after the last one (%.2f s to notice, %.2f s to restart)" % (
                  f["cause"], f["step"], f["checkpoint"], f["steps_lost"],
                  "" if f["steps_lost"] == 1 else "s", r["latency_s"], r["detect_s"],
                  r["restart_s"]))
    if end:
        e = end[0]
        print("%s %d ranks %d steps: %d faults, %d restarts; recovery latency median %.2f s, worst "
              "%.2f s; %d steps lost; goodput %.1f%% of %.1f s" % (
                  a.model, a.ranks, a.steps, len(done), e["restarts"], e["latency_median_s"],
                  e["latency_worst_s"], e["steps_lost"], 100 * e["goodput"], e["wall_s"]))
    else:
        fails.append("the report has no end")
    left = os.listdir(env["TMPDIR"])
    if left:
        fails.append("the supervisor left %s in TMPDIR" % ", ".join(left))
    if a.elastic:
        shrink = [e for e in events if e["event"] == "shrink"]
        if not shrink:
            fails.append("no shrink in the report")
        else:
            e = shrink[0]
            print("elastic: %d -> %d ranks, %d microbatches, global batch %d" % (
                e["from"], e["to"], e["microbatches"], e["global_batch"]))
            if e["to"] != max(1, a.ranks // 2) or e["microbatches"] * e["to"] != a.ranks:
                fails.append("elastic: expected %d ranks with %d microbatches" % (
                    max(1, a.ranks // 2), a.ranks // max(1, a.ranks // 2)))
        (s1, l1), (s2, l2) = last_loss(os.path.join(work, "run.jsonl")), last_loss(
            os.path.join(work, "ref.jsonl"))
        print("elastic: step %d loss %.6f, uninterrupted step %d loss %.6f (|diff| %.2e)" % (
            s1, l1, s2, l2, abs(l1 - l2)))
        if s1 != s2 or not abs(l1 - l2) <= 1e-4:
            fails.append("elastic: the last loss differs by more than 1e-4")
    else:
        for name in ("ref", "run"):
            subprocess.run([a.dump, os.path.join(work, name), os.path.join(work, name + ".st")],
                           check=False, capture_output=True)
        try:
            same = open(os.path.join(work, "ref.st"), "rb").read() == open(
                os.path.join(work, "run.st"), "rb").read()
        except OSError:
            same = False
        print("final parameters: %s" % ("bit-identical" if same else "DIFFER"))
        if not same:
            fails.append("the final parameters differ from the uninterrupted run's")
    for f in fails:
        print("FAIL [chaos %s]: %s" % (a.model, f), file=sys.stderr)
    if not fails and not a.work:
        subprocess.run(["rm", "-rf", work])
    return 1 if fails else 0


def job_exe(tmp, exe):
    """The trainer the supervisor runs now: its elastic one (in TMPDIR) once it shrank the job."""
    for d in sorted(os.listdir(tmp)):
        if d.startswith("axlc-launch-"):
            for f in sorted(os.listdir(os.path.join(tmp, d))):
                if f.startswith("trainer-"):
                    return os.path.join(tmp, d, f)
    return exe


if __name__ == "__main__":
    sys.exit(main())
