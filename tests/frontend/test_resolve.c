/*
 * test_resolve.c: base files, mesh rules, target device counts, the mesh's
 * -1 axis, and the resolution order base < config modifiers < mesh rule <
 * --apply < --set.
 */
#include <limits.h>
#include <stdlib.h>

#include "tests/frontend/fe_test.h"

static char pbuf[4][4096];
/* Full path of a scratch file, in one of four rotating buffers. */
static const char *P(const char *name) {
  static int i;
  i = (i + 1) % 4;
  snprintf(pbuf[i], sizeof pbuf[i], "%s/%s", fe_t_dir(), name);
  return pbuf[i];
}

/* ---- base files ----------------------------------------------------------- */

static void test_base_merge_same_kind(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("cfg.json",
             "{\"base\": \"tiny.json\", \"model\": {\"dim\": 128, \"decoder\": {\"layer\":"
             " {\"self_attention\": {\"kind\": \"attention\", \"num_heads\": 8}}}}}");
  fe_t_resolve(&t, P("cfg.json"), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/model/dim"), 128);
  CHECK_INT(fe_t_int(t.tree, "/model/vocab_size"), 256); /* kept from the base */
  CHECK_INT(fe_t_int(t.tree, "/model/decoder/num_layers"), 2);
  CHECK_INT(fe_t_int(t.tree, "/model/decoder/layer/self_attention/num_heads"), 8);
  CHECK_INT(fe_t_int(t.tree, "/model/pos_emb/max_len"), 128);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/layer/feed_forward/activation"), "gelu");
  /* D=128: emb 256*128 + pos 128*128 + 2 layers * (2 norms * 2*128 + attention 4*128*128 +
   * MLP 2*128*512) + output norm 2*128 */
  CHECK_INT(fe_t_params(&t, 0, NULL), 256 * 128 + 128 * 128 + 2 * (512 + 65536 + 131072) + 256);
  fe_t_done(&t);
}

static void test_base_nested_and_kind_change(void) {
  FeT t;
  fe_t_write_tiny();
  /* mid (in a subfolder, its base named relative to itself) sets an eps */
  fe_t_write("sub/mid.json",
             "{\"base\": \"../tiny.json\", \"max_steps\": 300, \"model\": {\"decoder\": {\"layer\":"
             " {\"norm\": {\"kind\": \"layer_norm\", \"eps\": 1e-6, \"bias\": false},"
             "  \"feed_forward\": {\"bias\": true}}}}}");
  /* an object without a kind merges into the base's */
  fe_t_write("merge.json", "{\"base\": \"sub/mid.json\", \"model\": {\"decoder\": {\"layer\":"
                           " {\"norm\": {\"eps\": 1e-4}}}}}");
  fe_t_resolve(&t, P("merge.json"), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 300);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/layer/norm/kind"), "layer_norm");
  CHECK(fe_t_float(t.tree, "/model/decoder/layer/norm/eps") == 1e-4);
  CHECK(!json_object_get_boolean(fe_path_get(t.tree, "/model/decoder/layer/norm/bias")));
  CHECK(json_object_get_boolean(fe_path_get(t.tree, "/model/decoder/layer/feed_forward/bias")));
  fe_t_done(&t);
  /* a different kind replaces the base's object: nothing of it survives */
  fe_t_write("kind.json",
             "{\"base\": \"sub/mid.json\", \"model\": {\"decoder\": {\"layer\":"
             " {\"norm\": {\"kind\": \"rms_norm\"},"
             "  \"feed_forward\": {\"kind\": \"moe\", \"num_experts\": 2, \"top_k\": 1}}}}}");
  fe_t_resolve(&t, P("kind.json"), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/layer/norm/kind"), "rms_norm");
  CHECK(fe_t_float(t.tree, "/model/decoder/layer/norm/eps") == 1e-5);
  CHECK(!json_object_get_boolean(fe_path_get(t.tree, "/model/decoder/layer/feed_forward/bias")));
  CHECK(fe_t_float(t.tree, "/model/decoder/layer/feed_forward/hidden_dim_scale") == 4.0);
  fe_t_done(&t);
}

static void test_base_cycle(void) {
  FeT t;
  fe_t_write("a.json", "{\"base\": \"b.json\", \"kind\": \"trainer\"}");
  fe_t_write("b.json", "{\"base\": \"a.json\"}");
  char real[PATH_MAX], want[3 * PATH_MAX + 64];
  CU_ASSERT_FATAL(realpath(fe_t_dir(), real) != NULL);
  snprintf(want, sizeof want, "base files form a cycle: %s/a.json -> %s/b.json -> %s/a.json", real,
           real, real);
  fe_t_resolve(&t, P("a.json"), NULL, NULL, NULL);
  CHECK_FAILS(&t, want, ": /base: ");
  fe_t_done(&t);
  /* a file that is its own base */
  fe_t_write("self.json", "{\"base\": \"./self.json\"}");
  snprintf(want, sizeof want, "base files form a cycle: %s/self.json -> %s/self.json", real, real);
  fe_t_resolve(&t, P("self.json"), NULL, NULL, NULL);
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
}

static void test_base_missing(void) {
  FeT t;
  fe_t_write("cfg.json", "{\"base\": \"nowhere.json\"}");
  char want[4200];
  snprintf(want, sizeof want, "%s/cfg.json: /base: nowhere.json: no such file (looked in %s;",
           fe_t_dir(), fe_t_dir());
  fe_t_resolve(&t, P("cfg.json"), NULL, NULL, NULL);
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
  fe_t_write("cfg.json", "{\"base\": 3}");
  fe_t_resolve(&t, P("cfg.json"), NULL, NULL, NULL);
  CHECK_FAILS(&t, "cfg.json: /base: expected the name of a base config file");
  fe_t_done(&t);
}

/* ---- mesh rules ----------------------------------------------------------- */

/* cfg.json over tiny.json with the given mesh_rules text. */
static void write_rules_cfg(const char *rules) {
  fe_t_write_tiny();
  char text[4096];
  snprintf(text, sizeof text, "{\"base\": \"tiny.json\", \"mesh_rules\": %s}", rules);
  fe_t_write("cfg.json", text);
}

#define SET_STEPS(n) "{\"kind\": \"set\", \"path\": \"/max_steps\", \"value\": " #n "}"

static void test_rules_first_match_wins(void) {
  FeT t;
  write_rules_cfg("[{\"match\": \"tpu-.*\", \"modifiers\": [" SET_STEPS(
      10) "]},"
          " {\"match\": \"cpu-.*\", \"modifiers\": [" SET_STEPS(
              11) "]},"
                  " {\"match\": \"cpu-4\", \"modifiers\": [" SET_STEPS(22) "]}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu-4", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "cpu-.*");
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 11);
  fe_t_done(&t);
  fe_t_resolve(&t, P("cfg.json"), "tpu-v5p-8", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "tpu-.*");
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 10);
  fe_t_done(&t);
}

