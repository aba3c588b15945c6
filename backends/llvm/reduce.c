/* reduce.c: kernels with a loop inside the element, and the two that are not output-driven.
 *
 * reduce_sum/max and the loop-nest dot_general compute one output element by looping over the
 * reduced (contracting) axes in row-major order, the interpreter's order. f32 sums accumulate in
 * double like the interpreter, so results agree to rounding of the final value. An f32
 * reduction over trailing axes (norms, softmax, cross-entropy: each output element reduces one
 * contiguous run of its operand) instead loads VW floats at a time into VW lanes (doubles for
 * sums), combines the lanes pairwise and finishes the run's tail in scalar: LLVM's vectorizer
 * would not reorder the sum for us (the C API sets no fast-math flags), and the dependent
 * scalar chain ran at one add per four cycles. One over leading axes (bias and norm-weight
 * gradients: an (R, m) operand reduced down its columns) gets its own kernel, whose items are
 * blocks of VW columns, each summed over the rows in VW lanes at once, row by row. top_k_indices
 * is the interpreter's selection (k passes, ties to the lower index, NaN largest), one row per
 * outer iteration. scatter_add's items are rows of its result: each clears its rows and adds
 * the updates whose index falls in them, in index order, so a row's sum is the same chain on
 * any split (deterministic, and the interpreter's); an index outside 0..rows-1 is skipped.
 * bf16 values load as floats and store rounded (loop.c); bf16 sums accumulate in double or, for
 * scatter_add, in an f32 scratch, and round once.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

static const IrValue *val(const LlvmCtx *C, int32_t v) { return &C->g->values[v]; }

static bool has_axis(const IrDims *axes, int32_t d) {
  for (int32_t k = 0; k < axes->n; k++)
    if (axes->v[k] == d) return true;
  return false;
}

/* Accumulator type: double for float sums (bf16's too), else the element's compute type. */
static LLVMTypeRef acc_type(LlvmCtx *C, IrDType dt, bool sum) {
  return dt != DT_I32 && sum ? C->t_f64 : llvm_type_of(C, dt);
}

static LLVMValueRef acc_add(LlvmCtx *C, IrDType dt, LLVMValueRef acc, LLVMValueRef x) {
  if (dt == DT_I32) return LLVMBuildAdd(C->b, acc, x, "");
  return LLVMBuildFAdd(C->b, acc, LLVMBuildFPExt(C->b, x, C->t_f64, ""), "");
}

/* A sum's double rounded once to the result's dtype (scalar or VW lanes); a max is exact. */
static LLVMValueRef acc_result(LlvmCtx *C, IrDType dt, bool sum, LLVMValueRef acc) {
  if (!sum || dt == DT_I32) return acc;
  if (dt == DT_BF16) return llvm_bf16_from_f64(C, acc);
  LLVMTypeRef ft = LLVMGetTypeKind(LLVMTypeOf(acc)) == LLVMVectorTypeKind
                       ? LLVMVectorType(C->t_f32, LLVMGetVectorSize(LLVMTypeOf(acc)))
                       : C->t_f32;
  return LLVMBuildFPTrunc(C->b, acc, ft, "");
}

static LLVMValueRef acc_init(LlvmCtx *C, IrDType dt, bool sum) {
  if (sum) return dt != DT_I32 ? LLVMConstReal(C->t_f64, 0) : LLVMConstInt(C->t_i32, 0, 0);
  /* max of nothing: -inf (i32: the interpreter's -inf saturates to INT_MIN) */
  return dt != DT_I32 ? LLVMConstReal(C->t_f32, -__builtin_inf())
                      : LLVMConstInt(C->t_i32, 0x80000000u, 0);
}

/* ---- float reductions of contiguous runs, with vector lanes ----
 * bf16 operands load as VW i16 and widen to floats; the lanes are the f32 path's. */

