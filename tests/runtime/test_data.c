/*
 * test_data.c: token files (text and llm.c formats), their validation errors, batching,
 * wrap-around, the rank split and saving/restoring the position.
 */
#include <stdlib.h>
#include <sys/stat.h>

#include "rt_test.h"

/* ===== fixtures ======================================================================= */

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* An llm.c token file: header (magic, version, count) then `n` tokens of `width` bytes.
 * `declared` is the count written into the header. */
static void write_tokens(const char *path, int32_t magic, int32_t version, int32_t declared,
                         const uint32_t *tokens, int n, int width) {
  size_t size = 1024 + (size_t)n * (size_t)width;
  unsigned char *buf = calloc(1, size);
  put32(buf, (uint32_t)magic);
  put32(buf + 4, (uint32_t)version);
  put32(buf + 8, (uint32_t)declared);
  for (int i = 0; i < n; i++)
    for (int b = 0; b < width; b++)
      buf[1024 + (size_t)i * width + b] = (unsigned char)(tokens[i] >> (8 * b));
  rt_test_write(path, buf, size);
  free(buf);
}

static uint32_t tok(int i) { return (uint32_t)(i * 7 % 1000); }

/* 100 tokens tok(0..99), uint16, in "u16.bin". */
static const char *u16_file(char *buf, size_t cap) {
  uint32_t t[100];
  for (int i = 0; i < 100; i++) t[i] = tok(i);
  rt_test_path(buf, cap, "u16.bin");
  write_tokens(buf, 20240520, 1, 100, t, 100, 2);
  return buf;
}

/* ===== formats ======================================================================== */

static void test_text_file(void) {
  RtError err;
  RtData *d;
  char path[512];
  const char *text = "hello, world";
  rt_test_write(rt_test_path(path, sizeof path, "text.txt"), text, strlen(text));
  CHECK_OK(rt_data_open(&d, path, 256, &err));
  if (!d) return;
  CHECK_INT(rt_data_format(d), RT_DATA_BYTES);
  CHECK_INT(rt_data_num_tokens(d), 12);
  int32_t in[6], tg[6];
  CHECK_OK(rt_data_next_batch(d, 2, 3, in, tg, &err));
  const char *want_in = "hello,", *want_tg = "ello, "; /* windows "hell" and "lo, " */
  for (int i = 0; i < 6; i++) {
    CHECK_INT(in[i], want_in[i]);
    CHECK_INT(tg[i], want_tg[i]);
  }
  CHECK_INT(rt_data_position(d), 6);
  rt_data_close(d);
}

static void test_u16_file(void) {
  RtError err;
  RtData *d;
  char path[512];
  CHECK_OK(rt_data_open(&d, u16_file(path, sizeof path), 1000, &err));
  if (!d) return;
  CHECK_INT(rt_data_format(d), RT_DATA_TOKENS_U16);
  CHECK_INT(rt_data_num_tokens(d), 100);
  int32_t in[20], tg[20];
  CHECK_OK(rt_data_next_batch(d, 2, 10, in, tg, &err));
  for (int i = 0; i < 20; i++) {
    CHECK_INT(in[i], tok(i));
    CHECK_INT(tg[i], tok(i + 1));
  }
  rt_data_close(d);
}

static void test_u32_file(void) {
  RtError err;
  RtData *d;
  char path[512];
  uint32_t t[5] = {70000, 1, 128255, 3, 4};
  write_tokens(rt_test_path(path, sizeof path, "u32.bin"), 20240520, 2, 5, t, 5, 4);
  CHECK_OK(rt_data_open(&d, path, 128256, &err));
  if (!d) return;
  CHECK_INT(rt_data_format(d), RT_DATA_TOKENS_U32);
  int32_t in[4], tg[4];
  CHECK_OK(rt_data_next_batch(d, 1, 4, in, tg, &err));
  CHECK_INT(in[0], 70000);
  CHECK_INT(tg[1], 128255);
  rt_data_close(d);
}

/* A file that starts like a token file without its magic number is refused, not read as
 * text: a near-miss magic, a byte-swapped one, a header whose count matches the file size, a
 * zero-filled header tail. Text of any length, NULs and all outside a header shape, is text. */
