/*
 * fuzz_util.c: scratch files and the failure report shared by the fuzz targets (fuzz.h).
 * A failure to create scratch files is the harness's problem, not a finding, but libFuzzer
 * has no other way to stop, so it aborts too, with a message saying which.
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

void fuzz_fail(const char *file, int line, const char *expr, const char *fmt, ...) {
  fprintf(stderr, "%s:%d: check `%s` failed: ", file, line, expr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

/* "$TMPDIR/axlc-fuzz-XXXXXX", malloc'd. */
static char *temp_template(void) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  size_t cap = strlen(tmp) + sizeof "/axlc-fuzz-XXXXXX";
  char *path = malloc(cap);
  FUZZ_CHECK(path != NULL, "out of memory");
  snprintf(path, cap, "%s/axlc-fuzz-XXXXXX", tmp);
  return path;
}

char *fuzz_temp_file(const void *data, size_t size) {
  char *path = temp_template();
  int fd = mkstemp(path);
  FUZZ_CHECK(fd >= 0, "harness: cannot create a file like %s", path);
  FUZZ_CHECK(size == 0 || write(fd, data, size) == (ssize_t)size, "harness: cannot write %s", path);
  close(fd);
  return path;
}

char *fuzz_temp_dir(void) {
  char *path = temp_template();
  FUZZ_CHECK(mkdtemp(path) != NULL, "harness: cannot create a directory like %s", path);
  return path;
}

void fuzz_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    unlink(path);
    return;
  }
  DIR *d = opendir(path);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    size_t cap = strlen(path) + strlen(e->d_name) + 2;
    char *child = malloc(cap);
    FUZZ_CHECK(child != NULL, "out of memory");
    snprintf(child, cap, "%s/%s", path, e->d_name);
    fuzz_remove_tree(child);
    free(child);
  }
  if (d) closedir(d);
  rmdir(path);
}

void fuzz_write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  FUZZ_CHECK(f != NULL, "harness: cannot create %s", path);
  FUZZ_CHECK(size == 0 || fwrite(data, 1, size, f) == size, "harness: cannot write %s", path);
  FUZZ_CHECK(fclose(f) == 0, "harness: cannot close %s", path);
}
