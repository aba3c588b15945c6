/* llvm.h: the LLVM backend, the one header of backends/llvm/.
 *
 * The backend turns a step graph (ir/ir.h) and its memory plan (passes/passes.h: MemPlan) into
 * native code through LLVM 14's C API. The generated function
 *
 *     void axlc_step(char *slab, RtPool *pool, RtComm *comm)
 *
 * executes every value of the graph in index order, each value's buffer at slab + offset[v]
 * (row-major; f32 values as float, i32 values as int32_t). Parameters and inputs are leaves the
 * runtime fills before the step. Each value becomes a kernel: a loop nest over its output index
 * space that computes one element from its operands (ir/interp.c is the spec), or a call to
 * cblas_sgemm for dot_general. Elementwise values whose only consumer is another elementwise
 * value are computed inline in the consumer's loop (pass_fusion_plan). Large kernels are split
 * over the runtime's threads with rt_parallel_for (runtime/axrt.h); BLAS calls stay on the
 * calling thread. Outputs "new:X" land on X's buffer (the memory plan puts them there, or the
 * step copies them at its end).
 *
 * bf16 values are stored as uint16_t (the upper half of a float) and computed as float in
 * registers, rounded to bf16 after each op as the interpreter rounds (types.c).
 *
 * With a sampling forward (LlvmOptions.forward: the model on one sequence, unsharded, with its
 * own memory plan), the same module also holds
 *
 *     void axlc_forward(char *slab, RtPool *pool, RtComm *comm)
 *
 * emitted the same way over the forward's own slab, and the program's RtForward table points
 * at it (trainer --sample, runtime/sample.c).
 *
 * The module can be written as an ELF object (with the `axlc_program` RtProgram the runtime's
 * trainer main reads) or as LLVM IR / assembly text, or run in process through ORC LLJIT.
 * Library code: every function returns 0 or -1 with a message in err, and never exits.
 *
 * Not supported (an error, not a crash): dtypes other than f32, bf16 and i32. On a mesh of more
 * than one device, each collective is a call rt_comm_collective(comm, index, slab) into the runtime
 * (runtime/comm.c) with its entry of the program's collective table; on one device collectives
 * are copies.
 */
#ifndef AXLC_BACKENDS_LLVM_H
#define AXLC_BACKENDS_LLVM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/backend.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/axrt.h"

/* ======================================================================== compile.c */

typedef struct LlvmOptions {
  int opt_level;              /* 0: none, 1..2: default<On>, 3: kernel pipeline (unit.c) */
  bool fuse;                  /* inline single-use elementwise values (pass_fusion_plan) */
  bool blas;                  /* dot_general through cblas_sgemm where layouts allow */
  bool threads;               /* split large kernels with rt_parallel_for */
  int64_t parallel_min;       /* elements below which a kernel stays on one thread */
  const char *cpu, *features; /* target; NULL: the host's */
  /* What the driver knows and the graph does not (the config text, the parameter table, the
   * program facts), for the `axlc_program` global of a trainer (runtime/axrt.h: RtProgram).
   * Offsets come from the plan: parameter P is the graph's parameter named P, its moments
   * "opt/m/P" and "opt/v/P"; the batch is input "ids" (B, T) and "targets", the step input
   * "step"; outputs "loss", "grad_norm", "lr". NULL: no axlc_program global. */
  const BackendProgram *program;
  /* The sampling forward (driver.h) and its plan: compiled into the same module as
   * axlc_forward, with the program's RtForward table (runtime/axrt.h). NULL: none. */
  const IrGraph *forward;
  const MemPlan *forward_plan;
  /* The decode step with a KV cache, as axlc_decode with the RtDecode table the forward's
   * points at; its plan shares the forward's slab (pass_memplan_over). NULL: none. */
  const IrGraph *decode;
  const MemPlan *decode_plan;
  int jobs;              /* threads that optimize and generate code; 0: one per online CPU */
  const char *cache_dir; /* the persistent object cache (unit.c); NULL: none */
  int64_t cache_max;     /* its size limit in bytes, kept after a compile that stores (backend.h:
                            backend_cache_trim); 0: none */
  bool keep_ir;          /* keep every optimized module for llvm_emit_text (bypasses the cache) */
  bool progress;         /* report on stderr when a compile takes more than a second or so */
} LlvmOptions;

