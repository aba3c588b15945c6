/* test_step.c: a whole tiny-lm training step (forward, backward, AdamW) through the LLVM
 * backend against the interpreter.
 *
 * The step graph comes from the driver (models/tiny-lm.json shrunk with --set overrides), the
 * memory plan from pass_memplan (and again from pass_memplan_fused, told what the backend fuses).
 * Both run one step from the same parameters (the runtime's deterministic init), zero optimizer
 * state and the same batch; the loss, gradient norm, learning rate and every "new:P" output
 * (written in place over P) must agree within 1e-4 relative. The axlc_program global is checked
 * against the plan. `test_backend_step --bench [SETS...]` times a step of the full tiny-lm (or one
 * shrunk by the given sets) both ways. AXLC_BT_TRACE=1 (or =fuse) first prints the values that
 * disagree on a one-buffer-per-value plan.
 */
#include <time.h>

#include "backend_test.h"
#include "driver/driver.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int load(DrvJob *j, const char **sets, int nsets) {
  FeOptions opt = {0};
  opt.sets = sets;
  opt.nsets = nsets;
  if (drv_load(j, AXLC_MODELS "/tiny-lm.json", &opt) || drv_lower(j, NULL)) {
    fe_diag_print(&j->diag, stderr);
    return -1;
  }
  return 0;
}

static RtInit param_init(const FeParam *p) {
  RtInit init = {.kind = RT_INIT_NORMAL, .std = (float)p->init_std};
  if (!strcmp(p->init, "ones")) init = (RtInit){.kind = RT_INIT_ONES};
  if (!strcmp(p->init, "zeros")) init = (RtInit){.kind = RT_INIT_ZEROS};
  return init;
}

/* Leaf data for the step: parameters from the runtime's init, zero moments, a batch, step 1. */
static double **step_leaves(DrvJob *j) {
  const IrGraph *g = j->graph;
  double **d = calloc((size_t)g->nvalues + 1, sizeof *d);
  int64_t vocab = fe_get_int(fe_get_child(j->cfg, "model"), "vocab_size");
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER && x->op != IR_INPUT) continue;
    int64_t n = ir_shape_numel(&x->shape);
    d[v] = calloc((size_t)(n ? n : 1), sizeof **d);
    if (!strcmp(x->name, "step")) d[v][0] = 1;
    for (int64_t k = 0; k < n && !strcmp(x->name, "ids"); k++)
      d[v][k] = (double)((k * 37 + 11) % vocab);
    for (int64_t k = 0; k < n && !strcmp(x->name, "targets"); k++)
      d[v][k] = (double)((k * 53 + 5) % vocab);
  }
  for (int i = 0; i < j->build.nparams; i++) {
    const FeParam *p = &j->build.params[i];
    int32_t v = ir_graph_find(g, IR_PARAMETER, p->path);
    int64_t n = fe_param_numel(p);
    float *f = malloc((size_t)n * sizeof *f);
    RtInit init = param_init(p);
    CU_ASSERT_EQUAL(rt_init_fill(f, n, 0, p->path, 7, &init, NULL), 0);
    for (int64_t k = 0; k < n && v != IR_NONE; k++) d[v][k] = f[k];
    free(f);
  }
  return d;
}

static BackendParam *program_info(DrvJob *j, BackendProgram *P) {
  BackendParam *pi = calloc((size_t)j->build.nparams + 1, sizeof *pi);
  for (int i = 0; i < j->build.nparams; i++) {
    pi[i].path = j->build.params[i].path;
    pi[i].init = param_init(&j->build.params[i]);
  }
  *P = (BackendProgram){.config = "{}",
                        .nparams = j->build.nparams,
                        .params = pi,
                        .vocab = 32,
                        .facts = {.max_steps = 200,
                                  .ckpt_every_n_steps = 50,
                                  .ckpt_keep = 3,
                                  .seed = 7,
                                  .step_flops = 1.5}};
  return pi;
}

