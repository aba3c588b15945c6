/* reduce.c: kernels with a loop inside the element, and the two that are not output-driven.
 *
 * reduce_sum/max and the loop-nest dot_general compute one output element by looping over the
 * reduced (contracting) axes in row-major order, the interpreter's order. f32 sums accumulate in
 * double like the interpreter, so results agree to rounding of the final value. top_k_indices
 * is the interpreter's selection (k passes, ties to the lower index, NaN largest), one row per
 * outer iteration. scatter_add zeroes its result and accumulates the updates in index order on
 * one thread, so it is deterministic; an index outside 0..rows-1 is skipped.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

static const IrValue *val(const LlvmCtx *C, int32_t v) { return &C->g->values[v]; }

static bool has_axis(const IrDims *axes, int32_t d) {
  for (int32_t k = 0; k < axes->n; k++)
    if (axes->v[k] == d) return true;
  return false;
}

/* Accumulator type: double for f32 sums, else the element type. */
static LLVMTypeRef acc_type(LlvmCtx *C, IrDType dt, bool sum) {
  return dt == DT_F32 && sum ? C->t_f64 : llvm_type_of(C, dt);
}

static LLVMValueRef acc_add(LlvmCtx *C, IrDType dt, LLVMValueRef acc, LLVMValueRef x) {
  if (dt == DT_I32) return LLVMBuildAdd(C->b, acc, x, "");
  return LLVMBuildFAdd(C->b, acc, LLVMBuildFPExt(C->b, x, C->t_f64, ""), "");
}

static LLVMValueRef acc_result(LlvmCtx *C, IrDType dt, bool sum, LLVMValueRef acc) {
  return dt == DT_F32 && sum ? LLVMBuildFPTrunc(C->b, acc, C->t_f32, "") : acc;
}

static LLVMValueRef acc_init(LlvmCtx *C, IrDType dt, bool sum) {
  if (sum) return dt == DT_F32 ? LLVMConstReal(C->t_f64, 0) : LLVMConstInt(C->t_i32, 0, 0);
  /* max of nothing: -inf (i32: the interpreter's -inf saturates to INT_MIN) */
  return dt == DT_F32 ? LLVMConstReal(C->t_f32, -__builtin_inf())
                      : LLVMConstInt(C->t_i32, 0x80000000u, 0);
}

LLVMValueRef llvm_reduce_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  bool sum = x->op == IR_REDUCE_SUM;
  LLVMValueRef acc = llvm_alloca_entry(C, acc_type(C, x->dtype, sum), "acc");
  LLVMBuildStore(C->b, acc_init(C, x->dtype, sum), acc);
  LlvmLoop loops[IR_MAX_RANK];
  LlvmPos q = {.has_idx = true};
  int32_t nl = 0;
  for (int32_t d = 0, o = 0; d < xs->rank; d++) {
    if (has_axis(&x->attr.axes, d))
      q.idx[d] = llvm_loop_begin(C, &loops[nl++], llvm_i64(C, 0), llvm_i64(C, xs->dims[d]), "r");
    else
      q.idx[d] = p->idx[o++];
  }
  LLVMValueRef e = llvm_elem_get(C, x->ops[0], &q);
  LLVMValueRef a = LLVMBuildLoad2(C->b, acc_type(C, x->dtype, sum), acc, "");
  a = sum ? acc_add(C, x->dtype, a, e) : llvm_scalar_max_nan(C, x->dtype, e, a);
  LLVMBuildStore(C->b, a, acc);
  while (nl > 0) llvm_loop_end(C, &loops[--nl]);
  return acc_result(C, x->dtype, sum, LLVMBuildLoad2(C->b, acc_type(C, x->dtype, sum), acc, ""));
}

/* ---- dot_general as a loop nest (any layout, any dtype) ---- */

/* Output position -> lhs and rhs positions, as the interpreter's dot_split_index. */
static void dot_split(const IrValue *v, const IrShape *as, const IrShape *bs, const LlvmPos *p,
                      LlvmPos *ap, LlvmPos *bp) {
  const IrAttrs *a = &v->attr;
  int32_t o = 0;
  for (int32_t k = 0; k < a->lb.n; k++, o++) {
    ap->idx[a->lb.v[k]] = p->idx[o];
    bp->idx[a->rb.v[k]] = p->idx[o];
  }
  for (int32_t d = 0; d < as->rank; d++)
    if (!has_axis(&a->lb, d) && !has_axis(&a->lc, d)) ap->idx[d] = p->idx[o++];
  for (int32_t d = 0; d < bs->rank; d++)
    if (!has_axis(&a->rb, d) && !has_axis(&a->rc, d)) bp->idx[d] = p->idx[o++];
}

