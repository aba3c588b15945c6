/*
 * test_modifiers.c: every modifier kind (set, replace, mesh, remat,
 * partition, precision, microbatch, lora, chain), applied from a config's `modifiers`, from --apply
 * files and from --set, checked on the resolved canonical tree.
 */
#include <stdlib.h>

#include "frontend/modules/lora.h"
#include "tests/frontend/fe_test.h"

/* Writes cfg.json = tiny.json plus `mods` (JSON list text) as its modifiers,
 * and resolves it with the given --apply / --set lists. */
static void resolve_mods(FeT *t, const char *mods, const char *const *apply,
                         const char *const *sets) {
  fe_t_write_tiny();
  char text[4096];
  snprintf(text, sizeof text, "{\"base\": \"tiny.json\", \"modifiers\": %s}", mods);
  char cfg[4096];
  snprintf(cfg, sizeof cfg, "%s", fe_t_write("cfg.json", text));
  fe_t_resolve(t, cfg, NULL, apply, sets);
}

static char cfgpath[4096];
static const char *cfg_file(void) {
  snprintf(cfgpath, sizeof cfgpath, "%s/cfg.json", fe_t_dir());
  return cfgpath;
}

/* ---- set ---------------------------------------------------------------- */

static void test_set_existing_key(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"set\", \"path\": \"/model/decoder/num_layers\", \"value\": 3}]",
               NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/model/decoder/num_layers"), 3);
  /* one more layer: 2 norms (2*64*2) + attention 4*64*64 + MLP 2*64*256 */
  CHECK_INT(fe_t_params(&t, 0, NULL), FE_T_TINY_PARAMS + 49408);
  fe_t_done(&t);
}

static void test_set_schema_key_not_present(void) {
  FeT t;
  resolve_mods(
      &t,
      "[{\"kind\": \"set\", \"path\": \"/seed\", \"value\": 7},"
      " {\"kind\": \"set\", \"path\": \"/model/decoder/remat_policy\", \"value\": \"full\"},"
      " {\"kind\": \"set\", \"path\": \"/model/decoder/layer/self_attention/num_kv_heads\","
      "  \"value\": 2}]",
      NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/seed"), 7);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/remat_policy"), "full");
  CHECK_INT(fe_t_int(t.tree, "/model/decoder/layer/self_attention/num_kv_heads"), 2);
  /* k_proj and v_proj shrink from 64x64 to 64x32 in both layers */
  CHECK_INT(fe_t_params(&t, 0, NULL), FE_T_TINY_PARAMS - 2 * 2 * 64 * 32);
  fe_t_done(&t);
}

static void test_set_array_element(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write(
      "cfg.json",
      "{\"base\": \"tiny.json\",\n"
      " \"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, -1, 1, 1, 1, 1]},\n"
      " \"modifiers\": [{\"kind\": \"set\", \"path\": \"/mesh/shape/3\", \"value\": 2},\n"
      "                 {\"kind\": \"set\", \"path\": \"/mesh/axes\",\n"
      "                  \"value\": [\"pipeline\", \"data\", \"expert\", \"fsdp\", \"seq\", "
      "\"model\"]},\n"
      "                 {\"kind\": \"set\", \"path\": \"/mesh/axes/4\", \"value\": \"seq\"}]}\n");
  fe_t_resolve(&t, cfg_file(), "cpu-4", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  char *shape = fe_t_canon_at(t.tree, "/mesh/shape");
  CHECK_STR(shape, "[1, -1, 1, 2, 1, 1]\n");
  free(shape);
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 4, &b), FE_T_TINY_PARAMS);
  CHECK_INT(b.mesh.shape[1], 2); /* -1 takes 4 / 2 */
  CHECK_INT(b.mesh.shape[3], 2);
  fe_build_free(&b);
  fe_t_done(&t);

  /* past the end of the list */
  fe_t_write("cfg.json",
             "{\"base\": \"tiny.json\",\n"
             " \"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, -1, 1, 1, 1, 1]},\n"
             " \"modifiers\": [{\"kind\": \"set\", \"path\": \"/mesh/shape/6\", \"value\": 2}]}\n");
  fe_t_resolve(&t, cfg_file(), NULL, NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), "/mesh/shape/6",
              "no element \"6\" in the list at /mesh/shape (expected an index below 6)");
  fe_t_done(&t);
}

