/*
 * test_tok.c: the tokenizer layer (tok.c, tok_bpe.c) on a byte-level BPE written here: every
 * byte string decodes back to itself (random bytes, invalid UTF-8, NULs), merges apply by rank,
 * token bytes, ids outside the vocabulary; the llm.c writer (rt_data_write_u16) read back by
 * rt_data_open, and a text opened through the tokenizer (rt_data_open_tok) equal to it.
 * tests/e2e/tokenizer.sh checks the ids against independent encoders.
 */
#include <stdlib.h>
#include <unistd.h>

#include "rt_test.h"

/* ===== a tokenizer.json ================================================================ */

/* GPT-2's bytes_to_unicode: the code point that shows byte b. */
static unsigned byte_cp(int b) {
  int n = 0;
  for (int c = 0; c < 256; c++) {
    int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    if (c == b) return printable ? (unsigned)c : 256u + (unsigned)n;
    if (!printable) n++;
  }
  return 0;
}

/* Appends the UTF-8 of cp, escaped for JSON where it must be. */
static size_t put_cp(char *out, unsigned cp) {
  if (cp == '"' || cp == '\\') return (size_t)sprintf(out, "\\%c", (char)cp);
  if (cp < 0x80) return (size_t)sprintf(out, "%c", (char)cp);
  return (size_t)sprintf(out, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)));
}

/* Llama 3's pre-tokenizer, as its tokenizer.json has it (JSON in a C string). */
static const char LLAMA3_PRE[] =
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"behavior\": "
    "\"Isolated\", "
    "\"pattern\": {\"Regex\": "
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
    "\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}}, "
    "{\"type\": \"ByteLevel\", \"use_regex\": false}]}";

/* Bytes 0..255 are ids 0..255; the merges "t h", "Ġ th", "th e", "Ġth e" make 256..259
 * (ranks 0..3); <|endoftext|> is 260. */
