/*
 * pipeline.c: pipeline parallelism over the mesh's pipeline axis (docs/pipeline.md).
 *
 * Two passes. pass_stages runs on the one-microbatch step right after autodiff and says which
 * stage computes each input-dependent value, and whether it is forward or backward:
 *
 *   - A layer's parameters are its stage's (PassPipeline). The value tagged
 *     "transformer_layer.input" (the residual stream entering a layer, in forward order) starts
 *     the next layer: its readers are at least that layer's stage.
 *   - Forward (what the loss depends on): the latest stage of the operands, so the embedding's
 *     values take the first layer's stage through their readers and the output norm, head and
 *     loss the last stage. Forward values of no stage yet take their earliest reader's.
 *   - Backward (the rest): the earliest stage of the operands: the backward of a layer reads
 *     its activations or its parameters. A tied embedding's gradient is summed where its two
 *     summands meet.
 *
 * pass_microbatch copies each value N times and stamps the copy (IrValue.micro); the optimizer,
 * simplify, shard and remat keep the stamps of what they copy. pass_pipeline, last, finishes the
 * per-device program:
 *
 *   - Leaves, and values computed from leaves alone (casts, rope tables, fsdp gathers of a
 *     weight), run on the one stage that reads them, or on every device when several do.
 *   - A value without a stamp (a reduction shard made, a gradient's running sum, the
 *     optimizer) takes the stage of its largest staged operand and the latest unit of that
 *     stage among its operands.
 *   - Each stage's values are ordered by the schedule's units (pass_pipeline_slot), in graph
 *     order within a unit; the stages are interleaved into one graph order (the simulated mesh
 *     runs it in lockstep). A value read by another stage is sent right after it is made and
 *     received right before its first reader there.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

#define LAYER_INPUT_TAG "transformer_layer.input"

const char *pass_schedule_name(PassSchedule s) {
  return s == PASS_SCHEDULE_1F1B ? "1f1b" : "gpipe";
}

int64_t pass_pipeline_slot(PassSchedule sched, int32_t stages, int64_t micro, int32_t s, int64_t k,
                           bool backward) {
  if (sched == PASS_SCHEDULE_GPIPE) return backward ? micro + k : k;
  /* 1F1B: w warm-up forwards, then one forward and one backward, then the last backwards */
  int64_t w = stages - 1 - s;
  if (w > micro) w = micro;
  if (!backward) return k < w ? k : w + 2 * (k - w);
  if (k < micro - w) return w + 2 * k + 1;
  return 2 * micro - (micro - k);
}

void pass_pipeline_timeline(PassSchedule sched, int32_t stages, int64_t micro, FILE *out) {
  /* each unit takes one time step; a forward waits for the previous stage's, a backward for the
   * next stage's (the last stage's for its own forward) */
  int64_t n = 2 * micro, (*t)[2] = base_xcalloc((size_t)(stages * micro + 1), sizeof *t);
  int64_t end = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t s = 0; s < stages; s++) {
      int64_t prev = 0;
      for (int64_t slot = 0; slot < n; slot++) {
        int64_t k = -1;
        bool b = false;
        for (int64_t q = 0; q < micro && k < 0; q++)
          for (int ph = 0; ph < 2 && k < 0; ph++)
            if (pass_pipeline_slot(sched, stages, micro, s, q, ph) == slot) k = q, b = ph;
        if (k < 0) continue;
        int64_t start = prev;
        if (!b && s > 0 && t[(s - 1) * micro + k][0] > start) start = t[(s - 1) * micro + k][0];
        if (b && s + 1 < stages && t[(s + 1) * micro + k][1] > start)
          start = t[(s + 1) * micro + k][1];
        if (b && t[s * micro + k][0] > start) start = t[s * micro + k][0];
        if (t[s * micro + k][b] != start + 1) t[s * micro + k][b] = start + 1, changed = true;
        prev = start + 1;
        if (prev > end) end = prev;
      }
    }
  }
  fprintf(out, "# schedule %s: %d stages, %lld microbatches, %lld time units; bubble %d/%lld\n",
          pass_schedule_name(sched), stages, (long long)micro, (long long)end, stages - 1,
          (long long)(micro + stages - 1));
  for (int32_t s = 0; s < stages; s++) {
    fprintf(out, "# stage %d |", s);
    for (int64_t c = 1; c <= end; c++) {
      const char *u = NULL;
      int64_t k = 0;
      for (int64_t q = 0; q < micro && !u; q++)
        for (int ph = 0; ph < 2 && !u; ph++)
          if (t[s * micro + q][ph] == c) u = ph ? "B" : "F", k = q;
      if (u)
        fprintf(out, " %s%-2lld", u, (long long)k);
      else
        fprintf(out, " .  ");
    }
    fprintf(out, "\n");
  }
  free(t);
}

