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
 * (each element rounded once as it is stored), as the value's dtype says. Under the graph's
 * `matmul tf32` policy every kernel rounds f32 operands to TF32 as it loads them (ax_tf32, the
 * interpreter's ir_tf32_round), so every device computes what the oracle does.
 *
 * Tensor-core body. A product with bf16 operands, or f32 ones under `matmul tf32`, has a second
 * body in the same kernel, compiled where the runtime builds with -DAX_MMA (RtOclMma, chosen per
 * device by runtime/opencl.c's capability table): work-groups of 4 warps (32 x 4 items) each
 * compute a BM x BN = 64 x 64 block of C, staging BK = 32 columns of A and rows of B in local
 * memory per step, zero past the edges (so any M, N, K), in either operand layout, read in the
 * order that keeps neighbouring items on neighbouring addresses. Each warp computes a 32 x 32
 * quarter as 2 x 4 tiles of 16 x 8 with the warp-level step ax_mma_bf16 (m16n8k16) or
 * ax_mma_tf32 (m16n8k8). That step is written once with two bodies: AX_MMA == 1, PTX's
 * mma.sync (NVIDIA, compute capability 8.0 and later); AX_MMA == 2, a portable emulation in
 * which the 32 items of the warp exchange their fragment registers through local memory, with
 * the per-lane fragment layout of the PTX ISA (below). PoCL runs the emulation, so the tests
 * check every index and fragment of the kernel; only the one instruction is the GPU's.
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8"): lane l, g = l / 4,
 * t = l % 4. m16n8k16 bf16: A (16 x 16) in 4 registers of 2 elements, the lower-indexed in the
 * low 16 bits: a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..);
 * B (16 x 8) in 2: b0 (k = 2t..2t+1, n = g), b1 (k = 2t + 8.., n = g). m16n8k8 tf32: A (16 x 8):
 * a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B (8 x 8): b0 (k = t, n = g),
 * b1 (k = t + 4, n = g). C (16 x 8, f32) for both: c0, c1 (g, 2t..2t+1), c2, c3 (g + 8, 2t..).
 */
#include <assert.h>
#include <limits.h>
#include <string.h>

#include "backends/opencl/opencl.h"

enum { TS = 16 };

typedef struct Layout {
  bool bf16_in, bf16_out; /* operands, result bf16 */
  bool tf32;              /* f32 operands rounded to TF32 (the graph's matmul policy) */
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
                .tf32 = !bf16_in && g->matmul == IR_MATMUL_TF32,
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

/* TF32 rounding (the graph's matmul policy): ir_tf32_round's rule, cvt.rna.tf32.f32's. */
static const char tf32_helpers[] =
    "/* f32 -> TF32: 10 mantissa bits, to nearest, ties away from zero (cvt.rna.tf32.f32) */\n"
    "float ax_tf32(float x) {\n"
    "  return isnan(x) || isinf(x) ? x : as_float((as_uint(x) + 0x1000u) & 0xffffe000u);\n"
    "}\n"
    "float4 ax_tf32x4(float4 x) {\n"
    "  return (float4)(ax_tf32(x.x), ax_tf32(x.y), ax_tf32(x.z), ax_tf32(x.w));\n"
    "}\n";

/* The warp-level 16 x 8 x k step, written once with two bodies (the file comment). */
static const char mma_steps[] =
    "#if AX_MMA\n"
    "#define AX_BM 64 /* a work-group's block of C: 4 warps of 32 x 32 */\n"
    "#define AX_BN 64\n"
    "#define AX_BK 32 /* columns of A, rows of B staged per step */\n"
    "#define AX_LDH (AX_BK + 8) /* ushort row stride of the bf16 tiles: no bank conflicts */\n"
    "#define AX_LDT (AX_BK + 4) /* uint row stride of the tf32 tiles */\n"
    "#if AX_MMA == 1\n"
    "/* NVIDIA, compute capability 8.0 and later: the tensor cores' mma.sync */\n"
    "#define AX_MMA_XW 0\n"
    "#define AX_MMA_X 1\n"
    "void ax_mma_bf16(float *c, const uint *a, const uint *b, __local uint *x) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, \"\n"
    "               \"{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
    "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), "
    "\"r\"(b[1]));\n"
    "}\n"
    "void ax_mma_tf32(float *c, const uint *a, const uint *b, __local uint *x) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, \"\n"
    "               \"{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
    "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), "
    "\"r\"(b[1]));\n"
    "}\n"
    "/* a row's max and sum over the 4 lanes of a quad (the lanes of one C fragment row) */\n"
    "float ax_quad_shfl(float v, int m) {\n"
    "  int r;\n"
    "  asm volatile(\"shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\" : \"=r\"(r) : "
    "\"r\"(as_int(v)), \"r\"(m));\n"
    "  return as_float(r);\n"
    "}\n"
    "float ax_quad_max(float v, __local uint *x) {\n"
    "  v = fmax(v, ax_quad_shfl(v, 1));\n"
    "  return fmax(v, ax_quad_shfl(v, 2));\n"
    "}\n"
    "float ax_quad_sum(float v, __local uint *x) {\n"
    "  v += ax_quad_shfl(v, 1);\n"
    "  return v + ax_quad_shfl(v, 2); /* (v0 + v1) + (v2 + v3) on every lane */\n"
    "}\n"
    "#else\n"
    "/* the emulation: each lane leaves its 4 A and 2 B registers in x (the warp's 32 x 6 words)\n"
    " * and computes its 4 results from all 32 lanes' fragments, found through the PTX layout */\n"
    "#define AX_MMA_XW 192\n"
    "#define AX_MMA_X (4 * AX_MMA_XW)\n"
    "void ax_mma_put(const uint *a, const uint *b, __local uint *x) {\n"
    "  int l = get_local_id(0);\n"
    "  for (int i = 0; i < 4; i++) x[l * 6 + i] = a[i];\n"
    "  x[l * 6 + 4] = b[0];\n"
    "  x[l * 6 + 5] = b[1];\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "}\n"
    "void ax_mma_bf16(float *c, const uint *a, const uint *b, __local uint *x) {\n"
    "  ax_mma_put(a, b, x);\n"
    "  int l = get_local_id(0), g = l >> 2, t = l & 3;\n"
    "  for (int e = 0; e < 4; e++) {\n"
    "    int r = g + (e >> 1) * 8, n = 2 * t + (e & 1);\n"
    "    float s = 0.0f;\n"
    "    for (int k = 0; k < 16; k++) {\n"
    "      /* A(r, k): lane (r % 8) * 4 + (k % 8) / 2, register r / 8 + 2 * (k / 8); B(k, n): "
    "lane\n"
    "       * n * 4 + (k % 8) / 2, register k / 8; element k % 2 of the register's two */\n"
    "      uint wa = x[((r & 7) * 4 + ((k & 7) >> 1)) * 6 + (r >> 3) + 2 * (k >> 3)];\n"
    "      uint wb = x[(n * 4 + ((k & 7) >> 1)) * 6 + 4 + (k >> 3)];\n"
    "      int sh = (k & 1) * 16;\n"
    "      s += as_float(((wa >> sh) & 0xffffu) << 16) * as_float(((wb >> sh) & 0xffffu) << 16);\n"
    "    }\n"
    "    c[e] += s;\n"
    "  }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "}\n"
    "void ax_mma_tf32(float *c, const uint *a, const uint *b, __local uint *x) {\n"
    "  ax_mma_put(a, b, x);\n"
    "  int l = get_local_id(0), g = l >> 2, t = l & 3;\n"
    "  for (int e = 0; e < 4; e++) {\n"
    "    int r = g + (e >> 1) * 8, n = 2 * t + (e & 1);\n"
    "    float s = 0.0f;\n"
    "    for (int k = 0; k < 8; k++) {\n"
    "      /* A(r, k): lane (r % 8) * 4 + k % 4, register r / 8 + 2 * (k / 4); B(k, n): lane\n"
    "       * n * 4 + k % 4, register k / 4 */\n"
    "      uint wa = x[((r & 7) * 4 + (k & 3)) * 6 + (r >> 3) + 2 * (k >> 2)];\n"
    "      uint wb = x[(n * 4 + (k & 3)) * 6 + 4 + (k >> 2)];\n"
    "      s += as_float(wa) * as_float(wb);\n"
    "    }\n"
    "    c[e] += s;\n"
    "  }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "}\n"
    "/* the quad's 4 values through the warp's words, combined as the shuffles combine them */\n"
    "float ax_quad_max(float v, __local uint *x) {\n"
    "  int l = get_local_id(0), q = l & ~3;\n"
    "  x[l] = as_uint(v);\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  float r = fmax(fmax(as_float(x[q]), as_float(x[q + 1])), fmax(as_float(x[q + 2]), "
    "as_float(x[q + 3])));\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  return r;\n"
    "}\n"
    "float ax_quad_sum(float v, __local uint *x) {\n"
    "  int l = get_local_id(0), q = l & ~3;\n"
    "  x[l] = as_uint(v);\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  float r = (as_float(x[q]) + as_float(x[q + 1])) + (as_float(x[q + 2]) + as_float(x[q + "
    "3]));\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  return r;\n"
    "}\n"
    "#endif\n";

