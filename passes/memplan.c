/* memplan.c: one offset per buffer in a single slab.
 *
 * The step executes values in index order. The slab starts with the fixed region: every
 * parameter (model parameters, then the optimizer's opt/... state, in graph order) and every
 * input, each at its own offset for the whole run, since the runtime fills them before a step
 * and reads them after. The rest of the slab holds the other values, each from the step that
 * computes it to its last use (outputs: to the end), placed in the gaps that values no longer
 * live have left. The step is planned twice, placing each value in the first gap it fits and
 * in the smallest, and the smaller slab is kept: neither wins everywhere. The slab is at least
 * the most bytes live at once; first fit alone left fuji-70b on 16 H100s 20% above that (234.2
 * against 195.2 GiB), the better of the two leaves 4% (202.6 GiB).
 *
 * In-place updates: an output "new:X", X a parameter, is written over X's buffer. That is safe
 * when the value is elementwise (element i reads only element i of its operands) and nothing
 * after it reads X; the pass checks both and refuses a graph where they fail, rather than plan
 * a wrong program.
 *
 * Fusion: a value the backend computes inside its consumer's loop (materialized[v] false) gets
 * no buffer, and its operands stay live until that consumer runs.
 *
 * Pipeline stages: a device runs only its own stage's values (IrValue.stage) and those of
 * every device (stage 0), so values of two stages may share bytes whatever their live ranges.
 * When the graph holds values of two stages or more, the every-device values (and every output,
 * which the end of the step may copy from its stage to the others) are planned first, above the
 * fixed region; each stage's values are then planned on their own above those, from the same
 * offset: the slab is the fixed region, the every-device values and the largest stage. The
 * fixed region is laid out the same way: the parameters and AdamW moments a stage's devices
 * alone hold (staged_leaves) lie past the every-device leaves, each stage's from the same
 * offset.
 *
 * Invariants: every offset is 64-byte aligned; two values share bytes only if their live
 * ranges do not overlap, or one is an in-place "new:X" over X, or they are of two stages.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

#define ALIGN 64

static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int64_t value_bytes(const IrValue *v) {
  return ir_shape_numel(&v->shape) * (int64_t)ir_dtype_size(v->dtype);
}

/* ---- the free list: disjoint [off, off + len) gaps, sorted by offset ---------------------- */

typedef struct {
  int64_t off, len;
} Gap;

typedef struct {
  Gap *gaps;
  int32_t n, cap;
  int64_t top;   /* end of the slab so far */
  int64_t split; /* no value crosses a multiple of this (a device's buffer cap); 0: none */
  bool best;     /* place a value in the smallest gap it fits (best fit), else the first */
} Heap;

/* Where a value of len bytes may start at or after off: off, or the next multiple of
 * h->split when it would cross one there (a value larger than split starts anywhere). */
static int64_t fit_at(const Heap *h, int64_t off, int64_t len) {
  int64_t b = h->split;
  if (b <= 0 || len > b || off / b == (off + len - 1) / b) return off;
  return (off / b + 1) * b;
}

static void heap_free(Heap *h, int64_t off, int64_t len);

/* Whether a value of len bytes fits in gap i. */
static bool gap_fits(const Heap *h, int32_t i, int64_t len) {
  return fit_at(h, h->gaps[i].off, len) + len <= h->gaps[i].off + h->gaps[i].len;
}

static int64_t heap_alloc(Heap *h, int64_t len) {
  int32_t from = 0;
  if (h->best) { /* the smallest gap that fits, else none (the loop below then finds none) */
    from = h->n;
    for (int32_t i = 0; i < h->n; i++)
      if (gap_fits(h, i, len) && (from == h->n || h->gaps[i].len < h->gaps[from].len)) from = i;
  }
  for (int32_t i = from; i < h->n; i++) {
    int64_t off = fit_at(h, h->gaps[i].off, len);
    Gap g = h->gaps[i];
    if (off + len > g.off + g.len) continue;
    if (off == g.off) {
      h->gaps[i].off += len;
      h->gaps[i].len -= len;
      if (h->gaps[i].len == 0) {
        memmove(&h->gaps[i], &h->gaps[i + 1], (size_t)(h->n - i - 1) * sizeof *h->gaps);
        h->n--;
      }
    } else { /* from the middle of the gap: what is before it stays a gap */
      h->gaps[i].len = off - g.off;
      if (g.off + g.len > off + len) heap_free(h, off + len, g.off + g.len - (off + len));
    }
    return off;
  }
  int64_t off = fit_at(h, h->top, len);
  int64_t skipped = h->top;
  h->top = off + len;
  if (off > skipped) heap_free(h, skipped, off - skipped); /* below the top: stays a gap */
  return off;
}

