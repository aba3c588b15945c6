/*
 * microbatch.c: gradient accumulation (pass_microbatch), as AXLearn's
 * GradientAccumulationModifier.
 *
 * Input: the graph after autodiff (and widen_grads), composed for one microbatch: inputs
 * "ids" and "targets" of (b, T), b = B / N for the global batch B and N microbatches, the
 * output "loss" and one "grad:P" per parameter. Output: the step over the whole batch:
 *
 *   - The inputs become (B, T), the bytes the data loader writes without microbatches.
 *     Microbatch k is the rows r with r mod N = k, whatever the mesh: reshape (B, T) ->
 *     (b, N, T), slice [:, k], reshape to (b, T). With the batch split over S devices (the
 *     "ids" leaf of opt->shard: the data, expert and fsdp axes), device d holds rows
 *     [d B/S, (d+1) B/S), a multiple of N rows from a multiple of N, so its rows of
 *     microbatch k are its own memory (pass_shard keeps the split on dim 0 of both reshapes
 *     and the slice): no communication is added and the runtime feeds the inputs as it
 *     always did. A microbatch is the same rows on every mesh, so what is computed over a
 *     microbatch's rows as a whole (a MoE's load-balance loss) is the same on every mesh and
 *     on one device. Over the whole step the rows are the same B rows.
 *   - The values that depend on the inputs (the forward and the backward) are copied N times
 *     in sequence: all of copy k before any of copy k+1. Nothing after this pass reorders
 *     values (simplify rebuilds in order, CSE cannot merge values of different slices, shard
 *     and remat walk in order), so the memory plan frees copy k's activations before copy
 *     k+1 makes its own: the activations at the peak are one microbatch's.
 *   - The values that do not depend on the inputs (parameters, their casts, constants, rope
 *     tables) are emitted once, where copy 0 needs them, and shared by every copy. The first
 *     value of each copy after the first is tagged PASS_MICROBATCH_START_TAG: pass_shard makes
 *     each copy's reshards (the gathers of fsdp weights) anew, so they do not stay alive
 *     from the first copy to the last.
 *   - Each output that depends on the inputs is accumulated in f32 right after each copy makes
 *     it (a gradient's summand dies at once: pass_fusion_plan stores each running sum where it
 *     is made rather than fuse the chain of sums into one loop at the end, which would keep
 *     every copy's summand alive to the step's end), and divided by N after the last copy: the
 *     gradients are the mean of the microbatch gradients, the loss (and aux_loss) the mean of
 *     the microbatch losses. Each microbatch loss is a mean over its rows, so the mean of the
 *     N means is the whole batch's mean and the step equals the whole-batch step up to the
 *     order of its sums. The sums carry the tag PASS_MICROBATCH_TAG: under a mesh, pass_shard
 *     reduce-scatters each microbatch's gradient where its parameter is split over the axes
 *     the gradient is a partial sum over (fsdp), so the running sum is one device's chunk, and
 *     elsewhere (data parallelism) keeps the sums partial and reduces once per step.
 *
 * N <= 1 (or opt NULL): nothing to do.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

typedef struct Micro {
  IrGraph *g;        /* the graph before (its errors are recorded there) */
  IrGraph *ng;       /* the step being built */
  int64_t n, split;  /* microbatches N, devices S the batch is split over */
  bool *dep;         /* (g->nvalues) depends on an input */
  int32_t *map;      /* (g->nvalues) old value -> new: shared values once, the others per copy */
  int32_t *whole;    /* (g->nvalues) input -> the whole (B, ...) input in ng, or IR_NONE */
  int32_t *acc;      /* (g->noutputs) running f32 sum of each input-dependent output */
  int32_t *outs_of;  /* (g->nvalues) first output index reading each value, or -1 */
  int32_t *next_out; /* (g->noutputs) next output index reading the same value, or -1 */
} Micro;

/* The batch split of input `name`: the devices its dim 0 is cut over. */
static int64_t input_split(const PassOptions *opt, const char *name) {
  const PassShard *s = opt->shard;
  if (!s || ir_mesh_devices(&s->mesh) <= 1) return 1;
  for (int32_t i = 0; i < s->nleaves; i++)
    if (!strcmp(s->leaves[i].name, name)) return ir_split_count(&s->mesh, &s->leaves[i].split, 0);
  return 1;
}

