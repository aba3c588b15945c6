/*
 * interp.c: the interp backend, training with the reference interpreter
 * (`axlc run --backend interp`, or `--target interp`). Slow and exact: the
 * oracle that compiled trainers are checked against, and a way to train small
 * models without code generation. It runs in process only: there is no
 * trainer to compile.
 *
 * State lives in the interpreter between steps: after each step the outputs
 * "new:P" are bound back as the parameters P (model parameters and the
 * optimizer's opt/m, opt/v alike). Parameters start from the runtime's
 * deterministic init (seed, path), or from a safetensors file (--init).
 *
 * A per-device program (a mesh of several devices, after pass_shard) runs on
 * the interpreter's simulated mesh: every leaf is bound to each device as that
 * device's chunk of the global value, each device keeps its own new state, and
 * --dump writes the global tensors put back together.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "runtime/axrt.h"

/* The options of `axlc run --backend interp`. */
typedef struct InterpOptions {
  const char *data; /* text or llm.c token file */
  int64_t steps;    /* 0: the config's max_steps */
  int64_t seed;     /* < 0: the config's seed */
  const char *init; /* safetensors with initial parameters, or NULL */
  const char *dump; /* safetensors to write after the last step, or NULL */
  FILE *log;        /* per-step lines */
} InterpOptions;

typedef struct {
  const BackendJob *j;
  const InterpOptions *o;
  IrInterp *it;
  RtData *data;
  int64_t batch, seq;
  int32_t *ids, *targets; /* (B, T) */
  double *buf;            /* scratch, as large as the largest parameter */
  float *fbuf;
  float *losses; /* (steps) */
  uint64_t seed; /* of the init */
} Trainer;

static int fail(Trainer *t, const char *msg) {
  return backend_error(&t->j->diag, NULL, NULL, "%s", msg);
}

/* The trainer's buffers are sized by the model (a parameter's elements, the batch, the steps), so
 * running out of memory for one is the model's error, said with its size, not an abort
 * (docs/design.md, "Errors and out-of-memory"). */
static int fail_oom(Trainer *t, const char *what, int64_t n) {
  return backend_error(&t->j->diag, NULL, NULL, "%s: out of memory for %lld elements", what,
                       (long long)n);
}

/* Fills t->fbuf with parameter p's initial values. */
/* Under LoRA (frozen parameters), an --init file holds the base: a trainable parameter (an
 * adapter) it lacks starts from its init. */
static bool adapter_absent(const Trainer *t, const BackendParam *p, const RtSt *st) {
  bool lora = false;
  for (int i = 0; i < t->j->program.nparams; i++) lora |= t->j->program.params[i].frozen;
  return lora && !p->frozen && !rt_st_find(st, p->path);
}

static int init_values(Trainer *t, const BackendParam *p, const RtSt *st, uint64_t seed) {
  RtError err;
  int64_t n = ir_shape_numel(&p->shape);
  if (st && !adapter_absent(t, p, st)) {
    if (rt_st_read_f32(st, p->path, p->shape.dims, p->shape.rank, t->fbuf, &err))
      return fail(t, err.msg);
    if (rt_st_check_finite(st, p->path, &err))
      return backend_error(&t->j->diag, NULL, NULL,
                           "--init: %s; refusing to start from weights that are not finite",
                           err.msg);
    return 0;
  }
  if (rt_init_fill(t->fbuf, n, 0, p->path, seed, &p->init, &err)) return fail(t, err.msg);
  return 0;
}

/* The global shape of value v of a per-device program. */
static IrShape global_shape(const IrGraph *g, int32_t v) {
  IrShape s = g->values[v].shape;
  for (int32_t d = 0; d < s.rank; d++)
    s.dims[d] *= ir_split_count(&g->mesh, &g->values[v].split, d);
  return s;
}

/* Binds the global value `data` (shape s) of leaf `name`: whole on one device, else each device
 * its chunk. */
