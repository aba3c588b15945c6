/*
 * test_shard.c: the shard pass against the unsharded step, in the reference interpreter.
 *
 * For each model and mesh layout, the same config is lowered twice: to the global step (after
 * simplify) and to the per-device program (after shard). The global step runs on one device;
 * the per-device program runs on the simulated mesh, each device bound to its chunk of the same
 * parameters, moments and batch. Every output must agree: the loss, gradient norm and learning
 * rate on every device, and every device's chunk of every new parameter and moment. The
 * interpreter computes in double without rounding, so the only differences are the order of
 * sums (1e-9 relative is plenty).
 *
 * The test also checks the collectives each layout must (and must not) use, and that the
 * per-device parameter bytes agree with `axlc params` (fe's per-device numbers).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "passes/passes.h"
#include "runtime/axrt.h"
#include "tests/cunit_check.h"
#include "tests/driver/lower.h"

static int lower(DrvJob *j, const char *model, const char *target, const char **sets, int nsets,
                 const char *after) {
  return test_lower(j, model, target, sets, nsets, after, false);
}

static double *leaf_values(const IrValue *v, const IrShape *s, int64_t vocab) {
  return test_leaf_values(v, s, vocab, 7);
}

typedef struct Expect { /* what a layout's per-device program must hold */
  int devices;
  int min_all_reduce, min_all_gather, min_reduce_scatter, min_all_to_all;
  bool no_gather; /* pure data parallelism gathers nothing; expert parallelism moves tokens */
} Expect;

