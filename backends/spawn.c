/* spawn.c: running a tool (the C compiler that links trainers, mpirun) and waiting for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/backend.h"

int backend_spawn(char *const *argv) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ===== linking: the tool's messages, and why it failed ================================ */

int backend_spawn_log(char *const *argv, char *log, size_t cap) {
  int fd[2];
  if (cap) log[0] = 0;
  if (cap < 2) cap = 0;
  if (pipe(fd) != 0) return backend_spawn(argv);
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
      if (len + 1 == cap) { /* keep the tail: the reason comes last */
        memmove(log, log + cap / 2, len - cap / 2);
        len -= cap / 2;
      }
      log[len++] = buf[i];
    }
  }
  if (cap) log[len] = 0;
  close(fd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
