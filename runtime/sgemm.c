/*
 * sgemm.c: the runtime's own single-precision matrix product, which rt_sgemm (blas.c) runs on
 * CPUs with AVX2 and FMA, with 16-float (AVX-512) registers where the CPU has them.
 *
 * Why not OpenBLAS alone. rt_sgemm splits a product over the pool in work items, and with
 * OpenBLAS each item is a call of its own that packs its operands again: an item of 128 rows
 * packs the whole right operand, so a product cut into 16 items packs it 16 times. At the
 * shapes a training step runs (the tokens of a batch by a model dimension) that packing was
 * 10 to 15% of a step. Here each operand is packed once per block, by all threads together,
 * and the items share the packed copies.
 *
 * Blocking (the usual one for register-blocked products). K is cut into slices of KC; op(A)
 * into blocks of up to MB rows and op(B) into blocks of up to NB columns. The block's rows
 * are slivers of MR rows, its columns panels of NR columns, and a micro-kernel call computes
 * the MR x NR piece of C where a sliver meets a panel: twelve 8-float registers, loaded from C
 * for every slice but the first, then one fused multiply-add per register and k. Packed, a
 * sliver holds, for each k, its MR values side by side, and a panel its NR values, zero-padded
 * at the edges. For each block and slice:
 *   1. pack, one work item per SB slivers or per panel: op(A) only where A is stored (k, m),
 *      and for the bottom edge; a full sliver of an A stored (m, k) is read in place, six rows
 *      along k. op(B)'s panels here only when the block has several row groups (below);
 *   2. multiply, one work item per (row group, strip): a row group is up to GROUP slivers
 *      (rows split evenly), a strip PW panels. With one row group (m up to 288), each item
 *      packs its own strip's panels, which no other item reads. An item runs its slivers in
 *      order, each against the strip's panels.
 * A sliver (6 KiB; a pair, 12 KiB, on AVX-512) stays in the first-level cache while it meets
 * the strip's panels (128 KiB, from the second-level cache), and a row group (288 KiB) in the
 * second while its thread runs the strips. Strips of 8 panels took gpt2's products 4% less
 * time than strips of 4 on the AVX-512 kernels, and the same on the AVX2 ones.
 *
 * Two pool jobs per slice are two barriers. Where the block has one row group and A is read
 * in place (the step's projections at up to 288 tokens, and their input gradients), nothing
 * is shared between strips but A itself, so there is one job for all slices: an item is a
 * strip, which packs its own panels and the edge sliver for each slice, and a thread runs its
 * chunk of strips slice by slice, so that a slice of A stays in cache while they use it
 * (K = 50257, the vocabulary's input gradient: 114 -> 151 GFLOP/s).
 *
 * AVX-512. Where the CPU has AVX-512F, the multiply runs a 12 x 32 micro-kernel: two slivers
 * against two panels, twenty-four 16-float registers, 24 multiply-adds for 2 panel loads and
 * 12 broadcasts per k (the AVX2 kernel: 12 for 2 and 6). The packed layouts are the same, and
 * so is each element's chain of operations, so both kernels give the same bits (test_sgemm
 * compares them). An edge sliver meets pairs of panels on it through a padded copy of C; edge
 * panels and an odd panel stay on the AVX2 kernel. On a 2-core Xeon with
 * AVX-512, gpt2's products went from 230 to 350-390 GFLOP/s, where OpenBLAS (its AVX-512
 * kernels, with the packing per item) runs them at 315-345.
 *
 * Claims. The pack and multiply items, and the strips where op(A) fits in the last-level
 * cache (CLAIM_A), go through rt_parallel_for_claimed: a thread runs its own chunk's items and
 * then takes the others' leftovers, so a core the machine slows for a while does not hold up
 * the product (gpt2's step 1.6-4.9% faster). A larger op(A) keeps whole chunks, whose strips
 * share each slice of A while it is in cache.
 *
 * Determinism. Every element of C is the same chain of operations whatever the piece it falls
 * in (edge pieces run the same micro-kernel on a padded copy): start from 0, then for each K
 * slice in order, k in order, one fused multiply-add. Blocks, slices, groups and strips depend
 * only on the shapes, and each item writes only its own slivers, panels or piece of C, so the
 * result does not depend on the thread count or on which thread runs an item.
 *
 * Tiles. rt_pack_panels and rt_gemm_panels give the micro-kernel to a caller that reuses one
 * packed right operand for many small products on one thread: the fused attention packs a
 * problem's keys and values once for all its query blocks (attention.c). Same slivers, panels,
 * K slices and edge copies, so the same chain of operations per element.
 *
 * bf16 operands (rt_sgemm_own_bf16). The same product with every value widened to f32 as it is
 * packed (exact), so the same kernels and the same bits as on f32 copies of the operands; A is
 * always packed then, never read in place. rt_sbgemm_dot, at the end, is the vdpbf16ps product.
 *
 * Scratch: the packed slivers and panels of one block and slice, at most (MB + NB) * KC
 * floats (7 MiB), malloc'd and freed per call; an item's own strip, PW * KC * NR floats
 * (128 KiB), on its thread's stack.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SGEMM_X86 1
#include <immintrin.h>
#endif

enum {
    MR = 6,     /* rows of a micro-kernel block: sliver height */
    NR = 16,    /* columns of a micro-kernel block: panel width (two 8-float vectors) */
    KC = 256,   /* K slice */
    MB = 3072,  /* rows of op(A) packed at a time (a multiple of MR) */
    NB = 4096,  /* columns of op(B) packed at a time (a multiple of NR) */
    GROUP = 48, /* slivers of a row group, at most (288 rows: 288 KiB of op(A) at KC) */
    PW = 8,     /* panels of a strip: an item's columns (128) */
    SB = 8,     /* slivers of a packing item */
    /* floats of op(A), at most, for which strip_items' strips are claimed one by one (8 MiB) */
    CLAIM_A = 2 << 20,
    /* the packing's prefetch distance: rows ahead (operands whose rows are ld apart), floats
     * ahead along a row (pack_panel, B stored (n, k)) */
    PF_ROWS = 16,
    PF_COLS = 64
};

typedef struct {
    int ta, tb;
    int64_t m, n, k;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
    float alpha; /* folded into op(B)'s panels as they are packed */
    int add;     /* C accumulates: the first slice starts from C instead of 0 */
    /* the block and slice being computed: rows i0 .. i0 + mb, columns j0 .. j0 + nb, k p0 .. p0 + kc */
    int64_t i0, mb, j0, nb, p0, kc;
    int64_t slivers, panels; /* ceil(mb / MR), ceil(nb / NR) */
    int64_t packed;          /* slivers packed: all when ta, else the edge one (if any) */
    int64_t groups;          /* row groups of slivers; with one, each item packs its own panels */
    int64_t strips;          /* ceil(panels / PW) */
    float *ap, *bp;          /* packed: slivers of kc x MR, panels of kc x NR (groups > 1) */
    int wide;                /* the AVX-512 kernels (rt_sgemm_own_avx512) */
    /* bf16 operands (rt_sgemm_own_bf16): A and B are ah and bh, widened to f32 as they are
     * packed; every sliver of A is packed (none read in place) */
    const uint16_t *ah, *bh;
    int bf16;
} Sgemm;