/* Lowers `model` for `target` (+ sets) both ways and compares every output. */
static void check_layout(const char *model, const char *target, const char **sets, int nsets,
                         Expect ex) {
  DrvJob G, S;
  char label[512];
  snprintf(label, sizeof label, "%s %s %s", model, target, nsets ? sets[nsets - 1] : "");
  if (lower(&G, model, target, sets, nsets, "simplify") ||
      lower(&S, model, target, sets, nsets, "shard")) {
    CHECK_MSG(0, "%s: did not lower", label);
    drv_free(&G);
    drv_free(&S);
    return;
  }
  const IrGraph *g = G.graph, *s = S.graph;
  int64_t ndev = ir_mesh_devices(&s->mesh);
  CHECK_MSG(ndev == ex.devices, "%s: %lld devices, expected %d", label, (long long)ndev,
            ex.devices);
  CHECK_MSG(test_count_op(s, IR_ALL_REDUCE) >= ex.min_all_reduce, "%s: %d all_reduce", label,
            test_count_op(s, IR_ALL_REDUCE));
  CHECK_MSG(test_count_op(s, IR_ALL_GATHER) >= ex.min_all_gather, "%s: %d all_gather", label,
            test_count_op(s, IR_ALL_GATHER));
  CHECK_MSG(test_count_op(s, IR_REDUCE_SCATTER) >= ex.min_reduce_scatter, "%s: %d reduce_scatter",
            label, test_count_op(s, IR_REDUCE_SCATTER));
  CHECK_MSG(test_count_op(s, IR_ALL_TO_ALL) >= ex.min_all_to_all, "%s: %d all_to_all", label,
            test_count_op(s, IR_ALL_TO_ALL));
  if (ex.no_gather)
    CHECK_MSG(test_count_op(s, IR_ALL_GATHER) == 0 && test_count_op(s, IR_REDUCE_SCATTER) == 0,
              "%s: parameters moved (%d all_gather, %d reduce_scatter)", label,
              test_count_op(s, IR_ALL_GATHER), test_count_op(s, IR_REDUCE_SCATTER));
  int64_t vocab = fe_get_int(fe_get_child(G.cfg, "model"), "vocab_size");

  IrInterp *gi = ir_interp_new(g, NULL), *si = ir_interp_new(s, NULL);
  ir_interp_set_rounding(gi, false);
  ir_interp_set_rounding(si, false);
  /* every leaf: the whole value to the global step, each device's chunk to the sharded one */
  int64_t local_param_bytes = 0;
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER && x->op != IR_INPUT) continue;
    double *d = leaf_values(x, &x->shape, vocab);
    CU_ASSERT_EQUAL(ir_interp_set(gi, 0, x->name, x->shape.rank, x->shape.dims, d), IR_OK);
    int32_t sv = ir_graph_find(s, x->op, x->name);
    CHECK_MSG(sv != IR_NONE, "%s: leaf %s missing after shard", label, x->name);
    if (sv != IR_NONE) {
      const IrValue *y = &s->values[sv];
      int64_t n = ir_shape_numel(&y->shape);
      if (x->op == IR_PARAMETER && strncmp(x->name, "opt/", 4)) local_param_bytes += 4 * n;
      double *l = malloc((size_t)(n ? n : 1) * sizeof *l);
      for (int64_t dev = 0; dev < ndev; dev++) {
        ir_split_copy(&s->mesh, &y->split, &x->shape, dev, d, l, false);
        CU_ASSERT_EQUAL(ir_interp_set(si, dev, y->name, y->shape.rank, y->shape.dims, l), IR_OK);
      }
      free(l);
    }
    free(d);
  }
  /* per-device parameter bytes agree with the frontend's table (axlc params) */
  int64_t fe_bytes = 0;
  for (int i = 0; i < G.build.nparams; i++) {
    const FeParam *p = &G.build.params[i];
    int64_t n = 1;
    for (int d = 0; d < p->rank; d++) n *= p->shape[d] / fe_spec_split(&G.build.mesh, p->spec[d]);
    fe_bytes += 4 * n;
  }
  CHECK_MSG(fe_bytes == local_param_bytes,
            "%s: per-device parameter bytes %lld, axlc params says %lld", label,
            (long long)local_param_bytes, (long long)fe_bytes);
  if (ir_interp_run(gi) || ir_interp_run(si)) {
    CHECK_MSG(0, "%s: run: %s %s", label, ir_interp_error(gi), ir_interp_error(si));
  } else {
    double worst = 0;
    for (int32_t k = 0; k < g->noutputs; k++) {
      const char *name = g->outputs[k].name;
      IrShape gs;
      const double *want = ir_interp_output(gi, 0, name, &gs);
      int32_t sv = ir_graph_output(s, name);
      CHECK_MSG(sv != IR_NONE, "%s: output %s missing after shard", label, name);
      if (sv == IR_NONE) continue;
      const IrValue *y = &s->values[sv];
      int64_t n = ir_shape_numel(&y->shape);
      double *chunk = malloc((size_t)(n ? n : 1) * sizeof *chunk);
      for (int64_t dev = 0; dev < ndev; dev++) {
        const double *got = ir_interp_output(si, dev, name, NULL);
        ir_split_copy(&s->mesh, &y->split, &gs, dev, (double *)want, chunk, false);
        for (int64_t e = 0; e < n; e++) {
          double err = fabs(got[e] - chunk[e]) / fmax(1e-6, fabs(chunk[e]));
          if (err > worst) worst = err;
          if (err > 1e-9) {
            CHECK_MSG(0, "%s: %s[%lld] on device %lld: %.12g, unsharded %.12g", label, name,
                      (long long)e, (long long)dev, got[e], chunk[e]);
            e = n, dev = ndev; /* one message per output */
          }
        }
      }
      free(chunk);
    }
    if (getenv("AXLC_TEST_VERBOSE"))
      fprintf(stderr, "%s: worst relative difference %.3g\n", label, worst);
  }
  ir_interp_free(gi);
  ir_interp_free(si);
  drv_free(&G);
  drv_free(&S);
}

/* Small enough that the interpreter runs 8 devices in a second. */
#define SMALL            "/input/seq_len=16", "/input/global_batch_size=8"
#define MESH(d, e, f, m) "/mesh/shape=[1," #d "," #e "," #f ",1," #m "]"
#define SEQ(d, s, m)     "/mesh/shape=[1," #d ",1,1," #s "," #m "]"
#define SP               "/mesh/sequence_parallel=true"
#define BAL              "/mesh/seq_order=balanced"

