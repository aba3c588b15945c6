/* test_alloc.c: the compiler's allocator (base/alloc.c) never returns NULL. Asked for more than
 * any machine has, it prints "axlc: out of memory (N bytes)" and aborts; the child process that
 * asks is checked from outside. AddressSanitizer reports such a request itself, so the abort is
 * checked in the plain build only. */
#include "tests/ir/ir_test.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_small(void) {
  char *s = base_xstrdup("axlc");
  CU_ASSERT_STRING_EQUAL(s, "axlc");
  int *z = base_xcalloc(4, sizeof *z);
  CU_ASSERT(z[0] == 0 && z[3] == 0);
  z = base_xrealloc(z, 1000 * sizeof *z);
  CU_ASSERT(z[3] == 0);
  free(base_xmalloc(0)); /* a zero-size request is a valid pointer, never NULL */
  free(z);
  free(s);
}

/* Runs base_xmalloc(n) in a child with stderr in a pipe; returns its wait status, output in buf. */
static int child_status(size_t n, char *buf, size_t cap) {
  int fd[2];
  if (pipe(fd)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0}); /* the abort leaves no core file */
    dup2(fd[1], 2);
    close(fd[0]);
    free(base_xmalloc(n));
    _exit(0);
  }
  close(fd[1]);
  size_t len = 0;
  for (ssize_t r; len + 1 < cap && (r = read(fd[0], buf + len, cap - 1 - len)) > 0;)
    len += (size_t)r;
  buf[len] = 0;
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

static void test_out_of_memory_aborts(void) {
#ifdef UNDER_ASAN
  return;
#endif
  char out[256];
  size_t n = (size_t)1 << 62; /* beyond any address space */
  int status = child_status(n, out, sizeof out);
  CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  CHECK_HAS(out, "axlc: out of memory (4611686018427387904 bytes)");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"small", test_small},
      {"out_of_memory_aborts", test_out_of_memory_aborts},
      {NULL, NULL},
  };
  return test_main(argc, argv, "alloc", cases);
}