static int bind(Trainer *t, const char *name, const IrShape *s, const double *data) {
  const IrGraph *g = t->j->graph;
  int32_t v = ir_graph_find(g, IR_PARAMETER, name);
  if (v == IR_NONE) v = ir_graph_find(g, IR_INPUT, name);
  int st = IR_OK;
  if (v == IR_NONE || !g->mesh.naxes) {
    st = ir_interp_set(t->it, -1, name, s->rank, s->dims, data);
  } else {
    const IrValue *x = &g->values[v];
    int64_t n = ir_shape_numel(&x->shape);
    double *l = malloc((size_t)(n ? n : 1) * sizeof *l);
    if (!l) return fail_oom(t, name, n);
    for (int64_t dev = 0; dev < ir_mesh_devices(&g->mesh) && st == IR_OK; dev++) {
      ir_split_copy(&g->mesh, &x->split, s, dev, (double *)data, l, false);
      st = ir_interp_set(t->it, dev, name, x->shape.rank, x->shape.dims, l);
    }
    free(l);
  }
  return st != IR_OK ? fail(t, ir_interp_error(t->it)) : 0;
}

/* Output `name` (NULL: value v, a parameter) as a global tensor in t->buf (shape *s). */
static int gather(Trainer *t, const char *name, int32_t v, IrShape *s) {
  const IrGraph *g = t->j->graph;
  if (name) v = ir_graph_output(g, name);
  if (v == IR_NONE) return fail(t, "internal: an output is missing");
  *s = global_shape(g, v);
  for (int64_t dev = 0; dev < (g->mesh.naxes ? ir_mesh_devices(&g->mesh) : 1); dev++) {
    if (!ir_value_on_device(&g->mesh, &g->values[v], dev)) continue; /* another stage's */
    const double *x =
        name ? ir_interp_output(t->it, dev, name, NULL) : ir_interp_value(t->it, dev, v);
    if (!x) return fail(t, ir_interp_error(t->it));
    if (g->mesh.naxes)
      ir_split_copy(&g->mesh, &g->values[v].split, s, dev, t->buf, (double *)x, true);
    else
      memcpy(t->buf, x, (size_t)ir_shape_numel(s) * sizeof *x);
  }
  return 0;
}

/* Binds every parameter and zeroed optimizer state. */
static int init_params(Trainer *t, uint64_t seed) {
  t->seed = seed;
  RtSt *st = NULL;
  RtError err;
  if (t->o->init && rt_st_open(&st, t->o->init, &err)) return fail(t, err.msg);
  if (st) rt_st_dump_as_weights(st); /* a --dump of an earlier run: its new parameters */
  int rc = 0;
  for (int i = 0; i < t->j->program.nparams && rc == 0; i++) {
    const BackendParam *p = &t->j->program.params[i];
    IrShape s = p->shape;
    int64_t n = ir_shape_numel(&s);
    rc = init_values(t, p, st, seed);
    for (int64_t k = 0; k < n && rc == 0; k++) t->buf[k] = t->fbuf[k];
    if (rc == 0) rc = bind(t, p->path, &s, t->buf);
    memset(t->buf, 0, (size_t)n * sizeof *t->buf);
    if (p->frozen) continue; /* no optimizer state */
    char name[1024];
    snprintf(name, sizeof name, "opt/m/%s", p->path);
    if (rc == 0) rc = bind(t, name, &s, t->buf);
    snprintf(name, sizeof name, "opt/v/%s", p->path);
    if (rc == 0) rc = bind(t, name, &s, t->buf);
  }
  rt_st_close(st);
  return rc;
}

static int bind_batch(Trainer *t, int64_t step) {
  RtError err;
  if (rt_data_next_batch(t->data, (int)t->batch, (int)t->seq, t->ids, t->targets, &err))
    return fail(t, err.msg);
  int64_t n = t->batch * t->seq, dims[2] = {t->batch, t->seq};
  IrShape s = ir_shape_make(2, dims);
  for (int64_t k = 0; k < n; k++) t->buf[k] = t->ids[k];
  if (bind(t, "ids", &s, t->buf)) return -1;
  for (int64_t k = 0; k < n; k++) t->buf[k] = t->targets[k];
  if (bind(t, "targets", &s, t->buf)) return -1;
  double st = (double)step;
  IrShape scalar = ir_shape_make(0, NULL);
  return bind(t, "step", &scalar, &st);
}

