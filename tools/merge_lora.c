/*
 * merge_lora.c: `axlc convert MODEL.json --apply lora --merge-lora IN [--base BASE] -o OUT`.
 *
 * Folds a LoRA run's adapters into its base: every adapted weight becomes
 *
 *   W' = W + (alpha / r) A B          A = lora_a (in, r), B = lora_b (r, out)
 *
 * and OUT holds the model's other parameters as they were, under their paths and without any
 * adapter: a plain weights file that the model without /lora starts from (--init) and that
 * `axlc convert --to hf` publishes. The config (with the same /lora) says which weights have
 * adapters and the scale. IN is a LoRA run's checkpoint (a checkpoint directory: its newest
 * checkpoint, which holds only the adapters) or a safetensors file (an interpreter's --dump,
 * which holds the base too, or a step's state file); the base weights come from --base when
 * given, else from IN. Every problem is said with the file and the tensor; nothing is written
 * then.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/modules/lora.h"
#include "runtime/axrt.h"
#include "tools/convert.h"

/* A weights source: a safetensors file or an opened checkpoint. */
typedef struct Weights {
  const char *path;
  RtSt *st;
  RtCkpt *ck;
} Weights;

static int weights_open(Weights *w, const char *path) {
  RtError err;
  struct stat sb;
  memset(w, 0, sizeof *w);
  w->path = path;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    RtError damage;
    int found = rt_ckpt_open_latest(&w->ck, path, &damage, &err);
    if (found == 0)
      rt_error_set(&err,
                   "%s: a directory without a checkpoint that verifies (expected a "
                   "checkpoint directory or a safetensors file)",
                   path);
    if (found == 1) return 0;
  } else if (rt_st_open(&w->st, path, &err) == 0) {
    if (!rt_st_meta(w->st, "axlc.regions")) {
      rt_st_dump_as_weights(w->st); /* an interpreter's --dump: its new parameters */
      return 0;
    }
    rt_error_set(&err,
                 "%s: one rank's file of a sharded checkpoint (expected its checkpoint "
                 "directory)",
                 path);
    rt_st_close(w->st);
    w->st = NULL;
  }
  fprintf(stderr, "error: %s\n", err.msg);
  return -1;
}

static void weights_close(Weights *w) {
  rt_st_close(w->st);
  rt_ckpt_close(w->ck);
}

static bool weights_has(const Weights *w, const char *name) {
  return w->st ? rt_st_find(w->st, name) != NULL : rt_ckpt_find(w->ck, name) != NULL;
}

/* Parameter p of the table, whole, as f32 (malloc'd), or NULL after saying why. */
static float *weights_read(const Weights *w, const FeParam *p, const char *missing_hint) {
  if (!weights_has(w, p->path)) {
    fprintf(stderr, "error: --merge-lora: %s has no tensor '%s'%s\n", w->path, p->path,
            missing_hint);
    return NULL;
  }
  int64_t n = fe_param_numel(p);
  float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
  RtError err;
  int rc = !x ? rt_error_set(&err, "%s: out of memory for %lld elements", p->path, (long long)n)
           : w->st ? rt_st_read_f32(w->st, p->path, p->shape, p->rank, x, &err)
                   : rt_ckpt_read_f32(w->ck, p->path, p->shape, p->rank, NULL, NULL, x, &err);
  if (rc == 0) return x;
  fprintf(stderr, "error: --merge-lora: %s\n", err.msg);
  free(x);
  return NULL;
}

/* The adapter `name` ("lora_a") beside weight p ("X/weight" -> "X/lora_a"), or -1. */
static int adapter_of(const FeBuild *b, const FeParam *p, const char *name) {
  size_t len = strlen(p->path);
  if (len < 7 || strcmp(p->path + len - 7, "/weight") != 0) return -1;
  char *path = fe_asprintf("%.*s/%s", (int)(len - 7), p->path, name);
  int i = fe_param_find(b, path);
  free(path);
  return i;
}

/* w (in, out) += scale * a (in, r) b (r, out), each sum in double. */
static void fold(float *w, const float *a, const float *bm, int64_t in, int64_t r, int64_t out,
                 double scale) {
  for (int64_t i = 0; i < in; i++)
    for (int64_t j = 0; j < out; j++) {
      double s = 0;
      for (int64_t k = 0; k < r; k++) s += (double)a[i * r + k] * bm[k * out + j];
      w[i * out + j] = (float)(w[i * out + j] + scale * s);
    }
}

