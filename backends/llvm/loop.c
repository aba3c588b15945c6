/* loop.c: the building blocks every kernel is made of: counted loops, buffer addresses,
 * row-major positions, and kernel functions and their calls.
 *
 * A kernel is a function void k(i8** noalias args, i64 lo, i64 hi) that computes the rows
 * [lo, hi) of its outermost loop, so axlc_step can run it whole or hand it to rt_parallel_for.
 * It lives in a unit of its own (unit.c) and knows nothing of the slab: its buffers are the
 * pointers in args, in the order the kernel first used them (its slots), which axlc_step
 * fills before the call. So a kernel that every layer repeats on other buffers is the same
 * function, compiled once. Loops count an i64 phi from lo to hi with nsw/nuw steps, the shape
 * LLVM's vectorizer and SCEV want. Loop-carried accumulators are allocas in the entry block,
 * which mem2reg (part of every optimization level we run) turns into registers.
 *
 * LLVM cannot tell whether two pointers loaded from args overlap, and where it cannot work out
 * their distance (a broadcast operand read at stride 0 against the store at stride 1) it
 * refuses to vectorize. Scoped-noalias metadata says what the plan knows: a store to a
 * result has scope "axlc.buf<its slot>", and any access to a buffer whose bytes do not overlap
 * a result's is noalias to that result (a kernel has several results when values are deferred
 * into it: fusion.c). A buffer that does overlap (an operand updated in place) gets no claim. The
 * claims are part of the kernel's IR, so two kernels share a function only when they make the same
 * claims. In axlc_step itself (BLAS calls, copies) buffers are the slab plus their offsets, and
 * scopes are named by value.
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include <string.h>

LLVMValueRef llvm_i64(LlvmCtx *C, int64_t v) {
  return LLVMConstInt(C->t_i64, (unsigned long long)v, 1);
}

LLVMValueRef llvm_loop_begin(LlvmCtx *C, LlvmLoop *L, LLVMValueRef lo, LLVMValueRef hi,
                             const char *name) {
  L->pre = LLVMGetInsertBlock(C->b);
  L->header = LLVMAppendBasicBlockInContext(C->c, C->fn, "loop");
  L->body = LLVMAppendBasicBlockInContext(C->c, C->fn, "body");
  L->exit = LLVMAppendBasicBlockInContext(C->c, C->fn, "done");
  LLVMBuildBr(C->b, L->header);
  LLVMPositionBuilderAtEnd(C->b, L->header);
  L->phi = LLVMBuildPhi(C->b, C->t_i64, name);
  LLVMAddIncoming(L->phi, &lo, &L->pre, 1);
  LLVMBuildCondBr(C->b, LLVMBuildICmp(C->b, LLVMIntSLT, L->phi, hi, ""), L->body, L->exit);
  LLVMPositionBuilderAtEnd(C->b, L->body);
  L->iv = L->phi;
  return L->iv;
}

void llvm_loop_end(LlvmCtx *C, LlvmLoop *L) {
  LLVMValueRef next = LLVMBuildNUWAdd(C->b, L->phi, llvm_i64(C, 1), "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(C->b);
  LLVMBuildBr(C->b, L->header);
  LLVMAddIncoming(L->phi, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(C->b, L->exit);
}

/* A new builder before the first instruction of fn's entry block (the caller disposes it). */
static LLVMBuilderRef entry_builder(LlvmCtx *C, LLVMValueRef fn) {
  LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(fn);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(C->c);
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  if (first)
    LLVMPositionBuilderBefore(b, first);
  else
    LLVMPositionBuilderAtEnd(b, entry);
  return b;
}

LLVMValueRef llvm_alloca_entry(LlvmCtx *C, LLVMTypeRef t, const char *name) {
  LLVMBuilderRef b = entry_builder(C, C->fn);
  LLVMValueRef a = LLVMBuildAlloca(b, t, name);
  LLVMDisposeBuilder(b);
  return a;
}

