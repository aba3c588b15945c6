/*
 * json.c: JSON in and out for configs.
 *
 * Parsing is json-c's (strict mode); this file adds what configs need on top:
 * line:column for syntax errors, the file each object came from (kept in the
 * object's userdata so merged trees still name the right file), paths in the
 * "/model/decoder/layer" form, and one canonical printer (sorted keys, floats
 * that read back to the same double and stay floats) whose output parses
 * back to the same text.
 *
 * Origins live in the userdata of objects and arrays only: json-c keeps the
 * source text of parsed doubles in a scalar's userdata, so a scalar's origin
 * is recorded per key in its parent object.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/frontend.h"

/* ---- loading ------------------------------------------------------------ */

#define FE_MAX_CONFIG_BYTES (64 << 20)

static void line_col(const char *text, size_t off, int *line, int *col) {
  *line = 1, *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n')
      (*line)++, *col = 1;
    else
      (*col)++;
  }
}

json_object *fe_json_parse(FeDiag *d, const char *text, size_t len, const char *origin) {
  const char *nul = memchr(text, '\0', len);
  if (nul) {
    int line, col;
    line_col(text, (size_t)(nul - text), &line, &col);
    fe_error(d, NULL, NULL, "%s:%d:%d: JSON syntax error: NUL byte in input", origin, line, col);
    return NULL;
  }
  json_tokener *tok = json_tokener_new();
  if (!tok) {
    fe_error(d, origin, NULL, "out of memory");
    return NULL;
  }
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
  json_object *o = json_tokener_parse_ex(tok, text, (int)len);
  enum json_tokener_error err = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  if (err == json_tokener_continue) err = json_tokener_error_parse_eof;
  if (err == json_tokener_success) {
    while (end < len && isspace((unsigned char)text[end])) end++;
    if (end < len) {
      int line, col;
      line_col(text, end, &line, &col);
      fe_error(d, NULL, NULL, "%s:%d:%d: JSON syntax error: unexpected text after the value",
               origin, line, col);
      json_object_put(o);
      o = NULL;
    }
  } else {
    int line, col;
    line_col(text, end < len ? end : len, &line, &col);
    fe_error(d, NULL, NULL, "%s:%d:%d: JSON syntax error: %s", origin, line, col,
             json_tokener_error_desc(err));
    o = NULL;
  }
  json_tokener_free(tok);
  if (o) fe_set_origin(d, o, fe_intern(d, origin), true);
  return o;
}

/* Records `file` in d->files once. */
static void note_file(FeDiag *d, const char *file) {
  file = fe_intern(d, file);
  for (int i = 0; i < d->nfiles; i++)
    if (d->files[i] == file) return;
  if (d->nfiles == d->capfiles) {
    d->capfiles = d->capfiles ? 2 * d->capfiles : 8;
    d->files = base_xrealloc(d->files, (size_t)d->capfiles * sizeof *d->files);
  }
  d->files[d->nfiles++] = file;
}

json_object *fe_json_load(FeDiag *d, const char *file) {
  note_file(d, file);
  /* O_NONBLOCK: a FIFO opens at once (no writer is waited for), and fstat refuses it below */
  int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    fe_error(d, file, NULL, "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    fe_error(d, file, NULL, "not a regular file (expected a JSON config file)");
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *buf = base_xmalloc(cap);
  for (;;) {
    if (len == cap) buf = base_xrealloc(buf, cap *= 2);
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0 || len > FE_MAX_CONFIG_BYTES) break;
  }
  int rerr = ferror(f);
  fclose(f);
  if (rerr || len > FE_MAX_CONFIG_BYTES) {
    free(buf);
    fe_error(d, file, NULL, rerr ? "read error" : "larger than %d MiB (expected a config file)",
             FE_MAX_CONFIG_BYTES >> 20);
    return NULL;
  }
  json_object *o = fe_json_parse(d, buf, len, file);
  free(buf);
  return o;
}

/* ---- origins and copies ------------------------------------------------- */

/* Where an object came from: its file, and per key the file that last set
 * that key when it differs. Owned by the FeDiag. */
