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
#include <stdlib.h>
#include <string.h>

static int verify_fail(const IrGraph *g, int32_t i, char *msg, size_t cap, const char *fmt, ...) {
  if (!msg || !cap) return IR_ERR;
  const IrValue *v = &g->values[i];
  int n =
      snprintf(msg, cap, "%%%d (%s) at %s: ", i, ir_op_name(v->op), *v->origin ? v->origin : "?");
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
    return verify_fail(g, i, msg, cap, "%d operands, expected %s%d", v->nops,
                       arity < 0 ? "at least " : "", arity < 0 ? 1 : arity);
  for (int32_t k = 0; k < v->nops; k++)
    if (v->ops[k] < 0 || v->ops[k] >= i)
      return verify_fail(g, i, msg, cap, "operand %d is %%%d, which does not precede it", k,
                         v->ops[k]);
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

/* ---- names: unique per op (parameters, inputs) and among outputs ---- */

/* Sorted by (op, name, position), repeats are adjacent: O(n log n), where a scan of the earlier
 * ones per name would be quadratic in a deep model's tens of thousands of parameters. */
typedef struct {
  int32_t op, at;
  const char *name;
} Named;

static int by_op_name(const void *pa, const void *pb) {
  const Named *a = pa, *b = pb;
  int c = a->op != b->op ? (a->op > b->op) - (a->op < b->op) : strcmp(a->name, b->name);
  return c ? c : (a->at > b->at) - (a->at < b->at);
}

/* Among n entries, the first position (in graph order) whose (op, name) an earlier entry has, or
 * -1; *earlier gets the first entry with that name. Sorts `e`. */
static int32_t first_repeat(Named *e, int32_t n, int32_t *earlier) {
  qsort(e, (size_t)n, sizeof *e, by_op_name);
  int32_t first = -1, group = 0;
  for (int32_t k = 1; k < n; k++) {
    if (e[k].op != e[group].op || strcmp(e[k].name, e[group].name) != 0) {
      group = k;
    } else if (first < 0 || e[k].at < first) {
      first = e[k].at;
      *earlier = e[group].at;
    }
  }
  return first;
}

/* The first parameter or input whose name an earlier one of the same op has (-1 if none), and
 * that earlier one. */
static int32_t repeated_value_name(const IrGraph *g, int32_t *earlier) {
  Named *e = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *e);
  int32_t n = 0;
  for (int32_t i = 0; i < g->nvalues; i++)
    if ((g->values[i].op == IR_PARAMETER || g->values[i].op == IR_INPUT) && g->values[i].name)
      e[n++] = (Named){(int32_t)g->values[i].op, i, g->values[i].name};
  int32_t first = first_repeat(e, n, earlier);
  free(e);
  return first;
}

static int verify_strings(const IrGraph *g, int32_t i, int32_t repeat, int32_t earlier, char *msg,
                          size_t cap) {
  const IrValue *v = &g->values[i];
  if (!v->name || !v->origin || !v->tag) return verify_fail(g, i, msg, cap, "NULL string field");
  if (i == repeat)
    return verify_fail(g, i, msg, cap, "name '%s' already used by %%%d", v->name, earlier);
  return IR_OK;
}

static int verify_outputs(const IrGraph *g, char *msg, size_t cap) {
  Named *e = base_xmalloc(((size_t)g->noutputs + 1) * sizeof *e);
  for (int32_t k = 0; k < g->noutputs; k++) e[k] = (Named){0, k, g->outputs[k].name};
  int32_t earlier, repeat = first_repeat(e, g->noutputs, &earlier);
  free(e);
  for (int32_t k = 0; k < g->noutputs; k++) {
    const IrOutput *o = &g->outputs[k];
    if (o->value < 0 || o->value >= g->nvalues) {
      if (msg && cap)
        snprintf(msg, cap, "output '%s' refers to %%%d, not a value", o->name, o->value);
      return IR_ERR;
    }
    if (k == repeat) {
      if (msg && cap) snprintf(msg, cap, "output '%s' defined twice", o->name);
      return IR_ERR;
    }
  }
  return IR_OK;
}

int ir_graph_verify(const IrGraph *g, char *msg, size_t cap) {
  int32_t earlier = -1, repeat = repeated_value_name(g, &earlier);
  for (int32_t i = 0; i < g->nvalues; i++) {
    if ((unsigned)g->values[i].op >= IR_OP_COUNT) {
      if (msg && cap) snprintf(msg, cap, "%%%d: unknown op %d", i, (int)g->values[i].op);
      return IR_ERR;
    }
    if (verify_operands(g, i, msg, cap) || verify_strings(g, i, repeat, earlier, msg, cap) ||
        verify_type(g, i, msg, cap))
      return IR_ERR;
  }
  return verify_outputs(g, msg, cap);
}
