/* program.c: the `axlc_program` global, the RtProgram (runtime/axrt.h) a trainer's main reads.
 *
 * The driver describes what only it knows (config text, parameter table, program facts) in the
 * job's BackendProgram; shapes come from the graph and every offset from the memory plan. The
 * facts (RtFacts) are emitted from RT_PROGRAM_FACTS alone, so a new fact needs nothing here. The
 * LLVM struct types mirror RtParamSlot and RtProgram field by field (coupled with runtime/axrt.h);
 * program_check compares their size and field offsets under the module's data layout with the
 * C compiler's, so a change to the ABI that is not made here too is an error, not a corrupt
 * trainer.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/backend.h"
#include "backends/llvm/llvm.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct ProgTypes {
  LLVMTypeRef init, slot, mesh, coll, prog, split, fwd, kv, dec, facts;
} ProgTypes;

/* Coupled with RtInit, RtParamSlot, RtMesh, RtCollective, RtKvCache, RtDecode, RtForward and
 * RtProgram in runtime/axrt.h. */
static ProgTypes prog_types(LlvmCtx *C, LLVMTypeRef step_ptr) {
  ProgTypes t;
  LLVMTypeRef f = C->t_f32, i32 = C->t_i32, i64 = C->t_i64, p = C->t_i8p;
  LLVMTypeRef init[] = {i32, f, f, f, f, f};
  t.init = LLVMStructTypeInContext(C->c, init, 6, 0);
  t.split = LLVMArrayType(C->t_i8, RT_MAX_SPLIT_AXES);
  LLVMTypeRef slot[] = {p,
                        i32,
                        LLVMArrayType(i64, RT_MAX_PARAM_RANK),
                        LLVMArrayType(i64, RT_MAX_PARAM_RANK),
                        LLVMArrayType(t.split, RT_MAX_PARAM_RANK),
                        t.init,
                        i64,
                        i64,
                        i64,
                        i64,
                        i64};
  t.slot = LLVMStructTypeInContext(C->c, slot, 11, 0);
  LLVMTypeRef mesh[] = {i32, LLVMArrayType(p, RT_MAX_MESH_AXES),
                        LLVMArrayType(i64, RT_MAX_MESH_AXES)};
  t.mesh = LLVMStructTypeInContext(C->c, mesh, 3, 0);
  LLVMTypeRef coll[] = {i32,
                        i32,
                        i32,
                        LLVMArrayType(i32, RT_MAX_MESH_AXES),
                        i32,
                        i32,
                        i32,
                        LLVMArrayType(i64, RT_MAX_DIMS),
                        LLVMArrayType(i64, RT_MAX_DIMS),
                        i64,
                        i64};
  t.coll = LLVMStructTypeInContext(C->c, coll, 11, 0);
  LLVMTypeRef kv[] = {i64, i64, i64, i64, i64};
  t.kv = LLVMStructTypeInContext(C->c, kv, 5, 0);
  LLVMTypeRef dec[] = {
      i64, i64, i64, i64, LLVMPointerType(i64, 0), i32, LLVMPointerType(t.kv, 0), step_ptr};
  t.dec = LLVMStructTypeInContext(C->c, dec, 8, 0);
  LLVMTypeRef fwd[] = {i64, i64, i64, LLVMPointerType(i64, 0), step_ptr, LLVMPointerType(t.dec, 0)};
  t.fwd = LLVMStructTypeInContext(C->c, fwd, 6, 0);
  /* RtFacts: one 8-byte field per row of RT_PROGRAM_FACTS, f64 for a double, else i64 */
#define FACT_TYPE(name, type, doc) _Generic(((RtFacts *)0)->name, double : C->t_f64, default : i64),
  LLVMTypeRef facts[] = {RT_PROGRAM_FACTS(FACT_TYPE)};
#undef FACT_TYPE
  t.facts = LLVMStructTypeInContext(C->c, facts, (unsigned)(sizeof facts / sizeof *facts), 0);
  LLVMTypeRef prog[] = {i32,
                        p,
                        i64,
                        i32,
                        LLVMPointerType(t.slot, 0),
                        i64,
                        i64,
                        i64,
                        t.split,
                        i64,
                        i64,
                        i64,
                        i64,
                        i64,
                        i64,
                        t.mesh,
                        i32,
                        LLVMPointerType(t.coll, 0),
                        step_ptr,
                        LLVMPointerType(t.fwd, 0),
                        i32,
                        i64,
                        t.facts,
                        LLVMPointerType(i64, 0)};
  t.prog = LLVMStructTypeInContext(C->c, prog, 24, 0);
  return t;
}

