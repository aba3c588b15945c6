/*
 * test_pipeline_memory.c: memcheck of a pipeline (driver/memcheck.c, docs/pipeline.md): each
 * stage planned on its own in the schedule's order, the worst stage reported, the schedule's
 * live microbatches, and the bubble in the step-time bound.
 *
 * GPipe keeps every microbatch's saved activations until the backwards start (M of them);
 * 1F1B at most P - s on stage s. The plans must show that: on every stage the saved
 * activations live at the peak are those of the schedule's number of microbatches, and the
 * first stage saves M / min(P, M) times less under 1F1B than under GPipe (within 20%: the
 * peak falls inside a unit, where part of one microbatch is made or freed).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "tests/cunit_check.h"
#include "tests/driver/lower.h"

/* memcheck of model on target with the --set assignments sets[0..n) */
static int plan(const char *model, const char *target, const char **sets, int n, DrvMemReport *r) {
  DrvJob j;
  int rc = test_lower(&j, model, target, sets, n, NULL, false) || drv_memcheck(&j, r);
  drv_free(&j);
  return rc;
}

typedef struct Layout {
  const char *model, *target, *mesh, *batch;
  int P, M;
} Layout;

static const Layout layouts[] = {
    {"tiny-lm.json", "cpu-2", "/mesh/shape=[2,1,1,1,1,1]", "/input/global_batch_size=8", 2, 8},
    {"fuji-test.json", "cpu-2", "/mesh/shape=[2,1,1,1,1,1]", "/input/global_batch_size=8", 2, 8},
    {"fuji-test.json", "cpu-4", "/mesh/shape=[4,1,1,1,1,1]", "/input/global_batch_size=16", 4, 8},
    {"fuji-test.json", "cpu-4", "/mesh/shape=[2,1,1,1,1,2]", "/input/global_batch_size=8", 2, 4},
};

static void test_schedules(void) {
  for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
    const Layout *x = &layouts[l];
    char mb[64];
    snprintf(mb, sizeof mb, "/learner/microbatches=%d", x->M);
    const char *g[] = {x->mesh, x->batch, mb, "/mesh/pipeline_schedule=gpipe"};
    const char *f[] = {x->mesh, x->batch, mb, "/mesh/pipeline_schedule=1f1b"};
    DrvMemReport rg, rf;
    if (plan(x->model, x->target, g, 4, &rg)) {
      CU_FAIL("memcheck (gpipe) failed");
      continue;
    }
    if (plan(x->model, x->target, f, 4, &rf)) {
      CU_FAIL("memcheck (1f1b) failed");
      drv_memreport_free(&rg);
      continue;
    }
    CHECK_MSG(rg.stages == x->P && rf.stages == x->P, "%s %s: %d and %d stages planned", x->model,
              x->mesh, rg.stages, rf.stages);
    CHECK_MSG(!strcmp(rg.schedule, "gpipe") && !strcmp(rf.schedule, "1f1b"), "schedules %s %s",
              rg.schedule, rf.schedule);
    for (int s = 0; s < x->P && rg.stages == x->P && rf.stages == x->P; s++) {
      int64_t want = x->P - s < x->M ? x->P - s : x->M;
      CHECK_MSG(rg.per_stage[s].live_micro == x->M && rg.per_stage[s].peak_micro == x->M,
                "%s %s gpipe stage %d: %lld microbatches saved at the peak (the schedule %lld, "
                "expected %d)",
                x->model, x->mesh, s, (long long)rg.per_stage[s].peak_micro,
                (long long)rg.per_stage[s].live_micro, x->M);
      CHECK_MSG(rf.per_stage[s].live_micro == want && rf.per_stage[s].peak_micro == want,
                "%s %s 1f1b stage %d: %lld microbatches saved at the peak (the schedule %lld, "
                "expected %lld)",
                x->model, x->mesh, s, (long long)rf.per_stage[s].peak_micro,
                (long long)rf.per_stage[s].live_micro, (long long)want);
    }
    if (rg.stages == x->P && rf.stages == x->P) {
      double ratio = (double)rg.per_stage[0].saved / (double)rf.per_stage[0].saved;
      double predicted = (double)x->M / (x->P < x->M ? x->P : x->M);
      printf("\n  %s %s, %d microbatches: stage 0 saves %lld bytes under gpipe, %lld under 1f1b "
             "(%.2fx, the schedule %.2fx); worst peak %lld, %lld",
             x->model, x->mesh, x->M, (long long)rg.per_stage[0].saved,
             (long long)rf.per_stage[0].saved, ratio, predicted, (long long)rg.peak,
             (long long)rf.peak);
      CHECK_MSG(ratio > 0.8 * predicted && ratio < 1.2 * predicted,
                "%s %s: stage 0 saves %.2fx less under 1f1b, the schedule predicts %.2fx", x->model,
                x->mesh, ratio, predicted);
      CHECK_MSG(rf.peak < rg.peak, "%s %s: worst peak %lld under 1f1b, %lld under gpipe", x->model,
                x->mesh, (long long)rf.peak, (long long)rg.peak);
    }
    drv_memreport_free(&rg);
    drv_memreport_free(&rf);
  }
}

/* Each stage holds its own layers' parameters and optimizer state: a stage's are less than the
 * model's, and the stages' together are the model's (tiny-lm's tied embedding table once more:
 * the first stage reads it as the embedding, the last as the head; its moments are where its
 * update runs). */