/* Copy k of input v: microbatch k's rows of the whole input, in the shape v had. */
static int32_t input_slice(Micro *m, int32_t v, int64_t k) {
  const IrValue x = m->g->values[v]; /* a copy: adding values may move the array */
  ir_graph_set_origin(m->ng, x.origin);
  if (m->whole[v] == IR_NONE) {
    IrShape s = x.shape;
    s.dims[0] *= m->n;
    m->whole[v] = ir_input(m->ng, x.name, x.dtype, s.rank, s.dims);
  }
  /* (B, rest...) -> (b, N, rest...), slice [:, k], -> (b, rest...) */
  int64_t dims[IR_MAX_RANK] = {0}, lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK];
  int32_t r = x.shape.rank + 1;
  dims[0] = x.shape.dims[0];
  dims[1] = m->n;
  for (int32_t d = 1; d < x.shape.rank; d++) dims[d + 1] = x.shape.dims[d];
  memcpy(hi, dims, sizeof hi);
  lo[1] = k;
  hi[1] = k + 1;
  int32_t y = ir_slice(m->ng, ir_reshape(m->ng, m->whole[v], r, dims), lo, hi);
  /* the slice, not the reshape, which is the same in every copy (simplify's CSE merges it) */
  if (k > 0 && y != IR_NONE) ir_value_set_tag(m->ng, y, PASS_MICROBATCH_START_TAG);
  return ir_reshape(m->ng, y, x.shape.rank, x.shape.dims);
}

static bool low(IrDType dt) { return dt == DT_BF16 || dt == DT_F16; }

/* Adds copy k's value of output o to its running sum; after the last copy, the sum over N in
 * the output's dtype. */
static void accumulate(Micro *m, int32_t o, int64_t k) {
  int32_t v = m->map[m->g->outputs[o].value];
  IrDType dt = m->ng->values[v].dtype;
  ir_graph_set_tag(m->ng, PASS_MICROBATCH_TAG); /* pass_shard finds the summands under it */
  if (low(dt)) v = ir_cast(m->ng, v, DT_F32);
  m->acc[o] = k == 0 ? v : ir_add(m->ng, m->acc[o], v);
  if (k + 1 == m->n && m->acc[o] != IR_NONE) {
    IrShape s = m->ng->values[m->acc[o]].shape;
    IrDType sd = m->ng->values[m->acc[o]].dtype;
    int32_t n = ir_const_scalar(m->ng, sd, (double)m->n, s.rank, s.dims);
    m->acc[o] = ir_div(m->ng, m->acc[o], n);
    if (low(dt)) m->acc[o] = ir_cast(m->ng, m->acc[o], dt);
  }
  ir_graph_set_tag(m->ng, "");
}

/* Checks the inputs: each is a batch of rows (dim 0) that splits into N microbatches of the
 * batch split's devices. */
static int check_inputs(Micro *m, const PassOptions *opt) {
  for (int32_t v = 0; v < m->g->nvalues; v++) {
    const IrValue *x = &m->g->values[v];
    if (x->op != IR_INPUT) continue;
    if (x->shape.rank < 1 || x->shape.rank + 1 > IR_MAX_RANK)
      return ir_graph_fail(m->g,
                           "microbatch: input '%s' has rank %d (expected a batch of rows: rank 1 "
                           "to %d)",
                           x->name, x->shape.rank, IR_MAX_RANK - 1);
    int64_t s = input_split(opt, x->name);
    if (m->split != 0 && s != m->split)
      return ir_graph_fail(m->g,
                           "microbatch: input '%s' is split over %lld devices, another input "
                           "over %lld (expected one batch split)",
                           x->name, (long long)s, (long long)m->split);
    m->split = s;
    if (x->shape.dims[0] % s)
      return ir_graph_fail(m->g,
                           "microbatch: input '%s' has %lld rows per microbatch, which do not "
                           "divide over the batch split's %lld devices",
                           x->name, (long long)x->shape.dims[0], (long long)s);
  }
  if (m->split == 0) m->split = 1;
  return IR_OK;
}

