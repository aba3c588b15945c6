/*
 * blas.c: matrix products for generated code, split over the runtime's pool.
 *
 * OpenBLAS runs single-threaded in a trainer (rt_train_main sets it so): its own worker
 * threads spin between calls and would fight the pool's workers for the cores while the
 * generated kernels run. Instead each product is cut into work items (one per batch element,
 * or column or row blocks of one matrix), and the pool runs the items. The cut depends only on
 * the shapes, never on the thread count, so a step computes the same bits on any --threads.
 *
 * Products of batch < 4 (the projections and their gradients) go to sgemm.c instead, the
 * runtime's own product, on CPUs with AVX2 and FMA: each OpenBLAS item packs its shared
 * operand again, while sgemm.c packs each operand once for all items. AXLC_SGEMM=openblas
 * keeps every product on OpenBLAS (to compare; the bits then differ in the last places).
 *
 * Products of one row (a decode step's projections and head) go to OpenBLAS's sgemv, cut into
 * column blocks: the packing of a product would read the whole of B once more for one use;
 * with bf16 operands, to a loop of f32 sums over the widened values, cut the same way.
 *
 * rt_sbgemm, bf16 operands: sgemm.c's own product with the values widened as they are packed,
 * or its vdpbf16ps kernel, or a widening reference on OpenBLAS (rt_sbgemm_path; which one and
 * why: docs/runtime.md, "bf16 matrix products").
 */
#include <cblas.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_impl.h"

typedef struct {
    int64_t batch, m, n, k, split_m, split_n; /* items: batch x split_m x split_n */
    int ta, tb;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc, sa, sb, sc;
} Gemm;

/* Start and length of block i of n cut into `parts` blocks of multiples of 16. */
static void block(int64_t n, int64_t parts, int64_t i, int64_t *start, int64_t *len) {
    int64_t step = (n + parts - 1) / parts;
    step = (step + 15) / 16 * 16;
    *start = i * step < n ? i * step : n;
    *len = *start + step <= n ? step : n - *start;
}

void rt_gemm_one(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, int add, float *c, int64_t ldc) {
    if (!add)
        for (int64_t r = 0; r < m; r++)
            memset(c + r * ldc, 0, (size_t)n * sizeof *c);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, 1.0f, c, (int)ldc);
}

static void gemm_items(void *ctx, int64_t lo, int64_t hi) {
    const Gemm *g = ctx;
    for (int64_t it = lo; it < hi; it++) {
        int64_t per = g->split_m * g->split_n, b = it / per, r = it % per;
        int64_t m0, mlen, n0, nlen;
        block(g->m, g->split_m, r / g->split_n, &m0, &mlen);
        block(g->n, g->split_n, r % g->split_n, &n0, &nlen);
        if (mlen <= 0 || nlen <= 0)
            continue;
        /* op(A) rows m0..: row-major A (M, K) starts at row m0; A stored (K, M) at column m0 */
        const float *a = g->a + b * g->sa + (g->ta ? m0 : m0 * g->lda);
        const float *bb = g->b + b * g->sb + (g->tb ? n0 * g->ldb : n0);
        float *c = g->c + b * g->sc + m0 * g->ldc + n0;
        rt_gemm_one(g->ta, g->tb, mlen, nlen, g->k, 1.0f, a, g->lda, bb, g->ldb, 0, c, g->ldc);
    }
}

/* Blocks of at least 128 along the larger side, at most 16. */
static int64_t parts(int64_t n) {
    int64_t p = n / 128;
    return p < 1 ? 1 : p > 16 ? 16 : p;
}

/* Few large products go to sgemm.c's own product, which packs each operand once for all
 * items, where the CPU has AVX2 and FMA and AXLC_SGEMM is not "openblas". */
int rt_sgemm_use_own(void) {
    static atomic_int use = -1;
    int u = atomic_load(&use);
    if (u < 0) {
        const char *e = getenv("AXLC_SGEMM");
        u = rt_sgemm_own_available() && !(e && !strcmp(e, "openblas"));
        atomic_store(&use, u);
    }
    return u;
}

