/*
 * safetensors.c: reading and writing the safetensors format.
 *
 *   bytes 0..7     N, the header length, little-endian uint64
 *   bytes 8..8+N   JSON object: name -> {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
 *                  plus an optional "__metadata__" map of strings to strings; padded with spaces
 *   rest           the data buffer; offsets are relative to its start
 *
 * The reader trusts nothing: the header length against the file size, the JSON syntax, each
 * entry's dtype, shape and offsets, offsets against dtype size x element count, and that the
 * tensors tile the data buffer exactly, without overlaps, gaps or trailing bytes (as the
 * reference implementation requires). A file that opens is safe to index without checks.
 * Tensor data is little-endian, as on every host this runtime targets.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define HEADER_MAX (100 * 1000 * 1000) /* the reference implementation's limit */

typedef struct Entry {
    RtTensor t;         /* first, so &entry->t is what rt_st_tensor hands out */
    int64_t begin, end; /* data_offsets */
} Entry;

struct RtSt {
    char path[4096]; /* PATH_MAX: a longer path cannot be opened */
    RtMapped map;
    Entry *e; /* (n) sorted by begin */
    int n;
    RtMeta *meta; /* (n_meta) owned strings */
    int n_meta;
};

/* ===== dtypes ========================================================================= */

static const struct {
    const char *name;
    int size;
} DTYPES[RT_DT_COUNT] = {
    /* coupled with enum RtDtype in axrt.h, in the same order */
    [RT_DT_BOOL] = {"BOOL", 1},       [RT_DT_U8] = {"U8", 1},           [RT_DT_I8] = {"I8", 1},
    [RT_DT_F8_E4M3] = {"F8_E4M3", 1}, [RT_DT_F8_E5M2] = {"F8_E5M2", 1}, [RT_DT_I16] = {"I16", 2},
    [RT_DT_U16] = {"U16", 2},         [RT_DT_F16] = {"F16", 2},         [RT_DT_BF16] = {"BF16", 2},
    [RT_DT_I32] = {"I32", 4},         [RT_DT_U32] = {"U32", 4},         [RT_DT_F32] = {"F32", 4},
    [RT_DT_I64] = {"I64", 8},         [RT_DT_U64] = {"U64", 8},         [RT_DT_F64] = {"F64", 8},
};

const char *rt_dtype_name(RtDtype dt) {
    return (unsigned)dt < RT_DT_COUNT ? DTYPES[dt].name : "?";
}
int rt_dtype_size(RtDtype dt) {
    return (unsigned)dt < RT_DT_COUNT ? DTYPES[dt].size : 0;
}

static int dtype_parse(const char *s, RtDtype *dt) {
    for (int i = 0; i < RT_DT_COUNT; i++)
        if (strcmp(DTYPES[i].name, s) == 0) {
            *dt = (RtDtype)i;
            return 0;
        }
    return -1;
}

const char *rt_shape_text(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

/* Element count times `size`, or -1 if it overflows int64. */
static int64_t shape_bytes(const int64_t *shape, int ndim, int size) {
    int64_t total = size;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && total > INT64_MAX / shape[i]))
            return -1;
        total *= shape[i];
    }
    return total;
}

/* ===== reading: header entries ======================================================== */

static int get_int(json_object *v, int64_t *out) {
    if (!json_object_is_type(v, json_type_int))
        return -1;
    *out = json_object_get_int64(v);
    return *out < 0 || *out == INT64_MAX ? -1 : 0; /* INT64_MAX: json-c's clamp on overflow */
}

static int parse_shape(const RtSt *st, const char *name, json_object *v, RtTensor *t, RtError *err) {
    if (!v || !json_object_is_type(v, json_type_array))
        return rt_error_set(err, "%s: tensor '%s': \"shape\" missing or not an array", st->path, name);
    size_t nd = json_object_array_length(v);
    if (nd > RT_MAX_DIMS)
        return rt_error_set(err, "%s: tensor '%s': %zu dimensions, at most %d supported", st->path, name, nd,
                            RT_MAX_DIMS);
    t->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++)
        if (get_int(json_object_array_get_idx(v, i), &t->shape[i]) != 0)
            return rt_error_set(err, "%s: tensor '%s': shape[%zu] is not a non-negative integer", st->path, name, i);
    return 0;
}

