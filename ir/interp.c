/* interp.c: the reference interpreter, the executable spec of every op.
 *
 * Plain loops over row-major index spaces, computed in double. After each op the result is rounded
 * to the value's dtype unless rounding is switched off (i32 results always round), so an
 * f32 graph sees f32 arithmetic and an f64 graph is exact enough for finite-difference checks.
 * A mesh of N devices runs in one process: values are computed for every device in lockstep, and a
 * collective reads the operands of all devices of its group. Every value of every device is kept
 * until the next run or ir_interp_free; this is a test oracle, not a runtime.
 */
#include "ir/ir.h"
#include "runtime/axrt.h" /* rt_mesh_coords: the one device numbering */

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct IrInterp {
  const IrGraph *g;
  IrMesh mesh;
  int64_t ndev;
  bool round;
  bool keep_all;  /* keep every value after a run (default); else only the outputs */
  double **vals;  /* (ndev * nvalues) results of the last run */
  double **bound; /* (ndev * nvalues) data bound to parameters and inputs */
  char error[IR_ERR_LEN];
};

static int fail(char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return IR_ERR;
}

/* ---- row-major index helpers ---- */

static void shape_strides(const IrShape *s, int64_t *st) {
  int64_t n = 1;
  for (int32_t i = s->rank - 1; i >= 0; i--) {
    st[i] = n;
    n *= s->dims[i];
  }
}

static void index_unravel(int64_t i, const IrShape *s, int64_t *idx) {
  for (int32_t d = s->rank - 1; d >= 0; d--) {
    idx[d] = s->dims[d] ? i % s->dims[d] : 0;
    i = s->dims[d] ? i / s->dims[d] : 0;
  }
}

static int64_t index_ravel(const int64_t *idx, const int64_t *st, int32_t rank) {
  int64_t off = 0;
  for (int32_t d = 0; d < rank; d++) off += idx[d] * st[d];
  return off;
}

/* Product of dims [from, to). */
static int64_t dims_prod(const IrShape *s, int32_t from, int32_t to) {
  int64_t n = 1;
  for (int32_t d = from; d < to; d++) n *= s->dims[d];
  return n;
}

/* Copies a block of len rows along axis: dst[.., dst_off + a, ..] = src[.., src_off + a, ..].
 * src and dst agree on every dim except axis. */
static void block_copy(const double *src, const IrShape *ss, double *dst, const IrShape *ds,
                       int32_t axis, int64_t src_off, int64_t dst_off, int64_t len) {
  int64_t outer = dims_prod(ss, 0, axis), inner = dims_prod(ss, axis + 1, ss->rank);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t a = 0; a < len; a++)
      memcpy(dst + ((o * ds->dims[axis] + dst_off + a) * inner),
             src + ((o * ss->dims[axis] + src_off + a) * inner), (size_t)inner * sizeof *dst);
}

/* ---- scalar semantics of elementwise ops ---- */

static double scalar_unary(IrOp op, double x) {
  switch (op) {
  case IR_NEG: return -x;
  case IR_EXP: return exp(x);
  case IR_LOG: return log(x);
  case IR_TANH: return tanh(x);
  case IR_SQRT: return sqrt(x);
  case IR_RSQRT: return 1.0 / sqrt(x);
  case IR_ABS: return fabs(x);
  case IR_SIN: return sin(x);
  case IR_COS: return cos(x);
  case IR_ERF: return erf(x);
  case IR_LOGISTIC: return 1.0 / (1.0 + exp(-x));
  case IR_STOP_GRADIENT: return x;
  default: return NAN;
  }
}

static double scalar_binary(IrOp op, IrDType dt, double a, double b) {
  switch (op) {
  case IR_ADD: return a + b;
  case IR_SUB: return a - b;
  case IR_MUL: return a * b;
  case IR_DIV: return dt == DT_I32 ? (b == 0 ? 0 : trunc(a / b)) : a / b;
  case IR_MAX: return a >= b || isnan(a) ? a : b;
  case IR_MIN: return a <= b || isnan(a) ? a : b;
  case IR_POW: return pow(a, b);
  case IR_EQ: return a == b;
  case IR_NE: return a != b;
  case IR_LT: return a < b;
  case IR_LE: return a <= b;
  case IR_GT: return a > b;
  case IR_GE: return a >= b;
  default: return NAN;
  }
}

/* ---- per-op evaluation: out has numel(v) doubles, args[i] the operands' data ---- */

typedef struct EvalCtx {
  const IrGraph *g;
  const IrValue *v;
  const double *const *args;
  double *out;
  int64_t n; /* numel(v) */
  char *msg;
  size_t cap;
  bool round; /* results rounded to their dtype (and products' operands to the matmul policy) */
} EvalCtx;