/* v's slot in the open kernel, loaded from args at the top of the kernel on first use. */
static int32_t slot(LlvmCtx *C, int32_t v) {
  if (C->slot_of[v] >= 0) return C->slot_of[v];
  /* A value at the same offset as one that has a slot is the same buffer (an update in place:
   * AdamW's moments and parameters) and shares the slot: LLVM then sees one pointer, read and
   * written at the same index, and vectorizes; two pointers that its run-time check finds
   * equal would send the loop to its scalar version. */
  for (int32_t j = 0; j < C->nslots; j++)
    if (C->mp->offset[C->slot_val[j]] == C->mp->offset[v]) {
      C->slot_users[C->nslot_users++] = v;
      return C->slot_of[v] = j;
    }
  int32_t k = C->nslots++;
  C->slot_users[C->nslot_users++] = v;
  C->slot_of[v] = k;
  C->slot_val[k] = v;
  /* right after args' bitcast, the kernel's first instruction but allocas */
  LLVMBuilderRef b = LLVMCreateBuilderInContext(C->c);
  LLVMValueRef next = LLVMGetNextInstruction(C->slab);
  if (next)
    LLVMPositionBuilderBefore(b, next);
  else
    LLVMPositionBuilderAtEnd(b, LLVMGetInstructionParent(C->slab));
  LLVMValueRef at = llvm_i64(C, k);
  LLVMValueRef pp = LLVMBuildInBoundsGEP2(b, C->t_i8p, C->slab, &at, 1, "");
  C->slot_ptr[k] = LLVMBuildLoad2(b, C->t_i8p, pp, "");
  LLVMDisposeBuilder(b);
  return k;
}

static bool in_kernel(const LlvmCtx *C) { return C->fn != C->step; }

LLVMValueRef llvm_buffer_ptr(LlvmCtx *C, int32_t v) {
  LLVMValueRef p;
  if (in_kernel(C)) {
    p = C->slot_ptr[slot(C, v)];
  } else {
    LLVMValueRef off = llvm_i64(C, C->mp->offset[v]);
    p = LLVMBuildInBoundsGEP2(C->b, C->t_i8, C->slab, &off, 1, "");
  }
  LLVMTypeRef et = llvm_storage_type(C, C->g->values[v].dtype);
  return LLVMBuildBitCast(C->b, p, LLVMPointerType(et, 0), "");
}

static LLVMValueRef element_ptr(LlvmCtx *C, int32_t v, LLVMValueRef lin) {
  LLVMTypeRef et = llvm_storage_type(C, C->g->values[v].dtype);
  return LLVMBuildInBoundsGEP2(C->b, et, llvm_buffer_ptr(C, v), &lin, 1, "");
}

/* The scope {"axlc.buf<k>"} in the domain "axlc.slab": k is v's slot in a kernel, v in
 * axlc_step. */
static LLVMMetadataRef scope_of(LlvmCtx *C, int32_t v) {
  char name[32];
  int len = snprintf(name, sizeof name, "axlc.buf%d", in_kernel(C) ? slot(C, v) : v);
  LLVMMetadataRef dom = LLVMMDStringInContext2(C->c, "axlc.slab", 9);
  dom = LLVMMDNodeInContext2(C->c, &dom, 1);
  LLVMMetadataRef ops[] = {LLVMMDStringInContext2(C->c, name, (size_t)len), dom};
  return LLVMMDNodeInContext2(C->c, ops, 2);
}

static bool buffers_disjoint(const LlvmCtx *C, int32_t a, int32_t b) {
  int64_t ea = C->mp->offset[a] + C->mp->bytes[a], eb = C->mp->offset[b] + C->mp->bytes[b];
  return a != b && (ea <= C->mp->offset[b] || eb <= C->mp->offset[a]);
}

static void set_scopes(LlvmCtx *C, LLVMValueRef access, const char *kind, LLVMMetadataRef *s,
                       int n) {
  if (n == 0) return;
  LLVMValueRef list = LLVMMetadataAsValue(C->c, LLVMMDNodeInContext2(C->c, s, (size_t)n));
  LLVMSetMetadata(access, LLVMGetMDKindIDInContext(C->c, kind, (unsigned)strlen(kind)), list);
}

