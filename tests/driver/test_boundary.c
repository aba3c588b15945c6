/*
 * test_boundary.c: what the driver hands across its two boundaries.
 *
 * - To a backend (drv_backend_job): the program the backend sees instead of the frontend's
 *   objects (parameter table, shapes, init kinds, training facts, the config text) and an
 *   error sink whose messages read as the frontend's do.
 * - To memcheck's renderers: a report struct alone, no job and no graph, rendered as text,
 *   JSON and the "what would fit" list; and the backend whose fusion plan a target's report
 *   applies, asked by capability rather than by name.
 *
 * The models directory comes from the AXLC_MODELS compile definition.
 */
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "tests/cunit_check.h"

/* ---- the hand-over to a backend ---- */

static void test_backend_program(void) {
  DrvJob j;
  FeOptions opt = {0};
  const char *sets[] = {
      "/max_steps=70", "/seed=11",
      "/checkpointer={\"kind\": \"checkpointer\", \"every_n_steps\": 4, \"keep_last\": 2}"};
  opt.sets = sets;
  opt.nsets = 3;
  if (drv_load(&j, AXLC_MODELS "/tiny-lm.json", &opt) || drv_lower(&j, NULL)) {
    fe_diag_print(&j.diag, stderr);
    CU_FAIL("tiny-lm did not load");
    drv_free(&j);
    return;
  }
  BackendJob bj;
  CU_ASSERT_EQUAL_FATAL(drv_backend_job(&j, &backend_interp, &bj), 0);
  const BackendProgram *p = &bj.program;
  CU_ASSERT_EQUAL(p->nparams, j.build.nparams);
  CU_ASSERT(p->nparams > 0);
  for (int i = 0; i < p->nparams && i < j.build.nparams; i++) {
    const FeParam *f = &j.build.params[i];
    const BackendParam *b = &p->params[i];
    CHECK_MSG(!strcmp(b->path, f->path), "param %d: %s, expected %s", i, b->path, f->path);
    CU_ASSERT_EQUAL(b->shape.rank, f->rank);
    CU_ASSERT_EQUAL(ir_shape_numel(&b->shape), fe_param_numel(f));
    RtInitKind want = !strcmp(f->init, "ones")    ? RT_INIT_ONES
                      : !strcmp(f->init, "zeros") ? RT_INIT_ZEROS
                                                  : RT_INIT_NORMAL;
    CHECK_MSG(b->init.kind == want, "%s: init kind %d, expected %d (%s)", b->path,
              (int)b->init.kind, (int)want, f->init);
    if (want == RT_INIT_NORMAL) CU_ASSERT_EQUAL(b->init.std, (float)f->init_std);
  }
  char *text = fe_json_canonical(j.cfg);
  CU_ASSERT_STRING_EQUAL(p->config, text);
  free(text);
  CU_ASSERT_EQUAL(p->facts.max_steps, 70);
  CU_ASSERT_EQUAL(p->facts.seed, 11);
  CU_ASSERT_EQUAL(p->vocab, j.facts.vocab);
  /* the program facts are the driver's one fill (drv_program_facts) */
  RtFacts f;
  drv_program_facts(&j, &f);
  CU_ASSERT_EQUAL(memcmp(&p->facts, &f, sizeof f), 0);
  CU_ASSERT_EQUAL(p->facts.ckpt_every_n_steps, 4);
  CU_ASSERT_EQUAL(p->facts.ckpt_keep, 2);
  CU_ASSERT(p->facts.step_flops > 0);
  CU_ASSERT_EQUAL(p->devices, j.build.mesh.devices);
  /* a second hand-over replaces the first's program, leaking nothing */
  CU_ASSERT_EQUAL(drv_backend_job(&j, &backend_interp, &bj), 0);
  CU_ASSERT_EQUAL(bj.program.nparams, j.build.nparams);
  drv_free(&j);
}

