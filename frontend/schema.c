/*
 * schema.c: the registry of module kinds and schema validation.
 *
 * fe_canonicalize() checks a raw module tree against the kinds' schemas and
 * builds a new tree in canonical form: only known fields, every default
 * filled in, integers as integers and floats as doubles. It records every
 * problem it finds (not only the first) and returns NULL if there was any.
 * Checks that need a parent's decisions (a dim that must divide by a head
 * count) are the module walk's job (build.c), not this file's.
 */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

/* FE_KINDS(X), the registered kinds, defined in frontend/modules/. */
#include "frontend/modules/kinds.def"

#define DECLARE(k) extern const FeKind fe_kind_##k;
FE_KINDS(DECLARE)
#undef DECLARE

#define ENTRY(k) &fe_kind_##k,
static const FeKind *const kinds[] = {FE_KINDS(ENTRY)};
#undef ENTRY

enum { NKINDS = sizeof kinds / sizeof kinds[0] };

int fe_kind_count(void) { return NKINDS; }
const FeKind *fe_kind_at(int i) { return i >= 0 && i < NKINDS ? kinds[i] : NULL; }

const FeKind *fe_kind_find(const char *name) {
  for (int i = 0; i < NKINDS; i++)
    if (strcmp(kinds[i]->name, name) == 0) return kinds[i];
  return NULL;
}

const FeField *fe_kind_field(const FeKind *k, const char *name) {
  for (int i = 0; i < k->nfields; i++)
    if (strcmp(k->fields[i].name, name) == 0) return &k->fields[i];
  return NULL;
}

/* ---- '|' separated choice lists ----------------------------------------- */

static bool in_choices(const char *choices, const char *s) {
  size_t n = strlen(s);
  for (const char *p = choices; p && *p;) {
    size_t m = strcspn(p, "|");
    if (m == n && strncmp(p, s, n) == 0) return true;
    p += m;
    if (*p == '|') p++;
  }
  return false;
}

/* Splits choices into a scratch array for suggestions; returns the count. */
static int split_choices(const char *choices, char buf[][32], const char **ptrs, int max) {
  int n = 0;
  for (const char *p = choices; p && *p && n < max;) {
    size_t m = strcspn(p, "|");
    snprintf(buf[n], 32, "%.*s", (int)m, p);
    ptrs[n] = buf[n];
    n++;
    p += m;
    if (*p == '|') p++;
  }
  return n;
}

static void suggest(char *out, size_t n, const char *word, const char *const *cands, int nc) {
  const char *near = fe_nearest(word, cands, nc);
  if (near)
    snprintf(out, n, "; did you mean \"%s\"?", near);
  else
    out[0] = 0;
}

/* ---- field validation --------------------------------------------------- */

typedef struct {
  FeDiag *d;
  const char *file;
} Ctx;

/* A bound as written: a whole number in full ("16777216", not %g's "1.67772e+07"), else %g. */
static const char *bound_text(char *buf, size_t cap, double v) {
  if (v == floor(v) && fabs(v) < 1e18)
    snprintf(buf, cap, "%lld", (long long)v);
  else
    snprintf(buf, cap, "%g", v);
  return buf;
}

static bool check_range(Ctx *c, const char *path, const FeField *f, double v, json_object *raw) {
  if (f->min > f->max) return true;
  if (v >= f->min && v <= f->max) return true;
  char brief[96], lo[32], hi[32];
  fe_json_brief(raw, brief, sizeof brief);
  if (f->max >= 1e300)
    fe_error(c->d, c->file, path, "value %s is out of range (expected >= %s)", brief,
             bound_text(lo, sizeof lo, f->min));
  else
    fe_error(c->d, c->file, path, "value %s is out of range (expected %s to %s)", brief,
             bound_text(lo, sizeof lo, f->min), bound_text(hi, sizeof hi, f->max));
  return false;
}

static int wrong_type(Ctx *c, const char *path, json_object *v, const char *expected) {
  json_type t = json_object_get_type(v);
  if (t == json_type_object || t == json_type_array)
    return fe_error(c->d, c->file, path, "got %s (expected %s)", fe_json_type_name(v), expected);
  char brief[96];
  fe_json_brief(v, brief, sizeof brief);
  return fe_error(c->d, c->file, path, "value %s is %s (expected %s)", brief, fe_json_type_name(v),
                  expected);
}