static void test_bad_magic_refused(void) {
  RtError err;
  RtData *d;
  char path[512];
  uint32_t t[300];
  for (int i = 0; i < 300; i++) t[i] = (uint32_t)(i % 200 + 1);
  rt_test_path(path, sizeof path, "magic.bin");
  write_tokens(path, 20240521, 1, 4, t, 4, 2); /* zero header tail */
  CHECK_FAIL(rt_data_open(&d, path, 50257, &err), "magic number is 20240521, expected 20240520");
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "refusing to read it as plain text");
  write_tokens(path, 0x28d13401, 2, 4, t, 4, 4); /* 20240520 byte-swapped */
  CHECK_FAIL(rt_data_open(&d, path, 50257, &err), "starts like an llm.c token file");
  /* Count and size agree, header tail not zero. */
  unsigned char *buf = calloc(1, 1024 + 600);
  put32(buf, 7);
  put32(buf + 4, 1);
  put32(buf + 8, 300);
  memset(buf + 12, 'x', 1012);
  rt_test_write(path, buf, 1024 + 600);
  CHECK_FAIL(rt_data_open(&d, path, 50257, &err), "magic number is 7");
  /* The same bytes with one more byte: no header shape left, so it is text. */
  buf = realloc(buf, 1024 + 601);
  buf[1024 + 600] = 'y';
  rt_test_write(path, buf, 1024 + 601);
  CHECK_OK(rt_data_open(&d, path, 256, &err));
  if (d) CHECK_INT(rt_data_format(d), RT_DATA_BYTES);
  rt_data_close(d);
  free(buf);
}

/* A FIFO (or any file that is not regular) is refused at once instead of waited on. */
static void test_fifo_refused(void) {
  RtError err;
  RtData *d;
  char path[512];
  rt_test_path(path, sizeof path, "fifo");
  CHECK_INT(mkfifo(path, 0600), 0);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "not a regular file (a FIFO)");
  CHECK_FAIL(rt_data_open(&d, rt_test_path(path, sizeof path, ""), 256, &err), "(a directory)");
  CHECK_FAIL(rt_data_open(&d, "/dev/null", 256, &err), "/dev/null: not a regular file (a device)");
}

/* ===== validation errors ============================================================== */

static void test_open_errors(void) {
  RtError err;
  RtData *d;
  char path[512];
  uint32_t t[100] = {0};
  CHECK_FAIL(rt_data_open(&d, rt_test_path(path, sizeof path, "missing.bin"), 256, &err),
             "cannot open");
  CHECK_INT(d == NULL, 1);
  rt_test_write(rt_test_path(path, sizeof path, "empty.txt"), "", 0);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "empty.txt: empty data file");
  rt_test_write(rt_test_path(path, sizeof path, "one.txt"), "x", 1);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "need at least 2");
  CHECK_FAIL(rt_data_open(&d, path, 0, &err), "vocabulary size 0");
  write_tokens(rt_test_path(path, sizeof path, "trunc.bin"), 20240520, 1, 100, t, 50, 2);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "trunc.bin: truncated: header declares 100 tokens");
  write_tokens(rt_test_path(path, sizeof path, "extra.bin"), 20240520, 1, 50, t, 100, 2);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "100 bytes after the 50 tokens");
  write_tokens(rt_test_path(path, sizeof path, "version.bin"), 20240520, 7, 10, t, 10, 2);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "version.bin: token file version 7, expected 1");
  write_tokens(rt_test_path(path, sizeof path, "negative.bin"), 20240520, 1, -5, t, 10, 2);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "declares -5 tokens");
  unsigned char shorthdr[12];
  put32(shorthdr, 20240520), put32(shorthdr + 4, 1), put32(shorthdr + 8, 0);
  rt_test_write(rt_test_path(path, sizeof path, "short.bin"), shorthdr, sizeof shorthdr);
  CHECK_FAIL(rt_data_open(&d, path, 256, &err), "header needs 1024 bytes, file has 12");
}

