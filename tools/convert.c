/*
 * convert.c: `axlc convert`, weights between Hugging Face's names and layouts and axlc's.
 *
 * The config decides the architecture: a model with a learned position embedding is
 * GPT-2 (GPT2LMHeadModel), one without is Llama (LlamaForCausalLM), or Mixtral
 * (MixtralForCausalLM) when its feed-forward is a mixture of experts; the rest of the config
 * must compute what that Hugging Face model computes (norm kinds, activation, rotary
 * embedding), or the conversion is refused with the config field that differs.
 *
 * One table of links serves both directions, so hf -> axlc -> hf gives back every tensor
 * bit for bit. A link ties one Hugging Face tensor to one or three axlc parameters:
 *   SAME       the same layout: embeddings, norms, biases, GPT-2's Conv1D weights (in, out)
 *   TRANSPOSE  a Llama nn.Linear weight (out, in) against axlc's (in, out)
 *   FUSED      GPT-2's c_attn (D, 3D): q, k and v side by side along the last dimension
 *   EXPERT     a Mixtral expert's nn.Linear weight (out, in): slice e of axlc's (E, in, out)
 * Values go through f32: --from hf widens F16 and BF16 exactly into the f32 masters axlc trains
 * (and records the file's dtype in the output's metadata, "axlc.hf_dtype"); --to hf writes the
 * dtype asked for (--dtype), by default the one the weights came in, rounding f32 to nearest,
 * ties to even, so a BF16 file comes back bit for bit. axlc's rotary
 * embedding rotates the two halves of each head, as Hugging Face's rotate_half does: Llama's
 * q and k projections copy across without the row permutation that Meta's original
 * (interleaved) checkpoints need. docs/convert.md has the whole name map.
 *
 * Every problem of the input (missing, unknown, misshapen tensors) is listed before
 * anything is written; the output is written atomically (runtime/file.c), so an existing
 * file is never left half-written. The files around the weights (a sharded checkpoint's
 * index and shards, config.json) are hf_files.c's.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/driver.h"
#include "runtime/axrt.h"
#include "tools/convert.h"

typedef enum { LINK_SAME, LINK_TRANSPOSE, LINK_FUSED, LINK_EXPERT } LinkKind;

typedef struct Link {
  char hf[160]; /* Hugging Face name, without a prefix: "h.0.attn.c_attn.weight" */
  LinkKind kind;
  int nparts;
  int part[3];    /* FeBuild params: one, or q, k, v for FUSED */
  int64_t expert; /* EXPERT: the slice of part[0] (E, in, out) this (out, in) weight is */
} Link;

typedef struct Conv {
  const FeBuild *b;
  const char *model;  /* the config file, for messages */
  const char *in;     /* the input file, for messages */
  bool gpt2;          /* else Llama, or Mixtral when moe */
  bool moe;           /* the layers' feed-forward is a mixture of experts: Mixtral */
  const char *family; /* "GPT-2", "Llama" or "Mixtral" */
  Link *links;
  int nlinks, cap;
  int problems;
  int dtype; /* the float dtype of every weight read so far; -1 none yet, RT_DT_COUNT mixed */
} Conv;

