/* autodiff.c: reverse-mode automatic differentiation, one small rule per primitive op.
 *
 * Walks the graph backwards from a scalar y, giving every value on a path from a chosen parameter
 * to y a cotangent (a value of its own dtype and shape), and appends the backward computation to
 * the same graph. A rule receives the forward value and its cotangent and adds contributions to
 * the operands that need one (ad_acc sums several). The rule table is generated from ops.def's
 * grad column, so an op's gradient is declared next to its other properties; `none` ops (compares,
 * integer results, leaves) stop the gradient. Backward values inherit the forward value's config
 * path, with no remat tag. Under a mesh the differentiated quantity is the sum of the per-device
 * y's, which makes each collective's rule its transpose (all_reduce <-> all_reduce, all_gather <->
 * reduce_scatter, all_to_all with its axes swapped).
 */
#include "passes/passes.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct AdCtx {
  IrGraph *g;
  int32_t nfwd;  /* values [0, nfwd) are the forward graph */
  int32_t *grad; /* (nfwd) accumulated cotangent or IR_NONE */
  bool *need;    /* (nfwd) on a path from a wrt value to y, float */
} AdCtx;

typedef void (*AdRule)(AdCtx *c, int32_t y, int32_t gy);

/* ---- helpers ---- */

static int32_t arg(const AdCtx *c, int32_t y, int32_t i) { return c->g->values[y].ops[i]; }

static bool need(const AdCtx *c, int32_t x) { return c->need[x]; }

static void ad_acc(AdCtx *c, int32_t x, int32_t gx) {
  if (!c->need[x] || gx == IR_NONE) return;
  c->grad[x] = c->grad[x] == IR_NONE ? gx : ir_add(c->g, c->grad[x], gx);
}

/* A splat of v in the dtype and shape of `like`. */
static int32_t splat(AdCtx *c, int32_t like, double v) {
  IrValue l = c->g->values[like];
  return ir_const_scalar(c->g, l.dtype, v, l.shape.rank, l.shape.dims);
}

/* Broadcasts r (x's shape with `axes` removed) back to x's shape. */
static int32_t unreduce(AdCtx *c, int32_t r, int32_t x, const IrDims *axes) {
  IrShape xs = c->g->values[x].shape;
  int32_t keep[IR_MAX_RANK], n = 0;
  for (int32_t d = 0; d < xs.rank; d++) {
    bool reduced = false;
    for (int32_t k = 0; k < axes->n; k++) reduced |= axes->v[k] == d;
    if (!reduced) keep[n++] = d;
  }
  return ir_broadcast(c->g, r, xs.rank, xs.dims, keep);
}

static int32_t dims_to_i32(const IrDims *d, int32_t *out) {
  for (int32_t i = 0; i < d->n; i++) out[i] = (int32_t)d->v[i];
  return d->n;
}

/* ---- elementwise unary: d/dx in terms of x and y ---- */

static void ad_neg(AdCtx *c, int32_t y, int32_t gy) { ad_acc(c, arg(c, y, 0), ir_neg(c->g, gy)); }

static void ad_exp(AdCtx *c, int32_t y, int32_t gy) {
  ad_acc(c, arg(c, y, 0), ir_mul(c->g, gy, y));
}

static void ad_log(AdCtx *c, int32_t y, int32_t gy) {
  ad_acc(c, arg(c, y, 0), ir_div(c->g, gy, arg(c, y, 0)));
}

static void ad_tanh(AdCtx *c, int32_t y, int32_t gy) { /* 1 - y^2 */
  ad_acc(c, arg(c, y, 0), ir_mul(c->g, gy, ir_sub(c->g, splat(c, y, 1), ir_mul(c->g, y, y))));
}

static void ad_sqrt(AdCtx *c, int32_t y, int32_t gy) { /* 1 / (2 y) */
  ad_acc(c, arg(c, y, 0), ir_div(c->g, gy, ir_mul(c->g, splat(c, y, 2), y)));
}