static void test_tiny_lm(void) {
  const char *data[] = {SMALL, MESH(4, 1, 1, 1)};
  check_layout("tiny-lm.json", "cpu-4", data, 3, (Expect){4, 10, 0, 0, 0, true});
  const char *fsdp[] = {SMALL, MESH(1, 1, 4, 1)};
  check_layout("tiny-lm.json", "cpu-4", fsdp, 3, (Expect){4, 1, 8, 8, 0, false});
  const char *model[] = {SMALL, MESH(1, 1, 1, 2)};
  check_layout("tiny-lm.json", "cpu-2", model, 3, (Expect){2, 4, 0, 0, 0, false});
  const char *dm[] = {SMALL, MESH(2, 1, 1, 2)};
  check_layout("tiny-lm.json", "cpu-4", dm, 3, (Expect){4, 10, 0, 0, 0, false});
  const char *dfm[] = {SMALL, MESH(2, 1, 2, 2)};
  check_layout("tiny-lm.json", "cpu-8", dfm, 3, (Expect){8, 10, 8, 8, 0, false});
  /* attention as separate products and softmax instead of the fused op */
  const char *ref[] = {SMALL, MESH(2, 1, 1, 2),
                       "/model/decoder/layer/self_attention/kernel=reference"};
  check_layout("tiny-lm.json", "cpu-4", ref, 4, (Expect){4, 10, 0, 0, 0, false});
}

/* microbatches: each device's slices of its own rows, no batch moved; under fsdp a
 * reduce_scatter per microbatch */
static void test_microbatch(void) {
  const char *dmb[] = {SMALL, MESH(2, 1, 1, 1), "/learner/microbatches=2"};
  check_layout("tiny-lm.json", "cpu-2", dmb, 4, (Expect){2, 10, 0, 0, 0, true});
  const char *fmb[] = {SMALL, MESH(1, 1, 2, 1), "/learner/microbatches=2"};
  check_layout("tiny-lm.json", "cpu-2", fmb, 4, (Expect){2, 1, 8, 16, 0, false});
  const char *dfmb[] = {SMALL, MESH(2, 1, 2, 1), "/learner/microbatches=2"};
  check_layout("tiny-lm.json", "cpu-4", dfmb, 4, (Expect){4, 10, 8, 16, 0, false});
}

static void test_llama_style(void) { /* RoPE, GQA, SwiGLU, RMSNorm */
  const char *data[] = {SMALL, MESH(4, 1, 1, 1)};
  check_layout("fuji-test.json", "cpu-4", data, 3, (Expect){4, 10, 0, 0, 0, true});
  const char *fsdp[] = {SMALL, MESH(1, 1, 4, 1)};
  check_layout("fuji-test.json", "cpu-4", fsdp, 3, (Expect){4, 1, 8, 8, 0, false});
  const char *model[] = {SMALL, MESH(1, 1, 1, 2)};
  check_layout("fuji-test.json", "cpu-2", model, 3, (Expect){2, 4, 0, 0, 0, false});
  const char *dm[] = {SMALL, MESH(2, 1, 1, 2)};
  check_layout("fuji-test.json", "cpu-4", dm, 3, (Expect){4, 10, 0, 0, 0, false});
}

/* bf16 compute: casts, f32 islands and f32 gradient accumulators through the shard pass */
static void test_bf16(void) {
  const char *dm[] = {SMALL, MESH(2, 1, 1, 2), "/precision/compute=bf16"};
  check_layout("fuji-test.json", "cpu-4", dm, 4, (Expect){4, 10, 0, 0, 0, false});
  const char *fsdp[] = {SMALL, MESH(1, 1, 4, 1), "/precision/compute=bf16"};
  check_layout("fuji-test.json", "cpu-4", fsdp, 4, (Expect){4, 1, 8, 8, 0, false});
  const char *expert[] = {SMALL, MESH(1, 2, 1, 1), "/precision/compute=bf16"};
  check_layout("moe-test.json", "cpu-2", expert, 4, (Expect){2, 1, 0, 0, 8, true});
}

