/* kernel.c: output-driven kernels. Most ops are "one element of the result from its position":
 * a loop nest over the value's shape (the outermost loop split into [lo, hi) for threads, the
 * innermost over the contiguous last dimension) computes each element and stores it.
 *
 * llvm_elem_get reads an operand at a position: a load from its buffer when it is materialized,
 * otherwise its own computation inlined (fusion: elementwise ops, broadcasts, splat constants,
 * iota). Index-mapping ops (broadcast, transpose, slice, pad, concat) turn the position into
 * their operand's position; reshape and the one-device collectives read the same linear index.
 * A kernel whose whole expression needs only linear indices runs as one flat loop, which
 * vectorizes and splits best. A transpose that moves the last axis runs over tiles instead.
 * Reductions, dot_general without BLAS, top_k and scatter_add live in reduce.c; dot_general
 * with BLAS in blas.c.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <stdlib.h>

static const IrValue *val(const LlvmCtx *C, int32_t v) { return &C->g->values[v]; }
static const IrShape *opshape(const LlvmCtx *C, int32_t v, int32_t k) {
  return &C->g->values[C->g->values[v].ops[k]].shape;
}

/* ---- constants and iota ---- */

static LLVMValueRef data_global(LlvmCtx *C, int32_t v) {
  if (C->cdata[v] && C->cdata_unit[v] == C->unit_seq) return C->cdata[v];
  const IrValue *x = val(C, v);
  int64_t n = ir_shape_numel(&x->shape);
  LLVMValueRef *els = base_xmalloc((size_t)(n ? n : 1) * sizeof *els);
  for (int64_t i = 0; i < n; i++) els[i] = llvm_scalar_const(C, x->dtype, x->attr.data[i]);
  LLVMTypeRef et = llvm_type_of(C, x->dtype), at = LLVMArrayType(et, (unsigned)n);
  LLVMValueRef gl = LLVMAddGlobal(C->m, at, "const");
  LLVMSetInitializer(gl, LLVMConstArray(et, els, (unsigned)n));
  LLVMSetGlobalConstant(gl, 1);
  LLVMSetLinkage(gl, LLVMPrivateLinkage);
  free(els);
  C->cdata[v] = gl;
  C->cdata_unit[v] = C->unit_seq;
  return gl;
}

static LLVMValueRef constant_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrValue *x = val(C, v);
  if (!x->attr.data) return llvm_scalar_const(C, x->dtype, x->attr.value);
  LLVMValueRef gl = data_global(C, v);
  LLVMValueRef idx[] = {llvm_i64(C, 0), llvm_pos_lin(C, &x->shape, p)};
  LLVMTypeRef et = llvm_type_of(C, x->dtype);
  LLVMValueRef ptr = LLVMBuildInBoundsGEP2(C->b, LLVMGlobalGetValueType(gl), gl, idx, 2, "");
  return LLVMBuildLoad2(C->b, et, ptr, "");
}

static LLVMValueRef iota_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  LLVMValueRef i = p->idx[val(C, v)->attr.axis];
  if (val(C, v)->dtype == DT_I32) return LLVMBuildTrunc(C->b, i, C->t_i32, "");
  if (val(C, v)->dtype == DT_BF16)
    return llvm_bf16_from_f64(C, LLVMBuildSIToFP(C->b, i, C->t_f64, ""));
  return LLVMBuildSIToFP(C->b, i, C->t_f32, "");
}

/* ---- index-mapping ops ---- */

static LLVMValueRef broadcast_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrShape *xs = opshape(C, v, 0);
  LlvmPos q = {.has_idx = true};
  for (int32_t d = 0; d < xs->rank; d++)
    q.idx[d] = xs->dims[d] == 1 ? llvm_i64(C, 0) : p->idx[val(C, v)->attr.axes.v[d]];
  return llvm_elem_get(C, val(C, v)->ops[0], &q);
}

static LLVMValueRef transpose_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrShape *xs = opshape(C, v, 0);
  LlvmPos q = {.has_idx = true};
  for (int32_t d = 0; d < xs->rank; d++) q.idx[val(C, v)->attr.axes.v[d]] = p->idx[d];
  return llvm_elem_get(C, val(C, v)->ops[0], &q);
}

