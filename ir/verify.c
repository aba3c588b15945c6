/* verify.c: the verifier, run after every pass in tests and debug builds.
 *
 * It re-derives what the builder guaranteed, so a pass that edits values directly cannot leave the
 * graph inconsistent unnoticed: operands precede their users, arity matches ops.def, the shape rule
 * of shape.c gives back the stored dtype and shape, parameter/input names are present and unique
 * per op, collectives name axes of the graph's mesh, and outputs point at values. Messages name the
 * value (%N), its op and its config path.
 */
#include "ir/ir.h"

#include <stdarg.h>
#include <string.h>

static int verify_fail(const IrGraph *g, int32_t i, char *msg, size_t cap, const char *fmt, ...) {
  if (!msg || !cap) return IR_ERR;
  const IrValue *v = &g->values[i];
  int n = snprintf(msg, cap, "%%%d (%s) at %s: ", i, ir_op_name(v->op), *v->origin ? v->origin : "?");
  if (n < 0 || (size_t)n >= cap) return IR_ERR;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, cap - (size_t)n, fmt, ap);
  va_end(ap);
  return IR_ERR;
}

static int verify_operands(const IrGraph *g, int32_t i, char *msg, size_t cap) {
  const IrValue *v = &g->values[i];
  int32_t arity = ir_op_arity(v->op);
  if (arity >= 0 ? v->nops != arity : v->nops < 1)
    return verify_fail(g, i, msg, cap, "%d operands, expected %s%d", v->nops, arity < 0 ? "at least " : "",
                       arity < 0 ? 1 : arity);
  for (int32_t k = 0; k < v->nops; k++)
    if (v->ops[k] < 0 || v->ops[k] >= i)
      return verify_fail(g, i, msg, cap, "operand %d is %%%d, which does not precede it", k, v->ops[k]);
  return IR_OK;
}

static int verify_type(const IrGraph *g, int32_t i, char *msg, size_t cap) {
  const IrValue *v = &g->values[i];
  IrDType dt;
  IrShape s;
  char why[IR_ERR_LEN];
  if (ir_value_infer(g, v, &dt, &s, why, sizeof why)) return verify_fail(g, i, msg, cap, "%s", why);
  if (dt != v->dtype)
    return verify_fail(g, i, msg, cap, "dtype is %s, the rule gives %s", ir_dtype_name(v->dtype),
                       ir_dtype_name(dt));
  if (!ir_shape_eq(&s, &v->shape))
    return verify_fail(g, i, msg, cap, "stored shape (rank %d) differs from the rule's (rank %d)",
                       v->shape.rank, s.rank);
  return IR_OK;
}

static int verify_strings(const IrGraph *g, int32_t i, char *msg, size_t cap) {
  const IrValue *v = &g->values[i];
  if (!v->name || !v->origin || !v->tag) return verify_fail(g, i, msg, cap, "NULL string field");
  if (v->op != IR_PARAMETER && v->op != IR_INPUT) return IR_OK;
  for (int32_t j = 0; j < i; j++)
    if (g->values[j].op == v->op && strcmp(g->values[j].name, v->name) == 0)
      return verify_fail(g, i, msg, cap, "name '%s' already used by %%%d", v->name, j);
  return IR_OK;
}

static int verify_outputs(const IrGraph *g, char *msg, size_t cap) {
  for (int32_t k = 0; k < g->noutputs; k++) {
    const IrOutput *o = &g->outputs[k];
    if (o->value < 0 || o->value >= g->nvalues) {
      if (msg && cap) snprintf(msg, cap, "output '%s' refers to %%%d, not a value", o->name, o->value);
      return IR_ERR;
    }
    for (int32_t j = 0; j < k; j++)
      if (strcmp(g->outputs[j].name, o->name) == 0) {
        if (msg && cap) snprintf(msg, cap, "output '%s' defined twice", o->name);
        return IR_ERR;
      }
  }
  return IR_OK;
}

int ir_graph_verify(const IrGraph *g, char *msg, size_t cap) {
  for (int32_t i = 0; i < g->nvalues; i++) {
    if ((unsigned)g->values[i].op >= IR_OP_COUNT) {
      if (msg && cap) snprintf(msg, cap, "%%%d: unknown op %d", i, (int)g->values[i].op);
      return IR_ERR;
    }
    if (verify_operands(g, i, msg, cap) || verify_strings(g, i, msg, cap) ||
        verify_type(g, i, msg, cap))
      return IR_ERR;
  }
  return verify_outputs(g, msg, cap);
}
