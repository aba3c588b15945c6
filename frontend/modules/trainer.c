/*
 * trainer.c: the root of a training job: the model, the learner, the input,
 * checkpointing, the device mesh, and how long to train.
 *
 * The trainer is the parent of everything, so it is where cross-cutting
 * checks live: the batch must split over the mesh's batch axes (and each
 * device's part over the learner's microbatches), a learned
 * position table must cover the sequence length (handed to the model).
 */
#include <string.h>

#include "frontend/frontend.h"

static const FeField fields[] = {
    F_CHILD("model", NULL, "causal_lm", "the model to train"),
    F_CHILD("learner", NULL, "learner", "optimizer, schedule and clipping"),
    F_CHILD("input", NULL, "lm_input", "sequence length and batch size"),
    F_CHILD("checkpointer", "{\"kind\": \"checkpointer\"}", "checkpointer", "checkpoint policy"),
    F_CHILD("mesh", "{\"kind\": \"device_mesh\"}", "device_mesh", "device mesh axes and shape"),
    F_CHILD("precision", "{\"kind\": \"precision_policy\"}", "precision_policy",
            "mixed precision: dtypes of parameters, compute, gradients, optimizer state"),
    F_CHILD("lora", "null", "lora|null",
            "low-rank adapters on the matching projections, the rest of the model frozen"),
    F_INT("max_steps", NULL, FE_ATLEAST(1), "number of training steps"),
    F_INT("seed", "0", FE_ATLEAST(0), "seed of parameter init and data order"),
};

/* The sequence splits over the sequence axes (context parallelism) and, under sequence
 * parallelism, their chunks again over the tensor axis. */
static int check_seq(FeBuild *b, json_object *node) {
  json_object *input = fe_get_child(node, "input"), *mesh = fe_get_child(node, "mesh");
  int64_t T = fe_get_int(input, "seq_len"), seq = fe_seq_split(&b->mesh),
          model = fe_role_split(&b->mesh, FE_AXIS_TENSOR);
  const char *sname = fe_axis_with(FE_AXIS_SEQUENCE)->name,
             *mname = fe_axis_with(FE_AXIS_TENSOR)->name;
  if (T % seq != 0)
    return fe_field_error(b, input, "/input", "seq_len",
                          "seq_len %lld does not divide over the mesh's %s axis (%lld devices; "
                          "expected a multiple of %lld)",
                          (long long)T, sname, (long long)seq, (long long)seq);
  const char *order = fe_get_str(mesh, "seq_order");
  if (seq > 1 && order && !strcmp(order, "balanced")) {
    if (T % (2 * seq) != 0)
      return fe_field_error(b, input, "/input", "seq_len",
                            "seq_order balanced cuts seq_len %lld into 2 x %lld chunks, which "
                            "does not divide it (expected a multiple of %lld)",
                            (long long)T, (long long)seq, (long long)(2 * seq));
    if (fe_get_bool(mesh, "sequence_parallel"))
      return fe_field_error(b, mesh, "/mesh", "seq_order",
                            "seq_order balanced with sequence_parallel is not supported (the "
                            "sequence would split over %s inside %s's chunks; expected "
                            "\"contiguous\")",
                            mname, sname);
  }
  if (fe_get_bool(mesh, "sequence_parallel") && (T / seq) % model != 0)
    return fe_field_error(b, mesh, "/mesh", "sequence_parallel",
                          "sequence parallelism splits each device's %lld positions (seq_len "
                          "%lld over %s = %lld) over %s = %lld, which does not divide them "
                          "(expected a seq_len that is a multiple of %lld)",
                          (long long)(T / seq), (long long)T, sname, (long long)seq, mname,
                          (long long)model, (long long)(seq * model));
  return 0;
}

/* Pipeline stages: the decoder's layers split into pipeline contiguous stages, each fed
 * microbatch after microbatch; under the interleaved schedule into pipeline x pipeline_virtual
 * chunks, chunk c on stage c mod pipeline (docs/pipeline.md). */
