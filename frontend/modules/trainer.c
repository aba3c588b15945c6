/*
 * trainer.c: the root of a training job: the model, the learner, the input,
 * checkpointing, the device mesh, and how long to train.
 *
 * The trainer is the parent of everything, so it is where cross-cutting
 * checks live: the batch must split over the mesh's batch axes, a learned
 * position table must cover the sequence length (handed to the model).
 */
#include "frontend/frontend.h"

static const FeField fields[] = {
    F_CHILD("model", NULL, "causal_lm", "the model to train"),
    F_CHILD("learner", NULL, "learner", "optimizer, schedule and clipping"),
    F_CHILD("input", NULL, "lm_input", "sequence length and batch size"),
    F_CHILD("checkpointer", "{\"kind\": \"checkpointer\"}", "checkpointer", "checkpoint policy"),
    F_CHILD("mesh", "{\"kind\": \"device_mesh\"}", "device_mesh", "device mesh axes and shape"),
    F_INT("max_steps", NULL, FE_ATLEAST(1), "number of training steps"),
    F_INT("seed", "0", FE_ATLEAST(0), "seed of parameter init and data order"),
};

static int check_batch(FeBuild *b, json_object *node) {
  int64_t split = fe_batch_split(&b->mesh);
  json_object *input = fe_get_child(node, "input");
  int64_t gbs = fe_get_int(input, "global_batch_size");
  if (split > 0 && gbs % split != 0)
    return fe_field_error(b, input, "/input", "global_batch_size",
                    "global batch size %lld does not divide over the mesh's batch axes "
                    "(data x expert x fsdp = %lld devices; expected a multiple of %lld)",
                    (long long)gbs, (long long)split, (long long)split);
  return 0;
}

static int build(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                 const FeDims *in) {
  FeDims d = *in;
  d.seq_len = fe_get_int(fe_get_child(node, "input"), "seq_len");
  d.batch = fe_get_int(fe_get_child(node, "input"), "global_batch_size") / fe_batch_split(&b->mesh);
  d.max_steps = fe_get_int(node, "max_steps");
  int rc = check_batch(b, node);
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