static json_object *canon_node(Ctx *c, json_object *raw, const char *path, const char *accept);

static int canon_list(Ctx *c, const char *path, json_object *v, json_type want,
                      const char *expected, json_object **out) {
  if (json_object_get_type(v) != json_type_array) return wrong_type(c, path, v, expected);
  int rc = 0;
  for (size_t i = 0; i < json_object_array_length(v); i++) {
    json_object *e = json_object_array_get_idx(v, i);
    if (json_object_get_type(e) != want) {
      char p[512];
      fe_path_join_index(p, sizeof p, path, (int)i);
      rc = wrong_type(c, p, e, want == json_type_int ? "an integer" : "a string");
    }
  }
  if (rc == 0) *out = fe_json_copy(c->d, v);
  return rc;
}

/* One partition spec: [null | "axis" | ["axis", ...], ...]. */
static int check_pspec(Ctx *c, const char *path, json_object *spec) {
  const char *what = "a partition spec: a list of null, an axis name or a list of axis names";
  if (json_object_get_type(spec) != json_type_array) return wrong_type(c, path, spec, what);
  for (size_t i = 0; i < json_object_array_length(spec); i++) {
    json_object *e = json_object_array_get_idx(spec, i);
    char p[512];
    fe_path_join_index(p, sizeof p, path, (int)i);
    json_type t = json_object_get_type(e);
    if (t == json_type_null || t == json_type_string) continue;
    if (t != json_type_array)
      return wrong_type(c, p, e, "null, an axis name or a list of axis names");
    for (size_t j = 0; j < json_object_array_length(e); j++)
      if (json_object_get_type(json_object_array_get_idx(e, j)) != json_type_string)
        return wrong_type(c, p, e, "a list of axis names");
  }
  return 0;
}

static int canon_pspecs(Ctx *c, const char *path, json_object *v, json_object **out) {
  if (json_object_get_type(v) != json_type_object)
    return wrong_type(c, path, v, "an object mapping parameter names to partition specs");
  int rc = 0;
  json_object_object_foreach(v, k, spec) {
    char p[512];
    fe_path_join(p, sizeof p, path, k);
    if (check_pspec(c, p, spec)) rc = -1;
  }
  if (rc == 0) *out = fe_json_copy(c->d, v);
  return rc;
}

static const char *const remat_presets[] = {"none", "full", "save_dots", "save_qkvo",
                                            "offload_dots"};

static int check_regex_list(Ctx *c, const char *path, json_object *list) {
  if (json_object_get_type(list) != json_type_array)
    return wrong_type(c, path, list, "a list of tag regexes");
  for (size_t i = 0; i < json_object_array_length(list); i++) {
    json_object *e = json_object_array_get_idx(list, i);
    char p[512];
    fe_path_join_index(p, sizeof p, path, (int)i);
    if (json_object_get_type(e) != json_type_string) return wrong_type(c, p, e, "a regex string");
    regex_t re;
    if (regcomp(&re, json_object_get_string(e), REG_EXTENDED | REG_NOSUB) != 0)
      return fe_error(c->d, c->file, p, "\"%s\" is not a valid extended regex",
                      json_object_get_string(e));
    regfree(&re);
  }
  return 0;
}

static int canon_remat(Ctx *c, const char *path, json_object *v, json_object **out) {
  int npre = (int)(sizeof remat_presets / sizeof *remat_presets);
  if (json_object_get_type(v) == json_type_string) {
    const char *s = json_object_get_string(v);
    for (int i = 0; i < npre; i++)
      if (strcmp(s, remat_presets[i]) == 0) return *out = fe_json_copy(c->d, v), 0;
    char hint[96];
    suggest(hint, sizeof hint, s, remat_presets, npre);
    return fe_error(c->d, c->file, path,
                    "unknown remat policy \"%s\" (expected none, full, save_dots, save_qkvo, "
                    "offload_dots, or {\"save\": [...], \"offload\": [...]})%s",
                    s, hint);
  }
  if (json_object_get_type(v) != json_type_object)
    return wrong_type(c, path, v, "a remat preset name or {\"save\": [...], \"offload\": [...]}");
  json_object *res = json_object_new_object();
  int rc = 0;
  json_object_object_foreach(v, k, list) {
    char p[512];
    fe_path_join(p, sizeof p, path, k);
    if (strcmp(k, "save") && strcmp(k, "offload"))
      rc = fe_error(c->d, c->file, p,
                    "unknown remat policy field (expected \"save\" or \"offload\")");
    else if (check_regex_list(c, p, list))
      rc = -1;
  }
  for (int i = 0; i < 2 && rc == 0; i++) {
    const char *k = i ? "offload" : "save";
    json_object *list = json_object_object_get(v, k);
    json_object_object_add(res, k, list ? fe_json_copy(c->d, list) : json_object_new_array());
  }
  if (rc)
    json_object_put(res);
  else
    *out = res;
  return rc;
}

