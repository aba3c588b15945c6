/* shard.c: from the global step graph to the per-device program.
 *
 * The composer, autodiff and the optimizer build the step as if one device held everything: the
 * global batch, whole parameters. pass_shard rewrites that graph into the program each device
 * of the mesh runs (SPMD: one program, every device its own chunk of the data), the way GSPMD
 * does it, in one walk in graph order:
 *
 *   - Leaves get their sharding from the options: parameters from their partition specs, the
 *     AdamW moments like their parameter, ids and targets split over the batch axes and, under
 *     a seq axis (context parallelism), on their sequence: bound as whole rows, the program
 *     keeps its chunk of the columns. Over a split sequence the fused attention runs on each
 *     device's chunk of the queries against the gathered keys (attention_seq).
 *   - Under sequence parallelism (PassShard.sequence_parallel) the activations between the
 *     layers split over the sequence on model instead of the hidden dim (act_dim,
 *     lookup_layout), and a column-parallel weight keeps its split where the activation's
 *     sequence would take the same axis (dot).
 *   - Every other value's sharding follows from its operands' (rules per op below). Where an
 *     op needs its operands in another sharding than they have, a reshard is inserted: an
 *     all_gather to undo a split, a local_slice to make one (free: the device already holds the
 *     data), an all_to_all to move an axis from one dim to another, and, for partial sums, an
 *     all_reduce or a reduce_scatter.
 *   - A value can be a partial sum over some mesh axes: each device holds a summand, as after a
 *     matrix product whose contracting dim is split. Linear ops pass partial sums on; anything
 *     else first reduces them. A value the graph names "grad:P" is brought to P's sharding at
 *     once, so the data-parallel gradient reduction is an all_reduce, and under fsdp a
 *     reduce_scatter, and the optimizer update runs on each device's chunk. Under microbatches
 *     (pass_microbatch) each microbatch's gradient is reduce-scattered so where its parameter
 *     is split over the axes it is a partial sum over (fsdp), so the running sum is a chunk;
 *     where not (data parallelism), the sum stays partial and is reduced once per step. Each
 *     microbatch makes its own reshards (a value tagged PASS_MICROBATCH_START_TAG begins one):
 *     an fsdp weight is gathered in every microbatch, not kept from the first to the last.
 *   - Constants, iota and broadcasts (and elementwise ops of only those) are deferred: they are
 *     emitted where a consumer needs them, directly in the sharding it needs, so a broadcast
 *     into a split activation is computed at the local size, never sliced.
 *   - Outputs "new:X" and "grad:X" leave in X's sharding, the rest replicated.
 *
 * The result's values have local shapes and carry their IrSplit (docs/ir.md). Mesh axes of size 1
 * are left out of the graph's mesh; a mesh of one device leaves the graph as it is. Last, the
 * per-device program gets pass_transpose_dot, which pass_simplify leaves to this point under a
 * mesh (a dot with swapped operands would shard differently).
 */
#include "passes/passes.h"

#include <stdlib.h>
#include <string.h>

/* A sharding: which mesh axes split each dim (IrSplit), and which axes the value is a partial
 * sum over (bit a for mesh axis a). */
typedef struct Sh {
  IrSplit s;
  uint32_t partial;
} Sh;

typedef struct Alt { /* a value already emitted in another sharding */
  Sh sh;
  int32_t h;
  struct Alt *next;
} Alt;

typedef struct Ctx {
  const IrGraph *g; /* the global graph */
  IrGraph *h;       /* the per-device graph being built */
  const IrMesh *m;
  const PassShard *opt;
  int32_t *val;       /* (g->nvalues) value in h, or IR_NONE while deferred */
  Sh *sh;             /* (g->nvalues) sharding of val */
  bool *deferred;     /* (g->nvalues) emitted on demand */
  Alt **alts;         /* (g->nvalues) reshards and deferred emissions made so far */
  const Sh **want;    /* (g->nvalues) sharding a value must take at once ("grad:P"), or NULL */
  const Sh **scatter; /* (g->nvalues) a microbatch's gradient: its parameter's sharding */
  Sh *wants;          /* storage for want */
  const Sh **hint; /* (g->nvalues) a parameter gradient's sharding, back through elementwise ops */
  int32_t n;       /* g->nvalues when the walk began */
  uint32_t batch_axes; /* the axes that split the batch (dim 0 of the input ids) */
  uint8_t zig; /* seq_balanced: the axis (1 + its index) whose splits are in the balanced order */
} Ctx;

static int nax(const IrSplit *s, int32_t d) {
  int n = 0;
  while (n < IR_MAX_SPLIT_AXES && s->axes[d][n]) n++;
  return n;
}

static bool sh_eq(const Sh *a, const Sh *b) {
  return a->partial == b->partial && memcmp(&a->s, &b->s, sizeof a->s) == 0;
}

/* Bit set of the mesh axes that split some dim of s. */
static uint32_t used_axes(const IrSplit *s, int32_t rank) {
  uint32_t u = 0;
  for (int32_t d = 0; d < rank; d++)
    for (int k = 0; k < nax(s, d); k++) u |= 1u << (s->axes[d][k] - 1);
  return u;
}

static uint32_t dim_axes(const IrSplit *s, int32_t d) {
  uint32_t u = 0;
  for (int k = 0; k < nax(s, d); k++) u |= 1u << (s->axes[d][k] - 1);
  return u;
}

/* Keeps the longest prefix of dim d's axes that uses none of `used`; returns the kept axes. */
static uint32_t keep_prefix(IrSplit *s, int32_t d, uint32_t used) {
  uint32_t kept = 0;
  int k = 0;
  for (; k < IR_MAX_SPLIT_AXES && s->axes[d][k]; k++) {
    uint32_t b = 1u << (s->axes[d][k] - 1);
    if (b & used) break;
    kept |= b;
  }
  memset(s->axes[d] + k, 0, (size_t)(IR_MAX_SPLIT_AXES - k));
  return kept;
}

static int64_t count(const Ctx *c, const IrSplit *s, int32_t d) {
  return ir_split_count(c->m, s, d);
}

/* The local shape of a global shape under s. */
static IrShape local_shape(const Ctx *c, const IrShape *global, const IrSplit *s) {
  IrShape l = *global;
  for (int32_t d = 0; d < l.rank; d++) l.dims[d] /= count(c, s, d);
  return l;
}

/* The mesh axis names of a bit set or of a split dim, in mesh order / split order. */
static int32_t axis_names(const Ctx *c, uint32_t bits, const char **names) {
  int32_t n = 0;
  for (int32_t a = 0; a < c->m->naxes; a++)
    if (bits & (1u << a)) names[n++] = c->m->names[a];
  return n;
}

static int32_t split_names(const Ctx *c, const uint8_t *axes, int n, const char **names) {
  for (int k = 0; k < n; k++) names[k] = c->m->names[axes[k] - 1];
  return n;
}

/* Records the sharding on h's value x (the builders leave it zero) and returns x. */
static int32_t mark(Ctx *c, int32_t x, const IrSplit *s) {
  if (x != IR_NONE) c->h->values[x].split = *s;
  return x;
}

/* ---- resharding ---------------------------------------------------------------------- */

/* The balanced order (PassShard.seq_balanced). A dim split on the zig axis (of S devices) is cut
 * in 2S chunks, device c holding chunks c and 2S - 1 - c: under a causal mask every device's
 * queries then see about as many keys. Within a device the order is ascending, so a chunk's
 * positions (an iota through the same reshard) do not decrease. The collectives move
 * contiguous chunks, so the reshards permute around them: x in the natural order becomes the
 * devices' order (chunks 0, 2S - 1, 1, 2S - 2, ...: zig_order) before a local_slice,
 * reduce_scatter or the all_to_all that splits it, and a dim gathered in the devices' order
 * goes back (zig_order inverse). */
static int32_t zig_order(Ctx *c, int32_t x, int32_t d, bool inverse) {
  if (x == IR_NONE) return IR_NONE;
  int64_t S = c->m->sizes[c->zig - 1], n = c->h->values[x].shape.dims[d], h = n / (2 * S);
  if (n % (2 * S)) {
    ir_graph_fail(c->h,
                  "shard: seq_order balanced: dim %d (size %lld) does not cut in 2 x %lld "
                  "chunks",
                  d, (long long)n, (long long)S);
    return IR_NONE;
  }
  int32_t *parts = base_xmalloc((size_t)(2 * S) * sizeof *parts);
  IrSplit split = c->h->values[x].split;
  for (int64_t k = 0; k < 2 * S; k++) {
    /* the devices' order: place p holds chunk p / 2 (p even) or 2S - 1 - p / 2 (p odd); so
     * chunk k is at place 2k (k < S) or 2 (2S - 1 - k) + 1 */
    int64_t from = !inverse ? (k % 2 == 0 ? k / 2 : 2 * S - 1 - k / 2)
                   : k < S  ? 2 * k
                            : 2 * (2 * S - 1 - k) + 1;
    int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK];
    memcpy(hi, c->h->values[x].shape.dims, sizeof hi);
    lo[d] = from * h;
    hi[d] = (from + 1) * h;
    parts[k] = mark(c, ir_slice(c->h, x, lo, hi), &split);
  }
  int32_t r = mark(c, ir_concat(c->h, (int32_t)(2 * S), parts, d), &split);
  free(parts);
  return r;
}