/* A store to one of the kernel's results has that result's scope; every access is noalias to
 * the scopes of the results (other than its own) whose bytes it does not overlap. */
void llvm_buffer_tag(LlvmCtx *C, int32_t v, LLVMValueRef access, bool store) {
  if (C->kout < 0) return;
  LLVMMetadataRef own, others[1 + LLVM_MAX_DEFERRED];
  int n = 0;
  bool is_out = false;
  for (int32_t k = 0; k < C->nkouts; k++) is_out = is_out || C->kouts[k] == v;
  if (store && !is_out) return;
  for (int32_t k = 0; k < C->nkouts; k++)
    if (buffers_disjoint(C, v, C->kouts[k])) others[n++] = scope_of(C, C->kouts[k]);
  if (store) {
    own = scope_of(C, v);
    set_scopes(C, access, "alias.scope", &own, 1);
  }
  set_scopes(C, access, "noalias", others, n);
}

/* Loads and stores move the storage type; callers see the compute type (types.c). */
LLVMValueRef llvm_buffer_load(LlvmCtx *C, int32_t v, LLVMValueRef lin) {
  IrDType dt = C->g->values[v].dtype;
  LLVMValueRef x = LLVMBuildLoad2(C->b, llvm_storage_type(C, dt), element_ptr(C, v, lin), "");
  LLVMSetAlignment(x, (unsigned)ir_dtype_size(dt));
  llvm_buffer_tag(C, v, x, false);
  return dt == DT_BF16 ? llvm_bf16_widen(C, x) : x;
}

void llvm_buffer_store(LlvmCtx *C, int32_t v, LLVMValueRef lin, LLVMValueRef x) {
  IrDType dt = C->g->values[v].dtype;
  if (dt == DT_BF16) x = llvm_bf16_narrow(C, x);
  LLVMValueRef st = LLVMBuildStore(C->b, x, element_ptr(C, v, lin));
  LLVMSetAlignment(st, (unsigned)ir_dtype_size(dt));
  llvm_buffer_tag(C, v, st, true);
}

/* Row-major linear index of p in shape s, computed once from the indices. */
LLVMValueRef llvm_pos_lin(LlvmCtx *C, const IrShape *s, LlvmPos *p) {
  if (p->lin) return p->lin;
  LLVMValueRef lin = llvm_i64(C, 0);
  int64_t stride = 1;
  for (int32_t d = s->rank - 1; d >= 0; d--) {
    LLVMValueRef t = LLVMBuildNSWMul(C->b, p->idx[d], llvm_i64(C, stride), "");
    lin = LLVMBuildNSWAdd(C->b, lin, t, "");
    stride *= s->dims[d];
  }
  p->lin = lin;
  return lin;
}

LLVMValueRef llvm_fn_get(LlvmCtx *C, const char *name, LLVMTypeRef ret, LLVMTypeRef *params,
                         unsigned n) {
  LLVMValueRef f = LLVMGetNamedFunction(C->m, name);
  if (f) return f;
  return LLVMAddFunction(C->m, name, LLVMFunctionType(ret, params, n, 0));
}

LLVMValueRef llvm_kernel_begin(LlvmCtx *C, const char *name) {
  if (llvm_unit_open(C)) return NULL;
  LLVMValueRef f = LLVMAddFunction(C->m, name, C->t_kernel);
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(f, 1, LLVMCreateEnumAttribute(C->c, noalias, 0));
  /* Kernels stay functions of their own: inlining hundreds of loop nests into axlc_step makes
   * one huge function that takes LLVM several times longer to compile, for no speed. */
  const char *fattrs[] = {"nounwind", "noinline"};
  for (int i = 0; i < 2; i++) {
    unsigned kind = LLVMGetEnumAttributeKindForName(fattrs[i], strlen(fattrs[i]));
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(C->c, kind, 0));
  }
  LLVMPositionBuilderAtEnd(C->b, LLVMAppendBasicBlockInContext(C->c, f, "entry"));
  C->fn = f;
  C->slab = LLVMBuildBitCast(C->b, LLVMGetParam(f, 0), LLVMPointerType(C->t_i8p, 0), "");
  return f;
}