static LLVMValueRef slice_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrShape *xs = opshape(C, v, 0);
  LlvmPos q = {.has_idx = true};
  for (int32_t d = 0; d < xs->rank; d++)
    q.idx[d] = LLVMBuildNSWAdd(C->b, p->idx[d], llvm_i64(C, val(C, v)->attr.lo.v[d]), "");
  return llvm_elem_get(C, val(C, v)->ops[0], &q);
}

/* i clamped to [0, n-1] (n >= 1), and whether it was inside. */
static LLVMValueRef clamp(LlvmCtx *C, LLVMValueRef i, int64_t n, LLVMValueRef *inside) {
  LLVMValueRef ge0 = LLVMBuildICmp(C->b, LLVMIntSGE, i, llvm_i64(C, 0), "");
  LLVMValueRef ltn = LLVMBuildICmp(C->b, LLVMIntSLT, i, llvm_i64(C, n), "");
  if (inside) *inside = LLVMBuildAnd(C->b, ge0, ltn, "");
  LLVMValueRef lo = LLVMBuildSelect(C->b, ge0, i, llvm_i64(C, 0), "");
  return LLVMBuildSelect(C->b, ltn, lo, llvm_i64(C, n - 1), "");
}

static LLVMValueRef pad_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrValue *x = val(C, v);
  const IrShape *xs = opshape(C, v, 0);
  if (ir_shape_numel(xs) == 0) return llvm_scalar_const(C, x->dtype, x->attr.value);
  LlvmPos q = {.has_idx = true};
  LLVMValueRef all = LLVMConstInt(C->t_i1, 1, 0), in;
  for (int32_t d = 0; d < xs->rank; d++) {
    LLVMValueRef t = LLVMBuildNSWSub(C->b, p->idx[d], llvm_i64(C, x->attr.lo.v[d]), "");
    q.idx[d] = clamp(C, t, xs->dims[d], &in);
    all = LLVMBuildAnd(C->b, all, in, "");
  }
  LLVMValueRef e = llvm_elem_get(C, x->ops[0], &q);
  return LLVMBuildSelect(C->b, all, e, llvm_scalar_const(C, x->dtype, x->attr.value), "");
}

/* Every operand read at its clamped position; the one whose range holds the index wins. */
static LLVMValueRef concat_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrValue *x = val(C, v);
  int32_t axis = (int32_t)x->attr.axis;
  LLVMValueRef acc = NULL;
  int64_t end = x->shape.dims[axis];
  for (int32_t k = x->nops - 1; k >= 0; k--) {
    int64_t len = opshape(C, v, k)->dims[axis], off = end - len;
    end = off;
    if (len == 0) continue;
    LlvmPos q = {.has_idx = true};
    for (int32_t d = 0; d < x->shape.rank; d++) q.idx[d] = p->idx[d];
    q.idx[axis] = clamp(C, LLVMBuildNSWSub(C->b, p->idx[axis], llvm_i64(C, off), ""), len, NULL);
    LLVMValueRef e = llvm_elem_get(C, x->ops[k], &q);
    LLVMValueRef here = LLVMBuildICmp(C->b, LLVMIntSLT, p->idx[axis], llvm_i64(C, off + len), "");
    acc = acc ? LLVMBuildSelect(C->b, here, e, acc, "") : e;
  }
  return acc;
}

/* reshape and one-device collectives: the same elements in the same order. */
static LLVMValueRef copy_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  LlvmPos q = {.lin = llvm_pos_lin(C, &val(C, v)->shape, p)};
  return llvm_elem_get(C, val(C, v)->ops[0], &q);
}

/* (table (V, D...), idx (I...)) -> (I..., D...); an index outside 0..V-1 gives a zero row (the
 * interpreter reports it as an error; generated code has no error channel). */
static LLVMValueRef gather_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrShape *ts = opshape(C, v, 0);
  int64_t row = ir_shape_numel(ts) / (ts->dims[0] ? ts->dims[0] : 1);
  LLVMValueRef lin = llvm_pos_lin(C, &val(C, v)->shape, p), r = llvm_i64(C, row), ok;
  LLVMValueRef i = LLVMBuildSDiv(C->b, lin, r, ""), j = LLVMBuildSRem(C->b, lin, r, "");
  LLVMValueRef t = LLVMBuildSExt(C->b, llvm_buffer_load(C, val(C, v)->ops[1], i), C->t_i64, "");
  t = clamp(C, t, ts->dims[0], &ok);
  LlvmPos q = {.lin = LLVMBuildNSWAdd(C->b, LLVMBuildNSWMul(C->b, t, r, ""), j, "")};
  LLVMValueRef e = llvm_elem_get(C, val(C, v)->ops[0], &q);
  return LLVMBuildSelect(C->b, ok, e, llvm_scalar_const(C, val(C, v)->dtype, 0), "");
}

