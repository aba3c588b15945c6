/* spawn.c: running a tool (the C compiler that links trainers, mpirun) and waiting for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

int64_t backend_inputs_size(char *const *argv) {
  int64_t total = 0;
  struct stat st;
  for (int i = 1; argv[i]; i++) {
    if (!strcmp(argv[i], "-o") && argv[i + 1]) {
      i++; /* the output, perhaps an older trainer */
      continue;
    }
    if (argv[i][0] != '-' && stat(argv[i], &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  }
  return total;
}

/* The directory of `path` and TMPDIR: the first with less than `need` bytes free, or NULL. */
static const char *short_of_space(const char *path, int64_t need, char *dir, size_t cap,
                                  int64_t *avail) {
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  const char *slash = strrchr(path, '/');
  for (int k = 0; k < 2; k++) {
    if (k == 0 && !slash)
      snprintf(dir, cap, ".");
    else if (k == 0)
      snprintf(dir, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    else
      snprintf(dir, cap, "%s", tmp);
    struct statvfs vs;
    if (statvfs(dir, &vs) == 0 && (int64_t)vs.f_bavail * (int64_t)vs.f_frsize < need) {
      *avail = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
      return dir;
    }
  }
  return NULL;
}

/* A full disk is no missing package. The linker may say so ("No space left on device"), or
 * die of SIGBUS writing its memory-mapped output; then the free space tells. */
int backend_link_failed(FeDiag *d, const char *out, const char *cc, const char *log,
                        int64_t in_bytes, const char *needs) {
  const char *full = strstr(log, "No space left on device") ? "No space left on device"
                     : strstr(log, "Disk quota exceeded")   ? "Disk quota exceeded"
                                                            : NULL;
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[4096];
  int64_t avail = 0;
  if (full)
    return fe_error(d, out, NULL,
                    "linking the trainer with %s failed: %s (the linker's message above); free "
                    "space where the trainer is written and in TMPDIR (%s), then compile again",
                    cc, full, tmp);
  if (short_of_space(out, in_bytes, dir, sizeof dir, &avail))
    return fe_error(d, out, NULL,
                    "linking the trainer with %s failed, and %s has %lld KiB free while the "
                    "link's inputs take %lld KiB: the disk is probably full; free space there, "
                    "then compile again",
                    cc, dir, (long long)(avail >> 10), (long long)(in_bytes >> 10));
  return fe_error(d, out, NULL, "linking the trainer with %s failed (it needs %s)", cc, needs);
}
