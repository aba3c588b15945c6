/*
 * test_pipeline.c: pipeline parallelism (passes/pipeline.c) against one process, in the
 * reference interpreter's simulated mesh.
 *
 * Each layout lowers the same config twice: for one device (the whole step after simplify)
 * and for the pipeline mesh (the per-device program after the pipeline pass). Both train 10
 * steps from the same parameters and batch: each step the new parameters and moments go back
 * in (the pipeline's put together from the devices of the stage that computed them). The losses
 * of every step and the final parameters must agree (the interpreter computes in double: only
 * the order of sums differs, far below the 1e-4 the issue asks for). The test also checks the
 * program: values on both stages, sends and recvs paired, the schedule's order; and the config
 * errors.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "passes/passes.h"
#include "tests/cunit_check.h"
#include "tests/driver/lower.h"

#define STEPS 10
#define SMALL "/input/seq_len=16", "/input/global_batch_size=8"

/* The global value of output `name` of the pipeline program, from the devices that computed
 * it; false if no device did. */
static bool gather_output(IrInterp *it, const IrGraph *s, const char *name, const IrShape *gs,
                          double *global) {
  int32_t v = ir_graph_output(s, name);
  if (v == IR_NONE) return false;
  const IrValue *y = &s->values[v];
  int64_t ndev = ir_mesh_devices(&s->mesh);
  bool any = false;
  for (int64_t dev = 0; dev < ndev; dev++) {
    if (!ir_value_on_device(&s->mesh, y, dev)) continue;
    const double *got = ir_interp_output(it, dev, name, NULL);
    if (!got) return false;
    ir_split_copy(&s->mesh, &y->split, gs, dev, global, (double *)got, true);
    any = true;
  }
  return any;
}

/* Binds leaf x (global shape) of the pipeline program on every device from global data. */
static void bind_leaf(IrInterp *it, const IrGraph *s, const IrValue *x, double *d) {
  int32_t sv = ir_graph_find(s, x->op, x->name);
  if (sv == IR_NONE) return; /* a leaf the program does not read */
  const IrValue *y = &s->values[sv];
  int64_t n = ir_shape_numel(&y->shape), ndev = ir_mesh_devices(&s->mesh);
  double *l = malloc((size_t)(n ? n : 1) * sizeof *l);
  for (int64_t dev = 0; dev < ndev; dev++) {
    ir_split_copy(&s->mesh, &y->split, &x->shape, dev, d, l, false);
    CU_ASSERT_EQUAL(ir_interp_set(it, dev, y->name, y->shape.rank, y->shape.dims, l), IR_OK);
  }
  free(l);
}

typedef struct Expect {
  int devices;
  int min_sends; /* activations and their gradients, per microbatch */
} Expect;

/* The program's sends and recvs pair up: each recv reads a send to its own stage. */
static void check_p2p(const IrGraph *s, const char *label, int min_sends) {
  int sends = 0, recvs = 0, stages[64] = {0};
  for (int32_t v = 0; v < s->nvalues; v++) {
    const IrValue *x = &s->values[v];
    if (x->stage > 0 && x->stage <= 64) stages[x->stage - 1]++;
    if (x->op == IR_SEND) sends++;
    if (x->op != IR_RECV) continue;
    recvs++;
    const IrValue *snd = &s->values[x->ops[0]];
    CHECK_MSG(snd->op == IR_SEND && snd->attr.k == x->stage - 1 && x->attr.k == snd->stage - 1,
              "%s: recv %%%d on stage %d from %lld reads %s %%%d of stage %d to %lld", label, v,
              x->stage - 1, (long long)x->attr.k, ir_op_name(snd->op), x->ops[0], snd->stage - 1,
              (long long)snd->attr.k);
  }
  CHECK_MSG(sends == recvs && sends >= min_sends, "%s: %d sends, %d recvs (expected >= %d)", label,
            sends, recvs, min_sends);
  CHECK_MSG(stages[0] > 0 && stages[1] > 0, "%s: %d values on stage 0, %d on stage 1", label,
            stages[0], stages[1]);
}

