/*
 * fuzz_tokens.c: fuzz target for token data files (runtime/data.c).
 *
 * The input bytes are a data file: plain text (a token per byte) or an llm.c token file
 * (256 x int32 header: magic 20240520, version 1 = uint16 or 2 = uint32 tokens, count).
 * rt_data_open runs with several vocabulary sizes and must never crash, leak or hang. The
 * checks hold whichever way data.c tells the formats apart, including refusing files that
 * look like broken token files instead of reading them as text:
 *   - a refusal has a message naming the file;
 *   - an opened file's format agrees with its bytes: text has a token per byte; a token
 *     file has the magic, the version of its width, the count of its header and exactly
 *     that many tokens after the header;
 *   - a valid token file whose tokens are all below the vocabulary, and printable ASCII
 *     text with a vocabulary of at least 256, always open;
 *   - batches (several B x T, wrapping around, and rank 1 of 2) succeed exactly when the
 *     file holds world*B*T+1 tokens, and hold the tokens at the positions docs/runtime.md
 *     gives, all below the vocabulary; seeks accept exactly 0..count.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "runtime/axrt.h"

#define HEADER_BYTES (RT_DATA_HEADER_INTS * 4)

static const int VOCABS[] = {1, 2, 256, 50257, 65536, 65537, 1 << 24, 0x7fffffff};
static const struct { int B, T, world; } BATCHES[] = {{1, 1, 1}, {2, 3, 1}, {1, 7, 1}, {2, 2, 2}};

/* The input as the file it is. */
typedef struct Input {
  const uint8_t *data;
  size_t size;
  const char *path;
} Input;

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ===== what the bytes are ============================================================= */

/* Token width (2 or 4) if the input is a complete, valid llm.c token file, else 0. */
static int valid_token_file(const Input *in) {
  if (in->size < HEADER_BYTES || le32(in->data) != RT_DATA_MAGIC) return 0;
  uint32_t version = le32(in->data + 4), count = le32(in->data + 8);
  int width = version == 1 ? 2 : version == 2 ? 4 : 0;
  if (!width || count > 0x7fffffff || count < 2) return 0;
  return in->size == HEADER_BYTES + (uint64_t)count * (uint64_t)width ? width : 0;
}

static int printable_text(const Input *in) {
  for (size_t i = 0; i < in->size; i++)
    if (!isprint(in->data[i]) && !isspace(in->data[i])) return 0;
  return in->size >= 2;
}

/* The largest token of a valid token file of the given width. */
static uint32_t max_token(const Input *in, int width) {
  uint32_t max = 0;
  for (size_t at = HEADER_BYTES; at < in->size; at += (size_t)width) {
    uint32_t t =
        width == 2 ? (uint32_t)(in->data[at] | in->data[at + 1] << 8) : le32(in->data + at);
    if (t > max) max = t;
  }
  return max;
}

/* Must rt_data_open(vocab) succeed, whichever way data.c reads ambiguous files? */
static int must_open(const Input *in, int vocab) {
  int width = valid_token_file(in);
  if (width) return max_token(in, width) < (uint32_t)vocab;
  return printable_text(in) && vocab >= 256;
}

/* ===== checks on an open file ========================================================= */

/* The format rt_data_open chose must agree with the bytes. */
static void check_format(const RtData *d, const Input *in) {
  int64_t n = rt_data_num_tokens(d);
  RtDataFormat f = rt_data_format(d);
  FUZZ_CHECK(n >= 2, "opened with %lld tokens", (long long)n);
  if (f == RT_DATA_BYTES) {
    FUZZ_CHECK(n == (int64_t)in->size, "text of %zu bytes opened with %lld tokens", in->size,
               (long long)n);
    return;
  }
  int width = f == RT_DATA_TOKENS_U16 ? 2 : 4;
  FUZZ_CHECK(f == RT_DATA_TOKENS_U16 || f == RT_DATA_TOKENS_U32, "format %d", (int)f);
  FUZZ_CHECK(valid_token_file(in) == width && le32(in->data + 8) == (uint64_t)n,
             "opened as a %d-byte token file with %lld tokens, but the file is not one", width,
             (long long)n);
}

static uint32_t token_at(const Input *in, RtDataFormat f, int64_t i) {
  const uint8_t *p = in->data + (f == RT_DATA_BYTES ? 0 : HEADER_BYTES);
  switch (f) {
  case RT_DATA_BYTES: return p[i];
  case RT_DATA_TOKENS_U16: return (uint32_t)(p[2 * i] | p[2 * i + 1] << 8);
  case RT_DATA_TOKENS_U32: return le32(p + 4 * i);
  }
  return 0;
}