static void heap_free(Heap *h, int64_t off, int64_t len) {
  if (h->n == h->cap) {
    h->cap = h->cap ? 2 * h->cap : 64;
    h->gaps = base_xrealloc(h->gaps, (size_t)h->cap * sizeof *h->gaps);
  }
  int32_t i = 0;
  while (i < h->n && h->gaps[i].off < off) i++;
  memmove(&h->gaps[i + 1], &h->gaps[i], (size_t)(h->n - i) * sizeof *h->gaps);
  h->gaps[i] = (Gap){off, len};
  h->n++;
  /* coalesce with the neighbours */
  if (i + 1 < h->n && h->gaps[i].off + h->gaps[i].len == h->gaps[i + 1].off) {
    h->gaps[i].len += h->gaps[i + 1].len;
    memmove(&h->gaps[i + 1], &h->gaps[i + 2], (size_t)(h->n - i - 2) * sizeof *h->gaps);
    h->n--;
  }
  if (i > 0 && h->gaps[i - 1].off + h->gaps[i - 1].len == h->gaps[i].off) {
    h->gaps[i - 1].len += h->gaps[i].len;
    memmove(&h->gaps[i], &h->gaps[i + 1], (size_t)(h->n - i - 1) * sizeof *h->gaps);
    h->n--;
  }
  /* a gap that reaches the top shrinks the slab instead */
  if (h->n && h->gaps[h->n - 1].off + h->gaps[h->n - 1].len == h->top) {
    h->top = h->gaps[h->n - 1].off;
    h->n--;
  }
}

/* Takes [off, off + len), free in h (inside a gap, or at or past the top). */
static void heap_take(Heap *h, int64_t off, int64_t len) {
  if (off >= h->top) {
    int64_t old = h->top;
    h->top = off + len;
    if (off > old) heap_free(h, old, off - old); /* below the top: stays a gap */
    return;
  }
  for (int32_t i = 0; i < h->n; i++) {
    Gap g = h->gaps[i];
    if (off < g.off || off + len > g.off + g.len) continue;
    memmove(&h->gaps[i], &h->gaps[i + 1], (size_t)(h->n - i - 1) * sizeof *h->gaps);
    h->n--;
    if (off > g.off) heap_free(h, g.off, off - g.off);
    if (g.off + g.len > off + len) heap_free(h, off + len, g.off + g.len - (off + len));
    return;
  }
}

/* Where len bytes are free in every one of the nh heaps (a value every device runs, beside
 * each stage's own): the first such place, or with best fit the tightest, taken in all. The
 * free space of a heap is its gaps and everything from its top. */
static int64_t heaps_alloc(Heap *hs, int32_t nh, int64_t len) {
  if (nh == 1) return heap_alloc(&hs[0], len);
  Gap *cur = NULL, *next = NULL; /* the free space common to the heaps so far, sorted */
  int32_t ncur = 0, nnext = 0;
  for (int32_t k = 0; k < nh; k++) {
    const Heap *h = &hs[k];
    Gap *mine = base_xmalloc(((size_t)h->n + 1) * sizeof *mine);
    if (h->n) memcpy(mine, h->gaps, (size_t)h->n * sizeof *mine); /* gaps is NULL while none */
    mine[h->n] = (Gap){h->top, INT64_MAX - h->top};
    if (k == 0) {
      cur = mine, ncur = h->n + 1;
      continue;
    }
    next = base_xmalloc(((size_t)ncur + h->n + 1) * sizeof *next);
    nnext = 0;
    for (int32_t i = 0, j = 0; i < ncur && j < h->n + 1;) {
      int64_t a = cur[i].off > mine[j].off ? cur[i].off : mine[j].off;
      int64_t ei = cur[i].off + cur[i].len, ej = mine[j].off + mine[j].len;
      int64_t b = ei < ej ? ei : ej;
      if (a < b) next[nnext++] = (Gap){a, b - a};
      if (ei < ej)
        i++;
      else
        j++;
    }
    free(cur);
    free(mine);
    cur = next, ncur = nnext;
  }
  int64_t at = -1, tight = INT64_MAX;
  for (int32_t i = 0; i < ncur; i++) {
    int64_t off = fit_at(&hs[0], cur[i].off, len);
    if (off + len > cur[i].off + cur[i].len) continue;
    bool open = cur[i].len >= INT64_MAX / 2; /* past every top */
    if (at < 0 || (hs[0].best && !open && cur[i].len < tight))
      at = off, tight = open ? INT64_MAX : cur[i].len;
    if (!hs[0].best) break;
  }
  free(cur);
  for (int32_t k = 0; k < nh; k++) heap_take(&hs[k], at, len);
  return at;
}