/* One problem line under the "error:" header. */
static void problem(Conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(Conv *c, const char *fmt, ...) {
  if (c->problems++ == 0) fprintf(stderr, "error: %s:\n", c->in);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "  ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static const char *shape_text(char *buf, size_t cap, const int64_t *shape, int ndim) {
  size_t len = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (len < cap) snprintf(buf + len, cap - len, "]");
  return buf;
}

/* ===== the config: which Hugging Face model ============================================ */

/* An error about config field `path` (under /model) whose value `got` differs from `want`. */
static int config_mismatch(const Conv *c, const char *path, const char *got, const char *want) {
  fprintf(stderr, "error: %s: %s is %s; Hugging Face %s needs %s\n", c->model, path, got, c->family,
          want);
  return -1;
}

static int check_norm(const Conv *c, json_object *norm, const char *path) {
  const char *want = c->gpt2 ? "layer_norm" : "rms_norm";
  if (strcmp(fe_node_kind(norm), want) == 0) return 0;
  char got[64];
  snprintf(got, sizeof got, "\"%s\"", fe_node_kind(norm));
  return config_mismatch(c, path, got, want);
}

static int check_attention(const Conv *c, json_object *attn) {
  const char *p = "/model/decoder/layer/self_attention";
  char path[128];
  snprintf(path, sizeof path, "%s/rope", p);
  json_object *rope = fe_get_child(attn, "rope");
  if (c->gpt2 && rope) return config_mismatch(c, path, "set", "null (learned positions)");
  if (!c->gpt2 && !rope) return config_mismatch(c, path, "null", "a rope module");
  int64_t heads = fe_get_int(attn, "num_heads"), kv = fe_get_int(attn, "num_kv_heads");
  if (c->gpt2 && kv != 0 && kv != heads) {
    snprintf(path, sizeof path, "%s/num_kv_heads", p);
    return config_mismatch(c, path, "below num_heads",
                           "num_kv_heads 0 (no grouped-query attention)");
  }
  return 0;
}

static int check_ffn(const Conv *c, json_object *ff) {
  const char *p = "/model/decoder/layer/feed_forward";
  if (c->gpt2 && strcmp(fe_node_kind(ff), "feed_forward") != 0) {
    char got[64];
    snprintf(got, sizeof got, "\"%s\"", fe_node_kind(ff));
    return config_mismatch(c, p, got, "a dense feed_forward");
  }
  const char *act = fe_get_str(ff, "activation"), *want = c->gpt2 ? "gelu" : "swiglu";
  char path[128], got[64];
  snprintf(path, sizeof path, "%s/activation", p);
  snprintf(got, sizeof got, "\"%s\"", act);
  if (strcmp(act, want) != 0) return config_mismatch(c, path, got, want);
  /* the weights are the same either way: only what a step drops differs */
  if (c->moe && fe_get_float(ff, "capacity_factor") > 0)
    fprintf(stderr,
            "note: %s: %s/capacity_factor is %g: axlc drops the tokens past an expert's "
            "capacity, Mixtral none (0 computes what Mixtral computes)\n",
            c->model, p, fe_get_float(ff, "capacity_factor"));
  return 0;
}

/* GPT-2 when the model learns position embeddings, else Llama, or Mixtral when its
 * feed-forward is a mixture of experts; the rest must agree. */
static int check_config(Conv *c) {
  json_object *model = fe_get_child(c->b->root, "model");
  json_object *dec = fe_get_child(model, "decoder"), *layer = fe_get_child(dec, "layer");
  c->gpt2 = fe_get_child(model, "pos_emb") != NULL;
  c->moe = !c->gpt2 && !strcmp(fe_node_kind(fe_get_child(layer, "feed_forward")), "moe");
  c->family = c->gpt2 ? "GPT-2" : c->moe ? "Mixtral" : "Llama";
  if (check_norm(c, fe_get_child(layer, "norm"), "/model/decoder/layer/norm") ||
      check_norm(c, fe_get_child(dec, "output_norm"), "/model/decoder/output_norm") ||
      check_attention(c, fe_get_child(layer, "self_attention")) ||
      check_ffn(c, fe_get_child(layer, "feed_forward")))
    return -1;
  double eps = fe_get_float(fe_get_child(layer, "norm"), "eps");
  double out_eps = fe_get_float(fe_get_child(dec, "output_norm"), "eps");
  if (eps == out_eps) return 0;
  char got[64], want[128];
  snprintf(got, sizeof got, "%g", out_eps);
  snprintf(want, sizeof want, "/model/decoder/layer/norm/eps's %g (its config.json has one %s)",
           eps, c->gpt2 ? "layer_norm_epsilon" : "rms_norm_eps");
  return config_mismatch(c, "/model/decoder/output_norm/eps", got, want);
}

/* ===== the links ======================================================================= */

static Link *link_new(Conv *c, LinkKind kind, const char *hf) {
  if (c->nlinks == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->links = base_xrealloc(c->links, (size_t)c->cap * sizeof *c->links);
  }
  Link *l = &c->links[c->nlinks++];
  memset(l, 0, sizeof *l);
  l->kind = kind;
  snprintf(l->hf, sizeof l->hf, "%s", hf);
  return l;
}

/* hf <-> the parameter `axlc`, when the model has it. */
static void link1(Conv *c, LinkKind kind, const char *hf, const char *axlc) {
  int i = fe_param_find(c->b, axlc);
  if (i < 0) return;
  Link *l = link_new(c, kind, hf);
  l->nparts = 1;
  l->part[0] = i;
}

/* hf.weight and hf.bias <-> axlc/scale and axlc/bias (a bias only where the model has one). */
static void link_norm(Conv *c, const char *hf, const char *axlc) {
  char h[160], a[256];
  snprintf(h, sizeof h, "%s.weight", hf), snprintf(a, sizeof a, "%s/scale", axlc);
  link1(c, LINK_SAME, h, a);
  snprintf(h, sizeof h, "%s.bias", hf), snprintf(a, sizeof a, "%s/bias", axlc);
  link1(c, LINK_SAME, h, a);
}

/* hf.weight (in the layout `kind`) and hf.bias <-> axlc/weight and axlc/bias. */
static void link_linear(Conv *c, LinkKind kind, const char *hf, const char *axlc) {
  char h[160], a[256];
  snprintf(h, sizeof h, "%s.weight", hf), snprintf(a, sizeof a, "%s/weight", axlc);
  link1(c, kind, h, a);
  snprintf(h, sizeof h, "%s.bias", hf), snprintf(a, sizeof a, "%s/bias", axlc);
  link1(c, LINK_SAME, h, a);
}

/* GPT-2's c_attn.{weight,bias} <-> {q,k,v}_proj/{weight,bias} of attention `attn`. */
static void link_qkv(Conv *c, const char *hf, const char *attn) {
  static const char *const leaf[2] = {"weight", "bias"};
  for (int w = 0; w < 2; w++) {
    char h[160], a[3][256];
    int idx[3];
    snprintf(h, sizeof h, "%s.%s", hf, leaf[w]);
    for (int k = 0; k < 3; k++) {
      snprintf(a[k], sizeof a[k], "%s/%c_proj/%s", attn, "qkv"[k], leaf[w]);
      idx[k] = fe_param_find(c->b, a[k]);
    }
    if (idx[0] < 0 || idx[1] < 0 || idx[2] < 0) continue;
    Link *l = link_new(c, LINK_FUSED, h);
    l->nparts = 3;
    memcpy(l->part, idx, sizeof idx);
  }
}

static void links_gpt2(Conv *c, int64_t layers) {
  link1(c, LINK_SAME, "wte.weight", "model/emb/weight");
  link1(c, LINK_SAME, "wpe.weight", "model/pos_emb/weight");
  for (int64_t i = 0; i < layers; i++) {
    char h[64], a[64], hx[128], ax[192];
    snprintf(h, sizeof h, "h.%lld", (long long)i);
    snprintf(a, sizeof a, "model/decoder/layer_%lld", (long long)i);
#define AT(hs, as)                                                                                 \
  (snprintf(hx, sizeof hx, "%s.%s", h, hs), snprintf(ax, sizeof ax, "%s/%s", a, as))
    AT("ln_1", "attn_norm"), link_norm(c, hx, ax);
    AT("attn.c_attn", "self_attention"), link_qkv(c, hx, ax);
    AT("attn.c_proj", "self_attention/o_proj"), link_linear(c, LINK_SAME, hx, ax);
    AT("ln_2", "ffn_norm"), link_norm(c, hx, ax);
    AT("mlp.c_fc", "feed_forward/linear1"), link_linear(c, LINK_SAME, hx, ax);
    AT("mlp.c_proj", "feed_forward/linear2"), link_linear(c, LINK_SAME, hx, ax);
  }
  link_norm(c, "ln_f", "model/decoder/output_norm");
  link1(c, LINK_SAME, "lm_head.weight", "model/lm_head/weight");
}

/* Mixtral's block_sparse_moe under layer prefix h: the router (E, D) and expert e's w1 (gate),
 * w3 (up) and w2 (down), each an nn.Linear (out, in), slice e of axlc's (E, in, out). */
static void links_moe(Conv *c, const char *h, const char *a, int64_t experts) {
  static const char *const w[][2] = {{"w1", "linear1_0"}, {"w3", "linear1_1"}, {"w2", "linear2"}};
  char hx[160], ax[256];
  snprintf(hx, sizeof hx, "%s.block_sparse_moe.gate.weight", h);
  snprintf(ax, sizeof ax, "%s/feed_forward/gate/weight", a);
  link1(c, LINK_TRANSPOSE, hx, ax);
  for (int64_t e = 0; e < experts; e++)
    for (int k = 0; k < 3; k++) {
      snprintf(hx, sizeof hx, "%s.block_sparse_moe.experts.%lld.%s.weight", h, (long long)e,
               w[k][0]);
      snprintf(ax, sizeof ax, "%s/feed_forward/%s/weight", a, w[k][1]);
      int i = fe_param_find(c->b, ax);
      if (i < 0) continue;
      Link *l = link_new(c, LINK_EXPERT, hx);
      l->nparts = 1;
      l->part[0] = i;
      l->expert = e;
    }
}

static void links_llama(Conv *c, int64_t layers, int64_t experts) {
  static const char *const proj[][2] = {
      {"self_attn.q_proj", "self_attention/q_proj"}, {"self_attn.k_proj", "self_attention/k_proj"},
      {"self_attn.v_proj", "self_attention/v_proj"}, {"self_attn.o_proj", "self_attention/o_proj"},
      {"mlp.gate_proj", "feed_forward/linear1_0"},   {"mlp.up_proj", "feed_forward/linear1_1"},
      {"mlp.down_proj", "feed_forward/linear2"}};
  link1(c, LINK_SAME, "model.embed_tokens.weight", "model/emb/weight");
  for (int64_t i = 0; i < layers; i++) {
    char h[64], a[64], hx[128], ax[192];
    snprintf(h, sizeof h, "model.layers.%lld", (long long)i);
    snprintf(a, sizeof a, "model/decoder/layer_%lld", (long long)i);
    AT("input_layernorm", "attn_norm"), link_norm(c, hx, ax);
    for (int k = 0; k < 4; k++) AT(proj[k][0], proj[k][1]), link_linear(c, LINK_TRANSPOSE, hx, ax);
    AT("post_attention_layernorm", "ffn_norm"), link_norm(c, hx, ax);
    if (c->moe)
      links_moe(c, h, a, experts);
    else
      for (int k = 4; k < 7; k++)
        AT(proj[k][0], proj[k][1]), link_linear(c, LINK_TRANSPOSE, hx, ax);
#undef AT
  }
  link_norm(c, "model.norm", "model/decoder/output_norm");
  link1(c, LINK_SAME, "lm_head.weight", "model/lm_head/weight");
}

/* The number of experts of a Mixtral model's layers. */
static int64_t experts_of(const Conv *c) {
  json_object *dec = fe_get_child(fe_get_child(c->b->root, "model"), "decoder");
  return fe_get_int(fe_get_child(fe_get_child(dec, "layer"), "feed_forward"), "num_experts");
}

/* Builds the table; every parameter of the model must be in it. */
static int build_links(Conv *c) {
  json_object *dec = fe_get_child(fe_get_child(c->b->root, "model"), "decoder");
  int64_t layers = fe_get_int(dec, "num_layers");
  if (c->gpt2)
    links_gpt2(c, layers);
  else
    links_llama(c, layers, c->moe ? experts_of(c) : 0);
  char *covered = base_xcalloc((size_t)c->b->nparams + 1, 1);
  for (int i = 0; i < c->nlinks; i++)
    for (int k = 0; k < c->links[i].nparts; k++) covered[c->links[i].part[k]] = 1;
  int bad = 0;
  for (int i = 0; i < c->b->nparams; i++)
    if (!covered[i] && bad++ < 20)
      fprintf(stderr, "error: %s: parameter '%s' has no counterpart in Hugging Face %s\n", c->model,
              c->b->params[i].path, c->family);
  free(covered);
  return bad ? -1 : 0;
}

/* ===== shapes and bytes ================================================================ */

/* The Hugging Face shape of link l, from its parameters' shapes. */
static int hf_shape(const Conv *c, const Link *l, int64_t *shape) {
  const FeParam *p = &c->b->params[l->part[0]];
  if (l->kind == LINK_EXPERT) { /* one expert's (in, out) slice of (E, in, out), transposed */
    shape[0] = p->shape[2], shape[1] = p->shape[1];
    return 2;
  }
  memcpy(shape, p->shape, sizeof(int64_t) * (size_t)p->rank);
  if (l->kind == LINK_TRANSPOSE) shape[0] = p->shape[1], shape[1] = p->shape[0];
  if (l->kind == LINK_FUSED)
    for (int k = 1; k < l->nparts; k++)
      shape[p->rank - 1] += c->b->params[l->part[k]].shape[p->rank - 1];
  return p->rank;
}

static int64_t numel(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* src (rows, cols) -> dst (cols, rows), elements of `es` bytes. */
static void transpose(const unsigned char *src, unsigned char *dst, int64_t rows, int64_t cols,
                      int es) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < cols; k++)
      memcpy(dst + (k * rows + r) * es, src + (r * cols + k) * es, (size_t)es);
}