LLVMValueRef llvm_kernel_end(LlvmCtx *C) {
  LLVMBuildRetVoid(C->b);
  LLVMValueRef decl = llvm_unit_close(C); /* back in the main unit */
  C->fn = C->step;
  C->slab = C->step_slab;
  LLVMPositionBuilderAtEnd(C->b, LLVMGetLastBasicBlock(C->step));
  return decl;
}

/* Fills axlc_step's argument array with the open kernel's buffers (slab + offset, by slot). */
static void fill_args(LlvmCtx *C) {
  if (!C->args) {
    /* One array for every call, sized when the step is complete (llvm_kernel_args_done). */
    LLVMBuilderRef b = entry_builder(C, C->step);
    C->args = LLVMBuildArrayAlloca(b, C->t_i8p, llvm_i64(C, 1), "args");
    LLVMDisposeBuilder(b);
  }
  if (C->nslots > C->max_slots) C->max_slots = C->nslots;
  for (int32_t k = 0; k < C->nslots; k++) {
    LLVMValueRef at = llvm_i64(C, k), off = llvm_i64(C, C->mp->offset[C->slot_val[k]]);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(C->b, C->t_i8, C->slab, &off, 1, "");
    LLVMBuildStore(C->b, p, LLVMBuildInBoundsGEP2(C->b, C->t_i8p, C->args, &at, 1, ""));
  }
}

void llvm_kernel_args_done(LlvmCtx *C) {
  if (!C->args) return;
  LLVMBuilderRef b = LLVMCreateBuilderInContext(C->c);
  LLVMPositionBuilderBefore(b, C->args);
  LLVMValueRef n = llvm_i64(C, C->max_slots > 0 ? C->max_slots : 1);
  LLVMValueRef a = LLVMBuildArrayAlloca(b, C->t_i8p, n, "args");
  LLVMDisposeBuilder(b);
  LLVMReplaceAllUsesWith(C->args, a);
  LLVMInstructionEraseFromParent(C->args);
  C->args = NULL;
  C->max_slots = 0;
}

/* rt_parallel_for(pool, n, fn, ctx) as declared in runtime/axrt.h. */
static LLVMValueRef parallel_for_decl(LlvmCtx *C) {
  LLVMTypeRef params[] = {C->t_i8p, C->t_i64, LLVMPointerType(C->t_kernel, 0), C->t_i8p};
  return llvm_fn_get(C, "rt_parallel_for", C->t_void, params, 4);
}

void llvm_kernel_call(LlvmCtx *C, LLVMValueRef fn, int64_t n, bool parallel) {
  fill_args(C);
  LLVMValueRef ka = LLVMBuildBitCast(C->b, C->args, C->t_i8p, "");
  LLVMValueRef args[] = {ka, llvm_i64(C, 0), llvm_i64(C, n)};
  if (!parallel) {
    LLVMBuildCall2(C->b, C->t_kernel, fn, args, 3, "");
    return;
  }
  /* A NULL pool runs on this thread, as rt_parallel_for would, without the call. */
  LLVMBasicBlockRef par = LLVMAppendBasicBlockInContext(C->c, C->fn, "par");
  LLVMBasicBlockRef ser = LLVMAppendBasicBlockInContext(C->c, C->fn, "ser");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(C->c, C->fn, "join");
  LLVMBuildCondBr(C->b, LLVMBuildIsNull(C->b, C->pool, ""), ser, par);
  LLVMPositionBuilderAtEnd(C->b, par);
  LLVMValueRef pf = parallel_for_decl(C);
  LLVMValueRef pargs[] = {C->pool, llvm_i64(C, n), fn, ka};
  LLVMBuildCall2(C->b, LLVMGlobalGetValueType(pf), pf, pargs, 4, "");
  LLVMBuildBr(C->b, join);
  LLVMPositionBuilderAtEnd(C->b, ser);
  LLVMBuildCall2(C->b, C->t_kernel, fn, args, 3, "");
  LLVMBuildBr(C->b, join);
  LLVMPositionBuilderAtEnd(C->b, join);
}