static int program_check(LlvmCtx *C, const ProgTypes *t) {
  LLVMTargetDataRef dl = LLVMGetModuleDataLayout(C->m);
  bool ok = LLVMABISizeOfType(dl, t->slot) == sizeof(RtParamSlot) &&
            LLVMOffsetOfElement(dl, t->slot, 4) == offsetof(RtParamSlot, split) &&
            LLVMOffsetOfElement(dl, t->slot, 5) == offsetof(RtParamSlot, init) &&
            LLVMOffsetOfElement(dl, t->slot, 8) == offsetof(RtParamSlot, v_offset) &&
            LLVMOffsetOfElement(dl, t->slot, 9) == offsetof(RtParamSlot, stage) &&
            LLVMOffsetOfElement(dl, t->slot, 10) == offsetof(RtParamSlot, apart) &&
            LLVMABISizeOfType(dl, t->mesh) == sizeof(RtMesh) &&
            LLVMABISizeOfType(dl, t->coll) == sizeof(RtCollective) &&
            LLVMOffsetOfElement(dl, t->coll, 7) == offsetof(RtCollective, in_shape) &&
            LLVMOffsetOfElement(dl, t->coll, 10) == offsetof(RtCollective, out_offset) &&
            LLVMABISizeOfType(dl, t->prog) == sizeof(RtProgram) &&
            LLVMOffsetOfElement(dl, t->prog, 5) == offsetof(RtProgram, batch) &&
            LLVMOffsetOfElement(dl, t->prog, 8) == offsetof(RtProgram, batch_split) &&
            LLVMOffsetOfElement(dl, t->prog, 19) == offsetof(RtProgram, forward) &&
            LLVMOffsetOfElement(dl, t->prog, 21) == offsetof(RtProgram, aux_loss_offset) &&
            LLVMOffsetOfElement(dl, t->prog, 22) == offsetof(RtProgram, facts) &&
            LLVMOffsetOfElement(dl, t->prog, 23) == offsetof(RtProgram, stage_slab_bytes) &&
            LLVMABISizeOfType(dl, t->facts) == sizeof(RtFacts) &&
            LLVMABISizeOfType(dl, t->fwd) == sizeof(RtForward) &&
            LLVMOffsetOfElement(dl, t->fwd, 3) == offsetof(RtForward, param_offsets) &&
            LLVMOffsetOfElement(dl, t->fwd, 4) == offsetof(RtForward, run) &&
            LLVMOffsetOfElement(dl, t->fwd, 5) == offsetof(RtForward, decode) &&
            LLVMABISizeOfType(dl, t->kv) == sizeof(RtKvCache) &&
            LLVMABISizeOfType(dl, t->dec) == sizeof(RtDecode) &&
            LLVMOffsetOfElement(dl, t->dec, 4) == offsetof(RtDecode, param_offsets) &&
            LLVMOffsetOfElement(dl, t->dec, 5) == offsetof(RtDecode, ncaches) &&
            LLVMOffsetOfElement(dl, t->dec, 6) == offsetof(RtDecode, caches) &&
            LLVMOffsetOfElement(dl, t->dec, 7) == offsetof(RtDecode, run) &&
            LLVMOffsetOfElement(dl, t->prog, 9) == offsetof(RtProgram, ids_offset) &&
            LLVMOffsetOfElement(dl, t->prog, 15) == offsetof(RtProgram, mesh) &&
            LLVMOffsetOfElement(dl, t->prog, 17) == offsetof(RtProgram, collectives) &&
            LLVMOffsetOfElement(dl, t->prog, 18) == offsetof(RtProgram, step);
  return ok ? 0 : llvm_fail(C, "internal: RtProgram in runtime/axrt.h changed; update program.c");
}

