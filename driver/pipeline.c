/*
 * pipeline.c: from a config file to a training-step graph, in one straight
 * list of passes (drv_passes: compose, autodiff, widen_grads, stages, microbatch,
 * optimizer, simplify, shard, remat, pipeline; each row says what its pass does).
 *
 * What a backend cannot compute is rewritten when the job is handed over
 * (drv_backend_job):
 *
 *   expand     attention ops -> primitives, for a backend without them
 *
 * The passes that depend on how a backend executes run inside the backend, on
 * the graph it was handed: fusion (pass_fusion_plan: which values are kept in
 * memory) and the memory plan (pass_memplan_fused: an offset in one slab for
 * each kept value). memcheck runs the same two on the CPU backend's terms.
 */
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "passes/passes.h"

/* A new pass is one row here, in pipeline order, and its function in passes/: --after, the
 * usage text and the messages read this table. */
const DrvPass drv_passes[] = {
    {"compose", NULL, "module tree -> forward graph (runs before the list)"},
    {"autodiff", pass_autodiff, "+ the gradient of every parameter"},
    {"widen_grads", pass_widen_grads, "bf16 compute: weight gradients keep f32 accumulators"},
    {"stages", pass_stages, "pipeline: each layer's forward and backward on its stage"},
    {"microbatch", pass_microbatch,
     "N microbatches: the forward and backward N times, mean gradients"},
    {"optimizer", pass_optimizer, "+ clipping, schedule, AdamW: the whole step"},
    {"simplify", pass_simplify, "folding, identities, CSE, dead code"},
    {"shard", pass_shard, "the global step -> the program of one device of the mesh"},
    {"remat", pass_remat, "values not saved are recomputed in the backward"},
    {"pipeline", pass_pipeline, "pipeline: each stage's program in schedule order, send/recv"},
};
const int drv_npasses = (int)(sizeof drv_passes / sizeof drv_passes[0]);

const char *drv_pass_list(char *buf, size_t cap, const char *sep, const char *last_sep) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < drv_npasses && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s",
                          i == 0                ? ""
                          : i + 1 < drv_npasses ? sep
                                                : last_sep,
                          drv_passes[i].name);
  return buf;
}

int drv_load(DrvJob *j, const char *file, const FeOptions *opt) {
  memset(j, 0, sizeof *j);
  j->file = file;
  j->target = opt ? opt->target : NULL;
  fe_diag_init(&j->diag);
  j->cfg = fe_resolve(&j->diag, file, opt, NULL);
  if (!j->cfg) return -1;
  int64_t devices;
  if (fe_target_devices(&j->diag, opt ? opt->target : NULL, &devices) ||
      fe_build(&j->build, &j->diag, file, j->cfg, devices))
    return -1;
  j->built = true;
  fe_train_facts(j->cfg, &j->facts);
  return 0;
}

void drv_free(DrvJob *j) {
  if (j->built) fe_build_free(&j->build);
  json_object_put(j->cfg);
  ir_graph_free(j->graph);
  ir_graph_free(j->forward);
  ir_graph_free(j->decode);
  free(j->backend_params);
  free(j->config_text);
  fe_diag_free(&j->diag);
  memset(j, 0, sizeof *j);
}

static bool verify_enabled(void) {
#ifndef NDEBUG
  return true;
#else
  return getenv("AXLC_VERIFY") != NULL;
#endif
}

/* ---- hand-over to a backend ---- */

/* Whether g holds a fused op that b cannot compute in its dtype. */
static bool lacks_fused(const IrGraph *g, const Backend *b) {
  for (int32_t v = 0; v < g->nvalues; v++) {
    IrOp op = g->values[v].op;
    if ((op == IR_ATTENTION || op == IR_ATTENTION_GRAD) && !b->supports_op(op, g->values[v].dtype))
      return true;
  }
  return false;
}