/* ---- liveness ------------------------------------------------------------------------------ */

/* at[v]: where v's operands are read. A materialized value reads them at its own index; a
 * fused one (computed inside its consumer's loop) at its consumer's, which is later. */
static void read_points(const IrGraph *g, const bool *mat, int32_t *at) {
  int32_t n = g->nvalues;
  for (int32_t v = 0; v < n; v++) at[v] = v;
  if (!mat) return;
  for (int32_t u = n - 1; u >= 0; u--) /* consumers come after: their at[] is final */
    for (int32_t k = 0; k < g->values[u].nops; k++) {
      int32_t o = g->values[u].ops[k];
      if (!mat[o] && at[u] > at[o]) at[o] = at[u];
    }
}

/* last[v]: the latest point at which v is read; outputs live to g->nvalues. */
static void last_uses(const IrGraph *g, const bool *mat, int32_t *last) {
  int32_t n = g->nvalues, *at = base_xmalloc(((size_t)n + 1) * sizeof *at);
  read_points(g, mat, at);
  for (int32_t v = 0; v < n; v++) last[v] = at[v];
  for (int32_t v = 0; v < n; v++)
    for (int32_t k = 0; k < g->values[v].nops; k++) {
      int32_t o = g->values[v].ops[k];
      if (at[v] > last[o]) last[o] = at[v];
    }
  for (int32_t i = 0; i < g->noutputs; i++) last[g->outputs[i].value] = n;
  free(at);
}

/* For each value, the parameter it updates in place (new:X over X), or IR_NONE. */
static int in_place_targets(IrGraph *g, int32_t *target) {
  int32_t n = g->nvalues, *reader = base_xmalloc(((size_t)n + 1) * sizeof *reader);
  for (int32_t v = 0; v < n; v++) target[v] = reader[v] = IR_NONE;
  for (int32_t u = 0; u < n; u++) /* the last value that reads each value */
    for (int32_t k = 0; k < g->values[u].nops; k++) reader[g->values[u].ops[k]] = u;
  for (int32_t i = 0; i < g->noutputs; i++) {
    const char *name = g->outputs[i].name;
    int32_t v = g->outputs[i].value;
    if (strncmp(name, "new:", 4) != 0) continue;
    int32_t x = ir_graph_find(g, IR_PARAMETER, name + 4);
    if (x == IR_NONE) return ir_graph_fail(g, "memplan: output %s updates no parameter", name);
    if (v == x) continue; /* unchanged: nothing to write */
    if (!(ir_op_flags(g->values[v].op) & IR_ELEMENTWISE) ||
        !ir_shape_eq(&g->values[v].shape, &g->values[x].shape)) {
      free(reader);
      return ir_graph_fail(g,
                           "memplan: %%%d (%s) for %s is not elementwise over %s; cannot update "
                           "in place",
                           v, ir_op_name(g->values[v].op), name, name + 4);
    }
    /* Readers of X after v would see the new value. (v's own read is element by element.) */
    if (reader[x] > v) {
      int32_t u = reader[x];
      free(reader);
      return ir_graph_fail(g, "memplan: %%%d reads %s after its update %%%d", u, name + 4, v);
    }
    target[v] = x;
  }
  free(reader);
  return IR_OK;
}

/* ---- the plan ------------------------------------------------------------------------------- */

static bool is_fixed(const IrValue *v) { return v->op == IR_PARAMETER || v->op == IR_INPUT; }

/* Another graph's plan whose slab this one shares (pass_memplan_over), or none. */
typedef struct {
  const IrGraph *g;
  const MemPlan *plan;
  int64_t bytes; /* what the other graph keeps between runs: this one's own values start here */
} Under;

/* The offset of the parameter of `under` named as val, or -1. */
static int64_t shared_param(const Under *u, const IrValue *val) {
  if (!u || val->op != IR_PARAMETER) return -1;
  int32_t w = ir_graph_find(u->g, IR_PARAMETER, val->name);
  if (w == IR_NONE || u->g->values[w].dtype != val->dtype ||
      !ir_shape_eq(&u->g->values[w].shape, &val->shape))
    return -1;
  return u->plan->offset[w];
}