typedef struct FeOrigin {
  const char *file;
  int n, cap;
  const char **keys; /* interned */
  const char **files;
} FeOrigin;

static FeOrigin *origin_new(FeDiag *d, const char *file) {
  FeOrigin *o = base_xcalloc(1, sizeof *o);
  o->file = file;
  if (d->norigins == d->caporigins) {
    d->caporigins = d->caporigins ? 2 * d->caporigins : 16;
    d->origins = base_xrealloc(d->origins, (size_t)d->caporigins * sizeof *d->origins);
  }
  d->origins[d->norigins++] = o;
  return o;
}

void fe_origins_free(FeDiag *d) {
  for (int i = 0; i < d->norigins; i++) {
    free(d->origins[i]->keys);
    free(d->origins[i]->files);
    free(d->origins[i]);
  }
  free(d->origins);
  d->origins = NULL;
  d->norigins = d->caporigins = 0;
}

static bool has_origin_slot(json_object *o) {
  json_type t = json_object_get_type(o);
  return o && (t == json_type_object || t == json_type_array);
}

static FeOrigin *origin_of(json_object *o) {
  return has_origin_slot(o) ? json_object_get_userdata(o) : NULL;
}

const char *fe_origin(json_object *o) {
  FeOrigin *r = origin_of(o);
  return r ? r->file : NULL;
}

const char *fe_origin_key(json_object *o, const char *key) {
  FeOrigin *r = origin_of(o);
  if (!r) return NULL;
  for (int i = 0; i < r->n; i++)
    if (strcmp(r->keys[i], key) == 0) return r->files[i];
  return r->file;
}

void fe_set_origin(FeDiag *d, json_object *o, const char *file, bool deep) {
  if (!has_origin_slot(o)) return;
  json_object_set_userdata(o, origin_new(d, file), NULL);
  if (!deep) return;
  if (json_object_get_type(o) == json_type_object) {
    json_object_object_foreach(o, k, v) {
      (void)k;
      fe_set_origin(d, v, file, true);
    }
  } else {
    for (size_t i = 0; i < json_object_array_length(o); i++)
      fe_set_origin(d, json_object_array_get_idx(o, i), file, true);
  }
}

void fe_set_origin_key(FeDiag *d, json_object *o, const char *key, const char *file) {
  FeOrigin *r = origin_of(o);
  if (!r || !file) return;
  key = fe_intern(d, key);
  for (int i = 0; i < r->n; i++)
    if (r->keys[i] == key) {
      r->files[i] = file;
      return;
    }
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 4;
    r->keys = base_xrealloc(r->keys, (size_t)r->cap * sizeof *r->keys);
    r->files = base_xrealloc(r->files, (size_t)r->cap * sizeof *r->files);
  }
  r->keys[r->n] = key;
  r->files[r->n++] = file;
}

void fe_copy_origin(FeDiag *d, json_object *dst, json_object *src) {
  FeOrigin *r = origin_of(src);
  if (!r || !has_origin_slot(dst)) return;
  fe_set_origin(d, dst, r->file, false);
  for (int i = 0; i < r->n; i++) fe_set_origin_key(d, dst, r->keys[i], r->files[i]);
}

json_object *fe_json_copy(FeDiag *d, json_object *o) {
  if (!o) return NULL;
  json_object *c = NULL;
  switch (json_object_get_type(o)) {
  case json_type_null: return NULL;
  case json_type_boolean: return json_object_new_boolean(json_object_get_boolean(o));
  case json_type_int: return json_object_new_int64(json_object_get_int64(o));
  case json_type_double: return json_object_new_double(json_object_get_double(o));
  case json_type_string:
    return json_object_new_string_len(json_object_get_string(o), json_object_get_string_len(o));
  case json_type_object:
    c = json_object_new_object();
    json_object_object_foreach(o, k, v) json_object_object_add(c, k, fe_json_copy(d, v));
    break;
  case json_type_array:
    c = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(o); i++)
      json_object_array_add(c, fe_json_copy(d, json_object_array_get_idx(o, i)));
    break;
  }
  fe_copy_origin(d, c, o);
  return c;
}

/* ---- paths -------------------------------------------------------------- */

