/*
 * test_errors.c: every class of bad input. Each message must name the file,
 * the JSON path, the offending value and what was expected, and a value must
 * be reported against the file that set it (a derived config over its base,
 * an --apply file, "--set").
 *
 * Most cases write bad.json = {"base": "tiny.json", ...overlay} so the
 * assertion that the message names bad.json (and not tiny.json) also checks
 * error origins.
 */
#include <stdlib.h>

#include "tests/frontend/fe_test.h"

static char badpath[4096], tinypath[4096];

/* Resolves bad.json = tiny.json + the members in `overlay` (JSON object
 * members without the braces). */
static void bad(FeT *t, const char *overlay, const char *target, const char *const *sets) {
  snprintf(tinypath, sizeof tinypath, "%s", fe_t_write_tiny());
  char text[4096];
  snprintf(text, sizeof text, "{\"base\": \"tiny.json\", %s}\n", overlay);
  snprintf(badpath, sizeof badpath, "%s", fe_t_write("bad.json", text));
  fe_t_resolve(t, badpath, target, NULL, sets);
}

/* Resolves full.json = the tiny config with `from` replaced by `to`. */
static void full(FeT *t, const char *from, const char *to, const char *target) {
  char text[8192];
  const char *at = strstr(FE_T_TINY, from);
  CU_ASSERT_FATAL(at != NULL);
  snprintf(text, sizeof text, "%.*s%s%s", (int)(at - FE_T_TINY), FE_T_TINY, to, at + strlen(from));
  snprintf(badpath, sizeof badpath, "%s", fe_t_write("full.json", text));
  fe_t_resolve(t, badpath, target, NULL, NULL);
}

/* The failure names bad.json, not the base it builds on. */
#define CHECK_BAD(t, ...)                                                                          \
  do {                                                                                             \
    CHECK_FAILS(t, badpath, __VA_ARGS__);                                                          \
    CHECK_LACKS((t)->msgs, "tiny.json");                                                           \
  } while (0)

#define LAYER   "\"model\": {\"decoder\": {\"layer\": "
#define ATTN(x) LAYER "{\"self_attention\": " x "}}}"
#define FFN(x)  LAYER "{\"feed_forward\": " x "}}}"

/* ---- JSON ------------------------------------------------------------------ */

static void test_json_syntax(void) {
  FeT t;
  const char *f = fe_t_write("bad.json", "{\n  \"kind\": \"trainer\",\n  \"max_steps\": ]\n}\n");
  snprintf(badpath, sizeof badpath, "%s", f);
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  char want[4200];
  snprintf(want, sizeof want, "%s:3:16: JSON syntax error: ", badpath);
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
  /* unterminated: the position is the end of the input */
  fe_t_write("bad.json", "{\"kind\": \"trainer\",\n \"max_steps\": 3");
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  snprintf(want, sizeof want, "%s:2:16: JSON syntax error: unexpected end of data", badpath);
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
  /* a syntax error in a base file names the base file */
  fe_t_write("broken.json", "{\"kind\": \"trainer\" \"max_steps\": 3}");
  fe_t_write("bad.json", "{\"base\": \"broken.json\"}");
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  snprintf(want, sizeof want, "%s/broken.json:1:20: JSON syntax error: ", fe_t_dir());
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
}

static void test_json_nul_byte(void) {
  FeT t;
  snprintf(badpath, sizeof badpath, "%s/bad.json", fe_t_dir());
  FILE *f = fopen(badpath, "wb");
  CU_ASSERT_FATAL(f != NULL);
  fwrite("{\n  \"kind\":\0 \"trainer\"}\n", 1, 24, f);
  fclose(f);
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  char want[4200];
  snprintf(want, sizeof want, "%s:2:10: JSON syntax error: NUL byte in input", badpath);
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
  /* through the string API too */
  FeDiag d;
  fe_diag_init(&d);
  json_object *o = fe_json_parse(&d, "{\"a\": 1}\0", 9, "mem");
  CHECK(o == NULL);
  CHECK_INT(d.n, 1);
  if (d.n) CHECK_STR(d.msgs[0], "mem:1:9: JSON syntax error: NUL byte in input");
  fe_diag_free(&d);
}

