/*
 * pipeline.c: pipeline parallelism over the mesh's pipeline axis (docs/pipeline.md).
 *
 * Two passes. pass_stages runs on the one-microbatch step right after autodiff and says which
 * chunk computes each input-dependent value, and whether it is forward or backward. The layers
 * are cut into P * V chunks (V = 1 but under the interleaved schedule); chunk c runs on stage
 * c mod P, so under interleaved the activations go around the ring of stages V times. Below,
 * "stage" in pass_stages is the chunk:
 *
 *   - A layer's parameters are its chunk's (PassPipeline). The value tagged
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
 *     stage among its operands; after every unit when an operand is another stage's (the
 *     gradient norm summed over the stages, the clip factor sent back and what reads it).
 *   - Each stage's values are ordered by the schedule's units (pass_pipeline_unit), in graph
 *     order within a unit; the stages are interleaved into one graph order (the simulated mesh
 *     runs it in lockstep). A value read by another stage is sent right after it is made and
 *     received right before its first reader there.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

#define LAYER_INPUT_TAG "transformer_layer.input"

PassSchedule pass_schedule_parse(const char *name) {
  if (name && !strcmp(name, "1f1b")) return PASS_SCHEDULE_1F1B;
  if (name && !strcmp(name, "interleaved")) return PASS_SCHEDULE_INTERLEAVED;
  return PASS_SCHEDULE_GPIPE;
}

const char *pass_schedule_name(PassSchedule s) {
  return s == PASS_SCHEDULE_1F1B          ? "1f1b"
         : s == PASS_SCHEDULE_INTERLEAVED ? "interleaved"
                                          : "gpipe";
}

int32_t pass_pipeline_virtual(const PassPipeline *p) {
  return p->schedule == PASS_SCHEDULE_INTERLEAVED && p->virtual_stages > 1 ? p->virtual_stages : 1;
}

/* A stage's order: w warm-up forwards, then one forward and one backward, then the last w
 * backwards; forward i and backward i are the stage's i-th of each (n of each). */
static int64_t one_f_one_b(int64_t n, int64_t w, int64_t i, bool backward) {
  if (w > n) w = n;
  if (!backward) return i < w ? i : w + 2 * (i - w);
  return i < n - w ? w + 2 * i + 1 : n + i;
}

int64_t pass_pipeline_unit(const PassPipeline *p, int32_t chunk, int64_t k, bool backward) {
  int64_t P = p->stages > 1 ? p->stages : 1, V = pass_pipeline_virtual(p),
          M = p->microbatches > 1 ? p->microbatches : 1, s = chunk % P, v = chunk / P;
  switch (p->schedule) {
  case PASS_SCHEDULE_1F1B: return one_f_one_b(M, P - 1 - s, k, backward);
  case PASS_SCHEDULE_INTERLEAVED: {
    /* the units go by groups of P microbatches: the group's forwards on the stage's first
     * chunk, then on its second, ...; its backwards from the last chunk down. Warm-up: the
     * other stages' share of a round trip (2 (P - 1 - s)) and one round of the first V - 1
     * chunks, all forwards when M = P (the usual interleaved 1F1B) */
    int64_t n = V * M, w = M == P ? n : 2 * (P - 1 - s) + (V - 1) * P;
    int64_t i = k / P * P * V + (backward ? V - 1 - v : v) * P + k % P;
    return one_f_one_b(n, w, i, backward);
  }
  case PASS_SCHEDULE_GPIPE:
  default: return backward ? M + k : k;
  }
}

int64_t pass_pipeline_slot(PassSchedule sched, int32_t stages, int64_t micro, int32_t s, int64_t k,
                           bool backward) {
  PassPipeline p = {
      .stages = stages, .schedule = sched, .virtual_stages = 1, .microbatches = micro};
  return pass_pipeline_unit(&p, s, k, backward);
}

/* Stage s's units in order: (chunk * M + k) * 2 + backward, 2 V M of them. */
static int64_t *stage_order(const PassPipeline *p, int32_t s) {
  int64_t P = p->stages > 1 ? p->stages : 1, V = pass_pipeline_virtual(p),
          M = p->microbatches > 1 ? p->microbatches : 1, n = 2 * V * M;
  int64_t *u = base_xmalloc((size_t)(n + 1) * sizeof *u);
  for (int64_t i = 0; i < n; i++) u[i] = -1;
  for (int64_t v = 0; v < V; v++)
    for (int64_t k = 0; k < M; k++)
      for (int b = 0; b < 2; b++) {
        int64_t c = v * P + s, slot = pass_pipeline_unit(p, (int32_t)c, k, b);
        if (slot >= 0 && slot < n) u[slot] = (c * M + k) * 2 + b;
      }
  return u;
}

