/*
 * sample.c: `trainer --sample N`: text from a trained model.
 *
 * The program's forward (RtProgram.forward, ABI 3) is the model on one sequence of seq tokens,
 * compiled next to the step, never sharded: every parameter lies whole in the forward's own
 * slab. The weights come from the newest checkpoint of --ckpt-dir that verifies (any mesh: each
 * tensor is read whole), or from --init; sampling only reads, so the checkpoint directory is not
 * locked, and nothing in it is written, renamed or removed.
 *
 * The context window is the last seq tokens of prompt and output so far, written from position
 * 0 and padded with zeros (the causal model never lets a position see the ones after it). With
 * a decode step (RtForward.decode, ABI 6) the forward runs once over the window as the prefill:
 * its keys and values fill the KV cache (per attention, (kv_heads, seq, head_dim)), and each
 * next token is one decode step at its position, whose own keys and values are written into
 * the cache there. When the window is full, the next token's window starts one token later, so
 * every position moves and every cached key with it: the sampler runs the forward over the new
 * window (a re-prefill), as the uncached sampler does for every token, so the text is the same
 * either way and past the window a token costs what it costs without the cache. Without a
 * decode step (non-causal attention, OpenCL) or with --no-kv-cache, every token runs the forward.
 *
 * The logits of the window's last token give the next one: the largest at temperature 0, else a
 * draw from softmax(logits / temperature), among the top-k and top-p tokens when asked, with the
 * counter-based generator of init.c, so (weights, prompt, options, seed) fix the text.
 *
 * With a byte-level vocabulary (256) the prompt is text and the output is bytes; with a tokenizer
 * (--tokenizer) the prompt is text it encodes and each token is printed as the bytes it stands
 * for; otherwise both are token ids, written in decimal and separated by spaces.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "rt_impl.h"

/* The stream of sampling draws: draw k is rt_rng_u64(seed, SAMPLE_STREAM, k, 0). */
#define SAMPLE_STREAM "axlc.sample"

static int64_t global_numel(const RtParamSlot *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n = s->global_shape[d] < 0 || (s->global_shape[d] > 0 && n > INT64_MAX / 8 / s->global_shape[d])
                ? -1
                : n * s->global_shape[d];
    return n;
}

static int region_ok(int64_t slab, int64_t off, int64_t bytes) {
    return bytes >= 0 && off >= 0 && off % 4 == 0 && off <= slab && bytes <= slab - off;
}

static int check_forward(const RtProgram *p, RtError *err) {
    const RtForward *f = p->forward;
    if (!f || !f->run)
        return rt_error_set(err, "--sample: this trainer has no sampling forward (an OpenCL trainer of a model with "
                                 "bf16 logits does not sample yet; a CPU trainer compiled by this axlc does)");
    if (p->seq < 1 || p->vocab < 1 || p->vocab > INT32_MAX || p->seq > INT32_MAX / 4 ||
        p->seq > INT64_MAX / 4 / p->vocab || f->slab_bytes <= 0 || (p->nparams > 0 && !f->param_offsets))
        return rt_error_set(err,
                            "program: forward: sequence %lld, vocabulary %lld, slab %lld bytes: expected "
                            "positive sizes and a parameter table",
                            (long long)p->seq, (long long)p->vocab, (long long)f->slab_bytes);
    if (!region_ok(f->slab_bytes, f->ids_offset, p->seq * 4) ||
        !region_ok(f->slab_bytes, f->logits_offset, p->seq * p->vocab * 4))
        return rt_error_set(err, "program: forward: ids or logits outside the %lld-byte slab",
                            (long long)f->slab_bytes);
    for (int i = 0; i < p->nparams; i++) {
        int64_t n = global_numel(&p->params[i]);
        if (f->param_offsets[i] != -1 && (n < 0 || !region_ok(f->slab_bytes, f->param_offsets[i], n * 4)))
            return rt_error_set(err, "program: forward: parameter %s outside the %lld-byte slab", p->params[i].path,
                                (long long)f->slab_bytes);
    }
    return 0;
}