static void test_set_missing_parent(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"set\", \"path\": \"/model/nope/x\", \"value\": 1}]", NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), ": /model/nope/x: ", "the config has no object at /model/nope");
  fe_t_done(&t);
}

static void test_set_unknown_field(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"set\", \"path\": \"/model/dimm\", \"value\": 1}]", NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), ": /model/dimm: ", "no field \"dimm\"",
              "kind \"causal_lm\" declares no such field");
  fe_t_done(&t);
}

static void test_set_cli(void) {
  FeT t;
  const char *sets[] = {"/model/decoder/layer/feed_forward/activation=relu", /* bare string */
                        "/max_steps=50", "/learner/optimizer/learning_rate=1e-3",
                        "/model/pos_emb={\"kind\": \"learned_pos_emb\", \"max_len\": 64}", NULL};
  resolve_mods(&t, "[]", NULL, sets);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/layer/feed_forward/activation"), "relu");
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 50);
  CHECK(fe_t_float(t.tree, "/learner/optimizer/learning_rate") == 1e-3);
  CHECK_INT(fe_t_int(t.tree, "/model/pos_emb/max_len"), 64);
  CHECK_INT(fe_t_params(&t, 0, NULL), FE_T_TINY_PARAMS - 64 * 64);
  fe_t_done(&t);
}

static void test_set_cli_without_equals(void) {
  FeT t;
  const char *sets[] = {"/max_steps", NULL};
  resolve_mods(&t, "[]", NULL, sets);
  CHECK_FAILS(&t, "--set: \"/max_steps\" is not PATH=VALUE");
  fe_t_done(&t);
  const char *sets2[] = {"=5", NULL};
  resolve_mods(&t, "[]", NULL, sets2);
  CHECK_FAILS(&t, "--set: \"=5\" is not PATH=VALUE");
  fe_t_done(&t);
  const char *sets3[] = {"max_steps=5", NULL};
  resolve_mods(&t, "[]", NULL, sets3);
  CHECK_FAILS(&t, "--set: max_steps: expected a path of the form /a/b/c");
  fe_t_done(&t);
}

/* ---- replace ------------------------------------------------------------ */