/* Whether the zig axis is among axes[0..n). */
static bool zig_touch(const Ctx *c, const uint8_t *axes, int n) {
  for (int k = 0; k < n; k++)
    if (c->zig && axes[k] == c->zig) return true;
  return false;
}

/* A reshard of dim d that the balanced order does not cover: the zig axis with others on the
 * same dim. */
static int32_t zig_fail(Ctx *c, int32_t d) {
  ir_graph_fail(c->h, "shard: seq_order balanced: dim %d split on %s together with other axes", d,
                c->m->names[c->zig - 1]);
  return IR_NONE;
}

/* x (in h, sharded as *from, of global shape gs) in sharding *to (to->partial must be 0). */
static int32_t reshard(Ctx *c, int32_t x, Sh from, const Sh *to, const IrShape *gs) {
  const char *names[IR_MAX_MESH_AXES];
  int32_t rank = gs->rank, x0 = x;
  /* 1. partial sums: a reduce_scatter where the target splits a dim over partial axes only
   *    (after the axes it already has: a chunk of a chunk), an all_reduce over whatever is left */
  for (int32_t d = 0; d < rank && from.partial; d++) {
    int nf = nax(&from.s, d), nt = nax(&to->s, d);
    if (nt <= nf || memcmp(from.s.axes[d], to->s.axes[d], (size_t)nf)) continue;
    uint32_t want = dim_axes(&to->s, d) & ~dim_axes(&from.s, d); /* the axes after from's */
    if ((want & ~from.partial) || gs->dims[d] % count(c, &to->s, d)) continue;
    if (zig_touch(c, to->s.axes[d] + nf, nt - nf)) {
      if (nf || nt != 1) return zig_fail(c, d);
      x = zig_order(c, x, d, false);
    }
    x = ir_reduce_scatter(c->h, x, split_names(c, to->s.axes[d] + nf, nt - nf, names), names, d);
    memcpy(from.s.axes[d], to->s.axes[d], sizeof from.s.axes[d]);
    from.partial &= ~want;
    mark(c, x, &from.s);
  }
  if (from.partial) {
    x = mark(c, ir_all_reduce(c->h, x, axis_names(c, from.partial, names), names), &from.s);
    from.partial = 0;
  }
  if (x != x0 && x != IR_NONE && *c->h->values[x0].tag) {
    /* a remat tag names the global value; the reduction is it, the partial sum is not */
    ir_value_set_tag(c->h, x, c->h->values[x0].tag);
    ir_value_set_tag(c->h, x0, "");
  }
  /* 2. drop the axes the target does not have at the same place: an all_to_all when exactly one
   *    axis moves to the end of another dim's list, else an all_gather */
  for (int32_t d = 0; d < rank; d++) {
    int nf = nax(&from.s, d), nt = nax(&to->s, d), cp = 0;
    while (cp < nf && cp < nt && from.s.axes[d][cp] == to->s.axes[d][cp]) cp++;
    if (cp == nf) continue;
    if (nf - cp == 1) {
      uint8_t a = from.s.axes[d][cp];
      int32_t j = -1;
      for (int32_t e = 0; e < rank && j < 0; e++) {
        int ne = nax(&from.s, e);
        if (e != d && nax(&to->s, e) == ne + 1 && to->s.axes[e][ne] == a &&
            memcmp(from.s.axes[e], to->s.axes[e], (size_t)ne) == 0)
          j = e;
      }
      if (j >= 0) {
        const char *an = c->m->names[a - 1];
        bool z = c->zig && a == c->zig; /* j takes the balanced order, d leaves it */
        if (z && (nf != 1 || nax(&from.s, j))) return zig_fail(c, nf != 1 ? d : j);
        if (z) x = zig_order(c, x, j, false);
        x = ir_all_to_all(c->h, x, 1, &an, j, d);
        from.s.axes[d][cp] = 0;
        from.s.axes[j][nax(&from.s, j)] = a;
        mark(c, x, &from.s);
        if (z) x = zig_order(c, x, d, true);
        continue;
      }
    }
    bool z = zig_touch(c, from.s.axes[d] + cp, nf - cp);
    if (z && nf != 1) return zig_fail(c, d);
    x = ir_all_gather(c->h, x, split_names(c, from.s.axes[d] + cp, nf - cp, names), names, d);
    memset(from.s.axes[d] + cp, 0, (size_t)(IR_MAX_SPLIT_AXES - cp));
    mark(c, x, &from.s);
    if (z) x = zig_order(c, x, d, true);
  }
  /* 3. add the target's extra axes: every device keeps its chunk */
  for (int32_t d = 0; d < rank; d++) {
    int nf = nax(&from.s, d), nt = nax(&to->s, d);
    if (nf == nt) continue;
    if (gs->dims[d] % count(c, &to->s, d)) {
      ir_graph_fail(c->h, "shard: dim %d (size %lld) does not divide over %lld devices", d,
                    (long long)gs->dims[d], (long long)count(c, &to->s, d));
      return IR_NONE;
    }
    if (zig_touch(c, to->s.axes[d] + nf, nt - nf)) {
      if (nf || nt != 1) return zig_fail(c, d);
      x = zig_order(c, x, d, false);
    }
    x = ir_local_slice(c->h, x, split_names(c, to->s.axes[d] + nf, nt - nf, names), names, d);
    memcpy(from.s.axes[d], to->s.axes[d], sizeof from.s.axes[d]);
    mark(c, x, &from.s);
  }
  return x;
}

static int32_t emit_deferred(Ctx *c, int32_t v, const Sh *want);

static Alt *alt_find(Ctx *c, int32_t v, const Sh *want) {
  for (Alt *a = c->alts[v]; a; a = a->next)
    if (sh_eq(&a->sh, want)) return a;
  return NULL;
}

static int32_t alt_add(Ctx *c, int32_t v, const Sh *sh, int32_t h) {
  if (h == IR_NONE) return IR_NONE;
  Alt *a = base_xmalloc(sizeof *a);
  *a = (Alt){*sh, h, c->alts[v]};
  c->alts[v] = a;
  return h;
}

/* Value v of g, in h, sharded as *want. */
static int32_t get(Ctx *c, int32_t v, const Sh *want) {
  if (!c->deferred[v] && sh_eq(&c->sh[v], want)) return c->val[v];
  Alt *a = alt_find(c, v, want);
  if (a) return a->h;
  if (c->deferred[v]) return alt_add(c, v, want, emit_deferred(c, v, want));
  if (c->val[v] == IR_NONE) return IR_NONE;
  return alt_add(c, v, want, reshard(c, c->val[v], c->sh[v], want, &c->g->values[v].shape));
}

/* v as it is, partial sums reduced. */
static Sh resolved(const Ctx *c, int32_t v) {
  Sh s = c->sh[v];
  s.partial = 0;
  return s;
}

/* ---- deferred values: constants, iota, broadcasts and elementwise ops of them --------- */

/* Deferred values never hold partial sums: a broadcast reduces a partial operand first (which
 * costs less than reducing the broadcast). */
static bool deferrable(const Ctx *c, int32_t v) {
  const IrValue *x = &c->g->values[v];
  if (x->op == IR_CONSTANT || x->op == IR_IOTA || x->op == IR_BROADCAST) return true;
  if (!(ir_op_flags(x->op) & IR_ELEMENTWISE)) return false;
  for (int32_t k = 0; k < x->nops; k++)
    if (!c->deferred[x->ops[k]]) return false;
  return true;
}

static void merge(Sh *cur, const Sh *s, int32_t rank);

