/* gemm.c: matrix products as a tiled GEMM kernel.
 *
 * Applies to f32 dot_general whose batch dims lead in order on both sides and whose
 * contracting dims are consecutive, right after the batch dims or at the end (the LLVM
 * backend's BLAS rule, backends/llvm/blas.c): per batch element the lhs is an (M, K) or
 * (K, M) matrix and the rhs a (K, N) or (N, K) one, read through strides, so transposed
 * operands cost nothing extra. The result is (M, N) row-major per batch element.
 *
 * Two kernels (docs/bench.md compares them with OpenBLAS and CLBlast): register-blocked, each
 * work item a 4 x 4 block of C in float4 registers (the default: the fastest on PoCL), and
 * tiled, TS x TS work-groups staging tiles of A and B in local memory (the usual GPU shape;
 * AXLC_OPENCL_GEMM=tiled). Both sum in f32 in K order (OpenBLAS sums in f32 too, in its own
 * order).
 *
 * bf16 operands (emit.c's bf16 helpers): the same kernels over ushort tensors, each element
 * widened as it is loaded, the sum in f32; the result is f32 (the accumulator kept) or bf16
 * (each element rounded once as it is stored), as the value's dtype says.
 */
#include <assert.h>
#include <limits.h>

#include "backends/opencl/opencl.h"

enum { TS = 16 };

typedef struct Layout {
  bool bf16_in, bf16_out; /* operands, result bf16 */
  int64_t batch, m, n, k;
  int64_t sa, sam, sak; /* lhs: batch stride, m stride, k stride (elements) */
  int64_t sb, sbk, sbn; /* rhs */
} Layout;

/* The strides of v's product, when it has sgemm's layout (ir_dot_sgemm) and fits this
 * kernel's int indices (m and n below INT_MAX / 2). */
static bool layout(const IrGraph *g, int32_t v, Layout *L) {
  const IrValue *x = &g->values[v];
  IrGemm G;
  bool bf16_in = g->values[x->ops[0]].dtype == DT_BF16; /* the layout rule is f32's */
  if (!ir_dot_sgemm(bf16_in ? DT_F32 : x->dtype, &g->values[x->ops[0]].shape,
                    &g->values[x->ops[1]].shape, &x->attr, &G))
    return false;
  *L = (Layout){.bf16_in = bf16_in,
                .bf16_out = x->dtype == DT_BF16,
                .batch = G.batch,
                .m = G.m,
                .n = G.n,
                .k = G.k};
  L->sa = L->m * L->k;
  L->sb = L->n * L->k;
  /* lhs (M, K): m stride K, k stride 1; (K, M): m stride 1, k stride M */
  L->sam = G.ta ? 1 : L->k;
  L->sak = G.ta ? L->m : 1;
  /* rhs (K, N): k stride N, n stride 1; (N, K): k stride 1, n stride K */
  L->sbk = G.tb ? 1 : L->n;
  L->sbn = G.tb ? L->k : 1;
  return L->m < INT_MAX / 2 && L->n < INT_MAX / 2 && L->batch < INT_MAX;
}

bool ocl_gemm_ok(const IrGraph *g, int32_t v) {
  Layout L;
  return g->values[v].op == IR_DOT && layout(g, v, &L);
}

/* One tiled GEMM routine: `name` over A and B of storage type `in` and C of type `out`; load
 * and store wrap each element read from A or B and written to C (empty for f32). */
static void gemm_routine(OclBuf *b, const char *name, const char *in, const char *out,
                         const char *load, const char *store) {
  const char *close_l = *load ? ")" : "", *close_s = *store ? ")" : "";
  ocl_buf_printf(
      b,
      "void %s(__global const %s *A, __global const %s *B, __global %s *C, int M, int N,\n"
      "             int K, long sam, long sak, long sbk, long sbn, __local float *As, __local "
      "float *Bs) {\n"
      "  int tn = get_local_id(0), tm = get_local_id(1);\n"
      "  int n = get_group_id(0) * AX_TS + tn, m = get_group_id(1) * AX_TS + tm;\n"
      "  float acc = 0.0f;\n"
      "  for (int k0 = 0; k0 < K; k0 += AX_TS) {\n"
      "    int ka = k0 + tn, kb = k0 + tm;\n"
      "    As[tm * AX_TS + tn] = m < M && ka < K ? %sA[m * sam + ka * sak]%s : 0.0f;\n"
      "    Bs[tm * AX_TS + tn] = kb < K && n < N ? %sB[kb * sbk + n * sbn]%s : 0.0f;\n"
      "    barrier(CLK_LOCAL_MEM_FENCE);\n"
      "    for (int k = 0; k < AX_TS; k++) acc += As[tm * AX_TS + k] * Bs[k * AX_TS + tn];\n"
      "    barrier(CLK_LOCAL_MEM_FENCE);\n"
      "  }\n"
      "  if (m < M && n < N) C[(long)m * N + n] = %sacc%s;\n"
      "}\n\n",
      name, in, in, out, load, close_l, load, close_l, store, close_s);
}

