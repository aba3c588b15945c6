/*
 * frontend.h: configs, modifiers, module kinds and the parameter table.
 *
 * A training job is a JSON tree. Objects with a "kind" are modules; each kind
 * registers a schema (one file per kind in frontend/modules/). Resolution turns a config file
 * plus its base files, modifiers, the selected mesh rule, --apply files and
 * --set overrides into one canonical tree: every field present, every default
 * explicit, validated against the schemas. The module walk (fe_build) then
 * hands each module what its parent decides (dims) and collects parameters.
 *
 * Library code never exits: every entry point returns 0 on success and -1 on
 * a user error, with the messages in an FeDiag.
 */
#ifndef AXLC_FRONTEND_H
#define AXLC_FRONTEND_H

#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>

#include "ir/ir.h"
#include "runtime/axrt.h"

/* ---- diag.c: diagnostics ------------------------------------------------ */

/* Collects user-facing error messages. Each message reads
 * "FILE: /json/path: what is wrong (expected ...)". */
typedef struct FeDiag {
  char **msgs;
  int n, cap;
  /* Interned strings (file names) and origin records owned by the diag,
   * which is the context of one resolution. */
  char **pool;
  int npool, cappool;
  struct FeOrigin **origins;
  int norigins, caporigins;
  /* Every file fe_json_load opened (interned, each once): what a command that writes a
   * file must not overwrite. */
  const char **files;
  int nfiles, capfiles;
} FeDiag;