/* ---- elementwise ---- */

/* A bf16 result is rounded here, in registers, not only where it is stored: the interpreter
 * rounds every op, so an op inlined into another's kernel must too (select and cast need not:
 * they pick a bf16 operand or round themselves). */
static LLVMValueRef elementwise_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrValue *x = val(C, v);
  LLVMValueRef a[3];
  for (int32_t k = 0; k < x->nops; k++) a[k] = llvm_elem_get(C, x->ops[k], p);
  IrDType adt = val(C, x->ops[0])->dtype;
  LLVMValueRef e;
  switch (x->op) {
  case IR_SELECT: return llvm_scalar_select(C, adt, a[0], a[1], a[2]);
  case IR_CAST: return llvm_scalar_cast(C, adt, x->dtype, a[0]);
  default:
    e = x->nops == 1 ? llvm_scalar_unary(C, x->op, adt, a[0])
                     : llvm_scalar_binary(C, x->op, adt, a[0], a[1]);
    return e && x->dtype == DT_BF16 ? llvm_bf16_quantize(C, e) : e;
  }
}

LLVMValueRef llvm_elem_compute(LlvmCtx *C, int32_t v, LlvmPos *p) {
  switch (val(C, v)->op) {
  case IR_CONSTANT: return constant_elem(C, v, p);
  case IR_IOTA: return iota_elem(C, v, p);
  case IR_BROADCAST: return broadcast_elem(C, v, p);
  case IR_TRANSPOSE: return transpose_elem(C, v, p);
  case IR_SLICE: return slice_elem(C, v, p);
  case IR_PAD: return pad_elem(C, v, p);
  case IR_CONCAT: return concat_elem(C, v, p);
  case IR_GATHER: return gather_elem(C, v, p);
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX: return llvm_reduce_elem(C, v, p);
  case IR_DOT: return llvm_dot_elem(C, v, p);
  case IR_RESHAPE:
  case IR_ALL_REDUCE:
  case IR_ALL_GATHER:
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL:
  case IR_LOCAL_SLICE: return copy_elem(C, v, p);
  default: return elementwise_elem(C, v, p);
  }
}

LLVMValueRef llvm_elem_get(LlvmCtx *C, int32_t v, LlvmPos *p) {
  if (!C->mat[v]) return llvm_elem_compute(C, v, p);
  if (C->defer[v] < 0 || C->defer[v] != C->kout)
    return llvm_buffer_load(C, v, llvm_pos_lin(C, &val(C, v)->shape, p));
  /* computed here and stored after the kernel's own value (map_kernel) */
  LLVMValueRef e = llvm_elem_compute(C, v, p);
  if (e && C->nkstore < LLVM_MAX_DEFERRED) {
    C->kstore[C->nkstore] = v;
    C->kstore_val[C->nkstore] = e;
    C->kstore_lin[C->nkstore++] = llvm_pos_lin(C, &val(C, v)->shape, p);
  }
  return e;
}

/* ---- the kernel ---- */

/* Whether computing v (inlined operands included) needs per-dimension indices. */
static bool needs_idx(const LlvmCtx *C, int32_t v, bool root) {
  const IrValue *x = val(C, v);
  if (!root && C->mat[v] && C->defer[v] < 0) return false;
  switch (x->op) {
  case IR_CONSTANT:
  case IR_GATHER:
  case IR_RESHAPE:
  case IR_ALL_REDUCE:
  case IR_ALL_GATHER:
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL:
  case IR_LOCAL_SLICE: return false;
  case IR_BROADCAST: /* of one element: the same load at every position */
    if (ir_shape_numel(opshape(C, v, 0)) == 1) return needs_idx(C, x->ops[0], false);
    return true;
  default:
    if (!(ir_op_flags(x->op) & IR_ELEMENTWISE)) return true;
    for (int32_t k = 0; k < x->nops; k++)
      if (needs_idx(C, x->ops[k], false)) return true;
    return false;
  }
}