static void test_json_trailing_garbage(void) {
  FeT t;
  snprintf(badpath, sizeof badpath, "%s", fe_t_write("bad.json", "{\"kind\": \"trainer\"}\n  }\n"));
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  char want[4200];
  snprintf(want, sizeof want, "%s:2:3: JSON syntax error: ", badpath);
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
  /* two values */
  fe_t_write("bad.json", "{}\n{}\n");
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  snprintf(want, sizeof want, "%s:2:1: JSON syntax error: ", badpath);
  CHECK_FAILS(&t, want);
  fe_t_done(&t);
  /* trailing white space is fine */
  FeDiag d;
  fe_diag_init(&d);
  json_object *o = fe_json_parse(&d, "{\"a\": 1}\n\t \n", 12, "mem");
  CHECK(o != NULL);
  CHECK_INT(d.n, 0);
  json_object_put(o);
  fe_diag_free(&d);
}

static void test_json_top_level_not_object(void) {
  FeT t;
  snprintf(badpath, sizeof badpath, "%s", fe_t_write("bad.json", "[1, 2]\n"));
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  CHECK_FAILS(&t, badpath, ": expected a config object at the top level");
  fe_t_done(&t);
  fe_t_write("bad.json", "\"trainer\"\n");
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  CHECK_FAILS(&t, badpath, ": expected a config object at the top level");
  fe_t_done(&t);
}

static void test_missing_file(void) {
  FeT t;
  snprintf(badpath, sizeof badpath, "%s/absent.json", fe_t_dir());
  fe_t_resolve(&t, badpath, NULL, NULL, NULL);
  CHECK_FAILS(&t, badpath, ": cannot open: No such file or directory");
  fe_t_done(&t);
}

/* ---- schema ----------------------------------------------------------------- */

