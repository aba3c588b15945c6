/* test_registry.c: the backend registry (backends/backend.h): lookups by name and target, the
 * capability data of every backend against its functions, the interp backend's run on a real job
 * (its option errors, its training facts), and the hand-over (drv_backend_job) expanding the
 * attention ops for a backend that lacks them. Runs with or without LLVM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "driver/driver.h"
#include "tests/cunit_check.h"

static void test_find(void) {
  const Backend *b = backend_find("interp");
  CU_ASSERT_PTR_EQUAL(b, &backend_interp);
  CU_ASSERT_STRING_EQUAL(b->name, "interp");
#ifdef AXLC_HAVE_LLVM
  CU_ASSERT_PTR_EQUAL(backend_find("llvm"), &backend_llvm);
  CU_ASSERT_PTR_EQUAL(backend_for_target("cpu"), &backend_llvm);
#endif
  for (int i = 0; backend_table[i]; i++)
    CHECK_MSG(backend_find(backend_table[i]->name) == backend_table[i], "backend_find(\"%s\")",
              backend_table[i]->name);
}

static void test_unknown(void) {
  CU_ASSERT_PTR_NULL(backend_find("nosuch"));
  CU_ASSERT_PTR_NULL(backend_find(""));
  CU_ASSERT_PTR_NULL(backend_find(NULL));
  CU_ASSERT_PTR_NULL(backend_find("LLVM")); /* names are exact */
  CU_ASSERT_PTR_NULL(backend_for_target("gpu-h100-8"));
  CU_ASSERT_PTR_NULL(backend_for_target("cpux"));   /* a whole-name match */
  CU_ASSERT_PTR_NULL(backend_for_target("interp")); /* an alias of the command line */
  CU_ASSERT_PTR_NULL(backend_for_target(NULL));
}

static void test_names(void) {
  char buf[256];
  backend_names(buf, sizeof buf);
  char want[64] = "interp"; /* the registry's order: interp, llvm, opencl, as built */
#ifdef AXLC_HAVE_LLVM
  strcat(want, ", llvm");
#endif
#ifdef AXLC_HAVE_OPENCL
  strcat(want, ", opencl");
#endif
  CHECK_MSG(!strcmp(buf, want), "backend_names: \"%s\", expected \"%s\"", buf, want);
  char small[4];
  backend_names(small, sizeof small); /* truncates, terminated */
  CU_ASSERT(strlen(small) < sizeof small);
}

/* Every backend answers for every op and dtype, only for dtypes it lists, and its capability
 * data agrees with the functions it has. */
static void test_capabilities(void) {
  for (int i = 0; backend_table[i]; i++) {
    const Backend *b = backend_table[i];
    CHECK_MSG(b->name && b->doc && b->supports_op, "%s: name, doc and supports_op are required",
              b->name ? b->name : "?");
    CHECK_MSG(b->run || b->compile, "%s: neither run nor compile", b->name);
    CHECK_MSG(!b->compile == !b->emits, "%s: emits without compile, or compile without emits",
              b->name);
    CHECK_MSG(!b->standalone || b->compile, "%s: standalone but cannot compile", b->name);
    CHECK_MSG(b->dtypes && b->dtypes < (1u << DT_COUNT), "%s: dtypes 0x%x", b->name, b->dtypes);
    for (const BackendEmit *e = b->emits; e && e->name; e++)
      CHECK_MSG(backend_emit_find(b, e->name) == e, "%s: emit %s", b->name, e->name);
    if (b->compile) CU_ASSERT_PTR_NULL(backend_emit_find(b, "wasm"));
    for (int op = 0; op < IR_OP_COUNT; op++)
      for (int dt = 0; dt < DT_COUNT; dt++) {
        bool yes = b->supports_op((IrOp)op, (IrDType)dt);
        CHECK_MSG(!yes || (b->dtypes & 1u << dt), "%s supports %s on %s, not in its dtypes",
                  b->name, ir_op_name((IrOp)op), ir_dtype_name((IrDType)dt));
      }
    /* f32 is what every model trains in */
    CHECK_MSG(b->supports_op(IR_ADD, DT_F32) && b->supports_op(IR_DOT, DT_F32),
              "%s: no f32 add or dot", b->name);
  }
}

