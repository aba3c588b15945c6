/*
 * test_safetensors.c: round trips through rt_st_write/rt_st_open, f16/bf16 conversion, shape
 * errors, one hand-made file per class of malformed header, and random damage to a valid
 * file, which must always give an error and never a crash (run under ASan in CI).
 */
#include <stdlib.h>

#include "rt_test.h"

/* ===== fixtures ======================================================================= */

/* A file with the given header text and `n` data bytes (all 0x11). */
static const char *raw_file(char *path, size_t cap, const char *name, const char *header,
                            size_t n) {
  size_t hlen = strlen(header);
  unsigned char *buf = malloc(8 + hlen + n + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(buf + 8, header, hlen);
  memset(buf + 8 + hlen, 0x11, n);
  rt_test_write(rt_test_path(path, cap, name), buf, 8 + hlen + n);
  free(buf);
  return path;
}

static const float W[6] = {1, 2, 3, 4, 5, 6};
static const uint16_t H[5] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001}; /* 1 -2 .5 65504 2^-24 */
static const uint16_t BF[2] = {0x3F80, 0xC040};                        /* 1 -3 */
static const int32_t I[2] = {7, 8};
static const float S = 42;

/* "model.safetensors": five tensors of several dtypes and two metadata entries. */
static const char *good_file(char *path, size_t cap, uint32_t *crc, int64_t *size) {
  RtError err;
  RtTensor t[] = {
      {"model/decoder/w", RT_DT_F32, 2, {2, 3}, W, 0},
      {"half", RT_DT_F16, 1, {5}, H, 0},
      {"brain", RT_DT_BF16, 2, {1, 2}, BF, 0},
      {"ints", RT_DT_I32, 1, {2}, I, 0},
      {"scalar", RT_DT_F32, 0, {0}, &S, 0},
      {"empty", RT_DT_F32, 2, {0, 4}, NULL, 0},
  };
  RtMeta meta[] = {{"step", "20"}, {"note", "a \"quoted\" value"}};
  CHECK_OK(
      rt_st_write(rt_test_path(path, cap, "model.safetensors"), t, 6, meta, 2, crc, size, &err));
  return path;
}

/* ===== an interpreter dump as weights ================================================= */

static void test_dump_as_weights(void) {
  RtError err;
  RtSt *st;
  char path[512];
  float loss[2] = {5.5f, 5.2f}, g[6] = {0}, b[3] = {7, 8, 9};
  RtTensor dump[] = {
      {"loss", RT_DT_F32, 1, {2}, loss, 0},        {"grad:model/w", RT_DT_F32, 2, {2, 3}, g, 0},
      {"new:model/w", RT_DT_F32, 2, {2, 3}, W, 0}, {"grad:model/b", RT_DT_F32, 1, {3}, g, 0},
      {"new:model/b", RT_DT_F32, 1, {3}, b, 0},
  };
  CHECK_OK(rt_st_write(rt_test_path(path, sizeof path, "dump.safetensors"), dump, 5, NULL, 0, NULL,
                       NULL, &err));
  CHECK_OK(rt_st_open(&st, path, &err));
  if (!st) return;
  CHECK_INT(rt_st_dump_as_weights(st), 2);
  CHECK_INT(rt_st_count(st), 2);
  CHECK_INT(rt_st_find(st, "loss") == NULL && rt_st_find(st, "new:model/w") == NULL, 1);
  float x[6];
  CHECK_OK(rt_st_read_f32(st, "model/w", (int64_t[]){2, 3}, 2, x, &err));
  CHECK_INT(memcmp(x, W, sizeof W), 0);
  CHECK_OK(rt_st_read_f32(st, "model/b", (int64_t[]){3}, 1, x, &err));
  CHECK_NEAR(x[2], 9, 0);
  rt_st_close(st);
  /* a weights file (no ':' in its names) is left as it is */
  CHECK_OK(rt_st_open(&st, good_file(path, sizeof path, NULL, NULL), &err));
  if (!st) return;
  CHECK_INT(rt_st_dump_as_weights(st), 0);
  CHECK_INT(rt_st_count(st), 6);
  rt_st_close(st);
}

/* ===== round trips ==================================================================== */

