/*
 * fuzz_tokjson.c: fuzz target for the tokenizer.json reader (runtime/tok.c, tok_bpe.c).
 *
 * The input bytes are a tokenizer file. rt_tok_open must never crash, leak or hang (a huge
 * token id once made it loop for ever). The checks:
 *   - a refusal has a message naming the file;
 *   - an opened tokenizer has a vocabulary of 1..RT_TOK_MAX_ID+1;
 *   - fixed texts (words, digits, spaces, invalid UTF-8, NULs) either encode to ids inside the
 *     vocabulary that decode back to the text, or are refused with a message;
 *   - every id's bytes (rt_tok_token_bytes) are readable, and an id outside the vocabulary is
 *     refused by decode.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "runtime/axrt.h"

static const struct {
  const char *text;
  size_t n;
} TEXTS[] = {
    {"The the 123 them", 16},
    {"  hello\n\n world's 4567890", 26},
    {"\xff\xfe\x00z \xc4\xa0", 7},
    {"<|endoftext|>x", 14},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = fuzz_temp_file(data, size);
  RtTok *t = NULL;
  RtError err;
  err.msg[0] = '\0';
  if (rt_tok_open(&t, path, &err) != 0) {
    FUZZ_CHECK(strstr(err.msg, path) != NULL, "the message does not name the file: %s", err.msg);
  } else {
    int64_t vocab = rt_tok_vocab(t);
    FUZZ_CHECK(vocab >= 1 && vocab <= (int64_t)RT_TOK_MAX_ID + 1, "vocabulary %lld",
               (long long)vocab);
    for (size_t i = 0; i < sizeof TEXTS / sizeof *TEXTS; i++) {
      int32_t *ids = NULL;
      int64_t n = 0;
      if (rt_tok_encode(t, TEXTS[i].text, TEXTS[i].n, &ids, &n, &err) != 0) {
        FUZZ_CHECK(err.msg[0] != '\0', "encode failed without a message");
        continue;
      }
      for (int64_t k = 0; k < n; k++)
        FUZZ_CHECK(ids[k] >= 0 && ids[k] < vocab, "id %d outside 0..%lld", ids[k],
                   (long long)vocab - 1);
      char *back = NULL;
      size_t len = 0;
      FUZZ_CHECK(rt_tok_decode(t, ids, n, &back, &len, &err) == 0, "decode: %s", err.msg);
      FUZZ_CHECK(len == TEXTS[i].n && !memcmp(back, TEXTS[i].text, len),
                 "text %zu does not decode back", i);
      free(back);
      free(ids);
    }
    char buf[256];
    for (int64_t id = 0; id < vocab && id < 4096; id++)
      (void)rt_tok_token_bytes(t, (int32_t)id, buf, sizeof buf);
    int32_t bad = (int32_t)vocab;
    char *back = NULL;
    size_t len = 0;
    FUZZ_CHECK(rt_tok_decode(t, &bad, 1, &back, &len, &err) != 0,
               "id %d outside the vocabulary decoded", bad);
    free(back);
    rt_tok_close(t);
  }
  unlink(path);
  free(path);
  return 0;
}
