/* spawn.c: a trainer's ranks (mpirun, srun, or the trainer alone) run as a job, and waited for.
 *
 * A tool that runs for long (mpirun and its ranks) is started as a job: in a process group of
 * its own, so that a Ctrl-C on the terminal reaches this process alone and not mpirun, which
 * would kill its ranks within a second instead of letting them save. This process passes the
 * signal on to the ranks itself and waits for the job, and the job is ended if this process
 * dies (Linux: PR_SET_PDEATHSIG), so no rank trains on without its launcher. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "base/base.h"
#include "launch/launch.h"
#include "runtime/axrt.h"

/* ===== jobs: mpirun, and the signals this process receives meanwhile ================== */

/* Sends sig to every process running the executable `exe` (resolved path); returns how many
 * there were. Linux only (/proc); elsewhere none are found. */
static int signal_workers(const char *exe, int sig) {
  int n = 0;
  DIR *d = exe ? opendir("/proc") : NULL;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    char link[300], target[PATH_MAX];
    if (strspn(e->d_name, "0123456789") != strlen(e->d_name)) continue;
    snprintf(link, sizeof link, "/proc/%s/exe", e->d_name);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = 0;
    if (strcmp(target, exe) == 0 && kill((pid_t)atol(e->d_name), sig) == 0) n++;
  }
  if (d) closedir(d);
  return n;
}

/* In the child, before exec: its own process group, stdin from /dev/null (a background
 * process group that reads the terminal would be stopped), and SIGTERM when the parent dies. */
static void job_child(char *const *argv, const sigset_t *mask, pid_t parent) {
  setpgid(0, 0);
  int null = open("/dev/null", O_RDONLY);
  if (null >= 0 && null != STDIN_FILENO) {
    dup2(null, STDIN_FILENO);
    close(null);
  }
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127); /* the parent died before prctl */
#else
  (void)parent;
#endif
  sigprocmask(SIG_SETMASK, mask, NULL);
  execvp(argv[0], argv);
  _exit(127);
}

/* What a signal to this process does to the job: see launch.h. */
static void job_signal(pid_t pid, const char *exe, int sig, int *first) {
  if (sig == SIGTSTP) { /* stop the job with this process, and continue it with it */
    signal_workers(exe, SIGSTOP);
    kill(pid, SIGSTOP);
    raise(SIGSTOP);
    kill(pid, SIGCONT);
    signal_workers(exe, SIGCONT);
    return;
  }
  if (*first == 0) {
    *first = sig;
    /* SIGINT and SIGTERM as they came (the ranks say which); SIGHUP, which the ranks do not
     * catch, as SIGTERM */
    if (signal_workers(exe, sig == SIGHUP ? SIGTERM : sig) > 0) return;
  } else {
    signal_workers(exe, SIGTERM); /* again: the ranks quit at once (their handler is reset) */
  }
  kill(pid, SIGTERM);
}

/* The job's output as it comes: passed on to this process's stdout (fd 1) or stderr (fd 2) at
 * once, and handed to lines->line a whole line at a time. */
typedef struct JobPipe {
  int fd, to; /* read end; where it goes */
  char buf[4096];
  size_t len;
} JobPipe;

static void pipe_line(JobPipe *p, const LaunchLines *lines, bool flush) {
  size_t start = 0;
  for (size_t i = 0; i < p->len; i++)
    if (p->buf[i] == '\n' || p->buf[i] == '\r') {
      p->buf[i] = 0;
      lines->line(lines->ctx, p->to, p->buf + start);
      start = i + 1;
    }
  /* the end of the output without a newline, a line longer than the buffer, or a terminal's
   * progress line, which ends with "erase to the end of the line" and waits for the next \r
   * (a trainer's rank 0 under mpirun writes to a pty): what there is */
  bool erased = p->len - start >= 3 && !memcmp(p->buf + p->len - 3, "\033[K", 3);
  if (start < p->len && (flush || erased || (start == 0 && p->len == sizeof p->buf - 1))) {
    p->buf[p->len] = 0;
    lines->line(lines->ctx, p->to, p->buf + start);
    start = p->len;
  }
  memmove(p->buf, p->buf + start, p->len - start);
  p->len -= start;
}