/* The sharding a deferred value takes when nothing asks for one: its operands' (widest). */
static Sh natural(const Ctx *c, int32_t v) {
  if (!c->deferred[v]) return c->sh[v];
  const IrValue *x = &c->g->values[v];
  Sh s = {0};
  if (x->op == IR_BROADCAST) {
    Sh o = natural(c, x->ops[0]);
    const IrShape *os = &c->g->values[x->ops[0]].shape;
    for (int32_t i = 0; i < os->rank; i++)
      if (os->dims[i] == x->shape.dims[x->attr.axes.v[i]])
        memcpy(s.s.axes[x->attr.axes.v[i]], o.s.axes[i], IR_MAX_SPLIT_AXES);
  } else if (ir_op_flags(x->op) & IR_ELEMENTWISE) {
    for (int32_t k = 0; k < x->nops; k++) {
      Sh o = natural(c, x->ops[k]);
      merge(&s, &o, x->shape.rank);
    }
  }
  return s;
}

/* Whether every device's chunk of constant x under s holds the same numbers (ir_split_copy's
 * chunks are contiguous: under the balanced order a split on its axis is never taken as the
 * same, and the global value is built and sliced through reshard). */
static bool same_chunks(const Ctx *c, const IrValue *x, const IrSplit *s) {
  for (int32_t d = 0; c->zig && d < x->shape.rank; d++)
    if (zig_touch(c, s->axes[d], nax(s, d))) return false;
  IrShape l = local_shape(c, &x->shape, s);
  int64_t n = ir_shape_numel(&l), ndev = ir_mesh_devices(c->m);
  double *a = base_xmalloc((size_t)(n ? n : 1) * sizeof *a),
         *b = base_xmalloc((size_t)(n ? n : 1) * sizeof *b);
  bool same = true;
  ir_split_copy(c->m, s, &x->shape, 0, (double *)x->attr.data, a, false);
  for (int64_t dev = 1; dev < ndev && same; dev++) {
    ir_split_copy(c->m, s, &x->shape, dev, (double *)x->attr.data, b, false);
    same = memcmp(a, b, (size_t)n * sizeof *a) == 0;
  }
  free(a);
  free(b);
  return same;
}

static int32_t emit_deferred(Ctx *c, int32_t v, const Sh *want) {
  const IrValue *x = &c->g->values[v];
  if (want->partial) { /* no rule asks for this; a splat cannot be a partial sum */
    ir_graph_fail(c->h, "shard: internal: %%%d (%s) asked for as a partial sum", v,
                  ir_op_name(x->op));
    return IR_NONE;
  }
  IrValue p = *x;
  p.origin = x->origin;
  p.tag = x->tag;
  int32_t ops[IR_MAX_RANK + 4];
  IrShape local = local_shape(c, &x->shape, &want->s);
  if (x->op == IR_BROADCAST) {
    const IrShape *os = &c->g->values[x->ops[0]].shape;
    Sh o = {0};
    for (int32_t i = 0; i < os->rank; i++)
      if (os->dims[i] == x->shape.dims[x->attr.axes.v[i]])
        memcpy(o.s.axes[i], want->s.axes[x->attr.axes.v[i]], IR_MAX_SPLIT_AXES);
    /* a size-1 operand dim broadcast over a split dim stays whole: it has one element */
    ops[0] = get(c, x->ops[0], &o);
    p.ops = ops;
    p.shape = local;
    p.split = want->s;
    return ir_graph_add(c->h, &p);
  }
  if (x->op == IR_IOTA && nax(&want->s, (int32_t)x->attr.axis)) {
    /* along a split dim: this device's chunk of the (N) counting vector, broadcast; never the
     * whole iota (the vocabulary ids of the cross-entropy would be the logits' size) */
    int32_t ax = (int32_t)x->attr.axis, bd = ax;
    IrShape one = {.rank = 1, .dims = {x->shape.dims[ax]}};
    Sh whole = {0}, chunk = {0};
    memcpy(chunk.s.axes[0], want->s.axes[ax], IR_MAX_SPLIT_AXES);
    int32_t i1 = mark(c, ir_iota(c->h, x->dtype, 1, one.dims, 0), &whole.s);
    i1 = reshard(c, i1, whole, &chunk, &one);
    return mark(c, ir_broadcast(c->h, i1, local.rank, local.dims, &bd), &want->s);
  }
  if (x->op == IR_CONSTANT && x->attr.data && same_chunks(c, x, &want->s)) {
    /* folded broadcasts: every device's chunk holds the same numbers, so it is a constant */
    double *d =
        base_xmalloc((size_t)(ir_shape_numel(&local) ? ir_shape_numel(&local) : 1) * sizeof *d);
    ir_split_copy(c->m, &want->s, &x->shape, 0, (double *)x->attr.data, d, false);
    p.attr.data = d;
    p.shape = local;
    p.split = want->s;
    int32_t r = ir_graph_add(c->h, &p);
    free(d);
    return r;
  }
  if (x->op == IR_CONSTANT && x->attr.data) {
    /* the values depend on the position: build the global value, keep this device's chunk */
    Sh none = {0};
    int32_t full = alt_find(c, v, &none) ? alt_find(c, v, &none)->h : IR_NONE;
    if (full == IR_NONE) {
      p.split = none.s;
      full = alt_add(c, v, &none, ir_graph_add(c->h, &p));
    }
    return reshard(c, full, none, want, &x->shape);
  }
  if (x->op == IR_CONSTANT || x->op == IR_IOTA) {
    p.shape = local;
    p.split = want->s;
    return ir_graph_add(c->h, &p);
  }
  /* elementwise over deferred operands: each operand in the same sharding */
  for (int32_t k = 0; k < x->nops; k++) ops[k] = get(c, x->ops[k], want);
  p.ops = ops;
  p.split = want->s;
  return ir_graph_add(c->h, &p);
}

/* ---- per-op rules ---------------------------------------------------------------------- */

/* Widens cur by the splits of s where they extend cur's (the more a value is split, the less
 * each device computes; a slice costs no traffic), unless an axis would be used twice. */
static void merge(Sh *cur, const Sh *s, int32_t rank) {
  uint32_t used = used_axes(&cur->s, rank);
  for (int32_t d = 0; d < rank; d++) {
    int nc = nax(&cur->s, d), ns = nax(&s->s, d);
    if (ns <= nc || memcmp(cur->s.axes[d], s->s.axes[d], (size_t)nc)) continue;
    uint32_t extra = 0;
    for (int k = nc; k < ns; k++) extra |= 1u << (s->s.axes[d][k] - 1);
    if (extra & used) continue;
    memcpy(cur->s.axes[d], s->s.axes[d], IR_MAX_SPLIT_AXES);
    used |= extra;
  }
}

/* Emits value v of g with operands ops (in h) as sharded *out. */
static int32_t emit_as(Ctx *c, int32_t v, const int32_t *ops, const Sh *out) {
  IrValue p = c->g->values[v];
  p.ops = ops;
  p.shape = local_shape(c, &c->g->values[v].shape, &out->s);
  p.split = out->s;
  return ir_graph_add(c->h, &p);
}

static int32_t *op_buf(int32_t n, int32_t *small, int32_t cap) {
  return n <= cap ? small : base_xmalloc((size_t)n * sizeof *small);
}

/* The dim of a (..., T, D) activation of the given rank that the layers' layout splits over
 * model between attention and feed-forward: D (the reduce_scatter after a row-parallel product
 * splits the hidden dim), or T under sequence parallelism (Megatron's layout: the norms then
 * reduce over a whole D on every device, and the all_gather before a column-parallel product
 * gathers the sequence). */
static int32_t act_dim(const Ctx *c, int32_t rank) {
  return c->opt->sequence_parallel && rank >= 2 ? rank - 2 : rank - 1;
}

/* A partial sum that widens into an f32 island (the bf16 gradient of the head's input entering
 * the output norm's backward) is reduce-scattered over its last dim in the narrow type, when
 * that dim divides and is whole: the island then runs on each device's chunk, as the
 * activation it is the gradient of does, instead of all-reducing and computing it whole. */
static void island_entry(const Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v], *a = &c->g->values[x->ops[0]];
  uint32_t p = c->sh[x->ops[0]].partial;
  int32_t d = act_dim(c, x->shape.rank), n0 = nax(&out->s, d);
  if (!ir_dtype_is_float(x->dtype) || !ir_dtype_is_float(a->dtype) ||
      ir_dtype_size(x->dtype) <= ir_dtype_size(a->dtype) || x->shape.rank < 2 ||
      (n0 && !c->opt->sequence_parallel) || (used_axes(&out->s, x->shape.rank) & p))
    return;
  IrSplit was = out->s; /* under sequence parallelism after the seq axes the dim may have */
  for (int32_t ax = 0, k = n0; ax < c->m->naxes && k < IR_MAX_SPLIT_AXES; ax++)
    if (p & (1u << ax)) out->s.axes[d][k++] = (uint8_t)(ax + 1);
  if (x->shape.dims[d] % count(c, &out->s, d)) out->s = was;
}