/* One cache of the decode step: its cache and the prefill's (heads, seq, row), the row. */
static int check_cache(const RtProgram *p, const RtDecode *d, const RtKvCache *c, int i, RtError *err) {
    int64_t fwd = p->forward->slab_bytes;
    int64_t all = c->heads > 0 && c->row_bytes > 0 && c->heads <= INT64_MAX / c->row_bytes / p->seq
                      ? c->heads * c->row_bytes * p->seq
                      : -1;
    if (all < 0 || c->row_bytes % 2 != 0 || !region_ok(d->slab_bytes, c->row_offset, c->heads * c->row_bytes) ||
        !region_ok(fwd, c->prefill_offset, all) || c->cache_offset < fwd ||
        !region_ok(d->slab_bytes, c->cache_offset, all))
        return rt_error_set(err,
                            "program: decode: KV cache %d (%lld heads of %lld bytes): a region outside its slab, "
                            "or the cache inside the forward's %lld bytes",
                            i, (long long)c->heads, (long long)c->row_bytes, (long long)fwd);
    return 0;
}

/* The decode step shares the forward's slab: its weights where the forward's are, its own
 * regions (the caches above all) past the forward's bytes. */
static int check_decode(const RtProgram *p, RtError *err) {
    const RtDecode *d = p->forward->decode;
    if (!d->run || d->ncaches < 1 || !d->caches || d->slab_bytes < p->forward->slab_bytes ||
        (p->nparams > 0 && !d->param_offsets))
        return rt_error_set(err, "program: decode: no step, no KV cache, or a slab smaller than the forward's");
    if (!region_ok(d->slab_bytes, d->ids_offset, 4) || !region_ok(d->slab_bytes, d->pos_offset, 4) ||
        !region_ok(d->slab_bytes, d->logits_offset, p->vocab * 4))
        return rt_error_set(err, "program: decode: ids, pos or logits outside the %lld-byte slab",
                            (long long)d->slab_bytes);
    for (int i = 0; i < p->nparams; i++)
        if (d->param_offsets[i] != -1 && d->param_offsets[i] != p->forward->param_offsets[i])
            return rt_error_set(err, "program: decode: parameter %s at %lld, the forward's at %lld (expected the same)",
                                p->params[i].path, (long long)d->param_offsets[i],
                                (long long)p->forward->param_offsets[i]);
    for (int i = 0; i < d->ncaches; i++)
        if (check_cache(p, d, &d->caches[i], i, err) != 0)
            return -1;
    return 0;
}

typedef struct Sampler {
    const RtProgram *p;
    const RtSampleOpts *o;
    const RtDecode *decode; /* NULL: every token runs the forward */
    char *slab;             /* the forward's, and the decode step's past it */
    RtPool *pool;
    int32_t *tokens; /* (ntokens) prompt, then the output */
    int64_t ntokens, nprompt;
    int64_t cached;       /* tokens whose keys and values the cache holds, from position 0 */
    int32_t *order;       /* (vocab) scratch of rt_sample_pick */
    int bytes;            /* byte-level vocabulary: text in, text out */
    const RtSampleIo *io; /* the slab lives elsewhere (RtSampleOpts.io), or NULL */
} Sampler;

/* The sampler wrote bytes [off, off + n) of its slab, which the next run takes. */
static void io_wrote(const Sampler *s, int64_t off, int64_t n) {
    if (s->io)
        s->io->wrote(s->slab, off, n);
}

/* It reads bytes [off, off + n) of the run that just returned. */
static const char *io_need(const Sampler *s, int64_t off, int64_t n) {
    if (s->io)
        s->io->need(s->slab, off, n);
    return s->slab + off;
}

/* Bytes [src, src + n) of the slab to [dst, dst + n), where the slab lives. */
static void io_copy(const Sampler *s, int64_t dst, int64_t src, int64_t n) {
    if (s->io)
        s->io->copy(s->slab, dst, src, n);
    else
        memcpy(s->slab + dst, s->slab + src, (size_t)n);
}

static float *param_data(const Sampler *s, int i) {
    return (float *)(void *)(s->slab + s->p->forward->param_offsets[i]);
}