/* Floats per vector step: 16 lanes are two to four registers, enough independent add chains to
 * hide the add latency on AVX2 and AVX-512 (SSE gets eight chains of two). */
enum { VW = 16 };
/* Elements of an inlined operand computed per step of the block loop (a multiple of VW). */
enum { BLOCK = 64 };

/* Run length when every output element of f32 reduction v reduces a contiguous run of its
 * operand: the reduced axes are the operand's last ones. 0 otherwise, or when the run is too
 * short for a vector step. The operand is stored, or computed inline (pass_fusion_plan lets a
 * reduction over trailing axes take an elementwise operand). */
static int64_t contiguous_run(const LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  if (x->dtype != DT_F32 && x->dtype != DT_BF16) return 0;
  int64_t run = 1;
  for (int32_t d = xs->rank - x->attr.axes.n; d < xs->rank; d++) {
    if (d < 0 || !has_axis(&x->attr.axes, d)) return 0;
    run *= xs->dims[d];
  }
  return run >= VW ? run : 0;
}

/* The step of a sum (in double) or a max (NaN wins) on scalars or vectors alike. */
static LLVMValueRef run_step(LlvmCtx *C, bool sum, LLVMValueRef acc, LLVMValueRef x) {
  return sum ? LLVMBuildFAdd(C->b, acc, x, "") : llvm_scalar_max_nan(C, DT_F32, x, acc);
}

/* The lanes of vector a (n lanes, a power of two) combined pairwise into one scalar. */
static LLVMValueRef lanes_combine(LlvmCtx *C, bool sum, LLVMValueRef a, int n) {
  for (; n > 1; n /= 2) {
    LLVMValueRef lo[VW / 2], hi[VW / 2];
    for (int i = 0; i < n / 2; i++) {
      lo[i] = LLVMConstInt(C->t_i32, (unsigned long long)i, 0);
      hi[i] = LLVMConstInt(C->t_i32, (unsigned long long)(i + n / 2), 0);
    }
    LLVMValueRef u = LLVMGetUndef(LLVMTypeOf(a));
    LLVMValueRef l = LLVMBuildShuffleVector(C->b, a, u, LLVMConstVector(lo, (unsigned)n / 2), "");
    LLVMValueRef h = LLVMBuildShuffleVector(C->b, a, u, LLVMConstVector(hi, (unsigned)n / 2), "");
    a = run_step(C, sum, l, h);
  }
  return LLVMBuildExtractElement(C->b, a, LLVMConstInt(C->t_i32, 0, 0), "");
}

/* A VW-lane accumulator, double lanes for a sum and float for a max, set to the identity. */
static LLVMValueRef lanes_new(LlvmCtx *C, bool sum) {
  LLVMTypeRef lt = sum ? C->t_f64 : C->t_f32;
  LLVMValueRef init[VW];
  for (int i = 0; i < VW; i++) init[i] = LLVMConstReal(lt, sum ? 0.0 : -__builtin_inf());
  LLVMValueRef acc = llvm_alloca_entry(C, LLVMVectorType(lt, VW), "vacc");
  LLVMBuildStore(C->b, LLVMConstVector(init, VW), acc);
  return acc;
}

/* acc = step(acc, the VW floats of src's buffer from element off, widened for a sum). */
static void lanes_add(LlvmCtx *C, LLVMValueRef acc, int32_t src, LLVMValueRef off, bool sum) {
  IrDType dt = val(C, src)->dtype;
  LLVMTypeRef st = llvm_storage_type(C, dt), vs = LLVMVectorType(st, VW);
  LLVMTypeRef vt = LLVMVectorType(sum ? C->t_f64 : C->t_f32, VW);
  LLVMValueRef ep = LLVMBuildInBoundsGEP2(C->b, st, llvm_buffer_ptr(C, src), &off, 1, "");
  LLVMValueRef e =
      LLVMBuildLoad2(C->b, vs, LLVMBuildBitCast(C->b, ep, LLVMPointerType(vs, 0), ""), "");
  LLVMSetAlignment(e, (unsigned)ir_dtype_size(dt));
  llvm_buffer_tag(C, src, e, false);
  if (dt == DT_BF16) e = llvm_bf16_widen(C, e);
  if (sum) e = LLVMBuildFPExt(C->b, e, vt, "");
  LLVMBuildStore(C->b, run_step(C, sum, LLVMBuildLoad2(C->b, vt, acc, ""), e), acc);
}