static int parse_offsets(const RtSt *st, const char *name, json_object *v, Entry *e, int64_t data_size, RtError *err) {
    if (!v || !json_object_is_type(v, json_type_array) || json_object_array_length(v) != 2 ||
        get_int(json_object_array_get_idx(v, 0), &e->begin) != 0 ||
        get_int(json_object_array_get_idx(v, 1), &e->end) != 0)
        return rt_error_set(err, "%s: tensor '%s': \"data_offsets\" must be [begin, end] of non-negative integers",
                            st->path, name);
    if (e->begin > e->end || e->end > data_size)
        return rt_error_set(err, "%s: tensor '%s': data_offsets [%lld, %lld] outside the %lld-byte data buffer",
                            st->path, name, (long long)e->begin, (long long)e->end, (long long)data_size);
    return 0;
}

static int parse_dtype(const RtSt *st, const char *name, json_object *v, RtTensor *t, RtError *err) {
    if (!v || !json_object_is_type(v, json_type_string))
        return rt_error_set(err, "%s: tensor '%s': \"dtype\" missing or not a string", st->path, name);
    if (dtype_parse(json_object_get_string(v), &t->dtype) != 0)
        return rt_error_set(err, "%s: tensor '%s': unknown dtype '%.32s'", st->path, name, json_object_get_string(v));
    return 0;
}

static int parse_entry(const RtSt *st, const char *name, json_object *v, Entry *e, int64_t data_size, RtError *err) {
    if (!json_object_is_type(v, json_type_object))
        return rt_error_set(err, "%s: tensor '%s': expected an object", st->path, name);
    json_object *dtype = NULL, *shape = NULL, *offsets = NULL;
    json_object_object_get_ex(v, "dtype", &dtype);
    json_object_object_get_ex(v, "shape", &shape);
    json_object_object_get_ex(v, "data_offsets", &offsets);
    if (parse_dtype(st, name, dtype, &e->t, err) != 0 || parse_shape(st, name, shape, &e->t, err) != 0 ||
        parse_offsets(st, name, offsets, e, data_size, err) != 0)
        return -1;
    char sh[128];
    int64_t want = shape_bytes(e->t.shape, e->t.ndim, rt_dtype_size(e->t.dtype));
    if (want < 0)
        return rt_error_set(err, "%s: tensor '%s': shape %s overflows 64-bit sizes", st->path, name,
                            rt_shape_text(sh, sizeof sh, e->t.shape, e->t.ndim));
    if (want != e->end - e->begin)
        return rt_error_set(err, "%s: tensor '%s': %s %s needs %lld bytes, data_offsets [%lld, %lld] hold %lld",
                            st->path, name, rt_dtype_name(e->t.dtype),
                            rt_shape_text(sh, sizeof sh, e->t.shape, e->t.ndim), (long long)want, (long long)e->begin,
                            (long long)e->end, (long long)(e->end - e->begin));
    e->t.nbytes = want;
    return 0;
}

static int parse_meta(RtSt *st, json_object *v, RtError *err) {
    if (!json_object_is_type(v, json_type_object))
        return rt_error_set(err, "%s: \"__metadata__\" must be an object of strings", st->path);
    st->meta = calloc((size_t)json_object_object_length(v) + 1, sizeof *st->meta);
    if (!st->meta)
        return rt_error_set(err, "%s: out of memory", st->path);
    json_object_object_foreach(v, key, val) {
        if (!json_object_is_type(val, json_type_string))
            return rt_error_set(err, "%s: __metadata__ '%s': expected a string", st->path, key);
        RtMeta *m = &st->meta[st->n_meta++];
        m->key = strdup(key);
        m->value = strdup(json_object_get_string(val));
        if (!m->key || !m->value)
            return rt_error_set(err, "%s: out of memory", st->path);
    }
    return 0;
}

