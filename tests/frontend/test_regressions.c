/*
 * test_regressions.c: reproducers of frontend bugs found by the test suite,
 * kept after the fix. Each comment states the input, what used to happen and
 * what is expected now.
 */
#include <stdlib.h>

#include "tests/frontend/fe_test.h"

static char cfg[4096], part[4096];

/* frontend/modifiers.c, mod_replace: `fe_path_join(p, sizeof p, p, "kind")`
 * passes the output buffer as the snprintf source (undefined behaviour); in
 * practice the message's path loses its prefix and reads "/kind".
 * Input: {"kind": "replace", "target": "feed_forward", "config": {"kind": "mo"}}
 * as the config's first modifier.
 * Expected: "cfg.json: /modifiers/0/config/kind: unknown module kind "mo"..."
 * Actual:   "cfg.json: /kind: unknown module kind "mo"; did you mean "moe"?" */
static void test_replace_config_kind_path(void) {
  FeT t;
  fe_t_write_tiny();
  fe_t_write("cfg.json",
             "{\"base\": \"tiny.json\", \"modifiers\": [{\"kind\": \"replace\", \"target\":"
             " \"feed_forward\", \"config\": {\"kind\": \"mo\", \"num_experts\": 2}}]}");
  snprintf(cfg, sizeof cfg, "%s/cfg.json", fe_t_dir());
  fe_t_resolve(&t, cfg, NULL, NULL, NULL);
  CHECK_FAILS(&t, ": /modifiers/0/config/kind: unknown module kind \"mo\"");
  fe_t_done(&t);
}

/* frontend/build.c, check_spec_names: the error for a partition spec naming
 * a parameter the kind lacks is reported against the node's file (b->file),
 * not the file that added the key (fe_origin_key(specs, name)), unlike every
 * other spec error (fe_param uses the key's origin).
 * Input: tiny config + --apply part.json =
 *   {"kind": "partition", "path": "/model/decoder/layer/feed_forward",
 *    "specs": {"linear3": ["fsdp", "model"]}}
 * Expected: "part.json: /model/.../param_partition_specs/linear3: kind ..."
 * Actual:   "tiny.json: /model/.../param_partition_specs/linear3: kind ..." */
static void test_partition_unknown_param_origin(void) {
  FeT t;
  fe_t_write_tiny();
  snprintf(cfg, sizeof cfg, "%s", fe_t_write("cfg.json", "{\"base\": \"tiny.json\"}"));
  snprintf(part, sizeof part, "%s",
           fe_t_write("part.json",
                      "{\"kind\": \"partition\", \"path\": \"/model/decoder/layer/feed_forward\","
                      " \"specs\": {\"linear3\": [\"fsdp\", \"model\"]}}"));
  const char *apply[] = {part, NULL};
  fe_t_resolve(&t, cfg, NULL, apply, NULL);
  CHECK_FAILS(&t, part, ": /model/decoder/layer/feed_forward/param_partition_specs/linear3: ");
  fe_t_done(&t);
}

/* frontend/modifiers.c, set_in_array: the index is read with strtol and only
 * `*end` is checked, so an empty last component (a trailing '/') reads as 0.
 * Input: --set /mesh/shape/=7 on a config with an explicit mesh.
 * Expected: an error (the config has no element "" in the list at /mesh/shape).
 * Actual:   succeeds and sets /mesh/shape/0 to 7. (" 1" and "+1" are
 *           likewise accepted as 1.) */
static void test_set_array_trailing_slash(void) {
  FeT t;
  fe_t_write_tiny();
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"mesh\": {\"kind\": \"device_mesh\","
                                  " \"shape\": [1, -1, 1, 1, 1, 1]}}"));
  const char *sets[] = {"/mesh/shape/=7", NULL};
  fe_t_resolve(&t, cfg, NULL, NULL, sets);
  CHECK_FAILS(&t, "--set: /mesh/shape/: ");
  fe_t_done(&t);
  const char *sets2[] = {"/mesh/shape/+1=2", NULL};
  fe_t_resolve(&t, cfg, NULL, NULL, sets2);
  CHECK_FAILS(&t, "--set: /mesh/shape/+1: ");
  fe_t_done(&t);
}

/* frontend/modifiers.c, set_in_array: setting one element of a list gives
 * the new element an origin (a no-op for scalars) but leaves the origin of
 * the list's key in its parent, so errors about the list name the file that
 * wrote the list, not the one that changed the element.
 * Input: bad.json = tiny + "mesh": {"kind": "device_mesh", "shape": [1, -1, 1, 1, 1, 1]},
 *        --target cpu-4 --set /mesh/shape/3=3
 * Expected: "--set: /mesh/shape: the mesh needs a multiple of 3 devices, ..."
 * Actual:   "bad.json: /mesh/shape: the mesh needs a multiple of 3 devices, ..." */