/* Lanes over run[0, n / VW * VW): lane l takes run[j * VW + l]; then the combined lanes. */
static LLVMValueRef run_vector(LlvmCtx *C, int32_t src, LLVMValueRef base, int64_t n, bool sum) {
  LLVMValueRef acc = lanes_new(C, sum);
  LlvmLoop L;
  LLVMValueRef j = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, n / VW), "v");
  LLVMValueRef off = LLVMBuildNSWAdd(C->b, base, LLVMBuildNSWMul(C->b, j, llvm_i64(C, VW), ""), "");
  lanes_add(C, acc, src, off, sum);
  llvm_loop_end(C, &L);
  LLVMTypeRef vt = LLVMVectorType(sum ? C->t_f64 : C->t_f32, VW);
  return lanes_combine(C, sum, LLVMBuildLoad2(C->b, vt, acc, ""), VW);
}

/* Element j (i64, from the run's start) of reduction v's operand, for output position p whose
 * run starts at base: a load when the operand is stored, else computed at its position (the
 * kept axes from p; one reduced axis takes j itself, several are only ever read linearly:
 * pass_fusion_plan). */
static LLVMValueRef run_elem(LlvmCtx *C, int32_t v, LlvmPos *p, LLVMValueRef base, LLVMValueRef j) {
  const IrValue *x = val(C, v);
  LLVMValueRef lin = LLVMBuildNSWAdd(C->b, base, j, "");
  if (C->mat[x->ops[0]]) return llvm_buffer_load(C, x->ops[0], lin);
  int32_t rank = val(C, x->ops[0])->shape.rank;
  LlvmPos q = {.has_idx = p->has_idx && x->attr.axes.n == 1, .lin = lin};
  if (q.has_idx) {
    for (int32_t d = 0; d < rank - 1; d++) q.idx[d] = p->idx[d];
    q.idx[rank - 1] = j;
  }
  return llvm_elem_get(C, x->ops[0], &q);
}

/* Elements [j0, j0 + count) of the run into the floats at blk (count a multiple of VW). */
static void run_block(LlvmCtx *C, int32_t v, LlvmPos *p, LLVMValueRef base, LLVMValueRef j0,
                      int64_t count, LLVMValueRef blk) {
  LlvmLoop L;
  LLVMValueRef k = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, count), "b");
  LLVMValueRef e = run_elem(C, v, p, base, LLVMBuildNSWAdd(C->b, j0, k, ""));
  LLVMValueRef at[] = {llvm_i64(C, 0), k};
  LLVMBuildStore(C->b, e,
                 LLVMBuildInBoundsGEP2(C->b, LLVMArrayType(C->t_f32, BLOCK), blk, at, 2, ""));
  llvm_loop_end(C, &L);
}

/* acc = step(acc, the VW floats at blk[k * VW]) for k < count / VW. */
static void block_lanes(LlvmCtx *C, LLVMValueRef acc, LLVMValueRef blk, int64_t count, bool sum) {
  LLVMTypeRef vf = LLVMVectorType(C->t_f32, VW), vt = LLVMVectorType(sum ? C->t_f64 : C->t_f32, VW);
  for (int64_t k = 0; k < count / VW; k++) {
    LLVMValueRef at[] = {llvm_i64(C, 0), llvm_i64(C, k * VW)};
    LLVMValueRef ep = LLVMBuildInBoundsGEP2(C->b, LLVMArrayType(C->t_f32, BLOCK), blk, at, 2, "");
    LLVMValueRef e =
        LLVMBuildLoad2(C->b, vf, LLVMBuildBitCast(C->b, ep, LLVMPointerType(vf, 0), ""), "");
    LLVMSetAlignment(e, 4);
    if (sum) e = LLVMBuildFPExt(C->b, e, vt, "");
    LLVMBuildStore(C->b, run_step(C, sum, LLVMBuildLoad2(C->b, vt, acc, ""), e), acc);
  }
}

