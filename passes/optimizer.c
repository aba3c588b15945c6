/* optimizer.c: the optimizer in the graph.
 *
 * Runs after autodiff, on a graph with the output "loss" and one "grad:P" output per trainable
 * parameter P. It appends the rest of a training step, so that one graph maps (parameters,
 * optimizer state, step, batch) to (new parameters, new state, loss):
 *
 *   inputs      "step" ()                 the 1-based step number t, as f32
 *   parameters  "opt/m/P", "opt/v/P"      AdamW moments, shaped like P
 *   outputs     "new:P", "new:opt/m/P", "new:opt/v/P", "grad_norm", "lr"
 *
 * Clipping by global norm: g *= c / max(|g|, c). Learning rate: peak * schedule(t), with linear
 * warmup then cosine decay to min_ratio (or constant). AdamW with decoupled weight decay, as in
 * PyTorch's torch.optim.AdamW:
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   P = P - lr (wd * wd_scale(P) * P + (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps))
 * computed as PyTorch arranges it, with the bias corrections as two scalars per step:
 *   P = P - lr (wd * wd_scale(P) * P + m c1 / (sqrt(v) c2 + eps)),  c1 = 1 / (1 - b1^t),
 *   c2 = 1 / sqrt(1 - b2^t)
 * so that an element costs one division and one square root: AdamW's pass over every
 * parameter was bound by its three divisions as much as by memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

static int32_t scalar(IrGraph *g, double v) { return ir_const_scalar(g, DT_F32, v, 0, NULL); }

static int32_t like(IrGraph *g, int32_t x, double v) {
  IrValue xv = g->values[x]; /* a copy: adding a value may move the array */
  return ir_const_scalar(g, xv.dtype, v, xv.shape.rank, xv.shape.dims);
}

static int32_t splat(IrGraph *g, int32_t s, int32_t x) { /* scalar s to x's shape */
  IrShape sh = g->values[x].shape;
  return ir_broadcast(g, s, sh.rank, sh.dims, NULL);
}

static int32_t sum_all(IrGraph *g, int32_t x) {
  int32_t rank = g->values[x].shape.rank, axes[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) axes[i] = i;
  return rank ? ir_reduce_sum(g, x, rank, axes) : x;
}

/* Learning-rate multiplier at step t (a scalar value). */
static int32_t schedule(IrGraph *g, const PassLearner *l, int32_t t) {
  int32_t mult = scalar(g, 1.0);
  if (l->decay_steps > l->warmup_steps && l->cosine) {
    double span = (double)(l->decay_steps - l->warmup_steps);
    int32_t prog = ir_div(g, ir_sub(g, t, scalar(g, (double)l->warmup_steps)), scalar(g, span));
    prog = ir_min(g, ir_max(g, prog, scalar(g, 0.0)), scalar(g, 1.0));
    int32_t c = ir_add(g, scalar(g, 1.0), ir_cos(g, ir_mul(g, prog, scalar(g, M_PI))));
    mult = ir_add(g, scalar(g, l->min_ratio), ir_mul(g, scalar(g, 0.5 * (1.0 - l->min_ratio)), c));
  }
  if (l->warmup_steps > 0) {
    int32_t warm = ir_div(g, t, scalar(g, (double)l->warmup_steps));
    int32_t in_warmup = ir_le(g, t, scalar(g, (double)l->warmup_steps));
    mult = ir_select(g, in_warmup, warm, mult);
  }
  return ir_mul(g, mult, scalar(g, l->learning_rate));
}

/* The clip factor c / max(|g|, c), or 1 when clipping is off; *norm gets |g|. */
static int32_t clip_factor(IrGraph *g, const PassLearner *l, int32_t n, const int32_t *grads,
                           int32_t *norm) {
  int32_t sq = scalar(g, 0.0);
  for (int32_t i = 0; i < n; i++) sq = ir_add(g, sq, sum_all(g, ir_mul(g, grads[i], grads[i])));
  *norm = ir_sqrt(g, sq);
  if (l->max_grad_norm <= 0) return scalar(g, 1.0);
  int32_t c = scalar(g, l->max_grad_norm);
  return ir_div(g, c, ir_max(g, *norm, c));
}

/* AdamW update of parameter p with gradient gr and weight decay wd; appends the three "new:"
 * outputs. */
static int adamw(IrGraph *g, const PassLearner *l, int32_t p, int32_t gr, double wd, int32_t lr,
                 int32_t bc1, int32_t bc2) {
  IrValue pv = g->values[p]; /* a copy: adding values moves the array */
  const char *name = pv.name;
  char buf[1024];
  snprintf(buf, sizeof buf, "opt/m/%s", name);
  int32_t m = ir_param(g, buf, pv.dtype, pv.shape.rank, pv.shape.dims);
  snprintf(buf, sizeof buf, "opt/v/%s", name);
  int32_t v = ir_param(g, buf, pv.dtype, pv.shape.rank, pv.shape.dims);
  if (m == IR_NONE || v == IR_NONE) return IR_ERR;
  int32_t m2 = ir_add(g, ir_mul(g, like(g, m, l->b1), m), ir_mul(g, like(g, gr, 1 - l->b1), gr));
  int32_t v2 = ir_add(g, ir_mul(g, like(g, v, l->b2), v),
                      ir_mul(g, like(g, gr, 1 - l->b2), ir_mul(g, gr, gr)));
  /* bc1 and bc2 are 1 / (1 - b1^t) and 1 / sqrt(1 - b2^t): one division per element */
  int32_t mhat = ir_mul(g, m2, splat(g, bc1, m2));
  int32_t denom = ir_add(g, ir_mul(g, ir_sqrt(g, v2), splat(g, bc2, v2)), like(g, v2, l->eps));
  int32_t upd = ir_div(g, mhat, denom);
  if (wd != 0) upd = ir_add(g, upd, ir_mul(g, like(g, p, wd), p));
  int32_t p2 = ir_sub(g, p, ir_mul(g, splat(g, lr, upd), upd));
  snprintf(buf, sizeof buf, "new:%s", name);
  if (ir_graph_add_output(g, buf, p2) != IR_OK) return IR_ERR;
  snprintf(buf, sizeof buf, "new:opt/m/%s", name);
  if (ir_graph_add_output(g, buf, m2) != IR_OK) return IR_ERR;
  snprintf(buf, sizeof buf, "new:opt/v/%s", name);
  return ir_graph_add_output(g, buf, v2);
}

