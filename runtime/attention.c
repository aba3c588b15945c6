/*
 * attention.c: o = softmax(scale q k^T) v and its gradients, fused, for generated code.
 *
 * Blocking. The (t, t) score matrix of a problem is never stored: the queries go in blocks of
 * block_rows(t) rows (32 or 64), and a block's scores against the keys it sees, a (rows, keys)
 * tile, live in a scratch buffer small enough to stay in the core's cache while the block's
 * row work (scale, mask, max, exp, sums) and its matrix products run. With causal, query row
 * i sees keys 0..i, so the block of rows [i0, i1) needs keys [0, i1) only: the products of a
 * block shrink with its position (about half the work of all blocks), and only the block's
 * diagonal square has entries to mask. The row work is loops over 8-float vectors with an
 * exp of our own (see "row work"), which fix the order of every sum.
 *
 * Query positions. A device's chunk of a split sequence has tq query rows against tk >= tq
 * keys, row i at position pos[i] (non-decreasing): with causal it sees keys 0..pos[i], a
 * block the keys up to its last row's position. The backward's slots keep tk rows: dq fills
 * the first tq, zeros after, and the keys no query sees get zero dk and dv.
 *
 * The tiles' products. Where rt_sgemm runs the own product (AVX2 and FMA, AXLC_SGEMM not
 * openblas) they run on its micro-kernel (sgemm.c, rt_gemm_panels), with a problem's keys and
 * values packed once for all the query blocks a chunk runs of it: K^T for the scores and V
 * for the output forward; K^T, V^T and scale K backward; a block's own dO and scale Q once
 * per block. Elsewhere they are single-threaded OpenBLAS calls (cblas_sgemm), which pack K
 * and V again for every block and take their buffer from OpenBLAS's pool under one
 * process-wide mutex; the pool's threads calling at once wait on it (futex), about 1 ms of
 * tiny-lm's 6 ms step. Against the OpenBLAS tiles, trainers on 2 threads, two A/Bs of 4 to 6
 * alternating runs each (medians): tiny-lm 6.48 -> 6.11 and 6.24 -> 6.12 ms, small 412 -> 382
 * and 399 -> 382, long 370 -> 324 and 328 -> 322 (docs/bench.md).
 *
 * Backward, without saved statistics. rt_attention_grad recomputes each block's normalized
 * probabilities P from q and k, as the forward does, then dP = dO V^T, D_i = sum_j P_ij dP_ij
 * and dS = P (dP - D), and from those dq for the block's rows and its terms of dk and dv for
 * the keys it sees. dk and dv of a problem are sums over its query blocks, so one work item
 * is one whole problem, whose blocks add into its dk and dv in a fixed order (last first).
 * Grouped-query (group > 1: problem p reads the keys and values of key problem p / group), an
 * item is a key problem: its group's query problems in order, each one's blocks last first.
 * Recomputing costs one product and one exp per score; saving P would cost t * t floats.
 *
 * Determinism. Work items depend only on (bn, t, h): the forward's are query blocks (all
 * independent), the backward's problems, and each writes only its own rows. How the pool
 * chunks the items, and so the thread count, never changes a bit of the result. Scratch is
 * per chunk (one rt_parallel_for call), always written before it is read.
 *
 * Scratch: B (t + 1) floats per chunk forward and B (2t + 1) backward, B = block_rows(t):
 * 64 KiB forward and 128 KiB backward at t = 256, 1 MiB backward at t = 2048; with the own
 * tiles, panels of 2 t h floats more forward and 3 t h + 2 B h backward (h rounded up to 16),
 * 1 MiB forward and 1.6 MiB backward at t = 2048, h = 64.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_impl.h"

/* ===== blocks and scratch ============================================================= */

typedef struct {
    int64_t bn, tq, tk, h, nblk; /* tq query rows, tk key rows; nblk: query blocks per problem */
    int64_t group;               /* query problems per key problem: problem p reads k, v of p / group */
    int causal;
    float scale;
    const float *q, *k, *v, *dout; /* q, dout (bn, tq, h), k and v (bn / group, tk, h); dout backward only */
    const int32_t *pos;            /* the query rows' positions (tq), or NULL: row i is at i */
    float *o; /* forward: (bn, tq, h); backward: dq, dk, dv at ir_attention_grad_at's places, tk h each */
    int own;  /* the tiles on rt_gemm_panels (rt_sgemm_use_own), else OpenBLAS */
} Att;

