/*
 * test_remat.c: the remat pass on whole models.
 *
 * - Same numbers: each model is lowered with no remat and under every preset (and a custom
 *   policy); the reference interpreter, rounding to f32 as the backends do, gives bit-identical
 *   outputs (loss, gradient norm, every new parameter and moment), on one device and on a mesh
 *   where the clones include collectives.
 * - Structure: under a policy, no forward value that it recomputes is read after the loss; the
 *   values it saves still are.
 * - Memory: memplan's peak of temporaries (with the LLVM fusion plan when built) falls under
 *   every preset, for tiny-lm, the bench model (tools/bench/small.json) and gpt2-124m at batch 4,
 *   seq 64. The numbers are printed (docs/remat.md).
 * - Errors: offloading is refused with a clear message.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "passes/passes.h"
#include "runtime/axrt.h"
#include "tests/cunit_check.h"
#include "tests/driver/lower.h"

static const char *const policies[] = {
    "\"full\"", "\"save_dots\"", "\"save_qkvo\"",
    "{\"save\": [\"attention\\\\.context\", \"feed_forward\\\\..*\"]}"};
#define NPOLICIES ((int)(sizeof policies / sizeof *policies))

/* Lowers model (models/...) for target with sets, and the remat policy (NULL: none) on
 * /model/decoder. */
static int lower(DrvJob *j, const char *model, const char *target, const char **sets, int nsets,
                 const char *policy, const char *after, bool quiet) {
  char pol[512];
  const char *all[16];
  for (int i = 0; i < nsets; i++) all[i] = sets[i];
  snprintf(pol, sizeof pol, "/model/decoder/remat_policy=%s", policy ? policy : "\"none\"");
  all[nsets] = pol;
  return test_lower(j, model, target, all, nsets + 1, after, quiet);
}

/* Runs g in the interpreter (f32 rounding) on every device with the same leaves per device
 * (each device's chunk is taken from the local shape, so both graphs get the same data). */
static IrInterp *run_graph(const IrGraph *g, int64_t vocab) {
  IrInterp *it = ir_interp_new(g, NULL);
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER && x->op != IR_INPUT) continue;
    double *d = test_leaf_values(x, &x->shape, vocab, 11);
    ir_interp_set(it, -1, x->name, x->shape.rank, x->shape.dims, d);
    free(d);
  }
  if (ir_interp_run(it)) {
    CHECK_MSG(0, "interpreter: %s", ir_interp_error(it));
    ir_interp_free(it);
    return NULL;
  }
  return it;
}

/* Every output on every device bit for bit. */
static void compare_outputs(const char *label, IrInterp *a, IrInterp *b, const IrGraph *g) {
  int64_t bad = 0;
  for (int64_t dev = 0; dev < ir_interp_devices(a); dev++)
    for (int32_t k = 0; k < g->noutputs; k++) {
      IrShape sa, sb;
      const double *x = ir_interp_output(a, dev, g->outputs[k].name, &sa);
      const double *y = ir_interp_output(b, dev, g->outputs[k].name, &sb);
      CHECK_MSG(x && y && ir_shape_eq(&sa, &sb), "%s: output %s missing", label,
                g->outputs[k].name);
      if (!x || !y) continue;
      int64_t n = ir_shape_numel(&sa), diff = 0;
      for (int64_t i = 0; i < n; i++) diff += memcmp(&x[i], &y[i], sizeof *x) != 0;
      CHECK_MSG(diff == 0, "%s: device %lld output %s: %lld of %lld elements differ", label,
                (long long)dev, g->outputs[k].name, (long long)diff, (long long)n);
      bad += diff;
    }
  CHECK_MSG(bad == 0, "%s: outputs differ", label);
}

/* The values the loss depends on (the forward, as remat.c defines it). */
static bool *forward_set(const IrGraph *g) {
  bool *fwd = calloc((size_t)g->nvalues + 1, 1);
  int32_t loss = ir_graph_output(g, "loss");
  fwd[loss] = true;
  for (int32_t v = loss; v >= 0; v--)
    for (int32_t k = 0; fwd[v] && k < g->values[v].nops; k++) fwd[g->values[v].ops[k]] = true;
  return fwd;
}

/* How many forward values of the decoder that the backward reads have tag `tag` (NULL: any
 * tag but the layer input's). */
static int read_by_backward(const IrGraph *g, const char *tag) {
  bool *fwd = forward_set(g), *read = calloc((size_t)g->nvalues + 1, 1);
  for (int32_t u = 0; u < g->nvalues; u++)
    for (int32_t k = 0; !fwd[u] && k < g->values[u].nops; k++) read[g->values[u].ops[k]] = true;
  int n = 0;
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    bool match = tag ? !strcmp(x->tag, tag) : strcmp(x->tag, "transformer_layer.input") != 0;
    n += fwd[v] && read[v] && match && !(ir_op_flags(x->op) & IR_LEAF) &&
         !strncmp(x->origin, "/model/decoder", 14);
  }
  free(fwd);
  free(read);
  return n;
}