static void test_replace_keeps_explicit_fields(void) {
  FeT t;
  fe_t_write_tiny();
  /* layer_norm set eps and bias explicitly; rms_norm has eps but no bias */
  fe_t_write(
      "cfg.json",
      "{\"base\": \"tiny.json\",\n"
      " \"model\": {\"decoder\": {\"layer\": {\"norm\": {\"kind\": \"layer_norm\", \"eps\": 1e-6,"
      " \"bias\": false}}}},\n"
      " \"modifiers\": [{\"kind\": \"replace\", \"target\": \"layer_norm\",\n"
      "                  \"config\": {\"kind\": \"rms_norm\"}},\n"
      "                 {\"kind\": \"replace\", \"target\": \"feed_forward\",\n"
      "                  \"config\": {\"kind\": \"moe\", \"num_experts\": 4}}]}\n");
  fe_t_resolve(&t, cfg_file(), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/layer/norm/kind"), "rms_norm");
  CHECK(fe_t_float(t.tree, "/model/decoder/layer/norm/eps") == 1e-6);
  CHECK(fe_path_get(t.tree, "/model/decoder/layer/norm/bias") == NULL);
  /* the output norm set nothing but its kind: rms_norm defaults */
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/output_norm/kind"), "rms_norm");
  CHECK(fe_t_float(t.tree, "/model/decoder/output_norm/eps") == 1e-5);
  const char *ff = "/model/decoder/layer/feed_forward";
  char p[256];
  snprintf(p, sizeof p, "%s/kind", ff);
  CHECK_STR(fe_t_str(t.tree, p), "moe");
  snprintf(p, sizeof p, "%s/num_experts", ff);
  CHECK_INT(fe_t_int(t.tree, p), 4);
  snprintf(p, sizeof p, "%s/activation", ff);
  CHECK_STR(fe_t_str(t.tree, p), "gelu");
  snprintf(p, sizeof p, "%s/hidden_dim_scale", ff);
  CHECK(fe_t_float(t.tree, p) == 4.0);
  /* rms norms: 3 of (64) instead of 5 of (64+64) minus..., computed:
   * norms 2 layers * 2 * 64 + 64 = 320 (was 2*2*128 + 128 = 640);
   * moe per layer: gate 64*4 + 4 * 2*64*256 = 131328 (was 32768). */
  CHECK_INT(fe_t_params(&t, 0, NULL), FE_T_TINY_PARAMS - 640 + 320 + 2 * (131328 - 32768));
  fe_t_done(&t);
}

static void test_replace_explicit_fields_win(void) {
  FeT t;
  resolve_mods(&t,
               "[{\"kind\": \"replace\", \"target\": \"feed_forward\", \"config\":"
               " {\"kind\": \"moe\", \"num_experts\": 2, \"top_k\": 1, \"activation\": \"relu\","
               "  \"hidden_dim_scale\": 2}}]",
               NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/layer/feed_forward/activation"), "relu");
  CHECK(fe_t_float(t.tree, "/model/decoder/layer/feed_forward/hidden_dim_scale") == 2.0);
  CHECK_INT(fe_t_int(t.tree, "/model/decoder/layer/feed_forward/top_k"), 1);
  fe_t_done(&t);
}

static void test_replace_root(void) {
  FeT t;
  resolve_mods(&t,
               "[{\"kind\": \"replace\", \"target\": \"trainer\", \"config\":"
               " {\"kind\": \"trainer\", \"max_steps\": 70, \"seed\": 3}}]",
               NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 70);
  CHECK_INT(fe_t_int(t.tree, "/seed"), 3);
  CHECK_INT(fe_t_int(t.tree, "/model/dim"), 64); /* kept from the old root */
  CHECK_INT(fe_t_params(&t, 0, NULL), FE_T_TINY_PARAMS);
  fe_t_done(&t);
}

static void test_replace_unknown_target(void) {
  FeT t;
  resolve_mods(&t,
               "[{\"kind\": \"replace\", \"target\": \"feedforward\", \"config\":"
               " {\"kind\": \"moe\", \"num_experts\": 2}}]",
               NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), "/modifiers/0/target: ", "unknown module kind \"feedforward\"",
              "did you mean \"feed_forward\"?");
  fe_t_done(&t);
  resolve_mods(&t,
               "[{\"kind\": \"replace\", \"target\": \"feed_forward\", \"config\":"
               " {\"kind\": \"mo\", \"num_experts\": 2}}]",
               NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), ": /modifiers/0/config/kind: unknown module kind \"mo\"",
              "did you mean \"moe\"?");
  fe_t_done(&t);
}

/* ---- mesh ----------------------------------------------------------------- */

