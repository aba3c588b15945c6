/* shape.c: the shape and dtype rule of every op, one small function per rule named in ops.def.
 *
 * The builder runs a rule to compute a new value's type; the verifier runs the same rule again and
 * compares, so the two can never disagree. A rule reads the operands from the graph and the
 * attributes (and, for ops whose type is given rather than implied, the declared dtype/shape) from
 * the value, which need not be in the graph yet. Operand indices are checked before a rule runs.
 */
#include "ir/ir.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

typedef int (*ShapeRule)(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                         size_t cap);

static int fail(char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return IR_ERR;
}

static const IrValue *operand(const IrGraph *g, const IrValue *v, int32_t i) {
  return &g->values[v->ops[i]];
}

/* Writes "[2,3]" for diagnostics into a caller buffer. */
static const char *shape_str(const IrShape *s, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int32_t i = 0; i < s->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)s->dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

static int check_declared(const IrValue *v, char *msg, size_t cap) {
  const IrShape *s = &v->shape;
  if (s->rank < 0 || s->rank > IR_MAX_RANK)
    return fail(msg, cap, "rank %d outside 0..%d", s->rank, IR_MAX_RANK);
  if ((unsigned)v->dtype >= DT_COUNT) return fail(msg, cap, "unknown dtype %d", (int)v->dtype);
  int64_t n = 1;
  for (int32_t i = 0; i < s->rank; i++) {
    if (s->dims[i] < 0) return fail(msg, cap, "dim %d is %lld", i, (long long)s->dims[i]);
    if (s->dims[i] > 0 && n > ((int64_t)1 << 62) / s->dims[i])
      return fail(msg, cap, "too many elements");
    n *= s->dims[i];
  }
  return IR_OK;
}

/* axes lists: each axis in [0, rank), no repeats; strictly increasing if asked */
static int check_axes(const IrDims *d, int32_t rank, bool increasing, const char *what, char *msg,
                      size_t cap) {
  for (int32_t i = 0; i < d->n; i++) {
    if (d->v[i] < 0 || d->v[i] >= rank)
      return fail(msg, cap, "%s[%d] = %lld outside 0..%d", what, i, (long long)d->v[i], rank - 1);
    for (int32_t j = 0; j < i; j++) {
      if (d->v[j] == d->v[i])
        return fail(msg, cap, "%s repeats axis %lld", what, (long long)d->v[i]);
      if (increasing && d->v[j] > d->v[i]) return fail(msg, cap, "%s must increase", what);
    }
  }
  return IR_OK;
}

/* ---- leaves ---- */

static int shape_leaf(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                      size_t cap) {
  (void)g;
  if (check_declared(v, msg, cap)) return IR_ERR;
  if ((v->op == IR_PARAMETER || v->op == IR_INPUT) && (!v->name || !v->name[0]))
    return fail(msg, cap, "%s needs a name", ir_op_name(v->op));
  *dt = v->dtype;
  *s = v->shape;
  return IR_OK;
}

static int shape_iota(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                      size_t cap) {
  if (shape_leaf(g, v, dt, s, msg, cap)) return IR_ERR;
  if (v->attr.axis < 0 || v->attr.axis >= s->rank)
    return fail(msg, cap, "axis %lld outside 0..%d", (long long)v->attr.axis, s->rank - 1);
  return IR_OK;
}

/* ---- elementwise ---- */

static int shape_unary(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                       size_t cap) {
  const IrValue *x = operand(g, v, 0);
  if (!ir_dtype_is_float(x->dtype) && v->op != IR_NEG && v->op != IR_ABS &&
      v->op != IR_STOP_GRADIENT)
    return fail(msg, cap, "needs a float operand, got %s", ir_dtype_name(x->dtype));
  *dt = x->dtype;
  *s = x->shape;
  return IR_OK;
}