static void test_stage_leaves(void) {
  static const struct {
    const char *model;
    int64_t tied; /* bytes read on two stages */
  } models[] = {{"fuji-test.json", 0}, {"tiny-lm.json", 256 * 64 * 4}};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    const char *one[] = {"/mesh/shape=[1,1,1,1,1,1]", "/learner/microbatches=2"};
    const char *two[] = {"/mesh/shape=[2,1,1,1,1,1]", "/learner/microbatches=2"};
    DrvMemReport r1, r2;
    if (plan(models[i].model, "cpu", one, 2, &r1)) {
      CU_FAIL("memcheck failed");
      continue;
    }
    if (plan(models[i].model, "cpu-2", two, 2, &r2)) {
      CU_FAIL("memcheck failed");
      drv_memreport_free(&r1);
      continue;
    }
    CHECK_MSG(r1.stages == 0 && !r1.per_stage, "one stage: %d stages in the report", r1.stages);
    if (r2.stages == 2) {
      const DrvMemStage *a = &r2.per_stage[0], *b = &r2.per_stage[1];
      CHECK_MSG(a->params < r1.params && b->params < r1.params,
                "%s: stage parameters %lld and %lld, the model's %lld", models[i].model,
                (long long)a->params, (long long)b->params, (long long)r1.params);
      CHECK_MSG(a->params + b->params == r1.params + models[i].tied,
                "%s: stage parameters %lld + %lld, the model's %lld (+ %lld tied)", models[i].model,
                (long long)a->params, (long long)b->params, (long long)r1.params,
                (long long)models[i].tied);
      CHECK_MSG(a->opt_state + b->opt_state == r1.opt_state, /* the update is on one stage */
                "%s: stage optimizer state %lld + %lld, the model's %lld", models[i].model,
                (long long)a->opt_state, (long long)b->opt_state, (long long)r1.opt_state);
      CHECK_MSG(r2.params == r2.per_stage[r2.worst].params, "the report is the worst stage's");
    } else {
      CU_FAIL("pipeline=2: not 2 stages");
    }
    drv_memreport_free(&r1);
    drv_memreport_free(&r2);
  }
}

/* The step-time bound: the slowest stage's busy time over (M + P - 1) / M time units of it, so
 * the stages idle (P - 1) / (M + P - 1) of the step (interleaved: (P - 1) / (VM + P - 1));
 * without a pipeline, as before. */
static void test_bubble(void) {
  DrvDevice dev = {.flops_f32 = 1e11, .flops_bf16 = 4e11, .link_bw = 1e9, .memory = 1e12};
  const char *sets[] = {"/mesh/shape=[4,1,1,1,1,1]", "/input/global_batch_size=16",
                        "/learner/microbatches=8", "/mesh/pipeline_schedule=1f1b"};
  DrvMemReport r;
  if (plan("fuji-test.json", "cpu-4", sets, 4, &r)) {
    CU_FAIL("memcheck failed");
    return;
  }
  int32_t slow = -1;
  double busy = drv_memreport_stage_s(&r, &dev, &slow), step = drv_memreport_step_s(&r, &dev);
  double want = 0;
  for (int s = 0; s < 4; s++) {
    double t = fmax(r.per_stage[s].flops / dev.flops_f32, r.per_stage[s].comm_bytes / dev.link_bw);
    if (t > want) want = t;
  }
  CHECK_MSG(fabs(busy - want) <= 1e-12 * want && slow >= 0 && slow < 4,
            "busy %.6g s on stage %d, expected %.6g", busy, slow, want);
  CHECK_MSG(fabs(step - busy * 11 / 8) <= 1e-12 * step,
            "step %.6g s, expected busy x 11/8 = %.6g (bubble 3/11)", step, busy * 11 / 8);
  CHECK_MSG(fabs(1 - busy / step - 3.0 / 11) < 1e-12, "idle share %.6f, expected 3/11",
            1 - busy / step);
  drv_memreport_free(&r);
  /* interleaved, 2 stages of 2 chunks, 4 microbatches: 16 units a stage in 18 time steps, the
   * stages idle (P-1)/(VM+P-1) = 1/9 of the step */
  const char *vs[] = {"/mesh/shape=[2,1,1,1,1,1]", "/input/global_batch_size=8",
                      "/learner/microbatches=4", "/mesh/pipeline_schedule=interleaved"};
  if (plan("fuji-test.json", "cpu-2", vs, 4, &r)) {
    CU_FAIL("memcheck failed");
    return;
  }
  busy = drv_memreport_stage_s(&r, &dev, &slow), step = drv_memreport_step_s(&r, &dev);
  CHECK_MSG(r.sched_units == 16 && r.sched_steps == 18, "interleaved: %lld units in %lld steps",
            (long long)r.sched_units, (long long)r.sched_steps);
  CHECK_MSG(fabs(1 - busy / step - 1.0 / 9) < 1e-12, "interleaved idle share %.6f, expected 1/9",
            1 - busy / step);
  drv_memreport_free(&r);
  const char *flat[] = {"/mesh/shape=[1,1,1,1,1,1]"};
  if (plan("fuji-test.json", "cpu", flat, 1, &r)) {
    CU_FAIL("memcheck failed");
    return;
  }
  double tc = drv_memreport_compute_s(&r, &dev), tm = r.comm_bytes / dev.link_bw;
  CHECK_MSG(drv_memreport_step_s(&r, &dev) == fmax(tc, tm), "one stage: the bound changed");
  drv_memreport_free(&r);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {{"schedules", test_schedules},
                                   {"stage_leaves", test_stage_leaves},
                                   {"bubble", test_bubble},
                                   {NULL, NULL}};
  return test_main(argc, argv, "pipeline_memory", cases);
}
