/* remat.c: rematerialization. Forward values the backward reads, and that a remat policy does
 * not save, are computed again in the backward instead of being kept alive across it.
 *
 * Scopes. opt->remat lists the modules that carry a remat policy (a decoder, or a layer), by
 * config path. A value is in a scope when its origin is that path or below it; the longest path
 * wins. A policy is a list of tag regexes (each must match the whole tag): a value in scope
 * whose tag matches is saved, every other value in scope is recomputed. Presets are rows of
 * one table (presets[] below). "transformer_layer.input" is saved under every policy: it is a
 * scope's boundary, as jax.checkpoint around a layer keeps the layer's arguments, and without it
 * a value deep in the stack would recompute every layer under it. Values out of every scope,
 * parameters, inputs, constants and iota are never recomputed.
 *
 * Forward and backward. pass_autodiff appends the backward after the forward, and the passes
 * after it (optimizer, simplify, shard) keep that order, but the loss value's index is no
 * boundary: under a mesh, pass_shard reduces the per-device losses with an all_reduce that it
 * emits at the very end. So the forward is defined by dependence, not position: the values the
 * "loss" output depends on. Every other value (the backward, the optimizer, that final
 * all_reduce) is a backward user; since autodiff appends, all of them come after the forward.
 *
 * Rewrite. The graph is rebuilt in order through ir_graph_add (shapes and IrSplit re-checked).
 * Forward values are copied as they are. Before each backward value, every recomputed operand
 * is cloned, with the part of its forward computation that is recomputed too (from saved values,
 * parameters, inputs and out-of-scope values, collectives included: gathering an FSDP weight
 * again is what FSDP does), unless an earlier backward value already cloned it. The originals
 * then have forward users only and die at the end of the forward. Clones keep the original's
 * op, attributes, origin and tag. Simplify's CSE runs before this pass; nothing after it (the
 * backends' fusion plan and memplan) merges values or changes their order.
 */
#include "passes/passes.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

#define LAYER_INPUT "transformer_layer\\.input"

/* The presets, AXLearn style. Coupled with frontend/schema.c's remat_presets[] (the names). */
static const struct {
  const char *name;
  bool offload;        /* refused: offloading to host memory is not supported yet */
  const char *save[8]; /* tag regexes, NULL-terminated */
} presets[] = {
    {"none", false, {".*"}},        /* save everything: no remat */
    {"full", false, {LAYER_INPUT}}, /* recompute the whole layer from its input */
    {"save_dots",
     false, /* keep the tagged matmul outputs */
     {LAYER_INPUT, "attention\\.(q|k|v|o)_proj", "attention\\.context", "feed_forward\\.linear.*",
      "moe\\.(router|expert_inputs)"}},
    {"save_qkvo", false, {LAYER_INPUT, "attention\\.(q|k|v|o)_proj"}},
    {"offload_dots", true, {LAYER_INPUT}},
};

typedef struct Scope {
  const char *path;
  size_t len;
  int32_t npat;
  regex_t *pat; /* (npat) */
} Scope;

typedef struct Remat {
  const IrGraph *g; /* the graph before */
  IrGraph *ng;      /* the graph being built */
  int32_t nscopes;
  Scope *scopes;         /* (nscopes) */
  bool *recompute;       /* (g->nvalues) a forward value that backward users clone */
  int32_t *map;          /* (g->nvalues) old value -> its copy in ng */
  int32_t *clone;        /* (g->nvalues) old value -> its clone in ng, or IR_NONE */
  int32_t *stack, *list; /* (g->nvalues) work lists of clone_tree */
  int64_t nclones;
} Remat;

/* ---- policies ---- */

static int scope_add_pattern(Remat *R, Scope *s, const char *pat) {
  size_t n = strlen(pat) + 5;
  char *anchored = base_xmalloc(n);
  snprintf(anchored, n, "^(%s)$", pat);
  int rc = regcomp(&s->pat[s->npat], anchored, REG_EXTENDED | REG_NOSUB);
  free(anchored);
  if (rc != 0)
    return ir_graph_fail(R->ng, "remat policy at %s: \"%s\" is not a valid extended regex", s->path,
                         pat);
  s->npat++;
  return IR_OK;
}

