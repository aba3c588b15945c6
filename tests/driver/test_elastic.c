/* test_elastic.c: the mesh and microbatches of a job on fewer ranks (driver/elastic.c:
 * drv_elastic_plan), on configs shaped as a trainer's --config prints them.
 *
 * - A -1 axis (the CPU mesh rule's data axis) stays, and the microbatches rise by the factor
 *   the batch shards fell (4 -> 2 ranks: 1 -> 2).
 * - A mesh of fixed sizes gives up the factor on data, then fsdp, then expert; model stays.
 * - A count that does not hold the rows of a microbatch takes the next that divides the rows
 *   per device; one whose batch shards do not divide the global batch, a mesh with no batch
 *   axis to shrink, and a config without a mesh are refused with the reason.
 * - A pipeline keeps its stages: the batch axes shrink inside each stage.
 * Runs without LLVM or MPI.
 */
#include <stdio.h>
#include <string.h>

#include "driver/driver.h"
#include "tests/cunit_check.h"

/* A config of mesh `shape`, global batch `gb`, `mb` microbatches. */
static const char *config(const char *shape, int gb, int mb) {
  static char buf[512];
  snprintf(buf, sizeof buf,
           "{\"input\": {\"global_batch_size\": %d, \"kind\": \"lm_input\"}, \"learner\": "
           "{\"microbatches\": %d}, \"mesh\": {\"axes\": [\"pipeline\", \"data\", \"expert\", "
           "\"fsdp\", \"seq\", \"model\"], \"kind\": \"device_mesh\", \"shape\": %s}}",
           gb, mb, shape);
  return buf;
}

/* cfg with /mesh/pipeline_schedule "interleaved" (cfg is config()'s buffer). */
static const char *interleaved(const char *cfg) {
  static char buf[600];
  size_t n = strlen(cfg);
  snprintf(buf, sizeof buf, "%.*s, \"pipeline_schedule\": \"interleaved\"}}", (int)(n - 2), cfg);
  return buf;
}

/* The plan's shape as "[a,b,...]". */
static const char *shape_of(const DrvElasticPlan *p) {
  static char buf[128];
  size_t n = (size_t)snprintf(buf, sizeof buf, "[");
  for (int i = 0; i < p->naxes; i++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", i ? "," : "", (long long)p->shape[i]);
  snprintf(buf + n, sizeof buf - n, "]");
  return buf;
}

static void plan_ok(const char *cfg, int from, int to, const char *shape, int mb) {
  DrvElasticPlan p;
  char why[256] = "";
  int rc = drv_elastic_plan(cfg, from, to, &p, why, sizeof why);
  CHECK_MSG(rc == 0, "%d -> %d: refused: %s", from, to, why);
  if (rc) return;
  CHECK_MSG(!strcmp(shape_of(&p), shape), "%d -> %d: mesh %s, expected %s", from, to, shape_of(&p),
            shape);
  CHECK_INT(p.microbatches, mb);
}

static void plan_refused(const char *cfg, int from, int to, const char *reason) {
  DrvElasticPlan p;
  char why[256] = "";
  CHECK_INT(drv_elastic_plan(cfg, from, to, &p, why, sizeof why), -1);
  CHECK_MSG(strstr(why, reason) != NULL, "%d -> %d: '%s', expected '%s'", from, to, why, reason);
}

static void test_free_axis(void) {
  plan_ok(config("[1,-1,1,1,1,1]", 8, 1), 4, 2, "[1,-1,1,1,1,1]", 2);
  plan_ok(config("[1,-1,1,1,1,1]", 8, 1), 4, 1, "[1,-1,1,1,1,1]", 4);
  plan_ok(config("[1,-1,1,1,1,1]", 8, 2), 2, 1, "[1,-1,1,1,1,1]", 4);
  plan_refused(config("[1,-1,1,1,1,1]", 8, 1), 4, 3,
               "no mesh of 3 ranks keeps this job's global "
               "batch of 8");
}

static void test_fixed_mesh(void) {
  plan_ok(config("[1,2,1,1,1,2]", 8, 1), 4, 2, "[1,1,1,1,1,2]", 2);
  plan_ok(config("[1,1,1,4,1,1]", 8, 1), 4, 2, "[1,1,1,2,1,1]", 2);
  plan_ok(config("[1,1,2,2,1,1]", 8, 1), 4, 2, "[1,1,2,1,1,1]", 2); /* fsdp before expert */
  plan_refused(config("[1,1,1,1,1,4]", 8, 1), 4, 2, "no mesh of 2 ranks");
  plan_refused(config("[1,2,1,1,1,2]", 8, 1), 4, 3, "no mesh of 3 ranks");
}

static void test_rounding(void) {
  /* 4 ranks, 15 rows each in 5 microbatches of 3; on 3 ranks 20 rows: 7 does not divide them,
   * nor 8 or 9; 10 microbatches of 2 rows */
  plan_ok(config("[1,-1,1,1,1,1]", 60, 5), 4, 3, "[1,-1,1,1,1,1]", 10);
  plan_ok(config("[1,-1,1,1,1,1]", 12, 1), 4, 3, "[1,-1,1,1,1,1]", 2);
}

/* A pipeline keeps its stages: data gives up the ranks, each stage's microbatches rise (still
 * at least the stages), and a pipeline alone cannot shrink. */
static void test_pipeline(void) {
  plan_ok(config("[2,2,1,1,1,1]", 8, 2), 4, 2, "[2,1,1,1,1,1]", 4);
  plan_ok(config("[2,-1,1,1,1,1]", 16, 2), 8, 4, "[2,-1,1,1,1,1]", 4);
  plan_ok(config("[2,2,1,2,1,1]", 8, 2), 8, 4, "[2,1,1,2,1,1]", 4);
  plan_refused(config("[2,1,1,1,1,1]", 8, 2), 2, 1, "no mesh of 1 ranks");
  /* 3 -> 2 ranks of a -1 data axis, 24 rows, 2 microbatches: 3 per device; 12 rows now hold 3, but
   * the interleaved schedule takes groups of 2 stages: 4 */
  plan_ok(config("[2,-1,1,1,1,1]", 24, 2), 6, 4, "[2,-1,1,1,1,1]", 3);
  plan_ok(interleaved(config("[2,-1,1,1,1,1]", 24, 2)), 6, 4, "[2,-1,1,1,1,1]", 4);
  plan_refused(config("[4,2,1,1,1,1]", 8, 4), 8, 2, "no mesh of 2 ranks");
}

static void test_bad_config(void) {
  plan_refused("{\"input\": {\"global_batch_size\": 8}}", 4, 2, "the config has no /mesh");
  plan_refused("not json", 4, 2, "the config has no /mesh");
  plan_refused(config("[1,-1,1,1,1,1]", 0, 1), 4, 2, "/input/global_batch_size");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"a -1 axis: the target sizes it", test_free_axis},
      {"fixed sizes: data, then fsdp, then expert", test_fixed_mesh},
      {"microbatches: the next count that divides", test_rounding},
      {"a pipeline keeps its stages", test_pipeline},
      {"configs without what the plan needs", test_bad_config},
      {NULL, NULL},
  };
  return test_main(argc, argv, "driver_elastic", cases);
}