LLVMValueRef llvm_dot_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrValue *x = val(C, v);
  const IrShape *as = &val(C, x->ops[0])->shape, *bs = &val(C, x->ops[1])->shape;
  LLVMValueRef acc = llvm_alloca_entry(C, acc_type(C, x->dtype, true), "acc");
  LLVMBuildStore(C->b, acc_init(C, x->dtype, true), acc);
  LlvmPos ap = {.has_idx = true}, bp = {.has_idx = true};
  dot_split(x, as, bs, p, &ap, &bp);
  LlvmLoop loops[IR_MAX_RANK];
  for (int32_t k = 0; k < x->attr.lc.n; k++) {
    LLVMValueRef n = llvm_i64(C, as->dims[x->attr.lc.v[k]]);
    LLVMValueRef i = llvm_loop_begin(C, &loops[k], llvm_i64(C, 0), n, "c");
    ap.idx[x->attr.lc.v[k]] = i;
    bp.idx[x->attr.rc.v[k]] = i;
  }
  LLVMValueRef ea = llvm_elem_get(C, x->ops[0], &ap), eb = llvm_elem_get(C, x->ops[1], &bp);
  LLVMValueRef prod = x->dtype == DT_I32 ? LLVMBuildMul(C->b, ea, eb, "")
                                          : LLVMBuildFMul(C->b, LLVMBuildFPExt(C->b, ea, C->t_f64, ""),
                                                          LLVMBuildFPExt(C->b, eb, C->t_f64, ""), "");
  LLVMValueRef a = LLVMBuildLoad2(C->b, acc_type(C, x->dtype, true), acc, "");
  a = x->dtype == DT_I32 ? LLVMBuildAdd(C->b, a, prod, "") : LLVMBuildFAdd(C->b, a, prod, "");
  LLVMBuildStore(C->b, a, acc);
  for (int32_t k = x->attr.lc.n - 1; k >= 0; k--) llvm_loop_end(C, &loops[k]);
  return acc_result(C, x->dtype, true, LLVMBuildLoad2(C->b, acc_type(C, x->dtype, true), acc, ""));
}

/* ---- top_k_indices ---- */

/* Whether x[i] beats the current best x[b] (i > b): NaN is largest, ties keep b. */
static LLVMValueRef top_k_better(LlvmCtx *C, IrDType dt, LLVMValueRef xi, LLVMValueRef xb) {
  if (dt == DT_I32) return LLVMBuildICmp(C->b, LLVMIntSGT, xi, xb, "");
  LLVMValueRef ni = LLVMBuildFCmp(C->b, LLVMRealUNO, xi, xi, "");
  LLVMValueRef nb = LLVMBuildFCmp(C->b, LLVMRealUNO, xb, xb, "");
  return LLVMBuildSelect(C->b, ni, LLVMBuildNot(C->b, nb, ""),
                         LLVMBuildFCmp(C->b, LLVMRealOGT, xi, xb, ""), "");
}

/* Whether index i is among out[base .. base+j). */
static LLVMValueRef top_k_taken(LlvmCtx *C, int32_t v, LLVMValueRef base, LLVMValueRef j,
                                LLVMValueRef i) {
  LLVMValueRef taken = llvm_alloca_entry(C, C->t_i1, "taken");
  LLVMBuildStore(C->b, LLVMConstInt(C->t_i1, 0, 0), taken);
  LlvmLoop L;
  LLVMValueRef t = llvm_loop_begin(C, &L, llvm_i64(C, 0), j, "t");
  LLVMValueRef o = llvm_buffer_load(C, v, LLVMBuildNSWAdd(C->b, base, t, ""));
  LLVMValueRef eq = LLVMBuildICmp(C->b, LLVMIntEQ, LLVMBuildSExt(C->b, o, C->t_i64, ""), i, "");
  LLVMBuildStore(C->b, LLVMBuildOr(C->b, LLVMBuildLoad2(C->b, C->t_i1, taken, ""), eq, ""), taken);
  llvm_loop_end(C, &L);
  return LLVMBuildLoad2(C->b, C->t_i1, taken, "");
}

/* One pass of the selection: the best index of row r not yet taken, stored at out[r*k + j]. */
static void top_k_pass(LlvmCtx *C, int32_t v, LLVMValueRef r, LLVMValueRef j) {
  const IrValue *x = val(C, v);
  const IrValue *in = val(C, x->ops[0]);
  int64_t len = in->shape.dims[in->shape.rank - 1];
  LLVMValueRef xbase = LLVMBuildNSWMul(C->b, r, llvm_i64(C, len), "");
  LLVMValueRef obase = LLVMBuildNSWMul(C->b, r, llvm_i64(C, x->attr.k), "");
  LLVMValueRef best = llvm_alloca_entry(C, C->t_i64, "best");
  LLVMBuildStore(C->b, llvm_i64(C, -1), best);
  LlvmLoop L;
  LLVMValueRef i = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, len), "i");
  LLVMValueRef taken = top_k_taken(C, v, obase, j, i);
  LLVMValueRef b = LLVMBuildLoad2(C->b, C->t_i64, best, "");
  LLVMValueRef none = LLVMBuildICmp(C->b, LLVMIntSLT, b, llvm_i64(C, 0), "");
  LLVMValueRef bc = LLVMBuildSelect(C->b, none, llvm_i64(C, 0), b, "");
  LLVMValueRef xi = llvm_buffer_load(C, x->ops[0], LLVMBuildNSWAdd(C->b, xbase, i, ""));
  LLVMValueRef xb = llvm_buffer_load(C, x->ops[0], LLVMBuildNSWAdd(C->b, xbase, bc, ""));
  LLVMValueRef better = LLVMBuildOr(C->b, none, top_k_better(C, in->dtype, xi, xb), "");
  LLVMValueRef take = LLVMBuildAnd(C->b, LLVMBuildNot(C->b, taken, ""), better, "");
  LLVMBuildStore(C->b, LLVMBuildSelect(C->b, take, i, b, ""), best);
  llvm_loop_end(C, &L);
  LLVMValueRef res = LLVMBuildTrunc(C->b, LLVMBuildLoad2(C->b, C->t_i64, best, ""), C->t_i32, "");
  llvm_buffer_store(C, v, LLVMBuildNSWAdd(C->b, obase, j, ""), res);
}