/* A chunk's scratch: the block's scores and their gradient, and with `own` the panels of the
 * problem last packed (`packed`), for all its query blocks: K^T and V^T (over the keys, h
 * rows), V and scale K (over h, t rows); and the block's own: scale Q and dO (over h, rows). */
typedef struct {
    float *s, *ds, *sums;
    float *kt, *vt, *vn, *kn, *qn, *dn;
    int64_t packed;
} Scratch;

/* Rows of a query block. Larger blocks pack K and V (inside OpenBLAS) fewer times per score;
 * smaller ones waste less of the diagonal tile, half of which is masked. Measured on a 2-core
 * Zen 3, h = 64: 64 is best from t = 256 up (96 to 176 were no better at t = 1024 and 2048,
 * 128 worse at 256); at t = 64 and 128, 32 is 5 to 10% faster than 64. */
static int64_t block_rows(int64_t t) {
    int64_t rows = t <= 128 ? 32 : 64;
    return t < rows ? t : rows;
}

/* The runtime never exits on its own, but a kernel has no status to return: out of memory
 * here ends the process with a message rather than a wrong step. 64-byte aligned (packed
 * panels are read with aligned loads). */
static float *scratch_new(int64_t floats) {
    size_t bytes = ((size_t)floats * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (!p) {
        fprintf(stderr, "axlc runtime: out of memory for the attention scratch (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

/* A chunk's scratch (Scratch): the scores of a block, and with backward their gradient; the
 * panels when a->own. */
static Scratch scratch_make(const Att *a, int backward) {
    int64_t br = block_rows(a->tq), t = a->tk, h = a->h, tiles = (backward ? 2 : 1) * br * t;
    int64_t over_keys = rt_panels_floats(h, t), over_h = rt_panels_floats(t, h), rows_h = rt_panels_floats(br, h);
    int64_t panels = !a->own ? 0 : backward ? 2 * over_keys + over_h + 2 * rows_h : over_keys + over_h;
    Scratch sc = {.packed = -1};
    sc.s = scratch_new(tiles + br + 16 + panels);
    sc.ds = backward ? sc.s + br * t : NULL;
    sc.sums = sc.s + tiles;
    if (a->own) {
        float *p = sc.sums + br; /* then up to 16 floats, to the next 64-byte boundary */
        sc.kt = p + (64 - (uintptr_t)p % 64) % 64 / sizeof(float);
        if (!backward)
            sc.vn = sc.kt + over_keys;
        else
            sc.vt = sc.kt + over_keys, sc.kn = sc.vt + over_keys, sc.qn = sc.kn + over_h, sc.dn = sc.qn + rows_h;
    }
    return sc;
}

/* Packs problem p's keys and values, once for all the blocks a chunk runs of it. */
static void pack_problem(const Att *a, Scratch *sc, int64_t p, int backward) {
    int64_t t = a->tk, h = a->h;
    const float *k = a->k + p * t * h, *v = a->v + p * t * h;
    if (!a->own || sc->packed == p)
        return;
    rt_pack_panels(1, h, t, 1.0f, k, h, sc->kt); /* for S = Q K^T */
    if (!backward) {
        rt_pack_panels(0, t, h, 1.0f, v, h, sc->vn); /* O = P V */
    } else {
        rt_pack_panels(1, h, t, 1.0f, v, h, sc->vt);     /* dP = dO V^T */
        rt_pack_panels(0, t, h, a->scale, k, h, sc->kn); /* dq = scale dS K */
    }
    sc->packed = p;
}

/* C (m, n) = alpha op(A) op(B), plus C when `add` (rt_gemm_one), every matrix row-major with
 * its natural leading dimension, A stored (k, m) when ta and B (n, k) when tb. Clearing by
 * memset rather than OpenBLAS's beta 0 saves a tenth of the backward at t = 64. */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, const float *b, int add,
                 float *c) {
    rt_gemm_one(ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, add, c, n);
}

/* ===== row work ======================================================================= */

/* The row loops work on vectors of 8 floats through GCC's vector extension (clang has it too):
 * the runtime's -O2 vectorizes no loop with a call (expf), a select or a float sum in it, and
 * these have all three; libm's expf alone was a quarter of the forward. The build targets
 * baseline x86-64 (SSE2), where each 8-float operation is two 4-float ones; on x86-64 the
 * functions marked ROW_KERNEL are compiled a second time for AVX2 and the loader picks the
 * clone the CPU runs (target_clones): a fifth less time forward, a tenth backward. Both
 * clones do the same IEEE operations on the same lanes in the same order (neither has FMA,
 * so a * b + c is two roundings in both), so they give the same bits. Each sum keeps 8 lane
 * sums, added in a fixed order at the end, so a row's bits depend only on its values. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define ROW_KERNEL __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef ROW_KERNEL
#define ROW_KERNEL
#endif

/* A 32-byte vector argument is passed differently with and without AVX, so an AVX2 clone must
 * never call a helper that takes or returns one: the helpers are always inlined, at -O0 too.
 * (GCC and clang still warn of the ABI difference, -Wpsabi, so runtime/CMakeLists.txt builds
 * this file with -Wno-psabi; clang refuses such calls from an AVX2 clone outright, so clang
 * builds have no clones.) */
#define VEC_INLINE static inline __attribute__((always_inline))
enum { LANES = 8 };
typedef float VF __attribute__((vector_size(4 * LANES)));
typedef int32_t VI __attribute__((vector_size(4 * LANES))); /* lane masks, as comparisons give them */
typedef uint32_t VU __attribute__((vector_size(4 * LANES)));

VEC_INLINE VF vf_load(const float *p) {
    VF v;
    memcpy(&v, p, sizeof v);
    return v;
}

VEC_INLINE void vf_store(float *p, VF v) {
    memcpy(p, &v, sizeof v);
}

VEC_INLINE VF vf_splat(float x) {
    return (VF){x, x, x, x, x, x, x, x};
}

/* Lanes of a where m is set, else of b. */
VEC_INLINE VF vf_select(VI m, VF a, VF b) {
    return (VF)((m & (VI)a) | (~m & (VI)b));
}

VEC_INLINE float vf_sum(VF v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

VEC_INLINE float vf_max(VF v) {
    float m = v[0];
    for (int u = 1; u < LANES; u++)
        m = v[u] > m ? v[u] : m;
    return m;
}

/* e^x for x <= 0 to within 1 ulp, and 0 below -87 (where e^x leaves the normal floats):
 * x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, the first exact in few bits), e^r by
 * Cephes' degree-6 polynomial for expf, and 2^n written into the exponent field. Adding
 * 1.5 * 2^23 rounds x / ln2 to the integer n and leaves n in the low bits of the sum. NaN
 * stays NaN. */
VEC_INLINE VF vf_exp_neg(VF x) {
    const float magic = 12582912.0f;
    VI under = x < vf_splat(-87.0f);
    VF xc = vf_select(under, vf_splat(-87.0f), x);
    VF t = xc * 1.44269504f + magic, n = t - magic;
    VF r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    VF p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    VF y = p * r * r + r + 1.0f;
    VU pow2n = ((VU)t + (127u - 0x4B400000u)) << 23;
    return (VF)(~under & (VI)(y * (VF)pow2n));
}

/* x[0:n) *= c. */
ROW_KERNEL static void scale_row(float *x, int64_t n, float c) {
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        vf_store(x + j, vf_load(x + j) * c);
    for (; j < n; j++)
        x[j] *= c;
}

/* With causal, the keys [0, n) query row i sees: to its position, within the keys there are. */
static int64_t causal_keys(const Att *a, int64_t i) {
    int64_t at = a->pos ? a->pos[i] : i;
    return at < 0 ? 1 : at >= a->tk ? a->tk : at + 1;
}

/* Query block b: rows [i0, i0 + rows), and the keys [0, lim) its rows see between them (the
 * positions do not decrease: its last row's). */
static void block_span(const Att *a, int64_t b, int64_t *i0, int64_t *rows, int64_t *lim) {
    int64_t br = block_rows(a->tq);
    *i0 = b * br;
    *rows = a->tq - *i0 < br ? a->tq - *i0 : br;
    *lim = a->causal ? causal_keys(a, *i0 + *rows - 1) : a->tk;
}

/* Query row i (of a block's tile) sees keys [0, seen). */
static int64_t keys_seen(const Att *a, int64_t i, int64_t lim) {
    return a->causal ? causal_keys(a, i) : lim;
}

/* The largest of scale s[0:n), n >= 1. */
VEC_INLINE float row_max(const float *s, int64_t n, float scale) {
    VF mx = vf_splat(scale * s[0]);
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        VF x = scale * vf_load(s + j);
        mx = vf_select(x > mx, x, mx);
    }
    float m = vf_max(mx);
    for (; j < n; j++)
        m = scale * s[j] > m ? scale * s[j] : m;
    return m;
}

/* s[0:n) = exp(scale s - max), s[n:lim) = 0 (the masked keys); returns the sum. The last
 * n % LANES go through a zero-padded copy, so every value takes the one exp. */
ROW_KERNEL static float softmax_row(float *s, int64_t n, int64_t lim, float scale) {
    VF m = vf_splat(row_max(s, n, scale)), sum = vf_splat(0);
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        VF e = vf_exp_neg(scale * vf_load(s + j) - m);
        vf_store(s + j, e);
        sum += e;
    }
    if (j < n) {
        float tail[LANES] = {0};
        memcpy(tail, s + j, (size_t)(n - j) * sizeof(float));
        VF e = vf_exp_neg(scale * vf_load(tail) - m);
        for (int64_t u = 0; u < LANES; u++)
            e[u] = j + u < n ? e[u] : 0;
        vf_store(tail, e);
        memcpy(s + j, tail, (size_t)(n - j) * sizeof(float));
        sum += e;
    }
    for (j = n; j < lim; j++)
        s[j] = 0;
    return vf_sum(sum);
}

/* The block's scores: S (rows, lim) = Q[i0:i0+rows] K[0:lim]^T, each row turned into
 * probabilities; sums[r] receives row r's sum of exponentials. */
static void block_probs(const Att *a, const Scratch *sc, const float *q, const float *k, int64_t i0, int64_t rows,
                        int64_t lim, float *s, float *sums) {
    if (a->own)
        rt_gemm_panels(0, rows, lim, a->h, q + i0 * a->h, a->h, sc->kt, a->h, 0, s, lim);
    else
        gemm(0, 1, rows, lim, a->h, 1.0f, q + i0 * a->h, k, 0, s);
    for (int64_t r = 0; r < rows; r++)
        sums[r] = softmax_row(s + r * lim, keys_seen(a, i0 + r, lim), lim, a->scale);
}

/* ===== forward ======================================================================== */

/* Item `it` is query block b of problem p. Within a problem the items go 0, nblk-1, 1,
 * nblk-2, ...: with causal, a chunk of the pool that ends mid-problem then holds about as
 * much work as its share of the blocks. */
static void item_block(const Att *a, int64_t it, int64_t *p, int64_t *b) {
    int64_t r = it % a->nblk;
    *p = it / a->nblk;
    *b = r % 2 == 0 ? r / 2 : a->nblk - 1 - r / 2;
}

static void forward_items(void *ctx, int64_t lo, int64_t hi) {
    const Att *a = ctx;
    int64_t h = a->h, qth = a->tq * a->h, kth = a->tk * a->h;
    Scratch sc = scratch_make(a, 0);
    for (int64_t it = lo; it < hi; it++) {
        int64_t p, b, i0, rows, lim;
        item_block(a, it, &p, &b);
        block_span(a, b, &i0, &rows, &lim);
        int64_t kp = p / a->group;
        pack_problem(a, &sc, kp, 0);
        block_probs(a, &sc, a->q + p * qth, a->k + kp * kth, i0, rows, lim, sc.s, sc.sums);
        float *o = a->o + p * qth + i0 * h;
        if (a->own)
            rt_gemm_panels(0, rows, h, lim, sc.s, lim, sc.vn, a->tk, 0, o, h);
        else
            gemm(0, 0, rows, h, lim, 1.0f, sc.s, a->v + kp * kth, 0, o);
        for (int64_t r = 0; r < rows; r++)
            scale_row(o + r * h, h, 1.0f / sc.sums[r]);
    }
    free(sc.s);
}

void rt_attention(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                  float scale, const float *q, const float *k, const float *v, const int32_t *pos, float *o) {
    if (bn <= 0 || tq <= 0 || tk < tq || h <= 0 || group <= 0)
        return;
    int64_t br = block_rows(tq);
    Att a = {bn, tq, tk, h, (tq + br - 1) / br, group, causal != 0, scale, q, k, v, NULL, pos, o, rt_sgemm_use_own()};
    rt_parallel_for(pool, bn * a.nblk, forward_items, &a);
}

/* ===== backward ======================================================================= */

/* One row of a block: p holds its exponentials (sum `sum`) and dp its dP. Makes p the
 * probabilities P and dp the dS = P (dP - D), D = sum_j P_j dP_j. */
ROW_KERNEL static void grad_row(float *p, float *dp, int64_t lim, float sum) {
    float inv = 1.0f / sum;
    VF acc = vf_splat(0);
    int64_t j = 0;
    for (; j + LANES <= lim; j += LANES)
        acc += vf_load(p + j) * vf_load(dp + j);
    float dot = vf_sum(acc);
    for (; j < lim; j++)
        dot += p[j] * dp[j];
    float d = inv * dot;
    for (j = 0; j + LANES <= lim; j += LANES) {
        VF pj = vf_load(p + j) * inv;
        vf_store(p + j, pj);
        vf_store(dp + j, pj * (vf_load(dp + j) - vf_splat(d)));
    }
    for (; j < lim; j++) {
        p[j] *= inv;
        dp[j] = p[j] * (dp[j] - d);
    }
}

/* Where the backward puts problem prob's dq and its key problem's dk and dv (ir/ir.h,
 * ir_attention_grad_at): (3, bn, t, h), or grouped per key problem its group's dq, dk, dv. */
static void grad_at(const Att *a, int64_t prob, int64_t *dq, int64_t *dk, int64_t *dv) {
    int64_t G = a->group, kp = prob / G;
    if (G == 1) {
        *dq = prob, *dk = a->bn + prob, *dv = 2 * a->bn + prob;
        return;
    }
    *dq = kp * (G + 2) + prob % G;
    *dk = kp * (G + 2) + G;
    *dv = *dk + 1;
}

/* Query block b of problem `prob`: its dq rows, and its terms of dk and dv, which it adds to
 * theirs or, the first block of the key problem (`first`), stores, with zeros for the keys
 * past the block's (no other block sees them); the last block also zeros dq's rows [tq, tk). */
static void grad_block(const Att *a, Scratch *sc, int64_t prob, int64_t b, int first) {
    int64_t h = a->h, qth = a->tq * h, th = a->tk * h, i0, rows, lim, kp = prob / a->group, at[3];
    block_span(a, b, &i0, &rows, &lim);
    grad_at(a, prob, &at[0], &at[1], &at[2]);
    const float *q = a->q + prob * qth, *k = a->k + kp * th, *v = a->v + kp * th;
    const float *dout = a->dout + prob * qth + i0 * h;
    float *dq = a->o + at[0] * th, *dk = a->o + at[1] * th, *dv = a->o + at[2] * th, *s = sc->s, *ds = sc->ds;
    if (first && lim < a->tk) {
        memset(dk + lim * h, 0, (size_t)((a->tk - lim) * h) * sizeof(float));
        memset(dv + lim * h, 0, (size_t)((a->tk - lim) * h) * sizeof(float));
    }
    if (b == a->nblk - 1 && a->tq < a->tk)
        memset(dq + qth, 0, (size_t)(th - qth) * sizeof(float));
    block_probs(a, sc, q, k, i0, rows, lim, s, sc->sums);
    if (a->own)
        rt_gemm_panels(0, rows, lim, h, dout, h, sc->vt, h, 0, ds, lim);
    else
        gemm(0, 1, rows, lim, h, 1.0f, dout, v, 0, ds);
    for (int64_t r = 0; r < rows; r++)
        grad_row(s + r * lim, ds + r * lim, lim, sc->sums[r]);
    if (a->own) {
        rt_pack_panels(0, rows, h, 1.0f, dout, h, sc->dn);
        rt_pack_panels(0, rows, h, a->scale, q + i0 * h, h, sc->qn);
        rt_gemm_panels(1, lim, h, rows, s, lim, sc->dn, rows, !first, dv, h);
        rt_gemm_panels(0, rows, h, lim, ds, lim, sc->kn, a->tk, 0, dq + i0 * h, h);
        rt_gemm_panels(1, lim, h, rows, ds, lim, sc->qn, rows, !first, dk, h);
        return;
    }
    gemm(1, 0, lim, h, rows, 1.0f, s, dout, !first, dv);
    gemm(0, 0, rows, h, lim, a->scale, ds, k, 0, dq + i0 * h);
    gemm(1, 0, lim, h, rows, a->scale, ds, q + i0 * h, !first, dk);
}

/* One key problem per item: its group's query problems in order, each one's blocks last to
 * first: the last block sees every key (with causal or without), so the group's first problem's
 * stores dk and dv whole and the others add to them. */
static void backward_items(void *ctx, int64_t lo, int64_t hi) {
    const Att *a = ctx;
    Scratch sc = scratch_make(a, 1);
    for (int64_t kp = lo; kp < hi; kp++) {
        pack_problem(a, &sc, kp, 1);
        for (int64_t prob = kp * a->group; prob < (kp + 1) * a->group; prob++)
            for (int64_t b = a->nblk - 1; b >= 0; b--)
                grad_block(a, &sc, prob, b, prob == kp * a->group && b == a->nblk - 1);
    }
    free(sc.s);
}

void rt_attention_grad(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                       float scale, const float *q, const float *k, const float *v, const float *dout,
                       const int32_t *pos, float *dqkv) {
    if (bn <= 0 || tq <= 0 || tk < tq || h <= 0 || group <= 0)
        return;
    int64_t br = block_rows(tq);
    Att a = {bn, tq,   tk,  h,    (tq + br - 1) / br, group, causal != 0, scale, q, k,
             v,  dout, pos, dqkv, rt_sgemm_use_own()};
    rt_parallel_for(pool, bn / group, backward_items, &a);
}

/* ===== bf16 tensors ======================================================================= */

/* Widen the operands to f32, run the f32 attention, round the results: exact in the widening,
 * so the result is the f32 attention's on the same values, rounded once. Problems are
 * independent (the f32 attention's items are query blocks or whole problems, never across
 * problems), so this runs a group of problems at a time, with f32 copies of that group only
 * (about BF16_GROUP_FLOATS floats, at least one problem), widened and rounded on the pool: the
 * same bits as all problems at once, in a fraction of the memory. */
enum { BF16_GROUP_FLOATS = 1 << 21 }; /* 8 MiB of f32 copies per group */

typedef struct {
    const uint16_t *src[4]; /* the group's inputs: q, k, v (and dout) */
    int nsrc;
    float *w; /* their f32 copies, src[i] at w + off[i] (len[i] floats), then the results */
    int64_t off[4], len[4];
    uint16_t *dst;              /* where the group's results go: `nout` runs of `olen` floats, `ostep` apart */
    int64_t olen, ostep, parts; /* parts: the items the work is cut in */
    int nout;
} Bf16Group;

/* Parts [lo, hi) of the group: inputs widened. */
static void widen_items(void *ctx, int64_t lo, int64_t hi) {
    const Bf16Group *g = ctx;
    for (int i = 0; i < g->nsrc; i++) {
        int64_t per = g->len[i] / g->parts;
        for (int64_t j = lo * per; j < hi * per; j++)
            g->w[g->off[i] + j] = rt_bf16_to_f32(g->src[i][j]);
    }
}

/* Parts [lo, hi) of the group: results rounded into their bf16 places. */
static void narrow_items(void *ctx, int64_t lo, int64_t hi) {
    const Bf16Group *g = ctx;
    const float *res = g->w + g->off[g->nsrc - 1] + g->len[g->nsrc - 1];
    int64_t per = g->olen / g->parts;
    for (int i = 0; i < g->nout; i++)
        for (int64_t j = lo * per; j < hi * per; j++)
            g->dst[i * g->ostep + j] = rt_bf16_from_f32(res[i * g->olen + j]);
}

/* The f32 attention (grad: its gradient) on problems [0, bn) in groups of whole key problems
 * (`kg` query problems each); ins: q, k, v (and dout); out: o (dqkv: three tensors of
 * bn * tk * h, or grouped (bn / kg) (kg + 2) tk h, ir_attention_grad_at). */
static void attention_bf16_groups(RtPool *pool, int64_t bn, int64_t kg, int64_t tq, int64_t tk, int64_t h,
                                  int32_t causal, float scale, const uint16_t *const *ins, const int32_t *pos,
                                  uint16_t *out, int grad) {
    int nsrc = grad ? 4 : 3, nout = grad ? 3 : 1;
    int64_t qper = tq * h, kper = tk * h, kn = bn / kg; /* key problems */
    int64_t oper = grad ? kper : qper, n = bn * oper;   /* a result problem's, all results' */
    /* one key problem's floats: q, k, v (and dout), then its results */
    int64_t floats = kg * qper + 2 * kper + (grad ? kg * qper + (kg + 2) * kper : kg * qper);
    int64_t group = BF16_GROUP_FLOATS / floats;
    group = group < 1 ? 1 : group > kn ? kn : group; /* in key problems */
    float *w = scratch_new(group * floats);
    for (int64_t k0 = 0; k0 < kn; k0 += group) {
        int64_t gk = kn - k0 < group ? kn - k0 : group, gq = gk * kg, b0 = k0 * kg;
        Bf16Group g = {.nsrc = nsrc, .w = w, .parts = gk, .nout = nout};
        int64_t at = 0;
        for (int i = 0; i < nsrc; i++) {
            int kv = i == 1 || i == 2;
            g.src[i] = ins[i] + (kv ? k0 * kper : b0 * qper);
            g.off[i] = at;
            g.len[i] = kv ? gk * kper : gq * qper;
            at += g.len[i];
        }
        float *f = w + at, *wq = w, *wk = w + g.off[1], *wv = w + g.off[2];
        if (!grad || kg == 1) { /* o, or (3, bn, tk, h): nout runs of the group's problems */
            g.dst = out + b0 * oper, g.olen = gq * oper, g.ostep = n;
        } else { /* grouped: the group's key problems' (kg + 2) tk h, one run */
            g.dst = out + k0 * (kg + 2) * kper, g.olen = gk * (kg + 2) * kper, g.ostep = 0, g.nout = 1;
        }
        rt_parallel_for(pool, gk, widen_items, &g);
        if (grad)
            rt_attention_grad(pool, gq, kg, tq, tk, h, causal, scale, wq, wk, wv, w + g.off[3], pos, f);
        else
            rt_attention(pool, gq, kg, tq, tk, h, causal, scale, wq, wk, wv, pos, f);
        rt_parallel_for(pool, gk, narrow_items, &g);
    }
    free(w);
}

void rt_attention_bf16(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                       float scale, const uint16_t *q, const uint16_t *k, const uint16_t *v, const int32_t *pos,
                       uint16_t *o) {
    if (bn <= 0 || tq <= 0 || tk < tq || h <= 0 || group <= 0)
        return;
    const uint16_t *in[3] = {q, k, v};
    attention_bf16_groups(pool, bn, group, tq, tk, h, causal, scale, in, pos, o, 0);
}

void rt_attention_grad_bf16(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                            float scale, const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *dout,
                            const int32_t *pos, uint16_t *dqkv) {
    if (bn <= 0 || tq <= 0 || tk < tq || h <= 0 || group <= 0)
        return;
    const uint16_t *in[4] = {q, k, v, dout};
    attention_bf16_groups(pool, bn, group, tq, tk, h, causal, scale, in, pos, dqkv, 1);
}
