/*
 * test_step.c: whole training-step graphs of real models.
 *
 * - Finite differences: the gradient autodiff builds for a whole model
 *   (tiny-lm; fuji-test with RoPE, GQA, SwiGLU and RMSNorm; the small MoE) is
 *   checked against central differences of the loss, computed by the
 *   interpreter in double precision, for several elements of every
 *   parameter.
 * - LoRA: the adapters' gradients by the same differences, and none for the frozen base.
 * - Text round trip: the lowered step graph of every shipped model prints,
 *   parses back, and prints identically.
 *
 * The models directory comes from the AXLC_MODELS compile definition.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "passes/passes.h"
#include "runtime/axrt.h"
#include "tests/cunit_check.h"

static void print_diag(const DrvJob *j) { fe_diag_print(&j->diag, stderr); }

/* Loads `model` (in AXLC_MODELS) with the modifier models/modifiers/`apply`.json (NULL: none),
 * shrunk by `sets`, lowered through autodiff and widen_grads. */
static int load(DrvJob *j, const char *model, const char *apply, const char **sets, int nsets) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", AXLC_MODELS, model);
  FeOptions opt = {0};
  opt.sets = sets;
  opt.nsets = nsets;
  char mod[1024];
  snprintf(mod, sizeof mod, "%s/modifiers/%s.json", AXLC_MODELS, apply ? apply : "");
  const char *mods[1] = {mod};
  opt.apply = mods;
  opt.napply = apply != NULL;
  if (drv_load(j, path, &opt) || drv_lower(j, "widen_grads")) {
    print_diag(j);
    return -1;
  }
  return 0;
}

/* Binds every parameter from the runtime's init (std raised so signals are not tiny). */
static void bind_params(DrvJob *j, IrInterp *it) {
  for (int i = 0; i < j->build.nparams; i++) {
    const FeParam *p = &j->build.params[i];
    int64_t n = fe_param_numel(p);
    float *f = malloc((size_t)n * sizeof *f);
    double *d = malloc((size_t)n * sizeof *d);
    RtInit init = {.kind = RT_INIT_NORMAL, .std = 0.3f};
    if (!strcmp(p->init, "ones")) init = (RtInit){.kind = RT_INIT_NORMAL, .mean = 1, .std = 0.2f};
    rt_init_fill(f, n, 0, p->path, 7, &init, NULL);
    for (int64_t k = 0; k < n; k++) d[k] = f[k];
    CU_ASSERT_EQUAL(ir_interp_set(it, -1, p->path, p->rank, p->shape, d), IR_OK);
    free(f);
    free(d);
  }
}

static void bind_batch(DrvJob *j, IrInterp *it) {
  const IrValue *ids = &j->graph->values[ir_graph_find(j->graph, IR_INPUT, "ids")];
  int64_t n = ir_shape_numel(&ids->shape);
  int64_t vocab = fe_get_int(fe_get_child(j->cfg, "model"), "vocab_size");
  double *tok = malloc((size_t)n * sizeof *tok);
  for (int64_t k = 0; k < n; k++) tok[k] = (double)((k * 37 + 11) % vocab);
  ir_interp_set(it, -1, "ids", 2, ids->shape.dims, tok);
  for (int64_t k = 0; k < n; k++) tok[k] = (double)((k * 53 + 5) % vocab);
  ir_interp_set(it, -1, "targets", 2, ids->shape.dims, tok);
  free(tok);
}

static double loss_of(IrInterp *it) {
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  IrShape s;
  return ir_interp_output(it, 0, "loss", &s)[0];
}

/* Central difference of the loss in element k of parameter p. */
static double numeric_grad(IrInterp *it, const FeParam *p, double *vals, int64_t k) {
  const double h = 1e-5;
  double keep = vals[k];
  vals[k] = keep + h;
  ir_interp_set(it, -1, p->path, p->rank, p->shape, vals);
  double up = loss_of(it);
  vals[k] = keep - h;
  ir_interp_set(it, -1, p->path, p->rank, p->shape, vals);
  double down = loss_of(it);
  vals[k] = keep;
  ir_interp_set(it, -1, p->path, p->rank, p->shape, vals);
  return (up - down) / (2 * h);
}

/* Checks 4 elements of every parameter that trains (a frozen one must have no gradient);
 * returns the worst relative error. */