/* Vocabulary parallelism (the default embedding and head spec, (model, None)): the tables split
 * on their rows, the lookup masked and summed over model, the cross-entropy computed on each
 * device's vocabulary chunk. The equivalence in bf16 too, and the old split of the model dim by
 * spec. */
static void test_vocab(void) {
  const char *tm[] = {SMALL, MESH(1, 1, 1, 2), "/precision/compute=bf16"};
  check_layout("tiny-lm.json", "cpu-2", tm, 4, (Expect){2, 4, 0, 0, 0, false});
  const char *tdm[] = {SMALL, MESH(2, 1, 1, 2), "/precision/compute=bf16"};
  check_layout("tiny-lm.json", "cpu-4", tdm, 4, (Expect){4, 10, 0, 0, 0, false});
  const char *fm[] = {SMALL, MESH(1, 1, 1, 2), "/precision/compute=bf16"};
  check_layout("fuji-test.json", "cpu-2", fm, 4, (Expect){2, 4, 0, 0, 0, false});
  const char *dim[] = {SMALL, MESH(2, 1, 1, 2),
                       "/model/emb/param_partition_specs={\"weight\": [null, \"model\"]}"};
  check_layout("tiny-lm.json", "cpu-4", dim, 4, (Expect){4, 10, 0, 0, 0, false});
  check_layout("fuji-test.json", "cpu-4", dim, 4, (Expect){4, 10, 0, 0, 0, false});
}

/* No device holds a (B, T, V) value with the whole vocabulary (the logits, their exp, the
 * one-hot targets): a vocabulary of 96 that no other dim of the two models has. Each holds its
 * 48-wide chunk. */
static void test_vocab_chunks(void) {
  const char *models[] = {"tiny-lm.json", "fuji-test.json"};
  const char *meshes[] = {MESH(1, 1, 1, 2), MESH(2, 1, 1, 2)};
  const char *precisions[] = {"/precision/compute=f32", "/precision/compute=bf16"};
  for (int m = 0; m < 2; m++)
    for (int k = 0; k < 2; k++)
      for (int p = 0; p < 2; p++) {
        const char *sets[] = {SMALL, meshes[k], precisions[p], "/model/vocab_size=96"};
        DrvJob S;
        char label[512];
        snprintf(label, sizeof label, "%s %s %s", models[m], meshes[k], precisions[p]);
        if (lower(&S, models[m], k ? "cpu-4" : "cpu-2", sets, 5, "shard")) {
          CHECK_MSG(0, "%s: did not lower", label);
          drv_free(&S);
          continue;
        }
        int whole = 0, chunks = 0;
        for (int32_t v = 0; v < S.graph->nvalues; v++) {
          const IrShape *sh = &S.graph->values[v].shape;
          if (sh->rank < 3) continue;
          whole += sh->dims[sh->rank - 1] == 96;
          chunks += sh->dims[sh->rank - 1] == 48;
        }
        CHECK_MSG(whole == 0, "%s: %d per-device values hold the whole vocabulary", label, whole);
        CHECK_MSG(chunks > 5, "%s: only %d values hold a vocabulary chunk", label, chunks);
        drv_free(&S);
      }
}