/* A backend's message lands in the job's diagnostics as fe_error would write it. */
static void test_backend_diag(void) {
  FeDiag d;
  fe_diag_init(&d);
  BackendDiag sink = drv_backend_diag(&d);
  CU_ASSERT_EQUAL(backend_error(&sink, "m.json", "/mesh", "has %d devices", 3), -1);
  CU_ASSERT_EQUAL(backend_error(&sink, NULL, NULL, "--steps: %s", "bad"), -1);
  CU_ASSERT_EQUAL(fe_error(&d, "m.json", "/mesh", "has %d devices", 3), -1);
  CU_ASSERT_EQUAL_FATAL(d.n, 3);
  CU_ASSERT_STRING_EQUAL(d.msgs[0], "m.json: /mesh: has 3 devices");
  CU_ASSERT_STRING_EQUAL(d.msgs[0], d.msgs[2]);
  CU_ASSERT_STRING_EQUAL(d.msgs[1], "--steps: bad");
  fe_diag_free(&d);
}

/* The fusion plan of a report: the target's own backend's, else the host CPU's default. */
static void test_plan_backend(void) {
  const Backend *cpu = backend_for_target("cpu");
  CU_ASSERT_PTR_EQUAL(drv_plan_backend(NULL), cpu && cpu->plan ? cpu : NULL);
  CU_ASSERT_PTR_EQUAL(drv_plan_backend("gpu-h100-256"), drv_plan_backend("cpu"));
  CU_ASSERT_PTR_EQUAL(drv_plan_backend("tpu-v5p-512"), drv_plan_backend(NULL));
#ifdef AXLC_HAVE_LLVM
  CU_ASSERT_PTR_EQUAL(drv_plan_backend("cpu-4"), &backend_llvm);
#endif
#ifdef AXLC_HAVE_OPENCL
  CU_ASSERT_PTR_EQUAL(drv_plan_backend("opencl"), &backend_opencl);
#endif
  const Backend *b = drv_plan_backend("gpu-h100-8");
  if (b) CU_ASSERT_PTR_NOT_NULL(b->plan);
}

/* ---- memcheck's renderers ---- */

/* A report written by hand: two devices, one item live at the peak. */
static void fake_report(DrvMemReport *r, DrvDevice *dev) {
  memset(r, 0, sizeof *r);
  memset(dev, 0, sizeof *dev);
  r->file = strdup("m.json");
  r->target = strdup("gpu-x-2");
  r->mesh.n = 2;
  snprintf(r->mesh.axes[0], sizeof r->mesh.axes[0], "data");
  snprintf(r->mesh.axes[1], sizeof r->mesh.axes[1], "model");
  r->mesh.shape[0] = 2;
  r->mesh.shape[1] = 1;
  r->mesh.devices = 2;
  r->fusion = "none";
  r->params = 1024, r->opt_state = 2048, r->inputs = 64, r->fixed = 3136;
  r->temps = 4096, r->temp_peak = 4096, r->slab = 8192, r->peak = 8192, r->code = 2048;
  r->nvalues = 3, r->peak_at = 1;
  r->timeline = calloc(3, sizeof *r->timeline);
  r->phase = calloc(3, 1);
  r->timeline[1] = 4096;
  r->items = calloc(1, sizeof *r->items);
  r->nitems = 1;
  r->items[0] = (DrvMemItem){.value = 1,
                             .bytes = 4096,
                             .kind = DRV_MEM_TEMP,
                             .op = IR_EXP,
                             .dtype = DT_F32,
                             .shape = ir_shape_make(2, (int64_t[]){32, 32}),
                             .origin = strdup("/model/decoder"),
                             .tag = strdup("")};
  r->flops = 1e6, r->matmul_flops = 0;
  snprintf(dev->name, sizeof dev->name, "gpu-x");
  snprintf(dev->doc, sizeof dev->doc, "a device of tests");
  dev->memory = 16384;
  dev->flops_f32 = 1e12;
  dev->mem_bw = dev->link_bw = 1e9;
}