/* Columns [col, col + w) of the (rows, total) matrix `wide` <-> the (rows, w) matrix
 * `narrow`; to_wide picks the direction. */
static void columns(unsigned char *wide, unsigned char *narrow, int64_t rows, int64_t total,
                    int64_t col, int64_t w, int es, bool to_wide) {
  for (int64_t r = 0; r < rows; r++) {
    unsigned char *a = wide + (r * total + col) * es, *b = narrow + r * w * es;
    memcpy(to_wide ? a : b, to_wide ? b : a, (size_t)(w * es));
  }
}

static bool float_dtype(RtDtype dt) {
  return dt == RT_DT_F32 || dt == RT_DT_F16 || dt == RT_DT_BF16;
}

static bool same_shape(const RtTensor *t, const int64_t *shape, int ndim) {
  if (t->ndim != ndim) return false;
  for (int i = 0; i < ndim; i++)
    if (t->shape[i] != shape[i]) return false;
  return true;
}

/* Checks the file's tensor t: a float dtype and the wanted shape (with a hint when reversed). */
static int check_tensor(Conv *c, const RtTensor *t, const int64_t *want, int ndim) {
  char got[128], exp[128];
  if (!float_dtype(t->dtype)) {
    problem(c, "tensor '%s': dtype %s, expected F32, F16 or BF16", t->name,
            rt_dtype_name(t->dtype));
    return -1;
  }
  if (same_shape(t, want, ndim)) return 0;
  bool reversed = ndim == 2 && t->ndim == 2 && t->shape[0] == want[1] && t->shape[1] == want[0];
  char text[128] = "";
  if (reversed)
    snprintf(text, sizeof text, " (transposed: %s's %s weights are %s)", c->family,
             c->gpt2 ? "Conv1D" : "nn.Linear", c->gpt2 ? "(in, out)" : "(out, in)");
  problem(c, "tensor '%s': shape %s, expected %s%s", t->name,
          shape_text(got, sizeof got, t->shape, t->ndim), shape_text(exp, sizeof exp, want, ndim),
          text);
  return -1;
}

