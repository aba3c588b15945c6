/*
 * rt_impl.h: helpers shared by the runtime's source files. Private: it is not installed
 * with generated trainers, which see only axrt.h.
 */
#ifndef RT_IMPL_H
#define RT_IMPL_H

#include <stdio.h>

#include "axrt.h"

/* ===== file.c: mapped reads, atomic writes ============================================ */

/* A whole file mapped read-only. size 0 gives data == NULL. */
typedef struct RtMapped {
    const unsigned char *data;
    int64_t size;
} RtMapped;

int rt_file_map(const char *path, RtMapped *m, RtError *err);
void rt_file_unmap(RtMapped *m);

/* A file being written under a temporary name "<path>.tmp"; commit makes it appear at
 * `path` atomically and durably, abort removes it. Either must end every open. */
typedef struct RtWfile {
    FILE *f;
    char path[4096];
    char tmp[4096];
    uint32_t crc; /* CRC-32 of the bytes written so far */
    int64_t size;
} RtWfile;

int rt_wfile_open(RtWfile *w, const char *path, RtError *err);
int rt_wfile_write(RtWfile *w, const void *buf, size_t n, RtError *err);
int rt_wfile_commit(RtWfile *w, RtError *err);
void rt_wfile_abort(RtWfile *w);

/* A JSON text's first string that spells NUL as \u0000 (json-c would cut a key or value there,
 * C strings being what it gives): 1 with [*start, *end] the string, quotes included (*end the
 * text's last byte when the string is cut off), else 0. safetensors.c and tok_bpe.c refuse
 * such a file, quoting it. */
int rt_json_nul_string(const char *text, size_t len, size_t *start, size_t *end);

/* ===== blas.c ========================================================================= */

/* One single-threaded product, row-major: C (m, n) = alpha op(A) op(B), plus C when `add`;
 * A stored (k, m) when ta, B (n, k) when tb. Without `add`, C is cleared by memset and the
 * product runs with beta 1: the same bits as beta 0, for which OpenBLAS clears C with scalar
 * stores first, in less time. rt_sgemm's items and the attention kernels' tiles. */
void rt_gemm_one(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, int add, float *c, int64_t ldc);

/* ===== sgemm.c: the runtime's own product, on CPUs with AVX2 and FMA ================== */

/* Whether this CPU runs rt_sgemm_own. */
int rt_sgemm_own_available(void);
/* Whether rt_sgemm_own runs its AVX-512 kernels (the same bits as its AVX2 ones): want < 0
 * asks (the first ask decides: where the CPU has AVX-512F), 0 turns them off, 1 on where the
 * CPU has them; returns the setting. Tests and benchmarks compare the two. */
int rt_sgemm_own_avx512(int want);
/* C (m, n) = alpha op(A) (m, k) . op(B) (k, n), plus C when `add`, row-major, op as in
 * rt_sgemm, split over the pool (a NULL pool: on the calling thread, as inside a pool item).
 * Returns 0, having done nothing, where the CPU lacks AVX2 or FMA or the scratch cannot be
 * had; the caller then takes another path (rt_gemm_one). */
int rt_sgemm_own(RtPool *pool, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, int add, float *c, int64_t ldc);

/* rt_sgemm_own with bf16 operands (alpha 1, C overwritten): each value is widened to f32 as
 * the operands are packed, and the product runs the f32 kernels, so C gets rt_sgemm_own's bits
 * on the widened operands. 0, having done nothing, as rt_sgemm_own. */
int rt_sgemm_own_bf16(RtPool *pool, int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                      const uint16_t *b, int64_t ldb, float *c, int64_t ldc);

/* Tiles: single-threaded products whose right operand was packed once for many of them (the
 * fused attention packs a problem's keys and values once for all its query blocks), on CPUs
 * where rt_sgemm_own_available(); each element is the same chain of operations as in rt_sgemm_own.
 * rt_pack_panels packs op(B) (k, n) times alpha, B stored (k, n) or, tb, (n, k), into
 * rt_panels_floats(k, n) floats at dst (64-byte aligned). rt_gemm_panels: C (m, n) = op(A)
 * times the first k rows of such panels, packed with pk >= k rows, plus C when add; A stored
 * (m, k) or, ta, (k, m), row-major with leading dimension lda. */
int64_t rt_panels_floats(int64_t k, int64_t n);
void rt_pack_panels(int tb, int64_t k, int64_t n, float alpha, const float *b, int64_t ldb, float *dst);
void rt_gemm_panels(int ta, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *panels,
                    int64_t pk, int add, float *c, int64_t ldc);
/* Whether rt_sgemm runs the own product here: the CPU has AVX2 and FMA and AXLC_SGEMM is not
 * openblas (blas.c). */
int rt_sgemm_use_own(void);

/* The bf16 products rt_sbgemm can run. RT_SBGEMM_REF: A and B widened to f32, then
 * rt_gemm_one per batch element (any CPU). RT_SBGEMM_WIDEN: rt_sgemm_own_bf16 (AVX2 and FMA).
 * RT_SBGEMM_DOT: rt_sbgemm_dot, vdpbf16ps (AVX512_BF16). */
enum { RT_SBGEMM_REF, RT_SBGEMM_WIDEN, RT_SBGEMM_DOT };
/* Which one rt_sbgemm runs: want < 0 asks (the first ask decides: AXLC_SBGEMM=ref, widen or
 * dot, else the default, docs/runtime.md), else sets it; one the CPU lacks falls back to
 * WIDEN, then REF. Returns the setting. Tests and benchmarks compare them. */