static void micro_init(Micro *m, IrGraph *g, int64_t n) {
  int32_t nv = g->nvalues, no = g->noutputs;
  *m = (Micro){.g = g, .ng = ir_graph_new(), .n = n};
  m->dep = base_xcalloc((size_t)nv + 1, sizeof *m->dep);
  m->map = base_xmalloc(((size_t)nv + 1) * sizeof *m->map);
  m->whole = base_xmalloc(((size_t)nv + 1) * sizeof *m->whole);
  m->outs_of = base_xmalloc(((size_t)nv + 1) * sizeof *m->outs_of);
  m->acc = base_xmalloc(((size_t)no + 1) * sizeof *m->acc);
  m->next_out = base_xmalloc(((size_t)no + 1) * sizeof *m->next_out);
  for (int32_t v = 0; v < nv; v++) {
    const IrValue *x = &g->values[v];
    m->dep[v] = x->op == IR_INPUT;
    for (int32_t k = 0; k < x->nops && !m->dep[v]; k++) m->dep[v] = m->dep[x->ops[k]];
    m->map[v] = m->whole[v] = IR_NONE;
    m->outs_of[v] = -1;
  }
  for (int32_t o = no - 1; o >= 0; o--) { /* each value's outputs, in output order */
    m->acc[o] = IR_NONE;
    m->next_out[o] = m->outs_of[g->outputs[o].value];
    m->outs_of[g->outputs[o].value] = o;
  }
  m->ng->mesh = g->mesh;
  m->ng->matmul = g->matmul;
  ir_graph_reserve(m->ng, (int32_t)(nv * (n < 8 ? n : 8)));
}

static void micro_free(Micro *m) {
  ir_graph_free(m->ng);
  free(m->dep);
  free(m->map);
  free(m->whole);
  free(m->outs_of);
  free(m->acc);
  free(m->next_out);
}

/* Copy k: its inputs' slices, the input-dependent values, and the shared ones copy 0 meets. */
static int emit_copy(Micro *m, int64_t k) {
  IrGraph *g = m->g;
  for (int32_t v = 0; v < g->nvalues; v++) {
    if (!m->dep[v] && k > 0) continue; /* shared: made once, by copy 0 */
    if (g->values[v].op == IR_INPUT)
      m->map[v] = input_slice(m, v, k);
    else
      m->map[v] = ir_graph_add_mapped(m->ng, g, v, m->map);
    if (m->map[v] == IR_NONE)
      return ir_graph_fail(g, "microbatch: copy %lld of %%%d: %s", (long long)k, v,
                           ir_graph_error(m->ng) ? ir_graph_error(m->ng) : "?");
    if (!m->dep[v]) continue;
    m->ng->values[m->map[v]].micro = (int16_t)k; /* the pipeline's schedule orders by it */
    ir_graph_set_origin(m->ng, "/learner");      /* the sums are the learner's microbatches */
    for (int32_t o = m->outs_of[v]; o >= 0; o = m->next_out[o]) accumulate(m, o, k);
  }
  return ir_graph_error(m->ng) ? ir_graph_fail(g, "microbatch: %s", ir_graph_error(m->ng)) : IR_OK;
}

int pass_microbatch(IrGraph *g, const PassOptions *opt) {
  int64_t n = opt ? opt->microbatches : 1;
  if (n <= 1) return IR_OK;
  Micro m;
  micro_init(&m, g, n);
  int st = check_inputs(&m, opt);
  for (int64_t k = 0; k < n && st == IR_OK; k++) st = emit_copy(&m, k);
  for (int32_t o = 0; o < g->noutputs && st == IR_OK; o++) {
    int32_t v = g->outputs[o].value;
    st = ir_graph_add_output(m.ng, g->outputs[o].name, m.dep[v] ? m.acc[o] : m.map[v]);
  }
  if (st == IR_OK) ir_graph_replace(g, m.ng);
  micro_free(&m);
  return st;
}