/* run_vector for an operand computed inline: BLOCK elements at a time into a small buffer (a
 * loop the vectorizer widens like any elementwise kernel), then VW at a time, each block
 * reduced into the lanes in the order run_vector would, so the sum is the same. */
static LLVMValueRef run_vector_fused(LlvmCtx *C, int32_t v, LlvmPos *p, LLVMValueRef base,
                                     int64_t n, bool sum) {
  LLVMValueRef acc = lanes_new(C, sum);
  LLVMValueRef blk = llvm_alloca_entry(C, LLVMArrayType(C->t_f32, BLOCK), "blk");
  LLVMSetAlignment(blk, 64);
  LlvmLoop L;
  LLVMValueRef b = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, n / BLOCK), "blk");
  run_block(C, v, p, base, LLVMBuildNSWMul(C->b, b, llvm_i64(C, BLOCK), ""), BLOCK, blk);
  block_lanes(C, acc, blk, BLOCK, sum);
  llvm_loop_end(C, &L);
  LLVMValueRef f =
      llvm_loop_begin(C, &L, llvm_i64(C, n / BLOCK * BLOCK / VW), llvm_i64(C, n / VW), "v");
  run_block(C, v, p, base, LLVMBuildNSWMul(C->b, f, llvm_i64(C, VW), ""), VW, blk);
  block_lanes(C, acc, blk, VW, sum);
  llvm_loop_end(C, &L);
  LLVMTypeRef vt = LLVMVectorType(sum ? C->t_f64 : C->t_f32, VW);
  return lanes_combine(C, sum, LLVMBuildLoad2(C->b, vt, acc, ""), VW);
}

/* Output element p of float reduction v over runs of length n: the vector part, then the tail. */
static LLVMValueRef reduce_run(LlvmCtx *C, int32_t v, LlvmPos *p, int64_t n) {
  const IrValue *x = val(C, v);
  bool sum = x->op == IR_REDUCE_SUM;
  LLVMValueRef base = LLVMBuildNSWMul(C->b, llvm_pos_lin(C, &x->shape, p), llvm_i64(C, n), "");
  LLVMTypeRef lt = sum ? C->t_f64 : C->t_f32;
  LLVMValueRef acc = llvm_alloca_entry(C, lt, "acc");
  LLVMBuildStore(C->b,
                 C->mat[x->ops[0]] ? run_vector(C, x->ops[0], base, n, sum)
                                   : run_vector_fused(C, v, p, base, n, sum),
                 acc);
  LlvmLoop L;
  LLVMValueRef i = llvm_loop_begin(C, &L, llvm_i64(C, n / VW * VW), llvm_i64(C, n), "t");
  LLVMValueRef e = run_elem(C, v, p, base, i);
  if (sum) e = LLVMBuildFPExt(C->b, e, C->t_f64, "");
  LLVMBuildStore(C->b, run_step(C, sum, LLVMBuildLoad2(C->b, lt, acc, ""), e), acc);
  llvm_loop_end(C, &L);
  return acc_result(C, x->dtype, sum, LLVMBuildLoad2(C->b, lt, acc, ""));
}

