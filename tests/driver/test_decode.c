/*
 * test_decode.c: the sampling graphs with a KV cache, on the reference interpreter.
 *
 * For tiny-lm (learned positions, GELU), fuji-test (RoPE, grouped-query attention, SwiGLU,
 * RMSNorm) and moe-test (experts with capacity): the forward of a prompt's P tokens (padded
 * with zeros, as the sampler pads) fills the cache from its key and value outputs; the decode
 * step then takes the next tokens one at a time, each at its position, and the runtime's part
 * (writing the token's rows into the cache at pos) is done here. Every decode step's logits
 * must equal the forward's logits at that position over the whole sequence, in double precision
 * (the interpreter unrounded) up to 1e-6 relative: the graphs compute the same function in
 * another order, and the forward's rotary cos and sin are constants, which simplify folds with
 * f32 rounding (about 1e-8 here), while the decode step's depend on pos. A position off by one
 * moves the logits by far more. A model with a non-causal attention gets no decode step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cunit_check.h"
#include "tests/driver/lower.h"

/* Binds every parameter of g (the same values in every graph of the model). */
static void bind_params(const DrvJob *j, const IrGraph *g, IrInterp *it) {
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER) continue;
    double *d = test_leaf_values(x, &x->shape, j->facts.vocab, 11);
    CU_ASSERT_EQUAL(ir_interp_set(it, -1, x->name, x->shape.rank, x->shape.dims, d), IR_OK);
    free(d);
  }
}

/* The forward of ids (T) (the first n real, zeros after): logits (T, V) into logits, and every
 * prefill output into the decode graph's matching cache input (kv_cache: <- kv:). */
static void run_forward(const DrvJob *j, const int32_t *ids, int64_t n, double *logits,
                        double **cache) {
  const IrGraph *g = j->forward;
  int64_t T = j->facts.seq_len, dims[2] = {1, T};
  double *x = calloc((size_t)T, sizeof *x);
  for (int64_t t = 0; t < n; t++) x[t] = ids[t];
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set_rounding(it, false);
  bind_params(j, g, it);
  CU_ASSERT_EQUAL(ir_interp_set(it, -1, "ids", 2, dims, x), IR_OK);
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  IrShape s;
  const double *out = ir_interp_output(it, 0, "logits", &s);
  memcpy(logits, out, (size_t)ir_shape_numel(&s) * sizeof *logits);
  const IrGraph *d = j->decode;
  for (int32_t v = 0, c = 0; v < d->nvalues; v++) {
    const IrValue *in = &d->values[v];
    if (in->op != IR_INPUT || strncmp(in->name, IR_KV_CACHE, strlen(IR_KV_CACHE))) continue;
    char name[600];
    snprintf(name, sizeof name, IR_KV_PREFILL "%s", in->name + strlen(IR_KV_CACHE));
    out = ir_interp_output(it, 0, name, &s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_TRUE(ir_shape_eq(&s, &in->shape));
    memcpy(cache[c++], out, (size_t)ir_shape_numel(&s) * sizeof **cache);
  }
  ir_interp_free(it);
  free(x);
}

/* One decode step: token id at pos against the caches; writes its rows into them, its logits
 * (V) into logits. */
static void run_decode(const DrvJob *j, int32_t id, int64_t pos, double **cache, double *logits) {
  const IrGraph *g = j->decode;
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set_rounding(it, false);
  bind_params(j, g, it);
  int64_t one[2] = {1, 1};
  double did = id, dpos = (double)pos;
  CU_ASSERT_EQUAL(ir_interp_set(it, -1, "ids", 2, one, &did), IR_OK);
  CU_ASSERT_EQUAL(ir_interp_set(it, -1, "pos", 1, one, &dpos), IR_OK);
  int32_t ncache = 0;
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *in = &g->values[v];
    if (in->op != IR_INPUT || strncmp(in->name, IR_KV_CACHE, strlen(IR_KV_CACHE))) continue;
    CU_ASSERT_EQUAL(
        ir_interp_set(it, -1, in->name, in->shape.rank, in->shape.dims, cache[ncache++]), IR_OK);
  }
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  IrShape s;
  const double *out = ir_interp_output(it, 0, "logits", &s);
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  memcpy(logits, out, (size_t)ir_shape_numel(&s) * sizeof *logits);
  for (int32_t v = 0, c = 0; v < g->nvalues; v++) { /* the runtime's append */
    const IrValue *in = &g->values[v];
    if (in->op != IR_INPUT || strncmp(in->name, IR_KV_CACHE, strlen(IR_KV_CACHE))) continue;
    char name[600];
    snprintf(name, sizeof name, IR_KV_ROW "%s", in->name + strlen(IR_KV_CACHE));
    const double *row = ir_interp_output(it, 0, name, &s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    int64_t K = in->shape.dims[1], W = in->shape.dims[2], H = in->shape.dims[3];
    for (int64_t h = 0; h < K; h++)
      memcpy(cache[c] + (h * W + pos) * H, row + h * H, (size_t)H * sizeof *row);
    c++;
  }
  ir_interp_free(it);
}

/* Prompt of P tokens, then decode up to the window's end; each step's logits against the
 * forward of the whole sequence. */
static void check_model(const char *model, const char **sets, int nsets, int64_t P) {
  DrvJob j;
  CU_ASSERT_EQUAL_FATAL(test_lower(&j, model, NULL, sets, nsets, NULL, false), 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j.decode);
  int64_t T = j.facts.seq_len, V = j.facts.vocab;
  int32_t *ids = malloc((size_t)T * sizeof *ids);
  for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 13) % V);
  double *full = malloc((size_t)(T * V) * sizeof *full),
         *part = malloc((size_t)(T * V) * sizeof *part);
  double *step = malloc((size_t)V * sizeof *step);
  int32_t ncache = 0;
  for (int32_t v = 0; v < j.decode->nvalues; v++)
    ncache += j.decode->values[v].op == IR_INPUT &&
              !strncmp(j.decode->values[v].name, IR_KV_CACHE, strlen(IR_KV_CACHE));
  double **cache = calloc((size_t)ncache + 1, sizeof *cache),
         **unused = calloc((size_t)ncache + 1, sizeof *unused);
  for (int32_t v = 0, c = 0; v < j.decode->nvalues; v++) {
    const IrValue *in = &j.decode->values[v];
    if (in->op != IR_INPUT || strncmp(in->name, IR_KV_CACHE, strlen(IR_KV_CACHE))) continue;
    cache[c] = malloc((size_t)ir_shape_numel(&in->shape) * sizeof **cache);
    unused[c++] = malloc((size_t)ir_shape_numel(&in->shape) * sizeof **cache);
  }
  CU_ASSERT_TRUE(ncache >= 2);
  run_forward(&j, ids, T, full, unused);
  run_forward(&j, ids, P, part, cache);
  double worst = 0;
  for (int64_t pos = P; pos < T; pos++) {
    run_decode(&j, ids[pos], pos, cache, step);
    for (int64_t i = 0; i < V; i++) {
      double want = full[pos * V + i], d = fabs(step[i] - want) / (1 + fabs(want));
      if (d > worst) worst = d;
    }
  }
  if (worst > 1e-6) fprintf(stderr, "%s: decode logits off by %g (relative)\n", model, worst);
  CU_ASSERT_TRUE(worst <= 1e-6);
  /* the prompt's own logits: the forward of P tokens padded equals the whole one there */
  for (int64_t i = 0; i < P * V; i++)
    CU_ASSERT_DOUBLE_EQUAL(part[i], full[i], 1e-9 * (1 + fabs(full[i])));
  for (int32_t c = 0; c < ncache; c++) free(cache[c]), free(unused[c]);
  free(cache);
  free(unused);
  free(ids);
  free(full);
  free(part);
  free(step);
  drv_free(&j);
}

