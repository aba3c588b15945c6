/* supervise.c: a training job that comes back after its failures (`axlc launch`, `axlc run
 * --target cpu-N`).
 *
 * The supervisor starts the trainer's ranks through mpirun, or srun inside a Slurm allocation
 * (SLURM_JOB_ID), as a job of spawn.c, and reads the job's output as it passes it on: the step
 * lines of rank 0 say how far the run got; the trainer's event lines (runtime/axrt_event.h: a
 * rank the watchdog found stopped, a non-finite loss, a rank's silent data corruption) and its
 * exit statuses, and the launcher's messages about a rank it lost, say why it died. No trainer
 * message is read: rewording one changes nothing here. A job that fails is started again with
 * --resume, from the last complete checkpoint of its --ckpt-dir, after a back-off that doubles
 * while no new checkpoint is made, up to max_restarts, and told the step it had reached and the
 * downtime (--restart-step,
 * --restart-downtime: its goodput counts the whole supervised run); after a non-finite loss it
 * also passes over the bad batch (--skip-batches). A job that fails twice at the same step with
 * the same cause (a fault that a restart repeats) is given up. When
 * failures keep naming one rank, or a Slurm allocation has fewer tasks than the trainer's devices,
 * the job goes on with fewer ranks (elastic): the driver builds the trainer's embedded config for
 * the smaller mesh with more microbatches (LaunchRebuild), so the global batch and the data order
 * stay, and the checkpoint is resharded as it loads. Every failure and recovery is logged, with its
 * cause, the steps lost and the time from the last sign of life to the first new step. */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "launch/launch.h"
#include "runtime/axrt.h"

#define MAX_RANKS   4096
#define BACKOFF_MAX 60.0

/* The kind of a failure: a cause of axrt_event.h (RT_CAUSE_*), which the trainer's event lines
 * and exit statuses name, or FAIL_OTHER (the launcher's messages, a signal, another status). */
typedef int FailKind;
#define FAIL_OTHER (-1)

/* What one launch's output said. */
typedef struct Launch {
  double start, first_at, last_at, alive_at; /* job start; first and last step line; the last
                                                sign of life (the last step line, else start) */
  int64_t start_step;                        /* the step it resumed from (0: from scratch) */
  int64_t first_step, last_step;             /* -1: no step line yet */
  double step_ms;                            /* the step times its step lines gave, summed */
  int64_t timed;                             /* how many lines gave one */
  int64_t bad_step;                          /* the step a non-finite value stopped, or -1 */
  char cause[512];                           /* why it failed, when the output said */
  int blamed;                                /* the rank the cause names, or -1 */
  FailKind kind;
} Launch;

typedef struct Sup {
  const LaunchSupervisor *s;
  const char *ckpt_dir;
  FILE *report;
  bool report_failed; /* a write of the report failed (said once): the exit status is not 0 */
  double t0;
  const char *trainer; /* the current trainer and its ranks */
  int ranks;
  char work[PATH_MAX]; /* a temporary directory for elastic trainers, or "" */
  char *owned;         /* the current trainer when this made it */
  Launch l;
  int launches;
  bool recovering;   /* the next first step ends a recovery */
  double failed_at;  /* the failed job's last sign of life */
  double ended_at;   /* when it ended */
  int64_t reached;   /* the step the failed job had reached (--restart-step) */
  int64_t skip;      /* batches the next launch passes over (--skip-batches), or 0 */
  int64_t user_skip; /* the --skip-batches among the trainer's options (before any checkpoint) */
  double carry;      /* seconds of launches since the restart's checkpoint, none of it kept */
  double downtime;   /* the --restart-downtime of the last launch */
  double *latencies; /* one per recovery */
  int nlat;
  int64_t lost;      /* steps run again */
  double productive; /* seconds of the steps kept */
  int blame[MAX_RANKS];
} Sup;

static void say(const Sup *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const Sup *u, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", u->s->prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  va_end(ap);
}

/* Seconds to the millisecond, printed so. */
static json_object *seconds(double s) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.3f", s);
  return json_object_new_double_s(round(s * 1e3) / 1e3, buf);
}