static const IrShape *arg_shape(const EvalCtx *c, int32_t i) {
  return &c->g->values[c->v->ops[i]].shape;
}

static int eval_constant(EvalCtx *c) {
  for (int64_t i = 0; i < c->n; i++)
    c->out[i] = c->v->attr.data ? c->v->attr.data[i] : c->v->attr.value;
  return IR_OK;
}

static int eval_iota(EvalCtx *c) {
  int64_t idx[IR_MAX_RANK];
  for (int64_t i = 0; i < c->n; i++) {
    index_unravel(i, &c->v->shape, idx);
    c->out[i] = (double)idx[c->v->attr.axis];
  }
  return IR_OK;
}

static int eval_unary(EvalCtx *c) {
  for (int64_t i = 0; i < c->n; i++) c->out[i] = scalar_unary(c->v->op, c->args[0][i]);
  return IR_OK;
}

static int eval_binary(EvalCtx *c) {
  IrDType dt = c->g->values[c->v->ops[0]].dtype;
  for (int64_t i = 0; i < c->n; i++)
    c->out[i] = scalar_binary(c->v->op, dt, c->args[0][i], c->args[1][i]);
  return IR_OK;
}

static int eval_select(EvalCtx *c) {
  for (int64_t i = 0; i < c->n; i++) c->out[i] = c->args[0][i] != 0 ? c->args[1][i] : c->args[2][i];
  return IR_OK;
}

static int eval_copy(EvalCtx *c) { /* cast, reshape: same elements in the same order */
  if (c->n) memcpy(c->out, c->args[0], (size_t)c->n * sizeof *c->out);
  return IR_OK;
}

static int eval_broadcast(EvalCtx *c) {
  const IrShape *xs = arg_shape(c, 0);
  int64_t st[IR_MAX_RANK], idx[IR_MAX_RANK], in[IR_MAX_RANK];
  shape_strides(xs, st);
  for (int64_t i = 0; i < c->n; i++) {
    index_unravel(i, &c->v->shape, idx);
    for (int32_t d = 0; d < xs->rank; d++) in[d] = xs->dims[d] == 1 ? 0 : idx[c->v->attr.axes.v[d]];
    c->out[i] = c->args[0][index_ravel(in, st, xs->rank)];
  }
  return IR_OK;
}

static int eval_transpose(EvalCtx *c) {
  const IrShape *xs = arg_shape(c, 0);
  int64_t st[IR_MAX_RANK], idx[IR_MAX_RANK], in[IR_MAX_RANK];
  shape_strides(xs, st);
  for (int64_t i = 0; i < c->n; i++) {
    index_unravel(i, &c->v->shape, idx);
    for (int32_t d = 0; d < xs->rank; d++) in[c->v->attr.axes.v[d]] = idx[d];
    c->out[i] = c->args[0][index_ravel(in, st, xs->rank)];
  }
  return IR_OK;
}

static int eval_slice(EvalCtx *c) {
  const IrShape *xs = arg_shape(c, 0);
  int64_t st[IR_MAX_RANK], idx[IR_MAX_RANK];
  shape_strides(xs, st);
  for (int64_t i = 0; i < c->n; i++) {
    index_unravel(i, &c->v->shape, idx);
    for (int32_t d = 0; d < xs->rank; d++) idx[d] += c->v->attr.lo.v[d];
    c->out[i] = c->args[0][index_ravel(idx, st, xs->rank)];
  }
  return IR_OK;
}

static int eval_concat(EvalCtx *c) {
  int32_t axis = (int32_t)c->v->attr.axis;
  int64_t off = 0;
  for (int32_t k = 0; k < c->v->nops; k++) {
    const IrShape *xs = arg_shape(c, k);
    block_copy(c->args[k], xs, c->out, &c->v->shape, axis, 0, off, xs->dims[axis]);
    off += xs->dims[axis];
  }
  return IR_OK;
}

static int eval_pad(EvalCtx *c) {
  const IrShape *xs = arg_shape(c, 0);
  int64_t st[IR_MAX_RANK], idx[IR_MAX_RANK];
  shape_strides(&c->v->shape, st);
  for (int64_t i = 0; i < c->n; i++) c->out[i] = c->v->attr.value;
  for (int64_t i = 0, n = ir_shape_numel(xs); i < n; i++) {
    index_unravel(i, xs, idx);
    for (int32_t d = 0; d < xs->rank; d++) idx[d] += c->v->attr.lo.v[d];
    c->out[index_ravel(idx, st, xs->rank)] = c->args[0][i];
  }
  return IR_OK;
}

