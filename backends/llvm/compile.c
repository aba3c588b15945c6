/* compile.c: from a step graph and its memory plan to compiled objects.
 *
 * llvm_compile checks what the backend supports (f32, bf16 and i32 values, a plan that
 * covers every value), decides which values get buffers (fusion.c), then emits axlc_step: one
 * kernel call per materialized value in index order (kernel.c, reduce.c, blas.c), and at the end
 * a copy of every "new:X" output the plan did not place over X. Each kernel is a unit of its
 * own, shared by every call that computes the same thing (unit.c); the units are then verified,
 * optimized with the new pass manager (default<O3>) and turned into objects on several
 * threads, for the host unless the options name a CPU, through the object cache if the options
 * name one.
 *
 * A pipeline (docs/pipeline.md) is one program for every stage, in the pipeline pass's order:
 * each device runs the values of its own stage (IrValue.stage) and those of every device, each
 * staged kernel call behind a test of the device's stage (rt_comm_coord). A recv also runs on
 * its sending stage, where it completes the send (runtime/comm.c). At the end the loss and the
 * other scalar outputs, and each parameter that several stages read, go from the stage that
 * made them to the others (rt_comm_stage_share), so every device reports the same numbers and
 * reads the same weights next step.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- what the backend accepts ---- */

static int check_value(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  int64_t need = ir_shape_numel(&x->shape) * (int64_t)ir_dtype_size(x->dtype);
  if (x->dtype != DT_F32 && x->dtype != DT_I32 && x->dtype != DT_BF16)
    return llvm_fail(C,
                     "%%%d (%s) at %s: dtype %s is not supported by the LLVM backend (f32, bf16, "
                     "i32)",
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

/* ---- axlc_step ---- */

/* ---- the pipeline's stages ---- */

/* this device's stage, read at the current position: rt_comm_coord(comm, pipeline axis) */
static void read_stage(LlvmCtx *C) {
  int a = llvm_pipeline_axis(C->g);
  C->stage_now = NULL;
  if (a < 0) return;
  LLVMTypeRef p[] = {C->t_i8p, C->t_i32};
  LLVMValueRef fn = llvm_fn_get(C, "rt_comm_coord", C->t_i64, p, 2);
  LLVMValueRef args[] = {C->comm, LLVMConstInt(C->t_i32, (unsigned)a, 0)};
  C->stage_now = LLVMBuildCall2(C->b, LLVMGlobalGetValueType(fn), fn, args, 2, "stage");
}

/* Opens `if (this device's stage is value v's)` (for a recv: or its sender's) around what is
 * emitted until guard_end; *at is the block to close from, NULL when v runs on every device. */
static void guard_begin(LlvmCtx *C, int32_t v, LLVMBasicBlockRef *at) {
  const IrValue *x = &C->g->values[v];
  *at = NULL;
  if (!C->stage_now || x->stage <= 0) return;
  LLVMValueRef on = LLVMBuildICmp(C->b, LLVMIntEQ, C->stage_now, llvm_i64(C, x->stage - 1), "");
  if (x->op == IR_RECV)
    on = LLVMBuildOr(C->b, on,
                     LLVMBuildICmp(C->b, LLVMIntEQ, C->stage_now, llvm_i64(C, x->attr.k), ""), "");
  *at = LLVMGetInsertBlock(C->b);
  C->guard_on = on;
  LLVMPositionBuilderAtEnd(C->b, LLVMAppendBasicBlockInContext(C->c, C->fn, "stage"));
  C->guard_then = LLVMGetInsertBlock(C->b);
}

static void guard_end(LlvmCtx *C, LLVMBasicBlockRef at) {
  if (!at) return;
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(C->c, C->fn, "staged");
  LLVMBuildBr(C->b, join);
  LLVMPositionBuilderAtEnd(C->b, at);
  LLVMBuildCondBr(C->b, C->guard_on, C->guard_then, join);
  LLVMPositionBuilderAtEnd(C->b, join);
}

/* rt_comm_stage_share of v's buffer from v's stage, where v is staged. */
static void share(LlvmCtx *C, int32_t v, int32_t buffer) {
  int a = llvm_pipeline_axis(C->g);
  if (a < 0 || C->g->values[v].stage <= 0) return;
  const IrValue *x = &C->g->values[buffer];
  LLVMTypeRef p[] = {C->t_i8p, C->t_i32, C->t_i64, C->t_i8p, C->t_i64, C->t_i64};
  LLVMValueRef fn = llvm_fn_get(C, "rt_comm_stage_share", C->t_void, p, 6);
  LLVMValueRef args[] = {C->comm,
                         LLVMConstInt(C->t_i32, (unsigned)a, 0),
                         llvm_i64(C, C->g->values[v].stage - 1),
                         C->slab,
                         llvm_i64(C, C->mp->offset[buffer]),
                         llvm_i64(C, ir_shape_numel(&x->shape) * (int64_t)ir_dtype_size(x->dtype))};
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(fn), fn, args, 6, "");
}

/* Copies each "new:X" output that the plan did not place over parameter X onto X, on the stage
 * that made it; then the pipeline's shares (top of the file). */
static void copy_back(LlvmCtx *C) {
  for (int32_t i = 0; i < C->g->noutputs; i++) {
    const IrOutput *o = &C->g->outputs[i];
    if (strncmp(o->name, "new:", 4) != 0) continue;
    int32_t x = ir_graph_find(C->g, IR_PARAMETER, o->name + 4);
    if (x == IR_NONE || C->mp->offset[x] == C->mp->offset[o->value]) continue;
    int64_t n =
        ir_shape_numel(&C->g->values[x].shape) * (int64_t)ir_dtype_size(C->g->values[x].dtype);
    LLVMBasicBlockRef at;
    guard_begin(C, o->value, &at);
    LLVMValueRef dst = LLVMBuildBitCast(C->b, llvm_buffer_ptr(C, x), C->t_i8p, "");
    LLVMValueRef src = LLVMBuildBitCast(C->b, llvm_buffer_ptr(C, o->value), C->t_i8p, "");
    LLVMBuildMemMove(C->b, dst, 4, src, 4, llvm_i64(C, n));
    guard_end(C, at);
  }
  if (!C->stage_now) return;
  int32_t *made = base_xmalloc(((size_t)C->g->noutputs + 4) * sizeof *made);
  int32_t *buffer = base_xmalloc(((size_t)C->g->noutputs + 4) * sizeof *buffer);
  int32_t n = backend_pipeline_shares(C->g, made, buffer);
  for (int32_t k = 0; k < n; k++) share(C, made[k], buffer[k]);
  free(made);
  free(buffer);
}

/* A step of thousands of kernel calls as one function takes LLVM's code generator minutes
 * (its time grows faster than the function); in parts of PART_VALUES values each, it takes a
 * second. */
enum { PART_VALUES = 64 };

/* A function void name(char *slab, RtPool *pool, RtComm *comm) whose entry block the builder
 * is left in, as the function C emits into. */
static LLVMValueRef begin_fn(LlvmCtx *C, const char *name, bool internal) {
  LLVMTypeRef p[] = {C->t_i8p, C->t_i8p, C->t_i8p};
  LLVMValueRef f = LLVMAddFunction(C->m, name, LLVMFunctionType(C->t_void, p, 3, 0));
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(f, 1, LLVMCreateEnumAttribute(C->c, noalias, 0));
  if (internal) {
    LLVMSetLinkage(f, LLVMInternalLinkage);
    unsigned kind = LLVMGetEnumAttributeKindForName("noinline", 8);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(C->c, kind, 0));
  }
  LLVMPositionBuilderAtEnd(C->b, LLVMAppendBasicBlockInContext(C->c, f, "entry"));
  C->step = C->fn = f;
  C->step_slab = C->slab = LLVMGetParam(f, 0);
  C->pool = LLVMGetParam(f, 1);
  C->comm = LLVMGetParam(f, 2);
  return f;
}