/* Notes the dtype of a weight read: the input's dtype, when all its weights share one. */
static void note_dtype(Conv *c, RtDtype dt) {
  c->dtype = c->dtype < 0 || c->dtype == (int)dt ? (int)dt : RT_DT_COUNT;
}

/* t (checked: F32, F16 or BF16) as f32: t itself, or a copy with its data widened exactly into
 * *buf (to free; NULL when t is F32). -1, a problem said, when that does not fit in memory. */
static int widen(Conv *c, const RtTensor *t, RtTensor *wide, float **buf) {
  *wide = *t;
  *buf = NULL;
  note_dtype(c, t->dtype);
  if (t->dtype == RT_DT_F32) return 0;
  int64_t n = numel(t->shape, t->ndim);
  *buf = malloc((size_t)(n ? n : 1) * sizeof **buf);
  if (!*buf) {
    problem(c, "tensor '%s': out of memory for its %lld values as f32", t->name, (long long)n);
    return -1;
  }
  rt_st_convert_run(t, 0, n, *buf);
  wide->dtype = RT_DT_F32;
  wide->data = *buf;
  wide->nbytes = n * 4;
  return 0;
}

/* f16 nearest to x, ties to even: 11 significant bits down to 2^-14, then a fixed step of
 * 2^-24; past the largest finite value (65504) an infinity; a NaN stays a (quiet) NaN. */
static uint16_t f16_from_f32(float x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (isnan(x)) return sign | 0x7e00;
  double a = fabs((double)x);
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int step = e - 11 < -24 ? -24 : e - 11;
  double r = a == 0 ? 0 : ldexp(nearbyint(ldexp(a, -step)), step); /* ties to even */
  if (r >= 65536 || isinf(r)) return sign | 0x7c00;
  if (r < 0x1p-14) return sign | (uint16_t)ldexp(r, 24); /* subnormal, or zero */
  int re;
  double m = frexp(r, &re); /* r = m 2^re, m in [0.5, 1) */
  return sign | (uint16_t)((re + 14) << 10) | (uint16_t)(ldexp(m, 11) - 1024);
}

/* ===== the output ====================================================================== */

typedef struct Out {
  RtTensor *t; /* (n) */
  int n;
} Out;

/* The next output tensor, or NULL (a problem said) when its data does not fit in memory: its
 * size comes from the weights, so that is the input's problem, not an abort. */
static RtTensor *out_add(Conv *c, Out *o, const char *name, RtDtype dt, const int64_t *shape,
                         int ndim) {
  int64_t bytes = numel(shape, ndim) * rt_dtype_size(dt);
  void *data = malloc((size_t)(bytes ? bytes : 1));
  if (!data) {
    problem(c, "tensor '%s': out of memory for its %lld bytes", name, (long long)bytes);
    return NULL;
  }
  memset(data, 0, (size_t)bytes); /* an expert's slice may stay unwritten: a problem said */
  RtTensor *t = &o->t[o->n++];
  memset(t, 0, sizeof *t);
  t->name = fe_asprintf("%s", name);
  t->dtype = dt;
  t->ndim = ndim;
  memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  t->data = data;
  return t;
}

/* The output tensor `name`, made by an earlier expert's link, or a new one. */
static RtTensor *out_get(Conv *c, Out *o, const char *name, RtDtype dt, const int64_t *shape,
                         int ndim) {
  for (int i = 0; i < o->n; i++)
    if (!strcmp(o->t[i].name, name)) return &o->t[i];
  return out_add(c, o, name, dt, shape, ndim);
}

static void out_free(Out *o) {
  for (int i = 0; i < o->n; i++) {
    free((char *)o->t[i].name);
    free((void *)o->t[i].data);
  }
  free(o->t);
}

/* ===== the input ======================================================================= */

/* The input's tensors: a safetensors file's (data in its mapping), or a checkpoint's, each read
 * whole from whichever shard files hold it (data owned; optimizer moments only named). */