static void test_tiny_lm(void) {
  const char *sets[] = {"/input/seq_len=12", "/input/global_batch_size=2", "/model/dim=16",
                        "/model/decoder/num_layers=2"};
  check_model("tiny-lm.json", sets, 4, 5);
}

static void test_fuji(void) {
  const char *sets[] = {"/input/seq_len=10", "/input/global_batch_size=2"};
  check_model("fuji-test.json", sets, 2, 3);
}

static void test_moe(void) {
  const char *sets[] = {"/input/seq_len=8", "/input/global_batch_size=2", "/model/dim=16",
                        "/model/decoder/layer/feed_forward/hidden_dim=32"};
  check_model("moe-test.json", sets, 4, 3);
}

/* Bidirectional attention cannot keep earlier tokens' keys: no decode step, no prefill outputs. */
static void test_not_causal(void) {
  const char *sets[] = {"/input/seq_len=8", "/input/global_batch_size=2",
                        "/model/decoder/layer/self_attention/causal=false"};
  DrvJob j;
  CU_ASSERT_EQUAL_FATAL(test_lower(&j, "tiny-lm.json", NULL, sets, 3, NULL, false), 0);
  CU_ASSERT_PTR_NULL(j.decode);
  CU_ASSERT_PTR_NOT_NULL(j.forward);
  CU_ASSERT_EQUAL(j.forward->noutputs, 1);
  drv_free(&j);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"tiny-lm: decode equals the forward", test_tiny_lm},
      {"fuji-test (RoPE, GQA): decode equals the forward", test_fuji},
      {"moe-test: decode equals the forward", test_moe},
      {"non-causal attention: no decode step", test_not_causal},
      {NULL, NULL},
  };
  return test_main(argc, argv, "decode", cases);
}
