/* graph.c: the graph container, its arena, outputs, errors and the one entry point that appends
 * a value (ir_graph_add).
 *
 * Invariants: values[0..nvalues) are in topological order (operands precede users); every string
 * pointer in a value is non-NULL and lives in the arena; the first error recorded stays until
 * ir_graph_clear_error. The values array grows by realloc, so hold indices, not IrValue pointers,
 * across calls that add values.
 */
#include "ir/ir.h"
#include "runtime/axrt.h" /* rt_mesh_coords: the one device numbering */

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena: a list of blocks, bump allocation, freed together ---- */

typedef struct ArenaBlock {
  struct ArenaBlock *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} ArenaBlock;

struct IrArena {
  ArenaBlock *head;
};

enum { ARENA_BLOCK = 64 * 1024 };

void *ir_graph_alloc(IrGraph *g, size_t size) {
  size = (size + 15) & ~(size_t)15;
  ArenaBlock *b = g->arena->head;
  if (!b || b->cap - b->used < size) {
    size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
    b = base_xmalloc(sizeof *b + cap);
    b->next = g->arena->head;
    b->used = 0;
    b->cap = cap;
    g->arena->head = b;
  }
  void *p = b->data + b->used;
  b->used += size;
  memset(p, 0, size);
  return p;
}

/* Interning keeps repeated origins/tags to one copy only within a block scan of the recent
 * values; exact dedup is not needed for correctness. */
const char *ir_graph_intern(IrGraph *g, const char *s) {
  if (!s || !*s) return "";
  for (int32_t i = g->nvalues - 1; i >= 0 && i >= g->nvalues - 8; i--) {
    if (strcmp(g->values[i].origin, s) == 0) return g->values[i].origin;
    if (strcmp(g->values[i].tag, s) == 0) return g->values[i].tag;
  }
  size_t n = strlen(s) + 1;
  return memcpy(ir_graph_alloc(g, n), s, n);
}

/* ---- graph lifetime and errors ---- */

IrGraph *ir_graph_new(void) {
  IrGraph *g = base_xcalloc(1, sizeof *g);
  g->arena = base_xcalloc(1, sizeof *g->arena);
  g->origin = "";
  g->tag = "";
  return g;
}

void ir_graph_free(IrGraph *g) {
  if (!g) return;
  for (ArenaBlock *b = g->arena->head, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(g->arena);
  free(g->values);
  free(g->outputs);
  free(g->outindex);
  free(g->leafindex);
  free(g);
}

const char *ir_graph_error(const IrGraph *g) { return g->error[0] ? g->error : NULL; }
void ir_graph_clear_error(IrGraph *g) { g->error[0] = 0; }

int ir_graph_fail(IrGraph *g, const char *fmt, ...) {
  if (g->error[0]) return IR_ERR;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->error, sizeof g->error, fmt, ap);
  va_end(ap);
  if (!g->error[0]) snprintf(g->error, sizeof g->error, "error");
  return IR_ERR;
}

void ir_graph_set_origin(IrGraph *g, const char *path) { g->origin = ir_graph_intern(g, path); }

void ir_graph_set_tag(IrGraph *g, const char *tag) { g->tag = ir_graph_intern(g, tag); }

void ir_graph_replace(IrGraph *g, IrGraph *ng) {
  ir_graph_set_origin(ng, g->origin);
  ir_graph_set_tag(ng, g->tag);
  IrGraph tmp = *g;
  *g = *ng;
  *ng = tmp;
}

void ir_value_set_tag(IrGraph *g, int32_t v, const char *tag) {
  if (v < 0 || v >= g->nvalues) return;
  g->values[v].tag = ir_graph_intern(g, tag);
}

void ir_value_set_origin(IrGraph *g, int32_t v, const char *path) {
  if (v < 0 || v >= g->nvalues) return;
  g->values[v].origin = ir_graph_intern(g, path);
}

int ir_graph_set_mesh(IrGraph *g, const IrMesh *mesh) {
  if (mesh->naxes < 0 || mesh->naxes > IR_MAX_MESH_AXES)
    return ir_graph_fail(g, "mesh: %d axes (at most %d)", mesh->naxes, IR_MAX_MESH_AXES);
  for (int32_t i = 0; i < mesh->naxes; i++) {
    if (mesh->sizes[i] < 1 || !mesh->names[i][0])
      return ir_graph_fail(g, "mesh: axis %d needs a name and a size >= 1", i);
    if (ir_mesh_axis(mesh, mesh->names[i]) != i)
      return ir_graph_fail(g, "mesh: axis name '%s' repeats", mesh->names[i]);
  }
  g->mesh = *mesh;
  return IR_OK;
}