/* One JSON object to the report file, written whole and flushed. */
static void report(Sup *u, json_object *o) {
  json_object_object_add(o, "t", seconds(rt_now_s() - u->t0));
  if (u->report && !u->report_failed &&
      (fprintf(u->report, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)) < 0 ||
       fflush(u->report) != 0)) {
    u->report_failed = true;
    say(u, "error: %s: cannot write the report: %s", u->s->report, strerror(errno));
  }
  json_object_put(o);
}

static json_object *event(const char *name) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "event", json_object_new_string(name));
  return o;
}

/* ===== the job's output ================================================================ */

/* An event line of the trainer (axrt_event.h): a failure's cause, rank, step and tensor; the
 * step a rank resumed from. 0, or -1 when the line is none. */
static int on_event(Sup *u, const char *json) {
  Launch *l = &u->l;
  json_object *o = json_tokener_parse(json), *v;
  const char *event = json_object_object_get_ex(o, "event", &v) ? json_object_get_string(v) : NULL;
  int64_t step = json_object_object_get_ex(o, "step", &v) ? json_object_get_int64(v) : -1;
  int rank = json_object_object_get_ex(o, "rank", &v) ? json_object_get_int(v) : -1;
  int cause =
      json_object_object_get_ex(o, "cause", &v) ? rt_cause_find(json_object_get_string(v)) : -1;
  const char *tensor =
      json_object_object_get_ex(o, "tensor", &v) ? json_object_get_string(v) : NULL;
  int rc = event ? 0 : -1;
  if (event && !strcmp(event, "resumed") && step >= 0) {
    l->start_step = step;
  } else if (event && !strcmp(event, "failure") && cause >= 0 && !l->cause[0]) {
    const RtCauseInfo *c = &rt_causes[cause];
    char at[64] = "";
    if (step >= 0) snprintf(at, sizeof at, "step %lld", (long long)step);
    if (c->blames)
      snprintf(l->cause, sizeof l->cause, "rank %d: %s%s%s", rank, c->what, *at ? " at " : "", at);
    else
      snprintf(l->cause, sizeof l->cause, "%s (%s%s%s)", c->what, at, *at && tensor ? ": " : "",
               tensor ? tensor : "");
    l->blamed = c->blames ? rank : -1;
    l->kind = cause;
    if (cause == RT_CAUSE_NONFINITE && step >= 0) l->bad_step = step;
  }
  json_object_put(o);
  return rc;
}

/* A step line of rank 0 ("step 12 loss ..."), the trainer's event lines, and the launcher's
 * messages that say why a job died (a rank killed). The first cause found stands: the later
 * ones are its echoes. */