static void test_rules_whole_name(void) {
  FeT t;
  write_rules_cfg("[{\"match\": \"cpu\", \"modifiers\": [" SET_STEPS(
      11) "]},"
          " {\"match\": \"pu-4\", \"modifiers\": [" SET_STEPS(
              12) "]},"
                  " {\"match\": \"cpu-[0-9]\", \"modifiers\": [" SET_STEPS(13) "]}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "cpu");
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 11);
  fe_t_done(&t);
  fe_t_resolve(&t, P("cfg.json"), "cpu-4", NULL, NULL); /* "cpu" and "pu-4" must not match */
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "cpu-[0-9]");
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 13);
  fe_t_done(&t);
  fe_t_resolve(&t, P("cfg.json"), "cpu-04", NULL, NULL); /* no rule matches all of it */
  CHECK_FAILS(&t, "no mesh rule matches --target cpu-04");
  fe_t_done(&t);
  /* alternation is anchored as a whole: "a|cpu" must not match "cpu-4" via "a" */
  write_rules_cfg("[{\"match\": \"gpu|cpu\", \"modifiers\": [" SET_STEPS(14) "]}]");
  fe_t_resolve(&t, P("cfg.json"), "xcpu", NULL, NULL);
  CHECK_FAILS(&t, "no mesh rule matches --target xcpu");
  fe_t_done(&t);
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "gpu|cpu");
  fe_t_done(&t);
}