/* ---- pass_stages ---------------------------------------------------------------------- */

static int32_t param_stage(const PassPipeline *p, const char *name) {
  for (int32_t i = 0; i < p->nparams; i++)
    if (!strcmp(p->params[i], name)) return p->layer_stage[p->param_layer[i]];
  return -1;
}

int pass_stages(IrGraph *g, const PassOptions *opt) {
  const PassPipeline *p = opt ? opt->pipeline : NULL;
  if (!p || p->stages < 2) return IR_OK;
  int32_t n = g->nvalues;
  int32_t *st = base_xmalloc(((size_t)n + 1) * sizeof *st),
          *floor = base_xmalloc(((size_t)n + 1) * sizeof *floor);
  bool *fwd = base_xcalloc((size_t)n + 1, sizeof *fwd),
       *dep = base_xcalloc((size_t)n + 1, sizeof *dep);
  /* forward: what an output other than a gradient depends on */
  for (int32_t o = 0; o < g->noutputs; o++)
    if (strncmp(g->outputs[o].name, "grad:", 5)) fwd[g->outputs[o].value] = true;
  for (int32_t v = n - 1; v >= 0; v--)
    if (fwd[v])
      for (int32_t k = 0; k < g->values[v].nops; k++) fwd[g->values[v].ops[k]] = true;
  int32_t layer = 0;
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    dep[v] = x->op == IR_INPUT;
    for (int32_t k = 0; k < x->nops && !dep[v]; k++) dep[v] = dep[x->ops[k]];
    st[v] = x->op == IR_PARAMETER ? param_stage(p, x->name) : -1;
    floor[v] = st[v]; /* what a reader of v takes from it */
    if (fwd[v] && !strcmp(x->tag, LAYER_INPUT_TAG) && layer < p->nlayers)
      floor[v] = p->layer_stage[layer++];
  }
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    if (x->nops == 0) continue;
    int32_t s = -1;
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k], f = fwd[v] && floor[o] > st[o] ? floor[o] : st[o];
      if (!fwd[v] && !strcmp(g->values[o].tag, LAYER_INPUT_TAG) && floor[o] >= 0) f = floor[o];
      if (f < 0) continue;
      if (s < 0 || (fwd[v] ? f > s : f < s)) s = f;
    }
    st[v] = s;
    if (floor[v] < s) floor[v] = s;
  }
  /* forward values of no stage (the embedding): their earliest reader's; else the last stage */
  int32_t *rd = floor;
  for (int32_t v = 0; v < n; v++) rd[v] = -1;
  for (int32_t v = n - 1; v >= 0; v--) {
    const IrValue *x = &g->values[v];
    if (st[v] < 0 && fwd[v] && x->nops) st[v] = rd[v];
    for (int32_t k = 0; k < x->nops && st[v] >= 0; k++) {
      int32_t o = x->ops[k];
      if (rd[o] < 0 || st[v] < rd[o]) rd[o] = st[v];
    }
  }
  for (int32_t v = 0; v < n; v++) {
    if (!dep[v]) continue;
    int32_t s = st[v] >= 0 ? st[v] : p->stages - 1;
    g->values[v].stage = (int16_t)(s + 1);
    g->values[v].phase = fwd[v] ? IR_PHASE_FORWARD : IR_PHASE_BACKWARD;
  }
  free(st);
  free(floor);
  free(fwd);
  free(dep);
  return IR_OK;
}

/* ---- pass_pipeline -------------------------------------------------------------------- */