static int same_type(const IrValue *a, const IrValue *b, char *msg, size_t cap) {
  char sa[128], sb[128];
  if (a->dtype != b->dtype)
    return fail(msg, cap, "operand dtypes differ: %s vs %s", ir_dtype_name(a->dtype),
                ir_dtype_name(b->dtype));
  if (!ir_shape_eq(&a->shape, &b->shape))
    return fail(msg, cap, "operand shapes differ: %s vs %s", shape_str(&a->shape, sa, sizeof sa),
                shape_str(&b->shape, sb, sizeof sb));
  return IR_OK;
}

static int shape_binary(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                        size_t cap) {
  const IrValue *a = operand(g, v, 0), *b = operand(g, v, 1);
  if (same_type(a, b, msg, cap)) return IR_ERR;
  *dt = a->dtype;
  *s = a->shape;
  return IR_OK;
}

static int shape_select(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                        size_t cap) {
  const IrValue *p = operand(g, v, 0), *a = operand(g, v, 1), *b = operand(g, v, 2);
  char sp[128], sa[128];
  if (same_type(a, b, msg, cap)) return IR_ERR;
  if (!ir_shape_eq(&p->shape, &a->shape))
    return fail(msg, cap, "predicate shape %s differs from %s", shape_str(&p->shape, sp, sizeof sp),
                shape_str(&a->shape, sa, sizeof sa));
  *dt = a->dtype;
  *s = a->shape;
  return IR_OK;
}

static int shape_cast(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                      size_t cap) {
  if ((unsigned)v->dtype >= DT_COUNT) return fail(msg, cap, "unknown dtype %d", (int)v->dtype);
  *dt = v->dtype;
  *s = operand(g, v, 0)->shape;
  return IR_OK;
}

/* ---- data movement ---- */

static int shape_broadcast(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                           size_t cap) {
  const IrValue *x = operand(g, v, 0);
  const IrDims *bd = &v->attr.axes;
  if (check_declared(v, msg, cap)) return IR_ERR;
  if (bd->n != x->shape.rank)
    return fail(msg, cap, "%d bdims for an operand of rank %d", bd->n, x->shape.rank);
  if (check_axes(bd, v->shape.rank, true, "bdims", msg, cap)) return IR_ERR;
  for (int32_t i = 0; i < bd->n; i++) {
    int64_t in = x->shape.dims[i], out = v->shape.dims[bd->v[i]];
    if (in != 1 && in != out)
      return fail(msg, cap, "operand dim %d (%lld) cannot broadcast to dim %lld (%lld)", i,
                  (long long)in, (long long)bd->v[i], (long long)out);
  }
  *dt = x->dtype;
  *s = v->shape;
  return IR_OK;
}

static int shape_reshape(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                         size_t cap) {
  const IrValue *x = operand(g, v, 0);
  char sa[128], sb[128];
  if (check_declared(v, msg, cap)) return IR_ERR;
  if (ir_shape_numel(&x->shape) != ir_shape_numel(&v->shape))
    return fail(msg, cap, "cannot reshape %s to %s", shape_str(&x->shape, sa, sizeof sa),
                shape_str(&v->shape, sb, sizeof sb));
  *dt = x->dtype;
  *s = v->shape;
  return IR_OK;
}

static int shape_transpose(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                           size_t cap) {
  const IrValue *x = operand(g, v, 0);
  const IrDims *p = &v->attr.axes;
  if (p->n != x->shape.rank)
    return fail(msg, cap, "perm has %d entries for rank %d", p->n, x->shape.rank);
  if (check_axes(p, x->shape.rank, false, "perm", msg, cap)) return IR_ERR;
  s->rank = x->shape.rank;
  for (int32_t i = 0; i < s->rank; i++) s->dims[i] = x->shape.dims[p->v[i]];
  *dt = x->dtype;
  return IR_OK;
}