static int canon_enum(Ctx *c, const char *path, const FeField *f, json_object *v,
                      json_object **out) {
  if (json_object_get_type(v) != json_type_string) {
    char exp[256];
    snprintf(exp, sizeof exp, "one of %s", f->choices);
    return wrong_type(c, path, v, exp);
  }
  const char *s = json_object_get_string(v);
  if (in_choices(f->choices, s)) return *out = fe_json_copy(c->d, v), 0;
  char buf[16][32];
  const char *ptrs[16];
  int n = split_choices(f->choices, buf, ptrs, 16);
  char hint[96];
  suggest(hint, sizeof hint, s, ptrs, n);
  return fe_error(c->d, c->file, path, "value \"%s\" is not allowed (expected one of %s)%s", s,
                  f->choices, hint);
}

/* Validates one field's value; on success *out is the canonical value
 * (NULL stands for JSON null). */
static int canon_field(Ctx *c, const char *path, const FeField *f, json_object *v,
                       json_object **out) {
  *out = NULL;
  json_type t = json_object_get_type(v);
  switch (f->type) {
  case FT_INT:
    if (t != json_type_int) return wrong_type(c, path, v, "an integer");
    if (!check_range(c, path, f, (double)json_object_get_int64(v), v)) return -1;
    *out = json_object_new_int64(json_object_get_int64(v));
    return 0;
  case FT_FLOAT:
    if (t != json_type_int && t != json_type_double) return wrong_type(c, path, v, "a number");
    if (!isfinite(json_object_get_double(v))) return wrong_type(c, path, v, "a finite number");
    if (!check_range(c, path, f, json_object_get_double(v), v)) return -1;
    *out = json_object_new_double(json_object_get_double(v));
    return 0;
  case FT_BOOL:
    if (t != json_type_boolean) return wrong_type(c, path, v, "true or false");
    *out = json_object_new_boolean(json_object_get_boolean(v));
    return 0;
  case FT_STRING:
    if (t != json_type_string) return wrong_type(c, path, v, "a string");
    *out = fe_json_copy(c->d, v);
    return 0;
  case FT_ENUM: return canon_enum(c, path, f, v, out);
  case FT_CHILD:
    if (t == json_type_null && in_choices(f->choices, "null")) return 0;
    *out = canon_node(c, v, path, f->choices);
    return *out ? 0 : -1;
  case FT_INT_LIST: return canon_list(c, path, v, json_type_int, "a list of integers", out);
  case FT_STRING_LIST: return canon_list(c, path, v, json_type_string, "a list of strings", out);
  case FT_PSPECS: return canon_pspecs(c, path, v, out);
  case FT_REMAT: return canon_remat(c, path, v, out);
  }
  return -1;
}

/* ---- module nodes ------------------------------------------------------- */

static int check_kind(Ctx *c, json_object *raw, const char *path, const char *accept,
                      const FeKind **kind) {
  json_object *kv = NULL;
  if (json_object_get_type(raw) != json_type_object ||
      !json_object_object_get_ex(raw, "kind", &kv)) {
    char exp[320];
    snprintf(exp, sizeof exp, "a module config object with a \"kind\" (one of %s)", accept);
    return wrong_type(c, path, raw, exp);
  }
  char kpath[512];
  fe_path_join(kpath, sizeof kpath, path, "kind");
  if (json_object_get_type(kv) != json_type_string) return wrong_type(c, kpath, kv, "a kind name");
  const char *name = json_object_get_string(kv);
  char buf[32][32];
  const char *ptrs[32];
  const FeKind *k = fe_kind_find(name);
  if (!k) {
    int n = 0;
    for (int i = 0; i < NKINDS; i++) ptrs[n++] = kinds[i]->name;
    char hint[96];
    suggest(hint, sizeof hint, name, ptrs, n);
    return fe_error(c->d, c->file, kpath, "unknown module kind \"%s\"%s", name, hint);
  }
  if (!in_choices(accept, name)) {
    int n = split_choices(accept, buf, ptrs, 32);
    char hint[96];
    suggest(hint, sizeof hint, name, ptrs, n);
    return fe_error(c->d, c->file, kpath, "kind \"%s\" does not fit here (expected one of %s)%s",
                    name, accept, hint);
  }
  *kind = k;
  return 0;
}