static void ad_rsqrt(AdCtx *c, int32_t y, int32_t gy) { /* -y^3 / 2 */
  int32_t y3 = ir_mul(c->g, y, ir_mul(c->g, y, y));
  ad_acc(c, arg(c, y, 0), ir_mul(c->g, gy, ir_mul(c->g, splat(c, y, -0.5), y3)));
}

static void ad_abs(AdCtx *c, int32_t y, int32_t gy) { /* sign(x), 0 at 0 */
  int32_t x = arg(c, y, 0), zero = splat(c, x, 0);
  int32_t sign = ir_sub(c->g, ir_gt(c->g, x, zero), ir_lt(c->g, x, zero));
  ad_acc(c, x, ir_mul(c->g, gy, sign));
}

static void ad_sin(AdCtx *c, int32_t y, int32_t gy) {
  ad_acc(c, arg(c, y, 0), ir_mul(c->g, gy, ir_cos(c->g, arg(c, y, 0))));
}

static void ad_cos(AdCtx *c, int32_t y, int32_t gy) {
  ad_acc(c, arg(c, y, 0), ir_neg(c->g, ir_mul(c->g, gy, ir_sin(c->g, arg(c, y, 0)))));
}

static void ad_erf(AdCtx *c, int32_t y, int32_t gy) { /* 2/sqrt(pi) e^(-x^2) */
  int32_t x = arg(c, y, 0);
  int32_t e = ir_exp(c->g, ir_neg(c->g, ir_mul(c->g, x, x)));
  ad_acc(c, x, ir_mul(c->g, gy, ir_mul(c->g, splat(c, x, 1.1283791670955126), e)));
}

static void ad_logistic(AdCtx *c, int32_t y, int32_t gy) { /* y (1 - y) */
  int32_t d = ir_mul(c->g, y, ir_sub(c->g, splat(c, y, 1), y));
  ad_acc(c, arg(c, y, 0), ir_mul(c->g, gy, d));
}

/* ---- elementwise binary ---- */

static void ad_add(AdCtx *c, int32_t y, int32_t gy) {
  ad_acc(c, arg(c, y, 0), gy);
  ad_acc(c, arg(c, y, 1), gy);
}

static void ad_sub(AdCtx *c, int32_t y, int32_t gy) {
  ad_acc(c, arg(c, y, 0), gy);
  if (need(c, arg(c, y, 1))) ad_acc(c, arg(c, y, 1), ir_neg(c->g, gy));
}

static void ad_mul(AdCtx *c, int32_t y, int32_t gy) {
  int32_t a = arg(c, y, 0), b = arg(c, y, 1);
  if (need(c, a)) ad_acc(c, a, ir_mul(c->g, gy, b));
  if (need(c, b)) ad_acc(c, b, ir_mul(c->g, gy, a));
}

static void ad_div(AdCtx *c, int32_t y, int32_t gy) { /* d/db a/b = -y/b */
  int32_t a = arg(c, y, 0), b = arg(c, y, 1);
  if (need(c, a)) ad_acc(c, a, ir_div(c->g, gy, b));
  if (need(c, b)) ad_acc(c, b, ir_neg(c->g, ir_div(c->g, ir_mul(c->g, gy, y), b)));
}

/* max/min: the gradient goes to a where mask (a wins, ties included), else to b. */
static void ad_minmax(AdCtx *c, int32_t y, int32_t gy, int32_t mask) {
  int32_t a = arg(c, y, 0), b = arg(c, y, 1);
  if (need(c, a)) ad_acc(c, a, ir_mul(c->g, gy, mask));
  if (need(c, b)) ad_acc(c, b, ir_mul(c->g, gy, ir_sub(c->g, splat(c, y, 1), mask)));
}

static void ad_max(AdCtx *c, int32_t y, int32_t gy) {
  ad_minmax(c, y, gy, ir_ge(c->g, arg(c, y, 0), arg(c, y, 1)));
}

static void ad_min(AdCtx *c, int32_t y, int32_t gy) {
  ad_minmax(c, y, gy, ir_le(c->g, arg(c, y, 0), arg(c, y, 1)));
}