/* ===== reading: the whole header ====================================================== */

static int cmp_entry(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Sorted by offset, the tensors must cover the data buffer exactly once. */
static int check_tiling(const RtSt *st, int64_t data_size, RtError *err) {
    int64_t at = 0;
    for (int i = 0; i < st->n; i++) {
        const Entry *e = &st->e[i];
        if (e->begin < at)
            return rt_error_set(err, "%s: tensors '%s' and '%s' overlap at data offset %lld", st->path,
                                st->e[i - 1].t.name, e->t.name, (long long)e->begin);
        if (e->begin > at)
            return rt_error_set(err, "%s: %lld unused bytes before tensor '%s' at data offset %lld", st->path,
                                (long long)(e->begin - at), e->t.name, (long long)at);
        at = e->end;
    }
    if (at != data_size)
        return rt_error_set(err, "%s: %lld bytes after the last tensor in the data buffer", st->path,
                            (long long)(data_size - at));
    return 0;
}

static int parse_tensors(RtSt *st, json_object *root, const unsigned char *data, int64_t data_size, RtError *err) {
    st->e = calloc((size_t)json_object_object_length(root) + 1, sizeof *st->e);
    if (!st->e)
        return rt_error_set(err, "%s: out of memory", st->path);
    json_object_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (parse_meta(st, val, err) != 0)
                return -1;
            continue;
        }
        Entry *e = &st->e[st->n];
        if (!(e->t.name = strdup(key)))
            return rt_error_set(err, "%s: out of memory", st->path);
        st->n++;
        if (parse_entry(st, key, val, e, data_size, err) != 0)
            return -1;
        e->t.data = data + e->begin;
    }
    qsort(st->e, (size_t)st->n, sizeof *st->e, cmp_entry);
    return check_tiling(st, data_size, err);
}

/* A JSON string may spell NUL as \u0000, but names and metadata are C strings here: "a\u0000b"
 * would be read as "a", another tensor's name perhaps. Refused, quoting the string. */
static int check_no_nul(const RtSt *st, const char *text, size_t len, RtError *err) {
    size_t start, end;
    if (!rt_json_nul_string(text, len, &start, &end))
        return 0;
    int shown = (int)(end - start + 1 < 200 ? end - start + 1 : 200);
    return rt_error_set(err,
                        "%s: JSON header: the string %.*s%s holds a NUL (\\u0000); a tensor name or "
                        "metadata cannot contain one",
                        st->path, shown, text + start, shown == 200 ? "..." : "");
}

/* Parses exactly `len` bytes as one JSON object followed only by whitespace. */
static json_object *parse_json(const RtSt *st, const char *text, size_t len, RtError *err) {
    if (memchr(text, '\0', len)) {
        rt_error_set(err, "%s: JSON header contains a NUL byte", st->path);
        return NULL;
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        rt_error_set(err, "%s: out of memory", st->path);
        return NULL;
    }
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (jerr != json_tokener_success || !json_object_is_type(root, json_type_object) ||
        strspn(text + end, " \t\r\n") != len - end) {
        rt_error_set(err, "%s: JSON header is not one valid object (%s, near byte %zu of %zu)", st->path,
                     jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "unexpected content", end, len);
        json_object_put(root);
        return NULL;
    }
    if (check_no_nul(st, text, len, err) != 0) {
        json_object_put(root);
        return NULL;
    }
    return root;
}