typedef struct Pipe {
  IrGraph *g, *ng;
  int32_t P;
  int64_t M;
  PassSchedule sched;
  int32_t *stage;   /* (nvalues) -1: every device */
  int64_t *slot;    /* (nvalues) position in its stage's order */
  bool *leafy;      /* (nvalues) computed from leaves alone */
  bool *follow;     /* (nvalues) an unstamped broadcast: made on the stage that reads it */
  int32_t *map;     /* (nvalues) value in ng */
  int32_t **recv;   /* (nvalues) per stage: the recv of v there, or IR_NONE */
  int32_t **send;   /* (nvalues) per stage: the send of v to it, or IR_NONE */
  int32_t *readers; /* (nvalues) bit set of the other stages that read v */
} Pipe;

static int64_t unit_slot(const Pipe *q, int32_t s, const IrValue *x) {
  if (x->phase == IR_PHASE_NONE) return 2 * q->M;
  return pass_pipeline_slot(q->sched, q->P, q->M, s, x->micro, x->phase == IR_PHASE_BACKWARD);
}

static void resolve(Pipe *q) {
  IrGraph *g = q->g;
  int32_t n = g->nvalues;
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    q->stage[v] = -1;
    q->slot[v] = 0;
    if (x->stage > 0) {
      q->stage[v] = x->stage - 1;
      q->slot[v] = unit_slot(q, q->stage[v], x);
      continue;
    }
    q->leafy[v] = true;
    int64_t big = -1;
    for (int pass = 0; pass < 2 && big < 0; pass++) /* broadcasts only when nothing else */
      for (int32_t k = 0; k < x->nops; k++) { /* the largest staged operand, ties the latest */
        int32_t o = x->ops[k];
        if (q->leafy[o] || q->follow[o] != (pass == 1)) continue;
        q->leafy[v] = false;
        int64_t e = ir_shape_numel(&g->values[o].shape);
        if (e > big || (e == big && q->stage[o] > q->stage[v])) big = e, q->stage[v] = q->stage[o];
      }
    q->follow[v] = !q->leafy[v] && x->op == IR_BROADCAST;
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k];
      if (!q->leafy[o] && q->stage[o] == q->stage[v] && q->slot[o] > q->slot[v])
        q->slot[v] = q->slot[o];
    }
  }
  /* values of leaves alone: the one stage that reads them, at its first reader's unit */
  int32_t *reader = base_xmalloc(((size_t)n + 1) * sizeof *reader); /* -2 none, -1 several */
  int64_t *rslot = base_xmalloc(((size_t)n + 1) * sizeof *rslot);   /* the first reader's unit */
  for (int32_t v = 0; v < n; v++) reader[v] = -2;
  for (int32_t o = 0; o < g->noutputs; o++) reader[g->outputs[o].value] = -1;
  for (int32_t v = n - 1; v >= 0; v--) {
    const IrValue *x = &g->values[v];
    if (q->leafy[v]) {
      q->stage[v] = reader[v] >= 0 ? reader[v] : -1;
      q->slot[v] = reader[v] >= 0 ? rslot[v] : 0;
    } else if (q->follow[v] && reader[v] >= 0 && reader[v] != q->stage[v]) {
      q->stage[v] = reader[v]; /* a broadcast is made where it is read: its operand is sent */
      q->slot[v] = rslot[v];
    }
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k];
      if (!q->leafy[o] && !q->follow[o]) continue;
      int32_t s = q->stage[v];
      if (reader[o] == -2 && s >= 0)
        reader[o] = s, rslot[o] = q->slot[v];
      else if (reader[o] != s || s < 0)
        reader[o] = -1;
      else if (q->slot[v] < rslot[o])
        rslot[o] = q->slot[v];
    }
  }
  free(reader);
  free(rslot);
}

/* Value o of another stage as stage s has it: its recv there, or for a broadcast, the
 * broadcast made again on s from its operand's recv. */
static int32_t local(Pipe *q, int32_t o, int32_t s, const char *origin) {
  if (q->recv[o][s] != IR_NONE) return q->recv[o][s];
  const IrValue *y = &q->g->values[o];
  int32_t r;
  if (q->follow[o]) {
    int32_t u = y->ops[0], saved = q->map[u];
    if (q->stage[u] >= 0 && q->stage[u] != s) q->map[u] = local(q, u, s, origin);
    r = q->map[u] == IR_NONE ? IR_NONE : ir_graph_add_mapped(q->ng, q->g, o, q->map);
    q->map[u] = saved;
  } else {
    ir_graph_set_origin(q->ng, origin);
    r = ir_recv(q->ng, q->send[o][s], IR_PIPELINE_AXIS, q->stage[o]);
    if (r != IR_NONE) q->ng->values[r].split = y->split;
  }
  if (r == IR_NONE) return IR_NONE;
  q->ng->values[r].stage = (int16_t)(s + 1);
  return q->recv[o][s] = r;
}