void fe_diag_init(FeDiag *d);
void fe_diag_free(FeDiag *d);
/* Records an error; always returns -1 so callers can `return fe_error(...)`. */
int fe_error(FeDiag *d, const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void fe_diag_print(const FeDiag *d, FILE *out);
const char *fe_intern(FeDiag *d, const char *s);
/* A malloc'd formatted string, as long as it needs to be; aborts when out of
 * memory, like every allocation of the diag. */
char *fe_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *fe_vasprintf(const char *fmt, va_list ap);
/* Frees the origin records (json.c); called by fe_diag_free. */
void fe_origins_free(FeDiag *d);
/* The candidate nearest to `word` by edit distance, or NULL if none is close. */
const char *fe_nearest(const char *word, const char *const *cands, int n);

/* ---- json.c: loading, origins, paths, canonical printing ---------------- */

/* Parses a file; syntax errors name line and column. Every object and array
 * remembers the file it came from, and each key of an object the file that
 * last set it (a derived config over its base, a modifier, --set). */
json_object *fe_json_load(FeDiag *d, const char *file);
json_object *fe_json_parse(FeDiag *d, const char *text, size_t len, const char *origin);
/* The file `o` came from (NULL for scalars and unknown). */
const char *fe_origin(json_object *o);
/* The file that set `key` of object `o`, else the object's own file. */
const char *fe_origin_key(json_object *o, const char *key);
void fe_set_origin(FeDiag *d, json_object *o, const char *file, bool deep);
void fe_set_origin_key(FeDiag *d, json_object *o, const char *key, const char *file);
/* Gives `dst` a copy of `src`'s origin record. */
void fe_copy_origin(FeDiag *d, json_object *dst, json_object *src);
/* Deep copy that keeps origins. */
json_object *fe_json_copy(FeDiag *d, json_object *o);
/* Looks up a "/a/b/0/c" path; returns NULL if absent. "" or "/" is the root. */
json_object *fe_path_get(json_object *root, const char *path);
/* Splits off the last component: parent object at *parent, key in key[]. */
int fe_path_parent(FeDiag *d, json_object *root, const char *path, const char *file,
                   json_object **parent, char *key, size_t keysz);
/* Canonical text: keys sorted, two-space indent, floats that parse back to
 * the same double and always look like floats. */
char *fe_json_canonical(json_object *o);
/* Appends "/key" or "/index" to a path buffer. */
void fe_path_join(char *out, size_t outsz, const char *base, const char *key);
void fe_path_join_index(char *out, size_t outsz, const char *base, int idx);
const char *fe_json_type_name(json_object *o);
/* Short rendering of a value for messages ("7", "\"gelu\"", "an object"). */
void fe_json_brief(json_object *o, char *buf, size_t n);

/* ---- schema.c: module kinds and validation ------------------------------ */

typedef enum {
  FT_INT,   /* JSON integer */
  FT_FLOAT, /* JSON number, stored as double */
  FT_BOOL,
  FT_STRING,
  FT_ENUM,        /* string from `choices` ("a|b|c") */
  FT_CHILD,       /* module config of one of the kinds in `choices`; "null" allowed if listed */
  FT_INT_LIST,    /* array of integers */
  FT_STRING_LIST, /* array of strings */
  FT_PSPECS,      /* {"param": [axis-or-null-or-[axes], ...], ...} */
  FT_REMAT,       /* preset name or {"save": [regex...], "offload": [regex...]} */
} FeFieldType;

typedef struct FeField {
  const char *name;
  FeFieldType type;
  const char *dflt;    /* default as JSON text; NULL means required */
  double min, max;     /* FT_INT / FT_FLOAT inclusive range; min > max means unchecked */
  const char *choices; /* FT_ENUM values or FT_CHILD kinds, '|' separated */
  const char *doc;
} FeField;

struct FeBuild;
struct FeDims;
struct FeEmit;

typedef struct FeKind {
  const char *name;
  const char *doc;
  const FeField *fields;
  int nfields;
  /* Names this kind accepts in param_partition_specs ('|' list), or NULL. */
  const char *spec_names;
  /* Semantic checks and parameter declarations for a resolved node, with
   * what the parent decided in `in`; recurses into children. `cfg` is the
   * node's config path ("/model/decoder/layer"), `prm` the parameter path
   * prefix of this instance ("model/decoder/layer_3"). May be NULL. */
  int (*build)(struct FeBuild *b, json_object *node, const char *cfg, const char *prm,
               const struct FeDims *in);
  /* Emits the forward computation of this node on `x` and returns the
   * result's value (IR_NONE after an error recorded in the graph). Modules
   * that are not on the forward path leave it NULL. */
  int32_t (*emit)(struct FeEmit *e, json_object *node, const char *cfg, const char *prm,
                  const struct FeDims *in, int32_t x);
} FeKind;

const FeKind *fe_kind_find(const char *name);
const FeField *fe_kind_field(const FeKind *k, const char *name);
/* All registered kinds, for listings and suggestions. */
int fe_kind_count(void);
const FeKind *fe_kind_at(int i);

/* Validates a raw module tree rooted at a node whose kind is in `accept`
 * ('|' list) and returns a new canonical tree with every default filled in,
 * or NULL after recording errors. */
json_object *fe_canonicalize(FeDiag *d, json_object *raw, const char *path, const char *accept);

/* Field accessors for canonical nodes (the schema guarantees presence). */
int64_t fe_get_int(json_object *node, const char *field);
double fe_get_float(json_object *node, const char *field);
bool fe_get_bool(json_object *node, const char *field);
const char *fe_get_str(json_object *node, const char *field);
json_object *fe_get_child(json_object *node, const char *field); /* NULL for null */
const char *fe_node_kind(json_object *node);

/* ---- find.c: where named config files are read from --------------------- */

/* Directories searched, in order, for a config file not found next to the file naming it. */
typedef struct FeSearch {
  const char *const *dirs;
  int ndirs;
} FeSearch;

/* The path of the file `name` (named at `jpath` of `file`, which is in `dir`; dir NULL: the
 * current directory): dir/NAME, then each search directory's; NAME.json too when NAME lacks
 * ".json", and with `modifier`, a bare NAME also as modifiers/NAME[.json]. An absolute name
 * is returned as is. A miss records an error listing where it looked and returns NULL. */
const char *fe_find_file(FeDiag *d, const char *file, const char *jpath, const char *dir,
                         const char *name, const FeSearch *s, bool modifier);

/* ---- modifiers.c: tree rewrites ----------------------------------------- */

/* Applies one modifier (an object, or a string naming a modifier file, found
 * by fe_find_file from `dir`) to the raw tree *root. `file` names where it
 * came from. */
int fe_modifier_apply(FeDiag *d, json_object **root, json_object *mod, const char *file,
                      const char *dir, const FeSearch *search);
/* `--set PATH=VALUE`: VALUE is JSON, or a bare string if it does not parse. */
int fe_set_override(FeDiag *d, json_object *root, const char *assignment);

/* ---- resolve.c: the resolution order ------------------------------------ */

typedef struct FeOptions {
  const char *target; /* mesh rule selector, NULL for none */
  const char **apply; /* --apply files, in order */
  int napply;
  const char **sets; /* --set PATH=VALUE, in order */
  int nsets;
  FeSearch search; /* for files not next to the file naming them */
  /* The target has bf16 dot instructions (AVX512_BF16): `/precision/compute: auto` means bf16.
   * bf16_why says where that was decided ("this host has avx512_bf16"), for the origin. */
  bool bf16_dot;
  const char *bf16_why;
} FeOptions;

/* base -> config's modifiers -> mesh rule -> --apply -> --set -> defaults and
 * validation -> module walk. Returns the canonical tree or NULL. `rule` (if
 * not NULL) receives the matched rule's regex or NULL. */
json_object *fe_resolve(FeDiag *d, const char *file, const FeOptions *opt, const char **rule);
/* Number of devices a target name implies: "gpu-h100-256" -> 256,
 * "gpu-h100-8x32" -> 256, "cpu" -> 1, NULL -> 0; a kind whose names count
 * cores divides by its cores per chip ("tpu-v5p-512" -> 256 chips). A count
 * that does not parse ("cpu-0", "gpu-h100-4x", "tpu-v5p-3") is an error: -1,
 * with the expected form in d. */
int fe_target_devices(FeDiag *d, const char *target, int64_t *devices);
/* How a target's kind counts in its names: `kind` is NULL for a kind that
 * counts devices; cores_per_chip > 1 when the count is of cores (TPU v4, v5p). */
typedef struct FeTargetNaming {
  const char *kind;
  int cores_per_chip;
} FeTargetNaming;
FeTargetNaming fe_target_naming(const char *target);

/* ---- build.c: module walk and the parameter table ------------------------ */

#define FE_MAX_RANK    4
#define FE_MAX_MESH    8
#define FE_MAX_DEVICES (1 << 24)
/* Bounds that keep every count and byte total exact in int64: elements in
 * any one tensor, a parameter or one the training step computes (even as
 * f64, 2^51 bytes), and parameter elements in all. */
#define FE_MAX_TENSOR_NUMEL 0x1p48
#define FE_MAX_TOTAL_NUMEL  0x1p52

/* What a parent decides for its children. */
typedef struct FeDims {
  int64_t dim; /* model width */
  int64_t vocab_size;
  int64_t num_layers; /* for depth-scaled init */
  int64_t seq_len;    /* training sequence length */
  int64_t batch;      /* per-device batch size */
  int64_t max_steps;  /* training length, for schedules */
  const char *dtype;  /* parameter dtype name (the precision policy's `params`) */
} FeDims;

typedef struct FeParam {
  char *path; /* "model/decoder/layer_0/self_attention/q_proj/weight" */
  int rank;
  int64_t shape[FE_MAX_RANK];
  const char *dtype; /* "f32", "bf16" */
  const char *init;  /* "normal", "zeros", "ones" */
  double init_std;
  /* Per dimension: mesh axes it is split over ('|'-joined), "" for none. */
  char spec[FE_MAX_RANK][48];
  double weight_decay_scale;
  char *origin; /* config path of the declaring module */
  bool frozen;  /* no gradient, no optimizer state, not checkpointed (a LoRA run's base) */
  bool adapter; /* a LoRA adapter (lora_a, lora_b) of the weight beside it */
} FeParam;

typedef struct FeMesh {
  int n;
  char axes[FE_MAX_MESH][16];
  int64_t shape[FE_MAX_MESH]; /* -1 resolved against the target's devices */
  int64_t devices;
} FeMesh;

/* The trainer's /lora policy as the walk applies it (modules/lora.c). */
typedef struct FeLora {
  json_object *node; /* the canonical /lora node; NULL: no adapters */
  regex_t re;        /* /lora/params, anchored at both ends */
  int64_t rank;
  double scale;   /* alpha / rank */
  int matched;    /* weights adapted */
  bool declaring; /* fe_param is declaring an adapter */
  /* what the module declaring a 2-D weight that no linear reads calls it ("an embedding
   * table"): a match is refused when the parameters are declared, not at composing */
  const char *not_linear;
} FeLora;

typedef struct FeBuild {
  FeDiag *diag;
  const char *file; /* config file, for messages */
  json_object *root;
  FeMesh mesh;
  FeParam *params;
  int nparams, capparams;
  const FeParam **by_path; /* (nparams) in path order, once the walk succeeded */
  double total_numel;      /* running total, for the size bound */
  /* The largest tensor of the training step over FE_MAX_TENSOR_NUMEL
   * elements (fe_step_tensor), as an error message; NULL if none. */
  double step_numel;
  char *step_error;
  FeLora lora;
} FeBuild;

/* Walks the canonical tree: checks what only makes sense with the parent's
 * dims (divisibility, ranges across fields) and declares every parameter. */
int fe_build(FeBuild *b, FeDiag *d, const char *file, json_object *root, int64_t devices);
void fe_build_free(FeBuild *b);

/* Helpers for module kinds. An error about `field` of `node` (config path
 * `cfg`), naming the file that set the field. */
int fe_field_error(FeBuild *b, json_object *node, const char *cfg, const char *field,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int fe_build_child(FeBuild *b, json_object *node, const char *field, const char *cfg,
                   const char *prm, const FeDims *in);
int fe_build_node(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                  const FeDims *in);
/* Declares a parameter; `spec_name` picks its entry in the node's
 * param_partition_specs (NULL: replicated); `lead_axis` (may be NULL)
 * splits an extra leading dimension (experts). */
int fe_param(FeBuild *b, json_object *node, const char *cfg, const char *prm, const char *name,
             int rank, const int64_t *shape, const char *init, double std, const char *spec_name,
             const char *lead_axis, double wd_scale, const FeDims *in);
int64_t fe_param_numel(const FeParam *p);
/* A (vocab, dim) table "weight" (token embedding, untied head): fe_param, with an error that says
 * what to do when the spec splits the vocabulary over devices that do not divide it. */
int fe_vocab_param(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                   const FeDims *in);
/* "482.50 KiB": bytes in binary units, into out (returned). */
const char *fe_human_bytes(double bytes, char *out, size_t n);
/* Index of the parameter named `path` after a successful fe_build, or -1. */
int fe_param_find(const FeBuild *b, const char *path);
/* Notes a tensor the training step will compute on each device, of shape
 * `dims` (dims[0] the per-device batch; `names` says what each is, as
 * "batch x heads x seq x seq"). Only graphs hold such tensors, so a tensor
 * over FE_MAX_TENSOR_NUMEL does not fail the walk: the largest is kept for
 * fe_step_check. Its message blames /input/global_batch_size, or `field`
 * of `node` (at config path `cfg`) when one sequence alone is too large. */
void fe_step_tensor(FeBuild *b, const char *what, const char *names, int rank, const int64_t *dims,
                    json_object *node, const char *cfg, const char *field);
/* -1 (the message recorded in `d`) if the training step would hold a
 * tensor too large; every command that builds a graph calls it first. */
int fe_step_check(const FeBuild *b, FeDiag *d);
/* The mesh axes and what each does: the one place an axis is named. The config's mesh may
 * name only these; the batch is split over the FE_AXIS_BATCH axes; a parameter's partition spec
 * may name any of them. An axis without FE_AXIS_SUPPORTED is refused at a size above 1. Code
 * finds an axis by its roles, never by its name. */
enum {
  FE_AXIS_BATCH = 1 << 0,     /* splits the global batch (dim 0 of ids and targets) */
  FE_AXIS_PARAMS = 1 << 1,    /* the shipped rules split parameters over it (fsdp, model) */
  FE_AXIS_EXPERTS = 1 << 2,   /* carries a MoE's experts (expert_axis) */
  FE_AXIS_SEQUENCE = 1 << 3,  /* splits the sequence (dim 1 of ids and targets) */
  FE_AXIS_PIPELINE = 1 << 4,  /* carries pipeline stages */
  FE_AXIS_SUPPORTED = 1 << 5, /* the shard pass and the runtime can split over it */
  FE_AXIS_TENSOR = 1 << 6,    /* splits within a layer; sequence parallelism splits over it */
};
/* The table: X(name, roles, what, size), one row per axis, outermost first, rows joined by SEP.
 * `what` names the parallelism in messages; `size` is the axis's in the default mesh (-1: the
 * devices left). fe_axes[] (build.c) and the default mesh (FE_AXES_JSON, FE_AXES_SIZES_JSON)
 * are made from it. */
/* clang-format off */
#define FE_AXES(X, SEP)                                                                            \
  X("pipeline", FE_AXIS_PIPELINE,                                    "pipeline",            1) SEP \
  X("data",     FE_AXIS_BATCH | FE_AXIS_SUPPORTED,                   "data",               -1) SEP \
  X("expert",   FE_AXIS_BATCH | FE_AXIS_EXPERTS | FE_AXIS_SUPPORTED, "expert",              1) SEP \
  X("fsdp",     FE_AXIS_BATCH | FE_AXIS_PARAMS | FE_AXIS_SUPPORTED,  "fully sharded data",  1) SEP \
  X("seq",      FE_AXIS_SEQUENCE | FE_AXIS_SUPPORTED,                "sequence (context)",  1) SEP \
  X("model",    FE_AXIS_PARAMS | FE_AXIS_TENSOR | FE_AXIS_SUPPORTED, "tensor (model)",      1)
/* clang-format on */
#define FE_AXIS_JSON_NAME(name, roles, what, size) "\"" name "\""
#define FE_AXIS_JSON_SIZE(name, roles, what, size) #size
/* The default mesh as JSON text: ["pipeline", "data", ...] and [1, -1, ...]. */
#define FE_AXES_JSON       "[" FE_AXES(FE_AXIS_JSON_NAME, ", ") "]"
#define FE_AXES_SIZES_JSON "[" FE_AXES(FE_AXIS_JSON_SIZE, ", ") "]"
typedef struct {
  const char *name;
  unsigned roles;   /* FE_AXIS_* */
  const char *what; /* the parallelism, for messages: "sequence" */
} FeAxis;
extern const FeAxis fe_axes[];
extern const int fe_naxes;
/* The row of axis `name`; NULL if no axis has that name. */
const FeAxis *fe_axis(const char *name);
/* The first row (outermost) with every role of `roles`; NULL if none has them. */
const FeAxis *fe_axis_with(unsigned roles);
/* The names of the rows with every role of `roles`, outermost first, joined by `sep`
 * ("data x expert x fsdp"); "" if none. Returns buf. */
const char *fe_axis_names(unsigned roles, const char *sep, char *buf, size_t cap);
/* The index in m of the first axis whose row has every role of `has` and none of `lacks`; -1 if
 * m has none. */
int fe_mesh_axis(const FeMesh *m, unsigned has, unsigned lacks);
/* Devices the axes of m with every role of `roles` span (the product of their sizes; 1: none). */
int64_t fe_role_split(const FeMesh *m, unsigned roles);
/* Devices the global batch is split over: the product of the mesh's FE_AXIS_BATCH axes. */
int64_t fe_batch_split(const FeMesh *m);
/* Devices the sequence is split over: the product of the mesh's FE_AXIS_SEQUENCE axes. */
int64_t fe_seq_split(const FeMesh *m);
/* Devices a '|'-joined list of mesh axes spans. */
int64_t fe_spec_split(const FeMesh *m, const char *spec);
int fe_dtype_bytes(const char *dtype);
/* The parameter table, then the precision policy with the bytes of each kind per device
 * (masters, their compute copy, gradients, optimizer state). */
void fe_params_print(const FeBuild *b, json_object *cfg, FILE *out);
char *fe_params_json(const FeBuild *b, json_object *cfg);

/* ---- modules/trainer.c: the training facts ------------------------------ */

/* What the trainer config says about training, as the backends and the
 * pass pipeline need it: read once from the canonical tree, next to the
 * trainer's schema, so no later layer looks fields up by name. */
typedef struct FeLearnerFacts {
  double learning_rate, b1, b2, eps, weight_decay; /* adamw */
  double max_grad_norm;
  bool cosine; /* cosine_schedule; else constant after warmup */
  int64_t warmup_steps;
  int64_t decay_steps; /* cosine: 0 in the config means max_steps */
  double min_ratio;    /* cosine: final multiplier */
} FeLearnerFacts;

typedef struct FeTrainFacts {
  /* the trainer's program facts (runtime/axrt.h: RT_PROGRAM_FACTS) the config holds: max_steps,
   * seed, the checkpoint policy; the driver adds the rest (drv_program_facts) */
  RtFacts program;
  int64_t global_batch, seq_len; /* input: sequences per step over the mesh, tokens each */
  int64_t vocab;                 /* model vocab_size: token ids lie in [0, vocab) */
  int64_t microbatches; /* learner: forward/backward passes per step (1: the whole batch) */
  FeLearnerFacts learner;
} FeTrainFacts;

/* Fills f from a canonical trainer tree (resolved and built without error). */
void fe_train_facts(json_object *cfg, FeTrainFacts *f);

/* ---- modules/precision.c: the mixed-precision policy ---------------------- */

typedef struct FePrecision {
  IrDType params;    /* the master copy: f32 */
  IrDType compute;   /* activations and matrix-product operands: f32 or bf16 */
  IrDType grads;     /* gradients as they are reduced across devices */
  IrDType optimizer; /* optimizer state: f32 */
  IrMatmul matmul;   /* f32 products: f32 or TF32 operands */
} FePrecision;

/* The policy of a canonical trainer tree. */
void fe_precision_facts(json_object *cfg, FePrecision *p);
/* Replaces `compute: auto` in a canonical tree by bf16 (bf16_dot) or f32; `why` becomes the
 * key's origin. */
int fe_precision_settle(FeDiag *d, json_object *cfg, bool bf16_dot, const char *why);

/* ---- modules/lora.c: low-rank adapters -------------------------------------- */

/* Reads the trainer's /lora (if any) before the walk; -1 on a bad regex. */
int fe_lora_begin(FeBuild *b, json_object *root);
/* fe_param's hook, on the parameter it just declared (the table's last): frozen under /lora,
 * and given adapters lora_a (in, r) and lora_b (r, out) when /lora/params matches its path. */
int fe_lora_param(FeBuild *b, json_object *node, const char *cfg, const char *prm,
                  const FeDims *in);
/* After the walk: -1 when /lora/params matched no parameter. */
int fe_lora_end(FeBuild *b);
void fe_lora_free(FeBuild *b);
/* The parameters that train (all without /lora) and their elements. */
int fe_lora_trainable(const FeBuild *b, int64_t *numel);

/* ---- compose.c: module tree -> forward IR -------------------------------- */

typedef struct FeEmit {
  IrGraph *g;
  const FeBuild *b;     /* the parameter table of the tree being composed */
  int32_t *param_vals;  /* (b->nparams) IR value of each parameter, IR_NONE until used */
  int64_t batch, seq;   /* global batch size B (of one microbatch) and sequence length T */
  int32_t ids, targets; /* inputs: (B, T) i32 token ids and next-token targets */
  int32_t aux_loss;     /* scalar sum of auxiliary losses (MoE), IR_NONE if none */
  bool forward;         /* fe_compose_forward or _decode: the model returns its logits, no loss */
  IrDType compute;      /* the policy's compute dtype: parameters are read cast to it */
  bool kv;              /* sampling with a KV cache: the forward (the prefill) also outputs each
                           attention's keys and values, IR_KV_PREFILL + prm + "/k" and "/v",
                           (1, kv_heads, T, head_dim) */
  bool decode;          /* fe_compose_decode: one token (seq is 1) at input "pos" */
  int32_t pos;          /* decode: (1) i32, the token's position in the window */
  int64_t window;       /* decode: the cache's length, the config's seq_len */
} FeEmit;

/* Slots per expert per sequence of S tokens (feed_forward.c, the MoE with capacity). */
int64_t fe_moe_capacity(double capacity_factor, int64_t S, int64_t k, int64_t E);

/* Composes the forward graph of a resolved, built trainer config: inputs
 * "ids" and "targets" (B, T) i32, one parameter per FeParam (named by its
 * path), and the scalar output "loss" (mean next-token cross-entropy plus
 * auxiliary losses). B is the global batch: the graph is the global program,
 * which pass_shard splits over the mesh. With /learner/microbatches N > 1, B is
 * the global batch over N: the graph is one microbatch's, which pass_microbatch
 * turns into the step over the whole batch. Returns NULL after
 * recording an error in `d`. */
IrGraph *fe_compose(FeDiag *d, const char *file, json_object *cfg, const FeBuild *b);
/* The forward of the model alone, for sampling: one sequence, input "ids" (1, T) i32 (T the
 * config's seq_len), the same parameters, and the output "logits" (1, T, vocab) f32. No
 * targets, no loss; auxiliary losses are dead code. The global program: never sharded. With
 * kv, also the keys and values of every attention (IR_KV_PREFILL...): the prefill of a KV
 * cache. */
IrGraph *fe_compose_forward(FeDiag *d, const char *file, json_object *cfg, const FeBuild *b,
                            bool kv);
/* Whether the model can decode with a KV cache: every attention is causal (a token never
 * sees a later one, so the keys and values of earlier tokens stay what they were). */
bool fe_model_decodes(json_object *cfg);
/* The one-token decode step for sampling with a KV cache: inputs "ids" (1, 1) i32 (the token)
 * and "pos" (1) i32 (its position in the window, 0..seq_len-1), and per attention module the
 * cache inputs IR_KV_CACHE...; outputs "logits" (1, 1, vocab) f32 and the token's rows
 * IR_KV_ROW.... Attention reads the cache rows below pos and the token's own row; learned
 * positions and rotary angles are those of pos. Unsharded, as the forward. */
IrGraph *fe_compose_decode(FeDiag *d, const char *file, json_object *cfg, const FeBuild *b);

/* Helpers for module emit functions. */
int32_t fe_emit_node(FeEmit *e, json_object *node, const char *cfg, const char *prm,
                     const FeDims *in, int32_t x);
int32_t fe_emit_child(FeEmit *e, json_object *node, const char *field, const char *cfg,
                      const char *prm, const FeDims *in, int32_t x);
/* The parameter prm/name as an IR value (created on first use). */
int32_t fe_emit_param(FeEmit *e, const char *prm, const char *name);
bool fe_has_param(const FeEmit *e, const char *prm, const char *name);
/* x (..., K) @ prm/name/weight (K, N) [+ prm/name/bias], tagged `tag`. */
int32_t fe_emit_linear(FeEmit *e, int32_t x, const char *prm, const char *name, const char *tag);
/* x cast to f32 (the reductions of norms, softmax and the loss), or to the compute dtype
 * (what they hand back); x itself when it has that dtype already. */
int32_t fe_emit_f32(FeEmit *e, int32_t x);
int32_t fe_emit_compute(FeEmit *e, int32_t x);
/* A splat constant of x's shape and dtype. */
int32_t fe_emit_like(FeEmit *e, int32_t x, double v);
/* Broadcasts a lower-rank value to x's shape along trailing (or given) dims. */
int32_t fe_emit_bcast(FeEmit *e, int32_t v, int32_t like, int32_t n, const int32_t *bdims);
/* fe_emit_linear's hook: y + (alpha / r) (x A) B when the weight prm/weight has adapters,
 * else y (modules/lora.c). */
int32_t fe_lora_emit(FeEmit *e, int32_t x, int32_t y, const char *pp);
/* After composing: an error in the graph when an adapted weight was read by no linear. */
int fe_lora_check_read(FeEmit *e);
/* Softmax over the last axis, computed and returned in f32 (fe_emit_compute casts it back). */
int32_t fe_emit_softmax(FeEmit *e, int32_t x);
/* v's shape, a copy (the graph's value array moves as values are added).
 * v must be a value, not IR_NONE: check builder results first. */
IrShape fe_shape(const FeEmit *e, int32_t v);

/* ---- schema tables (for frontend/modules/) ------------------------------ */

#define FE_NOLIMIT       1, 0
#define FE_ATLEAST(lo)   (lo), 1e308
#define FE_RANGE(lo, hi) (lo), (hi)
#define F_INT(name, dflt, range, doc)                                                              \
  { name, FT_INT, dflt, range, NULL, doc }
#define F_FLOAT(name, dflt, range, doc)                                                            \
  { name, FT_FLOAT, dflt, range, NULL, doc }
#define F_BOOL(name, dflt, doc)                                                                    \
  { name, FT_BOOL, dflt, FE_NOLIMIT, NULL, doc }
#define F_ENUM(name, dflt, choices, doc)                                                           \
  { name, FT_ENUM, dflt, FE_NOLIMIT, choices, doc }
#define F_CHILD(name, dflt, kinds, doc)                                                            \
  { name, FT_CHILD, dflt, FE_NOLIMIT, kinds, doc }
#define F_TYPED(name, type, dflt, doc)                                                             \
  { name, type, dflt, FE_NOLIMIT, NULL, doc }
#define FE_NFIELDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif /* AXLC_FRONTEND_H */
