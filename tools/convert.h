/* convert.h: `axlc convert` (docs/convert.md): Hugging Face weights to axlc's parameter paths
 * and back (convert.c), a Hugging Face checkpoint's files (hf_files.c), and a LoRA run's
 * adapters folded into its base (merge_lora.c). Through the runtime's public header only. */
#ifndef AXLC_TOOLS_CONVERT_H
#define AXLC_TOOLS_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/axrt.h"

/* ---- convert.c: `axlc convert` ----------------------------------------------- */

struct FeBuild;

/* What `axlc convert` is asked to do. */
typedef struct ConvertOpts {
  bool to_hf;            /* axlc -> Hugging Face; else Hugging Face -> axlc */
  const char *dtype;     /* --to hf: "f32", "bf16" or "f16"; NULL: the dtype the weights came in */
  const char *max_shard; /* --to hf: --max-shard-size ("5GB"); NULL: 5GB */
  const char *in, *out;  /* the weights read (a file, index or directory) and -o */
  const RtPathArg *inputs; /* every file the command reads (config files...): no output is one */
  int ninputs;
} ConvertOpts;

/* Converts the weights `o->in` of the model built in `b` (config file `model`): Hugging Face's
 * names and layouts (GPT-2, Llama or Mixtral, as the config decides; one file or the shards of
 * an index) to axlc's parameter paths (f32) in one file `o->out`, or back when `o->to_hf`, in
 * shards when they exceed the shard size, with config.json beside them (docs/convert.md).
 * Prints every problem, naming the file and the tensor, and returns -1 without writing; what
 * is written, is written atomically. */
int convert_weights(const struct FeBuild *b, const char *model, const ConvertOpts *o);

/* ---- hf_files.c: a Hugging Face checkpoint's files --------------------------- */

/* The tensors of a sharded checkpoint: the index's, each from the shard it names. */
typedef struct HfFiles {
  RtSt **st; /* (nst) the shards, open */
  int nst;
  RtTensor *t; /* (n) data in the shards' mappings */
  int n;
} HfFiles;

/* The weights in the model directory `dir`: its model.safetensors.index.json, else its
 * model.safetensors, into out; -1 (said) when it has neither. */
int hf_dir_weights(const char *dir, char *out, size_t cap);
/* Opens the index file `index` and its shards (beside it), checked against each other: -1, every
 * problem said with the index's name, when they disagree or do not open. */
int hf_index_open(HfFiles *f, const char *index);
void hf_files_close(HfFiles *f);
/* --max-shard-size: bytes, or with a unit (KB, MB, GB: powers of 1000; KiB, MiB, GiB). */
int hf_shard_size_parse(const char *s, int64_t *bytes);
/* The Hugging Face config.json of the model b of `family` ("GPT-2", "Llama", "Mixtral") whose
 * weights are `dtype`: text to free. */
char *hf_config_text(const struct FeBuild *b, const char *family, RtDtype dtype);

/* Checks the Hugging Face config.json at `path` (beside weights read) against the model b of
 * `family`: its model_type, sizes, norm eps, rope theta, experts, and a sliding window shorter
 * than the sequence (which axlc does not model); -1 with each difference said. */
int hf_config_check(const struct FeBuild *b, const char *family, const char *path);

/* A checkpoint to write: the weights in one file `out`, or in shards of at most max_shard bytes
 * named after it (OUT-00001-of-0000N.safetensors) with their index OUT.index.json; config.json
 * beside them. */
typedef struct HfWrite {
  const char *out;
  const RtTensor *t;
  int n;
  const RtMeta *meta; /* every weight file's metadata */
  int nmeta;
  int64_t max_shard;
  const char *config; /* config.json's text */
  const RtPathArg *inputs;
  int ninputs;
} HfWrite;

/* Writes w, every output checked against the inputs first; -1 (said) with nothing replaced. */
int hf_write(const HfWrite *w);

/* ---- merge_lora.c: `axlc convert --merge-lora` ---------------------------------- */

/* Writes to `out` the weights of the model built in `b` (which has /lora) with the adapters of
 * `in` folded in (W + (alpha/r) A B) and no adapter tensors; the other weights come from
 * `base` (NULL: from `in`). A checkpoint's record of its base (axlc.base) and of its /lora
 * must match `base` (unless force_base) and b's /lora. Says every problem on stderr and
 * returns -1 without writing. */
int merge_lora(const struct FeBuild *b, const char *model, const char *in, const char *base,
               bool force_base, const char *out);

#endif
