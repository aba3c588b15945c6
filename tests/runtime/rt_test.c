/*
 * rt_test.c: the scratch-file helpers behind rt_test.h. A test program's files
 * live in one mkdtemp directory that is removed, with its subdirectories, when it exits.
 */
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_test.h"

/* The test program's scratch directory: set once by rt_test_scratch, read-only afterwards. */
static char scratch[256];

/* ===== scratch files ================================================================== */

static void remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *ent;
    char child[4096];
    while (d && (ent = readdir(d)) != NULL) {
      if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
      snprintf(child, sizeof child, "%s/%s", path, ent->d_name);
      remove_tree(child);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static void remove_scratch(void) {
  if (scratch[0]) remove_tree(scratch);
}

const char *rt_test_dir(void) { return scratch; }

const char *rt_test_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", scratch, name);
  return buf;
}

void rt_test_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "rt_test_write: cannot write %s\n", path);
    exit(2);
  }
}

unsigned char *rt_test_read(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  long size = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)size + 1)) != NULL && fread(buf, 1, (size_t)size, f) == (size_t)size) {
    fclose(f);
    *n = (size_t)size;
    return buf;
  }
  fprintf(stderr, "rt_test_read: cannot read %s\n", path);
  exit(2);
}

int rt_test_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* ===== fixture ======================================================================== */

int rt_test_scratch(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(scratch, sizeof scratch, "%s/axrt-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(scratch)) {
    fprintf(stderr, "cannot create a temporary directory %s\n", scratch);
    return -1;
  }
  atexit(remove_scratch);
  return 0;
}
