/*
 * sample.c: `trainer --sample N`: text from a trained model.
 *
 * The program's forward (RtProgram.forward, ABI 3) is the model on one sequence of seq tokens,
 * compiled next to the step, never sharded: every parameter lies whole in the forward's own
 * slab. The weights come from the newest checkpoint of --ckpt-dir that verifies (any mesh: each
 * tensor is read whole), or from --init; sampling only reads, so the checkpoint directory is not
 * locked, and nothing in it is written, renamed or removed.
 *
 * Each new token recomputes the whole forward over the context window: the last seq tokens of
 * prompt and output so far, written from position 0 and padded with zeros (the causal model
 * never lets a position see the ones after it). The logits of the window's last token give the
 * next one: the largest at temperature 0, else a draw from softmax(logits / temperature) with
 * the counter-based generator of init.c, so (weights, prompt, temperature, seed) fix the text.
 *
 * With a byte-level vocabulary (256) the prompt is text and the output is bytes; otherwise both
 * are token ids, written in decimal and separated by spaces.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

static int region_ok(const RtForward *f, int64_t off, int64_t bytes) {
    return bytes >= 0 && off >= 0 && off % 4 == 0 && off <= f->slab_bytes && bytes <= f->slab_bytes - off;
}

static int check_forward(const RtProgram *p, RtError *err) {
    const RtForward *f = p->forward;
    if (!f || !f->run)
        return rt_error_set(err, "--sample: this trainer has no sampling forward (OpenCL trainers do not sample yet; "
                                 "a CPU trainer compiled by this axlc does)");
    if (p->seq < 1 || p->vocab < 1 || p->vocab > INT32_MAX || p->seq > INT32_MAX / 4 ||
        p->seq > INT64_MAX / 4 / p->vocab || f->slab_bytes <= 0 || (p->nparams > 0 && !f->param_offsets))
        return rt_error_set(err,
                            "program: forward: sequence %lld, vocabulary %lld, slab %lld bytes: expected "
                            "positive sizes and a parameter table",
                            (long long)p->seq, (long long)p->vocab, (long long)f->slab_bytes);
    if (!region_ok(f, f->ids_offset, p->seq * 4) || !region_ok(f, f->logits_offset, p->seq * p->vocab * 4))
        return rt_error_set(err, "program: forward: ids or logits outside the %lld-byte slab",
                            (long long)f->slab_bytes);
    for (int i = 0; i < p->nparams; i++) {
        int64_t n = global_numel(&p->params[i]);
        if (f->param_offsets[i] != -1 && (n < 0 || !region_ok(f, f->param_offsets[i], n * 4)))
            return rt_error_set(err, "program: forward: parameter %s outside the %lld-byte slab", p->params[i].path,
                                (long long)f->slab_bytes);
    }
    return 0;
}

typedef struct Sampler {
    const RtProgram *p;
    const RtSampleOpts *o;
    char *slab; /* the forward's */
    RtPool *pool;
    int32_t *tokens; /* (ntokens) prompt, then the output */
    int64_t ntokens, nprompt;
    int bytes; /* byte-level vocabulary: text in, text out */
} Sampler;

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

static int load_init(Sampler *s, RtError *err) {
    const RtProgram *p = s->p;
    const char *path = s->o->init;
    RtSt *st;
    RtError why;
    if (rt_st_open(&st, path, &why) != 0)
        return rt_error_set(err, "--init: %s", why.msg);
    if (rt_init_refuse_shard(st, path, err) != 0) {
        rt_st_close(st);
        return -1;
    }
    RtParamSlot *whole = whole_params(p);
    RtInitCheck c = {0};
    int rc = whole && rt_init_check(whole, p->nparams, st, s->o->init_allow_unused, &c) == 0
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
    for (int i = 0; rc == 0 && i < p->nparams; i++)
        if (p->forward->param_offsets[i] >= 0 &&
            rt_st_read_f32(st, whole[i].path, whole[i].shape, whole[i].rank, param_data(s, i), &why) != 0)
            rc = rt_error_set(err, "--init: %s", why.msg);
        else if (p->forward->param_offsets[i] >= 0 && rt_st_check_finite(st, whole[i].path, &why) != 0)
            rc = rt_error_set(err, "--init: %s; refusing to sample from weights that are not finite", why.msg);
    free(whole);
    rt_st_close(st);
    if (rc == 0)
        fprintf(stderr, "%s: sampling with the weights of --init %s\n", s->o->prog, path);
    return rc;
}

/* A LoRA run's checkpoint holds only the adapters: its frozen base (m_offset -1) comes from
 * --init, else from what the checkpoint records (axlc.base: the file the run started from, or
 * the seeded init). */