static void test_rules_no_match_keeps_mesh(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"input\": {\"global_batch_size\": 32},\n"
                         " \"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 2, 1, 1, 1, 1]},\n"
                         " \"mesh_rules\": [{\"match\": \"tpu-.*\", \"modifiers\":"
                         " [{\"kind\": \"mesh\", \"shape\": [1, -1, 1, 16, 1, 1]}]}]}");
  fe_t_resolve(&t, P("cfg.json"), "cpu-2", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, NULL);
  char *shape = fe_t_canon_at(t.tree, "/mesh/shape");
  CHECK_STR(shape, "[1, 2, 1, 1, 1, 1]\n");
  free(shape);
  fe_t_done(&t);
  fe_t_resolve(&t, P("cfg.json"), "tpu-v5p-32", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  shape = fe_t_canon_at(t.tree, "/mesh/shape");
  CHECK_STR(shape, "[1, -1, 1, 16, 1, 1]\n");
  free(shape);
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 32, &b), FE_T_TINY_PARAMS);
  CHECK_INT(b.mesh.shape[1], 2);
  CHECK_INT(b.mesh.shape[3], 16);
  fe_build_free(&b);
  fe_t_done(&t);
}

/* A target no rule matches would get the default mesh (every device on data, every parameter
 * replicated): an error naming the rules' patterns and the device kinds, unless the config gives
 * the mesh (above: in the file; here: --set) or has a catch-all rule. */
static void test_rules_no_match_is_an_error(void) {
  FeT t;
  char file[4096];
  snprintf(file, sizeof file, "%s/llama2-7b.json", AXLC_MODELS_DIR);
  fe_t_resolve(&t, file, "gpu-a100-40gb-64", NULL, NULL);
  CHECK_FAILS(
      &t, "/models/rules/llama.json: no mesh rule matches --target gpu-a100-40gb-64",
      "(the rules match \"cpu(-[0-9]+)?\", \"opencl(-.*)?\", \"gpu-(h100|h200|b200|a100-80gb)-",
      "\"tpu-v5p-.*\"", "device kinds: cpu, opencl, gpu-a100-40gb, gpu-a100-80gb, gpu-h100",
      "tpu-v5e, tpu-v5p, tpu-v6e, trn2)", "--set /mesh/shape=[...]", "{\"match\": \".*\", ...}");
  fe_t_done(&t);
  const char *sets[] = {"/mesh/shape=[1,-1,1,8,1,1]", NULL};
  fe_t_resolve(&t, file, "gpu-a100-40gb-64", NULL, sets);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, NULL);
  fe_t_done(&t);
  /* rules in the config itself: the message points at /mesh_rules */
  write_rules_cfg("[{\"match\": \"tpu-.*\", \"modifiers\": [" SET_STEPS(10) "]}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu-2", NULL, NULL);
  CHECK_FAILS(&t, P("cfg.json"), ": /mesh_rules: no mesh rule matches --target cpu-2",
              "(the rules match \"tpu-.*\"; device kinds: ");
  fe_t_done(&t);
  write_rules_cfg("[{\"match\": \"tpu-.*\", \"modifiers\": [" SET_STEPS(
      10) "]},"
          " {\"match\": \".*\", \"modifiers\": [" SET_STEPS(12) "]}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu-2", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, ".*");
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 12);
  fe_t_done(&t);
  /* no rules at all: the config's mesh, here the default, for every target */
  fe_t_write_tiny();
  fe_t_resolve(&t, P("tiny.json"), "cpu-2", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  fe_t_done(&t);
}

static void test_rules_from_file(void) {
  FeT t;
  fe_t_write_tiny();
  /* the rules file names a modifier file relative to itself */
  fe_t_write("rules/r.json", "[{\"match\": \"cpu(-[0-9]+)?\", \"modifiers\": [\"steps.json\","
                             " {\"kind\": \"mesh\", \"shape\": [1, 1, 1, -1, 1, 1]}]}]");
  fe_t_write("rules/steps.json", SET_STEPS(42));
  fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"mesh_rules\": \"rules/r.json\"}");
  fe_t_resolve(&t, P("cfg.json"), "cpu-8", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "cpu(-[0-9]+)?");
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 42);
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 8, &b), FE_T_TINY_PARAMS);
  CHECK_INT(b.mesh.shape[3], 8);
  fe_build_free(&b);
  fe_t_done(&t);
  /* a derived file inherits its base's rules, and its own replace them */
  fe_t_write("d1.json", "{\"base\": \"cfg.json\"}");
  fe_t_resolve(&t, P("d1.json"), "cpu", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 42);
  fe_t_done(&t);
  fe_t_write("d2.json", "{\"base\": \"cfg.json\", \"mesh_rules\": [{\"match\": \"cpu\","
                        " \"modifiers\": [" SET_STEPS(43) "]}]}");
  fe_t_resolve(&t, P("d2.json"), "cpu", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 43);
  fe_t_done(&t);
}