LLVMValueRef llvm_reduce_elem(LlvmCtx *C, int32_t v, LlvmPos *p) {
  const IrValue *x = val(C, v);
  int64_t run = contiguous_run(C, v);
  if (run) return reduce_run(C, v, p, run);
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

/* ---- float reductions over leading axes: VW output columns at a time ---- */

/* Whether float (f32 or bf16) reduction v reduces its (materialized) operand's leading axes, so
 * that it is a (R, m) matrix summed down its columns, with at least one vector block of columns. */
bool llvm_reduce_cols_ok(const LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  if (x->op != IR_REDUCE_SUM && x->op != IR_REDUCE_MAX) return false;
  if (x->dtype != DT_F32 && x->dtype != DT_BF16) return false;
  if (!C->mat[x->ops[0]] || x->attr.axes.n >= xs->rank) return false;
  for (int32_t d = 0; d < x->attr.axes.n; d++)
    if (!has_axis(&x->attr.axes, d)) return false;
  return x->attr.axes.n > 0 && ir_shape_numel(&x->shape) >= VW;
}

/* Columns [c0, c0 + VW) of the (R, m) operand reduced into VW lanes, stored at out[c0]. */
static void cols_vector(LlvmCtx *C, int32_t v, LLVMValueRef c0, int64_t R, int64_t m, bool sum) {
  LLVMValueRef acc = lanes_new(C, sum);
  LlvmLoop L;
  LLVMValueRef r = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, R), "r");
  LLVMValueRef off = LLVMBuildNSWAdd(C->b, LLVMBuildNSWMul(C->b, r, llvm_i64(C, m), ""), c0, "");
  lanes_add(C, acc, val(C, v)->ops[0], off, sum);
  llvm_loop_end(C, &L);
  IrDType dt = val(C, v)->dtype;
  LLVMTypeRef et = llvm_storage_type(C, dt), vs = LLVMVectorType(et, VW);
  LLVMValueRef a = LLVMBuildLoad2(C->b, LLVMVectorType(sum ? C->t_f64 : C->t_f32, VW), acc, "");
  a = acc_result(C, dt, sum, a);
  if (dt == DT_BF16) a = llvm_bf16_narrow(C, a);
  LLVMValueRef op = LLVMBuildInBoundsGEP2(C->b, et, llvm_buffer_ptr(C, v), &c0, 1, "");
  LLVMValueRef st = LLVMBuildStore(C->b, a, LLVMBuildBitCast(C->b, op, LLVMPointerType(vs, 0), ""));
  LLVMSetAlignment(st, (unsigned)ir_dtype_size(dt));
  llvm_buffer_tag(C, v, st, true);
}

/* Column c of the (R, m) operand reduced in scalar, stored at out[c]. */
static void cols_scalar(LlvmCtx *C, int32_t v, LLVMValueRef c, int64_t R, int64_t m, bool sum) {
  LLVMTypeRef lt = sum ? C->t_f64 : C->t_f32;
  LLVMValueRef acc = llvm_alloca_entry(C, lt, "acc");
  LLVMBuildStore(C->b, LLVMConstReal(lt, sum ? 0.0 : -__builtin_inf()), acc);
  LlvmLoop L;
  LLVMValueRef r = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, R), "r");
  LLVMValueRef off = LLVMBuildNSWAdd(C->b, LLVMBuildNSWMul(C->b, r, llvm_i64(C, m), ""), c, "");
  LLVMValueRef e = llvm_buffer_load(C, val(C, v)->ops[0], off);
  if (sum) e = LLVMBuildFPExt(C->b, e, C->t_f64, "");
  LLVMBuildStore(C->b, run_step(C, sum, LLVMBuildLoad2(C->b, lt, acc, ""), e), acc);
  llvm_loop_end(C, &L);
  llvm_buffer_store(C, v, c,
                    acc_result(C, val(C, v)->dtype, sum, LLVMBuildLoad2(C->b, lt, acc, "")));
}

/* The kernel's items: m / VW vector blocks of columns, then one item per leftover column.
 * Each column is summed over the rows in order, as the interpreter does. */