/* The compiled program: the main unit (axlc_step, axlc_forward, the program table) and one unit
 * per distinct kernel, each an object file in memory or in the cache (unit.c). */
typedef struct LlvmModule LlvmModule;

/* What a compile did, for progress lines and tools/bench. */
typedef struct LlvmStats {
  int32_t kernels;  /* kernel calls in the step (and forward) */
  int32_t units;    /* distinct kernels, plus the main unit */
  int32_t cached;   /* units whose object came from the cache */
  int32_t jobs;     /* threads that compiled the rest */
  double emit_s;    /* building the IR */
  double codegen_s; /* optimizing and generating code (wall) */
} LlvmStats;

/* O3, fusion, BLAS, threads when the runtime has its pool, host CPU, no program. */
LlvmOptions llvm_options_default(void);
/* The bytes of the forward's slab that its RtForward table names: its plan's, and past them
 * the f32 copy of bf16 logits (the decode step's plan starts after them). */
int64_t llvm_forward_slab_bytes(const IrGraph *forward, const MemPlan *plan);
/* Builds and optimizes the module. mp plans g (pass_memplan); opt NULL: the defaults. */
int llvm_compile(const IrGraph *g, const MemPlan *mp, const LlvmOptions *opt, LlvmModule **out,
                 char *err, size_t cap);
void llvm_module_free(LlvmModule *m); /* NULL is fine */
const LlvmStats *llvm_module_stats(const LlvmModule *m);

/* ======================================================================== unit.c */

/* The program's object files, to link: objects in the cache are named where they lie, the others
 * are written into dir. *paths (NULL-terminated, *n entries) is freed with llvm_paths_free. */
int llvm_object_files(LlvmModule *m, const char *dir, char ***paths, int *n, char *err, size_t cap);
void llvm_paths_free(char **paths);
/* Writes one relocatable ELF object holding every unit (the units' objects joined by `cc -r`). */
int llvm_emit_object(LlvmModule *m, const char *path, char *err, size_t cap);
/* Writes every unit as LLVM IR text (as_asm false) or host assembly (as_asm true); the module
 * must have been compiled with keep_ir. */
int llvm_emit_text(LlvmModule *m, FILE *out, bool as_asm, char *err, size_t cap);

/* ======================================================================== jit.c */

typedef struct LlvmJit LlvmJit;
typedef void (*LlvmStepFn)(char *slab, RtPool *pool, RtComm *comm);

/* Loads the module's objects into an ORC LLJIT (m may be freed afterwards) and looks up
 * axlc_step. cblas_sgemm, libm and runtime symbols resolve from this process. */
int llvm_jit(LlvmModule *m, LlvmStepFn *step, LlvmJit **jit, char *err, size_t cap);
/* The module's axlc_program (with step filled in), or NULL if it was compiled without one. */
const RtProgram *llvm_jit_program(LlvmJit *jit);
void llvm_jit_free(LlvmJit *jit); /* NULL is fine */

/* ======================================================================== internal
 * Everything below is shared by the files of backends/llvm/ only; define AXLC_LLVM_INTERNAL
 * before including this header to see it (it needs LLVM's C headers). */
#ifdef AXLC_LLVM_INTERNAL
#include <llvm-c/Core.h>
#include <llvm-c/Orc.h>
#include <llvm-c/TargetMachine.h>

/* One module in its own context, compiled on its own (unit.c). */
typedef struct LlvmUnit {
  char name[72];           /* the kernel's symbol (axk_<op>_<key>), or "main" */
  char key[33];            /* hash of the unit's IR and the compile salt: its cache file name */
  LLVMContextRef ctx;      /* owns mod; NULL once compiled, unless kept */
  LLVMModuleRef mod;       /* NULL once compiled, unless kept */
  LLVMMemoryBufferRef obj; /* the object in memory, or NULL when file holds it */
  char *file;              /* the object in the cache, or NULL */
  char *err;               /* why compiling it failed, or NULL */
} LlvmUnit;

struct LlvmModule {
  LlvmUnit *units; /* units[0] is the main unit */
  int32_t nunits, cap;
  char *cpu, *features, *triple, *layout;
  char salt[256]; /* what besides the IR decides the object: versions, CPU, features, level */
  bool has_program;
  LlvmStats stats;
};