#ifdef SGEMM_X86
#define AVX2        __attribute__((target("avx2,fma")))
#define INLINE_AVX2 __attribute__((target("avx2,fma"), always_inline)) static inline

/* ===== packing ======================================================================== */

/* A's element x (f32, or bf16 widened: exact). */
static inline float a_value(const Sgemm *g, int64_t x) {
    return g->bf16 ? rt_bf16_to_f32(g->ah[x]) : g->a[x];
}

/* Sliver s of the block: op(A) rows i0 + s*MR .., as dst[k * MR + r], element by element: the
 * edge sliver, zero-padded. Full slivers of an A stored (k, m) go through pack_slivers_t; those
 * of an A stored (m, k) are read in place by the micro-kernel (six rows, each along k). */
static void pack_sliver(const Sgemm *g, int64_t s, float *dst) {
    int64_t r0 = g->i0 + s * MR, rows = g->i0 + g->mb - r0 < MR ? g->i0 + g->mb - r0 : MR;
    for (int64_t k = 0; k < g->kc; k++)
        for (int64_t r = 0; r < MR; r++) {
            int64_t i = r0 + r, kk = g->p0 + k;
            dst[k * MR + r] = r >= rows ? 0.0f : a_value(g, g->ta ? kk * g->lda + i : i * g->lda + kk);
        }
}

/* The lines of n > 0 floats at p, into the first-level cache: a row the packing copies
 * PF_ROWS rows later. Its rows are a leading dimension apart, a stride the hardware
 * prefetchers do not follow. */
static inline void prefetch_floats(const float *p, int64_t n) {
    for (int64_t x = 0; x < n + 16; x += 16)
        _mm_prefetch((const char *)(p + (x < n ? x : n - 1)), _MM_HINT_T0);
}