static void test_moe(void) {
  const char *expert[] = {SMALL, MESH(1, 2, 1, 1)};
  check_layout("moe-test.json", "cpu-2", expert, 3, (Expect){2, 1, 0, 0, 8, true});
  const char *data[] = {SMALL, MESH(2, 1, 1, 1)};
  check_layout("moe-test.json", "cpu-2", data, 3, (Expect){2, 10, 0, 0, 0, true});
  const char *em[] = {SMALL, MESH(1, 2, 1, 2)};
  check_layout("moe-test.json", "cpu-4", em, 3, (Expect){4, 1, 0, 0, 8, false});
  /* no weight moves: the tokens go to their experts and back by all_to_all over expert, the
   * batch's minor axis (the tokens' gradient too) */
  const char *de[] = {SMALL, MESH(2, 2, 1, 1)};
  check_layout("moe-test.json", "cpu-4", de, 3, (Expect){4, 1, 0, 0, 8, true});
  const char *fsdp[] = {SMALL, MESH(1, 1, 2, 1)};
  check_layout("moe-test.json", "cpu-2", fsdp, 3, (Expect){2, 1, 4, 4, 0, false});
}

/* expert x fsdp: the expert buffers go to their experts by all_to_all over `expert` only; each
 * device keeps its data x fsdp rows (every all_gather gathers a parameter, never an activation),
 * and the expert weights are gathered over fsdp. moe-test, and tiny-lm and fuji-test with a MoE
 * feed-forward. */
#define MOE_FF                                                                                     \
  "/model/decoder/layer/feed_forward={\"kind\": \"moe\", \"num_experts\": 4, \"top_k\": 2, "       \
  "\"hidden_dim\": 32}"
static void check_expert_fsdp(const char *model, const char **sets, int nsets) {
  check_layout(model, "cpu-4", sets, nsets, (Expect){4, 1, 6, 6, 8, false});
  DrvJob S;
  if (lower(&S, model, "cpu-4", sets, nsets, "shard")) {
    CHECK_MSG(0, "%s: expert x fsdp did not lower", model);
    drv_free(&S);
    return;
  }
  for (int32_t v = 0; v < S.graph->nvalues; v++) {
    const IrValue *x = &S.graph->values[v];
    if (x->op != IR_ALL_GATHER) continue;
    const IrValue *o = &S.graph->values[x->ops[0]];
    while (o->op == IR_CAST) o = &S.graph->values[o->ops[0]];
    CHECK_MSG(o->op == IR_PARAMETER, "%s: %%%d gathers an activation (%s) over %s", model, v,
              ir_op_name(o->op), x->attr.mesh[0]);
  }
  drv_free(&S);
}

static void test_moe_fsdp(void) {
  const char *moe[] = {SMALL, MESH(1, 2, 2, 1)};
  check_expert_fsdp("moe-test.json", moe, 3);
  const char *dense[] = {SMALL, MESH(1, 2, 2, 1), MOE_FF};
  check_expert_fsdp("tiny-lm.json", dense, 4);
  check_expert_fsdp("fuji-test.json", dense, 4);
}

/* Runs the forward graph of moe-test (2 layers) with capacity_factor cf on one device; returns
 * the loss, and counts the assignments the first layer drops. Checks every (sequence, expert)
 * keeps min(assigned, C) tokens, first choices before second choices. */
