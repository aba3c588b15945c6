/*
 * backend.c: the opencl backend object (backends/backend.h).
 *
 *   step graph -> fusion plan -> memory plan -> OpenCL C kernels + launch list
 *              -> libclang check -> RtOclProgram -> C file + libaxrt_opencl -> trainer
 *                                                   (axlc run: a temporary one, run as a child)
 *
 * Compiling needs no OpenCL device, platform or loader at run time: the kernels are checked
 * with libclang here and built by the device's driver when the trainer starts.
 * AXLC_OPENCL_BREAK_KERNEL=N (a test hook) breaks the N-th kernel's source, so that the check
 * can be seen to work.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/opencl/opencl.h"

typedef struct Compiled {
  MemPlan plan;
  OclKernels kernels;
  RtOclProgram prog;
  RtParamSlot *slots;
  RtCollective *colls;
  /* --sample: the forward and its decode step, each planned and printed on its own */
  MemPlan fwd_plan, dec_plan;
  OclKernels fwd_kernels, dec_kernels;
  RtForward fwd;
  RtDecode dec;
  int64_t *fwd_params, *dec_params; /* (nparams) */
  RtKvCache *caches;
} Compiled;

static void compiled_free(Compiled *c) {
  pass_memplan_free(&c->plan);
  ocl_kernels_free(&c->kernels);
  pass_memplan_free(&c->fwd_plan);
  pass_memplan_free(&c->dec_plan);
  ocl_kernels_free(&c->fwd_kernels);
  ocl_kernels_free(&c->dec_kernels);
  free(c->fwd_params);
  free(c->dec_params);
  free(c->caches);
  free(c->slots);
  free(c->colls);
  memset(c, 0, sizeof *c);
}

static OclOptions options(const BackendOptions *bo) {
  OclOptions o = ocl_options_default();
  if (bo && bo->no_fuse) o.fuse = false;
  const char *b = getenv("AXLC_OPENCL_BREAK_KERNEL");
  if (b && *b) o.break_kernel = atoi(b) > 0 ? atoi(b) : 1;
  const char *gemm = getenv("AXLC_OPENCL_GEMM"); /* for measuring: tiled, blocked or loop */
  if (gemm && !strcmp(gemm, "tiled")) o.gemm = OCL_GEMM_TILED;
  if (gemm && !strcmp(gemm, "blocked")) o.gemm = OCL_GEMM_BLOCKED;
  if (gemm && !strcmp(gemm, "loop")) o.gemm = OCL_GEMM_LOOP;
  const char *multi = getenv("AXLC_OPENCL_MULTI"); /* 0: a launch per value, to compare */
  if (multi && !strcmp(multi, "0")) o.multi = false;
  return o;
}

static int program(const BackendJob *j, Compiled *c) {
  char err[1024];
  if (ocl_program_build(j->graph, &c->plan, &j->program, &c->kernels, &c->prog, &c->slots,
                        &c->colls, err, sizeof err))
    return backend_error(&j->diag, j->file, NULL, "%s", err);
  return 0;
}

/* The byte offsets of the program's parameters in a sampling graph's plan (-1: not read). */
static int64_t *param_offsets(const BackendJob *j, const IrGraph *g, const MemPlan *mp) {
  int64_t *o = base_xcalloc((size_t)j->program.nparams + 1, sizeof *o);
  for (int32_t i = 0; i < j->program.nparams; i++) {
    int32_t v = ir_graph_find(g, IR_PARAMETER, j->program.params[i].path);
    o[i] = v == IR_NONE ? -1 : mp->offset[v];
  }
  return o;
}

/* Plans and prints one sampling graph (the forward, or the decode step over the forward's
 * slab), its kernels checked with libclang. */
