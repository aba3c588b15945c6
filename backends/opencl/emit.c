/* emit.c: the step graph as OpenCL C 1.2 kernels and a launch list.
 *
 * Every value with a buffer (fusion.c) becomes one kernel, launched in graph order on one
 * in-order queue. Most kernels are output-driven: work item `gid` computes element gid of the
 * value from its operands (ir/interp.c is the spec, backends/llvm/kernel.c the same scheme in
 * LLVM IR). An operand without a buffer is computed inline at the position asked for, so an
 * elementwise chain and the broadcasts feeding it are one kernel. Positions are kept lazily as
 * a linear index, per-dimension indices, or both; index-mapping ops (broadcast, transpose,
 * slice, pad, concat, gather) turn the position into their operand's.
 *
 * The printer is statement-based: each computed element is a `float tN` / `int tN` local, so
 * the source stays linear in the graph. Reductions and loop-nest matrix products loop over the
 * reduced axes in row-major order, summing f32 in double where the device has cl_khr_fp64 (as
 * the interpreter and the LLVM backend do). top_k_indices runs one row per work item;
 * scatter_add one column per work item, over the indices in order (deterministic, no atomics).
 * Matrix products in row-major layouts use the GEMM kernels (gemm.c). Kernels take their
 * tensors' offsets as arguments, and kernels whose text is equal are printed once (kernel_end).
 *
 * Element semantics follow backends/llvm/scalar.c: max/min pass a NaN first operand, compares
 * give 1/0 in the operands' dtype, i32 arithmetic wraps, i32 x/0 is 0, casts to i32 truncate
 * and saturate (NaN -> 0: convert_int_sat), an out-of-range gather index reads a zero row.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/opencl.h"

enum { NAME = 40 };

/* A position in a value's index space (see the file comment); "" means not computed yet. */
typedef struct Pos {
  char lin[NAME];
  bool has_idx;
  char idx[IR_MAX_RANK][NAME];
} Pos;

typedef struct Ctx {
  const IrGraph *g;
  const MemPlan *mp;
  const bool *mat;
  OclOptions o;
  OclBuf *b;      /* the body of the kernel being printed */
  int64_t *args;  /* (nargs) its offset arguments a0, a1, ...: byte offsets in the slab */
  int64_t *bytes; /* (nargs) the bytes each tensor spans from its offset */
  int32_t nargs, cargs;
  OclBuf consts;    /* __constant arrays of data constants, printed before the kernels */
  bool *const_done; /* (nvalues) */
  int tmp;
  int64_t reduced;       /* elements the kernel being printed reduces (the launch list's) */
  int64_t scratch_at;    /* the two-stage reductions' partial sums: past the plan's slab */
  int64_t scratch_bytes; /* the most any reduction uses (they run one after another) */
  int64_t multi_ch;      /* the chunk of the multi-tensor sums (multi_sum_plan) */
  char *err;
  size_t cap;
  bool failed;
} Ctx;

static const IrValue *val(const Ctx *C, int32_t v) { return &C->g->values[v]; }
/* The type of an element in registers: bf16 elements are floats holding bf16 values. */
static const char *ctype(IrDType dt) { return dt == DT_I32 ? "int" : "float"; }
/* The type of an element in the slab: bf16 is stored as its 16 bits. */
static const char *stype(IrDType dt) { return dt == DT_BF16 ? "ushort" : ctype(dt); }

static int fail(Ctx *C, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Ctx *C, const char *fmt, ...) {
  if (!C->failed && C->err && C->cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(C->err, C->cap, fmt, ap);
    va_end(ap);
  }
  C->failed = true;
  return -1;
}

static void newvar(Ctx *C, char *out) { snprintf(out, NAME, "t%d", C->tmp++); }

/* One statement line of a kernel body. */
static void line(Ctx *C, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(Ctx *C, const char *fmt, ...) {
  char s[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s, sizeof s, fmt, ap);
  va_end(ap);
  ocl_buf_printf(C->b, "  %s\n", s);
}

/* A literal of dtype dt that reads back as exactly (dt)v. */
static void literal(IrDType dt, double v, char *out) {
  if (dt == DT_I32) {
    double c = v != v ? 0 : v < -2147483648.0 ? -2147483648.0 : v > 2147483647.0 ? 2147483647.0 : v;
    long long i = (long long)c;
    if (i == -2147483648LL)
      snprintf(out, NAME, "(-2147483647 - 1)");
    else
      snprintf(out, NAME, "%lld", i);
    return;
  }
  float f = (float)(dt == DT_BF16 ? ir_dtype_round(DT_BF16, v) : v);
  if (isnan(f))
    snprintf(out, NAME, "NAN");
  else if (isinf(f))
    snprintf(out, NAME, "%sINFINITY", f < 0 ? "-" : "");
  else {
    char s[32];
    snprintf(s, sizeof s, "%.9g", (double)f);
    snprintf(out, NAME, "%.32s%sf", s, strpbrk(s, ".e") ? "" : ".0");
  }
}

/* ---- positions ---- */

static void pos_lin(Ctx *C, const IrShape *s, Pos *p) {
  if (p->lin[0]) return;
  if (s->rank == 0) {
    snprintf(p->lin, NAME, "0");
    return;
  }
  /* Horner: ((i0 * d1 + i1) * d2 + i2) */
  char e[1024];
  size_t n = 0;
  for (int32_t d = 0; d < s->rank - 1; d++) n += (size_t)snprintf(e + n, sizeof e - n, "(");
  n += (size_t)snprintf(e + n, sizeof e - n, "%s", p->idx[0]);
  for (int32_t d = 1; d < s->rank && n < sizeof e; d++)
    n += (size_t)snprintf(e + n, sizeof e - n, " * %lldL + %s)", (long long)s->dims[d], p->idx[d]);
  newvar(C, p->lin);
  line(C, "long %s = %s;", p->lin, e);
}

static void pos_idx(Ctx *C, const IrShape *s, Pos *p) {
  if (p->has_idx) return;
  int64_t stride = 1;
  for (int32_t d = s->rank - 1; d >= 0; d--) {
    newvar(C, p->idx[d]);
    if (d == 0)
      line(C, "long %s = %s / %lldL;", p->idx[d], p->lin, (long long)stride);
    else
      line(C, "long %s = %s / %lldL %% %lldL;", p->idx[d], p->lin, (long long)stride,
           (long long)s->dims[d]);
    stride *= s->dims[d];
  }
  p->has_idx = true;
}

static Pos pos_of_lin(const char *lin) {
  Pos q = {.has_idx = false};
  snprintf(q.lin, NAME, "%s", lin);
  return q;
}

/* ---- elements ---- */

static void elem_get(Ctx *C, int32_t v, Pos *p, char *out);

/* v's buffer in the current kernel: an offset argument, so that kernels that differ only in
 * where their tensors live are one kernel in the source (see kernel_end). */
/* The offset argument for `bytes` bytes at slab offset off (one per distinct offset). */
static int32_t arg_of(Ctx *C, int64_t off, int64_t bytes) {
  int32_t a = 0;
  while (a < C->nargs && C->args[a] != off) a++;
  if (a == C->nargs) {
    if (C->nargs == C->cargs) {
      int32_t n = C->cargs ? 2 * C->cargs : 16;
      C->args = base_xrealloc(C->args, (size_t)n * sizeof *C->args);
      C->bytes = base_xrealloc(C->bytes, (size_t)n * sizeof *C->bytes);
      C->cargs = n;
    }
    C->bytes[C->nargs] = 0;
    C->args[C->nargs++] = off;
  }
  if (bytes > C->bytes[a]) C->bytes[a] = bytes;
  return a;
}

static void buf_ref(Ctx *C, int32_t v, char *out, size_t cap) {
  IrDType dt = val(C, v)->dtype;
  int64_t bytes = ir_shape_numel(&val(C, v)->shape) * (int64_t)ir_dtype_size(dt);
  int32_t a = arg_of(C, C->mp->offset[v], bytes);
  /* sN: the buffer that holds it (the slab may be split over several: runtime/opencl.c) */
  snprintf(out, cap, "%s(s%d, a%d)", dt == DT_I32 ? "AXI" : dt == DT_BF16 ? "AXH" : "AXF", a, a);
}

/* A __constant array for data constant v, printed once. */
static void const_array(Ctx *C, int32_t v) {
  if (C->const_done[v]) return;
  C->const_done[v] = true;
  const IrValue *x = val(C, v);
  int64_t n = ir_shape_numel(&x->shape);
  ocl_buf_printf(&C->consts, "__constant %s c%d[%lld] = {", ctype(x->dtype), v,
                 (long long)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    char l[NAME];
    literal(x->dtype, x->attr.data[i], l);
    ocl_buf_printf(&C->consts, "%s%s%s", i ? "," : "", i && i % 16 == 0 ? "\n  " : i ? " " : "", l);
  }
  ocl_buf_printf(&C->consts, "%s};\n", n ? "" : "0");
}

static void constant_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  if (!x->attr.data) {
    literal(x->dtype, x->attr.value, out);
    return;
  }
  const_array(C, v);
  pos_lin(C, &x->shape, p);
  newvar(C, out);
  line(C, "%s %s = c%d[%s];", ctype(x->dtype), out, v, p->lin);
}

static void broadcast_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  pos_idx(C, &x->shape, p);
  Pos q = {.has_idx = true};
  for (int32_t d = 0; d < xs->rank; d++)
    snprintf(q.idx[d], NAME, "%s", xs->dims[d] == 1 ? "0L" : p->idx[x->attr.axes.v[d]]);
  elem_get(C, x->ops[0], &q, out);
}

static void transpose_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  pos_idx(C, &x->shape, p);
  Pos q = {.has_idx = true};
  for (int32_t d = 0; d < x->shape.rank; d++)
    snprintf(q.idx[x->attr.axes.v[d]], NAME, "%s", p->idx[d]);
  elem_get(C, x->ops[0], &q, out);
}

static void slice_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  pos_idx(C, &x->shape, p);
  Pos q = {.has_idx = true};
  for (int32_t d = 0; d < x->shape.rank; d++) {
    newvar(C, q.idx[d]);
    line(C, "long %s = %s + %lldL;", q.idx[d], p->idx[d], (long long)x->attr.lo.v[d]);
  }
  elem_get(C, x->ops[0], &q, out);
}

/* q = i - off clamped to [0, n-1]; *in names "whether it was inside" (may be NULL). */
static void clamp_idx(Ctx *C, const char *i, int64_t off, int64_t n, char *q, char *in) {
  char t[NAME];
  newvar(C, t);
  line(C, "long %s = %s - %lldL;", t, i, (long long)off);
  if (in) {
    newvar(C, in);
    line(C, "int %s = %s >= 0 && %s < %lldL;", in, t, t, (long long)n);
  }
  newvar(C, q);
  line(C, "long %s = clamp(%s, 0L, %lldL);", q, t, (long long)(n - 1));
}

static void pad_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  char fill[NAME];
  literal(x->dtype, x->attr.value, fill);
  if (ir_shape_numel(xs) == 0) {
    snprintf(out, NAME, "%s", fill);
    return;
  }
  pos_idx(C, &x->shape, p);
  Pos q = {.has_idx = true};
  char all[1024] = "1";
  for (int32_t d = 0; d < xs->rank; d++) {
    char in[NAME];
    clamp_idx(C, p->idx[d], x->attr.lo.v[d], xs->dims[d], q.idx[d], in);
    size_t n = strlen(all);
    snprintf(all + n, sizeof all - n, " && %s", in);
  }
  char e[NAME];
  elem_get(C, x->ops[0], &q, e);
  newvar(C, out);
  line(C, "%s %s = (%s) ? %s : %s;", ctype(x->dtype), out, all, e, fill);
}

/* Every operand read at its clamped position; the one whose range holds the index wins. */
static void concat_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  int32_t axis = (int32_t)x->attr.axis;
  pos_idx(C, &x->shape, p);
  newvar(C, out);
  line(C, "%s %s = 0;", ctype(x->dtype), out);
  int64_t off = 0;
  for (int32_t k = 0; k < x->nops; k++) {
    int64_t len = val(C, x->ops[k])->shape.dims[axis];
    if (len > 0) {
      Pos q = {.has_idx = true};
      for (int32_t d = 0; d < x->shape.rank; d++) snprintf(q.idx[d], NAME, "%s", p->idx[d]);
      clamp_idx(C, p->idx[axis], off, len, q.idx[axis], NULL);
      char e[NAME];
      elem_get(C, x->ops[k], &q, e);
      line(C, "if (%s >= %lldL && %s < %lldL) %s = %s;", p->idx[axis], (long long)off, p->idx[axis],
           (long long)(off + len), out, e);
    }
    off += len;
  }
}

/* reshape and one-device collectives: the same elements in the same order. */
static void copy_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  pos_lin(C, &val(C, v)->shape, p);
  Pos q = pos_of_lin(p->lin);
  elem_get(C, val(C, v)->ops[0], &q, out);
}

/* (table (V, D...), idx (I...)) -> (I..., D...); an index outside 0..V-1 reads zeros. */
static void gather_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  const IrShape *ts = &val(C, x->ops[0])->shape;
  int64_t row = ir_shape_numel(ts) / (ts->dims[0] ? ts->dims[0] : 1);
  pos_lin(C, &x->shape, p);
  char i[NAME], j[NAME], t[NAME], ok[NAME], lin[NAME], e[NAME];
  newvar(C, i);
  line(C, "long %s = %s / %lldL;", i, p->lin, (long long)row);
  newvar(C, j);
  line(C, "long %s = %s %% %lldL;", j, p->lin, (long long)row);
  Pos qi = pos_of_lin(i);
  elem_get(C, x->ops[1], &qi, t);
  newvar(C, ok);
  line(C, "int %s = %s >= 0 && %s < %lld;", ok, t, t, (long long)ts->dims[0]);
  newvar(C, lin);
  line(C, "long %s = (long)clamp(%s, 0, %lld) * %lldL + %s;", lin, t, (long long)(ts->dims[0] - 1),
       (long long)row, j);
  Pos q = pos_of_lin(lin);
  elem_get(C, x->ops[0], &q, e);
  newvar(C, out);
  line(C, "%s %s = %s ? %s : 0;", ctype(x->dtype), out, ok, e);
}

/* ---- reductions and the loop-nest matrix product ---- */

static bool has_axis(const IrDims *axes, int32_t d) {
  for (int32_t k = 0; k < axes->n; k++)
    if (axes->v[k] == d) return true;
  return false;
}

/* Declares the accumulator `acc` of a sum or max of dtype dt. */
static void acc_begin(Ctx *C, IrDType dt, bool sum, char *acc) {
  newvar(C, acc);
  if (sum)
    line(C, "%s %s = 0;", dt == DT_I32 ? "int" : "axacc", acc);
  else
    line(C, "%s %s = %s;", ctype(dt), acc, dt == DT_I32 ? "INT_MIN" : "-INFINITY");
}

static void acc_step(Ctx *C, IrDType dt, bool sum, const char *acc, const char *x) {
  if (sum && dt == DT_I32)
    line(C, "%s = (int)((uint)%s + (uint)%s);", acc, acc, x);
  else if (sum)
    line(C, "%s += (axacc)%s;", acc, x);
  else if (dt == DT_I32)
    line(C, "if (%s > %s) %s = %s;", x, acc, acc, x);
  else
    line(C, "if (!isnan(%s) && (isnan(%s) || %s > %s)) %s = %s;", acc, x, x, acc, acc, x);
}

/* The result: a bf16 one is the f32 (or wider) accumulator rounded once: a double one through
 * an f32 rounded to odd (ax_acc_odd), as (float) would round twice where the interpreter rounds
 * its double sum to bf16 once (1 + 2^-8 + 2^-40: 1 through f32, 1 + 2^-7 at once). */
static void acc_end(Ctx *C, IrDType dt, const char *acc, char *out) {
  newvar(C, out);
  if (dt == DT_BF16)
    line(C, "float %s = ax_bf16r(ax_acc_odd(%s));", out, acc);
  else
    line(C, "%s %s = (%s)%s;", ctype(dt), out, ctype(dt), acc);
}

static void reduce_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  bool sum = x->op == IR_REDUCE_SUM;
  pos_idx(C, &x->shape, p);
  char acc[NAME];
  acc_begin(C, x->dtype, sum, acc);
  Pos q = {.has_idx = true};
  int32_t o = 0, loops = 0;
  for (int32_t d = 0; d < xs->rank; d++) {
    if (!has_axis(&x->attr.axes, d)) {
      snprintf(q.idx[d], NAME, "%s", p->idx[o++]);
      continue;
    }
    newvar(C, q.idx[d]);
    line(C, "for (long %s = 0; %s < %lldL; %s++) {", q.idx[d], q.idx[d], (long long)xs->dims[d],
         q.idx[d]);
    loops++;
  }
  char e[NAME];
  elem_get(C, x->ops[0], &q, e);
  acc_step(C, x->dtype, sum, acc, e);
  for (int32_t k = 0; k < loops; k++) line(C, "}");
  acc_end(C, x->dtype, acc, out);
}

/* Output position -> lhs and rhs positions, as the interpreter's dot_split_index. */
static void dot_split(const IrValue *x, const IrShape *as, const IrShape *bs, const Pos *p, Pos *ap,
                      Pos *bp) {
  const IrAttrs *a = &x->attr;
  int32_t o = 0;
  for (int32_t k = 0; k < a->lb.n; k++, o++) {
    snprintf(ap->idx[a->lb.v[k]], NAME, "%s", p->idx[o]);
    snprintf(bp->idx[a->rb.v[k]], NAME, "%s", p->idx[o]);
  }
  for (int32_t d = 0; d < as->rank; d++)
    if (!has_axis(&a->lb, d) && !has_axis(&a->lc, d)) snprintf(ap->idx[d], NAME, "%s", p->idx[o++]);
  for (int32_t d = 0; d < bs->rank; d++)
    if (!has_axis(&a->rb, d) && !has_axis(&a->rc, d)) snprintf(bp->idx[d], NAME, "%s", p->idx[o++]);
}