static double moe_forward(const char *cf, int64_t *dropped) {
  DrvJob j;
  char set[64];
  snprintf(set, sizeof set, "/model/decoder/layer/feed_forward/capacity_factor=%s", cf);
  const char *sets[] = {SMALL, set};
  if (lower(&j, "moe-test.json", "cpu", sets, 3, "compose")) {
    CU_FAIL("moe-test did not lower");
    return NAN;
  }
  const IrGraph *g = j.graph;
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set_rounding(it, false);
  ir_interp_set_keep_all(it, true);
  for (int32_t v = 0; v < g->nvalues; v++)
    if (g->values[v].op == IR_PARAMETER || g->values[v].op == IR_INPUT) {
      double *d = leaf_values(&g->values[v], &g->values[v].shape, 256);
      ir_interp_set(it, 0, g->values[v].name, g->values[v].shape.rank, g->values[v].shape.dims, d);
      free(d);
    }
  CU_ASSERT_EQUAL_FATAL(ir_interp_run(it), IR_OK);
  double loss = ir_interp_output(it, 0, "loss", NULL)[0];
  *dropped = -1;
  int32_t disp = IR_NONE, topk = IR_NONE;
  for (int32_t v = 0; v < g->nvalues && disp == IR_NONE; v++) {
    if (g->values[v].op == IR_TOP_K_INDICES && topk == IR_NONE) topk = v;
    if (!strcmp(g->values[v].tag, "moe.dispatch")) disp = v;
  }
  if (disp != IR_NONE && topk != IR_NONE) {
    const IrShape *ds = &g->values[disp].shape, *ks = &g->values[topk].shape;
    int64_t B = ds->dims[0], T = ds->dims[1], E = ds->dims[2], C = ds->dims[3], K = ks->dims[2];
    const double *d = ir_interp_value(it, 0, disp), *idx = ir_interp_value(it, 0, topk);
    *dropped = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t e = 0; e < E; e++) {
        int64_t assigned = 0, kept = 0, first = 0, first_kept = 0;
        for (int64_t t = 0; t < T; t++) {
          for (int64_t k = 0; k < K; k++)
            if ((int64_t)idx[(b * T + t) * K + k] == e) assigned++, first += k == 0;
          double slots = 0;
          for (int64_t c = 0; c < C; c++) slots += d[((b * T + t) * E + e) * C + c];
          CU_ASSERT(slots == 0 || slots == 1);
          kept += (int64_t)slots;
          if (slots && (int64_t)idx[(b * T + t) * K] == e) first_kept++;
        }
        CHECK_MSG(kept == (assigned < C ? assigned : C),
                  "cf %s: sequence %lld expert %lld keeps %lld "
                  "of %lld (capacity %lld)",
                  cf, (long long)b, (long long)e, (long long)kept, (long long)assigned,
                  (long long)C);
        CHECK_MSG(first_kept == (first < C ? first : C), "cf %s: first choices not first", cf);
        *dropped += assigned - kept;
      }
  }
  ir_interp_free(it);
  drv_free(&j);
  return loss;
}

/* capacity_factor: 0 is the dense layer; a large one drops nothing and gives the same loss;
 * a small one drops what the capacity says. */
static void test_moe_capacity(void) {
  int64_t dropped;
  double dense = moe_forward("0", &dropped);
  CU_ASSERT_EQUAL(dropped, -1); /* no dispatch in the dense layer */
  double roomy = moe_forward("2.0", &dropped);
  CU_ASSERT_EQUAL(dropped, 0);
  CHECK_MSG(fabs(roomy - dense) <= 1e-12 * fabs(dense), "capacity 2: loss %.15g, dense %.15g",
            roomy, dense);
  double tight = moe_forward("0.5", &dropped);
  if (getenv("AXLC_TEST_VERBOSE"))
    fprintf(stderr, "capacity 0.5: %lld assignments dropped of %d, loss %.6f (dense %.6f)\n",
            (long long)dropped, 8 * 16 * 2, tight, dense);
  CHECK_MSG(dropped > 0, "capacity 0.5 dropped nothing");
  CHECK_MSG(tight != dense, "capacity 0.5: the same loss as the dense layer");
}

/* The layout of sequence parallelism on model=2: the row-parallel products (o_proj, linear2)
 * are reduce-scattered over the sequence (dim 1 of (B, T, D)), the layer inputs are split on
 * it, and no norm all-reduces or gathers anything, forward or backward (its statistics are over
 * a whole D on every device; the gradient entering its backward is reduce-scattered on T). */