static int32_t emit_value(Pipe *q, int32_t v) {
  IrGraph *g = q->g;
  const IrValue *x = &g->values[v];
  int32_t s = q->stage[v], saved[64];
  int32_t nops = x->nops < 64 ? x->nops : 64;
  for (int32_t k = 0; k < nops; k++) { /* operands from other stages: their recv here */
    int32_t o = x->ops[k];
    saved[k] = q->map[o];
    if (s < 0 || q->stage[o] < 0 || q->stage[o] == s) continue;
    q->map[o] = local(q, o, s, x->origin);
    if (q->map[o] == IR_NONE) return IR_NONE;
  }
  int32_t h = ir_graph_add_mapped(q->ng, g, v, q->map);
  for (int32_t k = nops - 1; k >= 0; k--) q->map[x->ops[k]] = saved[k]; /* repeats: first last */
  if (h == IR_NONE) return IR_NONE;
  q->ng->values[h].stage = (int16_t)(s + 1);
  q->map[v] = h;
  if (s < 0 || !q->readers[v]) return h;
  /* sent right after it is made, to each stage that reads it */
  for (int32_t t = 0; t < q->P; t++) {
    if (!(q->readers[v] & (1u << t))) continue;
    ir_graph_set_origin(q->ng, x->origin);
    int32_t snd = ir_send(q->ng, h, IR_PIPELINE_AXIS, t);
    if (snd == IR_NONE) return IR_NONE;
    q->ng->values[snd].split = x->split;
    q->ng->values[snd].stage = (int16_t)(s + 1);
    q->send[v][t] = snd;
  }
  return h;
}

static const Pipe *cmp_pipe;
static int by_slot(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  int64_t sx = cmp_pipe->slot[x], sy = cmp_pipe->slot[y];
  return sx != sy ? (sx < sy ? -1 : 1) : (x < y ? -1 : x > y);
}

