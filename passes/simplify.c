/* simplify.c: constant folding, algebraic identities, transposes folded into the products that
 * read or make them, common subexpression elimination and dead code elimination.
 *
 * Rewrites either edit a value in place (folding turns it into a constant; reshape-of-reshape
 * points at the inner operand) or record a replacement repl[i] = j with j < i. graph_rebuild then
 * copies the surviving values into a fresh graph through ir_graph_add (so every rewrite is
 * re-checked by the shape rules), maps operands and outputs through repl, and swaps the fresh graph
 * into g; values keep their config path and remat tag. Parameters and inputs always survive: they
 * are the step's interface. CSE runs before remat, which duplicates values on purpose.
 * stop_gradient becomes its operand: the pass runs after autodiff, and no code generator sees it.
 */
#include "passes/passes.h"

#include <stdlib.h>
#include <string.h>

/* ---- rebuilding ---- */

static int32_t repl_find(const int32_t *repl, int32_t v) {
  while (repl[v] != v) v = repl[v];
  return v;
}

/* Keeps values with keep[i] (and repl[i] == i), maps everything through repl, swaps into g. */
static int graph_rebuild(IrGraph *g, const int32_t *repl, const bool *keep) {
  IrGraph *ng = ir_graph_new();
  int32_t *map = base_xmalloc((size_t)(g->nvalues + 1) * sizeof *map);
  ng->mesh = g->mesh;
  ng->matmul = g->matmul;
  ir_graph_reserve(ng, g->nvalues);
  int st = IR_OK;
  for (int32_t i = 0; i < g->nvalues && st == IR_OK; i++) {
    int32_t r = repl_find(repl, i);
    map[i] = r != i ? map[r] : !keep[i] ? IR_NONE : ir_graph_add_mapped(ng, g, i, map);
    if (r == i && keep[i] && map[i] == IR_NONE)
      st = ir_graph_fail(g, "simplify: rebuilding %%%d: %s", i,
                         ir_graph_error(ng) ? ir_graph_error(ng) : "?");
  }
  for (int32_t k = 0; k < g->noutputs && st == IR_OK; k++)
    st = ir_graph_add_output(ng, g->outputs[k].name, map[repl_find(repl, g->outputs[k].value)]);
  if (st == IR_OK) ir_graph_replace(g, ng);
  free(map);
  ir_graph_free(ng);
  return st;
}

typedef struct Work {
  int32_t *repl;
  bool *keep;
} Work;

static void work_init(const IrGraph *g, Work *w) {
  w->repl = base_xmalloc((size_t)(g->nvalues + 1) * sizeof *w->repl);
  w->keep = base_xmalloc((size_t)(g->nvalues + 1) * sizeof *w->keep);
  for (int32_t i = 0; i < g->nvalues; i++) {
    w->repl[i] = i;
    w->keep[i] = true;
  }
}

static int work_finish(IrGraph *g, Work *w, int changes) {
  int st = changes > 0 ? graph_rebuild(g, w->repl, w->keep) : IR_OK;
  free(w->repl);
  free(w->keep);
  return st ? IR_ERR : changes;
}

/* ---- dead code ---- */

static int dce_run(IrGraph *g) {
  Work w;
  work_init(g, &w);
  bool *live = w.keep;
  for (int32_t i = 0; i < g->nvalues; i++) {
    IrOp op = g->values[i].op;
    live[i] = op == IR_PARAMETER || op == IR_INPUT;
  }
  for (int32_t k = 0; k < g->noutputs; k++) live[g->outputs[k].value] = true;
  int changes = 0;
  for (int32_t i = g->nvalues - 1; i >= 0; i--) {
    for (int32_t k = 0; live[i] && k < g->values[i].nops; k++) live[g->values[i].ops[k]] = true;
    changes += !live[i];
  }
  return work_finish(g, &w, changes);
}

/* ---- common subexpressions ---- */