/* What `render` wrote into a memory stream, NUL-terminated (free it). */
static char *rendered(DrvMemReport *r, DrvDevice *dev, int what) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (what == 0) drv_memreport_print(r, dev, 12, f);
  if (what == 1) CU_ASSERT_EQUAL(drv_memreport_svg(r, dev, f), 0);
  fclose(f);
  return text;
}

static void test_renderers_take_the_report(void) {
  DrvMemReport r;
  DrvDevice dev;
  fake_report(&r, &dev);
  CU_ASSERT(drv_memreport_fits(&r, &dev));
  char *text = rendered(&r, &dev, 0);
  CHECK_MSG(strstr(text, "memcheck: m.json on gpu-x-2 (2 devices: a device of tests") != NULL,
            "text: %s", text);
  CHECK_MSG(strstr(text, "mesh: data=2; fusion plan: none") != NULL, "text: %s", text);
  CHECK_MSG(strstr(text, "verdict: fits") != NULL, "text: %s", text);
  CHECK_MSG(strstr(text, "4.00 KiB  temporary") && strstr(text, "f32[32,32] exp  /model/decoder\n"),
            "text: %s", text);
  free(text);
  char *svg = rendered(&r, &dev, 1);
  CHECK_MSG(strstr(svg, "Live memory per device: m.json on gpu-x-2") != NULL, "svg: %.200s", svg);
  free(svg);
  char *js = drv_memreport_json(&r, &dev, 20);
  json_object *o = json_tokener_parse(js);
  CU_ASSERT_PTR_NOT_NULL_FATAL(o);
  json_object *v, *live;
  CU_ASSERT(json_object_object_get_ex(o, "model", &v) &&
            !strcmp(json_object_get_string(v), "m.json"));
  CU_ASSERT(json_object_object_get_ex(o, "devices", &v) && json_object_get_int64(v) == 2);
  CU_ASSERT(json_object_object_get_ex(o, "fits", &v) && json_object_get_boolean(v));
  CU_ASSERT(json_object_object_get_ex(o, "live_at_peak", &live) &&
            json_object_array_length(live) == 1);
  json_object *e = json_object_array_get_idx(live, 0);
  CU_ASSERT(json_object_object_get_ex(e, "op", &v) && !strcmp(json_object_get_string(v), "exp"));
  CU_ASSERT(json_object_object_get_ex(e, "config_path", &v) &&
            !strcmp(json_object_get_string(v), "/model/decoder"));
  json_object_put(o);
  free(js);
  /* over the device's memory: no longer fits */
  dev.memory = 4096;
  CU_ASSERT(!drv_memreport_fits(&r, &dev));
  text = rendered(&r, &dev, 0);
  CHECK_MSG(strstr(text, "verdict: does not fit: over by") != NULL, "text: %s", text);
  free(text);
  drv_memreport_free(&r);
}

static void test_fixes_rendered(void) {
  DrvDevice dev = {.memory = 4096};
  DrvMemFixes none = {0}, one = {0};
  snprintf(one.fix[0].set, sizeof one.fix[0].set, "/model/decoder/remat_policy=\"full\"");
  one.fix[0].peak = 1024;
  one.n = 1;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  drv_memfixes_print(&none, &dev, f);
  drv_memfixes_print(&one, &dev, f);
  fclose(f);
  CHECK_MSG(strstr(text, "\nwhat would fit (each lowered and planned again):\n  none of the") !=
                NULL,
            "%s", text);
  CHECK_MSG(strstr(text, "  --set '/model/decoder/remat_policy=\"full\"': peak 1.00 KiB, headroom "
                         "3.00 KiB\n") != NULL,
            "%s", text);
  free(text);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"the program a backend sees", test_backend_program},
      {"a backend's errors in the job's diag", test_backend_diag},
      {"the fusion plan of a report, by capability", test_plan_backend},
      {"memcheck renderers take the report alone", test_renderers_take_the_report},
      {"what would fit, rendered", test_fixes_rendered},
      {NULL, NULL},
  };
  return test_main(argc, argv, "boundary", cases);
}