static void test_interp_supports_all(void) {
  for (int op = 0; op < IR_OP_COUNT; op++)
    for (int dt = 0; dt < DT_COUNT; dt++)
      CHECK_MSG(backend_interp.supports_op((IrOp)op, (IrDType)dt), "interp lacks %s on %s",
                ir_op_name((IrOp)op), ir_dtype_name((IrDType)dt));
  CU_ASSERT_PTR_NULL(backend_interp.compile);
  CU_ASSERT_PTR_NOT_NULL(backend_interp.run);
}

/* tiny-lm lowered, its facts read once; then run() with bad options reports them. */
static void test_interp_run_errors(void) {
  DrvJob j;
  FeOptions opt = {0};
  const char *sets[] = {"/max_steps=70", "/seed=11",
                        "/checkpointer={\"kind\": \"checkpointer\", \"keep_last\": 5}"};
  opt.sets = sets;
  opt.nsets = 3;
  if (drv_load(&j, AXLC_MODELS "/tiny-lm.json", &opt) || drv_lower(&j, NULL)) {
    fe_diag_print(&j.diag, stderr);
    CU_FAIL("tiny-lm did not load");
    drv_free(&j);
    return;
  }
  CU_ASSERT_EQUAL(j.facts.program.max_steps, 70);
  CU_ASSERT_EQUAL(j.facts.program.seed, 11);
  CU_ASSERT_EQUAL(j.facts.program.ckpt_keep, 5);
  CU_ASSERT_EQUAL(j.facts.vocab, 256);
  CU_ASSERT(j.facts.seq_len > 0 && j.facts.global_batch > 0);
  BackendJob bj;
  CU_ASSERT_EQUAL(drv_backend_job(&j, &backend_interp, &bj), 0);
  CU_ASSERT_EQUAL(bj.program.facts.ckpt_keep, 5);
  BackendOptions o = {0};
  char *bogus[] = {"run", "--bogus", "1"};
  CU_ASSERT_EQUAL(backend_interp.run(&bj, &o, 3, bogus), 1);
  CHECK_MSG(j.diag.n == 1 && strstr(j.diag.msgs[0], "--bogus"), "diag: %s",
            j.diag.n ? j.diag.msgs[0] : "(none)");
  char *nodata[] = {"run", "--steps", "1"};
  CU_ASSERT_EQUAL(backend_interp.run(&bj, &o, 3, nodata), 1);
  CHECK_MSG(j.diag.n == 2 && strstr(j.diag.msgs[1], "--data FILE is required"), "diag: %s",
            j.diag.n > 1 ? j.diag.msgs[1] : "(none)");
  drv_free(&j);
}

/* ---- the hand-over: attention expanded where the backend lacks it ---- */

/* A step-like f32 graph: input ids (1, 5), loss = sum(attention(q, k, v) * w) over (1, 2, 5, 4),
 * and with grad its gradients (attention_grad). */
static IrGraph *attention_graph(bool grad) {
  IrGraph *g = ir_graph_new();
  int64_t dims[4] = {1, 2, 5, 4};
  ir_input(g, "ids", DT_I32, 2, (int64_t[]){1, 5});
  int32_t q = ir_param(g, "q", DT_F32, 4, dims), k = ir_param(g, "k", DT_F32, 4, dims),
          v = ir_param(g, "v", DT_F32, 4, dims);
  int32_t y = ir_attention(g, q, k, v, true, 0.5);
  int32_t w = ir_sin(g, ir_iota(g, DT_F32, 4, dims, 2));
  int32_t axes[4] = {0, 1, 2, 3};
  ir_graph_add_output(g, "loss", ir_reduce_sum(g, ir_mul(g, y, w), 4, axes));
  if (grad) pass_autodiff(g, NULL);
  return g;
}

static int count_attention(const IrGraph *g) {
  int n = 0;
  for (int32_t i = 0; i < g->nvalues; i++)
    n += g->values[i].op == IR_ATTENTION || g->values[i].op == IR_ATTENTION_GRAD;
  return n;
}

/* A DrvJob holding only graphs (no config was loaded): what drv_backend_job reads. */
static void graph_job(DrvJob *j) {
  memset(j, 0, sizeof *j);
  fe_diag_init(&j->diag);
  j->file = "attention.json";
  j->cfg = json_object_new_object();
  j->build.mesh.devices = 1;
  j->graph = attention_graph(true);
  j->forward = attention_graph(false);
}