static int shape_slice(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                       size_t cap) {
  const IrValue *x = operand(g, v, 0);
  const IrAttrs *a = &v->attr;
  if (a->lo.n != x->shape.rank || a->hi.n != x->shape.rank)
    return fail(msg, cap, "start/limit need %d entries", x->shape.rank);
  s->rank = x->shape.rank;
  for (int32_t i = 0; i < s->rank; i++) {
    if (a->lo.v[i] < 0 || a->lo.v[i] > a->hi.v[i] || a->hi.v[i] > x->shape.dims[i])
      return fail(msg, cap, "dim %d: [%lld, %lld) not within 0..%lld", i, (long long)a->lo.v[i],
                  (long long)a->hi.v[i], (long long)x->shape.dims[i]);
    s->dims[i] = a->hi.v[i] - a->lo.v[i];
  }
  *dt = x->dtype;
  return IR_OK;
}

static int shape_concat(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                        size_t cap) {
  const IrValue *x0 = operand(g, v, 0);
  int64_t axis = v->attr.axis;
  if (axis < 0 || axis >= x0->shape.rank)
    return fail(msg, cap, "axis %lld outside 0..%d", (long long)axis, x0->shape.rank - 1);
  *s = x0->shape;
  for (int32_t i = 1; i < v->nops; i++) {
    const IrValue *x = operand(g, v, i);
    if (x->dtype != x0->dtype || x->shape.rank != x0->shape.rank)
      return fail(msg, cap, "operand %d dtype or rank differs from operand 0", i);
    for (int32_t d = 0; d < s->rank; d++)
      if (d != axis && x->shape.dims[d] != x0->shape.dims[d])
        return fail(msg, cap, "operand %d dim %d is %lld, operand 0 has %lld", i, d,
                    (long long)x->shape.dims[d], (long long)x0->shape.dims[d]);
    s->dims[axis] += x->shape.dims[axis];
  }
  *dt = x0->dtype;
  return IR_OK;
}

static int shape_pad(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                     size_t cap) {
  const IrValue *x = operand(g, v, 0);
  const IrAttrs *a = &v->attr;
  if (a->lo.n != x->shape.rank || a->hi.n != x->shape.rank)
    return fail(msg, cap, "low/high need %d entries", x->shape.rank);
  s->rank = x->shape.rank;
  for (int32_t i = 0; i < s->rank; i++) {
    if (a->lo.v[i] < 0 || a->hi.v[i] < 0) return fail(msg, cap, "negative padding in dim %d", i);
    s->dims[i] = x->shape.dims[i] + a->lo.v[i] + a->hi.v[i];
  }
  *dt = x->dtype;
  return IR_OK;
}

/* ---- reductions and contractions ---- */

static int shape_reduce(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                        size_t cap) {
  const IrValue *x = operand(g, v, 0);
  const IrDims *ax = &v->attr.axes;
  if (check_axes(ax, x->shape.rank, false, "axes", msg, cap)) return IR_ERR;
  s->rank = 0;
  for (int32_t d = 0; d < x->shape.rank; d++) {
    bool reduced = false;
    for (int32_t i = 0; i < ax->n; i++) reduced |= ax->v[i] == d;
    if (!reduced) s->dims[s->rank++] = x->shape.dims[d];
  }
  *dt = x->dtype;
  return IR_OK;
}

static bool dims_has(const IrDims *d, int64_t x) {
  for (int32_t i = 0; i < d->n; i++)
    if (d->v[i] == x) return true;
  return false;
}

/* Appends the dims of x not in batch or contract, in order. */
static void dot_free_dims(const IrShape *x, const IrDims *batch, const IrDims *contract,
                          IrShape *s) {
  for (int32_t d = 0; d < x->rank; d++)
    if (!dims_has(batch, d) && !dims_has(contract, d)) s->dims[s->rank++] = x->dims[d];
}

static int dot_check_side(const IrValue *x, const IrDims *b, const IrDims *c, const char *side,
                          char *msg, size_t cap) {
  char what[32];
  snprintf(what, sizeof what, "%s_batch", side);
  if (check_axes(b, x->shape.rank, false, what, msg, cap)) return IR_ERR;
  snprintf(what, sizeof what, "%s_contract", side);
  if (check_axes(c, x->shape.rank, false, what, msg, cap)) return IR_ERR;
  for (int32_t i = 0; i < c->n; i++)
    if (dims_has(b, c->v[i]))
      return fail(msg, cap, "%s dim %lld is both batch and contracting", side, (long long)c->v[i]);
  return IR_OK;
}