void fe_path_join(char *out, size_t outsz, const char *base, const char *key) {
  snprintf(out, outsz, "%s/%s", strcmp(base, "/") == 0 ? "" : base, key);
}

void fe_path_join_index(char *out, size_t outsz, const char *base, int idx) {
  snprintf(out, outsz, "%s/%d", strcmp(base, "/") == 0 ? "" : base, idx);
}

/* Looks up one path component in an object or array. */
static json_object *step(json_object *cur, const char *comp) {
  if (json_object_get_type(cur) == json_type_object) {
    json_object *next = NULL;
    return json_object_object_get_ex(cur, comp, &next) ? next : NULL;
  }
  if (json_object_get_type(cur) == json_type_array) {
    if (!*comp || strlen(comp) > 9) return NULL;
    for (const char *p = comp; *p; p++)
      if (!isdigit((unsigned char)*p)) return NULL;
    size_t idx = (size_t)atol(comp);
    return idx < json_object_array_length(cur) ? json_object_array_get_idx(cur, idx) : NULL;
  }
  return NULL;
}

json_object *fe_path_get(json_object *root, const char *path) {
  json_object *cur = root;
  const char *p = path;
  while (*p == '/') p++;
  char comp[256];
  while (*p && cur) {
    size_t n = strcspn(p, "/");
    if (n >= sizeof comp) return NULL;
    memcpy(comp, p, n);
    comp[n] = 0;
    cur = step(cur, comp);
    p += n;
    while (*p == '/') p++;
  }
  return cur;
}

int fe_path_parent(FeDiag *d, json_object *root, const char *path, const char *file,
                   json_object **parent, char *key, size_t keysz) {
  if (!path || path[0] != '/' || strlen(path) < 2)
    return fe_error(d, file, path, "expected a path of the form /a/b/c");
  const char *slash = strrchr(path, '/');
  if (strlen(slash + 1) == 0 || strlen(slash + 1) >= keysz)
    return fe_error(d, file, path, "path has an empty or overlong last component");
  char *ppath = fe_asprintf("%.*s", (int)(slash - path), path);
  json_object *p = ppath[0] ? fe_path_get(root, ppath) : root;
  bool found = p && json_object_get_type(p) == json_type_object;
  if (!found) fe_error(d, file, path, "the config has no object at %s", ppath[0] ? ppath : "/");
  free(ppath);
  if (!found) return -1;
  *parent = p;
  snprintf(key, keysz, "%s", slash + 1);
  return 0;
}

/* ---- messages ----------------------------------------------------------- */

const char *fe_json_type_name(json_object *o) {
  switch (json_object_get_type(o)) {
  case json_type_null: return "null";
  case json_type_boolean: return "a boolean";
  case json_type_int: return "an integer";
  case json_type_double: return "a number";
  case json_type_string: return "a string";
  case json_type_object: return "an object";
  case json_type_array: return "an array";
  }
  return "a value";
}

void fe_json_brief(json_object *o, char *buf, size_t n) {
  switch (json_object_get_type(o)) {
  case json_type_null: snprintf(buf, n, "null"); break;
  case json_type_boolean:
    snprintf(buf, n, "%s", json_object_get_boolean(o) ? "true" : "false");
    break;
  case json_type_int: {
    /* json-c reads an integer past 64 bits as the nearest bound: quoting that bound would put
     * a number in the user's mouth that they never wrote */
    int64_t v = json_object_get_int64(o);
    if (v == INT64_MAX || v == INT64_MIN)
      snprintf(buf, n, "%s (or a number past it: integers are read in 64 bits)",
               v == INT64_MAX ? "9223372036854775807" : "-9223372036854775808");
    else
      snprintf(buf, n, "%lld", (long long)v);
    break;
  }
  case json_type_double: snprintf(buf, n, "%.17g", json_object_get_double(o)); break;
  case json_type_string: snprintf(buf, n, "\"%.60s\"", json_object_get_string(o)); break;
  case json_type_object: snprintf(buf, n, "an object"); break;
  case json_type_array: snprintf(buf, n, "an array"); break;
  }
}

/* ---- canonical printing ------------------------------------------------- */

typedef struct {
  char *s;
  size_t n, cap;
} Buf;