void ocl_gemm_prelude(OclBuf *b, bool bf16) {
  ocl_buf_printf(
      b,
      "#define AX_TS %d\n"
      "/* C (M, N) = A . B, A(m, k) at A[m*sam + k*sak], B(k, n) at B[k*sbk + n*sbn]; one element\n"
      " * per work item, TS x TS tiles of A and B staged in local memory. */\n",
      TS);
  gemm_routine(b, "ax_gemm", "float", "float", "", "");
  if (!bf16) return;
  /* bf16 operands: C f32 (the accumulator) or bf16 (rounded once) */
  gemm_routine(b, "ax_gemm_hf", "ushort", "float", "ax_from_bf16(", "");
  gemm_routine(b, "ax_gemm_hh", "ushort", "ushort", "ax_from_bf16(", "ax_to_bf16(");
}

static int64_t round_up(int64_t x) { return (x + TS - 1) / TS * TS; }

/* The tiled kernel: TS x TS work-groups staging tiles in local memory (GPUs). */
static void tiled_kernel(OclBuf *b, const char *const r[3], const Layout *L, RtOclLaunch *R,
                         const char **attrs) {
  ocl_buf_printf(
      b,
      "  __local float As[AX_TS * AX_TS], Bs[AX_TS * AX_TS];\n"
      "  long bt = get_global_id(2);\n"
      "  ax_gemm%s(%s + bt * %lldL, %s + bt * %lldL, %s + bt * %lldL, %lld, %lld, %lld,\n"
      "          %lldL, %lldL, %lldL, %lldL, As, Bs);\n",
      !L->bf16_in   ? ""
      : L->bf16_out ? "_hh"
                    : "_hf",
      r[0], (long long)L->sa, r[1], (long long)L->sb, r[2], (long long)(L->m * L->n),
      (long long)L->m, (long long)L->n, (long long)L->k, (long long)L->sam, (long long)L->sak,
      (long long)L->sbk, (long long)L->sbn);
  *R = (RtOclLaunch){
      .dims = 3, .global = {round_up(L->n), round_up(L->m), L->batch}, .local = {TS, TS, 1}};
  *attrs = "__attribute__((reqd_work_group_size(AX_TS, AX_TS, 1))) ";
}

/* The register-blocked kernel: work item (i, j) computes the RB x RB block of C at rows
 * RB*j.., columns RB*i.., in float4 registers, the sizes folded in: per k, one float4 of B
 * (vload4 where B's rows are contiguous and N a multiple of RB) and RB scalars of A. Rows and
 * columns past the edges are clamped on load and skipped on store. */