/* Output index of an operand index: drop the reduced axes. */
static int64_t reduce_target(const IrValue *v, const IrShape *xs, const int64_t *idx,
                             const int64_t *ost) {
  int64_t off = 0;
  for (int32_t d = 0, o = 0; d < xs->rank; d++) {
    bool reduced = false;
    for (int32_t k = 0; k < v->attr.axes.n; k++) reduced |= v->attr.axes.v[k] == d;
    if (!reduced) off += idx[d] * ost[o++];
  }
  return off;
}

static int eval_reduce(EvalCtx *c) {
  const IrShape *xs = arg_shape(c, 0);
  bool is_max = c->v->op == IR_REDUCE_MAX;
  int64_t ost[IR_MAX_RANK], idx[IR_MAX_RANK];
  shape_strides(&c->v->shape, ost);
  for (int64_t i = 0; i < c->n; i++) c->out[i] = is_max ? -INFINITY : 0.0;
  for (int64_t i = 0, n = ir_shape_numel(xs); i < n; i++) {
    index_unravel(i, xs, idx);
    double *o = &c->out[reduce_target(c->v, xs, idx, ost)];
    double x = c->args[0][i];
    *o = is_max ? (x > *o || isnan(x) ? x : *o) : *o + x;
  }
  return IR_OK;
}

/* Scatters the out index of a dot into lhs and rhs indices (contracting entries left alone). */
static void dot_split_index(const IrValue *v, const IrShape *as, const IrShape *bs,
                            const int64_t *idx, int64_t *ai, int64_t *bi) {
  const IrAttrs *a = &v->attr;
  int32_t o = 0;
  for (int32_t k = 0; k < a->lb.n; k++, o++) {
    ai[a->lb.v[k]] = idx[o];
    bi[a->rb.v[k]] = idx[o];
  }
  for (int32_t d = 0; d < as->rank; d++) {
    bool used = false;
    for (int32_t k = 0; k < a->lb.n; k++) used |= a->lb.v[k] == d;
    for (int32_t k = 0; k < a->lc.n; k++) used |= a->lc.v[k] == d;
    if (!used) ai[d] = idx[o++];
  }
  for (int32_t d = 0; d < bs->rank; d++) {
    bool used = false;
    for (int32_t k = 0; k < a->rb.n; k++) used |= a->rb.v[k] == d;
    for (int32_t k = 0; k < a->rc.n; k++) used |= a->rc.v[k] == d;
    if (!used) bi[d] = idx[o++];
  }
}

static int eval_dot(EvalCtx *c) {
  const IrShape *as = arg_shape(c, 0), *bs = arg_shape(c, 1);
  const IrAttrs *a = &c->v->attr;
  IrShape cs = {.rank = a->lc.n};
  for (int32_t k = 0; k < a->lc.n; k++) cs.dims[k] = as->dims[a->lc.v[k]];
  int64_t ast[IR_MAX_RANK], bst[IR_MAX_RANK], idx[IR_MAX_RANK], ai[IR_MAX_RANK], bi[IR_MAX_RANK],
      ci[IR_MAX_RANK];
  shape_strides(as, ast);
  shape_strides(bs, bst);
  /* the matmul policy: f32 operands rounded to TF32 (bf16 ones are TF32 values already) */
  bool tf32 =
      c->round && c->g->matmul == IR_MATMUL_TF32 && c->g->values[c->v->ops[0]].dtype == DT_F32;
  for (int64_t i = 0; i < c->n; i++) {
    index_unravel(i, &c->v->shape, idx);
    dot_split_index(c->v, as, bs, idx, ai, bi);
    double sum = 0;
    for (int64_t j = 0, nc = ir_shape_numel(&cs); j < nc; j++) {
      index_unravel(j, &cs, ci);
      for (int32_t k = 0; k < a->lc.n; k++) {
        ai[a->lc.v[k]] = ci[k];
        bi[a->rc.v[k]] = ci[k];
      }
      double x = c->args[0][index_ravel(ai, ast, as->rank)];
      double y = c->args[1][index_ravel(bi, bst, bs->rank)];
      sum += tf32 ? ir_tf32_round(x) * ir_tf32_round(y) : x * y;
    }
    c->out[i] = sum;
  }
  return IR_OK;
}

static int eval_gather(EvalCtx *c) {
  const IrShape *ts = arg_shape(c, 0), *is = arg_shape(c, 1);
  int64_t row = dims_prod(ts, 1, ts->rank);
  for (int64_t i = 0, n = ir_shape_numel(is); i < n; i++) {
    double r = c->args[1][i];
    if (!(r >= 0 && r < (double)ts->dims[0]))
      return fail(c->msg, c->cap, "index %g at position %lld outside 0..%lld", r, (long long)i,
                  (long long)ts->dims[0] - 1);
    if (row) memcpy(c->out + i * row, c->args[0] + (int64_t)r * row, (size_t)row * sizeof *c->out);
  }
  return IR_OK;
}

