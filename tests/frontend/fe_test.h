/*
 * fe_test.h: helpers shared by the frontend's CUnit tests.
 *
 * Every test works in its own scratch directory (mkdtemp), writes small
 * configs there and resolves them through the library API. Failing checks
 * print the expression and both values (STYLE.md, Tests) before recording
 * the failure with CUnit.
 */
#ifndef AXLC_TESTS_FE_TEST_H
#define AXLC_TESTS_FE_TEST_H

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"

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

/* ---- checks that print both values -------------------------------------- */

void fe_t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) fe_t_fail(__FILE__, __LINE__, "expected %s", #cond);                              \
    CU_ASSERT(cond);                                                                               \
  } while (0)

#define EXPECT_INT(got, want)                                                                      \
  do {                                                                                             \
    long long g_ = (long long)(got), w_ = (long long)(want);                                       \
    if (g_ != w_)                                                                                  \
      fe_t_fail(__FILE__, __LINE__, "%s == %s\n    got:  %lld\n    want: %lld", #got, #want, g_,   \
                w_);                                                                               \
    CU_ASSERT(g_ == w_);                                                                           \
  } while (0)

#define EXPECT_STR(got, want)                                                                      \
  do {                                                                                             \
    const char *g_ = (got), *w_ = (want);                                                          \
    int ok_ = g_ && w_ ? strcmp(g_, w_) == 0 : g_ == w_;                                           \
    if (!ok_)                                                                                      \
      fe_t_fail(__FILE__, __LINE__, "%s == %s\n    got:  %s\n    want: %s", #got, #want,           \
                g_ ? g_ : "(null)", w_ ? w_ : "(null)");                                           \
    CU_ASSERT(ok_);                                                                                \
  } while (0)

/* `hay` contains every one of the NULL-terminated needles. */
#define EXPECT_HAS(hay, ...)                                                                       \
  do {                                                                                             \
    const char *nd_[] = {__VA_ARGS__, NULL};                                                       \
    const char *h_ = (hay);                                                                        \
    for (int i_ = 0; nd_[i_]; i_++) {                                                              \
      int ok_ = h_ && strstr(h_, nd_[i_]) != NULL;                                                 \
      if (!ok_)                                                                                    \
        fe_t_fail(__FILE__, __LINE__, "%s contains \"%s\"\n    got: %s", #hay, nd_[i_],            \
                  h_ ? h_ : "(null)");                                                             \
      CU_ASSERT(ok_);                                                                              \
    }                                                                                              \
  } while (0)

#define EXPECT_LACKS(hay, needle)                                                                  \
  do {                                                                                             \
    const char *h_ = (hay), *n_ = (needle);                                                        \
    int ok_ = !h_ || strstr(h_, n_) == NULL;                                                       \
    if (!ok_)                                                                                      \
      fe_t_fail(__FILE__, __LINE__, "%s does not contain \"%s\"\n    got: %s", #hay, n_, h_);      \
    CU_ASSERT(ok_);                                                                                \
  } while (0)

/* Resolution of `file` failed, and its messages contain every needle. */
#define EXPECT_FAILS(t, ...)                                                                       \
  do {                                                                                             \
    if ((t)->tree) fe_t_fail(__FILE__, __LINE__, "resolution was expected to fail");               \
    CU_ASSERT((t)->tree == NULL);                                                                  \
    EXPECT_HAS((t)->msgs, __VA_ARGS__);                                                            \
  } while (0)

#define EXPECT_OK(t)                                                                               \
  do {                                                                                             \
    if (!(t)->tree) fe_t_fail(__FILE__, __LINE__, "resolution failed:\n%s", (t)->msgs);            \
    CU_ASSERT_FATAL((t)->tree != NULL);                                                            \
  } while (0)

/* Integer / string value at a path of a resolved tree. */
int64_t fe_t_int(json_object *root, const char *path);
const char *fe_t_str(json_object *root, const char *path);
double fe_t_float(json_object *root, const char *path);

/* ---- running ------------------------------------------------------------ */

typedef struct {
  const char *name;
  void (*fn)(void);
} FeTCase;

/* Registers `cases` as one suite, each with a fresh scratch dir, runs it
 * (only the tests named in argv[1..] if any) and returns the exit status. */
int fe_t_main(int argc, char **argv, const char *suite, const FeTCase *cases, int n);

#endif /* AXLC_TESTS_FE_TEST_H */