static int sample_graph(const BackendJob *j, const OclOptions *o, IrGraph *g, const MemPlan *under,
                        MemPlan *plan, OclKernels *k, const char *what) {
  bool *mat = base_xmalloc(((size_t)g->nvalues + 1) * sizeof *mat);
  if (o->fuse)
    ocl_fusion_plan(g, mat);
  else
    memset(mat, 1, (size_t)g->nvalues * sizeof *mat);
  int rc = under ? pass_memplan_over(g, mat, j->forward, under, under->slab_bytes, plan)
                 : pass_memplan_fused(g, mat, plan);
  char err[4096];
  if (rc != IR_OK) {
    free(mat);
    return backend_error(&j->diag, j->file, NULL, "memory planning of the %s failed: %s", what,
                         ir_graph_error(g));
  }
  OclOptions so = *o;
  so.break_kernel = 0;
  rc = ocl_emit(g, plan, mat, &so, k, err, sizeof err);
  free(mat);
  if (rc)
    return backend_error(&j->diag, j->file, NULL, "OpenCL code generation of the %s failed: %s",
                         what, err);
  /* two-stage reductions keep their partial sums just past the plan: the sampling buffer
   * holds them, and the decode step's own tensors start after the forward's scratch */
  if (k->slab_bytes > plan->slab_bytes) plan->slab_bytes = k->slab_bytes;
  if (ocl_check_source(k, err, sizeof err))
    return backend_error(&j->diag, j->file, NULL,
                         "the generated OpenCL C of the %s does not compile (libclang): %s", what,
                         err);
  return 0;
}

/* The decode step's KV caches: each cache input, its row output and the forward's prefill. */
static int kv_caches(const BackendJob *j, Compiled *c) {
  const IrGraph *g = j->decode, *fg = j->forward;
  c->caches = base_xcalloc((size_t)g->nvalues + 1, sizeof *c->caches);
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *in = &g->values[v];
    if (in->op != IR_INPUT || strncmp(in->name, IR_KV_CACHE, strlen(IR_KV_CACHE))) continue;
    const char *base = in->name + strlen(IR_KV_CACHE);
    char name[1024];
    snprintf(name, sizeof name, IR_KV_ROW "%s", base);
    int32_t row = ir_graph_output(g, name);
    snprintf(name, sizeof name, IR_KV_PREFILL "%s", base);
    int32_t pre = ir_graph_output(fg, name);
    if (in->shape.rank != 4 || row == IR_NONE || pre == IR_NONE ||
        !ir_shape_eq(&fg->values[pre].shape, &in->shape))
      return backend_error(&j->diag, j->file, NULL,
                           "program: the decode step's cache %s has no row or prefill to match it",
                           in->name);
    c->caches[c->dec.ncaches++] =
        (RtKvCache){.heads = in->shape.dims[1],
                    .row_bytes = in->shape.dims[3] * (int64_t)ir_dtype_size(in->dtype),
                    .cache_offset = c->dec_plan.offset[v],
                    .row_offset = c->dec_plan.offset[row],
                    .prefill_offset = c->fwd_plan.offset[pre]};
  }
  return 0;
}

/* The sampling forward and decode step (--sample), where the job has them and its logits are
 * f32 (a bf16 model's forward would need them widened first: its trainer does not sample). */
