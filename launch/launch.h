/*
 * launch.h: the launch layer, job control beside driver/: a trainer's ranks started as a job
 * (spawn.c) and a supervisor that restarts them after failures and goes on with fewer when one
 * keeps failing (supervise.c; docs/runtime.md, "The supervisor").
 *
 * It starts processes and reads what they print; it knows nothing of configs, the IR or the
 * backends. The driver hands it a linked trainer (compile's default emit) and, for elastic
 * shrinks, a way to build the trainer of a smaller mesh (LaunchRebuild: the driver plans it from
 * the frontend's axis table, driver.h: drv_elastic_plan). The CLI (tools/axlc.c) is the one
 * place that starts the supervisor: `axlc launch`, and `axlc run` on several devices.
 */
#ifndef AXLC_LAUNCH_H
#define AXLC_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================================================================== spawn.c */

/* Runs argv (mpirun) as a job and waits: its exit status, 128 + the signal that ended it, or -1
 * if it could not be started. The job has a process group of its own, so the terminal's signals
 * reach this process alone, and stdin from /dev/null. The first SIGINT, SIGTERM or SIGHUP this
 * process receives meanwhile goes to the processes running the executable `workers` (the ranks;
 * SIGHUP as SIGTERM), which stop after their step and save; to the job (SIGTERM) when none runs
 * yet; a later one ends them and the job at once. SIGTSTP stops the job with this process. The
 * job gets SIGTERM if this process dies (Linux). The first signal is stored in *signalled (0:
 * none). */
int launch_job(char *const *argv, const char *workers, int *signalled);
/* Where launch_job_lines hands the job's output: each line (without its newline, NUL
 * terminated) as it comes, with fd 1 for the job's stdout and 2 for its stderr. */
typedef struct LaunchLines {
  void (*line)(void *ctx, int fd, const char *line);
  void *ctx;
} LaunchLines;
/* launch_job with the job's stdout and stderr read through pipes: passed on to this process's
 * at once, and each line given to lines (NULL: the job writes to this process's own stdout and
 * stderr, as launch_job). */
int launch_job_lines(char *const *argv, const char *workers, const LaunchLines *lines,
                     int *signalled);
/* Whether this process runs inside a Slurm allocation (SLURM_JOB_ID): srun starts the ranks. */
bool launch_in_slurm(void);
/* The tool that starts ranks, found once for the whole job: srun inside a Slurm allocation,
 * else mpirun (or mpiexec); its full path (malloc'd), or NULL when it is not on PATH. */
char *launch_launcher(void);

/* ======================================================================== supervise.c */

/* The value of the trainer option `name` among argv[0..argc), given as "NAME V" or "NAME=V"
 * (the last one given), or NULL. */
const char *launch_option(int argc, const char *const *argv, const char *name);

/* What an elastic shrink went on with, for the report. */
typedef struct LaunchShrink {
  int64_t microbatches, global_batch;
} LaunchShrink;

/* How the supervisor gets the trainer of a smaller mesh: build writes the trainer of the job
 * whose resolved config is the file `config` (`TRAINER --config`), planned for `to` ranks
 * instead of `from`, to exe, and says what it does (prefixed by prog). 0; -1 when the job does
 * not fit `to` ranks (it said why); -2 on a failure that fewer ranks would not mend. */
typedef struct LaunchRebuild {
  int (*build)(void *ctx, const char *prog, const char *config, int from, int to, const char *exe,
               LaunchShrink *done);
  void *ctx;
} LaunchRebuild;

/* A supervised training job (`axlc launch`, `axlc run --target cpu-N`). */
typedef struct LaunchSupervisor {
  const char *prog;     /* the log lines' prefix: "axlc launch" */
  const char *trainer;  /* the trainer executable */
  int ranks;            /* the devices it was compiled for: one process each */
  const char *launcher; /* launch_launcher's, for ranks > 1; NULL: one rank, no launcher */
  int argc;             /* the trainer's options, argv[0..argc) */
  char *const *argv;
  int max_restarts;      /* restarts after failures (0: the job runs once) */
  int min_ranks;         /* elastic: the fewest ranks to go on with (0: ranks, never fewer) */
  double backoff;        /* seconds before a restart; doubles while no new checkpoint comes */
  int same_step;         /* failures at one step that end the job (a restart repeats them) */
  int shrink_after;      /* failures naming one rank before the job goes on without it */
  LaunchRebuild rebuild; /* the trainer of a smaller mesh (build NULL: never fewer ranks) */
  const char *report;    /* JSON lines: each launch, failure, recovery, shrink, the end; or NULL */
} LaunchSupervisor;

/* Runs the job under s->launcher (srun inside a Slurm allocation; the trainer alone for one
 * rank) and restarts it with --resume after each failure, as s says. Returns the exit status: 0
 * when the trainer finished, 128 + a signal that stopped it (the ranks saved), else the last
 * job's status; problems before the first launch are printed as errors (status 1). */
int launch_supervise(const LaunchSupervisor *s);

#endif /* AXLC_LAUNCH_H */