typedef struct Src {
  RtTensor *t; /* (n) */
  int n;
  bool owned;
  RtSt *st;          /* one safetensors file, or NULL */
  HfFiles shards;    /* or the shards of a Hugging Face index */
  RtCkpt *ck;        /* or a checkpoint */
  char config[4200]; /* --from hf: where the weights' config.json would be */
} Src;

static const RtTensor *src_find(const Src *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->t[i].name, name)) return &s->t[i];
  return NULL;
}

static void src_free(Src *s) {
  for (int i = 0; s->owned && i < s->n; i++) free((void *)s->t[i].data);
  if (s->shards.t != s->t) free(s->t);
  hf_files_close(&s->shards);
  rt_st_close(s->st);
  rt_ckpt_close(s->ck);
}

/* ===== Hugging Face -> axlc ============================================================ */

/* The file's tensor for Hugging Face name `hf`: as is, or under GPT2LMHeadModel's
 * "transformer." prefix. */
static const RtTensor *hf_find(const Conv *c, const Src *st, const char *hf) {
  const RtTensor *t = src_find(st, hf);
  if (t || !c->gpt2 || !strcmp(hf, "lm_head.weight")) return t;
  char name[192];
  snprintf(name, sizeof name, "transformer.%s", hf);
  return src_find(st, name);
}

static void mark_used(const Src *st, const RtTensor *t, char *used) { used[t - st->t] = 1; }

/* Hugging Face keeps some buffers among the weights: GPT-2's causal mask (h.N.attn.bias,
 * h.N.attn.masked_bias) and old Llama files' rotary inverse frequencies. */
static bool hf_buffer(const char *name) {
  size_t n = strlen(name);
#define ENDS(s) (n >= strlen(s) && strcmp(name + n - strlen(s), s) == 0)
  return ENDS(".attn.bias") || ENDS(".attn.masked_bias") || ENDS(".rotary_emb.inv_freq");
#undef ENDS
}

/* The parts of link l from the file's tensor t (already checked), as f32. */
static void split_link(Conv *c, const Link *l, const RtTensor *in, Out *o) {
  RtTensor wide, *t = &wide;
  float *buf;
  if (widen(c, in, &wide, &buf)) return;
  int es = 4;
  const unsigned char *src = t->data;
  int64_t col = 0, total = t->shape[t->ndim - 1],
          rows = numel(t->shape, t->ndim) / (total ? total : 1);
  for (int k = 0; k < l->nparts; k++) {
    const FeParam *p = &c->b->params[l->part[k]];
    RtTensor *d = l->kind == LINK_EXPERT ? out_get(c, o, p->path, RT_DT_F32, p->shape, p->rank)
                                         : out_add(c, o, p->path, RT_DT_F32, p->shape, p->rank);
    if (!d) break;
    if (l->kind == LINK_EXPERT)
      transpose(src, (unsigned char *)d->data + l->expert * t->nbytes, t->shape[0], t->shape[1],
                es);
    else if (l->kind == LINK_SAME)
      memcpy((void *)d->data, src, (size_t)t->nbytes);
    else if (l->kind == LINK_TRANSPOSE)
      transpose(src, (void *)d->data, t->shape[0], t->shape[1], es);
    else
      columns((void *)src, (void *)d->data, rows, total, col, p->shape[p->rank - 1], es, false);
    col += p->shape[p->rank - 1];
  }
  free(buf);
}

/* A tied head: lm_head.weight may be there, as a copy of the embedding. */
static void tied_head(Conv *c, const Src *st, char *used) {
  const RtTensor *head = src_find(st, "lm_head.weight");
  if (!head || fe_param_find(c->b, "model/lm_head/weight") >= 0) return;
  const char *ename = c->gpt2 ? "wte.weight" : "model.embed_tokens.weight";
  const RtTensor *emb = hf_find(c, st, ename);
  mark_used(st, head, used);
  if (emb && (head->dtype != emb->dtype || !same_shape(head, emb->shape, emb->ndim) ||
              memcmp(head->data, emb->data, (size_t)emb->nbytes) != 0))
    problem(c,
            "tensor 'lm_head.weight' differs from '%s', but %s ties the head to the embedding "
            "(set /model/lm_head/tied to false to keep both)",
            emb->name, c->model);
}

/* A checkpoint's optimizer moments ("opt/m/P", "opt/v/P"), which no Hugging Face file holds. */
static bool optimizer_state(const char *name) {
  return !strncmp(name, "opt/m/", 6) || !strncmp(name, "opt/v/", 6);
}

static void unknown_tensors(Conv *c, const Src *st, const char *used, bool from_hf) {
  int moments = 0;
  for (int j = 0; j < st->n; j++) {
    const char *name = st->t[j].name;
    if (used[j] || (from_hf && hf_buffer(name))) continue;
    if (!from_hf && optimizer_state(name)) {
      moments++;
      continue;
    }
    if (from_hf && fe_param_find(c->b, name) >= 0)
      problem(c, "unknown tensor '%s': an axlc parameter name (convert axlc weights with --to hf)",
              name);
    else if (!from_hf && strchr(name, '.')) /* axlc's paths have no dots */
      problem(
          c,
          "unknown tensor '%s': a Hugging Face name (convert Hugging Face weights with --from hf)",
          name);
    else if (c->moe && strstr(name, ".block_sparse_moe.experts."))
      problem(c,
              "unknown tensor '%s': no parameter of %s (Hugging Face %s) takes it (the config "
              "has %lld experts: /model/decoder/layer/feed_forward/num_experts)",
              name, c->model, c->family, (long long)experts_of(c));
    else
      problem(c, "unknown tensor '%s': no parameter of %s (Hugging Face %s) takes it%s", name,
              c->model, c->family,
              strstr(name, "bias") ? " (does the config turn that bias on?)" : "");
  }
  if (moments)
    fprintf(stderr, "note: %s: %d optimizer tensors (opt/m/, opt/v/) left out\n", c->in, moments);
}

