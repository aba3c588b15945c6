/* compile.c: from a step graph and its memory plan to an optimized LLVM module.
 *
 * llvm_compile checks what the backend supports (f32 and i32 values, a plan that
 * covers every value), decides which values get buffers (fusion.c), then emits axlc_step: one
 * kernel call per materialized value in index order (kernel.c, reduce.c, blas.c), and at the end
 * a copy of every "new:X" output the plan did not place over X. The module is verified, then
 * optimized with the new pass manager (default<O3>) for the target machine, which is the host
 * unless the options name a CPU. The module lives in its own thread-safe context so that the
 * JIT can take it over.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifndef AXLC_HAVE_RT_POOL
#define AXLC_HAVE_RT_POOL 0
#endif

LlvmOptions llvm_options_default(void) {
  LlvmOptions o = {0};
  o.opt_level = 3;
  o.fuse = true;
  o.blas = true;
  o.threads = AXLC_HAVE_RT_POOL;
  o.parallel_min = 1 << 15;
  return o;
}

int llvm_fail(LlvmCtx *C, const char *fmt, ...) {
  if (C->err && C->cap && C->err[0]) return -1; /* keep the first message */
  va_list ap;
  va_start(ap, fmt);
  if (C->err && C->cap) vsnprintf(C->err, C->cap, fmt, ap);
  va_end(ap);
  return -1;
}

static int fail_buf(char *err, size_t cap, const char *fmt, const char *arg) {
  if (err && cap) snprintf(err, cap, fmt, arg ? arg : "");
  return -1;
}

LLVMTypeRef llvm_type_of(LlvmCtx *C, IrDType dt) { return dt == DT_I32 ? C->t_i32 : C->t_f32; }

/* ---- what the backend accepts ---- */

static int check_value(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  int64_t need = ir_shape_numel(&x->shape) * (int64_t)ir_dtype_size(x->dtype);
  if (x->dtype != DT_F32 && x->dtype != DT_I32)
    return llvm_fail(C, "%%%d (%s) at %s: dtype %s is not supported by the LLVM backend (f32, i32)",
                     v, ir_op_name(x->op), *x->origin ? x->origin : "?", ir_dtype_name(x->dtype));
  if (!C->mat[v] || need == 0) return 0;
  if (C->mp->bytes[v] < need || C->mp->offset[v] < 0 || C->mp->offset[v] + need > C->mp->slab_bytes)
    return llvm_fail(C,
                     "%%%d (%s): the memory plan gives it %lld bytes at %lld of a %lld-byte "
                     "slab; it needs %lld",
                     v, ir_op_name(x->op), (long long)C->mp->bytes[v], (long long)C->mp->offset[v],
                     (long long)C->mp->slab_bytes, (long long)need);
  return 0;
}

static int check_graph(LlvmCtx *C) {
  if (C->mp->nvalues != C->g->nvalues)
    return llvm_fail(C, "the memory plan has %d values, the graph %d", C->mp->nvalues,
                     C->g->nvalues);
  for (int32_t v = 0; v < C->g->nvalues; v++)
    if (check_value(C, v)) return -1;
  return 0;
}

/* ---- target machine ---- */

static int make_target(LlvmModule *M, const LlvmOptions *o, char *err, size_t cap) {
  if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter())
    return fail_buf(err, cap, "LLVM has no native target%s", NULL);
  char *triple = LLVMGetDefaultTargetTriple(), *msg = NULL;
  LLVMTargetRef target;
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
    fail_buf(err, cap, "LLVM target: %s", msg);
    LLVMDisposeMessage(msg);
    LLVMDisposeMessage(triple);
    return -1;
  }
  char *hcpu = LLVMGetHostCPUName(), *hfeat = LLVMGetHostCPUFeatures();
  M->cpu = strdup(o->cpu ? o->cpu : hcpu);
  M->features = strdup(o->features ? o->features : hfeat);
  LLVMDisposeMessage(hcpu);
  LLVMDisposeMessage(hfeat);
  M->tm = LLVMCreateTargetMachine(target, triple, M->cpu, M->features, LLVMCodeGenLevelAggressive,
                                  LLVMRelocPIC, LLVMCodeModelDefault);
  LLVMSetTarget(M->mod, triple);
  LLVMDisposeMessage(triple);
  if (!M->tm || !M->cpu || !M->features)
    return fail_buf(err, cap, "LLVM: no target machine%s", NULL);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(M->tm);
  LLVMSetModuleDataLayout(M->mod, dl);
  LLVMDisposeTargetData(dl);
  return 0;
}