/* ---- same numbers ---- */

static void check_same(const char *model, const char *target, const char **sets, int nsets) {
  DrvJob base;
  if (lower(&base, model, target, sets, nsets, NULL, NULL, false)) {
    CHECK_MSG(0, "%s: did not lower", model);
    drv_free(&base);
    return;
  }
  int64_t vocab = fe_get_int(fe_get_child(base.cfg, "model"), "vocab_size");
  IrInterp *ref = run_graph(base.graph, vocab);
  for (int p = 0; ref && p < NPOLICIES; p++) {
    DrvJob r;
    char label[512];
    snprintf(label, sizeof label, "%s %s %s", model, target, policies[p]);
    if (lower(&r, model, target, sets, nsets, policies[p], NULL, false)) {
      CHECK_MSG(0, "%s: did not lower", label);
    } else {
      CHECK_MSG(r.graph->nvalues > base.graph->nvalues,
                "%s: nothing recomputed (%d values, %d without)", label, r.graph->nvalues,
                base.graph->nvalues);
      if (ir_mesh_devices(&r.graph->mesh) > 1 && test_count_op(base.graph, IR_ALL_GATHER) > 0)
        CHECK_MSG(test_count_op(r.graph, IR_ALL_GATHER) > test_count_op(base.graph, IR_ALL_GATHER),
                  "%s: no all_gather recomputed", label);
      IrInterp *it = run_graph(r.graph, vocab);
      if (it) compare_outputs(label, ref, it, base.graph);
      ir_interp_free(it);
    }
    drv_free(&r);
  }
  ir_interp_free(ref);
  drv_free(&base);
}

static const char *small[] = {"/input/seq_len=16", "/input/global_batch_size=4"};

static void test_same_tiny(void) { check_same("tiny-lm.json", "cpu", small, 2); }
static void test_same_fuji(void) { check_same("fuji-test.json", "cpu", small, 2); }
static void test_same_moe(void) { check_same("moe-test.json", "cpu", small, 2); }

/* fsdp=2 x model=2: the clones gather weights again and reduce partial sums again. */
static void test_same_mesh(void) {
  const char *sets[] = {"/input/seq_len=16", "/input/global_batch_size=4",
                        "/mesh/shape=[1,1,1,2,1,2]"};
  check_same("tiny-lm.json", "cpu-4", sets, 3);
  const char *esets[] = {"/input/seq_len=16", "/input/global_batch_size=4",
                         "/mesh/shape=[1,1,2,1,1,1]"};
  check_same("moe-test.json", "cpu-2", esets, 3);
}

/* ---- structure ---- */

static void test_structure(void) {
  DrvJob n, f, q;
  bool ok = !lower(&n, "tiny-lm.json", "cpu", small, 2, NULL, NULL, false) &&
            !lower(&f, "tiny-lm.json", "cpu", small, 2, "\"full\"", NULL, false) &&
            !lower(&q, "tiny-lm.json", "cpu", small, 2, "\"save_qkvo\"", NULL, false);
  CU_ASSERT_FATAL(ok);
  /* without remat the backward reads many forward values of the layers; under full only the
   * layer inputs (2 layers: the second one's, and the last layer's output is recomputed) */
  int none = read_by_backward(n.graph, NULL);
  CHECK_MSG(none > 20, "none: the backward reads only %d forward values", none);
  CHECK_MSG(read_by_backward(f.graph, NULL) == 0, "full: the backward reads %d forward values",
            read_by_backward(f.graph, NULL));
  CHECK_MSG(read_by_backward(f.graph, "transformer_layer.input") == 1, "full: %d layer inputs read",
            read_by_backward(f.graph, "transformer_layer.input"));
  /* save_qkvo: the projections are read (by the clones of their reshapes), nothing else */
  CHECK_MSG(read_by_backward(q.graph, "attention.q_proj") == 2, "save_qkvo: %d q_proj read",
            read_by_backward(q.graph, "attention.q_proj"));
  CHECK_MSG(read_by_backward(q.graph, "attention.v_proj") == 2, "save_qkvo: %d v_proj read",
            read_by_backward(q.graph, "attention.v_proj"));
  CHECK_MSG(read_by_backward(q.graph, "attention.context") == 0,
            "save_qkvo: context read in backward");
  CHECK_MSG(read_by_backward(q.graph, "") == 0, "save_qkvo: untagged values read in backward");
  /* the pass is reachable by name, and "none" changes nothing */
  CU_ASSERT_STRING_EQUAL(n.last_pass, "pipeline"); /* the last pass: a no-op without stages */
  DrvJob s;
  CU_ASSERT_FATAL(!lower(&s, "tiny-lm.json", "cpu", small, 2, NULL, "shard", false));
  CU_ASSERT_EQUAL(s.graph->nvalues, n.graph->nvalues);
  drv_free(&s);
  drv_free(&n);
  drv_free(&f);
  drv_free(&q);
}