/* readers[v]: 1 + the stage of every value that reads v; -1 when two stages read it or an
 * every-device value does; 0 when nothing reads it. */
static void reader_stages(const IrGraph *g, int32_t *readers) {
  for (int32_t v = 0; v < g->nvalues; v++) readers[v] = 0;
  for (int32_t u = 0; u < g->nvalues; u++) {
    const IrValue *x = &g->values[u];
    int32_t st = x->stage > 0 ? x->stage : -1;
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k];
      readers[o] = readers[o] == 0 || readers[o] == st ? st : -1;
    }
  }
}

/* Whether leaf v is of stage st (1 + s) and only values of stage st read it. */
static bool stage_only(const IrGraph *g, const int32_t *readers, int32_t v, int32_t st) {
  return v != IR_NONE && g->values[v].stage == st && readers[v] == st;
}

/* staged[v] (in: reader_stages; out): 1 + s for a parameter and its AdamW moments ("opt/m/P",
 * "opt/v/P") when all three are of stage s and only values of stage s read them, else 0 (a
 * tied table that two stages read, the inputs, which every device writes, every other value).
 * The program says so per parameter (RtParamSlot.apart), the runtime fills them on stage s's
 * devices only, and the other stages' may take their bytes. */
static void staged_leaves(const IrGraph *g, int32_t *staged) {
  int32_t n = g->nvalues;
  int32_t *readers = base_xmalloc(((size_t)n + 1) * sizeof *readers);
  memcpy(readers, staged, (size_t)n * sizeof *readers);
  for (int32_t v = 0; v < n; v++) staged[v] = 0;
  char name[1024];
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    int32_t st = x->stage;
    if (x->op != IR_PARAMETER || st <= 0 || strncmp(x->name, "opt/", 4) == 0 ||
        !stage_only(g, readers, v, st))
      continue;
    snprintf(name, sizeof name, "opt/m/%s", x->name);
    int32_t m = ir_graph_find(g, IR_PARAMETER, name);
    snprintf(name, sizeof name, "opt/v/%s", x->name);
    int32_t w = ir_graph_find(g, IR_PARAMETER, name);
    if ((m == IR_NONE) != (w == IR_NONE)) continue;
    if (m != IR_NONE && (!stage_only(g, readers, m, st) || !stage_only(g, readers, w, st)))
      continue;
    staged[v] = st;
    if (m != IR_NONE) staged[m] = staged[w] = st;
  }
  free(readers);
}

/* Parameters and inputs at the start of the slab (or of what `under` leaves), in graph order;
 * a parameter `under` has stays where it has it. With stages (state: staged_leaves, or
 * NULL), the every-device ones come first, then each stage's own from the same offset; the
 * region ends at the largest. */
static int64_t place_fixed(const IrGraph *g, const Under *u, const int32_t *state, int32_t nregions,
                           MemPlan *p, int64_t split) {
  int64_t top = u ? align_up(u->bytes) : 0, base = top, end = top;
  Heap h = {.split = split};
  for (int32_t r = 0; r < (state ? nregions : 1); r++) {
    if (r == 1) base = top; /* the stages' state from the every-device leaves' end */
    if (r > 0) top = base;
    for (int32_t v = 0; v < g->nvalues; v++) {
      const IrValue *val = &g->values[v];
      if (!is_fixed(val) || (state ? state[v] : 0) != r) continue;
      int64_t at = shared_param(u, val);
      if (at < 0) {
        at = fit_at(&h, top, align_up(p->bytes[v])); /* the bytes skipped stay unused */
        top = at + align_up(p->bytes[v]);
      }
      p->offset[v] = at;
      if (val->op == IR_INPUT)
        p->input_bytes += p->bytes[v];
      else if (strncmp(val->name, "opt/", 4) == 0)
        p->opt_bytes += p->bytes[v];
      else
        p->param_bytes += p->bytes[v];
    }
    if (top > end) end = top;
  }
  return end;
}

int pass_memplan(IrGraph *g, MemPlan *p) { return pass_memplan_fused(g, NULL, p); }

/* region[v]: 0 for values every device runs (and outputs), 1 + ... for one stage's; returns
 * the regions (1: no two stages, everything in region 0). */