static int parse_file(RtSt *st, RtError *err) {
    const unsigned char *p = st->map.data;
    if (st->map.size < 8)
        return rt_error_set(err, "%s: %lld bytes, too short for the 8-byte header length", st->path,
                            (long long)st->map.size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | p[i];
    if (n > (uint64_t)(st->map.size - 8) || n > HEADER_MAX)
        return rt_error_set(err, "%s: header length %llu, but the file has %lld bytes after it%s", st->path,
                            (unsigned long long)n, (long long)(st->map.size - 8),
                            n > HEADER_MAX ? " (limit 100 MB)" : "");
    char *text = malloc(n + 1);
    if (!text)
        return rt_error_set(err, "%s: out of memory", st->path);
    memcpy(text, p + 8, n);
    text[n] = '\0';
    json_object *root = parse_json(st, text, n, err);
    free(text);
    if (!root)
        return -1;
    int rc = parse_tensors(st, root, p + 8 + n, st->map.size - 8 - (int64_t)n, err);
    json_object_put(root);
    return rc;
}

int rt_st_open(RtSt **out, const char *path, RtError *err) {
    *out = NULL;
    RtSt *st = calloc(1, sizeof *st);
    if (!st)
        return rt_error_set(err, "%s: out of memory", path);
    snprintf(st->path, sizeof st->path, "%s", path);
    if (rt_file_map(path, &st->map, err) != 0 || parse_file(st, err) != 0) {
        rt_st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void rt_st_close(RtSt *st) {
    if (!st)
        return;
    for (int i = 0; i < st->n; i++)
        free((char *)st->e[i].t.name);
    for (int i = 0; i < st->n_meta; i++) {
        free((char *)st->meta[i].key);
        free((char *)st->meta[i].value);
    }
    free(st->e);
    free(st->meta);
    rt_file_unmap(&st->map);
    free(st);
}

/* ===== reading: lookups =============================================================== */

const char *rt_st_path(const RtSt *st) {
    return st->path;
}
int rt_st_count(const RtSt *st) {
    return st->n;
}
const RtTensor *rt_st_tensor(const RtSt *st, int i) {
    return i >= 0 && i < st->n ? &st->e[i].t : NULL;
}

const RtTensor *rt_st_find(const RtSt *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->e[i].t.name, name) == 0)
            return &st->e[i].t;
    return NULL;
}

const char *rt_st_meta(const RtSt *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0)
            return st->meta[i].value;
    return NULL;
}

const void *rt_st_bytes(const RtSt *st, int64_t *size) {
    *size = st->map.size;
    return st->map.data;
}

uint64_t rt_st_hash_tensor(const RtSt *st, const char *name, uint64_t h) {
    const RtTensor *t = rt_st_find(st, name);
    const unsigned char *b = t ? t->data : NULL;
    for (int64_t k = 0; b && k < t->nbytes; k++)
        h = (h ^ b[k]) * 0x100000001b3ull;
    return h;
}

int rt_base_record_parse(const char *rec, char *file, size_t cap, const char **hash) {
    const char *sp = rec ? strrchr(rec, ' ') : NULL;
    if (!rec || strncmp(rec, "init ", 5) != 0 || !sp || sp <= rec + 5 || strncmp(sp, " fnv1a64:", 9) != 0)
        return 0;
    snprintf(file, cap, "%.*s", (int)(sp - rec - 5), rec + 5);
    *hash = sp + 1;
    return 1;
}

/* ===== reading: an interpreter dump as weights ========================================= */

static int dump_name(const char *name) {
    return strcmp(name, "loss") == 0 || strncmp(name, "grad:", 5) == 0 || strncmp(name, "new:", 4) == 0;
}

/* Parameter paths hold no ':', so a file of only these names is a dump and nothing else. */
int rt_st_dump_as_weights(RtSt *st) {
    int news = 0;
    for (int i = 0; i < st->n; i++) {
        if (!dump_name(st->e[i].t.name))
            return 0;
        news += strncmp(st->e[i].t.name, "new:", 4) == 0;
    }
    if (news == 0)
        return 0;
    int kept = 0;
    for (int i = 0; i < st->n; i++) {
        char *name = (char *)st->e[i].t.name;
        if (strncmp(name, "new:", 4) != 0) {
            free(name);
            continue;
        }
        memmove(name, name + 4, strlen(name + 4) + 1);
        st->e[kept++] = st->e[i]; /* still sorted by offset; the gaps are never read */
    }
    st->n = kept;
    return kept;
}

/* ===== reading: conversion to f32 ===================================================== */

static float f16_to_f32(uint16_t h) {
    int exp = (h >> 10) & 31, man = h & 1023;
    float v = exp == 0    ? ldexpf((float)man, -24)
              : exp == 31 ? (man ? NAN : INFINITY)
                          : ldexpf((float)(man | 1024), exp - 25);
    return h & 0x8000 ? -v : v;
}