static void check_program(const DrvJob *j, const MemPlan *mp, const RtProgram *p) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->abi_version, RT_ABI_VERSION);
  CU_ASSERT_EQUAL(p->slab_bytes, mp->slab_bytes);
  CU_ASSERT_EQUAL(p->nparams, j->build.nparams);
  CU_ASSERT_EQUAL(p->facts.seed, 7);
  CU_ASSERT_EQUAL(p->facts.ckpt_keep, 3);
  CU_ASSERT_EQUAL(p->facts.ckpt_every_n_steps, 50);
  CU_ASSERT_EQUAL(p->facts.max_steps, 200);
  CU_ASSERT_EQUAL(p->facts.step_flops, 1.5);
  CU_ASSERT_EQUAL(p->loss_offset, mp->offset[ir_graph_output(j->graph, "loss")]);
  CU_ASSERT_EQUAL(p->step_offset, mp->offset[ir_graph_find(j->graph, IR_INPUT, "step")]);
  CU_ASSERT_STRING_EQUAL(p->config, "{}");
  const RtParamSlot *s = &p->params[j->build.nparams - 1];
  CU_ASSERT_STRING_EQUAL(s->path, j->build.params[j->build.nparams - 1].path);
  CU_ASSERT_EQUAL(s->offset, mp->offset[ir_graph_find(j->graph, IR_PARAMETER, s->path)]);
  char m[1024];
  snprintf(m, sizeof m, "opt/v/%s", s->path);
  CU_ASSERT_EQUAL(s->v_offset, mp->offset[ir_graph_find(j->graph, IR_PARAMETER, m)]);
}

/* One step both ways; compares outputs within rtol. */
static void run_step(DrvJob *j, int reps, int plan, double rtol) {
  IrGraph *g = j->graph;
  double **leaf = step_leaves(j);
  double t0 = now();
  IrInterp *it = bt_interp(g, leaf);
  double t_interp = now() - t0;
  MemPlan mp;
  CU_ASSERT_EQUAL_FATAL(bt_plan(g, plan, &mp), 0);
  BackendProgram P;
  BackendParam *pi = program_info(j, &P);
  LlvmOptions o = llvm_options_default();
  o.program = &P;
  if (getenv("AXLC_BT_NOFUSE")) o.fuse = false;
  char err[1024];
  LlvmModule *m;
  LlvmJit *jit;
  LlvmStepFn step;
  t0 = now();
  int rc = llvm_compile(g, &mp, &o, &m, err, sizeof err);
  if (rc == 0) rc = llvm_jit(m, &step, &jit, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  llvm_module_free(m);
  char *slab = aligned_alloc(64, (size_t)bt_align(mp.slab_bytes));
  step(slab, NULL, NULL); /* first call: the JIT materializes the code */
  double t_compile = now() - t0;
  check_program(j, &mp, llvm_jit_program(jit));
  /* Best of reps on this thread, then on a pool (whose result is the one compared). */
  double t_step[2] = {1e30, 1e30};
  RtPool *pool = NULL;
#if AXLC_HAVE_RT_POOL
  CU_ASSERT_EQUAL(rt_pool_new(&pool, 4, NULL), 0);
#endif
  for (int r = 0; r < 2 * reps; r++) {
    memset(slab, 0xff, (size_t)bt_align(mp.slab_bytes));
    for (int32_t v = 0; v < g->nvalues; v++)
      if (leaf[v]) bt_slab_put(g, &mp, slab, v, leaf[v]);
    t0 = now();
    step(slab, r < reps ? NULL : pool, NULL);
    t_step[r >= reps] = fmin(t_step[r >= reps], now() - t0);
  }
  int64_t nnew = 0;
  for (int32_t i = 0; i < g->noutputs; i++) {
    const char *name = g->outputs[i].name;
    if (strcmp(name, "loss") && strcmp(name, "grad_norm") && strcmp(name, "lr") &&
        strncmp(name, "new:", 4))
      continue;
    nnew += !strncmp(name, "new:", 4);
    bt_compare(g, &mp, slab, &g->outputs[i], ir_interp_value(it, 0, g->outputs[i].value), rtol,
               "step");
  }
  CU_ASSERT(nnew >= 3 * j->build.nparams);
  printf("\n  %s: %d values, slab %.2f MB: interpreter step %.3f s, LLVM compile+JIT %.3f s, "
         "LLVM step %.3f ms (best of %d; %.3f ms on a %d-thread pool)\n",
         plan == BT_PLAN_FUSED ? "memplan_fused" : "memplan", g->nvalues, mp.slab_bytes / 1e6,
         t_interp, t_compile, t_step[0] * 1e3, reps, t_step[1] * 1e3,
         pool ? rt_pool_threads(pool) : 1);
  free(slab);
#if AXLC_HAVE_RT_POOL
  rt_pool_free(pool);
#endif
  llvm_jit_free(jit);
  free(pi);
  pass_memplan_free(&mp);
  for (int32_t v = 0; v < g->nvalues; v++) free(leaf[v]);
  free(leaf);
  ir_interp_free(it);
}

static const char *small[] = {"/model/dim=16", "/model/decoder/num_layers=2", "/input/seq_len=8",
                              "/input/global_batch_size=2", "/model/vocab_size=32"};

/* Debugging aid: unfused on a one-buffer-per-value plan, the first values that disagree. */
static void trace(DrvJob *j) {
  IrGraph *g = j->graph;
  double **leaf = step_leaves(j);
  IrInterp *it = bt_interp(g, leaf);
  MemPlan mp;
  bt_plan_simple(g, &mp);
  LlvmOptions o = llvm_options_default();
  o.fuse = !strcmp(getenv("AXLC_BT_TRACE"), "fuse");
  char *slab = bt_run_backend(g, &mp, &o, leaf, NULL, "trace");
  int shown = 0;
  for (int32_t v = 0; v < g->nvalues && slab && shown < 5; v++) {
    if (leaf[v]) continue; /* new:P overwrote them */
    const double *want = ir_interp_value(it, 0, v);
    int64_t n = ir_shape_numel(&g->values[v].shape);
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++)
      worst = fmax(worst, fabs(bt_slab_get(g, &mp, slab, v, i) - want[i]) / (scale + 1e-30));
    if (worst > 1e-3 && scale > 1e-6) {
      printf("%%%d %s: worst error %.3g of scale %.3g\n", v, ir_op_name(g->values[v].op), worst,
             scale);
      shown++;
    }
  }
  free(slab);
}