static void on_line(void *ctx, int fd, const char *line) {
  Sup *u = ctx;
  Launch *l = &u->l;
  double t = rt_now_s();
  long long n;
  int r, sig;
  const char *p;
  if (fd == 1 && sscanf(line, "step %lld ", &n) == 1) {
    if (l->first_step < 0) {
      l->first_step = n;
      l->first_at = t;
      if (u->recovering) {
        double lat = t - u->failed_at;
        u->latencies[u->nlat++] = lat;
        u->recovering = false;
        say(u,
            "recovered: step %lld ran %.2f s after the failure's last sign of life (%.2f s to "
            "notice it, %.2f s to restart)",
            n, lat, u->ended_at - u->failed_at, t - u->ended_at);
        json_object *o = event("recovered");
        json_object_object_add(o, "step", json_object_new_int64(n));
        json_object_object_add(o, "latency_s", seconds(lat));
        json_object_object_add(o, "detect_s", seconds(u->ended_at - u->failed_at));
        json_object_object_add(o, "restart_s", seconds(t - u->ended_at));
        report(u, o);
      }
    }
    /* the step's own time: "step_ms T" (plain lines), "... tok/s  T ms" (a terminal's) */
    double ms;
    if (((p = strstr(line, " step_ms ")) && sscanf(p, " step_ms %lf", &ms) == 1) ||
        ((p = strstr(line, " tok/s  ")) && sscanf(p, " tok/s %lf ms", &ms) == 1 &&
         strstr(p, " ms"))) {
      if (ms >= 0 && isfinite(ms)) {
        l->step_ms += ms;
        l->timed++;
      }
    }
    l->last_step = n;
    l->last_at = l->alive_at = t; /* the last sign of life: a step done */
    return;
  }
  if ((p = strstr(line, RT_EVENT_PREFIX)) && on_event(u, p + strlen(RT_EVENT_PREFIX)) == 0) return;
  if (l->cause[0]) return;
  if ((p = strstr(line, "process rank ")) && sscanf(p, "process rank %d", &r) == 1 &&
      (p = strstr(line, "exited on signal ")) && sscanf(p, "exited on signal %d", &sig) == 1) {
    snprintf(l->cause, sizeof l->cause, "rank %d died of signal %d (%s)", r, sig, strsignal(sig));
    l->blamed = r;
  } else if (strstr(line, "srun: error:") && (p = strstr(line, ": task ")) &&
             sscanf(p, ": task %d:", &r) == 1 && !strstr(line, "Exited with exit code")) {
    const char *why = strchr(p + 7, ':') + 1; /* after "task N:", which sscanf matched */
    snprintf(l->cause, sizeof l->cause, "rank %d: %s", r, why + strspn(why, " "));
    l->blamed = r;
  }
}

/* ===== launching ======================================================================= */

/* The numbers a restarted job is told (restart_args). */
typedef struct Numbers {
  char np[32], step[32], down[32], skip[32];
} Numbers;

/* The options of a restart: the step reached before the failure and the seconds since it, for
 * the trainer's goodput, and the batches to pass over. */
static int restart_args(Sup *u, char **args, int k, Numbers *num) {
  snprintf(num->step, sizeof num->step, "%lld", (long long)u->reached);
  u->downtime = rt_now_s() - u->failed_at + u->carry;
  snprintf(num->down, sizeof num->down, "%.3f", u->downtime);
  args[k++] = "--restart-step";
  args[k++] = num->step;
  args[k++] = "--restart-downtime";
  args[k++] = num->down;
  if (u->skip > 0) {
    snprintf(num->skip, sizeof num->skip, "%lld", (long long)u->skip);
    args[k++] = "--skip-batches";
    args[k++] = num->skip;
  }
  return k;
}

/* The launcher's command for the current trainer: srun in a Slurm allocation, else mpirun (or
 * mpiexec); one rank runs the trainer alone. args is (argc + 18) long; the strings are the
 * caller's, num's or static. */
static int launch_argv(Sup *u, char **args, Numbers *num, char *tool, bool resume) {
  char *np = num->np;
  size_t cap = sizeof num->np;
  int k = 0;
  snprintf(np, cap, "%d", u->ranks);
  if (u->ranks > 1 && launch_in_slurm()) {
    args[k++] = tool;
    args[k++] = "-n";
    args[k++] = np;
    args[k++] = "--kill-on-bad-exit=1"; /* a dead task ends the step, as under mpirun */
    const char *type = getenv("SLURM_MPI_TYPE");
    if (!type || !*type) args[k++] = "--mpi=pmix";
  } else if (u->ranks > 1) {
    args[k++] = tool;
    args[k++] = "-np";
    args[k++] = np;
    if (u->ranks > sysconf(_SC_NPROCESSORS_ONLN)) args[k++] = "--oversubscribe";
  }
  args[k++] = (char *)u->trainer;
  bool has_resume = false;
  for (int i = 0; i < u->s->argc; i++) {
    const char *a = u->s->argv[i];
    has_resume = has_resume || !strcmp(a, "--resume");
    if (resume && !strncmp(a, "--skip-batches=", 15)) continue; /* restart_args says the skip */
    if (resume && !strcmp(a, "--skip-batches") && i + 1 < u->s->argc) {
      i++;
      continue;
    }
    args[k++] = u->s->argv[i];
  }
  if (resume && !has_resume) args[k++] = "--resume";
  if (resume) k = restart_args(u, args, k, num);
  args[k] = NULL;
  return k;
}