static void check_pipeline(const char *model, const char *target, const char **sets, int nsets,
                           Expect ex) {
  DrvJob G, S;
  char label[512];
  snprintf(label, sizeof label, "%s %s %s %s", model, target, sets[nsets - 2], sets[nsets - 1]);
  /* one device: the same config but every mesh axis 1 */
  const char *gsets[16];
  for (int i = 0; i < nsets; i++) gsets[i] = sets[i];
  gsets[nsets] = "/mesh/shape=[1,1,1,1,1,1]";
  if (test_lower(&G, model, "cpu", gsets, nsets + 1, "simplify", false) ||
      test_lower(&S, model, target, sets, nsets, "pipeline", false)) {
    CHECK_MSG(0, "%s: did not lower", label);
    drv_free(&G);
    drv_free(&S);
    return;
  }
  const IrGraph *g = G.graph, *s = S.graph;
  CHECK_MSG(ir_mesh_devices(&s->mesh) == ex.devices, "%s: %lld devices, expected %d", label,
            (long long)ir_mesh_devices(&s->mesh), ex.devices);
  check_p2p(s, label, ex.min_sends);
  /* each stage runs its microbatches' forwards and backwards in the schedule's order: its
   * values of a phase grouped by unit, the units (microbatch and phase; two in a row always
   * differ in one) in the order pass_pipeline_unit gives its chunks' units */
  json_object *mesh = fe_get_child(S.cfg, "mesh");
  PassPipeline sp = {.stages = 2,
                     .schedule = pass_schedule_parse(fe_get_str(mesh, "pipeline_schedule")),
                     .virtual_stages = (int32_t)fe_get_int(mesh, "pipeline_virtual"),
                     .microbatches = S.facts.microbatches};
  int64_t V = pass_pipeline_virtual(&sp), n = 2 * V * sp.microbatches;
  int64_t *want = calloc((size_t)n, sizeof *want);
  for (int st = 0; st < 2; st++) {
    for (int32_t c = st; c < 2 * V; c += 2)
      for (int64_t k = 0; k < sp.microbatches; k++)
        for (int b = 0; b < 2; b++) want[pass_pipeline_unit(&sp, c, k, b)] = 2 * k + b;
    int64_t last = -1, units = 0;
    for (int32_t v = 0; v < s->nvalues; v++) {
      const IrValue *x = &s->values[v];
      if (x->stage != st + 1 || x->phase == IR_PHASE_NONE) continue;
      int64_t u = 2 * x->micro + (x->phase == IR_PHASE_BACKWARD);
      if (u == last) continue;
      if (units >= n || want[units] != u) {
        CHECK_MSG(0, "%s: stage %d: %%%d (microbatch %d %s) is unit %lld, expected %s%lld", label,
                  st, v, x->micro, x->phase == IR_PHASE_BACKWARD ? "backward" : "forward",
                  (long long)units, units < n ? (want[units] % 2 ? "B" : "F") : "none: ",
                  units < n ? (long long)(want[units] / 2) : -1LL);
        break;
      }
      units++;
      last = u;
    }
    CHECK_MSG(units == n, "%s: stage %d runs %lld units, expected %lld", label, st,
              (long long)units, (long long)n);
  }
  free(want);
  int64_t vocab = fe_get_int(fe_get_child(G.cfg, "model"), "vocab_size");
  IrInterp *gi = ir_interp_new(g, NULL), *si = ir_interp_new(s, NULL);
  ir_interp_set_rounding(gi, false);
  ir_interp_set_rounding(si, false);
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER && x->op != IR_INPUT) continue;
    double *d = test_leaf_values(x, &x->shape, vocab, 7);
    CU_ASSERT_EQUAL(ir_interp_set(gi, 0, x->name, x->shape.rank, x->shape.dims, d), IR_OK);
    bind_leaf(si, s, x, d);
    free(d);
  }
  double worst = 0;
  for (int step = 0; step < STEPS; step++) {
    if (ir_interp_run(gi) || ir_interp_run(si)) {
      CHECK_MSG(0, "%s: step %d: %s %s", label, step,
                ir_interp_error(gi) ? ir_interp_error(gi) : "",
                ir_interp_error(si) ? ir_interp_error(si) : "");
      break;
    }
    IrShape ls;
    const double *want = ir_interp_output(gi, 0, "loss", &ls);
    double got = NAN;
    CHECK_MSG(gather_output(si, s, "loss", &ls, &got), "%s: no device computed the loss", label);
    CHECK_MSG(fabs(got - *want) <= 1e-9 * fabs(*want), "%s: step %d loss %.12g, one process %.12g",
              label, step, got, *want);
    /* the new state goes back in, on both sides; the last step's is compared */
    for (int32_t v = 0; v < g->nvalues; v++) {
      const IrValue *x = &g->values[v];
      char name[512];
      snprintf(name, sizeof name, "new:%s", x->name);
      if (x->op != IR_PARAMETER || ir_graph_output(g, name) == IR_NONE) continue;
      IrShape gs;
      const double *w = ir_interp_output(gi, 0, name, &gs);
      int64_t n = ir_shape_numel(&gs);
      double *mine = malloc((size_t)(n ? n : 1) * sizeof *mine),
             *copy = malloc((size_t)(n ? n : 1) * sizeof *copy);
      memcpy(copy, w, (size_t)n * sizeof *copy);
      if (!gather_output(si, s, name, &gs, mine)) {
        CHECK_MSG(0, "%s: output %s missing", label, name);
      } else {
        for (int64_t e = 0; e < n; e++) {
          double err = fabs(mine[e] - copy[e]) / fmax(1e-6, fabs(copy[e]));
          if (err > worst) worst = err;
          if (err > 1e-9) {
            CHECK_MSG(0, "%s: step %d %s[%lld]: %.12g, one process %.12g", label, step, name,
                      (long long)e, mine[e], copy[e]);
            break;
          }
        }
        CU_ASSERT_EQUAL(ir_interp_set(gi, 0, x->name, gs.rank, gs.dims, copy), IR_OK);
        bind_leaf(si, s, x, mine);
      }
      free(mine);
      free(copy);
    }
  }
  if (getenv("AXLC_TEST_VERBOSE"))
    fprintf(stderr, "%s: worst relative difference %.3g\n", label, worst);
  ir_interp_free(gi);
  ir_interp_free(si);
  drv_free(&G);
  drv_free(&S);
}