int llvm_top_k_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  int64_t rows = ir_shape_numel(xs) / (xs->dims[xs->rank - 1] ? xs->dims[xs->rank - 1] : 1);
  if (xs->dims[xs->rank - 1] == 0) return llvm_fail(C, "%%%d (top_k_indices): empty rows", v);
  char name[64];
  snprintf(name, sizeof name, "k%d_top_k", v);
  LLVMValueRef fn = llvm_kernel_begin(C, name);
  LlvmLoop R, J;
  LLVMValueRef r = llvm_loop_begin(C, &R, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), "row");
  LLVMValueRef j = llvm_loop_begin(C, &J, llvm_i64(C, 0), llvm_i64(C, x->attr.k), "j");
  top_k_pass(C, v, r, j);
  llvm_loop_end(C, &J);
  llvm_loop_end(C, &R);
  llvm_kernel_end(C);
  bool par = C->opt.threads && rows > 1 && ir_shape_numel(xs) * x->attr.k >= C->opt.parallel_min;
  llvm_kernel_call(C, fn, rows, par);
  return 0;
}

/* ---- scatter_add ---- */

static void scatter_zero(LlvmCtx *C, int32_t v) {
  LlvmLoop L;
  LLVMValueRef i = llvm_loop_begin(C, &L, llvm_i64(C, 0),
                                   llvm_i64(C, ir_shape_numel(&val(C, v)->shape)), "z");
  llvm_buffer_store(C, v, i, llvm_scalar_const(C, val(C, v)->dtype, 0));
  llvm_loop_end(C, &L);
}

/* out[r*row + j] += upd[i*row + j] for j < row. */
static void scatter_row(LlvmCtx *C, int32_t v, LLVMValueRef r, LLVMValueRef i, int64_t row) {
  const IrValue *x = val(C, v);
  LlvmLoop L;
  LLVMValueRef j = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, row), "j");
  LLVMValueRef rw = llvm_i64(C, row);
  LLVMValueRef o = LLVMBuildNSWAdd(C->b, LLVMBuildNSWMul(C->b, r, rw, ""), j, "");
  LLVMValueRef u = LLVMBuildNSWAdd(C->b, LLVMBuildNSWMul(C->b, i, rw, ""), j, "");
  LLVMValueRef a = llvm_buffer_load(C, v, o), b = llvm_buffer_load(C, x->ops[1], u);
  llvm_buffer_store(C, v, o, llvm_scalar_binary(C, IR_ADD, x->dtype, a, b));
  llvm_loop_end(C, &L);
}

int llvm_scatter_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  int64_t rows = x->attr.k, row = ir_shape_numel(&x->shape) / (rows ? rows : 1);
  int64_t nidx = ir_shape_numel(&val(C, x->ops[0])->shape);
  char name[64];
  snprintf(name, sizeof name, "k%d_scatter_add", v);
  llvm_kernel_begin(C, name);
  LLVMValueRef fn = C->fn;
  scatter_zero(C, v);
  LlvmLoop L;
  LLVMValueRef i = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, nidx), "i");
  LLVMValueRef r = LLVMBuildSExt(C->b, llvm_buffer_load(C, x->ops[0], i), C->t_i64, "");
  LLVMValueRef ok = LLVMBuildAnd(C->b, LLVMBuildICmp(C->b, LLVMIntSGE, r, llvm_i64(C, 0), ""),
                                 LLVMBuildICmp(C->b, LLVMIntSLT, r, llvm_i64(C, rows), ""), "");
  LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(C->c, C->fn, "in");
  LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(C->c, C->fn, "next");
  LLVMBuildCondBr(C->b, ok, yes, next);
  LLVMPositionBuilderAtEnd(C->b, yes);
  scatter_row(C, v, r, i, row);
  LLVMBuildBr(C->b, next);
  LLVMPositionBuilderAtEnd(C->b, next);
  llvm_loop_end(C, &L);
  llvm_kernel_end(C);
  llvm_kernel_call(C, fn, 1, false); /* one call does it all: lo and hi are unused */
  return 0;
}