/* Items of a one-row product: batch element it / split_n, its column block it % split_n. */
static void gemv_items(void *ctx, int64_t lo, int64_t hi) {
    const Gemm *g = ctx;
    for (int64_t it = lo; it < hi; it++) {
        int64_t b = it / g->split_n, n0, nlen;
        block(g->n, g->split_n, it % g->split_n, &n0, &nlen);
        if (nlen <= 0)
            continue;
        /* op(A) is one row: A (1, K) contiguous, or A stored (K, 1) with a stride of lda */
        const float *a = g->a + b * g->sa, *bb = g->b + b * g->sb + (g->tb ? n0 * g->ldb : n0);
        float *c = g->c + b * g->sc + n0;
        if (g->tb) /* B stored (N, K): c = B[n0..] a */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nlen, (int)g->k, 1.0f, bb, (int)g->ldb, a,
                        g->ta ? (int)g->lda : 1, 0.0f, c, 1);
        else /* B (K, N): c = B[:, n0..]^T a */
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)g->k, (int)nlen, 1.0f, bb, (int)g->ldb, a,
                        g->ta ? (int)g->lda : 1, 0.0f, c, 1);
    }
}

void rt_sgemm(RtPool *pool, int64_t batch, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
              int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b, float *c, int64_t ldc,
              int64_t stride_c) {
    if (m == 1 && k > 0) {
        Gemm g = {batch, m, n, k, 1, parts(n), ta, tb, a, b, c, lda, ldb, ldc, stride_a, stride_b, stride_c};
        rt_parallel_for(pool, batch * g.split_n, gemv_items, &g);
        return;
    }
    if (batch < 4 && rt_sgemm_use_own()) {
        int64_t i = 0;
        while (i < batch && rt_sgemm_own(pool, ta, tb, m, n, k, 1.0f, a + i * stride_a, lda, b + i * stride_b, ldb, 0,
                                         c + i * stride_c, ldc))
            i++;
        if (i == batch)
            return;
        a += i * stride_a, b += i * stride_b, c += i * stride_c, batch -= i; /* the rest by OpenBLAS */
    }
    Gemm g = {batch, m, n, k, 1, 1, ta, tb, a, b, c, lda, ldb, ldc, stride_a, stride_b, stride_c};
    if (batch < 4) { /* few products: cut the larger side of each */
        if (m >= n)
            g.split_m = parts(m);
        else
            g.split_n = parts(n);
    }
    rt_parallel_for(pool, batch * g.split_m * g.split_n, gemm_items, &g);
}

/* ---- bf16 operands ---- */

/* Which product rt_sbgemm runs (RT_SBGEMM_*): where the CPU allows, the fastest measured here
 * (docs/runtime.md, "bf16 matrix products"), unless AXLC_SBGEMM names another (widen, dot,
 * ref). The variable is not among rt_env_check's yet: an unknown value is named on stderr. */
static atomic_int sbgemm_path = -1; /* -1: not yet asked */

static int sbgemm_can(int path) {
    return path == RT_SBGEMM_REF || (path == RT_SBGEMM_WIDEN && rt_sgemm_own_available()) ||
           (path == RT_SBGEMM_DOT && rt_sbgemm_dot_available());
}

int rt_sbgemm_path(int want) {
    int now = atomic_load(&sbgemm_path);
    if (want < 0 && now >= 0)
        return now;
    if (want < 0) {
        const char *e = getenv("AXLC_SBGEMM");
        want = !e || !strcmp(e, "widen") ? RT_SBGEMM_WIDEN
               : !strcmp(e, "ref")       ? RT_SBGEMM_REF
               : !strcmp(e, "dot")       ? RT_SBGEMM_DOT
                                         : -1;
        if (want < 0) { /* said once: the first product decides */
            fprintf(stderr, "axlc runtime: AXLC_SBGEMM=%s: expected widen, dot or ref; using widen\n", e);
            want = RT_SBGEMM_WIDEN;
        }
    }
    /* what the CPU lacks falls back: the dot kernel to the widening one, that to the reference */
    if (!sbgemm_can(want))
        want = sbgemm_can(RT_SBGEMM_WIDEN) ? RT_SBGEMM_WIDEN : RT_SBGEMM_REF;
    atomic_store(&sbgemm_path, want);
    return want;
}