int64_t pass_pipeline_live(const PassPipeline *p, int32_t s) {
  int64_t n = 2 * pass_pipeline_virtual(p) * (p->microbatches > 1 ? p->microbatches : 1);
  int64_t *u = stage_order(p, s), live = 0, most = 0;
  for (int64_t i = 0; i < n; i++) {
    live += u[i] < 0 ? 0 : u[i] % 2 ? -1 : 1;
    if (live > most) most = live;
  }
  free(u);
  return most;
}

int64_t pass_pipeline_run(const PassPipeline *p, int64_t *time) {
  int32_t P = p->stages > 1 ? p->stages : 1;
  int64_t V = pass_pipeline_virtual(p), M = p->microbatches > 1 ? p->microbatches : 1, C = P * V,
          n = 2 * V * M;
  int64_t **order = base_xcalloc((size_t)P, sizeof *order),
          *head = base_xcalloc((size_t)P, sizeof(int64_t)),
          *t = base_xcalloc((size_t)(C * M * 2), sizeof *t), end = 0, left = (int64_t)P * n;
  for (int32_t s = 0; s < P; s++) order[s] = stage_order(p, s);
  /* each step, every stage runs its next unit if what it waits for ran in an earlier step */
  for (int64_t step = 1; left > 0; step++) {
    bool ran = false;
    for (int32_t s = 0; s < P; s++) {
      if (head[s] == n) continue;
      int64_t u = order[s][head[s]], c = u / 2 / M, k = u / 2 % M;
      bool b = u % 2, ready = u >= 0;
      if (ready && !b && c > 0) ready = t[((c - 1) * M + k) * 2] && t[((c - 1) * M + k) * 2] < step;
      if (ready && b && c + 1 < C)
        ready = t[((c + 1) * M + k) * 2 + 1] && t[((c + 1) * M + k) * 2 + 1] < step;
      if (ready && b) ready = t[(c * M + k) * 2] && t[(c * M + k) * 2] < step;
      if (!ready) continue;
      t[u] = step;
      head[s]++;
      left--;
      ran = true;
      end = step;
    }
    if (!ran) {
      end = -1;
      break;
    }
  }
  if (time) memcpy(time, t, (size_t)(C * M * 2) * sizeof *t);
  for (int32_t s = 0; s < P; s++) free(order[s]);
  free(order);
  free(head);
  free(t);
  return end;
}

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