/* Reads what is there (waiting up to ms); returns false at the end of both pipes. */
static bool pipes_read(JobPipe *p, int n, const LaunchLines *lines, int ms) {
  struct pollfd fds[2];
  int open = 0;
  for (int i = 0; i < n; i++) {
    fds[i] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
    open += p[i].fd >= 0;
  }
  if (!open) return false;
  if (poll(fds, (nfds_t)n, ms) <= 0) return true;
  for (int i = 0; i < n; i++) {
    if (p[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t got = read(p[i].fd, p[i].buf + p[i].len, sizeof p[i].buf - 1 - p[i].len);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      pipe_line(&p[i], lines, true);
      close(p[i].fd);
      p[i].fd = -1;
      continue;
    }
    ssize_t off = 0;
    while (off < got) { /* pass it on whole, as it came */
      ssize_t w = write(p[i].to, p[i].buf + p[i].len + off, (size_t)(got - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      off += w;
    }
    p[i].len += (size_t)got;
    pipe_line(&p[i], lines, false);
  }
  return true;
}

int launch_job(char *const *argv, const char *workers, int *signalled) {
  return launch_job_lines(argv, workers, NULL, signalled);
}

int launch_job_lines(char *const *argv, const char *workers, const LaunchLines *lines,
                     int *signalled) {
  char exe[PATH_MAX];
  const char *real = workers && realpath(workers, exe) ? exe : NULL;
  JobPipe pipes[2] = {{.fd = -1, .to = STDOUT_FILENO}, {.fd = -1, .to = STDERR_FILENO}};
  int ends[2][2] = {{-1, -1}, {-1, -1}};
  if (lines && (pipe(ends[0]) != 0 || pipe(ends[1]) != 0)) {
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 2; k++)
        if (ends[i][k] >= 0) close(ends[i][k]);
    return -1;
  }
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTSTP);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);
  *signalled = 0;
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    if (lines) {
      dup2(ends[0][1], STDOUT_FILENO);
      dup2(ends[1][1], STDERR_FILENO);
      for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) close(ends[i][k]);
    }
    job_child(argv, &old, parent);
  }
  if (lines) {
    for (int i = 0; i < 2; i++) {
      close(ends[i][1]);
      pipes[i].fd = ends[i][0];
      fcntl(pipes[i].fd, F_SETFD, FD_CLOEXEC);
    }
  }
  int status = 0, rc = -1;
  if (pid > 0) {
    setpgid(pid, pid); /* as the child does: whichever runs first */
    for (;;) {
      pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) {
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (done < 0 && errno != EINTR) break;
      /* Signals stay blocked and are taken here, one at a time: none is lost between two
       * waits. Those ignored when this began (a background job of a script) never arrive. */
      struct timespec tick = {lines ? 0 : 1, 0};
      if (lines) pipes_read(pipes, 2, lines, 100);
      int sig = sigtimedwait(&set, NULL, &tick);
      if (sig > 0 && sig != SIGCHLD) job_signal(pid, real, sig, signalled);
    }
  }
  /* The rest of the output; a process the job left behind that holds the pipes open is not
   * waited for more than two seconds. */
  for (double end = rt_now_s() + 2;
       lines && rt_now_s() < end && pipes_read(pipes, 2, lines, 100);) {
  }
  for (int i = 0; i < 2; i++)
    if (pipes[i].fd >= 0) {
      pipe_line(&pipes[i], lines, true);
      close(pipes[i].fd);
    }
  /* What came after the last wait is counted, not left pending to kill this process when the
   * mask is restored, before the caller removes its temporaries. */
  struct timespec now = {0, 0};
  for (int sig; (sig = sigtimedwait(&set, NULL, &now)) > 0;)
    if (sig != SIGCHLD && sig != SIGTSTP && *signalled == 0) *signalled = sig;
  sigprocmask(SIG_SETMASK, &old, NULL);
  return rc;
}

bool launch_in_slurm(void) {
  const char *id = getenv("SLURM_JOB_ID");
  return id && *id;
}

char *launch_launcher(void) {
  if (launch_in_slurm()) return base_which("srun");
  char *tool = base_which("mpirun");
  return tool ? tool : base_which("mpiexec");
}