/* Expands the fused ops of g (the step or the forward, `what`) when b lacks one. */
static int expand_for(DrvJob *j, IrGraph *g, const Backend *b, const char *what) {
  if (!g || !lacks_fused(g, b)) return 0;
  if (pass_expand(g, NULL) != IR_OK)
    return fe_error(&j->diag, j->file, NULL, "pass expand failed on the %s graph: %s", what,
                    ir_graph_error(g) ? ir_graph_error(g) : "unknown error");
  char msg[1024];
  if (verify_enabled() && ir_graph_verify(g, msg, sizeof msg) != IR_OK)
    return fe_error(&j->diag, j->file, NULL,
                    "internal: the %s graph after expand does not verify: %s", what, msg);
  return 0;
}

static void diag_report(void *ctx, const char *file, const char *path, const char *fmt,
                        va_list ap) {
  char *msg = fe_vasprintf(fmt, ap);
  fe_error(ctx, file, path, "%s", msg);
  free(msg);
}

BackendDiag drv_backend_diag(FeDiag *d) { return (BackendDiag){.report = diag_report, .ctx = d}; }

/* How the runtime initializes parameter p (its init kind and std). */
static RtInit param_init(const FeParam *p) {
  RtInit init = {0};
  if (!strcmp(p->init, "ones"))
    init.kind = RT_INIT_ONES;
  else if (!strcmp(p->init, "zeros"))
    init.kind = RT_INIT_ZEROS;
  else
    init.kind = RT_INIT_NORMAL, init.std = (float)p->init_std;
  return init;
}

/* The program a backend sees (backend.h: BackendProgram), from the frontend's objects; its
 * parameter table and config text are kept in j. */
static int backend_program(DrvJob *j, BackendProgram *p) {
  free(j->backend_params);
  free(j->config_text);
  j->backend_params = base_xcalloc((size_t)j->build.nparams + 1, sizeof *j->backend_params);
  j->config_text = fe_json_canonical(j->cfg);
  for (int i = 0; i < j->build.nparams; i++) {
    const FeParam *fp = &j->build.params[i];
    j->backend_params[i] = (BackendParam){.path = fp->path,
                                          .shape = ir_shape_make(fp->rank, fp->shape),
                                          .init = param_init(fp),
                                          .frozen = fp->frozen};
  }
  *p = (BackendProgram){.config = j->config_text,
                        .nparams = j->build.nparams,
                        .params = j->backend_params,
                        .devices = j->build.mesh.devices,
                        .vocab = j->facts.vocab};
  drv_program_facts(j, &p->facts);
  return 0;
}

/* The trainer's program facts (runtime/axrt.h: RT_PROGRAM_FACTS): the config's as the frontend
 * read them (fe_train_facts), the step's FLOPs from the graph. The target's peaks are the CLI's
 * to add (it knows the device table's entry), zero until then. */
void drv_program_facts(const DrvJob *j, RtFacts *f) {
  *f = j->facts.program;
  f->step_flops = drv_step_flops(j->graph, &f->step_bf16_flops);
}

/* memcheck (memcheck.c) plans j->graph as drv_lower left it, not through here (axlc compile
 * runs it before the hand-over), so it keeps the fused ops: it reports for accelerators whose
 * backends have a fused attention kernel. */
int drv_backend_job(DrvJob *j, const Backend *b, BackendJob *out) {
  *out = (BackendJob){.file = j->file,
                      .diag = drv_backend_diag(&j->diag),
                      .graph = j->graph,
                      .forward = j->forward,
                      .decode = j->decode};
  int pa = j->graph ? ir_mesh_axis(&j->graph->mesh, IR_PIPELINE_AXIS) : -1;
  if (pa >= 0 && j->graph->mesh.sizes[pa] > 1 && strcmp(b->name, "interp") &&
      strcmp(b->name, "llvm") && strcmp(b->name, "opencl"))
    return fe_error(&j->diag, j->file, "/mesh/shape",
                    "pipeline = %lld stages run on the interpreter, llvm and opencl backends "
                    "only; the %s backend has no send/recv",
                    (long long)j->graph->mesh.sizes[pa], b->name);
  if (backend_program(j, &out->program)) return -1;
  if (expand_for(j, j->graph, b, "step") || expand_for(j, j->forward, b, "forward") ||
      expand_for(j, j->decode, b, "decode"))
    return -1;
  return 0;
}

