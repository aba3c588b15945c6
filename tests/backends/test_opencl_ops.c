/* test_opencl_ops.c: the OpenCL backend's kernels (backends/opencl/emit.c, gemm.c) against the
 * reference interpreter, op by op, on bf16 graphs.
 *
 * Each case is a graph in the IR text form. The interpreter computes it in double and rounds
 * every op's result to its dtype; the kernels run once, on the first OpenCL device found (PoCL's
 * CPU device in CI), over a slab laid out by the memory plan and filled with NaN bytes, so a
 * kernel that reads what nothing wrote shows. Every case runs fused (the fusion plan: elementwise
 * chains inlined, each bf16 op still rounded) and unfused (every value its own kernel), with the
 * register-blocked GEMM, and where it has products once with the tiled one and once with the
 * loop nest. The kernels compute most bf16 ops in f32 where the interpreter computes in double
 * (the transcendental ones, div and pow in double where the device has it), so a
 * result may differ by a rounding of the f32 value: cases that cannot differ (casts, data
 * movement, max, compares) are compared exactly, the rest within a bf16 ulp or two.
 *
 * Skips (77) when there is no OpenCL platform or device.
 *
 * Built a second time with OCL_CHECK_ONLY (test opencl_bf16_check): the same kernels checked with
 * libclang, as `axlc compile` checks them, and not run. Apart because libclang's LLVM and the
 * OpenCL driver's (PoCL's, another version) cannot share a process: PoCL's compiler calls into
 * the first LLVM loaded and crashes.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include "tests/cunit_check.h"
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/opencl.h"

#define BF16_TOL                                                                                   \
  0.0078125 /* 2^-7 relative: one bf16 ulp at the bottom of a binade, two at the top */

static cl_device_id dev;
static int mma_launches; /* launches run with their tensor-core body */
static cl_context ctx;
static cl_command_queue queue;
static const char *build_options = "-cl-std=CL1.2"; /* the runtime adds a device's variant */
static bool att_no_mma; /* check: no AX_MMA=2 run of an attention graph (a case's choice) */

#ifndef OCL_CHECK_ONLY
/* The first device of the first platform that has one; -1 if none. */
static int device_open(void) {
  cl_platform_id plats[8];
  cl_uint np = 0;
  if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS || np == 0) return -1;
  for (cl_uint p = 0; p < np && p < 8; p++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS || nd == 0)
      continue;
    cl_int e;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (e != CL_SUCCESS) return -1;
    queue = clCreateCommandQueue(ctx, dev, 0, &e);
    return e == CL_SUCCESS ? 0 : -1;
  }
  return -1;
}
#endif

/* ---- the slab ---- */

static void slab_put(const IrValue *x, char *at, const double *d) {
  for (int64_t i = 0, n = ir_shape_numel(&x->shape); i < n; i++) {
    if (x->dtype == DT_I32)
      ((int32_t *)at)[i] = (int32_t)d[i];
    else if (x->dtype == DT_BF16)
      ((uint16_t *)at)[i] = rt_bf16_from_f32((float)d[i]);
    else
      ((float *)at)[i] = (float)d[i];
  }
}

static double slab_get(const IrValue *x, const char *at, int64_t i) {
  if (x->dtype == DT_I32) return ((const int32_t *)at)[i];
  if (x->dtype == DT_BF16) return rt_bf16_to_f32(((const uint16_t *)at)[i]);
  return ((const float *)at)[i];
}

/* Deterministic leaf data: floats in [-2, 2) (bf16 values where the leaf is bf16), i32 in
 * [0, 4); or the case's own. */
typedef struct Bind {
  const char *name;
  const double *data;
} Bind;

static double **leaf_data(const IrGraph *g, const Bind *b, int nb) {
  double **d = calloc((size_t)g->nvalues + 1, sizeof *d);
  uint64_t s = 777;
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_PARAMETER && x->op != IR_INPUT) continue;
    int64_t n = ir_shape_numel(&x->shape);
    d[v] = malloc((size_t)(n ? n : 1) * sizeof **d);
    const double *given = NULL;
    for (int i = 0; i < nb; i++)
      if (!strcmp(b[i].name, x->name)) given = b[i].data;
    for (int64_t i = 0; i < n; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(s >> 11) / 9007199254740992.0;
      d[v][i] = given                ? given[i]
                : x->dtype == DT_I32 ? (double)(int)(u * 4)
                                     : ir_dtype_round(x->dtype, 4 * u - 2);
    }
  }
  return d;
}

/* ---- one run on the device ---- */

static int cl_check(cl_int e, const char *what) {
  if (e == CL_SUCCESS) return 0;
  fprintf(stderr, "OpenCL: %s: %d\n", what, (int)e);
  CU_FAIL(what);
  return -1;
}

/* Builds the kernels of k and runs its launches once over slab (slab_bytes); mma: with the
 * products' emulated tensor-core body (-DAX_MMA=2, what AXLC_OPENCL_MMA=emulate builds). */
static int run_kernels(const OclKernels *k, char *slab, int64_t slab_bytes, bool mma) {
  cl_int e;
  const char *src = k->source;
  cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
  if (cl_check(e, "clCreateProgramWithSource")) return -1;
  char options[256];
  snprintf(options, sizeof options, "%s%s", build_options, mma ? " -DAX_MMA=2" : "");
  if (clBuildProgram(prog, 1, &dev, options, NULL, NULL) != CL_SUCCESS) {
    char log[8192] = "";
    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fprintf(stderr, "build failed: %s\n", log);
    CU_FAIL("clBuildProgram");
    clReleaseProgram(prog);
    return -1;
  }
  cl_mem mem =
      clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, (size_t)slab_bytes, slab, &e);
  int rc = cl_check(e, "clCreateBuffer");
  for (int32_t i = 0; rc == 0 && i < k->nlaunches; i++) {
    const RtOclLaunch *L = &k->launches[i];
    cl_kernel kern = clCreateKernel(prog, L->kernel, &e);
    if ((rc = cl_check(e, L->kernel))) break;
    for (int32_t a = 0; a < L->nargs; a++) { /* each tensor: its buffer, its offset there */
      cl_long off = L->args[a];
      clSetKernelArg(kern, (cl_uint)(2 * a), sizeof mem, &mem);
      clSetKernelArg(kern, (cl_uint)(2 * a + 1), sizeof off, &off);
    }
    size_t gl[3], lo[3];
    bool local = false, body = mma && L->mma_local[0] > 0; /* as runtime/opencl.c launches */
    for (int d = 0; d < L->dims; d++) {
      gl[d] = (size_t)(body ? L->mma_global[d] : L->global[d]);
      lo[d] = (size_t)(body ? L->mma_local[d] : L->local[d]);
      local |= lo[d] > 0;
    }
    mma_launches += body;
    rc = cl_check(clEnqueueNDRangeKernel(queue, kern, (cl_uint)L->dims, NULL, gl, local ? lo : NULL,
                                         0, NULL, NULL),
                  L->kernel);
    clReleaseKernel(kern);
  }
  if (rc == 0)
    rc = cl_check(
        clEnqueueReadBuffer(queue, mem, CL_TRUE, 0, (size_t)slab_bytes, slab, 0, NULL, NULL),
        "clEnqueueReadBuffer");
  if (mem) clReleaseMemObject(mem);
  clReleaseProgram(prog);
  return rc;
}