static int compile_sampling(const BackendJob *j, const OclOptions *o, Compiled *c) {
  if (!j->forward) return 0;
  int32_t ids = ir_graph_find(j->forward, IR_INPUT, "ids");
  int32_t logits = ir_graph_output(j->forward, "logits");
  if (ids == IR_NONE || logits == IR_NONE || j->forward->values[logits].dtype != DT_F32) return 0;
  if (sample_graph(j, o, j->forward, NULL, &c->fwd_plan, &c->fwd_kernels, "sampling forward"))
    return -1;
  c->fwd = (RtForward){.slab_bytes = c->fwd_plan.slab_bytes,
                       .ids_offset = c->fwd_plan.offset[ids],
                       .logits_offset = c->fwd_plan.offset[logits],
                       .param_offsets = c->fwd_params = param_offsets(j, j->forward, &c->fwd_plan)};
  c->prog.base.forward = &c->fwd;
  c->prog.forward_source = c->fwd_kernels.source;
  c->prog.nforward = c->fwd_kernels.nlaunches;
  c->prog.forward_launches = c->fwd_kernels.launches;
  const IrGraph *d = j->decode;
  int32_t dids = d ? ir_graph_find(d, IR_INPUT, "ids") : IR_NONE;
  int32_t pos = d ? ir_graph_find(d, IR_INPUT, "pos") : IR_NONE;
  int32_t dlog = d ? ir_graph_output(d, "logits") : IR_NONE;
  if (dids == IR_NONE || pos == IR_NONE || dlog == IR_NONE || d->values[dlog].dtype != DT_F32)
    return 0;
  if (sample_graph(j, o, j->decode, &c->fwd_plan, &c->dec_plan, &c->dec_kernels, "decode step") ||
      kv_caches(j, c))
    return -1;
  c->dec.slab_bytes = c->dec_plan.slab_bytes;
  c->dec.ids_offset = c->dec_plan.offset[dids];
  c->dec.pos_offset = c->dec_plan.offset[pos];
  c->dec.logits_offset = c->dec_plan.offset[dlog];
  c->dec.param_offsets = c->dec_params = param_offsets(j, j->decode, &c->dec_plan);
  c->dec.caches = c->caches;
  c->fwd.decode = &c->dec;
  c->prog.decode_source = c->dec_kernels.source;
  c->prog.ndecode = c->dec_kernels.nlaunches;
  c->prog.decode_launches = c->dec_kernels.launches;
  return 0;
}

/* Plans memory, prints the kernels and checks them with libclang. */
static int compile_all(const BackendJob *j, const BackendOptions *bo, Compiled *c) {
  memset(c, 0, sizeof *c);
  OclOptions o = options(bo);
  bool *mat = base_xmalloc(((size_t)j->graph->nvalues + 1) * sizeof *mat);
  if (o.fuse)
    ocl_fusion_plan(j->graph, mat);
  else
    memset(mat, 1, (size_t)j->graph->nvalues * sizeof *mat);
  /* the slab in pieces of the device's largest buffer: no tensor crosses a multiple of it
   * (AXLC_OPENCL_SPLIT=BYTES, a test hook, plans smaller ones) */
  int64_t split = j->program.max_alloc;
  const char *env = getenv("AXLC_OPENCL_SPLIT");
  if (env && *env && atoll(env) > 0) split = atoll(env);
  int rc = pass_memplan_split(j->graph, mat, split, &c->plan);
  char err[4096];
  if (rc != IR_OK) {
    free(mat);
    return backend_error(&j->diag, j->file, NULL, "memory planning failed: %s",
                         ir_graph_error(j->graph));
  }
  rc = ocl_emit(j->graph, &c->plan, mat, &o, &c->kernels, err, sizeof err);
  free(mat);
  if (rc) return backend_error(&j->diag, j->file, NULL, "OpenCL code generation failed: %s", err);
  if (ocl_check_source(&c->kernels, err, sizeof err))
    return backend_error(&j->diag, j->file, NULL,
                         "the generated OpenCL C does not compile (libclang): %s", err);
  return program(j, c) ? -1 : compile_sampling(j, &o, c);
}

/* Writes the program as C next to `out` and links it with the runtime into `out`. */
static int link_trainer(const BackendJob *j, const BackendOptions *o, Compiled *c,
                        const char *out) {
  char *src = base_join(out, "", ".opencl.c");
  RtError ferr;
  FILE *f = rt_file_open(src, "w", &ferr);
  if (!f) {
    backend_error(&j->diag, NULL, NULL, "%s", ferr.msg);
    free(src);
    return -1;
  }
  int rc = ocl_program_write_c(f, &c->prog);
  if (fclose(f) != 0 || rc) {
    backend_error(&j->diag, src, NULL, "writing the trainer's C source failed");
    unlink(src);
    free(src);
    return -1;
  }
  BackendLink link = {.out = out, .source = src, .opencl = true};
  rc = backend_link_trainer(&link, o, &j->diag);
  unlink(src);
  free(src);
  return rc;
}