/* The parameter table with whole (global) shapes: what --init and the forward hold. */
static RtParamSlot *whole_params(const RtProgram *p) {
    RtParamSlot *w = calloc((size_t)p->nparams + 1, sizeof *w);
    for (int i = 0; w && i < p->nparams; i++) {
        w[i] = p->params[i];
        memcpy(w[i].shape, w[i].global_shape, sizeof w[i].shape);
    }
    return w;
}

/* Whether --init file st must set parameter i: every one, but in a LoRA program (one with
 * frozen parameters, m_offset -1) an adapter the file lacks starts from its init, as training's
 * --init does (train_state.c): B is zeros, so the text is the base model's. */
static int init_wants(const RtProgram *p, const RtSt *st, int i) {
    int frozen = 0;
    for (int j = 0; j < p->nparams; j++)
        frozen |= p->params[j].m_offset < 0;
    return !frozen || p->params[i].m_offset < 0 || rt_st_find(st, p->params[i].path) != NULL;
}

static int load_init(Sampler *s, RtError *err) {
    const RtProgram *p = s->p;
    const char *path = s->o->init;
    RtSt *st;
    RtError why;
    if (rt_st_open(&st, path, &why) != 0)
        return rt_error_set(err, "--init: %s", why.msg);
    rt_st_dump_as_weights(st); /* an interpreter's --dump: its new parameters, as training reads it */
    if (rt_init_refuse_shard(st, path, err) != 0) {
        rt_st_close(st);
        return -1;
    }
    RtParamSlot *whole = whole_params(p);
    int *want = calloc((size_t)p->nparams + 1, sizeof *want), nwant = 0, fresh = 0;
    for (int i = 0; whole && want && i < p->nparams; i++)
        if ((want[i] = init_wants(p, st, i)) != 0)
            whole[nwant++] = whole[i];
    RtInitCheck c = {0};
    int rc = whole && want && rt_init_check(whole, nwant, st, s->o->init_allow_unused, &c) == 0
                 ? 0
                 : rt_error_set(err, "--init: %s: out of memory", path);
    int bad = rc == 0 && (c.missing || c.mismatched || (c.unused && !s->o->init_allow_unused));
    if (c.report) {
        size_t len = strlen(c.report);
        if (len && c.report[len - 1] == '\n')
            c.report[len - 1] = 0;
        fprintf(stderr, "%s: %s --init %s:\n%s\n", s->o->prog, bad ? "error:" : "note:", path, c.report);
    }
    free(c.report);
    if (bad)
        rc = rt_error_set(err, "--init: %s: %d of %d parameters missing, %d in another shape, %d tensors unused", path,
                          c.missing, p->nparams, c.mismatched, c.unused);
    free(whole);
    whole = whole_params(p); /* again in table order: the check kept only the wanted ones */
    if (rc == 0 && !whole)
        rc = rt_error_set(err, "--init: %s: out of memory", path);
    for (int i = 0; rc == 0 && i < p->nparams; i++) {
        if (p->forward->param_offsets[i] < 0)
            continue;
        if (!want[i]) { /* a LoRA adapter the base file lacks: its init */
            int64_t n = 1;
            for (int d = 0; d < whole[i].rank; d++)
                n *= whole[i].shape[d];
            if (rt_init_fill(param_data(s, i), n, 0, whole[i].path, s->o->seed, &whole[i].init, &why) != 0)
                rc = rt_error_set(err, "--init: %s: %s", path, why.msg);
            fresh++;
        } else if (rt_st_read_f32(st, whole[i].path, whole[i].shape, whole[i].rank, param_data(s, i), &why) != 0)
            rc = rt_error_set(err, "--init: %s", why.msg);
        else if (rt_st_check_finite(st, whole[i].path, &why) != 0)
            rc = rt_error_set(err, "--init: %s; refusing to sample from weights that are not finite", why.msg);
    }
    free(whole);
    free(want);
    rt_st_close(st);
    if (rc == 0 && fresh)
        fprintf(stderr,
                "%s: sampling with the weights of --init %s; its %d LoRA adapters the file lacks start from their "
                "init (B is zeros: the base model's text)\n",
                s->o->prog, path, fresh);
    else if (rc == 0)
        fprintf(stderr, "%s: sampling with the weights of --init %s\n", s->o->prog, path);
    return rc;
}