static int32_t stage_regions(const IrGraph *g, int32_t *region) {
  int32_t most = 0, first = 0;
  bool two = false;
  for (int32_t v = 0; v < g->nvalues; v++) {
    int32_t st = g->values[v].stage;
    region[v] = st > 0 ? st : 0;
    if (st > 0 && first && st != first) two = true;
    if (st > 0 && !first) first = st;
    if (st > most) most = st;
  }
  for (int32_t o = 0; o < g->noutputs; o++) region[g->outputs[o].value] = 0;
  if (!two) {
    memset(region, 0, (size_t)g->nvalues * sizeof *region);
    return 1;
  }
  return most + 1;
}

/* A dead value's bytes back to its stage's heap, or to every heap (region 0). */
static void release(Heap *hs, int32_t nh, int32_t region, int64_t off, int64_t len, int64_t *live) {
  if (region > 0)
    heap_free(&hs[region - 1], off, len);
  else
    for (int32_t k = 0; k < nh; k++) heap_free(&hs[k], off, len);
  live[region] -= len;
}

static int plan_fit(IrGraph *g, const bool *mat, const Under *u, int64_t split, bool best,
                    MemPlan *p) {
  memset(p, 0, sizeof *p);
  int32_t n = g->nvalues;
  p->nvalues = n;
  p->offset = base_xcalloc((size_t)n + 1, sizeof *p->offset);
  p->bytes = base_xcalloc((size_t)n + 1, sizeof *p->bytes);
  int32_t *last = base_xmalloc(((size_t)n + 1) * sizeof *last);
  int32_t *target = base_xmalloc(((size_t)n + 1) * sizeof *target);
  int32_t **frees = base_xcalloc((size_t)n + 2, sizeof *frees); /* values whose last use is i */
  int32_t *nfree = base_xcalloc((size_t)n + 2, sizeof *nfree);
  for (int32_t v = 0; v < n; v++)
    p->bytes[v] = !mat || mat[v] || is_fixed(&g->values[v]) ? value_bytes(&g->values[v]) : 0;
  last_uses(g, mat, last);
  int rc = in_place_targets(g, target);
  int32_t *region = base_xmalloc(((size_t)n + 1) * sizeof *region);
  int32_t nregions = stage_regions(g, region);
  int32_t *state = NULL; /* with stages: staged_leaves */
  if (nregions > 1 && rc == IR_OK) {
    state = base_xcalloc((size_t)n + 1, sizeof *state);
    reader_stages(g, state);
    staged_leaves(g, state);
    for (int32_t v = 0; v < n;
         v++) { /* a leaf is apart only as staged state, and so is its update */
      if (is_fixed(&g->values[v])) region[v] = state[v];
      if (target[v] != IR_NONE && state[target[v]]) region[v] = state[target[v]];
    }
  }
  int64_t cap = split > 0 ? split / ALIGN * ALIGN : 0;
  int64_t base = place_fixed(g, u, state, nregions, p, cap), most = 0;
  free(state);
  p->fixed_bytes = base;
  /* One heap per stage (one in all without stages), from the fixed region's end: a stage's
   * value takes bytes in its stage's heap, an every-device value the same bytes in every heap.
   * A device of stage s so sees the plan of its own values and the every-device ones. */
  int32_t nh = nregions > 1 ? nregions - 1 : 1;
  Heap *hs = base_xcalloc((size_t)nh, sizeof *hs);
  int64_t *live = base_xcalloc((size_t)nh + 1, sizeof *live); /* live[0]: every device's */
  for (int32_t k = 0; k < nh; k++) hs[k] = (Heap){.split = cap, .top = base, .best = best};
  for (int32_t v = 0; v < n && rc == IR_OK; v++) {
    int32_t r = region[v];
    if (is_fixed(&g->values[v])) {
    } else if (target[v] != IR_NONE) {
      p->offset[v] = p->offset[target[v]];
    } else if (p->bytes[v] == 0) {
      p->offset[v] = 0; /* fused into its consumer: no buffer */
    } else {
      int64_t len = align_up(p->bytes[v]);
      p->offset[v] = r ? heap_alloc(&hs[r - 1], len) : heaps_alloc(hs, nh, len);
      live[r] += len;
      int64_t now = live[0], worst = 0; /* the device whose stage holds the most */
      for (int32_t k = 1; nregions > 1 && k <= nh; k++) worst = live[k] > worst ? live[k] : worst;
      if (now + worst > most) most = now + worst;
      int32_t l = last[v];
      frees[l] = base_xrealloc(frees[l], ((size_t)nfree[l] + 1) * sizeof **frees);
      frees[l][nfree[l]++] = v;
    }
    for (int32_t k = 0; k < nfree[v]; k++) { /* values last read by v die after v */
      int32_t d = frees[v][k];
      if (d == v) continue; /* computed and never read: dies right away, below */
      release(hs, nh, region[d], p->offset[d], align_up(p->bytes[d]), live);
    }
    if (last[v] == v && p->bytes[v] && target[v] == IR_NONE && !is_fixed(&g->values[v]))
      release(hs, nh, r, p->offset[v], align_up(p->bytes[v]), live);
  }
  if (nregions > 1) {
    p->region = region;
    p->nstages = nregions - 1;
    p->stage_slab = base_xcalloc((size_t)p->nstages, sizeof *p->stage_slab);
    for (int32_t s = 0; s < p->nstages; s++) p->stage_slab[s] = base;
    for (int32_t v = 0; v < n; v++) {
      int64_t end = p->offset[v] + align_up(p->bytes[v]);
      for (int32_t s = 0; s < p->nstages; s++)
        if ((region[v] == 0 || region[v] == s + 1) && end > p->stage_slab[s])
          p->stage_slab[s] = end;
    }
  } else {
    free(region);
  }
  p->peak_temp_bytes = most; /* on one device: its stage's and every device's values */
  p->slab_bytes = base;
  /* The top only shrinks when gaps reach it; the slab is the most it ever reached. */
  for (int32_t v = 0; v < n; v++)
    if (p->offset[v] + align_up(p->bytes[v]) > p->slab_bytes)
      p->slab_bytes = p->offset[v] + align_up(p->bytes[v]);
  for (int32_t k = 0; k < nh; k++) free(hs[k].gaps);
  free(hs);
  free(live);
  for (int32_t i = 0; i <= n + 1; i++) free(frees[i]);
  free(frees);
  free(nfree);
  free(target);
  p->last = last;
  if (rc != IR_OK) pass_memplan_free(p);
  return rc;
}