/* Compiles one scope's patterns: a preset's row, or the custom list (plus the layer input). */
static int scope_init(Remat *R, Scope *s, const PassRematScope *in) {
  s->path = in->path;
  s->len = strlen(in->path);
  if (in->noffload > 0)
    return ir_graph_fail(R->ng,
                         "remat policy at %s: offloading (\"offload\": [...]) is not "
                         "supported yet; use \"save\" patterns",
                         in->path);
  int32_t cap = in->preset ? 8 : in->nsave + 1;
  s->pat = base_xcalloc((size_t)cap, sizeof *s->pat);
  if (!in->preset) {
    for (int32_t i = 0; i < in->nsave; i++)
      if (scope_add_pattern(R, s, in->save[i])) return IR_ERR;
    return scope_add_pattern(R, s, LAYER_INPUT);
  }
  for (size_t p = 0; p < sizeof presets / sizeof *presets; p++) {
    if (strcmp(presets[p].name, in->preset) != 0) continue;
    if (presets[p].offload)
      return ir_graph_fail(R->ng,
                           "remat policy \"%s\" at %s: offloading is not supported yet "
                           "(expected none, full, save_dots or save_qkvo)",
                           in->preset, in->path);
    for (int i = 0; presets[p].save[i]; i++)
      if (scope_add_pattern(R, s, presets[p].save[i])) return IR_ERR;
    return IR_OK;
  }
  return ir_graph_fail(R->ng,
                       "remat policy at %s: unknown preset \"%s\" (expected none, full, "
                       "save_dots, save_qkvo or offload_dots)",
                       in->path, in->preset);
}

/* The innermost scope whose path is origin or a prefix of it at a '/', or NULL. */
static const Scope *scope_of(const Remat *R, const char *origin) {
  const Scope *best = NULL;
  for (int32_t i = 0; i < R->nscopes; i++) {
    const Scope *s = &R->scopes[i];
    if (strncmp(origin, s->path, s->len) != 0 || (origin[s->len] && origin[s->len] != '/'))
      continue;
    if (!best || s->len > best->len) best = s;
  }
  return best;
}

static bool saved(const Scope *s, const char *tag) {
  for (int32_t i = 0; i < s->npat; i++)
    if (regexec(&s->pat[i], tag, 0, NULL, 0) == 0) return true;
  return false;
}

/* ---- which values ---- */

/* forward[v]: the loss depends on v. IR_ERR when there is no loss. */
static int mark_forward(const IrGraph *g, bool *forward) {
  int32_t loss = ir_graph_output(g, "loss");
  if (loss == IR_NONE) return IR_ERR;
  forward[loss] = true;
  for (int32_t v = loss; v >= 0; v--)
    for (int32_t k = 0; forward[v] && k < g->values[v].nops; k++)
      forward[g->values[v].ops[k]] = true;
  return IR_OK;
}

static void mark_recompute(Remat *R, const bool *forward) {
  for (int32_t v = 0; v < R->g->nvalues; v++) {
    const IrValue *x = &R->g->values[v];
    const Scope *s = forward[v] && !(ir_op_flags(x->op) & IR_LEAF) ? scope_of(R, x->origin) : NULL;
    R->recompute[v] = s && !saved(s, x->tag);
  }
}

/* ---- the rewrite ---- */

/* Adds old value v to ng with operands mapped: clones for recomputed operands when use_clones. */
static int32_t add_mapped(Remat *R, int32_t v, bool use_clones) {
  IrValue x = R->g->values[v];
  int32_t small[64], *o = small, *big = NULL;
  if (x.nops > 64) o = big = base_xmalloc((size_t)x.nops * sizeof *big);
  for (int32_t k = 0; k < x.nops; k++) {
    int32_t u = x.ops[k];
    o[k] = use_clones && R->recompute[u] ? R->clone[u] : R->map[u];
  }
  x.ops = o;
  int32_t r = ir_graph_add(R->ng, &x);
  free(big);
  return r;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Clones root and the recomputed values it needs that have no clone yet: collects them (marked
 * CLONING), then adds them in index order, which is topological. */
#define CLONING (-2)
static int clone_tree(Remat *R, int32_t root) {
  int32_t n = 0, top = 0;
  R->clone[root] = CLONING;
  R->stack[top++] = root;
  R->list[n++] = root;
  while (top > 0) {
    const IrValue *x = &R->g->values[R->stack[--top]];
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t u = x->ops[k];
      if (!R->recompute[u] || R->clone[u] != IR_NONE) continue;
      R->clone[u] = CLONING;
      R->stack[top++] = u;
      R->list[n++] = u;
    }
  }
  qsort(R->list, (size_t)n, sizeof *R->list, cmp_i32);
  for (int32_t i = 0; i < n; i++) {
    int32_t c = add_mapped(R, R->list[i], true);
    if ((R->clone[R->list[i]] = c) == IR_NONE) return IR_ERR;
    if (R->ng->values[c].phase == IR_PHASE_FORWARD) /* a pipeline stage runs it in its backward */
      R->ng->values[c].phase = IR_PHASE_BACKWARD;
    R->nclones++;
  }
  return IR_OK;
}