int llvm_reduce_cols_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  bool sum = x->op == IR_REDUCE_SUM;
  int64_t m = ir_shape_numel(&x->shape), R = ir_shape_numel(&val(C, x->ops[0])->shape) / m;
  int64_t nvec = m / VW, items = nvec + m % VW;
  char name[64];
  snprintf(name, sizeof name, "k%d_%s", v, ir_op_name(x->op));
  LLVMValueRef fn = llvm_kernel_begin(C, name);
  if (!fn) return -1;
  LlvmLoop I;
  LLVMValueRef i = llvm_loop_begin(C, &I, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), "i");
  LLVMBasicBlockRef vb = LLVMAppendBasicBlockInContext(C->c, C->fn, "vec");
  LLVMBasicBlockRef sb = LLVMAppendBasicBlockInContext(C->c, C->fn, "col");
  LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(C->c, C->fn, "next");
  LLVMBuildCondBr(C->b, LLVMBuildICmp(C->b, LLVMIntSLT, i, llvm_i64(C, nvec), ""), vb, sb);
  LLVMPositionBuilderAtEnd(C->b, vb);
  cols_vector(C, v, LLVMBuildNSWMul(C->b, i, llvm_i64(C, VW), ""), R, m, sum);
  LLVMBuildBr(C->b, next);
  LLVMPositionBuilderAtEnd(C->b, sb);
  cols_scalar(C, v, LLVMBuildNSWAdd(C->b, i, llvm_i64(C, nvec * VW - nvec), ""), R, m, sum);
  LLVMBuildBr(C->b, next);
  LLVMPositionBuilderAtEnd(C->b, next);
  llvm_loop_end(C, &I);
  fn = llvm_kernel_end(C);
  if (!fn) return -1;
  bool par = C->opt.threads && items > 1 && R * m >= C->opt.parallel_min;
  llvm_kernel_call(C, fn, items, par);
  return 0;
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
  LLVMValueRef prod = x->dtype == DT_I32
                          ? LLVMBuildMul(C->b, ea, eb, "")
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
  if (!fn) return -1;
  LlvmLoop R, J;
  LLVMValueRef r = llvm_loop_begin(C, &R, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), "row");
  LLVMValueRef j = llvm_loop_begin(C, &J, llvm_i64(C, 0), llvm_i64(C, x->attr.k), "j");
  top_k_pass(C, v, r, j);
  llvm_loop_end(C, &J);
  llvm_loop_end(C, &R);
  fn = llvm_kernel_end(C);
  if (!fn) return -1;
  bool par = C->opt.threads && rows > 1 && ir_shape_numel(xs) * x->attr.k >= C->opt.parallel_min;
  llvm_kernel_call(C, fn, rows, par);
  return 0;
}

/* ---- scatter_add ---- */

