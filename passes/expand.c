/* expand.c: the fused attention ops rewritten into primitive ops, for backends that lack them.
 *
 * attention(q, k, v) and attention_grad(q, k, v, dout) (ir/ops.def) are one kernel where a backend
 * has one (the interpreter, the LLVM backend's runtime kernel). The driver runs this pass on the
 * graphs it hands to a backend whose supports_op says no (driver/pipeline.c: drv_backend_job), so
 * the backend sees only primitives. It runs after every other pass, on the per-device program:
 * nothing about the mesh changes, and there is no autodiff after it (so the row max needs no
 * stop_gradient).
 *
 * The math, per leading index, with q, dout (Tq, H), k, v (Tk, H) and L = rank - 2 batch dims:
 *   S  = scale * q k^T                              (Tq, Tk)
 *   causal: S[i, j] = -inf for keys j > pos[i]      (their exp is exactly 0, as in the reference;
 *                                                    pos the query positions, or the row iota)
 *   P  = exp(S - rowmax S) / rowsum                 softmax along the keys
 *   out = P v
 *   dP = dout v^T,  D = rowsum(P * dP),  dS = scale * P * (dP - D)
 *   dq = dS k,  dk = dS^T q,  dv = P^T dout         attention_grad: concat along a new axis 0
 *                                                    (dq padded with zero rows to Tk)
 * Both ops build P the same way (attention_probs below). Every dot_general is one sgemm per batch
 * element (ir_dot_sgemm): batch dims first, contracting dims at the end or right after the batch.
 * The causal mask is a compare of two iotas read by one select, so the fusion plan computes it
 * inside the select's loop and no (T, T) mask is stored.
 *
 * Rewrite. The graph is rebuilt in order through ir_graph_add, as remat and simplify do: every
 * other value is copied with its operands mapped, and an attention value is replaced by its
 * expansion, which lands where the value was, after its operands and before its readers. The
 * new values take the replaced value's origin and remat tag; under a mesh their leading (batch)
 * dims take the split of the replaced value's operands, and the value that stands for the result
 * takes the result's split.
 */
#include "passes/passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One attention value being expanded: operands already in the new graph. */
typedef struct Att {
  IrGraph *g;                /* the new graph */
  int32_t q, k, v, dout;     /* (..., T, H); dout IR_NONE for attention */
  int32_t pos;               /* the query positions (Tq), or IR_NONE */
  int64_t tk;                /* key rows */
  IrDType dt;                /* of q */
  int32_t rank;              /* of q, >= 2 */
  int64_t dims[IR_MAX_RANK]; /* (..., Tq, Tk): the scores' shape */
  int32_t axes[IR_MAX_RANK]; /* 0, 1, ..., rank - 1: batch dims and bdims */
  bool causal;
  double scale;
  int64_t G; /* query heads per key head (ir_attention_group) */
} Att;

/* A constant x of the scores' shape (..., Tq, Tk). */
static int32_t att_splat(const Att *a, double x) {
  return ir_const_scalar(a->g, a->dt, x, a->rank, a->dims);
}

/* dot_general batched over the leading dims of two (..., X, Y) operands, contracting axis ca of
 * lhs with axis cb of rhs (each rank - 2 or rank - 1). */
static int32_t att_dot(const Att *a, int32_t lhs, int32_t rhs, int32_t ca, int32_t cb) {
  return ir_dot(a->g, lhs, rhs, a->rank - 2, a->axes, a->axes, 1, &ca, &cb);
}

/* A row statistic (..., Tq) broadcast along the keys to (..., Tq, Tk). */
static int32_t att_rows(const Att *a, int32_t x) {
  return ir_broadcast(a->g, x, a->rank, a->dims, a->axes);
}

/* Sum or max over the keys: (..., Tq, Tk) -> (..., Tq). */
static int32_t att_reduce(const Att *a, IrOp op, int32_t x) {
  int32_t last = a->rank - 1;
  return op == IR_REDUCE_MAX ? ir_reduce_max(a->g, x, 1, &last) : ir_reduce_sum(a->g, x, 1, &last);
}

/* P (..., Tq, Tk): softmax(scale * q k^T) along the keys, masked keys exactly 0. The row max is
 * over the unmasked keys (key pos[i] always is), so exp(S - max) <= 1 and no row sums to 0. */
static int32_t attention_probs(const Att *a) {
  IrGraph *g = a->g;
  int32_t s = ir_mul(g, att_dot(a, a->q, a->k, a->rank - 1, a->rank - 1), att_splat(a, a->scale));
  if (a->causal) {
    int32_t row = a->rank - 2;
    int32_t at = a->pos == IR_NONE ? ir_iota(g, DT_I32, a->rank, a->dims, row)
                                   : ir_broadcast(g, a->pos, a->rank, a->dims, &row);
    int32_t key_ok = ir_ge(g, at, ir_iota(g, DT_I32, a->rank, a->dims, a->rank - 1));
    s = ir_select(g, key_ok, s, att_splat(a, -INFINITY));
  }
  int32_t z = ir_exp(g, ir_sub(g, s, att_rows(a, att_reduce(a, IR_REDUCE_MAX, s))));
  return ir_div(g, z, att_rows(a, att_reduce(a, IR_REDUCE_SUM, z)));
}

