/*
 * fuzz_plot.c: fuzz target for `axlc plot` (tools/plot.c, plot_metrics_stream).
 *
 * The input bytes are a metrics file: JSON lines as a trainer writes with --metrics, or not.
 * The plotter must never crash, leak or hang, and must either refuse the file, writing
 * nothing, or draw it as an SVG that any viewer reads, whatever the values (+-1e308, NaN,
 * Infinity, steps near 2^63) and however many lines there are:
 *   - well-formed: one <svg> root, every element closed in order, attribute values quoted,
 *     no '<' in a value and no '&' that does not start an entity;
 *   - no "nan" or "inf" anywhere (a coordinate or label printed from a non-finite double);
 *   - bounded: under 1 MB (a million lines draw about 150 KB: lines are thinned to the
 *     panel's pixel columns).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fuzz.h"
#include "tools/plot.h"

#define MAX_SVG   (1 << 20)
#define MAX_DEPTH 8

/* Skips an XML name at s; aborts if there is none. */
static const char *skip_name(const char *s) {
  const char *n = s;
  while (isalnum((unsigned char)*s) || *s == '-' || *s == '_' || *s == ':') s++;
  FUZZ_CHECK(s > n, "expected a name at \"%.20s\"", n);
  return s;
}

/* '&' at s starts one of XML's entities. */
static void check_entity(const char *s) {
  static const char *const ents[] = {"&lt;", "&gt;", "&amp;", "&quot;", "&apos;"};
  for (int i = 0; i < 5; i++)
    if (!strncmp(s, ents[i], strlen(ents[i]))) return;
  FUZZ_CHECK(0, "a bare '&' at \"%.20s\"", s);
}

/* The start tag at s (after '<'): its name into name; returns past '>'; *empty for "/>". */
static const char *start_tag(const char *s, char *name, size_t cap, int *empty) {
  const char *e = skip_name(s);
  FUZZ_CHECK((size_t)(e - s) < cap, "a name of %d characters", (int)(e - s));
  memcpy(name, s, (size_t)(e - s));
  name[e - s] = 0;
  for (s = e;;) {
    while (*s == ' ' || *s == '\n') s++;
    if (*s == '>' || (s[0] == '/' && s[1] == '>')) break;
    s = skip_name(s);
    FUZZ_CHECK(s[0] == '=' && (s[1] == '\'' || s[1] == '"'), "an unquoted attribute in <%s>", name);
    char q = s[1];
    for (s += 2; *s != q; s++) {
      FUZZ_CHECK(*s && *s != '<', "an attribute value of <%s> not closed", name);
      if (*s == '&') check_entity(s);
    }
    s++;
  }
  *empty = *s == '/';
  return s + (*empty ? 2 : 1);
}

static void check_svg(const char *svg, size_t n) {
  FUZZ_CHECK(n < MAX_SVG, "an SVG of %zu bytes", n);
  FUZZ_CHECK(strlen(svg) == n, "a NUL in the SVG");
  for (const char *s = svg; *s; s++) {
    char a = (char)tolower((unsigned char)s[0]);
    FUZZ_CHECK(
        !((a == 'n' && !strncasecmp(s, "nan", 3)) || (a == 'i' && !strncasecmp(s, "inf", 3))),
        "a non-number in the SVG: \"%.40s\"", s);
  }
  const char *s = svg;
  FUZZ_CHECK(!strncmp(s, "<?xml", 5), "no XML declaration");
  s = strstr(s, "?>");
  FUZZ_CHECK(s, "the XML declaration is not closed");
  s += 2;
  char stack[MAX_DEPTH][32];
  int depth = 0, roots = 0;
  while (*s) {
    if (*s == '&') check_entity(s);
    FUZZ_CHECK(depth > 0 || *s == '<' || isspace((unsigned char)*s),
               "text outside the root: \"%.20s\"", s);
    if (*s != '<') {
      s++;
      continue;
    }
    if (s[1] == '/') {
      const char *e = skip_name(s + 2);
      FUZZ_CHECK(depth > 0 && (size_t)(e - s - 2) == strlen(stack[depth - 1]) &&
                     !strncmp(s + 2, stack[depth - 1], (size_t)(e - s - 2)) && *e == '>',
                 "a closing tag that closes nothing open: \"%.20s\"", s);
      depth--;
      s = e + 1;
      continue;
    }
    char name[32];
    int empty;
    roots += depth == 0;
    s = start_tag(s + 1, name, sizeof name, &empty);
    if (!empty) {
      FUZZ_CHECK(depth < MAX_DEPTH, "elements nested %d deep", depth);
      strcpy(stack[depth++], name);
    }
  }
  FUZZ_CHECK(depth == 0, "%d elements not closed, the innermost <%s>", depth, stack[depth - 1]);
  FUZZ_CHECK(roots == 1, "%d root elements", roots);
  FUZZ_CHECK(strstr(svg, "<svg ") != NULL, "no <svg> element");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = fuzz_temp_file(data, size);
  FILE *in = fopen(path, "r");
  FUZZ_CHECK(in, "cannot open %s", path);
  char *svg = NULL;
  size_t n = 0;
  FILE *out = open_memstream(&svg, &n);
  FUZZ_CHECK(out, "open_memstream failed");
  int rc = plot_metrics_stream(in, "fuzz.jsonl", out);
  FUZZ_CHECK(fclose(out) == 0, "the SVG could not be written");
  fclose(in);
  if (rc == 0)
    check_svg(svg, n);
  else
    FUZZ_CHECK(n == 0, "a refused file still wrote %zu bytes", n);
  free(svg);
  unlink(path);
  free(path);
  return 0;
}