static int check_pipeline(FeBuild *b, json_object *node) {
  int64_t P = 1;
  for (int i = 0; i < b->mesh.n; i++) {
    const FeAxis *a = fe_axis(b->mesh.axes[i]);
    if (a && (a->roles & FE_AXIS_PIPELINE)) P = b->mesh.shape[i];
  }
  if (P <= 1) return 0;
  json_object *mesh = fe_get_child(node, "mesh"), *learner = fe_get_child(node, "learner");
  json_object *dec = fe_get_child(fe_get_child(node, "model"), "decoder");
  int64_t L = dec ? fe_get_int(dec, "num_layers") : 0;
  bool inter = !strcmp(fe_get_str(mesh, "pipeline_schedule"), "interleaved");
  int64_t V = inter ? fe_get_int(mesh, "pipeline_virtual") : 1, C = P * V;
  /* what the cut points cut: "stages" or "chunks" */
  char what[96];
  if (inter)
    snprintf(what, sizeof what, "pipeline = %lld stages x pipeline_virtual = %lld = %lld chunks",
             (long long)P, (long long)V, (long long)C);
  else
    snprintf(what, sizeof what, "pipeline = %lld stages", (long long)P);
  const char *field = inter ? "pipeline_virtual" : "shape";
  if (L < C)
    return fe_field_error(b, mesh, "/mesh", field,
                          "%s need a decoder of at least %lld layers "
                          "(/model/decoder/num_layers is %lld)",
                          what, (long long)C, (long long)L);
  json_object *cuts = json_object_object_get(mesh, "pipeline_cuts");
  size_t nc = cuts ? json_object_array_length(cuts) : 0;
  if (nc == 0 && L % C)
    return fe_field_error(b, mesh, "/mesh", field,
                          "%s do not divide /model/decoder/num_layers = %lld "
                          "(expected a multiple of %lld, or /mesh/pipeline_cuts)",
                          what, (long long)L, (long long)C);
  if (nc && nc != (size_t)(C - 1))
    return fe_field_error(b, mesh, "/mesh", "pipeline_cuts",
                          "%zu cut points for %s (expected %lld)", nc, what, (long long)(C - 1));
  for (size_t i = 0, prev = 0; i < nc; i++) {
    int64_t c = json_object_get_int64(json_object_array_get_idx(cuts, i));
    if (c <= (int64_t)prev || c >= L)
      return fe_field_error(b, mesh, "/mesh", "pipeline_cuts",
                            "cut point %lld: expected increasing layer indices in 1..%lld, "
                            "each %s at least one layer",
                            (long long)c, (long long)(L - 1), inter ? "chunk" : "stage");
    prev = (size_t)c;
  }
  int64_t M = fe_get_int(learner, "microbatches");
  if (M < P)
    return fe_field_error(b, learner, "/learner", "microbatches",
                          "pipeline = %lld stages need at least %lld microbatches to feed them "
                          "(got %lld)",
                          (long long)P, (long long)P, (long long)M);
  if (inter && M % P)
    return fe_field_error(b, learner, "/learner", "microbatches",
                          "the interleaved schedule runs microbatches in groups of pipeline = "
                          "%lld: %lld microbatches are not a multiple of %lld",
                          (long long)P, (long long)M, (long long)P);
  return 0;
}

