/*
 * lower.h: what the whole-model driver tests (test_shard.c, test_remat.c) share: lowering a
 * shipped model through the pipeline, deterministic values for its leaves, counting ops.
 */
#ifndef AXLC_TESTS_DRIVER_LOWER_H
#define AXLC_TESTS_DRIVER_LOWER_H

#include <stdbool.h>
#include <stdint.h>

#include "driver/driver.h"

/* Loads models/<model> (AXLC_MODELS) for target with the --set assignments sets[0..nsets)
 * and runs the passes up to `after` (NULL: all). Prints the diagnostics unless quiet. */
int test_lower(DrvJob *j, const char *model, const char *target, const char **sets, int nsets,
               const char *after, bool quiet);
/* Deterministic values for leaf v of shape s, drawn from stream `seed`: parameters near their
 * init scale, moments small (opt/v positive), tokens in the vocabulary, the step 3. malloc'd. */
double *test_leaf_values(const IrValue *v, const IrShape *s, int64_t vocab, uint64_t seed);
/* How many values of g have op `op`. */
int test_count_op(const IrGraph *g, IrOp op);

#endif