static void test_mesh_modifier(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"mesh\", \"shape\": [1, 1, 1, -1, 1, 1]}]", NULL, NULL);
  fe_t_done(&t);
  fe_t_resolve(&t, cfg_file(), "cpu-4", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/mesh/kind"), "device_mesh");
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 4, &b), FE_T_TINY_PARAMS);
  CHECK_INT(b.mesh.n, 6);
  CHECK_STR(b.mesh.axes[3], "fsdp");
  CHECK_INT(b.mesh.shape[3], 4);
  CHECK_INT(b.mesh.shape[1], 1);
  CHECK_INT(b.mesh.devices, 4);
  fe_build_free(&b);
  fe_t_done(&t);

  const char *apply[] = {NULL, NULL};
  apply[0] =
      fe_t_write("mesh2.json", "{\"kind\": \"mesh\", \"axes\": [\"data\", \"fsdp\", \"model\"],"
                               " \"shape\": [-1, 1, 2]}");
  char a0[4096];
  snprintf(a0, sizeof a0, "%s", apply[0]);
  apply[0] = a0;
  fe_t_resolve(&t, cfg_file(), "cpu-8", apply, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_params(&t, 8, &b), FE_T_TINY_PARAMS);
  CHECK_INT(b.mesh.n, 3);
  CHECK_STR(b.mesh.axes[0], "data");
  CHECK_STR(b.mesh.axes[2], "model");
  CHECK_INT(b.mesh.shape[0], 4);
  CHECK_INT(b.mesh.shape[1], 1);
  CHECK_INT(b.mesh.shape[2], 2);
  fe_build_free(&b);
  fe_t_done(&t);
}

/* ---- remat -------------------------------------------------------------- */

static void test_remat(void) {
  FeT t;
  resolve_mods(&t,
               "[{\"kind\": \"remat\", \"path\": \"/model/decoder\", \"policy\": \"save_dots\"},"
               " {\"kind\": \"remat\", \"path\": \"/model/decoder/layer\","
               "  \"policy\": {\"save\": [\"q_proj\", \"k_.*\"]}}]",
               NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/remat_policy"), "save_dots");
  char *pol = fe_t_canon_at(t.tree, "/model/decoder/layer/remat_policy");
  CHECK_STR(pol, "{\n  \"offload\": [],\n  \"save\": [\"q_proj\", \"k_.*\"]\n}\n");
  free(pol);
  fe_t_done(&t);
}

static void test_remat_path_without_policy(void) {
  FeT t;
  resolve_mods(&t,
               "[{\"kind\": \"remat\", \"path\": \"/model/decoder/layer/self_attention\","
               " \"policy\": \"full\"}]",
               NULL, NULL);
  CHECK_FAILS(&t, cfg_file(),
              ": /model/decoder/layer/self_attention: ", "kind \"attention\" takes no remat policy",
              "expected a module with a \"remat_policy\" field");
  fe_t_done(&t);
  resolve_mods(&t, "[{\"kind\": \"remat\", \"path\": \"/model/encoder\", \"policy\": \"full\"}]",
               NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), ": /model/encoder: the config has nothing at this path");
  fe_t_done(&t);
}

/* ---- partition ---------------------------------------------------------- */

static const FeParam *find_param(const FeBuild *b, const char *path) {
  for (int i = 0; i < b->nparams; i++)
    if (strcmp(b->params[i].path, path) == 0) return &b->params[i];
  CHECK_MSG(false, "no parameter %s", path);
  return NULL;
}

