/*
 * ocl_gemm.c: matrix product GFLOP/s of the OpenCL backend's GEMM kernels on the first OpenCL
 * device (or --device N), next to OpenBLAS on the host and, when built with it, CLBlast on the
 * same device. The kernels are the backend's own: a graph holding one product is planned and
 * printed by backends/opencl exactly as a model's products are, then timed on the device: f32
 * (blocked, tiled), f32 under matmul tf32 and bf16 operands, each with its SIMT body and its
 * tensor-core body (gemm.c): PTX's mma.sync where the device is NVIDIA's, else the emulation
 * (a correctness path, timed over fewer repetitions); --mma ptx|emulate|off chooses.
 *   usage: ocl_gemm [M N K] [--threads T] [--device N] [--mma ptx|emulate|off]
 * Prints one line per implementation: name, GFLOP/s (best of 10 after a warmup).
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef AXLC_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#include "backends/opencl/opencl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, int e) {
  fprintf(stderr, "ocl_gemm: %s failed (%d)\n", what, e);
  exit(1);
}

typedef struct Dev {
  cl_context ctx;
  cl_command_queue q;
  cl_device_id dev;
  char name[256];
} Dev;

static Dev open_device(int want) {
  cl_platform_id plats[8];
  cl_uint np = 0;
  Dev D = {0};
  if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS || np == 0)
    die("clGetPlatformIDs (no OpenCL platform)", -1);
  int seen = 0;
  for (cl_uint p = 0; p < np; p++) {
    cl_device_id devs[16];
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) continue;
    for (cl_uint d = 0; d < nd; d++, seen++)
      if (seen == want) D.dev = devs[d];
  }
  if (!D.dev) die("finding the device", want);
  cl_int e;
  clGetDeviceInfo(D.dev, CL_DEVICE_NAME, sizeof D.name, D.name, NULL);
  D.ctx = clCreateContext(NULL, 1, &D.dev, NULL, NULL, &e);
  if (e) die("clCreateContext", e);
  D.q = clCreateCommandQueue(D.ctx, D.dev, 0, &e);
  if (e) die("clCreateCommandQueue", e);
  return D;
}

/* What one line times: operands, the matmul policy, the kernel variant, the body (AX_MMA). */
typedef struct Variant {
  IrDType dt;
  bool tf32;
  OclGemm g;
  int mma; /* RtOclMma */
} Variant;

/* The backend's kernels for C (M, N) = A (M, K) . B (K, N) as v says. */
static void backend_kernels(int64_t M, int64_t N, int64_t K, const Variant *v, OclKernels *k,
                            MemPlan *mp) {
  IrGraph *gr = ir_graph_new();
  gr->matmul = v->tf32 ? IR_MATMUL_TF32 : IR_MATMUL_F32;
  int32_t a = ir_param(gr, "a", v->dt, 2, (int64_t[]){M, K});
  int32_t b = ir_param(gr, "b", v->dt, 2, (int64_t[]){K, N});
  ir_graph_add_output(gr, "c", ir_matmul(gr, a, b));
  bool *mat = calloc((size_t)gr->nvalues, 1);
  pass_fusion_plan(gr, mat);
  char err[512];
  if (pass_memplan_fused(gr, mat, mp) != IR_OK) die("pass_memplan_fused", 0);
  OclOptions o = ocl_options_default();
  o.gemm = v->g;
  if (ocl_emit(gr, mp, mat, &o, k, err, sizeof err)) {
    fprintf(stderr, "ocl_gemm: %s\n", err);
    exit(1);
  }
  free(mat);
  ir_graph_free(gr);
}