static void dot_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  const IrShape *as = &val(C, x->ops[0])->shape, *bs = &val(C, x->ops[1])->shape;
  pos_idx(C, &x->shape, p);
  char acc[NAME];
  acc_begin(C, x->dtype, true, acc);
  Pos ap = {.has_idx = true}, bp = {.has_idx = true};
  dot_split(x, as, bs, p, &ap, &bp);
  for (int32_t k = 0; k < x->attr.lc.n; k++) {
    char i[NAME];
    newvar(C, i);
    line(C, "for (long %s = 0; %s < %lldL; %s++) {", i, i, (long long)as->dims[x->attr.lc.v[k]], i);
    snprintf(ap.idx[x->attr.lc.v[k]], NAME, "%s", i);
    snprintf(bp.idx[x->attr.rc.v[k]], NAME, "%s", i);
  }
  char ea[NAME], eb[NAME];
  elem_get(C, x->ops[0], &ap, ea);
  elem_get(C, x->ops[1], &bp, eb);
  if (C->g->matmul == IR_MATMUL_TF32 && val(C, x->ops[0])->dtype == DT_F32) { /* the policy */
    char ra[NAME], rb[NAME];
    newvar(C, ra);
    newvar(C, rb);
    line(C, "float %s = ax_tf32(%s), %s = ax_tf32(%s);", ra, ea, rb, eb);
    snprintf(ea, NAME, "%s", ra);
    snprintf(eb, NAME, "%s", rb);
  }
  if (x->dtype == DT_I32)
    line(C, "%s = (int)((uint)%s + (uint)%s * (uint)%s);", acc, acc, ea, eb);
  else
    line(C, "%s += (axacc)%s * (axacc)%s;", acc, ea, eb);
  for (int32_t k = 0; k < x->attr.lc.n; k++) line(C, "}");
  acc_end(C, x->dtype, acc, out);
}

/* ---- elementwise ---- */

static const char *unary_f32(IrOp op) {
  switch (op) {
  case IR_NEG: return "(-%s)";
  case IR_EXP: return "exp(%s)";
  case IR_LOG: return "log(%s)";
  case IR_TANH: return "tanh(%s)";
  case IR_SQRT: return "sqrt(%s)";
  case IR_RSQRT: return "(1.0f / sqrt(%s))";
  case IR_ABS: return "fabs(%s)";
  case IR_SIN: return "sin(%s)";
  case IR_COS: return "cos(%s)";
  case IR_ERF: return "erf(%s)";
  case IR_LOGISTIC: return "(1.0f / (1.0f + exp(-%s)))";
  case IR_STOP_GRADIENT: return "(%s)";
  default: return NULL;
  }
}

static void unary(Ctx *C, IrOp op, IrDType dt, const char *a, char *e, size_t cap) {
  if (op == IR_STOP_GRADIENT)
    snprintf(e, cap, "(%s)", a);
  else if (dt == DT_I32 && op == IR_NEG)
    snprintf(e, cap, "(int)(0u - (uint)%s)", a);
  else if (dt == DT_I32 && op == IR_ABS)
    snprintf(e, cap, "(%s < 0 ? (int)(0u - (uint)%s) : %s)", a, a, a);
  else if (dt == DT_I32) {
    /* the float functions on an i32 (the verifier rejects them): through f32 */
    char f[256];
    snprintf(f, sizeof f, "(float)%s", a);
    char g[512];
    snprintf(g, sizeof g, unary_f32(op) ? unary_f32(op) : "%s", f);
    snprintf(e, cap, "convert_int_sat(%s)", g);
  } else {
    snprintf(e, cap, unary_f32(op) ? unary_f32(op) : "%s", a);
    if (!unary_f32(op)) fail(C, "internal: unary op %s has no OpenCL form", ir_op_name(op));
  }
}

static const char *compare_op(IrOp op) {
  switch (op) {
  case IR_EQ: return "==";
  case IR_NE: return "!=";
  case IR_LT: return "<";
  case IR_LE: return "<=";
  case IR_GT: return ">";
  case IR_GE: return ">=";
  default: return NULL;
  }
}

static void binary(IrOp op, IrDType dt, const char *a, const char *b, char *e, size_t cap) {
  bool i = dt == DT_I32;
  const char *cmp = compare_op(op);
  switch (op) {
  case IR_ADD: snprintf(e, cap, i ? "(int)((uint)%s + (uint)%s)" : "(%s + %s)", a, b); return;
  case IR_SUB: snprintf(e, cap, i ? "(int)((uint)%s - (uint)%s)" : "(%s - %s)", a, b); return;
  case IR_MUL: snprintf(e, cap, i ? "(int)((uint)%s * (uint)%s)" : "(%s * %s)", a, b); return;
  case IR_DIV: snprintf(e, cap, i ? "ax_idiv(%s, %s)" : "(%s / %s)", a, b); return;
  case IR_MAX:
    if (i)
      snprintf(e, cap, "(%s >= %s ? %s : %s)", a, b, a, b);
    else
      snprintf(e, cap, "((%s >= %s || isnan(%s)) ? %s : %s)", a, b, a, a, b);
    return;
  case IR_MIN:
    if (i)
      snprintf(e, cap, "(%s <= %s ? %s : %s)", a, b, a, b);
    else
      snprintf(e, cap, "((%s <= %s || isnan(%s)) ? %s : %s)", a, b, a, a, b);
    return;
  case IR_POW:
    if (i)
      snprintf(e, cap, "convert_int_sat(pow((float)%s, (float)%s))", a, b);
    else
      snprintf(e, cap, "pow(%s, %s)", a, b);
    return;
  default:
    snprintf(e, cap, "((%s %s %s) ? %s : %s)", a, cmp ? cmp : "==", b, i ? "1" : "1.0f",
             i ? "0" : "0.0f");
    return;
  }
}

/* The bf16 ops whose f32 result may sit on a bf16 tie that the exact one does not (log,
 * logistic: a correctly rounded f32 does; exp, sin, cos and the rest within their OpenCL error
 * bounds; div and sqrt of bf16 operands cannot, but an f32 within 2.5-3 ulps is not correctly
 * rounded everywhere): computed in double, rounded once. */
static bool rounds_once(IrOp op) {
  switch (op) {
  case IR_EXP:
  case IR_LOG:
  case IR_TANH:
  case IR_SQRT:
  case IR_RSQRT:
  case IR_SIN:
  case IR_COS:
  case IR_ERF:
  case IR_LOGISTIC:
  case IR_DIV:
  case IR_POW: return true;
  default: return false;
  }
}

static void elementwise_elem(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  char a[3][NAME], e[1024];
  for (int32_t k = 0; k < x->nops && k < 3; k++) elem_get(C, x->ops[k], p, a[k]);
  IrDType adt = val(C, x->ops[0])->dtype;
  if (x->op == IR_SELECT)
    snprintf(e, sizeof e, "((%s != %s) ? %s : %s)", a[0], adt == DT_I32 ? "0" : "0.0f", a[1], a[2]);
  else if (x->op == IR_CAST && adt == x->dtype)
    snprintf(e, sizeof e, "%s", a[0]);
  else if (x->op == IR_CAST && x->dtype == DT_BF16 && adt == DT_I32)
    snprintf(e, sizeof e, "ax_i2f_odd(%s)", a[0]); /* rounded to bf16 below */
  else if (x->op == IR_CAST)
    snprintf(e, sizeof e, x->dtype == DT_I32 ? "convert_int_sat(%s)" : "(float)%s", a[0]);
  else if (x->dtype == DT_BF16 && rounds_once(x->op)) {
    /* in double where the device has it, rounded to odd in an f32: ax_bf16r then rounds the
     * double once, as the interpreter (a correctly rounded f32 on a bf16 tie would round twice) */
    char d[2][NAME * 4], f[sizeof e - 16];
    for (int32_t k = 0; k < x->nops && k < 2; k++) snprintf(d[k], sizeof d[k], "((axacc)%s)", a[k]);
    if (x->nops == 1)
      unary(C, x->op, adt, d[0], f, sizeof f);
    else
      binary(x->op, adt, d[0], d[1], f, sizeof f);
    snprintf(e, sizeof e, "ax_acc_odd(%s)", f);
  } else if (x->nops == 1)
    unary(C, x->op, adt, a[0], e, sizeof e);
  else
    binary(x->op, adt, a[0], a[1], e, sizeof e);
  newvar(C, out);
  if (x->dtype == DT_BF16) /* each op rounds, fused or not, as the interpreter's */
    line(C, "float %s = ax_bf16r(%s);", out, e);
  else
    line(C, "%s %s = %s;", ctype(x->dtype), out, e);
}

static void elem_compute(Ctx *C, int32_t v, Pos *p, char *out) {
  const IrValue *x = val(C, v);
  switch (x->op) {
  case IR_CONSTANT: constant_elem(C, v, p, out); return;
  case IR_IOTA:
    pos_idx(C, &x->shape, p);
    if (x->dtype == DT_BF16) { /* an index above 256 is not a bf16 */
      newvar(C, out);
      line(C, "float %s = ax_bf16r((float)%s);", out, p->idx[x->attr.axis]);
      return;
    }
    if (snprintf(out, NAME, "(%s)%s", ctype(x->dtype), p->idx[x->attr.axis]) >= NAME)
      fail(C, "opencl: iota: the index expression %s is too long", p->idx[x->attr.axis]);
    return;
  case IR_BROADCAST: broadcast_elem(C, v, p, out); return;
  case IR_TRANSPOSE: transpose_elem(C, v, p, out); return;
  case IR_SLICE: slice_elem(C, v, p, out); return;
  case IR_PAD: pad_elem(C, v, p, out); return;
  case IR_CONCAT: concat_elem(C, v, p, out); return;
  case IR_GATHER: gather_elem(C, v, p, out); return;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX: reduce_elem(C, v, p, out); return;
  case IR_DOT: dot_elem(C, v, p, out); return;
  case IR_RESHAPE:
  case IR_ALL_REDUCE:
  case IR_ALL_GATHER:
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL:
  case IR_LOCAL_SLICE: copy_elem(C, v, p, out); return; /* one device; more: collective_launch */
  default:
    if (ir_op_flags(x->op) & IR_ELEMENTWISE) {
      elementwise_elem(C, v, p, out);
      return;
    }
    fail(C, "%%%d (%s): no element form in the OpenCL backend", v, ir_op_name(x->op));
    snprintf(out, NAME, "0");
  }
}

static void elem_get(Ctx *C, int32_t v, Pos *p, char *out) {
  if (!C->mat[v]) {
    elem_compute(C, v, p, out);
    return;
  }
  const IrValue *x = val(C, v);
  char ref[NAME];
  buf_ref(C, v, ref, sizeof ref);
  pos_lin(C, &x->shape, p);
  newvar(C, out);
  if (x->dtype == DT_BF16)
    line(C, "float %s = ax_from_bf16(%s[%s]);", out, ref, p->lin);
  else
    line(C, "%s %s = %s[%s];", ctype(x->dtype), out, ref, p->lin);
}

/* ---- kernels ---- */

/* The kernels printed so far, without duplicates, and the launch list. */
typedef struct Launches {
  OclBuf text;      /* every distinct kernel, named */
  char **bodies;    /* (nuniq) each distinct kernel's text without its name */
  char **names;     /* (nuniq) */
  uint64_t *hashes; /* (nuniq) */
  int32_t nuniq, cuniq;
  RtOclLaunch *v;   /* (n) */
  int32_t *line;    /* (n) first line of each launch's kernel in `text` */
  int64_t *reduced; /* (n) elements each launch reduces (0: not a reduction) */
  int32_t *uline;   /* (nuniq) */
  int32_t n, cap;
  int32_t lines; /* newlines in text */
} Launches;