/* Under sequence parallelism, a deferred factor of a partial sum that is a broadcast of a
 * computed value (a norm's per-position statistic, split on the sequence) counts by its split:
 * the partial sum (a norm's incoming gradient) is reduce-scattered into it, rather than the
 * statistic gathered. */
static bool stat_factor(const Ctx *c, int32_t k) {
  const IrValue *x = &c->g->values[k];
  return c->opt->sequence_parallel && c->deferred[k] && x->op == IR_BROADCAST &&
         !c->deferred[x->ops[0]];
}

static int elementwise(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t small[8], *ops = op_buf(x->nops, small, 8);
  /* linear ops keep partial sums: -p, p + q and p - q (same sharding), p * r, p / r (r whole) */
  int npart = 0, ipart = -1;
  for (int32_t k = 0; k < x->nops; k++)
    if (!c->deferred[x->ops[k]] && c->sh[x->ops[k]].partial) npart++, ipart = k;
  bool keep = false;
  if (npart && (x->op == IR_NEG || x->op == IR_ADD || x->op == IR_SUB)) {
    keep = true;
    for (int32_t k = 0; k < x->nops; k++)
      keep = keep && !c->deferred[x->ops[k]] && sh_eq(&c->sh[x->ops[k]], &c->sh[x->ops[0]]);
  } else if (npart == 1 && (x->op == IR_MUL || (x->op == IR_DIV && ipart == 0))) {
    /* unless the whole factor is split where the partial sum is not: gathering it would cost
     * more than reducing the partial sum into its split (a reduce_scatter) */
    Sh p = resolved(c, x->ops[ipart]), m = p;
    for (int32_t k = 0; k < x->nops; k++)
      if (k != ipart && (!c->deferred[x->ops[k]] || stat_factor(c, x->ops[k]))) {
        Sh o = c->deferred[x->ops[k]] ? natural(c, x->ops[k]) : resolved(c, x->ops[k]);
        merge(&m, &o, x->shape.rank);
      }
    keep = sh_eq(&m, &p);
  }
  if (keep) {
    *out = c->sh[x->ops[ipart]];
    Sh whole = *out;
    whole.partial = 0;
    for (int32_t k = 0; k < x->nops; k++)
      ops[k] = get(c, x->ops[k],
                   k == ipart || x->op == IR_NEG || x->op == IR_ADD || x->op == IR_SUB
                       ? &c->sh[x->ops[k]]
                       : &whole);
  } else {
    memset(out, 0, sizeof *out);
    for (int32_t k = 0; k < x->nops; k++)
      if (!c->deferred[x->ops[k]] || (npart == 1 && stat_factor(c, x->ops[k]))) {
        Sh s = c->deferred[x->ops[k]] ? natural(c, x->ops[k]) : resolved(c, x->ops[k]);
        merge(out, &s, x->shape.rank);
      }
    if (npart == 1 && x->op == IR_CAST && !c->hint[v]) island_entry(c, v, out);
    for (int32_t k = 0; k < x->nops; k++) ops[k] = get(c, x->ops[k], out);
  }
  c->val[v] = emit_as(c, v, ops, out);
  if (ops != small) free(ops);
  return IR_OK;
}

static int reduce(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t a = x->ops[0];
  const IrShape *is = &c->g->values[a].shape;
  Sh in = x->op == IR_REDUCE_SUM ? (c->deferred[a] ? natural(c, a) : c->sh[a]) : resolved(c, a);
  bool red[IR_MAX_RANK] = {false};
  uint32_t maxed = 0; /* mesh axes of the dims a max reduces */
  for (int32_t i = 0; i < x->attr.axes.n; i++) red[x->attr.axes.v[i]] = true;
  memset(out, 0, sizeof *out);
  out->partial = in.partial;
  for (int32_t d = 0, o = 0; d < is->rank; d++) {
    if (!red[d]) {
      memcpy(out->s.axes[o++], in.s.axes[d], IR_MAX_SPLIT_AXES);
    } else if (x->op == IR_REDUCE_SUM) {
      out->partial |= dim_axes(&in.s, d); /* each device sums its chunk */
    } else {
      maxed |= dim_axes(&in.s, d); /* each device's max of its chunk, then the max of those */
    }
  }
  int32_t op = get(c, a, &in);
  c->val[v] = emit_as(c, v, &op, out);
  if (!maxed || c->val[v] == IR_NONE) return IR_OK;
  /* the devices' maxima side by side on a new last dim (n values per row: small next to the
   * reduced dim), gathered, and reduced: exact, and no reduction kind for all_reduce needed */
  const char *names[IR_MAX_MESH_AXES];
  int32_t r = x->shape.rank, na = axis_names(c, maxed, names);
  IrShape l = local_shape(c, &x->shape, &out->s);
  Sh side = *out; /* the new dim is split over the axes the max reduced, in mesh order */
  for (int32_t ax = 0, k = 0; ax < c->m->naxes; ax++)
    if (maxed & (1u << ax)) side.s.axes[r][k++] = (uint8_t)(ax + 1);
  l.dims[l.rank++] = 1;
  ir_value_set_tag(c->h, c->val[v], "");
  int32_t m = mark(c, ir_reshape(c->h, c->val[v], l.rank, l.dims), &side.s);
  m = mark(c, ir_all_gather(c->h, m, na, names, r), &out->s);
  c->val[v] = mark(c, ir_reduce_max(c->h, m, 1, &r), &out->s);
  if (c->val[v] != IR_NONE) ir_value_set_tag(c->h, c->val[v], x->tag);
  return IR_OK;
}

static bool param_table(const Ctx *c, int32_t t);

static bool in_dims(const IrDims *d, int64_t i) {
  for (int32_t k = 0; k < d->n; k++)
    if (d->v[k] == i) return true;
  return false;
}

/* Whether dim dl of l and dim dr of r both start with the axes of cand's dim 0. */
static bool split_alike(const IrSplit *l, int32_t dl, const IrSplit *r, int32_t dr,
                        const IrSplit *cand) {
  int n = nax(cand, 0);
  return nax(l, dl) >= n && nax(r, dr) >= n && !memcmp(l->axes[dl], cand->axes[0], (size_t)n) &&
         !memcmp(r->axes[dr], cand->axes[0], (size_t)n);
}

/* dot_general: batch dims pair up, contracting dims pair up (a shared split makes a partial sum),
 * the rest are free. The lhs keeps its batch and free splits; a contracting split and the rhs's
 * free splits are kept where they use no axis already taken. */
