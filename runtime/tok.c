/*
 * tok.c: tokenizers: text to token ids and back, behind one interface with two kinds.
 *
 *   - SentencePiece models (`.model`, a protobuf ModelProto) through libsentencepiece, the
 *     library made for them, called through the C shim of tok_spm.cc. libaxrt builds without
 *     the library; such a model is then refused with what to install.
 *   - Hugging Face `tokenizer.json` with a byte-level BPE model (GPT-2, Llama 3): tok_bpe.c.
 *
 * The format is told by the content, never by the file name: a JSON object is a
 * tokenizer.json; a protobuf whose first field is ModelProto's `pieces` (tag byte 0x0a) is a
 * SentencePiece model. Before the library sees a model, the protobuf is walked here field by
 * field to its end, so that a truncated or damaged file is named as such instead of being
 * loaded short: protobuf itself accepts a file cut at a field boundary.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_impl.h"

struct RtTok {
    char path[4096];
    const RtTokOps *ops; /* rt_spm_ops or rt_bpe_ops */
    void *impl;
    int64_t vocab;
};

/* ===== the SentencePiece model's outline ============================================== */

/* A protobuf varint at *at (below end); -1 when it runs past end or past 10 bytes. */
static int read_varint(const unsigned char **at, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 70 && *at < end; shift += 7) {
        unsigned char b = *(*at)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The walk failed at byte `at`: after two pieces or more the file is a damaged model; before,
 * a file (text that starts with a newline) that only starts like one. */
static int not_protobuf(const char *path, int64_t pieces, int64_t at, int64_t size, RtError *err) {
    if (pieces < 2)
        return rt_error_set(err,
                            "%s: not a tokenizer: it starts with byte 0x0a as a SentencePiece model does, but its "
                            "bytes are no protobuf (at byte %lld); expected a SentencePiece model or a Hugging Face "
                            "tokenizer.json",
                            path, (long long)at);
    return rt_error_set(err,
                        "%s: SentencePiece model truncated or damaged at byte %lld (after %lld pieces, a field runs "
                        "past the end of the %lld-byte file or is not a message)",
                        path, (long long)at, (long long)pieces, (long long)size);
}

/* Walks the top-level fields of a ModelProto: every field must be whole, the pieces (field 1)
 * come first, and the trainer and normalizer specs (fields 2 and 3), which spm_train writes
 * after the pieces, must be there: a file cut after some pieces parses, short, without them. */
static int spm_outline(const char *path, const unsigned char *p, int64_t size, RtError *err) {
    const unsigned char *at = p, *end = p + size;
    int64_t pieces = 0;
    int specs = 0;
    while (at < end) {
        int64_t field_at = at - p;
        uint64_t key, len;
        if (read_varint(&at, end, &key) != 0)
            return not_protobuf(path, pieces, field_at, size, err);
        int wire = (int)(key & 7);
        uint64_t field = key >> 3;
        if (wire == 0 && read_varint(&at, end, &len) == 0)
            continue;
        if (wire != 2 || read_varint(&at, end, &len) != 0 || len > (uint64_t)(end - at))
            return not_protobuf(path, pieces, field_at, size, err);
        at += len;
        pieces += field == 1;
        specs |= field == 2 ? 1 : field == 3 ? 2 : 0;
    }
    if (pieces == 0)
        return rt_error_set(err, "%s: SentencePiece model with no pieces", path);
    if (specs != 3)
        return rt_error_set(err,
                            "%s: SentencePiece model truncated: %lld pieces and no %s spec after them (spm_train "
                            "writes both)",
                            path, (long long)pieces, specs & 1 ? "normalizer" : "trainer");
    return 0;
}

static int open_spm(RtTok *t, const RtMapped *m, RtError *err) {
    if (spm_outline(t->path, m->data, m->size, err) != 0)
        return -1;
#ifdef AXRT_HAVE_SENTENCEPIECE
    RtError why;
    if (rt_spm_load(&t->impl, m->data, (size_t)m->size, &why) != 0)
        return rt_error_set(err, "%s: not a valid SentencePiece model: %s", t->path, why.msg);
    t->ops = &rt_spm_ops;
    return 0;
#else
    return rt_error_set(err,
                        "%s: a SentencePiece model, but this libaxrt was built without libsentencepiece "
                        "(Debian: libsentencepiece-dev; then build axlc again)",
                        t->path);
#endif
}

/* ===== opening ======================================================================== */

/* What a file that is neither kind looks like, for the message. */
static const char *describe(const RtMapped *m) {
    const unsigned char *p = m->data;
    if (m->size >= 4 && (p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24) == RT_DATA_MAGIC)
        return "an llm.c token file";
    if (m->size >= 9 && p[8] == '{' && p[7] == 0 && p[6] == 0)
        return "a safetensors file";
    return p[0] == '[' ? "a JSON array" : "unknown content";
}

static int open_mapped(RtTok *t, const RtMapped *m, RtError *err) {
    /* a UTF-8 byte order mark (some Windows editors write one) is skipped before a tokenizer.json */
    int64_t bom = m->size >= 3 && !memcmp(m->data, "\xef\xbb\xbf", 3) ? 3 : 0, i = bom;
    while (i < m->size && (m->data[i] == ' ' || m->data[i] == '\t' || m->data[i] == '\r' || m->data[i] == '\n'))
        i++;
    if (i == m->size)
        return rt_error_set(err, "%s: empty tokenizer file", t->path);
    if (m->data[i] == '{') {
        RtError why;
        if (rt_bpe_load(&t->impl, (const char *)m->data + bom, (size_t)(m->size - bom), &why) != 0)
            return rt_error_set(err, "%s: %s", t->path, why.msg);
        t->ops = &rt_bpe_ops;
        return 0;
    }
    if (m->data[0] == 0x0a)
        return open_spm(t, m, err);
    return rt_error_set(err,
                        "%s: not a tokenizer (%s): expected a SentencePiece model (.model, a protobuf starting "
                        "with byte 0x0a) or a Hugging Face tokenizer.json (a JSON object)",
                        t->path, describe(m));
}

int rt_tok_open(RtTok **out, const char *path, RtError *err) {
    *out = NULL;
    RtTok *t = calloc(1, sizeof *t);
    if (!t)
        return rt_error_set(err, "%s: out of memory", path);
    snprintf(t->path, sizeof t->path, "%s", path);
    RtMapped m;
    int rc = rt_file_map(path, &m, err);
    if (rc == 0)
        rc = open_mapped(t, &m, err);
    rt_file_unmap(&m);
    if (rc == 0)
        t->vocab = t->ops->vocab(t->impl);
    if (rc != 0) {
        rt_tok_close(t);
        return -1;
    }
    *out = t;
    return 0;
}

void rt_tok_close(RtTok *t) {
    if (!t)
        return;
    if (t->ops)
        t->ops->free(t->impl);
    free(t);
}

int64_t rt_tok_vocab(const RtTok *t) {
    return t->vocab;
}
const char *rt_tok_kind(const RtTok *t) {
    return t->ops->kind;
}
const char *rt_tok_path(const RtTok *t) {
    return t->path;
}
int32_t rt_tok_bos(const RtTok *t) {
    return t->ops->bos(t->impl);
}

/* ===== encoding and decoding ========================================================== */

int rt_tok_encode(const RtTok *t, const char *text, size_t n, int32_t **ids, int64_t *nids, RtError *err) {
    *ids = NULL;
    *nids = 0;
    RtError why;
    if (t->ops->encode(t->impl, text, n, ids, nids, &why) != 0)
        return rt_error_set(err, "%s: encoding %zu bytes: %s", t->path, n, why.msg);
    return 0;
}

/* A text as its tokens' bytes, one after the other. */
static int concat_decode(const RtTok *t, const int32_t *ids, int64_t n, char **text, size_t *len, RtError *err) {
    size_t total = 0;
    for (int64_t i = 0; i < n; i++)
        total += (size_t)t->ops->token_bytes(t->impl, ids[i], NULL, 0);
    char *s = malloc(total + 1);
    if (!s)
        return rt_error_set(err, "%s: out of memory decoding %lld tokens", t->path, (long long)n);
    size_t at = 0;
    for (int64_t i = 0; i < n; i++)
        at += (size_t)t->ops->token_bytes(t->impl, ids[i], s + at, total - at);
    s[at] = 0;
    *text = s;
    *len = at;
    return 0;
}

int rt_tok_decode(const RtTok *t, const int32_t *ids, int64_t n, char **text, size_t *len, RtError *err) {
    *text = NULL;
    *len = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return rt_error_set(err, "%s: token %d (at %lld) is outside the vocabulary of %lld", t->path, (int)ids[i],
                                (long long)i, (long long)t->vocab);
    if (!t->ops->decode)
        return concat_decode(t, ids, n, text, len, err);
    RtError why;
    if (t->ops->decode(t->impl, ids, n, text, len, &why) != 0)
        return rt_error_set(err, "%s: decoding %lld tokens: %s", t->path, (long long)n, why.msg);
    return 0;
}

int64_t rt_tok_token_bytes(const RtTok *t, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= t->vocab)
        return -1;
    return t->ops->token_bytes(t->impl, id, buf, cap);
}

int rt_tok_check_vocab(const RtTok *t, int64_t vocab, const char *model, RtError *err) {
    if (t->vocab == vocab)
        return 0;
    return rt_error_set(err,
                        "%s: the %s tokenizer has a vocabulary of %lld tokens, but the model of %s has vocab_size "
                        "%lld (/model/vocab_size); they must agree",
                        t->path, rt_tok_kind(t), (long long)t->vocab, model, (long long)vocab);
}