/* A LoRA run's checkpoint holds only the adapters: its frozen base (m_offset -1) comes from
 * --init, else from what the checkpoint records (axlc.base: the file the run started from, or
 * the seeded init). */
static int load_frozen(Sampler *s, const RtCkpt *ck, const char *where, RtError *err) {
    const RtProgram *p = s->p;
    const char *rec = rt_ckpt_base(ck), *hash = NULL;
    char file[4096] = "";
    RtSt *st = NULL;
    RtError why;
    rt_base_record_parse(rec, file, sizeof file, &hash);
    if (strcmp(rec, "seed") == 0 && s->o->init) /* refused as resume refuses it (train_state.c) */
        return rt_error_set(err,
                            "--sample: %s: its adapters were trained on the seeded base weights (the run had no "
                            "--init); --init %s would put them on other weights (drop --init)",
                            where, s->o->init);
    const char *from = s->o->init ? s->o->init : file;
    if (strcmp(rec, "seed") != 0 && !from[0])
        return rt_error_set(err, "--sample: %s records no base weights for its frozen parameters (pass --init BASE)",
                            where);
    if (strcmp(rec, "seed") != 0 && rt_st_open(&st, from, &why) != 0)
        return rt_error_set(
            err, "--sample: %s holds only the adapters of a LoRA run; its base weights: %s (pass --init BASE)", where,
            why.msg);
    if (st)
        rt_st_dump_as_weights(st);
    int rc = 0;
    /* the weights the adapters were trained on, as resume checks them (train_state.c) */
    uint64_t h = RT_FNV1A64_BASIS;
    for (int i = 0; st && hash && i < p->nparams; i++)
        if (p->params[i].m_offset < 0)
            h = rt_st_hash_tensor(st, p->params[i].path, h);
    char got[32];
    snprintf(got, sizeof got, "fnv1a64:%016llx", (unsigned long long)h);
    if (st && hash && strcmp(got, hash) != 0)
        rc = rt_error_set(err,
                          "--sample: %s %s: these base weights differ from the ones the adapters of %s were "
                          "trained on (%s, recorded %s from %s); pass the base weights that run started from "
                          "with --init",
                          s->o->init ? "--init" : "the recorded base", from, where, got, hash, file);
    for (int i = 0; rc == 0 && i < p->nparams; i++) {
        const RtParamSlot *ps = &p->params[i];
        if (ps->m_offset >= 0 || p->forward->param_offsets[i] < 0)
            continue;
        int64_t n = 1;
        for (int d = 0; d < ps->rank; d++)
            n *= ps->global_shape[d];
        rc = st ? rt_st_read_f32(st, ps->path, ps->global_shape, ps->rank, param_data(s, i), &why)
                : rt_init_fill(param_data(s, i), n, 0, ps->path, rt_ckpt_rng_state(ck), &ps->init, &why);
        if (rc != 0)
            rc = rt_error_set(err, "--sample: the base weights of %s: %s", where, why.msg);
    }
    rt_st_close(st);
    return rc;
}

/* 1: loaded from the newest checkpoint that verifies; 0: the directory holds none. */
static int load_ckpt(Sampler *s, RtError *err) {
    const RtProgram *p = s->p;
    const char *dir = s->o->ckpt_dir;
    RtCkpt *ck;
    RtError damage, why;
    int found = rt_ckpt_open_latest(&ck, dir, &damage, &why);
    if (found < 0)
        return rt_error_set(err, "--ckpt-dir: %s", why.msg);
    if (damage.msg[0])
        fprintf(stderr, "%s: skipping a damaged checkpoint (left as it is): %s\n", s->o->prog, damage.msg);
    if (found == 0)
        return 0;
    char where[4200], fp[RT_FINGERPRINT_MAX], diff[RT_ERROR_MAX / 2];
    snprintf(where, sizeof where, "%s/step_%08lld", dir, (long long)rt_ckpt_step(ck));
    rt_fingerprint(fp, p->params, p->nparams, p->config);
    int rc = 0;
    if (strcmp(rt_ckpt_fingerprint(ck), fp) != 0 &&
        rt_model_diff(p->params, p->nparams, p->config, ck, rt_ckpt_config(ck), diff, sizeof diff) > 0)
        rc = rt_error_set(err, "--sample: %s holds another model: %s", where, diff);
    if (rc == 0 && rt_ckpt_base(ck)[0])
        rc = load_frozen(s, ck, where, err);
    for (int i = 0; rc == 0 && i < p->nparams; i++) {
        const RtParamSlot *ps = &p->params[i];
        if (p->forward->param_offsets[i] >= 0 && ps->m_offset >= 0 &&
            rt_ckpt_read_f32(ck, ps->path, ps->global_shape, ps->rank, NULL, NULL, param_data(s, i), &why) != 0)
            rc = rt_error_set(err, "--sample: %s: %s", where, why.msg);
    }
    if (rc == 0)
        fprintf(stderr, "%s: sampling with the weights of %s (step %lld)%s\n", s->o->prog, where,
                (long long)rt_ckpt_step(ck),
                rt_ckpt_base(ck)[0] ? " on its base weights"
                : s->o->init        ? "; --init is not used"
                                    : "");
    rt_ckpt_close(ck);
    return rc == 0 ? 1 : -1;
}