static void from_hf(Conv *c, const Src *st, Out *o) {
  char *used = base_xcalloc((size_t)st->n + 1, 1);
  for (int i = 0; i < c->nlinks; i++) {
    const Link *l = &c->links[i];
    const RtTensor *t = hf_find(c, st, l->hf);
    if (!t && l->kind == LINK_EXPERT) {
      problem(c, "missing tensor '%s' (for expert %lld of %s)", l->hf, (long long)l->expert,
              c->b->params[l->part[0]].path);
      continue;
    }
    if (!t) {
      problem(c, "missing tensor '%s' (for %s%s)", l->hf, c->b->params[l->part[0]].path,
              l->nparts > 1 ? " and its k, v" : "");
      continue;
    }
    mark_used(st, t, used);
    int64_t want[RT_MAX_DIMS];
    int nd = hf_shape(c, l, want);
    if (check_tensor(c, t, want, nd) == 0) split_link(c, l, t, o);
  }
  tied_head(c, st, used);
  unknown_tensors(c, st, used, true);
  free(used);
}

/* ===== axlc -> Hugging Face ============================================================ */

/* Link l's Hugging Face tensor from its parts, all f32. */
static void join_parts(Conv *c, const Link *l, const RtTensor **parts, Out *o) {
  int64_t shape[RT_MAX_DIMS];
  int nd = hf_shape(c, l, shape), es = 4;
  RtTensor *d = out_add(c, o, l->hf, RT_DT_F32, shape, nd);
  if (!d) return;
  if (l->kind == LINK_SAME) {
    memcpy((void *)d->data, parts[0]->data, (size_t)parts[0]->nbytes);
  } else if (l->kind == LINK_TRANSPOSE || l->kind == LINK_EXPERT) {
    transpose(parts[0]->data, (void *)d->data, parts[0]->shape[0], parts[0]->shape[1], es);
  } else {
    int64_t total = shape[nd - 1], rows = numel(shape, nd) / (total ? total : 1), col = 0;
    for (int k = 0; k < l->nparts; k++) {
      int64_t w = parts[k]->shape[nd - 1];
      columns((void *)d->data, (void *)parts[k]->data, rows, total, col, w, es, true);
      col += w;
    }
  }
}

/* Link l's Hugging Face tensor, in f32, from its parts (checked), each widened. */
static void join_link(Conv *c, const Link *l, const RtTensor **in, Out *o) {
  RtTensor wide[3];
  const RtTensor *parts[3];
  float *bufs[3] = {NULL, NULL, NULL};
  int bad = 0;
  for (int k = 0; k < l->nparts; k++) {
    bad |= widen(c, in[k], &wide[k], &bufs[k]);
    parts[k] = &wide[k];
  }
  if (!bad) join_parts(c, l, parts, o);
  for (int k = 0; k < l->nparts; k++) free(bufs[k]);
}

/* Expert e's (in, out) slice of the (E, in, out) tensor t, as a tensor of its own. */
static RtTensor expert_slice(const RtTensor *t, int64_t e) {
  RtTensor v = *t;
  v.ndim = 2;
  v.shape[0] = t->shape[1], v.shape[1] = t->shape[2];
  v.nbytes = t->nbytes / t->shape[0];
  v.data = (const unsigned char *)t->data + e * v.nbytes;
  return v;
}

/* Link l's Hugging Face tensor from the input's parts. The expert links after a parameter's
 * first say nothing of it: its first link has. */
static void to_hf_link(Conv *c, const Link *l, const Src *st, char *used, Out *o) {
  const RtTensor *parts[3];
  RtTensor slice;
  bool quiet = l->kind == LINK_EXPERT && l->expert > 0;
  int bad = 0;
  for (int k = 0; k < l->nparts; k++) {
    const FeParam *p = &c->b->params[l->part[k]];
    parts[k] = src_find(st, p->path);
    if (!parts[k] && !quiet) problem(c, "missing tensor '%s' (for %s)", p->path, l->hf);
    if (!parts[k]) {
      bad++;
      continue;
    }
    mark_used(st, parts[k], used);
    bad += quiet ? !float_dtype(parts[k]->dtype) || !same_shape(parts[k], p->shape, p->rank)
                 : check_tensor(c, parts[k], p->shape, p->rank) != 0;
  }
  if (bad) return;
  if (l->kind == LINK_EXPERT) slice = expert_slice(parts[0], l->expert), parts[0] = &slice;
  join_link(c, l, parts, o);
}

static void to_hf(Conv *c, const Src *st, Out *o) {
  char *used = base_xcalloc((size_t)st->n + 1, 1);
  for (int i = 0; i < c->nlinks; i++) to_hf_link(c, &c->links[i], st, used, o);
  unknown_tensors(c, st, used, false);
  free(used);
}

/* ===== reading the input =============================================================== */

/* "CK/step_00000020" (a step directory) -> CK and 20; 0 when `path` names no step directory. */
static int step_dir(const char *path, char *dir, size_t cap, int64_t *step) {
  char buf[4096], check[64];
  snprintf(buf, sizeof buf, "%s", path);
  for (size_t n = strlen(buf); n > 1 && buf[n - 1] == '/'; n--) buf[n - 1] = 0;
  char *slash = strrchr(buf, '/');
  const char *base = slash ? slash + 1 : buf;
  long long v;
  if (sscanf(base, "step_%lld", &v) != 1 || v < 0) return 0;
  snprintf(check, sizeof check, "step_%08lld", v);
  if (strcmp(check, base)) return 0;
  if (slash) *slash = 0;
  snprintf(dir, cap, "%s", !slash ? "." : slash == buf ? "/" : buf);
  *step = v;
  return 1;
}

