/* text.c: the IR's text form, printer and parser.
 *
 * One value per line; the printer's output parses back to a structurally equal graph and prints
 * byte-for-byte the same (numbers use the shortest of %.15g/%.17g that reads back exactly):
 *
 *   mesh data=2 model=2
 *   matmul tf32                 (the precision policy of f32 products; absent: f32)
 *   %0 = parameter "w" : f32[4,8] @"/model/linear" #"attention.q_proj"
 *   %2 = dot_general %1, %0 lhs_batch=[] rhs_batch=[] lhs_contract=[1] rhs_contract=[0] : f32[2,8]
 *   output "loss" = %5
 *
 * The parser accepts any non-negative value labels (each defined once, before use), `;` comments
 * and blank lines, and checks every declared type against the op's shape rule. Errors are
 * "line:col: what". Grammar and attribute names: docs/ir.md.
 */
#include "ir/ir.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- attribute table: text name, kind and field, in print order (coupled with IR_A_* bits) ----
 */

typedef enum { AK_LIST, AK_INT, AK_DOUBLE, AK_NAMES } AttrKind;

typedef struct AttrSpec {
  uint32_t bit;
  const char *name;
  AttrKind kind;
  size_t offset; /* of the field in IrAttrs */
} AttrSpec;

static const AttrSpec attr_specs[] = {
    {IR_A_VALUE, "value", AK_DOUBLE, offsetof(IrAttrs, value)},
    {IR_A_AXIS, "axis", AK_INT, offsetof(IrAttrs, axis)},
    {IR_A_BDIMS, "bdims", AK_LIST, offsetof(IrAttrs, axes)},
    {IR_A_PERM, "perm", AK_LIST, offsetof(IrAttrs, axes)},
    {IR_A_AXES, "axes", AK_LIST, offsetof(IrAttrs, axes)},
    {IR_A_START, "start", AK_LIST, offsetof(IrAttrs, lo)},
    {IR_A_LIMIT, "limit", AK_LIST, offsetof(IrAttrs, hi)},
    {IR_A_LOW, "low", AK_LIST, offsetof(IrAttrs, lo)},
    {IR_A_HIGH, "high", AK_LIST, offsetof(IrAttrs, hi)},
    {IR_A_LB, "lhs_batch", AK_LIST, offsetof(IrAttrs, lb)},
    {IR_A_RB, "rhs_batch", AK_LIST, offsetof(IrAttrs, rb)},
    {IR_A_LC, "lhs_contract", AK_LIST, offsetof(IrAttrs, lc)},
    {IR_A_RC, "rhs_contract", AK_LIST, offsetof(IrAttrs, rc)},
    {IR_A_ROWS, "rows", AK_INT, offsetof(IrAttrs, k)},
    {IR_A_K, "k", AK_INT, offsetof(IrAttrs, k)},
    {IR_A_MESH, "mesh_axes", AK_NAMES, 0},
    {IR_A_SPLIT, "split_axis", AK_INT, offsetof(IrAttrs, axis)},
    {IR_A_CAT, "concat_axis", AK_INT, offsetof(IrAttrs, axis2)},
    {IR_A_CAUSAL, "causal", AK_INT, offsetof(IrAttrs, k)},
    {IR_A_SCALE, "scale", AK_DOUBLE, offsetof(IrAttrs, value)},
    {IR_A_PEER, "peer", AK_INT, offsetof(IrAttrs, k)},
};
enum { NATTR = sizeof attr_specs / sizeof attr_specs[0] };

/* ---- printing into a growable buffer ---- */

typedef struct Buf {
  char *s;
  size_t len, cap;
} Buf;