static void check_sp_layout(const char *model) {
  const char *sets[] = {SMALL, SEQ(1, 1, 2), SP};
  DrvJob S;
  if (lower(&S, model, "cpu-2", sets, 4, "shard")) {
    CHECK_MSG(0, "%s: did not lower", model);
    drv_free(&S);
    return;
  }
  int scattered = 0, inputs = 0;
  for (int32_t v = 0; v < S.graph->nvalues; v++) {
    const IrValue *x = &S.graph->values[v];
    bool row = !strcmp(x->tag, "attention.o_proj") || !strcmp(x->tag, "feed_forward.linear2");
    if (x->op == IR_REDUCE_SCATTER && row) {
      scattered++;
      CHECK_MSG(x->attr.axis == 1, "%s: %%%d (%s) scattered over dim %lld", model, v, x->tag,
                (long long)x->attr.axis);
    }
    if (!strcmp(x->tag, "transformer_layer.input") && x->shape.rank == 3) {
      inputs++;
      CHECK_MSG(x->split.axes[1][0] && !x->split.axes[2][0], "%s: layer input %%%d not split on T",
                model, v);
    }
    CHECK_MSG((x->op != IR_ALL_REDUCE && x->op != IR_ALL_GATHER) || !strstr(x->origin, "norm"),
              "%s: %%%d (%s) in a norm (%s)", model, v, ir_op_name(x->op), x->origin);
  }
  CHECK_MSG(scattered >= 2 && inputs >= 2, "%s: %d row-parallel scatters, %d layer inputs", model,
            scattered, inputs);
  drv_free(&S);
}

/* Context parallelism (seq) and Megatron sequence parallelism (on model), alone and together,
 * for the three models; the attention both fused and as products; with microbatches; bf16. */
static void test_seq(void) {
  const char *models[] = {"tiny-lm.json", "fuji-test.json", "moe-test.json"};
  for (int m = 0; m < 3; m++) {
    const char *seq[] = {SMALL, SEQ(1, 2, 1)};
    check_layout(models[m], "cpu-2", seq, 3, (Expect){2, 2, 2, 2, 0, false});
    const char *sm[] = {SMALL, SEQ(1, 2, 2)};
    check_layout(models[m], "cpu-4", sm, 3, (Expect){4, 2, 2, 2, 0, false});
    const char *dsm[] = {SMALL, SEQ(2, 2, 2)};
    check_layout(models[m], "cpu-8", dsm, 3, (Expect){8, 2, 2, 2, 0, false});
    const char *spm[] = {SMALL, SEQ(1, 1, 2), SP};
    check_layout(models[m], "cpu-2", spm, 4, (Expect){2, 1, 2, 2, 0, false});
    const char *spsm[] = {SMALL, SEQ(1, 2, 2), SP};
    check_layout(models[m], "cpu-4", spsm, 4, (Expect){4, 1, 2, 2, 0, false});
  }
  check_sp_layout("fuji-test.json");
  check_sp_layout("tiny-lm.json");
  const char *ref[] = {SMALL, SEQ(1, 2, 1), "/model/decoder/layer/self_attention/kernel=reference"};
  check_layout("fuji-test.json", "cpu-2", ref, 4, (Expect){2, 2, 2, 2, 0, false});
  const char *mb[] = {SMALL, SEQ(2, 2, 1), "/learner/microbatches=2"};
  check_layout("fuji-test.json", "cpu-4", mb, 4, (Expect){4, 2, 2, 2, 0, false});
  const char *bf[] = {SMALL, SEQ(1, 2, 2), SP, "/precision/compute=bf16"};
  check_layout("fuji-test.json", "cpu-4", bf, 5, (Expect){4, 1, 2, 2, 0, false});
}

/* The balanced order of the seq axis (/mesh/seq_order): rank c holds chunks c and 2S - 1 - c of
 * 2S, through the inputs' slices, the positions (RoPE's, the learned table's, the attention's
 * query positions), the gathered K and V and their gradients' reduce_scatters. The three
 * models on seq=2 and seq=4, seq=2 x model=2 and data=2 x seq=2; fuji-test with the reference
 * attention (the causal mask from iotas) and with microbatches. */
