/* ops.c: tables generated from ops.def, and the dtype table.
 *
 * The op tables are built by expanding the X-macro; the dtype table is hand-written and checked by
 * a static_assert against DT_COUNT. ir_dtype_round is the single definition of "representable in a
 * dtype" that the interpreter and constant folding share.
 */
#include "ir/ir.h"

#include <assert.h>
#include <math.h>
#include <string.h>

typedef struct OpInfo {
  const char *name;
  int32_t arity;
  uint32_t flags;
  uint32_t attrs;
} OpInfo;

static const OpInfo op_info[] = {
#define X(id, name, arity, flags, attrs, shape, grad) {name, arity, flags, attrs},
#include "ir/ops.def"
#undef X
};
static_assert(sizeof op_info / sizeof op_info[0] == IR_OP_COUNT,
              "op_info out of step with ops.def");

typedef struct DTypeInfo {
  const char *name;
  size_t size;
  int mant_bits; /* significand bits including the implicit one; 0 for integers */
  int min_exp;   /* exponent of the smallest normal, as frexp counts it */
  double max;    /* largest finite value */
} DTypeInfo;

/* Coupled with IrDType. */
static const DTypeInfo dtype_info[] = {
    [DT_F32] = {"f32", 4, 24, -125, 3.4028234663852886e38},
    [DT_F64] = {"f64", 8, 53, -1021, 1.7976931348623157e308},
    [DT_BF16] = {"bf16", 2, 8, -125, 3.3895313892515355e38},
    [DT_F16] = {"f16", 2, 11, -13, 65504.0},
    [DT_I32] = {"i32", 4, 0, 0, 2147483647.0},
};
static_assert(sizeof dtype_info / sizeof dtype_info[0] == DT_COUNT, "dtype_info out of step");

const char *ir_op_name(IrOp op) { return op < IR_OP_COUNT ? op_info[op].name : "?"; }
int32_t ir_op_arity(IrOp op) { return op_info[op].arity; }
uint32_t ir_op_flags(IrOp op) { return op_info[op].flags; }
uint32_t ir_op_attrs(IrOp op) { return op_info[op].attrs; }

int ir_op_lookup(const char *name, size_t len, IrOp *op) {
  for (int i = 0; i < IR_OP_COUNT; i++) {
    if (strlen(op_info[i].name) == len && memcmp(op_info[i].name, name, len) == 0) {
      *op = (IrOp)i;
      return IR_OK;
    }
  }
  return IR_ERR;
}

const char *ir_dtype_name(IrDType dt) { return dt < DT_COUNT ? dtype_info[dt].name : "?"; }
size_t ir_dtype_size(IrDType dt) { return dtype_info[dt].size; }
bool ir_dtype_is_float(IrDType dt) { return dtype_info[dt].mant_bits > 0; }

int ir_dtype_lookup(const char *name, size_t len, IrDType *dt) {
  for (int i = 0; i < DT_COUNT; i++) {
    if (strlen(dtype_info[i].name) == len && memcmp(dtype_info[i].name, name, len) == 0) {
      *dt = (IrDType)i;
      return IR_OK;
    }
  }
  return IR_ERR;
}

/* Rounds to mant_bits significant bits (fewer for subnormals), ties to even (nearbyint in the
 * default rounding mode), and overflows to infinity past the largest finite value. */
static double round_float(const DTypeInfo *t, double x) {
  if (x == 0 || !isfinite(x)) return x;
  int e;
  frexp(x, &e);
  if (e < t->min_exp) e = t->min_exp;
  double r = ldexp(nearbyint(ldexp(x, t->mant_bits - e)), e - t->mant_bits);
  if (fabs(r) > t->max) return r > 0 ? INFINITY : -INFINITY;
  return r;
}

double ir_tf32_round(double x) {
  float f = (float)x;
  if (isnan(f) || isinf(f)) return x;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u = (u + 0x1000u) & 0xffffe000u; /* half the dropped 13 bits' unit, then drop them */
  memcpy(&f, &u, sizeof f);
  return f;
}

double ir_dtype_round(IrDType dt, double x) {
  if (dt == DT_F64) return x;
  if (dt == DT_F32) return (double)(float)x;
  if (dt != DT_I32) return round_float(&dtype_info[dt], x);
  if (isnan(x)) return 0;
  double t = trunc(x);
  if (t > 2147483647.0) return 2147483647.0;
  if (t < -2147483648.0) return -2147483648.0;
  return t;
}
