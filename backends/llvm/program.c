/* program.c: the `axlc_program` global, the RtProgram (runtime/axrt.h) a trainer's main reads.
 *
 * The driver describes what only it knows (config text, parameter table, defaults) in an
 * LlvmProgramInfo; shapes come from the graph and every offset from the memory plan. The LLVM
 * struct types mirror RtParamSlot and RtProgram field by field (coupled with runtime/axrt.h);
 * program_check compares their size and field offsets under the module's data layout with the
 * C compiler's, so a change to the ABI that is not made here too is an error, not a corrupt
 * trainer.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct ProgTypes {
  LLVMTypeRef init, slot, prog;
} ProgTypes;

/* Coupled with RtInit, RtParamSlot and RtProgram in runtime/axrt.h. */
static ProgTypes prog_types(LlvmCtx *C, LLVMTypeRef step_ptr) {
  ProgTypes t;
  LLVMTypeRef f = C->t_f32, i32 = C->t_i32, i64 = C->t_i64, p = C->t_i8p;
  LLVMTypeRef init[] = {i32, f, f, f, f, f};
  t.init = LLVMStructTypeInContext(C->c, init, 6, 0);
  LLVMTypeRef slot[] = {p, i32, LLVMArrayType(i64, RT_MAX_PARAM_RANK), t.init, i64, i64, i64};
  t.slot = LLVMStructTypeInContext(C->c, slot, 7, 0);
  LLVMTypeRef prog[] = {i32, p, i64, i32, LLVMPointerType(t.slot, 0), i64, i64, i64, i64, i64,
                        i64, i64, i64, i64, i64, i64, i64, i32, step_ptr};
  t.prog = LLVMStructTypeInContext(C->c, prog, 19, 0);
  return t;
}

static int program_check(LlvmCtx *C, const ProgTypes *t) {
  LLVMTargetDataRef dl = LLVMGetModuleDataLayout(C->m);
  bool ok = LLVMABISizeOfType(dl, t->slot) == sizeof(RtParamSlot) &&
            LLVMOffsetOfElement(dl, t->slot, 3) == offsetof(RtParamSlot, init) &&
            LLVMOffsetOfElement(dl, t->slot, 6) == offsetof(RtParamSlot, v_offset) &&
            LLVMABISizeOfType(dl, t->prog) == sizeof(RtProgram) &&
            LLVMOffsetOfElement(dl, t->prog, 5) == offsetof(RtProgram, batch) &&
            LLVMOffsetOfElement(dl, t->prog, 17) == offsetof(RtProgram, ckpt_keep) &&
            LLVMOffsetOfElement(dl, t->prog, 18) == offsetof(RtProgram, step);
  return ok ? 0 : llvm_fail(C, "internal: RtProgram in runtime/axrt.h changed; update program.c");
}

static LLVMValueRef cstr(LlvmCtx *C, const char *s) {
  if (!s) return LLVMConstNull(C->t_i8p);
  unsigned n = (unsigned)strlen(s);
  LLVMValueRef init = LLVMConstStringInContext(C->c, s, n, 0);
  LLVMValueRef gl = LLVMAddGlobal(C->m, LLVMTypeOf(init), "str");
  LLVMSetInitializer(gl, init);
  LLVMSetGlobalConstant(gl, 1);
  LLVMSetLinkage(gl, LLVMPrivateLinkage);
  return LLVMConstBitCast(gl, C->t_i8p);
}

static LLVMValueRef i64c(LlvmCtx *C, int64_t v) { return llvm_i64(C, v); }
static LLVMValueRef i32c(LlvmCtx *C, int64_t v) {
  return LLVMConstInt(C->t_i32, (unsigned long long)v, 1);
}
static LLVMValueRef f32c(LlvmCtx *C, double v) { return LLVMConstReal(C->t_f32, v); }

/* Byte offset of the parameter or input named prefix+name, or -1. */
static int64_t named_offset(LlvmCtx *C, IrOp op, const char *prefix, const char *name) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s%s", prefix, name);
  int32_t v = ir_graph_find(C->g, op, buf);
  return v == IR_NONE ? -1 : C->mp->offset[v];
}

static int64_t output_offset(LlvmCtx *C, const char *name) {
  int32_t v = ir_graph_output(C->g, name);
  return v == IR_NONE ? -1 : C->mp->offset[v];
}