static void test_round_trip(void) {
  RtError err;
  RtSt *st;
  char path[512];
  uint32_t crc = 0;
  int64_t size = 0;
  CHECK_OK(rt_st_open(&st, good_file(path, sizeof path, &crc, &size), &err));
  if (!st) return;
  CHECK_INT(rt_st_count(st), 6);
  const RtTensor *w = rt_st_find(st, "model/decoder/w");
  CHECK_INT(w != NULL, 1);
  if (w) {
    CHECK_INT(w->dtype, RT_DT_F32);
    CHECK_INT(w->ndim, 2);
    CHECK_INT(w->shape[1], 3);
    CHECK_INT(w->nbytes, 24);
  }
  CHECK_INT(rt_st_find(st, "nope") == NULL, 1);
  CHECK_INT(strcmp(rt_st_meta(st, "note"), "a \"quoted\" value"), 0);
  CHECK_INT(rt_st_meta(st, "absent") == NULL, 1);
  float x[6];
  CHECK_OK(rt_st_read_f32(st, "model/decoder/w", (int64_t[]){2, 3}, 2, x, &err));
  CHECK_INT(memcmp(x, W, sizeof W), 0);
  CHECK_OK(rt_st_read_f32(st, "scalar", NULL, 0, x, &err));
  CHECK_NEAR(x[0], 42, 0);
  CHECK_OK(rt_st_read_f32(st, "empty", (int64_t[]){0, 4}, 2, x, &err));
  int64_t mapped;
  const void *bytes = rt_st_bytes(st, &mapped);
  CHECK_INT(mapped, size);
  CHECK_INT(rt_crc32(0, bytes, (size_t)mapped), crc);
  rt_st_close(st);
}

static void test_half_precision(void) {
  RtError err;
  RtSt *st;
  char path[512];
  CHECK_OK(rt_st_open(&st, good_file(path, sizeof path, NULL, NULL), &err));
  if (!st) return;
  float h[5], b[2];
  CHECK_OK(rt_st_read_f32(st, "half", (int64_t[]){5}, 1, h, &err));
  CHECK_NEAR(h[0], 1, 0);
  CHECK_NEAR(h[1], -2, 0);
  CHECK_NEAR(h[2], 0.5, 0);
  CHECK_NEAR(h[3], 65504, 0);
  CHECK_NEAR(h[4], 5.9604644775390625e-8, 0);
  CHECK_OK(rt_st_read_f32(st, "brain", (int64_t[]){1, 2}, 2, b, &err));
  CHECK_NEAR(b[0], 1, 0);
  CHECK_NEAR(b[1], -3, 0);
  rt_st_close(st);
}

static void test_read_errors(void) {
  RtError err;
  RtSt *st;
  char path[512];
  CHECK_OK(rt_st_open(&st, good_file(path, sizeof path, NULL, NULL), &err));
  if (!st) return;
  float x[16];
  CHECK_FAIL(rt_st_read_f32(st, "model/decoder/w", (int64_t[]){4, 4}, 2, x, &err),
             "model.safetensors: tensor 'model/decoder/w': shape [2,3], expected [4,4]");
  CHECK_FAIL(rt_st_read_f32(st, "model/decoder/w", (int64_t[]){6}, 1, x, &err),
             "shape [2,3], expected [6]");
  CHECK_FAIL(rt_st_read_f32(st, "model/encoder/w", (int64_t[]){6}, 1, x, &err),
             "no tensor 'model/encoder/w'");
  CHECK_FAIL(rt_st_read_f32(st, "ints", (int64_t[]){2}, 1, x, &err), "dtype I32, expected F32");
  rt_st_close(st);
}

static void test_write_errors(void) {
  RtError err;
  char path[512];
  rt_test_path(path, sizeof path, "bad.safetensors");
  RtTensor dup[] = {{"a", RT_DT_F32, 1, {1}, &S, 0}, {"a", RT_DT_F32, 1, {1}, &S, 0}};
  CHECK_FAIL(rt_st_write(path, dup, 2, NULL, 0, NULL, NULL, &err), "tensor 'a' appears twice");
  RtTensor noname[] = {{"", RT_DT_F32, 1, {1}, &S, 0}};
  CHECK_FAIL(rt_st_write(path, noname, 1, NULL, 0, NULL, NULL, &err), "missing or reserved name");
  RtTensor nodata[] = {{"x", RT_DT_F32, 1, {3}, NULL, 0}};
  CHECK_FAIL(rt_st_write(path, nodata, 1, NULL, 0, NULL, NULL, &err),
             "tensor 'x': bad shape or no data");
  CHECK_INT(rt_test_exists(path), 0);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK_INT(rt_test_exists(tmp), 0);
  RtTensor one[] = {{"x", RT_DT_F32, 1, {1}, &S, 0}};
  CHECK_FAIL(rt_st_write("/nonexistent-dir/x.safetensors", one, 1, NULL, 0, NULL, NULL, &err),
             "cannot create");
}