typedef struct {
  const char *name;
  int32_t value;
} Named;

static int by_name(const void *a, const void *b) {
  return strcmp(((const Named *)a)->name, ((const Named *)b)->name);
}

/* The trainable parameters, the ones autodiff produced a gradient for: params[i] and grads[i]
 * (each with room for g->noutputs). Returns their number, or -1 after recording an error. There
 * are as many as the model's layers call for (no fixed limit), so they are looked up by name in
 * a sorted index: a search of the graph per gradient would be quadratic. */
static int32_t trainable(IrGraph *g, int32_t *params, int32_t *grads) {
  Named *index = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *index);
  size_t nindex = 0;
  for (int32_t v = 0; v < g->nvalues; v++)
    if (g->values[v].op == IR_PARAMETER) index[nindex++] = (Named){g->values[v].name, v};
  qsort(index, nindex, sizeof *index, by_name);
  int32_t n = 0;
  for (int32_t i = 0; i < g->noutputs && n >= 0; i++) {
    const char *name = g->outputs[i].name;
    if (strncmp(name, "grad:", 5) != 0) continue;
    Named key = {name + 5, IR_NONE}, *p = bsearch(&key, index, nindex, sizeof *index, by_name);
    if (!p)
      n = ir_graph_fail(g, "optimizer: no parameter %s", name + 5);
    else
      params[n] = p->value, grads[n++] = g->outputs[i].value;
  }
  free(index);
  return n;
}

/* Each trainable parameter's weight decay: the learner's times the parameter's scale (1 unless
 * given), found through a sorted index of the scales' names, as for the parameters. */
static double *weight_decays(const IrGraph *g, const PassLearner *l, int32_t n,
                             const int32_t *params) {
  Named *index = base_xmalloc(((size_t)l->nscales + 1) * sizeof *index);
  double *wd = base_xmalloc(((size_t)n + 1) * sizeof *wd);
  for (int32_t i = 0; i < l->nscales; i++) index[i] = (Named){l->scale_names[i], i};
  qsort(index, (size_t)l->nscales, sizeof *index, by_name);
  for (int32_t k = 0; k < n; k++) {
    Named key = {g->values[params[k]].name, IR_NONE};
    Named *s = bsearch(&key, index, (size_t)l->nscales, sizeof *index, by_name);
    wd[k] = l->weight_decay * (s ? l->scales[s->value] : 1.0);
  }
  free(index);
  return wd;
}

/* Clipping, the schedule and one AdamW update per trainable parameter. */
static int update(IrGraph *g, const PassLearner *l, int32_t n, const int32_t *params,
                  const int32_t *grads) {
  double *wd = weight_decays(g, l, n, params);
  ir_graph_set_origin(g, "/learner");
  int32_t t = ir_input(g, "step", DT_F32, 0, NULL);
  int32_t lr = schedule(g, l, t), norm;
  int32_t clip = clip_factor(g, l, n, grads, &norm);
  int32_t bc1 =
      ir_div(g, scalar(g, 1.0), ir_sub(g, scalar(g, 1.0), ir_pow(g, scalar(g, l->b1), t)));
  int32_t bc2 = ir_rsqrt(g, ir_sub(g, scalar(g, 1.0), ir_pow(g, scalar(g, l->b2), t)));
  int rc = IR_OK;
  for (int32_t i = 0; i < n && rc == IR_OK; i++) {
    int32_t gr = ir_mul(g, grads[i], splat(g, clip, grads[i]));
    rc = adamw(g, l, params[i], gr, wd[i], lr, bc1, bc2);
  }
  free(wd);
  if (rc != IR_OK || ir_graph_add_output(g, "grad_norm", norm) != IR_OK ||
      ir_graph_add_output(g, "lr", lr) != IR_OK)
    return IR_ERR;
  return ir_graph_error(g) ? IR_ERR : IR_OK;
}

int pass_optimizer(IrGraph *g, const PassOptions *opt) {
  if (!opt || !opt->learner) return ir_graph_fail(g, "optimizer: no learner configuration");
  int32_t *params = base_xmalloc(((size_t)g->noutputs + 1) * sizeof *params);
  int32_t *grads = base_xmalloc(((size_t)g->noutputs + 1) * sizeof *grads);
  int32_t n = trainable(g, params, grads);
  int rc = n < 0    ? IR_ERR
           : n == 0 ? ir_graph_fail(g, "optimizer: no gradients (run autodiff first)")
                    : update(g, opt->learner, n, params, grads);
  free(params);
  free(grads);
  return rc;
}
