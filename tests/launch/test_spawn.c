/* test_spawn.c: a job's output read line by line (launch/spawn.c: launch_job_lines),
 * as the supervisor reads a trainer's (launch/supervise.c).
 *
 * - Lines of stdout and of stderr arrive with their fd, without their newline; a \r ends a
 *   line too, and a terminal's progress line ("\r...\033[K") counts as soon as it is written,
 *   without waiting for the next \r; the last line without a newline is not lost.
 * - A line longer than the buffer arrives in pieces, every byte of it.
 * - The job's exit status comes back; no signal is reported.
 * Runs without LLVM or MPI: the jobs are sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/launch.h"
#include "tests/cunit_check.h"

typedef struct Got {
  int n;
  int fd[64];
  char line[64][128];
  size_t bytes[3]; /* per fd: the bytes of every line, a long one included */
  double progress_at;
} Got;

static void on_line(void *ctx, int fd, const char *line) {
  Got *g = ctx;
  g->bytes[fd] += strlen(line);
  if (g->n < 64) {
    g->fd[g->n] = fd;
    snprintf(g->line[g->n], sizeof g->line[0], "%s", line);
    g->n++;
  }
}

static int run(const char *script, Got *g) {
  memset(g, 0, sizeof *g);
  char *argv[] = {"sh", "-c", (char *)script, NULL};
  LaunchLines lines = {on_line, g};
  int signalled = -1;
  int rc = launch_job_lines(argv, NULL, &lines, &signalled);
  CHECK_INT(signalled, 0);
  return rc;
}

/* The lines of fd `fd`, bare ones (a \r right after a line's end) left out, joined by '|'. */
static const char *lines_of(const Got *g, int fd) {
  static char buf[1024];
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < g->n; i++)
    if (g->fd[i] == fd && g->line[i][0])
      n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? "|" : "", g->line[i]);
  return buf;
}

/* Each fd's lines in order (the two pipes are read as they come: their relative order is the
 * scheduler's). */
static void test_lines(void) {
  Got g;
  int rc = run("printf 'a\\nb'; printf 'c\\n' >&2; printf 'x\\rstep 1/5 loss 2\\033[K'; sleep 1; "
               "printf '\\rstep 2/5\\033[K\\n'; printf 'd\\ne' >&2; printf 'tail'; exit 3",
               &g);
  CHECK_INT(rc, 3);
  const char *out = lines_of(&g, 1), *want = "a|bx|step 1/5 loss 2\033[K|step 2/5\033[K|tail";
  CHECK_MSG(!strcmp(out, want), "stdout: '%s', expected '%s'", out, want);
  const char *err = lines_of(&g, 2);
  CHECK_MSG(!strcmp(err, "c|d|e"), "stderr: '%s', expected 'c|d|e'", err);
}

/* The progress line counts before the next \r: the job sleeps 2 s after it, and the line is
 * there when the job ends, counted from the order of arrival with stderr's marker. */
static void test_progress_at_once(void) {
  Got g;
  run("printf '\\rstep 7/9 loss 1\\033[K'; sleep 1; printf 'later\\n' >&2", &g);
  int step = -1, later = -1;
  for (int i = 0; i < g.n; i++) {
    if (!strcmp(g.line[i], "step 7/9 loss 1\033[K")) step = i;
    if (!strcmp(g.line[i], "later")) later = i;
  }
  CHECK_MSG(step >= 0 && later > step, "the progress line came at %d, stderr's at %d", step, later);
}

static void test_long_line(void) {
  Got g;
  CHECK_INT(run("head -c 5000 /dev/zero | tr '\\0' x; echo", &g), 0);
  CHECK_INT(g.bytes[1], 5000);
  CHECK_MSG(g.n >= 2, "%d pieces", g.n);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"lines of stdout and stderr, \\r, the last one", test_lines},
      {"a terminal's progress line counts at once", test_progress_at_once},
      {"a line longer than the buffer", test_long_line},
      {NULL, NULL},
  };
  return test_main(argc, argv, "launch_spawn", cases);
}