static double gradcheck_with(const char *model, const char *apply, const char **sets, int nsets) {
  DrvJob j;
  if (load(&j, model, apply, sets, nsets)) {
    CU_FAIL("model did not load");
    drv_free(&j);
    return INFINITY;
  }
  IrInterp *it = ir_interp_new(j.graph, NULL);
  ir_interp_set_rounding(it, false);
  bind_params(&j, it);
  bind_batch(&j, it);
  loss_of(it);
  /* Every gradient at the unperturbed point, before any finite-difference run. */
  double **grads = calloc((size_t)j.build.nparams, sizeof *grads);
  for (int i = 0; i < j.build.nparams; i++) {
    const FeParam *p = &j.build.params[i];
    char gname[1024];
    snprintf(gname, sizeof gname, "grad:%s", p->path);
    IrShape s;
    CHECK_MSG((ir_graph_output(j.graph, gname) == IR_NONE) == p->frozen,
              "%s: %s is %s but has %s gradient", model, p->path, p->frozen ? "frozen" : "trained",
              p->frozen ? "a" : "no");
    if (p->frozen) continue;
    grads[i] = malloc((size_t)fe_param_numel(p) * sizeof **grads);
    memcpy(grads[i], ir_interp_output(it, 0, gname, &s),
           (size_t)fe_param_numel(p) * sizeof **grads);
  }
  double worst = 0;
  for (int i = 0; i < j.build.nparams; i++) {
    const FeParam *p = &j.build.params[i];
    if (p->frozen) continue;
    int64_t n = fe_param_numel(p);
    double *grad = grads[i], *vals = malloc((size_t)n * sizeof *vals);
    memcpy(vals, ir_interp_value(it, 0, ir_graph_find(j.graph, IR_PARAMETER, p->path)),
           (size_t)n * sizeof *vals);
    for (int64_t t = 0; t < 4; t++) {
      int64_t k = (t * 7919 + i * 31) % n;
      double num = numeric_grad(it, p, vals, k);
      double err = fabs(num - grad[k]) / fmax(fabs(num), 1e-4);
      if (err > worst) worst = err;
      CHECK_MSG(err < 1e-5, "%s: %s[%lld]: autodiff %.10g, finite difference %.10g", model, p->path,
                (long long)k, grad[k], num);
    }
    free(grad);
    free(vals);
  }
  free(grads);
  ir_interp_free(it);
  drv_free(&j);
  return worst;
}

static double gradcheck(const char *model, const char **sets, int nsets) {
  return gradcheck_with(model, NULL, sets, nsets);
}

/* LoRA's adapters (B bound nonzero, so A's gradient is too); the frozen base has none. */
static void test_gradcheck_lora(void) {
  const char *sets[] = {"/model/dim=16",        "/model/decoder/num_layers=2",
                        "/input/seq_len=8",     "/input/global_batch_size=2",
                        "/model/vocab_size=32", "/lora/rank=2"};
  printf(" worst %.2e ", gradcheck_with("tiny-lm.json", "lora", sets, 6));
  const char *gqa[] = {"/input/seq_len=6", "/input/global_batch_size=2",
                       "/model/decoder/num_layers=1", "/lora/params=.*_proj/weight"};
  printf(" worst %.2e ", gradcheck_with("fuji-test.json", "lora", gqa, 4));
}

static void test_gradcheck_tiny_lm(void) {
  const char *sets[] = {"/model/dim=16", "/model/decoder/num_layers=2", "/input/seq_len=8",
                        "/input/global_batch_size=2", "/model/vocab_size=32"};
  printf(" worst %.2e ", gradcheck("tiny-lm.json", sets, 5));
}

static void test_gradcheck_fuji_test(void) {
  const char *sets[] = {"/input/seq_len=6", "/input/global_batch_size=2",
                        "/model/decoder/num_layers=2"};
  printf(" worst %.2e ", gradcheck("fuji-test.json", sets, 3));
}

/* Under bf16 compute: the casts' gradients (cast back) and widen_grads' f32 accumulators are
 * derivatives of the same function (rounding off: the casts are the identity in double). */
static void test_gradcheck_bf16(void) {
  const char *sets[] = {"/input/seq_len=6", "/input/global_batch_size=2",
                        "/model/decoder/num_layers=2", "/precision/compute=bf16"};
  printf(" worst %.2e ", gradcheck("fuji-test.json", sets, 4));
  const char *moe[] = {"/model/dim=16",          "/model/decoder/num_layers=1",
                       "/input/seq_len=6",       "/input/global_batch_size=2",
                       "/model/vocab_size=32",   "/model/decoder/layer/feed_forward/hidden_dim=12",
                       "/precision/compute=bf16"};
  printf(" worst %.2e ", gradcheck("moe-test.json", moe, 7));
}

static void test_gradcheck_moe(void) {
  const char *sets[] = {"/model/dim=16",
                        "/model/decoder/num_layers=1",
                        "/input/seq_len=6",
                        "/input/global_batch_size=2",
                        "/model/vocab_size=32",
                        "/model/decoder/layer/feed_forward/hidden_dim=12",
                        "/model/decoder/layer/feed_forward/load_balance_loss_weight=0.5"};
  printf(" worst %.2e ", gradcheck("moe-test.json", sets, 7));
}

/* ---- text round trip of every shipped model's step graph ----------------- */