static bool dims_same(const IrDims *a, const IrDims *b) {
  return a->n == b->n && memcmp(a->v, b->v, (size_t)a->n * sizeof a->v[0]) == 0;
}

static bool attrs_same(const IrValue *x, const IrValue *y) {
  const IrAttrs *a = &x->attr, *b = &y->attr;
  if (!dims_same(&a->axes, &b->axes) || !dims_same(&a->lo, &b->lo) || !dims_same(&a->hi, &b->hi) ||
      !dims_same(&a->lb, &b->lb) || !dims_same(&a->rb, &b->rb) || !dims_same(&a->lc, &b->lc) ||
      !dims_same(&a->rc, &b->rc) || a->axis != b->axis || a->axis2 != b->axis2 || a->k != b->k ||
      memcmp(&a->value, &b->value, sizeof a->value) != 0 || a->nmesh != b->nmesh ||
      !a->data != !b->data)
    return false;
  for (int32_t i = 0; i < a->nmesh; i++)
    if (strcmp(a->mesh[i], b->mesh[i]) != 0) return false;
  return !a->data ||
         memcmp(a->data, b->data, (size_t)ir_shape_numel(&x->shape) * sizeof(double)) == 0;
}

static bool values_same(const IrGraph *g, int32_t i, int32_t j, const int32_t *repl) {
  const IrValue *a = &g->values[i], *b = &g->values[j];
  if (a->op != b->op || a->dtype != b->dtype || !ir_shape_eq(&a->shape, &b->shape) ||
      a->nops != b->nops)
    return false;
  for (int32_t k = 0; k < a->nops; k++)
    if (repl_find(repl, a->ops[k]) != repl_find(repl, b->ops[k])) return false;
  return attrs_same(a, b);
}

static uint64_t value_hash(const IrGraph *g, int32_t i, const int32_t *repl) {
  const IrValue *v = &g->values[i];
  uint64_t h = 1469598103934665603ull ^ (uint64_t)v->op * 31 ^ (uint64_t)v->dtype << 8;
  for (int32_t d = 0; d < v->shape.rank; d++)
    h = (h ^ (uint64_t)v->shape.dims[d]) * 1099511628211ull;
  for (int32_t k = 0; k < v->nops; k++)
    h = (h ^ (uint64_t)repl_find(repl, v->ops[k])) * 1099511628211ull;
  uint64_t bits;
  memcpy(&bits, &v->attr.value, sizeof bits);
  return (h ^ bits ^ (uint64_t)v->attr.axis) * 1099511628211ull;
}

static int cse_run(IrGraph *g) {
  Work w;
  work_init(g, &w);
  size_t cap = 64;
  while (cap < (size_t)g->nvalues * 2) cap *= 2;
  int32_t *table = base_xmalloc(cap * sizeof *table);
  memset(table, 0xff, cap * sizeof *table); /* IR_NONE */
  int changes = 0;
  for (int32_t i = 0; i < g->nvalues; i++) {
    IrOp op = g->values[i].op;
    if (op == IR_PARAMETER || op == IR_INPUT) continue;
    size_t h = value_hash(g, i, w.repl) & (cap - 1);
    for (; table[h] != IR_NONE && !values_same(g, table[h], i, w.repl); h = (h + 1) & (cap - 1)) {
    }
    if (table[h] == IR_NONE)
      table[h] = i;
    else
      w.repl[i] = table[h], changes++;
  }
  free(table);
  return work_finish(g, &w, changes);
}

/* ---- constant folding ---- */

static bool is_const(const IrGraph *g, int32_t v) {
  return g->values[v].op == IR_CONSTANT || g->values[v].op == IR_IOTA;
}