/* The most values one kernel stores besides its own (llvm_fusion_defer). */
enum { LLVM_MAX_DEFERRED = 4 };

/* The state of one compilation: the graph, its plan and where the builder stands. */
typedef struct LlvmCtx {
  const IrGraph *g;
  const MemPlan *mp;
  LlvmOptions opt;
  LlvmModule *M;
  LLVMContextRef c; /* where emission stands: the main unit's, or a kernel's while one is open */
  LLVMModuleRef m;
  LLVMBuilderRef b;
  LLVMContextRef main_c; /* the main unit, saved while a kernel is open */
  LLVMModuleRef main_m;
  LLVMBuilderRef main_b;
  LLVMValueRef args; /* axlc_step's i8** array of kernel buffer pointers (kernel_call) */
  int32_t max_slots;
  /* The open kernel's buffers: slot k of its argument array is the buffer of value
   * slot_val[k]; slot_of[v] is v's slot or -1. */
  int32_t *slot_of, *slot_val, nslots;
  int32_t *slot_users, nslot_users; /* every value given a slot, to reset slot_of */
  LLVMValueRef *slot_ptr;
  int32_t *cdata_unit; /* (nvalues) the kernel that cdata[v] belongs to */
  int32_t unit_seq;    /* kernels opened so far */
  LLVMTypeRef t_void, t_i1, t_i8, t_i8p, t_i32, t_i64, t_f32, t_f64, t_kernel;
  LLVMValueRef fn;                          /* function being emitted */
  LLVMValueRef slab;                        /* its slab argument (i8*) */
  LLVMValueRef step, step_slab, pool, comm; /* axlc_step (or axlc_forward) and its arguments */
  LLVMValueRef stage_now; /* pipeline: this device's stage (i64), read at the function's entry */
  LLVMValueRef guard_on;  /* the open stage test (compile.c: guard_begin) and its block */
  LLVMBasicBlockRef guard_then;
  LLVMValueRef fwd_table; /* the RtForward global, once emitted */
  LLVMValueRef dec_table; /* the RtDecode global, once emitted */
  int32_t *coll;          /* (nvalues) index in the program's collective table, or -1 */
  int32_t ncoll;
  int32_t kout; /* value whose kernel is being emitted, or -1 */
  /* Every buffer the open kernel stores: kout, then the values deferred into it. */
  int32_t kouts[1 + LLVM_MAX_DEFERRED], nkouts;
  /* The deferred values computed so far at the open kernel's position, stored after kout. */
  int32_t nkstore;
  int32_t kstore[LLVM_MAX_DEFERRED];
  LLVMValueRef kstore_val[LLVM_MAX_DEFERRED], kstore_lin[LLVM_MAX_DEFERRED];
  bool *mat; /* (nvalues) materialized values */
  /* (nvalues) the kernel that computes and stores v instead of v's own (fusion.c:
   * llvm_fusion_defer), or -1. */
  int32_t *defer;
  int32_t *hosted;     /* (nvalues) how many values are deferred into v's kernel */
  LLVMValueRef *cdata; /* (nvalues) globals of data constants, made on demand */
  char *err;
  size_t cap;
} LlvmCtx;

/* A position in a value's index space: per-dimension indices (i64) and/or the row-major
 * linear index. lin may be NULL until llvm_pos_lin computes it. */
typedef struct LlvmPos {
  bool has_idx;
  LLVMValueRef idx[IR_MAX_RANK];
  LLVMValueRef lin;
} LlvmPos;

/* A counted loop [lo, hi) with an i64 induction variable. */
typedef struct LlvmLoop {
  LLVMBasicBlockRef pre, header, body, exit;
  LLVMValueRef iv, phi;
} LlvmLoop;