static int eval_scatter(EvalCtx *c) {
  const IrShape *is = arg_shape(c, 0);
  int64_t row = dims_prod(&c->v->shape, 1, c->v->shape.rank);
  for (int64_t i = 0; i < c->n; i++) c->out[i] = 0;
  for (int64_t i = 0, n = ir_shape_numel(is); i < n; i++) {
    double r = c->args[0][i];
    if (!(r >= 0 && r < (double)c->v->attr.k))
      return fail(c->msg, c->cap, "index %g at position %lld outside 0..%lld", r, (long long)i,
                  (long long)c->v->attr.k - 1);
    for (int64_t j = 0; j < row; j++) c->out[(int64_t)r * row + j] += c->args[1][i * row + j];
  }
  return IR_OK;
}

/* Descending by value, ties to the lower index; a NaN counts as largest. */
static bool top_k_before(double a, int64_t ia, double b, int64_t ib) {
  if (isnan(a) != isnan(b)) return isnan(a);
  if (a != b && !isnan(a)) return a > b;
  return ia < ib;
}

static int eval_top_k(EvalCtx *c) {
  const IrShape *xs = arg_shape(c, 0);
  int64_t len = xs->dims[xs->rank - 1], k = c->v->attr.k, rows = dims_prod(xs, 0, xs->rank - 1);
  for (int64_t r = 0; r < rows; r++) {
    const double *x = c->args[0] + r * len;
    double *o = c->out + r * k;
    for (int64_t j = 0; j < k; j++) { /* selection: the best index not yet taken */
      int64_t best = -1;
      for (int64_t i = 0; i < len; i++) {
        bool taken = false;
        for (int64_t t = 0; t < j; t++) taken |= (int64_t)o[t] == i;
        if (!taken && (best < 0 || top_k_before(x[i], i, x[best], best))) best = i;
      }
      o[j] = (double)best;
    }
  }
  return IR_OK;
}

/* Attention probabilities of one problem, P (Tq, Tk): softmax(scale * q k^T) per row, masked
 * entries exactly 0; with causal, row i sees keys j <= pos[i] (pos NULL: i), clamped to the
 * keys there are. */
static void attention_probs(const double *q, const double *k, int64_t Tq, int64_t Tk, int64_t H,
                            bool causal, const double *pos, double scale, double *P) {
  for (int64_t i = 0; i < Tq; i++) {
    double at = pos ? pos[i] : (double)i;
    int64_t n = !causal ? Tk : at < 0 ? 1 : at >= (double)Tk ? Tk : (int64_t)at + 1;
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; j++) {
      double sij = 0;
      for (int64_t d = 0; d < H; d++) sij += q[i * H + d] * k[j * H + d];
      P[i * Tk + j] = scale * sij;
      m = fmax(m, P[i * Tk + j]);
    }
    for (int64_t j = 0; j < n; j++) l += P[i * Tk + j] = exp(P[i * Tk + j] - m);
    for (int64_t j = 0; j < Tk; j++) P[i * Tk + j] = j < n ? P[i * Tk + j] / l : 0;
  }
}

/* out (..., Tq, H) = P v, or with dout a fourth operand the (3, ..., Tk, H) gradients:
 * dv = P^T dout, dS = P (dP - rowsum(P dP)) with dP = dout v^T, dq = scale dS k,
 * dk = scale dS^T q; dq in the first Tq rows of its slot. */