/* Turns value i into a constant holding out (a splat when all elements are equal). */
static void make_constant(IrGraph *g, int32_t i, const double *out, int64_t n) {
  IrValue *v = &g->values[i];
  bool splat = true;
  for (int64_t k = 1; k < n; k++) splat &= memcmp(&out[k], &out[0], sizeof out[0]) == 0;
  IrAttrs a;
  memset(&a, 0, sizeof a);
  a.value = n ? out[0] : 0;
  if (!splat) {
    double *d = ir_graph_alloc(g, (size_t)n * sizeof *d);
    memcpy(d, out, (size_t)n * sizeof *d);
    a.data = d;
  }
  v = &g->values[i];
  v->op = IR_CONSTANT;
  v->nops = 0;
  v->attr = a;
}

static int fold_value(IrGraph *g, int32_t i, int64_t limit) {
  const IrValue *v = &g->values[i];
  uint32_t fl = ir_op_flags(v->op);
  if ((fl & (IR_LEAF | IR_COLLECTIVE)) || ir_shape_numel(&v->shape) > limit) return 0;
  for (int32_t k = 0; k < v->nops; k++)
    if (!is_const(g, v->ops[k]) || ir_shape_numel(&g->values[v->ops[k]].shape) > limit) return 0;
  double *args[64] = {0},
         *out = base_xmalloc((size_t)(ir_shape_numel(&v->shape) + 1) * sizeof *out);
  int st = v->nops <= 64 ? IR_OK : IR_ERR;
  char msg[IR_ERR_LEN];
  for (int32_t k = 0; k < v->nops && st == IR_OK; k++) {
    int32_t x = v->ops[k];
    args[k] = base_xmalloc((size_t)(ir_shape_numel(&g->values[x].shape) + 1) * sizeof *args[k]);
    st = ir_eval_value(g, x, NULL, args[k], true, msg, sizeof msg);
  }
  if (st == IR_OK)
    st = ir_eval_value(g, i, (const double *const *)args, out, true, msg, sizeof msg);
  if (st == IR_OK) make_constant(g, i, out, ir_shape_numel(&g->values[i].shape));
  for (int32_t k = 0; k < 64; k++) free(args[k]);
  free(out);
  return st == IR_OK ? 1 : 0; /* a value that cannot be evaluated (bad index) is left alone */
}

static int fold_run(IrGraph *g, int64_t limit) {
  int changes = 0;
  for (int32_t i = 0; i < g->nvalues; i++) changes += fold_value(g, i, limit);
  if (ir_graph_error(g)) return IR_ERR;
  return changes ? dce_run(g) < 0 ? IR_ERR : changes : 0;
}

/* ---- algebraic identities ---- */

static bool is_splat_of(const IrGraph *g, int32_t v, double x) {
  const IrValue *c = &g->values[v];
  if (c->op != IR_CONSTANT) return false;
  if (!c->attr.data) return c->attr.value == x;
  for (int64_t i = 0, n = ir_shape_numel(&c->shape); i < n; i++)
    if (c->attr.data[i] != x) return false;
  return true;
}

/* Sets value i's single operand (in arena memory: operand lists are shared read-only). */
static void set_operand(IrGraph *g, int32_t i, int32_t x) {
  int32_t *ops = ir_graph_alloc(g, sizeof *ops);
  ops[0] = x;
  g->values[i].ops = ops;
}

/* Returns the value that replaces i, or i. */
static int32_t algebra_binary(const IrGraph *g, int32_t i) {
  const IrValue *v = &g->values[i];
  int32_t a = v->ops[0], b = v->ops[1];
  switch (v->op) {
  case IR_ADD: return is_splat_of(g, b, 0) ? a : is_splat_of(g, a, 0) ? b : i;
  case IR_SUB: return is_splat_of(g, b, 0) ? a : i;
  case IR_MUL: return is_splat_of(g, b, 1) ? a : is_splat_of(g, a, 1) ? b : i;
  case IR_DIV: return is_splat_of(g, b, 1) ? a : i;
  default: return i;
  }
}

static bool perm_is_identity(const IrDims *p) {
  for (int32_t d = 0; d < p->n; d++)
    if (p->v[d] != d) return false;
  return true;
}