const Backend *drv_plan_backend(const char *target) {
  const Backend *b = backend_for_target(target ? target : "cpu");
  if (!b || !b->plan) b = backend_for_target("cpu");
  return b && b->plan ? b : NULL;
}

/* The learner's settings and per-parameter weight-decay scales for the optimizer pass. */
static void learner_options(const DrvJob *j, PassLearner *l, const char **names, double *scales) {
  const FeLearnerFacts *f = &j->facts.learner;
  memset(l, 0, sizeof *l);
  l->learning_rate = f->learning_rate;
  l->b1 = f->b1;
  l->b2 = f->b2;
  l->eps = f->eps;
  l->weight_decay = f->weight_decay;
  l->max_grad_norm = f->max_grad_norm;
  l->warmup_steps = f->warmup_steps;
  l->cosine = f->cosine;
  l->decay_steps = f->decay_steps;
  l->min_ratio = f->min_ratio;
  for (int i = 0; i < j->build.nparams; i++) {
    names[i] = j->build.params[i].path;
    scales[i] = j->build.params[i].weight_decay_scale;
  }
  l->nscales = j->build.nparams;
  l->scale_names = names;
  l->scales = scales;
}

/* The mesh axes of size > 1, in mesh order: what the shard pass and the per-device program know. */
static int shard_mesh(DrvJob *j, IrMesh *m) {
  const FeMesh *fm = &j->build.mesh;
  memset(m, 0, sizeof *m);
  for (int i = 0; i < fm->n; i++) {
    if (fm->shape[i] <= 1) continue;
    const FeAxis *a = fe_axis(fm->axes[i]);
    if (a && !(a->roles & (FE_AXIS_SUPPORTED | FE_AXIS_PIPELINE)))
      return fe_error(&j->diag, j->file, "/mesh/shape",
                      "mesh axis %s has %lld devices: %s "
                      "parallelism is not supported yet (expected 1 on %s)",
                      fm->axes[i], (long long)fm->shape[i], a->what, fm->axes[i]);
    snprintf(m->names[m->naxes], IR_MAX_AXIS_NAME, "%s", fm->axes[i]);
    m->sizes[m->naxes++] = fm->shape[i];
  }
  return 0;
}

/* The axes of m with role `role` (FE_AXIS_BATCH: they split the batch; FE_AXIS_SEQUENCE: the
 * sequence), major first in the order of fe_axes (data, fsdp), whatever order the mesh lists
 * them in, and the expert axis minor: expert dispatch moves that axis from the batch to the
 * experts by an all_to_all, and each device then keeps a contiguous chunk of rows (its data x
 * fsdp share) instead of gathering the batch. */
static void role_axes(const IrMesh *m, unsigned role, uint8_t *axes) {
  int n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < fe_naxes && n < IR_MAX_SPLIT_AXES; i++) {
      bool expert = fe_axes[i].roles & FE_AXIS_EXPERTS;
      if (!(fe_axes[i].roles & role) || expert != (pass == 1))
        continue; /* the expert axis in the second pass */
      int a = ir_mesh_axis(m, fe_axes[i].name);
      if (a >= 0) axes[n++] = (uint8_t)(a + 1);
    }
}

/* Appends the axes of a '|'-joined spec that are in m (axes of size 1 split nothing). */
static void spec_axes(const IrMesh *m, const char *spec, uint8_t *axes) {
  int n = 0;
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%s", spec);
  for (char *sv = NULL, *t = strtok_r(tmp, "|", &sv); t; t = strtok_r(NULL, "|", &sv)) {
    int a = ir_mesh_axis(m, t);
    if (a >= 0 && n < IR_MAX_SPLIT_AXES) axes[n++] = (uint8_t)(a + 1);
  }
}