static void put(Buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
    b->s = base_xrealloc(b->s, b->cap);
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void puts_(Buf *b, const char *s) { put(b, s, strlen(s)); }

static void indent(Buf *b, int depth) {
  for (int i = 0; i < depth; i++) puts_(b, "  ");
}

/* Shortest "%.Ng" that reads back to the same double, forced to look like a float. */
static void put_double(Buf *b, double v) {
  char tmp[64];
  if (!isfinite(v)) {
    puts_(b, "null"); /* not representable in JSON; validation rejects these earlier */
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    if (strtod(tmp, NULL) == v) break;
  }
  if (!strpbrk(tmp, ".en")) strcat(tmp, ".0");
  puts_(b, tmp);
}

static void put_string(Buf *b, const char *s, size_t n) {
  puts_(b, "\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char tmp[8];
    if (c == '"')
      puts_(b, "\\\"");
    else if (c == '\\')
      puts_(b, "\\\\");
    else if (c == '\n')
      puts_(b, "\\n");
    else if (c == '\t')
      puts_(b, "\\t");
    else if (c < 0x20) {
      snprintf(tmp, sizeof tmp, "\\u%04x", c);
      puts_(b, tmp);
    } else
      put(b, (const char *)&c, 1);
  }
  puts_(b, "\"");
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool is_scalar(json_object *o) {
  json_type t = json_object_get_type(o);
  return t != json_type_object && t != json_type_array;
}

static void put_value(Buf *b, json_object *o, int depth);

static void put_object(Buf *b, json_object *o, int depth) {
  int n = json_object_object_length(o);
  if (n == 0) {
    puts_(b, "{}");
    return;
  }
  const char **keys = base_xmalloc((size_t)n * sizeof *keys);
  int i = 0;
  json_object_object_foreach(o, k, v) {
    (void)v;
    keys[i++] = k;
  }
  qsort(keys, (size_t)n, sizeof *keys, cmp_str);
  puts_(b, "{\n");
  for (i = 0; i < n; i++) {
    indent(b, depth + 1);
    put_string(b, keys[i], strlen(keys[i]));
    puts_(b, ": ");
    put_value(b, json_object_object_get(o, keys[i]), depth + 1);
    puts_(b, i + 1 < n ? ",\n" : "\n");
  }
  indent(b, depth);
  puts_(b, "}");
  free(keys);
}

static void put_array(Buf *b, json_object *o, int depth) {
  size_t n = json_object_array_length(o);
  bool flat = true;
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(o, i);
    if (!is_scalar(e) &&
        !(json_object_get_type(e) == json_type_array && json_object_array_length(e) <= 4))
      flat = false;
  }
  if (flat) {
    puts_(b, "[");
    for (size_t i = 0; i < n; i++) {
      if (i) puts_(b, ", ");
      put_value(b, json_object_array_get_idx(o, i), depth);
    }
    puts_(b, "]");
    return;
  }
  puts_(b, "[\n");
  for (size_t i = 0; i < n; i++) {
    indent(b, depth + 1);
    put_value(b, json_object_array_get_idx(o, i), depth + 1);
    puts_(b, i + 1 < n ? ",\n" : "\n");
  }
  indent(b, depth);
  puts_(b, "]");
}

static void put_value(Buf *b, json_object *o, int depth) {
  char tmp[32];
  switch (json_object_get_type(o)) {
  case json_type_null: puts_(b, "null"); break;
  case json_type_boolean: puts_(b, json_object_get_boolean(o) ? "true" : "false"); break;
  case json_type_int:
    snprintf(tmp, sizeof tmp, "%lld", (long long)json_object_get_int64(o));
    puts_(b, tmp);
    break;
  case json_type_double: put_double(b, json_object_get_double(o)); break;
  case json_type_string:
    put_string(b, json_object_get_string(o), (size_t)json_object_get_string_len(o));
    break;
  case json_type_object: put_object(b, o, depth); break;
  case json_type_array: put_array(b, o, depth); break;
  }
}

char *fe_json_canonical(json_object *o) {
  Buf b = {0};
  put_value(&b, o, 0);
  puts_(&b, "\n");
  return b.s;
}