static uint64_t hash_str(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static void kernel_begin(Ctx *C, OclBuf *body) {
  body->n = 0;
  if (body->s) body->s[0] = 0;
  C->b = body;
  C->nargs = 0;
  C->reduced = 0;
  C->tmp = 0; /* names restart, so equal kernels print equal text */
}

static void grow(void **p, size_t elem, int32_t *cap, int32_t need) {
  if (need <= *cap) return;
  int32_t n = *cap ? *cap * 2 : 64;
  *p = base_xrealloc(*p, (size_t)n * elem);
  *cap = n;
}

/* The kernel named like its text's first instance, or a new one named `name`; returns its
 * index among the distinct kernels. */
static int32_t kernel_unique(Launches *L, const char *text, const char *name) {
  uint64_t h = hash_str(text);
  for (int32_t i = 0; i < L->nuniq; i++)
    if (L->hashes[i] == h && !strcmp(L->bodies[i], text)) return i;
  int32_t c = L->cuniq;
  grow((void **)&L->bodies, sizeof *L->bodies, &c, L->nuniq + 1);
  c = L->cuniq;
  grow((void **)&L->names, sizeof *L->names, &c, L->nuniq + 1);
  c = L->cuniq;
  grow((void **)&L->hashes, sizeof *L->hashes, &c, L->nuniq + 1);
  grow((void **)&L->uline, sizeof *L->uline, &L->cuniq, L->nuniq + 1);
  int32_t u = L->nuniq++;
  L->bodies[u] = base_xstrdup(text);
  L->names[u] = base_xstrdup(name);
  L->hashes[u] = h;
  L->uline[u] = L->lines + 1;
  const char *at = strstr(text, "@NAME@");
  ocl_buf_printf(&L->text, "%.*s%s%s", (int)(at - text), text, name, at + 6);
  for (const char *p = text; *p; p++) L->lines += *p == '\n';
  return u;
}

/* Ends the kernel whose body is in C->b: prints its header (attrs, the slab, the offset
 * arguments), keeps it unless an identical kernel exists, and adds its launch. */
static void kernel_end(Ctx *C, Launches *L, const char *name, const char *attrs,
                       RtOclLaunch shape) {
  OclBuf t = {0};
  ocl_buf_printf(&t, "__kernel %svoid @NAME@(", attrs);
  for (int32_t a = 0; a < C->nargs; a++)
    ocl_buf_printf(&t, "%s__global uchar *s%d, long a%d", a ? ", " : "", a, a);
  ocl_buf_printf(&t, "%s) {\n%s}\n\n", C->nargs ? "" : "void", C->b->s ? C->b->s : "");
  int32_t u = C->failed ? -1 : kernel_unique(L, t.s, name);
  ocl_buf_free(&t);
  if (u < 0) return;
  int32_t cap = L->cap;
  grow((void **)&L->v, sizeof *L->v, &cap, L->n + 1);
  cap = L->cap;
  grow((void **)&L->reduced, sizeof *L->reduced, &cap, L->n + 1);
  grow((void **)&L->line, sizeof *L->line, &L->cap, L->n + 1);
  int64_t *args = base_xmalloc(((size_t)C->nargs + 1) * sizeof *args);
  int64_t *bytes = base_xmalloc(((size_t)C->nargs + 1) * sizeof *bytes);
  if (C->nargs > 0) { /* memcpy takes no null pointer, even for 0 bytes */
    memcpy(args, C->args, (size_t)C->nargs * sizeof *args);
    memcpy(bytes, C->bytes, (size_t)C->nargs * sizeof *bytes);
  }
  shape.kernel = L->names[u];
  shape.nargs = C->nargs;
  shape.args = args;
  shape.arg_bytes = bytes;
  L->line[L->n] = L->uline[u];
  L->reduced[L->n] = C->reduced;
  L->v[L->n++] = shape;
}

/* The prologue of a kernel over n work items: gid, and the test hook. */
static void kernel_items(Ctx *C, const Launches *L, int64_t n) {
  line(C, "long gid = get_global_id(0);");
  line(C, "if (gid >= %lldL) return;", (long long)n);
  if (C->o.break_kernel == L->n + 1)
    line(C, "axlc_broken_on_purpose = 1; /* AXLC_OPENCL_BREAK_KERNEL */");
}

static RtOclLaunch items(int64_t n) { return (RtOclLaunch){.dims = 1, .global = {n, 1, 1}}; }

static void kernel_name(const Ctx *C, int32_t v, const char *what, char *out) {
  snprintf(out, 64, "k%d_%s", v, what ? what : ir_op_name(val(C, v)->op));
}

static void map_kernel(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  const IrValue *x = val(C, v);
  char name[64], e[NAME], ref[NAME];
  kernel_name(C, v, NULL, name);
  kernel_begin(C, body);
  kernel_items(C, L, ir_shape_numel(&x->shape));
  if (x->op == IR_REDUCE_SUM || x->op == IR_REDUCE_MAX)
    C->reduced = ir_shape_numel(&val(C, x->ops[0])->shape);
  Pos p = pos_of_lin("gid");
  elem_compute(C, v, &p, e);
  buf_ref(C, v, ref, sizeof ref);
  if (x->dtype == DT_BF16)
    line(C, "%s[gid] = ax_to_bf16(%s);", ref, e);
  else
    line(C, "%s[gid] = %s;", ref, e);
  kernel_end(C, L, name, "", items(ir_shape_numel(&x->shape)));
}

/* One row per work item: k passes of the interpreter's selection (NaN largest, ties to the
 * lower index). */
static void top_k_kernel(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  const IrValue *x = val(C, v), *in = val(C, x->ops[0]);
  int64_t len = in->shape.dims[in->shape.rank - 1], k = x->attr.k;
  int64_t rows = ir_shape_numel(&in->shape) / (len ? len : 1);
  char name[64], xr[NAME], outr[NAME];
  kernel_name(C, v, "top_k", name);
  kernel_begin(C, body);
  kernel_items(C, L, rows);
  buf_ref(C, x->ops[0], xr, sizeof xr);
  buf_ref(C, v, outr, sizeof outr);
  line(C, "__global const %s *x = %s + gid * %lldL;", stype(in->dtype), xr, (long long)len);
  line(C, "__global int *o = %s + gid * %lldL;", outr, (long long)k);
  line(C, "for (long j = 0; j < %lldL; j++) {", (long long)k);
  line(C, "  long best = -1;");
  line(C, "  for (long i = 0; i < %lldL; i++) {", (long long)len);
  line(C, "    int taken = 0;");
  line(C, "    for (long t = 0; t < j; t++) taken |= o[t] == (int)i;");
  line(C, "    if (taken) continue;");
  if (in->dtype == DT_I32)
    line(C, "    if (best < 0 || x[i] > x[best]) best = i;");
  else if (in->dtype == DT_BF16) {
    line(C, "    float xi = ax_from_bf16(x[i]), xb = ax_from_bf16(x[max(best, 0L)]);");
    line(C, "    if (best < 0 || (isnan(xi) ? !isnan(xb) : xi > xb)) best = i;");
  } else
    line(C, "    if (best < 0 || (isnan(x[i]) ? !isnan(x[best]) : x[i] > x[best])) best = i;");
  line(C, "  }");
  line(C, "  o[j] = (int)best;");
  line(C, "}");
  kernel_end(C, L, name, "", items(rows));
}

/* ---- fused attention ----
 *
 * attention and attention_grad on f32 or bf16 (..., T, H) tensors: flash-style, the (T, T)
 * scores never stored. Each of the nb = numel / (T H) problems is cut into blocks of ATT_ROWS
 * rows, one work-group a block, one work item a row, the row's H-vectors in private arrays;
 * the other side's rows come in tiles of `tile` rows staged in local memory (zero past T) for
 * the whole group. All arithmetic is f32 (bf16 loads widen, each result rounds once).
 * - attention: query rows. Per key tile, the row's scores, the tile's max, then one rescale of
 *   the running sum l and output row acc (online softmax); o = acc / l. Causal: a block reads
 *   the key tiles up to its last row only, and row i the keys j <= i in them.
 * - attention_grad, three launches. _stats recomputes the forward per query row and saves
 *   LSE = m + log l and D = dout . o (the softmax backward's row term) in a scratch area past
 *   the slab (2 floats a row, shared with the reductions' scratch: the launches run in order);
 *   _kv, key rows: over the query tiles that see the block (causal: from the block's first row
 *   on), P = exp(scale q.k - LSE), dS = P (dout.v - D), dk += dS q, dv += P dout; _q, query
 *   rows: dq += dS k over the key tiles, as the forward reads them.
 * Grouped-query (ir_attention_group: G query problems per key problem): the query-row kernels
 * read key problem b / G; _kv runs over the key problems and loops over the group's query
 * problems, so dk and dv are summed in registers; the result is laid out as
 * ir_attention_grad_at says.
 * Work items depend on the shapes only, and each writes its own rows: no atomics, the same
 * bits on every run. */

enum { ATT_MAX_H = 1024, ATT_ROWS = 32, ATT_LOCAL = 24576 /* bytes of local tiles */ };
/* The tensor-core body (att_mma_body): blocks of 64 rows, 16 a warp; the other side's rows in
 * tiles of 32; heads of up to 128 (padded to a multiple of 16 with zeros). */
enum { ATT_MMA_ROWS = 64, ATT_MMA_TILE = 32, ATT_MMA_MAX_H = 128 };

typedef struct Att {
  int64_t Tq, Tk, H, nb, tile; /* query and key rows; tile: other-side rows per local tile */
  int64_t G; /* grouped-query: query problems per key problem (ir_attention_group) */
  bool causal, bf16;
  bool mma; /* the kernel has a tensor-core body too (att_mma_ok) */
  char scale[NAME];
  char q[NAME], k[NAME], v[NAME], g[NAME], out[NAME]; /* slab references; g: dout */
  char pos[NAME];                                     /* the query positions, or "" (row i at i) */
  char st[NAME];                                      /* attention_grad: LSE and D per row */
} Att;

static int att_setup(Ctx *C, int32_t v, Att *a) {
  const IrValue *x = val(C, v);
  const IrShape *qs = &val(C, x->ops[0])->shape;
  const IrShape *ks = &val(C, x->ops[1])->shape;
  a->Tq = qs->dims[qs->rank - 2];
  a->Tk = ks->dims[ks->rank - 2];
  a->H = qs->dims[qs->rank - 1];
  a->nb = ir_shape_numel(qs) / (a->Tq * a->H);
  a->G = ir_attention_group(qs, ks);
  a->causal = x->attr.k != 0;
  a->bf16 = val(C, x->ops[0])->dtype == DT_BF16;
  int64_t per = (x->op == IR_ATTENTION_GRAD ? 2 * a->H + 2 : 2 * a->H) * 4; /* bytes a row */
  a->tile = ATT_LOCAL / per < ATT_ROWS ? ATT_LOCAL / per : ATT_ROWS;
  if (a->tile < 1) a->tile = 1;
  literal(DT_F32, x->attr.value, a->scale);
  a->mma = a->H <= ATT_MMA_MAX_H;
  if (a->H > ATT_MAX_H)
    return fail(C, "%%%d (%s): head size %lld is above the OpenCL kernel's %d", v,
                ir_op_name(x->op), (long long)a->H, ATT_MAX_H);
  buf_ref(C, x->ops[0], a->q, NAME);
  buf_ref(C, x->ops[1], a->k, NAME);
  buf_ref(C, x->ops[2], a->v, NAME);
  if (x->op == IR_ATTENTION_GRAD) buf_ref(C, x->ops[3], a->g, NAME);
  int32_t pos = ir_attention_positions(x);
  a->pos[0] = 0;
  if (pos != IR_NONE) buf_ref(C, pos, a->pos, NAME);
  buf_ref(C, v, a->out, NAME);
  if (x->op == IR_ATTENTION_GRAD) {
    int64_t bytes = a->nb * a->Tq * 8;
    int32_t s = arg_of(C, C->scratch_at, bytes);
    snprintf(a->st, NAME, "AXF(s%d, a%d)", s, s);
    if (bytes > C->scratch_bytes) C->scratch_bytes = bytes;
  }
  return 0;
}

/* A problem's own rows: keys (kv) or queries. */
static int64_t att_own(const Att *a, bool kv) { return kv ? a->Tk : a->Tq; }

/* The blocks of ATT_ROWS of a problem's own rows. */
static int64_t att_blocks(const Att *a, bool kv) {
  return (att_own(a, kv) + ATT_ROWS - 1) / ATT_ROWS;
}

/* The kernel's row count of tensor p: TK_ for the keys and values, TQ_ for q and dout. */
static const char *att_rows_of(const Att *a, const char *p) {
  return p == a->k || p == a->v ? "TK_" : "TQ_";
}

/* An element of tensor p at index e, as a float. */
static void att_ld(const Att *a, const char *p, const char *e, char *out) {
  snprintf(out, 2 * NAME + 64, a->bf16 ? "ax_from_bf16(%s[%s])" : "%s[%s]", p, e);
}

/* The four attention kernels (the section comment). */
typedef enum { ATT_FWD, ATT_STATS, ATT_KV, ATT_Q } AttKind;

static void att_mma_body(Ctx *C, const Att *a, AttKind kind);

/* Begins v's kernel `what`: one work-group of ATT_ROWS items per block of rows; for item lid of
 * group grp, the block's first row r0, the item's row r (live: r < T). Query rows: the query
 * problem b, its base index and its key problem's kbase. Key rows (ATT_KV): the key problem kp
 * and kbase; the kernel runs over the group's query problems. Where the kernel has a
 * tensor-core body (att_mma_ok), that comes first, under #if AX_MMA, and this SIMT body
 * after #else (att_end closes it). */
static int att_begin(Ctx *C, OclBuf *body, int32_t v, const char *what, Att *a, char *name,
                     AttKind kind) {
  bool kv = kind == ATT_KV;
  kernel_name(C, v, what, name);
  kernel_begin(C, body);
  if (att_setup(C, v, a)) return -1;
  /* POS(i): query row i's position, within the keys there are (used where i < TQ_) */
  if (a->pos[0])
    ocl_buf_printf(C->b, "#define POS(i) clamp(%s[i], 0, TK_ - 1)\n", a->pos);
  else
    ocl_buf_printf(C->b, "#define POS(i) (i)\n");
  if (a->mma) {
    ocl_buf_printf(C->b, "#if AX_MMA\n");
    att_mma_body(C, a, kind);
    ocl_buf_printf(C->b, "#else\n");
  }
  line(C, "const int TQ_ = %lld, TK_ = %lld, H_ = %lld, TILE = %lld;", (long long)a->Tq,
       (long long)a->Tk, (long long)a->H, (long long)a->tile);
  line(C, "const long QH = %lldL, KH = %lldL, G_ = %lldL;", (long long)(a->Tq * a->H),
       (long long)(a->Tk * a->H), (long long)a->G);
  line(C, "int lid = get_local_id(0);");
  line(C, "long grp = get_group_id(0), %s = grp / %lldL;", kv ? "kp" : "b",
       (long long)att_blocks(a, kv));
  line(C, "int r0 = (int)(grp %% %lldL) * %d, r = r0 + lid;", (long long)att_blocks(a, kv),
       ATT_ROWS);
  line(C, "bool live = r < %s;", kv ? "TK_" : "TQ_");
  if (kv)
    line(C, "long kbase = kp * KH;");
  else
    line(C, "long base = b * QH, kbase = b / G_ * KH;");
  return 0;
}

/* Where attention_grad stores query problem b's dq (problems of Tk H from the result's start),
 * and key problem kp's dk and dv (ir_attention_grad_at). */
static void att_grad_at(const Att *a, int which, char *out, size_t cap) {
  long long nb = a->nb, G = a->G;
  if (G == 1)
    snprintf(out, cap, which == 0 ? "b" : "(%lldL + kp)", which == 2 ? 2 * nb : nb);
  else if (which == 0)
    snprintf(out, cap, "(b / %lldL * %lldL + b %% %lldL)", G, G + 2, G);
  else
    snprintf(out, cap, "(kp * %lldL + %lldL)", G + 2, G + which - 1);
}

static void att_end(Ctx *C, Launches *L, const Att *a, const char *name, bool kv) {
  ocl_buf_printf(C->b, "#undef KS\n#undef VS\n#undef QS\n#undef GS\n#undef LSE\n#undef DD\n");
  if (a->mma) ocl_buf_printf(C->b, "#endif\n");
  ocl_buf_printf(C->b, "#undef POS\n");
  int64_t probs = kv ? a->nb / a->G : a->nb;
  RtOclLaunch shape = {
      .dims = 1, .global = {probs * att_blocks(a, kv) * ATT_ROWS, 1, 1}, .local = {ATT_ROWS, 1, 1}};
  if (a->mma) { /* 4 warps a work-group, one block of ATT_MMA_ROWS rows; 2 dims for both */
    shape.dims = 2;
    shape.global[1] = shape.local[1] = 1;
    shape.mma_global[0] = probs * ((att_own(a, kv) + ATT_MMA_ROWS - 1) / ATT_MMA_ROWS) * 32;
    shape.mma_global[1] = 4;
    shape.mma_global[2] = 1;
    shape.mma_local[0] = 32;
    shape.mma_local[1] = 4;
    shape.mma_local[2] = 1;
  }
  kernel_end(C, L, name, "", shape);
}

/* Loads the item's own row of tensor p (problem at index `at`) into private x[H] (zeros for a
 * row past T). */
static void att_row(Ctx *C, const Att *a, const char *x, const char *p, const char *at) {
  char e[2 * NAME + 64], i[64];
  snprintf(i, sizeof i, "%s + r * H_ + d", at);
  att_ld(a, p, i, e);
  line(C, "float %s[%lld];", x, (long long)a->H);
  line(C, "for (int d = 0; d < H_; d++) %s[d] = live ? %s : 0.0f;", x, e);
}

/* Stages the LSE and D of query rows j0 .. j0 + n in local lse[] and dd[] (past Tq: LSE
 * infinite, so P is 0), item `first` and every `step`-th after it. */
static void att_stage_stats(Ctx *C, const Att *a, const char *first, const char *n, int step) {
  line(C, "  for (int e = %s; e < %s; e += %d) {", first, n, step);
  line(C, "    bool in = j0 + e < TQ_;");
  line(C, "    lse[e] = in ? %s[(b * TQ_ + j0 + e) * 2] : INFINITY;", a->st);
  line(C, "    dd[e] = in ? %s[(b * TQ_ + j0 + e) * 2 + 1] : 0.0f;", a->st);
  line(C, "  }");
}

/* Stages rows j0 .. j0 + TILE of tensors p1 and p2 in local x1, x2 (zero past their rows, n:
 * TQ_ or TK_), between barriers: the group's items share the loads; with `stats`, the tile's LSE
 * and D too. The
 * kernel reads a tile through the macros X1(i), X2(i) (x1, x2 upper case; LSE, DD). On a CPU
 * device (AXLC_CPU_REDUCE) they read the tensors themselves, with no staging and no barriers:
 * PoCL runs a group's items as loops around each barrier, with whatever lives across one
 * stored per item (docs/bench.md, "OpenCL fused attention on PoCL"). */
static void att_stage(Ctx *C, const Att *a, const char *x1, const char *p1, const char *x2,
                      const char *p2, const char *at, const char *n, bool stats) {
  char e1[2 * NAME + 64], e2[2 * NAME + 64], u1[8], u2[8], i1[64], i2[64];
  snprintf(i1, sizeof i1, "%s + j0 * H_ + (i)", at);
  snprintf(i2, sizeof i2, "%s + j0 * H_ + e", at);
  for (int i = 0; i < 8; i++) {
    u1[i] = (char)(x1[i] >= 'a' && x1[i] <= 'z' ? x1[i] - 32 : x1[i]);
    u2[i] = (char)(x2[i] >= 'a' && x2[i] <= 'z' ? x2[i] - 32 : x2[i]);
    if (!x1[i] || !x2[i]) break;
  }
  att_ld(a, p1, i1, e1);
  att_ld(a, p2, i1, e2);
  ocl_buf_printf(C->b, "#ifdef AXLC_CPU_REDUCE\n");
  ocl_buf_printf(C->b, "#define %s(i) %s\n#define %s(i) %s\n", u1, e1, u2, e2);
  if (stats)
    ocl_buf_printf(C->b,
                   "#define LSE(i) %s[(b * TQ_ + j0 + (i)) * 2]\n"
                   "#define DD(i) %s[(b * TQ_ + j0 + (i)) * 2 + 1]\n",
                   a->st, a->st);
  ocl_buf_printf(C->b, "#else\n");
  att_ld(a, p1, i2, e1);
  att_ld(a, p2, i2, e2);
  line(C, "  barrier(CLK_LOCAL_MEM_FENCE);");
  line(C, "  for (int e = lid; e < TILE * H_; e += %d) {", ATT_ROWS);
  line(C, "    bool in = j0 + e / H_ < %s;", n);
  line(C, "    %s[e] = in ? %s : 0.0f;", x1, e1);
  line(C, "    %s[e] = in ? %s : 0.0f;", x2, e2);
  line(C, "  }");
  if (stats) att_stage_stats(C, a, "lid", "TILE", ATT_ROWS);
  line(C, "  barrier(CLK_LOCAL_MEM_FENCE);");
  ocl_buf_printf(C->b, "#define %s(i) %s[i]\n#define %s(i) %s[i]\n", u1, x1, u2, x2);
  if (stats) ocl_buf_printf(C->b, "#define LSE(i) lse[i]\n#define DD(i) dd[i]\n");
  ocl_buf_printf(C->b, "#endif\n");
}

/* nk: the keys the block of query rows from r0 sees (causal: up to its last row's position);
 * with causal, pr: the keys [0, pr] the item's row sees. */
static void att_keys(Ctx *C, const Att *a, int rows) {
  if (a->causal) {
    line(C, "int nk = min(TK_, POS(min(r0 + %d, TQ_) - 1) + 1);", rows);
    line(C, "int pr = POS(min(r, TQ_ - 1));");
  } else
    line(C, "int nk = TK_;");
}

/* Key rows (ATT_KV): opens the loop over the query tiles of `tile` rows (-1: TILE) that see
 * the block of keys from r0: causal, from the tile of query r0 without positions, else from
 * the first tile whose last row's position reaches r0 (the same for every item of the group,
 * so the tiles it skips skip no barrier). */
static void att_query_tiles(Ctx *C, const Att *a, int tile) {
  char t[16];
  snprintf(t, sizeof t, tile < 0 ? "TILE" : "%d", tile);
  line(C, "for (int j0 = %s; j0 < TQ_; j0 += %s) {", a->causal && !a->pos[0] ? "r0" : "0", t);
  if (a->causal && a->pos[0]) line(C, "  if (POS(min(j0 + %s, TQ_) - 1) < r0) continue;", t);
}

/* The online softmax of the item's query row qr over the key tiles the block sees: m, l and
 * the unnormalized output row acc[H] (attention and attention_grad_stats). */
static void att_forward_rows(Ctx *C, const Att *a) {
  long long H = a->H, TL = a->tile;
  att_row(C, a, "qr", a->q, "base");
  line(C, "__local float ks[%lld], vs[%lld];", TL * H, TL * H);
  line(C, "float m = -INFINITY, l = 0.0f, acc[%lld], s[%lld];", H, TL);
  line(C, "for (int d = 0; d < H_; d++) acc[d] = 0.0f;");
  att_keys(C, a, ATT_ROWS);
  line(C, "for (int j0 = 0; j0 < nk; j0 += TILE) {");
  att_stage(C, a, "ks", a->k, "vs", a->v, "kbase", "TK_", false);
  line(C, "  int jn = min(TILE, %s - j0);", a->causal ? "min(pr + 1, nk)" : "TK_");
  line(C, "  if (jn <= 0) continue;");
  line(C, "  float mt = m;");
  line(C, "  for (int jj = 0; jj < jn; jj++) {");
  line(C, "    float dot = 0.0f;");
  line(C, "    for (int d = 0; d < H_; d++) dot += qr[d] * KS(jj * H_ + d);");
  line(C, "    s[jj] = dot * %s;", a->scale);
  line(C, "    mt = fmax(mt, s[jj]);");
  line(C, "  }");
  line(C, "  float c = exp(m - mt);");
  line(C, "  l *= c;");
  line(C, "  for (int d = 0; d < H_; d++) acc[d] *= c;");
  line(C, "  for (int jj = 0; jj < jn; jj++) {");
  line(C, "    float p = exp(s[jj] - mt);");
  line(C, "    l += p;");
  line(C, "    for (int d = 0; d < H_; d++) acc[d] += p * VS(jj * H_ + d);");
  line(C, "  }");
  line(C, "  m = mt;");
  line(C, "}");
}

static void att_store(Ctx *C, const Att *a, const char *at, const char *x) {
  if (a->bf16)
    line(C, "%s[%s] = ax_to_bf16(%s);", a->out, at, x);
  else
    line(C, "%s[%s] = %s;", a->out, at, x);
}

/* ---- fused attention on the tensor cores ----
 *
 * The bf16 kernels' second body (built where the runtime defines AX_MMA, as the products'):
 * work-groups of 4 warps (32 x 4 items), each warp 16 rows of its block of ATT_MMA_ROWS, the
 * other side's rows staged in local memory ATT_MMA_TILE at a time (zero past T and H), every
 * product a run of the warp-level steps ax_mma_bf16 (gemm.c: PTX's mma.sync, or its emulation
 * on PoCL). A lane holds the row fragments of its warp's rows (g and g + 8, with g = lane / 4)
 * in registers: a product's C fragment (rows g, g + 8, columns 2t, 2t + 1 of each 8-column
 * tile) is the A fragment of the next product over the same columns, so P and dS go from one
 * product to the next without leaving the registers. A row's max and sums over its columns
 * combine the 4 lanes of a quad (ax_quad_max, ax_quad_sum: shuffles on NVIDIA).
 *
 * The interpreter's arithmetic is f32 throughout, and q, k, v and dout are bf16, so the
 * products of two of them are exact in the f32 accumulator. P and dS are f32: each enters a
 * product as two bf16 operands, hi + lo (ax_split2), whose sum keeps 16 of its 24 bits; a
 * result then differs from the interpreter's by about 2^-17 of its terms, below the one
 * rounding to bf16 it gets. The kernels:
 * - ATT_FWD, ATT_STATS (query rows): S = Q K^T over the key tiles the block sees, the online
 *   softmax on the C fragments, O += P V; _stats stores LSE and D = dout . o instead of o.
 * - ATT_KV (key rows): per query tile of the group's query problems (causal: from the block's
 *   first row), S^T = K Q^T and dP^T = V dout^T, P^T = exp(scale S^T - LSE), dS^T =
 *   P^T (dP^T - D), dV += P^T dout, dK += dS^T Q.
 * - ATT_Q (query rows): S = Q K^T, dP = dout V^T, dS as above, dQ += dS K.
 * A tile read as a B operand along the head dimension is staged row by row (X[row][d]); one
 * read along its rows is staged transposed (Xt[d][row]), so every fragment is one aligned
 * 32-bit load of two neighbouring elements. */

/* The element type of the tiles and the zero of an element past T or H. */
static const char *att_mma_elem(const Att *a) { return a->bf16 ? "ushort" : "float"; }
static const char *att_mma_zero(const Att *a) { return a->bf16 ? "(ushort)0" : "0.0f"; }

/* Stages rows j0 .. j0 + ATT_MMA_TILE of tensor p (problem at `at`) in local memory: `rows`
 * (X[j][d], may be NULL) and `cols` (Xt[d][j], bf16 only, may be NULL), zero past T and H. */
static void att_mma_stage(Ctx *C, const Att *a, const char *p, const char *at, const char *rows,
                          const char *cols) {
  const char *n = att_rows_of(a, p);
  line(C, "  for (int i = tid; i < %d * HP; i += 128) {", ATT_MMA_TILE);
  line(C, "    int j = i / HP, d = i %% HP;");
  line(C, "    %s e = j0 + j < %s && d < H_ ? %s[%s + (j0 + j) * H_ + d] : %s;", att_mma_elem(a), n,
       p, at, att_mma_zero(a));
  if (rows) line(C, "    %s[j * LDA + d] = e;", rows);
  if (cols) line(C, "    %s[d * LDT + j] = e;", cols);
  line(C, "  }");
}

/* Loads rows ra and rb of tensor p (problem at `at`) as A fragments: bf16, pairs in x[NKS][4];
 * f32, single elements as TF32 hi + lo in xh[NKS][4] and xl[NKS][4]. */
static void att_mma_rows(Ctx *C, const Att *a, const char *x, const char *p, const char *at) {
  const char *n = att_rows_of(a, p);
  if (a->bf16) {
    line(C, "uint %s[NKS_][4];", x);
    line(C, "for (int ks = 0; ks < NKS; ks++) {");
    line(C, "  int d = ks * 16 + 2 * t;");
    line(C, "  %s[ks][0] = AX_LD2(%s, %s, ra, d, %s);", x, p, at, n);
    line(C, "  %s[ks][1] = AX_LD2(%s, %s, rb, d, %s);", x, p, at, n);
    line(C, "  %s[ks][2] = AX_LD2(%s, %s, ra, d + 8, %s);", x, p, at, n);
    line(C, "  %s[ks][3] = AX_LD2(%s, %s, rb, d + 8, %s);", x, p, at, n);
    line(C, "}");
    return;
  }
  line(C, "uint %sh[NKS_][4], %sl[NKS_][4];", x, x);
  line(C, "for (int ks = 0; ks < NKS; ks++) {");
  line(C, "  int d = ks * 8 + t;");
  line(C, "  ax_split_tf32(AX_LD1(%s, %s, ra, d, %s), &%sh[ks][0], &%sl[ks][0]);", p, at, n, x, x);
  line(C, "  ax_split_tf32(AX_LD1(%s, %s, rb, d, %s), &%sh[ks][1], &%sl[ks][1]);", p, at, n, x, x);
  line(C, "  ax_split_tf32(AX_LD1(%s, %s, ra, d + 4, %s), &%sh[ks][2], &%sl[ks][2]);", p, at, n, x,
       x);
  line(C, "  ax_split_tf32(AX_LD1(%s, %s, rb, d + 4, %s), &%sh[ks][3], &%sl[ks][3]);", p, at, n, x,
       x);
  line(C, "}");
}

/* c[n][4] (n < 4, the tile's 32 columns) += rows . X[col][..] over the head dimension, X a
 * row-staged tile, the rows the A fragments `x` (att_mma_rows). */
static void att_mma_qk(Ctx *C, const Att *a, const char *c, const char *x, const char *X) {
  line(C, "  for (int n = 0; n < 4; n++)");
  line(C, "    for (int ks = 0; ks < NKS; ks++) {");
  if (a->bf16) {
    line(C, "      __local const ushort *p = %s + (n * 8 + g) * LDA + ks * 16 + 2 * t;", X);
    line(C, "      uint bb[2] = {*(__local const uint *)p, *(__local const uint *)(p + 8)};");
    line(C, "      ax_mma_bf16(%s[n], %s[ks], bb, x);", c, x);
  } else {
    line(C, "      __local const float *p = %s + (n * 8 + g) * LDA + ks * 8 + t;", X);
    line(C, "      uint bh[2], bl[2];");
    line(C, "      ax_split_tf32(p[0], &bh[0], &bl[0]);");
    line(C, "      ax_split_tf32(p[4], &bh[1], &bl[1]);");
    line(C, "      ax_mma_3tf32(%s[n], %sh[ks], %sl[ks], bh, bl, x);", c, x, x);
  }
  line(C, "    }");
}

/* acc[NT][4] += c (the tile's 32 columns) . X over the tile's rows. bf16: c's C fragments are
 * the A fragments, as hi + lo, and X a transposed tile (Xt[d][j]). f32: c goes through the
 * warp's 16 rows of Ps (the TF32 A fragment holds other columns than the C fragment), X a
 * row-staged tile (a TF32 B fragment is one element: either layout loads it). */
static void att_mma_pv(Ctx *C, const Att *a, const char *acc, const char *c, const char *X) {
  if (a->bf16) {
    line(C, "  for (int u = 0; u < 2; u++) {");
    line(C, "    uint h[4], o[4];");
    line(C, "    ax_split2(%s[2 * u][0], %s[2 * u][1], &h[0], &o[0]);", c, c);
    line(C, "    ax_split2(%s[2 * u][2], %s[2 * u][3], &h[1], &o[1]);", c, c);
    line(C, "    ax_split2(%s[2 * u + 1][0], %s[2 * u + 1][1], &h[2], &o[2]);", c, c);
    line(C, "    ax_split2(%s[2 * u + 1][2], %s[2 * u + 1][3], &h[3], &o[3]);", c, c);
    line(C, "    for (int nt = 0; nt < NT; nt++) {");
    line(C, "      __local const ushort *p = %s + (nt * 8 + g) * LDT + u * 16 + 2 * t;", X);
    line(C, "      uint bb[2] = {*(__local const uint *)p, *(__local const uint *)(p + 8)};");
    line(C, "      ax_mma_bf16(%s[nt], h, bb, x);", acc);
    line(C, "      ax_mma_bf16(%s[nt], o, bb, x);", acc);
    line(C, "    }");
    line(C, "  }");
    return;
  }
  line(C, "  barrier(CLK_LOCAL_MEM_FENCE); /* the warp's rows of Ps are read */");
  line(C, "  for (int n = 0; n < 4; n++)");
  line(C,
       "    for (int e = 0; e < 4; e++) P[((e >> 1) * 8 + g) * LDP + n * 8 + 2 * t + (e & 1)] = "
       "%s[n][e];",
       c);
  line(C, "  barrier(CLK_LOCAL_MEM_FENCE);");
  line(C, "  for (int u = 0; u < 4; u++) {");
  line(C, "    uint ah[4], al[4];");
  line(C, "    ax_split_tf32(P[g * LDP + u * 8 + t], &ah[0], &al[0]);");
  line(C, "    ax_split_tf32(P[(g + 8) * LDP + u * 8 + t], &ah[1], &al[1]);");
  line(C, "    ax_split_tf32(P[g * LDP + u * 8 + t + 4], &ah[2], &al[2]);");
  line(C, "    ax_split_tf32(P[(g + 8) * LDP + u * 8 + t + 4], &ah[3], &al[3]);");
  line(C, "    for (int nt = 0; nt < NT; nt++) {");
  line(C, "      __local const float *p = %s + (u * 8 + t) * LDA + nt * 8 + g;", X);
  line(C, "      uint bh[2], bl[2];");
  line(C, "      ax_split_tf32(p[0], &bh[0], &bl[0]);");
  line(C, "      ax_split_tf32(p[4 * LDA], &bh[1], &bl[1]);");
  line(C, "      ax_mma_3tf32(%s[nt], ah, al, bh, bl, x);", acc);
  line(C, "    }");
  line(C, "  }");
}

/* Stores acc[NT][4] (times `mul`, may be empty) at rows ra, rb < n (TQ_ or TK_), columns < H,
 * of the problem at `at`. */
static void att_mma_store(Ctx *C, const Att *a, const char *acc, const char *mul, const char *at,
                          const char *n) {
  char to[160], e[64];
  line(C, "for (int nt = 0; nt < NT; nt++)");
  line(C, "  for (int e = 0; e < 4; e++) {");
  line(C, "    int r = e < 2 ? ra : rb, d = nt * 8 + 2 * t + (e & 1);");
  line(C, "    if (r >= %s || d >= H_) continue;", n);
  snprintf(to, sizeof to, "%s + r * H_ + d", at);
  snprintf(e, sizeof e, "%s[nt][e]%s", acc, mul);
  ocl_buf_printf(C->b, "  ");
  att_store(C, a, to, e);
  line(C, "  }");
}

/* Declares local tiles: `nr` row-staged ones named rows[i] and, for bf16, `nc` transposed
 * ones named cols[i] (uint words, so that pairs of bf16 load as aligned words). */
static void att_mma_tiles(Ctx *C, const Att *a, int64_t HP, int64_t LDA, int64_t LDT,
                          const char *const *rows, int nr, const char *const *cols, int nc) {
  for (int i = 0; i < nr; i++)
    if (a->bf16) {
      line(C, "__local uint %s_w[%lld];", rows[i], (long long)(ATT_MMA_TILE * LDA / 2));
      line(C, "__local ushort *%s = (__local ushort *)%s_w;", rows[i], rows[i]);
    } else
      line(C, "__local float %s[%lld];", rows[i], (long long)(ATT_MMA_TILE * LDA));
  for (int i = 0; a->bf16 && i < nc; i++) {
    line(C, "__local uint %s_w[%lld];", cols[i], (long long)(HP * LDT / 2));
    line(C, "__local ushort *%s = (__local ushort *)%s_w;", cols[i], cols[i]);
  }
  if (!a->bf16) { /* f32: each warp's 16 rows of P or dS, on their way to A fragments */
    line(C, "__local float Ps[4 * 16 * LDP];");
    line(C, "__local float *P = Ps + warp * 16 * LDP;");
  }
}

/* Query rows: a zeroed accumulator acc[NT][4], then the loop over the key tiles the block sees
 * (causal: up to its last row), opened up to its first barrier. */
static void att_mma_key_tiles(Ctx *C, const Att *a, const char *acc) {
  line(C, "float %s[NT_][4];", acc);
  line(C, "for (int nt = 0; nt < NT; nt++)");
  line(C, "  for (int e = 0; e < 4; e++) %s[nt][e] = 0.0f;", acc);
  line(C, "int nk = %s;", a->causal ? "min(TK_, POS(min(r0 + 64, TQ_) - 1) + 1)" : "TK_");
  line(C, "for (int j0 = 0; j0 < nk; j0 += %d) {", ATT_MMA_TILE);
  line(C, "  barrier(CLK_LOCAL_MEM_FENCE);");
}

/* After the tiles' staging (the barrier here ends it), the backward's s = rows . X1 and
 * dp = rows2 . X2 (rows1 and rows2 A fragments, X1 and X2 row-staged tiles); then P =
 * exp(scale s - LSE) into s and dS = P (dp - D) into dp, on the C fragments of the tile's 32
 * columns: keys (ATT_Q: the rows' LSE and D in lse0, lse1, D0, D1) or, with `key_rows`
 * (ATT_KV), queries (theirs staged in lse[], dd[]). */
static void att_mma_ds(Ctx *C, const Att *a, bool key_rows, const char *rows1, const char *X1,
                       const char *rows2, const char *X2) {
  line(C, "  barrier(CLK_LOCAL_MEM_FENCE);");
  line(C, "  float s[4][4] = {{0.0f}}, dp[4][4] = {{0.0f}};");
  att_mma_qk(C, a, "s", rows1, X1);
  att_mma_qk(C, a, "dp", rows2, X2);
  line(C, "  for (int n = 0; n < 4; n++)");
  line(C, "    for (int e = 0; e < 4; e++) {");
  line(C, "      int jj = n * 8 + 2 * t + (e & 1), c = j0 + jj, r = e < 2 ? ra : rb;");
  line(C, "      float p = %s%s ? exp(s[n][e] * %s - %s) : 0.0f;",
       key_rows ? "c < TQ_ && r < TK_" : "c < TK_ && r < TQ_",
       !a->causal ? ""
       : key_rows ? " && r <= POS(c)"
                  : " && c <= POS(r)",
       a->scale, key_rows ? "lse[jj]" : "(e < 2 ? lse0 : lse1)");
  line(C, "      s[n][e] = p;");
  line(C, "      dp[n][e] = p * (dp[n][e] - %s);", key_rows ? "dd[jj]" : "(e < 2 ? D0 : D1)");
  line(C, "    }");
}

static void att_mma_body(Ctx *C, const Att *a, AttKind kind) {
  int64_t kstep = a->bf16 ? 16 : 8; /* the head dimension per mma step */
  int64_t HP = (a->H + kstep - 1) / kstep * kstep, LDT = ATT_MMA_TILE + 8;
  int64_t LDA = HP + (a->bf16 ? 8 : 4), LDP = ATT_MMA_TILE + 4;
  bool kv = kind == ATT_KV, q = kind == ATT_Q, bf = a->bf16;
  int64_t nblk = (att_own(a, kv) + ATT_MMA_ROWS - 1) / ATT_MMA_ROWS;
  ocl_buf_printf(C->b, "#define NKS_ %lld\n#define NT_ %lld\n", (long long)(HP / kstep),
                 (long long)HP / 8);
  if (bf)
    ocl_buf_printf(C->b,
                   "#define AX_LD2(p, at, r, d, n) ((r) < (n) ? (uint)((d) < H_ ? p[(at) + (r) * "
                   "H_ + (d)] : 0) | (uint)((d) + 1 < H_ ? p[(at) + (r) * H_ + (d) + 1] : 0) << 16 "
                   ": 0u)\n");
  else
    ocl_buf_printf(C->b, "#define AX_LD1(p, at, r, d, n) ((r) < (n) && (d) < H_ ? p[(at) + (r) * "
                         "H_ + (d)] : 0.0f)\n");
  line(C,
       "const int TQ_ = %lld, TK_ = %lld, H_ = %lld, HP = %lld, LDA = %lld, LDT = %lld, LDP = "
       "%lld;",
       (long long)a->Tq, (long long)a->Tk, (long long)a->H, (long long)HP, (long long)LDA,
       (long long)LDT, (long long)LDP);
  line(C, "const int NKS = NKS_, NT = NT_;");
  line(C, "const long QH = %lldL, KH = %lldL, G_ = %lldL;", (long long)(a->Tq * a->H),
       (long long)(a->Tk * a->H), (long long)a->G);
  line(C, "int lane = get_local_id(0), warp = get_local_id(1), tid = warp * 32 + lane;");
  line(C, "int g = lane >> 2, t = lane & 3;");
  line(C, "__local uint Xs[AX_MMA_X];");
  line(C, "__local uint *x = Xs + warp * AX_MMA_XW;");
  line(C, "long grp = get_group_id(0), %s = grp / %lldL;", kv ? "kp" : "b", (long long)nblk);
  line(C, "int r0 = (int)(grp %% %lldL) * %d, ra = r0 + warp * 16 + g, rb = ra + 8;",
       (long long)nblk, ATT_MMA_ROWS);
  if (kind == ATT_FWD || kind == ATT_STATS) {
    line(C, "long base = b * QH, kbase = b / G_ * KH;");
    att_mma_tiles(C, a, HP, LDA, LDT, (const char *[]){"Ks", "Vs"}, bf ? 1 : 2,
                  (const char *[]){"Vt"}, 1);
    att_mma_rows(C, a, "qa", a->q, "base");
    line(C, "float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;");
    if (a->causal) line(C, "int pa = POS(min(ra, TQ_ - 1)), pb = POS(min(rb, TQ_ - 1));");
    att_mma_key_tiles(C, a, "acc");
    att_mma_stage(C, a, a->k, "kbase", "Ks", NULL);
    att_mma_stage(C, a, a->v, "kbase", bf ? NULL : "Vs", bf ? "Vt" : NULL);
    line(C, "  barrier(CLK_LOCAL_MEM_FENCE);");
    line(C, "  float s[4][4] = {{0.0f}};");
    att_mma_qk(C, a, "s", "qa", "Ks");
    line(C, "  float mx0 = m0, mx1 = m1;");
    line(C, "  for (int n = 0; n < 4; n++)");
    line(C, "    for (int e = 0; e < 4; e++) {");
    line(C, "      int j = j0 + n * 8 + 2 * t + (e & 1), r = e < 2 ? ra : rb;");
    line(C, "      s[n][e] = j < TK_%s ? s[n][e] * %s : -INFINITY;",
         a->causal ? " && j <= (e < 2 ? pa : pb)" : "", a->scale);
    line(C, "      if (e < 2) mx0 = fmax(mx0, s[n][e]); else mx1 = fmax(mx1, s[n][e]);");
    line(C, "    }");
    line(C, "  mx0 = ax_quad_max(mx0, x);");
    line(C, "  mx1 = ax_quad_max(mx1, x);");
    line(C, "  float c0 = mx0 == -INFINITY ? 1.0f : exp(m0 - mx0);");
    line(C, "  float c1 = mx1 == -INFINITY ? 1.0f : exp(m1 - mx1);");
    line(C, "  l0 *= c0;");
    line(C, "  l1 *= c1;");
    line(C, "  for (int nt = 0; nt < NT; nt++) {");
    line(C, "    acc[nt][0] *= c0; acc[nt][1] *= c0; acc[nt][2] *= c1; acc[nt][3] *= c1;");
    line(C, "  }");
    line(C, "  for (int n = 0; n < 4; n++)");
    line(C, "    for (int e = 0; e < 4; e++) {");
    line(C, "      float mx = e < 2 ? mx0 : mx1;");
    line(C, "      float p = s[n][e] == -INFINITY ? 0.0f : exp(s[n][e] - mx);");
    line(C, "      s[n][e] = p;");
    line(C, "      if (e < 2) l0 += p; else l1 += p;");
    line(C, "    }");
    line(C, "  m0 = mx0;");
    line(C, "  m1 = mx1;");
    att_mma_pv(C, a, "acc", "s", bf ? "Vt" : "Vs");
    line(C, "}");
    line(C, "l0 = ax_quad_sum(l0, x);");
    line(C, "l1 = ax_quad_sum(l1, x);");
    line(C, "for (int nt = 0; nt < NT; nt++) {");
    line(C, "  acc[nt][0] /= l0; acc[nt][1] /= l0; acc[nt][2] /= l1; acc[nt][3] /= l1;");
    line(C, "}");
    if (kind == ATT_FWD)
      att_mma_store(C, a, "acc", "", "base", "TQ_");
    else {
      char e[2 * NAME + 64];
      att_ld(a, a->g, "base + r * H_ + d", e);
      line(C, "float D0 = 0.0f, D1 = 0.0f;");
      line(C, "for (int nt = 0; nt < NT; nt++)");
      line(C, "  for (int e = 0; e < 4; e++) {");
      line(C, "    int r = e < 2 ? ra : rb, d = nt * 8 + 2 * t + (e & 1);");
      line(C, "    float gd = r < TQ_ && d < H_ ? %s : 0.0f;", e);
      line(C, "    if (e < 2) D0 += gd * acc[nt][e]; else D1 += gd * acc[nt][e];");
      line(C, "  }");
      line(C, "D0 = ax_quad_sum(D0, x);");
      line(C, "D1 = ax_quad_sum(D1, x);");
      line(C, "if (t == 0 && ra < TQ_) {");
      line(C, "  %s[(b * TQ_ + ra) * 2] = m0 + log(l0);", a->st);
      line(C, "  %s[(b * TQ_ + ra) * 2 + 1] = D0;", a->st);
      line(C, "}");
      line(C, "if (t == 0 && rb < TQ_) {");
      line(C, "  %s[(b * TQ_ + rb) * 2] = m1 + log(l1);", a->st);
      line(C, "  %s[(b * TQ_ + rb) * 2 + 1] = D1;", a->st);
      line(C, "}");
    }
  } else if (kv) {
    char w[64], at[128], mul[NAME + 8];
    line(C, "long kbase = kp * KH;");
    att_mma_tiles(C, a, HP, LDA, LDT, (const char *[]){"Qs", "Gs"}, 2, (const char *[]){"Qt", "Gt"},
                  2);
    line(C, "__local float lse[%d], dd[%d];", ATT_MMA_TILE, ATT_MMA_TILE);
    att_mma_rows(C, a, "ka", a->k, "kbase");
    att_mma_rows(C, a, "va", a->v, "kbase");
    line(C, "float dk[NT_][4], dv[NT_][4];");
    line(C, "for (int nt = 0; nt < NT; nt++)");
    line(C, "  for (int e = 0; e < 4; e++) dk[nt][e] = dv[nt][e] = 0.0f;");
    line(C, "for (long b = kp * G_; b < (kp + 1) * G_; b++) {");
    line(C, "long base = b * QH;");
    att_query_tiles(C, a, ATT_MMA_TILE);
    line(C, "  barrier(CLK_LOCAL_MEM_FENCE);");
    att_mma_stage(C, a, a->q, "base", "Qs", bf ? "Qt" : NULL);
    att_mma_stage(C, a, a->g, "base", "Gs", bf ? "Gt" : NULL);
    char tile[16];
    snprintf(tile, sizeof tile, "%d", ATT_MMA_TILE);
    att_stage_stats(C, a, "tid", tile, 128);
    att_mma_ds(C, a, true, "ka", "Qs", "va", "Gs");
    att_mma_pv(C, a, "dv", "s", bf ? "Gt" : "Gs");
    att_mma_pv(C, a, "dk", "dp", bf ? "Qt" : "Qs");
    line(C, "}");
    line(C, "}");
    att_grad_at(a, 1, w, sizeof w);
    snprintf(at, sizeof at, "%s * KH", w);
    snprintf(mul, sizeof mul, " * %s", a->scale);
    att_mma_store(C, a, "dk", mul, at, "TK_");
    att_grad_at(a, 2, w, sizeof w);
    snprintf(at, sizeof at, "%s * KH", w);
    att_mma_store(C, a, "dv", "", at, "TK_");
    if (a->Tq < a->Tk) { /* dq's rows past the queries */
      att_grad_at(a, 0, w, sizeof w);
      line(C, "for (long b = kp * G_; b < (kp + 1) * G_; b++)");
      line(C, "  for (int nt = 0; nt < NT; nt++)");
      line(C, "    for (int e = 0; e < 4; e++) {");
      line(C, "      int r = e < 2 ? ra : rb, d = nt * 8 + 2 * t + (e & 1);");
      line(C, "      if (r < TQ_ || r >= TK_ || d >= H_) continue;");
      snprintf(at, sizeof at, "%s * KH + r * H_ + d", w);
      ocl_buf_printf(C->b, "    ");
      att_store(C, a, at, "0.0f");
      line(C, "    }");
    }
  } else if (q) {
    char w[64], at[128], mul[NAME + 8];
    line(C, "long base = b * QH, kbase = b / G_ * KH;");
    att_mma_tiles(C, a, HP, LDA, LDT, (const char *[]){"Ks", "Vs"}, 2, (const char *[]){"Kt"}, 1);
    att_mma_rows(C, a, "qa", a->q, "base");
    att_mma_rows(C, a, "ga", a->g, "base");
    line(C, "float lse0 = ra < TQ_ ? %s[(b * TQ_ + ra) * 2] : 0.0f;", a->st);
    line(C, "float lse1 = rb < TQ_ ? %s[(b * TQ_ + rb) * 2] : 0.0f;", a->st);
    line(C, "float D0 = ra < TQ_ ? %s[(b * TQ_ + ra) * 2 + 1] : 0.0f;", a->st);
    line(C, "float D1 = rb < TQ_ ? %s[(b * TQ_ + rb) * 2 + 1] : 0.0f;", a->st);
    att_mma_key_tiles(C, a, "dq");
    att_mma_stage(C, a, a->k, "kbase", "Ks", bf ? "Kt" : NULL);
    att_mma_stage(C, a, a->v, "kbase", "Vs", NULL);
    att_mma_ds(C, a, false, "qa", "Ks", "ga", "Vs");
    att_mma_pv(C, a, "dq", "dp", bf ? "Kt" : "Ks");
    line(C, "}");
    att_grad_at(a, 0, w, sizeof w);
    snprintf(at, sizeof at, "%s * KH", w);
    snprintf(mul, sizeof mul, " * %s", a->scale);
    att_mma_store(C, a, "dq", mul, at, "TQ_");
  }
  ocl_buf_printf(C->b, "#undef %s\n#undef NKS_\n#undef NT_\n", bf ? "AX_LD2" : "AX_LD1");
}

static void attention_kernel(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  char name[64];
  Att a;
  if (att_begin(C, body, v, "attention", &a, name, ATT_FWD)) return;
  att_forward_rows(C, &a);
  line(C, "if (!live) return;");
  line(C, "for (int d = 0; d < H_; d++) {");
  line(C, "  float o = acc[d] / l;");
  att_store(C, &a, "base + r * H_ + d", "o");
  line(C, "}");
  att_end(C, L, &a, name, false);
}

/* attention_grad's first launch: LSE and D of every query row (see the section comment). */
static void att_grad_stats(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  char name[64], e[2 * NAME + 64];
  Att a;
  if (att_begin(C, body, v, "attention_grad_stats", &a, name, ATT_STATS)) return;
  att_forward_rows(C, &a);
  line(C, "if (!live) return;");
  att_ld(&a, a.g, "base + r * H_ + d", e);
  line(C, "float D = 0.0f;");
  line(C, "for (int d = 0; d < H_; d++) D += %s * (acc[d] / l);", e);
  line(C, "%s[(b * TQ_ + r) * 2] = m + log(l);", a.st);
  line(C, "%s[(b * TQ_ + r) * 2 + 1] = D;", a.st);
  att_end(C, L, &a, name, false);
}

/* attention_grad's second launch: the item's key row r of key problem kp; dk and dv sum over
 * the query rows of the group's G query problems. */
static void att_grad_kv(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  char name[64], at[160], w[64];
  Att a;
  if (att_begin(C, body, v, "attention_grad_kv", &a, name, ATT_KV)) return;
  long long H = a.H, TL = a.tile;
  att_row(C, &a, "kr", a.k, "kbase");
  att_row(C, &a, "vr", a.v, "kbase");
  line(C, "__local float qs[%lld], gs[%lld], lse[%lld], dd[%lld];", TL * H, TL * H, TL, TL);
  line(C, "float dk[%lld], dv[%lld];", H, H);
  line(C, "for (int d = 0; d < H_; d++) dk[d] = dv[d] = 0.0f;");
  line(C, "for (long b = kp * G_; b < (kp + 1) * G_; b++) {");
  line(C, "long base = b * QH;");
  att_query_tiles(C, &a, -1);
  att_stage(C, &a, "qs", a.q, "gs", a.g, "base", "TQ_", true);
  line(C, "  for (int ii = %s; ii < min(TILE, TQ_ - j0); ii++) {",
       a.causal && !a.pos[0] ? "max(0, r - j0)" : "0");
  if (a.causal && a.pos[0]) line(C, "    if (r > POS(j0 + ii)) continue;");
  line(C, "    float dot = 0.0f, dp = 0.0f;");
  line(C, "    for (int d = 0; d < H_; d++) {");
  line(C, "      dot += QS(ii * H_ + d) * kr[d];");
  line(C, "      dp += GS(ii * H_ + d) * vr[d];");
  line(C, "    }");
  line(C, "    float p = exp(dot * %s - LSE(ii)), ds = p * (dp - DD(ii));", a.scale);
  line(C, "    for (int d = 0; d < H_; d++) {");
  line(C, "      dk[d] += ds * QS(ii * H_ + d);");
  line(C, "      dv[d] += p * GS(ii * H_ + d);");
  line(C, "    }");
  line(C, "  }");
  line(C, "}");
  ocl_buf_printf(C->b, "#undef QS\n#undef GS\n#undef LSE\n#undef DD\n");
  line(C, "}");
  line(C, "if (!live) return;");
  line(C, "for (int d = 0; d < H_; d++) {");
  line(C, "  float x = dk[d] * %s, y = dv[d];", a.scale);
  att_grad_at(&a, 1, w, sizeof w);
  snprintf(at, sizeof at, "%s * KH + r * H_ + d", w);
  att_store(C, &a, at, "x");
  att_grad_at(&a, 2, w, sizeof w);
  snprintf(at, sizeof at, "%s * KH + r * H_ + d", w);
  att_store(C, &a, at, "y");
  line(C, "}");
  if (a.Tq < a.Tk) { /* dq's rows past the queries */
    att_grad_at(&a, 0, w, sizeof w);
    line(C, "if (r >= TQ_)");
    line(C, "  for (long b = kp * G_; b < (kp + 1) * G_; b++)");
    line(C, "    for (int d = 0; d < H_; d++) {");
    snprintf(at, sizeof at, "%s * KH + r * H_ + d", w);
    ocl_buf_printf(C->b, "    ");
    att_store(C, &a, at, "0.0f");
    line(C, "    }");
  }
  att_end(C, L, &a, name, true);
}

/* attention_grad's third launch: the item's query row r; dq sums over the keys it sees. */
static void att_grad_q(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  char name[64], at[160], w[64];
  Att a;
  if (att_begin(C, body, v, "attention_grad_q", &a, name, ATT_Q)) return;
  long long H = a.H, TL = a.tile;
  att_row(C, &a, "qr", a.q, "base");
  att_row(C, &a, "gr", a.g, "base");
  line(C, "float lse = live ? %s[(b * TQ_ + r) * 2] : 0.0f;", a.st);
  line(C, "float D = live ? %s[(b * TQ_ + r) * 2 + 1] : 0.0f;", a.st);
  line(C, "__local float ks[%lld], vs[%lld];", TL * H, TL * H);
  line(C, "float dq[%lld];", H);
  line(C, "for (int d = 0; d < H_; d++) dq[d] = 0.0f;");
  att_keys(C, &a, ATT_ROWS);
  line(C, "for (int j0 = 0; j0 < nk; j0 += TILE) {");
  att_stage(C, &a, "ks", a.k, "vs", a.v, "kbase", "TK_", false);
  line(C, "  int jn = min(TILE, %s - j0);", a.causal ? "min(pr + 1, nk)" : "TK_");
  line(C, "  for (int jj = 0; jj < jn; jj++) {");
  line(C, "    float dot = 0.0f, dp = 0.0f;");
  line(C, "    for (int d = 0; d < H_; d++) {");
  line(C, "      dot += qr[d] * KS(jj * H_ + d);");
  line(C, "      dp += gr[d] * VS(jj * H_ + d);");
  line(C, "    }");
  line(C, "    float ds = exp(dot * %s - lse) * (dp - D);", a.scale);
  line(C, "    for (int d = 0; d < H_; d++) dq[d] += ds * KS(jj * H_ + d);");
  line(C, "  }");
  line(C, "}");
  line(C, "if (!live) return;");
  line(C, "for (int d = 0; d < H_; d++) {");
  line(C, "  float x = dq[d] * %s;", a.scale);
  att_grad_at(&a, 0, w, sizeof w);
  snprintf(at, sizeof at, "%s * KH + r * H_ + d", w);
  att_store(C, &a, at, "x");
  line(C, "}");
  att_end(C, L, &a, name, false);
}

/* attention_grad: (dq, dk, dv) stacked on a new axis 0, in three launches. */
static void attention_grad_kernels(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  att_grad_stats(C, L, body, v);
  att_grad_kv(C, L, body, v);
  att_grad_q(C, L, body, v);
}

static void gemm_kernel(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  char name[64], refs[3][NAME];
  kernel_name(C, v, "gemm", name);
  kernel_begin(C, body);
  const IrValue *x = val(C, v);
  buf_ref(C, x->ops[0], refs[0], NAME);
  buf_ref(C, x->ops[1], refs[1], NAME);
  buf_ref(C, v, refs[2], NAME);
  if (C->o.break_kernel == L->n + 1)
    line(C, "axlc_broken_on_purpose = 1; /* AXLC_OPENCL_BREAK_KERNEL */");
  RtOclLaunch shape = {0};
  const char *attrs = "";
  ocl_gemm_kernel(C->b, C->g, v, (const char *[]){refs[0], refs[1], refs[2]},
                  C->o.gemm == OCL_GEMM_TILED, &shape, &attrs);
  kernel_end(C, L, name, attrs, shape);
}

/* ---- parallel reductions ----
 *
 * A stored reduce_sum or reduce_max of O outputs, each over R elements, runs on work-groups of
 * RED_WG items: TX outputs side by side times TY items along each output's run, then a tree in
 * local memory over the TY partial results (on NVIDIA, AXLC_NV_SHFL: warp shuffles first).
 * Where the reduced axes include the operand's last one (rows: norms, softmax, cross-entropy,
 * the gradient norm's squares), TX = 1 and the TY items read consecutive elements of the run;
 * else (columns: bias and weight gradient sums over tokens) TX outputs are consecutive in memory
 * and the TX items of a row read them side by side. Both read coalesced. Where those groups
 * make fewer than RED_TARGET items (a reduction to a scalar or to a small tensor), P groups
 * share each output's run, a contiguous chunk each, and write their partial results (the
 * accumulator type: double for f32 sums where the device has fp64) to a scratch area past the
 * plan's slab; a second kernel reduces the P partials of each output the same way. Every item's
 * elements and the tree's order depend only on the shapes, so the sums are the same on every
 * run. A reduction of a few elements per output (R <= RED_SMALL) stays one work item per output
 * (map_kernel), as does one that reduces nothing. */

enum {
  RED_WG = 256,            /* items per work-group */
  RED_TARGET = 131072,     /* items a reduction should launch: an H100 holds 270K resident */
  RED_PER_ITEM = 16,       /* the fewest elements one item of a split run sums */
  RED_SMALL = 16,          /* runs this short stay one work item per output */
  RED_MAX_PARTS = 1 << 16, /* partial results of a two-stage reduction, at most */
};

typedef struct RedPlan {
  int64_t O, R; /* outputs, elements per output */
  int64_t TX, TY, P;
  bool rows; /* items of a run side by side (lid = tx * TY + ty); else outputs (ty * TX + tx) */
} RedPlan;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

/* The work-group shape of O reductions of R elements; rows: the run is contiguous. split:
 * whether groups may share a run (P > 1). */
static RedPlan red_plan(int64_t O, int64_t R, bool rows, bool split) {
  RedPlan p = {.O = O, .R = R, .P = 1, .rows = rows};
  if (rows) { /* about 8 elements an item, a warp's 32 where that still fills the device */
    int64_t fill = pow2_at_least(ceil_div(RED_TARGET, O));
    p.TY = pow2_at_least(ceil_div(R, 8));
    p.TY = p.TY > (fill > 32 ? fill : 32) ? (fill > 32 ? fill : 32) : p.TY;
    p.TY = p.TY > RED_WG ? RED_WG : p.TY;
    p.TX = pow2_at_least(O);
    p.TX = p.TX > RED_WG / p.TY ? RED_WG / p.TY : p.TX;
  } else {
    p.TX = pow2_at_least(O);
    p.TX = p.TX > 32 ? 32 : p.TX;
    p.TY = RED_WG / p.TX;
  }
  int64_t items = ceil_div(O, p.TX) * p.TX * p.TY;
  if (split && items < RED_TARGET) {
    p.P = ceil_div(RED_TARGET, items);
    int64_t most = ceil_div(R, p.TY * RED_PER_ITEM);
    if (p.P > most) p.P = most;
    if (p.P > RED_MAX_PARTS / O) p.P = RED_MAX_PARTS / O;
    if (p.P < 1) p.P = 1;
  }
  return p;
}

/* The shuffles (AXLC_NV_SHFL) and the partial results' type of reduction v. */
static const char *red_type(const IrValue *x) {
  bool sum = x->op == IR_REDUCE_SUM;
  return sum ? (x->dtype == DT_I32 ? "int" : "axacc") : ctype(x->dtype);
}
static const char *red_shfl(const IrValue *x) {
  bool sum = x->op == IR_REDUCE_SUM;
  return x->dtype == DT_I32 ? "ax_shfl_i" : sum ? "ax_shfl_acc" : "ax_shfl_f";
}

/* One launch of reduction v under plan k. stage 0: the operand to the result; 1: the operand to
 * the partials; 2: the partials (k->R = stage 1's P of them per output) to the result. row2:
 * stage 2 reads each output's partials side by side (stored [o][p]; else [p][o]). */
static void red_launch(Ctx *C, Launches *L, OclBuf *body, int32_t v, const RedPlan *k, int stage,
                       bool row2) {
  const IrValue *x = val(C, v);
  const IrShape *xs = &val(C, x->ops[0])->shape;
  bool sum = x->op == IR_REDUCE_SUM;
  const char *T = red_type(x);
  long long O = k->O, R = k->R, TX = k->TX, TY = k->TY, P = k->P, WG = TX * TY;
  long long chunk = ceil_div(ceil_div(R, P), TY) * TY; /* each group's share of a run */
  char name[64], what[32], acc[NAME], sc[NAME] = "", out[NAME];
  snprintf(what, sizeof what, "%s%s", ir_op_name(x->op),
           stage == 1   ? "_parts"
           : stage == 2 ? "_final"
                        : "");
  kernel_name(C, v, what, name);
  kernel_begin(C, body);
  C->reduced = O * R;
  if (C->o.break_kernel == L->n + 1)
    line(C, "axlc_broken_on_purpose = 1; /* AXLC_OPENCL_BREAK_KERNEL */");
  if (stage) {
    int64_t parts = stage == 1 ? O * P : O * R;
    int32_t a = arg_of(C, C->scratch_at, parts * 8);
    snprintf(sc, sizeof sc, "((__global %s *)(s%d + a%d))", T, a, a);
    if (parts * 8 > C->scratch_bytes) C->scratch_bytes = parts * 8;
  }
  line(C, "int lid = get_local_id(0);");
  line(C, "long grp = get_group_id(0);");
  if (P > 1)
    line(C, "long ob = grp / %lldL, part = grp %% %lldL;", P, P);
  else
    line(C, "long ob = grp, part = 0;");
  if (k->rows)
    line(C, "int ty = lid %% %lld, tx = lid / %lld;", TY, TY);
  else
    line(C, "int tx = lid %% %lld, ty = lid / %lld;", TX, TX);
  line(C, "long o = ob * %lldL + tx;", TX);
  acc_begin(C, x->dtype, sum, acc);
  line(C, "if (o < %lldL) {", O);
  Pos p = pos_of_lin("o");
  if (stage < 2) pos_idx(C, &x->shape, &p);
  line(C, "long end = min(%lldL, (part + 1) * %lldL);", R, chunk);
  /* AXLC_CPU_REDUCE: the first item of a run sums its share alone, in order, and no tree */
  ocl_buf_printf(C->b, "#ifdef AXLC_CPU_REDUCE\n");
  line(C, "for (long r = part * %lldL + (ty ? end : 0); r < end; r++) {", chunk);
  ocl_buf_printf(C->b, "#else\n");
  line(C, "for (long r = part * %lldL + ty; r < end; r += %lldL) {", chunk, TY);
  ocl_buf_printf(C->b, "#endif\n");
  char e[NAME];
  if (stage == 2) {
    newvar(C, e);
    if (row2)
      line(C, "%s %s = %s[o * %lldL + r];", T, e, sc, R);
    else
      line(C, "%s %s = %s[r * %lldL + o];", T, e, sc, O);
  } else {
    /* the run's position r: the reduced axes in row-major order */
    Pos q = {.has_idx = true};
    int64_t stride = 1;
    for (int32_t d = xs->rank - 1; d >= 0; d--) {
      if (!has_axis(&x->attr.axes, d)) continue;
      newvar(C, q.idx[d]);
      if (stride == 1 && xs->dims[d] == R)
        line(C, "long %s = r;", q.idx[d]);
      else
        line(C, "long %s = r / %lldL %% %lldL;", q.idx[d], (long long)stride,
             (long long)xs->dims[d]);
      stride *= xs->dims[d];
    }
    for (int32_t d = 0, j = 0; d < xs->rank; d++)
      if (!has_axis(&x->attr.axes, d)) snprintf(q.idx[d], NAME, "%s", p.idx[j++]);
    elem_get(C, x->ops[0], &q, e);
  }
  acc_step(C, x->dtype, sum, acc, e);
  line(C, "}");
  line(C, "}");
  line(C, "__local %s red[%lld];", T, WG);
  line(C, "%s res;", T);
  ocl_buf_printf(C->b, "#ifdef AXLC_CPU_REDUCE\n");
  line(C, "res = %s;", acc);
  ocl_buf_printf(C->b, "#else\n");
  bool shfl = k->rows && TY >= 64;
  if (shfl) { /* a warp's 32 consecutive items are of one run on NVIDIA */
    line(C, "#ifdef AXLC_NV_SHFL");
    for (int m = 16; m > 0; m /= 2) {
      line(C, "{");
      line(C, "%s y = %s(%s, %d);", T, red_shfl(x), acc, m);
      acc_step(C, x->dtype, sum, acc, "y");
      line(C, "}");
    }
    long long W = TY / 32; /* warps per run: their results at red[tx * W ...] */
    line(C, "if ((lid & 31) == 0) red[lid >> 5] = %s;", acc);
    line(C, "barrier(CLK_LOCAL_MEM_FENCE);");
    for (long long s = W / 2; s > 0; s /= 2) {
      char self[64], other[64];
      snprintf(self, sizeof self, "red[tx * %lld + ty]", W);
      snprintf(other, sizeof other, "red[tx * %lld + ty + %lld]", W, s);
      line(C, "if (ty < %lld) {", s);
      acc_step(C, x->dtype, sum, self, other);
      line(C, "}");
      line(C, "barrier(CLK_LOCAL_MEM_FENCE);");
    }
    line(C, "res = red[tx * %lld];", W);
    line(C, "#else");
  }
  line(C, "red[lid] = %s;", acc);
  line(C, "barrier(CLK_LOCAL_MEM_FENCE);");
  for (long long s = TY / 2; s > 0; s /= 2) {
    char other[NAME];
    snprintf(other, NAME, "red[lid + %lld]", k->rows ? s : s * TX);
    line(C, "if (ty < %lld) {", s);
    acc_step(C, x->dtype, sum, "red[lid]", other);
    line(C, "}");
    line(C, "barrier(CLK_LOCAL_MEM_FENCE);");
  }
  if (k->rows)
    line(C, "res = red[tx * %lld];", TY);
  else
    line(C, "res = red[tx];");
  if (shfl) line(C, "#endif");
  ocl_buf_printf(C->b, "#endif\n");
  line(C, "if (ty == 0 && o < %lldL) {", O);
  if (stage == 1) {
    if (row2)
      line(C, "%s[o * %lldL + part] = res;", sc, P);
    else
      line(C, "%s[part * %lldL + o] = res;", sc, O);
  } else {
    char ref[NAME];
    acc_end(C, x->dtype, "res", out);
    buf_ref(C, v, ref, sizeof ref);
    if (x->dtype == DT_BF16)
      line(C, "%s[o] = ax_to_bf16(%s);", ref, out);
    else
      line(C, "%s[o] = %s;", ref, out);
  }
  line(C, "}");
  RtOclLaunch shape = {.dims = 1, .global = {ceil_div(O, TX) * P * WG, 1, 1}, .local = {WG, 1, 1}};
  kernel_end(C, L, name, "", shape);
}

/* The first launch's plan of reduction v; false: a run this short stays one item per output. */
static bool red_first(const IrGraph *g, int32_t v, RedPlan *k) {
  const IrValue *x = &g->values[v];
  const IrShape *xs = &g->values[x->ops[0]].shape;
  int64_t O = ir_shape_numel(&x->shape), all = ir_shape_numel(xs);
  int64_t R = O ? all / O : 0;
  if (R <= RED_SMALL) return false;
  bool rows = xs->rank > 0 && has_axis(&x->attr.axes, xs->rank - 1);
  *k = red_plan(O, R, rows, true);
  return true;
}

static void multi_sum_plan(const Ctx *C, int64_t *ch, int64_t *bytes);

int64_t ocl_scratch_bytes(const IrGraph *g, const bool *mat) {
  int64_t most = 0, ch;
  Ctx C = {.g = g, .mat = mat};
  multi_sum_plan(&C, &ch, &most);
  for (int32_t v = 0; v < g->nvalues; v++) /* bf16 scatter_add's links: two ints an index */
    if (mat[v] && g->values[v].op == IR_SCATTER_ADD && g->values[v].dtype == DT_BF16 &&
        ir_shape_numel(&g->values[v].shape) > 0) {
      int64_t links = ir_shape_numel(&g->values[g->values[v].ops[0]].shape) * 8;
      most = links > most ? links : most;
    }
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    RedPlan k;
    if (mat[v] && x->op == IR_ATTENTION_GRAD) { /* LSE and D: 2 floats a query row */
      const IrShape *qs = &g->values[x->ops[0]].shape;
      int64_t rows = qs->dims[qs->rank - 1] ? ir_shape_numel(qs) / qs->dims[qs->rank - 1] : 0;
      if (rows * 8 > most) most = rows * 8;
    }
    if (mat[v] && (x->op == IR_REDUCE_SUM || x->op == IR_REDUCE_MAX) &&
        ir_shape_numel(&x->shape) > 0 && !ocl_is_collective(g, v) && red_first(g, v, &k) &&
        k.P > 1 && k.O * k.P * 8 > most)
      most = k.O * k.P * 8; /* red_launch's partials: 8 bytes each */
  }
  return most;
}