static void ctx_types(LlvmCtx *C) {
  C->t_void = LLVMVoidTypeInContext(C->c);
  C->t_i1 = LLVMInt1TypeInContext(C->c);
  C->t_i8 = LLVMInt8TypeInContext(C->c);
  C->t_i8p = LLVMPointerType(C->t_i8, 0);
  C->t_i32 = LLVMInt32TypeInContext(C->c);
  C->t_i64 = LLVMInt64TypeInContext(C->c);
  C->t_f32 = LLVMFloatTypeInContext(C->c);
  C->t_f64 = LLVMDoubleTypeInContext(C->c);
  LLVMTypeRef kp[] = {C->t_i8p, C->t_i64, C->t_i64};
  C->t_kernel = LLVMFunctionType(C->t_void, kp, 3, 0);
}

/* ---- axlc_step ---- */

/* Copies each "new:X" output that the plan did not place over parameter X onto X. */
static void copy_back(LlvmCtx *C) {
  for (int32_t i = 0; i < C->g->noutputs; i++) {
    const IrOutput *o = &C->g->outputs[i];
    if (strncmp(o->name, "new:", 4) != 0) continue;
    int32_t x = ir_graph_find(C->g, IR_PARAMETER, o->name + 4);
    if (x == IR_NONE || C->mp->offset[x] == C->mp->offset[o->value]) continue;
    int64_t n =
        ir_shape_numel(&C->g->values[x].shape) * (int64_t)ir_dtype_size(C->g->values[x].dtype);
    LLVMValueRef dst = LLVMBuildBitCast(C->b, llvm_buffer_ptr(C, x), C->t_i8p, "");
    LLVMValueRef src = LLVMBuildBitCast(C->b, llvm_buffer_ptr(C, o->value), C->t_i8p, "");
    LLVMBuildMemMove(C->b, dst, 4, src, 4, llvm_i64(C, n));
  }
}

/* axlc_step, or axlc_forward: void name(char *slab, RtPool *pool, RtComm *comm) running every
 * value of C->g. */
static LLVMValueRef emit_entry(LlvmCtx *C, const char *name) {
  LLVMTypeRef p[] = {C->t_i8p, C->t_i8p, C->t_i8p};
  LLVMValueRef f = LLVMAddFunction(C->m, name, LLVMFunctionType(C->t_void, p, 3, 0));
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(f, 1, LLVMCreateEnumAttribute(C->c, noalias, 0));
  LLVMPositionBuilderAtEnd(C->b, LLVMAppendBasicBlockInContext(C->c, f, "entry"));
  C->step = C->fn = f;
  C->step_slab = C->slab = LLVMGetParam(f, 0);
  C->pool = LLVMGetParam(f, 1);
  C->comm = LLVMGetParam(f, 2);
  for (int32_t v = 0; v < C->g->nvalues; v++)
    if (llvm_kernel_emit(C, v)) return NULL;
  copy_back(C);
  LLVMBuildRetVoid(C->b);
  return f;
}