static void end_fn(LlvmCtx *C) {
  llvm_kernel_args_done(C);
  LLVMBuildRetVoid(C->b);
}

/* axlc_step, or axlc_forward: void name(char *slab, RtPool *pool, RtComm *comm) running every
 * value of C->g, in order, by calling its parts. */
static LLVMValueRef emit_entry(LlvmCtx *C, const char *name) {
  LLVMValueRef top = begin_fn(C, name, false);
  LLVMBasicBlockRef top_bb = LLVMGetInsertBlock(C->b);
  LLVMValueRef top_args[] = {C->slab, C->pool, C->comm};
  for (int32_t v0 = 0, part = 0; v0 < C->g->nvalues; v0 += PART_VALUES, part++) {
    char pname[96];
    snprintf(pname, sizeof pname, "%s.part%d", name, part);
    LLVMValueRef f = begin_fn(C, pname, true);
    LLVMBasicBlockRef at = LLVMGetInsertBlock(C->b);
    LLVMPositionBuilderAtEnd(C->b, top_bb);
    LLVMBuildCall2(C->b, LLVMGlobalGetValueType(f), f, top_args, 3, "");
    LLVMPositionBuilderAtEnd(C->b, at);
    read_stage(C);
    for (int32_t v = v0; v < C->g->nvalues && v < v0 + PART_VALUES; v++) {
      LLVMBasicBlockRef g0;
      guard_begin(C, v, &g0);
      if (llvm_kernel_emit(C, v)) return NULL;
      guard_end(C, g0);
    }
    end_fn(C);
  }
  C->step = C->fn = top;
  C->step_slab = C->slab = top_args[0];
  C->pool = top_args[1];
  C->comm = top_args[2];
  LLVMPositionBuilderAtEnd(C->b, top_bb);
  read_stage(C);
  copy_back(C);
  if (C->g == C->opt.forward) llvm_forward_widen(C);
  end_fn(C);
  return top;
}

