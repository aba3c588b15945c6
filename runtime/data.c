/*
 * data.c: training data. A token file is memory-mapped once and validated whole at open
 * (format, header, every token below the vocabulary), so batching can never fail on content.
 *
 * Two formats, told apart by the first int32:
 *   - plain text: every byte is a token (vocabulary 256); a file that starts like a token
 *     header without the magic number is refused rather than read as text;
 *   - llm.c token files: 256 little-endian int32 of header, header[0] = 20240520 (magic),
 *     header[1] = 1 (uint16 tokens) or 2 (uint32 tokens), header[2] = token count; then tokens.
 *
 * A text opened through a tokenizer (rt_data_open_tok, the trainer's --tokenizer) is encoded
 * whole at open; its ids are held in memory as the tokens of a version 2 file would be.
 *
 * Batching follows llm.c: a global batch is world*B windows of T+1 consecutive tokens, each
 * starting T after the previous one; rank r takes windows [r*B, r*B+B). All ranks share one
 * global position, which is the only state a checkpoint needs to resume the data stream.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_impl.h"

struct RtData {
    char path[4096]; /* PATH_MAX: a longer path cannot be opened */
    RtMapped map;
    RtDataFormat format;
    const unsigned char *tokens; /* first token byte in the mapping, or `owned` */
    unsigned char *owned;        /* a tokenized text's ids, uint32 little-endian */
    int64_t n;                   /* number of tokens */
    int rank, world;
    int64_t position; /* global token index of the next batch */
};

/* ===== decoding ======================================================================= */

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t token_at(const RtData *d, int64_t i) {
    switch (d->format) {
    case RT_DATA_BYTES: return d->tokens[i];
    case RT_DATA_TOKENS_U16: return (uint32_t)d->tokens[2 * i] | (uint32_t)d->tokens[2 * i + 1] << 8;
    case RT_DATA_TOKENS_U32: return le32(d->tokens + 4 * i);
    }
    return 0;
}

/* ===== opening ======================================================================== */

/* Reads the llm.c header and checks the file size against the token count it declares. */
static int parse_header(RtData *d, RtError *err) {
    const int64_t header_bytes = RT_DATA_HEADER_INTS * 4;
    const unsigned char *p = d->map.data;
    if (d->map.size < header_bytes)
        return rt_error_set(err, "%s: token file header needs %lld bytes, file has %lld", d->path,
                            (long long)header_bytes, (long long)d->map.size);
    int32_t version = (int32_t)le32(p + 4), count = (int32_t)le32(p + 8);
    if (version != 1 && version != 2)
        return rt_error_set(err, "%s: token file version %d, expected 1 (uint16) or 2 (uint32)", d->path, (int)version);
    if (count < 0)
        return rt_error_set(err, "%s: token file header declares %d tokens", d->path, (int)count);
    d->format = version == 1 ? RT_DATA_TOKENS_U16 : RT_DATA_TOKENS_U32;
    int64_t width = version == 1 ? 2 : 4, want = header_bytes + (int64_t)count * width;
    if (d->map.size < want)
        return rt_error_set(err, "%s: truncated: header declares %d tokens (%lld bytes), file has %lld bytes", d->path,
                            (int)count, (long long)want, (long long)d->map.size);
    if (d->map.size > want)
        return rt_error_set(err, "%s: %lld bytes after the %d tokens the header declares", d->path,
                            (long long)(d->map.size - want), (int)count);
    d->tokens = p + header_bytes;
    d->n = count;
    return 0;
}

static uint32_t bswap32(uint32_t x) {
    return x >> 24 | (x >> 8 & 0xff00) | (x << 8 & 0xff0000) | x << 24;
}

/* Whether a file without the magic number still starts like an llm.c header: the magic
 * byte-swapped, a zero-filled header tail (text never holds a thousand NULs), or a version
 * and token count that match the file size exactly. Such a file is a damaged or foreign token
 * file, and reading its bytes as text would train on garbage. */
