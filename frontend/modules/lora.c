/*
 * lora.c: low-rank adapters (LoRA), a trainer-level policy, `/lora`, that the `lora` modifier
 * switches on for every model:
 *
 *   {"kind": "lora", "rank": 4, "alpha": 8.0, "params": "(.+/)?[qkvo]_proj/weight"}
 *
 * Every parameter whose path matches `params` (a whole-path POSIX extended regex) must be a
 * linear projection's (in, out) weight W; it gets two siblings, A = lora_a (in, r), normal
 * init, and B = lora_b (r, out), zeros, and the linear computes
 *
 *   y = x W [+ bias] + (alpha / r) (x A) B
 *
 * so at the start (B = 0) the adapted model is the base model. Every other parameter of the
 * model, the matched W among them, is frozen: autodiff gives it no gradient and the optimizer
 * keeps no state for it (driver/pipeline.c), and checkpoints hold only the adapters
 * (runtime/train_state.c). A takes W's partition of the input dim, B W's partition of the
 * output dim, so a mesh that splits W splits the adapters alike.
 *
 * Neither the modules nor the walk know about any of this: the kind registers a parameter
 * transform (FeTransform, frontend.h). fe_param (build.c) hands each parameter it declares
 * to lora_param, and fe_emit_linear (compose.c) hands each product to lora_linear. A matched
 * weight that no linear reads (a table, a norm) is an error after composing (lora_composed).
 */
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/modules/lora.h"

static const FeField fields[] = {
    F_INT("rank", "4", FE_RANGE(1, 65536), "rank r of each adapter (A: in x r, B: r x out)"),
    /* above 0 (0 leaves the adapters without effect), at most 65536 (1e308 overflows at the
     * first step): checked in lora_begin */
    F_FLOAT("alpha", "8.0", FE_ATLEAST(0), "scale: the update is (alpha / rank) x A B"),
    F_TYPED("params", FT_STRING, "\"(.+/)?[qkvo]_proj/weight\"",
            "regex (POSIX extended, matching the whole path) of the projection weights to adapt"),
    F_FLOAT("init_std", "0.02", FE_ATLEAST(0), "standard deviation of A's normal init"),
};

static const FeTransform transform;

const FeKind fe_kind_lora = {
    .name = "lora",
    .doc = "low-rank adapters on the matching projections; the rest of the model frozen",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
    .modifier = true,
    .transform = &transform,
};

const FeLora *fe_lora(const FeBuild *b) { return fe_transform_state(b, &fe_kind_lora); }

static int lora_begin(FeBuild *b, json_object *root, void **state) {
  json_object *node = fe_get_child(root, "lora");
  if (!node) return 0;
  FeLora *l = calloc(1, sizeof *l);
  if (!l) return fe_error(b->diag, b->file, "/lora", "out of memory");
  const char *re = fe_get_str(node, "params");
  char *whole = fe_asprintf("^(%s)$", re);
  int rc = regcomp(&l->re, whole, REG_EXTENDED | REG_NOSUB);
  free(whole);
  if (rc != 0) {
    char why[256];
    regerror(rc, &l->re, why, sizeof why);
    free(l);
    return fe_field_error(b, node, "/lora", "params",
                          "\"%s\" is not a regular expression: %s (expected a POSIX extended "
                          "regex of parameter paths)",
                          re, why);
  }
  double alpha = fe_get_float(node, "alpha");
  if (alpha <= 0 || alpha > 65536) {
    regfree(&l->re);
    free(l);
  }
  if (alpha <= 0)
    return fe_field_error(b, node, "/lora", "alpha",
                          "alpha %g leaves the adapters without effect: the update (alpha / rank) "
                          "x A B is 0, so the run would train nothing (expected above 0, at most "
                          "65536)",
                          alpha);
  if (alpha > 65536)
    return fe_field_error(b, node, "/lora", "alpha",
                          "alpha %g is out of range: the scale alpha / rank multiplies every "
                          "adapter update, and the first step would overflow to NaN (expected "
                          "above 0, at most 65536)",
                          alpha);
  l->node = node;
  l->rank = fe_get_int(node, "rank");
  l->scale = fe_get_float(node, "alpha") / (double)l->rank;
  *state = l;
  return 0;
}

static void lora_free(void *state) {
  FeLora *l = state;
  regfree(&l->re);
  free(l);
}
/* Declares adapter `name` of base weight `base` (an index: declaring moves the table) with
 * dimension `keep` of its spec taken from the base's dimension `keep`. */