static void test_partition_merges(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write(
      "cfg.json",
      "{\"base\": \"tiny.json\",\n"
      " \"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 1, 1, 2, 1, 2]},\n"
      " \"model\": {\"decoder\": {\"layer\": {\"self_attention\": {\"param_partition_specs\":\n"
      "   {\"q_proj\": [\"fsdp\", \"model\"], \"k_proj\": [\"fsdp\", \"model\"],\n"
      "    \"v_proj\": [\"fsdp\", \"model\"], \"o_proj\": [\"model\", \"fsdp\"]}}}}}}\n");
  fe_t_write(
      "part.json",
      "{\"kind\": \"partition\", \"path\": \"/model/decoder/layer/self_attention\",\n"
      " \"specs\": {\"q_proj\": [null, [\"fsdp\", \"model\"]], \"k_proj\": [\"model\", null]}}\n");
  char apply0[4096];
  snprintf(apply0, sizeof apply0, "%s/part.json", fe_t_dir());
  const char *apply[] = {apply0, NULL};
  fe_t_resolve(&t, cfg_file(), "cpu-4", apply, NULL);
  REQUIRE_RESOLVED(&t);
  char *specs = fe_t_canon_at(t.tree, "/model/decoder/layer/self_attention/param_partition_specs");
  CHECK_STR(specs, "{\n  \"k_proj\": [\"model\", null],\n  \"o_proj\": [\"model\", \"fsdp\"],\n"
                   "  \"q_proj\": [null, [\"fsdp\", \"model\"]],\n"
                   "  \"v_proj\": [\"fsdp\", \"model\"]\n}\n");
  free(specs);
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 4, &b), FE_T_TINY_PARAMS);
  const FeParam *q = find_param(&b, "model/decoder/layer_1/self_attention/q_proj/weight");
  const FeParam *k = find_param(&b, "model/decoder/layer_1/self_attention/k_proj/weight");
  const FeParam *o = find_param(&b, "model/decoder/layer_1/self_attention/o_proj/weight");
  if (q && k && o) {
    CHECK_STR(q->spec[0], "");
    CHECK_STR(q->spec[1], "fsdp|model");
    CHECK_STR(k->spec[0], "model");
    CHECK_STR(k->spec[1], "");
    CHECK_STR(o->spec[0], "model");
    CHECK_STR(o->spec[1], "fsdp");
  }
  fe_build_free(&b);
  fe_t_done(&t);
}

static void test_partition_unknown_param(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("cfg.json", "{\"base\": \"tiny.json\"}");
  fe_t_write("part.json",
             "{\"kind\": \"partition\", \"path\": \"/model/decoder/layer/feed_forward\",\n"
             " \"specs\": {\"linear3\": [\"fsdp\", \"model\"]}}\n");
  char apply0[4096];
  snprintf(apply0, sizeof apply0, "%s/part.json", fe_t_dir());
  const char *apply[] = {apply0, NULL};
  fe_t_resolve(&t, cfg_file(), NULL, apply, NULL);
  /* Schema validation passes; the module walk refuses the name. */
  CHECK_FAILS(&t, "/model/decoder/layer/feed_forward/param_partition_specs/linear3: ",
              "kind \"feed_forward\" has no parameter \"linear3\"",
              "(expected one of linear1|linear2)", "did you mean \"linear1\"?");
  fe_t_done(&t);
  /* Not a module with specs. */
  fe_t_write("part.json",
             "{\"kind\": \"partition\", \"path\": \"/model/decoder\", \"specs\": {\"w\": [null]}}");
  fe_t_resolve(&t, cfg_file(), NULL, apply, NULL);
  CHECK_FAILS(&t, apply0, ": /model/decoder: kind \"decoder\" takes no partition specs");
  fe_t_done(&t);
}

/* ---- chain and files ---------------------------------------------------- */