#define PIPE(p, d, m) "/mesh/shape=[" #p "," #d ",1,1,1," #m "]"
#define GPIPE         "/mesh/pipeline_schedule=gpipe"
#define ONE_F_ONE_B   "/mesh/pipeline_schedule=1f1b"

static void test_tiny_lm_gpipe(void) { /* 2 layers, tied embedding and head */
  const char *p2[] = {SMALL, "/learner/microbatches=2", GPIPE, PIPE(2, 1, 1)};
  check_pipeline("tiny-lm.json", "cpu-2", p2, 5, (Expect){2, 4});
  const char *p4[] = {SMALL, "/learner/microbatches=4", GPIPE, PIPE(2, 1, 1)};
  check_pipeline("tiny-lm.json", "cpu-2", p4, 5, (Expect){2, 8});
}

static void test_tiny_lm_1f1b(void) {
  const char *p4[] = {SMALL, "/learner/microbatches=4", ONE_F_ONE_B, PIPE(2, 1, 1)};
  check_pipeline("tiny-lm.json", "cpu-2", p4, 5, (Expect){2, 8});
  const char *p8[] = {SMALL, "/learner/microbatches=8", ONE_F_ONE_B, PIPE(2, 1, 1)};
  check_pipeline("tiny-lm.json", "cpu-2", p8, 5, (Expect){2, 16});
}