typedef struct {
    int64_t m, n, k, lda, ldb, ldc;
    int ta, tb, c_bf16, path;
    const uint16_t *a, *b;
    void *c;
    int64_t sa, sb, sc;
    float *c32; /* f32 results, (m, n) contiguous, before rounding to a bf16 C (batch < 4) */
} SbGemm;

static void *sbgemm_alloc(size_t bytes, const SbGemm *g) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { /* no status to return (as attention.c's scratch): end with a message */
        fprintf(stderr, "axlc runtime: out of memory in a bf16 matrix product (%lld x %lld x %lld)\n", (long long)g->m,
                (long long)g->n, (long long)g->k);
        abort();
    }
    return p;
}

static void widen(const uint16_t *src, int64_t rows, int64_t cols, int64_t ld, float *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            dst[r * cols + j] = rt_bf16_to_f32(src[r * ld + j]);
}

/* Rows [lo, hi) of the f32 results at src (row stride n) into C at dst (row stride ldc). */
static void sbgemm_store(const SbGemm *g, const float *src, void *dst, int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; r++)
        if (g->c_bf16)
            for (int64_t j = 0; j < g->n; j++)
                ((uint16_t *)dst)[r * g->ldc + j] = rt_bf16_from_f32(src[r * g->n + j]);
        else
            memcpy((float *)dst + r * g->ldc, src + r * g->n, (size_t)g->n * sizeof *src);
}

/* The reference: A's and B's values widened to f32 and the f32 product, on the calling thread.
 * Exact for the widening, so the result is rt_gemm_one's on the same values. */
static void sbgemm_ref(const SbGemm *g, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc) {
    int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
    int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
    float *wa = sbgemm_alloc((size_t)(ar * ac + br * bc) * sizeof *wa, g), *wb = wa + ar * ac;
    widen(a, ar, ac, g->lda, wa);
    widen(b, br, bc, g->ldb, wb);
    rt_gemm_one(g->ta, g->tb, g->m, g->n, g->k, 1.0f, wa, ac, wb, bc, 0, c, ldc);
    free(wa);
}

/* One product (m, n) into c (f32, row stride ldc), on the pool (NULL: the calling thread). */
static void sbgemm_one(RtPool *pool, const SbGemm *g, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc) {
    if (g->path == RT_SBGEMM_DOT && rt_sbgemm_dot(pool, g->ta, g->tb, g->m, g->n, g->k, a, g->lda, b, g->ldb, c, ldc))
        return;
    if (g->path != RT_SBGEMM_REF &&
        rt_sgemm_own_bf16(pool, g->ta, g->tb, g->m, g->n, g->k, a, g->lda, b, g->ldb, c, ldc))
        return;
    sbgemm_ref(g, a, b, c, ldc); /* the CPU lacks the kernels, or their scratch could not be had */
}

/* Batch elements [lo, hi), one per item, each on its item's thread. */
static void sbgemm_items(void *ctx, int64_t lo, int64_t hi) {
    const SbGemm *g = ctx;
    float *c = g->c_bf16 ? sbgemm_alloc((size_t)(g->m * g->n) * sizeof *c, g) : NULL;
    for (int64_t it = lo; it < hi; it++) {
        const uint16_t *a = g->a + it * g->sa, *b = g->b + it * g->sb;
        if (!g->c_bf16) {
            sbgemm_one(NULL, g, a, b, (float *)g->c + it * g->sc, g->ldc);
            continue;
        }
        sbgemm_one(NULL, g, a, b, c, g->n);
        sbgemm_store(g, c, (uint16_t *)g->c + it * g->sc, 0, g->m);
    }
    free(c);
}