static int eval_attention(EvalCtx *c) {
  const IrShape *qs = arg_shape(c, 0), *ks = arg_shape(c, 1);
  int64_t Tq = qs->dims[qs->rank - 2], Tk = ks->dims[ks->rank - 2], H = qs->dims[qs->rank - 1];
  int64_t per = Tq * H, kper = Tk * H, nb = per ? ir_shape_numel(qs) / per : 0;
  bool causal = c->v->attr.k != 0, grad = c->v->op == IR_ATTENTION_GRAD;
  int32_t base = grad ? 4 : 3;
  const double *pos = c->v->nops > base ? c->args[base] : NULL;
  int64_t G = ir_attention_group(qs, ks);
  double scale = c->v->attr.value;
  double *P = malloc((size_t)(Tq * Tk * (grad ? 2 : 1) + 1) * sizeof *P), *dS = P + Tq * Tk;
  if (!P) /* sized by the model's sequence length: a user error, not a compiler bug */
    return fail(c->msg, c->cap, "out of memory for the %lld x %lld attention scores", (long long)Tq,
                (long long)Tk);
  memset(c->out, 0, (size_t)c->n * sizeof *c->out);
  for (int64_t b = 0; b < nb; b++) {
    int64_t kb = b / G, at[3];
    ir_attention_grad_at(nb, G, b, &at[0], &at[1], &at[2]);
    const double *q = c->args[0] + b * per, *k = c->args[1] + kb * kper,
                 *v = c->args[2] + kb * kper;
    attention_probs(q, k, Tq, Tk, H, causal, pos, scale, P);
    if (!grad) {
      double *o = c->out + b * per;
      for (int64_t i = 0; i < Tq; i++)
        for (int64_t j = 0; j < Tk; j++)
          for (int64_t d = 0; d < H; d++) o[i * H + d] += P[i * Tk + j] * v[j * H + d];
      continue;
    }
    const double *go = c->args[3] + b * per;
    double *dq = c->out + at[0] * kper, *dk = c->out + at[1] * kper, *dv = c->out + at[2] * kper;
    for (int64_t i = 0; i < Tq; i++) {
      double D = 0;
      for (int64_t j = 0; j < Tk; j++) {
        double dp = 0;
        for (int64_t d = 0; d < H; d++) dp += go[i * H + d] * v[j * H + d];
        dS[i * Tk + j] = dp;
        D += P[i * Tk + j] * dp;
      }
      for (int64_t j = 0; j < Tk; j++) dS[i * Tk + j] = P[i * Tk + j] * (dS[i * Tk + j] - D);
    }
    for (int64_t i = 0; i < Tq; i++)
      for (int64_t j = 0; j < Tk; j++)
        for (int64_t d = 0; d < H; d++) {
          dq[i * H + d] += scale * dS[i * Tk + j] * k[j * H + d];
          dk[j * H + d] += scale * dS[i * Tk + j] * q[i * H + d];
          dv[j * H + d] += P[i * Tk + j] * go[i * H + d];
        }
  }
  free(P);
  return IR_OK;
}

static void eval_round(const IrValue *v, double *out, int64_t n, bool round) {
  if (!round && v->dtype != DT_I32) return;
  for (int64_t i = 0; i < n; i++) out[i] = ir_dtype_round(v->dtype, out[i]);
}

int ir_eval_value(const IrGraph *g, int32_t vi, const double *const *args, double *out, bool round,
                  char *msg, size_t cap) {
  const IrValue *v = &g->values[vi];
  EvalCtx c = {g, v, args, out, ir_shape_numel(&v->shape), msg, cap, round};
  int st;
  switch (v->op) {
  case IR_CONSTANT: st = eval_constant(&c); break;
  case IR_IOTA: st = eval_iota(&c); break;
  case IR_SELECT: st = eval_select(&c); break;
  case IR_CAST:
  case IR_RESHAPE: st = eval_copy(&c); break;
  case IR_BROADCAST: st = eval_broadcast(&c); break;
  case IR_TRANSPOSE: st = eval_transpose(&c); break;
  case IR_SLICE: st = eval_slice(&c); break;
  case IR_CONCAT: st = eval_concat(&c); break;
  case IR_PAD: st = eval_pad(&c); break;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX: st = eval_reduce(&c); break;
  case IR_DOT: st = eval_dot(&c); break;
  case IR_GATHER: st = eval_gather(&c); break;
  case IR_SCATTER_ADD: st = eval_scatter(&c); break;
  case IR_TOP_K_INDICES: st = eval_top_k(&c); break;
  case IR_ATTENTION:
  case IR_ATTENTION_GRAD: st = eval_attention(&c); break;
  default:
    if (ir_op_flags(v->op) & IR_ELEMENTWISE)
      st = v->nops == 1 ? eval_unary(&c) : eval_binary(&c);
    else
      st = fail(msg, cap, "%s is not evaluated per value", ir_op_name(v->op));
  }
  if (st == IR_OK) eval_round(v, out, c.n, round);
  return st;
}

/* ---- interpreter object ---- */

/* Records the latest error. */
static int interp_fail(IrInterp *it, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(it->error, sizeof it->error, fmt, ap);
  va_end(ap);
  return IR_ERR;
}

/* Value buffers are sized by the model's shapes, so running out of memory for one is reported
 * like any other error of the model (docs/design.md, "Errors and out-of-memory"). */
static int interp_oom(IrInterp *it, int32_t vi, int64_t n) {
  const IrValue *v = &it->g->values[vi];
  return interp_fail(it, "%%%d (%s) at %s: out of memory for %lld elements (%.3g GB)", vi,
                     ir_op_name(v->op), *v->origin ? v->origin : "?", (long long)n,
                     (double)n * sizeof(double) / 1e9);
}

static bool mesh_covers(const IrMesh *m, const IrMesh *gm) {
  for (int32_t i = 0; i < gm->naxes; i++) {
    int k = ir_mesh_axis(m, gm->names[i]);
    if (k < 0 || m->sizes[k] != gm->sizes[i]) return false;
  }
  return true;
}

