/*
 * learner.c: the optimizer side of a training job: AdamW with decoupled
 * weight decay, clipping by global norm, and the learning-rate schedule
 * (a multiplier on the optimizer's peak learning rate).
 */
#include "frontend/frontend.h"

static const FeField learner_fields[] = {
    F_CHILD("optimizer", NULL, "adamw", "the update rule"),
    F_CHILD("schedule", "{\"kind\": \"constant_schedule\"}", "cosine_schedule|constant_schedule",
            "learning-rate multiplier per step"),
    F_FLOAT("max_grad_norm", "1.0", FE_ATLEAST(0), "clip gradients to this global norm; 0: off"),
    F_INT("microbatches", "1", FE_RANGE(1, 1 << 20),
          "forward/backward passes per step over slices of the batch (gradient accumulation)"),
};

static int build_learner(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                         const FeDims *in) {
  return fe_build_child(b, node, "schedule", cfg, prm, in);
}

static const FeField adamw_fields[] = {
    F_FLOAT("learning_rate", NULL, FE_ATLEAST(0), "peak learning rate"),
    F_FLOAT("b1", "0.9", FE_RANGE(0, 1), "first-moment decay"),
    F_FLOAT("b2", "0.95", FE_RANGE(0, 1), "second-moment decay"),
    F_FLOAT("eps", "1e-8", FE_ATLEAST(0), "added to the second-moment root"),
    F_FLOAT("weight_decay", "0.0", FE_ATLEAST(0), "decoupled weight decay (scaled per parameter)"),
};

static const FeField cosine_fields[] = {
    F_INT("warmup_steps", "0", FE_ATLEAST(0), "steps of linear warmup from 0"),
    F_INT("decay_steps", "0", FE_ATLEAST(0), "steps to the end of the cosine; 0: max_steps"),
    F_FLOAT("min_ratio", "0.1", FE_RANGE(0, 1), "final multiplier"),
};

static int build_cosine(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                        const FeDims *in) {
  (void)prm;
  int64_t warm = fe_get_int(node, "warmup_steps"), decay = fe_get_int(node, "decay_steps");
  if (decay == 0) decay = in->max_steps;
  if (warm > decay) {
    return fe_field_error(b, node, cfg, "warmup_steps",
                          "warmup_steps %lld exceeds the decay length %lld "
                          "(expected at most %lld)",
                          (long long)warm, (long long)decay, (long long)decay);
  }
  return 0;
}

static const FeField constant_fields[] = {
    F_INT("warmup_steps", "0", FE_ATLEAST(0), "steps of linear warmup from 0"),
};

const FeKind fe_kind_learner = {
    .name = "learner",
    .doc = "optimizer, schedule and clipping",
    .fields = learner_fields,
    .nfields = FE_NFIELDS(learner_fields),
    .build = build_learner,
};

const FeKind fe_kind_adamw = {
    .name = "adamw",
    .doc = "AdamW with decoupled weight decay",
    .fields = adamw_fields,
    .nfields = FE_NFIELDS(adamw_fields),
};

const FeKind fe_kind_cosine_schedule = {
    .name = "cosine_schedule",
    .doc = "linear warmup then cosine decay",
    .fields = cosine_fields,
    .nfields = FE_NFIELDS(cosine_fields),
    .build = build_cosine,
};

const FeKind fe_kind_constant_schedule = {
    .name = "constant_schedule",
    .doc = "linear warmup then constant",
    .fields = constant_fields,
    .nfields = FE_NFIELDS(constant_fields),
};