static int shape_dot(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                     size_t cap) {
  const IrValue *a = operand(g, v, 0), *b = operand(g, v, 1);
  const IrAttrs *at = &v->attr;
  if (a->dtype != b->dtype) return fail(msg, cap, "operand dtypes differ");
  if (at->lb.n != at->rb.n || at->lc.n != at->rc.n)
    return fail(msg, cap, "batch (%d vs %d) or contracting (%d vs %d) dim counts differ", at->lb.n,
                at->rb.n, at->lc.n, at->rc.n);
  if (dot_check_side(a, &at->lb, &at->lc, "lhs", msg, cap) ||
      dot_check_side(b, &at->rb, &at->rc, "rhs", msg, cap))
    return IR_ERR;
  for (int32_t i = 0; i < at->lb.n; i++)
    if (a->shape.dims[at->lb.v[i]] != b->shape.dims[at->rb.v[i]])
      return fail(msg, cap, "batch dim %d: lhs has %lld, rhs has %lld", i,
                  (long long)a->shape.dims[at->lb.v[i]], (long long)b->shape.dims[at->rb.v[i]]);
  for (int32_t i = 0; i < at->lc.n; i++)
    if (a->shape.dims[at->lc.v[i]] != b->shape.dims[at->rc.v[i]])
      return fail(msg, cap, "contracting dim %d: lhs dim %lld has %lld, rhs dim %lld has %lld", i,
                  (long long)at->lc.v[i], (long long)a->shape.dims[at->lc.v[i]],
                  (long long)at->rc.v[i], (long long)b->shape.dims[at->rc.v[i]]);
  int32_t rank = a->shape.rank + b->shape.rank - at->lb.n - 2 * at->lc.n;
  if (rank > IR_MAX_RANK) return fail(msg, cap, "result rank %d > %d", rank, IR_MAX_RANK);
  s->rank = 0;
  for (int32_t i = 0; i < at->lb.n; i++) s->dims[s->rank++] = a->shape.dims[at->lb.v[i]];
  dot_free_dims(&a->shape, &at->lb, &at->lc, s);
  dot_free_dims(&b->shape, &at->rb, &at->rc, s);
  /* bf16 (f16) operands may keep their f32 accumulator as the result: the value says f32 */
  bool widen = v->dtype == DT_F32 && (a->dtype == DT_BF16 || a->dtype == DT_F16);
  *dt = widen ? DT_F32 : a->dtype;
  return IR_OK;
}

/* ---- dot_general as a GEMM ---- */

static int64_t dims_prod(const IrShape *s, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t d = from; d < to; d++) p *= s->dims[d];
  return p;
}

/* One operand: batch dims [0, nb) in order, contracting dims c consecutive and in order, right
 * after the batch dims or at the end. *kfirst: they come first (and are not also last). */
static bool gemm_side(const IrShape *s, const IrDims *b, const IrDims *c, bool *kfirst) {
  for (int32_t k = 0; k < b->n; k++)
    if (b->v[k] != k) return false;
  for (int32_t k = 1; k < c->n; k++)
    if (c->v[k] != c->v[0] + k) return false;
  *kfirst = false;
  if (c->n == 0) return true;
  bool last = c->v[c->n - 1] == s->rank - 1, first = c->v[0] == b->n;
  *kfirst = !last;
  return last || first;
}

