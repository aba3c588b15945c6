/* build.c: the builder API the composer and the passes call, one function per op.
 *
 * Each function fills a prototype value and hands it to ir_graph_add, which checks operands, runs
 * the op's shape rule and records the first error (naming the current config path). Builders do
 * only argument plumbing; every shape check lives in shape.c so the verifier sees the same rules.
 */
#include "ir/ir.h"

#include <string.h>

static IrValue proto_make(IrOp op, int32_t nops, const int32_t *ops) {
  IrValue v;
  memset(&v, 0, sizeof v);
  v.op = op;
  v.nops = nops;
  v.ops = ops;
  return v;
}

/* Copies n dims (at most IR_MAX_RANK; more is reported by the caller's rank check). */
static int dims_set(IrGraph *g, IrDims *d, int32_t n, const int64_t *v) {
  if (n < 0 || n > IR_MAX_RANK)
    return ir_graph_fail(g, "at %s: %d dims (at most %d)", *g->origin ? g->origin : "?", n,
                         IR_MAX_RANK);
  d->n = n;
  for (int32_t i = 0; i < n; i++) d->v[i] = v[i];
  return IR_OK;
}

static int axes_set(IrGraph *g, IrDims *d, int32_t n, const int32_t *v) {
  if (n < 0 || n > IR_MAX_RANK)
    return ir_graph_fail(g, "at %s: %d axes (at most %d)", *g->origin ? g->origin : "?", n,
                         IR_MAX_RANK);
  d->n = n;
  for (int32_t i = 0; i < n; i++) d->v[i] = v[i];
  return IR_OK;
}

static int shape_set(IrGraph *g, IrValue *v, int32_t rank, const int64_t *dims) {
  if (rank < 0 || rank > IR_MAX_RANK)
    return ir_graph_fail(g, "%%%d (%s) at %s: rank %d outside 0..%d", g->nvalues, ir_op_name(v->op),
                         *g->origin ? g->origin : "?", rank, IR_MAX_RANK);
  v->shape = ir_shape_make(rank, dims);
  return IR_OK;
}

static int32_t operand_rank(const IrGraph *g, int32_t x) {
  return x >= 0 && x < g->nvalues ? g->values[x].shape.rank : 0;
}

/* ---- leaves ---- */

static int32_t build_leaf(IrGraph *g, IrOp op, const char *name, IrDType dt, int32_t rank,
                          const int64_t *dims) {
  IrValue v = proto_make(op, 0, NULL);
  v.name = name;
  v.dtype = dt;
  if (shape_set(g, &v, rank, dims)) return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_param(IrGraph *g, const char *name, IrDType dt, int32_t rank, const int64_t *dims) {
  return build_leaf(g, IR_PARAMETER, name, dt, rank, dims);
}

int32_t ir_input(IrGraph *g, const char *name, IrDType dt, int32_t rank, const int64_t *dims) {
  return build_leaf(g, IR_INPUT, name, dt, rank, dims);
}

int32_t ir_const_scalar(IrGraph *g, IrDType dt, double value, int32_t rank, const int64_t *dims) {
  IrValue v = proto_make(IR_CONSTANT, 0, NULL);
  v.dtype = dt;
  v.attr.value = value;
  if (shape_set(g, &v, rank, dims)) return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_const_data(IrGraph *g, IrDType dt, const double *data, int32_t rank,
                      const int64_t *dims) {
  IrValue v = proto_make(IR_CONSTANT, 0, NULL);
  v.dtype = dt;
  v.attr.data = data;
  if (shape_set(g, &v, rank, dims)) return IR_NONE;
  for (int32_t i = 0; i < rank; i++)
    if (dims[i] < 0) return ir_graph_fail(g, "constant: negative dim"), IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_iota(IrGraph *g, IrDType dt, int32_t rank, const int64_t *dims, int32_t axis) {
  IrValue v = proto_make(IR_IOTA, 0, NULL);
  v.dtype = dt;
  v.attr.axis = axis;
  if (shape_set(g, &v, rank, dims)) return IR_NONE;
  return ir_graph_add(g, &v);
}

/* ---- elementwise ---- */

int32_t ir_unary(IrGraph *g, IrOp op, int32_t x) {
  IrValue v = proto_make(op, 1, &x);
  return ir_graph_add(g, &v);
}

int32_t ir_binary(IrGraph *g, IrOp op, int32_t a, int32_t b) {
  int32_t ops[2] = {a, b};
  IrValue v = proto_make(op, 2, ops);
  return ir_graph_add(g, &v);
}

int32_t ir_neg(IrGraph *g, int32_t x) { return ir_unary(g, IR_NEG, x); }
int32_t ir_exp(IrGraph *g, int32_t x) { return ir_unary(g, IR_EXP, x); }
int32_t ir_log(IrGraph *g, int32_t x) { return ir_unary(g, IR_LOG, x); }
int32_t ir_tanh(IrGraph *g, int32_t x) { return ir_unary(g, IR_TANH, x); }
int32_t ir_sqrt(IrGraph *g, int32_t x) { return ir_unary(g, IR_SQRT, x); }
int32_t ir_rsqrt(IrGraph *g, int32_t x) { return ir_unary(g, IR_RSQRT, x); }
int32_t ir_abs(IrGraph *g, int32_t x) { return ir_unary(g, IR_ABS, x); }
int32_t ir_sin(IrGraph *g, int32_t x) { return ir_unary(g, IR_SIN, x); }
int32_t ir_cos(IrGraph *g, int32_t x) { return ir_unary(g, IR_COS, x); }
int32_t ir_erf(IrGraph *g, int32_t x) { return ir_unary(g, IR_ERF, x); }
int32_t ir_logistic(IrGraph *g, int32_t x) { return ir_unary(g, IR_LOGISTIC, x); }
int32_t ir_stop_gradient(IrGraph *g, int32_t x) { return ir_unary(g, IR_STOP_GRADIENT, x); }
int32_t ir_add(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_ADD, a, b); }
int32_t ir_sub(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_SUB, a, b); }
int32_t ir_mul(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_MUL, a, b); }
int32_t ir_div(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_DIV, a, b); }
int32_t ir_max(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_MAX, a, b); }
int32_t ir_min(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_MIN, a, b); }
int32_t ir_pow(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_POW, a, b); }
int32_t ir_eq(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_EQ, a, b); }
int32_t ir_ne(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_NE, a, b); }
int32_t ir_lt(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_LT, a, b); }
int32_t ir_le(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_LE, a, b); }
int32_t ir_gt(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_GT, a, b); }
int32_t ir_ge(IrGraph *g, int32_t a, int32_t b) { return ir_binary(g, IR_GE, a, b); }