/* Elements read or written: what decides whether a kernel is worth splitting. */
static int64_t kernel_work(const LlvmCtx *C, int32_t v) {
  int64_t w = ir_shape_numel(&val(C, v)->shape);
  for (int32_t k = 0; k < val(C, v)->nops; k++)
    if (ir_shape_numel(opshape(C, v, k)) > w) w = ir_shape_numel(opshape(C, v, k));
  return w;
}

static int map_kernel(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  int64_t n = ir_shape_numel(&x->shape);
  bool flat = x->shape.rank == 0 || !needs_idx(C, v, true);
  IrShape dom = flat ? ir_shape_make(1, &n) : x->shape;
  char name[64];
  snprintf(name, sizeof name, "k%d_%s", v, ir_op_name(x->op));
  LLVMValueRef fn = llvm_kernel_begin(C, name);
  if (!fn) return -1;
  LlvmLoop loops[IR_MAX_RANK];
  LlvmPos p = {.has_idx = !flat};
  for (int32_t d = 0; d < dom.rank; d++) {
    LLVMValueRef lo = d == 0 ? LLVMGetParam(fn, 1) : llvm_i64(C, 0);
    LLVMValueRef hi = d == 0 ? LLVMGetParam(fn, 2) : llvm_i64(C, dom.dims[d]);
    p.idx[d] = llvm_loop_begin(C, &loops[d], lo, hi, "i");
  }
  if (flat) p.lin = p.idx[0];
  C->nkstore = 0;
  LLVMValueRef e = llvm_elem_compute(C, v, &p);
  if (!e) return llvm_fail(C, "%%%d (%s): no element code", v, ir_op_name(x->op));
  if (C->nkstore != C->nkouts - 1)
    return llvm_fail(C, "%%%d (%s): %d values deferred into its kernel, %d computed", v,
                     ir_op_name(x->op), C->nkouts - 1, C->nkstore);
  llvm_buffer_store(C, v, llvm_pos_lin(C, &x->shape, &p), e);
  for (int32_t k = 0; k < C->nkstore; k++) /* every load of this position came first */
    llvm_buffer_store(C, C->kstore[k], C->kstore_lin[k], C->kstore_val[k]);
  for (int32_t d = dom.rank - 1; d >= 0; d--) llvm_loop_end(C, &loops[d]);
  fn = llvm_kernel_end(C);
  if (!fn) return -1;
  bool par = C->opt.threads && dom.dims[0] > 1 && kernel_work(C, v) >= C->opt.parallel_min;
  llvm_kernel_call(C, fn, dom.dims[0], par);
  return 0;
}

/* ---- transposes that move the last axis: tiles ---- */

enum { TILE = 32 };

/* Whether v is a transpose that makes its operand's last axis its own second-to-last (weight
 * gradients' [1, 0], for one). Row by row it would read the operand a column at a time, a cache
 * line per element; tiles of TILE x TILE read TILE lines and use them whole. */
static bool transpose_tiles(const LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  int32_t r = x->shape.rank;
  return x->op == IR_TRANSPOSE && r >= 2 && x->attr.axes.v[r - 2] == r - 1 &&
         x->shape.dims[r - 2] >= TILE && x->shape.dims[r - 1] >= TILE;
}

static LLVMValueRef min_i64(LlvmCtx *C, LLVMValueRef a, int64_t b) {
  LLVMValueRef lt = LLVMBuildICmp(C->b, LLVMIntSLT, a, llvm_i64(C, b), "");
  return LLVMBuildSelect(C->b, lt, a, llvm_i64(C, b), "");
}

/* Item it of (outer, row tile): the outer indices (row-major over dims[0 .. r-3]) into p, and
 * the first row of the tile. */
static LLVMValueRef tile_item(LlvmCtx *C, const IrShape *s, LLVMValueRef it, int64_t rtiles,
                              LlvmPos *p) {
  LLVMValueRef o = LLVMBuildSDiv(C->b, it, llvm_i64(C, rtiles), "");
  for (int32_t d = s->rank - 3; d >= 0; d--) {
    p->idx[d] = LLVMBuildSRem(C->b, o, llvm_i64(C, s->dims[d]), "");
    o = LLVMBuildSDiv(C->b, o, llvm_i64(C, s->dims[d]), "");
  }
  LLVMValueRef rt = LLVMBuildSRem(C->b, it, llvm_i64(C, rtiles), "");
  return LLVMBuildNSWMul(C->b, rt, llvm_i64(C, TILE), "");
}