static void reduce_kernels(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  RedPlan k;
  if (!red_first(C->g, v, &k)) {
    map_kernel(C, L, body, v);
    return;
  }
  int64_t O = k.O;
  if (k.P == 1) {
    red_launch(C, L, body, v, &k, 0, false);
    return;
  }
  bool row2 = O < 32;
  RedPlan k2 = red_plan(O, k.P, row2, false);
  red_launch(C, L, body, v, &k, 1, row2);
  red_launch(C, L, body, v, &k2, 2, row2);
}

/* The zeroing before a scatter_add (f32, i32 or bf16): an item per element of its n. */
static void scatter_zero_kernel(Ctx *C, Launches *L, OclBuf *body, int32_t v, int64_t n) {
  char name[64], outr[NAME];
  kernel_name(C, v, "scatter_add_zero", name);
  kernel_begin(C, body);
  kernel_items(C, L, n);
  buf_ref(C, v, outr, sizeof outr);
  line(C, "%s[gid] = 0;", outr);
  kernel_end(C, L, name, "", items(n));
}

/* The blocks of rows a scatter_add's items take (nb of blk rows): enough blocks that a few
 * thousand items share the work, but no more than make the scans of the nidx indices 4 times
 * the zeroing's work. */
static void scatter_blocks(int64_t rows, int64_t row, int64_t nidx, int64_t *nb, int64_t *blk) {
  int64_t b = ceil_div(RED_TARGET / RED_PER_ITEM, row), scans = 4 * rows / (nidx ? nidx : 1);
  b = b > scans ? scans : b; /* the scans cost at most 4 times the zeroing */
  b = b > rows ? rows : b < 1 ? 1 : b;
  *blk = ceil_div(rows, b);
  *nb = ceil_div(rows, *blk);
}