static void test_tiny_lm_step(void) {
  DrvJob j;
  CU_ASSERT_EQUAL_FATAL(load(&j, small, 5), 0);
  if (getenv("AXLC_BT_TRACE")) trace(&j);
  run_step(&j, 3, BT_PLAN_MEMPLAN, 1e-4);
  run_step(&j, 3, BT_PLAN_FUSED, 1e-4);
  drv_free(&j);
}

/* The same step under bf16 compute (docs/precision.md): parameters cast to bf16 where the
 * forward reads them, bf16 products and attention, f32 islands, f32 weight gradients. The
 * backend rounds where the interpreter does, so the step agrees as closely as in f32 but for
 * the rare ties that f32-then-bf16 rounding breaks the other way. */
static void test_tiny_lm_step_bf16(void) {
  const char *sets[] = {"/model/dim=16",        "/model/decoder/num_layers=2",
                        "/input/seq_len=8",     "/input/global_batch_size=2",
                        "/model/vocab_size=32", "/precision/compute=bf16"};
  DrvJob j;
  CU_ASSERT_EQUAL_FATAL(load(&j, sets, 6), 0);
  int nbf16 = 0;
  for (int32_t v = 0; v < j.graph->nvalues; v++) nbf16 += j.graph->values[v].dtype == DT_BF16;
  CU_ASSERT(nbf16 > 50);
  if (getenv("AXLC_BT_TRACE")) trace(&j);
  run_step(&j, 1, BT_PLAN_MEMPLAN, 1e-4);
  run_step(&j, 1, BT_PLAN_FUSED, 1e-4);
  drv_free(&j);
}

static int bench_nsets;
static const char **bench_sets;

static void test_bench(void) {
  DrvJob j;
  CU_ASSERT_EQUAL_FATAL(load(&j, bench_sets, bench_nsets), 0);
  run_step(&j, 5, BT_PLAN_MEMPLAN, 1e-4);
  run_step(&j, 5, BT_PLAN_FUSED, 1e-4);
  drv_free(&j);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--bench")) {
    bench_nsets = argc - 2;
    bench_sets = (const char **)argv + 2;
    static const TestCase bench[] = {{"bench", test_bench}, {NULL, NULL}};
    return test_main(1, argv, "backend_step", bench);
  }
  static const TestCase cases[] = {{"tiny_lm_step", test_tiny_lm_step},
                                   {"tiny_lm_step_bf16", test_tiny_lm_step_bf16},
                                   {NULL, NULL}};
  return test_main(argc, argv, "backend_step", cases);
}