/* The per-graph state of C: which values get buffers, constants, collectives. */
static int graph_begin(LlvmCtx *C) {
  C->mat = base_xmalloc((size_t)C->g->nvalues + 1);
  C->cdata = base_xcalloc((size_t)C->g->nvalues + 1, sizeof *C->cdata);
  C->coll = base_xmalloc(((size_t)C->g->nvalues + 1) * sizeof *C->coll);
  C->cdata_unit = base_xcalloc((size_t)C->g->nvalues + 1, sizeof *C->cdata_unit);
  C->slot_of = base_xmalloc(((size_t)C->g->nvalues + 1) * sizeof *C->slot_of);
  C->slot_val = base_xmalloc(((size_t)C->g->nvalues + 1) * sizeof *C->slot_val);
  C->slot_ptr = base_xmalloc(((size_t)C->g->nvalues + 1) * sizeof *C->slot_ptr);
  C->slot_users = base_xmalloc(((size_t)C->g->nvalues + 1) * sizeof *C->slot_users);
  C->defer = base_xmalloc(((size_t)C->g->nvalues + 1) * sizeof *C->defer);
  C->hosted = base_xcalloc((size_t)C->g->nvalues + 1, sizeof *C->hosted);
  C->ncoll = 0;
  C->nslots = C->nslot_users = 0;
  for (int32_t v = 0; v < C->g->nvalues; v++) C->slot_of[v] = C->defer[v] = -1;
  bool multi = llvm_multi_device(C->g);
  for (int32_t v = 0; v < C->g->nvalues; v++)
    C->coll[v] = multi && (ir_op_flags(C->g->values[v].op) & IR_COLLECTIVE) ? C->ncoll++ : -1;
  if (C->opt.fuse)
    pass_fusion_plan(C->g, C->mat);
  else
    memset(C->mat, 1, (size_t)C->g->nvalues);
  if (check_graph(C) || (C->opt.fuse && (llvm_fusion_check(C) || llvm_fusion_defer(C)))) return -1;
  return 0;
}

static void graph_end(LlvmCtx *C) {
  free(C->mat);
  free(C->cdata);
  free(C->coll);
  free(C->cdata_unit);
  free(C->slot_of);
  free(C->slot_val);
  free(C->slot_ptr);
  free(C->slot_users);
  free(C->defer);
  free(C->hosted);
  C->defer = C->hosted = NULL;
  C->mat = NULL;
  C->cdata = NULL;
  C->coll = NULL;
  C->cdata_unit = C->slot_of = C->slot_val = C->slot_users = NULL;
  C->slot_ptr = NULL;
}

/* `fname` and its table (llvm_forward_emit or llvm_decode_emit) from a sampling graph g planned
 * as mp (one device, no collectives); C's step state is kept and restored. */
static int emit_sampling(LlvmCtx *C, const IrGraph *g, const MemPlan *mp, const char *fname,
                         int (*table)(LlvmCtx *, LLVMValueRef)) {
  LlvmCtx S = *C;
  C->g = g;
  C->mp = mp;
  if (C->g->nvalues && llvm_multi_device(C->g))
    return llvm_fail(C, "the %s graph must be for one device", fname);
  int rc = graph_begin(C);
  LLVMValueRef f = rc == 0 ? emit_entry(C, fname) : NULL;
  if (rc == 0 && !f) rc = -1;
  if (rc == 0) rc = table(C, f);
  graph_end(C);
  LLVMValueRef fwd = C->fwd_table, dec = C->dec_table;
  *C = S;
  C->fwd_table = fwd;
  C->dec_table = dec;
  return rc;
}

/* axlc_decode (when the job has one) and axlc_forward, with their tables. */
static int emit_forward(LlvmCtx *C) {
  const LlvmOptions *o = &C->opt;
  if (o->decode && o->decode_plan &&
      emit_sampling(C, o->decode, o->decode_plan, "axlc_decode", llvm_decode_emit))
    return -1;
  return emit_sampling(C, o->forward, o->forward_plan, "axlc_forward", llvm_forward_emit);
}

/* The emission proper, once the module and target exist. */
static int build(LlvmCtx *C) {
  llvm_ctx_types(C);
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
  double t0 = rt_now_s();
  LlvmCtx C = {.g = g,
               .mp = mp,
               .opt = opt ? *opt : llvm_options_default(),
               .kout = -1,
               .err = err,
               .cap = cap};
  if (C.opt.parallel_min <= 0) C.opt.parallel_min = 1;
  LlvmModule *M = base_xcalloc(1, sizeof *M);
  M->has_program = C.opt.program != NULL;
  C.M = M;
  int rc = llvm_units_begin(M, &C.opt, err, cap);
  if (rc == 0) {
    C.c = M->units[0].ctx;
    C.m = M->units[0].mod;
    C.b = LLVMCreateBuilderInContext(C.c);
    rc = build(&C);
    if (C.c != M->units[0].ctx) { /* failed inside a kernel */
      LLVMDisposeBuilder(C.b);
      LLVMDisposeModule(C.m);
      LLVMContextDispose(C.c);
      C.b = C.main_b;
    }
    LLVMDisposeBuilder(C.b);
  }
  graph_end(&C);
  M->stats.emit_s = rt_now_s() - t0;
  if (rc == 0) rc = llvm_units_compile(M, &C.opt, err, cap);
  if (rc) {
    llvm_module_free(M);
    return -1;
  }
  *out = M;
  return 0;
}