/* Under model parallelism a row-parallel product leaves a partial sum that an all_reduce or a
 * reduce_scatter resolves. Where a policy saves the product (attention.o_proj,
 * feed_forward.linear2), what crosses into the backward must be the reduced value: no forward
 * value that a reducing collective reads is read by the backward. */
static int saved_partial_sums(const IrGraph *g) {
  bool *fwd = forward_set(g), *read = calloc((size_t)g->nvalues + 1, 1),
       *partial = calloc((size_t)g->nvalues + 1, 1);
  for (int32_t u = 0; u < g->nvalues; u++) {
    const IrValue *x = &g->values[u];
    for (int32_t k = 0; !fwd[u] && k < x->nops; k++) read[x->ops[k]] = true;
    if (fwd[u] && (x->op == IR_ALL_REDUCE || x->op == IR_REDUCE_SCATTER)) partial[x->ops[0]] = true;
  }
  int n = 0;
  for (int32_t v = 0; v < g->nvalues; v++) n += fwd[v] && read[v] && partial[v];
  free(fwd);
  free(read);
  free(partial);
  return n;
}

static void test_saved_reduced(void) {
  const char *sets[] = {"/input/seq_len=16", "/input/global_batch_size=4",
                        "/mesh/shape=[1,1,1,2,1,2]"};
  const char *pols[] = {"\"save_qkvo\"", "\"save_dots\""};
  for (int p = 0; p < 2; p++) {
    DrvJob j;
    CU_ASSERT_FATAL(!lower(&j, "tiny-lm.json", "cpu-4", sets, 3, pols[p], NULL, false));
    int n = saved_partial_sums(j.graph);
    CHECK_MSG(n == 0, "%s: %d partial sums saved for the backward", pols[p], n);
    /* the reduced projection is what the backward reads */
    CHECK_MSG(read_by_backward(j.graph, "attention.o_proj") == 2, "%s: %d o_proj read", pols[p],
              read_by_backward(j.graph, "attention.o_proj"));
    drv_free(&j);
  }
}

/* ---- memory ---- */

typedef struct Peak {
  int64_t temp;  /* memplan's peak_temp_bytes: the whole step */
  int64_t fb;    /* peak of temporaries up to the last gradient: forward and backward */
  int64_t saved; /* forward values still live when the forward ends: saved activations */
} Peak;

/* Live bytes per step from the plan: a value lives from its index to its last reader, a fused
 * reader counting as the kernel that consumes it; outputs to the end. */
static Peak measure(const IrGraph *g, const bool *mat, const MemPlan *p) {
  int32_t n = g->nvalues;
  int32_t *eff = malloc((size_t)n * sizeof *eff), *last = malloc((size_t)n * sizeof *last);
  int64_t *delta = calloc((size_t)n + 2, sizeof *delta);
  bool *fwd = forward_set(g);
  for (int32_t v = n - 1; v >= 0; v--) eff[v] = v;
  for (int32_t v = 0; v < n; v++) last[v] = v;
  for (int32_t k = 0; k < g->noutputs; k++) last[g->outputs[k].value] = n;
  for (int32_t u = n - 1; u >= 0; u--) /* users come after: eff[u] is final here */
    for (int32_t k = 0; mat && k < g->values[u].nops; k++) {
      int32_t o = g->values[u].ops[k];
      if (!mat[o] && eff[u] > eff[o]) eff[o] = eff[u];
    }
  for (int32_t u = 0; u < n; u++)
    for (int32_t k = 0; k < g->values[u].nops; k++) {
      int32_t o = g->values[u].ops[k];
      if (eff[u] > last[o]) last[o] = eff[u];
    }
  int32_t fb_end = 0, fwd_end = 0;
  for (int32_t k = 0; k < g->noutputs; k++)
    if (!strncmp(g->outputs[k].name, "grad:", 5) && g->outputs[k].value > fb_end)
      fb_end = g->outputs[k].value;
  while (fwd_end < n && (fwd[fwd_end] || (ir_op_flags(g->values[fwd_end].op) & IR_LEAF))) fwd_end++;
  fwd_end--; /* the last value before the first one of the backward */
  Peak pk = {.temp = p->peak_temp_bytes};
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    if (!p->bytes[v] || x->op == IR_PARAMETER || x->op == IR_INPUT) continue;
    int64_t b = (p->bytes[v] + 63) / 64 * 64;
    delta[v] += b;
    delta[last[v] + 1] -= b;
    if (v <= fwd_end && last[v] > fwd_end) pk.saved += b;
  }
  int64_t live = 0;
  for (int32_t v = 0; v <= fb_end; v++) {
    live += delta[v];
    if (live > pk.fb) pk.fb = live;
  }
  free(eff);
  free(last);
  free(delta);
  free(fwd);
  return pk;
}