/* ---- appending values ---- */

void ir_graph_reserve(IrGraph *g, int32_t n) {
  if (n <= g->cap) return;
  g->values = base_xrealloc(g->values, (size_t)n * sizeof *g->values);
  g->cap = n;
}

static void graph_reserve(IrGraph *g) {
  if (g->nvalues < g->cap) return;
  ir_graph_reserve(g, g->cap ? g->cap * 2 : 64);
}

static int value_check_operands(IrGraph *g, const IrValue *v) {
  int32_t arity = ir_op_arity(v->op);
  if (arity >= 0 ? v->nops != arity : v->nops < 1)
    return ir_graph_fail(g, "%%%d (%s) at %s: %d operands, expected %d", g->nvalues,
                         ir_op_name(v->op), *g->origin ? g->origin : "?", v->nops, arity);
  for (int32_t i = 0; i < v->nops; i++) {
    if (v->ops[i] < 0 || v->ops[i] >= g->nvalues)
      return ir_graph_fail(g, "%%%d (%s) at %s: operand %d is %%%d, not an earlier value",
                           g->nvalues, ir_op_name(v->op), *g->origin ? g->origin : "?", i,
                           v->ops[i]);
  }
  return IR_OK;
}

/* Copies proto's strings, operand list and constant data into the arena. */
static int value_copy_in(IrGraph *g, IrValue *dst, const IrValue *proto) {
  *dst = *proto;
  int32_t *ops = ir_graph_alloc(g, (size_t)(proto->nops ? proto->nops : 1) * sizeof *ops);
  dst->name = ir_graph_intern(g, proto->name);
  dst->origin = proto->origin ? ir_graph_intern(g, proto->origin) : g->origin;
  dst->tag = proto->tag ? ir_graph_intern(g, proto->tag) : g->tag;
  if (proto->nops) memcpy(ops, proto->ops, (size_t)proto->nops * sizeof *ops);
  dst->ops = ops;
  for (int32_t i = 0; i < proto->attr.nmesh; i++)
    dst->attr.mesh[i] = ir_graph_intern(g, proto->attr.mesh[i]);
  if (proto->attr.data) {
    IrShape sh = proto->shape;
    bool ok = sh.rank >= 0 && sh.rank <= IR_MAX_RANK;
    int64_t numel = 1;
    for (int32_t i = 0; ok && i < sh.rank; i++) {
      ok = sh.dims[i] >= 0 && sh.dims[i] <= ((int64_t)1 << 31);
      numel *= ok ? sh.dims[i] : 1;
      ok = ok && numel <= ((int64_t)1 << 31);
    }
    if (!ok) return ir_graph_fail(g, "%%%d (constant): bad shape for data", g->nvalues);
    size_t n = (size_t)ir_shape_numel(&proto->shape) * sizeof(double);
    double *d = ir_graph_alloc(g, n ? n : 1);
    memcpy(d, proto->attr.data, n);
    dst->attr.data = d;
  }
  return IR_OK;
}

static void leaf_index_add(IrGraph *g, int32_t v);

int32_t ir_graph_add(IrGraph *g, const IrValue *proto) {
  for (int32_t i = 0; i < proto->nops; i++)
    if (proto->ops[i] == IR_NONE) return IR_NONE; /* an earlier builder call failed */
  if (proto->op >= IR_OP_COUNT) {
    ir_graph_fail(g, "%%%d: unknown op %d", g->nvalues, (int)proto->op);
    return IR_NONE;
  }
  if (value_check_operands(g, proto)) return IR_NONE;
  graph_reserve(g);
  IrValue v;
  if (value_copy_in(g, &v, proto)) return IR_NONE;
  char msg[IR_ERR_LEN];
  if (ir_value_infer(g, &v, &v.dtype, &v.shape, msg, sizeof msg)) {
    ir_graph_fail(g, "%%%d (%s) at %s: %s", g->nvalues, ir_op_name(v.op),
                  *v.origin ? v.origin : "?", msg);
    return IR_NONE;
  }
  g->values[g->nvalues] = v;
  if (v.op == IR_PARAMETER || v.op == IR_INPUT) leaf_index_add(g, g->nvalues);
  return g->nvalues++;
}

/* ---- outputs and lookup ---- */

/* A step graph has a few outputs per parameter, tens of thousands in a deep model, so names are
 * found through a hash index (open addressing, at most half full), not a scan per output. */