/* The shard pass's leaves: every parameter by its partition spec, and ids and targets (B, T):
 * the batch over the axes that split it, the sequence over the seq axes. */
static PassShardLeaf *shard_leaves(const DrvJob *j, const IrMesh *m, int32_t *n) {
  PassShardLeaf *l = base_xcalloc((size_t)j->build.nparams + 2, sizeof *l);
  for (int i = 0; i < j->build.nparams; i++) {
    const FeParam *p = &j->build.params[i];
    l[i].name = p->path;
    for (int d = 0; d < p->rank; d++) spec_axes(m, p->spec[d], l[i].split.axes[d]);
  }
  IrSplit batch = {0};
  role_axes(m, FE_AXIS_BATCH, batch.axes[0]);
  role_axes(m, FE_AXIS_SEQUENCE, batch.axes[1]);
  l[j->build.nparams] = (PassShardLeaf){"ids", batch};
  l[j->build.nparams + 1] = (PassShardLeaf){"targets", batch};
  *n = j->build.nparams + 2;
  return l;
}

/* ---- pipeline stages: the decoder's layers over the pipeline axis ---- */

typedef struct PipeOpts {
  PassPipeline p;
  int32_t *layer_stage, *param_layer;
  const char **params;
} PipeOpts;

/* The layer index of a parameter path ".../decoder/layer_<i>/...", or -1. */
static int32_t param_layer(const char *path) {
  const char *s = strstr(path, "/layer_");
  if (!s) return -1;
  char *end;
  long i = strtol(s + 7, &end, 10);
  return end != s + 7 && *end == '/' ? (int32_t)i : -1;
}

static void pipe_opts(const DrvJob *j, const IrMesh *m, PipeOpts *o) {
  memset(o, 0, sizeof *o);
  int a = ir_mesh_axis(m, IR_PIPELINE_AXIS);
  if (a < 0) return;
  json_object *mesh = fe_get_child(j->cfg, "mesh");
  json_object *dec = fe_get_child(fe_get_child(j->cfg, "model"), "decoder");
  int32_t P = (int32_t)m->sizes[a], L = dec ? (int32_t)fe_get_int(dec, "num_layers") : 0;
  o->p.stages = P;
  o->p.schedule = pass_schedule_parse(fe_get_str(mesh, "pipeline_schedule"));
  o->p.virtual_stages = o->p.schedule == PASS_SCHEDULE_INTERLEAVED
                            ? (int32_t)fe_get_int(mesh, "pipeline_virtual")
                            : 1;
  o->p.microbatches = j->facts.microbatches;
  /* the layers in P * V chunks (V = 1 but interleaved), by the cuts or equal */
  int64_t C = (int64_t)P * pass_pipeline_virtual(&o->p);
  o->layer_stage = base_xcalloc((size_t)L + 1, sizeof *o->layer_stage);
  json_object *cuts = json_object_object_get(mesh, "pipeline_cuts");
  size_t nc = cuts ? json_object_array_length(cuts) : 0;
  for (int32_t l = 0; l < L; l++) {
    int32_t s = 0;
    if (nc)
      while ((size_t)s < nc && l >= json_object_get_int(json_object_array_get_idx(cuts, s))) s++;
    else
      s = (int32_t)((int64_t)l * C / L);
    o->layer_stage[l] = s;
  }
  o->p.nlayers = L;
  o->p.layer_stage = o->layer_stage;
  o->params = base_xcalloc((size_t)j->build.nparams + 1, sizeof *o->params);
  o->param_layer = base_xcalloc((size_t)j->build.nparams + 1, sizeof *o->param_layer);
  for (int i = 0; i < j->build.nparams; i++) {
    int32_t l = param_layer(j->build.params[i].path);
    if (l < 0 || l >= L) continue;
    o->params[o->p.nparams] = j->build.params[i].path;
    o->param_layer[o->p.nparams++] = l;
  }
  o->p.params = o->params;
  o->p.param_layer = o->param_layer;
}

