/*
 * compose.c: the composer, from a resolved module tree to the forward IR.
 *
 * fe_compose() walks the model the way fe_build() does, asking each kind to
 * emit its forward computation (FeKind.emit, next to the kind's schema in
 * frontend/modules/). Parameters come from the table fe_build() made, so
 * the graph's parameters are exactly the ones `axlc params` lists, under
 * the same paths. Every value a module emits carries the module's config
 * path as its origin, so an error in any later pass still names the config.
 *
 * The graph is the global program, as if one device held everything:
 * inputs "ids" and "targets" of shape (B, T), with B the global batch (over
 * the learner's microbatches: pass_microbatch repeats the step over them).
 * pass_shard turns it into the per-device program of the mesh.
 *
 * A failed builder call records its error in the graph and returns IR_NONE,
 * which later builder calls pass on. Emit code never reads a value it did
 * not check: fe_shape() takes only real values, helpers return IR_NONE for
 * IR_NONE, and once the graph holds an error no module emits anything more.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

IrShape fe_shape(const FeEmit *e, int32_t v) {
  assert(v >= 0 && v < e->g->nvalues && "fe_shape of a failed builder call");
  return e->g->values[v].shape;
}

int32_t fe_emit_node(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in, int32_t x) {
  if (!node) return x;
  if (ir_graph_error(e->g)) return IR_NONE; /* something failed already: stop */
  const FeKind *k = fe_kind_find(fe_node_kind(node));
  if (!k || !k->emit) {
    ir_graph_fail(e->g, "%s: kind %s has no forward computation", cfg, fe_node_kind(node));
    return IR_NONE;
  }
  const char *saved = e->g->origin;
  ir_graph_set_origin(e->g, cfg);
  int32_t y = k->emit(e, node, cfg, prm, in, x);
  ir_graph_set_origin(e->g, saved);
  return y;
}

int32_t fe_emit_child(FeEmit *e, json_object *node, const char *field, const char *cfg,
                      const char *prm, const FeDims *in, int32_t x) {
  char c[512], p[512];
  fe_path_join(c, sizeof c, cfg, field);
  snprintf(p, sizeof p, "%s%s%s", prm, *prm ? "/" : "", field);
  return fe_emit_node(e, fe_get_child(node, field), c, p, in, x);
}

static int find_param(const FeEmit *e, const char *prm, const char *name) {
  char *path = fe_asprintf("%s/%s", prm, name);
  int i = fe_param_find(e->b, path);
  free(path);
  return i;
}

bool fe_has_param(const FeEmit *e, const char *prm, const char *name) {
  return find_param(e, prm, name) >= 0;
}

int32_t fe_emit_param(FeEmit *e, const char *prm, const char *name) {
  int i = find_param(e, prm, name);
  if (i < 0) {
    ir_graph_fail(e->g, "internal: no parameter %s/%s in the parameter table", prm, name);
    return IR_NONE;
  }
  if (e->param_vals[i] != IR_NONE) return e->param_vals[i];
  const FeParam *p = &e->b->params[i];
  const char *saved = e->g->origin;
  ir_graph_set_origin(e->g, p->origin);
  /* the f32 master, read in the compute dtype: one cast per parameter, shared by its readers */
  e->param_vals[i] = fe_emit_compute(e, ir_param(e->g, p->path, DT_F32, p->rank, p->shape));
  ir_graph_set_origin(e->g, saved);
  return e->param_vals[i];
}

static int32_t cast_to(FeEmit *e, int32_t x, IrDType dt) {
  if (x == IR_NONE || e->g->values[x].dtype == dt) return x;
  return ir_cast(e->g, x, dt);
}

int32_t fe_emit_f32(FeEmit *e, int32_t x) { return cast_to(e, x, DT_F32); }
int32_t fe_emit_compute(FeEmit *e, int32_t x) { return cast_to(e, x, e->compute); }

int32_t fe_emit_like(FeEmit *e, int32_t x, double v) {
  if (x == IR_NONE) return IR_NONE;
  IrValue xv = e->g->values[x]; /* a copy: adding a value may move the array */
  return ir_const_scalar(e->g, xv.dtype, v, xv.shape.rank, xv.shape.dims);
}

int32_t fe_emit_bcast(FeEmit *e, int32_t v, int32_t like, int32_t n, const int32_t *bdims) {
  if (v == IR_NONE || like == IR_NONE) return IR_NONE;
  IrShape s = fe_shape(e, like);
  int32_t trailing[IR_MAX_RANK];
  if (!bdims) { /* align v's dims with the trailing dims of `like` */
    for (int i = 0; i < n; i++) trailing[i] = s.rank - n + i;
    bdims = trailing;
  }
  return ir_broadcast(e->g, v, s.rank, s.dims, bdims);
}

int32_t fe_emit_linear(FeEmit *e, int32_t x, const char *prm, const char *name, const char *tag) {
  char pp[512];
  snprintf(pp, sizeof pp, "%s/%s", prm, name);
  int32_t y = ir_matmul(e->g, x, fe_emit_param(e, pp, "weight"));
  if (fe_has_param(e, pp, "bias")) {
    int32_t b = fe_emit_param(e, pp, "bias");
    y = ir_add(e->g, y, fe_emit_bcast(e, b, y, 1, NULL));
  }
  y = fe_lora_emit(e, x, y, pp);
  if (y != IR_NONE && tag) ir_value_set_tag(e->g, y, tag);
  return y;
}