static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* The index slot of `name`: its output, or the free slot where it would go. */
static int32_t *out_slot(const IrGraph *g, const char *name) {
  uint32_t mask = (uint32_t)g->outindex_cap - 1;
  for (uint32_t h = name_hash(name) & mask;; h = (h + 1) & mask) {
    int32_t *slot = &g->outindex[h];
    if (*slot < 0 || strcmp(g->outputs[*slot].name, name) == 0) return slot;
  }
}

/* Makes room in the index for one more output. */
static void out_index_reserve(IrGraph *g) {
  if (2 * ((int64_t)g->noutputs + 1) <= g->outindex_cap) return;
  int32_t cap = g->outindex_cap ? 2 * g->outindex_cap : 16;
  int32_t *index = base_xmalloc((size_t)cap * sizeof *index);
  for (int32_t i = 0; i < cap; i++) index[i] = -1;
  free(g->outindex);
  g->outindex = index;
  g->outindex_cap = cap;
  for (int32_t i = 0; i < g->noutputs; i++) *out_slot(g, g->outputs[i].name) = i;
}

int32_t ir_graph_add_mapped(IrGraph *ng, const IrGraph *g, int32_t v, const int32_t *map) {
  IrValue x = g->values[v];
  int32_t small[64], *o = small, *big = NULL;
  if (x.nops > 64) o = big = base_xmalloc((size_t)x.nops * sizeof *big);
  for (int32_t k = 0; k < x.nops; k++) o[k] = map[x.ops[k]];
  x.ops = o;
  int32_t r = ir_graph_add(ng, &x);
  free(big);
  return r;
}

int ir_graph_add_output(IrGraph *g, const char *name, int32_t v) {
  if (v < 0 || v >= g->nvalues) return ir_graph_fail(g, "output '%s': no value %%%d", name, v);
  out_index_reserve(g);
  int32_t *slot = out_slot(g, name);
  if (*slot >= 0) return ir_graph_fail(g, "output '%s' defined twice", name);
  if (g->noutputs == g->outcap) {
    int32_t cap = g->outcap ? g->outcap * 2 : 8;
    g->outputs = base_xrealloc(g->outputs, (size_t)cap * sizeof *g->outputs);
    g->outcap = cap;
  }
  const char *s = ir_graph_intern(g, name);
  *slot = g->noutputs;
  g->outputs[g->noutputs++] = (IrOutput){s, v};
  return IR_OK;
}

int32_t ir_graph_output(const IrGraph *g, const char *name) {
  if (g->outindex_cap == 0) return IR_NONE;
  int32_t i = *out_slot(g, name);
  return i < 0 ? IR_NONE : g->outputs[i].value;
}

/* Parameters and inputs by (op, name), through a hash index as for outputs: passes look a
 * parameter up per output, and a deep model has tens of thousands of each. */
static uint32_t leaf_hash(IrOp op, const char *name) {
  return name_hash(name) * 31u + (uint32_t)op;
}

static int32_t *leaf_slot(const IrGraph *g, IrOp op, const char *name) {
  uint32_t mask = (uint32_t)g->leafindex_cap - 1;
  for (uint32_t h = leaf_hash(op, name) & mask;; h = (h + 1) & mask) {
    int32_t *slot = &g->leafindex[h];
    if (*slot < 0 || (g->values[*slot].op == op && strcmp(g->values[*slot].name, name) == 0))
      return slot;
  }
}

static void leaf_index_add(IrGraph *g, int32_t v) {
  if (2 * ((int64_t)g->nleaves + 1) > g->leafindex_cap) {
    int32_t cap = g->leafindex_cap ? 2 * g->leafindex_cap : 64;
    int32_t *index = base_xmalloc((size_t)cap * sizeof *index);
    for (int32_t i = 0; i < cap; i++) index[i] = -1;
    int32_t *old = g->leafindex, oldcap = g->leafindex_cap;
    g->leafindex = index;
    g->leafindex_cap = cap;
    for (int32_t i = 0; i < oldcap; i++)
      if (old[i] >= 0) *leaf_slot(g, g->values[old[i]].op, g->values[old[i]].name) = old[i];
    free(old);
  }
  int32_t *slot = leaf_slot(g, g->values[v].op, g->values[v].name);
  if (*slot < 0) { /* the first of a name stays the one found */
    *slot = v;
    g->nleaves++;
  }
}