static void test_chain_nested_files(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("mods/a.json",
             "{\"kind\": \"chain\", \"modifiers\": [\n"
             "  \"sub/b.json\",\n"
             "  {\"kind\": \"chain\", \"modifiers\": [\n"
             "    {\"kind\": \"set\", \"path\": \"/seed\", \"value\": 5},\n"
             "    {\"kind\": \"chain\", \"modifiers\": [\"sub/deeper/c.json\"]}]}]}\n");
  fe_t_write("mods/sub/b.json", "{\"kind\": \"chain\", \"modifiers\": [\"deeper/c.json\","
                                " {\"kind\": \"set\", \"path\": \"/max_steps\", \"value\": 77}]}");
  fe_t_write("mods/sub/deeper/c.json",
             "{\"kind\": \"set\", \"path\": \"/model/decoder/num_layers\", \"value\": 1}");
  /* from a config's modifiers: relative to the config */
  fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"modifiers\": [\"mods/a.json\"]}");
  fe_t_resolve(&t, cfg_file(), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/seed"), 5);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 77);
  CHECK_INT(fe_t_int(t.tree, "/model/decoder/num_layers"), 1);
  fe_t_done(&t);
  /* from --apply: relative to the applied file, wherever the config is */
  fe_t_write("other/cfg2.json", "{\"base\": \"../tiny.json\"}");
  char cfg2[4096], a[4096];
  snprintf(cfg2, sizeof cfg2, "%s/other/cfg2.json", fe_t_dir());
  snprintf(a, sizeof a, "%s/mods/a.json", fe_t_dir());
  const char *apply[] = {a, NULL};
  fe_t_resolve(&t, cfg2, NULL, apply, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 77);
  CHECK_INT(fe_t_int(t.tree, "/model/decoder/num_layers"), 1);
  fe_t_done(&t);
  /* a reference that is not relative to the referring file does not resolve */
  fe_t_write("mods/sub/b.json", "{\"kind\": \"chain\", \"modifiers\": [\"sub/deeper/c.json\"]}");
  fe_t_resolve(&t, cfg_file(), NULL, NULL, NULL);
  char missing[4096];
  snprintf(missing, sizeof missing,
           "%s/mods/sub/b.json: /modifiers/0: sub/deeper/c.json: no "
           "such file (looked in %s/mods/sub;",
           fe_t_dir(), fe_t_dir());
  CHECK_FAILS(&t, missing);
  fe_t_done(&t);
}