static LLVMValueRef slot_const(LlvmCtx *C, const ProgTypes *t, const LlvmParamInfo *pi,
                               int32_t v) {
  const IrShape *s = &C->g->values[v].shape;
  LLVMValueRef dims[RT_MAX_PARAM_RANK];
  for (int32_t d = 0; d < RT_MAX_PARAM_RANK; d++) dims[d] = i64c(C, d < s->rank ? s->dims[d] : 0);
  const RtInit *in = &pi->init;
  LLVMValueRef init[] = {i32c(C, in->kind), f32c(C, in->value), f32c(C, in->mean),
                         f32c(C, in->std), f32c(C, in->lo), f32c(C, in->hi)};
  LLVMValueRef f[] = {cstr(C, pi->path), i32c(C, s->rank),
                      LLVMConstArray(C->t_i64, dims, RT_MAX_PARAM_RANK),
                      LLVMConstNamedStruct(t->init, init, 6), i64c(C, C->mp->offset[v]),
                      i64c(C, named_offset(C, IR_PARAMETER, "opt/m/", pi->path)),
                      i64c(C, named_offset(C, IR_PARAMETER, "opt/v/", pi->path))};
  return LLVMConstNamedStruct(t->slot, f, 7);
}

static LLVMValueRef slots_global(LlvmCtx *C, const ProgTypes *t) {
  const LlvmProgramInfo *P = C->opt.program;
  LLVMValueRef *slots = calloc((size_t)P->nparams + 1, sizeof *slots);
  if (!slots) return NULL;
  for (int32_t i = 0; i < P->nparams; i++) {
    int32_t v = ir_graph_find(C->g, IR_PARAMETER, P->params[i].path);
    if (v == IR_NONE || C->g->values[v].shape.rank > RT_MAX_PARAM_RANK) {
      llvm_fail(C, "program: parameter %s is %s", P->params[i].path,
                v == IR_NONE ? "not in the graph" : "of rank above RT_MAX_PARAM_RANK");
      free(slots);
      return NULL;
    }
    slots[i] = slot_const(C, t, &P->params[i], v);
  }
  LLVMValueRef arr = LLVMConstArray(t->slot, slots, (unsigned)P->nparams);
  free(slots);
  LLVMValueRef gl = LLVMAddGlobal(C->m, LLVMTypeOf(arr), "axlc_params");
  LLVMSetInitializer(gl, arr);
  LLVMSetGlobalConstant(gl, 1);
  LLVMSetLinkage(gl, LLVMPrivateLinkage);
  return LLVMConstBitCast(gl, LLVMPointerType(t->slot, 0));
}

int llvm_program_emit(LlvmCtx *C, LLVMValueRef step) {
  const LlvmProgramInfo *P = C->opt.program;
  if (!P) return 0;
  ProgTypes t = prog_types(C, LLVMTypeOf(step));
  if (program_check(C, &t)) return -1;
  LLVMValueRef slots = slots_global(C, &t);
  if (!slots) return -1;
  int32_t ids = ir_graph_find(C->g, IR_INPUT, "ids");
  const IrShape *is = ids == IR_NONE ? NULL : &C->g->values[ids].shape;
  if (!is || is->rank != 2) return llvm_fail(C, "program: the graph has no input ids (B, T)");
  LLVMValueRef f[] = {
      i32c(C, RT_ABI_VERSION), cstr(C, P->config), i64c(C, C->mp->slab_bytes),
      i32c(C, P->nparams), slots, i64c(C, is->dims[0]), i64c(C, is->dims[1]), i64c(C, P->vocab),
      i64c(C, C->mp->offset[ids]), i64c(C, named_offset(C, IR_INPUT, "", "targets")),
      i64c(C, named_offset(C, IR_INPUT, "", "step")), i64c(C, output_offset(C, "loss")),
      i64c(C, output_offset(C, "grad_norm")), i64c(C, output_offset(C, "lr")),
      i64c(C, P->max_steps), i64c(C, (int64_t)P->seed), i64c(C, P->ckpt_every),
      i32c(C, P->ckpt_keep), step};
  LLVMValueRef gl = LLVMAddGlobal(C->m, t.prog, "axlc_program");
  LLVMSetInitializer(gl, LLVMConstNamedStruct(t.prog, f, 19));
  LLVMSetGlobalConstant(gl, 1);
  return 0;
}
