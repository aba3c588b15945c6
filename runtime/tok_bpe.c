/*
 * tok_bpe.c: Hugging Face tokenizer.json with a byte-level BPE model (GPT-2, Llama 3).
 *
 * Encoding a text:
 *   1. Added tokens (`added_tokens`, "<|endoftext|>") are cut out first, matched literally,
 *      the longest at the leftmost position; each is its own id.
 *   2. The pieces between are split into pre-tokens by the pre-tokenizer's regular expression.
 *      Two are known, GPT-2's and Llama 3's (which cl100k shares); they are written out here as
 *      functions over code point classes (letter \p{L}, number \p{N}, white space \s, other),
 *      so no regex engine is needed. A byte that does not start a valid UTF-8 sequence is a
 *      code point of its own, of class "other", so every byte string encodes and decodes back.
 *   3. Each pre-token's bytes start as one symbol per byte; then the adjacent pair of lowest
 *      merge rank is merged, again and again, until no adjacent pair has a rank. A heap of
 *      candidate pairs keeps this O(n log n) in the pre-token's length (a 100,000-letter word
 *      encodes in milliseconds). With `ignore_merges` (Llama 3) a pre-token that is itself in
 *      the vocabulary is that token.
 *
 * The vocabulary's strings are byte-level: each byte is shown as one printable code point (GPT-2's
 * bytes_to_unicode). They are turned back into bytes at load, so encoding and decoding work on
 * bytes alone, and a text is its tokens' bytes one after the other. Not supported, with a message
 * naming the member: normalizers, other models than BPE, other pre-tokenizers and patterns, BPE
 * dropout, continuing-subword prefixes and end-of-word suffixes. Post-processors (a BOS added
 * by TemplateProcessing) are not applied: the ids are those of the text alone.
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "rt_impl.h"
#include "tok_unicode.h"

/* The two pre-tokenizer patterns, as tokenizer.json spells them. */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef enum Split { SPLIT_GPT2, SPLIT_LLAMA3 } Split;

typedef struct Added {
    const unsigned char *p; /* into Bpe.bytes */
    int32_t n, id;
} Added;

typedef struct Bpe {
    int64_t vocab;        /* largest id + 1 */
    int64_t *off;         /* (vocab) token id's bytes at bytes + off[id] ... */
    int32_t *len;         /* (vocab) ... of len[id]; -1: no token has this id */
    unsigned char *bytes; /* every token's bytes */
    int32_t *ids;         /* (idcap) hash of tokens by bytes: an id, or -1 */
    uint32_t idcap;
    uint64_t *pair;   /* (paircap) hash of merges by (left id << 32 | right id); 0: empty */
    int32_t *rank;    /* (paircap) the merge's rank, and ... */
    int32_t *merged;  /* (paircap) ... the id of the merged token */
    uint32_t paircap; /* powers of two */
    int32_t byte_id[256];
    Added *added; /* longest first */
    int nadded;
    unsigned char added_first[256]; /* bytes an added token starts with */
    Split split;
    int prefix_space, ignore_merges;
    int32_t bos;
} Bpe;

/* ===== byte-level strings ============================================================= */

/* GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the others for 256 + n
 * in byte order. Returns the byte of code point cp, or -1. */
static int unicode_to_byte(uint32_t cp) {
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            continue;
        if (cp == 256u + (uint32_t)n)
            return b;
        n++;
    }
    return -1;
}

/* The length of the valid UTF-8 sequence at s (n bytes left) and its code point, or 0. */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || (size_t)len > n)
        return 0;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

/* A byte-level string (UTF-8 of bytes_to_unicode's code points) as bytes, into out (n bytes
 * are enough); its length, or -1 when a code point stands for no byte. */
static int32_t from_byte_level(const char *s, size_t n, unsigned char *out) {
    int32_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int len = utf8_next((const unsigned char *)s + i, n - i, &cp);
        int b = len ? unicode_to_byte(cp) : -1;
        if (b < 0)
            return -1;
        out[k++] = (unsigned char)b;
        i += (size_t)len;
    }
    return k;
}

/* ===== hash tables ==================================================================== */