static void buf_printf(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
    b->s = base_xrealloc(b->s, cap);
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static void print_number(Buf *b, double x) {
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%.15g", x);
  if (strtod(tmp, NULL) != x && !isnan(x)) snprintf(tmp, sizeof tmp, "%.17g", x);
  if (isnan(x)) snprintf(tmp, sizeof tmp, "nan");
  buf_printf(b, "%s", tmp);
}

static void print_string(Buf *b, const char *s) {
  buf_printf(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      buf_printf(b, "\\%c", c);
    else if (c == '\n')
      buf_printf(b, "\\n");
    else if (c < 0x20 || c == 0x7f)
      buf_printf(b, "\\x%02x", c);
    else
      buf_printf(b, "%c", c);
  }
  buf_printf(b, "\"");
}

static void print_list(Buf *b, const IrDims *d) {
  buf_printf(b, "[");
  for (int32_t i = 0; i < d->n; i++) buf_printf(b, "%s%lld", i ? "," : "", (long long)d->v[i]);
  buf_printf(b, "]");
}

static void print_attr(Buf *b, const IrValue *v, const AttrSpec *a) {
  const char *field = (const char *)&v->attr + a->offset;
  if (a->bit == IR_A_VALUE && v->attr.data) {
    buf_printf(b, " data=[");
    for (int64_t i = 0, n = ir_shape_numel(&v->shape); i < n; i++) {
      if (i) buf_printf(b, ",");
      print_number(b, v->attr.data[i]);
    }
    buf_printf(b, "]");
    return;
  }
  buf_printf(b, " %s=", a->name);
  switch (a->kind) {
  case AK_LIST: print_list(b, (const IrDims *)(const void *)field); break;
  case AK_INT: buf_printf(b, "%lld", (long long)*(const int64_t *)(const void *)field); break;
  case AK_DOUBLE: print_number(b, *(const double *)(const void *)field); break;
  case AK_NAMES:
    buf_printf(b, "[");
    for (int32_t i = 0; i < v->attr.nmesh; i++)
      buf_printf(b, "%s%s", i ? "," : "", v->attr.mesh[i]);
    buf_printf(b, "]");
  }
}

static void print_value(Buf *b, const IrGraph *g, int32_t i) {
  const IrValue *v = &g->values[i];
  buf_printf(b, "%%%d = %s", i, ir_op_name(v->op));
  if (ir_op_attrs(v->op) & IR_A_NAME) {
    buf_printf(b, " ");
    print_string(b, v->name);
  }
  for (int32_t k = 0; k < v->nops; k++) buf_printf(b, "%s%%%d", k ? ", " : " ", v->ops[k]);
  for (int k = 0; k < NATTR; k++)
    if (ir_op_attrs(v->op) & attr_specs[k].bit) print_attr(b, v, &attr_specs[k]);
  buf_printf(b, " : %s[", ir_dtype_name(v->dtype));
  for (int32_t d = 0; d < v->shape.rank; d++)
    buf_printf(b, "%s%lld", d ? "," : "", (long long)v->shape.dims[d]);
  buf_printf(b, "]");
  if (ir_split_any(&v->split)) { /* after pass_shard: which chunk of the global value this is */
    buf_printf(b, " split=[");
    for (int32_t d = 0; d < v->shape.rank; d++) {
      buf_printf(b, "%s", d ? "," : "");
      if (!v->split.axes[d][0]) buf_printf(b, "_");
      for (int32_t k = 0; k < IR_MAX_SPLIT_AXES && v->split.axes[d][k]; k++)
        buf_printf(b, "%s%s", k ? "." : "", g->mesh.names[v->split.axes[d][k] - 1]);
    }
    buf_printf(b, "]");
  }
  if (v->stage > 0) buf_printf(b, " stage=%d", v->stage - 1);
  if (*v->origin) {
    buf_printf(b, " @");
    print_string(b, v->origin);
  }
  if (*v->tag) {
    buf_printf(b, " #");
    print_string(b, v->tag);
  }
  buf_printf(b, "\n");
}

char *ir_graph_to_string(const IrGraph *g) {
  Buf b = {0};
  buf_printf(&b, "%s", "");
  if (g->mesh.naxes) {
    buf_printf(&b, "mesh");
    for (int32_t i = 0; i < g->mesh.naxes; i++)
      buf_printf(&b, " %s=%lld", g->mesh.names[i], (long long)g->mesh.sizes[i]);
    buf_printf(&b, "\n");
  }
  if (g->matmul == IR_MATMUL_TF32) buf_printf(&b, "matmul tf32\n");
  int32_t stages = 0; /* a pipeline's program: the values of every device, then each stage's */
  for (int32_t i = 0; i < g->nvalues; i++)
    if (g->values[i].stage > stages) stages = g->values[i].stage;
  for (int32_t s = stages ? 0 : -1; s <= stages; s++) {
    if (stages) buf_printf(&b, s ? "# stage %d\n" : "# every device\n", s - 1);
    for (int32_t i = 0; i < g->nvalues; i++)
      if (!stages || g->values[i].stage == s) print_value(&b, g, i);
    if (!stages) break;
  }
  for (int32_t i = 0; i < g->noutputs; i++) {
    buf_printf(&b, "output ");
    print_string(&b, g->outputs[i].name);
    buf_printf(&b, " = %%%d\n", g->outputs[i].value);
  }
  return b.s;
}

int ir_graph_print(const IrGraph *g, FILE *out) {
  char *s = ir_graph_to_string(g);
  size_t n = strlen(s);
  int st = fwrite(s, 1, n, out) == n ? IR_OK : IR_ERR;
  free(s);
  return st;
}

/* ---- parser ---- */

typedef struct Label {
  int64_t label;
  int32_t value;
} Label;

typedef struct Parser {
  const char *p, *line_start;
  int line;
  IrGraph *g;
  Label *labels; /* open-addressing hash: label -> value index */
  size_t nlabels_cap;
  char *msg;
  size_t cap;
  bool failed;
} Parser;

static int perr(Parser *ps, const char *fmt, ...) {
  if (ps->failed) return IR_ERR;
  ps->failed = true;
  int n = snprintf(ps->msg, ps->cap, "%d:%d: ", ps->line, (int)(ps->p - ps->line_start) + 1);
  if (n >= 0 && (size_t)n < ps->cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->msg + n, ps->cap - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return IR_ERR;
}

static void skip_blank(Parser *ps) { /* spaces and comments, not newlines */
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r') ps->p++;
  if (*ps->p == ';')
    while (*ps->p && *ps->p != '\n') ps->p++;
}

static bool accept(Parser *ps, char c) {
  skip_blank(ps);
  if (*ps->p != c) return false;
  ps->p++;
  return true;
}

static int expect(Parser *ps, char c) {
  if (accept(ps, c)) return IR_OK;
  return perr(ps, "expected '%c'", c);
}

static size_t ident(Parser *ps, const char **start) {
  skip_blank(ps);
  *start = ps->p;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_' || *ps->p == '.' || *ps->p == '-') ps->p++;
  return (size_t)(ps->p - *start);
}

static int parse_int(Parser *ps, int64_t *out) {
  skip_blank(ps);
  char *end;
  long long x = strtoll(ps->p, &end, 10);
  if (end == ps->p) return perr(ps, "expected an integer");
  ps->p = end;
  *out = x;
  return IR_OK;
}

static int parse_double(Parser *ps, double *out) {
  skip_blank(ps);
  char *end;
  *out = strtod(ps->p, &end);
  if (end == ps->p) return perr(ps, "expected a number");
  ps->p = end;
  return IR_OK;
}

static int parse_escape(Parser *ps, char *c) {
  char e = *ps->p++;
  if (e == 'n')
    *c = '\n';
  else if (e == '"' || e == '\\')
    *c = e;
  else if (e == 'x' && isxdigit((unsigned char)ps->p[0]) && isxdigit((unsigned char)ps->p[1])) {
    char hex[3] = {ps->p[0], ps->p[1], 0};
    *c = (char)strtol(hex, NULL, 16);
    ps->p += 2;
  } else
    return perr(ps, "unknown escape '\\%c'", e);
  return IR_OK;
}

/* Parses "..." into buf (NUL-terminated). */
static int parse_string(Parser *ps, char *buf, size_t cap) {
  if (expect(ps, '"')) return IR_ERR;
  size_t n = 0;
  while (*ps->p != '"') {
    if (!*ps->p || *ps->p == '\n') return perr(ps, "unterminated string");
    char c = *ps->p++;
    if (c == '\\' && parse_escape(ps, &c)) return IR_ERR;
    if (n + 1 >= cap) return perr(ps, "string too long");
    buf[n++] = c;
  }
  ps->p++;
  buf[n] = 0;
  return IR_OK;
}

static int parse_list(Parser *ps, IrDims *d) {
  d->n = 0;
  if (expect(ps, '[')) return IR_ERR;
  if (accept(ps, ']')) return IR_OK;
  do {
    if (d->n == IR_MAX_RANK) return perr(ps, "more than %d entries", IR_MAX_RANK);
    if (parse_int(ps, &d->v[d->n++])) return IR_ERR;
  } while (accept(ps, ','));
  return expect(ps, ']');
}

static int parse_names(Parser *ps, IrAttrs *a, char (*names)[IR_MAX_AXIS_NAME]) {
  a->nmesh = 0;
  if (expect(ps, '[')) return IR_ERR;
  if (accept(ps, ']')) return IR_OK;
  do {
    const char *s;
    size_t n = ident(ps, &s);
    if (!n || n >= IR_MAX_AXIS_NAME) return perr(ps, "expected a mesh axis name");
    if (a->nmesh == IR_MAX_MESH_AXES) return perr(ps, "too many mesh axes");
    memcpy(names[a->nmesh], s, n);
    names[a->nmesh][n] = 0;
    a->mesh[a->nmesh] = names[a->nmesh];
    a->nmesh++;
  } while (accept(ps, ','));
  return expect(ps, ']');
}

/* data=[...] grows a malloc'd array; the caller frees it. */
static int parse_data(Parser *ps, double **data, int64_t *n) {
  size_t cap = 16;
  *n = 0;
  *data = base_xmalloc(cap * sizeof **data);
  if (expect(ps, '[')) return IR_ERR;
  if (accept(ps, ']')) return IR_OK;
  do {
    if ((size_t)*n == cap) *data = base_xrealloc(*data, (cap *= 2) * sizeof **data);
    if (parse_double(ps, &(*data)[(*n)++])) return IR_ERR;
  } while (accept(ps, ','));
  return expect(ps, ']');
}

/* ---- label map ---- */

static size_t label_hash(int64_t label, size_t cap) {
  return (size_t)((uint64_t)label * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static int32_t label_find(const Parser *ps, int64_t label) {
  if (!ps->nlabels_cap) return IR_NONE;
  for (size_t h = label_hash(label, ps->nlabels_cap);; h = (h + 1) & (ps->nlabels_cap - 1)) {
    if (ps->labels[h].value == IR_NONE) return IR_NONE;
    if (ps->labels[h].label == label) return ps->labels[h].value;
  }
}

static void label_add(Parser *ps, int64_t label, int32_t value) {
  if ((size_t)value * 2 + 2 > ps->nlabels_cap) { /* keep the load under one half */
    size_t cap = ps->nlabels_cap ? ps->nlabels_cap * 2 : 64;
    Label *old = ps->labels;
    size_t oldcap = ps->nlabels_cap;
    ps->labels = base_xmalloc(cap * sizeof *ps->labels);
    for (size_t i = 0; i < cap; i++) ps->labels[i].value = IR_NONE;
    ps->nlabels_cap = cap;
    for (size_t i = 0; i < oldcap; i++)
      if (old[i].value != IR_NONE) label_add(ps, old[i].label, old[i].value);
    free(old);
  }
  size_t h = label_hash(label, ps->nlabels_cap);
  while (ps->labels[h].value != IR_NONE) h = (h + 1) & (ps->nlabels_cap - 1);
  ps->labels[h] = (Label){label, value};
}

static int parse_ref(Parser *ps, int32_t *v) {
  int64_t label = 0;
  skip_blank(ps);
  const char *at = ps->p;
  if (expect(ps, '%') || parse_int(ps, &label)) return IR_ERR;
  *v = label_find(ps, label);
  if (*v == IR_NONE)
    return ps->p = at, perr(ps, "%%%lld is not defined before this use", (long long)label);
  return IR_OK;
}

/* ---- lines ---- */

typedef struct ValueText { /* what one value line holds besides the IrValue */
  char name[256], origin[1024], tag[256];
  char mesh_names[IR_MAX_MESH_AXES][IR_MAX_AXIS_NAME];
  int32_t ops[256];
  double *data;
  int64_t ndata;
} ValueText;

static const AttrSpec *attr_lookup(const char *s, size_t n) {
  for (int k = 0; k < NATTR; k++)
    if (strlen(attr_specs[k].name) == n && memcmp(attr_specs[k].name, s, n) == 0)
      return &attr_specs[k];
  return NULL;
}

static int parse_attr(Parser *ps, IrValue *v, ValueText *t) {
  const char *key;
  size_t n = ident(ps, &key);
  if (!n) return perr(ps, "expected an attribute or ':'");
  if (expect(ps, '=')) return IR_ERR;
  if (n == 4 && memcmp(key, "data", 4) == 0 && v->op == IR_CONSTANT && !t->data)
    return parse_data(ps, &t->data, &t->ndata);
  const AttrSpec *a = attr_lookup(key, n);
  if (!a || !(ir_op_attrs(v->op) & a->bit))
    return ps->p = key, perr(ps, "%s has no attribute '%.*s'", ir_op_name(v->op), (int)n, key);
  char *field = (char *)&v->attr + a->offset;
  switch (a->kind) {
  case AK_LIST: return parse_list(ps, (IrDims *)(void *)field);
  case AK_INT: return parse_int(ps, (int64_t *)(void *)field);
  case AK_DOUBLE: return parse_double(ps, (double *)(void *)field);
  default: return parse_names(ps, &v->attr, t->mesh_names);
  }
}

static int parse_type(Parser *ps, IrValue *v) {
  const char *s;
  size_t n = ident(ps, &s);
  if (ir_dtype_lookup(s, n, &v->dtype))
    return ps->p = s, perr(ps, "unknown dtype '%.*s'", (int)n, s);
  IrDims d;
  if (parse_list(ps, &d)) return IR_ERR;
  v->shape = ir_shape_make(d.n, d.v);
  return IR_OK;
}

static int parse_operands(Parser *ps, IrValue *v, ValueText *t) {
  skip_blank(ps);
  while (*ps->p == '%') {
    if (v->nops == (int32_t)(sizeof t->ops / sizeof t->ops[0]))
      return perr(ps, "too many operands");
    if (parse_ref(ps, &t->ops[v->nops++])) return IR_ERR;
    if (!accept(ps, ',')) break;
    skip_blank(ps);
  }
  v->ops = t->ops;
  return IR_OK;
}

/* split=[data.expert,_,model]: per dim, '_' or mesh axis names joined by '.' */
static int parse_split(Parser *ps, IrValue *v) {
  if (expect(ps, '=') || expect(ps, '[')) return IR_ERR;
  for (int32_t d = 0;; d++) {
    if (d == v->shape.rank) return perr(ps, "split has more entries than the type has dims");
    const char *s;
    size_t n = ident(ps, &s);
    if (!n) return perr(ps, "expected mesh axis names or '_'");
    for (int32_t k = 0; !(n == 1 && *s == '_');) { /* names joined by '.', major first */
      size_t len = 0;
      while (len < n && s[len] != '.') len++;
      if (k == IR_MAX_SPLIT_AXES)
        return perr(ps, "more than %d axes split one dim", IR_MAX_SPLIT_AXES);
      int a = -1;
      for (int32_t i = 0; i < ps->g->mesh.naxes; i++)
        if (strlen(ps->g->mesh.names[i]) == len && memcmp(ps->g->mesh.names[i], s, len) == 0) a = i;
      if (a < 0)
        return ps->p = s, perr(ps, "'%.*s' is not an axis of the graph's mesh", (int)len, s);
      v->split.axes[d][k++] = (uint8_t)(a + 1);
      if (len == n) break;
      s += len + 1;
      n -= len + 1;
    }
    skip_blank(ps);
    if (accept(ps, ']')) {
      if (d + 1 != v->shape.rank)
        return perr(ps, "split has %d entries, the type has %d dims", d + 1, v->shape.rank);
      return IR_OK;
    }
    if (expect(ps, ',')) return IR_ERR;
  }
}

static int parse_suffix(Parser *ps, IrValue *v, ValueText *t) {
  v->origin = "";
  v->tag = "";
  skip_blank(ps);
  if (strncmp(ps->p, "split", 5) == 0) {
    ps->p += 5;
    if (parse_split(ps, v)) return IR_ERR;
  }
  if (accept(ps, '@')) {
    if (parse_string(ps, t->origin, sizeof t->origin)) return IR_ERR;
    v->origin = t->origin;
  }
  if (accept(ps, '#')) {
    if (parse_string(ps, t->tag, sizeof t->tag)) return IR_ERR;
    v->tag = t->tag;
  }
  return IR_OK;
}

static int parse_value_body(Parser *ps, IrValue *v, ValueText *t) {
  const char *s;
  size_t n = ident(ps, &s);
  if (ir_op_lookup(s, n, &v->op)) return ps->p = s, perr(ps, "unknown op '%.*s'", (int)n, s);
  if (ir_op_attrs(v->op) & IR_A_NAME) {
    skip_blank(ps);
    if (parse_string(ps, t->name, sizeof t->name)) return IR_ERR;
    v->name = t->name;
  }
  if (parse_operands(ps, v, t)) return IR_ERR;
  while (!accept(ps, ':'))
    if (parse_attr(ps, v, t)) return IR_ERR;
  if (parse_type(ps, v) || parse_suffix(ps, v, t)) return IR_ERR;
  if (t->data && t->ndata != ir_shape_numel(&v->shape))
    return perr(ps, "data has %lld values, the type has %lld", (long long)t->ndata,
                (long long)ir_shape_numel(&v->shape));
  v->attr.data = t->data;
  return IR_OK;
}

/* Adds the value and checks the declared type against the rule's. */
static int add_parsed(Parser *ps, const IrValue *v, int64_t label, const char *at) {
  int32_t i = ir_graph_add(ps->g, v);
  const char *save = ps->p;
  ps->p = at;
  if (i == IR_NONE) return perr(ps, "%s", ir_graph_error(ps->g));
  const IrValue *got = &ps->g->values[i];
  if (got->dtype != v->dtype || !ir_shape_eq(&got->shape, &v->shape))
    return perr(ps, "declared type does not match %s's rule (%s, rank %d)", ir_op_name(v->op),
                ir_dtype_name(got->dtype), got->shape.rank);
  ps->p = save;
  label_add(ps, label, i);
  return IR_OK;
}

static int parse_value(Parser *ps) {
  const char *at = ps->p;
  int64_t label = 0;
  ps->p++; /* '%' */
  if (parse_int(ps, &label)) return IR_ERR;
  if (label < 0) return perr(ps, "negative label");
  if (label_find(ps, label) != IR_NONE) return perr(ps, "%%%lld defined twice", (long long)label);
  if (expect(ps, '=')) return IR_ERR;
  IrValue v;
  memset(&v, 0, sizeof v);
  ValueText *t = base_xcalloc(1, sizeof *t);
  int st = parse_value_body(ps, &v, t);
  if (st == IR_OK) st = add_parsed(ps, &v, label, at);
  free(t->data);
  free(t);
  return st;
}

static int parse_output(Parser *ps) {
  char name[1024];
  int32_t v;
  if (parse_string(ps, name, sizeof name) || expect(ps, '=') || parse_ref(ps, &v)) return IR_ERR;
  if (ir_graph_add_output(ps->g, name, v)) return perr(ps, "%s", ir_graph_error(ps->g));
  return IR_OK;
}

static int parse_mesh(Parser *ps) {
  IrMesh m;
  memset(&m, 0, sizeof m);
  for (skip_blank(ps); *ps->p && *ps->p != '\n'; skip_blank(ps)) {
    const char *s;
    size_t n = ident(ps, &s);
    if (!n || n >= IR_MAX_AXIS_NAME) return perr(ps, "expected a mesh axis name");
    if (m.naxes == IR_MAX_MESH_AXES) return perr(ps, "too many mesh axes");
    memcpy(m.names[m.naxes], s, n);
    if (expect(ps, '=') || parse_int(ps, &m.sizes[m.naxes])) return IR_ERR;
    m.naxes++;
  }
  if (ps->g->nvalues) return perr(ps, "mesh must come before the values");
  if (ir_graph_set_mesh(ps->g, &m)) return perr(ps, "%s", ir_graph_error(ps->g));
  return IR_OK;
}

/* `matmul f32|tf32`: the graph's IrMatmul. */
static int parse_matmul(Parser *ps) {
  skip_blank(ps);
  const char *s;
  size_t n = ident(ps, &s);
  if (n == 3 && !memcmp(s, "f32", 3))
    ps->g->matmul = IR_MATMUL_F32;
  else if (n == 4 && !memcmp(s, "tf32", 4))
    ps->g->matmul = IR_MATMUL_TF32;
  else
    return perr(ps, "expected matmul f32 or tf32");
  if (ps->g->nvalues) return perr(ps, "matmul must come before the values");
  return IR_OK;
}

static int parse_line(Parser *ps) {
  skip_blank(ps);
  if (!*ps->p || *ps->p == '\n') return IR_OK;
  if (*ps->p == '%') return parse_value(ps);
  const char *s;
  size_t n = ident(ps, &s);
  if (n == 6 && memcmp(s, "output", 6) == 0) return parse_output(ps);
  if (n == 4 && memcmp(s, "mesh", 4) == 0) return parse_mesh(ps);
  if (n == 6 && memcmp(s, "matmul", 6) == 0) return parse_matmul(ps);
  ps->p = s;
  return perr(ps, "expected '%%N = ...', 'output', 'mesh' or 'matmul'");
}

IrGraph *ir_graph_parse(const char *text, char *msg, size_t cap) {
  char dummy[8];
  Parser ps = {.p = text,
               .line_start = text,
               .line = 1,
               .msg = msg ? msg : dummy,
               .cap = msg ? cap : sizeof dummy};
  ps.g = ir_graph_new();
  while (!ps.failed) {
    if (parse_line(&ps)) break;
    skip_blank(&ps);
    if (!*ps.p) break;
    if (*ps.p != '\n') {
      perr(&ps, "unexpected '%c' at end of line", *ps.p);
      break;
    }
    ps.p++;
    ps.line++;
    ps.line_start = ps.p;
  }
  free(ps.labels);
  if (!ps.failed) return ps.g;
  ir_graph_free(ps.g);
  return NULL;
}
