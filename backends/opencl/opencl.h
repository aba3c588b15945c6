/* opencl.h: the OpenCL backend, the one header of backends/opencl/.
 *
 * The backend prints the step graph (ir/ir.h) as OpenCL C 1.2: one kernel per value that gets a
 * buffer (the fusion plan, fusion.c, is the LLVM backend's rule: single-use elementwise values,
 * broadcasts, splat constants and iota are computed inside their consumer), plus a GEMM kernel
 * per matrix product whose layout allows it (gemm.c), and a launch list in graph order. Every
 * kernel takes the slab and the memory plan's byte offsets of its tensors as arguments, so
 * kernels that differ only in where their tensors live are printed once, and the runtime's slab
 * layout, RtProgram table and checkpoints are the CPU trainer's.
 *
 * compile checks the printed source with libclang (check.c), so a code generation bug is an
 * error at `axlc compile` time with the kernel's name, on a machine without any OpenCL device.
 * The trainer (program.c: a generated C file linked with libaxrt_opencl) and `axlc run`
 * (backend.c: the same tables in memory) both hand an RtOclProgram to rt_ocl_main
 * (runtime/opencl.c), which builds the source on the device and runs the CPU trainer's loop.
 *
 * Library code: functions return 0 or -1 with a message in err and never exit.
 */
#ifndef AXLC_BACKENDS_OPENCL_H
#define AXLC_BACKENDS_OPENCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/backend.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/axrt.h"

/* ======================================================================== buf.c */

/* A growing string. */
typedef struct OclBuf {
  char *s;
  size_t n, cap;
} OclBuf;

void ocl_buf_printf(OclBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ocl_buf_free(OclBuf *b);

/* ======================================================================== emit.c */

typedef struct OclKernels {
  char *source; /* OpenCL C 1.2, every kernel */
  int32_t nlaunches;
  RtOclLaunch *launches; /* (nlaunches); names and args owned here */
  int32_t *kernel_line;  /* (nlaunches) first source line of each launch's kernel */
  int64_t *reduced;      /* (nlaunches) elements each launch reduces; 0: not a reduction */
  int64_t slab_bytes;    /* the slab the launches need: the plan's, then reductions' scratch */
  int32_t nkernels;      /* distinct kernels: launches that differ only in offsets share one */
  char **names;          /* (nkernels) */
} OclKernels;

typedef enum OclGemm {
  OCL_GEMM_LOOP,    /* no GEMM kernel: the loop nest of any dot_general */
  OCL_GEMM_BLOCKED, /* register-blocked, no local memory (gemm.c) */
  OCL_GEMM_TILED,   /* local-memory tiles (gemm.c) */
} OclGemm;

/* A kernel argument pair: a __global pointer (8 bytes on a 64-bit device) and a long offset.
 * MULTI_ARGS pairs (960 bytes) fit OpenCL 1.2's least CL_DEVICE_MAX_PARAMETER_SIZE, 1024. */
enum { OCL_ARG_PAIR_BYTES = 16, MULTI_ARGS = 60 };

typedef struct OclOptions {
  bool fuse;        /* inline what the plan allows */
  bool multi;       /* runs of elementwise kernels as multi-tensor launches (emit.c) */
  int multi_args;   /* the most argument pairs of a multi-tensor launch (ocl_max_args) */
  OclGemm gemm;     /* the kernel of matrix products whose layout allows a GEMM */
  int break_kernel; /* test hook: > 0 breaks the source of that kernel (1-based) */
} OclOptions;

OclOptions ocl_options_default(void);
/* The most argument pairs a kernel takes: MULTI_ARGS, or fewer under AXLC_OPENCL_MAX_ARGS=N
 * (a test hook, 4..59: more and smaller launches, the same results). */
int ocl_max_args(void);
/* The OpenCL fusion plan: pass_fusion_plan, with operands materialized where a kernel would
 * otherwise take more than ocl_max_args() argument pairs. */
int ocl_fusion_plan(const IrGraph *g, bool *materialized);
/* Whether v is a collective that the runtime runs (the graph's mesh has several devices: one
 * trainer per device under MPI), and its index in the program's collective table: collectives
 * are numbered in graph order, as the LLVM backend numbers them. */
bool ocl_is_collective(const IrGraph *g, int32_t v);
int32_t ocl_collective_index(const IrGraph *g, int32_t v);
/* The bytes of partial sums the two-stage reductions of g (under the fusion plan mat) keep
 * past the slab: the most any one needs, as they run one after another (0: none). */
int64_t ocl_scratch_bytes(const IrGraph *g, const bool *mat);
/* The kernel name of a collective's launch (RtOclLaunch.collective > 0): no kernel has it. */
#define OCL_COLLECTIVE_NAME "axlc_collective"
/* Prints every kernel of g under the plan mp (which used mat). */
int ocl_emit(const IrGraph *g, const MemPlan *mp, const bool *mat, const OclOptions *o,
             OclKernels *out, char *err, size_t cap);
void ocl_kernels_free(OclKernels *k);
/* The launch list as text (`--emit launches`): a header line, then per launch in order its
 * kernel, global size (all dimensions' product), work-group size (0: the driver's) and the
 * elements it reduces (0: not a reduction), separated by spaces. 0 or -1 (a write error). */
int ocl_launches_write(FILE *f, const OclKernels *k);

/* ======================================================================== gemm.c */

/* Whether dot_general v is a (batched) row-major product the GEMM kernel computes. */
bool ocl_gemm_ok(const IrGraph *g, int32_t v);
/* The shared GEMM routines, printed once before the kernels (with bf16: their bf16 forms; with
 * tf32: the TF32 rounding; with either: the tensor-core routines, under #if AX_MMA). att_f32:
 * the program has f32 fused attention, whose tensor-core body takes the warp-level TF32 step
 * and the hi + lo split (emit.c). */
void ocl_gemm_prelude(OclBuf *b, bool bf16, bool tf32, bool att_f32);
/* Prints the body of v's GEMM kernel (tiled: local-memory tiles; else register-blocked), whose
 * operands and result are refs[0..2] (pointer expressions), and sets its launch's range and
 * the kernel's attributes; with a tensor-core body, that too (under #if AX_MMA) and its range
 * (L's mma fields). */
void ocl_gemm_kernel(OclBuf *b, const IrGraph *g, int32_t v, const char *const refs[3], bool tiled,
                     RtOclLaunch *L, const char **attrs);

/* ======================================================================== check.c */

/* Parses the source as OpenCL C 1.2 with libclang. 0 if it has no error; else -1 and err
 * names the kernel of the first errors, with line and message. */
int ocl_check_source(const OclKernels *k, char *err, size_t cap);

/* ======================================================================== program.c */

/* The RtOclProgram of g in memory (for `axlc run`); *slots and *colls (free them) back its
 * parameter and collective tables (a mesh of several devices: the per-device program, with
 * the mesh and its collectives as the LLVM backend's). Pointers into g, info (the job's program)
 * and k stay borrowed. */
int ocl_program_build(const IrGraph *g, const MemPlan *mp, const BackendProgram *info,
                      const OclKernels *k, RtOclProgram *out, RtParamSlot **slots,
                      RtCollective **colls, char *err, size_t cap);
/* The same program as a C file whose main calls rt_ocl_main (for `axlc compile`). */
int ocl_program_write_c(FILE *f, const RtOclProgram *p);

#endif /* AXLC_BACKENDS_OPENCL_H */
