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
  EXPECT_FAILS(&t, ": /modifiers/0/config/kind: unknown module kind \"mo\"");
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
  EXPECT_FAILS(&t, part, ": /model/decoder/layer/feed_forward/param_partition_specs/linear3: ");
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
  EXPECT_FAILS(&t, "--set: /mesh/shape/: ");
  fe_t_done(&t);
  const char *sets2[] = {"/mesh/shape/+1=2", NULL};
  fe_t_resolve(&t, cfg, NULL, NULL, sets2);
  EXPECT_FAILS(&t, "--set: /mesh/shape/+1: ");
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
  EXPECT_FAILS(&t, "--set: /mesh/shape: the mesh needs a multiple of 3 devices, but the target has 4");
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
  EXPECT_OK(&t);
  char *k = fe_t_canon_at(t.tree, "/model/decoder/layer/self_attention/param_partition_specs/k_proj");
  EXPECT_STR(k, "[\"fsdp\", \"model\"]\n");
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
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"mesh_rules\": \"rules/absent.json\"}"));
  fe_t_resolve(&t, cfg, "cpu", NULL, NULL);
  EXPECT_FAILS(&t, "/rules/absent.json: cannot open: No such file or directory");
  fe_t_done(&t);
  fe_t_write("rules/bad.json", "[{\"match\": \"cpu\",]");
  snprintf(cfg, sizeof cfg, "%s",
           fe_t_write("cfg.json", "{\"base\": \"tiny.json\", \"mesh_rules\": \"rules/bad.json\"}"));
  fe_t_resolve(&t, cfg, "cpu", NULL, NULL);
  EXPECT_FAILS(&t, "/rules/bad.json:1:", "JSON syntax error");
  fe_t_done(&t);
}

static const FeTCase cases[] = {
    {"replace_config_kind_path", test_replace_config_kind_path},
    {"partition_unknown_param_origin", test_partition_unknown_param_origin},
    {"set_array_trailing_slash", test_set_array_trailing_slash},
    {"partition_keeps_default_specs", test_partition_keeps_default_specs},
    {"set_array_element_origin", test_set_array_element_origin},
    {"missing_rules_file_leak", test_missing_rules_file_leak},
};

int main(int argc, char **argv) {
  return fe_t_main(argc, argv, "frontend_regressions", cases, (int)(sizeof cases / sizeof cases[0]));
}
