/*
 * fuzz_config.c: fuzz target for the config frontend.
 *
 * The input bytes are a config file. Resolution must never crash, leak or
 * hang, whatever the bytes; when it succeeds, the canonical text must
 * resolve again to exactly the same text (the round-trip oracle), the
 * parameter table must build, and the forward graph must compose and
 * verify, unless the step's tensors are too large, which must then be
 * refused with a message before any graph.
 *
 * Built two ways: with libFuzzer (clang, -DAXLC_FUZZ=ON) as `fuzz_config`,
 * and with a plain main() that replays a corpus directory, as the CTest test
 * fuzz_config_corpus, so every build re-checks the kept corpus.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"

static char *write_temp(const void *data, size_t size) {
  char *path = strdup("/tmp/axlc-fuzz-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) abort();
  if (size && write(fd, data, size) != (ssize_t)size) abort();
  close(fd);
  return path;
}

/* Composes a built config: a graph that verifies, or (only for a step too
 * large) a refusal with a message. */
static void compose(FeDiag *d, const char *path, json_object *cfg, const FeBuild *b) {
  int before = d->n;
  IrGraph *g = fe_compose(d, path, cfg, b);
  if (!g && (!b->step_error || d->n == before)) abort();
  if (g && (b->step_error || ir_graph_verify(g, NULL, 0) != IR_OK)) abort();
  ir_graph_free(g);
}

/* Resolves `path`; returns its canonical text or NULL. */
static char *resolve_text(const char *path) {
  FeDiag d;
  fe_diag_init(&d);
  json_object *cfg = fe_resolve(&d, path, NULL, NULL);
  char *text = NULL;
  if (cfg) {
    text = fe_json_canonical(cfg);
    FeBuild b;
    if (fe_build(&b, &d, path, cfg, 0) != 0) abort(); /* resolve already built it */
    compose(&d, path, cfg, &b);
    fe_build_free(&b);
    json_object_put(cfg);
  } else if (d.n == 0) {
    abort(); /* a failure must say why */
  }
  fe_diag_free(&d);
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = write_temp(data, size);
  char *text = resolve_text(path);
  unlink(path);
  free(path);
  if (!text) return 0;
  char *again_path = write_temp(text, strlen(text));
  char *again = resolve_text(again_path);
  unlink(again_path);
  free(again_path);
  if (!again || strcmp(text, again) != 0) abort(); /* canonical form must round-trip */
  free(text);
  free(again);
  return 0;
}

#ifndef AXLC_LIBFUZZER
/* Replays every file in the given directories. */
static int replay_dir(const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) {
    fprintf(stderr, "cannot open corpus %s\n", dir);
    return -1;
  }
  int n = 0;
  for (struct dirent *e; (e = readdir(dp));) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    n++;
  }
  closedir(dp);
  return n;
}

int main(int argc, char **argv) {
  int total = 0;
  for (int i = 1; i < argc; i++) {
    int n = replay_dir(argv[i]);
    if (n < 0) return 1;
    total += n;
  }
  printf("replayed %d inputs without a crash\n", total);
  return total > 0 ? 0 : 1;
}
#endif