/* scatter_add of f32 or i32 in two launches: the result zeroed, one element per work item; then
 * work item (b, j) adds, in index order, the updates of column j whose index falls in its block
 * b of `blk` rows: nb blocks, so that a few thousand items share the work, each scanning every
 * index (the same index for all the columns of a block: one load for a group's items), but no
 * more blocks than make the scans 4 times the zeroing's work (a CPU device pays for them). Each
 * element's sum is in index order, as the interpreter's. */
static void scatter_rows_kernels(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  const IrValue *x = val(C, v);
  int64_t rows = x->attr.k, row = ir_shape_numel(&x->shape) / (rows ? rows : 1);
  int64_t nidx = ir_shape_numel(&val(C, x->ops[0])->shape), nb, blk;
  scatter_blocks(rows, row, nidx, &nb, &blk);
  char name[64], ir[NAME], ur[NAME], outr[NAME];
  const char *t = ctype(x->dtype);
  scatter_zero_kernel(C, L, body, v, rows * row);

  kernel_name(C, v, "scatter_add", name);
  kernel_begin(C, body);
  kernel_items(C, L, nb * row);
  C->reduced = nidx * row;
  buf_ref(C, x->ops[0], ir, sizeof ir);
  buf_ref(C, x->ops[1], ur, sizeof ur);
  buf_ref(C, v, outr, sizeof outr);
  line(C, "long b = gid / %lldL, j = gid %% %lldL;", (long long)row, (long long)row);
  line(C, "int lo = (int)(b * %lld), hi = min(lo + %d, %d);", (long long)blk, (int)blk, (int)rows);
  line(C, "__global %s *o = %s;", t, outr);
  line(C, "for (long i = 0; i < %lldL; i++) {", (long long)nidx);
  line(C, "  int r = %s[i];", ir);
  line(C, "  if (r < lo || r >= hi) continue;");
  if (x->dtype == DT_I32)
    line(C, "  o[r * %lldL + j] = (int)((uint)o[r * %lldL + j] + (uint)%s[i * %lldL + j]);",
         (long long)row, (long long)row, ur, (long long)row);
  else
    line(C, "  o[r * %lldL + j] += %s[i * %lldL + j];", (long long)row, ur, (long long)row);
  line(C, "}");
  kernel_end(C, L, name, "", items(nb * row));
}