static int dot(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  const IrAttrs *at = &x->attr;
  int32_t l = x->ops[0], r = x->ops[1];
  const IrShape *ls = &c->g->values[l].shape, *rs = &c->g->values[r].shape;
  Sh L0 = resolved(c, l), R0 = resolved(c, r);
  if (c->deferred[l]) L0 = natural(c, l), L0.partial = 0;
  if (c->deferred[r]) R0 = natural(c, r), R0.partial = 0;
  Sh L = {0}, R = {0};
  uint32_t used = 0;
  /* batch pairs: the lhs's split, else the rhs's, or the rhs's where it extends the lhs's (an
   * expert buffer's gradient split (fsdp) on the batch and `expert` on the experts meets the
   * dispatch split (fsdp, expert): the axis moves to the batch by an all_to_all, rather than
   * the dispatch to the experts and the product's output all-reduced over `expert`) */
  for (int32_t i = 0; i < at->lb.n; i++) {
    int32_t dl = (int32_t)at->lb.v[i], dr = (int32_t)at->rb.v[i];
    int nl = nax(&L0.s, dl), nr = nax(&R0.s, dr);
    bool rhs = !nl || (nr > nl && !memcmp(L0.s.axes[dl], R0.s.axes[dr], (size_t)nl));
    memcpy(L.s.axes[dl], rhs ? R0.s.axes[dr] : L0.s.axes[dl], IR_MAX_SPLIT_AXES);
    used |= keep_prefix(&L.s, dl, used);
    memcpy(R.s.axes[dr], L.s.axes[dl], IR_MAX_SPLIT_AXES);
  }
  /* lhs free dims: as much of their split as uses no axis taken (an axis the batch dims took
   * moves there by an all_to_all, the way expert dispatch moves tokens). Under sequence
   * parallelism a weight's free split comes first: the activation is gathered along its
   * sequence, the weight stays column-parallel (Megatron's all_gather before q/k/v, linear1) */
  uint32_t weight_free = 0; /* the weight's free axes that do not split the batch (model) */
  if (c->opt->sequence_parallel && !c->deferred[r] && param_table(c, r))
    for (int32_t d = 0; d < rs->rank; d++)
      if (!in_dims(&at->rb, d) && !in_dims(&at->rc, d))
        weight_free |= dim_axes(&R0.s, d) & ~c->batch_axes;
  for (int32_t d = 0; d < ls->rank; d++) {
    if (in_dims(&at->lb, d) || in_dims(&at->lc, d)) continue;
    memcpy(L.s.axes[d], L0.s.axes[d], IR_MAX_SPLIT_AXES);
    used |= keep_prefix(&L.s, d, used | weight_free);
  }
  /* contracting pairs: split alike on both sides, or not at all. When only one side is split,
   * the split is taken (slicing the other side) unless the rhs's free dims want that axis:
   * gathering the split side then beats a partial sum of the whole output (Megatron's column
   * split after a hidden-split activation). */
  uint32_t rhs_free = 0;
  for (int32_t d = 0; d < rs->rank; d++)
    if (!in_dims(&at->rb, d) && !in_dims(&at->rc, d)) rhs_free |= dim_axes(&R0.s, d);
  uint32_t partial = 0;
  for (int32_t i = 0; i < at->lc.n; i++) {
    int32_t dl = (int32_t)at->lc.v[i], dr = (int32_t)at->rc.v[i];
    IrSplit cand = {0};
    memcpy(cand.axes[0], nax(&L0.s, dl) >= nax(&R0.s, dr) ? L0.s.axes[dl] : R0.s.axes[dr],
           IR_MAX_SPLIT_AXES);
    uint32_t bits = keep_prefix(&cand, 0, used);
    bool alike = split_alike(&L0.s, dl, &R0.s, dr, &cand);
    if (bits && !alike && (bits & rhs_free)) {
      /* the axes before the first the rhs wants stay a partial sum where both sides have
       * them (a weight's gradient over a sequence split [seq, model]: partial over seq) */
      bits = keep_prefix(&cand, 0, used | rhs_free);
      if (!split_alike(&L0.s, dl, &R0.s, dr, &cand)) continue;
    }
    if (!bits) continue;
    memcpy(L.s.axes[dl], cand.axes[0], IR_MAX_SPLIT_AXES);
    memcpy(R.s.axes[dr], cand.axes[0], IR_MAX_SPLIT_AXES);
    used |= bits;
    partial |= bits;
  }
  /* rhs free dims */
  for (int32_t d = 0; d < rs->rank; d++) {
    if (in_dims(&at->rb, d) || in_dims(&at->rc, d)) continue;
    memcpy(R.s.axes[d], R0.s.axes[d], IR_MAX_SPLIT_AXES);
    used |= keep_prefix(&R.s, d, used);
  }
  /* output: batch dims, lhs free dims, rhs free dims */
  memset(out, 0, sizeof *out);
  int32_t o = 0;
  for (int32_t i = 0; i < at->lb.n; i++)
    memcpy(out->s.axes[o++], L.s.axes[at->lb.v[i]], IR_MAX_SPLIT_AXES);
  for (int32_t d = 0; d < ls->rank; d++)
    if (!in_dims(&at->lb, d) && !in_dims(&at->lc, d))
      memcpy(out->s.axes[o++], L.s.axes[d], IR_MAX_SPLIT_AXES);
  for (int32_t d = 0; d < rs->rank; d++)
    if (!in_dims(&at->rb, d) && !in_dims(&at->rc, d))
      memcpy(out->s.axes[o++], R.s.axes[d], IR_MAX_SPLIT_AXES);
  out->partial = partial;
  int32_t ops[2] = {get(c, l, &L), get(c, r, &R)};
  c->val[v] = emit_as(c, v, ops, out);
  return IR_OK;
}

/* reshape: dims regroup (a run of input dims holds the same elements as a run of output dims).
 * A split survives on the major dim of a group (its first dim larger than 1) when it divides the
 * group's major output dim; any other split is gathered first. Reshape is linear: partial sums
 * stay partial. */
static int reshape(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t a = x->ops[0];
  const IrShape *is = &c->g->values[a].shape, *os = &x->shape;
  Sh in = c->deferred[a] ? natural(c, a) : c->sh[a];
  Sh need = {0};
  memset(out, 0, sizeof *out);
  need.partial = out->partial = in.partial;
  int32_t i = 0, o = 0;
  while (i < is->rank || o < os->rank) {
    int32_t i0 = i, o0 = o;
    int64_t pi = i < is->rank ? is->dims[i++] : 1, po = o < os->rank ? os->dims[o++] : 1;
    while (pi != po) {
      if (pi < po && i < is->rank)
        pi *= is->dims[i++];
      else if (po < pi && o < os->rank)
        po *= os->dims[o++];
      else
        break; /* cannot happen for equal element counts */
    }
    int32_t mi = i0, mo = o0;
    while (mi < i && is->dims[mi] == 1) mi++;
    while (mo < o && os->dims[mo] == 1) mo++;
    if (mi < i && mo < o && nax(&in.s, mi) && os->dims[mo] % count(c, &in.s, mi) == 0) {
      memcpy(need.s.axes[mi], in.s.axes[mi], IR_MAX_SPLIT_AXES);
      memcpy(out->s.axes[mo], in.s.axes[mi], IR_MAX_SPLIT_AXES);
    }
  }
  int32_t op = get(c, a, &need);
  c->val[v] = emit_as(c, v, &op, out);
  return IR_OK;
}

static int transpose(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t a = x->ops[0];
  Sh in = c->deferred[a] ? natural(c, a) : c->sh[a];
  memset(out, 0, sizeof *out);
  out->partial = in.partial;
  for (int32_t d = 0; d < x->shape.rank; d++)
    memcpy(out->s.axes[d], in.s.axes[x->attr.axes.v[d]], IR_MAX_SPLIT_AXES);
  int32_t op = get(c, a, &in);
  c->val[v] = emit_as(c, v, &op, out);
  return IR_OK;
}

/* slice, pad, concat: dims they change are whole; the others keep their split. */
static int shaping(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t small[8], *ops = op_buf(x->nops, small, 8);
  memset(out, 0, sizeof *out);
  for (int32_t k = 0; k < x->nops; k++)
    if (!c->deferred[x->ops[k]]) {
      Sh s = resolved(c, x->ops[k]);
      merge(out, &s, x->shape.rank);
    }
  const IrShape *is = &c->g->values[x->ops[0]].shape;
  for (int32_t d = 0; d < x->shape.rank; d++) {
    bool changed = x->op == IR_CONCAT ? d == x->attr.axis : is->dims[d] != x->shape.dims[d];
    if (changed) memset(out->s.axes[d], 0, IR_MAX_SPLIT_AXES);
  }
  for (int32_t k = 0; k < x->nops; k++) ops[k] = get(c, x->ops[k], out);
  IrValue p = *x;
  p.ops = ops;
  p.shape = local_shape(c, &x->shape, &out->s);
  p.split = out->s;
  if (x->op == IR_SLICE) /* a split dim is sliced whole: its limit is the local size */
    for (int32_t d = 0; d < x->shape.rank; d++)
      if (nax(&out->s, d)) p.attr.hi.v[d] = p.shape.dims[d];
  c->val[v] = ir_graph_add(c->h, &p);
  if (ops != small) free(ops);
  return IR_OK;
}

/* ---- tables split on their rows (vocabulary parallelism) ---------------------------- */

/* Whether table value t of g is a parameter (through casts): the rule for a table split on its
 * rows is for embedding tables; an activation used as a table is gathered whole. */
static bool param_table(const Ctx *c, int32_t t) {
  while (c->g->values[t].op == IR_CAST) t = c->g->values[t].ops[0];
  return c->g->values[t].op == IR_PARAMETER;
}

/* Rows of a table (nrows global rows) split over the axes `rows` (split order): index ix (in h,
 * split as *is, global shape gs) made local to this device's rows. *ok gets 1 where the row is
 * this device's, 0 elsewhere (i32, ix's shape); the result is the local row there, 0 elsewhere.
 * The device's first row comes from a local_slice of the (n)-vector of first rows, the way a
 * position-dependent constant is split. */
