/*
 * input.c: the trainer's non-model parts that are plain settings: the
 * language-model input, the checkpoint policy and the device mesh.
 * The mesh is interpreted by build.c (fe_build), before the module walk,
 * because every parameter's partition spec is checked against it.
 */
#include "frontend/frontend.h"

static const FeField input_fields[] = {
    F_INT("seq_len", NULL, FE_RANGE(1, 1 << 24), "tokens per sequence"),
    F_INT("global_batch_size", NULL, FE_RANGE(1, 1 << 30), "sequences per step over all devices"),
};

static const FeField ckpt_fields[] = {
    F_INT("every_n_steps", "0", FE_ATLEAST(0), "save every N steps; 0: only at the end"),
    F_INT("keep_last", "3", FE_ATLEAST(1), "complete checkpoints to keep"),
};

static const FeField mesh_fields[] = {
    /* the defaults come from the axis table (frontend.h: FE_AXES) */
    F_TYPED("axes", FT_STRING_LIST, FE_AXES_JSON, "mesh axis names, outermost first"),
    F_TYPED("shape", FT_INT_LIST, FE_AXES_SIZES_JSON,
            "devices along each axis; one -1 takes whatever is left"),
    F_BOOL("sequence_parallel", "false",
           "Megatron sequence parallelism: outside attention and feed-forward the activations "
           "split over the sequence on the model axis (else on the hidden dim)"),
    F_ENUM("seq_order", "\"contiguous\"", "contiguous|balanced",
           "context parallelism (the seq axis): contiguous gives device c of S the positions "
           "[c T/S, (c + 1) T/S); balanced cuts the sequence in 2 S chunks and gives device c "
           "chunks c and 2 S - 1 - c, so every device's queries see about as many keys under "
           "a causal mask"),
    F_ENUM("pipeline_schedule", "\"gpipe\"", "gpipe|1f1b|interleaved",
           "order of the microbatches' forwards and backwards on each pipeline stage: gpipe "
           "(all forwards, then all backwards), 1f1b (one forward, one backward) or "
           "interleaved (1f1b over pipeline_virtual chunks of layers per stage)"),
    F_INT("pipeline_virtual", "2", FE_RANGE(1, 64),
          "interleaved schedule: chunks of layers per pipeline stage (virtual stages); chunk c "
          "runs on stage c mod pipeline"),
    F_TYPED("pipeline_cuts", FT_INT_LIST, "[]",
            "the first decoder layer of each pipeline stage after the first (pipeline - 1 "
            "increasing layer indices; interleaved: of each chunk, pipeline x pipeline_virtual "
            "- 1); []: equal stages"),
};

const FeKind fe_kind_lm_input = {
    .name = "lm_input",
    .doc = "next-token prediction input",
    .fields = input_fields,
    .nfields = FE_NFIELDS(input_fields),
};

const FeKind fe_kind_checkpointer = {
    .name = "checkpointer",
    .doc = "checkpoint policy",
    .fields = ckpt_fields,
    .nfields = FE_NFIELDS(ckpt_fields),
};

const FeKind fe_kind_device_mesh = {
    .name = "device_mesh",
    .doc = "logical device mesh",
    .fields = mesh_fields,
    .nfields = FE_NFIELDS(mesh_fields),
};