/* Eight bf16 values at src, widened to f32 (exact). */
INLINE_AVX2 __m256 widen8(const uint16_t *src) {
    __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

/* Slivers [s0, s1) of an A stored (k, m), in one pass over its rows: each row's
 * (s1 - s0) * MR values are side by side. */
AVX2 static void pack_slivers_t(const Sgemm *g, int64_t s0, int64_t s1) {
    int64_t full = s1;
    if (s1 * MR > g->mb)
        full = s1 - 1; /* the edge sliver, padded, by pack_sliver */
    int64_t width = (full - s0) * MR;
    for (int64_t k = 0; k < g->kc && g->bf16; k++) { /* the row's values widened, then copied */
        const uint16_t *src = g->ah + (g->p0 + k) * g->lda + g->i0 + s0 * MR;
        float row[SB * MR];
        int64_t x = 0;
        for (; x + 8 <= width; x += 8)
            _mm256_storeu_ps(row + x, widen8(src + x));
        for (; x < width; x++)
            row[x] = rt_bf16_to_f32(src[x]);
        for (int64_t s = s0; s < full; s++)
            memcpy(g->ap + s * g->kc * MR + k * MR, row + (s - s0) * MR, MR * sizeof(float));
    }
    for (int64_t k = 0; k < g->kc && !g->bf16; k++) {
        const float *src = g->a + (g->p0 + k) * g->lda + g->i0 + s0 * MR;
        if (width > 0 && k + PF_ROWS < g->kc)
            prefetch_floats(src + PF_ROWS * g->lda, width);
        for (int64_t s = s0; s < full; s++)
            memcpy(g->ap + s * g->kc * MR + k * MR, src + (s - s0) * MR, MR * sizeof(float));
    }
    if (full < s1)
        pack_sliver(g, full, g->ap + full * g->kc * MR);
}

/* Eight vectors r[j] = (x[j][0..7]) become r[k] = (x[0..7][k]). */
INLINE_AVX2 void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* pack_panel for bf16 operands (alpha 1): the same panel, each value widened. */
AVX2 static void pack_panel_bf16(const Sgemm *g, int64_t q, float *dst) {
    int64_t c0 = g->j0 + q * NR, cols = g->j0 + g->nb - c0 < NR ? g->j0 + g->nb - c0 : NR;
    int64_t k = 0;
    if (!g->tb) { /* B stored (k, n) */
        for (; k < g->kc; k++) {
            const uint16_t *src = g->bh + (g->p0 + k) * g->ldb + c0;
            if (k + PF_ROWS < g->kc)
                _mm_prefetch((const char *)(src + PF_ROWS * g->ldb), _MM_HINT_T0);
            if (cols == NR) {
                _mm256_store_ps(dst + k * NR, widen8(src));
                _mm256_store_ps(dst + k * NR + 8, widen8(src + 8));
            } else {
                for (int64_t j = 0; j < NR; j++)
                    dst[k * NR + j] = j < cols ? rt_bf16_to_f32(src[j]) : 0.0f;
            }
        }
        return;
    }
    /* B stored (n, k): 8 x 8 blocks, widened, then transposed */
    const uint16_t *src = g->bh + c0 * g->ldb + g->p0;
    if (cols == NR)
        for (; k + 8 <= g->kc; k += 8)
            for (int h = 0; h < 2; h++) {
                __m256 r[8];
                for (int j = 0; j < 8; j++) {
                    _mm_prefetch((const char *)(src + (h * 8 + j) * g->ldb + k + PF_COLS), _MM_HINT_T0);
                    r[j] = widen8(src + (h * 8 + j) * g->ldb + k);
                }
                transpose8(r);
                for (int i = 0; i < 8; i++)
                    _mm256_store_ps(dst + (k + i) * NR + h * 8, r[i]);
            }
    for (; k < g->kc; k++)
        for (int64_t j = 0; j < NR; j++)
            dst[k * NR + j] = j < cols ? rt_bf16_to_f32(src[j * g->ldb + k]) : 0.0f;
}

/* Full sliver s of a bf16 A stored (m, k): its six rows widened 8 values at a time, and
 * transposed (two zero rows make the 8 x 8 block; each k's 6 values stored under a mask, so
 * that nothing is written past the sliver). */
AVX2 static void pack_sliver_rows_bf16(const Sgemm *g, int64_t s, float *dst) {
    const uint16_t *src = g->ah + (g->i0 + s * MR) * g->lda + g->p0;
    const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    int64_t k = 0;
    for (; k + 8 <= g->kc; k += 8) {
        __m256 r[8];
        for (int j = 0; j < MR; j++)
            r[j] = widen8(src + j * g->lda + k);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        for (int i = 0; i < 8; i++)
            _mm256_maskstore_ps(dst + (k + i) * MR, six, r[i]);
    }
    for (; k < g->kc; k++)
        for (int r = 0; r < MR; r++)
            dst[k * MR + r] = rt_bf16_to_f32(src[r * g->lda + k]);
}

/* Panel q of the block: op(B) columns j0 + q*NR .., as dst[k * NR + j]. */
AVX2 static void pack_panel(const Sgemm *g, int64_t q, float *dst) {
    int64_t c0 = g->j0 + q * NR, cols = g->j0 + g->nb - c0 < NR ? g->j0 + g->nb - c0 : NR;
    float alpha = g->alpha;
    int64_t k = 0;
    if (g->bf16) {
        pack_panel_bf16(g, q, dst);
        return;
    }
    if (!g->tb) { /* B stored (k, n): a panel row is a piece of a row of B */
        for (; k < g->kc; k++) {
            const float *src = g->b + (g->p0 + k) * g->ldb + c0;
            if (k + PF_ROWS < g->kc)
                prefetch_floats(src + PF_ROWS * g->ldb, NR);
            if (cols == NR && alpha == 1.0f) {
                memcpy(dst + k * NR, src, NR * sizeof *dst);
            } else if (cols == NR) {
                __m256 x = _mm256_set1_ps(alpha);
                _mm256_store_ps(dst + k * NR, _mm256_mul_ps(x, _mm256_loadu_ps(src)));
                _mm256_store_ps(dst + k * NR + 8, _mm256_mul_ps(x, _mm256_loadu_ps(src + 8)));
            } else {
                for (int64_t j = 0; j < NR; j++)
                    dst[k * NR + j] = j < cols ? alpha * src[j] : 0.0f;
            }
        }
        return;
    }
    /* B stored (n, k): column j of op(B) is row c0 + j of B; 8 x 8 blocks transposed */
    const float *src = g->b + c0 * g->ldb + g->p0;
    if (cols == NR)
        for (; k + 8 <= g->kc; k += 8)
            for (int h = 0; h < 2; h++) {
                __m256 r[8];
                for (int j = 0; j < 8; j++) {
                    _mm_prefetch((const char *)(src + (h * 8 + j) * g->ldb + k + PF_COLS), _MM_HINT_T0);
                    r[j] = _mm256_mul_ps(_mm256_set1_ps(alpha), _mm256_loadu_ps(src + (h * 8 + j) * g->ldb + k));
                }
                transpose8(r);
                for (int i = 0; i < 8; i++)
                    _mm256_store_ps(dst + (k + i) * NR + h * 8, r[i]);
            }
    for (; k < g->kc; k++)
        for (int64_t j = 0; j < NR; j++)
            dst[k * NR + j] = j < cols ? alpha * src[j * g->ldb + k] : 0.0f;
}

/* Pack item it: slivers [it * SB, ..) of the packed ones (all when ta: reading SB * MR
 * values of each row of A at a time; else the edge sliver alone), or a panel after them. */
static void pack_items(void *ctx, int64_t lo, int64_t hi) {
    const Sgemm *g = ctx;
    int64_t sitems = (g->packed + SB - 1) / SB;
    for (int64_t it = lo; it < hi; it++) {
        if (it >= sitems) {
            int64_t q = it - sitems;
            pack_panel(g, q, g->bp + q * g->kc * NR);
        } else if (!g->ta && !g->bf16)
            pack_sliver(g, g->slivers - 1, g->ap + (g->slivers - 1) * g->kc * MR);
        else if (!g->ta) /* bf16 A stored (m, k): every sliver, widened */
            for (int64_t s = it * SB; s < (it + 1) * SB && s < g->slivers; s++)
                if ((s + 1) * MR <= g->mb)
                    pack_sliver_rows_bf16(g, s, g->ap + s * g->kc * MR);
                else
                    pack_sliver(g, s, g->ap + s * g->kc * MR);
        else
            pack_slivers_t(g, it * SB, (it + 1) * SB < g->slivers ? (it + 1) * SB : g->slivers);
    }
}

/* ===== micro-kernel ==================================================================== */

/* C (MR x NR, row stride ldc) = C (add) or 0 (!add), plus the sum over k of op(A)'s MR rows
 * at k times the panel's row k, one fused multiply-add per element and k, k in order. Row r
 * of the sliver at k is a[r * rs + k * ks]: packed (rs 1, ks MR) or in place (rs lda, ks 1). */
INLINE_AVX2 void micro(int64_t kc, const float *a, int64_t rs, int64_t ks, const float *bp, float *c, int64_t ldc,
                       int add) {
    __m256 acc[MR][2];
    const float *ar[MR];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        ar[r] = a + r * rs;
        acc[r][0] = add ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        acc[r][1] = add ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp + k * NR), b1 = _mm256_load_ps(bp + k * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 x = _mm256_broadcast_ss(ar[r] + k * ks);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

AVX2 static void micro_packed(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int add) {
    micro(kc, ap, 1, MR, bp, c, ldc, add);
}

AVX2 static void micro_rows(int64_t kc, const float *a, int64_t lda, const float *bp, float *c, int64_t ldc, int add) {
    micro(kc, a, lda, 1, bp, c, ldc, add);
}

/* The rows x cols block of C at c (rows <= MR, cols <= NR): the micro-kernel on a sliver
 * packed at ap, or read in place at a (row stride lda) when ap is NULL, and the panel at bp.
 * An edge block goes through a padded copy, so it runs the same chain of operations as the
 * others. */
__attribute__((always_inline)) static inline void micro_block(int64_t kc, const float *ap, const float *a, int64_t lda,
                                                              const float *bp, float *c, int64_t ldc, int64_t rows,
                                                              int64_t cols, int add) {
    float tmp[MR * NR];
    int edge = rows < MR || cols < NR;
    if (edge) {
        memset(tmp, 0, sizeof tmp);
        for (int64_t r = 0; r < rows && add; r++)
            memcpy(tmp + r * NR, c + r * ldc, (size_t)cols * sizeof *c);
    }
    float *dst = edge ? tmp : c;
    int64_t ld = edge ? NR : ldc;
    if (ap)
        micro_packed(kc, ap, bp, dst, ld, add);
    else
        micro_rows(kc, a, lda, bp, dst, ld, add);
    if (edge)
        for (int64_t r = 0; r < rows; r++)
            memcpy(c + r * ldc, tmp + r * NR, (size_t)cols * sizeof *c);
}

/* The (sliver s, panel q) block of C. */
static void block_at(const Sgemm *g, int64_t s, const float *ap, int64_t q, const float *bp) {
    int64_t r0 = g->i0 + s * MR, c0 = g->j0 + q * NR;
    int64_t rows = g->m - r0 < MR ? g->m - r0 : MR, cols = g->n - c0 < NR ? g->n - c0 : NR;
    int in_place = !g->ta && !g->bf16 && rows == MR;
    micro_block(g->kc, in_place ? NULL : ap, g->a + r0 * g->lda + g->p0, g->lda, bp, g->c + r0 * g->ldc + c0, g->ldc,
                rows, cols, g->p0 > 0 || g->add);
}

/* ===== the AVX-512 micro-kernel ======================================================== */

/* Where the CPU has AVX-512, full pieces of C are computed two slivers by two panels at a time
 * (12 x 32: twenty-four 16-float registers), one fused multiply-add per element and k, k in
 * order, as the AVX2 kernel does: the same chain of operations, so the same bits. The packed
 * layouts do not change; the kernel reads two slivers and two panels. */
#define AVX512        __attribute__((target("avx512f,avx2,fma")))
#define INLINE_AVX512 __attribute__((target("avx512f,avx2,fma"), always_inline)) static inline

/* C (6 * S x 16 * V, row stride ldc) = C (add) or 0, plus S slivers times V panels. Rows 0-5
 * are sliver a0's, rows 6-11 sliver a1's; packed, row r of a sliver at k is at r + k * MR,
 * else (in place) at r * lda + k. Panel v is at bp + v * pstride. The slivers' rows are
 * addressed from a few pointers that move along k (in place: rows 0-2 and 3-5 of each sliver
 * from two, lda apart), so that they fit the general registers with the loop's counters. */
INLINE_AVX512 void micro512(int64_t kc, const float *a0, const float *a1, int64_t lda, const float *bp, int64_t pstride,
                            float *c, int64_t ldc, int add, const int S, const int V, const int packed) {
    __m512 acc[2 * MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < S * MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
            acc[r][v] = add ? _mm512_loadu_ps(c + r * ldc + v * NR) : _mm512_setzero_ps();
    /* in place: rows 0, 3, 6 and 9 (four variables, not an array, which the compiler would
     * keep in a vector register and take apart for every k) */
    const float *p0 = a0, *p3 = a0 + 3 * lda, *p6 = a1, *p9 = a1 + 3 * lda;
    const float *b0 = bp, *b1 = bp + pstride;
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        __m512 b[2];
        b[0] = _mm512_loadu_ps(b0);
        if (V > 1)
            b[1] = _mm512_loadu_ps(b1);
#pragma GCC unroll 12
        for (int r = 0; r < S * MR; r++) {
            __m512 x = packed ? _mm512_set1_ps((r < MR ? a0 : a1)[r % MR])
                              : _mm512_set1_ps((r < 3   ? p0
                                                : r < 6 ? p3
                                                : r < 9 ? p6
                                                        : p9)[r % 3 * lda]);
#pragma GCC unroll 2
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
        }
        b0 += NR, b1 += NR;
        if (packed) {
            a0 += MR, a1 += MR;
        } else {
            p0++, p3++, p6++, p9++;
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < S * MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
            _mm512_storeu_ps(c + r * ldc + v * NR, acc[r][v]);
}

/* rs, ks as in micro: in place (rs lda, ks 1) or packed (rs 1, ks MR). */
AVX512 static void micro512_2x2(int64_t kc, const float *a0, const float *a1, int64_t rs, int64_t ks, const float *bp,
                                int64_t pstride, float *c, int64_t ldc, int add) {
    if (ks == 1)
        micro512(kc, a0, a1, rs, bp, pstride, c, ldc, add, 2, 2, 0);
    else
        micro512(kc, a0, a1, 0, bp, pstride, c, ldc, add, 2, 2, 1);
}

AVX512 static void micro512_1x2(int64_t kc, const float *a0, int64_t rs, int64_t ks, const float *bp, int64_t pstride,
                                float *c, int64_t ldc, int add) {
    if (ks == 1)
        micro512(kc, a0, a0, rs, bp, pstride, c, ldc, add, 1, 2, 0);
    else
        micro512(kc, a0, a0, 0, bp, pstride, c, ldc, add, 1, 2, 1);
}

/* An edge sliver (rows < MR, packed with zero rows below) against a pair of full panels,
 * through a padded copy of C's rows, as micro_block runs an edge: the same chain per element. */
AVX512 static void edge_pair512(int64_t kc, const float *ap, const float *bp, int64_t pstride, float *c, int64_t ldc,
                                int64_t rows, int add) {
    _Alignas(64) float tmp[MR * 2 * NR];
    memset(tmp, 0, sizeof tmp);
    for (int64_t r = 0; r < rows && add; r++)
        memcpy(tmp + r * 2 * NR, c + r * ldc, 2 * NR * sizeof *c);
    micro512_1x2(kc, ap, 1, MR, bp, pstride, tmp, 2 * NR, add);
    for (int64_t r = 0; r < rows; r++)
        memcpy(c + r * ldc, tmp + r * 2 * NR, 2 * NR * sizeof *c);
}

/* Where sliver s is, with its row and k strides (rs, ks) as micro takes them: in place for a
 * full sliver of an A stored (m, k), else packed (at edge when given, else in the block's
 * scratch). */
static const float *sliver_at(const Sgemm *g, int64_t s, const float *edge, int64_t *rs, int64_t *ks) {
    int64_t r0 = g->i0 + s * MR;
    if (!g->ta && !g->bf16 && g->m - r0 >= MR) {
        *rs = g->lda, *ks = 1;
        return g->a + r0 * g->lda + g->p0;
    }
    *rs = 1, *ks = MR;
    return edge ? edge : g->ap + s * g->kc * MR;
}

/* run_strip with the AVX-512 kernels: pairs of full slivers against pairs of full panels, a
 * single sliver (full, or the edge one) against pairs of panels, and what is left (an edge or
 * odd panel) by block_at. */
static void run_strip512(const Sgemm *g, int64_t s0, int64_t s1, int64_t q0, int64_t q1, const float *bp,
                         const float *edge) {
    int64_t pstride = g->kc * NR;
    int add = g->p0 > 0 || g->add;
    int64_t qfull = (g->n - g->j0) / NR; /* panels [0, qfull) of the block are full */
    int64_t qpairs = q0 + ((q1 < qfull ? q1 : qfull) - q0) / 2 * 2;
    if (qpairs < q0)
        qpairs = q0;
    for (int64_t s = s0; s < s1;) {
        int64_t r0 = g->i0 + s * MR, rs, ks;
        int pair = s + 1 < s1 && g->m - r0 >= 2 * MR;
        int full = g->m - r0 >= MR;
        const float *a0 = sliver_at(g, s, edge, &rs, &ks);
        /* a pair is two full slivers, both in place or both packed: the same strides */
        const float *a1 = pair ? sliver_at(g, s + 1, edge, &rs, &ks) : a0;
        float *c = g->c + r0 * g->ldc + g->j0;
        int64_t q = q0;
        for (; q < qpairs; q += 2) {
            const float *b = bp + (q - q0) * pstride;
            if (pair)
                micro512_2x2(g->kc, a0, a1, rs, ks, b, pstride, c + q * NR, g->ldc, add);
            else if (full)
                micro512_1x2(g->kc, a0, rs, ks, b, pstride, c + q * NR, g->ldc, add);
            else
                edge_pair512(g->kc, a0, b, pstride, c + q * NR, g->ldc, g->m - r0, add);
        }
        for (; q < q1; q++)
            for (int64_t t = s; t < s + 1 + pair; t++)
                block_at(g, t, edge ? edge : g->ap + t * g->kc * MR, q, bp + (q - q0) * pstride);
        s += 1 + pair;
    }
}

/* Slivers [s0, s1) of the block against panels [q0, q1), packed at bp. A packed sliver is at
 * edge when given (the only one packed), else in the block's scratch. */
static void run_strip(const Sgemm *g, int64_t s0, int64_t s1, int64_t q0, int64_t q1, const float *bp,
                      const float *edge) {
    if (g->wide) {
        run_strip512(g, s0, s1, q0, q1, bp, edge);
        return;
    }
    for (int64_t s = s0; s < s1; s++)
        for (int64_t q = q0; q < q1; q++)
            block_at(g, s, edge ? edge : g->ap + s * g->kc * MR, q, bp + (q - q0) * g->kc * NR);
}

/* Panels [q0, q1) into own, for a strip no other item reads. Full panels of a B stored
 * (k, n) are copied a row of B at a time, the strip's (q1 - q0) * NR floats of it side by
 * side in memory (one panel at a time, the rows' later lines were fetched again per panel). */
AVX2 static void pack_strip(const Sgemm *g, int64_t q0, int64_t q1, float *own) {
    if (g->tb || g->alpha != 1.0f || q1 * NR > g->nb) {
        for (int64_t q = q0; q < q1; q++)
            pack_panel(g, q, own + (q - q0) * g->kc * NR);
        return;
    }
    int64_t width = (q1 - q0) * NR;
    for (int64_t k = 0; k < g->kc && g->bf16; k++) {
        const uint16_t *src = g->bh + (g->p0 + k) * g->ldb + g->j0 + q0 * NR;
        if (k + PF_ROWS < g->kc)
            for (int64_t x = 0; x < width; x += 32)
                _mm_prefetch((const char *)(src + PF_ROWS * g->ldb + x), _MM_HINT_T0);
        for (int64_t q = 0; q < q1 - q0; q++) {
            _mm256_store_ps(own + q * g->kc * NR + k * NR, widen8(src + q * NR));
            _mm256_store_ps(own + q * g->kc * NR + k * NR + 8, widen8(src + q * NR + 8));
        }
    }
    for (int64_t k = 0; k < g->kc && !g->bf16; k++) {
        const float *src = g->b + (g->p0 + k) * g->ldb + g->j0 + q0 * NR;
        if (k + PF_ROWS < g->kc)
            prefetch_floats(src + PF_ROWS * g->ldb, width);
        for (int64_t q = 0; q < q1 - q0; q++)
            memcpy(own + q * g->kc * NR + k * NR, src + q * NR, NR * sizeof *src);
    }
}

/* Item it: row group it / strips by strip it % strips (PW panels); a group's rows stay in
 * the second-level cache while its thread runs the strips. */
static void multiply_items(void *ctx, int64_t lo, int64_t hi) {
    const Sgemm *g = ctx;
    _Alignas(64) float own[PW * KC * NR];
    for (int64_t it = lo; it < hi; it++) {
        int64_t grp = it / g->strips, q0 = it % g->strips * PW, q1 = q0 + PW < g->panels ? q0 + PW : g->panels;
        const float *bp = g->bp + q0 * g->kc * NR;
        if (g->groups == 1) {
            pack_strip(g, q0, q1, own);
            bp = own;
        }
        run_strip(g, grp * g->slivers / g->groups, (grp + 1) * g->slivers / g->groups, q0, q1, bp, NULL);
    }
}

/* One row group and no packed op(A) (A stored (m, k); m up to GROUP * MR): item it is strip
 * it, for every K slice. A chunk's items pack their own panels and the edge sliver (if any)
 * themselves, so the pool needs no barrier between slices; the chunk runs slice by slice over
 * its strips, so a slice of A stays in the second-level cache while they use it. */
static void strip_items(void *ctx, int64_t lo, int64_t hi) {
    _Alignas(64) float own[PW * KC * NR], edge[KC * MR];
    Sgemm g = *(const Sgemm *)ctx;
    for (g.p0 = 0; g.p0 < g.k; g.p0 += KC) {
        g.kc = g.k - g.p0 < KC ? g.k - g.p0 : KC;
        if (g.mb % MR)
            pack_sliver(&g, g.slivers - 1, edge);
        for (int64_t it = lo; it < hi; it++) {
            int64_t q0 = it * PW, q1 = q0 + PW < g.panels ? q0 + PW : g.panels;
            pack_strip(&g, q0, q1, own);
            run_strip(&g, 0, g.slivers, q0, q1, own, edge);
        }
    }
}
#endif

/* ===== tiles: single-threaded products on panels packed once ============================ */

int64_t rt_panels_floats(int64_t k, int64_t n) {
    return (n + NR - 1) / NR * NR * k;
}

void rt_pack_panels(int tb, int64_t k, int64_t n, float alpha, const float *b, int64_t ldb, float *dst) {
#ifdef SGEMM_X86
    Sgemm g = {.tb = tb, .n = n, .k = k, .b = b, .ldb = ldb, .alpha = alpha, .nb = n, .kc = k};
    for (int64_t q = 0; q * NR < n; q++)
        pack_panel(&g, q, dst + q * k * NR);
#else
    (void)tb, (void)k, (void)n, (void)alpha, (void)b, (void)ldb, (void)dst;
#endif
}

void rt_gemm_panels(int ta, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *panels,
                    int64_t pk, int add, float *c, int64_t ldc) {
#ifdef SGEMM_X86
    _Alignas(64) float sliver[2][MR * KC];
    Sgemm g = {.ta = ta, .m = m, .k = k, .a = a, .lda = lda, .mb = m};
    int wide = rt_sgemm_own_avx512(-1), step = wide ? 2 : 1; /* slivers at a time */
    int64_t full_panels = n / NR, pstride = pk * NR;
    for (int64_t r = 0; r < m && k <= 0 && !add; r++) /* an empty sum */
        memset(c + r * ldc, 0, (size_t)n * sizeof *c);
    for (g.p0 = 0; g.p0 < k; g.p0 += KC) { /* K slices, as rt_sgemm_own's: C carries the sum */
        g.kc = k - g.p0 < KC ? k - g.p0 : KC;
        int acc = add || g.p0 > 0;
        for (int64_t i0 = 0; i0 < m; i0 += step * MR) {
            const float *sl[2] = {NULL, NULL}; /* the slivers, packed; NULL: read in place */
            int64_t rows[2] = {0, 0}, rs, ks;
            for (int h = 0; h < step && i0 + h * MR < m; h++) {
                int64_t r0 = i0 + h * MR;
                rows[h] = m - r0 < MR ? m - r0 : MR;
                if (ta && rows[h] == MR) /* six values of each row of A, side by side */
                    for (int64_t kk = 0; kk < g.kc; kk++)
                        memcpy(sliver[h] + kk * MR, a + (g.p0 + kk) * lda + r0, MR * sizeof *a);
                else if (ta || rows[h] < MR)
                    pack_sliver(&g, r0 / MR, sliver[h]);
                sl[h] = ta || rows[h] < MR ? sliver[h] : NULL;
            }
            int64_t q = 0;
            if (wide && rows[0] == MR) { /* pairs of full panels on the AVX-512 kernels */
                const float *a0 = sl[0] ? sl[0] : a + i0 * lda + g.p0;
                const float *a1 = sl[1] ? sl[1] : a + (i0 + MR) * lda + g.p0;
                rs = sl[0] ? 1 : lda, ks = sl[0] ? MR : 1;
                for (; q + 2 <= full_panels; q += 2) {
                    const float *b = panels + q * pstride + g.p0 * NR;
                    if (rows[1] == MR)
                        micro512_2x2(g.kc, a0, a1, rs, ks, b, pstride, c + i0 * ldc + q * NR, ldc, acc);
                    else
                        micro512_1x2(g.kc, a0, rs, ks, b, pstride, c + i0 * ldc + q * NR, ldc, acc);
                }
            }
            /* the rest: panels from q for the slivers the pairs covered, from 0 for the others */
            for (int h = 0; h < step && rows[h] > 0; h++)
                for (int64_t j = rows[0] == MR && (h == 0 || rows[1] == MR) ? q : 0; j * NR < n; j++)
                    micro_block(g.kc, sl[h], a + (i0 + h * MR) * lda + g.p0, lda, panels + j * pstride + g.p0 * NR,
                                c + (i0 + h * MR) * ldc + j * NR, ldc, rows[h], n - j * NR < NR ? n - j * NR : NR, acc);
        }
    }
#else
    (void)ta, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)panels, (void)pk, (void)add, (void)c, (void)ldc;
#endif
}

/* ===== the product ===================================================================== */

int rt_sgemm_own_available(void) {
#ifdef SGEMM_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static atomic_int avx512 = -1; /* -1: not yet asked */

int rt_sgemm_own_avx512(int want) {
#ifdef SGEMM_X86
    int now = atomic_load(&avx512); /* the common case: a product asking, once decided */
    if (want < 0 && now >= 0)
        return now;
    int can = rt_sgemm_own_available() && __builtin_cpu_supports("avx512f");
    atomic_store(&avx512, want < 0 ? can : want && can);
    return atomic_load(&avx512);
#else
    (void)want;
    return 0;
#endif
}

#ifdef SGEMM_X86
/* The product g describes (operands, shapes, alpha, add, bf16 set; the rest is filled here),
 * split over the pool. 0 where the scratch cannot be had. */
static int own_run(RtPool *pool, Sgemm *gp) {
    Sgemm g = *gp;
    int64_t m = g.m, n = g.n, k = g.k;
    if (m <= 0 || n <= 0)
        return 1;
    if (k <= 0) { /* an empty sum */
        for (int64_t r = 0; r < m && !g.add; r++)
            memset(g.c + r * g.ldc, 0, (size_t)n * sizeof *g.c);
        return 1;
    }
    int64_t mb_max = m < MB ? m : MB, nb_max = n < NB ? n : NB, kc_max = k < KC ? k : KC;
    /* the panels at scratch + an start on a 64-byte boundary, as pack_panel's stores need */
    size_t an = (size_t)((mb_max + MR - 1) / MR * MR * kc_max + 15) / 16 * 16;
    size_t bn = (size_t)((nb_max + NR - 1) / NR * NR * kc_max);
    float *scratch = aligned_alloc(64, ((an + bn) * sizeof(float) + 63) / 64 * 64);
    if (!scratch)
        return 0; /* the caller's path needs no scratch */
    g.ap = scratch, g.bp = scratch + an, g.wide = rt_sgemm_own_avx512(-1);
    for (g.i0 = 0; g.i0 < m; g.i0 += MB) {
        g.mb = m - g.i0 < MB ? m - g.i0 : MB;
        g.slivers = (g.mb + MR - 1) / MR;
        g.packed = g.ta || g.bf16 ? g.slivers : g.mb % MR ? 1 : 0;
        g.groups = (g.slivers + GROUP - 1) / GROUP;
        for (g.j0 = 0; g.j0 < n; g.j0 += NB) {
            g.nb = n - g.j0 < NB ? n - g.j0 : NB;
            g.panels = (g.nb + NR - 1) / NR;
            g.strips = (g.panels + PW - 1) / PW;
            if (g.groups == 1 && !g.ta && !g.bf16) {
                if (g.mb * k <= CLAIM_A) /* op(A) stays in the last-level cache */
                    rt_parallel_for_claimed(pool, g.strips, strip_items, &g);
                else /* a thread's strips share each slice of A while it is in cache */
                    rt_parallel_for(pool, g.strips, strip_items, &g);
                continue;
            }
            for (g.p0 = 0; g.p0 < k; g.p0 += KC) {
                g.kc = k - g.p0 < KC ? k - g.p0 : KC;
                rt_parallel_for_claimed(pool, (g.packed + SB - 1) / SB + (g.groups > 1 ? g.panels : 0), pack_items, &g);
                rt_parallel_for_claimed(pool, g.groups * g.strips, multiply_items, &g);
            }
        }
    }
    free(scratch);
    return 1;
}
#endif

int rt_sgemm_own(RtPool *pool, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, int add, float *c, int64_t ldc) {
#ifdef SGEMM_X86
    if (!rt_sgemm_own_available())
        return 0;
    Sgemm g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .a = a, .b = b, .c = c};
    g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.alpha = alpha, g.add = add;
    return own_run(pool, &g);
#else
    (void)pool, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb,
        (void)add, (void)c, (void)ldc;
    return 0;
#endif
}

int rt_sgemm_own_bf16(RtPool *pool, int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                      const uint16_t *b, int64_t ldb, float *c, int64_t ldc) {
#ifdef SGEMM_X86
    if (!rt_sgemm_own_available())
        return 0;
    Sgemm g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .ah = a, .bh = b, .c = c, .bf16 = 1};
    g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.alpha = 1.0f;
    return own_run(pool, &g);
#else
    (void)pool, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c,
        (void)ldc;
    return 0;
#endif
}

/* ===== the vdpbf16ps product (AVX512_BF16) ============================================== */

/* rt_sbgemm_dot: the blocking of rt_sgemm_own (blocks of MB rows and NB columns, slivers of
 * MR rows and panels of NR columns, row groups and strips of panels, one pack job and one
 * multiply job per block and K slice), on operands packed in pairs along k: a 32-bit word
 * holds op(A)[i, 2p] (low half) and op(A)[i, 2p + 1] (high half), or op(B)[2p, j] and
 * op(B)[2p + 1, j], so that one vdpbf16ps adds two k-steps of 16 columns to 16 f32 sums. A
 * packed sliver holds, for each pair p, its MR words side by side; a panel its NR words. A K
 * slice is KP pairs; an odd k's last pair, rows past m and columns past n are zero words, and
 * every sliver and panel is packed (none read in place). The micro-kernel is the AVX-512 one's
 * shape: two slivers by two panels, 24 sums, 24 vdpbf16ps for 2 panel loads and 12 broadcasts
 * per pair. Pieces of C at the edges run the same kernel through a padded copy. Each element
 * of C is one chain, pairs in order, whatever the piece and thread, so the bits depend only on
 * the shapes. */
enum { KP = 256 }; /* pairs of a K slice: 512 k-steps, the bytes of an f32 slice of KC */

typedef struct {
    int ta, tb;
    int64_t m, n, k;
    const uint16_t *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
    int64_t i0, mb, j0, nb, p0, kp; /* block, and slice: pairs p0 .. p0 + kp (k-steps 2 p0 ..) */
    int64_t slivers, panels, groups, strips;
    uint32_t *ap, *bp; /* packed slivers (kp x MR words) and panels (kp x NR words) */
} DotGemm;

#ifdef SGEMM_X86
#define DOT        __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma")))
#define INLINE_DOT __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma"), always_inline)) static inline

/* op(A)[i, kk] (0 past k) as a 16-bit pattern. */
static inline uint32_t dot_a(const DotGemm *g, int64_t i, int64_t kk) {
    return kk >= g->k ? 0 : g->ta ? g->a[kk * g->lda + i] : g->a[i * g->lda + kk];
}

/* Sliver s of the block, pairs p0 ..: dst[p * MR + r]. */
static void dot_pack_sliver(const DotGemm *g, int64_t s, uint32_t *dst) {
    int64_t r0 = g->i0 + s * MR;
    for (int64_t p = 0; p < g->kp; p++) {
        int64_t kk = 2 * (g->p0 + p);
        for (int64_t r = 0; r < MR; r++) {
            int64_t i = r0 + r;
            dst[p * MR + r] = i >= g->m ? 0 : dot_a(g, i, kk) | dot_a(g, i, kk + 1) << 16;
        }
    }
}

/* Panel q of the block, pairs p0 ..: dst[p * NR + j]. */
DOT static void dot_pack_panel(const DotGemm *g, int64_t q, uint32_t *dst) {
    int64_t c0 = g->j0 + q * NR, cols = g->n - c0 < NR ? g->n - c0 : NR;
    int64_t p = 0;
    if (!g->tb) { /* B stored (k, n): rows 2p and 2p + 1 of B, interleaved */
        for (; p < g->kp; p++) {
            int64_t kk = 2 * (g->p0 + p);
            const uint16_t *r0 = g->b + kk * g->ldb + c0, *r1 = r0 + g->ldb;
            int odd = kk + 1 < g->k;
            if (cols == NR) {
                __m256i x0 = _mm256_loadu_si256((const __m256i *)r0);
                __m256i x1 = odd ? _mm256_loadu_si256((const __m256i *)r1) : _mm256_setzero_si256();
                __m256i lo = _mm256_unpacklo_epi16(x0, x1), hi = _mm256_unpackhi_epi16(x0, x1);
                _mm256_store_si256((__m256i *)(dst + p * NR), _mm256_permute2x128_si256(lo, hi, 0x20));
                _mm256_store_si256((__m256i *)(dst + p * NR + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
            } else {
                for (int64_t j = 0; j < NR; j++)
                    dst[p * NR + j] = j >= cols ? 0 : r0[j] | (odd ? (uint32_t)r1[j] << 16 : 0);
            }
        }
        return;
    }
    /* B stored (n, k): a pair is one 32-bit word of a row of B; 8 x 8 blocks of words
     * transposed, where the 8 pairs lie inside k */
    const uint16_t *src = g->b + c0 * g->ldb + 2 * g->p0;
    if (cols == NR)
        for (; p + 8 <= g->kp && 2 * (g->p0 + p + 8) <= g->k; p += 8)
            for (int h = 0; h < 2; h++) {
                __m256 r[8];
                for (int j = 0; j < 8; j++)
                    r[j] =
                        _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(src + (h * 8 + j) * g->ldb + 2 * p)));
                transpose8(r);
                for (int i = 0; i < 8; i++)
                    _mm256_store_ps((float *)(dst + (p + i) * NR + h * 8), r[i]);
            }
    for (; p < g->kp; p++) {
        int64_t kk = 2 * (g->p0 + p);
        for (int64_t j = 0; j < NR; j++) {
            const uint16_t *row = g->b + (c0 + j) * g->ldb;
            dst[p * NR + j] = j >= cols ? 0 : row[kk] | (kk + 1 < g->k ? (uint32_t)row[kk + 1] << 16 : 0);
        }
    }
}

static void dot_pack_items(void *ctx, int64_t lo, int64_t hi) {
    const DotGemm *g = ctx;
    int64_t sitems = (g->slivers + SB - 1) / SB;
    for (int64_t it = lo; it < hi; it++)
        if (it >= sitems)
            dot_pack_panel(g, it - sitems, g->bp + (it - sitems) * g->kp * NR);
        else
            for (int64_t s = it * SB; s < (it + 1) * SB && s < g->slivers; s++)
                dot_pack_sliver(g, s, g->ap + s * g->kp * MR);
}

/* C (6 * S x 16 * V, row stride ldc) = C (add) or 0, plus slivers a0 (rows 0-5) and a1 (rows
 * 6-11) times panels bp and bp + pstride, over kp pairs. */
INLINE_DOT void dot_micro(int64_t kp, const uint32_t *a0, const uint32_t *a1, const uint32_t *bp, int64_t pstride,
                          float *c, int64_t ldc, int add, const int S, const int V) {
    __m512 acc[2 * MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < S * MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
            acc[r][v] = add ? _mm512_loadu_ps(c + r * ldc + v * NR) : _mm512_setzero_ps();
    const uint32_t *b0 = bp, *b1 = bp + pstride;
#pragma GCC unroll 2
    for (int64_t p = 0; p < kp; p++) {
        __m512bh b[2];
        b[0] = (__m512bh)_mm512_load_si512(b0);
        if (V > 1)
            b[1] = (__m512bh)_mm512_load_si512(b1);
#pragma GCC unroll 12
        for (int r = 0; r < S * MR; r++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32((int)(r < MR ? a0 : a1)[r % MR]);
#pragma GCC unroll 2
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, b[v]);
        }
        b0 += NR, b1 += NR, a0 += MR, a1 += MR;
    }
#pragma GCC unroll 12
    for (int r = 0; r < S * MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
            _mm512_storeu_ps(c + r * ldc + v * NR, acc[r][v]);
}

DOT static void dot_micro_2x2(int64_t kp, const uint32_t *a0, const uint32_t *a1, const uint32_t *bp, int64_t ps,
                              float *c, int64_t ldc, int add) {
    dot_micro(kp, a0, a1, bp, ps, c, ldc, add, 2, 2);
}
DOT static void dot_micro_1x2(int64_t kp, const uint32_t *a0, const uint32_t *a1, const uint32_t *bp, int64_t ps,
                              float *c, int64_t ldc, int add) {
    dot_micro(kp, a0, a1, bp, ps, c, ldc, add, 1, 2);
}
DOT static void dot_micro_2x1(int64_t kp, const uint32_t *a0, const uint32_t *a1, const uint32_t *bp, int64_t ps,
                              float *c, int64_t ldc, int add) {
    dot_micro(kp, a0, a1, bp, ps, c, ldc, add, 2, 1);
}
DOT static void dot_micro_1x1(int64_t kp, const uint32_t *a0, const uint32_t *a1, const uint32_t *bp, int64_t ps,
                              float *c, int64_t ldc, int add) {
    dot_micro(kp, a0, a1, bp, ps, c, ldc, add, 1, 1);
}

/* The piece of C where slivers s, s + S - 1 meet panels q, q + V - 1 (packed at bp); at the
 * edges through a padded copy of C, so every element runs the same chain. */
static void dot_tile(const DotGemm *g, int64_t s, int S, int64_t q, int V, const uint32_t *bp) {
    static void (*const kernel[2][2])(int64_t, const uint32_t *, const uint32_t *, const uint32_t *, int64_t, float *,
                                      int64_t, int) = {{dot_micro_1x1, dot_micro_1x2}, {dot_micro_2x1, dot_micro_2x2}};
    int64_t r0 = g->i0 + s * MR, c0 = g->j0 + q * NR;
    int64_t rows = g->m - r0 < S * MR ? g->m - r0 : S * MR, cols = g->n - c0 < V * NR ? g->n - c0 : V * NR;
    const uint32_t *a0 = g->ap + s * g->kp * MR, *a1 = a0 + g->kp * MR;
    int add = g->p0 > 0;
    float *c = g->c + r0 * g->ldc + c0;
    if (rows == S * MR && cols == V * NR) {
        kernel[S - 1][V - 1](g->kp, a0, a1, bp, g->kp * NR, c, g->ldc, add);
        return;
    }
    _Alignas(64) float tmp[2 * MR * 2 * NR];
    memset(tmp, 0, sizeof tmp);
    for (int64_t r = 0; r < rows && add; r++)
        memcpy(tmp + r * 2 * NR, c + r * g->ldc, (size_t)cols * sizeof *c);
    kernel[S - 1][V - 1](g->kp, a0, a1, bp, g->kp * NR, tmp, 2 * NR, add);
    for (int64_t r = 0; r < rows; r++)
        memcpy(c + r * g->ldc, tmp + r * 2 * NR, (size_t)cols * sizeof *c);
}

/* Item it: row group it / strips by strip it % strips, pairs of slivers against pairs of
 * panels. */
static void dot_multiply_items(void *ctx, int64_t lo, int64_t hi) {
    const DotGemm *g = ctx;
    for (int64_t it = lo; it < hi; it++) {
        int64_t grp = it / g->strips, q0 = it % g->strips * PW, q1 = q0 + PW < g->panels ? q0 + PW : g->panels;
        int64_t s0 = grp * g->slivers / g->groups, s1 = (grp + 1) * g->slivers / g->groups;
        for (int64_t s = s0; s < s1; s += 2)
            for (int64_t q = q0; q < q1; q += 2)
                dot_tile(g, s, s + 1 < s1 ? 2 : 1, q, q + 1 < q1 ? 2 : 1, g->bp + q * g->kp * NR);
    }
}
#endif

int rt_sbgemm_dot_available(void) {
#ifdef SGEMM_X86
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && rt_sgemm_own_available();
#else
    return 0;
#endif
}

int rt_sbgemm_dot(RtPool *pool, int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                  const uint16_t *b, int64_t ldb, float *c, int64_t ldc) {
#ifdef SGEMM_X86
    if (!rt_sbgemm_dot_available())
        return 0;
    if (m <= 0 || n <= 0)
        return 1;
    if (k <= 0) { /* an empty sum */
        for (int64_t r = 0; r < m; r++)
            memset(c + r * ldc, 0, (size_t)n * sizeof *c);
        return 1;
    }
    int64_t pairs = (k + 1) / 2, mb_max = m < MB ? m : MB, nb_max = n < NB ? n : NB, kp_max = pairs < KP ? pairs : KP;
    size_t an = (size_t)((mb_max + MR - 1) / MR * MR * kp_max + 15) / 16 * 16;
    size_t bn = (size_t)((nb_max + NR - 1) / NR * NR * kp_max);
    uint32_t *scratch = aligned_alloc(64, ((an + bn) * sizeof(uint32_t) + 63) / 64 * 64);
    if (!scratch)
        return 0;
    DotGemm g = {
        .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .a = a, .b = b, .c = c, .lda = lda, .ldb = ldb, .ldc = ldc};
    g.ap = scratch, g.bp = scratch + an;
    for (g.i0 = 0; g.i0 < m; g.i0 += MB) {
        g.mb = m - g.i0 < MB ? m - g.i0 : MB;
        g.slivers = (g.mb + MR - 1) / MR;
        g.groups = (g.slivers + GROUP - 1) / GROUP;
        for (g.j0 = 0; g.j0 < n; g.j0 += NB) {
            g.nb = n - g.j0 < NB ? n - g.j0 : NB;
            g.panels = (g.nb + NR - 1) / NR;
            g.strips = (g.panels + PW - 1) / PW;
            for (g.p0 = 0; g.p0 < pairs; g.p0 += KP) {
                g.kp = pairs - g.p0 < KP ? pairs - g.p0 : KP;
                rt_parallel_for_claimed(pool, (g.slivers + SB - 1) / SB + g.panels, dot_pack_items, &g);
                rt_parallel_for_claimed(pool, g.groups * g.strips, dot_multiply_items, &g);
            }
        }
    }
    free(scratch);
    return 1;
#else
    (void)pool, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c,
        (void)ldc;
    return 0;
#endif
}
