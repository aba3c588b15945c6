/* run.c: `axlc run` once the job is lowered: trained in this process by the backend (the LLVM
 * JIT, the interpreter), or as a trainer of its own that the launch layer starts (launch/).
 *
 * A job of several devices runs as that many processes: the backend links its trainer (compile's
 * default emit) into a temporary directory, and the supervisor starts it through mpirun, or srun
 * in a Slurm allocation, with the trainer options, restarting it as the caller's supervisor
 * options say. A backend whose device driver must not load into axlc (run_trainer: opencl)
 * trains through its trainer on one device too, started as a job: a Ctrl-C or SIGTERM to axlc
 * reaches the trainer, which saves. The launcher is found before anything is compiled: a
 * missing mpirun costs nothing. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/driver.h"

/* srun or mpirun, found once for the job; NULL reported to j->diag, with how to do it by
 * hand. */
static char *find_launcher(DrvJob *j, long long n) {
  char *tool = launch_launcher();
  if (tool) return tool;
  if (launch_in_slurm())
    fe_error(&j->diag, NULL, NULL,
             "SLURM_JOB_ID is set, and srun was not found on PATH to start the ranks");
  else
    fe_error(&j->diag, j->file, "/mesh",
             "this job runs on %lld devices, one process each, and mpirun was not found on PATH "
             "(Debian: apt-get install openmpi-bin); or compile it with `axlc compile %s --target "
             "cpu-%lld -o trainer` and start `mpirun -np %lld ./trainer --data FILE ...` or `srun "
             "-n %lld ./trainer ...`",
             n, j->file ? j->file : "MODEL", n, n, n);
  return NULL;
}

/* The trainer of bj linked by b into a new temporary directory $TMPDIR/PREFIX-XXXXXX as
 * `name`; its path (malloc'd; *dir the directory's), or NULL reported. */
static char *link_trainer(const Backend *b, const BackendJob *bj, const BackendOptions *o,
                          const char *prefix, const char *name, char **dir) {
  const char *tmp = getenv("TMPDIR");
  *dir = base_join(tmp && *tmp ? tmp : "/tmp", "/", prefix);
  if (!mkdtemp(*dir)) {
    backend_error(&bj->diag, *dir, NULL, "cannot create a temporary directory for the trainer");
    free(*dir);
    *dir = NULL;
    return NULL;
  }
  char *exe = base_join(*dir, "/", name);
  if (b->compile(bj, o, b->emits[0].name, exe) == 0) return exe;
  free(exe);
  rmdir(*dir);
  free(*dir);
  *dir = NULL;
  return NULL;
}

/* One process, the trainer alone, as a job. */
static int run_job(const Backend *b, const BackendJob *bj, const BackendOptions *o, int argc,
                   char **argv) {
  /* the trainer's messages start with its file name: argv[0] ("axlc run"), as in process */
  const char *name = argc > 0 && argv[0] && *argv[0] && !strchr(argv[0], '/') ? argv[0] : "trainer";
  char *dir, *exe = link_trainer(b, bj, o, "axlc-ocl-XXXXXX", name, &dir);
  if (!exe) return 1;
  char **args = base_xcalloc((size_t)argc + 1, sizeof *args);
  args[0] = exe;
  for (int i = 1; i < argc; i++) args[i] = argv[i];
  int sig = 0, rc = launch_job(args, exe, &sig);
  if (rc < 0) {
    backend_error(&bj->diag, exe, NULL, "cannot start the trainer");
    rc = 1;
  }
  free(args);
  unlink(exe);
  rmdir(dir);
  free(exe);
  free(dir);
  return rc;
}

int drv_run(DrvJob *j, const Backend *b, const BackendJob *bj, const BackendOptions *o,
            const LaunchSupervisor *sv, int argc, char **argv) {
  bool sample = false; /* --sample runs the unsharded forward in this one process */
  for (int i = 1; i < argc; i++)
    sample = sample || !strcmp(argv[i], "--sample") || !strncmp(argv[i], "--sample=", 9);
  int64_t devices = ir_mesh_devices(&j->graph->mesh);
  bool ranks = devices > 1 && !rt_comm_launched() && !sample && b->compile && b->standalone;
  if (!ranks && b->run) return b->run(bj, o, argc, argv);
  if (!ranks) return run_job(b, bj, o, argc, argv);
  LaunchSupervisor s = *sv;
  char *tool = find_launcher(j, (long long)devices);
  if (!tool) return 1;
  char *dir, *exe = link_trainer(b, bj, o, "axlc-run-XXXXXX", "trainer", &dir);
  int rc = 1;
  if (exe) {
    s.trainer = exe;
    s.ranks = (int)devices;
    s.launcher = tool;
    s.argc = argc - 1;
    s.argv = argv + 1;
    rc = launch_supervise(&s);
    unlink(exe);
    rmdir(dir);
  }
  free(exe);
  free(dir);
  free(tool);
  return rc;
}