static int optimize(LlvmModule *M, int level, char *err, size_t cap) {
  char *msg = NULL;
  if (LLVMVerifyModule(M->mod, LLVMReturnStatusAction, &msg)) {
    fail_buf(err, cap, "internal: the generated module does not verify: %.400s", msg);
    LLVMDisposeMessage(msg);
    return -1;
  }
  LLVMDisposeMessage(msg);
  if (level <= 0) return 0;
  char pipeline[32];
  snprintf(pipeline, sizeof pipeline, "default<O%d>", level > 3 ? 3 : level);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
  LLVMErrorRef e = LLVMRunPasses(M->mod, pipeline, M->tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (!e) return 0;
  char *em = LLVMGetErrorMessage(e);
  fail_buf(err, cap, "LLVM passes: %s", em);
  LLVMDisposeErrorMessage(em);
  return -1;
}

static LlvmModule *module_new(void) {
  LlvmModule *M = calloc(1, sizeof *M);
  if (!M) return NULL;
  M->tsctx = LLVMOrcCreateNewThreadSafeContext();
  M->ctx = LLVMOrcThreadSafeContextGetContext(M->tsctx);
  M->mod = LLVMModuleCreateWithNameInContext("axlc", M->ctx);
  return M;
}

/* The per-graph state of C: which values get buffers, constants, collectives. */
static int graph_begin(LlvmCtx *C) {
  C->mat = malloc((size_t)C->g->nvalues + 1);
  C->cdata = calloc((size_t)C->g->nvalues + 1, sizeof *C->cdata);
  C->coll = malloc(((size_t)C->g->nvalues + 1) * sizeof *C->coll);
  C->ncoll = 0;
  if (!C->mat || !C->cdata || !C->coll) return llvm_fail(C, "out of memory");
  bool multi = llvm_multi_device(C->g);
  for (int32_t v = 0; v < C->g->nvalues; v++)
    C->coll[v] = multi && (ir_op_flags(C->g->values[v].op) & IR_COLLECTIVE) ? C->ncoll++ : -1;
  if (C->opt.fuse)
    llvm_fusion_plan(C->g, C->mat);
  else
    memset(C->mat, 1, (size_t)C->g->nvalues);
  if (check_graph(C) || (C->opt.fuse && llvm_fusion_check(C))) return -1;
  return 0;
}

static void graph_end(LlvmCtx *C) {
  free(C->mat);
  free(C->cdata);
  free(C->coll);
  C->mat = NULL;
  C->cdata = NULL;
  C->coll = NULL;
}

/* axlc_forward and its RtForward table, from the forward graph (one device, no collectives);
 * C's step state is kept and restored. */
static int emit_forward(LlvmCtx *C) {
  LlvmCtx S = *C;
  C->g = C->opt.forward;
  C->mp = C->opt.forward_plan;
  if (C->g->nvalues && llvm_multi_device(C->g))
    return llvm_fail(C, "the forward graph must be for one device");
  int rc = graph_begin(C);
  LLVMValueRef f = rc == 0 ? emit_entry(C, "axlc_forward") : NULL;
  if (rc == 0 && !f) rc = -1;
  if (rc == 0) rc = llvm_forward_emit(C, f);
  graph_end(C);
  LLVMValueRef table = C->fwd_table;
  *C = S;
  C->fwd_table = table;
  return rc;
}

/* The emission proper, once the module and target exist. */
static int build(LlvmCtx *C) {
  ctx_types(C);
  if (graph_begin(C)) return -1;
  LLVMValueRef step = emit_entry(C, "axlc_step");
  if (!step) return -1;
  if (C->opt.forward && C->opt.forward_plan && C->opt.program && emit_forward(C)) return -1;
  return llvm_program_emit(C, step);
}

int llvm_compile(const IrGraph *g, const MemPlan *mp, const LlvmOptions *opt, LlvmModule **out,
                 char *err, size_t cap) {
  if (err && cap) err[0] = 0;
  *out = NULL;
  LlvmCtx C = {.g = g,
               .mp = mp,
               .opt = opt ? *opt : llvm_options_default(),
               .kout = -1,
               .err = err,
               .cap = cap};
  if (C.opt.parallel_min <= 0) C.opt.parallel_min = 1;
  LlvmModule *M = module_new();
  if (!M) return fail_buf(err, cap, "out of memory%s", NULL);
  M->has_program = C.opt.program != NULL;
  int rc = make_target(M, &C.opt, err, cap);
  if (rc == 0) {
    C.c = M->ctx;
    C.m = M->mod;
    C.b = LLVMCreateBuilderInContext(C.c);
    rc = build(&C);
    LLVMDisposeBuilder(C.b);
  }
  graph_end(&C);
  if (rc == 0) rc = optimize(M, C.opt.opt_level, err, cap);
  if (rc) {
    llvm_module_free(M);
    return -1;
  }
  *out = M;
  return 0;
}

void llvm_module_free(LlvmModule *M) {
  if (!M) return;
  if (M->mod) LLVMDisposeModule(M->mod);
  if (M->tm) LLVMDisposeTargetMachine(M->tm);
  if (M->tsctx) LLVMOrcDisposeThreadSafeContext(M->tsctx);
  free(M->cpu);
  free(M->features);
  free(M);
}