/* Every tensor of a checkpoint, whole, from whichever rank files hold its parts. */
static int src_from_ckpt(Src *s, const RtCkpt *ck, RtError *err) {
  s->owned = true;
  s->t = base_xcalloc((size_t)rt_ckpt_count(ck) + 1, sizeof *s->t);
  for (int i = 0; i < rt_ckpt_count(ck); i++) {
    RtTensor *t = &s->t[s->n++];
    *t = *rt_ckpt_tensor(ck, i);
    t->data = NULL;
    t->nbytes = 0;
    if (optimizer_state(t->name)) continue; /* only counted, in the note */
    int64_t count = numel(t->shape, t->ndim);
    float *buf = malloc((size_t)(count ? count : 1) * sizeof *buf);
    if (!buf) /* sized by the checkpoint: its problem, said, not an abort */
      return rt_error_set(err, "tensor '%s': out of memory for its %lld elements", t->name,
                          (long long)count);
    t->data = buf;
    t->dtype = RT_DT_F32;
    t->nbytes = count * (int64_t)sizeof *buf;
    if (rt_ckpt_read_f32(ck, t->name, t->shape, t->ndim, NULL, NULL, buf, err)) return -1;
  }
  return 0;
}

/* A checkpoint directory (its newest checkpoint that verifies) or one step directory. */
static int open_ckpt(const char *in, RtCkpt **ck, RtError *err) {
  char dir[4096];
  int64_t step;
  if (step_dir(in, dir, sizeof dir, &step)) return rt_ckpt_open(ck, dir, step, err);
  RtError damage;
  int found = rt_ckpt_open_latest(ck, in, &damage, err);
  if (damage.msg[0]) fprintf(stderr, "note: skipping a damaged checkpoint: %s\n", damage.msg);
  if (found == 0)
    return rt_error_set(err,
                        "%s: a directory without a checkpoint that verifies (expected a "
                        "safetensors file, a checkpoint directory or one of its step_N "
                        "directories)",
                        in);
  return found < 0 ? -1 : 0;
}

/* One rank's file of a sharded checkpoint holds only its parts of the tensors, under their
 * global names: every shape would differ. Said as what it is, with what to pass instead. */
static int refuse_shard(const char *in, const RtSt *st) {
  if (!rt_st_meta(st, "axlc.regions")) return 0;
  char dir[4096], index[4200], ranks[32] = "several";
  snprintf(dir, sizeof dir, "%s", in);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = 0;
  else
    snprintf(dir, sizeof dir, ".");
  snprintf(index, sizeof index, "%s/index.json", dir);
  json_object *root = json_object_from_file(index), *v;
  if (root && json_object_object_get_ex(root, "ranks", &v) && json_object_is_type(v, json_type_int))
    snprintf(ranks, sizeof ranks, "%lld", (long long)json_object_get_int64(v));
  json_object_put(root);
  fprintf(stderr,
          "error: %s: one rank's file of a sharded checkpoint of %s ranks: it holds only that "
          "rank's parts of the tensors; pass the step directory (%s) or the checkpoint directory "
          "to convert the whole model\n",
          in, ranks, dir);
  return -1;
}

/* The safetensors file `in`. --to hf: an interpreter dump stands for its new parameters, and
 * one rank's file of a sharded checkpoint is refused. */
static int src_file(const char *in, bool to_hf_names, Src *s) {
  RtError err;
  if (rt_st_open(&s->st, in, &err)) {
    fprintf(stderr, "error: %s\n", err.msg);
    return -1;
  }
  if (to_hf_names && refuse_shard(in, s->st)) return -1;
  if (to_hf_names) rt_st_dump_as_weights(s->st); /* an interpreter dump: its new parameters */
  s->t = base_xcalloc((size_t)rt_st_count(s->st) + 1, sizeof *s->t);
  for (int i = 0; i < rt_st_count(s->st); i++) s->t[s->n++] = *rt_st_tensor(s->st, i);
  return 0;
}

static bool ends_with(const char *s, const char *end) {
  size_t n = strlen(s), m = strlen(end);
  return n >= m && !strcmp(s + n - m, end);
}

/* The input: a safetensors file, a Hugging Face index (a .json file) or model directory
 * (--from hf), or (--to hf) a checkpoint directory or step directory. */
static int src_open(const char *in, bool to_hf_names, Src *s) {
  RtError err;
  struct stat sb;
  char path[4200];
  bool dir = stat(in, &sb) == 0 && S_ISDIR(sb.st_mode);
  if (to_hf_names && dir) {
    if (open_ckpt(in, &s->ck, &err) == 0 && src_from_ckpt(s, s->ck, &err) == 0) return 0;
    fprintf(stderr, "error: %s\n", err.msg);
    return -1;
  }
  if (dir && hf_dir_weights(in, path, sizeof path)) return -1;
  const char *file = dir ? path : in, *slash = strrchr(file, '/');
  if (!to_hf_names) /* Hugging Face's config.json, beside the weights */
    snprintf(s->config, sizeof s->config, "%.*sconfig.json", slash ? (int)(slash + 1 - file) : 0,
             file);
  if (!ends_with(file, ".json")) return src_file(file, to_hf_names, s);
  if (hf_index_open(&s->shards, file)) return -1;
  s->t = s->shards.t;
  s->n = s->shards.n;
  return 0;
}

/* --from hf: -o against the files of the weights (an index's shards). */
static int check_output(const Src *s, const ConvertOpts *o) {
  RtPathArg out = {"-o", o->out, NULL}, *in = base_xcalloc((size_t)s->shards.nst + 1, sizeof *in);
  for (int i = 0; i < s->shards.nst; i++)
    in[i] = (RtPathArg){"a shard of the weights", rt_st_path(s->shards.st[i]), NULL};
  RtError err;
  int rc = rt_file_check_outputs(&out, 1, in, s->shards.nst, &err);
  if (rc) fprintf(stderr, "error: %s\n", err.msg);
  free(in);
  return rc;
}

/* ===== the dtype of the output ========================================================= */