static void test_rules_malformed(void) {
  FeT t;
  write_rules_cfg("[{\"match\": \"cpu\"}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  CHECK_FAILS(&t, P("cfg.json"),
              ": /mesh_rules/0: expected {\"match\": REGEX, \"modifiers\": [...]}");
  fe_t_done(&t);
  write_rules_cfg("[{\"match\": \"cpu\", \"modifiers\": [], \"extra\": 1}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  CHECK_FAILS(&t, ": /mesh_rules/0: expected {\"match\": REGEX");
  fe_t_done(&t);
  write_rules_cfg("[{\"match\": \"cpu(\", \"modifiers\": []}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  CHECK_FAILS(&t, ": /mesh_rules/0: match \"cpu(\" is not a valid extended regex");
  fe_t_done(&t);
  write_rules_cfg("{\"match\": \"cpu\"}");
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  CHECK_FAILS(&t, ": /mesh_rules: expected a list of {\"match\": REGEX");
  fe_t_done(&t);
  /* malformed rules in a rules file are reported against that file */
  fe_t_write("r.json", "[{\"match\": 5, \"modifiers\": []}]");
  write_rules_cfg("\"r.json\"");
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  CHECK_FAILS(&t, P("r.json"), ": /mesh_rules/0: expected");
  fe_t_done(&t);
  /* a rule's modifier that fails is reported against the rules file */
  fe_t_write("r.json", "[{\"match\": \"cpu\", \"modifiers\": [{\"kind\": \"remat\","
                       " \"path\": \"/model/nothing\", \"policy\": \"full\"}]}]");
  fe_t_resolve(&t, P("cfg.json"), "cpu", NULL, NULL);
  CHECK_FAILS(&t, P("r.json"), ": /model/nothing: the config has nothing at this path");
  fe_t_done(&t);
}

/* ---- targets and the mesh ------------------------------------------------- */

static int64_t devices_of(const char *target) {
  FeDiag d;
  fe_diag_init(&d);
  int64_t n;
  int rc = fe_target_devices(&d, target, &n);
  CHECK_INT(d.n, rc ? 1 : 0);
  fe_diag_free(&d);
  return rc ? -1 : n;
}

/* A count that does not parse is refused with the form expected, never read as one device. */
static void target_refused(const char *target, const char *want) {
  FeDiag d;
  fe_diag_init(&d);
  int64_t n = 7;
  CHECK_INT(fe_target_devices(&d, target, &n), -1);
  CHECK(d.n == 1 && strstr(d.msgs[0], want) != NULL);
  if (d.n == 1 && !strstr(d.msgs[0], want)) fprintf(stderr, "got: %s\nwant: %s\n", d.msgs[0], want);
  fe_diag_free(&d);
}

static void test_target_devices(void) {
  CHECK_INT(devices_of("cpu"), 1);
  CHECK_INT(devices_of("cpu-4"), 4);
  CHECK_INT(devices_of("gpu-h100"), 1);
  CHECK_INT(devices_of("gpu-h100-8x32"), 256);
  CHECK_INT(devices_of("gpu-h100-256"), 256);
  CHECK_INT(devices_of("tpu-v5p-512"), 256); /* target_naming */
  CHECK_INT(devices_of("opencl-2x2x2"), 8);
  CHECK_INT(devices_of("gpu-h100-99999999999999999999"), FE_MAX_DEVICES + 1);
  CHECK_INT(devices_of("gpu-h100-65536x65536x65536"), FE_MAX_DEVICES + 1);
  CHECK_INT(devices_of(NULL), 0);
  target_refused(
      "cpu-0", "--target cpu-0: bad device count \"0\" (expected cpu-N with N a whole number >= 1");
  target_refused("gpu-h100-0",
                 "--target gpu-h100-0: bad device count \"0\" (expected gpu-h100-N with N");
  target_refused("gpu-h100-4xx", "bad device count \"4xx\" (expected gpu-h100-N");
  target_refused("gpu-h100-x", "bad device count \"x\"");
  target_refused("gpu-h100-4x", "bad device count \"4x\"");
  target_refused("gpu-h100-4x0", "bad device count \"4x0\"");
  target_refused("cpu-4a", "bad device count \"4a\"");
  target_refused("cpu-", "bad device count \"\"");
}

/* Each kind's names count what its vendor counts: TensorCores for TPU v4 and v5p slices (two a
 * chip), chips for v5e and v6e, devices elsewhere; an axlc device is a chip. */
static void test_target_naming(void) {
  CHECK_INT(devices_of("tpu-v4-64"), 32);
  CHECK_INT(devices_of("tpu-v4-2048"), 1024);
  CHECK_INT(devices_of("tpu-v5p-8"), 4);
  CHECK_INT(devices_of("tpu-v5p-512"), 256);
  CHECK_INT(devices_of("tpu-v5p-2x512"), 512); /* the product of the factors counts cores */
  CHECK_INT(devices_of("tpu-v5p"), 1);         /* a kind alone is one chip */
  CHECK_INT(devices_of("tpu-v5e-256"), 256);
  CHECK_INT(devices_of("tpu-v6e-256"), 256);
  CHECK_INT(devices_of("gpu-h100-256"), 256);
  CHECK_INT(devices_of("gpu-h100-8x32"), 256);
  CHECK_INT(devices_of("trn2-64"), 64);
  CHECK_INT(devices_of("tpu-v5p-99999999999999999999"), FE_MAX_DEVICES + 1);
  target_refused("tpu-v5p-3", "--target tpu-v5p-3: bad count \"3\" (tpu-v5p names count "
                              "TensorCores, 2 per chip: expected a multiple of 2");
  target_refused("tpu-v4-1", "tpu-v4 names count TensorCores, 2 per chip");
  FeTargetNaming k = fe_target_naming("tpu-v5p-512");
  CHECK_STR(k.kind, "tpu-v5p");
  CHECK_INT(k.cores_per_chip, 2);
  k = fe_target_naming("tpu-v4");
  CHECK_INT(k.cores_per_chip, 2);
  k = fe_target_naming("tpu-v5e-256");
  CHECK_STR(k.kind, "tpu-v5e");
  CHECK_INT(k.cores_per_chip, 1);
  k = fe_target_naming("tpu-v6e-8x32");
  CHECK_INT(k.cores_per_chip, 1);
  k = fe_target_naming("gpu-h100-256");
  CHECK_STR(k.kind, NULL);
  CHECK_INT(k.cores_per_chip, 1);
  k = fe_target_naming("tpu-v5px-512"); /* the kind is the whole name before the count */
  CHECK_INT(k.cores_per_chip, 1);
}

static void test_mesh_minus_one(void) {
  FeT t;
  char file[4096];
  snprintf(file, sizeof file, "%s/llama2-7b.json", AXLC_MODELS_DIR);
  fe_t_resolve(&t, file, "gpu-h100-8x32", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "gpu-(h100|h200|b200|a100-80gb)-(256|512|1024|8x32|8x64|8x128)");
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/remat_policy"), "save_qkvo");
  FeBuild b;
  CHECK_INT(fe_t_params(&t, 256, &b), 6738415616LL);
  CHECK_INT(b.mesh.devices, 256);
  CHECK_STR(b.mesh.axes[3], "fsdp");
  CHECK_INT(b.mesh.shape[1], 32); /* data=-1 x fsdp=8 */
  CHECK_INT(b.mesh.shape[3], 8);
  CHECK_INT(b.mesh.shape[5], 1);
  fe_build_free(&b);
  fe_t_done(&t);
  fe_t_resolve(&t, file, "tpu-v5p-512", NULL, NULL); /* 256 chips */
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "tpu-v5p-.*");
  CHECK_STR(fe_t_str(t.tree, "/model/decoder/remat_policy"), "save_dots");
  CHECK_INT(fe_t_params(&t, 256, &b), 6738415616LL);
  CHECK_INT(b.mesh.shape[1], 4); /* data=-1 x fsdp=64 */
  CHECK_INT(b.mesh.shape[3], 64);
  fe_build_free(&b);
  fe_t_done(&t);
  /* no target: -1 takes 1 */
  fe_t_resolve(&t, file, NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_params(&t, 0, &b), 6738415616LL);
  CHECK_INT(b.mesh.devices, 1);
  CHECK_INT(b.mesh.shape[1], 1);
  fe_build_free(&b);
  fe_t_done(&t);
}

