/* spawn.c: running a tool (the C compiler that links trainers, mpirun) and waiting for it. */
#include <errno.h>
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