/* Binds every "new:X" output back as X, on each device its own. */
static int carry_state(Trainer *t) {
  const IrGraph *g = t->j->graph;
  for (int32_t i = 0; i < g->noutputs; i++) {
    const char *name = g->outputs[i].name;
    if (strncmp(name, "new:", 4) != 0) continue;
    if (g->values[g->outputs[i].value].stage > 0) { /* one pipeline stage's: to every device */
      IrShape s;
      if (gather(t, name, IR_NONE, &s) || bind(t, name + 4, &s, t->buf)) return -1;
      continue;
    }
    for (int64_t dev = 0; dev < (g->mesh.naxes ? ir_mesh_devices(&g->mesh) : 1); dev++) {
      IrShape s;
      const double *v = ir_interp_output(t->it, dev, name, &s);
      if (!v) return fail(t, ir_interp_error(t->it));
      int64_t n = ir_shape_numel(&s);
      memcpy(t->buf, v, (size_t)n * sizeof *v); /* the output buffer is the interpreter's */
      if (ir_interp_set(t->it, g->mesh.naxes ? dev : -1, name + 4, s.rank, s.dims, t->buf) != IR_OK)
        return fail(t, ir_interp_error(t->it));
    }
  }
  return 0;
}

/* A device that computes output `name` (under a pipeline, one of its stage's). */
static int64_t scalar_device(const Trainer *t, const char *name) {
  const IrGraph *g = t->j->graph;
  int32_t v = ir_graph_output(g, name);
  for (int64_t dev = 0; v != IR_NONE && dev < ir_mesh_devices(&g->mesh); dev++)
    if (ir_value_on_device(&g->mesh, &g->values[v], dev)) return dev;
  return 0;
}

static int run_step(Trainer *t, int64_t step) {
  if (bind_batch(t, step)) return -1;
  if (ir_interp_run(t->it) != IR_OK) return fail(t, ir_interp_error(t->it));
  IrShape s;
  const double *loss = ir_interp_output(t->it, scalar_device(t, "loss"), "loss", &s);
  const double *lr = ir_interp_output(t->it, scalar_device(t, "lr"), "lr", &s);
  const double *gn = ir_interp_output(t->it, scalar_device(t, "grad_norm"), "grad_norm", &s);
  if (!loss || !lr || !gn) return fail(t, ir_interp_error(t->it));
  t->losses[step - 1] = (float)*loss;
  if (t->o->log)
    fprintf(t->o->log, "step %lld loss %.6f grad_norm %.4f lr %.3g\n", (long long)step, *loss, *gn,
            *lr);
  if (!isfinite(*loss)) {
    char msg[128];
    snprintf(msg, sizeof msg, "the loss is not finite at step %lld; stopping", (long long)step);
    return fail(t, msg);
  }
  return 0;
}

/* ---- --dump: loss per step, the last step's gradients, the new parameters - */

static float *to_float(const double *v, int64_t n) {
  float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  for (int64_t k = 0; f && k < n; k++) f[k] = (float)v[k];
  return f;
}

/* The frozen parameters (a LoRA run's base) as "new:P" too, unchanged: the dump is the whole
 * adapted model, for --init and `axlc convert --merge-lora`. They are read again from where the
 * run took them (--init or the seeded init): the interpreter keeps no copy of its leaves. */
static int dump_frozen(Trainer *t, RtTensor *ts, int *n) {
  RtSt *st = NULL;
  RtError err;
  if (t->o->init && rt_st_open(&st, t->o->init, &err)) return fail(t, err.msg);
  if (st) rt_st_dump_as_weights(st);
  int rc = 0;
  for (int i = 0; i < t->j->program.nparams && rc == 0; i++) {
    const BackendParam *p = &t->j->program.params[i];
    if (!p->frozen || (rc = init_values(t, p, st, t->seed))) continue;
    int64_t numel = ir_shape_numel(&p->shape);
    RtTensor *tt = &ts[(*n)++];
    char *name = malloc(strlen(p->path) + 5);
    float *data = malloc((size_t)(numel ? numel : 1) * sizeof *data);
    *tt = (RtTensor){.name = name, .dtype = RT_DT_F32, .ndim = p->shape.rank, .data = data};
    memcpy(tt->shape, p->shape.dims, sizeof(int64_t) * (size_t)p->shape.rank);
    if (!name || !data) rc = fail_oom(t, p->path, numel);
    if (rc == 0) sprintf(name, "new:%s", p->path), memcpy(data, t->fbuf, (size_t)numel * 4);
  }
  rt_st_close(st);
  return rc;
}