static int32_t local_rows(Ctx *c, int32_t ix, const IrSplit *is, const IrShape *gs,
                          const uint8_t *rows, int nrows_axes, int64_t nrows, int32_t *ok) {
  const char *names[IR_MAX_MESH_AXES];
  IrSplit rs = {0}, none = {0};
  memcpy(rs.axes[0], rows, (size_t)nrows_axes);
  int64_t n = ir_split_count(c->m, &rs, 0), per = nrows / n;
  double *first = base_xmalloc((size_t)n * sizeof *first);
  for (int64_t i = 0; i < n; i++) first[i] = (double)(i * per);
  int32_t f = mark(c, ir_const_data(c->h, DT_I32, first, 1, &n), &none);
  free(first);
  f = mark(c, ir_local_slice(c->h, f, split_names(c, rows, nrows_axes, names), names, 0), &rs);
  IrShape l = local_shape(c, gs, is);
  int32_t bd = 0;
  int32_t lo = mark(c, ir_broadcast(c->h, f, l.rank, l.dims, &bd), is); /* (1) -> ix's shape */
  int32_t loc = mark(c, ir_sub(c->h, ix, lo), is);
  int32_t zero = mark(c, ir_const_scalar(c->h, DT_I32, 0, l.rank, l.dims), is);
  int32_t lim = mark(c, ir_const_scalar(c->h, DT_I32, (double)per, l.rank, l.dims), is);
  *ok = mark(
      c, ir_mul(c->h, mark(c, ir_ge(c->h, loc, zero), is), mark(c, ir_lt(c->h, loc, lim), is)), is);
  return mark(c, ir_mul(c->h, loc, *ok), is);
}

/* x (in h, split *xs) times mask (i32 1/0, x's ir leading dims, split *ms) cast to x's dtype
 * and broadcast over x's trailing dims. */
static int32_t masked(Ctx *c, int32_t x, const IrSplit *xs, int32_t mask, const IrSplit *ms,
                      int32_t ir) {
  const IrValue *xv = &c->h->values[x];
  IrShape xsh = xv->shape;
  int32_t bd[IR_MAX_RANK];
  for (int32_t d = 0; d < ir; d++) bd[d] = d;
  int32_t m = mark(c, ir_cast(c->h, mask, xv->dtype), ms);
  m = mark(c, ir_broadcast(c->h, m, xsh.rank, xsh.dims, bd), xs);
  return mark(c, ir_mul(c->h, x, m), xs);
}

/* The layout the sum of a row-split table's lookups (x: (I..., D...), ir index dims) takes: the
 * first feature dim split over the table's row axes `rows`, where it divides, as the layers'
 * activations are split; under sequence parallelism the last index dim (the sequence) instead,
 * after the axes it already has (seq). Else whole (an all_reduce). */
static void lookup_layout(const Ctx *c, const IrValue *x, int32_t ir, const uint8_t *rows, Sh *to) {
  int nr = 0;
  while (nr < IR_MAX_SPLIT_AXES && rows[nr]) nr++;
  if (c->opt->sequence_parallel && ir >= 1) {
    int32_t d = ir - 1;
    int n0 = nax(&to->s, d);
    IrSplit was = to->s;
    for (int k = 0; k < nr && n0 + k < IR_MAX_SPLIT_AXES; k++) to->s.axes[d][n0 + k] = rows[k];
    if (n0 + nr <= IR_MAX_SPLIT_AXES && x->shape.dims[d] % count(c, &to->s, d) == 0) return;
    to->s = was;
  }
  IrSplit r = {0};
  memcpy(r.axes[0], rows, IR_MAX_SPLIT_AXES);
  for (int32_t d = ir; d < x->shape.rank; d++)
    if (!nax(&to->s, d) && x->shape.dims[d] % ir_split_count(c->m, &r, 0) == 0) {
      memcpy(to->s.axes[d], rows, IR_MAX_SPLIT_AXES);
      return;
    }
}

/* gather(table (V, D...), idx (I...)) -> (I..., D...): idx and D splits kept. A table split on
 * its rows over axes A that the index does not use (a vocabulary-parallel embedding) is not
 * gathered: each device looks up the ids in its rows, 0 for the others, and the sum over A is
 * the lookup. That sum is reduce-scattered over the first feature dim where it divides (the
 * layout a table split on that dim gives), else all-reduced. Otherwise the rows are whole. */
static int gather(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t t = x->ops[0], ix = x->ops[1];
  int32_t ir = c->g->values[ix].shape.rank, tr = c->g->values[t].shape.rank;
  Sh I = c->deferred[ix] ? natural(c, ix) : resolved(c, ix);
  Sh T = c->deferred[t] ? natural(c, t) : resolved(c, t);
  I.partial = T.partial = 0;
  uint32_t used = used_axes(&I.s, ir), rows = dim_axes(&T.s, 0);
  bool vocab = rows && !(rows & used) && ir > 0 && !c->deferred[t] && param_table(c, t);
  if (vocab)
    used |= rows;
  else
    memset(T.s.axes[0], 0, IR_MAX_SPLIT_AXES);
  for (int32_t d = 1; d < tr; d++) used |= keep_prefix(&T.s, d, used);
  memset(out, 0, sizeof *out);
  for (int32_t d = 0; d < ir; d++) memcpy(out->s.axes[d], I.s.axes[d], IR_MAX_SPLIT_AXES);
  for (int32_t d = 1; d < tr; d++) memcpy(out->s.axes[ir + d - 1], T.s.axes[d], IR_MAX_SPLIT_AXES);
  int32_t ops[2] = {get(c, t, &T), get(c, ix, &I)};
  if (!vocab) {
    c->val[v] = emit_as(c, v, ops, out);
    return IR_OK;
  }
  int32_t ok;
  ops[1] = local_rows(c, ops[1], &I.s, &c->g->values[ix].shape, T.s.axes[0], nax(&T.s, 0),
                      c->g->values[t].shape.dims[0], &ok);
  int32_t r = emit_as(c, v, ops, out);
  ir_value_set_tag(c->h, r, ""); /* the tag goes to the lookup: the sum below */
  r = masked(c, r, &out->s, ok, &I.s, ir);
  out->partial = rows;
  Sh to = *out;
  to.partial = 0;
  lookup_layout(c, x, ir, T.s.axes[0], &to);
  c->val[v] = reshard(c, r, *out, &to, &x->shape);
  if (c->val[v] != IR_NONE) ir_value_set_tag(c->h, c->val[v], x->tag);
  *out = to;
  return IR_OK;
}

/* scatter_add(idx (I...), upd (I..., D...)) -> (rows, D...): each device adds its updates, so a
 * split of I makes a partial sum; rows whole, D splits kept. (The gradient of a vocabulary-
 * parallel table is built so, split on D as the activations are, and an all_to_all moves it to
 * the table's row split: (rows, D) / devices, far less than gathering the updates' D.) */
static int scatter_add(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t ix = x->ops[0], u = x->ops[1];
  int32_t ir = c->g->values[ix].shape.rank, ur = c->g->values[u].shape.rank;
  Sh I = c->deferred[ix] ? natural(c, ix) : resolved(c, ix);
  Sh U = c->deferred[u] ? natural(c, u) : resolved(c, u);
  I.partial = U.partial = 0;
  for (int32_t d = 0; d < ir; d++) memcpy(U.s.axes[d], I.s.axes[d], IR_MAX_SPLIT_AXES);
  uint32_t used = used_axes(&I.s, ir);
  for (int32_t d = ir; d < ur; d++) used |= keep_prefix(&U.s, d, used);
  memset(out, 0, sizeof *out);
  for (int32_t d = ir; d < ur; d++) memcpy(out->s.axes[d - ir + 1], U.s.axes[d], IR_MAX_SPLIT_AXES);
  out->partial = used_axes(&I.s, ir);
  int32_t ops[2] = {get(c, ix, &I), get(c, u, &U)};
  c->val[v] = emit_as(c, v, ops, out);
  return IR_OK;
}

/* top_k_indices along the last dim: that dim whole. */
static int top_k(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t a = x->ops[0];
  Sh in = c->deferred[a] ? natural(c, a) : resolved(c, a);
  in.partial = 0;
  memset(in.s.axes[x->shape.rank - 1], 0, IR_MAX_SPLIT_AXES);
  *out = in;
  int32_t op = get(c, a, &in);
  c->val[v] = emit_as(c, v, &op, out);
  return IR_OK;
}

/* attention (q, k, v (..., T, H); grouped, k and v with fewer heads) and attention_grad (also
 * dout; result (3, ..., T, H), grouped (..., K, G + 2, T, H)): the leading dims are independent
 * problems and keep the query's splits (the first operand's that has some); H whole. T stays
 * whole too, unless the query is split on it (context parallelism: attention_seq). */
static int attention_seq(Ctx *c, int32_t v, const Sh *in, const uint8_t *taxes, Sh *out);

/* attention_grad's stack with the leading dims of its operands sharded as `in` (rank: q's), T
 * and H whole: grouped, (..., K, G + 2, T, H) keeps them in place, else (3, ..., T, H) one on. */