/* ---- types.c: below every other file of the folder ---- */
/* Records the compilation's first error message in C->err; returns -1. */
int llvm_fail(LlvmCtx *C, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The compute type of dt's elements (in registers: f32 for every float dtype), and their
 * storage type (in buffers: i16 for bf16). */
LLVMTypeRef llvm_type_of(LlvmCtx *C, IrDType dt);
LLVMTypeRef llvm_storage_type(LlvmCtx *C, IrDType dt);
void llvm_ctx_types(LlvmCtx *C); /* C->t_* for C->c */
/* bf16 conversions, on scalars or vectors: stored bits (i16) to f32 (exact); f32 to stored bits
 * (nearest, ties to even, NaN kept); f32 to f32 rounded to bf16; f64 rounded once to bf16 (as
 * f32). */
LLVMValueRef llvm_bf16_widen(LlvmCtx *C, LLVMValueRef h);
LLVMValueRef llvm_bf16_narrow(LlvmCtx *C, LLVMValueRef x);
LLVMValueRef llvm_bf16_quantize(LlvmCtx *C, LLVMValueRef x);
LLVMValueRef llvm_bf16_from_f64(LlvmCtx *C, LLVMValueRef x);

/* ---- unit.c: kernels as units of their own; compiling units on threads, with the cache ---- */
/* Opens a kernel: a new context and module with the target of the main unit. */
int llvm_unit_open(LlvmCtx *C);
/* Closes the open kernel, whose one function is C->fn: names it by the hash of its IR, keeps it
 * if no unit has that name yet, and returns its declaration in the main module. */
LLVMValueRef llvm_unit_close(LlvmCtx *C);
/* A new module (with the main unit's target) in a new context, as unit 0. */
int llvm_units_begin(LlvmModule *M, const LlvmOptions *o, char *err, size_t cap);
/* Optimizes and generates code for every unit, on o->jobs threads, through the cache. */
int llvm_units_compile(LlvmModule *M, const LlvmOptions *o, char *err, size_t cap);

/* ---- loop.c: loops, buffers, functions ---- */
LLVMValueRef llvm_loop_begin(LlvmCtx *C, LlvmLoop *L, LLVMValueRef lo, LLVMValueRef hi,
                             const char *name);
void llvm_loop_end(LlvmCtx *C, LlvmLoop *L);
LLVMValueRef llvm_i64(LlvmCtx *C, int64_t v);
LLVMValueRef llvm_alloca_entry(LlvmCtx *C, LLVMTypeRef t, const char *name);
LLVMValueRef llvm_buffer_ptr(LlvmCtx *C, int32_t v); /* typed pointer to v's buffer */
LLVMValueRef llvm_buffer_load(LlvmCtx *C, int32_t v, LLVMValueRef lin);
void llvm_buffer_store(LlvmCtx *C, int32_t v, LLVMValueRef lin, LLVMValueRef x);
/* Alias metadata for a load from (store to) v's buffer in the kernel of C->kout; the two
 * above add it themselves. */
void llvm_buffer_tag(LlvmCtx *C, int32_t v, LLVMValueRef access, bool store);
LLVMValueRef llvm_pos_lin(LlvmCtx *C, const IrShape *s, LlvmPos *p);
LLVMValueRef llvm_fn_get(LlvmCtx *C, const char *name, LLVMTypeRef ret, LLVMTypeRef *params,
                         unsigned n);
/* A new kernel function void k(i8** noalias args, i64 lo, i64 hi) in a unit of its own
 * (unit.c); the builder is left in its entry block with C->fn and C->slab (args) set. lo and hi
 * are its params 1 and 2; its buffers are pointers in args (llvm_buffer_ptr). kernel_end
 * returns the builder to the end of axlc_step. name is only for reading the IR. */
LLVMValueRef llvm_kernel_begin(LlvmCtx *C, const char *name);
LLVMValueRef llvm_kernel_end(LlvmCtx *C); /* the kernel to call from axlc_step */
/* Sizes axlc_step's (or axlc_forward's) kernel argument array once every call is emitted. */
void llvm_kernel_args_done(LlvmCtx *C);
/* From axlc_step: runs kernel fn over [0, n), split across the pool if parallel. */
void llvm_kernel_call(LlvmCtx *C, LLVMValueRef fn, int64_t n, bool parallel);

/* ---- scalar.c: the element semantics of elementwise ops ---- */
LLVMValueRef llvm_scalar_unary(LlvmCtx *C, IrOp op, IrDType dt, LLVMValueRef x);
LLVMValueRef llvm_scalar_binary(LlvmCtx *C, IrOp op, IrDType dt, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef llvm_scalar_select(LlvmCtx *C, IrDType pdt, LLVMValueRef p, LLVMValueRef a,
                                LLVMValueRef b);
LLVMValueRef llvm_scalar_cast(LlvmCtx *C, IrDType from, IrDType to, LLVMValueRef x);
LLVMValueRef llvm_scalar_const(LlvmCtx *C, IrDType dt, double v);
LLVMValueRef llvm_scalar_max_nan(LlvmCtx *C, IrDType dt, LLVMValueRef x, LLVMValueRef acc);

/* ---- math.c: f32 exp, log, tanh, logistic as inline IR the loop vectorizer can widen ---- */
LLVMValueRef llvm_math_exp(LlvmCtx *C, LLVMValueRef x);
LLVMValueRef llvm_math_log(LlvmCtx *C, LLVMValueRef x);
LLVMValueRef llvm_math_tanh(LlvmCtx *C, LLVMValueRef x);
LLVMValueRef llvm_math_logistic(LlvmCtx *C, LLVMValueRef x);

/* ---- kernel.c: output-driven kernels (one element from its position) ---- */
/* Element of v at p: a load when v is materialized, else computed inline. */
LLVMValueRef llvm_elem_get(LlvmCtx *C, int32_t v, LlvmPos *p);
/* Element of v at p computed from its operands (v's own op). */
LLVMValueRef llvm_elem_compute(LlvmCtx *C, int32_t v, LlvmPos *p);
/* Emits v's kernel and its call from axlc_step. */
int llvm_kernel_emit(LlvmCtx *C, int32_t v);

/* ---- reduce.c: reductions, dot fallback, top_k, scatter_add ---- */
LLVMValueRef llvm_reduce_elem(LlvmCtx *C, int32_t v, LlvmPos *p);
/* A reduction over leading axes as its own kernel (VW columns at a time), when _ok says so. */
bool llvm_reduce_cols_ok(const LlvmCtx *C, int32_t v);
int llvm_reduce_cols_emit(LlvmCtx *C, int32_t v);
LLVMValueRef llvm_dot_elem(LlvmCtx *C, int32_t v, LlvmPos *p);
int llvm_top_k_emit(LlvmCtx *C, int32_t v);
int llvm_scatter_emit(LlvmCtx *C, int32_t v);

/* ---- blas.c ---- */
bool llvm_dot_blas_ok(const IrGraph *g, int32_t v);
int llvm_dot_blas_emit(LlvmCtx *C, int32_t v);
/* attention / attention_grad (f32) as one rt_attention / rt_attention_grad call. */
int llvm_attention_emit(LlvmCtx *C, int32_t v);

/* ---- fusion.c ---- */
/* Materializes fused values whose inputs the plan lets other values overwrite before use. */
int llvm_fusion_check(LlvmCtx *C);
/* Fills C->defer: stored values (outputs) that the kernel of their one consumer computes and
 * stores at its own position, when the plan keeps their inputs intact until then. */
int llvm_fusion_defer(LlvmCtx *C);

/* ---- program.c ---- */
int llvm_program_emit(LlvmCtx *C, LLVMValueRef step);
/* The RtForward table of the forward function, emitted while C holds the forward graph (after
 * the decode step's, which it points at). */
int llvm_forward_emit(LlvmCtx *C, LLVMValueRef fn);
/* The RtDecode table of the decode function, emitted while C holds the decode graph. */
int llvm_decode_emit(LlvmCtx *C, LLVMValueRef fn);
/* At the end of axlc_forward: bf16 logits widened into the f32 copy the table names. */
void llvm_forward_widen(LlvmCtx *C);
/* Whether the graph's collectives go through the runtime (a mesh of more than one device). */
bool llvm_multi_device(const IrGraph *g);
/* The index of the graph's pipeline mesh axis when it has 2 or more stages, else -1. */
int llvm_pipeline_axis(const IrGraph *g);
/* Emits the call of collective v (C->coll[v] >= 0) from axlc_step. */
int llvm_collective_emit(LlvmCtx *C, int32_t v);

#endif /* AXLC_LLVM_INTERNAL */
#endif /* AXLC_BACKENDS_LLVM_H */
