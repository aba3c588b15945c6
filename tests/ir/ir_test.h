/* ir_test.h: helpers shared by the ir_ and passes_ CUnit tests.
 *
 * Graphs are run on the reference interpreter with inputs bound by name (shape taken from the
 * graph); the checks and the main are tests/cunit_check.h's.
 */
#ifndef AXLC_TESTS_IR_TEST_H
#define AXLC_TESTS_IR_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "tests/cunit_check.h"

/* Binds name on every device with the value's own shape. */
static inline int test_bind(IrInterp *it, const IrGraph *g, const char *name, const double *data) {
  int32_t v = ir_graph_find(g, IR_PARAMETER, name);
  if (v == IR_NONE) v = ir_graph_find(g, IR_INPUT, name);
  if (v == IR_NONE) return IR_ERR;
  return ir_interp_set(it, -1, name, g->values[v].shape.rank, g->values[v].shape.dims, data);
}

/* Runs g on one device with inputs bound, returns a malloc'd copy of output `out` (NULL on
 * error, printed). */
static inline double *test_run(const IrGraph *g, int n, const char *const *names,
                               const double *const *data, const char *out) {
  IrInterp *it = ir_interp_new(g, NULL);
  double *res = NULL;
  for (int i = 0; i < n; i++)
    if (test_bind(it, g, names[i], data[i])) goto done;
  if (ir_interp_run(it)) goto done;
  IrShape s;
  const double *p = ir_interp_output(it, 0, out, &s);
  if (!p) goto done;
  res = malloc((size_t)(ir_shape_numel(&s) + 1) * sizeof *res);
  memcpy(res, p, (size_t)ir_shape_numel(&s) * sizeof *res);
done:
  if (!res) fprintf(stderr, "test_run: %s\n", ir_interp_error(it) ? ir_interp_error(it) : "?");
  ir_interp_free(it);
  return res;
}

/* UNDER_ASAN: defined in an AddressSanitizer build (GCC or clang), whose allocator reports a
 * request larger than any machine has instead of returning NULL; the tests of huge requests
 * are skipped there. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#endif
