/*
 * replay.c: main() of the corpus replay programs (fuzz_<target>_replay), linked instead of
 * libFuzzer so every build re-runs the kept corpora through the targets' checks. Each
 * argument is a corpus directory (every file in it, names starting with '.' skipped) or one
 * input file. Every input is read into a buffer of exactly its size, so ASan sees a read
 * past the end of the input as it would under libFuzzer. The name of each input goes to
 * stderr before it runs, so a crash is followed by the input that caused it.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Runs the file `path` through the target; returns -1 if it cannot be read. */
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  struct stat st;
  if (!f || fstat(fileno(f), &st) != 0) {
    fprintf(stderr, "cannot read %s\n", path);
    if (f) fclose(f);
    return -1;
  }
  size_t size = (size_t)st.st_size;
  uint8_t *buf = malloc(size ? size : 1);
  int ok = buf && fread(buf, 1, size, f) == size;
  fclose(f);
  if (!ok) {
    fprintf(stderr, "cannot read %s\n", path);
    free(buf);
    return -1;
  }
  fprintf(stderr, "%s\n", path);
  LLVMFuzzerTestOneInput(buf, size);
  free(buf);
  return 0;
}

/* Replays every input in `dir`; returns how many, or -1. */
static int replay_dir(const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) {
    fprintf(stderr, "cannot open corpus %s\n", dir);
    return -1;
  }
  int n = 0;
  for (struct dirent *e; n >= 0 && (e = readdir(dp));) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    n = replay_file(path) == 0 ? n + 1 : -1;
  }
  closedir(dp);
  return n;
}

int main(int argc, char **argv) {
  int total = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    int n = stat(argv[i], &st) == 0 && !S_ISDIR(st.st_mode) ? (replay_file(argv[i]) == 0 ? 1 : -1)
                                                            : replay_dir(argv[i]);
    if (n < 0) return 1;
    total += n;
  }
  printf("replayed %d inputs without a crash\n", total);
  return total > 0 ? 0 : 1;
}
