/* proc.c: running a tool (the C compiler that links trainers, `cc -r`, a trainer asked for its
 * config) and waiting for it (base.h). A job that runs for long, with its signals passed on
 * (mpirun and its ranks), is the launch layer's (launch/spawn.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"

/* Waits for child pid: its exit status, 128 + the signal that ended it, or -1. */
static int wait_status(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int base_run(char *const *argv) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  return wait_status(pid);
}

char *base_which(const char *name) {
  const char *path = getenv("PATH");
  char *dirs = base_xstrdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin"), *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    char *full = base_join(*d ? d : ".", "/", name);
    if (access(full, X_OK) == 0) {
      free(dirs);
      return full;
    }
    free(full);
  }
  free(dirs);
  return NULL;
}

/* ===== linking: the tool's messages, and why it failed ================================ */

int base_run_log(char *const *argv, char *log, size_t cap) {
  int fd[2];
  if (cap) log[0] = 0;
  if (cap < 2) cap = 0;
  if (pipe(fd) != 0) return base_run(argv);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    close(fd[1]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  char buf[4096];
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    fwrite(buf, 1, (size_t)n, stderr); /* the user sees the tool's messages as they come */
    for (ssize_t i = 0; cap && i < n; i++) {
      if (len + 1 == cap) { /* keep the head and the tail: the reason comes last, or first and
                               then a long crash report (LLVM's "IO failure ..." and its stack) */
        size_t head = cap / 4, drop = cap / 4;
        memmove(log + head, log + head + drop, len - head - drop);
        len -= drop;
      }
      log[len++] = buf[i];
    }
  }
  if (cap) log[len] = 0;
  close(fd[0]);
  return wait_status(pid);
}

int base_run_to_file(char *const *argv, const char *out) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(127);
    close(fd);
    execvp(argv[0], argv);
    _exit(127);
  }
  return wait_status(pid);
}