enum { RB = 4 };
static void blocked_kernel(OclBuf *b, const char *const r[3], const Layout *L, RtOclLaunch *R) {
  bool vec = L->sbn == 1 && L->n % RB == 0;
  /* bf16: ushort tensors, elements widened as loaded and rounded as stored */
  const char *in = L->bf16_in ? "ushort" : "float", *out = L->bf16_out ? "ushort" : "float";
  const char *ld = L->bf16_in ? "ax_from_bf16(" : "", *ldc = L->bf16_in ? ")" : "";
  const char *st = L->bf16_out ? "ax_to_bf16(" : "", *stc = L->bf16_out ? ")" : "";
  ocl_buf_printf(
      b,
      "  long n0 = get_global_id(0) * 4, m0 = get_global_id(1) * 4, bt = get_global_id(2);\n"
      "  if (n0 >= %lldL || m0 >= %lldL) return;\n"
      "  __global const %s *A = %s + bt * %lldL, *B = %s + bt * %lldL;\n"
      "  __global %s *C = %s + bt * %lldL;\n"
      "  long r1 = min(m0 + 1, %lldL) * %lldL, r2 = min(m0 + 2, %lldL) * %lldL, r3 = min(m0 + 3, "
      "%lldL) * %lldL;\n"
      "  long r0 = m0 * %lldL;\n"
      "  float4 c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;\n"
      "  for (long k = 0; k < %lldL; k++) {\n",
      (long long)L->n, (long long)L->m, in, r[0], (long long)L->sa, r[1], (long long)L->sb, out,
      r[2], (long long)(L->m * L->n), (long long)(L->m - 1), (long long)L->sam,
      (long long)(L->m - 1), (long long)L->sam, (long long)(L->m - 1), (long long)L->sam,
      (long long)L->sam, (long long)L->k);
  if (vec && L->bf16_in)
    ocl_buf_printf(b, "    float4 bk = ax_from_bf16x4(vload4(0, B + k * %lldL + n0));\n",
                   (long long)L->sbk);
  else if (vec)
    ocl_buf_printf(b, "    float4 bk = vload4(0, B + k * %lldL + n0);\n", (long long)L->sbk);
  else
    ocl_buf_printf(
        b,
        "    __global const %s *Bk = B + k * %lldL;\n"
        "    float4 bk = (float4)(%sBk[n0 * %lldL]%s, %sBk[min(n0 + 1, %lldL) * %lldL]%s, "
        "%sBk[min(n0 + 2, %lldL) * %lldL]%s,\n"
        "                         %sBk[min(n0 + 3, %lldL) * %lldL]%s);\n",
        in, (long long)L->sbk, ld, (long long)L->sbn, ldc, ld, (long long)(L->n - 1),
        (long long)L->sbn, ldc, ld, (long long)(L->n - 1), (long long)L->sbn, ldc, ld,
        (long long)(L->n - 1), (long long)L->sbn, ldc);
  ocl_buf_printf(b,
                 "    long ka = k * %lldL;\n"
                 "    c0 += %sA[r0 + ka]%s * bk;\n"
                 "    c1 += %sA[r1 + ka]%s * bk;\n"
                 "    c2 += %sA[r2 + ka]%s * bk;\n"
                 "    c3 += %sA[r3 + ka]%s * bk;\n"
                 "  }\n",
                 (long long)L->sak, ld, ldc, ld, ldc, ld, ldc, ld, ldc);
  const char *st4 = L->bf16_out ? "ax_to_bf16x4(" : "";
  if (vec)
    ocl_buf_printf(b,
                   "  vstore4(%sc0%s, 0, C + m0 * %lldL + n0);\n"
                   "  if (m0 + 1 < %lldL) vstore4(%sc1%s, 0, C + (m0 + 1) * %lldL + n0);\n"
                   "  if (m0 + 2 < %lldL) vstore4(%sc2%s, 0, C + (m0 + 2) * %lldL + n0);\n"
                   "  if (m0 + 3 < %lldL) vstore4(%sc3%s, 0, C + (m0 + 3) * %lldL + n0);\n",
                   st4, stc, (long long)L->n, (long long)L->m, st4, stc, (long long)L->n,
                   (long long)L->m, st4, stc, (long long)L->n, (long long)L->m, st4, stc,
                   (long long)L->n);
  else
    ocl_buf_printf(b,
                   "  float c[4][4] = {{c0.x, c0.y, c0.z, c0.w}, {c1.x, c1.y, c1.z, c1.w}, {c2.x, "
                   "c2.y, c2.z, c2.w},\n"
                   "                   {c3.x, c3.y, c3.z, c3.w}};\n"
                   "  for (int i = 0; i < 4 && m0 + i < %lldL; i++)\n"
                   "    for (int j = 0; j < 4 && n0 + j < %lldL; j++) C[(m0 + i) * %lldL + n0 + j] "
                   "= %sc[i][j]%s;\n",
                   (long long)L->m, (long long)L->n, (long long)L->n, st, stc);
  *R = (RtOclLaunch){.dims = 3, .global = {(L->n + RB - 1) / RB, (L->m + RB - 1) / RB, L->batch}};
}

void ocl_gemm_kernel(OclBuf *b, const IrGraph *g, int32_t v, const char *const refs[3], bool tiled,
                     RtOclLaunch *R, const char **attrs) {
  Layout L = {0};
  bool ok = layout(g, v, &L);
  assert(ok && "the scheduler places only products that ocl_gemm_ok accepts");
  (void)ok;
  *attrs = "";
  if (tiled)
    tiled_kernel(b, refs, &L, R, attrs);
  else
    blocked_kernel(b, refs, &L, R);
}