int32_t fe_emit_softmax(FeEmit *e, int32_t x) {
  if (x == IR_NONE) return IR_NONE;
  IrGraph *g = e->g;
  x = fe_emit_f32(e, x); /* the max, exp and sum in f32, whatever the compute dtype */
  if (x == IR_NONE) return IR_NONE;
  int32_t last = fe_shape(e, x).rank - 1;
  int32_t lead[IR_MAX_RANK]; /* a reduced value's dims are x's leading dims */
  for (int i = 0; i < last; i++) lead[i] = i;
  /* softmax(x - m) = softmax(x) for any m: the max only keeps exp in range, and no gradient
   * flows through it (it would be zero, computed from a mask over the whole of x) */
  int32_t m = ir_stop_gradient(g, ir_reduce_max(g, x, 1, &last));
  int32_t z = ir_exp(g, ir_sub(g, x, fe_emit_bcast(e, m, x, last, lead)));
  int32_t s = ir_reduce_sum(g, z, 1, &last);
  return ir_div(g, z, fe_emit_bcast(e, s, x, last, lead));
}

/* The batch of one forward/backward pass: the global batch over the learner's microbatches
 * (pass_microbatch repeats that pass over the whole batch). */
static int64_t micro_batch(json_object *cfg) {
  return fe_get_int(fe_get_child(cfg, "input"), "global_batch_size") /
         fe_get_int(fe_get_child(cfg, "learner"), "microbatches");
}

/* What compose() makes: the training step's loss, the sampling forward (with or without the
 * keys and values of a KV cache), or the one-token decode step. */
typedef enum { COMPOSE_STEP, COMPOSE_FORWARD, COMPOSE_FORWARD_KV, COMPOSE_DECODE } ComposeMode;

/* The inputs of mode m: ids (B, T) [and targets]; decode: ids (1, 1) and pos (1). */
static void compose_inputs(FeEmit *e, ComposeMode m) {
  int64_t bt[2] = {e->batch, e->seq}, one = 1;
  e->ids = ir_input(e->g, "ids", DT_I32, 2, bt);
  if (m == COMPOSE_STEP) e->targets = ir_input(e->g, "targets", DT_I32, 2, bt);
  if (m == COMPOSE_DECODE) e->pos = ir_input(e->g, "pos", DT_I32, 1, &one);
}

static IrGraph *compose(FeDiag *d, const char *file, json_object *cfg, const FeBuild *b,
                        ComposeMode m) {
  if (fe_step_check(b, d)) return NULL; /* a config error, before any graph */
  IrGraph *g = ir_graph_new();
  bool forward = m != COMPOSE_STEP;
  int64_t seq_len = fe_get_int(fe_get_child(cfg, "input"), "seq_len");
  FeEmit e = {.g = g,
              .b = b,
              .param_vals = base_xmalloc(((size_t)b->nparams + 1) * sizeof(int32_t)),
              .batch = forward ? 1 : micro_batch(cfg),
              .seq = m == COMPOSE_DECODE ? 1 : seq_len,
              .ids = IR_NONE,
              .targets = IR_NONE,
              .aux_loss = IR_NONE,
              .forward = forward,
              .compute = DT_F32,
              .kv = m == COMPOSE_FORWARD_KV || m == COMPOSE_DECODE,
              .decode = m == COMPOSE_DECODE,
              .pos = IR_NONE,
              .window = seq_len};
  FePrecision policy;
  fe_precision_facts(cfg, &policy);
  e.compute = policy.compute;
  g->matmul = policy.matmul;
  for (int i = 0; i < b->nparams; i++) e.param_vals[i] = IR_NONE;
  compose_inputs(&e, m);
  FeDims in = {0};
  in.seq_len = seq_len;
  in.max_steps = fe_get_int(cfg, "max_steps");
  int32_t out = fe_emit_child(&e, cfg, "model", "", "", &in, IR_NONE);
  if (out != IR_NONE) fe_lora_check_read(&e);
  free(e.param_vals);
  const char *name = forward ? "logits" : "loss";
  /* the sampler reads the decode step's logits as f32 whatever the compute dtype */
  if (m == COMPOSE_DECODE) out = fe_emit_f32(&e, out);
  /* the auxiliary (MoE load-balance) part of the loss, for the metrics: loss includes it */
  bool aux_ok =
      forward || e.aux_loss == IR_NONE || ir_graph_add_output(g, "aux_loss", e.aux_loss) == IR_OK;
  if (out == IR_NONE || ir_graph_add_output(g, name, out) != IR_OK || !aux_ok ||
      ir_graph_error(g)) {
    fe_error(d, file, NULL, "composing the model%s failed: %s",
             m == COMPOSE_DECODE ? "'s decode step"
             : forward           ? "'s forward"
                                 : "",
             ir_graph_error(g) ? ir_graph_error(g) : "unknown error");
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

IrGraph *fe_compose(FeDiag *d, const char *file, json_object *cfg, const FeBuild *b) {
  return compose(d, file, cfg, b, COMPOSE_STEP);
}

IrGraph *fe_compose_forward(FeDiag *d, const char *file, json_object *cfg, const FeBuild *b,
                            bool kv) {
  return compose(d, file, cfg, b, kv ? COMPOSE_FORWARD_KV : COMPOSE_FORWARD);
}

IrGraph *fe_compose_decode(FeDiag *d, const char *file, json_object *cfg, const FeBuild *b) {
  return compose(d, file, cfg, b, COMPOSE_DECODE);
}

bool fe_model_decodes(json_object *cfg) {
  json_object *model = fe_get_child(cfg, "model");
  json_object *layer = fe_get_child(fe_get_child(model, "decoder"), "layer");
  json_object *attn = fe_get_child(layer, "self_attention");
  return attn && fe_get_bool(attn, "causal");
}