/* ===== elastic: the trainer of a smaller mesh ========================================== */

/* Builds the trainer of `to` ranks into the work directory, through the driver's rebuild (the
 * config of the current trainer, planned for the smaller mesh). 0, -1 when this count does not
 * fit (said why), -2 on a system failure. */
static int elastic_build(Sup *u, const char *config, int to, char **exe) {
  char name[64];
  snprintf(name, sizeof name, "/trainer-%d", to);
  *exe = base_join(u->work, "", name);
  LaunchShrink done = {0};
  const LaunchRebuild *r = &u->s->rebuild;
  int rc = r->build(r->ctx, u->s->prog, config, u->ranks, to, *exe, &done);
  if (rc != 0) {
    free(*exe);
    *exe = NULL;
    return rc;
  }
  json_object *o = event("shrink");
  json_object_object_add(o, "from", json_object_new_int(u->ranks));
  json_object_object_add(o, "to", json_object_new_int(to));
  json_object_object_add(o, "microbatches", json_object_new_int64(done.microbatches));
  json_object_object_add(o, "global_batch", json_object_new_int64(done.global_batch));
  report(u, o);
  say(u,
      "elastic: going on with %d ranks instead of %d: %lld microbatches, global batch %lld "
      "kept",
      to, u->ranks, (long long)done.microbatches, (long long)done.global_batch);
  return 0;
}

/* Goes on with the largest rank count below `below` and at least min_ranks that the job
 * compiles for. 0, or -1 (said why). */