static void test_precision(void) {
  FeT t;
  /* the modifier makes the policy node and sets only what it names */
  resolve_mods(&t, "[{\"kind\": \"precision\", \"compute\": \"bf16\"}]", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/precision/kind"), "precision_policy");
  CHECK_STR(fe_t_str(t.tree, "/precision/compute"), "bf16");
  CHECK_STR(fe_t_str(t.tree, "/precision/grads"), "f32");
  FePrecision p;
  fe_precision_facts(t.tree, &p);
  CHECK(p.compute == DT_BF16 && p.grads == DT_F32 && p.params == DT_F32);
  /* auto without bf16 dot instructions is f32; with them, bf16, and the origin says why */
  CHECK_STR(fe_t_str(t.tree, "/precision/compute"), "bf16");
  json_object_object_add(fe_get_child(t.tree, "precision"), "compute",
                         json_object_new_string("auto"));
  fe_precision_settle(&t.d, t.tree, true, "the host has avx512_bf16");
  CHECK_STR(fe_t_str(t.tree, "/precision/compute"), "bf16");
  CHECK_STR(fe_origin_key(fe_get_child(t.tree, "precision"), "compute"),
            "the host has avx512_bf16");
  fe_t_done(&t);
  resolve_mods(&t, "[{\"kind\": \"precision\", \"compute\": \"auto\", \"grads\": \"bf16\"}]", NULL,
               NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/precision/compute"), "f32");
  CHECK_STR(fe_t_str(t.tree, "/precision/grads"), "bf16");
  fe_t_done(&t);
  /* a rule's auto does not override the config's own choice */
  resolve_mods(&t,
               "[{\"kind\": \"precision\", \"compute\": \"bf16\"}, {\"kind\": \"precision\", "
               "\"compute\": \"auto\"}]",
               NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/precision/compute"), "bf16");
  fe_t_done(&t);
  /* values are checked against the policy's schema, fields against the modifier's */
  resolve_mods(&t, "[{\"kind\": \"precision\", \"compute\": \"fp8\"}]", NULL, NULL);
  CHECK_FAILS(&t,
              "/precision/compute: value \"fp8\" is not allowed (expected one of f32|bf16|auto)");
  fe_t_done(&t);
  resolve_mods(&t, "[{\"kind\": \"precision\", \"compute\": 16}]", NULL, NULL);
  CHECK_FAILS(&t, "/modifiers/0/compute: value 16 is an integer (expected a string)");
  fe_t_done(&t);
  resolve_mods(&t, "[{\"kind\": \"precision\", \"computes\": \"bf16\"}]", NULL, NULL);
  CHECK_FAILS(&t, "/modifiers/0/computes: unknown field \"computes\" for modifier \"precision\"",
              "did you mean \"compute\"?");
  fe_t_done(&t);
}

static void test_microbatch(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"microbatch\", \"microbatches\": 4}]", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/learner/microbatches"), 4);
  FeTrainFacts f;
  fe_train_facts(t.tree, &f);
  CHECK_INT(f.microbatches, 4);
  fe_t_done(&t);
  /* the default: the whole batch at once */
  resolve_mods(&t, "[]", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/learner/microbatches"), 1);
  fe_t_done(&t);
  /* the value is checked against the learner's schema, and blamed on the modifier's file */
  resolve_mods(&t, "[{\"kind\": \"microbatch\", \"microbatches\": \"4\"}]", NULL, NULL);
  CHECK_FAILS(&t, cfg_file(),
              ": /learner/microbatches: value \"4\" is a string (expected an integer)");
  fe_t_done(&t);
  resolve_mods(&t, "[{\"kind\": \"microbatch\"}]", NULL, NULL);
  CHECK_FAILS(&t, "/modifiers/0/microbatches: missing required field \"microbatches\" of "
                  "modifier \"microbatch\"");
  fe_t_done(&t);
}

/* ---- lora ---------------------------------------------------------------- */

static void test_lora(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"lora\", \"rank\": 4}]", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/lora/kind"), "lora");
  CHECK_INT(fe_t_int(t.tree, "/lora/rank"), 4);
  CHECK_STR(fe_t_str(t.tree, "/lora/params"), "(.+/)?[qkvo]_proj/weight");
  /* tiny: 2 layers x 4 projections, each 64 x 64: A 64 x 4 and B 4 x 64 */
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 0, &b), FE_T_TINY_PARAMS + 2 * 4 * 2 * 64 * 4);
  int64_t trainable;
  CHECK_INT(fe_trainable(&b, &trainable), 16);
  CHECK_INT(trainable, 2 * 4 * 2 * 64 * 4);
  CHECK(fe_lora(&b)->scale == 8.0 / 4);
  int a = fe_param_find(&b, "model/decoder/layer_1/self_attention/v_proj/lora_a");
  int w = fe_param_find(&b, "model/decoder/layer_1/self_attention/v_proj/weight");
  CHECK(a >= 0 && w >= 0 && !b.params[a].frozen && b.params[w].frozen);
  CHECK_STR(b.params[a].init, "normal");
  CHECK_STR(b.params[a + 1].init, "zeros");
  fe_build_free(&b);
  fe_t_done(&t);
  /* without the modifier nothing is frozen */
  resolve_mods(&t, "[]", NULL, NULL);
  CHECK_INT(fe_t_params(&t, 0, &b), FE_T_TINY_PARAMS);
  CHECK_INT(fe_trainable(&b, &trainable), b.nparams);
  CHECK(fe_lora(&b) == NULL);
  fe_build_free(&b);
  fe_t_done(&t);
}

/* A LoRA config the module walk refuses (resolution runs it): the message. */
static void expect_lora_build_fails(const char *mods, const char *want) {
  FeT t;
  resolve_mods(&t, mods, NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), want);
  fe_t_done(&t);
}

static void test_lora_errors(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"lora\", \"rank\": 0}]", NULL, NULL);
  CHECK_FAILS(&t, "/lora/rank: value 0 is out of range (expected 1 to 65536)");
  fe_t_done(&t);
  resolve_mods(&t, "[{\"kind\": \"lora\", \"ranks\": 4}]", NULL, NULL);
  CHECK_FAILS(&t, "unknown field \"ranks\" for modifier \"lora\"", "did you mean \"rank\"?");
  fe_t_done(&t);
  expect_lora_build_fails("[{\"kind\": \"lora\", \"rank\": 65}]",
                          "/lora/rank: rank 65 is larger than the projection "
                          "model/decoder/layer_0/self_attention/q_proj/weight (64 x 64) "
                          "(expected at most 64)");
  expect_lora_build_fails("[{\"kind\": \"lora\", \"params\": \"wq\"}]",
                          "/lora/params: the regex \"wq\" matches none of the model's 24 "
                          "parameters (expected the whole path of projection weights, such as "
                          "model/decoder/layer_0/self_attention/q_proj/weight)");
  expect_lora_build_fails("[{\"kind\": \"lora\", \"params\": \"(\"}]",
                          "/lora/params: \"(\" is not a regular expression");
  expect_lora_build_fails("[{\"kind\": \"lora\", \"params\": \".*norm.*\"}]",
                          "/lora/params: the regex matches model/decoder/layer_0/attn_norm/scale, "
                          "of rank 1 (expected only the 2-D (in, out) weights of linear "
                          "projections)");
}

