/*
 * test_microbatch.c: microbatches (gradient accumulation) through the whole pipeline.
 *
 * - Same training: tiny-lm lowered with /learner/microbatches 1, 2 and 4 trains 3 steps in the
 *   reference interpreter (rounding to f32, as the backends do) from the same parameters on the
 *   same batch: the losses within 1e-5 relative, every new parameter and moment within 1e-5.
 *   The same on a mesh (data=2 and fsdp=2, 2 microbatches): the per-device programs against the
 *   unmicrobatched global step.
 * - Collectives: with data parallelism the microbatch gradients are summed as partial sums and
 *   reduced once (as many all_reduce as without microbatches, but for the position table's,
 *   reduced before its pad); under fsdp each microbatch's
 *   gradient is reduce-scattered (twice the reduce_scatter), so the running sum is a chunk,
 *   and each microbatch gathers the weights again (twice the all_gather), so no gathered
 *   weight lives from the first microbatch to the last.
 * - Memory: memcheck's saved activations at the peak fall by about N (tiny-lm with 6 layers),
 *   because the copies run one after the other and each frees its activations.
 * - Memory flat in N: fuji-test in microbatches of 8 sequences, 2, 4 and 8 of them (one device,
 *   fsdp=2, data=2, model=2, fsdp=2 with full remat): what is live at the peak beyond the fixed
 *   region grows by no more than the batch (the inputs reshaped to (b, N, T) once, held to the
 *   last microbatch's slice) and 1 KiB. Each microbatch's gradient dies into the running sum;
 *   when the fusion plan inlined the chain of sums into the final division, every summand (a
 *   device's chunk of the whole gradient under fsdp) stayed alive to the step's end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "passes/passes.h"
#include "tests/cunit_check.h"
#include "tests/driver/lower.h"

#define SMALL "/input/seq_len=8", "/input/global_batch_size=8"
#define STEPS 3

/* sets + "/learner/microbatches=n" */
static int lower_n(DrvJob *j, const char *target, const char **sets, int nsets, int n,
                   const char *after) {
  const char *all[16];
  char mb[64];
  for (int i = 0; i < nsets; i++) all[i] = sets[i];
  snprintf(mb, sizeof mb, "/learner/microbatches=%d", n);
  all[nsets] = mb;
  return test_lower(j, "tiny-lm.json", target, all, nsets + 1, after, false);
}

/* The global values of every parameter ("new:X" outputs, X the parameter) after each step. */
typedef struct Run {
  double loss[STEPS];
  int32_t n;
  char *name[64];
  double *data[64];
  int64_t numel[64];
} Run;

static void run_free(Run *r) {
  for (int32_t i = 0; i < r->n; i++) free(r->name[i]), free(r->data[i]);
}

/* Binds the global value d (shape gs) of leaf `name` on every device of it (its chunk). */
static void bind_global(IrInterp *it, const IrGraph *g, const IrValue *x, const IrShape *gs,
                        double *d) {
  if (!g->mesh.naxes) {
    CU_ASSERT_EQUAL(ir_interp_set(it, -1, x->name, gs->rank, gs->dims, d), IR_OK);
    return;
  }
  int64_t n = ir_shape_numel(&x->shape);
  double *l = malloc((size_t)(n ? n : 1) * sizeof *l);
  for (int64_t dev = 0; dev < ir_mesh_devices(&g->mesh); dev++) {
    ir_split_copy(&g->mesh, &x->split, gs, dev, d, l, false);
    CU_ASSERT_EQUAL(ir_interp_set(it, dev, x->name, x->shape.rank, x->shape.dims, l), IR_OK);
  }
  free(l);
}

static IrShape global_shape(const IrGraph *g, const IrValue *x) {
  IrShape s = x->shape;
  for (int32_t d = 0; d < s.rank; d++) s.dims[d] *= ir_split_count(&g->mesh, &x->split, d);
  return s;
}

/* Trains STEPS steps of g (a step program, global or per device) from test_leaf_values; the
 * batch is the same every step. Gathers the new parameters and moments after the last one. */