static uint32_t hash_bytes(const unsigned char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

/* The id of the token with these bytes, or -1. */
static int32_t token_id(const Bpe *b, const unsigned char *p, size_t n) {
    for (uint32_t i = hash_bytes(p, n) & (b->idcap - 1);; i = (i + 1) & (b->idcap - 1)) {
        int32_t id = b->ids[i];
        if (id < 0)
            return -1;
        if ((size_t)b->len[id] == n && memcmp(b->bytes + b->off[id], p, n) == 0)
            return id;
    }
}

/* Adds id to the hash by its bytes; a second token with the same bytes keeps the first. */
static void token_index(Bpe *b, int32_t id) {
    const unsigned char *p = b->bytes + b->off[id];
    size_t n = (size_t)b->len[id];
    uint32_t i = hash_bytes(p, n) & (b->idcap - 1);
    for (; b->ids[i] >= 0; i = (i + 1) & (b->idcap - 1))
        if ((size_t)b->len[b->ids[i]] == n && memcmp(b->bytes + b->off[b->ids[i]], p, n) == 0)
            return;
    b->ids[i] = id;
}

/* The slot of merge (l, r): where it is, or the empty slot where it would go. */
static uint32_t pair_slot(const Bpe *b, int32_t l, int32_t r) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    key += 1; /* 0 marks an empty slot */
    uint32_t i = hash_pair(key) & (b->paircap - 1);
    while (b->pair[i] && b->pair[i] != key)
        i = (i + 1) & (b->paircap - 1);
    return i;
}

/* The power of two at least 2n (16 at least), or 0 past 2^31: a table that big is refused. */
static uint32_t pow2_above(uint64_t n) {
    uint64_t c = 16;
    while (c < 2 * n && c <= UINT32_MAX / 2)
        c *= 2;
    return c < 2 * n ? 0 : (uint32_t)c;
}

/* ===== loading ======================================================================== */