IrInterp *ir_interp_new(const IrGraph *g, const IrMesh *mesh) {
  IrInterp *it = base_xcalloc(1, sizeof *it);
  it->g = g;
  it->mesh = mesh ? *mesh : g->mesh;
  it->ndev = ir_mesh_devices(&it->mesh);
  it->round = true;
  it->keep_all = true;
  size_t n = (size_t)it->ndev * (size_t)(g->nvalues ? g->nvalues : 1); /* ndev: the config's */
  it->vals = calloc(n, sizeof *it->vals);
  it->bound = calloc(n, sizeof *it->bound);
  if (!it->vals || !it->bound) {
    ir_interp_free(it);
    return NULL;
  }
  return it;
}

static void interp_clear(IrInterp *it, double **slots) {
  size_t n = (size_t)it->ndev * (size_t)it->g->nvalues;
  for (size_t i = 0; i < n; i++) {
    free(slots[i]);
    slots[i] = NULL;
  }
}

void ir_interp_free(IrInterp *it) {
  if (!it) return;
  if (it->vals) interp_clear(it, it->vals);
  if (it->bound) interp_clear(it, it->bound);
  free(it->vals);
  free(it->bound);
  free(it);
}

const char *ir_interp_error(const IrInterp *it) { return it->error[0] ? it->error : NULL; }
int64_t ir_interp_devices(const IrInterp *it) { return it->ndev; }
void ir_interp_set_rounding(IrInterp *it, bool round) { it->round = round; }
void ir_interp_set_keep_all(IrInterp *it, bool keep) { it->keep_all = keep; }

static double **slot(const IrInterp *it, double **slots, int64_t dev, int32_t v);

/* last[v]: the last value reading v, or nvalues for outputs (they are kept). */
static int32_t *last_reads(const IrGraph *g) {
  int32_t *last = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *last);
  for (int32_t v = 0; v < g->nvalues; v++) last[v] = v;
  for (int32_t v = 0; v < g->nvalues; v++)
    for (int32_t k = 0; k < g->values[v].nops; k++) last[g->values[v].ops[k]] = v;
  for (int32_t i = 0; i < g->noutputs; i++) last[g->outputs[i].value] = g->nvalues;
  return last;
}

/* Frees, on every device, the operands of v that nothing after v reads. */
static void release_dead(IrInterp *it, const int32_t *last, int32_t v) {
  const IrValue *val = &it->g->values[v];
  for (int32_t k = 0; k < val->nops; k++) {
    int32_t o = val->ops[k];
    if (last[o] != v) continue;
    for (int64_t d = 0; d < it->ndev; d++) {
      double **s = slot(it, it->vals, d, o);
      free(*s);
      *s = NULL;
    }
  }
}

static double **slot(const IrInterp *it, double **slots, int64_t dev, int32_t v) {
  return &slots[dev * it->g->nvalues + v];
}

static int interp_bind(IrInterp *it, int64_t dev, int32_t v, const double *data) {
  const IrValue *val = &it->g->values[v];
  int64_t n = ir_shape_numel(&val->shape);
  double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  if (!p) return interp_oom(it, v, n);
  for (int64_t i = 0; i < n; i++)
    p[i] = it->round || val->dtype == DT_I32 ? ir_dtype_round(val->dtype, data[i]) : data[i];
  double **s = slot(it, it->bound, dev, v);
  free(*s);
  *s = p;
  return IR_OK;
}

int ir_interp_set(IrInterp *it, int64_t device, const char *name, int32_t rank, const int64_t *dims,
                  const double *data) {
  int32_t v = ir_graph_find(it->g, IR_PARAMETER, name);
  if (v == IR_NONE) v = ir_graph_find(it->g, IR_INPUT, name);
  if (v == IR_NONE) return interp_fail(it, "no parameter or input named '%s'", name);
  if (device >= it->ndev)
    return interp_fail(it, "device %lld outside 0..%lld", (long long)device,
                       (long long)it->ndev - 1);
  IrShape s = ir_shape_make(rank < 0 || rank > IR_MAX_RANK ? 0 : rank, dims);
  if ((rank < 0 || rank > IR_MAX_RANK) || !ir_shape_eq(&s, &it->g->values[v].shape))
    return interp_fail(it, "'%s': data shape does not match the value's shape (rank %d)", name,
                       it->g->values[v].shape.rank);
  for (int64_t d = device < 0 ? 0 : device; d < (device < 0 ? it->ndev : device + 1); d++)
    if (interp_bind(it, d, v, data)) return IR_ERR;
  return IR_OK;
}

/* ---- collectives: groups of devices that differ only on the op's mesh axes ---- */

typedef struct Group {
  int64_t n;    /* group size */
  int64_t rank; /* this device's position in the group */
  int64_t member[4096];
} Group;