/* transpose(transpose(x, p1), p2) = transpose(x, q) with q[j] = p1[p2[j]]. */
static int32_t algebra_transpose(IrGraph *g, int32_t i) {
  IrValue *v = &g->values[i];
  const IrValue *in = &g->values[v->ops[0]];
  if (in->op == IR_TRANSPOSE) {
    IrDims q = v->attr.axes;
    for (int32_t j = 0; j < q.n; j++) q.v[j] = in->attr.axes.v[v->attr.axes.v[j]];
    set_operand(g, i, in->ops[0]);
    g->values[i].attr.axes = q;
  }
  v = &g->values[i];
  return perm_is_identity(&v->attr.axes) ? v->ops[0] : i;
}

static int32_t algebra_unary(IrGraph *g, int32_t i) {
  const IrValue *v = &g->values[i];
  const IrValue *in = &g->values[v->ops[0]];
  switch (v->op) {
  case IR_NEG: return in->op == IR_NEG ? in->ops[0] : i;
  case IR_STOP_GRADIENT: return v->ops[0]; /* autodiff has run: the identity it is */
  case IR_CAST: return in->dtype == v->dtype ? v->ops[0] : i;
  case IR_BROADCAST: return ir_shape_eq(&in->shape, &v->shape) ? v->ops[0] : i;
  case IR_RESHAPE:
    if (in->op == IR_RESHAPE) set_operand(g, i, in->ops[0]);
    v = &g->values[i];
    return ir_shape_eq(&g->values[v->ops[0]].shape, &v->shape) ? v->ops[0] : i;
  case IR_TRANSPOSE: return algebra_transpose(g, i);
  default: return i;
  }
}

/* Points operands of i at their replacements (a fresh list if any changed). */
static void remap_operands(IrGraph *g, int32_t i, const int32_t *repl) {
  IrValue *v = &g->values[i];
  bool changed = false;
  for (int32_t k = 0; k < v->nops; k++) changed |= repl_find(repl, v->ops[k]) != v->ops[k];
  if (!changed) return;
  int32_t *ops = ir_graph_alloc(g, (size_t)v->nops * sizeof *ops);
  for (int32_t k = 0; k < v->nops; k++) ops[k] = repl_find(repl, g->values[i].ops[k]);
  g->values[i].ops = ops;
}

static int algebra_run(IrGraph *g) {
  Work w;
  work_init(g, &w);
  int changes = 0;
  for (int32_t i = 0; i < g->nvalues; i++) {
    remap_operands(g, i, w.repl);
    const IrValue *v = &g->values[i];
    int32_t before = v->nops ? v->ops[0] : IR_NONE;
    int32_t r = v->nops == 2 ? algebra_binary(g, i) : v->nops == 1 ? algebra_unary(g, i) : i;
    if (r != i) w.repl[i] = r;
    changes += r != i || (g->values[i].nops && g->values[i].ops[0] != before);
  }
  if (ir_graph_error(g)) return work_finish(g, &w, 0), IR_ERR;
  if (work_finish(g, &w, changes) < 0) return IR_ERR;
  return changes && dce_run(g) < 0 ? IR_ERR : changes;
}

/* ---- transposes into products ----
 *
 * A transpose read only by a dot_general is folded into the dot's dimension numbers (the dot reads
 * the transpose's operand directly), and a dot read only by a transpose that swaps its lhs-free and
 * rhs-free dims becomes the dot of the swapped operands. Either happens only when the new dot has
 * the layout of one sgemm per batch element (ir_dot_sgemm): the transpose copy then goes, and the
 * GEMM's transpose flags do its work. The dot's result keeps its shape and element order, so its
 * readers are unchanged. uses[] counts readers (outputs included) and is kept up to date as values
 * are rewritten in place; the dead values are left to dce.
 */

static const IrShape *shape_of(const IrGraph *g, int32_t v) { return &g->values[v].shape; }