void pass_pipeline_timeline(const PassPipeline *p, FILE *out) {
  int32_t P = p->stages > 1 ? p->stages : 1;
  int64_t V = pass_pipeline_virtual(p), M = p->microbatches > 1 ? p->microbatches : 1, C = P * V,
          n = 2 * V * M;
  int64_t *t = base_xcalloc((size_t)(C * M * 2), sizeof *t), end = pass_pipeline_run(p, t);
  bool inter = p->schedule == PASS_SCHEDULE_INTERLEAVED;
  fprintf(out, "# schedule %s: %d stages", pass_schedule_name(p->schedule), P);
  if (inter) fprintf(out, " x %lld virtual (%lld chunks)", (long long)V, (long long)C);
  fprintf(out, ", %lld microbatches", (long long)M);
  if (end < 0) {
    fprintf(out, "; deadlocks\n");
    free(t);
    return;
  }
  /* a stage runs its n units in `end` steps: it idles the rest */
  int64_t idle = end - n, d = idle ? gcd(idle, end) : 1;
  fprintf(out, ", %lld time units; bubble %lld/%lld\n", (long long)end, (long long)(idle / d),
          (long long)(idle ? end / d : 1));
  char label[48];
  int width = 3; /* "F0" and a space */
  for (int64_t c = 0; c < C; c++) {
    int w = inter ? snprintf(label, sizeof label, "F%lld.%lld", (long long)(M - 1), (long long)c)
                  : snprintf(label, sizeof label, "F%lld", (long long)(M - 1));
    if (w + 1 > width) width = w + 1;
  }
  int64_t *at = base_xmalloc((size_t)(end + 1) * sizeof *at);
  for (int32_t s = 0; s < P; s++) {
    for (int64_t i = 0; i <= end; i++) at[i] = -1;
    for (int64_t u = 0; u < C * M * 2; u++)
      if (u / 2 / M % P == s && t[u] > 0) at[t[u]] = u;
    fprintf(out, "# stage %d |", s);
    for (int64_t i = 1; i <= end; i++) {
      int64_t u = at[i];
      if (u < 0)
        snprintf(label, sizeof label, ".");
      else if (inter)
        snprintf(label, sizeof label, "%c%lld.%lld", u % 2 ? 'B' : 'F', (long long)(u / 2 % M),
                 (long long)(u / 2 / M));
      else
        snprintf(label, sizeof label, "%c%lld", u % 2 ? 'B' : 'F', (long long)(u / 2 % M));
      fprintf(out, " %-*s", width, label);
    }
    fprintf(out, "\n");
  }
  free(at);
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
    int32_t s = st[v] >= 0 ? st[v] : p->stages * pass_pipeline_virtual(p) - 1;
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
  PassPipeline sp;  /* the schedule: stages, schedule, virtual_stages, microbatches */
  int32_t *stage;   /* (nvalues) -1: every device */
  int64_t *slot;    /* (nvalues) position in its stage's order */
  bool *leafy;      /* (nvalues) computed from leaves alone */
  bool *follow;     /* (nvalues) an unstamped broadcast: made on the stage that reads it */
  int32_t *map;     /* (nvalues) value in ng */
  int32_t **recv;   /* (nvalues) per stage: the recv of v there, or IR_NONE */
  int32_t **send;   /* (nvalues) per stage: the send of v to it, or IR_NONE */
  int32_t *readers; /* (nvalues) bit set of the other stages that read v */
} Pipe;

/* The unit of a stamped value (x->stage: 1 + its chunk) in its stage's order; after them all
 * (2 V M) for values of no phase. */
static int64_t unit_slot(const Pipe *q, const IrValue *x) {
  if (x->phase == IR_PHASE_NONE) return 2 * pass_pipeline_virtual(&q->sp) * q->sp.microbatches;
  return pass_pipeline_unit(&q->sp, x->stage - 1, x->micro, x->phase == IR_PHASE_BACKWARD);
}

static void resolve(Pipe *q) {
  IrGraph *g = q->g;
  int32_t n = g->nvalues;
  /* the units' end: values of no unit that wait on another stage (the gradient norm's sum
   * over the stages, the clip factor sent back, the updates that read it) run after the
   * stage's units, as under interleaved a stage's last backward need not be its chunk's */
  int64_t end = 2 * pass_pipeline_virtual(&q->sp) * q->sp.microbatches;
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    q->stage[v] = -1;
    q->slot[v] = 0;
    if (x->stage > 0) {
      q->stage[v] = (x->stage - 1) % q->P; /* chunk c runs on stage c mod P */
      q->slot[v] = unit_slot(q, x);
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
    for (int32_t k = 0; k < x->nops; k++) { /* another stage's operand: after every unit */
      int32_t o = x->ops[k];
      int64_t at = q->stage[o] == q->stage[v] ? q->slot[o] : end;
      if (!q->leafy[o] && at > q->slot[v]) q->slot[v] = at;
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
  if (q.P > 32) {
    ir_graph_free(q.ng);
    return ir_graph_fail(g, "pipeline: %d stages (at most 32)", q.P);
  }
  q.sp = (PassPipeline){.stages = q.P,
                        .schedule = p ? p->schedule : PASS_SCHEDULE_GPIPE,
                        .virtual_stages = p ? p->virtual_stages : 1,
                        .microbatches = p && p->microbatches > 1 ? p->microbatches : 1};
  int32_t n = g->nvalues, chunks = q.P * pass_pipeline_virtual(&q.sp);
  for (int32_t v = 0; v < n; v++)
    if (g->values[v].stage > chunks) {
      ir_graph_free(q.ng);
      return ir_graph_fail(g, "pipeline: %%%d is on chunk %d of %d", v, g->values[v].stage - 1,
                           chunks);
    }
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
                        pass_schedule_name(q.sp.schedule), s, order[start[s] + head[s]],
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