bool ir_dot_sgemm(IrDType dt, const IrShape *lhs, const IrShape *rhs, const IrAttrs *a,
                  IrGemm *out) {
  bool a_kfirst, b_kfirst;
  if (dt != DT_F32 || !gemm_side(lhs, &a->lb, &a->lc, &a_kfirst) ||
      !gemm_side(rhs, &a->rb, &a->rc, &b_kfirst))
    return false;
  int32_t nb = a->lb.n;
  IrGemm L = {.batch = dims_prod(lhs, 0, nb), .k = 1};
  for (int32_t k = 0; k < a->lc.n; k++) L.k *= lhs->dims[a->lc.v[k]];
  if (L.k <= 0) return false;
  L.m = dims_prod(lhs, nb, lhs->rank) / L.k;
  L.n = dims_prod(rhs, nb, rhs->rank) / L.k;
  L.ta = a_kfirst;                 /* lhs (K, M) */
  L.tb = !b_kfirst && a->rc.n > 0; /* rhs (N, K) */
  if (out) *out = L;
  return L.m < INT_MAX && L.n < INT_MAX && L.k < INT_MAX;
}

/* ---- embeddings and top-k ---- */

static int shape_gather(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                        size_t cap) {
  const IrValue *t = operand(g, v, 0), *idx = operand(g, v, 1);
  if (idx->dtype != DT_I32) return fail(msg, cap, "indices must be i32");
  if (t->shape.rank < 1) return fail(msg, cap, "table must have rank >= 1");
  if (idx->shape.rank + t->shape.rank - 1 > IR_MAX_RANK)
    return fail(msg, cap, "result rank too big");
  *s = idx->shape;
  for (int32_t d = 1; d < t->shape.rank; d++) s->dims[s->rank++] = t->shape.dims[d];
  *dt = t->dtype;
  return IR_OK;
}

static int shape_scatter(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                         size_t cap) {
  const IrValue *idx = operand(g, v, 0), *u = operand(g, v, 1);
  if (idx->dtype != DT_I32) return fail(msg, cap, "indices must be i32");
  if (v->attr.k < 0) return fail(msg, cap, "rows = %lld", (long long)v->attr.k);
  if (u->shape.rank < idx->shape.rank || u->shape.rank - idx->shape.rank + 1 > IR_MAX_RANK)
    return fail(msg, cap, "updates rank %d does not fit indices rank %d", u->shape.rank,
                idx->shape.rank);
  for (int32_t d = 0; d < idx->shape.rank; d++)
    if (u->shape.dims[d] != idx->shape.dims[d])
      return fail(msg, cap, "updates dim %d is %lld, indices have %lld", d,
                  (long long)u->shape.dims[d], (long long)idx->shape.dims[d]);
  s->rank = 1;
  s->dims[0] = v->attr.k;
  for (int32_t d = idx->shape.rank; d < u->shape.rank; d++) s->dims[s->rank++] = u->shape.dims[d];
  *dt = u->dtype;
  return IR_OK;
}

static int shape_top_k(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                       size_t cap) {
  const IrValue *x = operand(g, v, 0);
  if (x->shape.rank < 1) return fail(msg, cap, "operand must have rank >= 1");
  int64_t last = x->shape.dims[x->shape.rank - 1];
  if (v->attr.k < 1 || v->attr.k > last)
    return fail(msg, cap, "k = %lld outside 1..%lld", (long long)v->attr.k, (long long)last);
  *s = x->shape;
  s->dims[s->rank - 1] = v->attr.k;
  *dt = DT_I32;
  return IR_OK;
}

/* ---- fused attention ---- */

/* Query problems per key problem: q (..., N, Tq, H) against k, v (..., K, Tk, H) whose other
 * dims match, N a multiple of K (grouped-query attention: query head n reads key head n / G); 1
 * for k and v with the query's heads. 0 when the shapes do not fit. Tq and Tk are checked by the
 * shape rule (equal, or Tq <= Tk with query positions). */
int64_t ir_attention_group(const IrShape *q, const IrShape *k) {
  int32_t r = q->rank;
  if (r < 2 || k->rank != r) return 0;
  for (int32_t d = 0; d < r; d++)
    if (d != r - 3 && d != r - 2 && q->dims[d] != k->dims[d]) return 0;
  if (r == 2) return 1;
  if (k->dims[r - 3] <= 0 || q->dims[r - 3] % k->dims[r - 3]) return 0;
  return q->dims[r - 3] / k->dims[r - 3];
}

