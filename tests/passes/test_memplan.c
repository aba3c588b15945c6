/* test_memplan.c: the memory planner on IR text: fixed region, reuse by liveness, in-place
 * parameter updates, refusal of unsafe in-place updates, pipeline stages sharing bytes; every
 * plan is checked for overlapping live buffers (pass_memplan_conflicts). */
#include "passes/passes.h"
#include "tests/ir/ir_test.h"

static IrGraph *parse(const char *text) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  return g;
}

static void test_fixed_region_and_reuse(void) {
  IrGraph *g = parse("%0 = parameter \"w\" : f32[16]\n"
                     "%1 = input \"x\" : f32[16]\n"
                     "%2 = mul %0, %1 : f32[16]\n"
                     "%3 = exp %2 : f32[16]\n"
                     "%4 = exp %3 : f32[16]\n"
                     "%5 = exp %4 : f32[16]\n"
                     "output \"y\" = %5\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  MemPlan p;
  CU_ASSERT_EQUAL_FATAL(pass_memplan(g, &p), IR_OK);
  CU_ASSERT_EQUAL(p.offset[0], 0);
  CU_ASSERT_EQUAL(p.offset[1], 64);
  CU_ASSERT_EQUAL(p.param_bytes, 64);
  CU_ASSERT_EQUAL(p.input_bytes, 64);
  /* %2 dies at %3, so %4 can take %2's place; %3 dies at %4, so %5 takes %3's. */
  CU_ASSERT_EQUAL(p.offset[4], p.offset[2]);
  CU_ASSERT_EQUAL(p.offset[5], p.offset[3]);
  CU_ASSERT_EQUAL(p.peak_temp_bytes, 128);
  CU_ASSERT_EQUAL(p.slab_bytes, 256);
  CU_ASSERT_EQUAL(pass_memplan_conflicts(g, NULL, &p), 0);
  pass_memplan_free(&p);
  ir_graph_free(g);
}

static void test_in_place_update(void) {
  IrGraph *g = parse("%0 = parameter \"w\" : f32[8]\n"
                     "%1 = parameter \"opt/m/w\" : f32[8]\n"
                     "%2 = input \"x\" : f32[8]\n"
                     "%3 = mul %0, %2 : f32[8]\n"
                     "%4 = add %1, %3 : f32[8]\n"
                     "%5 = sub %0, %4 : f32[8]\n"
                     "output \"new:opt/m/w\" = %4\n"
                     "output \"new:w\" = %5\n"
                     "output \"loss\" = %3\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  MemPlan p;
  CU_ASSERT_EQUAL_FATAL(pass_memplan(g, &p), IR_OK);
  CU_ASSERT_EQUAL(p.offset[5], p.offset[0]); /* new:w over w */
  CU_ASSERT_EQUAL(p.offset[4], p.offset[1]); /* new:opt/m/w over opt/m/w */
  CU_ASSERT_EQUAL(p.opt_bytes, 32);
  CU_ASSERT_EQUAL(p.param_bytes, 32);
  CU_ASSERT_EQUAL(pass_memplan_conflicts(g, NULL, &p), 0);
  pass_memplan_free(&p);
  ir_graph_free(g);
}

static void test_refuses_read_after_update(void) {
  IrGraph *g = parse("%0 = parameter \"w\" : f32[4]\n"
                     "%1 = exp %0 : f32[4]\n"
                     "%2 = mul %0, %0 : f32[4]\n"
                     "output \"new:w\" = %1\n"
                     "output \"y\" = %2\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  MemPlan p;
  CU_ASSERT_EQUAL(pass_memplan(g, &p), IR_ERR);
  CU_ASSERT_PTR_NOT_NULL(strstr(ir_graph_error(g), "%2 reads w after its update %1"));
  ir_graph_free(g);
}

static void test_refuses_non_elementwise_update(void) {
  IrGraph *g = parse("%0 = parameter \"w\" : f32[2,2]\n"
                     "%1 = transpose %0 perm=[1,0] : f32[2,2]\n"
                     "output \"new:w\" = %1\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  MemPlan p;
  CU_ASSERT_EQUAL(pass_memplan(g, &p), IR_ERR);
  CU_ASSERT_PTR_NOT_NULL(strstr(ir_graph_error(g), "not elementwise"));
  ir_graph_free(g);
}

static void test_fused_values_keep_operands_live(void) {
  IrGraph *g = parse("%0 = input \"x\" : f32[16]\n"
                     "%1 = exp %0 : f32[16]\n"
                     "%2 = neg %1 : f32[16]\n"
                     "%3 = exp %0 : f32[16]\n"
                     "%4 = add %2, %3 : f32[16]\n"
                     "output \"y\" = %4\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  /* %2 is computed inside %4's loop: it reads %1 only when %4 runs */
  bool mat[5] = {true, true, false, true, true};
  MemPlan p;
  CU_ASSERT_EQUAL_FATAL(pass_memplan_fused(g, mat, &p), IR_OK);
  CHECK_INT(p.bytes[2], 0);
  CU_ASSERT_NOT_EQUAL(p.offset[3], p.offset[1]); /* %1 is still live when %3 is computed */
  CHECK_INT(pass_memplan_conflicts(g, mat, &p), 0);
  pass_memplan_free(&p);
  /* without fusion %1 dies at %2, and %3 takes its place */
  CU_ASSERT_EQUAL_FATAL(pass_memplan(g, &p), IR_OK);
  CHECK_INT(p.offset[3], p.offset[1]);
  pass_memplan_free(&p);
  ir_graph_free(g);
}

/* A slab in buffers of at most `split` bytes: no value crosses a multiple of split, the bytes
 * skipped stay free for others, and the plan has no conflicts. */
static void test_split(void) {
  IrGraph *g = parse("%0 = parameter \"w\" : f32[40]\n"
                     "%1 = input \"x\" : f32[40]\n"
                     "%2 = mul %0, %1 : f32[40]\n"
                     "%3 = exp %2 : f32[40]\n"
                     "%4 = exp %3 : f32[40]\n"
                     "%5 = exp %4 : f32[40]\n"
                     "output \"y\" = %5\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  MemPlan p;
  CU_ASSERT_EQUAL_FATAL(pass_memplan_fused(g, NULL, &p), IR_OK);
  CHECK_INT(p.offset[1], 192); /* 160 bytes from 192: across 256 */
  pass_memplan_free(&p);
  CU_ASSERT_EQUAL_FATAL(pass_memplan_split(g, NULL, 256, &p), IR_OK);
  CHECK_INT(p.offset[0], 0);
  CHECK_INT(p.offset[1], 256); /* moved past the cut */
  for (int32_t v = 0; v < g->nvalues; v++)
    if (p.bytes[v] > 0) CHECK_INT(p.offset[v] / 256, (p.offset[v] + p.bytes[v] - 1) / 256);
  CHECK_INT(pass_memplan_conflicts(g, NULL, &p), 0);
  pass_memplan_free(&p);
  ir_graph_free(g);
}

/* A second graph in the first's slab: its parameters where the first has them (the same name,
 * dtype and shape), everything else of its own past the bytes the first keeps. */
static void test_over_another_plan(void) {
  IrGraph *a = parse("%0 = parameter \"w\" : f32[16]\n"
                     "%1 = input \"x\" : f32[16]\n"
                     "%2 = parameter \"u\" : f32[8]\n"
                     "%3 = mul %0, %1 : f32[16]\n"
                     "%4 = exp %3 : f32[16]\n"
                     "output \"y\" = %4\n"
                     "output \"z\" = %2\n");
  IrGraph *b = parse("%0 = input \"c\" : f32[16]\n"
                     "%1 = parameter \"w\" : f32[16]\n"
                     "%2 = parameter \"u\" : f32[4]\n"
                     "%3 = add %0, %1 : f32[16]\n"
                     "%4 = neg %3 : f32[16]\n"
                     "output \"y\" = %4\n"
                     "output \"z\" = %2\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  MemPlan pa, pb;
  CU_ASSERT_EQUAL_FATAL(pass_memplan(a, &pa), IR_OK);
  int64_t keep = pa.slab_bytes + 12; /* the first writes a little past its plan */
  CU_ASSERT_EQUAL_FATAL(pass_memplan_over(b, NULL, a, &pa, keep, &pb), IR_OK);
  CHECK_INT(pb.offset[1], pa.offset[0]); /* w: shared */
  CU_ASSERT_TRUE(pb.offset[2] >= keep);  /* u: another shape, its own */
  for (int32_t v = 0; v < b->nvalues; v++)
    if (v != 1) CU_ASSERT_TRUE(pb.offset[v] >= keep);
  CU_ASSERT_TRUE(pb.slab_bytes >= pb.offset[4] + 64);
  CHECK_INT(pass_memplan_conflicts(b, NULL, &pb), 0);
  pass_memplan_free(&pa);
  pass_memplan_free(&pb);
  ir_graph_free(a);
  ir_graph_free(b);
}

/* Pipeline stages: a device runs its own stage's values and every device's, so two stages'
 * values share bytes while both live; outputs (which the step's end may copy from their stage to
 * the others) and every device's values stay apart from both. */
static void test_stages_share(void) {
  const char *text = "%0 = parameter \"w\" : f32[16]\n"
                     "%1 = input \"x\" : f32[16]\n"
                     "%2 = mul %0, %1 : f32[16]\n" /* stage 0, live to %5 */
                     "%3 = exp %0 : f32[16]\n"     /* stage 1, live to %4 */
                     "%4 = exp %3 : f32[16]\n"     /* stage 1, an output */
                     "%5 = exp %2 : f32[16]\n"     /* stage 0, an output */
                     "output \"a\" = %5\n"
                     "output \"b\" = %4\n";
  for (int staged = 0; staged < 2; staged++) {
    IrGraph *g = parse(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    if (staged)
      g->values[2].stage = g->values[5].stage = 1, g->values[3].stage = g->values[4].stage = 2;
    MemPlan p;
    CU_ASSERT_EQUAL_FATAL(pass_memplan(g, &p), IR_OK);
    if (staged) {
      CHECK_MSG(p.offset[2] == p.offset[3], "two stages' values at %lld and %lld",
                (long long)p.offset[2], (long long)p.offset[3]);
      CU_ASSERT(pass_memplan_apart(&p, 2, 3));
      CU_ASSERT(!pass_memplan_apart(&p, 2, 4)); /* an output */
      CU_ASSERT(!pass_memplan_apart(&p, 0, 3)); /* a parameter */
      CHECK_INT(p.slab_bytes, 128 + 128 + 64);  /* fixed, the two outputs, the largest stage */
    } else {
      CU_ASSERT(p.offset[2] != p.offset[3]);
      CU_ASSERT(!pass_memplan_apart(&p, 2, 3));
    }
    CHECK_INT(pass_memplan_conflicts(g, NULL, &p), 0);
    pass_memplan_free(&p);
    ir_graph_free(g);
  }
}

/* Pipeline leaves: a stage's parameters and moments share bytes with the other stage's; a table
 * both stages read and the inputs, which every device writes, stay every device's. */
static void test_stage_leaves(void) {
  IrGraph *g = parse("%0 = parameter \"a\" : f32[16]\n"
                     "%1 = parameter \"opt/m/a\" : f32[16]\n"
                     "%2 = parameter \"opt/v/a\" : f32[16]\n"
                     "%3 = parameter \"b\" : f32[32]\n"
                     "%4 = parameter \"opt/m/b\" : f32[32]\n"
                     "%5 = parameter \"opt/v/b\" : f32[32]\n"
                     "%6 = parameter \"t\" : f32[16]\n"
                     "%7 = input \"x\" : f32[16]\n"
                     "%8 = mul %0, %7 : f32[16]\n"   /* stage 1 */
                     "%9 = add %1, %2 : f32[16]\n"   /* stage 1 */
                     "%10 = mul %8, %6 : f32[16]\n"  /* stage 1 */
                     "%11 = add %4, %5 : f32[32]\n"  /* stage 2 */
                     "%12 = mul %11, %3 : f32[32]\n" /* stage 2 */
                     "%13 = mul %6, %6 : f32[16]\n"  /* stage 2 */
                     "output \"p\" = %9\n"
                     "output \"q\" = %10\n"
                     "output \"r\" = %12\n"
                     "output \"s\" = %13\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  const int16_t stage[14] = {1, 1, 1, 2, 2, 2, 0, 1, 1, 1, 1, 2, 2, 2};
  for (int32_t v = 0; v < 14; v++) g->values[v].stage = stage[v];
  MemPlan p;
  CU_ASSERT_EQUAL_FATAL(pass_memplan(g, &p), IR_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p.region);
  /* t and x first; then stage 1's a, m, v and stage 2's b, m, v from the same offset */
  CHECK_INT(p.offset[6], 0);
  CHECK_INT(p.offset[7], 64);
  CHECK_INT(p.offset[0], 128);
  CHECK_INT(p.offset[3], 128);
  CHECK_INT(p.offset[1], 192);
  CHECK_INT(p.offset[4], 256);
  CHECK_INT(p.fixed_bytes, 128 + 3 * 128);
  CHECK_INT(p.region[0], 1);
  CHECK_INT(p.region[5], 2);
  CHECK_INT(p.region[6], 0); /* read by both stages */
  CHECK_INT(p.region[7], 0); /* an input */
  CU_ASSERT(pass_memplan_apart(&p, 0, 3));
  CU_ASSERT(!pass_memplan_apart(&p, 6, 3));
  /* each stage's device allocates the leaves and its stage's and every device's values */
  CHECK_INT(p.nstages, 2);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p.stage_slab);
  for (int32_t s = 0; s < 2; s++)
    CU_ASSERT(p.stage_slab[s] >= p.fixed_bytes && p.stage_slab[s] <= p.slab_bytes);
  CHECK_INT(p.stage_slab[0] > p.stage_slab[1] ? p.stage_slab[0] : p.stage_slab[1], p.slab_bytes);
  for (int32_t v = 0; v < 14; v++)
    for (int32_t s = 0; s < 2; s++)
      if (p.region[v] == 0 || p.region[v] == s + 1)
        CU_ASSERT(p.offset[v] + p.bytes[v] <= p.stage_slab[s]);
  CHECK_INT(pass_memplan_conflicts(g, NULL, &p), 0);
  pass_memplan_free(&p);
  ir_graph_free(g);
}

/* Placement: first fit puts %6 (one unit of 64 bytes) in the two-unit gap %2 left, so %8 (two
 * units) goes to the top: 9 units past the fixed region; best fit puts %6 in %4's one-unit gap
 * and %8 where %2 was: 7 units. The plan keeps the smaller. */
static void test_better_fit(void) {
  IrGraph *g = parse("%0 = input \"p\" : f32[32]\n"
                     "%1 = input \"q\" : f32[16]\n"
                     "%2 = exp %0 : f32[32]\n"
                     "%3 = exp %0 : f32[32]\n"
                     "%4 = exp %1 : f32[16]\n"
                     "%5 = exp %2 : f32[32]\n"
                     "%6 = exp %4 : f32[16]\n"
                     "%7 = exp %1 : f32[16]\n"
                     "%8 = exp %3 : f32[32]\n"
                     "output \"a\" = %5\n"
                     "output \"b\" = %7\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  MemPlan p;
  CU_ASSERT_EQUAL_FATAL(pass_memplan(g, &p), IR_OK);
  CHECK_INT(p.fixed_bytes, 192);
  CHECK_INT(p.slab_bytes, 192 + 7 * 64);
  CHECK_INT(pass_memplan_conflicts(g, NULL, &p), 0);
  pass_memplan_free(&p);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"over_another_plan", test_over_another_plan},
      {"split", test_split},
      {"stages_share", test_stages_share},
      {"better_fit", test_better_fit},
      {"stage_leaves", test_stage_leaves},
      {"fixed_region_and_reuse", test_fixed_region_and_reuse},
      {"in_place_update", test_in_place_update},
      {"refuses_read_after_update", test_refuses_read_after_update},
      {"refuses_non_elementwise_update", test_refuses_non_elementwise_update},
      {"fused_values_keep_operands_live", test_fused_values_keep_operands_live},
      {NULL, NULL},
  };
  return test_main(argc, argv, "memplan", cases);
}