static int train(const IrGraph *g, int64_t vocab, Run *r) {
  memset(r, 0, sizeof *r);
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set_keep_all(it, false); /* only the outputs are read */
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER && x->op != IR_INPUT) continue;
    IrShape gs = global_shape(g, x);
    double *d = test_leaf_values(x, &gs, vocab, 5);
    bind_global(it, g, x, &gs, d);
    free(d);
  }
  int rc = 0;
  for (int s = 0; s < STEPS && rc == 0; s++) {
    double step = s + 1;
    CU_ASSERT_EQUAL(ir_interp_set(it, -1, "step", 0, NULL, &step), IR_OK);
    if (ir_interp_run(it) != IR_OK) {
      CHECK_MSG(0, "interpreter: %s", ir_interp_error(it));
      rc = -1;
      break;
    }
    r->loss[s] = ir_interp_output(it, 0, "loss", NULL)[0];
    for (int32_t k = 0; k < g->noutputs; k++) { /* new:X -> X, on each device its chunk */
      const char *name = g->outputs[k].name;
      if (strncmp(name, "new:", 4)) continue;
      const IrValue *y = &g->values[g->outputs[k].value];
      IrShape gs = global_shape(g, y);
      int64_t n = ir_shape_numel(&gs);
      double *whole = calloc((size_t)n, sizeof *whole);
      for (int64_t dev = 0; dev < (g->mesh.naxes ? ir_mesh_devices(&g->mesh) : 1); dev++) {
        const double *got = ir_interp_output(it, dev, name, NULL);
        if (g->mesh.naxes)
          ir_split_copy(&g->mesh, &y->split, &gs, dev, whole, (double *)got, true);
        else
          memcpy(whole, got, (size_t)n * sizeof *whole);
      }
      int32_t leaf = ir_graph_find(g, IR_PARAMETER, name + 4);
      bind_global(it, g, &g->values[leaf], &gs, whole);
      if (s + 1 == STEPS && r->n < 64) {
        r->name[r->n] = strdup(name);
        r->numel[r->n] = n;
        r->data[r->n++] = whole;
      } else {
        free(whole);
      }
    }
  }
  ir_interp_free(it);
  return rc;
}

/* b's losses and parameters against a's (the reference). */
static void compare(const char *label, const Run *a, const Run *b) {
  for (int s = 0; s < STEPS; s++)
    CHECK_MSG(fabs(b->loss[s] - a->loss[s]) <= 1e-5 * fabs(a->loss[s]),
              "%s: step %d loss %.9g, expected %.9g", label, s + 1, b->loss[s], a->loss[s]);
  CHECK_MSG(a->n == b->n && a->n > 0, "%s: %d new values, expected %d", label, b->n, a->n);
  for (int32_t i = 0; i < a->n && i < b->n; i++) {
    CHECK_MSG(!strcmp(a->name[i], b->name[i]), "%s: output %s, expected %s", label, b->name[i],
              a->name[i]);
    int64_t bad = -1;
    for (int64_t e = 0; e < a->numel[i] && bad < 0; e++)
      if (fabs(b->data[i][e] - a->data[i][e]) > 1e-5 * fmax(fabs(a->data[i][e]), 1e-3)) bad = e;
    CHECK_MSG(bad < 0, "%s: %s[%lld] = %.9g, expected %.9g", label, a->name[i], (long long)bad,
              bad < 0 ? 0 : b->data[i][bad], bad < 0 ? 0 : a->data[i][bad]);
  }
  if (getenv("AXLC_TEST_VERBOSE"))
    fprintf(stderr, "%s: losses %.9g %.9g %.9g\n", label, b->loss[0], b->loss[1], b->loss[2]);
}

static void test_same_training(void) {
  const char *sets[] = {SMALL};
  DrvJob j1;
  Run ref;
  if (lower_n(&j1, "cpu", sets, 2, 1, NULL) || train(j1.graph, 256, &ref)) {
    CU_FAIL("tiny-lm did not lower or run");
    drv_free(&j1);
    return;
  }
  for (int n = 2; n <= 4; n *= 2) {
    DrvJob j;
    Run got;
    char label[64];
    snprintf(label, sizeof label, "tiny-lm, %d microbatches", n);
    if (lower_n(&j, "cpu", sets, 2, n, NULL) || train(j.graph, 256, &got)) {
      CHECK_MSG(0, "%s: did not lower or run", label);
    } else {
      compare(label, &ref, &got);
      run_free(&got);
    }
    drv_free(&j);
  }
  /* per-device programs: the batch split over 2 devices, 2 microbatches each */
  const char *data[] = {SMALL, "/mesh/shape=[1,2,1,1,1,1]"};
  const char *fsdp[] = {SMALL, "/mesh/shape=[1,1,1,2,1,1]"};
  const char **meshes[] = {data, fsdp};
  for (int m = 0; m < 2; m++) {
    DrvJob j;
    Run got;
    char label[64];
    snprintf(label, sizeof label, "tiny-lm, %s=2, 2 microbatches", m ? "fsdp" : "data");
    if (lower_n(&j, "cpu-2", meshes[m], 3, 2, NULL) || train(j.graph, 256, &got)) {
      CHECK_MSG(0, "%s: did not lower or run", label);
    } else {
      CHECK_MSG(ir_mesh_devices(&j.graph->mesh) == 2, "%s: not sharded", label);
      compare(label, &ref, &got);
      run_free(&got);
    }
    drv_free(&j);
  }
  run_free(&ref);
  drv_free(&j1);
}