/* RtProgram.stage_slab_bytes: under a pipeline, the bytes a device of each stage uses (MemPlan's
 * stage_slab), so that each allocates its own; else NULL. */
static LLVMValueRef stage_slabs_global(LlvmCtx *C) {
  int a = llvm_pipeline_axis(C->g);
  LLVMTypeRef p64 = LLVMPointerType(C->t_i64, 0);
  if (a < 0 || !C->mp->stage_slab || C->mp->nstages != C->g->mesh.sizes[a])
    return LLVMConstNull(p64);
  int32_t n = C->mp->nstages;
  LLVMValueRef *v = base_xmalloc((size_t)n * sizeof *v);
  for (int32_t s = 0; s < n; s++) v[s] = llvm_i64(C, C->mp->stage_slab[s]);
  LLVMValueRef arr = LLVMConstArray(C->t_i64, v, (unsigned)n);
  free(v);
  LLVMValueRef gl = LLVMAddGlobal(C->m, LLVMTypeOf(arr), "axlc_stage_slabs");
  LLVMSetInitializer(gl, arr);
  LLVMSetGlobalConstant(gl, 1);
  LLVMSetLinkage(gl, LLVMPrivateLinkage);
  return LLVMConstBitCast(gl, p64);
}

bool llvm_multi_device(const IrGraph *g) { return ir_mesh_devices(&g->mesh) > 1; }

int llvm_pipeline_axis(const IrGraph *g) {
  int a = ir_mesh_axis(&g->mesh, IR_PIPELINE_AXIS);
  return a >= 0 && g->mesh.sizes[a] > 1 ? a : -1;
}

static LLVMValueRef i8c(LlvmCtx *C, int64_t v) {
  return LLVMConstInt(C->t_i8, (unsigned long long)v, 0);
}