/* out (..., T, H) = P v. */
static int32_t expand_attention(const Att *a) {
  return att_dot(a, attention_probs(a), a->v, a->rank - 1, a->rank - 2);
}

/* Grouped: key tensor x (..., K, T, H) as the query's (..., N, T, H), key head n / G for query
 * head n, or (to_q false) a query-shaped x summed over each group to (..., K, T, H). */
static int32_t att_group(const Att *a, int32_t x, bool to_q) {
  IrGraph *g = a->g;
  const IrShape *qs = &g->values[a->q].shape; /* read before the graph grows */
  int32_t r = qs->rank, bd[IR_MAX_RANK];
  int64_t kg[IR_MAX_RANK], k[IR_MAX_RANK];
  for (int32_t d = 0, o = 0; d < r; d++) {
    k[d] = d == r - 3 ? qs->dims[d] / a->G : d == r - 2 ? a->tk : qs->dims[d];
    bd[d] = o;
    kg[o++] = k[d];
    if (d == r - 3) kg[o++] = a->G;
  }
  for (int32_t d = r - 2; d < r; d++) bd[d] = d + 1;
  int64_t q[IR_MAX_RANK]; /* the query's heads, the keys' rows */
  memcpy(q, qs->dims, sizeof q);
  q[r - 2] = a->tk;
  if (to_q) return ir_reshape(g, ir_broadcast(g, x, r + 1, kg, bd), r, q);
  int32_t ax = r - 2;
  return ir_reshape(g, ir_reduce_sum(g, ir_reshape(g, x, r + 1, kg), 1, &ax), r, k);
}

/* Grouped attention_grad's (..., K, G + 2, Tk, H) from the query-shaped dq (rows padded to Tk)
 * and the summed dk, dv (..., K, Tk, H). */
static int32_t att_stack_grouped(const Att *a, const int32_t *grads) {
  IrGraph *g = a->g;
  const IrShape qs = g->values[a->q].shape; /* a copy: the reshapes grow the graph */
  int32_t r = qs.rank, parts[3];
  int64_t kg[IR_MAX_RANK];
  for (int32_t i = 0; i < 3; i++) {
    for (int32_t d = 0, o = 0; d < r; d++) {
      kg[o++] = d == r - 3 ? qs.dims[d] / a->G : d == r - 2 ? a->tk : qs.dims[d];
      if (d == r - 3) kg[o++] = i == 0 ? a->G : 1;
    }
    parts[i] = ir_reshape(g, grads[i], r + 1, kg);
  }
  return ir_concat(g, 3, parts, r - 2);
}

/* (3, ..., Tk, H): dq, dk, dv (see the top of the file); grouped, (..., K, G + 2, Tk, H). */
static int32_t expand_attention_grad(const Att *a) {
  IrGraph *g = a->g;
  int32_t t = a->rank - 2, h = a->rank - 1; /* the query (or key) axis, the head axis */
  int32_t p = attention_probs(a);
  int32_t dp = att_dot(a, a->dout, a->v, h, h); /* (..., Tq, Tk) */
  int32_t d = att_rows(a, att_reduce(a, IR_REDUCE_SUM, ir_mul(g, p, dp)));
  int32_t ds = ir_mul(g, ir_mul(g, p, ir_sub(g, dp, d)), att_splat(a, a->scale));
  int32_t grads[3] = {att_dot(a, ds, a->k, h, t), att_dot(a, ds, a->q, t, t),
                      att_dot(a, p, a->dout, t, t)};
  const IrShape qs = g->values[a->q].shape; /* a copy: the graph grows below */
  if (qs.dims[t] < a->tk) {                 /* dq's rows [Tq, Tk) are zeros */
    int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK] = {0};
    hi[t] = a->tk - qs.dims[t];
    grads[0] = ir_pad(g, grads[0], lo, hi, 0.0);
  }
  if (a->G > 1) {
    grads[1] = att_group(a, grads[1], false);
    grads[2] = att_group(a, grads[2], false);
    return att_stack_grouped(a, grads);
  }
  int64_t one[IR_MAX_RANK] = {1}; /* (1, ..., Tk, H) */
  memcpy(one + 1, g->values[grads[0]].shape.dims, (size_t)qs.rank * sizeof *one);
  for (int32_t i = 0; i < 3; i++) grads[i] = ir_reshape(g, grads[i], qs.rank + 1, one);
  return ir_concat(g, 3, grads, 0);
}