static void ad_pow(AdCtx *c, int32_t y, int32_t gy) { /* b a^(b-1), y log a */
  int32_t a = arg(c, y, 0), b = arg(c, y, 1);
  if (need(c, a)) {
    int32_t p = ir_pow(c->g, a, ir_sub(c->g, b, splat(c, b, 1)));
    ad_acc(c, a, ir_mul(c->g, gy, ir_mul(c->g, b, p)));
  }
  if (need(c, b)) ad_acc(c, b, ir_mul(c->g, gy, ir_mul(c->g, y, ir_log(c->g, a))));
}

static void ad_select(AdCtx *c, int32_t y, int32_t gy) {
  int32_t p = arg(c, y, 0), a = arg(c, y, 1), b = arg(c, y, 2), zero = splat(c, y, 0);
  if (need(c, a)) ad_acc(c, a, ir_select(c->g, p, gy, zero));
  if (need(c, b)) ad_acc(c, b, ir_select(c->g, p, zero, gy));
}

static void ad_cast(AdCtx *c, int32_t y, int32_t gy) {
  int32_t x = arg(c, y, 0);
  ad_acc(c, x, ir_cast(c->g, gy, c->g->values[x].dtype));
}

/* ---- data movement: the gradient is the inverse movement ---- */

static void ad_broadcast(AdCtx *c, int32_t y, int32_t gy) { /* sum over the broadcast dims */
  IrValue v = c->g->values[y];
  IrShape xs = c->g->values[v.ops[0]].shape;
  int32_t axes[IR_MAX_RANK], n = 0;
  for (int32_t d = 0; d < v.shape.rank; d++) {
    int32_t from = -1;
    for (int32_t i = 0; i < v.attr.axes.n; i++)
      if (v.attr.axes.v[i] == d) from = i;
    if (from < 0 || (xs.dims[from] == 1 && v.shape.dims[d] != 1)) axes[n++] = d;
  }
  int32_t r = ir_reduce_sum(c->g, gy, n, axes); /* kept dims stay in order: bdims increase */
  ad_acc(c, v.ops[0], ir_reshape(c->g, r, xs.rank, xs.dims));
}

static void ad_reshape(AdCtx *c, int32_t y, int32_t gy) {
  IrShape xs = c->g->values[arg(c, y, 0)].shape;
  ad_acc(c, arg(c, y, 0), ir_reshape(c->g, gy, xs.rank, xs.dims));
}

static void ad_transpose(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  int32_t inv[IR_MAX_RANK];
  for (int32_t i = 0; i < v.attr.axes.n; i++) inv[v.attr.axes.v[i]] = i;
  ad_acc(c, v.ops[0], ir_transpose(c->g, gy, inv));
}

static void ad_slice(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  IrShape xs = c->g->values[v.ops[0]].shape;
  int64_t high[IR_MAX_RANK];
  for (int32_t d = 0; d < xs.rank; d++) high[d] = xs.dims[d] - v.attr.hi.v[d];
  ad_acc(c, v.ops[0], ir_pad(c->g, gy, v.attr.lo.v, high, 0));
}

static void ad_concat(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  int64_t start[IR_MAX_RANK] = {0}, limit[IR_MAX_RANK];
  for (int32_t d = 0; d < v.shape.rank; d++) limit[d] = v.shape.dims[d];
  limit[v.attr.axis] = 0;
  for (int32_t k = 0; k < v.nops; k++) {
    start[v.attr.axis] = limit[v.attr.axis];
    limit[v.attr.axis] += c->g->values[v.ops[k]].shape.dims[v.attr.axis];
    if (need(c, v.ops[k])) ad_acc(c, v.ops[k], ir_slice(c->g, gy, start, limit));
  }
}

static void ad_pad(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  IrShape xs = c->g->values[v.ops[0]].shape;
  int64_t limit[IR_MAX_RANK];
  for (int32_t d = 0; d < xs.rank; d++) limit[d] = v.attr.lo.v[d] + xs.dims[d];
  ad_acc(c, v.ops[0], ir_slice(c->g, gy, v.attr.lo.v, limit));
}

/* ---- reductions and contractions ---- */

static void ad_reduce_sum(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  ad_acc(c, v.ops[0], unreduce(c, gy, v.ops[0], &v.attr.axes));
}