static void test_token_outside_vocab(void) {
  RtError err;
  RtData *d;
  char path[512];
  uint32_t t[100];
  for (int i = 0; i < 100; i++) t[i] = (uint32_t)i;
  t[42] = 999;
  write_tokens(rt_test_path(path, sizeof path, "vocab.bin"), 20240520, 1, 100, t, 100, 2);
  CHECK_FAIL(rt_data_open(&d, path, 500, &err),
             "vocab.bin: token 999 at position 42 is outside the vocabulary of size 500");
  CHECK_OK(rt_data_open(&d, path, 1000, &err));
  rt_data_close(d);
  rt_test_write(rt_test_path(path, sizeof path, "vocab.txt"), "abcz", 4);
  CHECK_FAIL(rt_data_open(&d, path, 100, &err), "token 122 at position 3");
}

static void test_batch_errors(void) {
  RtError err;
  RtData *d;
  char path[512];
  CHECK_OK(rt_data_open(&d, u16_file(path, sizeof path), 1000, &err));
  if (!d) return;
  int32_t in[200], tg[200];
  CHECK_FAIL(rt_data_next_batch(d, 0, 10, in, tg, &err), "expected positive sizes");
  CHECK_FAIL(rt_data_next_batch(d, 10, 10, in, tg, &err),
             "u16.bin: 100 tokens, too few for one global batch");
  CHECK_OK(rt_data_next_batch(d, 9, 11, in, tg, &err)); /* 9*11+1 = 100 tokens: just fits */
  CHECK_FAIL(rt_data_set_rank(d, 2, 2, &err), "rank 2 of 2");
  CHECK_OK(rt_data_set_rank(d, 1, 2, &err));
  CHECK_FAIL(rt_data_next_batch(d, 5, 10, in, tg, &err), "too few"); /* 2*5*10+1 > 100 */
  CHECK_FAIL(rt_data_seek(d, 101, &err), "data position 101, expected 0..100");
  CHECK_FAIL(rt_data_seek(d, -1, &err), "data position -1");
  rt_data_close(d);
}

/* ===== batching ======================================================================= */

static void test_wraps_at_end(void) {
  RtError err;
  RtData *d;
  char path[512];
  CHECK_OK(rt_data_open(&d, u16_file(path, sizeof path), 1000, &err));
  if (!d) return;
  int32_t first[20], in[20], tg[20];
  CHECK_OK(rt_data_next_batch(d, 2, 10, first, tg, &err));
  for (int b = 1; b < 4; b++) {
    CHECK_OK(rt_data_next_batch(d, 2, 10, in, tg, &err));
    CHECK_INT(in[0], tok(20 * b));
    CHECK_INT(tg[19], tok(20 * b + 20));
  }
  CHECK_INT(rt_data_position(d), 80);
  CHECK_OK(rt_data_next_batch(d, 2, 10, in, tg, &err)); /* 80 + 21 > 100: starts over */
  CHECK_INT(memcmp(in, first, sizeof in), 0);
  CHECK_INT(rt_data_position(d), 20);
  rt_data_close(d);
}

/* Two ranks with B=2 read exactly what one rank with B=4 reads, batch after batch. */
static void test_rank_split(void) {
  RtError err;
  RtData *whole, *r0, *r1;
  char path[512];
  u16_file(path, sizeof path);
  CHECK_OK(rt_data_open(&whole, path, 1000, &err));
  CHECK_OK(rt_data_open(&r0, path, 1000, &err));
  CHECK_OK(rt_data_open(&r1, path, 1000, &err));
  if (!whole || !r0 || !r1) return;
  CHECK_OK(rt_data_set_rank(r0, 0, 2, &err));
  CHECK_OK(rt_data_set_rank(r1, 1, 2, &err));
  for (int step = 0; step < 7; step++) {
    int32_t in[20], tg[20], in2[20], tg2[20];
    CHECK_OK(rt_data_next_batch(whole, 4, 5, in, tg, &err));
    CHECK_OK(rt_data_next_batch(r0, 2, 5, in2, tg2, &err));
    CHECK_OK(rt_data_next_batch(r1, 2, 5, in2 + 10, tg2 + 10, &err));
    CHECK_INT(memcmp(in, in2, sizeof in), 0);
    CHECK_INT(memcmp(tg, tg2, sizeof tg), 0);
    CHECK_INT(rt_data_position(r0), rt_data_position(whole));
    CHECK_INT(rt_data_position(r1), rt_data_position(whole));
  }
  rt_data_close(whole);
  rt_data_close(r0);
  rt_data_close(r1);
}