int32_t ir_graph_find(const IrGraph *g, IrOp op, const char *name) {
  if (op != IR_PARAMETER && op != IR_INPUT) {
    for (int32_t i = 0; i < g->nvalues; i++)
      if (g->values[i].op == op && strcmp(g->values[i].name, name) == 0) return i;
    return IR_NONE;
  }
  if (!g->leafindex_cap) return IR_NONE;
  int32_t i = *leaf_slot(g, op, name);
  return i < 0 ? IR_NONE : i;
}

int ir_graph_copy_into(IrGraph *dst, const IrGraph *src) {
  if (dst->nvalues || dst->noutputs) return ir_graph_fail(dst, "copy: destination not empty");
  dst->mesh = src->mesh;
  dst->matmul = src->matmul;
  for (int32_t i = 0; i < src->nvalues; i++)
    if (ir_graph_add(dst, &src->values[i]) != i) return IR_ERR;
  for (int32_t i = 0; i < src->noutputs; i++)
    if (ir_graph_add_output(dst, src->outputs[i].name, src->outputs[i].value)) return IR_ERR;
  return IR_OK;
}

/* ---- shapes and meshes ---- */

int64_t ir_shape_numel(const IrShape *s) {
  int64_t n = 1;
  for (int32_t i = 0; i < s->rank; i++) n *= s->dims[i];
  return n;
}

bool ir_shape_eq(const IrShape *a, const IrShape *b) {
  if (a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

IrShape ir_shape_make(int32_t rank, const int64_t *dims) {
  IrShape s = {0};
  s.rank = rank;
  for (int32_t i = 0; i < rank && i < IR_MAX_RANK; i++) s.dims[i] = dims[i];
  return s;
}

int ir_mesh_axis(const IrMesh *m, const char *name) {
  for (int32_t i = 0; i < m->naxes; i++)
    if (strcmp(m->names[i], name) == 0) return i;
  return -1;
}

int64_t ir_mesh_devices(const IrMesh *m) {
  int64_t n = 1;
  for (int32_t i = 0; i < m->naxes; i++) n *= m->sizes[i];
  return n;
}

bool ir_split_any(const IrSplit *s) {
  for (int32_t d = 0; d < IR_MAX_RANK; d++)
    if (s->axes[d][0]) return true;
  return false;
}

int64_t ir_split_count(const IrMesh *m, const IrSplit *s, int32_t d) {
  int64_t n = 1;
  for (int32_t i = 0; i < IR_MAX_SPLIT_AXES && s->axes[d][i]; i++) n *= m->sizes[s->axes[d][i] - 1];
  return n;
}

int64_t ir_split_index(const IrMesh *m, const IrSplit *s, int32_t d, int64_t dev) {
  int64_t c[IR_MAX_MESH_AXES] = {0}; /* the split's axes are < m->naxes; zeroed for GCC's -O3 */
  rt_mesh_coords(m->naxes, m->sizes, dev, c);
  int64_t k = 0;
  for (int32_t i = 0; i < IR_MAX_SPLIT_AXES && s->axes[d][i]; i++) {
    int a = s->axes[d][i] - 1;
    k = k * m->sizes[a] + c[a];
  }
  return k;
}

void ir_split_copy(const IrMesh *m, const IrSplit *s, const IrShape *global, int64_t dev,
                   double *global_data, double *local_data, bool to_global) {
  int32_t r = global->rank;
  int64_t ld[IR_MAX_RANK], off[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, n = 1;
  for (int32_t d = 0; d < r; d++) {
    ld[d] = global->dims[d] / ir_split_count(m, s, d);
    off[d] = ir_split_index(m, s, d, dev) * ld[d];
    n *= ld[d];
  }
  for (int64_t k = 0; k < n; k++) {
    int64_t gi = 0;
    for (int32_t d = 0; d < r; d++) gi = gi * global->dims[d] + off[d] + idx[d];
    if (to_global)
      global_data[gi] = local_data[k];
    else
      local_data[k] = global_data[gi];
    for (int32_t d = r - 1; d >= 0 && ++idx[d] == ld[d]; d--) idx[d] = 0;
  }
}

bool ir_value_on_device(const IrMesh *m, const IrValue *v, int64_t dev) {
  if (v->stage <= 0) return true;
  int a = ir_mesh_axis(m, IR_PIPELINE_AXIS);
  if (a < 0) return v->stage == 1;
  int64_t inner = 1;
  for (int32_t i = a + 1; i < m->naxes; i++) inner *= m->sizes[i];
  return (dev / inner) % m->sizes[a] == v->stage - 1;
}