/* scatter_add of bf16 in three launches, in parallel as scatter_rows_kernels: each output element
 * is the f32 sum of its updates in index order rounded once, so it cannot accumulate in the
 * (bf16) output. The result is zeroed; then an item per index links it to the next index of the
 * same row, and marks it if it is its row's first (a pair of ints in the scratch past the slab);
 * then item (b, j) walks, for each first index whose row falls in its block b, the row's chain
 * of updates in column j, and stores the rounded sum. */
static void scatter_kernel(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  const IrValue *x = val(C, v);
  int64_t rows = x->attr.k, row = ir_shape_numel(&x->shape) / (rows ? rows : 1);
  int64_t nidx = ir_shape_numel(&val(C, x->ops[0])->shape), nb, blk;
  scatter_blocks(rows, row, nidx, &nb, &blk);
  char name[64], ir[NAME], ur[NAME], outr[NAME], lk[NAME];
  scatter_zero_kernel(C, L, body, v, rows * row);

  kernel_name(C, v, "scatter_add_links", name);
  kernel_begin(C, body);
  kernel_items(C, L, nidx);
  buf_ref(C, x->ops[0], ir, sizeof ir);
  int32_t a = arg_of(C, C->scratch_at, nidx * 8);
  if (nidx * 8 > C->scratch_bytes) C->scratch_bytes = nidx * 8;
  snprintf(lk, sizeof lk, "((__global int *)(s%d + a%d))", a, a);
  line(C, "int r = %s[gid], first = 1, nx = -1;", ir);
  line(C, "for (long i = 0; i < gid && first; i++) first = %s[i] != r;", ir);
  line(C, "for (long i = gid + 1; i < %lldL && nx < 0; i++) if (%s[i] == r) nx = (int)i;",
       (long long)nidx, ir);
  line(C, "%s[2 * gid] = first;", lk);
  line(C, "%s[2 * gid + 1] = nx;", lk);
  kernel_end(C, L, name, "", items(nidx));

  kernel_name(C, v, "scatter_add", name);
  kernel_begin(C, body);
  kernel_items(C, L, nb * row);
  C->reduced = nidx * row;
  buf_ref(C, x->ops[0], ir, sizeof ir);
  buf_ref(C, x->ops[1], ur, sizeof ur);
  buf_ref(C, v, outr, sizeof outr);
  a = arg_of(C, C->scratch_at, nidx * 8);
  snprintf(lk, sizeof lk, "((__global int *)(s%d + a%d))", a, a);
  line(C, "long b = gid / %lldL, j = gid %% %lldL;", (long long)row, (long long)row);
  line(C, "int lo = (int)(b * %lld), hi = min(lo + %d, %d);", (long long)blk, (int)blk, (int)rows);
  line(C, "for (long i = 0; i < %lldL; i++) {", (long long)nidx);
  line(C, "  int r = %s[i];", ir);
  line(C, "  if (r < lo || r >= hi || !%s[2 * i]) continue;", lk);
  line(C, "  float acc = 0.0f;");
  line(C, "  for (long k = i; k >= 0; k = %s[2 * k + 1]) acc += ax_from_bf16(%s[k * %lldL + j]);",
       lk, ur, (long long)row);
  line(C, "  %s[r * %lldL + j] = ax_to_bf16(acc);", outr, (long long)row);
  line(C, "}");
  kernel_end(C, L, name, "", items(nb * row));
}

/* A pipeline's launches run on their stage's devices only (RtOclLaunch.stage): launches
 * [n0, L->n) are stage `stage`'s. */
static void stamp(Launches *L, int32_t n0, int32_t stage) {
  for (int32_t i = n0; i < L->n; i++) L->v[i].stage = stage;
}

/* Whether the values of a multi-value kernel are of one pipeline stage. */
static bool one_stage(const IrGraph *g, const int32_t *vals, int32_t nv) {
  for (int32_t i = 1; i < nv; i++)
    if (g->values[vals[i]].stage != g->values[vals[0]].stage) return false;
  return true;
}

