/* fusion.c: which values a code generator computes inside their consumers instead of storing.
 *
 * Both code generators (backends/llvm, backends/opencl) follow this plan, so they plan the same
 * memory (pass_memplan_fused). An elementwise value, broadcast, splat constant or iota whose
 * consumers are all elementwise values of its own shape is computed inside those consumers'
 * loops, at the same position, instead of being stored: elementwise chains, and the broadcasts
 * feeding them, become one loop. Only a single consumer may inline an elementwise value, so
 * nothing is computed twice; the cheap ones are inlined into every consumer: splat constants,
 * iota, and broadcasts, whose element is one load from their (stored) operand. A broadcast that
 * several consumers share would otherwise be stored at its full size and read back by each:
 * AdamW's learning rate and bias corrections, broadcast to every parameter's shape and shared by
 * all the parameters of that shape, cost gpt2-124m six extra passes over its 38.6M-element
 * embedding per step.
 *
 * Index-only values (comparisons, selects and casts of cheap values: the cross-entropy's
 * one-hot mask) are inlined into every consumer as well.
 *
 * A light elementwise value (one add, subtract, multiply, negation, max or min) of stored or
 * cheap operands is inlined into every consumer too: recomputing it costs an instruction and
 * the same loads its stored copy would, and saves writing it out. AdamW's clipped gradient
 * (gradient times the clip factor), read by the two moment updates, is one.
 *
 * A reduction over its operand's trailing axes (norms, softmax, cross-entropy, the gradient
 * norm: each result element reduces one contiguous run) takes its operand inline too, when the
 * operand is an f32 elementwise value that only it reads, and either one axis is reduced or the
 * operand's inlined tree needs no per-axis indices (elementwise values of stored or scalar
 * operands): the reduction computes the elements of its run as it sums them, and the operand
 * (a squared gradient, the variance's squares, softmax's backward product) is never written out
 * and read back. The code generators compute such a run a block of elements at a time into
 * registers and reduce the block as they would a stored one, so the sums are the same.
 *
 * A running sum of microbatches (an add tagged PASS_MICROBATCH_TAG, pass_microbatch) is stored
 * where it is made, after each microbatch. Its chain of adds is elementwise and single-use, so
 * it would otherwise be one loop at the step's end, where the mean divides it: every
 * microbatch's gradient (a device's chunk of every parameter's, under fsdp) would stay alive
 * to that loop, M of them instead of the one running sum. The adds are the same, in the same
 * order, so the sums are the same.
 *
 * Parameters, inputs, outputs and every operand of any other value that is not elementwise
 * (reductions over leading axes, matrix products, gathers, ...) keep their buffers: those kernels
 * read their operands at other positions.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* A running sum of microbatches: stored after each one (see the top of the file). */
static bool running_sum(const IrValue *x) {
  return x->op == IR_ADD && x->tag && !strcmp(x->tag, PASS_MICROBATCH_TAG);
}

static bool inlinable(const IrValue *x) {
  if (x->op == IR_CONSTANT) return x->attr.data == NULL;
  return x->op == IR_BROADCAST || x->op == IR_IOTA || (ir_op_flags(x->op) & IR_ELEMENTWISE);
}

static bool cheap(const IrValue *x) {
  return x->op == IR_CONSTANT || x->op == IR_IOTA || x->op == IR_BROADCAST;
}

/* Index-only: a comparison, select or cast of cheap or index-only values (operands decided
 * first), a function of the position and a few loads. The cross-entropy's one-hot mask,
 * eq(iota, broadcast(targets)) cast to f32, is one: recomputed in the loss's reduction and in
 * the gradient's kernel, the (batch, seq, vocab) mask is never written out, which is what a
 * gather-based loss would save. */
static bool index_only(const IrGraph *g, const IrValue *x, const bool *idx) {
  switch (x->op) {
  case IR_EQ:
  case IR_NE:
  case IR_LT:
  case IR_LE:
  case IR_GT:
  case IR_GE:
  case IR_SELECT:
  case IR_CAST: break;
  default: return false;
  }
  for (int32_t k = 0; k < x->nops; k++) {
    const IrValue *o = &g->values[x->ops[k]];
    if (!cheap(o) && !idx[x->ops[k]]) return false;
  }
  return true;
}