/* fuji-test: 4 layers, RoPE, GQA, SwiGLU, RMSNorm, an untied head */
static void test_llama_style(void) {
  const char *g4[] = {SMALL, "/learner/microbatches=4", GPIPE, PIPE(2, 1, 1)};
  check_pipeline("fuji-test.json", "cpu-2", g4, 5, (Expect){2, 8});
  const char *f8[] = {SMALL, "/learner/microbatches=8", ONE_F_ONE_B, PIPE(2, 1, 1)};
  check_pipeline("fuji-test.json", "cpu-2", f8, 5, (Expect){2, 16});
  /* an uneven split: one layer on stage 0, three on stage 1 */
  const char *cut[] = {SMALL, "/learner/microbatches=4", "/mesh/pipeline_cuts=[1]", ONE_F_ONE_B,
                       PIPE(2, 1, 1)};
  check_pipeline("fuji-test.json", "cpu-2", cut, 6, (Expect){2, 8});
}

/* interleaved: fuji-test's 4 layers in 4 chunks of one layer, chunks 0 and 2 on stage 0, 1 and
 * 3 on stage 1: each microbatch goes around the ring twice (3 sends forward, 3 back) */
#define INTERLEAVED "/mesh/pipeline_schedule=interleaved", "/mesh/pipeline_virtual=2"

static void test_interleaved(void) {
  const char *m4[] = {SMALL, "/learner/microbatches=4", INTERLEAVED, PIPE(2, 1, 1)};
  check_pipeline("fuji-test.json", "cpu-2", m4, 6, (Expect){2, 24});
}

static void test_interleaved_more(void) {
  const char *m8[] = {SMALL, "/learner/microbatches=8", INTERLEAVED, PIPE(2, 1, 1)};
  check_pipeline("fuji-test.json", "cpu-2", m8, 6, (Expect){2, 48});
  /* data = 2 inside the stages; M = P: every forward before the first backward */
  const char *pd[] = {SMALL, "/learner/microbatches=2", INTERLEAVED, PIPE(2, 2, 1)};
  check_pipeline("fuji-test.json", "cpu-4", pd, 6, (Expect){4, 12});
  /* tiny-lm's tied head: 2 layers in 2 chunks of one stage, the head's gradient to stage 0 */
  const char *tied[] = {SMALL, "/learner/microbatches=2", "/model/decoder/num_layers=4",
                        INTERLEAVED, PIPE(2, 1, 1)};
  check_pipeline("tiny-lm.json", "cpu-2", tied, 7, (Expect){2, 12});
  /* uneven chunks by the cuts: 6 layers as 2, 1, 2, 1 */
  const char *cut[] = {SMALL,       "/learner/microbatches=4",     "/model/decoder/num_layers=6",
                       INTERLEAVED, "/mesh/pipeline_cuts=[2,3,5]", PIPE(2, 1, 1)};
  check_pipeline("fuji-test.json", "cpu-2", cut, 8, (Expect){2, 24});
}

static int count_backward(const IrGraph *g) {
  int n = 0;
  for (int32_t v = 0; v < g->nvalues; v++) n += g->values[v].phase == IR_PHASE_BACKWARD;
  return n;
}

/* remat under a pipeline: the recomputed forward values run in their microbatch's backward
 * unit (more backward values than without remat), and the numbers stay */
static void test_remat(void) {
  const char *full[] = {SMALL, "/learner/microbatches=4", "/model/decoder/remat_policy=\"full\"",
                        ONE_F_ONE_B, PIPE(2, 1, 1)};
  check_pipeline("fuji-test.json", "cpu-2", full, 6, (Expect){2, 8});
  DrvJob a, b;
  const char *none[] = {SMALL, "/learner/microbatches=4", ONE_F_ONE_B, PIPE(2, 1, 1)};
  CU_ASSERT_EQUAL_FATAL(test_lower(&a, "fuji-test.json", "cpu-2", none, 5, "pipeline", false), 0);
  CU_ASSERT_EQUAL_FATAL(test_lower(&b, "fuji-test.json", "cpu-2", full, 6, "pipeline", false), 0);
  CHECK_MSG(count_backward(b.graph) > count_backward(a.graph) + 100,
            "%d backward values under remat full, %d without", count_backward(b.graph),
            count_backward(a.graph));
  drv_free(&a);
  drv_free(&b);
}

