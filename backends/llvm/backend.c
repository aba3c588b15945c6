/*
 * backend.c: the llvm backend object (backends/backend.h): the end of the
 * pipeline for the host CPU.
 *
 *   step graph -> fusion plan -> memory plan -> LLVM module -> object file + runtime -> trainer
 *                                                           -> JIT -> rt_train_main in process
 *
 * The trainer executable is the generated objects (the step function and the `axlc_program`
 * table in one, each distinct kernel in its own: llvm.h, unit.c), libaxrt_main (main) and libaxrt,
 * linked by the system C compiler with OpenBLAS, json-c and libm (backends/link.c). Nothing of
 * axlc, LLVM or the config file is needed at run time: the resolved config is embedded
 * (`./trainer --config`).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/llvm/llvm.h"

/* One compilation's products. */
typedef struct Compiled {
  MemPlan plan;
  MemPlan fwd_plan; /* of the sampling forward, when the job has one */
  MemPlan dec_plan; /* of the decode step, in the forward's slab, when the job has one */
  LlvmModule *module;
} Compiled;

static void compiled_free(Compiled *c) {
  llvm_module_free(c->module);
  pass_memplan_free(&c->plan);
  pass_memplan_free(&c->fwd_plan);
  pass_memplan_free(&c->dec_plan);
  memset(c, 0, sizeof *c);
}

/* Says what a compile that took more than two seconds did. */
static void report(const BackendJob *j, const LlvmModule *m) {
  const LlvmStats *s = llvm_module_stats(m);
  if (s->emit_s + s->codegen_s < 2.0) return;
  fprintf(stderr,
          "axlc: %s: %d kernel calls, %d distinct units (%d from the cache), IR in %.1f s, "
          "code in %.1f s on %d thread%s\n",
          j->file ? j->file : "model", (int)s->kernels, (int)s->units, (int)s->cached, s->emit_s,
          s->codegen_s, (int)s->jobs, s->jobs == 1 ? "" : "s");
}

/* Plans memory and generates code for j (keep_ir: for --emit llvm|asm). */
static int compile_module(const BackendJob *j, const BackendOptions *o, Compiled *c, bool keep_ir) {
  memset(c, 0, sizeof *c);
  int64_t devices = j->program.devices;
  if (ir_mesh_devices(&j->graph->mesh) != (devices > 1 ? devices : 1))
    return backend_error(&j->diag, j->file, "/mesh",
                         "the mesh has %lld devices, but the step graph was not "
                         "sharded for them (its mesh has %lld): the shard pass did not run",
                         (long long)devices, (long long)ir_mesh_devices(&j->graph->mesh));
  /* TF32 is a tensor-core format: a CPU has no faster arithmetic for it, so the CPU rules keep
   * f32 and a tf32 program is refused rather than computed otherwise than its oracle says */
  if (j->graph->matmul == IR_MATMUL_TF32)
    return backend_error(&j->diag, j->file, "/precision/matmul",
                         "tf32 is for GPUs with tensor cores; the CPU (LLVM) backend computes "
                         "products in f32: set /precision/matmul to f32 (--set "
                         "/precision/matmul=f32), or compile for a GPU target");
  LlvmOptions lo = llvm_options_default();
  if (o) {
    if (o->cpu) lo.cpu = o->cpu;
    if (o->features) lo.features = o->features;
    if (o->no_fuse) lo.fuse = false;
    if (o->no_threads) lo.threads = false;
    lo.cache_dir = o->cache_dir;
    lo.cache_max = o->cache_max;
    lo.jobs = o->jobs;
    lo.progress = o->progress;
  }
  lo.keep_ir = keep_ir;
  IrGraph *graphs[3] = {j->graph, j->forward, j->forward ? j->decode : NULL};
  MemPlan *plans[3] = {&c->plan, &c->fwd_plan, &c->dec_plan};
  static const char *const what[3] = {"", " of the sampling forward", " of the decode step"};
  for (int k = 0; k < 3 && graphs[k]; k++) {
    IrGraph *g = graphs[k];
    bool *mat = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *mat);
    if (lo.fuse) pass_fusion_plan(g, mat);
    /* the decode step shares the forward's slab: the same weights, its cache past the rest */
    int rc = k < 2 ? pass_memplan_fused(g, lo.fuse ? mat : NULL, plans[k])
                   : pass_memplan_over(g, lo.fuse ? mat : NULL, j->forward, &c->fwd_plan,
                                       llvm_forward_slab_bytes(j->forward, &c->fwd_plan), plans[k]);
    free(mat);
    if (rc != IR_OK)
      return backend_error(&j->diag, j->file, NULL, "memory planning%s failed: %s", what[k],
                           ir_graph_error(g));
  }
  lo.program = &j->program;
  if (j->forward) {
    lo.forward = j->forward;
    lo.forward_plan = &c->fwd_plan;
  }
  if (j->forward && j->decode) {
    lo.decode = j->decode;
    lo.decode_plan = &c->dec_plan;
  }
  char err[1024];
  if (llvm_compile(j->graph, &c->plan, &lo, &c->module, err, sizeof err))
    return backend_error(&j->diag, j->file, NULL, "code generation failed: %s", err);
  if (lo.progress) report(j, c->module);
  return 0;
}