/* Blocks [lo, hi) of 64 rows of c32 into C: the results of a batch < 4 product, stored by the pool. */
static void sbgemm_store_rows_block(void *ctx, int64_t lo, int64_t hi) {
    const SbGemm *g = ctx;
    sbgemm_store(g, g->c32, g->c, lo * 64, hi * 64 < g->m ? hi * 64 : g->m);
}

/* Items of a one-row bf16 product, as gemv_items: batch element it / split, column block it %
 * split; each sum in f32 in k order, rounded once when C is bf16. */
typedef struct {
    const SbGemm *g;
    int64_t split;
} SbGemv;

static void sbgemv_items(void *ctx, int64_t lo, int64_t hi) {
    const SbGemv *v = ctx;
    const SbGemm *g = v->g;
    float *acc = NULL;
    for (int64_t it = lo; it < hi; it++) {
        int64_t b = it / v->split, n0, nlen;
        block(g->n, v->split, it % v->split, &n0, &nlen);
        if (nlen <= 0)
            continue;
        if (!acc)
            acc = sbgemm_alloc((size_t)g->n * sizeof *acc, g);
        const uint16_t *a = g->a + b * g->sa, *bb = g->b + b * g->sb;
        int64_t as = g->ta ? g->lda : 1;
        memset(acc, 0, (size_t)nlen * sizeof *acc);
        for (int64_t kk = 0; kk < g->k && !g->tb; kk++) {
            float av = rt_bf16_to_f32(a[kk * as]);
            const uint16_t *row = bb + kk * g->ldb + n0;
            for (int64_t j = 0; j < nlen; j++)
                acc[j] += av * rt_bf16_to_f32(row[j]);
        }
        for (int64_t j = 0; j < nlen && g->tb; j++) {
            const uint16_t *row = bb + (n0 + j) * g->ldb;
            float sum = 0;
            for (int64_t kk = 0; kk < g->k; kk++)
                sum += rt_bf16_to_f32(a[kk * as]) * rt_bf16_to_f32(row[kk]);
            acc[j] = sum;
        }
        for (int64_t j = 0; j < nlen; j++)
            if (g->c_bf16)
                ((uint16_t *)g->c)[b * g->sc + n0 + j] = rt_bf16_from_f32(acc[j]);
            else
                ((float *)g->c)[b * g->sc + n0 + j] = acc[j];
    }
    free(acc);
}

void rt_sbgemm(RtPool *pool, int64_t batch, int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
               int64_t lda, int64_t stride_a, const uint16_t *b, int64_t ldb, int64_t stride_b, void *c, int c_bf16,
               int64_t ldc, int64_t stride_c) {
    SbGemm g = {m, n, k, lda,      ldb,      ldc,      ta,  tb, c_bf16, rt_sbgemm_path(-1),
                a, b, c, stride_a, stride_b, stride_c, NULL};
    if (batch <= 0 || m <= 0 || n <= 0)
        return;
    if (m == 1) { /* one row: no packing (it would read B once more for one use) */
        SbGemv v = {&g, parts(n)};
        rt_parallel_for(pool, batch * v.split, sbgemv_items, &v);
        return;
    }
    if (batch >= 4 || g.path == RT_SBGEMM_REF) { /* one item per batch element */
        rt_parallel_for(pool, batch, sbgemm_items, &g);
        return;
    }
    /* few products: each split over the pool by the kernels themselves */
    for (int64_t i = 0; i < batch && !c_bf16; i++)
        sbgemm_one(pool, &g, a + i * stride_a, b + i * stride_b, (float *)c + i * stride_c, ldc);
    if (!c_bf16)
        return;
    g.c32 = sbgemm_alloc((size_t)(m * n) * sizeof *g.c32, &g);
    for (int64_t i = 0; i < batch; i++) {
        sbgemm_one(pool, &g, a + i * stride_a, b + i * stride_b, g.c32, n);
        g.c = (uint16_t *)c + i * stride_c;
        rt_parallel_for(pool, (m + 63) / 64, sbgemm_store_rows_block, &g);
    }
    free(g.c32);
}