/* Rows [lo, hi) of the result, row elements each, cleared. */
static void scatter_zero(LlvmCtx *C, int32_t v, LLVMValueRef lo, LLVMValueRef hi, int64_t row) {
  LlvmLoop L;
  LLVMValueRef rw = llvm_i64(C, row);
  LLVMValueRef i = llvm_loop_begin(C, &L, LLVMBuildNSWMul(C->b, lo, rw, ""),
                                   LLVMBuildNSWMul(C->b, hi, rw, ""), "z");
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

/* ---- scatter_add of bf16 updates ----
 * Each output element is the f32 sum of its updates rounded once, so the partial sums cannot
 * live in the (bf16) result. The kernel's items are blocks of rows (by blocks of columns, for
 * rows longer than the scratch) whose f32 sums fit a scratch of SCATTER_SCRATCH floats on the
 * stack: an item clears its block, adds the updates whose index falls in its rows, in index
 * order (the same chain on any split), and stores the block rounded. Every item reads every
 * index, which is cheap next to the updates it adds. */
enum { SCATTER_SCRATCH = 8192 };

static LLVMValueRef smin(LlvmCtx *C, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(C->b, LLVMBuildICmp(C->b, LLVMIntSLT, a, b, ""), a, b, "");
}

/* s[rr * cw + j] for the scratch s. */
static LLVMValueRef scratch_at(LlvmCtx *C, LLVMValueRef s, LLVMValueRef rr, int64_t cw,
                               LLVMValueRef j) {
  LLVMValueRef at[] = {
      llvm_i64(C, 0), LLVMBuildNSWAdd(C->b, LLVMBuildNSWMul(C->b, rr, llvm_i64(C, cw), ""), j, "")};
  return LLVMBuildInBoundsGEP2(C->b, LLVMArrayType(C->t_f32, SCATTER_SCRATCH), s, at, 2, "");
}

static int scatter_bf16_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  int64_t rows = x->attr.k, row = ir_shape_numel(&x->shape) / rows;
  int64_t nidx = ir_shape_numel(&val(C, x->ops[0])->shape);
  int64_t cw = row < SCATTER_SCRATCH ? row : SCATTER_SCRATCH, br = SCATTER_SCRATCH / cw;
  int64_t ncb = (row + cw - 1) / cw, items = (rows + br - 1) / br * ncb;
  char name[64];
  snprintf(name, sizeof name, "k%d_scatter_add", v);
  LLVMValueRef fn = llvm_kernel_begin(C, name);
  if (!fn) return -1;
  LLVMValueRef s = llvm_alloca_entry(C, LLVMArrayType(C->t_f32, SCATTER_SCRATCH), "sums");
  LlvmLoop I, L, J;
  LLVMValueRef it = llvm_loop_begin(C, &I, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), "it");
  LLVMValueRef r0 =
      LLVMBuildNSWMul(C->b, LLVMBuildSDiv(C->b, it, llvm_i64(C, ncb), ""), llvm_i64(C, br), "");
  LLVMValueRef c0 =
      LLVMBuildNSWMul(C->b, LLVMBuildSRem(C->b, it, llvm_i64(C, ncb), ""), llvm_i64(C, cw), "");
  LLVMValueRef r1 = smin(C, LLVMBuildNSWAdd(C->b, r0, llvm_i64(C, br), ""), llvm_i64(C, rows));
  LLVMValueRef nr = LLVMBuildNSWSub(C->b, r1, r0, "");
  LLVMValueRef nc = LLVMBuildNSWSub(
      C->b, smin(C, LLVMBuildNSWAdd(C->b, c0, llvm_i64(C, cw), ""), llvm_i64(C, row)), c0, "");
  LLVMValueRef z =
      llvm_loop_begin(C, &L, llvm_i64(C, 0), LLVMBuildNSWMul(C->b, nr, llvm_i64(C, cw), ""), "z");
  LLVMBuildStore(C->b, LLVMConstReal(C->t_f32, 0), scratch_at(C, s, llvm_i64(C, 0), cw, z));
  llvm_loop_end(C, &L);
  LLVMValueRef i = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, nidx), "i");
  LLVMValueRef r = LLVMBuildSExt(C->b, llvm_buffer_load(C, x->ops[0], i), C->t_i64, "");
  LLVMValueRef ok = LLVMBuildAnd(C->b, LLVMBuildICmp(C->b, LLVMIntSGE, r, r0, ""),
                                 LLVMBuildICmp(C->b, LLVMIntSLT, r, r1, ""), "");
  LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(C->c, C->fn, "in");
  LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(C->c, C->fn, "next");
  LLVMBuildCondBr(C->b, ok, yes, next);
  LLVMPositionBuilderAtEnd(C->b, yes);
  LLVMValueRef j = llvm_loop_begin(C, &J, llvm_i64(C, 0), nc, "j");
  LLVMValueRef sp = scratch_at(C, s, LLVMBuildNSWSub(C->b, r, r0, ""), cw, j);
  LLVMValueRef u = LLVMBuildNSWAdd(C->b, LLVMBuildNSWMul(C->b, i, llvm_i64(C, row), ""),
                                   LLVMBuildNSWAdd(C->b, c0, j, ""), "");
  LLVMValueRef sum = LLVMBuildFAdd(C->b, LLVMBuildLoad2(C->b, C->t_f32, sp, ""),
                                   llvm_buffer_load(C, x->ops[1], u), "");
  LLVMBuildStore(C->b, sum, sp);
  llvm_loop_end(C, &J);
  LLVMBuildBr(C->b, next);
  LLVMPositionBuilderAtEnd(C->b, next);
  llvm_loop_end(C, &L);
  LLVMValueRef rr = llvm_loop_begin(C, &L, llvm_i64(C, 0), nr, "rr");
  j = llvm_loop_begin(C, &J, llvm_i64(C, 0), nc, "j");
  LLVMValueRef o = LLVMBuildNSWAdd(
      C->b, LLVMBuildNSWMul(C->b, LLVMBuildNSWAdd(C->b, r0, rr, ""), llvm_i64(C, row), ""),
      LLVMBuildNSWAdd(C->b, c0, j, ""), "");
  llvm_buffer_store(C, v, o, LLVMBuildLoad2(C->b, C->t_f32, scratch_at(C, s, rr, cw, j), ""));
  llvm_loop_end(C, &J);
  llvm_loop_end(C, &L);
  llvm_loop_end(C, &I);
  fn = llvm_kernel_end(C);
  if (!fn) return -1;
  bool par = C->opt.threads && items > 1 && ir_shape_numel(&x->shape) >= C->opt.parallel_min;
  llvm_kernel_call(C, fn, items, par);
  return 0;
}