/* bf16 products of an f32 operand (the fused attention's P and dS, emit.c): x as hi + lo, two
 * bf16 each, packed in pairs as the fragments hold them. */
static const char split_bf16[] =
    "void ax_split2(float x0, float x1, uint *hi, uint *lo) {\n"
    "  ushort h0 = ax_to_bf16(x0), h1 = ax_to_bf16(x1);\n"
    "  *hi = (uint)h0 | (uint)h1 << 16;\n"
    "  *lo = (uint)ax_to_bf16(x0 - ax_from_bf16(h0)) | (uint)ax_to_bf16(x1 - ax_from_bf16(h1)) "
    "<< 16;\n"
    "}\n";

/* One tensor-core GEMM routine (the file comment): `name` over A and B of storage type `in`
 * (ushort: bf16; float: f32 rounded to TF32) and C of type `out`, whose elements `store`
 * wraps. */
static void mma_routine(OclBuf *b, const char *name, bool bf16, const char *out,
                        const char *store) {
  const char *in = bf16 ? "ushort" : "float", *tile = bf16 ? "ushort" : "uint";
  const char *ld = bf16 ? "AX_LDH" : "AX_LDT", *ldv = bf16 ? "" : "as_uint(ax_tf32(";
  const char *ldc = bf16 ? "" : "))", *zero = bf16 ? "(ushort)0" : "0u";
  ocl_buf_printf(
      b,
      "void %s(__global const %s *A, __global const %s *B, __global %s *C, int M, int N, int K,\n"
      "        long sam, long sak, long sbk, long sbn, __local %s *As, __local %s *Bs,\n"
      "        __local uint *X) {\n"
      "  int lane = get_local_id(0), warp = get_local_id(1), tid = warp * 32 + lane;\n"
      "  int g = lane >> 2, t = lane & 3;\n"
      "  int m0 = get_group_id(1) * AX_BM, n0 = get_group_id(0) * AX_BN;\n"
      "  int wm = (warp >> 1) * 32, wn = (warp & 1) * 32; /* the warp's quarter */\n"
      "  __local uint *x = X + warp * AX_MMA_XW;\n"
      "  float c[2][4][4];\n"
      "  for (int i = 0; i < 2; i++)\n"
      "    for (int j = 0; j < 4; j++)\n"
      "      for (int e = 0; e < 4; e++) c[i][j][e] = 0.0f;\n"
      "  for (int k0 = 0; k0 < K; k0 += AX_BK) {\n"
      "    /* A (BM x BK) as As[m][k], B (BK x BN) as Bs[n][k]: zero past the edges */\n"
      "    for (int i = tid; i < AX_BM * AX_BK; i += 128) {\n"
      "      int r = sak == 1 ? i / AX_BK : i %% AX_BM, k = sak == 1 ? i %% AX_BK : i / AX_BM;\n"
      "      int gm = m0 + r, gk = k0 + k;\n"
      "      As[r * %s + k] = gm < M && gk < K ? %sA[gm * sam + gk * sak]%s : %s;\n"
      "    }\n"
      "    for (int i = tid; i < AX_BN * AX_BK; i += 128) {\n"
      "      int n = sbk == 1 ? i / AX_BK : i %% AX_BN, k = sbk == 1 ? i %% AX_BK : i / AX_BN;\n"
      "      int gn = n0 + n, gk = k0 + k;\n"
      "      Bs[n * %s + k] = gn < N && gk < K ? %sB[gk * sbk + gn * sbn]%s : %s;\n"
      "    }\n"
      "    barrier(CLK_LOCAL_MEM_FENCE);\n",
      name, in, in, out, tile, tile, ld, ldv, ldc, zero, ld, ldv, ldc, zero);
  if (bf16)
    ocl_buf_printf(
        b, "%s",
        "    for (int kk = 0; kk < AX_BK; kk += 16) {\n"
        "      uint a[2][4], b[4][2];\n"
        "      for (int i = 0; i < 2; i++) {\n"
        "        __local const ushort *p = As + (wm + i * 16 + g) * AX_LDH + kk + 2 * t;\n"
        "        a[i][0] = *(__local const uint *)p;\n"
        "        a[i][1] = *(__local const uint *)(p + 8 * AX_LDH);\n"
        "        a[i][2] = *(__local const uint *)(p + 8);\n"
        "        a[i][3] = *(__local const uint *)(p + 8 * AX_LDH + 8);\n"
        "      }\n"
        "      for (int j = 0; j < 4; j++) {\n"
        "        __local const ushort *q = Bs + (wn + j * 8 + g) * AX_LDH + kk + 2 * t;\n"
        "        b[j][0] = *(__local const uint *)q;\n"
        "        b[j][1] = *(__local const uint *)(q + 8);\n"
        "      }\n"
        "#pragma unroll\n"
        "      for (int i = 0; i < 2; i++)\n"
        "        for (int j = 0; j < 4; j++) ax_mma_bf16(c[i][j], a[i], b[j], x);\n"
        "    }\n");
  else
    ocl_buf_printf(b, "%s",
                   "    for (int kk = 0; kk < AX_BK; kk += 8) {\n"
                   "      uint a[2][4], b[4][2];\n"
                   "      for (int i = 0; i < 2; i++) {\n"
                   "        __local const uint *p = As + (wm + i * 16 + g) * AX_LDT + kk + t;\n"
                   "        a[i][0] = p[0];\n"
                   "        a[i][1] = p[8 * AX_LDT];\n"
                   "        a[i][2] = p[4];\n"
                   "        a[i][3] = p[8 * AX_LDT + 4];\n"
                   "      }\n"
                   "      for (int j = 0; j < 4; j++) {\n"
                   "        __local const uint *q = Bs + (wn + j * 8 + g) * AX_LDT + kk + t;\n"
                   "        b[j][0] = q[0];\n"
                   "        b[j][1] = q[4];\n"
                   "      }\n"
                   "#pragma unroll\n"
                   "      for (int i = 0; i < 2; i++)\n"
                   "        for (int j = 0; j < 4; j++) ax_mma_tf32(c[i][j], a[i], b[j], x);\n"
                   "    }\n");
  ocl_buf_printf(
      b,
      "    barrier(CLK_LOCAL_MEM_FENCE);\n"
      "  }\n"
      "  for (int i = 0; i < 2; i++)\n"
      "    for (int j = 0; j < 4; j++)\n"
      "      for (int e = 0; e < 4; e++) {\n"
      "        int r = m0 + wm + i * 16 + g + (e >> 1) * 8, n = n0 + wn + j * 8 + 2 * t + "
      "(e & 1);\n"
      "        if (r < M && n < N) C[(long)r * N + n] = %sc[i][j][e]%s;\n"
      "      }\n"
      "}\n",
      store, *store ? ")" : "");
}