/* Under a mesh: the new values [first, r) get the split of x's operands on their leading dims
 * (after the leading 1 or 3 of attention_grad's stack), r, which stands for x, x's own. */
static void expand_splits(IrGraph *ng, const IrGraph *g, int32_t x, int32_t first, int32_t r) {
  const IrValue *old = &g->values[x];
  const IrSplit *lead = &g->values[old->ops[0]].split;
  int32_t rank = g->values[old->ops[0]].shape.rank;
  bool grouped = /* its (..., K, G, T, H) values keep the leading splits in place */
      ir_attention_group(&g->values[old->ops[0]].shape, &g->values[old->ops[1]].shape) > 1;
  for (int32_t i = first; i < r; i++) {
    IrValue *y = &ng->values[i];
    int32_t off = y->shape.rank == rank + 1 && !grouped; /* (1 or 3, ..., T, H) */
    memset(&y->split, 0, sizeof y->split);
    for (int32_t d = 0; d < rank - 2 && d + off < y->shape.rank; d++)
      memcpy(y->split.axes[d + off], lead->axes[d], sizeof lead->axes[d]);
  }
  ng->values[r].split = old->split;
}

/* Appends the expansion of attention value x of g to ng; its operands are map[...]. */
static int32_t expand_value(IrGraph *ng, const IrGraph *g, int32_t x, const int32_t *map) {
  const IrValue *old = &g->values[x];
  const IrShape *qs = &g->values[old->ops[0]].shape, *ks = &g->values[old->ops[1]].shape;
  int32_t pos = ir_attention_positions(old);
  Att a = {.g = ng,
           .q = map[old->ops[0]],
           .k = map[old->ops[1]],
           .v = map[old->ops[2]],
           .dout = old->op == IR_ATTENTION_GRAD ? map[old->ops[3]] : IR_NONE,
           .pos = pos == IR_NONE ? IR_NONE : map[pos],
           .tk = ks->dims[ks->rank - 2],
           .dt = old->dtype,
           .rank = qs->rank,
           .causal = old->attr.k != 0,
           .scale = old->attr.value,
           .G = ir_attention_group(qs, ks)};
  for (int32_t d = 0; d < qs->rank; d++) {
    a.dims[d] = qs->dims[d];
    a.axes[d] = d;
  }
  a.dims[qs->rank - 1] = a.tk;
  const char *origin = ng->origin, *tag = ng->tag; /* ng's own strings */
  ir_graph_set_origin(ng, old->origin);
  ir_graph_set_tag(ng, old->tag);
  int32_t first = ng->nvalues;
  if (a.G > 1) { /* the keys and values broadcast to the query's heads */
    a.k = att_group(&a, a.k, true);
    a.v = att_group(&a, a.v, true);
  }
  int32_t r = old->op == IR_ATTENTION ? expand_attention(&a) : expand_attention_grad(&a);
  ir_graph_set_origin(ng, origin);
  ir_graph_set_tag(ng, tag);
  if (r != IR_NONE) expand_splits(ng, g, x, first, r);
  return r;
}

/* ---- the rewrite ---- */

static bool is_attention(IrOp op) { return op == IR_ATTENTION || op == IR_ATTENTION_GRAD; }

static int rebuild(IrGraph *ng, const IrGraph *g, int32_t *map) {
  for (int32_t i = 0; i < g->nvalues; i++) {
    bool att = is_attention(g->values[i].op);
    map[i] = att ? expand_value(ng, g, i, map) : ir_graph_add_mapped(ng, g, i, map);
    if (map[i] == IR_NONE) /* the reason is recorded in ng; this adds the value, if first */
      return ir_graph_fail(ng, "%%%d (%s): cannot rebuild", i, ir_op_name(g->values[i].op));
  }
  for (int32_t k = 0; k < g->noutputs; k++)
    if (ir_graph_add_output(ng, g->outputs[k].name, map[g->outputs[k].value])) return IR_ERR;
  return IR_OK;
}

int pass_expand(IrGraph *g, const PassOptions *opt) {
  (void)opt;
  int32_t n = 0;
  for (int32_t i = 0; i < g->nvalues; i++) n += is_attention(g->values[i].op);
  if (n == 0) return IR_OK;
  IrGraph *ng = ir_graph_new();
  int32_t *map = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *map);
  ng->mesh = g->mesh;
  ng->matmul = g->matmul;
  ir_graph_reserve(ng, g->nvalues + 64 * n); /* about 50 values per grouped attention_grad */
  int st = rebuild(ng, g, map);
  if (st == IR_OK) {
    ir_graph_replace(g, ng);
  } else {
    ir_graph_fail(g, "expand: %s", ir_graph_error(ng) ? ir_graph_error(ng) : "failed");
  }
  free(map);
  ir_graph_free(ng);
  return st;
}