/* --dtype's value: F32, BF16 or F16, or -1 (said) for anything else. */
static int parse_dtype(const char *s) {
  if (!strcmp(s, "f32")) return RT_DT_F32;
  if (!strcmp(s, "bf16")) return RT_DT_BF16;
  if (!strcmp(s, "f16")) return RT_DT_F16;
  fprintf(stderr, "error: --dtype %s: expected f32, bf16 or f16\n", s);
  return -1;
}

/* --to hf without --dtype writes the dtype the weights came in: the Hugging Face file's, which
 * --from hf recorded in the metadata; else that of the input's weights, when they are all F16
 * or all BF16 (a file converted by an axlc that kept the dtype); else f32, the masters as they
 * are. A checkpoint's tensors are f32 and carry no record. The precision policy is no guide:
 * its compute dtype says how a step runs (and "auto" depends on the host), not what the
 * weights are. */
static RtDtype default_dtype(const Conv *c, const RtSt *st) {
  const char *rec = st ? rt_st_meta(st, "axlc.hf_dtype") : NULL;
  static const RtDtype known[] = {RT_DT_F32, RT_DT_BF16, RT_DT_F16};
  for (size_t i = 0; rec && i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(rec, rt_dtype_name(known[i]))) return known[i];
  return c->dtype == RT_DT_BF16 || c->dtype == RT_DT_F16 ? (RtDtype)c->dtype : RT_DT_F32;
}

/* Rounds every (f32) output tensor to dt, to nearest, ties to even. */
static void narrow(Conv *c, Out *o, RtDtype dt) {
  for (int i = 0; i < o->n && dt != RT_DT_F32; i++) {
    RtTensor *t = &o->t[i];
    int64_t n = numel(t->shape, t->ndim);
    uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    if (!h) {
      problem(c, "tensor '%s': out of memory for its %lld values as %s", t->name, (long long)n,
              rt_dtype_name(dt));
      return;
    }
    const float *f = t->data;
    for (int64_t j = 0; j < n; j++)
      h[j] = dt == RT_DT_BF16 ? rt_bf16_from_f32(f[j]) : f16_from_f32(f[j]);
    free((void *)t->data);
    t->data = h;
    t->dtype = dt;
  }
}

/* ===== the command ===================================================================== */

/* --dtype and --max-shard-size, which only --to hf takes, into *want (-1: none) and *shard. */
static int parse_opts(const ConvertOpts *o, int *want, int64_t *shard) {
  *want = -1;
  *shard = 5000000000; /* transformers' default, "5GB" */
  if ((o->dtype || o->max_shard) && !o->to_hf) {
    fprintf(stderr,
            "error: %s %s: an option of --to hf (--from hf writes the f32 master "
            "weights axlc trains, in one file)\n",
            o->dtype ? "--dtype" : "--max-shard-size", o->dtype ? o->dtype : o->max_shard);
    return -1;
  }
  if (o->dtype && (*want = parse_dtype(o->dtype)) < 0) return -1;
  return o->max_shard ? hf_shard_size_parse(o->max_shard, shard) : 0;
}

/* --to hf: the weights in `dt`, in one file or in shards, and config.json beside them. */
static int write_hf(const Conv *c, const ConvertOpts *o, const Out *out, RtDtype dt,
                    int64_t shard) {
  RtMeta meta = {"format", "pt"}; /* what transformers writes (weights.c reads it as (out, in)) */
  char *config = hf_config_text(c->b, c->family, dt);
  HfWrite w = {.out = o->out,
               .t = out->t,
               .n = out->n,
               .meta = &meta,
               .nmeta = 1,
               .max_shard = shard,
               .config = config,
               .inputs = o->inputs,
               .ninputs = o->ninputs};
  int rc = hf_write(&w);
  free(config);
  return rc;
}

/* --from hf: the f32 masters in one file, with the file's dtype (the default of --to hf). */
static int write_axlc(const Conv *c, const ConvertOpts *o, const Src *src, const Out *out) {
  RtMeta meta = {"axlc.hf_dtype", rt_dtype_name((RtDtype)c->dtype)};
  int nmeta = c->dtype >= 0 && c->dtype < RT_DT_COUNT;
  RtError err;
  if (check_output(src, o)) return -1;
  if (rt_st_write(o->out, out->t, out->n, &meta, nmeta, NULL, NULL, &err) == 0) return 0;
  fprintf(stderr, "error: %s\n", err.msg);
  return -1;
}

int convert_weights(const FeBuild *b, const char *model, const ConvertOpts *opts) {
  Conv c = {.b = b, .model = model, .in = opts->in, .dtype = -1};
  int want;
  int64_t shard;
  if (parse_opts(opts, &want, &shard)) return -1;
  Src src = {0};
  if (check_config(&c) || build_links(&c) || src_open(opts->in, opts->to_hf, &src) ||
      (src.config[0] && access(src.config, F_OK) == 0 &&
       hf_config_check(b, c.family, src.config))) {
    src_free(&src);
    free(c.links);
    return -1;
  }
  Out o = {base_xcalloc((size_t)b->nparams + (size_t)c.nlinks + 1, sizeof *o.t), 0};
  RtDtype dt = RT_DT_F32;
  if (opts->to_hf) {
    to_hf(&c, &src, &o);
    dt = want >= 0 ? (RtDtype)want : default_dtype(&c, src.st);
    if (!c.problems) narrow(&c, &o, dt);
  } else {
    from_hf(&c, &src, &o);
  }
  int rc = -1;
  if (c.problems)
    fprintf(stderr, "error: %s: %d problem%s converting %s Hugging Face %s%s; %s not written\n",
            opts->in, c.problems, c.problems == 1 ? "" : "s",
            opts->to_hf ? "axlc weights to" : "from", c.family,
            opts->to_hf ? "" : " weights to axlc", opts->out);
  else
    rc = opts->to_hf ? write_hf(&c, opts, &o, dt, shard) : write_axlc(&c, opts, &src, &o);
  out_free(&o);
  src_free(&src);
  free(c.links);
  return rc;
}