/* every other axis still shards inside each stage */
static void test_with_mesh(void) {
  const char *pd[] = {SMALL, "/learner/microbatches=2", ONE_F_ONE_B, PIPE(2, 2, 1)};
  check_pipeline("fuji-test.json", "cpu-4", pd, 5, (Expect){4, 4});
  const char *pm[] = {SMALL, "/learner/microbatches=4", ONE_F_ONE_B, PIPE(2, 1, 2)};
  check_pipeline("fuji-test.json", "cpu-4", pm, 5, (Expect){4, 8});
  const char *tpd[] = {SMALL, "/learner/microbatches=2", GPIPE, PIPE(2, 2, 1)};
  check_pipeline("tiny-lm.json", "cpu-4", tpd, 5, (Expect){4, 4});
  const char *tpm[] = {SMALL, "/learner/microbatches=2", GPIPE, PIPE(2, 1, 2)};
  check_pipeline("tiny-lm.json", "cpu-4", tpm, 5, (Expect){4, 4});
}

/* 1F1B's order: stage 0 of 2 runs F0 F1 B0 F2 B1 F3 B2 B3; the last stage F0 B0 F1 B1 ... */
static void test_schedule(void) {
  static const char *want0 = "F0 F1 B0 F2 B1 F3 B2 B3 ", *want1 = "F0 B0 F1 B1 F2 B2 F3 B3 ";
  for (int s = 0; s < 2; s++) {
    char got[64] = "";
    for (int64_t slot = 0; slot < 8; slot++)
      for (int64_t k = 0; k < 4; k++)
        for (int b = 0; b < 2; b++)
          if (pass_pipeline_slot(PASS_SCHEDULE_1F1B, 2, 4, s, k, b) == slot)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%c%lld ", b ? 'B' : 'F',
                     (long long)k);
    CU_ASSERT_STRING_EQUAL(got, s ? want1 : want0);
  }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pass_pipeline_timeline(
      &(PassPipeline){.stages = 2, .schedule = PASS_SCHEDULE_1F1B, .microbatches = 4}, f);
  fclose(f);
  CU_ASSERT_STRING_EQUAL(text, "# schedule 1f1b: 2 stages, 4 microbatches, 10 time units; bubble "
                               "1/5\n"
                               "# stage 0 | F0  F1  .   B0  F2  B1  F3  B2  .   B3 \n"
                               "# stage 1 | .   F0  B0  F1  B1  F2  B2  F3  B3  .  \n");
  free(text);
}

/* Interleaved, P = 2, V = 2, M = 4: stage 0 runs chunks 0 and 2, stage 1 chunks 1 and 3; the
 * microbatches go in groups of P = 2, a group's forwards on the first chunk then the second,
 * its backwards from the last chunk down; warm-up 2 (P - 1 - s) + (V - 1) P forwards. */