/* f32 products of the fused attention (emit.c): each f32 operand as two TF32 values, hi + lo,
 * and a product as three mma steps (lo hi, hi lo, hi hi: all but lo lo), which keeps about 22
 * of f32's 24 bits, so the tensor cores compute what the interpreter's f32 does. */
static const char split_tf32[] =
    "void ax_split_tf32(float v, uint *hi, uint *lo) {\n"
    "  float h = ax_tf32(v);\n"
    "  *hi = as_uint(h);\n"
    "  *lo = as_uint(ax_tf32(v - h));\n"
    "}\n"
    "void ax_mma_3tf32(float *c, const uint *ah, const uint *al, const uint *bh, const uint *bl,\n"
    "                  __local uint *x) {\n"
    "  ax_mma_tf32(c, al, bh, x);\n"
    "  ax_mma_tf32(c, ah, bl, x);\n"
    "  ax_mma_tf32(c, ah, bh, x);\n"
    "}\n";

void ocl_gemm_prelude(OclBuf *b, bool bf16, bool tf32, bool att_f32) {
  ocl_buf_printf(
      b,
      "#define AX_TS %d\n"
      "/* C (M, N) = A . B, A(m, k) at A[m*sam + k*sak], B(k, n) at B[k*sbk + n*sbn]; one element\n"
      " * per work item, TS x TS tiles of A and B staged in local memory. */\n",
      TS);
  gemm_routine(b, "ax_gemm", "float", "float", "", "");
  if (tf32 || att_f32) ocl_buf_printf(b, "%s", tf32_helpers);
  if (tf32) {
    gemm_routine(b, "ax_gemm_tf", "float", "float", "ax_tf32(", "");
  }
  if (bf16) { /* bf16 operands: C f32 (the accumulator) or bf16 (rounded once) */
    gemm_routine(b, "ax_gemm_hf", "ushort", "float", "ax_from_bf16(", "");
    gemm_routine(b, "ax_gemm_hh", "ushort", "ushort", "ax_from_bf16(", "ax_to_bf16(");
  }
  if (!bf16 && !tf32 && !att_f32) return;
  ocl_buf_printf(b, "%s", mma_steps);
  if (att_f32) ocl_buf_printf(b, "%s", split_tf32);
  if (bf16) {
    ocl_buf_printf(b, "%s", split_bf16);
    mma_routine(b, "ax_mmag_hf", true, "float", "");
    mma_routine(b, "ax_mmag_hh", true, "ushort", "ax_to_bf16(");
  }
  if (tf32) mma_routine(b, "ax_mmag_tf", false, "float", "");
  ocl_buf_printf(b, "#endif\n\n");
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
      L->tf32       ? "_tf"
      : !L->bf16_in ? ""
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
  const char *ld = L->bf16_in ? "ax_from_bf16(" : L->tf32 ? "ax_tf32(" : "";
  const char *ldc = L->bf16_in || L->tf32 ? ")" : "";
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
    ocl_buf_printf(b, "    float4 bk = %svload4(0, B + k * %lldL + n0)%s;\n",
                   L->tf32 ? "ax_tf32x4(" : "", (long long)L->sbk, L->tf32 ? ")" : "");
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

/* The tensor-core body (the file comment): one routine call over the batch element of the
 * work-group, its launch range in R's mma fields. */
static void mma_kernel(OclBuf *b, const char *const r[3], const Layout *L, RtOclLaunch *R) {
  bool bf16 = L->bf16_in;
  /* uint arrays, so that a bf16 tile's pairs load as aligned words */
  const char *cast = bf16 ? "(__local ushort *)" : "";
  ocl_buf_printf(
      b,
      "  __local uint As[AX_BM * %s], Bs[AX_BN * %s];\n"
      "  __local uint Xs[AX_MMA_X];\n"
      "  long bt = get_group_id(2);\n"
      "  ax_mmag_%s(%s + bt * %lldL, %s + bt * %lldL, %s + bt * %lldL, %lld, %lld, %lld,\n"
      "             %lldL, %lldL, %lldL, %lldL, %sAs, %sBs, Xs);\n",
      bf16 ? "AX_LDH / 2" : "AX_LDT", bf16 ? "AX_LDH / 2" : "AX_LDT",
      !bf16         ? "tf"
      : L->bf16_out ? "hh"
                    : "hf",
      r[0], (long long)L->sa, r[1], (long long)L->sb, r[2], (long long)(L->m * L->n),
      (long long)L->m, (long long)L->n, (long long)L->k, (long long)L->sam, (long long)L->sak,
      (long long)L->sbk, (long long)L->sbn, cast, cast);
  enum { BM = 64, BN = 64 }; /* coupled with AX_BM, AX_BN */
  R->mma_global[0] = (L->n + BN - 1) / BN * 32;
  R->mma_global[1] = (L->m + BM - 1) / BM * 4;
  R->mma_global[2] = L->batch;
  R->mma_local[0] = 32;
  R->mma_local[1] = 4;
  R->mma_local[2] = 1;
}

void ocl_gemm_kernel(OclBuf *b, const IrGraph *g, int32_t v, const char *const refs[3], bool tiled,
                     RtOclLaunch *R, const char **attrs) {
  Layout L = {0};
  bool ok = layout(g, v, &L);
  assert(ok && "the scheduler places only products that ocl_gemm_ok accepts");
  (void)ok;
  *attrs = "";
  bool mma = L.bf16_in || L.tf32;
  if (mma) ocl_buf_printf(b, "#if AX_MMA\n");
  RtOclLaunch tc = {0};
  if (mma) {
    mma_kernel(b, refs, &L, &tc);
    ocl_buf_printf(b, "#else\n");
  }
  if (tiled)
    tiled_kernel(b, refs, &L, R, attrs);
  else
    blocked_kernel(b, refs, &L, R);
  if (!mma) return;
  ocl_buf_printf(b, "#endif\n");
  *attrs = ""; /* reqd_work_group_size would hold for one body only */
  memcpy(R->mma_global, tc.mma_global, sizeof tc.mma_global);
  memcpy(R->mma_local, tc.mma_local, sizeof tc.mma_local);
}