/* The 70B models have rules of their own (rules/llama-70b.json): AXLearn's 70B recipes. */
static void test_rules_70b(void) {
  static const struct {
    const char *model, *target;
    int64_t devices, data, fsdp;
    const char *remat;
  } cases[] = {
      {"llama2-70b", "gpu-h100-256", 256, 4, 64, "save_qkvo"},
      {"llama2-70b", "gpu-h100-8x64", 512, 4, 128, "save_qkvo"},
      {"fuji-70b", "gpu-h100-1024", 1024, 8, 128, "save_qkvo"},
      {"fuji-70b", "gpu-h200-256", 256, 4, 64, "save_qkvo"},
      {"llama2-70b", "gpu-b200-512", 512, 32, 16, "save_qkvo"},
      {"llama2-70b", "tpu-v5p-1024", 512, 1, 512, NULL},
      {"fuji-70b", "tpu-v5p-512", 256, 1, 256, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    FeT t;
    char file[4096];
    snprintf(file, sizeof file, "%s/%s.json", AXLC_MODELS_DIR, cases[i].model);
    fe_t_resolve(&t, file, cases[i].target, NULL, NULL);
    REQUIRE_RESOLVED(&t);
    FeBuild b;
    int64_t params = fe_t_params(&t, cases[i].devices, &b); /* EXPECT evaluates twice */
    CHECK(params > 0);
    CHECK_INT(b.mesh.shape[1], cases[i].data);
    CHECK_INT(b.mesh.shape[3], cases[i].fsdp);
    CHECK_INT(b.mesh.shape[5], 1);
    fe_build_free(&b);
    if (cases[i].remat) {
      CHECK_STR(fe_t_str(t.tree, "/model/decoder/remat_policy"), cases[i].remat);
    } else { /* AXLearn saves the q/k/v projections (and offloads the input, which axlc keeps) */
      char *policy = fe_t_canon_at(t.tree, "/model/decoder/remat_policy");
      CHECK_HAS(policy, "attention\\\\.(q|k|v)_proj");
      free(policy);
    }
    CHECK_STR(fe_t_str(t.tree, "/precision/compute"), "bf16");
    fe_t_done(&t);
  }
}

static void test_mesh_not_dividing_target(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("fixed.json", "{\"base\": \"tiny.json\", \"mesh\": {\"kind\": \"device_mesh\","
                           " \"shape\": [1, 2, 1, 1, 1, 1]}}");
  fe_t_resolve(&t, P("fixed.json"), "cpu-3", NULL, NULL);
  CHECK_FAILS(&t, P("fixed.json"), ": /mesh/shape: the mesh needs 2 devices, but the target has 3",
              "(expected sizes whose product is 3)");
  fe_t_done(&t);
  fe_t_write("wild.json", "{\"base\": \"tiny.json\", \"mesh\": {\"kind\": \"device_mesh\","
                          " \"shape\": [1, -1, 1, 2, 1, 1]}}");
  fe_t_resolve(&t, P("wild.json"), "cpu-3", NULL, NULL);
  CHECK_FAILS(&t, P("wild.json"),
              ": /mesh/shape: the mesh needs a multiple of 2 devices, but the target has 3",
              "(expected sizes whose product divides 3)");
  fe_t_done(&t);
  fe_t_resolve(&t, P("wild.json"), "cpu-4", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  fe_t_done(&t);
}

/* ---- resolution order ------------------------------------------------------ */

static void test_resolution_order(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("base.json", "{\"base\": \"tiny.json\", \"max_steps\": 101}");
  fe_t_write(
      "cfg.json",
      "{\"base\": \"base.json\", \"max_steps\": 106,\n"
      " \"modifiers\": [" SET_STEPS(
          102) "],\n"
               " \"mesh_rules\": [{\"match\": \"cpu-2\", \"modifiers\": [" SET_STEPS(103) "]}]}");
  fe_t_write("apply4.json", SET_STEPS(104));
  fe_t_write("apply5.json", SET_STEPS(105));
  char a4[4096], a5[4096], cfg[4096];
  snprintf(a4, sizeof a4, "%s", P("apply4.json"));
  snprintf(a5, sizeof a5, "%s", P("apply5.json"));
  snprintf(cfg, sizeof cfg, "%s", P("cfg.json"));

  fe_t_resolve(&t, P("base.json"), "cpu-2", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 101); /* base over tiny */
  fe_t_done(&t);
  fe_t_write("own.json", "{\"base\": \"base.json\", \"max_steps\": 106}");
  fe_t_resolve(&t, P("own.json"), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 106); /* a derived file's key over its base */
  fe_t_done(&t);
  fe_t_resolve(&t, cfg, NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 102); /* modifiers over the file's keys */
  fe_t_done(&t);
  fe_t_resolve(&t, cfg, "cpu-2", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 103); /* the mesh rule over modifiers */
  fe_t_done(&t);
  const char *apply[] = {a4, NULL};
  fe_t_resolve(&t, cfg, "cpu-2", apply, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 104); /* --apply over the mesh rule */
  fe_t_done(&t);
  const char *apply2[] = {a5, a4, NULL};
  fe_t_resolve(&t, cfg, "cpu-2", apply2, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 104); /* --apply files in order */
  fe_t_done(&t);
  const char *sets[] = {"/max_steps=107", "/max_steps=108", NULL};
  fe_t_resolve(&t, cfg, "cpu-2", apply2, sets);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 108); /* --set over --apply, in order */
  fe_t_done(&t);
  /* a base's own modifiers sit below the derived file's keys */
  fe_t_write("bmod.json", "{\"base\": \"tiny.json\", \"modifiers\": [" SET_STEPS(109) "]}");
  fe_t_write("over.json", "{\"base\": \"bmod.json\", \"max_steps\": 110}");
  fe_t_resolve(&t, P("bmod.json"), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 109);
  fe_t_done(&t);
  fe_t_resolve(&t, P("over.json"), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_INT(fe_t_int(t.tree, "/max_steps"), 110);
  fe_t_done(&t);
}

static void test_resolution_keys_not_in_tree(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"modifiers\": [],"
                         " \"mesh_rules\": [{\"match\": \"x\", \"modifiers\": []}]}");
  fe_t_resolve(&t, P("cfg.json"), NULL, NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK(!json_object_object_get_ex(t.tree, "base", NULL));
  CHECK(!json_object_object_get_ex(t.tree, "modifiers", NULL));
  CHECK(!json_object_object_get_ex(t.tree, "mesh_rules", NULL));
  /* every default explicit */
  CHECK_INT(fe_t_int(t.tree, "/seed"), 0);
  CHECK_INT(fe_t_int(t.tree, "/checkpointer/keep_last"), 3);
  CHECK(fe_t_float(t.tree, "/learner/optimizer/b1") == 0.9);
  CHECK_STR(fe_t_str(t.tree, "/precision/compute"), "f32");
  CHECK_STR(fe_t_str(t.tree, "/precision/grads"), "f32");
  CHECK_STR(fe_t_str(t.tree, "/model/emb/kind"), "embedding");
  fe_t_done(&t);
}

static const TestCase cases[] = {
    {"base_merge_same_kind", test_base_merge_same_kind},
    {"base_nested_and_kind_change", test_base_nested_and_kind_change},
    {"base_cycle", test_base_cycle},
    {"base_missing", test_base_missing},
    {"rules_first_match_wins", test_rules_first_match_wins},
    {"rules_whole_name", test_rules_whole_name},
    {"rules_no_match_keeps_mesh", test_rules_no_match_keeps_mesh},
    {"rules_no_match_is_an_error", test_rules_no_match_is_an_error},
    {"rules_from_file", test_rules_from_file},
    {"rules_malformed", test_rules_malformed},
    {"target_devices", test_target_devices},
    {"target_naming", test_target_naming},
    {"mesh_minus_one", test_mesh_minus_one},
    {"rules_70b", test_rules_70b},
    {"mesh_not_dividing_target", test_mesh_not_dividing_target},
    {"resolution_order", test_resolution_order},
    {"resolution_keys_not_in_tree", test_resolution_keys_not_in_tree},
    {NULL, NULL},
};

int main(int argc, char **argv) { return fe_t_main(argc, argv, "frontend_resolve", cases); }