static json_object *member(json_object *o, const char *key) {
    json_object *v = NULL;
    return json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static const char *str_member(json_object *o, const char *key) {
    json_object *v = member(o, key);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* Checks the pre-tokenizer: GPT-2's ByteLevel with its built-in pattern, or a Sequence of a
 * Split on one of the known patterns and a ByteLevel without one (Llama 3). */
static int load_pretokenizer(Bpe *b, json_object *root, RtError *err) {
    json_object *pt = member(root, "pre_tokenizer"), *bl = pt;
    const char *type = str_member(pt, "type"), *pattern = GPT2_PATTERN;
    if (type && !strcmp(type, "Sequence")) {
        json_object *seq = member(pt, "pretokenizers");
        json_object *split = json_object_is_type(seq, json_type_array) && json_object_array_length(seq) == 2
                                 ? json_object_array_get_idx(seq, 0)
                                 : NULL;
        bl = split ? json_object_array_get_idx(seq, 1) : NULL;
        const char *st = str_member(split, "type"), *beh = str_member(split, "behavior");
        pattern = str_member(member(split, "pattern"), "Regex");
        if (!st || strcmp(st, "Split") || !beh || strcmp(beh, "Isolated") || !pattern ||
            json_object_get_boolean(member(split, "invert")) || json_object_get_boolean(member(bl, "use_regex")))
            return rt_error_set(err, "/pre_tokenizer: a Sequence other than [Split (Isolated, a regex), ByteLevel "
                                     "(use_regex false)] (Llama 3's); not supported");
    }
    type = str_member(bl, "type");
    if (!type || strcmp(type, "ByteLevel"))
        return rt_error_set(err,
                            "/pre_tokenizer: type %s, expected ByteLevel (byte-level BPE) or a Sequence ending "
                            "in one",
                            type ? type : "missing");
    b->prefix_space = json_object_get_boolean(member(bl, "add_prefix_space"));
    if (!strcmp(pattern, GPT2_PATTERN))
        b->split = SPLIT_GPT2;
    else if (!strcmp(pattern, LLAMA3_PATTERN))
        b->split = SPLIT_LLAMA3;
    else
        return rt_error_set(err,
                            "/pre_tokenizer: the split pattern %.200s is not one of the two known (GPT-2's, "
                            "Llama 3's)",
                            pattern);
    return 0;
}

static int check_model(json_object *root, json_object *model, RtError *err) {
    const char *type = str_member(model, "type");
    if (!model || (type && strcmp(type, "BPE")) || !json_object_is_type(member(model, "vocab"), json_type_object))
        return rt_error_set(err, "/model: %s%s, expected a BPE model with a vocab object", type ? "type " : "",
                            type ? type : "no BPE vocab");
    json_object *norm = member(root, "normalizer"), *drop = member(model, "dropout");
    const char *pre = str_member(model, "continuing_subword_prefix"), *suf = str_member(model, "end_of_word_suffix");
    if (norm)
        return rt_error_set(err, "/normalizer: %s; byte-level BPE (GPT-2, Llama 3) has none, and none is supported",
                            str_member(norm, "type") ? str_member(norm, "type") : "present");
    if (drop && json_object_get_double(drop) != 0)
        return rt_error_set(err, "/model/dropout: %g; BPE dropout is not supported", json_object_get_double(drop));
    if ((pre && *pre) || (suf && *suf))
        return rt_error_set(err, "/model: a continuing_subword_prefix or end_of_word_suffix; not supported");
    return 0;
}

/* Sizes the tables: the vocabulary is the largest id of vocab and added_tokens, plus one. Ids
 * stop at RT_TOK_MAX_ID (2^24 - 1, 64 times the largest tokenizers' 256K): past it the tables
 * would take gigabytes for a few tokens. */
static int load_sizes(Bpe *b, json_object *vocab, json_object *added, size_t *nbytes, RtError *err) {
    int64_t max = -1;
    json_object_object_foreach(vocab, key, val) {
        int64_t id = json_object_get_int64(val);
        if (!json_object_is_type(val, json_type_int) || id < 0 || id > RT_TOK_MAX_ID)
            return rt_error_set(err,
                                "/model/vocab/%.100s: id %s, expected an integer 0..%d (a tokenizer's vocabulary "
                                "has at most %d tokens)",
                                key, json_object_to_json_string(val), RT_TOK_MAX_ID, RT_TOK_MAX_ID + 1);
        max = id > max ? id : max;
        *nbytes += strlen(key);
    }
    for (size_t i = 0; added && i < json_object_array_length(added); i++) {
        json_object *a = json_object_array_get_idx(added, i), *id = member(a, "id");
        const char *content = str_member(a, "content");
        if (!json_object_is_type(id, json_type_int) || json_object_get_int64(id) < 0 ||
            json_object_get_int64(id) > RT_TOK_MAX_ID || !content || !*content)
            return rt_error_set(err,
                                "/added_tokens/%zu: expected an id 0..%d (a tokenizer's vocabulary has at most %d "
                                "tokens) and a non-empty content",
                                i, RT_TOK_MAX_ID, RT_TOK_MAX_ID + 1);
        max = json_object_get_int64(id) > max ? json_object_get_int64(id) : max;
        *nbytes += strlen(content);
    }
    if (max < 0)
        return rt_error_set(err, "/model/vocab: empty");
    b->vocab = max + 1;
    b->off = calloc((size_t)b->vocab, sizeof *b->off);
    b->len = malloc((size_t)b->vocab * sizeof *b->len);
    b->bytes = malloc(*nbytes + 1);
    b->idcap = pow2_above((uint64_t)b->vocab);
    b->ids = malloc(b->idcap * sizeof *b->ids);
    if (!b->off || !b->len || !b->bytes || !b->ids)
        return rt_error_set(err, "out of memory for a vocabulary of %lld", (long long)b->vocab);
    memset(b->len, 0xff, (size_t)b->vocab * sizeof *b->len);
    memset(b->ids, 0xff, b->idcap * sizeof *b->ids);
    return 0;
}

/* Puts token id's bytes at the end of the byte store (at *at). */
static int token_set(Bpe *b, int32_t id, const unsigned char *p, int32_t n, size_t *at, const char *where,
                     RtError *err) {
    if (b->len[id] >= 0 && ((int32_t)b->len[id] != n || memcmp(b->bytes + b->off[id], p, (size_t)n)))
        return rt_error_set(err, "%s: id %d is taken by another token", where, (int)id);
    memmove(b->bytes + *at, p, (size_t)n);
    b->off[id] = (int64_t)*at;
    b->len[id] = n;
    *at += (size_t)n;
    return 0;
}

static int load_vocab(Bpe *b, json_object *vocab, size_t *at, RtError *err) {
    json_object_object_foreach(vocab, key, val) {
        size_t n = strlen(key);
        int32_t k = from_byte_level(key, n, b->bytes + *at);
        char where[160];
        snprintf(where, sizeof where, "/model/vocab/%.100s", key);
        if (k <= 0)
            return rt_error_set(err, "%s: not a byte-level token (a code point that stands for no byte)", where);
        if (token_set(b, (int32_t)json_object_get_int64(val), b->bytes + *at, k, at, where, err) != 0)
            return -1;
    }
    return 0;
}

static int cmp_added(const void *x, const void *y) {
    const Added *a = x, *c = y;
    return a->n != c->n ? c->n - a->n : a->id - c->id;
}

/* Added tokens are literal text (not byte-level), matched before the pre-tokenizer. */
static int load_added(Bpe *b, json_object *added, size_t *at, RtError *err) {
    size_t n = added ? json_object_array_length(added) : 0; /* added_tokens may be missing */
    b->added = calloc(n + 1, sizeof *b->added);
    if (!b->added)
        return rt_error_set(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_object *a = json_object_array_get_idx(added, i);
        const char *content = str_member(a, "content");
        int32_t id = (int32_t)json_object_get_int64(member(a, "id"));
        char where[64];
        snprintf(where, sizeof where, "/added_tokens/%zu", i);
        if (b->len[id] < 0 &&
            token_set(b, id, (const unsigned char *)content, (int32_t)strlen(content), at, where, err) != 0)
            return -1;
        if (b->len[id] != (int32_t)strlen(content) || memcmp(b->bytes + b->off[id], content, strlen(content)))
            return rt_error_set(err, "%s: '%.100s' has id %d, which the vocabulary gives another token", where, content,
                                (int)id);
        b->added[b->nadded++] = (Added){b->bytes + b->off[id], b->len[id], id};
        b->added_first[(unsigned char)content[0]] = 1;
        if (b->bos < 0 &&
            (!strcmp(content, "<|begin_of_text|>") || !strcmp(content, "<|endoftext|>") || !strcmp(content, "<s>")))
            b->bos = id;
    }
    qsort(b->added, (size_t)b->nadded, sizeof *b->added, cmp_added);
    return 0;
}

/* A merge as "left right" or ["left", "right"]; both sides and their join must be tokens. */
static int load_merge(Bpe *b, json_object *m, size_t i, unsigned char *scratch, size_t room, RtError *err) {
    const char *l = NULL, *r = NULL;
    size_t ln = 0, rn = 0;
    if (json_object_is_type(m, json_type_string)) {
        l = json_object_get_string(m);
        const char *sp = strchr(l, ' ');
        if (sp) {
            ln = (size_t)(sp - l);
            r = sp + 1;
            rn = strlen(r);
        }
    } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
        l = json_object_get_string(json_object_array_get_idx(m, 0));
        r = json_object_get_string(json_object_array_get_idx(m, 1));
        ln = l ? strlen(l) : 0;
        rn = r ? strlen(r) : 0;
    }
    if (l && r && ln + rn > room)
        return rt_error_set(err, "/model/merges/%zu: longer than any token: not in the vocabulary", i);
    if (!l || !r || !ln || !rn || strchr(r, ' '))
        return rt_error_set(err, "/model/merges/%zu: %.100s, expected \"left right\" or [\"left\", \"right\"]", i,
                            json_object_to_json_string(m));
    int32_t lk = from_byte_level(l, ln, scratch), rk = lk < 0 ? -1 : from_byte_level(r, rn, scratch + lk);
    int32_t lid = lk > 0 ? token_id(b, scratch, (size_t)lk) : -1;
    int32_t rid = rk > 0 ? token_id(b, scratch + lk, (size_t)rk) : -1;
    int32_t mid = lid >= 0 && rid >= 0 ? token_id(b, scratch, (size_t)(lk + rk)) : -1;
    if (mid < 0)
        return rt_error_set(err, "/model/merges/%zu: %.100s: %s is not in the vocabulary", i,
                            json_object_to_json_string(m),
                            lid < 0   ? "the left part"
                            : rid < 0 ? "the right part"
                                      : "their join");
    uint32_t s = pair_slot(b, lid, rid);
    if (!b->pair[s]) { /* a repeated merge keeps its first rank */
        b->pair[s] = ((uint64_t)(uint32_t)lid << 32 | (uint32_t)rid) + 1;
        b->rank[s] = (int32_t)i;
        b->merged[s] = mid;
    }
    return 0;
}

static int load_merges(Bpe *b, json_object *merges, RtError *err) {
    if (!json_object_is_type(merges, json_type_array))
        return rt_error_set(err, "/model/merges: missing, expected an array");
    size_t n = json_object_array_length(merges), longest = 0;
    for (int64_t id = 0; id < b->vocab; id++)
        longest = b->len[id] > 0 && (size_t)b->len[id] > longest ? (size_t)b->len[id] : longest;
    b->paircap = pow2_above(n);
    if (!b->paircap)
        return rt_error_set(err, "/model/merges: %zu merges, more than a tokenizer's vocabulary holds", n);
    b->pair = calloc(b->paircap, sizeof *b->pair);
    b->rank = malloc(b->paircap * sizeof *b->rank);
    b->merged = malloc(b->paircap * sizeof *b->merged);
    size_t room = 8 * longest + 16; /* a merge's two parts are no longer than the longest token's text */
    unsigned char *scratch = malloc(room);
    int rc = b->pair && b->rank && b->merged && scratch ? 0 : rt_error_set(err, "out of memory for %zu merges", n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = load_merge(b, json_object_array_get_idx(merges, i), i, scratch, room, err);
    free(scratch);
    return rc;
}

static int load_tables(Bpe *b, json_object *root, RtError *err) {
    json_object *model = member(root, "model"), *added = member(root, "added_tokens");
    if (check_model(root, model, err) != 0 || load_pretokenizer(b, root, err) != 0)
        return -1;
    if (added && !json_object_is_type(added, json_type_array))
        return rt_error_set(err, "/added_tokens: expected an array");
    b->ignore_merges = json_object_get_boolean(member(model, "ignore_merges"));
    size_t nbytes = 0, at = 0;
    json_object *vocab = member(model, "vocab");
    if (load_sizes(b, vocab, added, &nbytes, err) != 0 || load_vocab(b, vocab, &at, err) != 0 ||
        load_added(b, added, &at, err) != 0)
        return -1;
    for (int64_t id = 0; id < b->vocab; id++)
        if (b->len[id] > 0)
            token_index(b, (int32_t)id);
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_id[c] = token_id(b, &byte, 1);
    }
    return load_merges(b, member(model, "merges"), err);
}

static void bpe_free(void *impl) {
    Bpe *b = impl;
    if (!b)
        return;
    free(b->off);
    free(b->len);
    free(b->bytes);
    free(b->ids);
    free(b->pair);
    free(b->rank);
    free(b->merged);
    free(b->added);
    free(b);
}

/* Whether anything but white space follows byte `end` of the n. */
static int trailing(const char *json, size_t end, size_t n) {
    while (end < n && strchr(" \t\r\n", json[end]) && json[end])
        end++;
    return end < n;
}

/* A JSON string may spell NUL as \u0000, but json-c's keys and the token texts here are C
 * strings: "a\u0000b" would be read as "a", another token perhaps. Refused, quoting the string
 * and its byte. */
static int check_no_nul(const char *text, size_t len, RtError *err) {
    size_t start, end;
    if (!rt_json_nul_string(text, len, &start, &end))
        return 0;
    int shown = (int)(end - start + 1 < 100 ? end - start + 1 : 100);
    return rt_error_set(err,
                        "the string %.*s%s at byte %zu holds a NUL (\\u0000); a token or key of a "
                        "tokenizer.json cannot contain one",
                        shown, text + start, shown == 100 ? "..." : "", start);
}

int rt_bpe_load(void **impl, const char *json, size_t n, RtError *err) {
    *impl = NULL;
    if (check_no_nul(json, n, err) != 0)
        return -1;
    json_tokener *tk = json_tokener_new();
    Bpe *b = calloc(1, sizeof *b);
    if (!tk || !b) {
        json_tokener_free(tk);
        free(b);
        return rt_error_set(err, "out of memory");
    }
    b->bos = -1;
    json_object *root = n <= INT32_MAX ? json_tokener_parse_ex(tk, json, (int)n) : NULL;
    enum json_tokener_error jerr = json_tokener_get_error(tk);
    int rc = 0;
    if (!root || jerr != json_tokener_success)
        rc = rt_error_set(err, "not valid JSON at byte %zu of %zu: %s%s", json_tokener_get_parse_end(tk), n,
                          jerr == json_tokener_continue ? "the text ends inside it" : json_tokener_error_desc(jerr),
                          jerr == json_tokener_continue ? " (truncated?)" : "");
    else if (trailing(json, json_tokener_get_parse_end(tk), n))
        rc = rt_error_set(err, "bytes after the JSON object, at byte %zu", json_tokener_get_parse_end(tk));
    else if (!member(root, "model"))
        rc = rt_error_set(err, "a JSON object without a \"model\": not a Hugging Face tokenizer.json");
    else
        rc = load_tables(b, root, err);
    json_object_put(root);
    json_tokener_free(tk);
    if (rc != 0) {
        bpe_free(b);
        return -1;
    }
    *impl = b;
    return 0;
}

/* ===== pre-tokenizing ================================================================== */

enum { C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* The Unicode White_Space property (\s). */
static int is_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* One code point of the text being split: where it starts, how long, and its class. */
typedef struct Cp {
    uint32_t cp; /* UINT32_MAX: a byte that starts no valid UTF-8 sequence */
    size_t at;   /* byte offset in the piece */
    uint8_t cls;
} Cp;

static uint8_t classify(uint32_t cp) {
    if (cp == UINT32_MAX)
        return C_OTHER;
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z' ? C_LETTER
               : cp >= '0' && cp <= '9'                 ? C_NUMBER
               : is_space(cp)                           ? C_SPACE
                                                        : C_OTHER;
    if (in_ranges(TOK_LETTERS, sizeof TOK_LETTERS / sizeof TOK_LETTERS[0], cp))
        return C_LETTER;
    if (in_ranges(TOK_NUMBERS, sizeof TOK_NUMBERS / sizeof TOK_NUMBERS[0], cp))
        return C_NUMBER;
    return is_space(cp) ? C_SPACE : C_OTHER;
}

/* The end of the run of class cls starting at i. */
static size_t run(const Cp *c, size_t n, size_t i, int cls) {
    while (i < n && c[i].cls == cls)
        i++;
    return i;
}

static int lower(uint32_t cp, int fold) {
    return fold && cp < 0x80 && cp >= 'A' && cp <= 'Z' ? (int)cp + 32 : (int)(cp < 0x80 ? cp : 0);
}

/* 's 't 're 've 'm 'll 'd at i (ASCII case folded when fold): the end, or 0. */
static size_t contraction(const Cp *c, size_t n, size_t i, int fold) {
    if (c[i].cp != '\'' || i + 1 >= n)
        return 0;
    int a = lower(c[i + 1].cp, fold), b = i + 2 < n ? lower(c[i + 2].cp, fold) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return i + 3;
    return 0;
}

/* \s+(?!\S) then \s+, at a space i: the run, less its last space when a non-space follows,
 * unless that leaves none. */
static size_t spaces(const Cp *c, size_t n, size_t i) {
    size_t j = run(c, n, i, C_SPACE);
    return j < n && j - i > 1 ? j - 1 : j;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const Cp *c, size_t n, size_t i) {
    size_t e = contraction(c, n, i, 0);
    if (e)
        return e;
    size_t s = c[i].cp == ' ' && i + 1 < n && c[i + 1].cls != C_SPACE ? i + 1 : i;
    if (c[s].cls != C_SPACE)
        return run(c, n, s, c[s].cls);
    return spaces(c, n, i);
}

static int is_newline(const Cp *c) {
    return c->cp == '\r' || c->cp == '\n';
}

/* Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_llama3(const Cp *c, size_t n, size_t i) {
    size_t e = contraction(c, n, i, 1);
    if (e)
        return e;
    if (c[i].cls == C_LETTER)
        return run(c, n, i, C_LETTER);
    if (!is_newline(&c[i]) && c[i].cls != C_NUMBER && i + 1 < n && c[i + 1].cls == C_LETTER)
        return run(c, n, i + 1, C_LETTER);
    if (c[i].cls == C_NUMBER) { /* at most 3 digits, looked at: the rest of a long run is not (it was quadratic) */
        size_t j = i + 1;
        while (j < n && j < i + 3 && c[j].cls == C_NUMBER)
            j++;
        return j;
    }
    size_t s = c[i].cp == ' ' && i + 1 < n && c[i + 1].cls == C_OTHER ? i + 1 : i;
    if (c[s].cls == C_OTHER) {
        e = run(c, n, s, C_OTHER);
        while (e < n && is_newline(&c[e]))
            e++;
        return e;
    }
    size_t j = run(c, n, i, C_SPACE), last = j;
    while (last > i && !is_newline(&c[last - 1]))
        last--;
    return last > i ? last : spaces(c, n, i);
}

