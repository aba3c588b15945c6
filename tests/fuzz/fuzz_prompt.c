/*
 * fuzz_prompt.c: fuzz target for --sample's prompt path (runtime/sample.c, rt_sample_prompt):
 * prompt text -> tokens -> the buffer that generate fills.
 *
 * Input: byte 0 picks the encoder (0: a byte-level BPE tokenizer.json with GPT-2's
 * pre-tokenizer, 1: the same with Llama 3's, 2: no tokenizer with a byte-level vocabulary of
 * 256, 3: no tokenizer with a vocabulary of 300, where the prompt is decimal ids); byte 1 % 16
 * is the count of tokens to draw; the rest, up to a NUL, is the prompt. (The fuzz build has no
 * SentencePiece.) The checks:
 *   - a refusal has a message starting "--prompt: " or "--sample: ";
 *   - every prompt id is inside the vocabulary, and with a tokenizer the prompt ids decode back
 *     to the prompt's bytes;
 *   - the buffer holds the prompt and count more tokens, written as generate writes them (an
 *     overrun is AddressSanitizer's finding).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "runtime/axrt.h"
#include "runtime/rt_impl.h"

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

static size_t put_cp(char *out, unsigned cp) {
  if (cp == '"' || cp == '\\') return (size_t)sprintf(out, "\\%c", (char)cp);
  if (cp < 0x80) return (size_t)sprintf(out, "%c", (char)cp);
  return (size_t)sprintf(out, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)));
}

static const char LLAMA3_PRE[] =
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"behavior\": "
    "\"Isolated\", "
    "\"pattern\": {\"Regex\": "
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
    "\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}}, "
    "{\"type\": \"ByteLevel\", \"use_regex\": false}]}";

/* Bytes 0..255, merges "t h", "Ġ th", "th e", "Ġth e" (256..259), <|endoftext|> 260. */
static RtTok *open_bpe(int llama3) {
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
  char *path = fuzz_temp_file(json, n);
  RtTok *t = NULL;
  RtError err;
  FUZZ_CHECK(rt_tok_open(&t, path, &err) == 0, "the fuzz tokenizer does not open: %s", err.msg);
  unlink(path);
  free(path);
  return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static RtTok *toks[2];
  if (!toks[0]) {
    toks[0] = open_bpe(0);
    toks[1] = open_bpe(1);
  }
  if (size < 2) return 0;
  int kind = data[0] % 4;
  int64_t count = data[1] % 16;
  const RtTok *tok = kind < 2 ? toks[kind] : NULL;
  int64_t vocab = tok ? rt_tok_vocab(tok) : kind == 2 ? 256 : 300;
  char *text = malloc(size - 1);
  memcpy(text, data + 2, size - 2);
  text[size - 2] = '\0';
  int32_t *tokens = NULL;
  int64_t ntokens = -1, nprompt = -1;
  RtError err;
  err.msg[0] = '\0';
  if (rt_sample_prompt(tok, text, vocab, count, &tokens, &ntokens, &nprompt, &err) != 0) {
    FUZZ_CHECK(!strncmp(err.msg, "--prompt: ", 10) || !strncmp(err.msg, "--sample: ", 10),
               "message: %s", err.msg);
  } else {
    FUZZ_CHECK(ntokens >= 1 && nprompt >= 0 && nprompt <= ntokens, "ntokens %lld nprompt %lld",
               (long long)ntokens, (long long)nprompt);
    for (int64_t i = 0; i < ntokens; i++)
      FUZZ_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "token %lld: %d outside 0..%lld",
                 (long long)i, tokens[i], (long long)vocab - 1);
    if (tok && nprompt > 0) {
      char *back;
      size_t len;
      FUZZ_CHECK(rt_tok_decode(tok, tokens, nprompt, &back, &len, &err) == 0, "decode: %s",
                 err.msg);
      FUZZ_CHECK(len == strlen(text) && !memcmp(back, text, len),
                 "the prompt does not decode back");
      free(back);
    }
    for (int64_t k = 0; k < count; k++) /* as generate appends the drawn tokens */
      tokens[ntokens++] = (int32_t)(k % vocab);
  }
  free(tokens);
  free(text);
  return 0;
}