static Sh attention_stack(const Sh *in, int32_t rank, bool grouped) {
  Sh st = {0};
  if (grouped)
    memcpy(st.s.axes[0], in->s.axes[0], (size_t)(rank - 2) * sizeof in->s.axes[0]);
  else
    memcpy(st.s.axes[1], in->s.axes[0], (size_t)rank * sizeof in->s.axes[0]);
  return st;
}

static int attention(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  int32_t rank = c->g->values[x->ops[0]].shape.rank, ops[5];
  int32_t pos = ir_attention_positions(x), nt = x->nops - (pos != IR_NONE); /* the tensors */
  Sh in = {0}, whole = {0};
  for (int32_t k = 0; k < nt && !used_axes(&in.s, rank); k++) {
    int32_t a = x->ops[k];
    in = c->deferred[a] ? natural(c, a) : resolved(c, a);
    in.partial = 0;
    memset(in.s.axes[rank - 2], 0, 2 * sizeof in.s.axes[0]);
  }
  Sh qs = c->deferred[x->ops[0]] ? natural(c, x->ops[0]) : resolved(c, x->ops[0]);
  uint32_t tbits = dim_axes(&qs.s, rank - 2);
  int64_t T = c->g->values[x->ops[0]].shape.dims[rank - 2];
  if (tbits && !(tbits & used_axes(&in.s, rank)) && pos == IR_NONE &&
      T % count(c, &qs.s, rank - 2) == 0)
    return attention_seq(c, v, &in, qs.s.axes[rank - 2], out);
  for (int32_t k = 0; k < nt; k++) ops[k] = get(c, x->ops[k], &in);
  if (pos != IR_NONE) ops[nt] = get(c, pos, &whole); /* the positions of the whole sequence */
  *out = in;
  if (x->op == IR_ATTENTION_GRAD)
    *out = attention_stack(
        &in, rank,
        ir_attention_group(&c->g->values[x->ops[0]].shape, &c->g->values[x->ops[1]].shape) > 1);
  c->val[v] = emit_as(c, v, ops, out);
  return IR_OK;
}

/* Attention over a sequence split on `taxes` (the query's T; the leading dims as *in): each
 * device runs the fused op on its chunk of the queries against all the keys. k and v are
 * gathered along T; the query positions, which carry the causal mask, are this device's chunk
 * of an iota over T. The forward's result is split as the query. The gradient's local stack
 * (3, ..., T, H) holds dq in rows [0, T / S) and the device's summands of dk and dv over all of
 * T: dq is sliced out, dk and dv reduce_scattered along T, and the three concatenated again as
 * the stack split on T. */
static int attention_seq(Ctx *c, int32_t v, const Sh *in, const uint8_t *taxes, Sh *out) {
  const IrValue *x = &c->g->values[v];
  const IrShape *gq = &c->g->values[x->ops[0]].shape;
  int32_t rank = gq->rank, ops[5], n = 0;
  bool grad = x->op == IR_ATTENTION_GRAD;
  Sh qin = *in, whole = {0}, chunk = {0};
  memcpy(qin.s.axes[rank - 2], taxes, IR_MAX_SPLIT_AXES);
  ops[n++] = get(c, x->ops[0], &qin);
  ops[n++] = get(c, x->ops[1], in);
  ops[n++] = get(c, x->ops[2], in);
  if (grad) ops[n++] = get(c, x->ops[3], &qin);
  IrShape ts = {.rank = 1, .dims = {gq->dims[rank - 2]}};
  memcpy(chunk.s.axes[0], taxes, IR_MAX_SPLIT_AXES);
  int32_t pos = mark(c, ir_iota(c->h, DT_I32, 1, ts.dims, 0), &whole.s);
  ops[n++] = reshard(c, pos, whole, &chunk, &ts);
  IrValue p = *x;
  p.ops = ops;
  p.nops = n;
  if (!grad) {
    *out = qin;
    p.split = qin.s;
    c->val[v] = ir_graph_add(c->h, &p);
    return IR_OK;
  }
  int64_t G = ir_attention_group(gq, &c->g->values[x->ops[1]].shape);
  bool grouped = G > 1;
  Sh st = attention_stack(in, rank, grouped); /* T (dim rank - 1) whole */
  p.split = st.s;
  int32_t R = ir_graph_add(c->h, &p);
  if (R == IR_NONE) return IR_ERR;
  const IrShape rs = c->h->values[R].shape; /* a copy: the slices below grow h */
  int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK];
  int32_t sax = grouped ? rank - 2 : 0, rows = rank - 1; /* the stack's axis, its rows */
  memcpy(hi, rs.dims, sizeof hi);
  *out = st;
  memcpy(out->s.axes[rows], taxes, IR_MAX_SPLIT_AXES);
  hi[sax] = grouped ? G : 1;
  hi[rows] = c->h->values[ops[0]].shape.dims[rank - 2];
  int32_t parts[2];
  parts[0] = mark(c, ir_slice(c->h, R, lo, hi), &out->s); /* dq: the local queries */
  lo[sax] = hi[sax];
  hi[sax] += 2;
  hi[rows] = rs.dims[rows];
  Sh sum = st;
  sum.partial = dim_axes(&out->s, rows);
  IrShape gs = x->shape; /* dk and dv's global shape */
  gs.dims[sax] = 2;
  parts[1] = reshard(c, mark(c, ir_slice(c->h, R, lo, hi), &st.s), sum, out, &gs);
  c->val[v] = mark(c, ir_concat(c->h, 2, parts, sax), &out->s);
  return c->val[v] == IR_NONE ? IR_ERR : IR_OK;
}

/* ---- leaves -------------------------------------------------------------------------- */

static const PassShardLeaf *leaf_find(const PassShard *o, const char *name) {
  for (int32_t i = 0; i < o->nleaves; i++)
    if (strcmp(o->leaves[i].name, name) == 0) return &o->leaves[i];
  return NULL;
}

static int leaf(Ctx *c, int32_t v, Sh *out) {
  const IrValue *x = &c->g->values[v];
  const char *name = x->name;
  if (!strncmp(name, "opt/m/", 6) || !strncmp(name, "opt/v/", 6)) name += 6;
  const PassShardLeaf *lf = leaf_find(c->opt, name);
  memset(out, 0, sizeof *out);
  if (lf) out->s = lf->split;
  for (int32_t d = 0; d < x->shape.rank; d++)
    if (x->shape.dims[d] % count(c, &out->s, d))
      return ir_graph_fail(c->h,
                           "shard: %s '%s': dim %d (size %lld) does not divide over %lld "
                           "devices",
                           ir_op_name(x->op), x->name, d, (long long)x->shape.dims[d],
                           (long long)count(c, &out->s, d));
  /* an input is bound split on its rows only (the runtime fills whole rows of the batch); a
   * split of the sequence (seq axes: context parallelism) is this device's chunk of them */
  Sh bound = *out;
  if (x->op == IR_INPUT)
    for (int32_t d = 1; d < x->shape.rank; d++) memset(bound.s.axes[d], 0, IR_MAX_SPLIT_AXES);
  IrValue p = *x;
  p.shape = local_shape(c, &x->shape, &bound.s);
  p.split = bound.s;
  c->val[v] = ir_graph_add(c->h, &p);
  if (!sh_eq(&bound, out)) c->val[v] = reshard(c, c->val[v], bound, out, &x->shape);
  return IR_OK;
}

/* ---- the walk ------------------------------------------------------------------------ */

/* Forgets every reshard and deferred emission made so far: the values after this point make
 * their own, as a program that starts here would. */
static void alts_forget(Ctx *c) {
  for (int32_t v = 0; v < c->n; v++) {
    for (Alt *a = c->alts[v], *n; a; a = n) n = a->next, free(a);
    c->alts[v] = NULL;
  }
}