static int attention_operands(const IrGraph *g, const IrValue *v, char *msg, size_t cap) {
  int32_t base = v->op == IR_ATTENTION ? 3 : 4;
  if (v->nops != base && v->nops != base + 1)
    return fail(msg, cap, "%d operands, expected %d, or %d with the query positions", v->nops, base,
                base + 1);
  const IrValue *q = operand(g, v, 0), *k = operand(g, v, 1);
  if (!ir_dtype_is_float(q->dtype)) return fail(msg, cap, "operands must be floating point");
  if (q->shape.rank < 2) return fail(msg, cap, "operands must be (..., T, H), rank >= 2");
  for (int32_t i = 1; i < base; i++) {
    const IrValue *x = operand(g, v, i);
    const IrShape *want = i == 3 ? &q->shape : &k->shape;
    if (x->dtype != q->dtype || !ir_shape_eq(&x->shape, want))
      return fail(msg, cap, "operand %d must have the shape and dtype of the %s", i,
                  i == 3 ? "query" : "keys");
  }
  if (!ir_attention_group(&q->shape, &k->shape))
    return fail(msg, cap,
                "keys must have the query's shape, or (..., K, T, H) with the query's "
                "(..., N, T, H) a multiple N of K heads");
  int32_t r = q->shape.rank;
  int64_t tq = q->shape.dims[r - 2], tk = k->shape.dims[r - 2];
  if (v->nops == base) {
    if (tq != tk)
      return fail(msg, cap, "%lld query rows against %lld keys need the query positions",
                  (long long)tq, (long long)tk);
  } else {
    const IrValue *p = operand(g, v, base);
    if (p->dtype != DT_I32 || p->shape.rank != 1 || p->shape.dims[0] != tq)
      return fail(msg, cap, "operand %d (the query positions) must be i32 (%lld)", base,
                  (long long)tq);
    if (tq > tk)
      return fail(msg, cap, "%lld query rows against %lld keys: at most one a key", (long long)tq,
                  (long long)tk);
  }
  if (v->attr.k != 0 && v->attr.k != 1)
    return fail(msg, cap, "causal = %lld, expected 0 or 1", (long long)v->attr.k);
  if (!isfinite(v->attr.value)) return fail(msg, cap, "the scale must be finite");
  return IR_OK;
}

static int shape_attention(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                           size_t cap) {
  if (attention_operands(g, v, msg, cap)) return IR_ERR;
  *s = operand(g, v, 0)->shape;
  *dt = operand(g, v, 0)->dtype;
  return IR_OK;
}

/* (3, ..., Tk, H): dq, dk, dv stacked; grouped (G > 1), (..., K, G + 2, Tk, H): per key head
 * its G query heads' dq, then its dk and dv (ir_attention_grad_at). dq fills rows [0, Tq) of
 * its slot, zeros the rest. */
static int shape_attention_grad(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s,
                                char *msg, size_t cap) {
  if (attention_operands(g, v, msg, cap)) return IR_ERR;
  const IrShape *q = &operand(g, v, 0)->shape, *k = &operand(g, v, 1)->shape;
  if (q->rank + 1 > IR_MAX_RANK) return fail(msg, cap, "result rank too big");
  int64_t G = ir_attention_group(q, k);
  s->rank = q->rank + 1;
  if (G == 1) {
    s->dims[0] = 3;
    for (int32_t d = 0; d < q->rank; d++) s->dims[d + 1] = k->dims[d];
  } else {
    for (int32_t d = 0, o = 0; d < q->rank; d++) {
      s->dims[o++] = k->dims[d];
      if (d == q->rank - 3) s->dims[o++] = G + 2;
    }
  }
  *dt = operand(g, v, 0)->dtype;
  return IR_OK;
}

/* ---- collectives ---- */