static void test_schedule_interleaved(void) {
  PassPipeline p = {
      .stages = 2, .schedule = PASS_SCHEDULE_INTERLEAVED, .virtual_stages = 2, .microbatches = 4};
  static const char *want[] = {
      "F0.0 F1.0 F0.2 F1.2 F2.0 B0.2 F3.0 B1.2 F2.2 B0.0 F3.2 B1.0 B2.2 B3.2 B2.0 B3.0 ",
      "F0.1 F1.1 F0.3 B0.3 F1.3 B1.3 F2.1 B0.1 F3.1 B1.1 F2.3 B2.3 F3.3 B3.3 B2.1 B3.1 "};
  for (int s = 0; s < 2; s++) {
    char got[128] = "";
    for (int64_t slot = 0; slot < 16; slot++)
      for (int32_t c = s; c < 4; c += 2)
        for (int64_t k = 0; k < 4; k++)
          for (int b = 0; b < 2; b++)
            if (pass_pipeline_unit(&p, c, k, b) == slot)
              snprintf(got + strlen(got), sizeof got - strlen(got), "%c%lld.%d ", b ? 'B' : 'F',
                       (long long)k, c);
    CU_ASSERT_STRING_EQUAL(got, want[s]);
  }
  /* live: stage 0 holds 5 chunk-microbatches (F0.0 F1.0 F0.2 F1.2 F2.0), stage 1 3 */
  CU_ASSERT_EQUAL(pass_pipeline_live(&p, 0), 5);
  CU_ASSERT_EQUAL(pass_pipeline_live(&p, 1), 3);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pass_pipeline_timeline(&p, f);
  fclose(f);
  CU_ASSERT_STRING_EQUAL(
      text, "# schedule interleaved: 2 stages x 2 virtual (4 chunks), 4 microbatches, 18 time "
            "units; bubble 1/9\n"
            "# stage 0 | F0.0  F1.0  F0.2  F1.2  F2.0  B0.2  F3.0  B1.2  F2.2  B0.0  F3.2  B1.0  "
            ".     B2.2  .     B3.2  B2.0  B3.0 \n"
            "# stage 1 | .     F0.1  F1.1  F0.3  B0.3  F1.3  B1.3  F2.1  B0.1  F3.1  B1.1  F2.3  "
            "B2.3  F3.3  B3.3  B2.1  B3.1  .    \n");
  free(text);
  /* every shape runs without a deadlock in 2 V M + 2 (P - 1) steps: the bubble is
   * (P - 1) / (V M + P - 1); 1F1B's live microbatches are min(P - s, M), GPipe's M */
  for (int32_t P = 2; P <= 4; P++)
    for (int32_t V = 1; V <= 3; V++)
      for (int64_t M = P; M <= 4 * P; M += P) {
        p = (PassPipeline){.stages = P,
                           .schedule = PASS_SCHEDULE_INTERLEAVED,
                           .virtual_stages = V,
                           .microbatches = M};
        int64_t steps = pass_pipeline_run(&p, NULL);
        CHECK_MSG(steps == 2 * V * M + 2 * (P - 1),
                  "interleaved P=%d V=%d M=%lld: %lld steps, expected %lld", P, V, (long long)M,
                  (long long)steps, (long long)(2 * V * M + 2 * (P - 1)));
        for (int32_t s = 0; s < P; s++) {
          p.schedule = PASS_SCHEDULE_1F1B;
          CU_ASSERT_EQUAL(pass_pipeline_live(&p, s), M < P - s ? M : P - s);
          p.schedule = PASS_SCHEDULE_GPIPE;
          CU_ASSERT_EQUAL(pass_pipeline_live(&p, s), M);
          p.schedule = PASS_SCHEDULE_INTERLEAVED;
        }
      }
}

/* The message of a config that does not lower. */
static char *lower_error(const char *model, const char *target, const char **sets, int nsets) {
  DrvJob j;
  char *msg = NULL;
  size_t len = 0;
  if (test_lower(&j, model, target, sets, nsets, "pipeline", true) == 0) {
    drv_free(&j);
    return strdup("(lowered)");
  }
  FILE *f = open_memstream(&msg, &len);
  fe_diag_print(&j.diag, f);
  fclose(f);
  drv_free(&j);
  return msg;
}

static void expect_error(const char *model, const char **sets, int nsets, const char *a,
                         const char *b) {
  char *msg = lower_error(model, "cpu-2", sets, nsets);
  CHECK_MSG(strstr(msg, a) && strstr(msg, b), "expected \"%s\" and \"%s\" in: %s", a, b, msg);
  free(msg);
}