static void ad_reduce_max(AdCtx *c, int32_t y, int32_t gy) { /* split evenly among the maxima */
  IrValue v = c->g->values[y];
  int32_t x = v.ops[0], axes[IR_MAX_RANK], n = dims_to_i32(&v.attr.axes, axes);
  int32_t mask = ir_eq(c->g, x, unreduce(c, y, x, &v.attr.axes));
  int32_t share = ir_div(c->g, gy, ir_reduce_sum(c->g, mask, n, axes));
  ad_acc(c, x, ir_mul(c->g, mask, unreduce(c, share, x, &v.attr.axes)));
}

/* Position of value d among the sorted entries of list. */
static int32_t sorted_rank(const IrDims *list, int64_t d) {
  int32_t r = 0;
  for (int32_t i = 0; i < list->n; i++) r += list->v[i] < d;
  return r;
}

/* Gradient for one side of a dot. out = (batch, lhs free, rhs free). For side x with partner p:
 * t = dot(gy, p) contracting gy's partner-free dims with p's free dims gives (batch, x free,
 * p contracting dims in increasing order); a transpose puts x's dims back in place. */
static int32_t dot_side(AdCtx *c, int32_t gy, int32_t p, const IrDims *xb, const IrDims *xc,
                        const IrDims *pb, const IrDims *pc, int32_t xrank, int32_t x_free_at,
                        int32_t p_free_at) {
  const IrShape ps = c->g->values[p].shape;
  int32_t gb[IR_MAX_RANK], pbv[IR_MAX_RANK], gc[IR_MAX_RANK], pcv[IR_MAX_RANK], nc = 0;
  int32_t nb = dims_to_i32(pb, pbv), nfree_x = xrank - xb->n - xc->n;
  for (int32_t i = 0; i < nb; i++) gb[i] = i;
  for (int32_t d = 0; d < ps.rank; d++) {
    bool used = false;
    for (int32_t i = 0; i < pb->n; i++) used |= pb->v[i] == d;
    for (int32_t i = 0; i < pc->n; i++) used |= pc->v[i] == d;
    if (!used) {
      gc[nc] = p_free_at + nc;
      pcv[nc++] = d;
    }
  }
  int32_t t = ir_dot(c->g, gy, p, nb, gb, pbv, nc, gc, pcv);
  int32_t perm[IR_MAX_RANK], f = 0;
  for (int32_t d = 0; d < xrank; d++) {
    int32_t slot = -1;
    for (int32_t i = 0; i < xb->n; i++)
      if (xb->v[i] == d) slot = i;
    for (int32_t i = 0; i < xc->n; i++)
      if (xc->v[i] == d) slot = nb + nfree_x + sorted_rank(pc, pc->v[i]);
    perm[d] = slot >= 0 ? slot : nb + f++;
  }
  (void)x_free_at;
  return ir_transpose(c->g, t, perm);
}

static void ad_dot(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  int32_t a = v.ops[0], b = v.ops[1];
  int32_t ra = c->g->values[a].shape.rank, rb = c->g->values[b].shape.rank;
  int32_t nb = v.attr.lb.n, nfa = ra - nb - v.attr.lc.n;
  const IrAttrs *t = &v.attr;
  if (need(c, a))
    ad_acc(c, a, dot_side(c, gy, b, &t->lb, &t->lc, &t->rb, &t->rc, ra, nb, nb + nfa));
  if (need(c, b))
    ad_acc(c, b, dot_side(c, gy, a, &t->rb, &t->rc, &t->lb, &t->lc, rb, nb + nfa, nb));
}

/* ---- embeddings ---- */

static void ad_gather(AdCtx *c, int32_t y, int32_t gy) {
  int32_t table = arg(c, y, 0), idx = arg(c, y, 1);
  ad_acc(c, table, ir_scatter_add(c->g, idx, gy, c->g->values[table].shape.dims[0]));
}

static void ad_scatter_add(AdCtx *c, int32_t y, int32_t gy) {
  ad_acc(c, arg(c, y, 1), ir_gather(c->g, gy, arg(c, y, 0)));
}