/* Members in group order: row-major over the op's axes in the order the op lists them. */
static void group_of(const IrMesh *m, const IrAttrs *a, int64_t dev, Group *gr) {
  int64_t c[IR_MAX_MESH_AXES], k[IR_MAX_MESH_AXES];
  rt_mesh_coords(m->naxes, m->sizes, dev, c);
  for (int32_t i = 0; i < a->nmesh; i++) k[i] = ir_mesh_axis(m, a->mesh[i]);
  gr->n = ir_mesh_group_size(m, a);
  gr->rank = 0;
  for (int32_t i = 0; i < a->nmesh; i++) gr->rank = gr->rank * m->sizes[k[i]] + c[k[i]];
  for (int64_t j = 0; j < gr->n; j++) {
    int64_t r = j;
    for (int32_t i = a->nmesh - 1; i >= 0; i--) {
      c[k[i]] = r % m->sizes[k[i]];
      r /= m->sizes[k[i]];
    }
    gr->member[j] = rt_mesh_device(m->naxes, m->sizes, c);
  }
}

static int collective_one(const IrInterp *it, int32_t vi, const Group *gr, double *out) {
  const IrValue *v = &it->g->values[vi];
  const IrShape *xs = &it->g->values[v->ops[0]].shape;
  int32_t axis = (int32_t)v->attr.axis;
  int64_t n = ir_shape_numel(&v->shape), chunk;
  for (int64_t i = 0; i < n; i++) out[i] = 0;
  if (v->op == IR_LOCAL_SLICE) { /* this device's own chunk, no traffic */
    const double *x = *slot(it, it->vals, gr->member[gr->rank], v->ops[0]);
    block_copy(x, xs, out, &v->shape, axis, gr->rank * v->shape.dims[axis], 0, v->shape.dims[axis]);
    return IR_OK;
  }
  for (int64_t j = 0; j < gr->n; j++) {
    const double *x = *slot(it, it->vals, gr->member[j], v->ops[0]);
    switch (v->op) {
    case IR_ALL_REDUCE:
      for (int64_t i = 0; i < n; i++) out[i] += x[i];
      break;
    case IR_ALL_GATHER:
      block_copy(x, xs, out, &v->shape, axis, 0, j * xs->dims[axis], xs->dims[axis]);
      break;
    case IR_REDUCE_SCATTER: {
      chunk = v->shape.dims[axis];
      IrShape os = v->shape; /* accumulate this device's chunk of x_j */
      int64_t outer = dims_prod(&os, 0, axis), inner = dims_prod(&os, axis + 1, os.rank);
      for (int64_t o = 0; o < outer; o++)
        for (int64_t a = 0; a < chunk * inner; a++)
          out[o * chunk * inner + a] += x[(o * xs->dims[axis] + gr->rank * chunk) * inner + a];
      break;
    }
    default: /* IR_ALL_TO_ALL: chunk `rank` of member j's split axis, placed j-th along concat */
      chunk = xs->dims[axis] / gr->n;
      if (v->attr.axis2 == axis) {
        block_copy(x, xs, out, &v->shape, axis, gr->rank * chunk, j * chunk, chunk);
      } else {
        IrShape piece = *xs;
        piece.dims[axis] = chunk;
        int64_t pn = ir_shape_numel(&piece);
        double *tmp = malloc((size_t)(pn ? pn : 1) * sizeof *tmp);
        if (!tmp) return IR_ERR;
        block_copy(x, xs, tmp, &piece, axis, gr->rank * chunk, 0, chunk);
        int32_t cat = (int32_t)v->attr.axis2;
        block_copy(tmp, &piece, out, &v->shape, cat, 0, j * piece.dims[cat], piece.dims[cat]);
        free(tmp);
      }
    }
  }
  return IR_OK;
}

/* The device with dev's coordinates but stage `stage` on the pipeline axis. */
static int64_t stage_device(const IrMesh *m, int64_t dev, int64_t stage) {
  int64_t c[IR_MAX_MESH_AXES];
  rt_mesh_coords(m->naxes, m->sizes, dev, c);
  int a = ir_mesh_axis(m, IR_PIPELINE_AXIS);
  if (a >= 0) c[a] = stage;
  return rt_mesh_device(m->naxes, m->sizes, c);
}

/* send: the operand, kept for the receiver; recv: the send's data on the peer stage's device. */
static int interp_p2p(IrInterp *it, int32_t vi) {
  const IrValue *v = &it->g->values[vi];
  int64_t n = ir_shape_numel(&v->shape);
  for (int64_t d = 0; d < it->ndev; d++) {
    if (!ir_value_on_device(&it->mesh, v, d)) continue;
    int64_t src = v->op == IR_SEND ? d : stage_device(&it->mesh, d, v->attr.k);
    const double *x = *slot(it, it->vals, src, v->ops[0]);
    if (!x)
      return interp_fail(it, "%%%d (%s) at %s on device %lld: stage %lld has not computed %%%d", vi,
                         ir_op_name(v->op), *v->origin ? v->origin : "?", (long long)d,
                         (long long)v->attr.k, v->ops[0]);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!out) return interp_oom(it, vi, n);
    if (n) memcpy(out, x, (size_t)n * sizeof *out);
    *slot(it, it->vals, d, vi) = out;
  }
  return IR_OK;
}