static void test_set_array_element_origin(void) {
  FeT t;
  fe_t_write_tiny();
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write("bad.json", "{\"base\": \"tiny.json\", \"mesh\": {\"kind\": \"device_mesh\","
                                  " \"shape\": [1, -1, 1, 1, 1, 1]}}"));
  const char *sets[] = {"/mesh/shape/3=3", NULL};
  fe_t_resolve(&t, cfg, "cpu-4", NULL, sets);
  CHECK_FAILS(&t,
              "--set: /mesh/shape: the mesh needs a multiple of 3 devices, but the target has 4");
  fe_t_done(&t);
}

/* frontend/modifiers.c, mod_partition: on a module whose config does not set
 * param_partition_specs, the modifier creates an object holding only the
 * named specs, and the schema default (which covers the other parameters)
 * is then not applied: partitioning q_proj silently replicates k_proj,
 * v_proj and o_proj. "Merge into the existing specs" should include the
 * kind's default specs.
 * Input: tiny config + {"kind": "partition", "path":
 *   "/model/decoder/layer/self_attention", "specs": {"q_proj": ["fsdp", null]}}
 * Expected: k_proj ["fsdp", "model"], o_proj ["model", "fsdp"] (defaults kept).
 * Actual:   param_partition_specs is {"q_proj": ["fsdp", null]} only. */
static void test_partition_keeps_default_specs(void) {
  FeT t;
  fe_t_write_tiny();
  snprintf(cfg, sizeof cfg, "%s", fe_t_write("cfg.json", "{\"base\": \"tiny.json\"}"));
  snprintf(part, sizeof part, "%s",
           fe_t_write("part.json",
                      "{\"kind\": \"partition\", \"path\": \"/model/decoder/layer/self_attention\","
                      " \"specs\": {\"q_proj\": [\"fsdp\", null]}}"));
  const char *apply[] = {part, NULL};
  fe_t_resolve(&t, cfg, NULL, apply, NULL);
  REQUIRE_RESOLVED(&t);
  char *k =
      fe_t_canon_at(t.tree, "/model/decoder/layer/self_attention/param_partition_specs/k_proj");
  CHECK_STR(k, "[\"fsdp\", \"model\"]\n");
  free(k);
  fe_t_done(&t);
}

/* frontend/resolve.c, load_rules: when the mesh_rules file cannot be read,
 * the reference to the "mesh_rules" string is never released.
 * Input: {"base": "tiny.json", "mesh_rules": "rules/absent.json"}.
 * Expected: "rules/absent.json: cannot open: ..." and nothing leaked.
 * Actual:   the message, and LeakSanitizer reports the string (this test
 *           fails in the ASan build). The same for a rules file that does
 *           not parse. */
static void test_missing_rules_file_leak(void) {
  FeT t;
  fe_t_write_tiny();
  snprintf(
      cfg, sizeof cfg, "%s",
      fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"mesh_rules\": \"rules/absent.json\"}"));
  fe_t_resolve(&t, cfg, "cpu", NULL, NULL);
  CHECK_FAILS(&t, "/cfg.json: /mesh_rules: rules/absent.json: no such file (looked in ");
  fe_t_done(&t);
  fe_t_write("rules/bad.json", "[{\"match\": \"cpu\",]");
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"mesh_rules\": \"rules/bad.json\"}"));
  fe_t_resolve(&t, cfg, "cpu", NULL, NULL);
  CHECK_FAILS(&t, "/rules/bad.json:1:", "JSON syntax error");
  fe_t_done(&t);
}

/* A directory name of 3,011 characters under the scratch dir, made of 12
 * components of 250 (each below NAME_MAX). */
static const char *deep_dir(void) {
  static char dir[4096];
  dir[0] = 0;
  for (int i = 0; i < 12; i++) {
    size_t len = strlen(dir);
    snprintf(dir + len, sizeof dir - len, "%s%0250d", i ? "/" : "", i);
  }
  return dir;
}

/* frontend/diag.c, fe_error: the message was formatted into fixed buffers
 * (1024 bytes of reason, 1400 in all), and resolve.c's dir_of/relative cut
 * file names at 1024 and 2048 bytes.
 * Input: cfg.json in a directory 3,011 characters deep, over tiny.json
 *        next to it, with num_heads 5 and "mesh_rules": "rules/r.json".
 * Expected: "DIR/cfg.json: /model/decoder/layer/self_attention/num_heads:
 *           num_heads 5 does not divide dim 64 ..." with DIR in full, and
 *           the rules file found next to the config.
 * Actual:   "DIR/rules/r.json: cannot open" with DIR cut (and, without the
 *           rules, the num_heads message cut before its reason). */