static int load_frozen(Sampler *s, const RtCkpt *ck, const char *where, RtError *err) {
    const RtProgram *p = s->p;
    const char *rec = rt_ckpt_base(ck), *hash = strrchr(rec, ' ');
    char file[4096] = "";
    RtSt *st = NULL;
    RtError why;
    if (!strncmp(rec, "init ", 5) && hash && hash > rec + 5)
        snprintf(file, sizeof file, "%.*s", (int)(hash - rec - 5), rec + 5);
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

/* The prompt as tokens: its bytes, or decimal ids separated by spaces or commas. No prompt: one
 * newline (byte-level) or token vocab-1 (GPT-2's <|endoftext|>), which is not printed. */
static int prompt_tokens(Sampler *s, RtError *err) {
    const char *text = s->o->prompt;
    int64_t vocab = s->p->vocab, len = text ? (int64_t)strlen(text) : 0;
    s->tokens = malloc(((size_t)len + (size_t)s->o->count + 2) * sizeof *s->tokens);
    if (!s->tokens)
        return rt_error_set(err, "--sample: out of memory");
    if (!text || !*text) {
        s->tokens[0] = s->bytes ? '\n' : (int32_t)(vocab - 1);
        s->ntokens = 1;
        return 0;
    }
    if (s->bytes) {
        for (int64_t i = 0; i < len; i++)
            s->tokens[i] = (unsigned char)text[i];
        s->ntokens = s->nprompt = len;
        return 0;
    }
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
        s->tokens[s->ntokens++] = (int32_t)v;
        at = end;
    }
    if (s->ntokens == 0)
        return rt_error_set(err, "--prompt: no token ids in '%s'", text);
    s->nprompt = s->ntokens;
    return 0;
}

static void print_token(const Sampler *s, FILE *out, int32_t tok, int first) {
    if (s->bytes)
        fputc(tok, out);
    else
        fprintf(out, "%s%d", first ? "" : " ", (int)tok);
}

/* The next token from logits (vocab): argmax at temperature 0 (the first of equal ones), else a
 * draw from the softmax of logits / temperature. -1 if a logit is not finite. */
static int64_t pick(const Sampler *s, const float *logits, int64_t k) {
    int64_t V = s->p->vocab, best = 0;
    for (int64_t i = 0; i < V; i++) {
        if (!isfinite(logits[i]))
            return -1;
        if (logits[i] > logits[best])
            best = i;
    }
    double t = s->o->temperature;
    if (t == 0)
        return best;
    double sum = 0, m = logits[best];
    for (int64_t i = 0; i < V; i++)
        sum += exp((logits[i] - m) / t);
    uint64_t x = rt_rng_u64(s->o->seed, SAMPLE_STREAM, k, 0);
    double u = (double)(x >> 11) * 0x1p-53 * sum, acc = 0;
    for (int64_t i = 0; i < V; i++) {
        double w = exp((logits[i] - m) / t);
        acc += w;
        if (u < acc && w > 0)
            return i;
    }
    return best; /* rounding left u at the very top */
}

static int generate(Sampler *s, FILE *out, RtError *err) {
    const RtProgram *p = s->p;
    const RtForward *f = p->forward;
    int32_t *ids = (int32_t *)(void *)(s->slab + f->ids_offset);
    const float *logits = (const float *)(const void *)(s->slab + f->logits_offset);
    for (int64_t i = 0; i < s->nprompt; i++)
        print_token(s, out, s->tokens[i], i == 0);
    fflush(out);
    for (int64_t k = 0; k < s->o->count; k++) {
        int64_t w = s->ntokens < p->seq ? s->ntokens : p->seq;
        memcpy(ids, s->tokens + s->ntokens - w, (size_t)w * sizeof *ids);
        memset(ids + w, 0, (size_t)(p->seq - w) * sizeof *ids);
        f->run(s->slab, s->pool, NULL);
        int64_t tok = pick(s, logits + (w - 1) * p->vocab, k);
        if (tok < 0)
            return rt_error_set(err, "--sample: token %lld: the logits are not finite (are the weights?)",
                                (long long)k + 1);
        s->tokens[s->ntokens++] = (int32_t)tok;
        print_token(s, out, (int32_t)tok, s->nprompt == 0 && k == 0);
        fflush(out);
    }
    if (!s->bytes || s->tokens[s->ntokens - 1] != '\n')
        fputc('\n', out);
    return fflush(out) == 0 && !ferror(out) ? 0 : rt_error_set(err, "--sample: writing the output failed");
}

int rt_sample_run(const RtProgram *p, const RtSampleOpts *o, FILE *out, RtError *err) {
    if (check_forward(p, err) != 0)
        return -1;
    if (rt_comm_launched())
        return rt_error_set(err, "--sample runs as one process with the whole model; start it without mpirun or srun");
    Sampler s = {.p = p, .o = o, .bytes = p->vocab == 256};
    int rc = 0;
    size_t size = ((size_t)p->forward->slab_bytes + 63) / 64 * 64;
    s.slab = aligned_alloc(64, size);
    if (!s.slab)
        rc = rt_error_set(err, "--sample: cannot allocate the forward's %lld-byte slab",
                          (long long)p->forward->slab_bytes);
    else
        memset(s.slab, 0, size);
    if (rc == 0)
        rc = prompt_tokens(&s, err);
    if (rc == 0)
        rc = load_weights(&s, err);
    if (rc == 0 && s.nprompt > p->seq)
        fprintf(stderr, "%s: note: the prompt has %lld tokens; the context keeps its last %lld (seq_len)\n", o->prog,
                (long long)s.nprompt, (long long)p->seq);
    if (rc == 0)
        rc = rt_pool_new(&s.pool, (int)o->threads, err);
    if (rc == 0)
        rc = generate(&s, out, err);
    rt_pool_free(s.pool);
    free(s.tokens);
    free(s.slab);
    return rc;
}