/* Writes the program's objects (those not in the cache) to a temporary directory and links them
 * with the runtime into the executable `out`. */
static int link_trainer(const BackendJob *j, const BackendOptions *o, Compiled *c,
                        const char *out) {
  char err[1024];
  const char *tmp = getenv("TMPDIR");
  char *dir = base_join(tmp && *tmp ? tmp : "/tmp", "/", "axlc-link-XXXXXX");
  if (!mkdtemp(dir)) {
    backend_error(&j->diag, dir, NULL, "cannot create a temporary directory for the objects");
    free(dir);
    return -1;
  }
  char **objs = NULL;
  int nobj = 0;
  if (llvm_object_files(c->module, dir, &objs, &nobj, err, sizeof err)) {
    backend_error(&j->diag, out, NULL, "writing the objects failed: %s", err);
    rmdir(dir);
    free(dir);
    return -1;
  }
  BackendLink link = {.out = out, .objects = objs, .nobjects = nobj};
  int rc = backend_link_trainer(&link, o, &j->diag);
  for (int i = 0; i < nobj; i++)
    if (!strncmp(objs[i], dir, strlen(dir))) unlink(objs[i]);
  rmdir(dir);
  llvm_paths_free(objs);
  free(dir);
  return rc;
}

/* ---- the backend ---- */

static int emit_text(const BackendJob *j, Compiled *c, const char *what, const char *out) {
  RtError ferr;
  FILE *f = out ? rt_file_open(out, "w", &ferr) : stdout;
  char err[1024] = "";
  if (!f) return backend_error(&j->diag, NULL, NULL, "%s", ferr.msg);
  int rc = llvm_emit_text(c->module, f, !strcmp(what, "asm"), err, sizeof err);
  if (out && fclose(f) != 0) rc = -1;
  if (rc) return backend_error(&j->diag, out, NULL, "writing %s failed: %s", what, err);
  return 0;
}

static int llvm_backend_compile(const BackendJob *j, const BackendOptions *o, const char *emit,
                                const char *out) {
  Compiled c = {0};
  char err[1024];
  bool text = !strcmp(emit, "llvm") || !strcmp(emit, "asm");
  int rc = compile_module(j, o, &c, text);
  if (rc == 0 && !strcmp(emit, "exe"))
    rc = link_trainer(j, o, &c, out);
  else if (rc == 0 && !strcmp(emit, "obj") && llvm_emit_object(c.module, out, err, sizeof err))
    rc = backend_error(&j->diag, out, NULL, "%s", err);
  else if (rc == 0 && text)
    rc = emit_text(j, &c, emit, out);
  compiled_free(&c);
  return rc;
}

/* The JIT: compiles in memory and hands the program to the runtime's trainer main. A program
 * for several devices comes here only when this process already is one of its ranks (`mpirun
 * -np 4 axlc run ...`: each rank JIT-compiles and trains as its device) or samples (--sample
 * runs the unsharded forward in this one process); else the driver links the trainer through
 * compile and launches its ranks (driver.h: drv_run). */
static int llvm_backend_run(const BackendJob *j, const BackendOptions *o, int argc, char **argv) {
  Compiled c = {0};
  int rc = 1;
  if (compile_module(j, o, &c, false) == 0) {
    char err[1024];
    LlvmStepFn step;
    LlvmJit *jit = NULL;
    if (llvm_jit(c.module, &step, &jit, err, sizeof err))
      backend_error(&j->diag, NULL, NULL, "JIT compilation failed: %s", err);
    else
      rc = rt_train_main(llvm_jit_program(jit), argc, argv);
    llvm_jit_free(jit);
  }
  compiled_free(&c);
  return rc;
}

/* The trainer's options, checked by the runtime as rt_train_main will check them. */
static int llvm_backend_check_run_args(int argc, char **argv, const BackendDiag *d) {
  RtError err;
  return rt_train_check_args(argc, argv, &err) ? backend_error(d, NULL, NULL, "%s", err.msg) : 0;
}

/* Every op, in f32, bf16 and i32 (llvm.h); other dtypes are refused at compile time. */
static bool llvm_backend_supports_op(IrOp op, IrDType dt) {
  return (unsigned)op < IR_OP_COUNT && (dt == DT_F32 || dt == DT_BF16 || dt == DT_I32);
}

static const BackendEmit emits[] = {
    {"exe", true, "a trainer executable linked with libaxrt"},
    {"obj", true, "the step function and program table as an ELF object"},
    {"llvm", false, "LLVM IR text"},
    {"asm", false, "host assembly"},
    {NULL, false, NULL},
};

const Backend backend_llvm = {
    .name = "llvm",
    .doc =
        "native code for the host CPU through LLVM 14: trainer executables, or the JIT in process",
    .targets = "cpu(-[0-9]+)?",
    .dtypes = 1u << DT_F32 | 1u << DT_BF16 | 1u << DT_I32,
    .emits = emits,
    .standalone = true,
    .supports_op = llvm_backend_supports_op,
    .plan = pass_fusion_plan,
    .compile = llvm_backend_compile,
    .run = llvm_backend_run,
    .check_run_args = llvm_backend_check_run_args,
};