/* ===== malformed files ================================================================ */

typedef struct BadCase {
  const char *header;
  size_t data;
  const char *message;
} BadCase;

static void test_bad_headers(void) {
  static const BadCase cases[] = {
      {"{\"a\": ", 0, "JSON header is not one valid object"},
      {"[1, 2]", 0, "JSON header is not one valid object"},
      {"{} x", 0, "JSON header is not one valid object"},
      {"{\"a\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
       "tensor 'a': unknown dtype 'F17'"},
      {"{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
       "\"dtype\" missing or not a string"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"dtype\" missing"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
       "shape[0] is not a non-negative integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0] is not"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4,
       "\"shape\" missing or not an array"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
       "9 dimensions"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
       "\"data_offsets\" must be [begin, end]"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
       "data_offsets [4, 0] outside"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
       "data_offsets [0, 8] outside the 4-byte"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
       "F32 [3] needs 12 bytes, data_offsets [0, 8] hold 8"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}", 8,
       "overflows 64-bit sizes"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       12, "tensors 'a' and 'b' overlap at data offset 4"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
       "4 unused bytes before tensor 'a'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9,
       "5 bytes after the last tensor"},
      {"{\"a\":7}", 0, "tensor 'a': expected an object"},
      {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ 'k': expected a string"},
      {"{\"__metadata__\":[]}", 0, "\"__metadata__\" must be an object"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4,
       "data_offsets"},
      /* a name with an escaped NUL would be read as its prefix */
      {"{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       "bad.safetensors: JSON header: the string \"a\\u0000b\" holds a NUL (\\u0000); a tensor "
       "name "
       "or metadata cannot contain one"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
       "\"a\\u0000\\\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
       2, "the string \"a\\u0000\\\"x\" holds a NUL"},
      {"{\"__metadata__\":{\"k\":\"v\\u0000w\"}}", 0, "the string \"v\\u0000w\" holds a NUL"},
  };
  RtError err;
  RtSt *st;
  char path[512];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    raw_file(path, sizeof path, "bad.safetensors", cases[i].header, cases[i].data);
    CHECK_FAIL(rt_st_open(&st, path, &err), cases[i].message);
    CHECK_INT(st == NULL, 1);
  }
  raw_file(path, sizeof path, "ok.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}   ", 4);
  CHECK_OK(rt_st_open(&st, path, &err));
  rt_st_close(st);
  /* an escaped backslash before "u0000" is no NUL */
  raw_file(path, sizeof path, "ok.safetensors",
           "{\"a\\\\u0000\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
  CHECK_OK(rt_st_open(&st, path, &err));
  CHECK_INT(st && rt_st_find(st, "a\\u0000") != NULL, 1);
  rt_st_close(st);
}

/* Every float dtype: the first NaN or infinity is named with its index. */
static void test_check_finite(void) {
  static const struct {
    RtDtype dt;
    int size;
    uint64_t ok, bad;
    const char *what;
  } cases[] = {
      {RT_DT_F32, 4, 0x3f800000u, 0x7fc00000u, "NaN"},
      {RT_DT_F32, 4, 0xff7fffffu, 0xff800000u, "-inf"},
      {RT_DT_F16, 2, 0x7bffu, 0x7c00u, "+inf"},
      {RT_DT_F16, 2, 0x0001u, 0xfe01u, "NaN"},
      {RT_DT_BF16, 2, 0x3f80u, 0x7f80u, "+inf"},
      {RT_DT_BF16, 2, 0xff7fu, 0x7fc1u, "NaN"},
      {RT_DT_F64, 8, 0x3ff0000000000000u, 0xfff0000000000000u, "-inf"},
      {RT_DT_F64, 8, 0x7fefffffffffffffu, 0x7ff0000000000001u, "NaN"},
  };
  RtError err;
  char path[512], want[128];
  rt_test_path(path, sizeof path, "finite.safetensors");
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    unsigned char data[4 * 8];
    for (int i = 0; i < 4; i++)
      memcpy(data + i * cases[c].size, &cases[c].ok, (size_t)cases[c].size);
    uint8_t bytes[8] = {1, 2, 3, 4};
    RtTensor ts[2] = {{"i", RT_DT_U8, 1, {4}, bytes, 0}, {"x", cases[c].dt, 1, {4}, data, 0}};
    RtSt *st = NULL;
    CHECK_OK(rt_st_write(path, ts, 2, NULL, 0, NULL, NULL, &err));
    CHECK_OK(rt_st_open(&st, path, &err));
    CHECK_OK(rt_st_check_finite(st, NULL, &err));
    rt_st_close(st);
    memcpy(data + 2 * cases[c].size, &cases[c].bad, (size_t)cases[c].size);
    CHECK_OK(rt_st_write(path, ts, 2, NULL, 0, NULL, NULL, &err));
    CHECK_OK(rt_st_open(&st, path, &err));
    snprintf(want, sizeof want, "finite.safetensors: tensor 'x': value 2 of 4 is %s",
             cases[c].what);
    CHECK_FAIL(rt_st_check_finite(st, NULL, &err), want);
    CHECK_FAIL(rt_st_check_finite(st, "x", &err), want);
    CHECK_OK(rt_st_check_finite(st, "i", &err));
    rt_st_close(st);
  }
}