int llvm_scatter_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = val(C, v);
  if (x->dtype == DT_BF16) return scatter_bf16_emit(C, v);
  int64_t rows = x->attr.k, row = ir_shape_numel(&x->shape) / (rows ? rows : 1);
  int64_t nidx = ir_shape_numel(&val(C, x->ops[0])->shape);
  char name[64];
  snprintf(name, sizeof name, "k%d_scatter_add", v);
  LLVMValueRef fn = llvm_kernel_begin(C, name);
  if (!fn) return -1;
  /* a call owns rows [lo, hi) of the result: it clears them, then reads every index and adds
   * the updates of those that fall in its rows, in index order (out-of-range ones fall in
   * none), so each row's sum is the same chain on any split */
  LLVMValueRef lo = LLVMGetParam(fn, 1), hi = LLVMGetParam(fn, 2);
  scatter_zero(C, v, lo, hi, row);
  LlvmLoop L;
  LLVMValueRef i = llvm_loop_begin(C, &L, llvm_i64(C, 0), llvm_i64(C, nidx), "i");
  LLVMValueRef r = LLVMBuildSExt(C->b, llvm_buffer_load(C, x->ops[0], i), C->t_i64, "");
  LLVMValueRef ok = LLVMBuildAnd(C->b, LLVMBuildICmp(C->b, LLVMIntSGE, r, lo, ""),
                                 LLVMBuildICmp(C->b, LLVMIntSLT, r, hi, ""), "");
  LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(C->c, C->fn, "in");
  LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(C->c, C->fn, "next");
  LLVMBuildCondBr(C->b, ok, yes, next);
  LLVMPositionBuilderAtEnd(C->b, yes);
  scatter_row(C, v, r, i, row);
  LLVMBuildBr(C->b, next);
  LLVMPositionBuilderAtEnd(C->b, next);
  llvm_loop_end(C, &L);
  fn = llvm_kernel_end(C);
  if (!fn) return -1;
  bool par = C->opt.threads && rows > 1 && ir_shape_numel(&x->shape) >= C->opt.parallel_min;
  llvm_kernel_call(C, fn, rows, par);
  return 0;
}