static void test_handover_keeps_attention(void) {
  DrvJob j;
  graph_job(&j);
  CU_ASSERT_EQUAL(count_attention(j.graph), 2);
  BackendJob bj;
  CU_ASSERT_EQUAL(drv_backend_job(&j, &backend_interp, &bj), 0); /* interp computes them */
  CU_ASSERT_EQUAL(count_attention(bj.graph), 2);
  CU_ASSERT_EQUAL(count_attention(bj.forward), 1);
  drv_free(&j);
}

#ifdef AXLC_HAVE_OPENCL
/* OpenCL has attention kernels in f32 and bf16 (emit.c, "fused attention"): the hand-over keeps
 * the fused ops, and the backend's compile (its OpenCL C checked with libclang) prints them. */
static void test_handover_opencl(void) {
  CU_ASSERT(backend_opencl.supports_op(IR_ATTENTION, DT_F32));
  CU_ASSERT(backend_opencl.supports_op(IR_ATTENTION_GRAD, DT_F32));
  CU_ASSERT(backend_opencl.supports_op(IR_ATTENTION, DT_BF16));
  CU_ASSERT(backend_opencl.supports_op(IR_ATTENTION_GRAD, DT_BF16));
  CU_ASSERT(!backend_opencl.supports_op(IR_ATTENTION, DT_I32));
  DrvJob j;
  graph_job(&j);
  BackendJob bj;
  CU_ASSERT_EQUAL(drv_backend_job(&j, &backend_opencl, &bj), 0);
  CU_ASSERT_EQUAL(count_attention(bj.graph), 2);
  CU_ASSERT_EQUAL(count_attention(bj.forward), 1);
  char path[] = "/tmp/axlc_handover_XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT_FATAL(fd >= 0);
  close(fd);
  BackendOptions o = {0};
  int rc = backend_opencl.compile(&bj, &o, "cl", path);
  CHECK_MSG(rc == 0, "opencl compile: %s", j.diag.n ? j.diag.msgs[0] : "(no message)");
  FILE *f = fopen(path, "r");
  char text[256];
  int kernels = 0;
  while (f && fgets(text, sizeof text, f))
    kernels += strstr(text, "__kernel") &&
               (strstr(text, "_attention_grad_kv(") != NULL || strstr(text, "_attention(") != NULL);
  CU_ASSERT_EQUAL(kernels, 2);
  if (f) fclose(f);
  unlink(path);
  drv_free(&j);
}

/* A backend like OpenCL whose supports_op says no to the attention ops (a device that could not
 * run the kernels): the hand-over expands both graphs, and compile takes the expansion. */
static bool no_attention(IrOp op, IrDType dt) {
  return op != IR_ATTENTION && op != IR_ATTENTION_GRAD && backend_opencl.supports_op(op, dt);
}

static void test_handover_expands(void) {
  Backend b = backend_opencl;
  b.supports_op = no_attention;
  DrvJob j;
  graph_job(&j);
  BackendJob bj;
  CU_ASSERT_EQUAL(drv_backend_job(&j, &b, &bj), 0);
  CU_ASSERT_EQUAL(count_attention(bj.graph), 0);
  CU_ASSERT_EQUAL(count_attention(bj.forward), 0);
  char msg[512] = "";
  CHECK_MSG(ir_graph_verify(bj.graph, msg, sizeof msg) == IR_OK, "verify: %s", msg);
  char path[] = "/tmp/axlc_handover_XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT_FATAL(fd >= 0);
  close(fd);
  BackendOptions o = {0};
  int rc = b.compile(&bj, &o, "cl", path);
  CHECK_MSG(rc == 0, "opencl compile: %s", j.diag.n ? j.diag.msgs[0] : "(no message)");
  FILE *f = fopen(path, "r");
  char head[64] = "";
  CU_ASSERT(f && fgets(head, sizeof head, f) && head[0]); /* some OpenCL C was written */
  if (f) fclose(f);
  unlink(path);
  drv_free(&j);
}
#endif

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"find by name and target", test_find},
      {"unknown names and targets", test_unknown},
      {"names for messages", test_names},
      {"capabilities of every backend", test_capabilities},
      {"interp supports every op and dtype", test_interp_supports_all},
      {"interp run: option errors, training facts", test_interp_run_errors},
      {"hand-over keeps attention for interp", test_handover_keeps_attention},
#ifdef AXLC_HAVE_OPENCL
      {"hand-over keeps attention for opencl", test_handover_opencl},
      {"hand-over expands attention where supports_op says no", test_handover_expands},
#endif
      {NULL, NULL},
  };
  return test_main(argc, argv, "registry", cases);
}