/* Best GFLOP/s of the backend's launches over a slab. */
static double time_backend(Dev *D, int64_t M, int64_t N, int64_t K, Variant v) {
  OclKernels k;
  MemPlan mp;
  backend_kernels(M, N, K, &v, &k, &mp);
  cl_int e;
  const char *src = k.source;
  cl_program prog = clCreateProgramWithSource(D->ctx, 1, &src, NULL, &e);
  char options[64];
  snprintf(options, sizeof options, "-cl-std=CL1.2%s%d", v.mma ? " -DAX_MMA=" : "", v.mma);
  if (!v.mma) options[strlen("-cl-std=CL1.2")] = 0;
  if (e || clBuildProgram(prog, 1, &D->dev, options, NULL, NULL)) die("building the kernels", e);
  cl_mem slab = clCreateBuffer(D->ctx, CL_MEM_READ_WRITE, (size_t)mp.slab_bytes, NULL, &e);
  if (e) die("clCreateBuffer", e);
  cl_kernel *kern = calloc((size_t)k.nlaunches, sizeof *kern);
  for (int32_t i = 0; i < k.nlaunches; i++) {
    kern[i] = clCreateKernel(prog, k.launches[i].kernel, &e);
    if (e) die("clCreateKernel", e);
    for (int32_t a = 0; a < k.launches[i].nargs; a++) { /* each tensor: its buffer, offset */
      cl_long off = k.launches[i].args[a];
      clSetKernelArg(kern[i], (cl_uint)(2 * a), sizeof slab, &slab);
      clSetKernelArg(kern[i], (cl_uint)(2 * a + 1), sizeof off, &off);
    }
  }
  double best = 0;
  int reps = v.mma == RT_OCL_MMA_EMULATE ? 3 : 11; /* the emulation is slow by design */
  for (int rep = 0; rep < reps; rep++) {
    double t0 = now();
    for (int32_t i = 0; i < k.nlaunches; i++) {
      const RtOclLaunch *L = &k.launches[i];
      bool body = v.mma && L->mma_local[0] > 0; /* as runtime/opencl.c launches */
      const int64_t *G = body ? L->mma_global : L->global, *W = body ? L->mma_local : L->local;
      size_t gl[3] = {(size_t)G[0], (size_t)G[1], (size_t)G[2]};
      size_t lo[3] = {(size_t)W[0], (size_t)W[1], (size_t)W[2]};
      e = clEnqueueNDRangeKernel(D->q, kern[i], (cl_uint)L->dims, NULL, gl, W[0] ? lo : NULL, 0,
                                 NULL, NULL);
      if (e) die("clEnqueueNDRangeKernel", e);
    }
    clFinish(D->q);
    double gf = 2.0 * (double)M * (double)N * (double)K / (now() - t0) / 1e9;
    if (rep > 0 && gf > best) best = gf; /* rep 0 warms up (PoCL compiles at first launch) */
  }
  for (int32_t i = 0; i < k.nlaunches; i++) clReleaseKernel(kern[i]);
  free(kern);
  clReleaseMemObject(slab);
  clReleaseProgram(prog);
  ocl_kernels_free(&k);
  pass_memplan_free(&mp);
  return best;
}

static double time_openblas(int64_t M, int64_t N, int64_t K) {
  float *a = calloc((size_t)(M * K), 4), *b = calloc((size_t)(K * N), 4),
        *c = calloc((size_t)(M * N), 4);
  double best = 0;
  for (int rep = 0; rep < 11; rep++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, a, (int)K,
                b, (int)N, 0.0f, c, (int)N);
    double gf = 2.0 * (double)M * (double)N * (double)K / (now() - t0) / 1e9;
    if (rep > 0 && gf > best) best = gf;
  }
  free(a);
  free(b);
  free(c);
  return best;
}