static int rebuild(Remat *R, const bool *forward) {
  const IrGraph *g = R->g;
  for (int32_t v = 0; v < g->nvalues; v++) {
    bool backward = !forward[v];
    const IrValue *x = &g->values[v];
    for (int32_t k = 0; backward && k < x->nops; k++) {
      int32_t u = x->ops[k];
      if (R->recompute[u] && R->clone[u] == IR_NONE && clone_tree(R, u)) return IR_ERR;
    }
    if ((R->map[v] = add_mapped(R, v, backward)) == IR_NONE) return IR_ERR;
  }
  for (int32_t k = 0; k < g->noutputs; k++)
    if (ir_graph_add_output(R->ng, g->outputs[k].name, R->map[g->outputs[k].value])) return IR_ERR;
  return IR_OK;
}

static void remat_free(Remat *R) {
  for (int32_t i = 0; i < R->nscopes; i++) {
    for (int32_t k = 0; k < R->scopes[i].npat; k++) regfree(&R->scopes[i].pat[k]);
    free(R->scopes[i].pat);
  }
  free(R->scopes);
  free(R->recompute);
  free(R->map);
  free(R->clone);
  free(R->stack);
  free(R->list);
  ir_graph_free(R->ng);
}

static int remat_run(Remat *R, const PassRemat *in) {
  int32_t n = R->g->nvalues;
  R->scopes = base_xcalloc((size_t)in->nscopes + 1, sizeof *R->scopes);
  R->recompute = base_xcalloc((size_t)n + 1, sizeof *R->recompute);
  bool *forward = base_xcalloc((size_t)n + 1, sizeof *forward);
  R->map = base_xmalloc(((size_t)n + 1) * sizeof *R->map);
  R->clone = base_xmalloc(((size_t)n + 1) * sizeof *R->clone);
  R->stack = base_xmalloc(((size_t)n + 1) * sizeof *R->stack);
  R->list = base_xmalloc(((size_t)n + 1) * sizeof *R->list);
  int st = IR_OK;
  for (int32_t i = 0; i < in->nscopes && st == IR_OK; i++) {
    if (in->scopes[i].preset && !strcmp(in->scopes[i].preset, "none")) continue;
    st = scope_init(R, &R->scopes[R->nscopes], &in->scopes[i]);
    R->nscopes++;
  }
  if (st == IR_OK && mark_forward(R->g, forward))
    st = ir_graph_fail(R->ng,
                       "remat: the graph has no \"loss\" output to tell forward from backward");
  if (st == IR_OK) {
    for (int32_t v = 0; v < n; v++) R->clone[v] = IR_NONE;
    mark_recompute(R, forward);
    st = rebuild(R, forward);
  }
  free(forward);
  return st;
}

int pass_remat(IrGraph *g, const PassOptions *opt) {
  const PassRemat *in = opt ? opt->remat : NULL;
  bool any = false;
  for (int32_t i = 0; in && i < in->nscopes; i++)
    any |= !in->scopes[i].preset || strcmp(in->scopes[i].preset, "none") != 0;
  if (!any) return IR_OK;
  Remat R = {.g = g, .ng = ir_graph_new()};
  R.ng->mesh = g->mesh;
  R.ng->matmul = g->matmul;
  ir_graph_reserve(R.ng, g->nvalues + g->nvalues / 4); /* recomputed forward work */
  int st = remat_run(&R, in);
  if (st == IR_OK) {
    ir_graph_replace(g, R.ng);
  } else {
    ir_graph_fail(g, "%s", ir_graph_error(R.ng) ? ir_graph_error(R.ng) : "remat failed");
  }
  remat_free(&R);
  return st;
}