static void test_long_file_name_keeps_reason(void) {
  FeT t;
  char sub[4200], rules[4200];
  const char *dir = deep_dir();
  snprintf(sub, sizeof sub, "%s/tiny.json", dir);
  fe_t_write(sub, FE_T_TINY);
  snprintf(rules, sizeof rules, "%s/rules/r.json", dir);
  fe_t_write(rules, "[{\"match\": \"cpu\", \"modifiers\": []}]");
  snprintf(sub, sizeof sub, "%s/cfg.json", dir);
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write(sub,
                      "{\"base\": \"tiny.json\", \"mesh_rules\": \"rules/r.json\", \"model\":"
                      " {\"kind\": \"causal_lm\", \"decoder\": {\"kind\": \"decoder\", \"layer\":"
                      " {\"kind\": \"transformer_layer\", \"self_attention\": {\"kind\":"
                      " \"attention\", \"num_heads\": 5}}}}}"));
  CHECK(strlen(cfg) > 3000);
  fe_t_resolve(&t, cfg, "cpu", NULL, NULL);
  char want[4600];
  snprintf(want, sizeof want,
           "%s: /model/decoder/layer/self_attention/num_heads: num_heads 5 does "
           "not divide dim 64 (expected a divisor of 64)\n",
           cfg);
  CHECK_STR(t.msgs, want);
  fe_t_done(&t);
  snprintf(sub, sizeof sub, "%s/ok.json", dir);
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write(sub, "{\"base\": \"tiny.json\", \"mesh_rules\": \"rules/r.json\"}"));
  fe_t_resolve(&t, cfg, "cpu", NULL, NULL);
  REQUIRE_RESOLVED(&t);
  CHECK_STR(t.rule, "cpu");
  fe_t_done(&t);
}

/* frontend/modifiers.c, fe_set_override and set_path: the PATH of --set was
 * copied into 512-byte buffers, so a long path was looked up cut short and
 * the message named the cut path.
 * Input: --set /model/decoder/layer/a/a/.../a/b=1 (600 "a" components).
 * Expected: "--set: PATH: the config has no object at PATH-without-/b",
 *           both in full. */
static void test_long_set_path_in_full(void) {
  FeT t;
  fe_t_write_tiny();
  static char set[4200], parent[4096];
  size_t len = (size_t)snprintf(parent, sizeof parent, "/model/decoder/layer");
  for (int i = 0; i < 600; i++) len += (size_t)snprintf(parent + len, sizeof parent - len, "/a");
  snprintf(set, sizeof set, "%s/b=1", parent);
  const char *sets[] = {set, NULL};
  fe_t_resolve(&t, fe_t_path("tiny.json"), NULL, NULL, sets);
  static char want[8400];
  snprintf(want, sizeof want, "--set: %s/b: the config has no object at %s\n", parent, parent);
  CHECK_STR(t.msgs, want);
  fe_t_done(&t);
}

/* fe_error itself: a message longer than any fixed buffer arrives whole. */
static void test_diag_message_not_cut(void) {
  static char file[3001], path[2001], want[6000];
  memset(file, 'f', sizeof file - 1);
  memset(path, 'p', sizeof path - 1);
  path[0] = '/';
  FeDiag d;
  fe_diag_init(&d);
  CHECK_INT(fe_error(&d, file, path, "the reason, at the end (%d)", 42), -1);
  snprintf(want, sizeof want, "%s: %s: the reason, at the end (42)", file, path);
  CHECK_INT(d.n, 1);
  CHECK_STR(d.msgs[0], want);
  fe_diag_free(&d);
}

static const TestCase cases[] = {
    {"replace_config_kind_path", test_replace_config_kind_path},
    {"partition_unknown_param_origin", test_partition_unknown_param_origin},
    {"set_array_trailing_slash", test_set_array_trailing_slash},
    {"partition_keeps_default_specs", test_partition_keeps_default_specs},
    {"set_array_element_origin", test_set_array_element_origin},
    {"missing_rules_file_leak", test_missing_rules_file_leak},
    {"long_file_name_keeps_reason", test_long_file_name_keeps_reason},
    {"long_set_path_in_full", test_long_set_path_in_full},
    {"diag_message_not_cut", test_diag_message_not_cut},
    {NULL, NULL},
};

int main(int argc, char **argv) { return fe_t_main(argc, argv, "frontend_regressions", cases); }
