/*
 * fe_test.h: helpers shared by the frontend's CUnit tests.
 *
 * Every test works in its own scratch directory (mkdtemp), writes small
 * configs there and resolves them through the library API. The checks and
 * the main are tests/cunit_check.h's.
 */
#ifndef AXLC_TESTS_FE_TEST_H
#define AXLC_TESTS_FE_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"
#include "tests/cunit_check.h"

#ifndef AXLC_MODELS_DIR
#error "AXLC_MODELS_DIR must name the shipped models/ folder"
#endif

/* A small, valid trainer (tiny-lm without mesh rules), written by
 * fe_t_write_tiny() as "tiny.json" for derived configs to build on. */
extern const char *const FE_T_TINY;
/* tiny-lm's parameter count: emb 256*64 + pos 128*64 + 2 layers *
 * (2 layer norms 2*64*2 + attention 4*64*64 + gelu MLP 2*64*256) + output
 * norm 2*64 (lm_head tied). */
#define FE_T_TINY_PARAMS 123520LL

/* Scratch directory of the running test (fresh per test). */
const char *fe_t_dir(void);
/* Writes `text` to dir/name (creating subfolders) and returns the full path
 * (static storage, valid until the next call of fe_t_path / fe_t_write). */
const char *fe_t_write(const char *name, const char *text);
const char *fe_t_path(const char *name);
const char *fe_t_write_tiny(void);

/* The result of one resolution: tree (NULL on error), all messages joined
 * with '\n' in msgs, the matched rule. Free with fe_t_done. */
typedef struct {
  FeDiag d;
  json_object *tree;
  const char *rule;
  char msgs[8192];
} FeT;

/* Resolves `file` with a target, NULL-terminated --apply and --set lists. */
void fe_t_resolve(FeT *t, const char *file, const char *target, const char *const *apply,
                  const char *const *sets);
void fe_t_done(FeT *t);
/* Canonical text of the tree at `path` ("" is the root); malloc'd, or a copy
 * of "<absent>". */
char *fe_t_canon_at(json_object *root, const char *path);
/* Runs fe_build on a resolved tree; returns the total parameter count or -1
 * (messages appended to t->msgs). `b` may be NULL. */
int64_t fe_t_params(FeT *t, int64_t devices, FeBuild *b);
/* Collects t->d's messages into t->msgs. */
void fe_t_collect(FeT *t);

/* ---- checks of a resolution (tests/cunit_check.h has the rest) -------------- */

/* Resolution of `file` failed, and its messages contain every needle. */
#define CHECK_FAILS(t, ...)                                                                        \
  do {                                                                                             \
    CHECK_MSG((t)->tree == NULL, "resolution was expected to fail");                               \
    CHECK_HAS((t)->msgs, __VA_ARGS__);                                                             \
  } while (0)

#define REQUIRE_RESOLVED(t) REQUIRE_MSG((t)->tree != NULL, "resolution failed:\n%.1800s", (t)->msgs)

/* Integer / string value at a path of a resolved tree. */
int64_t fe_t_int(json_object *root, const char *path);
const char *fe_t_str(json_object *root, const char *path);
double fe_t_float(json_object *root, const char *path);

/* ---- running ------------------------------------------------------------ */

/* Around each case: a fresh scratch directory (fe_t_dir), removed after it unless
 * AXLC_TEST_KEEP is set. */
void fe_t_before_each(void);
void fe_t_after_each(void);

/* test_main with a fresh scratch directory per case. */
static inline int fe_t_main(int argc, char **argv, const char *suite, const TestCase *cases) {
  static const TestHooks hooks = {.before_each = fe_t_before_each, .after_each = fe_t_after_each};
  return test_main_with(argc, argv, suite, cases, &hooks);
}

#endif /* AXLC_TESTS_FE_TEST_H */