static int dump(Trainer *t, int64_t steps) {
  const IrGraph *g = t->j->graph;
  RtTensor *ts = base_xcalloc((size_t)g->noutputs + (size_t)t->j->program.nparams + 1, sizeof *ts);
  int n = 0, rc = 0;
  ts[n++] = (RtTensor){
      .name = "loss", .dtype = RT_DT_F32, .ndim = 1, .shape = {steps}, .data = t->losses};
  for (int32_t i = 0; i < g->noutputs; i++) {
    const char *name = g->outputs[i].name;
    bool want = !strncmp(name, "grad:", 5) ||
                (!strncmp(name, "new:", 4) && strncmp(name, "new:opt/", 8) != 0);
    if (!want) continue;
    IrShape s;
    if (gather(t, name, IR_NONE, &s)) continue;
    RtTensor *tt = &ts[n++];
    tt->name = name;
    tt->dtype = RT_DT_F32;
    tt->ndim = s.rank;
    memcpy(tt->shape, s.dims, sizeof(int64_t) * (size_t)s.rank);
    tt->data = to_float(t->buf, ir_shape_numel(&s));
    if (!tt->data) {
      rc = fail_oom(t, name, ir_shape_numel(&s));
      break;
    }
  }
  int nout = n; /* the names from here on are dump_frozen's */
  if (rc == 0) rc = dump_frozen(t, ts, &n);
  RtError err;
  if (rc == 0 && rt_st_write(t->o->dump, ts, n, NULL, 0, NULL, NULL, &err)) rc = fail(t, err.msg);
  for (int i = 1; i < n; i++) free((void *)ts[i].data);
  for (int i = nout; i < n; i++) free((void *)ts[i].name);
  free(ts);
  return rc;
}

static int64_t max_numel(const BackendJob *j, int64_t floor) {
  int64_t m = floor;
  for (int i = 0; i < j->program.nparams; i++)
    if (ir_shape_numel(&j->program.params[i].shape) > m)
      m = ir_shape_numel(&j->program.params[i].shape);
  return m;
}

static int setup(Trainer *t, int64_t steps) {
  RtError err;
  if (!t->o->data) return fail(t, "--data FILE is required (a text or llm.c token file)");
  if (rt_data_open(&t->data, t->o->data, (int)t->j->program.vocab, &err)) return fail(t, err.msg);
  int32_t ids = ir_graph_find(t->j->graph, IR_INPUT, "ids");
  IrShape bt = global_shape(t->j->graph, ids); /* every device's batch: the global one */
  t->batch = bt.dims[0];
  t->seq = bt.dims[1];
  int64_t n = max_numel(t->j, t->batch * t->seq);
  t->buf = malloc((size_t)n * sizeof *t->buf);
  t->fbuf = malloc((size_t)n * sizeof *t->fbuf);
  t->ids = malloc((size_t)(t->batch * t->seq) * sizeof *t->ids);
  t->targets = malloc((size_t)(t->batch * t->seq) * sizeof *t->targets);
  t->losses = calloc((size_t)steps, sizeof *t->losses);
  if (!t->losses) /* one per step, for --dump */
    return backend_error(&t->j->diag, NULL, NULL, "--steps %lld: out of memory for a loss per step",
                         (long long)steps);
  if (!t->buf || !t->fbuf) return fail_oom(t, "the largest parameter or batch", n);
  if (!t->ids || !t->targets) return fail_oom(t, "the batch", t->batch * t->seq);
  t->it = ir_interp_new(t->j->graph, NULL);
  if (!t->it)
    return fail_oom(t, "the values of every device",
                    ir_mesh_devices(&t->j->graph->mesh) * t->j->graph->nvalues);
  ir_interp_set_keep_all(t->it, false); /* only the outputs are read back */
  return 0;
}