/* Window b of rank `rank` starts at pos + (rank*B + b)*T: inputs its first T tokens,
 * targets its last T. */
static void check_windows(const RtData *d, const Input *in, int64_t pos, int rank, int B, int T,
                          const int32_t *x, const int32_t *y, int vocab) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int64_t at = pos + ((int64_t)rank * B + b) * T + t, k = (int64_t)b * T + t;
      uint32_t want_x = token_at(in, rt_data_format(d), at),
               want_y = token_at(in, rt_data_format(d), at + 1);
      FUZZ_CHECK(x[k] >= 0 && x[k] < vocab && y[k] >= 0 && y[k] < vocab,
                 "batch token outside the vocabulary of %d: %d, %d", vocab, (int)x[k], (int)y[k]);
      FUZZ_CHECK((uint32_t)x[k] == want_x && (uint32_t)y[k] == want_y,
                 "window %d (of %d x %d at %lld, rank %d) position %d: %d -> %d, file has %u -> %u",
                 b, B, T, (long long)pos, rank, t, (int)x[k], (int)y[k], want_x, want_y);
    }
}

/* Three batches from the start, so that small files wrap around. */
static void check_batches(RtData *d, const Input *in, int B, int T, int world, int vocab) {
  RtError err = {{0}};
  int64_t n = rt_data_num_tokens(d), step = (int64_t)world * B * T, pos = 0;
  int rank = world - 1;
  int32_t x[16], y[16];
  FUZZ_CHECK(rt_data_seek(d, 0, &err) == 0 && rt_data_set_rank(d, rank, world, &err) == 0, "%s",
             err.msg);
  for (int i = 0; i < 3; i++) {
    int rc = rt_data_next_batch(d, B, T, x, y, &err);
    FUZZ_CHECK(rc == (step + 1 <= n ? 0 : -1), "batch %d x %d x %d of %lld tokens: %d, '%s'", world,
               B, T, (long long)n, rc, err.msg);
    if (rc != 0) {
      FUZZ_CHECK(strstr(err.msg, in->path) != NULL, "the message must name the file: '%s'",
                 err.msg);
      break;
    }
    if (pos + step + 1 > n) pos = 0;
    check_windows(d, in, pos, rank, B, T, x, y, vocab);
    pos += step;
    FUZZ_CHECK(rt_data_position(d) == pos, "position %lld, expected %lld",
               (long long)rt_data_position(d), (long long)pos);
  }
}

static void check_seek(RtData *d) {
  RtError err = {{0}};
  int64_t n = rt_data_num_tokens(d);
  FUZZ_CHECK(rt_data_seek(d, n, &err) == 0 && rt_data_position(d) == n, "seek to the end: %s",
             err.msg);
  FUZZ_CHECK(rt_data_seek(d, n + 1, &err) == -1 && rt_data_seek(d, -1, &err) == -1,
             "seek outside 0..%lld", (long long)n);
}

/* ===== the target ===================================================================== */

static void check_vocab(const Input *in, int vocab) {
  RtData *d = NULL;
  RtError err = {{0}};
  if (rt_data_open(&d, in->path, vocab, &err) != 0) {
    FUZZ_CHECK(d == NULL && strstr(err.msg, in->path), "a refusal must name the file: '%s'",
               err.msg);
    FUZZ_CHECK(!must_open(in, vocab), "refused with vocabulary %d: %s", vocab, err.msg);
    return;
  }
  check_format(d, in);
  for (size_t i = 0; i < sizeof BATCHES / sizeof *BATCHES; i++)
    check_batches(d, in, BATCHES[i].B, BATCHES[i].T, BATCHES[i].world, vocab);
  check_seek(d);
  rt_data_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = fuzz_temp_file(data, size);
  Input in = {data, size, path};
  for (size_t i = 0; i < sizeof VOCABS / sizeof *VOCABS; i++) check_vocab(&in, VOCABS[i]);
  RtData *d = NULL;
  RtError err = {{0}};
  FUZZ_CHECK(rt_data_open(&d, path, 0, &err) == -1 && d == NULL && strstr(err.msg, path),
             "vocabulary 0 must be refused: '%s'", err.msg);
  unlink(path);
  free(path);
  return 0;
}