#ifdef AXLC_HAVE_CLBLAST
static double time_clblast(Dev *D, int64_t M, int64_t N, int64_t K) {
  cl_int e;
  cl_mem a = clCreateBuffer(D->ctx, CL_MEM_READ_WRITE, (size_t)(M * K * 4), NULL, &e);
  cl_mem b = clCreateBuffer(D->ctx, CL_MEM_READ_WRITE, (size_t)(K * N * 4), NULL, &e);
  cl_mem c = clCreateBuffer(D->ctx, CL_MEM_READ_WRITE, (size_t)(M * N * 4), NULL, &e);
  double best = 0;
  for (int rep = 0; rep < 11; rep++) {
    double t0 = now();
    CLBlastStatusCode s = CLBlastSgemm(
        CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, (size_t)M, (size_t)N,
        (size_t)K, 1.0f, a, 0, (size_t)K, b, 0, (size_t)N, 0.0f, c, 0, (size_t)N, &D->q, NULL);
    if (s != CLBlastSuccess) die("CLBlastSgemm", s);
    clFinish(D->q);
    double gf = 2.0 * (double)M * (double)N * (double)K / (now() - t0) / 1e9;
    if (rep > 0 && gf > best) best = gf;
  }
  clReleaseMemObject(a);
  clReleaseMemObject(b);
  clReleaseMemObject(c);
  return best;
}
#endif

int main(int argc, char **argv) {
  int64_t dims[3] = {512, 512, 512};
  int nd = 0, threads = 2, device = 0;
  const char *mma = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mma") && i + 1 < argc)
      mma = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--device") && i + 1 < argc)
      device = atoi(argv[++i]);
    else if (nd < 3 && atoll(argv[i]) > 0)
      dims[nd++] = atoll(argv[i]);
    else {
      fprintf(stderr,
              "usage: ocl_gemm [M N K] [--threads T] [--device N] [--mma ptx|emulate|off]\n");
      return 1;
    }
  }
  int64_t M = dims[0], N = dims[1], K = dims[2];
  openblas_set_num_threads(threads);
  Dev D = open_device(device);
  printf("%lld x %lld x %lld on %s\n", (long long)M, (long long)N, (long long)K, D.name);
  printf("openblas_%dthreads %.2f\n", threads, time_openblas(M, N, K));
  /* the tensor-core body: PTX on NVIDIA's devices (the runtime's capability table also asks
   * for compute capability 8.0), else the emulation */
  char vendor[256] = "";
  clGetDeviceInfo(D.dev, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
  int body = !mma ? (strstr(vendor, "NVIDIA") ? RT_OCL_MMA_PTX : RT_OCL_MMA_EMULATE)
             : !strcmp(mma, "ptx")     ? RT_OCL_MMA_PTX
             : !strcmp(mma, "emulate") ? RT_OCL_MMA_EMULATE
                                       : RT_OCL_MMA_OFF;
  const char *bname = body == RT_OCL_MMA_PTX ? "ptx" : "emulated";
  printf("axlc_opencl_blocked %.2f\n",
         time_backend(&D, M, N, K, (Variant){DT_F32, false, OCL_GEMM_BLOCKED, 0}));
  printf("axlc_opencl_tiled %.2f\n",
         time_backend(&D, M, N, K, (Variant){DT_F32, false, OCL_GEMM_TILED, 0}));
  printf("axlc_opencl_tf32_blocked %.2f\n",
         time_backend(&D, M, N, K, (Variant){DT_F32, true, OCL_GEMM_BLOCKED, 0}));
  if (body)
    printf("axlc_opencl_tf32_mma_%s %.2f\n", bname,
           time_backend(&D, M, N, K, (Variant){DT_F32, true, OCL_GEMM_BLOCKED, body}));
  printf("axlc_opencl_bf16_blocked %.2f\n",
         time_backend(&D, M, N, K, (Variant){DT_BF16, false, OCL_GEMM_BLOCKED, 0}));
  if (body)
    printf("axlc_opencl_bf16_mma_%s %.2f\n", bname,
           time_backend(&D, M, N, K, (Variant){DT_BF16, false, OCL_GEMM_BLOCKED, body}));
#ifdef AXLC_HAVE_CLBLAST
  printf("clblast %.2f\n", time_clblast(&D, M, N, K));
#endif
  clReleaseCommandQueue(D.q);
  clReleaseContext(D.ctx);
  return 0;
}