static void pipe_opts_free(PipeOpts *o) {
  free(o->layer_stage);
  free(o->param_layer);
  free(o->params);
}

/* ---- remat scopes: every module of the config with a remat_policy ---- */

typedef struct RematScopes {
  int32_t n, cap;
  PassRematScope *s; /* (n) paths and save arrays malloc'd; the strings are the config's */
} RematScopes;

static void remat_scope_add(RematScopes *r, const char *path, json_object *pol) {
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 8;
    r->s = base_xrealloc(r->s, (size_t)r->cap * sizeof *r->s);
  }
  PassRematScope *sc = &r->s[r->n];
  memset(sc, 0, sizeof *sc);
  sc->path = base_xstrdup(path);
  r->n++;
  if (json_object_get_type(pol) == json_type_string) {
    sc->preset = json_object_get_string(pol);
    return;
  }
  json_object *save = json_object_object_get(pol, "save"),
              *off = json_object_object_get(pol, "offload");
  sc->noffload = off ? (int32_t)json_object_array_length(off) : 0;
  sc->nsave = save ? (int32_t)json_object_array_length(save) : 0;
  if (!sc->nsave) return;
  const char **sv = base_xmalloc((size_t)sc->nsave * sizeof *sv);
  for (int32_t i = 0; i < sc->nsave; i++)
    sv[i] = json_object_get_string(json_object_array_get_idx(save, (size_t)i));
  sc->save = sv;
}

/* Walks the canonical config; a module's path is its JSON path ("/model/decoder"), which is
 * the origin the composer gives the values it emits. */
static void remat_scopes_walk(RematScopes *r, json_object *o, const char *path) {
  if (json_object_get_type(o) != json_type_object) return;
  json_object *pol = json_object_object_get(o, "remat_policy");
  if (pol) remat_scope_add(r, *path ? path : "/", pol);
  json_object_object_foreach(o, k, v) {
    char p[512];
    fe_path_join(p, sizeof p, path, k);
    remat_scopes_walk(r, v, p);
  }
}

static void remat_scopes_free(RematScopes *r) {
  for (int32_t i = 0; i < r->n; i++) {
    free((char *)r->s[i].path);
    free((void *)r->s[i].save);
  }
  free(r->s);
  memset(r, 0, sizeof *r);
}

static int run_pass(DrvJob *j, int i, const PassOptions *po) {
  IrGraph *g = j->graph;
  if (!drv_passes[i].run) return g ? 0 : -1; /* compose ran before the list */
  if (drv_passes[i].run(g, po) != IR_OK)
    return fe_error(&j->diag, j->file, NULL, "pass %s failed: %s", drv_passes[i].name,
                    ir_graph_error(g) ? ir_graph_error(g) : "unknown error");
  return 0;
}

static int verify(DrvJob *j, const char *pass) {
  char msg[1024];
  if (!verify_enabled() || ir_graph_verify(j->graph, msg, sizeof msg) == IR_OK) return 0;
  return fe_error(&j->diag, j->file, NULL, "internal: the graph after %s does not verify: %s", pass,
                  msg);
}

/* A sampling graph (`what`: forward or decode) simplified (dead auxiliary losses go) and verified.
 */
static int finish_sampling_graph(DrvJob *j, IrGraph *g, const char *what) {
  PassOptions po = {0};
  if (pass_simplify(g, &po) != IR_OK)
    return fe_error(&j->diag, j->file, NULL, "pass simplify failed on the %s graph: %s", what,
                    ir_graph_error(g) ? ir_graph_error(g) : "unknown error");
  char msg[1024];
  if (verify_enabled() && ir_graph_verify(g, msg, sizeof msg) != IR_OK)
    return fe_error(&j->diag, j->file, NULL, "internal: the %s graph does not verify: %s", what,
                    msg);
  return 0;
}