static void test_unknown_kind(void) {
  FeT t;
  bad(&t, ATTN("{\"kind\": \"attenton\", \"num_heads\": 4}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/kind: unknown module kind \"attenton\"",
            "; did you mean \"attention\"?");
  fe_t_done(&t);
}

static void test_kind_not_allowed(void) {
  FeT t;
  bad(&t, FFN("{\"kind\": \"attention\", \"num_heads\": 4}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/feed_forward/kind: kind \"attention\" does not fit here",
            "(expected one of feed_forward|moe)");
  fe_t_done(&t);
  full(&t, "\"kind\": \"trainer\"", "\"kind\": \"causal_lm\"", NULL);
  CHECK_FAILS(&t, badpath,
              ": /kind: kind \"causal_lm\" does not fit here (expected one of trainer)");
  fe_t_done(&t);
  /* a module slot given a plain value */
  bad(&t, FFN("7"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/feed_forward: value 7 is an integer (expected a module "
                "config object with a \"kind\" (one of feed_forward|moe))");
  fe_t_done(&t);
}

static void test_unknown_field(void) {
  FeT t;
  bad(&t, ATTN("{\"num_head\": 4}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/num_head: unknown field \"num_head\" for "
                "kind \"attention\"; did you mean \"num_heads\"?");
  fe_t_done(&t);
  bad(&t, "\"bogus_setting\": 1", NULL, NULL);
  CHECK_BAD(&t, ": /bogus_setting: unknown field \"bogus_setting\" for kind \"trainer\"");
  CHECK_LACKS(t.msgs, "did you mean");
  fe_t_done(&t);
}

static void test_wrong_type(void) {
  FeT t;
  bad(&t, "\"model\": {\"dim\": \"64\"}", NULL, NULL);
  CHECK_BAD(&t, ": /model/dim: value \"64\" is a string (expected an integer)");
  fe_t_done(&t);
  bad(&t, "\"model\": {\"dim\": 64.5}", NULL, NULL);
  CHECK_BAD(&t, ": /model/dim: value 64.5 is a number (expected an integer)");
  fe_t_done(&t);
  bad(&t, "\"learner\": {\"max_grad_norm\": true}", NULL, NULL);
  CHECK_BAD(&t, ": /learner/max_grad_norm: value true is a boolean (expected a number)");
  fe_t_done(&t);
  bad(&t, "\"model\": {\"lm_head\": {\"tied\": \"yes\"}}", NULL, NULL);
  CHECK_BAD(&t, ": /model/lm_head/tied: value \"yes\" is a string (expected true or false)");
  fe_t_done(&t);
  bad(&t, "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, \"x\", 1, 1, 1, 1]}", NULL, NULL);
  CHECK_BAD(&t, ": /mesh/shape/1: value \"x\" is a string (expected an integer)");
  fe_t_done(&t);
  /* every problem is reported, not only the first */
  bad(&t,
      "\"model\": {\"dim\": \"64\"}, \"precision\": {\"kind\": \"precision_policy\", \"compute\": "
      "\"f16\"}, \"max_steps\": []",
      NULL, NULL);
  CHECK_BAD(&t, ": /model/dim: value \"64\"", ": /precision/compute: value \"f16\" is not allowed",
            ": /max_steps: got an array (expected an integer)");
  fe_t_done(&t);
}

static void test_out_of_range(void) {
  FeT t;
  bad(&t, "\"learner\": {\"optimizer\": {\"b1\": 1.5}}", NULL, NULL);
  CHECK_BAD(&t, ": /learner/optimizer/b1: value 1.5 is out of range (expected 0 to 1)");
  fe_t_done(&t);
  bad(&t, "\"model\": {\"decoder\": {\"num_layers\": 0}}", NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/num_layers: value 0 is out of range (expected 1 to 4096)");
  fe_t_done(&t);
  bad(&t, "\"learner\": {\"optimizer\": {\"learning_rate\": -0.5}}", NULL, NULL);
  CHECK_BAD(&t, ": /learner/optimizer/learning_rate: value -0.5 is out of range (expected >= 0)");
  fe_t_done(&t);
  /* a large whole bound in full, not as 1.67772e+07 */
  bad(&t, "\"input\": {\"seq_len\": 16777217}", NULL, NULL);
  CHECK_BAD(&t, ": /input/seq_len: value 16777217 is out of range (expected 1 to 16777216)");
  fe_t_done(&t);
}

static void test_missing_required(void) {
  FeT t;
  full(&t, "\"dim\": 64,", "", NULL);
  CHECK_FAILS(&t, badpath,
              ": /model/dim: missing required field \"dim\" of kind \"causal_lm\" "
              "(model width)");
  fe_t_done(&t);
  full(&t, "\"max_steps\": 200,", "", NULL);
  CHECK_FAILS(&t, badpath,
              ": /max_steps: missing required field \"max_steps\" of kind \"trainer\"");
  fe_t_done(&t);
}

static void test_bad_enum(void) {
  FeT t;
  bad(&t, FFN("{\"activation\": \"gleu\"}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/feed_forward/activation: value \"gleu\" is not allowed "
                "(expected one of gelu|relu|swiglu); did you mean \"gelu\"?");
  fe_t_done(&t);
  bad(&t, "\"precision\": {\"kind\": \"precision_policy\", \"compute\": 16}", NULL, NULL);
  CHECK_BAD(&t, ": /precision/compute: value 16 is an integer (expected one of f32|bf16|auto)");
  fe_t_done(&t);
  bad(&t, "\"precision\": {\"kind\": \"precision_policy\", \"params\": \"bf16\"}", NULL, NULL);
  CHECK_BAD(&t, ": /precision/params: value \"bf16\" is not allowed (expected one of f32)");
  fe_t_done(&t);
  /* the old place of the dtype is no field now */
  bad(&t, "\"model\": {\"dtype\": \"bf16\"}", NULL, NULL);
  CHECK_BAD(&t, ": /model/dtype: unknown field \"dtype\" for kind \"causal_lm\"");
  fe_t_done(&t);
}

/* ---- module walk ------------------------------------------------------------- */

static void test_heads_do_not_divide_dim(void) {
  FeT t;
  bad(&t, ATTN("{\"num_heads\": 5}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/num_heads: num_heads 5 does not divide "
                "dim 64 (expected a divisor of 64)");
  fe_t_done(&t);
}

static void test_kv_heads(void) {
  FeT t;
  bad(&t, ATTN("{\"num_kv_heads\": 3}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/num_kv_heads: num_heads 4 is not a "
                "multiple of num_kv_heads 3 (expected a divisor of 4)");
  fe_t_done(&t);
  bad(&t, ATTN("{\"num_kv_heads\": 8}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/num_kv_heads: num_heads 4 is not a "
                "multiple of num_kv_heads 8");
  fe_t_done(&t);
}

static void test_rope_odd_head_dim(void) {
  FeT t;
  bad(&t,
      "\"model\": {\"dim\": 60, \"decoder\": {\"layer\": {\"self_attention\": "
      "{\"rope\": {\"kind\": \"rope\"}}}}}",
      NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/rope: rotary embedding needs an even head "
                "dim, got 15 (dim 60 / num_heads 4)");
  fe_t_done(&t);
}

static void test_top_k_exceeds_experts(void) {
  FeT t;
  bad(&t, FFN("{\"kind\": \"moe\", \"num_experts\": 2, \"top_k\": 3}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/feed_forward/top_k: top_k 3 exceeds num_experts 2 "
                "(expected 1 to 2)");
  fe_t_done(&t);
}

static void test_pos_table_too_short(void) {
  FeT t;
  bad(&t, "\"model\": {\"pos_emb\": {\"max_len\": 32}}", NULL, NULL);
  CHECK_BAD(&t, ": /model/pos_emb/max_len: max_len 32 is shorter than the input's seq_len 64 "
                "(expected at least 64)");
  fe_t_done(&t);
}

static void test_batch_not_divisible(void) {
  FeT t;
  bad(&t,
      "\"input\": {\"global_batch_size\": 10}, "
      "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 2, 1, 2, 1, 1]}",
      "cpu-4", NULL);
  CHECK_BAD(&t, ": /input/global_batch_size: global batch size 10 does not divide over the mesh's "
                "batch axes (data x expert x fsdp = 4 devices; expected a multiple of 4)");
  fe_t_done(&t);
  /* the model axis does not split the batch */
  bad(&t,
      "\"input\": {\"global_batch_size\": 10}, "
      "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 2, 1, 1, 1, 2]}",
      "cpu-4", NULL);
  REQUIRE_RESOLVED(&t);
  fe_t_done(&t);
}

/* Each device runs the microbatches over its part of the batch: they must divide it. */
static void test_microbatches_bad(void) {
  FeT t;
  bad(&t,
      "\"learner\": {\"microbatches\": 4}, "
      "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 2, 1, 2, 1, 1]}",
      "cpu-4", NULL);
  CHECK_BAD(&t, ": /learner/microbatches: 4 microbatches do not divide the per-device batch: "
                "global batch size 8 over the mesh's batch axes (data x expert x fsdp = 4 "
                "devices) leaves 2 sequences per device (expected a divisor of 2; --set "
                "/learner/microbatches=2 overrides it)");
  fe_t_done(&t);
  bad(&t,
      "\"learner\": {\"microbatches\": 2}, "
      "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 2, 1, 2, 1, 1]}",
      "cpu-4", NULL);
  REQUIRE_RESOLVED(&t);
  fe_t_done(&t);
  bad(&t, "\"learner\": {\"microbatches\": 0}", NULL, NULL);
  CHECK_BAD(&t, ": /learner/microbatches: value 0 is out of range (expected 1 to 1048576)");
  fe_t_done(&t);
  bad(&t, "\"learner\": {\"microbatches\": 2.5}", NULL, NULL);
  CHECK_BAD(&t, ": /learner/microbatches: value 2.5 is a number (expected an integer)");
  fe_t_done(&t);
}

static void test_spec_unknown_axis(void) {
  FeT t;
  bad(&t, ATTN("{\"param_partition_specs\": {\"q_proj\": [\"fsdp\", \"modle\"]}}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/param_partition_specs/q_proj: axis "
                "\"modle\" is not a mesh axis (the mesh has 6 axes; see /mesh/axes); did you "
                "mean \"model\"?");
  fe_t_done(&t);
  /* an axis the mesh does not have, though it is a known axis name (the embedding's default
   * spec splits its width over fsdp: that too is overridden) */
  bad(&t,
      "\"mesh\": {\"kind\": \"device_mesh\", \"axes\": [\"data\", \"model\"], \"shape\": [-1, "
      "1]}, \"model\": {\"emb\": {\"kind\": \"embedding\", \"param_partition_specs\": {\"weight\": "
      "[\"model\", null]}}, "
      "\"decoder\": {\"layer\": "
      "{\"self_attention\": {\"param_partition_specs\": {\"q_proj\": [\"data\", \"model\"]}},"
      " \"feed_forward\": {\"param_partition_specs\": {\"linear1\": [null, \"model\"]}}}}}",
      NULL, NULL);
  REQUIRE_RESOLVED(&t);
  fe_t_done(&t);
  bad(&t,
      "\"mesh\": {\"kind\": \"device_mesh\", \"axes\": [\"data\", \"model\"], \"shape\": [-1, "
      "1]}, " FFN("{\"param_partition_specs\": {\"linear1\": [\"fsdp\", \"model\"], "
                  "\"linear2\": [\"model\", null]}}"),
      NULL, NULL);
  /* the attention's default specs name fsdp first */
  CHECK_FAILS(&t, "axis \"fsdp\" is not a mesh axis (the mesh has 2 axes; see /mesh/axes)");
  fe_t_done(&t);
  /* not a spec at all: caught by the schema */
  bad(&t, ATTN("{\"param_partition_specs\": {\"q_proj\": [\"fsdp\", 3]}}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/param_partition_specs/q_proj/1: value 3 is "
                "an integer (expected null, an axis name or a list of axis names)");
  fe_t_done(&t);
  /* the same axis on two dimensions */
  bad(&t, ATTN("{\"param_partition_specs\": {\"q_proj\": [\"model\", \"model\"]}}"), NULL, NULL);
  CHECK_BAD(
      &t,
      ": /model/decoder/layer/self_attention/param_partition_specs/q_proj: axis "
      "\"model\" is used twice by parameter model/decoder/layer_0/self_attention/q_proj/weight");
  fe_t_done(&t);
}

static void test_spec_rank_mismatch(void) {
  FeT t;
  bad(&t, ATTN("{\"param_partition_specs\": {\"q_proj\": [\"fsdp\"]}}"), NULL, NULL);
  CHECK_BAD(&t,
            ": /model/decoder/layer/self_attention/param_partition_specs/q_proj: 1 entries for "
            "parameter model/decoder/layer_0/self_attention/q_proj/weight of rank 2 (expected 2)");
  fe_t_done(&t);
  /* moe weights: the expert axis takes the leading dimension */
  bad(&t,
      FFN("{\"kind\": \"moe\", \"num_experts\": 2, \"param_partition_specs\": "
          "{\"linear1\": [null, null, \"model\"]}}"),
      NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/feed_forward/param_partition_specs/linear1: 3 entries for "
                "parameter model/decoder/layer_0/feed_forward/linear1/weight of rank 2 per expert "
                "(expected 2)");
  fe_t_done(&t);
}

static void test_axis_does_not_divide_param(void) {
  FeT t;
  /* model=3: the token table's vocabulary 256 is the first to split over it (vocabulary
   * parallelism, the default), and the message says what would divide */
  full(&t, "\"max_steps\": 200,",
       "\"max_steps\": 200, \"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 1, 1, 1, 1, 3]},",
       "cpu-3");
  CHECK_FAILS(&t, badpath,
              ": /model/emb/param_partition_specs/weight: the vocabulary (vocab_size 256) does "
              "not divide over mesh axes model (3 devices) of the vocabulary-parallel table "
              "model/emb/weight (expected a vocab_size that is a multiple of 3, e.g. 258, or the "
              "model dim split instead: {\"weight\": [null, \"model\"]})");
  fe_t_done(&t);
  /* the model dim split instead: its width 64 does not divide either */
  bad(&t,
      "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 1, 1, 1, 1, 3]}, \"model\": "
      "{\"emb\": {\"kind\": \"embedding\", \"param_partition_specs\": {\"weight\": [null, "
      "\"model\"]}}}",
      "cpu-3", NULL);
  CHECK_FAILS(&t, badpath,
              ": /model/emb/param_partition_specs/weight: mesh axes model (3 devices) "
              "do not divide dimension 1 (size 64) of parameter model/emb/weight "
              "(expected a divisor of 64)");
  fe_t_done(&t);
  /* expert axis over the experts' leading dimension */
  bad(&t,
      "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 1, 4, 1, 1, 1]}, " FFN(
          "{\"kind\": \"moe\", \"num_experts\": 6}"),
      "cpu-4", NULL);
  CHECK_FAILS(&t, badpath, ": /model/decoder/layer/feed_forward/",
              "mesh axes expert (4 devices) do not divide dimension 0 (size 6) of parameter "
              "model/decoder/layer_0/feed_forward/linear1/weight (expected a divisor of 6)");
  fe_t_done(&t);
}

static void test_mesh_axes(void) {
  FeT t;
  bad(&t,
      "\"mesh\": {\"kind\": \"device_mesh\", \"axes\": [\"data\", \"modle\"], \"shape\": [1, 1]}",
      NULL, NULL);
  CHECK_BAD(&t, ": /mesh/axes/1: unknown mesh axis \"modle\" (expected one of pipeline, data, "
                "expert, fsdp, seq, model); did you mean \"model\"?");
  fe_t_done(&t);
  bad(&t,
      "\"mesh\": {\"kind\": \"device_mesh\", \"axes\": [\"data\", \"data\"], \"shape\": [1, 1]}",
      NULL, NULL);
  CHECK_BAD(&t, ": /mesh/axes/1: mesh axis \"data\" appears twice");
  fe_t_done(&t);
  bad(&t, "\"mesh\": {\"kind\": \"device_mesh\", \"axes\": [\"data\", \"model\"], \"shape\": [1]}",
      NULL, NULL);
  CHECK_BAD(&t, ": /mesh/shape: 1 sizes for 2 axes (expected one per axis)");
  fe_t_done(&t);
}

static void test_mesh_two_wildcards(void) {
  FeT t;
  bad(&t, "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, -1, 1, -1, 1, 1]}", "cpu-4", NULL);
  CHECK_BAD(&t, ": /mesh/shape/3: a second -1 (expected at most one axis sized -1)");
  fe_t_done(&t);
  bad(&t, "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, 0, 1, 1, 1, 1]}", NULL, NULL);
  CHECK_BAD(&t, ": /mesh/shape/1: size 0 (expected -1 or 1 to 16777216)");
  fe_t_done(&t);
}

static void test_remat_policy_errors(void) {
  FeT t;
  bad(&t, "\"model\": {\"decoder\": {\"remat_policy\": \"save_dot\"}}", NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/remat_policy: unknown remat policy \"save_dot\" (expected none, "
                "full, save_dots, save_qkvo, offload_dots, or {\"save\": [...], \"offload\": "
                "[...]}); did you mean \"save_dots\"?");
  fe_t_done(&t);
  bad(&t, "\"model\": {\"decoder\": {\"remat_policy\": {\"save\": [\"q_proj\", \"(k\"]}}}", NULL,
      NULL);
  CHECK_BAD(&t, ": /model/decoder/remat_policy/save/1: \"(k\" is not a valid extended regex");
  fe_t_done(&t);
  bad(&t, "\"model\": {\"decoder\": {\"remat_policy\": {\"keep\": []}}}", NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/remat_policy/keep: unknown remat policy field (expected \"save\" "
                "or \"offload\")");
  fe_t_done(&t);
  bad(&t, "\"model\": {\"decoder\": {\"remat_policy\": 3}}", NULL, NULL);
  CHECK_BAD(&t,
            ": /model/decoder/remat_policy: value 3 is an integer (expected a remat preset name");
  fe_t_done(&t);
}

/* ---- modifiers and --set ------------------------------------------------------ */

static void test_apply_file_errors(void) {
  FeT t;
  fe_t_write_tiny();
  char cfg[4096], mod[4096];
  snprintf(cfg, sizeof cfg, "%s", fe_t_write("cfg.json", "{\"base\": \"tiny.json\"}"));
  snprintf(mod, sizeof mod, "%s",
           fe_t_write("mod.json", "{\"kind\": \"partition\", \"path\": \"/model/encoder\","
                                  " \"specs\": {}}"));
  const char *apply[] = {mod, NULL};
  fe_t_resolve(&t, cfg, NULL, apply, NULL);
  CHECK_FAILS(&t, mod, ": /model/encoder: the config has nothing at this path");
  fe_t_done(&t);
  fe_t_write("mod.json", "{\"kind\": \"replac\", \"target\": \"attention\"}");
  fe_t_resolve(&t, cfg, NULL, apply, NULL);
  CHECK_FAILS(&t, mod, ": /kind: unknown modifier kind \"replac\"", "did you mean \"replace\"?");
  fe_t_done(&t);
  fe_t_write("mod.json",
             "{\"kind\": \"set\", \"path\": \"/model/decoder/num_layers\", \"value\": 0}");
  fe_t_resolve(&t, cfg, NULL, apply, NULL);
  /* the value came from mod.json: reported against it */
  CHECK_FAILS(&t, mod, ": /model/decoder/num_layers: value 0 is out of range (expected 1 to 4096)");
  fe_t_done(&t);
  snprintf(mod, sizeof mod, "%s/nope.json", fe_t_dir());
  fe_t_resolve(&t, cfg, NULL, apply, NULL);
  CHECK_FAILS(&t, mod, ": cannot open: No such file or directory");
  fe_t_done(&t);
}

static void test_origin_derived_over_base(void) {
  FeT t;
  /* schema-level: the derived file set the value */
  bad(&t, "\"model\": {\"decoder\": {\"num_layers\": -2}}", NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/num_layers: value -2 is out of range");
  fe_t_done(&t);
  /* build-level: the derived file set num_heads */
  bad(&t, ATTN("{\"num_heads\": 3}"), NULL, NULL);
  CHECK_BAD(&t, ": /model/decoder/layer/self_attention/num_heads: num_heads 3 does not divide");
  fe_t_done(&t);
  /* and a value the base set is reported against the base */
  fe_t_write("mid.json", "{\"base\": \"tiny.json\", " ATTN("{\"num_heads\": 3}") "}");
  fe_t_write("top.json", "{\"base\": \"mid.json\", \"max_steps\": 5}");
  char top[4096], mid[4096];
  snprintf(top, sizeof top, "%s/top.json", fe_t_dir());
  snprintf(mid, sizeof mid, "%s/mid.json", fe_t_dir());
  fe_t_resolve(&t, top, NULL, NULL, NULL);
  CHECK_FAILS(&t, mid, ": /model/decoder/layer/self_attention/num_heads: num_heads 3");
  CHECK_LACKS(t.msgs, "top.json");
  fe_t_done(&t);
}

static void test_origin_set(void) {
  FeT t;
  const char *sets[] = {"/model/decoder/num_layers=0", NULL};
  bad(&t, "\"max_steps\": 10", NULL, sets);
  CHECK_FAILS(&t, "--set: /model/decoder/num_layers: value 0 is out of range (expected 1 to 4096)");
  CHECK_LACKS(t.msgs, "bad.json");
  fe_t_done(&t);
  const char *sets2[] = {"/model/decoder/layer/self_attention/num_heads=5", NULL};
  bad(&t, "\"max_steps\": 10", NULL, sets2);
  CHECK_FAILS(&t, "--set: /model/decoder/layer/self_attention/num_heads: num_heads 5 does not "
                  "divide dim 64 (expected a divisor of 64)");
  fe_t_done(&t);
  const char *sets3[] = {"/model/decoder/layer/feed_forward={\"kind\": \"moe\", \"num_experts\": 1,"
                         " \"top_k\": 2}",
                         NULL};
  bad(&t, "\"max_steps\": 10", NULL, sets3);
  CHECK_FAILS(&t, "--set: /model/decoder/layer/feed_forward/top_k: top_k 2 exceeds num_experts 1");
  fe_t_done(&t);
  const char *sets4[] = {"/model/decoder/layer/feed_forward/activation=gleu", NULL};
  bad(&t, "\"max_steps\": 10", NULL, sets4);
  CHECK_FAILS(&t, "--set: /model/decoder/layer/feed_forward/activation: value \"gleu\" is not "
                  "allowed (expected one of gelu|relu|swiglu); did you mean \"gelu\"?");
  fe_t_done(&t);
  /* the mesh is checked before the module walk: still reported against --set */
  const char *sets6[] = {"/mesh/axes=[\"data\", \"fsdp\", \"modle\"]", "/mesh/shape=[1, 1, 1]",
                         NULL};
  bad(&t, "\"mesh\": {\"kind\": \"device_mesh\", \"shape\": [1, -1, 1, 1, 1, 1]}", NULL, sets6);
  CHECK_FAILS(&t, "--set: /mesh/axes/2: unknown mesh axis \"modle\"", "did you mean \"model\"?");
  CHECK_LACKS(t.msgs, "bad.json");
  fe_t_done(&t);
  /* (an element set by --set makes the list --set's: test_regressions.c) */
  const char *sets5[] = {"/model/nope/x=1", NULL};
  bad(&t, "\"max_steps\": 10", NULL, sets5);
  CHECK_FAILS(&t, "--set: /model/nope/x: the config has no object at /model/nope");
  fe_t_done(&t);
}

static const TestCase cases[] = {
    {"json_syntax", test_json_syntax},
    {"json_nul_byte", test_json_nul_byte},
    {"json_trailing_garbage", test_json_trailing_garbage},
    {"json_top_level_not_object", test_json_top_level_not_object},
    {"missing_file", test_missing_file},
    {"unknown_kind", test_unknown_kind},
    {"kind_not_allowed", test_kind_not_allowed},
    {"unknown_field", test_unknown_field},
    {"wrong_type", test_wrong_type},
    {"out_of_range", test_out_of_range},
    {"missing_required", test_missing_required},
    {"bad_enum", test_bad_enum},
    {"heads_do_not_divide_dim", test_heads_do_not_divide_dim},
    {"kv_heads", test_kv_heads},
    {"rope_odd_head_dim", test_rope_odd_head_dim},
    {"top_k_exceeds_experts", test_top_k_exceeds_experts},
    {"pos_table_too_short", test_pos_table_too_short},
    {"batch_not_divisible", test_batch_not_divisible},
    {"microbatches_bad", test_microbatches_bad},
    {"spec_unknown_axis", test_spec_unknown_axis},
    {"spec_rank_mismatch", test_spec_rank_mismatch},
    {"axis_does_not_divide_param", test_axis_does_not_divide_param},
    {"mesh_axes", test_mesh_axes},
    {"mesh_two_wildcards", test_mesh_two_wildcards},
    {"remat_policy_errors", test_remat_policy_errors},
    {"apply_file_errors", test_apply_file_errors},
    {"origin_derived_over_base", test_origin_derived_over_base},
    {"origin_set", test_origin_set},
    {NULL, NULL},
};

int main(int argc, char **argv) { return fe_t_main(argc, argv, "frontend_errors", cases); }