static void test_errors(void) {
  const char *few[] = {SMALL, "/learner/microbatches=1", PIPE(2, 1, 1)};
  expect_error("tiny-lm.json", few, 4, "/learner/microbatches",
               "pipeline = 2 stages need at least 2 microbatches to feed them (got 1)");
  const char *odd[] = {SMALL, "/learner/microbatches=4", "/model/decoder/num_layers=3",
                       PIPE(2, 1, 1)};
  expect_error("tiny-lm.json", odd, 5, "/mesh/shape",
               "pipeline = 2 stages do not divide /model/decoder/num_layers = 3");
  const char *cuts[] = {SMALL, "/learner/microbatches=4", "/mesh/pipeline_cuts=[1,2]",
                        PIPE(2, 1, 1)};
  expect_error("fuji-test.json", cuts, 5, "/mesh/pipeline_cuts",
               "2 cut points for pipeline = 2 stages (expected 1)");
  const char *range[] = {SMALL, "/learner/microbatches=4", "/mesh/pipeline_cuts=[4]",
                         PIPE(2, 1, 1)};
  expect_error("fuji-test.json", range, 5, "/mesh/pipeline_cuts",
               "cut point 4: expected increasing layer indices in 1..3");
  const char *sched[] = {SMALL, "/learner/microbatches=4", "/mesh/pipeline_schedule=zigzag",
                         PIPE(2, 1, 1)};
  expect_error("tiny-lm.json", sched, 5, "/mesh/pipeline_schedule", "zigzag");
  /* interleaved: P x V chunks of at least one layer, M a multiple of P */
  const char *few_layers[] = {SMALL, "/learner/microbatches=4", INTERLEAVED,
                              "/mesh/pipeline_virtual=3", PIPE(2, 1, 1)};
  expect_error("fuji-test.json", few_layers, 7, "/mesh/pipeline_virtual",
               "pipeline = 2 stages x pipeline_virtual = 3 = 6 chunks need a decoder of at least "
               "6 layers (/model/decoder/num_layers is 4)");
  const char *chunks[] = {SMALL, "/learner/microbatches=4", "/model/decoder/num_layers=6",
                          INTERLEAVED, PIPE(2, 1, 1)};
  expect_error("fuji-test.json", chunks, 7, "/mesh/pipeline_virtual",
               "pipeline = 2 stages x pipeline_virtual = 2 = 4 chunks do not divide "
               "/model/decoder/num_layers = 6 (expected a multiple of 4, or /mesh/pipeline_cuts)");
  const char *ncuts[] = {SMALL, "/learner/microbatches=4", "/mesh/pipeline_cuts=[2]", INTERLEAVED,
                         PIPE(2, 1, 1)};
  expect_error("fuji-test.json", ncuts, 7, "/mesh/pipeline_cuts",
               "1 cut points for pipeline = 2 stages x pipeline_virtual = 2 = 4 chunks "
               "(expected 3)");
  const char *odd_m[] = {SMALL, "/input/global_batch_size=6", "/learner/microbatches=3",
                         INTERLEAVED, PIPE(2, 1, 1)};
  expect_error("fuji-test.json", odd_m, 7, "/learner/microbatches",
               "the interleaved schedule runs microbatches in groups of pipeline = 2: 3 "
               "microbatches are not a multiple of 2");
  const char *zero_v[] = {SMALL, "/learner/microbatches=4", INTERLEAVED, "/mesh/pipeline_virtual=0",
                          PIPE(2, 1, 1)};
  expect_error("fuji-test.json", zero_v, 7, "/mesh/pipeline_virtual",
               "value 0 is out of range (expected 1 to 64)");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {{"schedule", test_schedule},
                                   {"errors", test_errors},
                                   {"tiny_lm_gpipe", test_tiny_lm_gpipe},
                                   {"tiny_lm_1f1b", test_tiny_lm_1f1b},
                                   {"llama_style", test_llama_style},
                                   {"with_mesh", test_with_mesh},
                                   {"remat", test_remat},
                                   {"schedule_interleaved", test_schedule_interleaved},
                                   {"interleaved_m4", test_interleaved},
                                   {"interleaved_layouts", test_interleaved_more},
                                   {NULL, NULL}};
  return test_main(argc, argv, "pipeline", cases);
}