static int check_batch(FeBuild *b, json_object *node) {
  int64_t split = fe_batch_split(&b->mesh);
  json_object *input = fe_get_child(node, "input");
  int64_t gbs = fe_get_int(input, "global_batch_size");
  char axes[128]; /* "data x expert x fsdp" */
  fe_axis_names(FE_AXIS_BATCH, " x ", axes, sizeof axes);
  if (split > 0 && gbs % split != 0)
    return fe_field_error(b, input, "/input", "global_batch_size",
                          "global batch size %lld does not divide over the mesh's batch axes "
                          "(%s = %lld devices; expected a multiple of %lld)",
                          (long long)gbs, axes, (long long)split, (long long)split);
  /* each device runs the microbatches over its own rows: they split its part of the batch */
  json_object *learner = fe_get_child(node, "learner");
  int64_t n = fe_get_int(learner, "microbatches");
  if (split > 0 && n > 1 && (gbs / split) % n != 0) {
    /* a count from a file (a mesh rule's for this target, or the config's): say what runs */
    int64_t per = gbs / split, k = n < per ? n : per;
    while (per % k) k--;
    const char *src = fe_origin_key(learner, "microbatches");
    char hint[96] = "";
    if (!src || strcmp(src, "--set"))
      snprintf(hint, sizeof hint, "; --set /learner/microbatches=%lld overrides it", (long long)k);
    return fe_field_error(b, learner, "/learner", "microbatches",
                          "%lld microbatches do not divide the per-device batch: global batch "
                          "size %lld over the mesh's batch axes (%s = %lld devices) leaves "
                          "%lld sequences per device (expected a divisor of %lld%s)",
                          (long long)n, (long long)gbs, axes, (long long)split, (long long)per,
                          (long long)per, hint);
  }
  return check_seq(b, node);
}

static int build(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                 const FeDims *in) {
  FeDims d = *in;
  d.seq_len = fe_get_int(fe_get_child(node, "input"), "seq_len");
  /* what one forward/backward pass holds: a microbatch of the device's part of the batch */
  d.batch = fe_get_int(fe_get_child(node, "input"), "global_batch_size") /
            fe_batch_split(&b->mesh) / fe_get_int(fe_get_child(node, "learner"), "microbatches");
  d.max_steps = fe_get_int(node, "max_steps");
  d.dtype = fe_get_str(fe_get_child(node, "precision"), "params");
  int rc = check_batch(b, node) || check_pipeline(b, node) ? -1 : 0;
  if (fe_build_child(b, node, "model", cfg, prm, &d)) rc = -1;
  if (fe_build_child(b, node, "learner", cfg, prm, &d)) rc = -1;
  return rc;
}

const FeKind fe_kind_trainer = {
    .name = "trainer",
    .doc = "a training job",
    .fields = fields,
    .nfields = FE_NFIELDS(fields),
    .build = build,
};

/* ---- the training facts (frontend.h: FeTrainFacts) ---- */

static void learner_facts(json_object *learner, int64_t max_steps, FeLearnerFacts *l) {
  json_object *adam = fe_get_child(learner, "optimizer"),
              *sched = fe_get_child(learner, "schedule");
  l->learning_rate = fe_get_float(adam, "learning_rate");
  l->b1 = fe_get_float(adam, "b1");
  l->b2 = fe_get_float(adam, "b2");
  l->eps = fe_get_float(adam, "eps");
  l->weight_decay = fe_get_float(adam, "weight_decay");
  l->max_grad_norm = fe_get_float(learner, "max_grad_norm");
  l->warmup_steps = fe_get_int(sched, "warmup_steps");
  l->cosine = strcmp(fe_node_kind(sched), "cosine_schedule") == 0;
  if (l->cosine) {
    l->decay_steps = fe_get_int(sched, "decay_steps");
    if (l->decay_steps == 0) l->decay_steps = max_steps;
    l->min_ratio = fe_get_float(sched, "min_ratio");
  }
}

void fe_train_facts(json_object *cfg, FeTrainFacts *f) {
  json_object *input = fe_get_child(cfg, "input"), *ckpt = fe_get_child(cfg, "checkpointer");
  memset(f, 0, sizeof *f);
  f->program.max_steps = fe_get_int(cfg, "max_steps");
  f->program.seed = (uint64_t)fe_get_int(cfg, "seed");
  f->program.ckpt_every_n_steps = fe_get_int(ckpt, "every_n_steps");
  f->program.ckpt_keep = fe_get_int(ckpt, "keep_last");
  f->global_batch = fe_get_int(input, "global_batch_size");
  f->seq_len = fe_get_int(input, "seq_len");
  f->vocab = fe_get_int(fe_get_child(cfg, "model"), "vocab_size");
  f->microbatches = fe_get_int(fe_get_child(cfg, "learner"), "microbatches");
  learner_facts(fe_get_child(cfg, "learner"), f->program.max_steps, &f->learner);
}