int pass_pipeline(IrGraph *g, const PassOptions *opt) {
  int a = ir_mesh_axis(&g->mesh, IR_PIPELINE_AXIS);
  if (a < 0 || g->mesh.sizes[a] < 2) return IR_OK;
  const PassPipeline *p = opt ? opt->pipeline : NULL;
  Pipe q = {.g = g, .ng = ir_graph_new(), .P = (int32_t)g->mesh.sizes[a]};
  if (q.P > 32) return ir_graph_fail(g, "pipeline: %d stages (at most 32)", q.P);
  q.M = p && p->microbatches > 1 ? p->microbatches : 1;
  q.sched = p ? p->schedule : PASS_SCHEDULE_GPIPE;
  int32_t n = g->nvalues;
  q.stage = base_xmalloc(((size_t)n + 1) * sizeof *q.stage);
  q.slot = base_xmalloc(((size_t)n + 1) * sizeof *q.slot);
  q.leafy = base_xcalloc((size_t)n + 1, sizeof *q.leafy);
  q.follow = base_xcalloc((size_t)n + 1, sizeof *q.follow);
  q.map = base_xmalloc(((size_t)n + 1) * sizeof *q.map);
  q.readers = base_xcalloc((size_t)n + 1, sizeof *q.readers);
  q.recv = base_xmalloc(((size_t)n + 1) * sizeof *q.recv);
  q.send = base_xmalloc(((size_t)n + 1) * sizeof *q.send);
  int32_t *recv_store = base_xmalloc((2 * (size_t)n * (size_t)q.P + 1) * sizeof *recv_store);
  for (int32_t v = 0; v < n; v++) {
    q.map[v] = IR_NONE;
    q.recv[v] = recv_store + (size_t)v * (size_t)q.P;
    q.send[v] = recv_store + ((size_t)n + (size_t)v) * (size_t)q.P;
    for (int32_t s = 0; s < q.P; s++) q.recv[v][s] = q.send[v][s] = IR_NONE;
  }
  resolve(&q);
  for (int32_t v = 0; v < n; v++)
    for (int32_t k = 0; k < g->values[v].nops; k++) {
      int32_t o = g->values[v].ops[k];
      while (q.follow[o] && q.stage[o] != q.stage[v]) o = g->values[o].ops[0];
      if (q.stage[o] >= 0 && q.stage[v] >= 0 && q.stage[o] != q.stage[v])
        q.readers[o] |= 1u << q.stage[v];
    }
  /* every device's values first, then the stages' queues in schedule order, interleaved */
  int32_t *order = base_xmalloc(((size_t)n + 1) * sizeof *order),
          *head = base_xcalloc((size_t)q.P + 1, 4), *len = base_xcalloc((size_t)q.P + 1, 4),
          *start = base_xcalloc((size_t)q.P + 1, 4);
  int st = IR_OK;
  ir_graph_reserve(q.ng, n + n / 4);
  q.ng->mesh = g->mesh;
  q.ng->matmul = g->matmul;
  for (int32_t v = 0; v < n && st == IR_OK; v++)
    if (q.stage[v] < 0) {
      for (int32_t k = 0; k < g->values[v].nops; k++)
        if (q.stage[g->values[v].ops[k]] >= 0)
          st = ir_graph_fail(g, "pipeline: %%%d on every device reads %%%d of stage %d", v,
                             g->values[v].ops[k], q.stage[g->values[v].ops[k]]);
      if (st == IR_OK && emit_value(&q, v) == IR_NONE) st = IR_ERR;
    }
  for (int32_t v = 0; v < n; v++)
    if (q.stage[v] >= 0) len[q.stage[v]]++;
  for (int32_t s = 1; s < q.P; s++) start[s] = start[s - 1] + len[s - 1];
  for (int32_t v = 0; v < n; v++)
    if (q.stage[v] >= 0) order[start[q.stage[v]] + head[q.stage[v]]++] = v;
  cmp_pipe = &q;
  for (int32_t s = 0; s < q.P; s++) {
    qsort(order + start[s], (size_t)len[s], sizeof *order, by_slot);
    head[s] = 0;
  }
  for (bool progress = true; progress && st == IR_OK;) {
    progress = false;
    for (int32_t s = 0; s < q.P && st == IR_OK; s++) {
      while (head[s] < len[s] && st == IR_OK) {
        int32_t v = order[start[s] + head[s]];
        bool ready = true;
        for (int32_t k = 0; k < g->values[v].nops && ready; k++) {
          int32_t o = g->values[v].ops[k];
          while (q.follow[o] && q.stage[o] != s) o = g->values[o].ops[0];
          ready = q.map[o] != IR_NONE;
        }
        if (!ready) break;
        if (emit_value(&q, v) == IR_NONE) st = IR_ERR;
        head[s]++;
        progress = true;
      }
    }
  }
  for (int32_t s = 0; s < q.P && st == IR_OK; s++)
    if (head[s] < len[s])
      st =
          ir_graph_fail(g, "pipeline: the %s schedule deadlocks: stage %d waits at %%%d (%s at %s)",
                        pass_schedule_name(q.sched), s, order[start[s] + head[s]],
                        ir_op_name(g->values[order[start[s] + head[s]]].op),
                        g->values[order[start[s] + head[s]]].origin);
  if (st == IR_ERR && !ir_graph_error(g))
    ir_graph_fail(g, "pipeline: %s", ir_graph_error(q.ng) ? ir_graph_error(q.ng) : "?");
  for (int32_t o = 0; o < g->noutputs && st == IR_OK; o++) {
    int32_t v = g->outputs[o].value;
    st = ir_graph_add_output(q.ng, g->outputs[o].name, q.map[v]);
  }
  if (st == IR_OK) ir_graph_replace(g, q.ng);
  ir_graph_free(q.ng);
  free(q.stage);
  free(q.slot);
  free(q.leafy);
  free(q.follow);
  free(q.map);
  free(q.readers);
  free(q.recv);
  free(q.send);
  free(recv_store);
  free(order);
  free(head);
  free(len);
  free(start);
  return st;
}