static int shard_value(Ctx *c, int32_t v) {
  const IrValue *x = &c->g->values[v];
  Sh out = {0};
  int st;
  /* a microbatch after the first gathers its fsdp weights again rather than keep the earlier
   * microbatches' gathers alive across it: the memory of one microbatch's weights, not all */
  if (!strcmp(x->tag, PASS_MICROBATCH_START_TAG)) alts_forget(c);
  const char *saved = c->h->origin;
  ir_graph_set_origin(c->h, x->origin);
  if (x->op == IR_PARAMETER || x->op == IR_INPUT) {
    st = leaf(c, v, &out);
  } else if (deferrable(c, v)) {
    c->deferred[v] = true;
    ir_graph_set_origin(c->h, saved);
    return IR_OK;
  } else if (ir_op_flags(x->op) & IR_COLLECTIVE) {
    st = ir_graph_fail(c->h, "shard: %%%d (%s) at %s: the graph is already per-device", v,
                       ir_op_name(x->op), *x->origin ? x->origin : "?");
  } else if (ir_op_flags(x->op) & IR_ELEMENTWISE) {
    st = elementwise(c, v, &out);
  } else {
    switch (x->op) {
    case IR_REDUCE_SUM:
    case IR_REDUCE_MAX: st = reduce(c, v, &out); break;
    case IR_DOT: st = dot(c, v, &out); break;
    case IR_RESHAPE: st = reshape(c, v, &out); break;
    case IR_TRANSPOSE: st = transpose(c, v, &out); break;
    case IR_SLICE:
    case IR_PAD:
    case IR_CONCAT: st = shaping(c, v, &out); break;
    case IR_GATHER: st = gather(c, v, &out); break;
    case IR_SCATTER_ADD: st = scatter_add(c, v, &out); break;
    case IR_TOP_K_INDICES: st = top_k(c, v, &out); break;
    case IR_ATTENTION:
    case IR_ATTENTION_GRAD: st = attention(c, v, &out); break;
    default: st = ir_graph_fail(c->h, "shard: %%%d (%s): no sharding rule", v, ir_op_name(x->op));
    }
  }
  ir_graph_set_origin(c->h, saved);
  if (st != IR_OK || c->val[v] == IR_NONE) return IR_ERR;
  c->sh[v] = out;
  const Sh *want = c->want[v];
  /* a microbatch's gradient goes to its parameter's sharding when that scatters its partial
   * sum: the running sum then stays a device's chunk (else it stays partial, reduced once) */
  if (!want && c->scatter[v] && (out.partial & used_axes(&c->scatter[v]->s, x->shape.rank)))
    want = c->scatter[v];
  if (want && !sh_eq(want, &out)) { /* a gradient: to its parameter's sharding now */
    int32_t r = reshard(c, c->val[v], out, want, &x->shape);
    if (r == IR_NONE) return IR_ERR;
    c->val[v] = r;
    c->sh[v] = *want;
  }
  return IR_OK;
}

/* The sharding output `name` leaves in: X's for "new:X" and "grad:X", else whole. */
static Sh output_sharding(const Ctx *c, const char *name, int32_t v) {
  Sh s = {0};
  const char *leafname = !strncmp(name, "new:", 4)    ? name + 4
                         : !strncmp(name, "grad:", 5) ? name + 5
                                                      : NULL;
  if (!leafname) return s;
  int32_t lv = ir_graph_find(c->g, IR_PARAMETER, leafname);
  if (lv != IR_NONE && ir_shape_eq(&c->g->values[lv].shape, &c->g->values[v].shape)) {
    const char *n = leafname;
    if (!strncmp(n, "opt/m/", 6) || !strncmp(n, "opt/v/", 6)) n += 6;
    const PassShardLeaf *lf = leaf_find(c->opt, n);
    if (lf) s.s = lf->split;
  }
  return s;
}

/* hint[v]: the sharding of the parameter gradient that v flows into through elementwise ops of
 * its shape (casts, the sum of a tied table's two gradients), or NULL: v is no such gradient. */
static void hints(Ctx *c) {
  for (int32_t v = c->n - 1; v >= 0; v--) {
    const IrValue *x = &c->g->values[v];
    if (c->want[v]) c->hint[v] = c->want[v];
    if (!c->hint[v] || !(ir_op_flags(x->op) & IR_ELEMENTWISE)) continue;
    for (int32_t k = 0; k < x->nops; k++)
      if (!c->hint[x->ops[k]] && ir_shape_eq(&c->g->values[x->ops[k]].shape, &x->shape))
        c->hint[x->ops[k]] = c->hint[v];
  }
}

/* The summands of a microbatch mean (pass_microbatch tags the sums PASS_MICROBATCH_TAG): the
 * values the tagged values under gradient output v read, each one microbatch's gradient. */
static void mark_summands(Ctx *c, int32_t v, const Sh *want) {
  int32_t *stack = base_xmalloc(((size_t)c->n + 1) * sizeof *stack), top = 0;
  stack[top++] = v;
  while (top > 0) {
    const IrValue *x = &c->g->values[stack[--top]];
    if (strcmp(x->tag, PASS_MICROBATCH_TAG) != 0) continue;
    for (int32_t k = 0; k < x->nops && top < c->n; k++) {
      int32_t u = x->ops[k];
      if (!strcmp(c->g->values[u].tag, PASS_MICROBATCH_TAG))
        stack[top++] = u;
      else if (c->g->values[u].op != IR_CONSTANT)
        c->scatter[u] = want;
    }
  }
  free(stack);
}

static void ctx_free(Ctx *c) {
  if (c->alts)
    for (int32_t v = 0; v < c->n; v++)
      for (Alt *a = c->alts[v], *n; a; a = n) n = a->next, free(a);
  free(c->alts);
  free(c->val);
  free(c->sh);
  free(c->deferred);
  free(c->want);
  free(c->hint);
  free(c->scatter);
  free(c->wants);
  ir_graph_free(c->h);
}

int pass_shard(IrGraph *g, const PassOptions *opt) {
  const PassShard *o = opt ? opt->shard : NULL;
  if (!o || ir_mesh_devices(&o->mesh) <= 1) return IR_OK;
  for (int32_t a = 0; a < o->mesh.naxes; a++)
    if (o->mesh.sizes[a] < 2)
      return ir_graph_fail(g, "shard: mesh axis %s has size %lld (leave axes of size 1 out)",
                           o->mesh.names[a], (long long)o->mesh.sizes[a]);
  if (g->mesh.naxes) return ir_graph_fail(g, "shard: the graph is already per-device");
  int32_t n = g->nvalues;
  Ctx c = {.g = g, .m = &o->mesh, .opt = o, .n = n};
  const PassShardLeaf *ids = leaf_find(o, "ids");
  if (ids) c.batch_axes = dim_axes(&ids->split, 0);
  if (o->seq_balanced && ids && nax(&ids->split, 1) == 1) c.zig = ids->split.axes[1][0];
  c.h = ir_graph_new();
  c.h->matmul = g->matmul;
  ir_graph_reserve(c.h, n + n / 4); /* collectives and reshards come on top */
  c.val = base_xmalloc((size_t)(n + 1) * sizeof *c.val);
  c.sh = base_xcalloc((size_t)n + 1, sizeof *c.sh);
  c.deferred = base_xcalloc((size_t)n + 1, sizeof *c.deferred);
  c.alts = base_xcalloc((size_t)n + 1, sizeof *c.alts);
  c.want = base_xcalloc((size_t)n + 1, sizeof *c.want);
  c.hint = base_xcalloc((size_t)n + 1, sizeof *c.hint);
  c.scatter = base_xcalloc((size_t)n + 1, sizeof *c.scatter);
  c.wants = base_xcalloc((size_t)g->noutputs + 1, sizeof *c.wants);
  for (int32_t v = 0; v < n; v++) c.val[v] = IR_NONE;
  if (ir_graph_set_mesh(c.h, &o->mesh)) {
    ir_graph_fail(g, "%s", ir_graph_error(c.h));
    ctx_free(&c);
    return IR_ERR;
  }
  for (int32_t k = 0; k < g->noutputs; k++)
    if (!strncmp(g->outputs[k].name, "grad:", 5)) {
      c.wants[k] = output_sharding(&c, g->outputs[k].name, g->outputs[k].value);
      c.want[g->outputs[k].value] = &c.wants[k];
      mark_summands(&c, g->outputs[k].value, &c.wants[k]);
    }
  hints(&c);
  int st = IR_OK;
  for (int32_t v = 0; v < n && st == IR_OK; v++) st = shard_value(&c, v);
  for (int32_t k = 0; k < g->noutputs && st == IR_OK; k++) {
    int32_t v = g->outputs[k].value;
    Sh want = output_sharding(&c, g->outputs[k].name, v);
    int32_t hv = get(&c, v, &want);
    st = hv == IR_NONE ? IR_ERR : ir_graph_add_output(c.h, g->outputs[k].name, hv);
  }
  if (st != IR_OK || ir_graph_error(c.h)) {
    ir_graph_fail(g, "%s", ir_graph_error(c.h) ? ir_graph_error(c.h) : "shard: failed");
    ctx_free(&c);
    return IR_ERR;
  }
  ir_graph_replace(g, c.h);
  ctx_free(&c);
  /* pass_simplify left the transposes that feed or take a product to this per-device program */
  if (pass_dce(g, opt) != IR_OK) return IR_ERR;
  return pass_transpose_dot(g, opt);
}