static int load_weights(Sampler *s, RtError *err) {
    const char *dir = s->o->ckpt_dir;
    if (dir) {
        int found = load_ckpt(s, err);
        if (found != 0)
            return found < 0 ? -1 : 0;
    }
    if (s->o->init)
        return load_init(s, err);
    if (!dir)
        return rt_error_set(err, "--sample needs weights: --ckpt-dir DIR (its newest checkpoint) or --init FILE");
    struct stat st;
    return rt_error_set(err,
                        "--sample: no checkpoint in %s%s, and no --init FILE: train with --ckpt-dir %s first, or "
                        "give --init",
                        dir, stat(dir, &st) != 0 ? " (it does not exist)" : "", dir);
}

/* The prompt encoded by tok. The buffer is sized from the encoder's count, not the text's bytes:
 * SentencePiece's byte fallback gives several ids for one invalid byte. */
static int prompt_encode(const RtTok *tok, const char *text, int64_t count, int32_t **tokens, int64_t *n,
                         RtError *err) {
    int32_t *ids;
    RtError why;
    if (rt_tok_encode(tok, text, strlen(text), &ids, n, &why) != 0)
        return rt_error_set(err, "--prompt: %s", why.msg);
    if (*n == 0) {
        free(ids);
        return rt_error_set(err, "--prompt: '%s' encodes to no tokens", text);
    }
    *tokens = malloc(((size_t)*n + (size_t)count + 2) * sizeof **tokens);
    if (!*tokens) {
        free(ids);
        return rt_error_set(err, "--sample: out of memory");
    }
    memcpy(*tokens, ids, (size_t)*n * sizeof *ids);
    free(ids);
    return 0;
}

int rt_sample_prompt(const RtTok *tok, const char *text, int64_t vocab, int64_t count, int32_t **tokens,
                     int64_t *ntokens, int64_t *nprompt, RtError *err) {
    int64_t len = text ? (int64_t)strlen(text) : 0;
    int bytes = vocab == 256;
    *tokens = NULL;
    *ntokens = *nprompt = 0;
    if (tok && text && *text) {
        if (prompt_encode(tok, text, count, tokens, nprompt, err) != 0)
            return -1;
        *ntokens = *nprompt;
        return 0;
    }
    int32_t *t = *tokens = malloc(((size_t)len + (size_t)count + 2) * sizeof *t);
    if (!t)
        return rt_error_set(err, "--sample: out of memory");
    int32_t bos = tok ? rt_tok_bos(tok) : -1;
    if (!text || !*text) {
        t[0] = bytes ? '\n' : bos >= 0 ? bos : (int32_t)(vocab - 1);
        *ntokens = 1;
        return 0;
    }
    if (bytes) {
        for (int64_t i = 0; i < len; i++)
            t[i] = (unsigned char)text[i];
        *ntokens = *nprompt = len;
        return 0;
    }
    int64_t n = 0;
    for (const char *at = text; *at;) {
        if (*at == ' ' || *at == ',' || *at == '\t' || *at == '\n') {
            at++;
            continue;
        }
        char *end;
        errno = 0;
        long long v = strtoll(at, &end, 10);
        if (end == at || errno == ERANGE || v < 0 || v >= vocab)
            return rt_error_set(err,
                                "--prompt: '%.*s' is not a token id of this vocabulary (0..%lld; the vocabulary "
                                "is not byte-level, so the prompt is token ids separated by spaces)",
                                (int)strcspn(at, " ,\t\n"), at, (long long)vocab - 1);
        t[n++] = (int32_t)v;
        at = end;
    }
    if (n == 0)
        return rt_error_set(err, "--prompt: no token ids in '%s'", text);
    *ntokens = *nprompt = n;
    return 0;
}