static void test_seq_balanced(void) {
  const char *models[] = {"tiny-lm.json", "fuji-test.json", "moe-test.json"};
  for (int m = 0; m < 3; m++) {
    const char *s2[] = {SMALL, SEQ(1, 2, 1), BAL};
    check_layout(models[m], "cpu-2", s2, 4, (Expect){2, 2, 2, 2, 0, false});
    const char *s4[] = {SMALL, SEQ(1, 4, 1), BAL};
    check_layout(models[m], "cpu-4", s4, 4, (Expect){4, 2, 2, 2, 0, false});
    const char *sm[] = {SMALL, SEQ(1, 2, 2), BAL};
    check_layout(models[m], "cpu-4", sm, 4, (Expect){4, 2, 2, 2, 0, false});
    const char *ds[] = {SMALL, SEQ(2, 2, 1), BAL};
    check_layout(models[m], "cpu-4", ds, 4, (Expect){4, 2, 2, 2, 0, false});
  }
  const char *ref[] = {SMALL, SEQ(1, 4, 1), BAL,
                       "/model/decoder/layer/self_attention/kernel=reference"};
  check_layout("fuji-test.json", "cpu-4", ref, 5, (Expect){4, 2, 2, 2, 0, false});
  const char *mb[] = {SMALL, SEQ(2, 2, 1), BAL, "/learner/microbatches=2"};
  check_layout("fuji-test.json", "cpu-4", mb, 5, (Expect){4, 2, 2, 2, 0, false});
}

/* One device: the pass leaves the graph alone. */
static void test_one_device(void) {
  DrvJob a, b;
  const char *sets[] = {SMALL};
  CU_ASSERT_EQUAL_FATAL(lower(&a, "tiny-lm.json", "cpu", sets, 2, "simplify"), 0);
  CU_ASSERT_EQUAL_FATAL(lower(&b, "tiny-lm.json", "cpu", sets, 2, "shard"), 0);
  char *ta = ir_graph_to_string(a.graph), *tb = ir_graph_to_string(b.graph);
  CU_ASSERT_STRING_EQUAL(ta, tb);
  CU_ASSERT_EQUAL(b.graph->mesh.naxes, 0);
  free(ta);
  free(tb);
  drv_free(&a);
  drv_free(&b);
}

/* pipeline parallelism without the microbatches to fill its stages is refused with the config
 * path (docs/pipeline.md; test_pipeline.c runs the pipelines). */
static void test_unsupported_axes(void) {
  DrvJob j;
  const char *sets[] = {SMALL, MESH(1, 1, 1, 1), "/mesh/shape=[2,1,1,1,1,1]"};
  char path[1024];
  snprintf(path, sizeof path, "%s/tiny-lm.json", AXLC_MODELS);
  FeOptions opt = {.target = "cpu-2", .sets = sets, .nsets = 4};
  int rc = drv_load(&j, path, &opt); /* the frontend's check */
  if (rc == 0) rc = drv_lower(&j, "shard");
  CU_ASSERT_NOT_EQUAL(rc, 0);
  char *msg = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&msg, &len);
  fe_diag_print(&j.diag, f);
  fclose(f);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "/learner/microbatches"));
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "pipeline = 2 stages need at least 2 microbatches"));
  free(msg);
  drv_free(&j);
}

/* test_driver_shard [NAME...]: the named cases, or all of them. */
int main(int argc, char **argv) {
  static const TestCase cases[] = {{"one_device", test_one_device},
                                   {"unsupported_axes", test_unsupported_axes},
                                   {"tiny_lm", test_tiny_lm},
                                   {"llama_style", test_llama_style},
                                   {"moe", test_moe},
                                   {"bf16", test_bf16},
                                   {"vocab", test_vocab},
                                   {"vocab_chunks", test_vocab_chunks},
                                   {"microbatch", test_microbatch},
                                   {"seq", test_seq},
                                   {"seq_balanced", test_seq_balanced},
                                   {"moe_capacity", test_moe_capacity},
                                   {"moe_fsdp", test_moe_fsdp},
                                   {NULL, NULL}};
  return test_main(argc, argv, "shard", cases);
}