/* The three gradients in one attention_grad, sliced apart: (3, ..., Tk, H), or grouped
 * (..., K, G + 2, Tk, H) sliced on the group axis (ir_attention_grad_at); dq from the first Tq
 * rows. The query positions have no gradient. */
static void ad_attention(AdCtx *c, int32_t y, int32_t gy) {
  const IrValue *x = &c->g->values[y];
  IrShape s = x->shape, ks = c->g->values[x->ops[1]].shape;
  int64_t G = ir_attention_group(&s, &ks);
  int32_t R = ir_attention_at(c->g, x->ops[0], x->ops[1], x->ops[2], gy, ir_attention_positions(x),
                              x->attr.k != 0, x->attr.value);
  if (R == IR_NONE) return; /* the graph holds the reason */
  int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK] = {0};
  const IrShape rs = c->g->values[R].shape; /* a copy: the slices below grow the graph */
  for (int32_t d = 0; d < rs.rank; d++) hi[d] = rs.dims[d];
  int32_t ax = G == 1 ? 0 : s.rank - 2, rows = rs.rank - 2; /* the stacking axis, the rows */
  for (int32_t i = 0; i < 3; i++) {
    int32_t op = c->g->values[y].ops[i];
    if (!need(c, op)) continue;
    lo[ax] = G == 1 ? i : i == 0 ? 0 : G + i - 1;
    hi[ax] = G == 1 ? i + 1 : i == 0 ? G : G + i;
    hi[rows] = i == 0 ? s.dims[s.rank - 2] : rs.dims[rows];
    const IrShape *to = i == 0 ? &s : &ks;
    ad_acc(c, op, ir_reshape(c->g, ir_slice(c->g, R, lo, hi), to->rank, to->dims));
  }
}

/* ---- collectives: each rule is the op's transpose ---- */

static void ad_all_reduce(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  ad_acc(c, v.ops[0], ir_all_reduce(c->g, gy, v.attr.nmesh, v.attr.mesh));
}

static void ad_all_gather(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  ad_acc(c, v.ops[0], ir_reduce_scatter(c->g, gy, v.attr.nmesh, v.attr.mesh, (int32_t)v.attr.axis));
}

static void ad_reduce_scatter(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  ad_acc(c, v.ops[0], ir_all_gather(c->g, gy, v.attr.nmesh, v.attr.mesh, (int32_t)v.attr.axis));
}

static void ad_all_to_all(AdCtx *c, int32_t y, int32_t gy) {
  IrValue v = c->g->values[y];
  ad_acc(c, v.ops[0],
         ir_all_to_all(c->g, gy, v.attr.nmesh, v.attr.mesh, (int32_t)v.attr.axis2,
                       (int32_t)v.attr.axis));
}

/* ---- the rule table, from ops.def's grad column ---- */

#define ad_none NULL
static const AdRule ad_rules[] = {
#define X(id, name, arity, flags, attrs, shape, grad) ad_##grad,
#include "ir/ops.def"
#undef X
};
#undef ad_none
static_assert(sizeof ad_rules / sizeof ad_rules[0] == IR_OP_COUNT, "ad_rules out of step");

bool pass_autodiff_has_rule(IrOp op) { return op < IR_OP_COUNT && ad_rules[op] != NULL; }

/* ---- driver ---- */

/* need[x]: x depends on a wrt value, y depends on x, and x is a float. */
static void ad_mark(AdCtx *c, int32_t y, int32_t nwrt, const int32_t *wrt) {
  const IrGraph *g = c->g;
  bool *reach = base_xcalloc((size_t)c->nfwd, sizeof *reach);
  for (int32_t i = 0; i < nwrt; i++) c->need[wrt[i]] = true;
  for (int32_t v = 0; v <= y; v++)
    for (int32_t k = 0; k < g->values[v].nops; k++) c->need[v] |= c->need[g->values[v].ops[k]];
  reach[y] = true;
  for (int32_t v = y; v >= 0; v--)
    for (int32_t k = 0; reach[v] && k < g->values[v].nops; k++) reach[g->values[v].ops[k]] = true;
  for (int32_t v = 0; v < c->nfwd; v++)
    c->need[v] = c->need[v] && reach[v] && ir_dtype_is_float(g->values[v].dtype);
  free(reach);
}

