/*
 * fe_test.c: scratch directories, resolution wrappers and the runner for the
 * frontend's CUnit tests.
 */
#include "tests/frontend/fe_test.h"

#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const FE_T_TINY =
    "{\n"
    "  \"kind\": \"trainer\",\n"
    "  \"max_steps\": 200,\n"
    "  \"model\": {\n"
    "    \"kind\": \"causal_lm\", \"vocab_size\": 256, \"dim\": 64,\n"
    "    \"pos_emb\": {\"kind\": \"learned_pos_emb\", \"max_len\": 128},\n"
    "    \"decoder\": {\n"
    "      \"kind\": \"decoder\", \"num_layers\": 2,\n"
    "      \"layer\": {\n"
    "        \"kind\": \"transformer_layer\",\n"
    "        \"norm\": {\"kind\": \"layer_norm\"},\n"
    "        \"self_attention\": {\"kind\": \"attention\", \"num_heads\": 4},\n"
    "        \"feed_forward\": {\"kind\": \"feed_forward\", \"activation\": \"gelu\", "
    "\"hidden_dim_scale\": 4}\n"
    "      },\n"
    "      \"output_norm\": {\"kind\": \"layer_norm\"}\n"
    "    },\n"
    "    \"lm_head\": {\"kind\": \"lm_head\", \"tied\": true}\n"
    "  },\n"
    "  \"learner\": {\n"
    "    \"kind\": \"learner\",\n"
    "    \"optimizer\": {\"kind\": \"adamw\", \"learning_rate\": 0.003},\n"
    "    \"schedule\": {\"kind\": \"cosine_schedule\", \"warmup_steps\": 10}\n"
    "  },\n"
    "  \"input\": {\"kind\": \"lm_input\", \"seq_len\": 64, \"global_batch_size\": 8}\n"
    "}\n";

static char scratch[4096];
static char pathbuf[8192];

const char *fe_t_dir(void) { return scratch; }

const char *fe_t_path(const char *name) {
  snprintf(pathbuf, sizeof pathbuf, "%s/%s", scratch, name);
  return pathbuf;
}

static void mkparents(const char *path) {
  char tmp[8192];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + strlen(scratch) + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    mkdir(tmp, 0755);
    *p = '/';
  }
}

const char *fe_t_write(const char *name, const char *text) {
  const char *path = fe_t_path(name);
  mkparents(path);
  FILE *f = fopen(path, "wb");
  CU_ASSERT_FATAL(f != NULL);
  fwrite(text, 1, strlen(text), f);
  fclose(f);
  return path;
}

const char *fe_t_write_tiny(void) { return fe_t_write("tiny.json", FE_T_TINY); }

void fe_t_collect(FeT *t) {
  size_t len = strlen(t->msgs);
  for (int i = 0; i < t->d.n; i++) {
    int w = snprintf(t->msgs + len, sizeof t->msgs - len, "%s\n", t->d.msgs[i]);
    if (w < 0 || (size_t)w >= sizeof t->msgs - len) break;
    len += (size_t)w;
  }
}

void fe_t_resolve(FeT *t, const char *file, const char *target, const char *const *apply,
                  const char *const *sets) {
  memset(t, 0, sizeof *t);
  fe_diag_init(&t->d);
  FeOptions o = {0};
  o.target = target;
  o.apply = (const char **)apply;
  while (apply && apply[o.napply]) o.napply++;
  o.sets = (const char **)sets;
  while (sets && sets[o.nsets]) o.nsets++;
  char f[8192];
  snprintf(f, sizeof f, "%s", file); /* file may live in pathbuf */
  t->tree = fe_resolve(&t->d, f, &o, &t->rule);
  fe_t_collect(t);
  CHECK_MSG(t->tree != NULL || t->d.n > 0, "failure without a message");
}

void fe_t_done(FeT *t) {
  json_object_put(t->tree);
  fe_diag_free(&t->d);
  t->tree = NULL;
}

char *fe_t_canon_at(json_object *root, const char *path) {
  json_object *o = fe_path_get(root, path);
  if (!o) return strdup("<absent>");
  return fe_json_canonical(o);
}

int64_t fe_t_params(FeT *t, int64_t devices, FeBuild *out) {
  FeBuild b;
  if (fe_build(&b, &t->d, "test", t->tree, devices) != 0) {
    t->msgs[0] = 0;
    fe_t_collect(t);
    fe_build_free(&b);
    return -1;
  }
  int64_t total = 0;
  for (int i = 0; i < b.nparams; i++) total += fe_param_numel(&b.params[i]);
  if (out)
    *out = b;
  else
    fe_build_free(&b);
  return total;
}

int64_t fe_t_int(json_object *root, const char *path) {
  json_object *o = fe_path_get(root, path);
  if (json_object_get_type(o) != json_type_int) {
    CHECK_MSG(false, "no integer at %s", path);
    return INT64_MIN;
  }
  return json_object_get_int64(o);
}

double fe_t_float(json_object *root, const char *path) {
  json_object *o = fe_path_get(root, path);
  if (json_object_get_type(o) != json_type_double && json_object_get_type(o) != json_type_int) {
    CHECK_MSG(false, "no number at %s", path);
    return -1e300;
  }
  return json_object_get_double(o);
}

const char *fe_t_str(json_object *root, const char *path) {
  json_object *o = fe_path_get(root, path);
  if (json_object_get_type(o) != json_type_string) return NULL;
  return json_object_get_string(o);
}

/* ---- fixture ------------------------------------------------------------ */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

void fe_t_before_each(void) {
  const char *base = getenv("TMPDIR");
  snprintf(scratch, sizeof scratch, "%s/axlc-fe-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(scratch)) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    abort();
  }
}

void fe_t_after_each(void) {
  if (!getenv("AXLC_TEST_KEEP")) nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