/* "new:X" outputs the plan did not place over parameter X: copied onto X at the end. */
static void copy_back(Ctx *C, Launches *L, OclBuf *body) {
  for (int32_t i = 0; i < C->g->noutputs; i++) {
    const IrOutput *o = &C->g->outputs[i];
    if (strncmp(o->name, "new:", 4) != 0) continue;
    int32_t x = ir_graph_find(C->g, IR_PARAMETER, o->name + 4);
    if (x == IR_NONE || C->mp->offset[x] == C->mp->offset[o->value]) continue;
    int64_t n = ir_shape_numel(&val(C, x)->shape), bytes = C->mp->bytes[x];
    int64_t a = C->mp->offset[x], b = C->mp->offset[o->value];
    if (a < b + bytes && b < a + bytes) {
      fail(C, "internal: new:%s overlaps %s partly", o->name + 4, o->name + 4);
      return;
    }
    char name[64], dst[NAME], src[NAME];
    kernel_name(C, x, "copy_back", name);
    kernel_begin(C, body);
    kernel_items(C, L, n);
    buf_ref(C, x, dst, sizeof dst);
    buf_ref(C, o->value, src, sizeof src);
    line(C, "%s[gid] = %s[gid];", dst, src);
    int32_t n0 = L->n;
    kernel_end(C, L, name, "", items(n));
    stamp(L, n0, val(C, o->value)->stage); /* on the stage that made it */
  }
}

/* A launch of entry `index` of the program's collective table: no kernel, the runtime runs
 * it through MPI on the host between the kernels before and after it. Its two arguments are
 * the spans of values in and out, so the runtime's buffer split keeps each whole. */
static void push_collective(Ctx *C, Launches *L, int32_t in, int32_t out, int32_t index) {
  int32_t cap = L->cap;
  grow((void **)&L->v, sizeof *L->v, &cap, L->n + 1);
  cap = L->cap;
  grow((void **)&L->reduced, sizeof *L->reduced, &cap, L->n + 1);
  grow((void **)&L->line, sizeof *L->line, &L->cap, L->n + 1);
  L->reduced[L->n] = 0; /* a collective: --emit launches shows no reduction */
  int64_t *args = base_xmalloc(2 * sizeof *args), *bytes = base_xmalloc(2 * sizeof *bytes);
  const int32_t t[2] = {in, out};
  for (int k = 0; k < 2; k++) {
    args[k] = C->mp->offset[t[k]];
    bytes[k] = ir_shape_numel(&val(C, t[k])->shape) * (int64_t)ir_dtype_size(val(C, t[k])->dtype);
  }
  L->line[L->n] = 0; /* no source line */
  L->v[L->n++] = (RtOclLaunch){.kernel = OCL_COLLECTIVE_NAME,
                               .dims = 1,
                               .global = {1, 1, 1},
                               .nargs = 2,
                               .args = args,
                               .arg_bytes = bytes,
                               .collective = index + 1};
}

/* A pipeline's shares (backend_pipeline_shares), last: launches of the entries program.c puts
 * after the graph's collectives in the collective table (RT_COLL_SHARE), on every device; a
 * share reads and writes its one buffer. */
static void share_launches(Ctx *C, Launches *L) {
  int32_t *made = base_xmalloc(((size_t)C->g->noutputs + 4) * sizeof *made);
  int32_t *buffer = base_xmalloc(((size_t)C->g->noutputs + 4) * sizeof *buffer);
  int32_t n = backend_pipeline_shares(C->g, made, buffer);
  int32_t first = ocl_collective_index(C->g, C->g->nvalues);
  for (int32_t k = 0; k < n; k++) push_collective(C, L, buffer[k], buffer[k], first + k);
  free(made);
  free(buffer);
}

/* Collective v of a mesh of several devices: a launch that names its entry in the program's
 * collective table (ocl_collective_index), over the operand's and the result's spans. */
static void collective_launch(Ctx *C, Launches *L, int32_t v) {
  const IrValue *x = val(C, v);
  int32_t in = x->ops[0];
  if (!C->mat[in] || C->mp->offset[in] < 0 || C->mp->offset[v] < 0) {
    fail(C, "%%%d (%s): its operand has no buffer of its own", v, ir_op_name(x->op));
    return;
  }
  push_collective(C, L, in, v, ocl_collective_index(C->g, v));
}

bool ocl_is_collective(const IrGraph *g, int32_t v) {
  return ir_mesh_devices(&g->mesh) > 1 && (ir_op_flags(g->values[v].op) & IR_COLLECTIVE);
}

int32_t ocl_collective_index(const IrGraph *g, int32_t v) {
  int32_t n = 0;
  for (int32_t u = 0; u < v; u++) n += ocl_is_collective(g, u);
  return n;
}

static void value_kernel(Ctx *C, Launches *L, OclBuf *body, int32_t v) {
  const IrValue *x = val(C, v);
  if (!C->mat[v] || x->op == IR_PARAMETER || x->op == IR_INPUT || ir_shape_numel(&x->shape) == 0)
    return;
  if (ocl_is_collective(C->g, v)) {
    collective_launch(C, L, v);
    return;
  }
  switch (x->op) {
  case IR_RESHAPE:
    if (C->mp->offset[v] != C->mp->offset[x->ops[0]]) map_kernel(C, L, body, v);
    return; /* else an alias: nothing to do */
  case IR_DOT:
    if (C->o.gemm != OCL_GEMM_LOOP && ocl_gemm_ok(C->g, v))
      gemm_kernel(C, L, body, v);
    else
      map_kernel(C, L, body, v);
    return;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX: reduce_kernels(C, L, body, v); return;
  case IR_TOP_K_INDICES: top_k_kernel(C, L, body, v); return;
  case IR_SCATTER_ADD:
    if (x->dtype == DT_BF16)
      scatter_kernel(C, L, body, v);
    else
      scatter_rows_kernels(C, L, body, v);
    return;
  case IR_ATTENTION: attention_kernel(C, L, body, v); return;
  case IR_ATTENTION_GRAD: attention_grad_kernels(C, L, body, v); return;
  default: map_kernel(C, L, body, v); return;
  }
}

/* ---- multi-tensor kernels ----
 *
 * A run of consecutive elementwise values (in graph order, among those that launch a kernel)
 * becomes one launch over the concatenation of their index spaces: consecutive values with as
 * many elements form a segment, and work item gid computes, in graph order, element i of every
 * value of the segment whose range [S, S + n) holds gid (i = gid - S). A value in a segment may
 * read another of the same segment (at i: stored by the same item before), never one of an
 * earlier segment. The optimizer's update is such a run: per parameter the clipped gradient and
 * AdamW's m, v and parameter (optimizer.c) are one segment, and every parameter's segment shares
 * one launch (a few, where the offset arguments would exceed multi_args; a segment holds at most
 * a fifth as many values). Only where that is the
 * kernels' sequential result: every buffer an item reads is read elementwise (element i, of the
 * segment's size) or is a scalar, through elementwise ops, splats and splat constants only; no
 * write overlaps the bytes of another segment; and within a segment a write overlaps another
 * access only at the same offset and element size, elementwise (so item i touches element i).
 * Otherwise the run ends there and the next value starts the next one. */
/* MULTI_ARGS (OclOptions.multi_args, at most this) (pointer, offset) pairs: 960 bytes of
 * arguments, within the 1024 that OpenCL 1.2 lets every device take
 * (CL_DEVICE_MAX_PARAMETER_SIZE); a segment holds at most a fifth as many values (12) */
enum { MULTI_LEAVES = 64 };

typedef struct MultiExt {
  int64_t lo, hi;
  int32_t seg;
  int32_t size;   /* element bytes */
  bool write, ew; /* ew: read or written at element i (else: read whole by every item) */
} MultiExt;

static bool launches_nothing(const Ctx *C, int32_t v) {
  const IrValue *x = val(C, v);
  return !C->mat[v] || x->op == IR_PARAMETER || x->op == IR_INPUT || ir_shape_numel(&x->shape) == 0;
}

/* Whether u, read at an element of a value of shape sh, is a buffer read elementwise or as a
 * scalar, or computed inline from such through elementwise ops, splats and splat constants;
 * the buffers go to leaves. */
static bool multi_tree(const Ctx *C, int32_t u, const IrShape *sh, int32_t *leaves, int32_t *nl) {
  const IrValue *x = val(C, u);
  if (C->mat[u]) {
    if (ir_shape_numel(&x->shape) != 1 && !ir_shape_eq(&x->shape, sh)) return false;
    if (*nl == MULTI_LEAVES) return false;
    leaves[(*nl)++] = u;
    return true;
  }
  if (x->op == IR_CONSTANT) return !x->attr.data;
  if (x->op == IR_BROADCAST)
    return ir_shape_numel(&val(C, x->ops[0])->shape) == 1 &&
           multi_tree(C, x->ops[0], &val(C, x->ops[0])->shape, leaves, nl);
  if (!(ir_op_flags(x->op) & IR_ELEMENTWISE) || !ir_shape_eq(&x->shape, sh)) return false;
  for (int32_t k = 0; k < x->nops; k++)
    if (!multi_tree(C, x->ops[k], sh, leaves, nl)) return false;
  return true;
}

static bool multi_value(const Ctx *C, int32_t v, int32_t *leaves, int32_t *nl) {
  const IrValue *x = val(C, v);
  *nl = 0;
  if (launches_nothing(C, v) || ocl_is_collective(C->g, v) ||
      !(ir_op_flags(x->op) & IR_ELEMENTWISE))
    return false;
  for (int32_t k = 0; k < x->nops; k++)
    if (!multi_tree(C, x->ops[k], &x->shape, leaves, nl)) return false;
  return true;
}

/* The run from v0: its values (vals, nv) and their segments (seg); returns the value after. */
static int32_t multi_run(const Ctx *C, int32_t v0, int32_t *vals, int32_t *seg, int32_t *nv,
                         int32_t *run_seg) {
  MultiExt *ext = NULL;
  int32_t next = 0, cext = 0, cur = -1, w = v0, curlen = 0;
  int64_t curn = -1;
  *nv = 0;
  for (; w < C->g->nvalues; w++) {
    if (launches_nothing(C, w)) continue;
    int32_t leaves[MULTI_LEAVES], nl;
    if (!multi_value(C, w, leaves, &nl)) break;
    int64_t n = ir_shape_numel(&val(C, w)->shape);
    /* a segment of at most multi_args / 5 values, so that one fits multi_args arguments */
    int32_t s = *nv > 0 && n == curn && curlen < C->o.multi_args / 5 ? cur : cur + 1;
    MultiExt cand[MULTI_LEAVES + 1];
    int32_t nc = 0;
    bool ok = true;
    for (int32_t i = 0; i <= nl && ok; i++) {
      int32_t u = i < nl ? leaves[i] : w;
      if (i < nl && run_seg[u] >= 0 && run_seg[u] != s) ok = false;
      const IrValue *x = val(C, u);
      int64_t un = ir_shape_numel(&x->shape);
      int32_t size = (int32_t)ir_dtype_size(x->dtype);
      cand[nc++] =
          (MultiExt){C->mp->offset[u], C->mp->offset[u] + un * size, s, size, i == nl, un == n};
    }
    for (int32_t i = 0; i < nc && ok; i++)
      for (int32_t j = 0; j < next && ok; j++) {
        const MultiExt *a = &cand[i], *b = &ext[j];
        if (a->lo >= b->hi || b->lo >= a->hi || (!a->write && !b->write)) continue;
        if (b->seg != s || !a->ew || !b->ew || a->lo != b->lo || a->size != b->size) ok = false;
      }
    if (!ok) break;
    grow((void **)&ext, sizeof *ext, &cext, next + nc);
    if (nc > 0) memcpy(ext + next, cand, (size_t)nc * sizeof *cand);
    next += nc;
    run_seg[w] = s;
    if (s != cur) cur = s, curn = n, curlen = 0;
    curlen++;
    vals[*nv] = w;
    seg[(*nv)++] = s;
  }
  for (int32_t i = 0; i < *nv; i++) run_seg[vals[i]] = -1;
  free(ext);
  return w;
}

/* Prints segment vals[0..n) over items [at, at + numel) of the kernel being printed. */
static void multi_segment(Ctx *C, const int32_t *vals, int32_t n, int64_t at) {
  int64_t numel = ir_shape_numel(&val(C, vals[0])->shape);
  char i[NAME];
  newvar(C, i);
  line(C, "if (gid >= %lldL && gid < %lldL) {", (long long)at, (long long)(at + numel));
  line(C, "long %s = gid - %lldL;", i, (long long)at);
  for (int32_t k = 0; k < n; k++) {
    char e[NAME], ref[NAME];
    Pos p = pos_of_lin(i);
    elem_compute(C, vals[k], &p, e);
    buf_ref(C, vals[k], ref, sizeof ref);
    if (val(C, vals[k])->dtype == DT_BF16)
      line(C, "%s[%s] = ax_to_bf16(%s);", ref, i, e);
    else
      line(C, "%s[%s] = %s;", ref, i, e);
  }
  line(C, "}");
}

/* The launches of run vals[0..nv) (multi_run): each as many whole segments as multi_args offset
 * arguments allow (at least one). */
static void multi_kernels(Ctx *C, Launches *L, OclBuf *body, const int32_t *vals,
                          const int32_t *seg, int32_t nv) {
  int64_t *bytes = NULL;
  int32_t cbytes = 0, k = 0;
  while (k < nv && !C->failed) {
    char name[64];
    kernel_name(C, vals[k], "multi", name);
    kernel_begin(C, body);
    line(C, "long gid = get_global_id(0);");
    if (C->o.break_kernel == L->n + 1)
      line(C, "axlc_broken_on_purpose = 1; /* AXLC_OPENCL_BREAK_KERNEL */");
    int64_t total = 0;
    int32_t nseg = 0;
    while (k < nv) {
      int32_t e = k;
      while (e < nv && seg[e] == seg[k]) e++;
      size_t at = body->n;
      int32_t nargs = C->nargs, tmp = C->tmp;
      grow((void **)&bytes, sizeof *bytes, &cbytes, nargs + 1);
      if (nargs > 0) memcpy(bytes, C->bytes, (size_t)nargs * sizeof *bytes);
      multi_segment(C, vals + k, e - k, total);
      if (nseg > 0 && C->nargs > C->o.multi_args) { /* the next launch's */
        body->n = at;
        body->s[at] = 0;
        C->nargs = nargs;
        C->tmp = tmp;
        if (nargs > 0) memcpy(C->bytes, bytes, (size_t)nargs * sizeof *bytes);
        break;
      }
      total += ir_shape_numel(&val(C, vals[k])->shape);
      nseg++;
      k = e;
    }
    kernel_end(C, L, name, "", items(total));
  }
  free(bytes);
}

/* Sums to a scalar (the gradient norm's per-parameter sums of squares, optimizer.c) in a run
 * of consecutive ones: two launches for the run, not one or two each. The first splits each
 * operand into chunks of CH elements (CH from all such sums of the graph, so that at most about
 * MULTI_SUM_ITEMS items fill the device, and their partial results take at most 256 KiB past
 * the slab), an item a chunk summed in order in the f32 accumulator (double where
 * the device has it), its partial result in the scratch area past the slab; the second sums
 * each sum's chunks in order, an item per sum, and rounds once. As every sum runs at its own
 * place, an operand read elementwise through elementwise ops (the square) stays inline. */
enum { MULTI_SUM_ITEMS = 32768, MULTI_SUM_MIN = 16 };

static bool sum_value(const Ctx *C, int32_t v, int32_t *leaves, int32_t *nl) {
  const IrValue *x = val(C, v);
  *nl = 0;
  if (launches_nothing(C, v) || x->op != IR_REDUCE_SUM || ir_shape_numel(&x->shape) != 1 ||
      x->dtype == DT_I32 || ocl_is_collective(C->g, v))
    return false;
  const IrShape *xs = &val(C, x->ops[0])->shape;
  return ir_shape_numel(xs) > 0 && multi_tree(C, x->ops[0], xs, leaves, nl);
}

/* The chunk of every multi-tensor sum of the graph, from all of them, and the scratch bytes any
 * run of them may use: each chunk's partial result (8 bytes), reserved whether or not runs form,
 * so that memcheck (ocl_scratch_bytes, without the memory plan) counts what the trainer has. */
static void multi_sum_plan(const Ctx *C, int64_t *ch, int64_t *bytes) {
  int64_t total = 0, nsums = 0, items = 0;
  int32_t leaves[MULTI_LEAVES], nl;
  for (int32_t v = 0; v < C->g->nvalues; v++)
    if (sum_value(C, v, leaves, &nl))
      total += ir_shape_numel(&val(C, val(C, v)->ops[0])->shape), nsums++;
  int64_t c = total / MULTI_SUM_ITEMS;
  *ch = c < MULTI_SUM_MIN ? MULTI_SUM_MIN : c;
  for (int32_t v = 0; v < C->g->nvalues && nsums > 1; v++)
    if (sum_value(C, v, leaves, &nl))
      items += ceil_div(ir_shape_numel(&val(C, val(C, v)->ops[0])->shape), *ch);
  *bytes = items * 8;
}

/* The run of sums from v0 (at least the values that launch nothing before it); returns the
 * value after it. Each launch has at most multi_args arguments: the scratch, and the operands'
 * buffers (the first) or the results (the second). */
static int32_t sum_run(const Ctx *C, int32_t v0, int32_t *vals, int32_t *nv) {
  MultiExt *ext = NULL;
  int32_t next = 0, cext = 0, w = v0, nargs = 0;
  *nv = 0;
  for (; w < C->g->nvalues; w++) {
    if (launches_nothing(C, w)) continue;
    int32_t leaves[MULTI_LEAVES], nl;
    if (!sum_value(C, w, leaves, &nl)) break;
    int32_t fresh = 0; /* leaves at offsets not read before: the first launch's arguments */
    for (int32_t i = 0; i < nl; i++) {
      bool seen = false;
      for (int32_t j = 0; j < next && !seen; j++)
        seen = !ext[j].write && ext[j].lo == C->mp->offset[leaves[i]];
      for (int32_t j = 0; j < i && !seen; j++)
        seen = C->mp->offset[leaves[j]] == C->mp->offset[leaves[i]];
      fresh += !seen;
    }
    if (nargs + fresh > C->o.multi_args - 1 || *nv + 1 > C->o.multi_args - 1) break;
    MultiExt cand[MULTI_LEAVES + 1];
    for (int32_t i = 0; i <= nl; i++) {
      int32_t u = i < nl ? leaves[i] : w;
      const IrValue *x = val(C, u);
      int64_t bytes = ir_shape_numel(&x->shape) * (int64_t)ir_dtype_size(x->dtype);
      cand[i] = (MultiExt){C->mp->offset[u], C->mp->offset[u] + bytes, 0, 0, i == nl, false};
    }
    bool ok = true; /* no write overlaps anything else of the run */
    for (int32_t i = 0; i <= nl && ok; i++)
      for (int32_t j = 0; j < next + nl + 1 && ok; j++) {
        const MultiExt *a = &cand[i], *b = j < next ? &ext[j] : &cand[j - next];
        if (a != b && a->lo < b->hi && b->lo < a->hi && (a->write || b->write)) ok = false;
      }
    if (!ok) break;
    grow((void **)&ext, sizeof *ext, &cext, next + nl + 1);
    memcpy(ext + next, cand, (size_t)(nl + 1) * sizeof *cand);
    next += nl + 1;
    nargs += fresh;
    vals[(*nv)++] = w;
  }
  free(ext);
  return w;
}