static int prompt_tokens(Sampler *s, RtError *err) {
    return rt_sample_prompt(s->o->tok, s->o->prompt, s->p->vocab, s->o->count, &s->tokens, &s->ntokens, &s->nprompt,
                            err);
}

/* A token as the bytes the tokenizer says it stands for. */
static void print_text_token(const RtTok *tok, FILE *out, int32_t id) {
    char buf[256];
    int64_t n = rt_tok_token_bytes(tok, id, buf, sizeof buf);
    char *p = n > (int64_t)sizeof buf ? malloc((size_t)n) : buf;
    if (p && p != buf)
        rt_tok_token_bytes(tok, id, p, (size_t)n);
    fwrite(p ? p : buf, 1, p ? (size_t)n : sizeof buf, out);
    if (p != buf)
        free(p);
}

static void print_token(const Sampler *s, FILE *out, int32_t tok, int first) {
    if (s->o->tok)
        print_text_token(s->o->tok, out, tok);
    else if (s->bytes)
        fputc(tok, out);
    else
        fprintf(out, "%s%d", first ? "" : " ", (int)tok);
}

/* The prompt as its tokenizer decodes it (a SentencePiece text loses the space before its first word). */
static int print_prompt(const Sampler *s, FILE *out, RtError *err) {
    char *text;
    size_t len;
    RtError why;
    if (rt_tok_decode(s->o->tok, s->tokens, s->nprompt, &text, &len, &why) != 0)
        return rt_error_set(err, "--prompt: %s", why.msg);
    fwrite(text, 1, len, out);
    free(text);
    return 0;
}

typedef struct Ranked {
    float logit;
    int32_t id;
} Ranked;