/* The better of first fit and best fit (the file's comment). */
static int plan(IrGraph *g, const bool *mat, const Under *u, int64_t split, MemPlan *p) {
  int rc = plan_fit(g, mat, u, split, false, p);
  if (rc != IR_OK) return rc;
  MemPlan q;
  if (plan_fit(g, mat, u, split, true, &q) != IR_OK) return IR_OK; /* first fit stands */
  if (q.slab_bytes < p->slab_bytes) {
    pass_memplan_free(p);
    *p = q;
  } else {
    pass_memplan_free(&q);
  }
  return IR_OK;
}

int pass_memplan_fused(IrGraph *g, const bool *mat, MemPlan *p) { return plan(g, mat, NULL, 0, p); }

int pass_memplan_split(IrGraph *g, const bool *mat, int64_t split, MemPlan *p) {
  return plan(g, mat, NULL, split, p);
}

int pass_memplan_over(IrGraph *g, const bool *mat, const IrGraph *under, const MemPlan *under_plan,
                      int64_t under_bytes, MemPlan *p) {
  Under u = {under, under_plan, under_bytes};
  return plan(g, mat, &u, 0, p);
}

bool pass_memplan_apart(const MemPlan *p, int32_t a, int32_t b) {
  return p->region && p->region[a] && p->region[b] && p->region[a] != p->region[b];
}

void pass_memplan_free(MemPlan *p) {
  free(p->region);
  free(p->stage_slab);
  free(p->offset);
  free(p->bytes);
  free(p->last);
  memset(p, 0, sizeof *p);
}

/* ---- checking a plan ----------------------------------------------------------------------- */

int64_t pass_memplan_conflicts(const IrGraph *g, const bool *mat, const MemPlan *p) {
  int32_t n = g->nvalues, *last = base_xmalloc(((size_t)n + 1) * sizeof *last);
  last_uses(g, mat, last);
  int64_t conflicts = 0;
  for (int32_t a = 0; a < n; a++) {
    bool fixed_a = is_fixed(&g->values[a]);
    for (int32_t b = a + 1; b < n; b++) {
      if (!p->bytes[a] || !p->bytes[b]) continue;
      if (pass_memplan_apart(p, a, b)) continue; /* never on one device */
      bool bytes =
          p->offset[a] < p->offset[b] + p->bytes[b] && p->offset[b] < p->offset[a] + p->bytes[a];
      bool time = fixed_a || b <= last[a];
      bool in_place = fixed_a && p->offset[a] == p->offset[b];
      if (bytes && time && !in_place) conflicts++;
    }
  }
  free(last);
  return conflicts;
}