/* The merged value of base parameter p (malloc'd), or NULL after saying why. */
static float *merged(const FeBuild *b, const FeParam *p, const Weights *in, const Weights *base) {
  static const char hint[] = " (a LoRA checkpoint holds only the adapters: pass the base weights "
                             "the run started from with --base BASE.safetensors)";
  float *w = weights_read(base, p, base == in ? hint : "");
  int ia = adapter_of(b, p, "lora_a"), ib = adapter_of(b, p, "lora_b");
  if (!w || ia < 0) return w;
  const FeParam *pa = &b->params[ia], *pb = &b->params[ib];
  float *a = weights_read(in, pa, ""), *bm = a ? weights_read(in, pb, "") : NULL;
  if (bm) fold(w, a, bm, p->shape[0], pa->shape[1], p->shape[1], fe_lora(b)->scale);
  free(a);
  if (!bm) free(w);
  float *r = bm ? w : NULL;
  free(bm);
  return r;
}

/* -1 (said) when IN holds no adapter at all: the usual mistake is a base checkpoint. */
static int check_has_adapters(const FeBuild *b, const Weights *in) {
  const char *first = NULL;
  for (int i = 0; i < b->nparams; i++) {
    if (!b->params[i].adapter) continue;
    if (weights_has(in, b->params[i].path)) return 0;
    if (!first) first = b->params[i].path;
  }
  fprintf(stderr,
          "error: --merge-lora: %s holds no LoRA adapters (no tensor '%s'; expected a LoRA "
          "run's checkpoint or --dump)\n",
          in->path, first ? first : "?");
  return -1;
}

/* The checkpoint's step directory, for messages. */
static void ckpt_where(const Weights *in, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/step_%08lld", in->path, (long long)rt_ckpt_step(in->ck));
}

/* A checkpoint records the base its adapters were trained on (axlc.base: the --init file and
 * a hash of its frozen tensors, or "seed"): `base` must be those weights, as resume checks
 * them (runtime/train_state.c), unless --force-base. -1 (said) when refused. */
static int check_base(const FeBuild *b, const Weights *in, const Weights *base, bool force) {
  const char *rec = in->ck ? rt_ckpt_base(in->ck) : "", *want = NULL;
  char file[4096], where[4200], got[32] = "";
  if (!rec[0] || base == in) return 0;
  ckpt_where(in, where, sizeof where);
  const char *why = NULL;
  if (!rt_base_record_parse(rec, file, sizeof file, &want)) {
    if (strcmp(rec, "seed") == 0)
      why = "were trained on the seeded base weights (the run had no --init)";
  } else if (!base->st) {
    why = "were trained on a weights file; a checkpoint directory as --base cannot be checked "
          "against it";
  } else {
    uint64_t h = RT_FNV1A64_BASIS;
    for (int i = 0; i < b->nparams; i++)
      if (b->params[i].frozen) h = rt_st_hash_tensor(base->st, b->params[i].path, h);
    snprintf(got, sizeof got, "fnv1a64:%016llx", (unsigned long long)h);
    if (strcmp(got, want) == 0) return 0;
    why = "were trained on other base weights";
  }
  if (!why) return 0;
  char wanted[4200] = "";
  if (want)
    snprintf(wanted, sizeof wanted, " (%s%s, recorded %s from %s)", got, got[0] ? " here" : "",
             want, file);
  fprintf(stderr, "%s: --merge-lora: --base %s: the adapters of %s %s%s; %s\n",
          force ? "warning" : "error", base->path, where, why, wanted,
          force ? "merging onto these weights as --force-base says"
                : "pass the base weights that run started from (--force-base merges onto these "
                  "anyway)");
  return force ? 0 : -1;
}

/* The checkpoint's /lora (its recorded config) against the one given: the adapters mean
 * something only with the rank, alpha and params they were trained with. -1 (said) when they
 * differ. */