/* Larger logits first, the lower id first among equal ones. */
static int ranked_cmp(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* How many of the tokens ranked in `order` top-k and top-p allow: the first top_k, and of those
 * the fewest whose softmax weights (w of the largest logit m) reach top_p of their sum. */
static int64_t allowed_count(const float *logits, int64_t V, double t, int64_t top_k, double top_p,
                             const int32_t *order) {
    int64_t n = top_k > 0 && top_k < V ? top_k : V;
    if (top_p >= 1)
        return n;
    double m = logits[order[0]], sum = 0, acc = 0;
    for (int64_t i = 0; i < n; i++)
        sum += exp((logits[order[i]] - m) / t);
    for (int64_t i = 0; i < n; i++) {
        acc += exp((logits[order[i]] - m) / t);
        if (acc >= top_p * sum)
            return i + 1;
    }
    return n;
}

/* order[0..V) = the token ids from the most likely down (ties: the lower id first). */
static int rank_tokens(const float *logits, int64_t V, int32_t *order) {
    Ranked *r = malloc((size_t)V * sizeof *r);
    if (!r)
        return -1;
    for (int64_t i = 0; i < V; i++)
        r[i] = (Ranked){logits[i], (int32_t)i};
    qsort(r, (size_t)V, sizeof *r, ranked_cmp);
    for (int64_t i = 0; i < V; i++)
        order[i] = r[i].id;
    free(r);
    return 0;
}

int64_t rt_sample_pick(const float *logits, int64_t V, double t, int64_t top_k, double top_p, uint64_t seed, int64_t k,
                       int32_t *order) {
    int64_t best = 0;
    for (int64_t i = 0; i < V; i++) {
        if (!isfinite(logits[i]))
            return -1;
        if (logits[i] > logits[best])
            best = i;
    }
    if (t == 0)
        return best;
    /* the allowed tokens: the first n of the ranking (the most likely is always one) */
    int64_t n = V;
    if ((top_k > 0 && top_k < V) || top_p < 1) {
        if (rank_tokens(logits, V, order) != 0)
            return best; /* out of memory for the sort: the most likely is always allowed */
        n = allowed_count(logits, V, t, top_k, top_p, order);
    }
    double m = logits[best], sum = 0;
    uint8_t *ok = n < V ? calloc((size_t)V, 1) : NULL;
    if (n < V && !ok)
        return best;
    for (int64_t r = 0; ok && r < n; r++)
        ok[order[r]] = 1;
    for (int64_t i = 0; i < V; i++)
        sum += !ok || ok[i] ? exp((logits[i] - m) / t) : 0;
    uint64_t x = rt_rng_u64(seed, SAMPLE_STREAM, k, 0);
    double u = (double)(x >> 11) * 0x1p-53 * sum, acc = 0;
    for (int64_t i = 0; i < V; i++) {
        double w = !ok || ok[i] ? exp((logits[i] - m) / t) : 0;
        acc += w;
        if (u < acc && w > 0) {
            free(ok);
            return i;
        }
    }
    free(ok);
    return best; /* rounding left u at the very top */
}

/* The forward over the window (the last seq tokens), from position 0, zeros after; with a
 * decode step, its keys and values become the cache. The logits of the window's last token. */
static const float *run_forward(Sampler *s) {
    const RtProgram *p = s->p;
    const RtForward *f = p->forward;
    int32_t *ids = (int32_t *)(void *)(s->slab + f->ids_offset);
    int64_t w = s->ntokens < p->seq ? s->ntokens : p->seq;
    memcpy(ids, s->tokens + s->ntokens - w, (size_t)w * sizeof *ids);
    memset(ids + w, 0, (size_t)(p->seq - w) * sizeof *ids);
    io_wrote(s, f->ids_offset, p->seq * (int64_t)sizeof *ids);
    f->run(s->slab, s->pool, NULL);
    for (int i = 0; s->decode && i < s->decode->ncaches; i++) {
        const RtKvCache *c = &s->decode->caches[i];
        io_copy(s, c->cache_offset, c->prefill_offset, c->heads * p->seq * c->row_bytes);
    }
    s->cached = s->decode ? w : 0;
    int64_t row = f->logits_offset + (w - 1) * p->vocab * 4;
    return (const float *)(const void *)io_need(s, row, p->vocab * 4);
}

/* One decode step: the newest token at position s->cached, its keys and values written into
 * the cache there. Its logits. */
static const float *run_decode(Sampler *s) {
    const RtDecode *d = s->decode;
    int64_t pos = s->cached;
    *(int32_t *)(void *)(s->slab + d->ids_offset) = s->tokens[s->ntokens - 1];
    *(int32_t *)(void *)(s->slab + d->pos_offset) = (int32_t)pos;
    io_wrote(s, d->ids_offset, 4);
    io_wrote(s, d->pos_offset, 4);
    d->run(s->slab, s->pool, NULL);
    for (int i = 0; i < d->ncaches; i++) {
        const RtKvCache *c = &d->caches[i];
        for (int64_t h = 0; h < c->heads; h++)
            io_copy(s, c->cache_offset + (h * s->p->seq + pos) * c->row_bytes, c->row_offset + h * c->row_bytes,
                    c->row_bytes);
    }
    s->cached++;
    return (const float *)(const void *)io_need(s, d->logits_offset, s->p->vocab * 4);
}

/* The logits after the tokens so far: a decode step while the newest token still fits the
 * window the cache holds, else the forward (the first token, or a full window). */
static const float *next_logits(Sampler *s) {
    if (s->decode && s->cached > 0 && s->cached == s->ntokens - 1 && s->cached < s->p->seq)
        return run_decode(s);
    return run_forward(s);
}

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether a and b write to one file (a terminal, or 2>&1): the text then needs its own line end
 * before the note that follows it on stderr. */
static int same_file(FILE *a, FILE *b) {
    struct stat x, y;
    return fstat(fileno(a), &x) == 0 && fstat(fileno(b), &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static int generate(Sampler *s, FILE *out, RtError *err) {
    const RtSampleOpts *o = s->o;
    if (o->tok && print_prompt(s, out, err) != 0)
        return -1;
    for (int64_t i = 0; !o->tok && i < s->nprompt; i++)
        print_token(s, out, s->tokens[i], i == 0);
    fflush(out);
    double t0 = clock_s(CLOCK_MONOTONIC), cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int64_t k = 0; k < o->count; k++) {
        const float *logits = next_logits(s);
        int64_t tok = rt_sample_pick(logits, s->p->vocab, o->temperature, o->top_k, o->top_p, o->seed, k, s->order);
        if (tok < 0)
            return rt_error_set(err, "--sample: token %lld: the logits are not finite (are the weights?)",
                                (long long)k + 1);
        s->tokens[s->ntokens++] = (int32_t)tok;
        print_token(s, out, (int32_t)tok, s->nprompt == 0 && k == 0);
        fflush(out);
    }
    if (!s->bytes || s->tokens[s->ntokens - 1] != '\n')
        fputc('\n', out);
    double secs = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    fprintf(stderr, "%s%s: %lld tokens in %.3f s (%.3f s of CPU): %.1f tokens/s (%s)\n",
            same_file(out, stderr) ? "\n" : "", o->prog, (long long)o->count, secs, cpu,
            secs > 0 ? (double)o->count / secs : 0.0, s->decode ? "KV cache" : "the whole window per token");
    return fflush(out) == 0 && !ferror(out) ? 0 : rt_error_set(err, "--sample: writing the output failed");
}

/* The sampling options against this program: top-k within the vocabulary; the decode step
 * checked and used unless --no-kv-cache. */
static int sample_setup(Sampler *s, RtError *err) {
    const RtProgram *p = s->p;
    if (s->o->top_k > p->vocab)
        return rt_error_set(err, "--top-k: %lld is more than the vocabulary's %lld tokens", (long long)s->o->top_k,
                            (long long)p->vocab);
    if (p->forward->decode && !s->o->no_kv_cache) {
        if (check_decode(p, err) != 0)
            return -1;
        s->decode = p->forward->decode;
    }
    return 0;
}

int rt_sample_run(const RtProgram *p, const RtSampleOpts *o, FILE *out, RtError *err) {
    if (check_forward(p, err) != 0)
        return -1;
    if (rt_comm_launched())
        return rt_error_set(err, "--sample runs as one process with the whole model; start it without mpirun or srun");
    Sampler s = {.p = p, .o = o, .bytes = p->vocab == 256, .io = o->io};
    int rc = sample_setup(&s, err);
    int64_t bytes = s.decode ? s.decode->slab_bytes : p->forward->slab_bytes;
    size_t size = ((size_t)bytes + 63) / 64 * 64;
    s.slab = rc == 0 ? aligned_alloc(64, size) : NULL;
    s.order = rc == 0 ? malloc((size_t)p->vocab * sizeof *s.order) : NULL;
    if (rc == 0 && (!s.slab || !s.order))
        rc = rt_error_set(err, "--sample: cannot allocate the sampling slab of %lld bytes", (long long)bytes);
    else if (rc == 0)
        memset(s.slab, 0, size);
    if (rc == 0)
        rc = prompt_tokens(&s, err);
    if (rc == 0)
        rc = load_weights(&s, err);
    if (rc == 0)
        io_wrote(&s, 0, bytes); /* the weights, once */
    if (rc == 0 && s.nprompt > p->seq)
        fprintf(stderr, "%s: note: the prompt has %lld tokens; the context keeps its last %lld (seq_len)\n", o->prog,
                (long long)s.nprompt, (long long)p->seq);
    if (rc == 0 && !p->forward->decode && !o->no_kv_cache)
        fprintf(stderr,
                "%s: note: this model has no KV-cache decode step (an attention is not causal); every token "
                "runs the forward over the window\n",
                o->prog);
    if (rc == 0)
        rc = rt_pool_new(&s.pool, (int)o->threads, err);
    if (rc == 0)
        rc = generate(&s, out, err);
    rt_pool_free(s.pool);
    free(s.tokens);
    free(s.order);
    free(s.slab);
    return rc;
}