static int write_text(const BackendJob *j, Compiled *c, const char *emit, const char *out) {
  RtError ferr;
  FILE *f = out ? rt_file_open(out, "w", &ferr) : stdout;
  if (!f) return backend_error(&j->diag, NULL, NULL, "%s", ferr.msg);
  int rc = !strcmp(emit, "cl")         ? (fputs(c->kernels.source, f) < 0 ? -1 : 0)
           : !strcmp(emit, "launches") ? ocl_launches_write(f, &c->kernels)
                                       : ocl_program_write_c(f, &c->prog);
  if (out && fclose(f) != 0) rc = -1;
  if (!out && fflush(f) != 0) rc = -1;
  return rc ? backend_error(&j->diag, out, NULL, "writing the %s output failed", emit) : 0;
}

static int ocl_backend_compile(const BackendJob *j, const BackendOptions *o, const char *emit,
                               const char *out) {
  Compiled c;
  int rc = compile_all(j, o, &c);
  if (rc == 0)
    rc = !strcmp(emit, "exe") ? link_trainer(j, o, &c, out) : write_text(j, &c, emit, out);
  compiled_free(&c);
  return rc;
}

/* axlc run trains with the trainer compile links, started by the driver as a child process
 * (run_trainer): the device's OpenCL driver never loads into axlc. PoCL's kernel compiler is an
 * LLVM of another version (15 on Debian 12) than the one axlc links (14), and the two in one
 * process crash in the first build (issue 34). */
static int ocl_backend_check_run_args(int argc, char **argv, const BackendDiag *d) {
  RtError err;
  return rt_ocl_check_args(argc, argv, &err) ? backend_error(d, NULL, NULL, "%s", err.msg) : 0;
}

/* Every op, in f32, bf16 (stored as ushort, computed in f32: emit.c) and i32; collectives only
 * over one device. The fused attention ops have flash-style kernels in f32 and bf16 (emit.c,
 * "fused attention"): the (T, T) scores are never stored, and in bf16 the softmax stays f32
 * (expanded, every primitive would round to bf16). */
static bool ocl_backend_supports_op(IrOp op, IrDType dt) {
  if (op == IR_ATTENTION || op == IR_ATTENTION_GRAD) return dt == DT_F32 || dt == DT_BF16;
  return (unsigned)op < IR_OP_COUNT && (dt == DT_F32 || dt == DT_BF16 || dt == DT_I32);
}

static const BackendEmit emits[] = {
    {"exe", true,
     "a trainer executable: the kernels, built on the device at start-up, and libaxrt"},
    {"cl", false, "the OpenCL C 1.2 source of the kernels"},
    {"c", false, "the trainer's C source (program table, kernels, launch list)"},
    {"launches", false,
     "the launch list, one per line: kernel, global size, work-group size, elements reduced"},
    {NULL, false, NULL},
};

const Backend backend_opencl = {
    .name = "opencl",
    .doc = "OpenCL C 1.2 kernels for any OpenCL device (checked with libclang at compile time)",
    .targets = "opencl(-.*)?",
    .dtypes = 1u << DT_F32 | 1u << DT_BF16 | 1u << DT_I32,
    .emits = emits,
    .standalone = true,
    .supports_op = ocl_backend_supports_op,
    .plan = ocl_fusion_plan,
    .scratch = ocl_scratch_bytes,
    .compile = ocl_backend_compile,
    .run_trainer = true,
    .check_run_args = ocl_backend_check_run_args,
};