static void test_chain_cycle(void) {
  FeT t;
  fe_t_write("self.json", "{\"kind\": \"chain\", \"modifiers\": [\"self.json\"]}");
  resolve_mods(&t, "[\"self.json\"]", NULL, NULL);
  CHECK_FAILS(&t, "self.json: /modifiers/0: modifier files nested more than 16 deep (a cycle?)");
  fe_t_done(&t);
}

static void test_modifier_schema(void) {
  FeT t;
  resolve_mods(&t, "[{\"kind\": \"sett\", \"path\": \"/seed\", \"value\": 1}]", NULL, NULL);
  CHECK_FAILS(
      &t, cfg_file(), ": /modifiers/0/kind: unknown modifier kind \"sett\"",
      "(expected set, replace, mesh, remat, partition, precision, microbatch, lora or chain)",
      "did you mean \"set\"?");
  fe_t_done(&t);
  resolve_mods(&t, "[{\"kind\": \"set\", \"path\": \"/seed\", \"vaule\": 1}]", NULL, NULL);
  CHECK_FAILS(&t, ": /modifiers/0/vaule: unknown field \"vaule\" for modifier \"set\"",
              "did you mean \"value\"?",
              ": /modifiers/0/value: missing required field \"value\" of modifier \"set\"");
  fe_t_done(&t);
  resolve_mods(&t, "[42]", NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), ": /modifiers/0: expected a modifier");
  fe_t_done(&t);
  resolve_mods(&t, "{\"kind\": \"set\"}", NULL, NULL);
  CHECK_FAILS(&t, cfg_file(), ": /modifiers: expected a list of modifiers");
  fe_t_done(&t);
}

static const TestCase cases[] = {
    {"set_existing_key", test_set_existing_key},
    {"set_schema_key_not_present", test_set_schema_key_not_present},
    {"set_array_element", test_set_array_element},
    {"set_missing_parent", test_set_missing_parent},
    {"set_unknown_field", test_set_unknown_field},
    {"set_cli", test_set_cli},
    {"set_cli_without_equals", test_set_cli_without_equals},
    {"replace_keeps_explicit_fields", test_replace_keeps_explicit_fields},
    {"replace_explicit_fields_win", test_replace_explicit_fields_win},
    {"replace_root", test_replace_root},
    {"replace_unknown_target", test_replace_unknown_target},
    {"mesh_modifier", test_mesh_modifier},
    {"remat", test_remat},
    {"remat_path_without_policy", test_remat_path_without_policy},
    {"partition_merges", test_partition_merges},
    {"partition_unknown_param", test_partition_unknown_param},
    {"chain_nested_files", test_chain_nested_files},
    {"chain_cycle", test_chain_cycle},
    {"precision", test_precision},
    {"microbatch", test_microbatch},
    {"lora", test_lora},
    {"lora_errors", test_lora_errors},
    {"modifier_schema", test_modifier_schema},
    {NULL, NULL},
};

int main(int argc, char **argv) { return fe_t_main(argc, argv, "frontend_modifiers", cases); }