/* ===== merging ======================================================================== */

typedef struct Cand {
    int32_t rank, left, right; /* the pair (left, right) of symbol positions */
} Cand;

/* A min-heap of candidate merges by (rank, left). */
typedef struct Heap {
    Cand *v;
    size_t n;
} Heap;

static int cand_less(const Cand *a, const Cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(Heap *h, Cand c) {
    size_t i = h->n++;
    while (i > 0 && cand_less(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
}

static Cand heap_pop(Heap *h) {
    Cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= h->n)
            break;
        if (k + 1 < h->n && cand_less(&h->v[k + 1], &h->v[k]))
            k++;
        if (!cand_less(&h->v[k], &last))
            break;
        h->v[i] = h->v[k];
        i = k;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* The growing output of one encode and the scratch of its words. */
typedef struct Enc {
    const Bpe *b;
    int32_t *ids;
    int64_t n, cap;
    int32_t *sym, *next, *prev; /* (wcap) a word's symbols, linked */
    Cand *cands;                /* (wcap) */
    size_t wcap;
    RtError *err;
} Enc;

static int emit(Enc *e, int32_t id) {
    if (e->n == e->cap) {
        int64_t cap = e->cap ? 2 * e->cap : 1024;
        int32_t *ids = realloc(e->ids, (size_t)cap * sizeof *ids);
        if (!ids)
            return rt_error_set(e->err, "out of memory for %lld tokens", (long long)cap);
        e->ids = ids;
        e->cap = cap;
    }
    e->ids[e->n++] = id;
    return 0;
}

static int grow_word(Enc *e, size_t n) {
    if (n <= e->wcap)
        return 0;
    size_t cap = n < 256 ? 256 : 2 * n;
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->cands);
    e->sym = malloc(cap * sizeof *e->sym);
    e->next = malloc(cap * sizeof *e->next);
    e->prev = malloc(cap * sizeof *e->prev);
    e->cands = malloc(3 * cap * sizeof *e->cands);
    e->wcap = e->sym && e->next && e->prev && e->cands ? cap : 0;
    return e->wcap ? 0 : rt_error_set(e->err, "out of memory for a word of %zu bytes", n);
}

/* Pushes the merge of symbols l and r (adjacent) when the pair has a rank. */
static void consider(const Enc *e, Heap *h, int32_t l, int32_t r) {
    if (l < 0 || r < 0)
        return;
    uint32_t s = pair_slot(e->b, e->sym[l], e->sym[r]);
    if (e->b->pair[s])
        heap_push(h, (Cand){e->b->rank[s], l, r});
}

/* The tokens of one pre-token of n bytes. */
static int encode_word(Enc *e, const unsigned char *p, size_t n) {
    const Bpe *b = e->b;
    int32_t whole = b->ignore_merges ? token_id(b, p, n) : -1;
    if (whole >= 0)
        return emit(e, whole);
    if (grow_word(e, n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (b->byte_id[p[i]] < 0)
            return rt_error_set(e->err, "byte 0x%02x has no token in the vocabulary", p[i]);
        e->sym[i] = b->byte_id[p[i]];
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    /* every pair is pushed once at the start and once per merge on each side: 3n is room */
    Heap h = {e->cands, 0};
    for (size_t i = 0; i + 1 < n; i++)
        consider(e, &h, (int32_t)i, (int32_t)i + 1);
    while (h.n) {
        Cand c = heap_pop(&h);
        if (e->sym[c.left] < 0 || e->next[c.left] != c.right)
            continue; /* stale: a side was merged away since */
        uint32_t s = pair_slot(b, e->sym[c.left], e->sym[c.right]);
        if (!b->pair[s] || b->rank[s] != c.rank)
            continue;
        e->sym[c.left] = b->merged[s];
        e->sym[c.right] = -1;
        e->next[c.left] = e->next[c.right];
        if (e->next[c.left] >= 0)
            e->prev[e->next[c.left]] = c.left;
        consider(e, &h, e->prev[c.left], c.left);
        consider(e, &h, c.left, e->next[c.left]);
    }
    for (int32_t i = 0; i >= 0; i = e->next[i])
        if (emit(e, e->sym[i]) != 0)
            return -1;
    return 0;
}

/* A piece of text without added tokens: split into pre-tokens, each merged. */
static int encode_piece(Enc *e, const unsigned char *p, size_t n) {
    if (n == 0)
        return 0;
    Cp *c = malloc(n * sizeof *c);
    if (!c)
        return rt_error_set(e->err, "out of memory for %zu bytes", n);
    size_t m = 0;
    for (size_t i = 0; i < n; m++) {
        uint32_t cp;
        int len = utf8_next(p + i, n - i, &cp);
        c[m] = (Cp){len ? cp : UINT32_MAX, i, classify(len ? cp : UINT32_MAX)};
        i += len ? (size_t)len : 1;
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < m;) {
        size_t j = e->b->split == SPLIT_GPT2 ? match_gpt2(c, m, i) : match_llama3(c, m, i);
        size_t end = j < m ? c[j].at : n;
        rc = encode_word(e, p + c[i].at, end - c[i].at);
        i = j;
    }
    free(c);
    return rc;
}

/* The added token at p (n bytes left), the longest; or NULL. */
static const Added *added_at(const Bpe *b, const unsigned char *p, size_t n) {
    if (!b->added_first[p[0]])
        return NULL;
    for (int k = 0; k < b->nadded; k++)
        if ((size_t)b->added[k].n <= n && memcmp(b->added[k].p, p, (size_t)b->added[k].n) == 0)
            return &b->added[k];
    return NULL;
}

static int encode_text(Enc *e, const unsigned char *p, size_t n) {
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        const Added *a = added_at(e->b, p + i, n - i);
        if (!a) {
            i++;
            continue;
        }
        if (encode_piece(e, p + start, i - start) != 0 || emit(e, a->id) != 0)
            return -1;
        i += (size_t)a->n;
        start = i;
    }
    return encode_piece(e, p + start, n - start);
}

static int bpe_encode(const void *impl, const char *text, size_t n, int32_t **ids, int64_t *nids, RtError *err) {
    const Bpe *b = impl;
    Enc e = {.b = b, .err = err};
    unsigned char *copy = NULL;
    const unsigned char *p = (const unsigned char *)text;
    if (b->prefix_space && n > 0 && text[0] != ' ') { /* ByteLevel's add_prefix_space */
        copy = malloc(n + 1);
        if (!copy)
            return rt_error_set(err, "out of memory");
        copy[0] = ' ';
        memcpy(copy + 1, text, n);
        p = copy;
        n++;
    }
    int rc = encode_text(&e, p, n);
    free(copy);
    free(e.sym);
    free(e.next);
    free(e.prev);
    free(e.cands);
    if (rc != 0) {
        free(e.ids);
        return -1;
    }
    *ids = e.ids;
    *nids = e.n;
    return 0;
}

/* ===== the tokenizer's table ========================================================== */

static int64_t bpe_vocab(const void *impl) {
    return ((const Bpe *)impl)->vocab;
}

static int32_t bpe_bos(const void *impl) {
    return ((const Bpe *)impl)->bos;
}

static int64_t bpe_token_bytes(const void *impl, int32_t id, char *buf, size_t cap) {
    const Bpe *b = impl;
    int32_t n = b->len[id] > 0 ? b->len[id] : 0;
    if (buf)
        memcpy(buf, b->bytes + b->off[id], (size_t)n < cap ? (size_t)n : cap);
    return n;
}

const RtTokOps rt_bpe_ops = {"bpe", bpe_vocab, bpe_bos, bpe_encode, NULL, bpe_token_bytes, bpe_free};