static int check_lora(const FeBuild *b, const Weights *in) {
  const char *text = in->ck ? rt_ckpt_config(in->ck) : "";
  json_object *cfg = text[0] ? json_tokener_parse(text) : NULL, *l = NULL, *v;
  if (!cfg || !json_object_object_get_ex(cfg, "lora", &l)) {
    json_object_put(cfg);
    return 0;
  }
  char where[4200], here[64], there[64];
  ckpt_where(in, where, sizeof where);
  static const char *const keys[] = {"rank", "alpha", "params"};
  int rc = 0;
  for (size_t k = 0; k < sizeof keys / sizeof keys[0] && rc == 0; k++) {
    if (!json_object_object_get_ex(l, keys[k], &v)) continue;
    bool same;
    if (k == 2) {
      same = strcmp(json_object_get_string(v), fe_get_str(fe_lora(b)->node, "params")) == 0;
      if (!same)
        fprintf(stderr,
                "error: --merge-lora: /lora/params is \"%s\", but the adapters of %s were trained "
                "with \"%s\" (expected the run's --set /lora/params)\n",
                fe_get_str(fe_lora(b)->node, "params"), where, json_object_get_string(v));
    } else {
      double a = k == 0 ? (double)fe_get_int(fe_lora(b)->node, "rank")
                        : fe_get_float(fe_lora(b)->node, "alpha");
      double c = json_object_get_double(v);
      same = a == c;
      snprintf(here, sizeof here, "%.17g", a);
      snprintf(there, sizeof there, "%.17g", c);
      char scale[96] = "";
      if (k == 1)
        snprintf(scale, sizeof scale, "the scale alpha/rank would be %g instead of %g; ",
                 fe_lora(b)->scale, c / (double)fe_get_int(fe_lora(b)->node, "rank"));
      if (!same)
        fprintf(stderr,
                "error: --merge-lora: /lora/%s is %s, but the adapters of %s were trained with %s "
                "(%sexpected the run's --set /lora/%s=%s)\n",
                keys[k], here, where, there, scale, keys[k], there);
    }
    if (!same) rc = -1;
  }
  json_object_put(cfg);
  return rc;
}

static int write_merged(const FeBuild *b, const Weights *in, const Weights *base, const char *out) {
  RtTensor *ts = calloc((size_t)b->nparams + 1, sizeof *ts);
  int n = 0, rc = ts ? 0 : -1;
  for (int i = 0; i < b->nparams && rc == 0; i++) {
    const FeParam *p = &b->params[i];
    if (p->adapter) continue;
    RtTensor *t = &ts[n++];
    *t = (RtTensor){.name = p->path, .dtype = RT_DT_F32, .ndim = p->rank};
    memcpy(t->shape, p->shape, sizeof(int64_t) * (size_t)p->rank);
    t->data = merged(b, p, in, base);
    if (!t->data) rc = -1;
  }
  RtError err;
  if (rc == 0 && rt_st_write(out, ts, n, NULL, 0, NULL, NULL, &err) != 0) {
    fprintf(stderr, "error: -o %s: %s\n", out, err.msg);
    rc = -1;
  }
  for (int i = 0; i < n; i++) free((void *)ts[i].data);
  free(ts);
  return rc;
}

int merge_lora(const FeBuild *b, const char *model, const char *in, const char *base,
               bool force_base, const char *out) {
  if (!fe_lora(b)) {
    fprintf(stderr,
            "error: --merge-lora: %s has no /lora (expected the config the adapters were "
            "trained with: add --apply lora and the run's --set /lora/...)\n",
            model);
    return -1;
  }
  Weights win, wbase;
  if (weights_open(&win, in)) return -1;
  int rc = check_has_adapters(b, &win) || check_lora(b, &win);
  bool own_base = base != NULL && rc == 0;
  if (own_base && weights_open(&wbase, base)) {
    own_base = false;
    rc = -1;
  }
  if (rc == 0) rc = check_base(b, &win, own_base ? &wbase : &win, force_base);
  if (rc == 0) rc = write_merged(b, &win, own_base ? &wbase : &win, out);
  if (rc == 0)
    printf("merged the adapters of %d projections (scale %g) into %s\n", fe_lora(b)->matched,
           fe_lora(b)->scale, out);
  if (own_base) weights_close(&wbase);
  weights_close(&win);
  return rc;
}