static int interp_collective(IrInterp *it, int32_t vi) {
  const IrValue *v = &it->g->values[vi];
  if (v->op == IR_SEND || v->op == IR_RECV) return interp_p2p(it, vi);
  int64_t n = ir_shape_numel(&v->shape);
  if (ir_mesh_group_size(&it->mesh, &v->attr) > 4096)
    return interp_fail(it, "%%%d (%s): group too large", vi, ir_op_name(v->op));
  Group *gr = base_xmalloc(sizeof *gr);
  for (int64_t d = 0; d < it->ndev; d++) {
    if (!ir_value_on_device(&it->mesh, v, d)) continue; /* another pipeline stage's */
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!out) {
      free(gr);
      return interp_oom(it, vi, n);
    }
    *slot(it, it->vals, d, vi) = out;
    group_of(&it->mesh, &v->attr, d, gr);
    if (collective_one(it, vi, gr, out)) { /* its only failure: a chunk's buffer */
      free(gr);
      return interp_oom(it, vi, n);
    }
    eval_round(v, out, n, it->round);
  }
  free(gr);
  return IR_OK;
}

/* ---- running ---- */

static int interp_value(IrInterp *it, int64_t dev, int32_t vi) {
  const IrValue *v = &it->g->values[vi];
  int64_t n = ir_shape_numel(&v->shape);
  double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
  if (!out) return interp_oom(it, vi, n);
  *slot(it, it->vals, dev, vi) = out;
  if (v->op == IR_PARAMETER || v->op == IR_INPUT) {
    const double *b = *slot(it, it->bound, dev, vi);
    if (!b)
      return interp_fail(it, "%s '%s' is not set on device %lld", ir_op_name(v->op), v->name,
                         (long long)dev);
    if (n) memcpy(out, b, (size_t)n * sizeof *out);
    return IR_OK;
  }
  const double *args[64];
  const double **argv = v->nops <= 64 ? args : base_xmalloc((size_t)v->nops * sizeof *argv);
  for (int32_t i = 0; i < v->nops; i++) argv[i] = *slot(it, it->vals, dev, v->ops[i]);
  char msg[IR_ERR_LEN];
  int st = ir_eval_value(it->g, vi, argv, out, it->round, msg, sizeof msg);
  if (argv != args) free(argv);
  if (st)
    return interp_fail(it, "%%%d (%s) at %s on device %lld: %s", vi, ir_op_name(v->op),
                       *v->origin ? v->origin : "?", (long long)dev, msg);
  return IR_OK;
}

int ir_interp_run(IrInterp *it) {
  it->error[0] = 0;
  if (!mesh_covers(&it->mesh, &it->g->mesh))
    return interp_fail(it, "interpreter mesh lacks an axis of the graph's mesh, or sizes differ");
  char msg[IR_ERR_LEN];
  if (ir_graph_verify(it->g, msg, sizeof msg)) return interp_fail(it, "invalid graph: %s", msg);
  interp_clear(it, it->vals);
  int32_t *last = it->keep_all ? NULL : last_reads(it->g);
  int st = IR_OK;
  for (int32_t v = 0; v < it->g->nvalues && st == IR_OK; v++) {
    if (ir_op_flags(it->g->values[v].op) & IR_COLLECTIVE) {
      st = interp_collective(it, v);
    } else {
      for (int64_t d = 0; d < it->ndev && st == IR_OK; d++)
        if (ir_value_on_device(&it->mesh, &it->g->values[v], d)) st = interp_value(it, d, v);
    }
    if (last) release_dead(it, last, v);
  }
  free(last);
  return st;
}

const double *ir_interp_output(IrInterp *it, int64_t device, const char *name, IrShape *shape) {
  int32_t v = ir_graph_output(it->g, name);
  if (v == IR_NONE) return interp_fail(it, "no output named '%s'", name), NULL;
  if (device < 0 || device >= it->ndev)
    return interp_fail(it, "no device %lld", (long long)device), NULL;
  if (shape) *shape = it->g->values[v].shape;
  return *slot(it, it->vals, device, v);
}

const double *ir_interp_value(const IrInterp *it, int64_t device, int32_t v) {
  if (device < 0 || device >= it->ndev || v < 0 || v >= it->g->nvalues) return NULL;
  return *slot(it, it->vals, device, v);
}