static Peak peak(const IrGraph *g) {
  const Backend *b = backend_find("llvm");
  bool *mat = calloc((size_t)g->nvalues + 1, sizeof *mat);
  bool *m = b && b->plan && b->plan(g, mat) == 0 ? mat : NULL;
  MemPlan p;
  Peak r = {-1, -1, -1};
  if (pass_memplan_fused((IrGraph *)g, m, &p) == IR_OK) {
    r = measure(g, m, &p);
    CHECK_MSG(pass_memplan_conflicts(g, m, &p) == 0, "memplan conflicts");
    pass_memplan_free(&p);
  }
  free(mat);
  return r;
}

static double mib(int64_t b) { return (double)b / 1048576.0; }

/* peak_falls false: the step's peak is elsewhere (gpt2-124m at batch 4: the gradients of 124M
 * parameters at the end of the backward), so only the saved activations must fall. */
static void check_peak(const char *label, const char *model, const char **sets, int nsets,
                       bool peak_falls) {
  static const char *const presets[] = {NULL, "\"full\"", "\"save_dots\"", "\"save_qkvo\""};
  Peak none = {0};
  printf("\n  %s (%s fusion), MiB: preset, step peak, forward+backward peak, saved activations",
         label, backend_find("llvm") ? "llvm" : "no");
  for (int p = 0; p < 4; p++) {
    DrvJob j;
    if (lower(&j, model, "cpu", sets, nsets, presets[p], NULL, false)) {
      CHECK_MSG(0, "%s: did not lower", label);
      drv_free(&j);
      return;
    }
    Peak b = peak(j.graph);
    printf("\n    %-12s %9.2f %9.2f %9.2f", presets[p] ? presets[p] : "none", mib(b.temp),
           mib(b.fb), mib(b.saved));
    if (p == 0)
      none = b;
    else
      CHECK_MSG(b.temp <= none.temp && b.fb <= none.fb && b.saved < none.saved &&
                    (!peak_falls || (b.temp < none.temp && b.fb < none.fb)),
                "%s %s: peaks %lld %lld saved %lld; without remat %lld %lld saved %lld", label,
                presets[p], (long long)b.temp, (long long)b.fb, (long long)b.saved,
                (long long)none.temp, (long long)none.fb, (long long)none.saved);
    drv_free(&j);
  }
}

static void test_peak(void) {
  check_peak("tiny-lm", "tiny-lm.json", NULL, 0, true);
  check_peak("bench small", "../tools/bench/small.json", NULL, 0, true);
  const char *g2[] = {"/input/global_batch_size=4", "/input/seq_len=64"};
  check_peak("gpt2-124m b4 s64", "gpt2-124m.json", g2, 2, false);
  printf("\n");
}

/* ---- errors ---- */

static void expect_error(const char *policy, const char *text) {
  DrvJob j;
  CHECK_MSG(lower(&j, "tiny-lm.json", "cpu", small, 2, policy, NULL, true) != 0, "%s lowered",
            policy);
  char *msg = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&msg, &len);
  fe_diag_print(&j.diag, f);
  fclose(f);
  CHECK_MSG(strstr(msg, text) != NULL, "%s: message \"%s\" lacks \"%s\"", policy, msg, text);
  free(msg);
  drv_free(&j);
}

static void test_errors(void) {
  expect_error("\"offload_dots\"",
               "remat policy \"offload_dots\" at /model/decoder: offloading is not supported yet");
  expect_error("{\"save\": [], \"offload\": [\"attention\\\\..*\"]}",
               "offloading (\"offload\": [...]) is not supported yet");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"same bits, tiny-lm", test_same_tiny},
      {"same bits, fuji-test", test_same_fuji},
      {"same bits, moe-test", test_same_moe},
      {"same bits on a mesh", test_same_mesh},
      {"recomputed values are not read by the backward", test_structure},
      {"saved projections are reduced, not partial sums", test_saved_reduced},
      {"memplan peak falls", test_peak},
      {"offload refused", test_errors},
      {NULL, NULL},
  };
  return test_main(argc, argv, "remat", cases);
}
