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
 * and with replay.c's main() as the CTest test fuzz_config_corpus, so every
 * build re-checks the kept corpus.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "fuzz.h"

/* Composes a built config: a graph that verifies, or (only for a step too
 * large) a refusal with a message. */
static void compose(FeDiag *d, const char *path, json_object *cfg, const FeBuild *b) {
  int before = d->n;
  IrGraph *g = fe_compose(d, path, cfg, b);
  char msg[IR_ERR_LEN] = "";
  FUZZ_CHECK(g || (b->step_error && d->n > before), "only a step too large may fail to compose: %s",
             d->n > before ? d->msgs[d->n - 1] : "(no message)");
  FUZZ_CHECK(!g || !b->step_error, "a step too large was composed: %s", b->step_error);
  FUZZ_CHECK(!g || ir_graph_verify(g, msg, sizeof msg) == IR_OK, "the graph does not verify: %s",
             msg);
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
    FUZZ_CHECK(fe_build(&b, &d, path, cfg, 0) == 0, "resolve built it, fe_build must too");
    compose(&d, path, cfg, &b);
    fe_build_free(&b);
    json_object_put(cfg);
  } else {
    FUZZ_CHECK(d.n > 0, "a failure must say why");
  }
  fe_diag_free(&d);
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = fuzz_temp_file(data, size);
  char *text = resolve_text(path);
  unlink(path);
  free(path);
  if (!text) return 0;
  char *again_path = fuzz_temp_file(text, strlen(text));
  char *again = resolve_text(again_path);
  unlink(again_path);
  free(again_path);
  FUZZ_CHECK(again && strcmp(text, again) == 0,
             "the canonical form must round-trip:\n%s\n--- resolved again:\n%s", text,
             again ? again : "(an error)");
  free(text);
  free(again);
  return 0;
}