static void multi_sum_kernels(Ctx *C, Launches *L, OclBuf *body, const int32_t *vals, int32_t nv) {
  int64_t total = 0, nitems = 0;
  for (int32_t k = 0; k < nv; k++) total += ir_shape_numel(&val(C, val(C, vals[k])->ops[0])->shape);
  int64_t ch = C->multi_ch;
  for (int32_t k = 0; k < nv; k++)
    nitems += ceil_div(ir_shape_numel(&val(C, val(C, vals[k])->ops[0])->shape), ch);
  char name[64], sc[NAME];
  for (int stage = 1; stage <= 2 && !C->failed; stage++) {
    kernel_name(C, vals[0], stage == 1 ? "multi_sum_parts" : "multi_sum_final", name);
    kernel_begin(C, body);
    C->reduced = stage == 1 ? total : nitems;
    line(C, "long gid = get_global_id(0);");
    if (C->o.break_kernel == L->n + 1)
      line(C, "axlc_broken_on_purpose = 1; /* AXLC_OPENCL_BREAK_KERNEL */");
    int32_t a = arg_of(C, C->scratch_at, nitems * 8);
    snprintf(sc, sizeof sc, "((__global axacc *)(s%d + a%d))", a, a);
    /* within the reservation of ocl_emit (multi_sum_plan) */
    int64_t c0 = 0;
    for (int32_t k = 0; k < nv; k++) {
      const IrValue *x = val(C, vals[k]);
      int64_t R = ir_shape_numel(&val(C, x->ops[0])->shape), c1 = c0 + ceil_div(R, ch);
      char acc[NAME], i[NAME], e[NAME];
      if (stage == 1) {
        line(C, "if (gid >= %lldL && gid < %lldL) {", (long long)c0, (long long)c1);
        acc_begin(C, x->dtype, true, acc);
        newvar(C, i);
        line(C,
             "for (long %s = (gid - %lldL) * %lldL; %s < min((gid - %lldL + 1) * %lldL, %lldL); "
             "%s++) {",
             i, (long long)c0, (long long)ch, i, (long long)c0, (long long)ch, (long long)R, i);
        Pos p = pos_of_lin(i);
        elem_get(C, x->ops[0], &p, e);
        acc_step(C, x->dtype, true, acc, e);
        line(C, "}");
        line(C, "%s[gid] = %s;", sc, acc);
      } else {
        char ref[NAME];
        line(C, "if (gid == %dL) {", k);
        acc_begin(C, x->dtype, true, acc);
        newvar(C, i);
        line(C, "for (long %s = %lldL; %s < %lldL; %s++) %s += %s[%s];", i, (long long)c0, i,
             (long long)c1, i, acc, sc, i);
        acc_end(C, x->dtype, acc, e);
        buf_ref(C, vals[k], ref, sizeof ref);
        if (x->dtype == DT_BF16)
          line(C, "%s[0] = ax_to_bf16(%s);", ref, e);
        else
          line(C, "%s[0] = %s;", ref, e);
      }
      line(C, "}");
      c0 = c1;
    }
    kernel_end(C, L, name, "", items(stage == 1 ? nitems : nv));
  }
}

static void launches_free(Launches *L, bool keep_launches) {
  for (int32_t i = 0; i < L->nuniq; i++) {
    free(L->bodies[i]);
    if (!keep_launches) free(L->names[i]);
  }
  free(L->bodies);
  free(L->hashes);
  free(L->uline);
  if (!keep_launches) {
    for (int32_t i = 0; i < L->n; i++) {
      free((void *)L->v[i].args);
      free((void *)L->v[i].arg_bytes);
    }
    free(L->v);
    free(L->line);
    free(L->reduced);
    free(L->names);
  }
  ocl_buf_free(&L->text);
}

/* ---- checks and the whole program ---- */

static int check_graph(Ctx *C) {
  if (C->mp->nvalues != C->g->nvalues)
    return fail(C, "the memory plan has %d values, the graph %d", C->mp->nvalues, C->g->nvalues);
  for (int32_t v = 0; v < C->g->nvalues; v++) {
    const IrValue *x = val(C, v);
    int64_t need = ir_shape_numel(&x->shape) * (int64_t)ir_dtype_size(x->dtype);
    if (x->dtype != DT_F32 && x->dtype != DT_I32 && x->dtype != DT_BF16)
      return fail(
          C, "%%%d (%s) at %s: dtype %s is not supported by the OpenCL backend (f32, bf16, i32)", v,
          ir_op_name(x->op), *x->origin ? x->origin : "?", ir_dtype_name(x->dtype));
    if (C->mat[v] && need > 0 &&
        (C->mp->bytes[v] < need || C->mp->offset[v] < 0 ||
         C->mp->offset[v] + need > C->mp->slab_bytes))
      return fail(C, "%%%d (%s): the memory plan gives it %lld bytes; it needs %lld", v,
                  ir_op_name(x->op), (long long)C->mp->bytes[v], (long long)need);
  }
  return 0;
}

/* Shared by every kernel: the slab accessors, the f32 accumulator, i32 division. */
static void prelude(OclBuf *b) {
  ocl_buf_printf(
      b, "/* generated by axlc (backends/opencl): the step graph as OpenCL C 1.2 kernels */\n"
         "#ifdef cl_khr_fp64\n"
         "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
         "typedef double axacc; /* f32 sums accumulate in double, as the interpreter's */\n"
         "#else\n"
         "typedef float axacc;\n"
         "#endif\n"
         "/* AXLC_NV_SHFL (set by the runtime on NVIDIA only): reductions use warp shuffles */\n"
         "#ifdef AXLC_NV_SHFL\n"
         "int ax_shfl_i(int v, int m) {\n"
         "  int r;\n"
         "  asm volatile(\"shfl.sync.bfly.b32 %%0, %%1, %%2, 0x1f, 0xffffffff;\" : \"=r\"(r) : "
         "\"r\"(v), "
         "\"r\"(m));\n"
         "  return r;\n"
         "}\n"
         "float ax_shfl_f(float v, int m) { return as_float(ax_shfl_i(as_int(v), m)); }\n"
         "#ifdef cl_khr_fp64\n"
         "double ax_shfl_acc(double v, int m) {\n"
         "  int2 h = as_int2(v);\n"
         "  return as_double((int2)(ax_shfl_i(h.x, m), ax_shfl_i(h.y, m)));\n"
         "}\n"
         "#else\n"
         "#define ax_shfl_acc ax_shfl_f\n"
         "#endif\n"
         "#endif\n"
         "#define AXF(s, off) ((__global float *)((s) + (off)))\n"
         "#define AXI(s, off) ((__global int *)((s) + (off)))\n"
         "/* i32 division: truncates; x/0 = 0; INT_MIN/-1 saturates */\n"
         "int ax_idiv(int a, int b) {\n"
         "  if (b == 0) return 0;\n"
         "  if (b == -1) return a == INT_MIN ? INT_MAX : -a;\n"
         "  return a / b;\n"
         "}\n\n");
}

/* The bf16 helpers, printed only for graphs with bf16 values (f32 programs keep their source).
 * A bf16 element is the upper half of an f32: loads widen exactly, arithmetic is f32, and every
 * bf16 result is rounded to nearest even (a NaN stays a quiet NaN), as runtime/axrt.h's
 * rt_bf16_from_f32 and the interpreter round. */
static void prelude_bf16(OclBuf *b) {
  ocl_buf_printf(
      b, "#define AXH(s, off) ((__global ushort *)((s) + (off)))\n"
         "float ax_from_bf16(ushort h) { return as_float((uint)h << 16); }\n"
         "ushort ax_to_bf16(float f) {\n"
         "  uint u = as_uint(f);\n"
         "  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);\n"
         "  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
         "}\n"
         "/* an f32 result rounded to bf16, kept in a register */\n"
         "float ax_bf16r(float f) { return ax_from_bf16(ax_to_bf16(f)); }\n"
         "/* i as an f32 rounded to odd: rounding that to bf16 is i's own rounding (no double "
         "rounding) */\n"
         "float ax_i2f_odd(int i) {\n"
         "  float f = convert_float_rtz(i);\n"
         "  return convert_int_rtz(f) == i ? f : as_float(as_uint(f) | 1u);\n"
         "}\n"
         "float4 ax_from_bf16x4(ushort4 h) { return as_float4(convert_uint4(h) << 16); }\n"
         "ushort4 ax_to_bf16x4(float4 c) {\n"
         "  return (ushort4)(ax_to_bf16(c.x), ax_to_bf16(c.y), ax_to_bf16(c.z), "
         "ax_to_bf16(c.w));\n"
         "}\n\n");
  /* an accumulator as an f32 rounded to odd: rounding that to bf16 rounds it once (acc_end) */
  ocl_buf_printf(b, "#ifdef cl_khr_fp64\n"
                    "float ax_acc_odd(double d) {\n"
                    "  float f = convert_float_rtz(d);\n"
                    "  return (double)f == d || isnan(d) ? f : as_float(as_uint(f) | 1u);\n"
                    "}\n"
                    "#else\n"
                    "float ax_acc_odd(float d) { return d; }\n"
                    "#endif\n\n");
}

static bool graph_has_bf16(const IrGraph *g) {
  for (int32_t v = 0; v < g->nvalues; v++)
    if (g->values[v].dtype == DT_BF16) return true;
  return false;
}

/* The buffers a kernel of v reads and writes: materialized values reached through the inlined
 * ones (stamped with mark in seen), v itself counted by the caller. */
static int32_t arg_leaves(const IrGraph *g, const bool *mat, int32_t v, int32_t *seen,
                          int32_t mark) {
  int32_t n = 0;
  const IrValue *x = &g->values[v];
  for (int32_t k = 0; k < x->nops; k++) {
    int32_t u = x->ops[k];
    if (u < 0 || seen[u] == mark) continue;
    seen[u] = mark;
    n += mat[u] ? 1 : arg_leaves(g, mat, u, seen, mark);
  }
  return n;
}

/* The values computed inline in v's kernel (reached from v through values not materialized),
 * each once (stamped with mark in seen), into in[*n]. */
static void inlined_under(const IrGraph *g, const bool *mat, int32_t v, int32_t *seen, int32_t mark,
                          int32_t *in, int32_t *n) {
  const IrValue *x = &g->values[v];
  for (int32_t k = 0; k < x->nops; k++) {
    int32_t w = x->ops[k];
    if (w < 0 || mat[w] || seen[w] == mark) continue;
    seen[w] = mark;
    in[(*n)++] = w;
    inlined_under(g, mat, w, seen, mark, in, n);
  }
}

int ocl_max_args(void) {
  const char *e = getenv("AXLC_OPENCL_MAX_ARGS");
  return e && atoi(e) >= 4 && atoi(e) < MULTI_ARGS ? atoi(e) : MULTI_ARGS;
}

/* pass_fusion_plan, then no kernel with more than max_args argument pairs: the gradient norm's
 * sqrt inlines the sum of every parameter's sum of squares (197 buffers, 3,152 bytes of
 * arguments for gpt2-124m without multi-tensor sums, over OpenCL 1.2's least
 * CL_DEVICE_MAX_PARAMETER_SIZE of 1,024). While a kernel would read more buffers (one pair is
 * its result, one the scratch), the value inlined in it that reads the most buffers within the
 * cap gets its own (a chain of 148 adds: 3 of them), and the plan is looked at again. */
int ocl_fusion_plan(const IrGraph *g, bool *mat) {
  if (pass_fusion_plan(g, mat)) return -1;
  int32_t cap = ocl_max_args() - 2, mark = 0;
  int32_t *seen = calloc((size_t)g->nvalues + 1, sizeof *seen);
  int32_t *in = malloc(((size_t)g->nvalues + 1) * sizeof *in);
  if (!seen || !in) {
    free(seen);
    free(in);
    return -1;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t v = 0; v < g->nvalues; v++) {
      const IrValue *x = &g->values[v];
      if (!mat[v] || x->op == IR_PARAMETER || x->op == IR_INPUT) continue;
      while (arg_leaves(g, mat, v, seen, ++mark) > cap) {
        /* the inlined value under v that reads the most buffers within the cap: a kernel of
         * its own that fits, as few of them as a chain of adds needs */
        int32_t best = -1, most = 0, nin = 0;
        inlined_under(g, mat, v, seen, ++mark, in, &nin);
        for (int32_t i = 0; i < nin; i++) {
          int32_t n = arg_leaves(g, mat, in[i], seen, ++mark);
          if (n <= cap && n > most) best = in[i], most = n;
        }
        if (best < 0) break; /* no operand to split off */
        mat[best] = true;
        changed = true;
      }
    }
  }
  free(seen);
  free(in);
  return 0;
}

OclOptions ocl_options_default(void) {
  return (OclOptions){.fuse = true,
                      .multi = true,
                      .multi_args = ocl_max_args(),
                      .gemm = OCL_GEMM_BLOCKED,
                      .break_kernel = 0};
}

int ocl_emit(const IrGraph *g, const MemPlan *mp, const bool *mat, const OclOptions *o,
             OclKernels *out, char *err, size_t cap) {
  memset(out, 0, sizeof *out);
  if (err && cap) err[0] = 0;
  OclBuf body = {0};
  Ctx C = {.g = g,
           .mp = mp,
           .mat = mat,
           .o = o ? *o : ocl_options_default(),
           .b = &body,
           .err = err,
           .cap = cap};
  C.const_done = base_xcalloc((size_t)g->nvalues + 1, sizeof *C.const_done);
  C.scratch_at = (mp->slab_bytes + 63) / 64 * 64;
  Launches L = {0};
  multi_sum_plan(&C, &C.multi_ch, &C.scratch_bytes);
  if (check_graph(&C) == 0) {
    int32_t *vals = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *vals);
    int32_t *seg = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *seg);
    int32_t *run_seg = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *run_seg);
    for (int32_t v = 0; v < g->nvalues; v++) run_seg[v] = -1;
    for (int32_t v = 0; v < g->nvalues && !C.failed;) {
      int32_t n0 = L.n, v0 = v; /* the launches of values v0..v-1, stamped with their stage */
      int32_t nv = 0, next = C.o.multi ? sum_run(&C, v, vals, &nv) : v;
      if (nv > 1 && one_stage(g, vals, nv)) {
        multi_sum_kernels(&C, &L, &body, vals, nv);
        v = next;
        stamp(&L, n0, g->values[vals[0]].stage);
        continue;
      }
      nv = 0;
      next = C.o.multi ? multi_run(&C, v, vals, seg, &nv, run_seg) : v;
      if (nv > 1 && one_stage(g, vals, nv)) {
        multi_kernels(&C, &L, &body, vals, seg, nv);
        v = next;
        stamp(&L, n0, g->values[vals[0]].stage);
      } else if (next > v &&
                 nv <= 1) { /* values that launch nothing, and at most one elementwise */
        for (; v < next && !C.failed; v++, n0 = L.n) {
          value_kernel(&C, &L, &body, v);
          stamp(&L, n0, g->values[v].stage);
        }
      } else {
        value_kernel(&C, &L, &body, v++);
        stamp(&L, n0, g->values[v0].stage);
      }
    }
    free(vals);
    free(seg);
    free(run_seg);
    if (!C.failed) copy_back(&C, &L, &body);
    if (!C.failed) share_launches(&C, &L);
  }
  OclBuf all = {0};
  prelude(&all);
  bool bf16 = graph_has_bf16(g);
  if (bf16) prelude_bf16(&all);
  bool att_f32 = false; /* f32 fused attention: its tensor-core body's helpers */
  for (int32_t v = 0; v < g->nvalues; v++)
    att_f32 |= (g->values[v].op == IR_ATTENTION || g->values[v].op == IR_ATTENTION_GRAD) &&
               g->values[g->values[v].ops[0]].dtype == DT_F32;
  ocl_gemm_prelude(&all, bf16, g->matmul == IR_MATMUL_TF32, att_f32);
  if (C.consts.n) ocl_buf_printf(&all, "%s\n", C.consts.s);
  int32_t head = 0;
  for (size_t i = 0; i < all.n; i++) head += all.s[i] == '\n';
  ocl_buf_printf(&all, "%s", L.text.s ? L.text.s : "");
  for (int32_t i = 0; i < L.n; i++) L.line[i] += head;
  out->source = all.s;
  out->nlaunches = L.n;
  out->launches = L.v;
  out->kernel_line = L.line;
  out->reduced = L.reduced;
  out->slab_bytes = mp->slab_bytes;
  if (C.scratch_bytes > 0) out->slab_bytes = C.scratch_at + C.scratch_bytes;
  out->names = L.names;
  out->nkernels = L.nuniq;
  launches_free(&L, true);
  ocl_buf_free(&body);
  ocl_buf_free(&C.consts);
  free(C.const_done);
  free(C.args);
  free(C.bytes);
  if (C.failed) {
    ocl_kernels_free(out);
    return -1;
  }
  return 0;
}

void ocl_kernels_free(OclKernels *k) {
  for (int32_t i = 0; i < k->nlaunches; i++) {
    free((void *)k->launches[i].args);
    free((void *)k->launches[i].arg_bytes);
  }
  for (int32_t i = 0; i < k->nkernels; i++) free(k->names[i]);
  free(k->names);
  free(k->launches);
  free(k->kernel_line);
  free(k->reduced);
  free(k->source);
  memset(k, 0, sizeof *k);
}

int ocl_launches_write(FILE *f, const OclKernels *k) {
  int rc = fprintf(f, "# kernel global local reduced arg_bytes\n") < 0;
  for (int32_t i = 0; i < k->nlaunches && !rc; i++) {
    const RtOclLaunch *L = &k->launches[i];
    int64_t global = 1, local = 1;
    for (int32_t d = 0; d < L->dims; d++) {
      global *= L->global[d];
      local *= L->local[d];
    }
    rc = fprintf(f, "%s %lld %lld %lld %lld\n", L->kernel, (long long)global, (long long)local,
                 (long long)(k->reduced ? k->reduced[i] : 0),
                 (long long)L->nargs * OCL_ARG_PAIR_BYTES) < 0;
  }
  return rc ? -1 : 0;
}
