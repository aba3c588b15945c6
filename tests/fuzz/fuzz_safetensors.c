/*
 * fuzz_safetensors.c: fuzz target for the safetensors reader (runtime/safetensors.c).
 *
 * The input bytes are a safetensors file. rt_st_open must never crash, leak or hang, and a
 * refusal must come with a message naming the file. When it opens:
 *   - the mapping is the input, and the tensors, sorted by offset, tile the data buffer
 *     after the header exactly (so every tensor lies within the file);
 *   - every F32/F16/BF16 tensor reads with its own shape through rt_st_read_f32, to the
 *     values an independent conversion gives; a wrong shape or another dtype is refused;
 *   - every "__metadata__" entry of the header is found by rt_st_meta;
 *   - written back with rt_st_write and reopened, the file has the same tensors (names,
 *     dtypes, shapes, bytes) and metadata, and writing it once more gives the same bytes.
 *     (The format allows a tensor named "", which rt_st_write refuses on purpose: files
 *     with one skip the round trip.)
 */
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "runtime/axrt.h"

/* ===== independent decoding =========================================================== */

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* IEEE half to single by moving bits, not by arithmetic as the runtime does. */
static float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 31, man = h & 1023, bits;
  if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else if (exp) {
    bits = sign | (exp + 112) << 23 | man << 13;
  } else if (!man) {
    bits = sign;
  } else { /* subnormal: normalize the mantissa */
    int e = 113;
    while (!(man & 1024)) {
      man <<= 1;
      e--;
    }
    bits = sign | (uint32_t)e << 23 | (man & 1023) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static float expected_f32(const RtTensor *t, int64_t i) {
  const uint8_t *p = t->data;
  if (t->dtype == RT_DT_F32) {
    float f;
    memcpy(&f, p + 4 * i, sizeof f);
    return f;
  }
  uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
  if (t->dtype == RT_DT_F16) return f16_bits_to_f32(h);
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static int same_float(float a, float b) {
  return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* ===== checks on an open file ========================================================= */

static int64_t numel(const RtTensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d]; /* the reader checked for overflow */
  return n;
}

/* The mapping is the input and the tensors tile the data buffer after the header. */
static void check_layout(const RtSt *st, const uint8_t *data, size_t size) {
  int64_t mapped;
  const uint8_t *bytes = rt_st_bytes(st, &mapped);
  FUZZ_CHECK(mapped == (int64_t)size && memcmp(bytes, data, size) == 0,
             "mapping differs from the input");
  const uint8_t *at = bytes + 8 + le64(data), *end = bytes + size;
  for (int i = 0; i < rt_st_count(st); i++) {
    const RtTensor *t = rt_st_tensor(st, i);
    FUZZ_CHECK(t->ndim >= 0 && t->ndim <= RT_MAX_DIMS, "tensor '%s': rank %d", t->name, t->ndim);
    FUZZ_CHECK(t->nbytes == numel(t) * rt_dtype_size(t->dtype), "tensor '%s': %lld bytes", t->name,
               (long long)t->nbytes);
    FUZZ_CHECK((const uint8_t *)t->data == at && t->nbytes <= end - at,
               "tensor '%s' at file offset %lld (+%lld), expected at %lld of %zu", t->name,
               (long long)((const uint8_t *)t->data - bytes), (long long)t->nbytes,
               (long long)(at - bytes), size);
    FUZZ_CHECK(rt_st_find(st, t->name) != NULL, "tensor '%s' not found by name", t->name);
    at += t->nbytes;
  }
  FUZZ_CHECK(at == end, "%lld bytes after the last tensor", (long long)(end - at));
}

/* Reads one tensor as f32 with its own shape (and a wrong one), checking the values. */
static void check_read(const RtSt *st, const RtTensor *t) {
  RtError err = {{0}};
  int64_t n = numel(t), wrong[RT_MAX_DIMS + 1];
  float *dst = malloc((size_t)n * sizeof *dst + 1);
  FUZZ_CHECK(dst != NULL, "out of memory");
  int is_float = t->dtype == RT_DT_F32 || t->dtype == RT_DT_F16 || t->dtype == RT_DT_BF16;
  int rc = rt_st_read_f32(st, t->name, t->shape, t->ndim, dst, &err);
  if (is_float) {
    FUZZ_CHECK(rc == 0, "tensor '%s' does not read with its own shape: %s", t->name, err.msg);
    for (int64_t i = 0; i < n; i++)
      FUZZ_CHECK(same_float(dst[i], expected_f32(t, i)),
                 "tensor '%s' element %lld: %a, expected %a", t->name, (long long)i, dst[i],
                 expected_f32(t, i));
  } else {
    FUZZ_CHECK(rc == -1 && err.msg[0], "tensor '%s' of dtype %s read as f32", t->name,
               rt_dtype_name(t->dtype));
  }
  memcpy(wrong, t->shape, sizeof t->shape);
  wrong[t->ndim] = 1;
  err.msg[0] = '\0';
  FUZZ_CHECK(rt_st_read_f32(st, t->name, wrong, t->ndim + 1, dst, &err) == -1 && err.msg[0],
             "tensor '%s' read with one dimension too many", t->name);
  free(dst);
}

/* The header's "__metadata__" object, parsed again here (the reader cannot list its keys);
 * NULL if there is none. The caller puts the returned root. */
static json_object *header_meta(const uint8_t *data, json_object **root) {
  json_tokener *tok = json_tokener_new();
  FUZZ_CHECK(tok != NULL, "out of memory");
  *root = json_tokener_parse_ex(tok, (const char *)data + 8, (int)le64(data));
  json_tokener_free(tok);
  json_object *meta = NULL;
  FUZZ_CHECK(*root != NULL, "the reader accepted a header that json-c does not parse");
  json_object_object_get_ex(*root, "__metadata__", &meta);
  return meta;
}

/* Every metadata entry, as rt_st_meta gives it, into a malloc'd array (*n entries). */
static RtMeta *collect_meta(const RtSt *st, json_object *meta, int *n) {
  *n = 0;
  RtMeta *out = calloc((size_t)(meta ? json_object_object_length(meta) : 0) + 1, sizeof *out);
  FUZZ_CHECK(out != NULL, "out of memory");
  if (!meta) return out;
  json_object_object_foreach(meta, key, val) {
    const char *v = rt_st_meta(st, key);
    FUZZ_CHECK(v != NULL && strcmp(v, json_object_get_string(val)) == 0,
               "metadata '%s': '%s', header says '%s'", key, v ? v : "(absent)",
               json_object_get_string(val));
    out[(*n)++] = (RtMeta){key, v};
  }
  return out;
}

/* ===== the round trip ================================================================= */

static void check_same(const RtSt *a, const RtSt *b, const RtMeta *meta, int n_meta) {
  FUZZ_CHECK(rt_st_count(a) == rt_st_count(b), "%d tensors, %d after the round trip",
             rt_st_count(a), rt_st_count(b));
  for (int i = 0; i < rt_st_count(a); i++) {
    const RtTensor *x = rt_st_tensor(a, i), *y = rt_st_find(b, x->name);
    FUZZ_CHECK(y != NULL, "tensor '%s' lost in the round trip", x->name);
    FUZZ_CHECK(x->dtype == y->dtype && x->ndim == y->ndim &&
                   memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape) == 0 &&
                   x->nbytes == y->nbytes && memcmp(x->data, y->data, (size_t)x->nbytes) == 0,
               "tensor '%s' changed in the round trip", x->name);
  }
  for (int i = 0; i < n_meta; i++) {
    const char *v = rt_st_meta(b, meta[i].key);
    FUZZ_CHECK(v && strcmp(v, meta[i].value) == 0, "metadata '%s' changed in the round trip",
               meta[i].key);
  }
}

/* Writes the tensors of `st` (in offset order) and `meta` to a new file; returns its path. */
static char *write_back(const RtSt *st, const RtMeta *meta, int n_meta, uint32_t *crc,
                        int64_t *size) {
  int n = rt_st_count(st);
  RtTensor *ts = malloc((size_t)n * sizeof *ts + 1);
  FUZZ_CHECK(ts != NULL, "out of memory");
  for (int i = 0; i < n; i++) ts[i] = *rt_st_tensor(st, i);
  char *path = fuzz_temp_file(NULL, 0);
  RtError err = {{0}};
  FUZZ_CHECK(rt_st_write(path, ts, n, meta, n_meta, crc, size, &err) == 0,
             "what opened does not write back: %s", err.msg);
  free(ts);
  return path;
}

static void check_round_trip(const RtSt *st, const RtMeta *meta, int n_meta) {
  for (int i = 0; i < rt_st_count(st); i++)
    if (!rt_st_tensor(st, i)->name[0]) return;
  uint32_t crc, crc2;
  int64_t size, size2;
  char *path = write_back(st, meta, n_meta, &crc, &size);
  RtSt *again;
  RtError err = {{0}};
  FUZZ_CHECK(rt_st_open(&again, path, &err) == 0, "what rt_st_write wrote does not open: %s",
             err.msg);
  check_same(st, again, meta, n_meta);
  char *path2 = write_back(again, meta, n_meta, &crc2, &size2);
  FUZZ_CHECK(crc == crc2 && size == size2, "writing the reopened file gives other bytes");
  rt_st_close(again);
  unlink(path);
  unlink(path2);
  free(path);
  free(path2);
}

/* ===== the target ===================================================================== */

static void check_open(const RtSt *st, const uint8_t *data, size_t size) {
  check_layout(st, data, size);
  for (int i = 0; i < rt_st_count(st); i++) check_read(st, rt_st_tensor(st, i));
  json_object *root;
  int n_meta;
  RtMeta *meta = collect_meta(st, header_meta(data, &root), &n_meta);
  check_round_trip(st, meta, n_meta);
  free(meta);
  json_object_put(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = fuzz_temp_file(data, size);
  RtSt *st = NULL;
  RtError err = {{0}};
  if (rt_st_open(&st, path, &err) == 0) {
    check_open(st, data, size);
    rt_st_close(st);
  } else {
    FUZZ_CHECK(st == NULL && strstr(err.msg, path) == err.msg, "a refusal must name the file: '%s'",
               err.msg);
  }
  unlink(path);
  free(path);
  return 0;
}