/* A position saved mid-run and restored in a fresh reader continues the same stream. */
static void test_position_restore(void) {
  RtError err;
  RtData *d, *e;
  char path[512];
  u16_file(path, sizeof path);
  CHECK_OK(rt_data_open(&d, path, 1000, &err));
  CHECK_OK(rt_data_open(&e, path, 1000, &err));
  if (!d || !e) return;
  int32_t in[12], tg[12], in2[12], tg2[12];
  for (int i = 0; i < 5; i++) CHECK_OK(rt_data_next_batch(d, 3, 4, in, tg, &err));
  int64_t saved = rt_data_position(d);
  CHECK_OK(rt_data_seek(e, saved, &err));
  for (int i = 0; i < 12; i++) { /* crosses the wrap-around */
    CHECK_OK(rt_data_next_batch(d, 3, 4, in, tg, &err));
    CHECK_OK(rt_data_next_batch(e, 3, 4, in2, tg2, &err));
    CHECK_INT(memcmp(in, in2, sizeof in), 0);
    CHECK_INT(memcmp(tg, tg2, sizeof tg), 0);
  }
  rt_data_close(d);
  rt_data_close(e);
}

/* rt_data_skip moves the position as that many rt_data_next_batch calls would, from any
 * position, across the end (saying it wrapped), at once; more than the data holds is refused
 * with the count, even a count no loop would finish. */
static void test_skip(void) {
  RtError err;
  RtData *d, *e;
  char path[512];
  u16_file(path, sizeof path);
  CHECK_OK(rt_data_open(&d, path, 1000, &err));
  CHECK_OK(rt_data_open(&e, path, 1000, &err));
  if (!d || !e) return;
  int32_t in[12], tg[12];
  for (int64_t start = 0; start <= 96; start += 12) /* 8 batches of 3 x 4 in 100 tokens */
    for (int64_t k = 0; k <= 8; k++) {
      int wrapped = -1;
      CHECK_OK(rt_data_seek(d, start, &err));
      CHECK_OK(rt_data_seek(e, start, &err));
      for (int64_t i = 0; i < k; i++) CHECK_OK(rt_data_next_batch(d, 3, 4, in, tg, &err));
      CHECK_OK(rt_data_skip(e, 3, 4, k, &wrapped, &err));
      CHECK_INT(rt_data_position(e), rt_data_position(d));
      int64_t pos = start + 13 > 100 ? 0 : start;
      CHECK_INT(wrapped, k > 0 && k > (99 - pos) / 12);
    }
  int wrapped;
  CHECK_FAIL(rt_data_skip(e, 3, 4, 9, &wrapped, &err),
             "u16.bin holds: 8 global batches of 1 x 3 x 4 (ranks x batch x sequence) in its 100 "
             "tokens; expected 0..8");
  CHECK_INT(strncmp(err.msg, "9 batches is more than ", 23), 0);
  CHECK_FAIL(rt_data_skip(e, 3, 4, 4000000000000000000, &wrapped, &err),
             "4000000000000000000 batches is more than ");
  rt_data_close(d);
  rt_data_close(e);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"text file", test_text_file},
      {"uint16 token file", test_u16_file},
      {"uint32 token file", test_u32_file},
      {"near-miss token header refused", test_bad_magic_refused},
      {"FIFO and devices refused", test_fifo_refused},
      {"open errors", test_open_errors},
      {"token outside vocabulary", test_token_outside_vocab},
      {"batch errors", test_batch_errors},
      {"wraps at end", test_wraps_at_end},
      {"rank split", test_rank_split},
      {"position restore", test_position_restore},
      {"skip: in constant time, as batches would, refused past the data", test_skip},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_data", cases);
}