/* The all_reduce of g but the position table's: its gradient is padded from the sequence to
 * max_len rows, and pass_shard reduces a partial sum before a pad, in each microbatch. */
static int all_reduces(const IrGraph *g) {
  int n = 0;
  for (int32_t v = 0; v < g->nvalues; v++)
    n += g->values[v].op == IR_ALL_REDUCE && strcmp(g->values[v].origin, "/model/pos_emb") != 0;
  return n;
}

static void test_collectives(void) {
  const char *data[] = {SMALL, "/mesh/shape=[1,2,1,1,1,1]"};
  const char *fsdp[] = {SMALL, "/mesh/shape=[1,1,1,2,1,1]"};
  DrvJob a, b, c, d;
  if (lower_n(&a, "cpu-2", data, 3, 1, "shard") || lower_n(&b, "cpu-2", data, 3, 2, "shard") ||
      lower_n(&c, "cpu-2", fsdp, 3, 1, "shard") || lower_n(&d, "cpu-2", fsdp, 3, 2, "shard")) {
    CU_FAIL("tiny-lm did not lower");
  } else {
    int ar1 = all_reduces(a.graph), ar2 = all_reduces(b.graph);
    CHECK_MSG(ar1 == ar2 && ar1 > 0, "data=2: %d all_reduce with 2 microbatches, %d without", ar2,
              ar1);
    /* each microbatch gathers its fsdp weights itself: none is kept across microbatches */
    int ag1 = test_count_op(c.graph, IR_ALL_GATHER), ag2 = test_count_op(d.graph, IR_ALL_GATHER);
    CHECK_MSG(ag2 == 2 * ag1 && ag1 > 0, "fsdp=2: %d all_gather with 2 microbatches, %d without",
              ag2, ag1);
    int rs1 = test_count_op(c.graph, IR_REDUCE_SCATTER);
    int rs2 = test_count_op(d.graph, IR_REDUCE_SCATTER);
    CHECK_MSG(rs2 == 2 * rs1 && rs1 > 0,
              "fsdp=2: %d reduce_scatter with 2 microbatches, %d without", rs2, rs1);
    /* nothing moves the batch: each device's microbatch is its own rows */
    CHECK_MSG(test_count_op(b.graph, IR_ALL_GATHER) == 0 &&
                  test_count_op(b.graph, IR_ALL_TO_ALL) == 0,
              "data=2: the batch moved");
  }
  drv_free(&a), drv_free(&b), drv_free(&c), drv_free(&d);
}

/* memcheck's saved activations at the peak (and the peak) with n microbatches. */
static int memcheck(int n, DrvMemReport *r) {
  const char *sets[] = {"/input/seq_len=32", "/input/global_batch_size=8",
                        "/model/decoder/num_layers=6"};
  DrvJob j;
  int rc = lower_n(&j, "cpu", sets, 3, n, NULL) || drv_memcheck(&j, r);
  drv_free(&j);
  return rc;
}