/* The sampling graphs: the forward of one sequence, unsharded, and where every attention is
 * causal the decode step, whose cache the forward fills (it outputs the keys and values). */
static int lower_forward(DrvJob *j) {
  bool kv = fe_model_decodes(j->cfg);
  j->forward = fe_compose_forward(&j->diag, j->file, j->cfg, &j->build, kv);
  if (!j->forward || finish_sampling_graph(j, j->forward, "forward")) return -1;
  if (!kv) return 0;
  j->decode = fe_compose_decode(&j->diag, j->file, j->cfg, &j->build);
  return !j->decode || finish_sampling_graph(j, j->decode, "decode") ? -1 : 0;
}

int drv_lower(DrvJob *j, const char *stop_after) {
  int last = drv_npasses - 1;
  if (stop_after) {
    for (last = 0; last < drv_npasses && strcmp(drv_passes[last].name, stop_after); last++) {
    }
    char names[256];
    if (last == drv_npasses)
      return fe_error(&j->diag, NULL, NULL, "unknown pass \"%s\" (expected %s)", stop_after,
                      drv_pass_list(names, sizeof names, ", ", " or "));
  }
  j->graph = fe_compose(&j->diag, j->file, j->cfg, &j->build);
  if (!j->graph) return -1;
  const char **names = base_xmalloc(((size_t)j->build.nparams + 1) * sizeof *names);
  double *scales = base_xmalloc(((size_t)j->build.nparams + 1) * sizeof *scales);
  PassLearner learner;
  learner_options(j, &learner, names, scales);
  PassOptions po = {0};
  po.learner = &learner;
  /* LoRA: gradients of the adapters alone; the frozen base gets none, so no optimizer state */
  const char **wrt = base_xmalloc(((size_t)j->build.nparams + 1) * sizeof *wrt);
  for (int i = 0; i < j->build.nparams; i++)
    if (!j->build.params[i].frozen) wrt[po.nwrt++] = j->build.params[i].path;
  if (po.nwrt == j->build.nparams) po.nwrt = 0; /* every parameter */
  po.wrt = wrt;
  FePrecision policy;
  fe_precision_facts(j->cfg, &policy);
  po.bf16_grads = policy.grads == DT_BF16;
  po.microbatches = j->facts.microbatches;
  PassShard shard = {0};
  PassShardLeaf *leaves = NULL;
  int rc = shard_mesh(j, &shard.mesh);
  if (rc == 0) leaves = shard_leaves(j, &shard.mesh, &shard.nleaves);
  shard.leaves = leaves;
  json_object *mesh = fe_get_child(j->cfg, "mesh");
  const char *order = mesh ? fe_get_str(mesh, "seq_order") : NULL;
  shard.sequence_parallel = fe_get_bool(mesh, "sequence_parallel");
  shard.seq_balanced = order && !strcmp(order, "balanced");
  po.shard = &shard;
  PipeOpts pipe = {0};
  if (rc == 0) pipe_opts(j, &shard.mesh, &pipe);
  po.pipeline = &pipe.p;
  RematScopes scopes = {0};
  if (rc == 0) remat_scopes_walk(&scopes, j->cfg, "");
  PassRemat remat = {scopes.n, scopes.s};
  po.remat = &remat;
  for (int i = 0; i <= last && rc == 0; i++) {
    rc = run_pass(j, i, &po);
    if (rc == 0) rc = verify(j, drv_passes[i].name);
    if (rc == 0) j->last_pass = drv_passes[i].name;
  }
  free(names);
  free(scales);
  free(wrt);
  free(leaves);
  remat_scopes_free(&scopes);
  pipe_opts_free(&pipe);
  if (rc == 0 && last == drv_npasses - 1) rc = lower_forward(j);
  return rc;
}