static const char *write_bpe(char *path, size_t cap, int llama3) {
  static char json[16384];
  size_t n = (size_t)sprintf(json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  for (int b = 0; b < 256; b++) {
    json[n++] = '"';
    n += put_cp(json + n, byte_cp(b));
    n += (size_t)sprintf(json + n, "\": %d, ", b);
  }
  n += (size_t)sprintf(json + n,
                       "\"th\": 256, \"\xC4\xA0th\": 257, \"the\": 258, \"\xC4\xA0the\": 259}, "
                       "\"merges\": [\"t h\", \"\xC4\xA0 th\", \"th e\", \"\xC4\xA0th e\"]}, "
                       "\"added_tokens\": [{\"id\": 260, \"content\": \"<|endoftext|>\"}], "
                       "\"pre_tokenizer\": %s}",
                       llama3 ? LLAMA3_PRE : "{\"type\": \"ByteLevel\", \"use_regex\": true}");
  rt_test_write(rt_test_path(path, cap, llama3 ? "llama3.json" : "tokenizer.json"), json, n);
  return path;
}

static RtTok *open_bpe(int llama3) {
  char path[512];
  RtError err;
  RtTok *t = NULL;
  CHECK_OK(rt_tok_open(&t, write_bpe(path, sizeof path, llama3), &err));
  return t;
}

/* ===== cases ========================================================================== */

static void test_merges_by_rank(void) {
  RtTok *t = open_bpe(0);
  if (!t) return;
  RtError err;
  CHECK_INT(rt_tok_vocab(t), 261);
  CHECK_INT(rt_tok_bos(t), 260);
  const char *text = "the then the<|endoftext|>x";
  int32_t *ids;
  int64_t n;
  CHECK_OK(rt_tok_encode(t, text, strlen(text), &ids, &n, &err));
  /* "the", " then" -> " the" "n" (" th" merges before "the": rank 1 against 2), " the",
   * <|endoftext|>, "x" */
  const int32_t want[] = {258, 259, 'n', 259, 260, 'x'};
  CHECK_INT(n, 6);
  for (int64_t i = 0; i < n && i < 6; i++) CHECK_INT(ids[i], want[i]);
  char buf[8];
  CHECK_INT(rt_tok_token_bytes(t, 259, buf, sizeof buf), 4);
  CU_ASSERT(memcmp(buf, " the", 4) == 0);
  CHECK_INT(rt_tok_token_bytes(t, 261, buf, sizeof buf), -1);
  free(ids);
  rt_tok_close(t);
}

/* decode(encode(x)) == x for random bytes: invalid UTF-8, NULs, every byte value; under
 * GPT-2's pattern and Llama 3's. */
static void round_trip(int llama3) {
  RtTok *t = open_bpe(llama3);
  if (!t) return;
  RtError err;
  unsigned seed = 12345;
  for (int k = 0; k < 200; k++) {
    char text[300];
    size_t len = (size_t)(k % 7 == 0 ? 299 : k);
    for (size_t i = 0; i < len; i++) {
      seed = seed * 1103515245u + 12345u;
      /* mostly "the" and spaces, so merges happen, between random bytes */
      text[i] = (seed >> 16) % 3 == 0 ? (char)(seed >> 8) : "the "[(seed >> 20) % 4];
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    char *back = NULL;
    size_t blen = 0;
    CHECK_OK(rt_tok_encode(t, text, len, &ids, &n, &err));
    CHECK_OK(rt_tok_decode(t, ids, n, &back, &blen, &err));
    CHECK_INT(blen, len);
    CU_ASSERT(back && memcmp(back, text, len) == 0);
    free(ids);
    free(back);
  }
  int32_t bad[] = {5, 261};
  char *back;
  size_t blen;
  CHECK_FAIL(rt_tok_decode(t, bad, 2, &back, &blen, &err),
             "token 261 (at 1) is outside the vocabulary of 261");
  rt_tok_close(t);
}

static void test_round_trip(void) {
  round_trip(0);
  round_trip(1);
}

/* A word of 200,000 letters: the merges are O(n log n), and it decodes back. */
static void test_long_word(void) {
  RtTok *t = open_bpe(0);
  if (!t) return;
  RtError err;
  size_t len = 200000;
  char *text = malloc(len);
  for (size_t i = 0; i < len; i++) text[i] = "theta"[i % 5];
  int32_t *ids = NULL;
  int64_t n = 0;
  char *back = NULL;
  size_t blen = 0;
  CHECK_OK(rt_tok_encode(t, text, len, &ids, &n, &err));
  CHECK_INT(n, 3 * (int64_t)len / 5); /* each "theta": "the" "t" "a" */
  CHECK_OK(rt_tok_decode(t, ids, n, &back, &blen, &err));
  CU_ASSERT(blen == len && back && memcmp(back, text, len) == 0);
  free(ids);
  free(back);
  free(text);
  rt_tok_close(t);
}

/* axlc tokenize's file, and the trainer's text through the tokenizer: the same tokens. */
static void test_token_files(void) {
  RtTok *t = open_bpe(0);
  if (!t) return;
  RtError err;
  char text_path[512], bin_path[512];
  const char *text = "the then\0 the other\xff theme";
  size_t len = 26;
  rt_test_write(rt_test_path(text_path, sizeof text_path, "text.txt"), text, len);
  int32_t *ids;
  int64_t n;
  CHECK_OK(rt_tok_encode(t, text, len, &ids, &n, &err));
  rt_test_path(bin_path, sizeof bin_path, "text.bin");
  CHECK_OK(rt_data_write_u16(bin_path, ids, n, rt_tok_vocab(t), &err));
  RtData *a = NULL, *b = NULL;
  CHECK_OK(rt_data_open(&a, bin_path, 261, &err));
  CHECK_OK(rt_data_open_tok(&b, text_path, t, 261, &err));
  if (a && b) {
    CHECK_INT(rt_data_format(a), RT_DATA_TOKENS_U16);
    CHECK_INT(rt_data_format(b), RT_DATA_TOKENS_U32);
    CHECK_INT(rt_data_num_tokens(a), n);
    CHECK_INT(rt_data_num_tokens(b), n);
    int32_t in_a[4], tg_a[4], in_b[4], tg_b[4];
    CHECK_OK(rt_data_next_batch(a, 1, 4, in_a, tg_a, &err));
    CHECK_OK(rt_data_next_batch(b, 1, 4, in_b, tg_b, &err));
    for (int i = 0; i < 4; i++) {
      CHECK_INT(in_a[i], ids[i]);
      CHECK_INT(in_b[i], ids[i]);
      CHECK_INT(tg_b[i], ids[i + 1]);
    }
  }
  rt_data_close(a);
  rt_data_close(b);
  CHECK_FAIL(rt_data_open_tok(&b, text_path, t, 256, &err), "outside the vocabulary of size 256");
  int32_t big[] = {1, 70000};
  CHECK_FAIL(rt_data_write_u16(bin_path, big, 2, 70001, &err),
             "does not fit the llm.c token file's uint16");
  CHECK_FAIL(rt_data_write_u16(bin_path, big, 2, 300, &err),
             "token 70000 at position 1 is outside");
  free(ids);
  rt_tok_close(t);
}

static void test_vocab_check(void) {
  RtTok *t = open_bpe(0);
  if (!t) return;
  RtError err;
  CHECK_OK(rt_tok_check_vocab(t, 261, "m.json", &err));
  CHECK_FAIL(rt_tok_check_vocab(t, 256, "m.json", &err),
             "the bpe tokenizer has a vocabulary of 261 tokens, but the model of m.json has "
             "vocab_size 256");
  rt_tok_close(t);
}

/* A tokenizer.json of byte tokens 0..255 plus "ab" at the given id (JSON text). */
static void write_sparse(const char *path, const char *id) {
  static char json[16384];
  size_t n = (size_t)sprintf(json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  for (int b = 0; b < 256; b++) {
    json[n++] = '"';
    n += put_cp(json + n, byte_cp(b));
    n += (size_t)sprintf(json + n, "\": %d, ", b);
  }
  n += (size_t)sprintf(json + n,
                       "\"ab\": %s}, \"merges\": [\"a b\"]}, "
                       "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}}",
                       id);
  rt_test_write(path, json, n);
}

/* Huge ids are refused with the bound, at once: 2^30 made the table sizing loop for ever, 2^30-1
 * asked for gigabytes ("out of memory for a vocabulary of 1073741824"). */
static void test_huge_id(void) {
  char path[512];
  RtError err;
  RtTok *t = NULL;
  rt_test_path(path, sizeof path, "huge.json");
  alarm(20); /* a hang fails here, not at CTest's timeout */
  static const char *ids[] = {"1073741824", "1073741823", "16777216", "2147483647", "4294967296"};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    write_sparse(path, ids[i]);
    char want[200];
    snprintf(want, sizeof want,
             "/model/vocab/ab: id %s, expected an integer 0..16777215 (a tokenizer's vocabulary "
             "has at most "
             "16777216 tokens)",
             ids[i]);
    CHECK_FAIL(rt_tok_open(&t, path, &err), want);
  }
  write_sparse(path, "16777215"); /* the largest id: opens, a vocabulary of 2^24 */
  CHECK_OK(rt_tok_open(&t, path, &err));
  if (t) {
    CU_ASSERT_EQUAL(rt_tok_vocab(t), 16777216);
    rt_tok_close(t);
  }
  alarm(0);
}

/* Long runs split in linear time under both patterns: a million digits (Llama 3's \p{N}{1,3}
 * looked at the whole run for every 3 digits: 320K digits took 21.5 s), spaces, one word, a
 * line of punctuation, random bytes. A quadratic split would take minutes: the alarm ends it. */
static void test_long_runs(void) {
  enum { N = 1000000 };
  char *text = malloc(N);
  if (!text) return;
  alarm(30);
  for (int llama3 = 0; llama3 < 2; llama3++) {
    RtTok *t = open_bpe(llama3);
    if (!t) break;
    for (int kind = 0; kind < 5; kind++) {
      uint64_t x = 88172645463325252u;
      for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        text[i] = kind == 0   ? (char)('0' + x % 10)
                  : kind == 1 ? ' '
                  : kind == 2 ? 'q'
                  : kind == 3 ? '.'
                              : (char)x;
      }
      int32_t *ids = NULL;
      int64_t n = 0;
      RtError err;
      CHECK_OK(rt_tok_encode(t, text, N, &ids, &n, &err));
      CU_ASSERT(n > 0 && n <= N);
      if (kind == 0) CU_ASSERT_EQUAL(n, N); /* digits: no merges in this vocabulary */
      char *back = NULL;
      size_t len = 0;
      CHECK_OK(rt_tok_decode(t, ids, n, &back, &len, &err));
      CU_ASSERT(len == N && back && !memcmp(back, text, N));
      free(back);
      free(ids);
    }
    rt_tok_close(t);
  }
  alarm(0);
  free(text);
}

/* A key with an escaped NUL is refused (json-c would cut it at the NUL); a leading UTF-8 byte
 * order mark is skipped. */
static void test_nul_and_bom(void) {
  char path[512];
  RtError err;
  RtTok *t = NULL;
  rt_test_path(path, sizeof path, "nul.json");
  static const char NUL_KEY[] =
      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"a\\u0000b\": 2}, "
      "\"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}";
  rt_test_write(path, NUL_KEY, sizeof NUL_KEY - 1);
  CHECK_FAIL(
      rt_tok_open(&t, path, &err),
      "nul.json: the string \"a\\u0000b\" at byte 52 holds a NUL (\\u0000); a token or key of a "
      "tokenizer.json cannot contain one");
  char bom[16384 + 3] = "\xef\xbb\xbf";
  FILE *f = fopen(write_bpe(path, sizeof path, 0), "rb");
  size_t n = f ? fread(bom + 3, 1, sizeof bom - 3, f) : 0;
  if (f) fclose(f);
  rt_test_write(rt_test_path(path, sizeof path, "bom.json"), bom, n + 3);
  CHECK_OK(rt_tok_open(&t, path, &err));
  if (t) {
    CU_ASSERT_EQUAL(rt_tok_vocab(t), 261);
    rt_tok_close(t);
  }
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"merges by rank, added tokens", test_merges_by_rank},
      {"every byte string decodes back", test_round_trip},
      {"a very long word", test_long_word},
      {"token files and text through the tokenizer", test_token_files},
      {"vocabulary against the model's", test_vocab_check},
      {"a huge token id", test_huge_id},
      {"long runs split in linear time", test_long_runs},
      {"a NUL in a key, a byte order mark", test_nul_and_bom},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_tok", cases);
}