static void test_bad_lengths(void) {
  RtError err;
  RtSt *st;
  char path[512];
  rt_test_write(rt_test_path(path, sizeof path, "tiny.safetensors"), "\x02\0\0", 3);
  CHECK_FAIL(rt_st_open(&st, path, &err),
             "tiny.safetensors: 3 bytes, too short for the 8-byte header length");
  rt_test_write(path, "\xff\0\0\0\0\0\0\0{}", 10);
  CHECK_FAIL(rt_st_open(&st, path, &err), "header length 255, but the file has 2 bytes after it");
  rt_test_write(path, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
  CHECK_FAIL(rt_st_open(&st, path, &err), "header length 18446744073709551615");
  rt_test_write(path, "\x04\0\0\0\0\0\0\0{}\0 ", 12);
  CHECK_FAIL(rt_st_open(&st, path, &err), "NUL byte");
  CHECK_FAIL(rt_st_open(&st, rt_test_path(path, sizeof path, "absent"), &err), "cannot open");
}

/* A valid file cut short anywhere must be refused with a message. */
static void test_truncated(void) {
  RtError err;
  RtSt *st;
  char path[512], cut[512];
  size_t n;
  unsigned char *buf = rt_test_read(good_file(path, sizeof path, NULL, NULL), &n);
  rt_test_path(cut, sizeof cut, "cut.safetensors");
  for (size_t len = 0; len < n; len++) {
    rt_test_write(cut, buf, len);
    CHECK_INT(rt_st_open(&st, cut, &err), -1);
    CHECK_INT(err.msg[0] != '\0', 1);
  }
  free(buf);
}

/* Random byte damage: opening either fails with a message or yields a file whose
 * tensors can all be read; ASan/UBSan check that nothing reads out of bounds. */
static void test_random_damage(void) {
  RtError err;
  RtSt *st;
  char path[512], bad[512];
  size_t n;
  unsigned char *buf = rt_test_read(good_file(path, sizeof path, NULL, NULL), &n);
  unsigned char *copy = malloc(n);
  rt_test_path(bad, sizeof bad, "damaged.safetensors");
  int opened = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(copy, buf, n);
    for (uint32_t k = 0; k < 1 + (uint32_t)it % 4; k++) {
      uint64_t r = rt_rng_u64(1, "damage", it, k);
      size_t at = (size_t)(r % (it % 2 ? n : 8 + 200)); /* half of them hit the header */
      copy[at < n ? at : n - 1] = (unsigned char)(r >> 32);
    }
    rt_test_write(bad, copy, n);
    err.msg[0] = '\0';
    if (rt_st_open(&st, bad, &err) != 0) {
      CHECK_INT(err.msg[0] != '\0', 1);
      continue;
    }
    opened++;
    float x[64];
    for (int i = 0; i < rt_st_count(st); i++) {
      const RtTensor *t = rt_st_tensor(st, i);
      if (t->nbytes <= (int64_t)sizeof x) rt_st_read_f32(st, t->name, t->shape, t->ndim, x, &err);
    }
    rt_st_close(st);
  }
  CHECK_INT(opened > 0, 1); /* damage in the data buffer is invisible to the format */
  free(copy);
  free(buf);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"round trip", test_round_trip},
      {"half precision", test_half_precision},
      {"read errors", test_read_errors},
      {"write errors", test_write_errors},
      {"bad headers", test_bad_headers},
      {"non-finite values found", test_check_finite},
      {"bad lengths", test_bad_lengths},
      {"truncated", test_truncated},
      {"random damage", test_random_damage},
      {"dump as weights", test_dump_as_weights},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_safetensors", cases);
}