int rt_sbgemm_path(int want);

/* ===== sgemm.c: the vdpbf16ps product (AVX512_BF16) ===================================== */

/* Whether this CPU runs rt_sbgemm_dot (AVX512_BF16 and AVX-512BW/VL). */
int rt_sbgemm_dot_available(void);
/* C (m, n) f32 = op(A) op(B) with bf16 operands (as rt_sgemm_own_bf16), by vdpbf16ps on
 * operands packed in pairs along k: each element's sum is its own fixed chain (k in pairs,
 * in order; a pair's odd product added first, then its even one, each rounded once as the
 * instruction does; input and result denormals flushed to zero), so not rt_sgemm_own's bits,
 * but the same on any thread count. 0, having done nothing, where the CPU lacks AVX512_BF16
 * or the scratch cannot be had. */
int rt_sbgemm_dot(RtPool *pool, int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                  const uint16_t *b, int64_t ldb, float *c, int64_t ldc);

/* ===== comm.c ========================================================================= */

/* Bytes per element of a collective of this dtype: 4 (RT_DT_F32, RT_DT_I32), 2 (RT_DT_BF16),
 * 0 for any other dtype, which no collective may have. */
int rt_coll_elem_bytes(int32_t dtype);

/* ===== tok_spm.cc, tok_bpe.c: the tokenizer kinds behind tok.c ========================= */

/* One kind of tokenizer: its functions on an opaque `impl` that its load function made. A
 * failure fills err with what is wrong, without the file's name (tok.c puts it in front). */
typedef struct RtTokOps {
    const char *kind; /* "sentencepiece", "bpe" */
    int64_t (*vocab)(const void *impl);
    int32_t (*bos)(const void *impl); /* -1: none */
    int (*encode)(const void *impl, const char *text, size_t n, int32_t **ids, int64_t *nids, RtError *err);
    /* NULL: a text is its tokens' bytes one after the other (token_bytes) */
    int (*decode)(const void *impl, const int32_t *ids, int64_t n, char **text, size_t *len, RtError *err);
    int64_t (*token_bytes)(const void *impl, int32_t id, char *buf, size_t cap);
    void (*free)(void *impl);
} RtTokOps;

#ifdef AXRT_HAVE_SENTENCEPIECE
/* A SentencePiece model from its serialized ModelProto (tok_spm.cc, through libsentencepiece). */
int rt_spm_load(void **impl, const void *data, size_t n, RtError *err);
extern const RtTokOps rt_spm_ops;
#endif
/* A Hugging Face tokenizer.json with a byte-level BPE model, from its n bytes of JSON (tok_bpe.c). */
int rt_bpe_load(void **impl, const char *json, size_t n, RtError *err);
extern const RtTokOps rt_bpe_ops;

/* ===== sample.c: --sample, text from the program's forward ============================== */

typedef struct RtSampleOpts {
    const char *prog;            /* for messages */
    int64_t count;               /* tokens to generate, >= 1 */
    const char *prompt;          /* NULL: none */
    double temperature;          /* 0: greedy */
    int64_t top_k;               /* > 0: draw among the top_k most likely tokens only */
    double top_p;                /* < 1: ... among the fewest whose probabilities sum to top_p */
    int no_kv_cache;             /* recompute the window per token even with a decode step */
    uint64_t seed;               /* of the draws */
    const char *ckpt_dir, *init; /* the weights: the newest checkpoint, else --init */
    int init_allow_unused;
    int64_t threads;
    const RtTok *tok;     /* --tokenizer: the prompt is text, encoded, and the output decoded; NULL: none */
    const RtSampleIo *io; /* the forward's slab lives elsewhere (an OpenCL device); NULL: here */
} RtSampleOpts;

/* Generates o->count tokens after the prompt and writes prompt and tokens to out (text for a
 * byte-level vocabulary, else token ids); notes go to stderr. Reads the checkpoint directory
 * and nothing else there. */
int rt_sample_run(const RtProgram *p, const RtSampleOpts *o, FILE *out, RtError *err);

/* The prompt as tokens, malloc'd into *tokens with room for count more (what --sample draws):
 * its tokenizer's ids (tok), its bytes (vocab 256), or decimal ids separated by spaces or commas.
 * No prompt (NULL or ""): one token, a newline (byte-level) or tok's <s> or token vocab-1, not
 * part of the prompt (*nprompt 0, *ntokens 1). On an error *tokens may still need free. */
int rt_sample_prompt(const RtTok *tok, const char *text, int64_t vocab, int64_t count, int32_t **tokens,
                     int64_t *ntokens, int64_t *nprompt, RtError *err);

/* The next token from logits (vocab): at temperature 0 the largest (the first of equal ones);
 * else a draw from softmax(logits / temperature), in double, restricted to the allowed tokens:
 * the top_k largest (0: all; ties to the lower id) and of those the fewest largest whose
 * probabilities, renormalized over them, sum to top_p or more (1: all). The draw is
 * u = (x >> 11) / 2^53 (x = rt_rng_u64(seed, "axlc.sample", k, 0)) times the allowed weights'
 * sum, against their running sum in id order. order (vocab) is scratch for the top-k/top-p sort. -1 if a logit is
 * not finite. */
int64_t rt_sample_pick(const float *logits, int64_t vocab, double temperature, int64_t top_k, double top_p,
                       uint64_t seed, int64_t k, int32_t *order);

#endif /* RT_IMPL_H */