/* Items are (outer index, tile of rows); each walks its row tile's column tiles, one tile at a
 * time, the rows of the tile, then the tile's columns (contiguous stores). */
static int transpose_tiles_kernel(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  int32_t r = x->shape.rank;
  int64_t R = x->shape.dims[r - 2], K = x->shape.dims[r - 1];
  int64_t rtiles = (R + TILE - 1) / TILE, ctiles = (K + TILE - 1) / TILE;
  int64_t items = ir_shape_numel(&x->shape) / (R * K) * rtiles;
  char name[64];
  snprintf(name, sizeof name, "k%d_%s", v, ir_op_name(x->op));
  LLVMValueRef fn = llvm_kernel_begin(C, name);
  if (!fn) return -1;
  LlvmLoop L[4];
  LlvmPos p = {.has_idx = true};
  LLVMValueRef it = llvm_loop_begin(C, &L[0], LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), "it");
  LLVMValueRef i0 = tile_item(C, &x->shape, it, rtiles, &p);
  LLVMValueRef ct = llvm_loop_begin(C, &L[1], llvm_i64(C, 0), llvm_i64(C, ctiles), "ct");
  LLVMValueRef j0 = LLVMBuildNSWMul(C->b, ct, llvm_i64(C, TILE), "");
  LLVMValueRef i1 = min_i64(C, LLVMBuildNSWAdd(C->b, i0, llvm_i64(C, TILE), ""), R);
  LLVMValueRef j1 = min_i64(C, LLVMBuildNSWAdd(C->b, j0, llvm_i64(C, TILE), ""), K);
  p.idx[r - 2] = llvm_loop_begin(C, &L[2], i0, i1, "i");
  p.idx[r - 1] = llvm_loop_begin(C, &L[3], j0, j1, "j");
  llvm_buffer_store(C, v, llvm_pos_lin(C, &x->shape, &p), llvm_elem_compute(C, v, &p));
  for (int k = 3; k >= 0; k--) llvm_loop_end(C, &L[k]);
  fn = llvm_kernel_end(C);
  if (!fn) return -1;
  bool par = C->opt.threads && items > 1 && kernel_work(C, v) >= C->opt.parallel_min;
  llvm_kernel_call(C, fn, items, par);
  return 0;
}

static int kernel_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  if (C->coll[v] >= 0) return llvm_collective_emit(C, v);
  switch (x->op) {
  case IR_RESHAPE:
    if (C->mp->offset[v] == C->mp->offset[x->ops[0]]) return 0; /* an alias: nothing to do */
    return map_kernel(C, v);
  case IR_DOT:
    if (C->opt.blas && llvm_dot_blas_ok(C->g, v)) return llvm_dot_blas_emit(C, v);
    return map_kernel(C, v);
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
    return llvm_reduce_cols_ok(C, v) ? llvm_reduce_cols_emit(C, v) : map_kernel(C, v);
  case IR_TRANSPOSE: return transpose_tiles(C, v) ? transpose_tiles_kernel(C, v) : map_kernel(C, v);
  case IR_SCATTER_ADD: return llvm_scatter_emit(C, v);
  case IR_TOP_K_INDICES: return llvm_top_k_emit(C, v);
  case IR_ATTENTION:
  case IR_ATTENTION_GRAD: return llvm_attention_emit(C, v);
  default: return map_kernel(C, v);
  }
}

int llvm_kernel_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  if (!C->mat[v] || x->op == IR_PARAMETER || x->op == IR_INPUT) return 0;
  if (ir_shape_numel(&x->shape) == 0 || C->defer[v] >= 0) return 0;
  /* its buffers and the deferred values', for the alias metadata (loop.c) */
  C->kout = v;
  C->kouts[0] = v;
  C->nkouts = 1;
  for (int32_t u = v - 1; u >= 0 && C->nkouts <= C->hosted[v]; u--)
    if (C->defer[u] == v) C->kouts[C->nkouts++] = u;
  int rc = kernel_emit(C, v);
  C->kout = -1;
  C->nkouts = 0;
  return rc;
}