static int check_unknown_fields(Ctx *c, json_object *raw, const char *path, const FeKind *k) {
  int rc = 0;
  json_object_object_foreach(raw, key, val) {
    (void)val;
    if (strcmp(key, "kind") == 0 || fe_kind_field(k, key)) continue;
    const char *names[64];
    int n = 0;
    for (int i = 0; i < k->nfields && n < 64; i++) names[n++] = k->fields[i].name;
    char hint[96], p[512];
    suggest(hint, sizeof hint, key, names, n);
    fe_path_join(p, sizeof p, path, key);
    rc = fe_error(c->d, fe_origin_key(raw, key) ? fe_origin_key(raw, key) : c->file, p,
                  "unknown field \"%s\" for kind \"%s\"%s", key, k->name, hint);
  }
  return rc;
}

/* Fills one field from the raw node or its default. */
static int fill_field(Ctx *c, json_object *raw, const char *path, const FeKind *k, const FeField *f,
                      json_object *res) {
  char p[512];
  fe_path_join(p, sizeof p, path, f->name);
  json_object *v = NULL, *out = NULL;
  json_object *dflt = NULL;
  if (!json_object_object_get_ex(raw, f->name, &v)) {
    if (!f->dflt)
      return fe_error(c->d, c->file, p, "missing required field \"%s\" of kind \"%s\" (%s)",
                      f->name, k->name, f->doc);
    dflt = json_tokener_parse(f->dflt);
    v = dflt;
  }
  const char *saved = c->file;
  if (fe_origin_key(raw, f->name)) c->file = fe_origin_key(raw, f->name);
  int rc = canon_field(c, p, f, v, &out);
  c->file = saved;
  json_object_put(dflt);
  if (rc == 0) json_object_object_add(res, f->name, out);
  return rc;
}

static json_object *canon_node(Ctx *c, json_object *raw, const char *path, const char *accept) {
  const char *saved = c->file;
  if (fe_origin(raw)) c->file = fe_origin(raw);
  const FeKind *k = NULL;
  json_object *res = NULL;
  if (check_kind(c, raw, path, accept, &k) == 0) {
    int rc = check_unknown_fields(c, raw, path, k);
    res = json_object_new_object();
    json_object_object_add(res, "kind", json_object_new_string(k->name));
    for (int i = 0; i < k->nfields; i++)
      if (fill_field(c, raw, path, k, &k->fields[i], res)) rc = -1;
    if (rc) {
      json_object_put(res);
      res = NULL;
    } else {
      fe_copy_origin(c->d, res, raw);
    }
  }
  c->file = saved;
  return res;
}

json_object *fe_canonicalize(FeDiag *d, json_object *raw, const char *path, const char *accept) {
  Ctx c = {d, fe_origin(raw)};
  return canon_node(&c, raw, path, accept);
}

/* ---- accessors ---------------------------------------------------------- */

int64_t fe_get_int(json_object *node, const char *field) {
  return json_object_get_int64(json_object_object_get(node, field));
}

double fe_get_float(json_object *node, const char *field) {
  return json_object_get_double(json_object_object_get(node, field));
}

bool fe_get_bool(json_object *node, const char *field) {
  return json_object_get_boolean(json_object_object_get(node, field));
}

const char *fe_get_str(json_object *node, const char *field) {
  return json_object_get_string(json_object_object_get(node, field));
}

json_object *fe_get_child(json_object *node, const char *field) {
  return json_object_object_get(node, field);
}

const char *fe_node_kind(json_object *node) {
  json_object *k = NULL;
  if (json_object_get_type(node) != json_type_object ||
      !json_object_object_get_ex(node, "kind", &k) || json_object_get_type(k) != json_type_string)
    return NULL;
  return json_object_get_string(k);
}