int64_t ir_mesh_group_size(const IrMesh *m, const IrAttrs *a) {
  int64_t n = 1;
  for (int32_t i = 0; i < a->nmesh; i++) {
    int k = ir_mesh_axis(m, a->mesh[i]);
    if (k < 0) return -1;
    n *= m->sizes[k];
  }
  return n;
}

static int collective_group(const IrGraph *g, const IrValue *v, int64_t *n, char *msg, size_t cap) {
  const IrAttrs *a = &v->attr;
  if (a->nmesh < 1 || a->nmesh > IR_MAX_MESH_AXES)
    return fail(msg, cap, "needs 1..%d mesh axes", IR_MAX_MESH_AXES);
  for (int32_t i = 0; i < a->nmesh; i++) {
    if (ir_mesh_axis(&g->mesh, a->mesh[i]) < 0)
      return fail(msg, cap, "mesh axis '%s' is not in the graph's mesh", a->mesh[i]);
    for (int32_t j = 0; j < i; j++)
      if (strcmp(a->mesh[i], a->mesh[j]) == 0)
        return fail(msg, cap, "mesh axis '%s' repeats", a->mesh[i]);
  }
  *n = ir_mesh_group_size(&g->mesh, a);
  return IR_OK;
}

static int shape_all_reduce(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                            size_t cap) {
  int64_t n;
  if (collective_group(g, v, &n, msg, cap)) return IR_ERR;
  *dt = operand(g, v, 0)->dtype;
  *s = operand(g, v, 0)->shape;
  return IR_OK;
}

static int check_axis(const IrShape *s, int64_t axis, const char *what, char *msg, size_t cap) {
  if (axis < 0 || axis >= s->rank)
    return fail(msg, cap, "%s %lld outside 0..%d", what, (long long)axis, s->rank - 1);
  return IR_OK;
}

static int shape_all_gather(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                            size_t cap) {
  int64_t n;
  if (shape_all_reduce(g, v, dt, s, msg, cap) || collective_group(g, v, &n, msg, cap) ||
      check_axis(s, v->attr.axis, "axis", msg, cap))
    return IR_ERR;
  s->dims[v->attr.axis] *= n;
  return IR_OK;
}

static int shape_reduce_scatter(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s,
                                char *msg, size_t cap) {
  int64_t n;
  if (shape_all_reduce(g, v, dt, s, msg, cap) || collective_group(g, v, &n, msg, cap) ||
      check_axis(s, v->attr.axis, "axis", msg, cap))
    return IR_ERR;
  if (s->dims[v->attr.axis] % n)
    return fail(msg, cap, "axis %lld has %lld, not divisible by %lld devices",
                (long long)v->attr.axis, (long long)s->dims[v->attr.axis], (long long)n);
  s->dims[v->attr.axis] /= n;
  return IR_OK;
}

static int shape_all_to_all(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *s, char *msg,
                            size_t cap) {
  int64_t n, split = v->attr.axis, cat = v->attr.axis2;
  if (shape_all_reduce(g, v, dt, s, msg, cap) || collective_group(g, v, &n, msg, cap) ||
      check_axis(s, split, "split_axis", msg, cap) || check_axis(s, cat, "concat_axis", msg, cap))
    return IR_ERR;
  if (s->dims[split] % n)
    return fail(msg, cap, "split_axis %lld has %lld, not divisible by %lld devices",
                (long long)split, (long long)s->dims[split], (long long)n);
  s->dims[split] /= n;
  s->dims[cat] *= n;
  return IR_OK;
}

/* ---- dispatch ---- */

static const ShapeRule shape_rules[] = {
#define X(id, name, arity, flags, attrs, shape, grad) shape_##shape,
#include "ir/ops.def"
#undef X
};
static_assert(sizeof shape_rules / sizeof shape_rules[0] == IR_OP_COUNT, "shape_rules out of step");

int ir_value_infer(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *shape, char *msg,
                   size_t cap) {
  IrDType d = DT_F32;
  IrShape s = {0};
  if (shape_rules[v->op](g, v, &d, &s, msg, cap)) return IR_ERR;
  *dt = d;
  *shape = s;
  return IR_OK;
}