static int looks_like_header(const RtData *d) {
    const unsigned char *p = d->map.data;
    if (d->map.size < RT_DATA_HEADER_INTS * 4)
        return 0;
    if (bswap32(le32(p)) == RT_DATA_MAGIC)
        return 1;
    uint32_t version = le32(p + 4), count = le32(p + 8);
    int64_t width = version == 1 ? 2 : version == 2 ? 4 : 0;
    if (width && RT_DATA_HEADER_INTS * 4 + (int64_t)count * width == d->map.size)
        return 1;
    for (int64_t i = 12; i < RT_DATA_HEADER_INTS * 4; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

static int detect_format(RtData *d, RtError *err) {
    if (d->map.size == 0)
        return rt_error_set(err, "%s: empty data file", d->path);
    if (d->map.size >= 4 && le32(d->map.data) == RT_DATA_MAGIC)
        return parse_header(d, err);
    if (looks_like_header(d))
        return rt_error_set(err,
                            "%s: starts like an llm.c token file but its magic number is %u, expected "
                            "%d; refusing to read it as plain text",
                            d->path, (unsigned)le32(d->map.data), RT_DATA_MAGIC);
    d->format = RT_DATA_BYTES;
    d->tokens = d->map.data;
    d->n = d->map.size;
    return 0;
}

/* One pass over the whole file: a bad token is reported before the first step, with its position. */
static int check_vocab(const RtData *d, int vocab_size, RtError *err) {
    if (d->format == RT_DATA_BYTES && vocab_size >= 256)
        return 0;
    for (int64_t i = 0; i < d->n; i++) {
        uint32_t t = token_at(d, i);
        if (t >= (uint32_t)vocab_size)
            return rt_error_set(err, "%s: token %u at position %lld is outside the vocabulary of size %d", d->path, t,
                                (long long)i, vocab_size);
    }
    return 0;
}

/* The text's ids take the place of its bytes; the mapping is let go. */
static int encode_text(RtData *d, const RtTok *tok, RtError *err) {
    int32_t *ids;
    int64_t n;
    RtError why;
    if (rt_tok_encode(tok, (const char *)d->map.data, (size_t)d->map.size, &ids, &n, &why) != 0)
        return rt_error_set(err, "%s: %s", d->path, why.msg);
    d->owned = malloc((size_t)n * 4 + 1);
    if (!d->owned) {
        free(ids);
        return rt_error_set(err, "%s: out of memory for %lld tokens", d->path, (long long)n);
    }
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            d->owned[4 * i + k] = (unsigned char)((uint32_t)ids[i] >> (8 * k));
    free(ids);
    rt_file_unmap(&d->map);
    d->format = RT_DATA_TOKENS_U32;
    d->tokens = d->owned;
    d->n = n;
    return 0;
}

static int open_checked(RtData *d, const RtTok *tok, int vocab_size, RtError *err) {
    if (rt_file_map(d->path, &d->map, err) != 0)
        return -1;
    if (detect_format(d, err) != 0)
        return -1;
    if (tok && d->format == RT_DATA_BYTES && encode_text(d, tok, err) != 0)
        return -1;
    if (d->n < 2)
        return rt_error_set(err, "%s: %lld token(s), need at least 2 (one input and its target)", d->path,
                            (long long)d->n);
    return check_vocab(d, vocab_size, err);
}

static int data_open(RtData **out, const char *path, const RtTok *tok, int vocab_size, RtError *err) {
    *out = NULL;
    if (vocab_size <= 0)
        return rt_error_set(err, "%s: vocabulary size %d, expected > 0", path, vocab_size);
    RtData *d = calloc(1, sizeof *d);
    if (!d)
        return rt_error_set(err, "%s: out of memory", path);
    snprintf(d->path, sizeof d->path, "%s", path);
    d->world = 1;
    if (open_checked(d, tok, vocab_size, err) != 0) {
        rt_data_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

int rt_data_open(RtData **out, const char *path, int vocab_size, RtError *err) {
    return data_open(out, path, NULL, vocab_size, err);
}

int rt_data_open_tok(RtData **out, const char *path, const RtTok *tok, int vocab_size, RtError *err) {
    return data_open(out, path, tok, vocab_size, err);
}

void rt_data_close(RtData *d) {
    if (!d)
        return;
    rt_file_unmap(&d->map);
    free(d->owned);
    free(d);
}

/* ===== batching ======================================================================= */

int rt_data_set_rank(RtData *d, int rank, int world, RtError *err) {
    if (world < 1 || rank < 0 || rank >= world)
        return rt_error_set(err, "%s: rank %d of %d, expected 0 <= rank < world", d->path, rank, world);
    d->rank = rank;
    d->world = world;
    return 0;
}

RtDataFormat rt_data_format(const RtData *d) {
    return d->format;
}
int rt_data_is_token_file(const RtData *d) {
    return d->format != RT_DATA_BYTES && !d->owned;
}
int64_t rt_data_num_tokens(const RtData *d) {
    return d->n;
}
int64_t rt_data_position(const RtData *d) {
    return d->position;
}

int rt_data_seek(RtData *d, int64_t position, RtError *err) {
    if (position < 0 || position > d->n)
        return rt_error_set(err, "%s: data position %lld, expected 0..%lld", d->path, (long long)position,
                            (long long)d->n);
    d->position = position;
    return 0;
}

static void fill_window(const RtData *d, int64_t start, int T, int32_t *in, int32_t *tgt) {
    for (int t = 0; t < T; t++) {
        in[t] = (int32_t)token_at(d, start + t);
        tgt[t] = (int32_t)token_at(d, start + t + 1);
    }
}

int rt_data_next_batch(RtData *d, int B, int T, int32_t *inputs, int32_t *targets, RtError *err) {
    if (B < 1 || T < 1)
        return rt_error_set(err, "%s: batch %d x %d, expected positive sizes", d->path, B, T);
    int64_t step = (int64_t)d->world * B * T;
    if (step + 1 > d->n)
        return rt_error_set(err,
                            "%s: %lld tokens, too few for one global batch of %d x %d x %d+1 "
                            "(ranks x batch x sequence+1) tokens",
                            d->path, (long long)d->n, d->world, B, T);
    if (d->position + step + 1 > d->n)
        d->position = 0;
    int64_t first = d->position + (int64_t)d->rank * B * T;
    for (int b = 0; b < B; b++)
        fill_window(d, first + (int64_t)b * T, T, inputs + (int64_t)b * T, targets + (int64_t)b * T);
    d->position += step;
    return 0;
}

int rt_data_skip(RtData *d, int B, int T, int64_t batches, int *wrapped, RtError *err) {
    *wrapped = 0;
    if (B < 1 || T < 1)
        return rt_error_set(err, "%s: batch %d x %d, expected positive sizes", d->path, B, T);
    int64_t step = (int64_t)d->world * B * T;
    if (step + 1 > d->n)
        return rt_error_set(err,
                            "%s: %lld tokens, too few for one global batch of %d x %d x %d+1 "
                            "(ranks x batch x sequence+1) tokens",
                            d->path, (long long)d->n, d->world, B, T);
    int64_t held = (d->n - 1) / step; /* global batches in one pass over the data */
    if (batches < 0 || batches > held)
        return rt_error_set(err,
                            "%lld batches is more than %s holds: %lld global batches of %d x %d x %d "
                            "(ranks x batch x sequence) in its %lld tokens; expected 0..%lld",
                            (long long)batches, d->path, (long long)held, d->world, B, T, (long long)d->n,
                            (long long)held);
    /* as `batches` calls of rt_data_next_batch would move it, in O(1): a batch that would run
     * past the end starts over at token 0 */
    if (batches == 0)
        return 0;
    int64_t pos = d->position + step + 1 > d->n ? 0 : d->position;
    int64_t left = (d->n - 1 - pos) / step; /* batches from pos before the end */
    if (batches <= left) {
        d->position = pos + batches * step;
    } else {
        *wrapped = 1;
        d->position = (batches - left) * step;
    }
    return 0;
}

/* ===== writing ======================================================================== */

int rt_data_write_u16(const char *path, const int32_t *ids, int64_t n, int64_t vocab, RtError *err) {
    if (vocab > 65536)
        return rt_error_set(err,
                            "%s: a vocabulary of %lld does not fit the llm.c token file's uint16 tokens (at most "
                            "65536); nothing written",
                            path, (long long)vocab);
    if (n > INT32_MAX)
        return rt_error_set(err, "%s: %lld tokens, more than the header's int32 count holds; nothing written", path,
                            (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return rt_error_set(err, "%s: token %d at position %lld is outside the vocabulary of %lld; nothing written",
                                path, (int)ids[i], (long long)i, (long long)vocab);
    unsigned char header[RT_DATA_HEADER_INTS * 4] = {0}, buf[8192];
    const uint32_t head[3] = {RT_DATA_MAGIC, 1, (uint32_t)n};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            header[4 * i + k] = (unsigned char)(head[i] >> (8 * k));
    RtWfile w;
    if (rt_wfile_open(&w, path, err) != 0)
        return -1;
    int rc = rt_wfile_write(&w, header, sizeof header, err);
    for (int64_t i = 0; rc == 0 && i < n; i += (int64_t)sizeof buf / 2) {
        int64_t m = n - i < (int64_t)sizeof buf / 2 ? n - i : (int64_t)sizeof buf / 2;
        for (int64_t j = 0; j < m; j++) {
            buf[2 * j] = (unsigned char)(ids[i + j] & 0xff);
            buf[2 * j + 1] = (unsigned char)(ids[i + j] >> 8);
        }
        rc = rt_wfile_write(&w, buf, (size_t)m * 2, err);
    }
    if (rc != 0) {
        rt_wfile_abort(&w);
        return -1;
    }
    return rt_wfile_commit(&w, err);
}