static int adapter(FeBuild *b, FeLora *l, int base, json_object *node, const char *cfg,
                   const char *prm, const char *name, const int64_t *shape, int keep,
                   const FeDims *in) {
  bool a = strcmp(name, "lora_a") == 0;
  l->declaring = true;
  int rc = fe_param(b, node, cfg, prm, name, 2, shape, a ? "normal" : "zeros",
                    a ? fe_get_float(l->node, "init_std") : 0.0, NULL, NULL, 1.0, in);
  l->declaring = false;
  if (rc) return -1;
  FeParam *p = &b->params[b->nparams - 1];
  memcpy(p->spec[keep], b->params[base].spec[keep], sizeof p->spec[keep]);
  p->adapter = true;
  return 0;
}

static int lora_param(FeBuild *b, void *state, json_object *node, const char *cfg, const char *prm,
                      const FeDims *in) {
  FeLora *l = state;
  if (l->declaring) return 0;
  int i = b->nparams - 1;
  FeParam *p = &b->params[i];
  p->frozen = true;
  if (regexec(&l->re, p->path, 0, NULL, 0) != 0) return 0;
  if (p->rank != 2)
    return fe_field_error(b, l->node, "/lora", "params",
                          "the regex matches %s, of rank %d (expected only the 2-D (in, out) "
                          "weights of linear projections)",
                          p->path, p->rank);
  if (b->not_linear)
    return fe_field_error(b, l->node, "/lora", "params",
                          "the regex matches %s, which no linear projection reads (%s; expected "
                          "only the 2-D (in, out) weights of linear projections)",
                          p->path, b->not_linear);
  int64_t din = p->shape[0], dout = p->shape[1], lim = din < dout ? din : dout;
  if (l->rank > lim)
    return fe_field_error(b, l->node, "/lora", "rank",
                          "rank %lld is larger than the projection %s (%lld x %lld) (expected at "
                          "most %lld)",
                          (long long)l->rank, p->path, (long long)din, (long long)dout,
                          (long long)lim);
  l->matched++;
  int64_t sa[2] = {din, l->rank}, sb[2] = {l->rank, dout};
  if (adapter(b, l, i, node, cfg, prm, "lora_a", sa, 0, in)) return -1;
  return adapter(b, l, i, node, cfg, prm, "lora_b", sb, 1, in);
}

static int lora_end(FeBuild *b, void *state) {
  FeLora *l = state;
  if (l->matched) return 0;
  const char *example = "model/decoder/layer_0/self_attention/q_proj/weight";
  for (int i = 0; i < b->nparams; i++)
    if (b->params[i].rank == 2 && strstr(b->params[i].path, "_proj/")) {
      example = b->params[i].path;
      break;
    }
  return fe_field_error(b, l->node, "/lora", "params",
                        "the regex \"%s\" matches none of the model's %d parameters (expected "
                        "the whole path of projection weights, such as %s)",
                        fe_get_str(l->node, "params"), b->nparams, example);
}

/* ---- composing -------------------------------------------------------------- */

/* y + (alpha / r) (x A) B when the weight pp/weight has adapters, else y. */
static int32_t lora_linear(FeEmit *e, const void *state, int32_t x, int32_t y, const char *pp) {
  const FeLora *l = state;
  if (y == IR_NONE || !fe_has_param(e, pp, "lora_a")) return y;
  int32_t a = fe_emit_param(e, pp, "lora_a"), bb = fe_emit_param(e, pp, "lora_b");
  int32_t d = ir_matmul(e->g, ir_matmul(e->g, x, a), bb); /* (..., r) -> (..., out) */
  return ir_add(e->g, y, ir_mul(e->g, d, fe_emit_like(e, d, l->scale)));
}

/* An error in the graph when an adapted weight was read by no linear. */
static int lora_composed(FeEmit *e, const void *state) {
  (void)state;
  for (int i = 0; i < e->b->nparams; i++)
    if (e->b->params[i].adapter && e->param_vals[i] == IR_NONE)
      return ir_graph_fail(e->g,
                           "/lora/params: the regex matches %.*s/weight, which no linear "
                           "projection reads (expected only the weights of linear projections)",
                           (int)(strrchr(e->b->params[i].path, '/') - e->b->params[i].path),
                           e->b->params[i].path);
  return 0;
}

static void lora_describe(const void *state, char *buf, size_t n) {
  const FeLora *l = state;
  snprintf(buf, n, "LoRA adapters on %d projections", l->matched);
}

static const FeTransform transform = {
    .begin = lora_begin,
    .param = lora_param,
    .end = lora_end,
    .free = lora_free,
    .linear = lora_linear,
    .composed = lora_composed,
    .describe = lora_describe,
};