static int elastic_shrink(Sup *u, int below) {
  int min = u->s->min_ranks > 0 ? u->s->min_ranks : u->ranks;
  if (!u->work[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(u->work, sizeof u->work, "%s/axlc-launch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(u->work)) {
      say(u, "elastic: %s: cannot create a temporary directory: %s", u->work, strerror(errno));
      u->work[0] = 0;
      return -1;
    }
  }
  if (!u->s->rebuild.build) {
    say(u, "elastic: this job cannot be rebuilt for fewer ranks");
    return -1;
  }
  char *config = base_join(u->work, "/", "config.json");
  char *argv[] = {(char *)u->trainer, "--config", NULL};
  if (base_run_to_file(argv, config) != 0) {
    say(u, "elastic: %s --config did not give the job's config", u->trainer);
    unlink(config);
    free(config);
    return -1;
  }
  int rc = -1;
  for (int to = below; to >= min && to >= 1 && rc == -1; to--) {
    char *exe = NULL;
    rc = elastic_build(u, config, to, &exe);
    if (rc == 0) {
      if (u->owned) unlink(u->owned); /* the trainer of an earlier shrink */
      free(u->owned);
      u->owned = exe;
      u->trainer = exe;
      u->ranks = to;
      memset(u->blame, 0, sizeof u->blame);
    }
  }
  if (rc) say(u, "elastic: no mesh of %d to %d ranks fits the job", min, below);
  unlink(config);
  free(config);
  return rc ? -1 : 0;
}

/* ===== the loop ======================================================================= */

/* The steps kept from a launch that ran from start_step to `kept` (the next start), timed by
 * the mean of the step times its step lines gave (the trainer's own: a stop of the job, or of
 * this process while the job waits on its output, is not a step's time), else by the mean
 * interval of its step lines (a trainer that prints no step time). */
static void count_kept(Sup *u, int64_t kept) {
  Launch *l = &u->l;
  if (kept <= l->start_step) return;
  if (l->timed > 0)
    u->productive += (double)(kept - l->start_step) * l->step_ms / 1e3 / (double)l->timed;
  else if (l->last_step > l->first_step)
    u->productive += (double)(kept - l->start_step) * (l->last_at - l->first_at) /
                     (double)(l->last_step - l->first_step);
}

/* Sleeps `s` seconds unless SIGINT, SIGTERM or SIGHUP comes: that signal, or 0. */
static int backoff_wait(double s) {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, &old);
  struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
  int sig = sigtimedwait(&set, NULL, &ts);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return sig > 0 ? sig : 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void summary(Sup *u, int status, int restarts) {
  double wall = rt_now_s() - u->t0, med = 0, worst = 0;
  if (u->nlat) {
    qsort(u->latencies, (size_t)u->nlat, sizeof *u->latencies, cmp_double);
    med = u->nlat % 2 ? u->latencies[u->nlat / 2]
                      : (u->latencies[u->nlat / 2 - 1] + u->latencies[u->nlat / 2]) / 2;
    worst = u->latencies[u->nlat - 1];
  }
  double goodput = wall > 0 ? 100 * u->productive / wall : 0;
  if (restarts)
    say(u,
        "%d restart%s; recovery latency median %.2f s, worst %.2f s; %lld step%s lost; goodput "
        "%.1f%% (the time of the steps kept over %.1f s of wall time)",
        restarts, restarts == 1 ? "" : "s", med, worst, (long long)u->lost, u->lost == 1 ? "" : "s",
        goodput, wall);
  json_object *o = event("end");
  json_object_object_add(o, "status", json_object_new_int(status));
  json_object_object_add(o, "restarts", json_object_new_int(restarts));
  json_object_object_add(o, "ranks", json_object_new_int(u->ranks));
  json_object_object_add(o, "steps_lost", json_object_new_int64(u->lost));
  json_object_object_add(o, "latency_median_s", seconds(med));
  json_object_object_add(o, "latency_worst_s", seconds(worst));
  json_object_object_add(o, "wall_s", seconds(wall));
  json_object_object_add(o, "goodput", seconds(goodput / 100));
  report(u, o);
}

/* One launch of the current trainer: its exit status; *signalled as launch_job. */
static int launch_once(Sup *u, bool resume, int *signalled) {
  Numbers num;
  char *tool = (char *)u->s->launcher;
  if (u->ranks > 1 && !tool) {
    fprintf(stderr, "error: %s was not found on PATH\n", launch_in_slurm() ? "srun" : "mpirun");
    return -1;
  }
  char **args = base_xcalloc((size_t)u->s->argc + 18, sizeof *args);
  launch_argv(u, args, &num, tool, resume);
  memset(&u->l, 0, sizeof u->l);
  u->l.first_step = u->l.last_step = u->l.bad_step = -1;
  u->l.blamed = -1;
  u->l.kind = FAIL_OTHER;
  u->l.start = u->l.alive_at = rt_now_s();
  u->launches++;
  json_object *o = event("launch");
  json_object_object_add(o, "launch", json_object_new_int(u->launches));
  json_object_object_add(o, "ranks", json_object_new_int(u->ranks));
  json_object_object_add(o, "launcher", json_object_new_string(args[0]));
  if (resume) {
    json_object_object_add(o, "restart_step", json_object_new_int64(u->reached));
    json_object_object_add(o, "skip_batches", json_object_new_int64(u->skip));
  }
  report(u, o);
  LaunchLines lines = {on_line, u};
  int rc = launch_job_lines(args, u->trainer, &lines, signalled);
  if (rc < 0) fprintf(stderr, "error: %s: could not start it\n", args[0]);
  free(args);
  return rc;
}

/* After a failed launch: 0 to restart (after the back-off, with the ranks it decided), or the
 * exit status to end with. */
typedef struct Streak {
  int restarts, same, fails_no_ckpt;
  char last_cause[512];
  FailKind last_kind;
  int last_blamed;
  int64_t last_fail_step, last_ckpt;
  int64_t skip, skip_ckpt; /* the batches passed over from checkpoint skip_ckpt, or 0 */
} Streak;

/* The kind of failure: the trainer's exit status where the launcher passed it on (mpirun
 * passes the first failed rank's, srun the highest), else what the output said. */
static void classify(Launch *l, int rc) {
  for (int c = 0; c < RT_CAUSE_COUNT; c++) {
    if (!rt_causes[c].status || rc != rt_causes[c].status) continue;
    l->kind = c;
    if (!l->cause[0])
      snprintf(l->cause, sizeof l->cause, "%s (exit status %d)", rt_causes[c].what, rc);
  }
}

/* After a non-finite loss at step `bad`, the batches the restart from checkpoint ckpt passes
 * over: the launch that failed ran step s on batch s - 1 + (the skip it had, when it started
 * from the same checkpoint), so bad - ckpt more go past the bad batch; the steps after it take
 * the batches that follow in order. */
static void skip_past(Streak *k, int64_t bad, int64_t ckpt) {
  k->skip = (ckpt == k->skip_ckpt ? k->skip : 0) + (bad - ckpt);
  k->skip_ckpt = ckpt;
}

static int after_failure(Sup *u, int rc, Streak *k) {
  Launch *l = &u->l;
  u->ended_at = rt_now_s();
  u->failed_at = l->alive_at;
  classify(l, rc);
  if (!l->cause[0] && rc > 128 && u->ranks == 1) { /* no launcher: the trainer is the job */
    snprintf(l->cause, sizeof l->cause, "the trainer (rank 0) died of signal %d (%s)", rc - 128,
             strsignal(rc - 128));
    l->blamed = 0;
  } else if (!l->cause[0] && rc > 128) {
    snprintf(l->cause, sizeof l->cause, "the launcher (%s) died of signal %d (%s)",
             launch_in_slurm() ? "srun" : "mpirun", rc - 128, strsignal(rc - 128));
  } else if (!l->cause[0]) {
    snprintf(l->cause, sizeof l->cause, "the job exited with status %d", rc);
  }
  int64_t reached = l->last_step >= 0 ? l->last_step : l->start_step, ckpt = 0;
  if (l->kind == RT_CAUSE_NONFINITE && l->bad_step < 0) l->bad_step = reached + 1; /* no message */
  if (l->bad_step > reached) reached = l->bad_step; /* it ran, and printed no step line */
  RtError err;
  /* without --ckpt-dir (--max-restarts 0) there is no checkpoint to go back to */
  if (!u->ckpt_dir || rt_ckpt_latest(u->ckpt_dir, RT_CKPT_ANY, &ckpt, &err) < 0) ckpt = 0;
  int64_t lost = reached > ckpt ? reached - ckpt : 0;
  count_kept(u, ckpt);
  /* a launch that saved no checkpoint kept nothing: its downtime and its time up to the failure
   * are the next one's downtime too (the checkpoint holds the wall time before them) */
  u->carry = ckpt > 0 && ckpt > k->last_ckpt ? 0 : u->downtime + (u->failed_at - l->start);
  /* the same failure at the same step; a non-finite value or a rank's corruption is the same
   * whatever its numbers */
  bool again = reached == k->last_fail_step &&
               (l->kind != FAIL_OTHER ? l->kind == k->last_kind && l->blamed == k->last_blamed
                                      : !strcmp(l->cause, k->last_cause));
  k->same = again ? k->same + 1 : 1;
  k->last_kind = l->kind;
  k->last_blamed = l->blamed;
  snprintf(k->last_cause, sizeof k->last_cause, "%s", l->cause);
  k->fails_no_ckpt = ckpt > k->last_ckpt ? 1 : k->fails_no_ckpt + 1;
  k->last_fail_step = reached;
  k->last_ckpt = ckpt;
  json_object *o = event("failure");
  json_object_object_add(o, "launch", json_object_new_int(u->launches));
  json_object_object_add(o, "cause", json_object_new_string(l->cause));
  json_object_object_add(o, "rank", json_object_new_int(l->blamed));
  json_object_object_add(o, "status", json_object_new_int(rc));
  json_object_object_add(o, "step", json_object_new_int64(reached));
  json_object_object_add(o, "checkpoint", json_object_new_int64(ckpt));
  json_object_object_add(o, "steps_lost", json_object_new_int64(lost));
  report(u, o);
  say(u, "the job failed at step %lld: %s; %s %lld (%lld step%s lost)", (long long)reached,
      l->cause, ckpt ? "the last complete checkpoint is step" : "no checkpoint yet: from step",
      (long long)ckpt, (long long)lost, lost == 1 ? "" : "s");
  if (u->launches == 1 && l->first_step < 0 && l->blamed < 0 && l->kind == FAIL_OTHER) {
    say(u, "it failed before its first step, with no rank lost: a restart would fail the same "
           "way; not restarting");
    return rc ? rc : 1;
  }
  int min = u->s->min_ranks > 0 ? u->s->min_ranks : u->ranks;
  bool shrink = l->blamed >= 0 && l->blamed < MAX_RANKS &&
                u->blame[l->blamed] + 1 >= u->s->shrink_after && min < u->ranks;
  if (k->same >= u->s->same_step && !shrink) { /* without the rank, it is another job */
    say(u, "the job failed %d times at step %lld: a restart repeats this failure; giving up",
        k->same, (long long)reached);
    return rc ? rc : 1;
  }
  if (k->restarts >= u->s->max_restarts) {
    say(u, "%d restart%s used (--max-restarts %d); giving up", k->restarts,
        k->restarts == 1 ? "" : "s", u->s->max_restarts);
    return rc ? rc : 1;
  }
  u->lost += lost;
  if (l->blamed >= 0 && l->blamed < MAX_RANKS) u->blame[l->blamed]++;
  if (shrink) {
    say(u, "rank %d failed %d times: going on without it", l->blamed, u->blame[l->blamed]);
    if (elastic_shrink(u, u->ranks - 1)) return rc ? rc : 1;
    k->same = 0;
  }
  if (l->kind == RT_CAUSE_NONFINITE) {
    skip_past(k, l->bad_step, ckpt);
    say(u,
        "a non-finite value at step %lld: back to step %lld, passing over %lld batch%s (the "
        "bad one at step %lld)",
        (long long)l->bad_step, (long long)ckpt, (long long)k->skip, k->skip == 1 ? "" : "es",
        (long long)l->bad_step);
  } else if (ckpt != k->skip_ckpt) {
    k->skip = 0; /* a newer checkpoint holds the data position past the bad batch */
  }
  u->skip = k->skip + (ckpt ? 0 : u->user_skip); /* a checkpoint holds the data position */
  u->reached = reached;
  double delay = u->s->backoff * pow(2, k->fails_no_ckpt - 1);
  if (delay > BACKOFF_MAX) delay = BACKOFF_MAX;
  k->restarts++;
  say(u, "restart %d of %d in %.1f s, from step %lld", k->restarts, u->s->max_restarts, delay,
      (long long)ckpt);
  int sig = backoff_wait(delay);
  if (sig) {
    say(u, "%s during the back-off: not restarting", strsignal(sig));
    return 128 + sig;
  }
  u->recovering = true;
  return 0;
}

const char *launch_option(int argc, const char *const *argv, const char *name) {
  const char *value = NULL;
  size_t n = strlen(name);
  for (int i = 0; i < argc; i++)
    if (!strncmp(argv[i], name, n) && argv[i][n] == '=')
      value = argv[i] + n + 1;
    else if (!strcmp(argv[i], name) && i + 1 < argc)
      value = argv[i + 1];
  return value;
}

/* The tasks of the Slurm allocation: fewer than the trainer's devices shrink the job, when
 * min_ranks allows. 0, or -1 reported. */
static int fit_allocation(Sup *u) {
  const char *n = getenv("SLURM_NTASKS");
  if (!launch_in_slurm() || !n || atoi(n) <= 0 || atoi(n) >= u->ranks) return 0;
  int tasks = atoi(n), min = u->s->min_ranks > 0 ? u->s->min_ranks : u->ranks;
  if (tasks < min) {
    fprintf(stderr,
            "error: the Slurm allocation has %d tasks (SLURM_NTASKS) and the trainer runs on %d "
            "ranks (expected --min-ranks %d or less to go on with fewer)\n",
            tasks, u->ranks, tasks);
    return -1;
  }
  say(u, "the allocation has %d tasks for a trainer of %d ranks", tasks, u->ranks);
  if (elastic_shrink(u, tasks)) {
    fprintf(stderr, "error: no smaller mesh for %d tasks\n", tasks);
    return -1;
  }
  return 0;
}

/* The variable `name` passed to ranks on other nodes: srun passes the environment; Open MPI's
 * mpirun passes what mca_base_env_list names (";" its delimiter unless the user chose another). */
static void pass_env(const char *name) {
  const char *list = getenv("OMPI_MCA_mca_base_env_list");
  const char *delim = getenv("OMPI_MCA_mca_base_env_list_delimiter");
  if (!list || !*list) {
    setenv("OMPI_MCA_mca_base_env_list", name, 1);
  } else if (!strstr(list, name) && (!delim || !*delim || !strcmp(delim, ";"))) {
    char *more = base_join(list, ";", name);
    setenv("OMPI_MCA_mca_base_env_list", more, 1);
    free(more);
  }
}

int launch_supervise(const LaunchSupervisor *s) {
  static Sup u; /* large (blame counts); one supervisor per process */
  memset(&u, 0, sizeof u);
  u.s = s;
  u.t0 = rt_now_s();
  u.trainer = s->trainer;
  u.ranks = s->ranks;
  const char *const *argv = (const char *const *)s->argv;
  u.ckpt_dir = launch_option(s->argc, argv, "--ckpt-dir");
  const char *skip = launch_option(s->argc, argv, "--skip-batches");
  u.user_skip = skip ? strtoll(skip, NULL, 10) : 0; /* the trainer checks it */
  if (s->max_restarts > 0 && !u.ckpt_dir) {
    fprintf(stderr,
            "error: %s: restarts continue from checkpoints: expected --ckpt-dir DIR among the "
            "trainer's options (or --max-restarts 0)\n",
            s->prog);
    return 1;
  }
  RtError ferr;
  if (s->report && !(u.report = rt_file_open(s->report, "w", &ferr))) {
    fprintf(stderr, "error: --report %s\n", ferr.msg);
    return 1;
  }
  /* the ranks' stdout is mpirun's pty (rank 0), or this process's pipe (one rank): neither says
   * where the log goes; this process's stdout does. The ranks write event lines for this one. */
  setenv("AXLC_PROGRESS", isatty(STDOUT_FILENO) ? "terminal" : "plain", 1);
  setenv(RT_EVENT_ENV, "1", 1);
  pass_env("AXLC_PROGRESS");
  pass_env(RT_EVENT_ENV);
  u.latencies = base_xcalloc((size_t)s->max_restarts + 1, sizeof *u.latencies);
  Streak k = {.last_fail_step = -1,
              .last_ckpt = -1,
              .last_blamed = -1,
              .skip_ckpt = -1,
              .last_kind = FAIL_OTHER};
  if (u.ranks > 1 && launch_in_slurm())
    say(&u,
        "SLURM_JOB_ID=%s is set: launching with srun inside that Slurm allocation (unset "
        "SLURM_JOB_ID to launch with mpirun)",
        getenv("SLURM_JOB_ID"));
  int status = fit_allocation(&u) ? 1 : -1;
  while (status < 0) {
    int signalled = 0;
    int rc = launch_once(&u, k.restarts > 0, &signalled);
    if (rc < 0) {
      status = 1;
    } else if (signalled) {
      status = 128 + signalled; /* the ranks have saved and said where */
    } else if (rc == 0) {
      count_kept(&u, u.l.last_step);
      status = 0;
    } else {
      int end = after_failure(&u, rc, &k);
      if (end) status = end;
    }
  }
  summary(&u, status, k.restarts);
  if (u.report && fclose(u.report) != 0 && !u.report_failed) {
    u.report_failed = true;
    say(&u, "error: %s: cannot write the report: %s", s->report, strerror(errno));
  }
  if (u.report_failed && status == 0) status = 1; /* the job ran; its report is not whole */
  if (u.owned) unlink(u.owned);
  if (u.work[0]) rmdir(u.work);
  free(u.owned);
  free(u.latencies);
  return status;
}