int32_t ir_select(IrGraph *g, int32_t pred, int32_t a, int32_t b) {
  int32_t ops[3] = {pred, a, b};
  IrValue v = proto_make(IR_SELECT, 3, ops);
  return ir_graph_add(g, &v);
}

int32_t ir_cast(IrGraph *g, int32_t x, IrDType dt) {
  IrValue v = proto_make(IR_CAST, 1, &x);
  v.dtype = dt;
  return ir_graph_add(g, &v);
}

/* ---- data movement ---- */

int32_t ir_broadcast(IrGraph *g, int32_t x, int32_t rank, const int64_t *dims,
                     const int32_t *bdims) {
  IrValue v = proto_make(IR_BROADCAST, 1, &x);
  if (shape_set(g, &v, rank, dims) || axes_set(g, &v.attr.axes, operand_rank(g, x), bdims))
    return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_reshape(IrGraph *g, int32_t x, int32_t rank, const int64_t *dims) {
  IrValue v = proto_make(IR_RESHAPE, 1, &x);
  if (shape_set(g, &v, rank, dims)) return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_transpose(IrGraph *g, int32_t x, const int32_t *perm) {
  IrValue v = proto_make(IR_TRANSPOSE, 1, &x);
  if (axes_set(g, &v.attr.axes, operand_rank(g, x), perm)) return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_slice(IrGraph *g, int32_t x, const int64_t *start, const int64_t *limit) {
  IrValue v = proto_make(IR_SLICE, 1, &x);
  int32_t r = operand_rank(g, x);
  if (dims_set(g, &v.attr.lo, r, start) || dims_set(g, &v.attr.hi, r, limit)) return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_concat(IrGraph *g, int32_t n, const int32_t *xs, int32_t axis) {
  IrValue v = proto_make(IR_CONCAT, n, xs);
  v.attr.axis = axis;
  return ir_graph_add(g, &v);
}

int32_t ir_pad(IrGraph *g, int32_t x, const int64_t *low, const int64_t *high, double value) {
  IrValue v = proto_make(IR_PAD, 1, &x);
  int32_t r = operand_rank(g, x);
  v.attr.value = value;
  if (dims_set(g, &v.attr.lo, r, low) || dims_set(g, &v.attr.hi, r, high)) return IR_NONE;
  return ir_graph_add(g, &v);
}

/* ---- reductions and contractions ---- */

static int32_t build_reduce(IrGraph *g, IrOp op, int32_t x, int32_t naxes, const int32_t *axes) {
  IrValue v = proto_make(op, 1, &x);
  if (axes_set(g, &v.attr.axes, naxes, axes)) return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_reduce_sum(IrGraph *g, int32_t x, int32_t naxes, const int32_t *axes) {
  return build_reduce(g, IR_REDUCE_SUM, x, naxes, axes);
}

int32_t ir_reduce_max(IrGraph *g, int32_t x, int32_t naxes, const int32_t *axes) {
  return build_reduce(g, IR_REDUCE_MAX, x, naxes, axes);
}

int32_t ir_dot(IrGraph *g, int32_t a, int32_t b, int32_t nbatch, const int32_t *lhs_batch,
               const int32_t *rhs_batch, int32_t ncontract, const int32_t *lhs_contract,
               const int32_t *rhs_contract) {
  int32_t ops[2] = {a, b};
  IrValue v = proto_make(IR_DOT, 2, ops);
  if (a >= 0 && a < g->nvalues) v.dtype = g->values[a].dtype; /* the operands' (f32: ir_dot_f32) */
  if (axes_set(g, &v.attr.lb, nbatch, lhs_batch) || axes_set(g, &v.attr.rb, nbatch, rhs_batch) ||
      axes_set(g, &v.attr.lc, ncontract, lhs_contract) ||
      axes_set(g, &v.attr.rc, ncontract, rhs_contract))
    return IR_NONE;
  return ir_graph_add(g, &v);
}

int32_t ir_matmul(IrGraph *g, int32_t a, int32_t b) {
  int32_t lc = operand_rank(g, a) - 1, rc = 0;
  return ir_dot(g, a, b, 0, NULL, NULL, 1, &lc, &rc);
}

/* ---- embeddings and top-k ---- */

int32_t ir_gather(IrGraph *g, int32_t table, int32_t idx) {
  return ir_binary(g, IR_GATHER, table, idx);
}

int32_t ir_scatter_add(IrGraph *g, int32_t idx, int32_t updates, int64_t rows) {
  int32_t ops[2] = {idx, updates};
  IrValue v = proto_make(IR_SCATTER_ADD, 2, ops);
  v.attr.k = rows;
  return ir_graph_add(g, &v);
}

int32_t ir_top_k_indices(IrGraph *g, int32_t x, int64_t k) {
  IrValue v = proto_make(IR_TOP_K_INDICES, 1, &x);
  v.attr.k = k;
  return ir_graph_add(g, &v);
}

/* ---- fused attention ---- */

static int32_t build_attention(IrGraph *g, IrOp op, int32_t nops, const int32_t *ops, bool causal,
                               double scale) {
  IrValue v = proto_make(op, nops, ops);
  v.attr.k = causal;
  v.attr.value = scale;
  return ir_graph_add(g, &v);
}

int32_t ir_attention(IrGraph *g, int32_t q, int32_t k, int32_t v, bool causal, double scale) {
  int32_t ops[3] = {q, k, v};
  return build_attention(g, IR_ATTENTION, 3, ops, causal, scale);
}

int32_t ir_attention_grad(IrGraph *g, int32_t q, int32_t k, int32_t v, int32_t dout, bool causal,
                          double scale) {
  int32_t ops[4] = {q, k, v, dout};
  return build_attention(g, IR_ATTENTION_GRAD, 4, ops, causal, scale);
}

int32_t ir_attention_at(IrGraph *g, int32_t q, int32_t k, int32_t v, int32_t dout, int32_t pos,
                        bool causal, double scale) {
  int32_t ops[5] = {q, k, v}, n = 3;
  if (dout != IR_NONE) ops[n++] = dout;
  if (pos != IR_NONE) ops[n++] = pos;
  return build_attention(g, dout != IR_NONE ? IR_ATTENTION_GRAD : IR_ATTENTION, n, ops, causal,
                         scale);
}

/* ---- collectives ---- */

static int32_t build_collective(IrGraph *g, IrOp op, int32_t x, int32_t naxes,
                                const char *const *axes, int64_t axis, int64_t axis2) {
  IrValue v = proto_make(op, 1, &x);
  if (naxes < 0 || naxes > IR_MAX_MESH_AXES) {
    ir_graph_fail(g, "%%%d (%s) at %s: %d mesh axes", g->nvalues, ir_op_name(op),
                  *g->origin ? g->origin : "?", naxes);
    return IR_NONE;
  }
  v.attr.nmesh = naxes;
  for (int32_t i = 0; i < naxes; i++) v.attr.mesh[i] = axes[i];
  v.attr.axis = axis;
  v.attr.axis2 = axis2;
  return ir_graph_add(g, &v);
}

int32_t ir_all_reduce(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes) {
  return build_collective(g, IR_ALL_REDUCE, x, naxes, axes, 0, 0);
}

int32_t ir_all_gather(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes, int32_t axis) {
  return build_collective(g, IR_ALL_GATHER, x, naxes, axes, axis, 0);
}

int32_t ir_reduce_scatter(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes,
                          int32_t axis) {
  return build_collective(g, IR_REDUCE_SCATTER, x, naxes, axes, axis, 0);
}

int32_t ir_local_slice(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes,
                       int32_t axis) {
  return build_collective(g, IR_LOCAL_SLICE, x, naxes, axes, axis, 0);
}

int32_t ir_all_to_all(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes,
                      int32_t split_axis, int32_t concat_axis) {
  return build_collective(g, IR_ALL_TO_ALL, x, naxes, axes, split_axis, concat_axis);
}

static int32_t build_p2p(IrGraph *g, IrOp op, int32_t x, const char *axis, int64_t peer) {
  int32_t id = build_collective(g, op, x, 1, &axis, 0, 0);
  if (id != IR_NONE) g->values[id].attr.k = peer;
  return id;
}

int32_t ir_send(IrGraph *g, int32_t x, const char *axis, int64_t peer) {
  return build_p2p(g, IR_SEND, x, axis, peer);
}

int32_t ir_recv(IrGraph *g, int32_t send, const char *axis, int64_t from) {
  return build_p2p(g, IR_RECV, send, axis, from);
}