static int train(const BackendJob *j, const InterpOptions *o) {
  int64_t steps = o->steps > 0 ? o->steps : j->program.facts.max_steps;
  uint64_t seed = o->seed >= 0 ? (uint64_t)o->seed : j->program.facts.seed;
  Trainer t = {.j = j, .o = o};
  int rc = setup(&t, steps);
  if (rc == 0) rc = init_params(&t, seed);
  for (int64_t s = 1; s <= steps && rc == 0; s++) {
    rc = run_step(&t, s);
    if (rc == 0 && s < steps) rc = carry_state(&t);
  }
  if (rc == 0 && o->dump) rc = dump(&t, steps);
  ir_interp_free(t.it);
  rt_data_close(t.data);
  free(t.buf);
  free(t.fbuf);
  free(t.ids);
  free(t.targets);
  free(t.losses);
  return rc;
}

/* ---- the backend ---- */

#define MAX_COUNT (1LL << 40) /* --steps and --seed */

/* A count option's value: digits only, at most MAX_COUNT. */
static int parse_count(const BackendDiag *d, const char *opt, const char *v, int64_t *out) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!isdigit((unsigned char)v[0]) || *end || errno == ERANGE || n > MAX_COUNT)
    return backend_error(d, NULL, NULL, "%s '%s': expected a non-negative integer up to %lld", opt,
                         v, MAX_COUNT);
  *out = n;
  return 0;
}

/* --data, --steps, --seed, --init, --dump, each with a value. */
static int parse_options(const BackendDiag *d, int argc, char **argv, InterpOptions *o) {
  memset(o, 0, sizeof *o);
  o->seed = -1;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool text = !strcmp(s, "--data") || !strcmp(s, "--init") || !strcmp(s, "--dump");
    bool num = !strcmp(s, "--steps") || !strcmp(s, "--seed");
    if (!text && !num)
      return backend_error(d, NULL, NULL,
                           "%s is not an option of --backend interp (it takes "
                           "--data, --steps, --seed, --init, --dump; --backend llvm takes the "
                           "trainer's options)",
                           s);
    if (!v || !strncmp(v, "--", 2)) /* the next option, not a value */
      return backend_error(d, NULL, NULL, "%s needs a value", s);
    i++;
    if (text)
      *(!strcmp(s, "--data") ? &o->data : !strcmp(s, "--init") ? &o->init : &o->dump) = v;
    else if (parse_count(d, s, v, !strcmp(s, "--steps") ? &o->steps : &o->seed))
      return -1;
  }
  /* --dump replaces its file: never one of the run's inputs */
  const RtPathArg out = {"--dump", o->dump, NULL};
  const RtPathArg in[] = {{"--data", o->data, NULL}, {"--init", o->init, NULL}};
  RtError err;
  if (rt_file_check_outputs(&out, 1, in, 2, &err))
    return backend_error(d, NULL, NULL, "%s", err.msg);
  return 0;
}

static int interp_check_run_args(int argc, char **argv, const BackendDiag *d) {
  InterpOptions o;
  return parse_options(d, argc, argv, &o);
}

static int interp_run(const BackendJob *j, const BackendOptions *bo, int argc, char **argv) {
  (void)bo;
  InterpOptions o;
  if (parse_options(&j->diag, argc, argv, &o)) return 1;
  o.log = stdout;
  return train(j, &o) ? 1 : 0;
}

/* The interpreter computes every op of ops.def in double, whatever the dtype. */
static bool interp_supports_op(IrOp op, IrDType dt) {
  return (unsigned)op < IR_OP_COUNT && (unsigned)dt < DT_COUNT;
}

const Backend backend_interp = {
    .name = "interp",
    .doc = "the reference interpreter: slow and exact, trains in process (axlc run)",
    .targets = NULL, /* `--target interp` is an alias the command line resolves */
    .dtypes = (1u << DT_COUNT) - 1,
    .emits = NULL,
    .standalone = false,
    .supports_op = interp_supports_op,
    .plan = NULL,
    .compile = NULL,
    .run = interp_run,
    .check_run_args = interp_check_run_args,
};