/* Maps one side's batch dims b and contracting dims c through transpose perm p, so they index
 * the transpose's operand. False when the side's free dims would come out in another order (the
 * dot's result would be permuted). */
static bool permute_side(const IrDims *p, IrDims *b, IrDims *c) {
  int64_t last = -1;
  for (int32_t d = 0; d < p->n; d++) {
    bool bound = false;
    for (int32_t k = 0; k < b->n; k++) bound |= b->v[k] == d;
    for (int32_t k = 0; k < c->n; k++) bound |= c->v[k] == d;
    if (bound) continue;
    if (p->v[d] < last) return false;
    last = p->v[d];
  }
  for (int32_t k = 0; k < b->n; k++) b->v[k] = p->v[b->v[k]];
  for (int32_t k = 0; k < c->n; k++) c->v[k] = p->v[c->v[k]];
  return true;
}

static void set_operands2(IrGraph *g, int32_t i, int32_t a, int32_t b) {
  int32_t *ops = ir_graph_alloc(g, 2 * sizeof *ops);
  ops[0] = a;
  ops[1] = b;
  g->values[i].ops = ops;
  g->values[i].nops = 2;
}

/* Dot i reading the transposes of the sides in mask (bit 0 lhs, bit 1 rhs) through them: true
 * when each is a transpose read only here and the new dot is one sgemm; fills ops and a. */
static bool fold_sides(const IrGraph *g, int32_t i, unsigned mask, const int32_t *uses,
                       int32_t *ops, IrAttrs *a) {
  const IrValue *v = &g->values[i];
  *a = v->attr;
  for (int s = 0; s < 2; s++) {
    const IrValue *t = &g->values[v->ops[s]];
    ops[s] = v->ops[s];
    if (!(mask >> s & 1)) continue;
    if (t->op != IR_TRANSPOSE || uses[v->ops[s]] != 1 ||
        !permute_side(&t->attr.axes, s ? &a->rb : &a->lb, s ? &a->rc : &a->lc))
      return false;
    ops[s] = t->ops[0];
  }
  return ir_dot_sgemm(v->dtype, shape_of(g, ops[0]), shape_of(g, ops[1]), a, NULL);
}

/* Folds transposed operands into dot i; returns 1 if it did. */
static int dot_fold_operands(IrGraph *g, int32_t i, int32_t *uses) {
  static const unsigned masks[] = {3, 1, 2}; /* both sides, else either one */
  int32_t ops[2];
  IrAttrs a;
  for (int m = 0; m < 3; m++) {
    if (!fold_sides(g, i, masks[m], uses, ops, &a)) continue;
    const int32_t *old = g->values[i].ops;
    for (int s = 0; s < 2; s++)
      if (ops[s] != old[s]) uses[old[s]]--, uses[ops[s]]++;
    set_operands2(g, i, ops[0], ops[1]);
    g->values[i].attr = a;
    return 1;
  }
  return 0;
}

/* perm == [batch dims, rhs free dims, lhs free dims] of a dot's (batch, lhs free, rhs free). */
static bool perm_swaps_free(const IrDims *p, int32_t nb, int32_t fa, int32_t fb) {
  for (int32_t d = 0; d < p->n; d++) {
    int32_t want = d < nb ? d : d < nb + fb ? d + fa : d - fb;
    if (p->v[d] != want) return false;
  }
  return fa > 0 && fb > 0;
}

/* Transpose i of a dot read only by it becomes the dot of the swapped operands; returns 1 if it
 * did. The new dot keeps the old one's config path and remat tag. */