/* An IrSplit's axis list of one dim as [RT_MAX_SPLIT_AXES x i8]. */
static LLVMValueRef split_const(LlvmCtx *C, const uint8_t *axes) {
  LLVMValueRef a[RT_MAX_SPLIT_AXES];
  for (int i = 0; i < RT_MAX_SPLIT_AXES; i++) a[i] = i8c(C, i < IR_MAX_SPLIT_AXES ? axes[i] : 0);
  return LLVMConstArray(C->t_i8, a, RT_MAX_SPLIT_AXES);
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

static LLVMValueRef slot_const(LlvmCtx *C, const ProgTypes *t, const BackendParam *pi, int32_t v) {
  const IrShape *s = &C->g->values[v].shape;
  const IrSplit *sp = &C->g->values[v].split;
  static const uint8_t none[IR_MAX_SPLIT_AXES];
  LLVMValueRef dims[RT_MAX_PARAM_RANK], gdims[RT_MAX_PARAM_RANK], split[RT_MAX_PARAM_RANK];
  for (int32_t d = 0; d < RT_MAX_PARAM_RANK; d++) {
    dims[d] = i64c(C, d < s->rank ? s->dims[d] : 0);
    gdims[d] = i64c(C, d < s->rank ? s->dims[d] * ir_split_count(&C->g->mesh, sp, d) : 0);
    split[d] = split_const(C, d < s->rank ? sp->axes[d] : none);
  }
  const RtInit *in = &pi->init;
  LLVMValueRef init[] = {i32c(C, in->kind), f32c(C, in->value), f32c(C, in->mean),
                         f32c(C, in->std),  f32c(C, in->lo),    f32c(C, in->hi)};
  LLVMValueRef f[] = {cstr(C, pi->path),
                      i32c(C, s->rank),
                      LLVMConstArray(C->t_i64, dims, RT_MAX_PARAM_RANK),
                      LLVMConstArray(C->t_i64, gdims, RT_MAX_PARAM_RANK),
                      LLVMConstArray(t->split, split, RT_MAX_PARAM_RANK),
                      LLVMConstNamedStruct(t->init, init, 6),
                      i64c(C, C->mp->offset[v]),
                      i64c(C, named_offset(C, IR_PARAMETER, "opt/m/", pi->path)),
                      i64c(C, named_offset(C, IR_PARAMETER, "opt/v/", pi->path)),
                      i64c(C, backend_update_stage(C->g, pi->path)),
                      i64c(C, C->mp->region ? C->mp->region[v] : 0)};
  return LLVMConstNamedStruct(t->slot, f, 11);
}

/* The runtime reads and writes parameters, their moments and the named outputs as f32: a bf16
 * one would be read as floats from 2-byte elements. Mixed precision keeps them f32 and casts
 * where the model reads them; anything else is an error. */
static int program_not_bf16(LlvmCtx *C, const char *what, const char *name, int32_t v) {
  if (v == IR_NONE || C->g->values[v].dtype != DT_BF16) return 0;
  return llvm_fail(C, "program: %s %s is bf16; the runtime keeps it in f32", what, name);
}

static LLVMValueRef slots_global(LlvmCtx *C, const ProgTypes *t) {
  const BackendProgram *P = C->opt.program;
  LLVMValueRef *slots = base_xcalloc((size_t)P->nparams + 1, sizeof *slots);
  for (int32_t i = 0; i < P->nparams; i++) {
    int32_t v = ir_graph_find(C->g, IR_PARAMETER, P->params[i].path);
    if (v == IR_NONE || C->g->values[v].shape.rank > RT_MAX_PARAM_RANK) {
      llvm_fail(C, "program: parameter %s is %s", P->params[i].path,
                v == IR_NONE ? "not in the graph" : "of rank above RT_MAX_PARAM_RANK");
      free(slots);
      return NULL;
    }
    char mv[1024];
    bool bad = program_not_bf16(C, "parameter", P->params[i].path, v) != 0;
    for (int k = 0; k < 2 && !bad; k++) {
      snprintf(mv, sizeof mv, "opt/%c/%s", "mv"[k], P -> params[i].path);
      bad = program_not_bf16(C, "parameter", mv, ir_graph_find(C->g, IR_PARAMETER, mv)) != 0;
    }
    if (bad) {
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

static LLVMValueRef mesh_const(LlvmCtx *C, const ProgTypes *t) {
  const IrMesh *m = &C->g->mesh;
  bool multi = llvm_multi_device(C->g);
  LLVMValueRef names[RT_MAX_MESH_AXES], sizes[RT_MAX_MESH_AXES];
  for (int a = 0; a < RT_MAX_MESH_AXES; a++) {
    bool on = multi && a < m->naxes;
    names[a] = on ? cstr(C, m->names[a]) : LLVMConstNull(C->t_i8p);
    sizes[a] = i64c(C, on ? m->sizes[a] : 0);
  }
  LLVMValueRef f[] = {i32c(C, multi ? m->naxes : 0),
                      LLVMConstArray(C->t_i8p, names, RT_MAX_MESH_AXES),
                      LLVMConstArray(C->t_i64, sizes, RT_MAX_MESH_AXES)};
  return LLVMConstNamedStruct(t->mesh, f, 3);
}

static LLVMValueRef shape_const(LlvmCtx *C, const IrShape *s) {
  LLVMValueRef d[RT_MAX_DIMS];
  for (int i = 0; i < RT_MAX_DIMS; i++) d[i] = i64c(C, i < s->rank ? s->dims[i] : 0);
  return LLVMConstArray(C->t_i64, d, RT_MAX_DIMS);
}

/* Collective v as an RtCollective (runtime/axrt.h). */
static LLVMValueRef coll_const(LlvmCtx *C, const ProgTypes *t, int32_t v) {
  const IrValue *x = &C->g->values[v];
  LLVMValueRef axes[RT_MAX_MESH_AXES];
  for (int i = 0; i < RT_MAX_MESH_AXES; i++)
    axes[i] = i32c(C, i < x->attr.nmesh ? ir_mesh_axis(&C->g->mesh, x->attr.mesh[i]) : 0);
  bool a2a = x->op == IR_ALL_TO_ALL, reduce = x->op == IR_ALL_REDUCE;
  int64_t axis = reduce ? 0 : x->attr.axis, axis2 = a2a ? x->attr.axis2 : 0;
  if (x->op == IR_SEND || x->op == IR_RECV) { /* runtime/axrt.h: RT_COLL_SEND, RT_COLL_RECV */
    axis = x->attr.k;
    axis2 = x->op == IR_SEND ? x->stage - 1 : C->coll[x->ops[0]];
  }
  LLVMValueRef f[] = {i32c(C, backend_coll_kind(x->op)),
                      i32c(C, x->dtype == DT_I32    ? RT_DT_I32
                              : x->dtype == DT_BF16 ? RT_DT_BF16
                                                    : RT_DT_F32),
                      i32c(C, x->attr.nmesh),
                      LLVMConstArray(C->t_i32, axes, RT_MAX_MESH_AXES),
                      i32c(C, axis),
                      i32c(C, axis2),
                      i32c(C, x->shape.rank),
                      shape_const(C, &C->g->values[x->ops[0]].shape),
                      shape_const(C, &x->shape),
                      i64c(C, C->mp->offset[x->ops[0]]),
                      i64c(C, C->mp->offset[v])};
  return LLVMConstNamedStruct(t->coll, f, 11);
}

static LLVMValueRef colls_global(LlvmCtx *C, const ProgTypes *t) {
  if (C->ncoll == 0) return LLVMConstNull(LLVMPointerType(t->coll, 0));
  LLVMValueRef *c = base_xcalloc((size_t)C->ncoll, sizeof *c);
  for (int32_t v = 0; v < C->g->nvalues; v++)
    if (C->coll[v] >= 0) c[C->coll[v]] = coll_const(C, t, v);
  LLVMValueRef arr = LLVMConstArray(t->coll, c, (unsigned)C->ncoll);
  free(c);
  LLVMValueRef gl = LLVMAddGlobal(C->m, LLVMTypeOf(arr), "axlc_collectives");
  LLVMSetInitializer(gl, arr);
  LLVMSetGlobalConstant(gl, 1);
  LLVMSetLinkage(gl, LLVMPrivateLinkage);
  return LLVMConstBitCast(gl, LLVMPointerType(t->coll, 0));
}

int llvm_collective_emit(LlvmCtx *C, int32_t v) {
  const IrValue *x = &C->g->values[v];
  if (x->attr.nmesh > RT_MAX_MESH_AXES || x->shape.rank > RT_MAX_DIMS)
    return llvm_fail(C, "%%%d (%s): too many mesh axes or dims for the runtime", v,
                     ir_op_name(x->op));
  LLVMTypeRef p[] = {C->t_i8p, C->t_i32, C->t_i8p};
  LLVMValueRef fn = llvm_fn_get(C, "rt_comm_collective", C->t_void, p, 3);
  LLVMValueRef args[] = {C->comm, i32c(C, C->coll[v]), C->step_slab};
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(fn), fn, args, 3, "");
  return 0;
}

/* The sampler reads the forward's logits as f32 (runtime/sample.c). A model that computes in
 * bf16 outputs bf16 logits: axlc_forward then ends by widening them into an f32 copy past the
 * plan's slab, which the RtForward table names and counts in the slab's size. */
static int64_t logits_copy_at(const LlvmCtx *C) { return (C->mp->slab_bytes + 63) / 64 * 64; }

static int32_t logits_widened(const LlvmCtx *C) {
  int32_t v = ir_graph_output(C->g, "logits");
  return v != IR_NONE && C->g->values[v].dtype == DT_BF16 ? v : IR_NONE;
}

void llvm_forward_widen(LlvmCtx *C) {
  int32_t v = logits_widened(C);
  if (!C->opt.program || v == IR_NONE) return;
  LLVMValueRef off = llvm_i64(C, logits_copy_at(C));
  LLVMValueRef dst =
      LLVMBuildBitCast(C->b, LLVMBuildInBoundsGEP2(C->b, C->t_i8, C->slab, &off, 1, ""),
                       LLVMPointerType(C->t_f32, 0), "");
  LlvmLoop L;
  LLVMValueRef i = llvm_loop_begin(C, &L, llvm_i64(C, 0),
                                   llvm_i64(C, ir_shape_numel(&C->g->values[v].shape)), "i");
  LLVMValueRef st = LLVMBuildStore(C->b, llvm_buffer_load(C, v, i),
                                   LLVMBuildInBoundsGEP2(C->b, C->t_f32, dst, &i, 1, ""));
  LLVMSetAlignment(st, 4);
  llvm_loop_end(C, &L);
}

int64_t llvm_forward_slab_bytes(const IrGraph *g, const MemPlan *mp) {
  int32_t v = ir_graph_output(g, "logits");
  if (v == IR_NONE || g->values[v].dtype != DT_BF16) return mp->slab_bytes;
  return (mp->slab_bytes + 63) / 64 * 64 + ir_shape_numel(&g->values[v].shape) * 4;
}

/* A private constant global `name` holding the byte offsets of the program's parameters in
 * C->g's plan (-1: not read), as an i64*. */
static LLVMValueRef param_offsets_global(LlvmCtx *C, const char *name) {
  const BackendProgram *P = C->opt.program;
  LLVMValueRef *offs = base_xcalloc((size_t)P->nparams + 1, sizeof *offs);
  for (int32_t i = 0; i < P->nparams; i++)
    offs[i] = i64c(C, named_offset(C, IR_PARAMETER, "", P->params[i].path));
  LLVMValueRef arr = LLVMConstArray(C->t_i64, offs, (unsigned)P->nparams);
  free(offs);
  LLVMValueRef gl = LLVMAddGlobal(C->m, LLVMTypeOf(arr), name);
  LLVMSetInitializer(gl, arr);
  LLVMSetGlobalConstant(gl, 1);
  LLVMSetLinkage(gl, LLVMPrivateLinkage);
  return LLVMConstBitCast(gl, LLVMPointerType(C->t_i64, 0));
}

/* The RtForward of the forward function fn, while C->g and C->mp are the forward graph's; it
 * points at the RtDecode table when one was emitted. */
int llvm_forward_emit(LlvmCtx *C, LLVMValueRef fn) {
  const BackendProgram *P = C->opt.program;
  if (!P) return 0;
  ProgTypes t = prog_types(C, LLVMTypeOf(fn));
  int32_t ids = ir_graph_find(C->g, IR_INPUT, "ids"), logits = ir_graph_output(C->g, "logits");
  if (ids == IR_NONE || logits == IR_NONE)
    return llvm_fail(C, "program: the forward graph has no input ids or output logits");
  bool widened = logits_widened(C) != IR_NONE;
  LLVMValueRef f[] = {i64c(C, llvm_forward_slab_bytes(C->g, C->mp)),
                      i64c(C, C->mp->offset[ids]),
                      i64c(C, widened ? logits_copy_at(C) : C->mp->offset[logits]),
                      param_offsets_global(C, "axlc_forward_params"),
                      fn,
                      C->dec_table ? C->dec_table : LLVMConstNull(LLVMPointerType(t.dec, 0))};
  LLVMValueRef tab = LLVMAddGlobal(C->m, t.fwd, "axlc_forward_table");
  LLVMSetInitializer(tab, LLVMConstNamedStruct(t.fwd, f, 6));
  LLVMSetGlobalConstant(tab, 1);
  LLVMSetLinkage(tab, LLVMPrivateLinkage);
  C->fwd_table = tab;
  return 0;
}

/* The RtKvCache of the decode graph's cache input v, from its row output and the forward's
 * prefill output of the same name. */
static int kv_const(LlvmCtx *C, const ProgTypes *t, int32_t v, LLVMValueRef *out) {
  const IrValue *in = &C->g->values[v];
  const char *base = in->name + strlen(IR_KV_CACHE);
  char name[1024];
  snprintf(name, sizeof name, IR_KV_ROW "%s", base);
  int32_t row = ir_graph_output(C->g, name);
  snprintf(name, sizeof name, IR_KV_PREFILL "%s", base);
  const IrGraph *fg = C->opt.forward;
  int32_t pre = fg ? ir_graph_output(fg, name) : IR_NONE;
  if (in->shape.rank != 4 || row == IR_NONE || pre == IR_NONE ||
      !ir_shape_eq(&fg->values[pre].shape, &in->shape) || fg->values[pre].dtype != in->dtype ||
      C->g->values[row].dtype != in->dtype)
    return llvm_fail(C, "program: the decode step's cache %s has no row or prefill to match it",
                     in->name);
  int64_t row_bytes = in->shape.dims[3] * (int64_t)ir_dtype_size(in->dtype);
  LLVMValueRef f[] = {i64c(C, in->shape.dims[1]), i64c(C, row_bytes), i64c(C, C->mp->offset[v]),
                      i64c(C, C->mp->offset[row]), i64c(C, C->opt.forward_plan->offset[pre])};
  *out = LLVMConstNamedStruct(t->kv, f, 5);
  return 0;
}

int llvm_decode_emit(LlvmCtx *C, LLVMValueRef fn) {
  const BackendProgram *P = C->opt.program;
  if (!P) return 0;
  ProgTypes t = prog_types(C, LLVMTypeOf(fn));
  int32_t ids = ir_graph_find(C->g, IR_INPUT, "ids"), pos = ir_graph_find(C->g, IR_INPUT, "pos");
  int32_t logits = ir_graph_output(C->g, "logits");
  if (ids == IR_NONE || pos == IR_NONE || logits == IR_NONE || C->g->values[logits].dtype != DT_F32)
    return llvm_fail(C, "program: the decode graph has no input ids or pos, or no f32 logits");
  LLVMValueRef *kv = base_xcalloc((size_t)C->g->nvalues + 1, sizeof *kv);
  int32_t n = 0;
  for (int32_t v = 0; v < C->g->nvalues; v++) {
    const IrValue *in = &C->g->values[v];
    if (in->op != IR_INPUT || strncmp(in->name, IR_KV_CACHE, strlen(IR_KV_CACHE))) continue;
    if (kv_const(C, &t, v, &kv[n++])) {
      free(kv);
      return -1;
    }
  }
  LLVMValueRef arr = LLVMConstArray(t.kv, kv, (unsigned)n);
  free(kv);
  LLVMValueRef kvg = LLVMAddGlobal(C->m, LLVMTypeOf(arr), "axlc_kv_caches");
  LLVMSetInitializer(kvg, arr);
  LLVMSetGlobalConstant(kvg, 1);
  LLVMSetLinkage(kvg, LLVMPrivateLinkage);
  LLVMValueRef f[] = {i64c(C, C->mp->slab_bytes),
                      i64c(C, C->mp->offset[ids]),
                      i64c(C, C->mp->offset[pos]),
                      i64c(C, C->mp->offset[logits]),
                      param_offsets_global(C, "axlc_decode_params"),
                      i32c(C, n),
                      LLVMConstBitCast(kvg, LLVMPointerType(t.kv, 0)),
                      fn};
  LLVMValueRef tab = LLVMAddGlobal(C->m, t.dec, "axlc_decode_table");
  LLVMSetInitializer(tab, LLVMConstNamedStruct(t.dec, f, 8));
  LLVMSetGlobalConstant(tab, 1);
  LLVMSetLinkage(tab, LLVMPrivateLinkage);
  C->dec_table = tab;
  return 0;
}

/* The RtFacts constant: each row of RT_PROGRAM_FACTS in order, as prog_types lays it out. */
static LLVMValueRef facts_const(LlvmCtx *C, const ProgTypes *t, const RtFacts *F) {
#define FACT_CONST(name, type, doc)                                                                \
  _Generic(F->name, double                                                                         \
           : LLVMConstReal(C->t_f64, (double)F->name), default                                     \
           : LLVMConstInt(C->t_i64, (unsigned long long)F->name, 0)),
  LLVMValueRef f[] = {RT_PROGRAM_FACTS(FACT_CONST)};
#undef FACT_CONST
  return LLVMConstNamedStruct(t->facts, f, (unsigned)(sizeof f / sizeof *f));
}

int llvm_program_emit(LlvmCtx *C, LLVMValueRef step) {
  const BackendProgram *P = C->opt.program;
  if (!P) return 0;
  ProgTypes t = prog_types(C, LLVMTypeOf(step));
  if (program_check(C, &t)) return -1;
  static const char *const named[] = {"loss", "grad_norm", "lr", "aux_loss"};
  for (int i = 0; i < 4; i++)
    if (program_not_bf16(C, "output", named[i], ir_graph_output(C->g, named[i]))) return -1;
  LLVMValueRef slots = slots_global(C, &t);
  if (!slots) return -1;
  LLVMValueRef colls = colls_global(C, &t);
  int32_t ids = ir_graph_find(C->g, IR_INPUT, "ids");
  const IrShape *is = ids == IR_NONE ? NULL : &C->g->values[ids].shape;
  if (!is || is->rank != 2) return llvm_fail(C, "program: the graph has no input ids (B, T)");
  LLVMValueRef f[] = {i32c(C, RT_ABI_VERSION),
                      cstr(C, P->config),
                      i64c(C, C->mp->slab_bytes),
                      i32c(C, P->nparams),
                      slots,
                      i64c(C, is->dims[0]),
                      i64c(C, is->dims[1]),
                      i64c(C, P->vocab),
                      split_const(C, C->g->values[ids].split.axes[0]),
                      i64c(C, C->mp->offset[ids]),
                      i64c(C, named_offset(C, IR_INPUT, "", "targets")),
                      i64c(C, named_offset(C, IR_INPUT, "", "step")),
                      i64c(C, output_offset(C, "loss")),
                      i64c(C, output_offset(C, "grad_norm")),
                      i64c(C, output_offset(C, "lr")),
                      mesh_const(C, &t),
                      i32c(C, C->ncoll),
                      colls,
                      step,
                      C->fwd_table ? C->fwd_table : LLVMConstNull(LLVMPointerType(t.fwd, 0)),
                      i32c(C, output_offset(C, "aux_loss") >= 0),
                      i64c(C, output_offset(C, "aux_loss")),
                      facts_const(C, &t, &P->facts),
                      stage_slabs_global(C)};
  LLVMValueRef gl = LLVMAddGlobal(C->m, t.prog, "axlc_program");
  LLVMSetInitializer(gl, LLVMConstNamedStruct(t.prog, f, 24));
  LLVMSetGlobalConstant(gl, 1);
  return 0;
}