static int ad_check(IrGraph *g, int32_t y, int32_t nwrt, const int32_t *wrt) {
  if (y < 0 || y >= g->nvalues) return ir_graph_fail(g, "autodiff: no value %%%d", y);
  const IrValue *v = &g->values[y];
  if (ir_shape_numel(&v->shape) != 1 || !ir_dtype_is_float(v->dtype))
    return ir_graph_fail(g, "autodiff: %%%d (%s) at %s is not a float scalar", y, ir_op_name(v->op),
                         *v->origin ? v->origin : "?");
  for (int32_t i = 0; i < nwrt; i++)
    if (wrt[i] < 0 || wrt[i] >= g->nvalues)
      return ir_graph_fail(g, "autodiff: no value %%%d", wrt[i]);
  return IR_OK;
}

static void ad_backward(AdCtx *c, int32_t y) {
  const char *origin = c->g->origin, *tag = c->g->tag;
  c->grad[y] = splat(c, y, 1);
  for (int32_t v = y; v >= 0; v--) {
    IrOp op = c->g->values[v].op;
    if (c->grad[v] == IR_NONE || !c->need[v] || !ad_rules[op]) continue;
    c->g->origin = c->g->values[v].origin;
    c->g->tag = "";
    ad_rules[op](c, v, c->grad[v]);
  }
  c->g->origin = origin;
  c->g->tag = tag;
}

int pass_autodiff_values(IrGraph *g, int32_t y, int32_t nwrt, const int32_t *wrt, int32_t *grads) {
  if (ir_graph_error(g) || ad_check(g, y, nwrt, wrt)) return IR_ERR;
  AdCtx c = {g, g->nvalues, base_xcalloc((size_t)g->nvalues, sizeof(int32_t)),
             base_xcalloc((size_t)g->nvalues, sizeof(bool))};
  for (int32_t i = 0; i < c.nfwd; i++) c.grad[i] = IR_NONE;
  ad_mark(&c, y, nwrt, wrt);
  ad_backward(&c, y);
  for (int32_t i = 0; i < nwrt; i++)
    grads[i] = c.grad[wrt[i]] != IR_NONE ? c.grad[wrt[i]] : splat(&c, wrt[i], 0);
  free(c.grad);
  free(c.need);
  return ir_graph_error(g) ? IR_ERR : IR_OK;
}

static int ad_output(IrGraph *g, int32_t p, int32_t grad) {
  const char *name = g->values[p].name;
  size_t n = strlen(name) + 6;
  char *out = base_xmalloc(n);
  snprintf(out, n, "grad:%s", name);
  int st = ir_graph_add_output(g, out, grad);
  free(out);
  return st;
}

int pass_autodiff(IrGraph *g, const PassOptions *opt) {
  const char *loss = opt && opt->loss ? opt->loss : "loss";
  int32_t y = ir_graph_output(g, loss);
  if (y == IR_NONE) return ir_graph_fail(g, "autodiff: no output named '%s'", loss);
  int32_t n = 0, *wrt = base_xmalloc((size_t)(g->nvalues + 1) * sizeof *wrt);
  for (int32_t i = 0; opt && i < opt->nwrt; i++) {
    wrt[n] = ir_graph_find(g, IR_PARAMETER, opt->wrt[i]);
    if (wrt[n++] == IR_NONE)
      return free(wrt), ir_graph_fail(g, "autodiff: no parameter '%s'", opt->wrt[i]);
  }
  for (int32_t i = 0; (!opt || !opt->nwrt) && i < g->nvalues; i++)
    if (g->values[i].op == IR_PARAMETER) wrt[n++] = i;
  int32_t *grads = base_xmalloc((size_t)(n + 1) * sizeof *grads);
  int st = pass_autodiff_values(g, y, n, wrt, grads);
  for (int32_t i = 0; st == IR_OK && i < n; i++) st = ad_output(g, wrt[i], grads[i]);
  free(wrt);
  free(grads);
  return st;
}