static int dot_fold_result(IrGraph *g, int32_t i, int32_t *uses) {
  int32_t d = g->values[i].ops[0];
  const IrValue *x = &g->values[d];
  if (x->op != IR_DOT || uses[d] != 1) return 0;
  int32_t a = x->ops[0], b = x->ops[1], nb = x->attr.lb.n;
  int32_t fa = shape_of(g, a)->rank - nb - x->attr.lc.n;
  int32_t fb = shape_of(g, b)->rank - nb - x->attr.rc.n;
  if (!perm_swaps_free(&g->values[i].attr.axes, nb, fa, fb)) return 0;
  IrAttrs s = x->attr;
  s.lb = x->attr.rb, s.rb = x->attr.lb, s.lc = x->attr.rc, s.rc = x->attr.lc;
  if (!ir_dot_sgemm(x->dtype, shape_of(g, b), shape_of(g, a), &s, NULL)) return 0;
  set_operands2(g, i, b, a);
  IrValue *v = &g->values[i];
  v->op = IR_DOT;
  v->attr = s;
  v->origin = x->origin;
  v->tag = x->tag;
  uses[d]--; /* now dead: a and b trade its reads for this value's */
  return 1;
}

static int transpose_dot_run(IrGraph *g) {
  int32_t *uses = base_xcalloc((size_t)g->nvalues + 1, sizeof *uses);
  for (int32_t i = 0; i < g->nvalues; i++)
    for (int32_t k = 0; k < g->values[i].nops; k++) uses[g->values[i].ops[k]]++;
  for (int32_t k = 0; k < g->noutputs; k++) uses[g->outputs[k].value]++;
  int changes = 0;
  for (int32_t i = 0; i < g->nvalues && changes >= 0; i++) {
    IrOp op = g->values[i].op;
    int r = op == IR_DOT         ? dot_fold_operands(g, i, uses)
            : op == IR_TRANSPOSE ? dot_fold_result(g, i, uses)
                                 : 0;
    changes = r < 0 ? IR_ERR : changes + r;
  }
  free(uses);
  if (changes < 0) return IR_ERR;
  return changes && dce_run(g) < 0 ? IR_ERR : changes;
}

/* ---- public passes ---- */

static int64_t fold_limit(const PassOptions *opt) {
  return opt && opt->fold_limit > 0 ? opt->fold_limit : 4096;
}

int pass_dce(IrGraph *g, const PassOptions *opt) {
  (void)opt;
  return dce_run(g) < 0 ? IR_ERR : IR_OK;
}

int pass_cse(IrGraph *g, const PassOptions *opt) {
  (void)opt;
  return cse_run(g) < 0 ? IR_ERR : IR_OK;
}

int pass_fold(IrGraph *g, const PassOptions *opt) {
  return fold_run(g, fold_limit(opt)) < 0 ? IR_ERR : IR_OK;
}

int pass_algebra(IrGraph *g, const PassOptions *opt) {
  (void)opt;
  return algebra_run(g) < 0 ? IR_ERR : IR_OK;
}

int pass_transpose_dot(IrGraph *g, const PassOptions *opt) {
  (void)opt;
  return transpose_dot_run(g) < 0 ? IR_ERR : IR_OK;
}

/* Under a mesh the fold waits for pass_shard, which runs it on the per-device program: pass_shard's
 * dot rule favors the lhs's splits, so swapping a dot's operands here would change the collectives
 * it picks (for llama2-7b on gpu-h100-256, 19% more bytes sent). */
static bool sharded_later(const PassOptions *opt) {
  return opt && opt->shard && ir_mesh_devices(&opt->shard->mesh) > 1;
}

int pass_simplify(IrGraph *g, const PassOptions *opt) {
  if (ir_graph_error(g)) return IR_ERR;
  for (int round = 0; round < 32; round++) {
    int f = fold_run(g, fold_limit(opt)), a = f < 0 ? -1 : algebra_run(g);
    int t = a < 0 ? -1 : sharded_later(opt) ? 0 : transpose_dot_run(g);
    int c = t < 0 ? -1 : cse_run(g), d = c < 0 ? -1 : dce_run(g);
    if (f < 0 || a < 0 || t < 0 || c < 0 || d < 0) return IR_ERR;
    if (f + a + t + c + d == 0) return IR_OK;
  }
  return IR_OK;
}