/* Light: one cheap instruction whose operands are stored (mat, decided: they come first) or
 * cheap. */
static bool light(const IrGraph *g, const IrValue *x, const bool *mat) {
  switch (x->op) {
  case IR_ADD:
  case IR_SUB:
  case IR_MUL:
  case IR_NEG:
  case IR_MAX:
  case IR_MIN: break;
  default: return false;
  }
  for (int32_t k = 0; k < x->nops; k++)
    if (!mat[x->ops[k]] && !cheap(&g->values[x->ops[k]])) return false;
  return true;
}

/* Whether reduction x reduces the trailing axes of its operand (in any order), at least one. */
static bool reduces_trailing(const IrGraph *g, const IrValue *x) {
  if (x->op != IR_REDUCE_SUM && x->op != IR_REDUCE_MAX) return false;
  int32_t rank = g->values[x->ops[0]].shape.rank, n = x->attr.axes.n;
  if (n < 1) return false;
  for (int32_t k = 0; k < n; k++)
    if (x->attr.axes.v[k] < rank - n) return false;
  return true;
}

/* Whether v, inlined as decided so far (operands first), reads every operand at its own linear
 * position: elementwise values over stored ones and splat constants. */
static bool flat_tree(const IrGraph *g, const bool *mat, int32_t v) {
  const IrValue *x = &g->values[v];
  if (mat[v]) return true;
  if (x->op == IR_CONSTANT) return x->attr.data == NULL;
  if (!(ir_op_flags(x->op) & IR_ELEMENTWISE)) return false;
  for (int32_t k = 0; k < x->nops; k++)
    if (!flat_tree(g, mat, x->ops[k])) return false;
  return true;
}

/* Whether reduction r may compute its operand o inline (see the top of the file); o's own
 * operands are decided. */
static bool reduction_takes(const IrGraph *g, const bool *mat, int32_t r, int32_t o) {
  const IrValue *x = &g->values[r], *ox = &g->values[o];
  if (!reduces_trailing(g, x) || ox->dtype != DT_F32 || x->dtype != DT_F32) return false;
  if (!(ir_op_flags(ox->op) & IR_ELEMENTWISE)) return false;
  if (x->attr.axes.n == 1) return true;
  for (int32_t k = 0; k < ox->nops; k++)
    if (!flat_tree(g, mat, ox->ops[k])) return false;
  return true;
}

int pass_fusion_plan(const IrGraph *g, bool *mat) {
  if (!g || !mat) return -1;
  int32_t n = g->nvalues;
  int32_t *uses = base_xcalloc((size_t)n + 1, sizeof *uses);
  int32_t *reducer = base_xmalloc(((size_t)n + 1) * sizeof *reducer); /* a reduction reading v */
  bool *ok = base_xmalloc((size_t)n + 1), *idx = base_xcalloc((size_t)n + 1, sizeof *idx);
  for (int32_t v = 0; v < n; v++) {
    ok[v] = inlinable(&g->values[v]);
    reducer[v] = -1;
  }
  for (int32_t u = 0; u < n; u++) {
    const IrValue *x = &g->values[u];
    bool elementwise = ir_op_flags(x->op) & IR_ELEMENTWISE;
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k];
      uses[o]++;
      if (reduces_trailing(g, x))
        reducer[o] = u;
      else if (!elementwise || !ir_shape_eq(&g->values[o].shape, &x->shape))
        ok[o] = false;
    }
  }
  for (int32_t i = 0; i < g->noutputs; i++) ok[g->outputs[i].value] = false;
  for (int32_t v = 0; v < n; v++)
    if (running_sum(&g->values[v])) ok[v] = false;
  for (int32_t v = 0; v < n; v++) { /* in index order: operands are decided first */
    const IrValue *x = &g->values[v];
    idx[v] = index_only(g, x, idx);
    if (reducer[v] >= 0) { /* read by a reduction: only it, and only if it can */
      mat[v] = !(ok[v] && uses[v] == 1 && reduction_takes(g, mat, reducer[v], v));
      continue;
    }
    bool any = cheap(x) || idx[v] || light(g, x, mat);
    mat[v] = !(ok[v] && uses[v] >= 1 && (uses[v] == 1 || any));
  }
  free(uses);
  free(reducer);
  free(ok);
  free(idx);
  return 0;
}