static float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

void rt_st_convert_run(const RtTensor *t, int64_t first, int64_t numel, float *dst) {
    if (t->dtype == RT_DT_F32) {
        memcpy(dst, (const char *)t->data + first * 4, (size_t)numel * sizeof(float));
        return;
    }
    const unsigned char *p = (const unsigned char *)t->data + first * 2;
    for (int64_t i = 0; i < numel; i++) {
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        dst[i] = t->dtype == RT_DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
}

static void convert(const RtTensor *t, int64_t numel, float *dst) {
    rt_st_convert_run(t, 0, numel, dst);
}

static int same_shape(const RtTensor *t, const int64_t *shape, int ndim) {
    if (t->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return 0;
    return 1;
}

int rt_st_read_f32(const RtSt *st, const char *name, const int64_t *shape, int ndim, float *dst, RtError *err) {
    const RtTensor *t = rt_st_find(st, name);
    if (!t)
        return rt_error_set(err, "%s: no tensor '%s'", st->path, name);
    char have[128], want[128];
    if (!same_shape(t, shape, ndim))
        return rt_error_set(err, "%s: tensor '%s': shape %s, expected %s", st->path, name,
                            rt_shape_text(have, sizeof have, t->shape, t->ndim),
                            rt_shape_text(want, sizeof want, shape, ndim));
    if (t->dtype != RT_DT_F32 && t->dtype != RT_DT_F16 && t->dtype != RT_DT_BF16)
        return rt_error_set(err, "%s: tensor '%s': dtype %s, expected F32, F16 or BF16", st->path, name,
                            rt_dtype_name(t->dtype));
    convert(t, t->nbytes / rt_dtype_size(t->dtype), dst);
    return 0;
}

/* ===== reading: finite values ========================================================= */

/* The index of the first value of t whose exponent bits are all ones (an infinity or a NaN),
 * or -1. F32, F16, BF16 and F64; other dtypes hold no such values. *bits gets that value. */
static int64_t first_nonfinite(const RtTensor *t, uint64_t *bits) {
    int size = rt_dtype_size(t->dtype);
    uint64_t mask = t->dtype == RT_DT_F32    ? 0x7f800000u
                    : t->dtype == RT_DT_F16  ? 0x7c00u
                    : t->dtype == RT_DT_BF16 ? 0x7f80u
                    : t->dtype == RT_DT_F64  ? 0x7ff0000000000000u
                                             : 0;
    const unsigned char *p = t->data;
    for (int64_t i = 0, n = mask ? t->nbytes / size : 0; i < n; i++) {
        uint64_t v = 0;
        memcpy(&v, p + i * size, (size_t)size); /* little-endian host: the low bytes */
        if ((v & mask) == mask) {
            *bits = v;
            return i;
        }
    }
    return -1;
}

int rt_st_check_finite(const RtSt *st, const char *name, RtError *err) {
    for (int i = 0; i < st->n; i++) {
        const RtTensor *t = &st->e[i].t;
        uint64_t bits, mant;
        int64_t k = name && strcmp(t->name, name) != 0 ? -1 : first_nonfinite(t, &bits);
        if (k < 0)
            continue;
        int size = rt_dtype_size(t->dtype);
        mant = bits & ((size == 8 ? 0xfffffffffffffu : size == 4 ? 0x7fffffu : t->dtype == RT_DT_F16 ? 0x3ffu : 0x7fu));
        int neg = (int)(bits >> (8 * size - 1)) & 1;
        return rt_error_set(err, "%s: tensor '%s': value %lld of %lld is %s", st->path, t->name, (long long)k,
                            (long long)(t->nbytes / size),
                            mant  ? "NaN"
                            : neg ? "-inf"
                                  : "+inf");
    }
    return 0;
}

/* ===== writing ======================================================================== */

static int check_tensor(const char *path, const RtTensor *ts, int i, RtError *err) {
    const RtTensor *t = &ts[i];
    if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
        return rt_error_set(err, "%s: tensor %d: missing or reserved name", path, i);
    if ((unsigned)t->dtype >= RT_DT_COUNT || t->ndim < 0 || t->ndim > RT_MAX_DIMS)
        return rt_error_set(err, "%s: tensor '%s': bad dtype %d or rank %d", path, t->name, (int)t->dtype, t->ndim);
    int64_t bytes = shape_bytes(t->shape, t->ndim, rt_dtype_size(t->dtype));
    if (bytes < 0 || (bytes > 0 && !t->data))
        return rt_error_set(err, "%s: tensor '%s': bad shape or no data", path, t->name);
    for (int j = 0; j < i; j++)
        if (strcmp(ts[j].name, t->name) == 0)
            return rt_error_set(err, "%s: tensor '%s' appears twice", path, t->name);
    return 0;
}

static json_object *entry_json(const RtTensor *t, int64_t begin, int64_t end) {
    json_object *e = json_object_new_object(), *shape = json_object_new_array(), *offs = json_object_new_array();
    for (int d = 0; d < t->ndim; d++)
        json_object_array_add(shape, json_object_new_int64(t->shape[d]));
    json_object_array_add(offs, json_object_new_int64(begin));
    json_object_array_add(offs, json_object_new_int64(end));
    json_object_object_add(e, "dtype", json_object_new_string(rt_dtype_name(t->dtype)));
    json_object_object_add(e, "shape", shape);
    json_object_object_add(e, "data_offsets", offs);
    return e;
}

/* The header object, tensors in the order given, laid out back to back. */
static json_object *header_json(const RtTensor *ts, int n, const RtMeta *meta, int n_meta) {
    json_object *root = json_object_new_object();
    if (n_meta > 0) {
        json_object *m = json_object_new_object();
        for (int i = 0; i < n_meta; i++)
            json_object_object_add(m, meta[i].key, json_object_new_string(meta[i].value ? meta[i].value : ""));
        json_object_object_add(root, "__metadata__", m);
    }
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = shape_bytes(ts[i].shape, ts[i].ndim, rt_dtype_size(ts[i].dtype));
        json_object_object_add(root, ts[i].name, entry_json(&ts[i], at, at + bytes));
        at += bytes;
    }
    return root;
}

static int write_body(RtWfile *w, const char *hdr, const RtTensor *ts, int n, RtError *err) {
    size_t len = strlen(hdr), padded = (len + 7) / 8 * 8;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    if (rt_wfile_write(w, lenbuf, 8, err) != 0 || rt_wfile_write(w, hdr, len, err) != 0 ||
        rt_wfile_write(w, "       ", padded - len, err) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        int64_t bytes = shape_bytes(ts[i].shape, ts[i].ndim, rt_dtype_size(ts[i].dtype));
        if (rt_wfile_write(w, ts[i].data, (size_t)bytes, err) != 0)
            return -1;
    }
    return 0;
}

int rt_st_write(const char *path, const RtTensor *tensors, int n_tensors, const RtMeta *meta, int n_meta, uint32_t *crc,
                int64_t *size, RtError *err) {
    for (int i = 0; i < n_tensors; i++)
        if (check_tensor(path, tensors, i, err) != 0)
            return -1;
    for (int i = 0; i < n_meta; i++)
        if (!meta[i].key)
            return rt_error_set(err, "%s: metadata entry %d has no key", path, i);
    json_object *root = header_json(tensors, n_tensors, meta, n_meta);
    const char *hdr = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    RtWfile w;
    int rc = -1;
    if (!hdr)
        rt_error_set(err, "%s: out of memory", path);
    else if (rt_wfile_open(&w, path, err) == 0) {
        if (write_body(&w, hdr, tensors, n_tensors, err) != 0)
            rt_wfile_abort(&w);
        else
            rc = rt_wfile_commit(&w, err);
    }
    if (rc == 0 && crc)
        *crc = w.crc;
    if (rc == 0 && size)
        *size = w.size;
    json_object_put(root);
    return rc;
}