static void roundtrip(const char *model) {
  DrvJob j;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", AXLC_MODELS, model);
  if (drv_load(&j, path, NULL) || drv_lower(&j, NULL)) {
    print_diag(&j);
    CHECK_MSG(0, "%s did not lower", model);
    drv_free(&j);
    return;
  }
  char *text = ir_graph_to_string(j.graph), msg[512] = "";
  IrGraph *back = ir_graph_parse(text, msg, sizeof msg);
  CHECK_MSG(back != NULL, "%s: parse failed: %s", model, msg);
  if (back) {
    char *again = ir_graph_to_string(back);
    CHECK_MSG(strcmp(text, again) == 0, "%s: text form differs after a round trip", model);
    CHECK_MSG(back->nvalues == j.graph->nvalues, "%s: %d vs %d values", model, back->nvalues,
              j.graph->nvalues);
    free(again);
    ir_graph_free(back);
  }
  free(text);
  drv_free(&j);
}

static void test_roundtrip_all_models(void) {
  DIR *dp = opendir(AXLC_MODELS);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dp);
  int n = 0;
  for (struct dirent *e; (e = readdir(dp));) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
    roundtrip(e->d_name);
    n++;
  }
  closedir(dp);
  CU_ASSERT(n >= 10);
}

/* ---- memory plans of real step graphs ------------------------------------ */

static void memplan_model(const char *model) {
  DrvJob j;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", AXLC_MODELS, model);
  const char *sets[] = {"/input/global_batch_size=2", "/input/seq_len=16"};
  FeOptions opt = {0};
  opt.sets = sets;
  opt.nsets = 2;
  if (drv_load(&j, path, &opt) || drv_lower(&j, NULL)) {
    print_diag(&j);
    CHECK_MSG(0, "%s did not lower", model);
    drv_free(&j);
    return;
  }
  MemPlan p;
  int rc = pass_memplan(j.graph, &p);
  CHECK_MSG(rc == IR_OK, "%s: memplan failed: %s", model, ir_graph_error(j.graph));
  if (rc == IR_OK) {
    int64_t c = pass_memplan_conflicts(j.graph, NULL, &p);
    CHECK_MSG(c == 0, "%s: %lld overlapping live buffers", model, (long long)c);
    /* parameters + AdamW state: the state is exactly twice the parameters */
    CHECK_MSG(p.opt_bytes == 2 * p.param_bytes, "%s: opt %lld vs params %lld", model,
              (long long)p.opt_bytes, (long long)p.param_bytes);
    printf(" %s: slab %.1f MiB, temps %.1f MiB;", model, p.slab_bytes / 1048576.0,
           p.peak_temp_bytes / 1048576.0);
    pass_memplan_free(&p);
  }
  drv_free(&j);
}

static void test_memplan_models(void) {
  memplan_model("tiny-lm.json");
  memplan_model("moe-test.json");
  memplan_model("fuji-test.json");
}

/* ---- a deep model -------------------------------------------------------- */

/* passes/optimizer.c collected the parameters in arrays of 4096, so a model
 * of more than about 409 layers passed `axlc config` and `axlc params` and
 * then failed in `axlc ir` ("optimizer: more than 4096 parameters"). The
 * config's bound of 4096 layers is now the only one: 500 layers of a
 * narrow tiny-lm (5,004 parameters) lower through every pass. */
static void test_deep_model(void) {
  DrvJob j;
  char path[1024];
  snprintf(path, sizeof path, "%s/tiny-lm.json", AXLC_MODELS);
  const char *sets[] = {"/model/decoder/num_layers=500", "/model/dim=8",
                        "/model/decoder/layer/self_attention/num_heads=1", "/input/seq_len=4",
                        "/input/global_batch_size=1"};
  FeOptions opt = {0};
  opt.sets = sets;
  opt.nsets = 5;
  int rc = drv_load(&j, path, &opt);
  if (rc == 0) rc = drv_lower(&j, NULL);
  if (rc) print_diag(&j);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  CHECK_MSG(j.build.nparams == 5004, "%d parameters, expected 5004", j.build.nparams);
  /* loss, a gradient and three new: per parameter, grad_norm, lr */
  CHECK_MSG(j.graph->noutputs == 4 * 5004 + 3, "%d outputs, expected %d", j.graph->noutputs,
            4 * 5004 + 3);
  CU_ASSERT(ir_graph_output(j.graph, "new:model/decoder/layer_499/feed_forward/linear2/weight") !=
            IR_NONE);
  CU_ASSERT(ir_graph_output(j.graph, "new:opt/v/model/emb/weight") != IR_NONE);
  drv_free(&j);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"gradcheck tiny-lm", test_gradcheck_tiny_lm},
      {"gradcheck fuji-test (rope, gqa, swiglu, rms)", test_gradcheck_fuji_test},
      {"gradcheck moe", test_gradcheck_moe},
      {"gradcheck bf16 compute (fuji-test, moe)", test_gradcheck_bf16},
      {"gradcheck lora adapters (tiny-lm, fuji-test)", test_gradcheck_lora},
      {"text round trip of every model's step graph", test_roundtrip_all_models},
      {"memory plans of model steps", test_memplan_models},
      {"a deep model (500 layers) lowers", test_deep_model},
      {NULL, NULL},
  };
  return test_main(argc, argv, "step", cases);
}