static void test_memory(void) {
  DrvMemReport r1, r2, r4;
  if (memcheck(1, &r1) || memcheck(2, &r2) || memcheck(4, &r4)) {
    CU_FAIL("memcheck failed");
    return;
  }
  double f2 = (double)r1.saved / (double)r2.saved, f4 = (double)r1.saved / (double)r4.saved;
  printf("\n  tiny-lm (6 layers, batch 8, seq 32): saved activations at the peak %lld, %lld, %lld "
         "bytes with 1, 2, 4 microbatches (%.2fx, %.2fx less); peak %lld, %lld, %lld\n",
         (long long)r1.saved, (long long)r2.saved, (long long)r4.saved, f2, f4, (long long)r1.peak,
         (long long)r2.peak, (long long)r4.peak);
  CHECK_MSG(f2 > 1.8 && f2 < 2.2, "2 microbatches: saved activations %.2fx less", f2);
  CHECK_MSG(f4 > 3.5 && f4 < 4.5, "4 microbatches: saved activations %.2fx less", f4);
  CHECK_MSG(r4.peak < r2.peak && r2.peak < r1.peak, "peaks %lld %lld %lld", (long long)r1.peak,
            (long long)r2.peak, (long long)r4.peak);
  drv_memreport_free(&r1), drv_memreport_free(&r2), drv_memreport_free(&r4);
}

/* fuji-test on `target` in n microbatches of 8 sequences, the plan of memcheck. */
static int memcheck_fuji(const char *target, const char *mesh, const char *more, int n,
                         DrvMemReport *r) {
  char batch[64], mb[64];
  snprintf(batch, sizeof batch, "/input/global_batch_size=%d", 8 * n);
  snprintf(mb, sizeof mb, "/learner/microbatches=%d", n);
  const char *sets[4] = {batch, mb, mesh, more};
  DrvJob j;
  int rc = test_lower(&j, "fuji-test.json", target, sets, more ? 4 : 3, NULL, false) ||
           drv_memcheck(&j, r);
  drv_free(&j);
  return rc;
}

static void test_memory_flat(void) {
  static const struct {
    const char *name, *target, *mesh, *more;
  } layouts[] = {
      {"one device", "cpu", "/mesh/shape=[1,1,1,1,1,1]", NULL},
      {"fsdp=2", "cpu-2", "/mesh/shape=[1,1,1,2,1,1]", NULL},
      {"data=2", "cpu-2", "/mesh/shape=[1,2,1,1,1,1]", NULL},
      {"model=2", "cpu-2", "/mesh/shape=[1,1,1,1,1,2]", NULL},
      {"fsdp=2, full remat", "cpu-2", "/mesh/shape=[1,1,1,2,1,1]",
       "/model/decoder/remat_policy=\"full\""},
  };
  for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
    DrvMemReport r[3];
    int ns[3] = {2, 4, 8}, ok = 0;
    for (; ok < 3; ok++)
      if (memcheck_fuji(layouts[l].target, layouts[l].mesh, layouts[l].more, ns[ok], &r[ok])) break;
    if (ok < 3) {
      CHECK_MSG(false, "%s: memcheck of fuji-test in %d microbatches failed", layouts[l].name,
                ns[ok]);
    } else {
      printf("\n  fuji-test %s, microbatches of 8 sequences:", layouts[l].name);
      for (int i = 0; i < 3; i++)
        printf(" %d: live %lld (comm %lld, grads %lld), batch %lld;", ns[i],
               (long long)r[i].temp_peak, (long long)r[i].comm, (long long)r[i].grads,
               (long long)r[i].inputs);
      for (int i = 1; i < 3; i++) {
        /* the gradients at the peak are the running sums (and the microbatch's own), whatever N */
        CHECK_MSG(r[i].grads <= r[0].grads + 1024,
                  "%s: gradients at the peak %lld bytes with %d microbatches, %lld with 2",
                  layouts[l].name, (long long)r[i].grads, ns[i], (long long)r[0].grads);
        int64_t grew = r[i].temp_peak - r[0].temp_peak, allowed = r[i].inputs + 1024;
        CHECK_MSG(grew <= allowed,
                  "%s: %d microbatches keep %lld bytes more live at the peak than 2 (at most the "
                  "batch, %lld, and 1 KiB): communication %lld and gradients %lld, against %lld "
                  "and %lld",
                  layouts[l].name, ns[i], (long long)grew, (long long)r[i].inputs,
                  (long long)r[i].comm, (long long)r[i].grads, (long long)r[0].comm,
                  (long long)r[0].grads);
      }
    }
    for (int i = 0; i < ok; i++) drv_memreport_free(&r[i]);
  }
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {{"same_training", test_same_training},
                                   {"collectives", test_collectives},
                                   {"memory", test_memory},
                                   {"memory_flat", test_memory_flat},
                                   {NULL, NULL}};
  return test_main(argc, argv, "microbatch", cases);
}