/* |got - want| <= tol * (|want| + max|want| / 100); NaN matches NaN, inf its own sign. */
static int compare(const IrGraph *g, const IrOutput *o, const char *at, const double *want,
                   double tol, const char *what) {
  const IrValue *x = &g->values[o->value];
  int64_t n = ir_shape_numel(&x->shape), bad = 0;
  double scale = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(want[i])) scale = fmax(scale, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    double got = slab_get(x, at, i);
    bool same = (isnan(got) && isnan(want[i])) || got == want[i] ||
                (isfinite(want[i]) && fabs(got - want[i]) <= tol * (fabs(want[i]) + scale / 100));
    if (!same && bad++ < 4)
      fprintf(stderr, "%s: output %s (%%%d %s %s) [%lld]: got %.9g, want %.9g\n", what, o->name,
              o->value, ir_op_name(x->op), ir_dtype_name(x->dtype), (long long)i, got, want[i]);
  }
  CU_ASSERT_EQUAL(bad, 0);
  return bad ? -1 : 0;
}

/* One variant: plan (fused or not), print, check with libclang, run, compare every output. */
static void check_with(IrGraph *g, double **leaf, const IrInterp *it, bool fuse, OclGemm gemm,
                       bool mma, const char *exact, double tol, const char *what) {
  bool *mat = malloc((size_t)g->nvalues + 1);
  if (fuse) {
    CU_ASSERT_EQUAL_FATAL(pass_fusion_plan(g, mat), 0);
  } else {
    memset(mat, 1, (size_t)g->nvalues);
  }
  MemPlan mp;
  CU_ASSERT_EQUAL_FATAL(pass_memplan_fused(g, mat, &mp), IR_OK);
  OclOptions o = ocl_options_default();
  o.fuse = fuse;
  o.gemm = gemm;
  OclKernels k;
  char err[4096];
  int rc = ocl_emit(g, &mp, mat, &o, &k, err, sizeof err);
  free(mat);
  if (rc) fprintf(stderr, "%s: emit: %s\n", what, err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
#ifdef OCL_CHECK_ONLY
  if (ocl_check_source(&k, err, sizeof err)) fprintf(stderr, "%s: libclang: %s\n", what, err);
  CU_ASSERT_EQUAL(ocl_check_source(&k, err, sizeof err), 0);
  (void)leaf, (void)it, (void)exact, (void)tol, (void)mma;
  ocl_kernels_free(&k);
  pass_memplan_free(&mp);
  return;
#endif
  int64_t bytes = k.slab_bytes + 64; /* the plan's slab and the reductions' scratch */
  char *slab = malloc((size_t)bytes);
  memset(slab, 0xff, (size_t)bytes);
  for (int32_t v = 0; v < g->nvalues; v++)
    if (leaf[v]) slab_put(&g->values[v], slab + mp.offset[v], leaf[v]);
  if (run_kernels(&k, slab, bytes, mma) == 0)
    for (int32_t i = 0; i < g->noutputs; i++) {
      const IrOutput *out = &g->outputs[i];
      bool ex = exact && strstr(exact, out->name) != NULL;
      compare(g, out, slab + mp.offset[out->value], ir_interp_value(it, 0, out->value),
              ex ? 0 : tol, what);
    }
  free(slab);
  ocl_kernels_free(&k);
  pass_memplan_free(&mp);
}

/* The graph in text, its outputs against the interpreter in every variant. Outputs whose names
 * are in `exact` (a space-separated list) must match bit for bit. */
static void check(const char *text, const Bind *b, int nb, const char *exact, double tol) {
  char msg[1024] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  if (ir_graph_verify(g, msg, sizeof msg) != IR_OK) fprintf(stderr, "verify: %s\n", msg);
  CU_ASSERT_EQUAL_FATAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  double **leaf = leaf_data(g, b, nb);
  IrInterp *it = ir_interp_new(g, NULL);
  for (int32_t v = 0; v < g->nvalues; v++)
    if (leaf[v]) {
      const IrShape *s = &g->values[v].shape;
      CU_ASSERT_EQUAL(ir_interp_set(it, -1, g->values[v].name, s->rank, s->dims, leaf[v]), IR_OK);
    }
  if (ir_interp_run(it) != IR_OK) fprintf(stderr, "interp: %s\n", ir_interp_error(it));
  check_with(g, leaf, it, true, OCL_GEMM_BLOCKED, false, exact, tol, "fused, blocked GEMM");
  check_with(g, leaf, it, false, OCL_GEMM_BLOCKED, false, exact, tol, "unfused, blocked GEMM");
  bool dot = false;
  for (int32_t v = 0; v < g->nvalues; v++) dot |= g->values[v].op == IR_DOT;
  if (dot) { /* the other product kernels */
    check_with(g, leaf, it, true, OCL_GEMM_TILED, false, exact, tol, "fused, tiled GEMM");
    check_with(g, leaf, it, true, OCL_GEMM_LOOP, false, exact, tol, "fused, loop-nest products");
    check_with(g, leaf, it, true, OCL_GEMM_BLOCKED, true, exact, tol,
               "fused, emulated tensor-core products");
  }
  bool att = false; /* the fused attention kernels under the emulated tensor-core build too */
  for (int32_t v = 0; v < g->nvalues; v++)
    att |= g->values[v].op == IR_ATTENTION || g->values[v].op == IR_ATTENTION_GRAD;
  if (att && !dot) {
    if (!att_no_mma)
      check_with(g, leaf, it, true, OCL_GEMM_BLOCKED, true, exact, tol, "fused, AX_MMA=2 build");
    const char *was = build_options; /* as a CPU device runs them: no local tiles */
    build_options = "-cl-std=CL1.2 -DAXLC_CPU_REDUCE";
    check_with(g, leaf, it, true, OCL_GEMM_BLOCKED, false, exact, tol, "fused, AXLC_CPU_REDUCE");
    build_options = was;
  }
  ir_interp_free(it);
  for (int32_t v = 0; v < g->nvalues; v++) free(leaf[v]);
  free(leaf);
  ir_graph_free(g);
}

/* ---- cases ---- */

/* Every unary and binary op, select and the compares, on bf16; fused they form chains whose
 * every op rounds (an unrounded chain differs from the interpreter by far more than an ulp:
 * the `chain` output adds a small step to a large value). */
static void test_elementwise(void) {
  check("%0 = parameter \"a\" : bf16[5,7]\n"
        "%1 = parameter \"b\" : bf16[5,7]\n"
        "%2 = neg %0 : bf16[5,7]\n"
        "%3 = exp %0 : bf16[5,7]\n"
        "%4 = abs %0 : bf16[5,7]\n"
        "%5 = log %4 : bf16[5,7]\n"
        "%6 = tanh %0 : bf16[5,7]\n"
        "%7 = sqrt %4 : bf16[5,7]\n"
        "%8 = rsqrt %4 : bf16[5,7]\n"
        "%9 = sin %0 : bf16[5,7]\n"
        "%10 = cos %0 : bf16[5,7]\n"
        "%11 = erf %0 : bf16[5,7]\n"
        "%12 = logistic %0 : bf16[5,7]\n"
        "%13 = stop_gradient %0 : bf16[5,7]\n"
        "%14 = add %0, %1 : bf16[5,7]\n"
        "%15 = sub %0, %1 : bf16[5,7]\n"
        "%16 = mul %0, %1 : bf16[5,7]\n"
        "%17 = div %0, %1 : bf16[5,7]\n"
        "%18 = max %0, %1 : bf16[5,7]\n"
        "%19 = min %0, %1 : bf16[5,7]\n"
        "%20 = pow %4, %1 : bf16[5,7]\n"
        "%21 = eq %0, %1 : bf16[5,7]\n"
        "%22 = ne %0, %1 : bf16[5,7]\n"
        "%23 = lt %0, %1 : bf16[5,7]\n"
        "%24 = le %0, %1 : bf16[5,7]\n"
        "%25 = gt %0, %1 : bf16[5,7]\n"
        "%26 = ge %0, %1 : bf16[5,7]\n"
        "%27 = select %23, %0, %1 : bf16[5,7]\n"
        "%28 = constant value=300 : bf16[5,7]\n"
        "%29 = constant value=0.75 : bf16[5,7]\n"
        "%30 = add %28, %29 : bf16[5,7]\n"
        "%31 = add %30, %29 : bf16[5,7]\n"
        "%32 = sub %31, %28 : bf16[5,7]\n"
        "%33 = mul %0, %29 : bf16[5,7]\n"
        "%34 = add %33, %1 : bf16[5,7]\n"
        "%35 = exp %34 : bf16[5,7]\n"
        "output \"neg\" = %2\n"
        "output \"exp\" = %3\n"
        "output \"abs\" = %4\n"
        "output \"log\" = %5\n"
        "output \"tanh\" = %6\n"
        "output \"sqrt\" = %7\n"
        "output \"rsqrt\" = %8\n"
        "output \"sin\" = %9\n"
        "output \"cos\" = %10\n"
        "output \"erf\" = %11\n"
        "output \"logistic\" = %12\n"
        "output \"stop_gradient\" = %13\n"
        "output \"add\" = %14\n"
        "output \"sub\" = %15\n"
        "output \"mul\" = %16\n"
        "output \"div\" = %17\n"
        "output \"max\" = %18\n"
        "output \"min\" = %19\n"
        "output \"pow\" = %20\n"
        "output \"eq\" = %21\n"
        "output \"ne\" = %22\n"
        "output \"lt\" = %23\n"
        "output \"le\" = %24\n"
        "output \"gt\" = %25\n"
        "output \"ge\" = %26\n"
        "output \"select\" = %27\n"
        "output \"chain\" = %32\n"
        "output \"chain2\" = %35\n",
        NULL, 0, "neg abs stop_gradient add sub max min eq ne lt le gt ge select chain", BF16_TOL);
}

/* f32 <-> bf16 <-> i32, with ties (both ways), NaN, infinities, overflow to inf, and i32 values
 * past f32's 24 bits (no double rounding). */
static void test_casts(void) {
  static const double f[16] = {1.00390625, /* 1 + 2^-8: a tie, to even (1) */
                               1.01171875, /* 1 + 3 * 2^-8: a tie, to even (1 + 2^-6) */
                               -1.00390625, 1.0039063692092896, /* just above the tie: up */
                               NAN,         INFINITY,
                               -INFINITY,   3.4e38, /* rounds up to inf */
                               0.1,         -2.5e-3,
                               65535.0,     1e-40, /* subnormal */
                               -0.0,        123456.789,
                               2.9e9, /* beyond i32: saturates */
                               -7.75};
  /* 2^24 + 2^16 + 1 rounds to an f32 that is a bf16 tie: through f32 it would round down */
  static const double i[8] = {16842753, -16842753, 16843009, 16875520, 2147483647, 257, 384, -3};
  Bind b[] = {{"f", f}, {"i", i}};
  check("%0 = parameter \"f\" : f32[16]\n"
        "%1 = parameter \"i\" : i32[8]\n"
        "%2 = cast %0 : bf16[16]\n"
        "%3 = cast %2 : f32[16]\n"
        "%4 = cast %2 : i32[16]\n"
        "%5 = cast %1 : bf16[8]\n"
        "%6 = cast %5 : i32[8]\n"
        "%7 = cast %2 : bf16[16]\n"
        "output \"f2b\" = %2\n"
        "output \"b2f\" = %3\n"
        "output \"b2i\" = %4\n"
        "output \"i2b\" = %5\n"
        "output \"i2b2i\" = %6\n"
        "output \"b2b\" = %7\n",
        b, 2, "f2b b2f b2i i2b i2b2i b2b", 0);
}

/* reduce_sum and reduce_max over inner, outer and all axes; a sum of many terms rounds once (a
 * per-step rounding would lose the small terms). */
static void test_reductions(void) {
  check("%0 = parameter \"x\" : bf16[3,4,37]\n"
        "%1 = reduce_sum %0 axes=[2] : bf16[3,4]\n"
        "%2 = reduce_sum %0 axes=[0,1] : bf16[37]\n"
        "%3 = reduce_sum %0 axes=[0,1,2] : bf16[]\n"
        "%4 = reduce_max %0 axes=[2] : bf16[3,4]\n"
        "%5 = reduce_max %0 axes=[0] : bf16[4,37]\n"
        "%6 = exp %0 : bf16[3,4,37]\n"
        "%7 = reduce_sum %6 axes=[1] : bf16[3,37]\n"
        "%8 = constant value=256 : bf16[300]\n"
        "%9 = constant value=0.5 : bf16[300]\n"
        "%10 = concat %8, %9 axis=0 : bf16[600]\n"
        "%11 = reduce_sum %10 axes=[0] : bf16[]\n"
        "output \"sum_last\" = %1\n"
        "output \"sum01\" = %2\n"
        "output \"sum_all\" = %3\n"
        "output \"max_last\" = %4\n"
        "output \"max0\" = %5\n"
        "output \"sum_exp\" = %7\n"
        "output \"once\" = %11\n",
        NULL, 0, "max_last max0 once", BF16_TOL);
}

/* The parallel reduction kernels (emit.c: work-group trees, two stages for a scalar or a small
 * result) on shapes that are not multiples of the work-group: rows (the last axis reduced) and
 * columns (leading axes), to many outputs (one stage), to a scalar and to a few outputs (two
 * stages: partials read side by side, [o][p], or across, [p][o]), over axes of both kinds, with
 * an operand computed inline (exp: fused) and i32 sums; in f32 (sums in double where the device
 * has fp64, as the interpreter's, so within 1e-6) and in bf16 (each result rounded once); with
 * the local-memory trees and again as a CPU device runs them (AXLC_CPU_REDUCE: one item a run).
 * `DT` in text is the dtype. */
static void check_reductions(const char *dt, const char *exact, double tol) {
  static const char *const text = "%0 = parameter \"x\" : DT[37,1001]\n"
                                  "%1 = reduce_sum %0 axes=[1] : DT[37]\n"
                                  "%2 = reduce_sum %0 axes=[0] : DT[1001]\n"
                                  "%3 = reduce_sum %0 axes=[0,1] : DT[]\n"
                                  "%4 = reduce_max %0 axes=[0,1] : DT[]\n"
                                  "%5 = parameter \"c\" : DT[3001,45]\n"
                                  "%6 = reduce_sum %5 axes=[0] : DT[45]\n"
                                  "%7 = reduce_max %5 axes=[0] : DT[45]\n"
                                  "%8 = slice %5 start=[0,0] limit=[3001,5] : DT[3001,5]\n"
                                  "%9 = reduce_sum %8 axes=[0] : DT[5]\n"
                                  "%10 = parameter \"t\" : DT[3,4001,7]\n"
                                  "%11 = reduce_sum %10 axes=[1,2] : DT[3]\n"
                                  "%12 = reduce_sum %10 axes=[0,2] : DT[4001]\n"
                                  "%13 = reduce_sum %10 axes=[0,1] : DT[7]\n"
                                  "%14 = exp %0 : DT[37,1001]\n"
                                  "%15 = reduce_sum %14 axes=[1] : DT[37]\n"
                                  "%16 = exp %10 : DT[3,4001,7]\n"
                                  "%17 = reduce_sum %16 axes=[0,1,2] : DT[]\n"
                                  "%18 = input \"i\" : i32[2003,3]\n"
                                  "%19 = reduce_sum %18 axes=[0] : i32[3]\n"
                                  "%20 = reduce_sum %18 axes=[0,1] : i32[]\n"
                                  "%21 = reduce_max %18 axes=[0] : i32[3]\n"
                                  "output \"rows\" = %1\n"
                                  "output \"cols\" = %2\n"
                                  "output \"all\" = %3\n"
                                  "output \"max_all\" = %4\n"
                                  "output \"cols_parts\" = %6\n"
                                  "output \"max_cols_parts\" = %7\n"
                                  "output \"few_cols\" = %9\n"
                                  "output \"few_rows\" = %11\n"
                                  "output \"middle\" = %12\n"
                                  "output \"lead\" = %13\n"
                                  "output \"exp_rows\" = %15\n"
                                  "output \"exp_all\" = %17\n"
                                  "output \"i32_cols\" = %19\n"
                                  "output \"i32_all\" = %20\n"
                                  "output \"i32_max\" = %21\n";
  char *g = malloc(strlen(text) * 2 + 1), *o = g;
  for (const char *p = text; *p;)
    if (!strncmp(p, "DT", 2)) {
      o += sprintf(o, "%s", dt);
      p += 2;
    } else
      *o++ = *p++;
  *o = 0;
  check(g, NULL, 0, exact, tol);
  build_options = "-cl-std=CL1.2 -DAXLC_CPU_REDUCE"; /* what the trainer runs on a CPU device */
  check(g, NULL, 0, exact, tol);
  build_options = "-cl-std=CL1.2";
  free(g);
}

static void test_reductions_parallel_f32(void) {
  check_reductions("f32", "max_all max_cols_parts i32_cols i32_all i32_max", 1e-6);
}

static void test_reductions_parallel_bf16(void) {
  check_reductions("bf16", "max_all max_cols_parts i32_cols i32_all i32_max", BF16_TOL);
}

/* scatter_add of f32 and i32 (emit.c: zeroed, then blocks of rows a work item each): 1000
 * indices into 301 rows, each named three or four times, columns not a
 * multiple of anything. */
static void test_scatter_f32(void) {
  static double idx[1000];
  for (int i = 0; i < 1000; i++) idx[i] = (i * 37) % 301;
  Bind b[] = {{"idx", idx}};
  check("%0 = input \"idx\" : i32[1000]\n"
        "%1 = parameter \"u\" : f32[1000,45]\n"
        "%2 = scatter_add %0, %1 rows=301 : f32[301,45]\n"
        "%3 = input \"n\" : i32[1000,3]\n"
        "%4 = scatter_add %0, %3 rows=301 : i32[301,3]\n"
        "output \"f32\" = %2\n"
        "output \"i32\" = %4\n",
        b, 1, "i32", 1e-5); /* f32 sums in the (f32) output, as before */
}

/* dot_general with bf16 operands: bf16 results (rounded once) and f32 results (the f32
 * accumulator kept), plain, transposed and batched layouts (GEMM kernels) and one the GEMM
 * does not take (loop nest). */
static void test_dot(void) {
  check("%0 = parameter \"a\" : bf16[6,8]\n"
        "%1 = parameter \"b\" : bf16[8,5]\n"
        "%2 = parameter \"bt\" : bf16[5,8]\n"
        "%3 = parameter \"ba\" : bf16[3,6,8]\n"
        "%4 = parameter \"bb\" : bf16[3,8,4]\n"
        "%5 = parameter \"at\" : bf16[8,6]\n"
        "%6 = parameter \"odd\" : bf16[6,2,8]\n"
        "%7 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : bf16[6,5]\n"
        "%8 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : f32[6,5]\n"
        "%9 = dot_general %0, %2 lhs_contract=[1] rhs_contract=[1] : bf16[6,5]\n"
        "%10 = dot_general %3, %4 lhs_batch=[0] rhs_batch=[0] lhs_contract=[2] "
        "rhs_contract=[1] : bf16[3,6,4]\n"
        "%11 = dot_general %3, %4 lhs_batch=[0] rhs_batch=[0] lhs_contract=[2] "
        "rhs_contract=[1] : f32[3,6,4]\n"
        "%12 = dot_general %5, %1 lhs_contract=[0] rhs_contract=[0] : f32[6,5]\n"
        "%13 = dot_general %6, %1 lhs_contract=[2] rhs_contract=[0] : bf16[6,2,5]\n"
        "%15 = parameter \"m2\" : bf16[2,5]\n"
        "%14 = dot_general %6, %15 lhs_contract=[1] rhs_contract=[0] : f32[6,8,5]\n"
        "output \"bf16\" = %7\n"
        "output \"f32\" = %8\n"
        "output \"nt\" = %9\n"
        "output \"batched\" = %10\n"
        "output \"batched_f32\" = %11\n"
        "output \"tn_f32\" = %12\n"
        "output \"rank3\" = %13\n"
        "output \"loop_f32\" = %14\n",
        NULL, 0, NULL, BF16_TOL);
}

/* The tensor-core body on shapes that are not multiples of its tiles (64 x 64 blocks, 32 of K
 * per step, 16 x 8 x 16 warp steps): bf16 operands in every layout, bf16 and f32 results,
 * batched; every variant of check(), the emulated mma among them, which must have run. */
static void test_dot_mma_bf16(void) {
  int before = mma_launches;
  check("%0 = parameter \"a\" : bf16[70,45]\n"
        "%1 = parameter \"b\" : bf16[45,37]\n"
        "%2 = parameter \"at\" : bf16[45,70]\n"
        "%3 = parameter \"bt\" : bf16[37,45]\n"
        "%4 = parameter \"ba\" : bf16[3,19,33]\n"
        "%5 = parameter \"bb\" : bf16[3,33,9]\n"
        "%6 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : bf16[70,37]\n"
        "%7 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : f32[70,37]\n"
        "%8 = dot_general %2, %3 lhs_contract=[0] rhs_contract=[1] : f32[70,37]\n"
        "%9 = dot_general %2, %1 lhs_contract=[0] rhs_contract=[0] : bf16[70,37]\n"
        "%10 = dot_general %4, %5 lhs_batch=[0] rhs_batch=[0] lhs_contract=[2] "
        "rhs_contract=[1] : f32[3,19,9]\n"
        "output \"nn\" = %6\n"
        "output \"nn_f32\" = %7\n"
        "output \"tt_f32\" = %8\n"
        "output \"tn\" = %9\n"
        "output \"batched\" = %10\n",
        NULL, 0, NULL, BF16_TOL);
#ifndef OCL_CHECK_ONLY
  CU_ASSERT_EQUAL(mma_launches - before, 5);
#else
  (void)before;
#endif
}

/* f32 products under matmul tf32: every kernel (the emulated tensor-core body, the SIMT ones,
 * the loop nest) rounds its operands to TF32 as the interpreter does, so they agree to f32
 * rounding, where unrounded operands would be 1e-3 off. `ties`: 1 + 2^-11 and -1 - 2^-11 are
 * ties that round away from zero (ties to even would give 1, -1), 1 + 2^-12 rounds down; the
 * sums are exact, so the result is too. */
static void test_dot_tf32(void) {
  static const double t[3 * 4] = {1 + 0x1p-11, 1,           1, 1, -1 - 0x1p-11, 1, 1, 1,
                                  1,           1 + 0x1p-12, 1, 1};
  static const double ones[4 * 2] = {1, 1, 1, 1, 1, 1, 1, 1};
  Bind b[] = {{"t", t}, {"ones", ones}};
  int before = mma_launches;
  check("matmul tf32\n"
        "%0 = parameter \"a\" : f32[70,45]\n"
        "%1 = parameter \"b\" : f32[45,37]\n"
        "%2 = parameter \"at\" : f32[45,70]\n"
        "%3 = parameter \"bt\" : f32[37,45]\n"
        "%4 = parameter \"t\" : f32[3,4]\n"
        "%5 = parameter \"ones\" : f32[4,2]\n"
        "%6 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : f32[70,37]\n"
        "%7 = dot_general %2, %3 lhs_contract=[0] rhs_contract=[1] : f32[70,37]\n"
        "%8 = dot_general %4, %5 lhs_contract=[1] rhs_contract=[0] : f32[3,2]\n"
        "%9 = parameter \"m2\" : f32[6,2,8]\n"
        "%10 = parameter \"r2\" : f32[2,5]\n"
        "%11 = dot_general %9, %10 lhs_contract=[1] rhs_contract=[0] : f32[6,8,5]\n"
        "output \"nn\" = %6\n"
        "output \"tt\" = %7\n"
        "output \"ties\" = %8\n"
        "output \"loop\" = %11\n",
        b, 2, "ties", 1e-5);
#ifndef OCL_CHECK_ONLY
  CU_ASSERT_EQUAL(mma_launches - before, 3);
#else
  (void)before;
#endif
}

/* gather of bf16 rows, scatter_add of bf16 updates (each
 * element the f32 sum of its updates, rounded once) with fewer and with more rows than
 * indices, and top_k_indices of bf16 with ties. */
static void test_gather_scatter(void) {
  static const double idx[6] = {2, 0, 2, 3, 1, 2}, big[6] = {0, 3, 0, 3, 9, 0};
  /* rows 0, 2 and 5 go to one output row: 256 + 0.75 + 0.75 is 258 rounded once, 256 if each
   * addition rounded */
  static const double u[6 * 3] = {256, 1, -1, 0.5, 2, 3, 0.75, 0.25, 4,
                                  5,   6, 7,  9,   8, 7, 0.75, 1,    2};
  static const double t[10] = {1, 3, 3, -2, NAN, 0.5, 3, 1, 1, 2};
  Bind b[] = {{"idx", idx}, {"big", big}, {"u", u}, {"t", t}};
  check("%0 = parameter \"table\" : bf16[4,3]\n"
        "%1 = input \"idx\" : i32[6]\n"
        "%2 = gather %0, %1 : bf16[6,3]\n"
        "%3 = parameter \"u\" : bf16[6,3]\n"
        "%4 = scatter_add %1, %3 rows=4 : bf16[4,3]\n"
        "%5 = input \"big\" : i32[6]\n"
        "%6 = scatter_add %5, %3 rows=10 : bf16[10,3]\n"
        "%7 = exp %2 : bf16[6,3]\n"
        "%8 = parameter \"t\" : bf16[2,5]\n"
        "%9 = top_k_indices %8 k=3 : i32[2,3]\n"
        "output \"gather\" = %2\n"
        "output \"scatter\" = %4\n"
        "output \"scatter_big\" = %6\n"
        "output \"gather_exp\" = %7\n"
        "output \"top_k\" = %9\n",
        b, 4, "gather scatter scatter_big top_k", BF16_TOL);
}

/* Data movement on bf16: broadcast, transpose, slice, pad, concat, reshape, iota (above 256:
 * rounded), all exact. */
static void test_movement(void) {
  check("%0 = parameter \"x\" : bf16[3,4]\n"
        "%1 = broadcast_in_dim %0 bdims=[0,2] : bf16[3,2,4]\n"
        "%2 = transpose %0 perm=[1,0] : bf16[4,3]\n"
        "%3 = slice %0 start=[1,1] limit=[3,4] : bf16[2,3]\n"
        "%4 = pad %0 value=1.5 low=[1,0] high=[0,2] : bf16[4,6]\n"
        "%5 = concat %0, %0 axis=1 : bf16[3,8]\n"
        "%6 = reshape %0 : bf16[12]\n"
        "%7 = iota axis=0 : bf16[300]\n"
        "%8 = transpose %1 perm=[2,0,1] : bf16[4,3,2]\n"
        "output \"broadcast\" = %8\n"
        "output \"transpose\" = %2\n"
        "output \"slice\" = %3\n"
        "output \"pad\" = %4\n"
        "output \"concat\" = %5\n"
        "output \"reshape\" = %6\n"
        "output \"iota\" = %7\n",
        NULL, 0, "broadcast transpose slice pad concat reshape iota", 0);
}

/* One attention case: q and dout `dt`[dims] (rank 3 or 4, (..., N, T, H)), k and v with `kv`
 * heads on axis rank - 3 (0: the query's shape; else grouped-query, N a multiple of kv); the
 * forward causal and not, attention_grad causal and not, against the interpreter. With tk > 0,
 * k and v have tk rows and the queries the positions off, off + 1, ... (a chunk of a split
 * sequence: query positions). */
static void check_attention_at(const char *dt, int rank, const int64_t *dims, int64_t kv,
                               int64_t tk, int64_t off, double tol) {
  char qs[96], ks[96], gs[96], text[2048], pos[160] = "", arg[8] = "";
  int64_t kd[4], gd[5], N = rank >= 3 ? dims[rank - 3] : 1, G = kv ? N / kv : 1;
  int gr = rank + 1, a = 4; /* the first attention value */
  for (int d = 0; d < rank; d++) kd[d] = d == rank - 3 && kv ? kv : dims[d];
  if (tk) {
    long long tq = (long long)dims[rank - 2];
    kd[rank - 2] = tk;
    snprintf(pos, sizeof pos,
             "%%4 = iota axis=0 : i32[%lld]\n%%5 = constant value=%lld : i32[%lld]\n"
             "%%6 = add %%4, %%5 : i32[%lld]\n",
             tq, (long long)off, tq, tq);
    snprintf(arg, sizeof arg, ", %%6");
    a = 7;
  }
  if (G == 1) {
    gd[0] = 3;
    for (int d = 0; d < rank; d++) gd[d + 1] = kd[d];
  } else {
    for (int d = 0, o = 0; d < rank; d++) {
      gd[o++] = kd[d];
      if (d == rank - 3) gd[o++] = G + 2;
    }
  }
  const struct {
    char *s;
    const int64_t *x;
    int n;
  } shp[3] = {{qs, dims, rank}, {ks, kd, rank}, {gs, gd, gr}};
  for (int i = 0; i < 3; i++) {
    int n = snprintf(shp[i].s, 96, "%s[", dt);
    for (int d = 0; d < shp[i].n; d++)
      n += snprintf(shp[i].s + n, (size_t)(96 - n), "%s%lld", d ? "," : "", (long long)shp[i].x[d]);
    snprintf(shp[i].s + n, (size_t)(96 - n), "]");
  }
  double scale = 1.0 / sqrt((double)dims[rank - 1]);
  snprintf(text, sizeof text,
           "%%0 = parameter \"q\" : %s\n"
           "%%1 = parameter \"k\" : %s\n"
           "%%2 = parameter \"v\" : %s\n"
           "%%3 = parameter \"g\" : %s\n"
           "%s"
           "%%%d = attention %%0, %%1, %%2%s causal=1 scale=%.17g : %s\n"
           "%%%d = attention %%0, %%1, %%2%s causal=0 scale=%.17g : %s\n"
           "%%%d = attention_grad %%0, %%1, %%2, %%3%s causal=1 scale=%.17g : %s\n"
           "%%%d = attention_grad %%0, %%1, %%2, %%3%s causal=0 scale=%.17g : %s\n"
           "output \"causal\" = %%%d\n"
           "output \"full\" = %%%d\n"
           "output \"grad_causal\" = %%%d\n"
           "output \"grad_full\" = %%%d\n",
           qs, ks, ks, qs, pos, a, arg, scale, qs, a + 1, arg, scale, qs, a + 2, arg, scale, gs,
           a + 3, arg, scale, gs, a, a + 1, a + 2, a + 3);
  check(text, NULL, 0, NULL, tol);
}

static void check_attention(const char *dt, int rank, const int64_t *dims, int64_t kv, double tol) {
  check_attention_at(dt, rank, dims, kv, 0, 0, tol);
}

/* attention and attention_grad on bf16 (their kernels: f32 inside, each result rounded once),
 * causal and not, with a batch of problems, H = 4 and 8. */
static void test_attention(void) {
  check_attention("bf16", 3, (int64_t[]){2, 5, 4}, 0, BF16_TOL);
  check_attention("bf16", 4, (int64_t[]){2, 3, 7, 8}, 0, BF16_TOL);
}

/* The flash-style attention kernels in f32 (emit.c, "fused attention") on shapes that are not
 * multiples of their blocks (32 rows) or tiles: T = 37 (two blocks, the second of 5 rows), odd
 * head sizes (5, 3), H = 100 (tiles of 30 keys, not aligned to the blocks), T = 70 (three
 * blocks, causal blocks reading different key counts); causal and not; and grouped-query
 * attention reading the key heads themselves: 1 key/value head for 3 query heads, and 2 for 6
 * (the backward's dk and dv summed over each group of 3 query heads). The last three cases also
 * run the tensor-core body (3xTF32: heads padded to a multiple of 8, H = 100 in 13 steps;
 * T = 70 in two blocks of 64 and three tiles of 32; grouped-query), emulated, within the same
 * tolerance: every launch of their two attention and two attention_grad ops runs it. */
#define ATT_TOL 1e-4 /* f32 sums in another order than the interpreter's double: 3e-7 seen */
static void test_attention_f32(void) {
  att_no_mma = true; /* PoCL compiles an emulated body for half a minute: three cases have it */
  check_attention("f32", 4, (int64_t[]){2, 3, 37, 5}, 0, ATT_TOL);
  att_no_mma = false;
  int before = mma_launches;
  check_attention("f32", 4, (int64_t[]){1, 2, 37, 100}, 0, ATT_TOL);
  check_attention("f32", 4, (int64_t[]){2, 3, 70, 3}, 1, ATT_TOL);
  check_attention("f32", 4, (int64_t[]){1, 6, 37, 5}, 2, ATT_TOL);
#ifndef OCL_CHECK_ONLY
  CU_ASSERT_EQUAL(mma_launches - before, 3 * 8);
#else
  (void)before;
#endif
}

/* The same kernels in bf16 past one block: T = 37, an odd head size; grouped-query, 2 key
 * heads for 4 query heads. */
static void test_attention_bf16_blocks(void) {
  check_attention("bf16", 3, (int64_t[]){2, 37, 7}, 0, BF16_TOL);
  check_attention("bf16", 4, (int64_t[]){1, 4, 37, 7}, 2, BF16_TOL);
}

/* The bf16 kernels' tensor-core body (emit.c, "fused attention on the tensor cores"), which
 * the AX_MMA=2 build runs through the emulated mma step, on shapes that are not multiples of
 * its blocks (64 rows, 16 a warp), tiles (32 rows) or k-steps (16 of the head): T = 70 (two
 * blocks, the second of 6 rows; three tiles, the last of 6), heads of 20 (padded to 32: two
 * k-steps, four column tiles), 64 and 128 (the largest it takes); grouped-query with two key
 * heads for four query heads; and tiny-lm's shape (T = 32, a block of 64 mostly past T, heads
 * of 16). Each case's kernels (two forward, two attention_grad of three launches each) must
 * have run their tensor-core body. */
static void test_attention_mma_bf16(void) {
  static const struct {
    int rank;
    int64_t dims[4], kv;
  } cases[] = {
      {4, {4, 4, 32, 16}, 0},
      {4, {1, 2, 70, 20}, 0},
      {4, {1, 4, 70, 64}, 2},
      {3, {1, 67, 128}, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int before = mma_launches;
    check_attention("bf16", cases[i].rank, cases[i].dims, cases[i].kv, BF16_TOL);
#ifndef OCL_CHECK_ONLY
    CU_ASSERT_EQUAL(mma_launches - before, 8);
#else
    (void)before;
#endif
  }
}

/* Query positions (a device's chunk of a split sequence): q and dout with fewer rows than k and
 * v, the causal mask at the queries' positions, dq's rows past the queries zero. f32: 30
 * queries at 20..49 of 70 keys (the middle chunk: keys past 49 seen by none, so dk and dv are 0
 * there), and grouped-query, 23 at 47..69 (the last); bf16 with heads of 20, 35 at 35..69, and
 * grouped-query, 24 at 0..23 of 48 (the first). The SIMT, AXLC_CPU_REDUCE and emulated
 * tensor-core bodies, each launch of the four ops on the tensor-core body. */
static void test_attention_positions(void) {
  int before = mma_launches;
  check_attention_at("f32", 4, (int64_t[]){1, 2, 30, 5}, 0, 70, 20, ATT_TOL);
  check_attention_at("f32", 4, (int64_t[]){1, 4, 23, 3}, 2, 70, 47, ATT_TOL);
  check_attention_at("bf16", 4, (int64_t[]){1, 2, 35, 20}, 0, 70, 35, BF16_TOL);
  check_attention_at("bf16", 4, (int64_t[]){2, 4, 24, 16}, 2, 48, 0, BF16_TOL);
#ifndef OCL_CHECK_ONLY
  CU_ASSERT_EQUAL(mma_launches - before, 4 * 8);
#else
  (void)before;
#endif
}

/* A whole training step in bf16 with f32 masters: the parameters cast to bf16 where the
 * forward reads them (an embedding gather, a projection, causal attention, a residual add, the
 * output projection keeping its f32 accumulator), an f32 cross-entropy; then autodiff (the
 * gradients come back to f32 through the casts; the embedding's through a bf16 scatter_add)
 * and AdamW. Every output: the loss, the gradient norm, the new parameters and moments. The
 * bf16 roundings compound over the step, so the tolerance is an ulp wider. */
static void test_train_step(void) {
  static const char *const text =
      "%0 = input \"ids\" : i32[2,6]\n"
      "%1 = input \"targets\" : i32[2,6]\n"
      "%2 = parameter \"emb\" : f32[16,8]\n"
      "%3 = parameter \"wq\" : f32[8,8]\n"
      "%4 = parameter \"wo\" : f32[8,16]\n"
      "%5 = cast %2 : bf16[16,8]\n"
      "%6 = gather %5, %0 : bf16[2,6,8]\n"
      "%7 = cast %3 : bf16[8,8]\n"
      "%8 = dot_general %6, %7 lhs_contract=[2] rhs_contract=[0] : bf16[2,6,8]\n"
      "%9 = attention %8, %6, %6 causal=1 scale=0.35355339059327373 : bf16[2,6,8]\n"
      "%10 = add %9, %6 : bf16[2,6,8]\n"
      "%11 = cast %4 : bf16[8,16]\n"
      "%12 = dot_general %10, %11 lhs_contract=[2] rhs_contract=[0] : bf16[2,6,16]\n"
      "%13 = cast %12 : f32[2,6,16]\n"
      "%14 = reduce_max %13 axes=[2] : f32[2,6]\n"
      "%15 = broadcast_in_dim %14 bdims=[0,1] : f32[2,6,16]\n"
      "%16 = sub %13, %15 : f32[2,6,16]\n"
      "%17 = exp %16 : f32[2,6,16]\n"
      "%18 = reduce_sum %17 axes=[2] : f32[2,6]\n"
      "%19 = log %18 : f32[2,6]\n"
      "%20 = iota axis=2 : i32[2,6,16]\n"
      "%21 = broadcast_in_dim %1 bdims=[0,1] : i32[2,6,16]\n"
      "%22 = eq %20, %21 : i32[2,6,16]\n"
      "%23 = cast %22 : f32[2,6,16]\n"
      "%24 = mul %16, %23 : f32[2,6,16]\n"
      "%25 = reduce_sum %24 axes=[2] : f32[2,6]\n"
      "%26 = sub %19, %25 : f32[2,6]\n"
      "%27 = reduce_sum %26 axes=[0,1] : f32[]\n"
      "%28 = constant value=0.083333333333333329 : f32[]\n"
      "%29 = mul %27, %28 : f32[]\n"
      "output \"loss\" = %29\n";
  char msg[1024] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  PassLearner learner = {.learning_rate = 0.01,
                         .b1 = 0.9,
                         .b2 = 0.99,
                         .eps = 1e-8,
                         .weight_decay = 0.1,
                         .max_grad_norm = 1.0};
  PassOptions po = {.learner = &learner};
  CU_ASSERT_EQUAL_FATAL(pass_autodiff(g, &po), IR_OK);
  CU_ASSERT_EQUAL_FATAL(pass_optimizer(g, &po), IR_OK);
  char *full = ir_graph_to_string(g);
  ir_graph_free(g);
  static double pos[128], step[1] = {3};
  for (int i = 0; i < 128; i++) pos[i] = 0.01 + 0.001 * (i % 17);
  Bind b[] = {{"opt/v/emb", pos}, {"opt/v/wq", pos}, {"opt/v/wo", pos}, {"step", step}};
  check(full, b, 4, NULL, 2 * BF16_TOL);
  free(full);
}

/* bf16 scatter_add in parallel (emit.c, scatter_kernel): 40 rows of 3 in 14 blocks of 3 rows,
 * ten indices with repeats (row 5 three times: 256 + 0.75 + 0.75 is 258 rounded once, 256 if
 * each addition rounded; 39 twice), and rows named by no index: bit for bit the interpreter's,
 * on 14 x 3 work items (one column each when it ran serially). */
static void test_scatter_bf16_blocks(void) {
  static const double idx[10] = {5, 1, 39, 5, 38, 12, 5, 0, 39, 20};
  static double u[10 * 3];
  for (int i = 0; i < 30; i++) u[i] = 0.25 * (i % 7) - 0.5;
  u[0] = 256, u[9] = 0.75, u[18] = 0.75;
  Bind b[] = {{"idx", idx}, {"u", u}};
  const char *text = "%0 = input \"idx\" : i32[10]\n"
                     "%1 = parameter \"u\" : bf16[10,3]\n"
                     "%2 = scatter_add %0, %1 rows=40 : bf16[40,3]\n"
                     "output \"scatter\" = %2\n";
  char msg[1024] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  bool *mat = malloc((size_t)g->nvalues + 1);
  CU_ASSERT_EQUAL_FATAL(pass_fusion_plan(g, mat), 0);
  MemPlan mp;
  CU_ASSERT_EQUAL_FATAL(pass_memplan_fused(g, mat, &mp), IR_OK);
  OclOptions o = ocl_options_default();
  OclKernels k;
  char err[4096];
  CU_ASSERT_EQUAL_FATAL(ocl_emit(g, &mp, mat, &o, &k, err, sizeof err), 0);
  int64_t items = 0;
  for (int32_t i = 0; i < k.nlaunches; i++)
    if (!strcmp(strchr(k.launches[i].kernel, '_'), "_scatter_add")) items = k.launches[i].global[0];
  CU_ASSERT_EQUAL(items, 42);
  ocl_kernels_free(&k);
  pass_memplan_free(&mp);
  free(mat);
  ir_graph_free(g);
  check(text, b, 2, "scatter", BF16_TOL);
}

/* bf16 sums rounded once from the double accumulator: 1 + 2^-8 + 2^-40 is 1 + 2^-7 in bf16, but 1
 * through an f32 (1 + 2^-8, a tie, to even). The one-item, work-group and multi-tensor sums. */
static void test_bf16_round_once(void) {
  static double x[3 * 40];
  for (int r = 0; r < 3; r++) x[r * 40] = 1, x[r * 40 + 1] = 0x1p-8, x[r * 40 + 2 + r] = 0x1p-40;
  Bind b[] = {{"x", x}, {"y", x}, {"z", x + 40}};
  check("%0 = parameter \"x\" : bf16[3,40]\n"
        "%1 = reduce_sum %0 axes=[1] : bf16[3]\n"
        "%2 = slice %0 start=[0,0] limit=[1,3] : bf16[1,3]\n"
        "%3 = reduce_sum %2 axes=[0,1] : bf16[]\n"
        "%4 = parameter \"y\" : bf16[40]\n"
        "%5 = reduce_sum %4 axes=[0] : bf16[]\n"
        "%6 = parameter \"z\" : bf16[40]\n"
        "%7 = reduce_sum %6 axes=[0] : bf16[]\n"
        "output \"rows\" = %1\n"
        "output \"three\" = %3\n"
        "output \"y\" = %5\n"
        "output \"z\" = %7\n",
        b, 3, "rows three y z", 0);
}

/* bf16 ops rounded once from double, as the interpreter: pow(2.84375, 0.291015625) is just
 * below a bf16 tie, and a correctly rounded f32 is the tie, which rounds to even, up; logistic
 * of -89 and -90.5 in f32 overflows exp(89) and gives 0, not the bf16 subnormals 2.2e-39 and
 * 4.6e-40. The others are within an f32 ulp or two of a tie (log, logistic, exp): an f32 a little
 * less accurate than the device's rounds them the wrong way. Bit for bit, fused and not. */
static void test_bf16_round_once_ops(void) {
  static const double x[8] = {2.0469737016526324e-16, /* log: -36.124999028571 */
                              0.0078125,              /* logistic: 0.501953115065953 */
                              0.2275390625,           /* logistic: 0.556640600249925 */
                              -89,                    /* logistic: 2.2e-39 */
                              -90.5,                  /* logistic: 4.6e-40 */
                              6.84375,                /* exp: 938.000047832163 */
                              2.84375,                /* pow(x, y): 1.3515625 */
                              -0.224609375};          /* exp: 0.798828200087216 */
  static const double y[8] = {3, 7, 1.5, 9, 11, 13, 0.291015625, 0.1};
  Bind b[] = {{"x", x}, {"y", y}};
  check("%0 = parameter \"x\" : bf16[8]\n"
        "%1 = parameter \"y\" : bf16[8]\n"
        "%2 = abs %0 : bf16[8]\n"
        "%3 = log %2 : bf16[8]\n"
        "%4 = logistic %0 : bf16[8]\n"
        "%5 = exp %0 : bf16[8]\n"
        "%6 = div %0, %1 : bf16[8]\n"
        "%7 = sqrt %2 : bf16[8]\n"
        "%8 = exp %6 : bf16[8]\n"
        "%9 = pow %2, %1 : bf16[8]\n"
        "output \"pow\" = %9\n"
        "output \"log\" = %3\n"
        "output \"logistic\" = %4\n"
        "output \"exp\" = %5\n"
        "output \"div\" = %6\n"
        "output \"sqrt\" = %7\n"
        "output \"exp_div\" = %8\n",
        b, 2, "log logistic exp div sqrt exp_div pow", 0);
}

/* The optimizer's multi-tensor launches (emit.c): ten parameters of sizes that are no multiple of
 * a work-group (3 to 1203 elements), the gradient norm's sums of squares and AdamW's update
 * against the interpreter, and the launch count: the sums are one pair of launches and the
 * update one launch for all ten, where a launch per value makes dozens. */
static void test_optimizer_multi(void) {
  enum { NP = 10 };
  static const int sizes[NP] = {3, 37, 255, 257, 1203, 91, 5, 640, 129, 17};
  char text[8192];
  size_t n = 0;
  for (int i = 0; i < NP; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "%%%d = parameter \"p%d\" : f32[%d]\n", i, i,
                          sizes[i]);
  int v = NP; /* loss = sum_i (i + 1) * sum(p_i * p_i) */
  for (int i = 0; i < NP; i++) {
    n += (size_t)snprintf(
        text + n, sizeof text - n,
        "%%%d = mul %%%d, %%%d : f32[%d]\n%%%d = reduce_sum %%%d axes=[0] : f32[]\n"
        "%%%d = constant value=%d : f32[]\n%%%d = mul %%%d, %%%d : f32[]\n",
        v, i, i, sizes[i], v + 1, v, v + 2, i + 1, v + 3, v + 1, v + 2);
    if (i > 0)
      n += (size_t)snprintf(text + n, sizeof text - n, "%%%d = add %%%d, %%%d : f32[]\n", v + 4,
                            v + 3, i == 1 ? NP + 3 : v - 1);
    v += i > 0 ? 5 : 4;
  }
  snprintf(text + n, sizeof text - n, "output \"loss\" = %%%d\n", v - 1);
  char msg[1024] = "";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  PassLearner learner = {.learning_rate = 0.01,
                         .b1 = 0.9,
                         .b2 = 0.99,
                         .eps = 1e-8,
                         .weight_decay = 0.1,
                         .max_grad_norm = 1.0};
  PassOptions po = {.learner = &learner};
  CU_ASSERT_EQUAL_FATAL(pass_autodiff(g, &po), IR_OK);
  CU_ASSERT_EQUAL_FATAL(pass_optimizer(g, &po), IR_OK);
  int counts[2][3] = {{0}}; /* [multi][sums, updates, all] */
  bool whole = false;
  for (int multi = 0; multi < 2; multi++) {
    bool *mat = malloc((size_t)g->nvalues + 1);
    CU_ASSERT_EQUAL_FATAL(pass_fusion_plan(g, mat), 0);
    MemPlan mp;
    CU_ASSERT_EQUAL_FATAL(pass_memplan_fused(g, mat, &mp), IR_OK);
    OclOptions o = ocl_options_default();
    o.multi = multi;
    OclKernels k;
    char err[4096];
    CU_ASSERT_EQUAL_FATAL(ocl_emit(g, &mp, mat, &o, &k, err, sizeof err), 0);
    for (int32_t i = 0; i < k.nlaunches; i++) {
      counts[multi][0] += strstr(k.launches[i].kernel, "_multi_sum_") != NULL;
      counts[multi][1] += strstr(k.launches[i].kernel, "_multi_sum_") == NULL &&
                          strstr(k.launches[i].kernel, "_multi") != NULL;
      whole |= multi && k.launches[i].global[0] == 2637; /* every parameter's update */
    }
    counts[multi][2] = k.nlaunches;
    ocl_kernels_free(&k);
    pass_memplan_free(&mp);
    free(mat);
  }
  printf(
      "\n  launches: %d with a launch per value, %d multi-tensor (%d for the sums, %d updates)\n",
      counts[0][2], counts[1][2], counts[1][0], counts[1][1]);
  CU_ASSERT_EQUAL(counts[0][0] + counts[0][1], 0);
  /* the loss's ten sums and the gradient norm's ten: each chunks, then each sum */
  CU_ASSERT_EQUAL(counts[1][0], 4);
  /* the loss's scalars, the step's (lr, clip), then every update in one */
  CU_ASSERT_EQUAL(counts[1][1], 3);
  CU_ASSERT(whole);
  CU_ASSERT(counts[1][2] <= counts[0][2] - 3 * NP);
  char *full = ir_graph_to_string(g);
  ir_graph_free(g);
  static double pos[1203], step[1] = {3};
  for (int i = 0; i < 1203; i++) pos[i] = 0.01 + 0.001 * (i % 17);
  Bind b[NP + 1] = {{"step", step}};
  static char names[NP][32];
  for (int i = 0; i < NP; i++) {
    snprintf(names[i], sizeof names[i], "opt/v/p%d", i);
    b[i + 1] = (Bind){names[i], pos};
  }
  check(full, b, NP + 1, NULL, 1e-6);
  free(full);
}

int main(int argc, char **argv) {
#ifndef OCL_CHECK_ONLY
  if (device_open() != 0) {
    printf("SKIP: no OpenCL device\n");
    return 77;
  }
#endif
  static const TestCase cases[] = {
      {"elementwise", test_elementwise},
      {"casts", test_casts},
      {"reductions", test_reductions},
      {"reductions_parallel_f32", test_reductions_parallel_f32},
      {"reductions_parallel_bf16", test_reductions_parallel_bf16},
      {"scatter_f32", test_scatter_f32},
      {"dot", test_dot},
      {"dot_mma_bf16", test_dot_mma_bf16},
      {"dot_tf32", test_dot_tf32},
      {"gather_scatter", test_gather_scatter},
      {"movement", test_movement},
      {"attention", test_attention},
      {"attention_f32", test_attention_f32},
      {"attention_bf16_blocks", test_attention_bf16_blocks},
      {"attention_mma_bf16", test_attention_mma_bf16},
      {"attention_positions", test_attention_positions},
      {"train_step", test_train_step},
      {"optimizer_multi", test_optimizer_multi},
      {"scatter_bf16_blocks", test_scatter_bf16_blocks},
      {"bf16_round_once", test_bf16_round_once},
      {"bf16_round_once_ops", test_bf16_round_once_ops},
      {NULL, NULL},
  };
  int rc = test_main(argc, argv, "opencl_ops", cases);
  if (queue) clReleaseCommandQueue(queue);
  if (ctx) clReleaseContext(ctx);
  return rc;
}
