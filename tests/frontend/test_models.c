/*
 * test_models.c: the shipped models (models/<name>.json, found through
 * AXLC_MODELS_DIR or argv's --models DIR): published parameter counts,
 * canonical round trips, and the rope / moe modifiers on every model.
 */
#include <dirent.h>
#include <stdlib.h>

#include "frontend/modules/lora.h"
#include "tests/frontend/fe_test.h"

static const char *models_dir = AXLC_MODELS_DIR;

static char mpath[16384 + 256];
static const char *model(const char *name) {
  snprintf(mpath, sizeof mpath, "%s/%s", models_dir, name);
  return mpath;
}

/* Sorted names of models/<name>.json; returns the count. */
static int list_models(char names[][256], int max) {
  DIR *d = opendir(models_dir);
  if (!d) {
    CHECK_MSG(false, "cannot open %.1500s", models_dir);
    CU_FAIL_FATAL("models dir");
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    size_t l = strlen(e->d_name);
    if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0 && l < 256)
      snprintf(names[n++], 256, "%s", e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
  return n;
}

static const char *const *mods_for(int which, char bufs[2][4096], const char *list[3]) {
  int n = 0;
  if (which & 1)
    snprintf(bufs[n], 4096, "%s/modifiers/rope.json", models_dir), list[n] = bufs[n], n++;
  if (which & 2)
    snprintf(bufs[n], 4096, "%s/modifiers/moe.json", models_dir), list[n] = bufs[n], n++;
  list[n] = NULL;
  return list;
}

/* ---- published counts --------------------------------------------------------- */

static int64_t count(const char *name, const char *const *apply) {
  FeT t;
  fe_t_resolve(&t, model(name), NULL, apply, NULL);
  if (!t.tree) {
    CHECK_MSG(false, "%.1500s did not resolve:\n%.1500s", name, t.msgs);
    fe_t_done(&t);
    return -1;
  }
  int64_t n = fe_t_params(&t, 0, NULL);
  if (n < 0) CHECK_MSG(false, "%.1500s did not build:\n%.1500s", name, t.msgs);
  fe_t_done(&t);
  return n;
}

static void test_published_counts(void) {
  CHECK_INT(count("gpt2-124m.json", NULL), 124439808LL);
  CHECK_INT(count("llama2-7b.json", NULL), 6738415616LL);
  CHECK_INT(count("llama2-70b.json", NULL), 68976648192LL);
  CHECK_INT(count("mixtral-8x7b.json", NULL), 46702792704LL);
  CHECK_INT(count("tiny-lm.json", NULL), FE_T_TINY_PARAMS);
}

static void test_tiny_lm_with_moe(void) {
  char bufs[2][4096];
  const char *list[3];
  /* moe.json: 8 experts, activation and hidden_dim_scale kept (gelu, 4 -> 256):
   * per layer the 2*64*256 MLP becomes 8 * 2*64*256 plus a (64, 8) router. */
  int64_t want = FE_T_TINY_PARAMS + 2 * (8 * 2 * 64 * 256 + 64 * 8 - 2 * 64 * 256);
  CHECK_INT(want, 583296);
  CHECK_INT(count("tiny-lm.json", mods_for(2, bufs, list)), want);
  /* rope adds no parameters */
  CHECK_INT(count("tiny-lm.json", mods_for(1, bufs, list)), FE_T_TINY_PARAMS);
  CHECK_INT(count("tiny-lm.json", mods_for(3, bufs, list)), want);
}

/* Counts nodes of `kind` in a tree. */
static int count_kind(json_object *o, const char *kind) {
  int n = 0;
  if (json_object_get_type(o) == json_type_object) {
    const char *k = fe_node_kind(o);
    if (k && strcmp(k, kind) == 0) n++;
    json_object_object_foreach(o, key, v) {
      (void)key;
      n += count_kind(v, kind);
    }
  } else if (json_object_get_type(o) == json_type_array) {
    for (size_t i = 0; i < json_object_array_length(o); i++)
      n += count_kind(json_object_array_get_idx(o, i), kind);
  }
  return n;
}

/* Every shipped model resolves with rope.json, moe.json and both; with
 * moe.json every feed_forward is a moe, and the count grows by what the
 * architecture says: per layer (E-1) copies of the dense MLP plus a (D, E)
 * router. */
static void test_modifiers_on_every_model(void) {
  char names[64][256], bufs[2][4096];
  const char *list[3];
  int n = list_models(names, 64);
  CHECK(n >= 10);
  for (int i = 0; i < n; i++) {
    FeT t;
    fe_t_resolve(&t, model(names[i]), NULL, NULL, NULL);
    REQUIRE_MSG(t.tree != NULL, "%.1500s:\n%.1500s", names[i], t.msgs);
    int dense_ffn = count_kind(t.tree, "feed_forward");
    /* the model's own rope theta, which rope.json keeps; 10000 (the default) without one */
    json_object *rope = fe_path_get(t.tree, "/model/decoder/layer/self_attention/rope");
    double theta = json_object_get_type(rope) == json_type_object
                       ? json_object_get_double(json_object_object_get(rope, "theta"))
                       : 10000.0;
    int64_t dim = fe_t_int(t.tree, "/model/dim"),
            layers = fe_t_int(t.tree, "/model/decoder/num_layers");
    FeBuild b;
    int64_t base = fe_t_params(&t, 0, &b);
    CHECK(base > 0);
    int64_t mlp = 0; /* dense MLP parameters over all layers */
    for (int p = 0; p < b.nparams; p++)
      if (strstr(b.params[p].path, "/feed_forward/")) mlp += fe_param_numel(&b.params[p]);
    if (base > 0) fe_build_free(&b);
    fe_t_done(&t);

    for (int which = 1; which <= 3; which++) {
      fe_t_resolve(&t, model(names[i]), NULL, mods_for(which, bufs, list), NULL);
      CHECK_MSG(t.tree != NULL, "%.1500s with modifiers %d:\n%.1500s", names[i], which, t.msgs);
      if (!t.tree) {
        fe_t_done(&t);
        continue;
      }
      if (which & 1) { /* a model's own theta stays (mixtral 1e6, fuji-1b 5e5) */
        double got_theta = fe_t_float(t.tree, "/model/decoder/layer/self_attention/rope/theta");
        CHECK_MSG(got_theta == theta, "%.1500s: rope theta %g, expected %g", names[i], got_theta,
                  theta);
      }
      int64_t got = fe_t_params(&t, 0, NULL);
      if (which & 2) {
        CHECK_INT(count_kind(t.tree, "feed_forward"), 0);
        CHECK(count_kind(t.tree, "moe") >= 1);
        if (dense_ffn) {
          CHECK_INT(fe_t_int(t.tree, "/model/decoder/layer/feed_forward/num_experts"), 8);
          int64_t want = base + 7 * mlp + layers * dim * 8;
          CHECK_INT(got, want);
        } else {
          CHECK_INT(got, base); /* already a mixture of experts: untouched */
        }
      } else {
        CHECK_INT(got, base);
      }
      fe_t_done(&t);
    }
  }
}

/* ---- canonical round trip ------------------------------------------------------ */

/* Resolves `file`, writes its canonical text, resolves that and compares. */
static void round_trip(const char *file, const char *const *apply, const char *label) {
  FeT t;
  fe_t_resolve(&t, file, NULL, apply, NULL);
  REQUIRE_MSG(t.tree != NULL, "%.1500s:\n%.1500s", label, t.msgs);
  char *first = fe_json_canonical(t.tree);
  fe_t_done(&t);
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", fe_t_write("canonical.json", first));
  fe_t_resolve(&t, copy, NULL, NULL, NULL);
  REQUIRE_MSG(t.tree != NULL, "%.1500s, canonical text:\n%.1500s", label, t.msgs);
  char *second = fe_json_canonical(t.tree);
  CHECK_STR(second, first);
  /* and the library parses its own text to the same text */
  FeDiag d;
  fe_diag_init(&d);
  json_object *o = fe_json_parse(&d, first, strlen(first), "mem");
  char *third = o ? fe_json_canonical(o) : NULL;
  CHECK_STR(third, first);
  free(third);
  json_object_put(o);
  fe_diag_free(&d);
  free(first);
  free(second);
  fe_t_done(&t);
}

static void test_round_trip_every_model(void) {
  char names[64][256], bufs[2][4096];
  const char *list[3];
  int n = list_models(names, 64);
  CHECK(n >= 10);
  for (int i = 0; i < n; i++) {
    round_trip(model(names[i]), NULL, names[i]);
    round_trip(model(names[i]), mods_for(3, bufs, list), names[i]);
  }
}

/* Every shipped model's training step, on one device and with the rope
 * and moe modifiers, is within the bound on tensor sizes (so ir, compile
 * and run accept them). */
static void test_step_fits_every_model(void) {
  char names[64][256], bufs[2][4096];
  const char *list[3];
  int n = list_models(names, 64);
  for (int i = 0; i < n; i++)
    for (int which = 0; which < 4; which += 3) {
      FeT t;
      FeBuild b;
      fe_t_resolve(&t, model(names[i]), NULL, mods_for(which, bufs, list), NULL);
      REQUIRE_RESOLVED(&t);
      int64_t nparams = fe_t_params(&t, 0, &b);
      CHECK(nparams > 0);
      CHECK_MSG(b.step_error == NULL, "%.1500s: %.1500s", names[i],
                b.step_error ? b.step_error : "");
      fe_build_free(&b);
      fe_t_done(&t);
    }
}

static void test_canonical_text(void) {
  /* floats stay floats, shortest text that reads back, keys sorted */
  FeDiag d;
  fe_diag_init(&d);
  const char *in = "{\"b\": 4.0, \"a\": [1, 2.5, 1e-8, 2.6666666666666665, 500000.0, \"x\\n\"],"
                   " \"c\": {}, \"d\": [], \"e\": null}";
  json_object *o = fe_json_parse(&d, in, strlen(in), "mem");
  CU_ASSERT_FATAL(o != NULL);
  char *s = fe_json_canonical(o);
  CHECK_STR(s, "{\n  \"a\": [1, 2.5, 1e-08, 2.6666666666666665, 5e+05, \"x\\n\"],\n  \"b\": 4.0,\n"
               "  \"c\": {},\n  \"d\": [],\n  \"e\": null\n}\n");
  free(s);
  json_object_put(o);
  fe_diag_free(&d);
}

/* ---- LoRA on every model -------------------------------------------------------- */

/* The lora modifier adapts the four attention projections of every layer of every shipped
 * model: A takes the weight's input dim and its partition, B the output dim and its partition,
 * and everything else is frozen. */
static void check_lora(const char *name, const char *lora) {
  const char *apply[2] = {lora, NULL};
  FeT t;
  fe_t_resolve(&t, model(name), NULL, apply, NULL);
  FeBuild b;
  if (!t.tree || fe_t_params(&t, 0, &b) < 0) {
    CHECK_MSG(false, "%.1500s with lora.json:\n%.1500s", name, t.msgs);
    CU_FAIL("lora");
    fe_t_done(&t);
    return;
  }
  int64_t layers = fe_t_int(t.tree, "/model/decoder/num_layers"), want = 0, got;
  CHECK_INT(fe_lora(&b)->matched, 4 * layers);
  for (int i = 0; i < b.nparams; i++) {
    const FeParam *p = &b.params[i];
    if (!p->adapter) {
      CHECK(p->frozen);
      continue;
    }
    CHECK(!p->frozen);
    const FeParam *w = &b.params[i - (strstr(p->path, "lora_a") ? 1 : 2)]; /* declared after W */
    bool a = strstr(p->path, "lora_a") != NULL;
    CHECK_INT(p->shape[a ? 0 : 1], w->shape[a ? 0 : 1]);
    CHECK_INT(p->shape[a ? 1 : 0], 4);
    CHECK_STR(p->spec[a ? 0 : 1], w->spec[a ? 0 : 1]);
    CHECK_STR(p->spec[a ? 1 : 0], "");
    want += fe_param_numel(p);
  }
  fe_trainable(&b, &got);
  CHECK_INT(got, want);
  if (!strcmp(name, "llama2-7b.json")) CHECK_INT(got, 32 * 4 * 4 * (4096 + 4096));
  fe_build_free(&b);
  fe_t_done(&t);
}

static void test_lora_on_every_model(void) {
  char names[64][256], lora[4096];
  snprintf(lora, sizeof lora, "%s/modifiers/lora.json", models_dir);
  int n = list_models(names, 64);
  CHECK(n >= 10);
  for (int i = 0; i < n; i++) check_lora(names[i], lora);
}

static const TestCase cases[] = {
    {"lora_on_every_model", test_lora_on_every_model},
    {"published_counts", test_published_counts},
    {"tiny_lm_with_moe", test_tiny_lm_with_moe},
    {"modifiers_on_every_model", test_modifiers_on_every_model},
    {"round_trip_every_model", test_round_trip_every_model},
    {"step_fits_every_model", test_step_fits_every_model},
    {"canonical_text", test_canonical_text},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--models") == 0) {
    models_dir = argv[2];
    argv[2] = argv[0];
    argc -= 2, argv += 2;
  }
  return fe_t_main(argc, argv, "frontend_models", cases);
}
