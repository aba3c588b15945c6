/*
 * axrt.h: the public interface of libaxrt, the runtime every generated trainer links.
 *
 * This header ships with each trainer, so it names no compiler type: only C11 scalars,
 * opaque runtime handles and the small value structs below. Every function that can fail
 * returns 0 on success and -1 on failure, and then fills the caller's RtError with one line
 * that names the file and says what was found and what was expected. The library never
 * prints and never exits; only the trainer's main decides what to do with an error.
 *
 * One banner section per source file in runtime/, declaring only what that file exports.
 * docs/runtime.md describes the on-disk formats.
 */
#ifndef AXRT_H
#define AXRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>  /* FILE, of rt_file_open */
#include <string.h> /* memcpy in the bf16 conversions */

#include "axrt_event.h" /* the trainer-supervisor protocol: exit statuses, event lines */

#if defined(__GNUC__)
#define RT_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define RT_PRINTF(fmt, args)
#endif

/* ===== error.c: status messages ===================================================== */

#define RT_ERROR_MAX 8192

/* One diagnostic line, e.g. "data/train.bin: token 50300 at position 17 >= vocabulary 50257".
 * Room for two full paths and the reason; a longer message loses its middle, never its end
 * (where the reason is). */
typedef struct RtError {
    char msg[RT_ERROR_MAX];
} RtError;

/* Formats into err (which may be NULL) and returns -1, so callers write `return rt_error_set(...)`. */
int rt_error_set(RtError *err, const char *fmt, ...) RT_PRINTF(2, 3);

/* Seconds on a monotonic clock, for intervals (the one clock of the trainer, the supervisor and
 * the compiler's timings). */
double rt_now_s(void);

/* CRC-32 (IEEE 802.3, as zlib's crc32): start with crc = 0, feed buffers in order. */
uint32_t rt_crc32(uint32_t crc, const void *buf, size_t n);

/* Environment variables that tune a trainer. rt_env_int reads NAME as a whole number in
 * [lo, hi], rt_env_seconds as a number of seconds above 0; unset or empty gives dflt. A value
 * that is not one is an error that names the variable, its value and what was expected. */
int rt_env_int(const char *name, int64_t dflt, int64_t lo, int64_t hi, int64_t *out, RtError *err);
int rt_env_seconds(const char *name, double dflt, double *out, RtError *err);

/* AXLC_COMM_TIMEOUT (seconds, default 20), AXLC_COMM_SPIN (polls, default 100) and
 * AXLC_COMM_NAP (nanoseconds, default 20000), how a rank waits at a collective (comm.c). */
int rt_env_comm(double *timeout_s, int64_t *spin, int64_t *nap_ns, RtError *err);

/* AXLC_HUGEPAGES (0 or 1, default 1): whether the trainer's slab asks for huge pages (train.c). */
int rt_env_hugepages(int64_t *on, RtError *err);

/* Checks every variable a trainer reads (AXLC_SGEMM, AXLC_HUGEPAGES, AXLC_COMM_TIMEOUT,
 * AXLC_COMM_SPIN, AXLC_COMM_NAP, and the test hook AXLC_TEST_SAVE_PAUSE) before it starts, so that a typo ends the run
 * at once instead of being ignored or found at the first collective. */
int rt_env_check(RtError *err);

/* ===== tok.c: tokenizers, text to token ids and back ================================== */

typedef struct RtTok RtTok; /* an open tokenizer */
#define RT_TOK_MAX_ID ((1 << 24) - 1)

/* Opens a tokenizer file, telling the format by its content: a SentencePiece model (a protobuf
 * ModelProto, `.model`; needs libaxrt built with libsentencepiece) or a Hugging Face
 * `tokenizer.json` with a byte-level BPE model (GPT-2, Llama 3). A file of another kind, or a
 * truncated or damaged one, is refused with its path and what was found. */
int rt_tok_open(RtTok **out, const char *path, RtError *err);
void rt_tok_close(RtTok *t);
int64_t rt_tok_vocab(const RtTok *t);    /* ids are 0..vocab-1 */
const char *rt_tok_kind(const RtTok *t); /* "sentencepiece" or "bpe" */
const char *rt_tok_path(const RtTok *t); /* as opened */
int32_t rt_tok_bos(const RtTok *t);      /* the id that starts a text (<s>, <|endoftext|>), or -1 */
/* The ids of the n bytes of text (any bytes: invalid UTF-8 and NULs too), malloc'd into *ids
 * (the caller frees it; NULL when *nids is 0). */
int rt_tok_encode(const RtTok *t, const char *text, size_t n, int32_t **ids, int64_t *nids, RtError *err);
/* The text of n ids, malloc'd and NUL-terminated into *text (its length, NULs within counted,
 * in *len). An id outside the vocabulary is an error. */
int rt_tok_decode(const RtTok *t, const int32_t *ids, int64_t n, char **text, size_t *len, RtError *err);
/* The bytes token `id` stands for, for printing one token at a time (a SentencePiece word
 * boundary is a space; control tokens are empty): up to cap bytes into buf; returns their
 * count (which may exceed cap), or -1 for an id outside the vocabulary. */
int64_t rt_tok_token_bytes(const RtTok *t, int32_t id, char *buf, size_t cap);
/* -1 when the tokenizer's vocabulary is not the model's vocab_size (every id a model could
 * give must be a token, and every token an input of the model): err names the tokenizer's
 * file, both sizes and `model` (its config file, or the trainer that holds it). */
int rt_tok_check_vocab(const RtTok *t, int64_t vocab, const char *model, RtError *err);

/* ===== data.c: memory-mapped token files and batching ================================= */

typedef enum RtDataFormat {
    RT_DATA_BYTES,      /* plain text: every byte is one token, vocabulary 256 */
    RT_DATA_TOKENS_U16, /* llm.c token file, version 1: 256 x int32 header, uint16 tokens */
    RT_DATA_TOKENS_U32, /* llm.c token file, version 2: 256 x int32 header, uint32 tokens */
} RtDataFormat;

#define RT_DATA_MAGIC       20240520
#define RT_DATA_HEADER_INTS 256

typedef struct RtData RtData; /* an open, validated token file and a read position */

/* Maps `path`, detects its format by the magic number, checks the header and that every
 * token is < vocab_size. The rank split starts as rank 0 of 1. */
int rt_data_open(RtData **out, const char *path, int vocab_size, RtError *err);
void rt_data_close(RtData *d);
/* Data parallelism: rank `rank` of `world` reads windows [rank*B, rank*B+B) of each global
 * batch of world*B windows. Every rank keeps the same global position. */
int rt_data_set_rank(RtData *d, int rank, int world, RtError *err);
RtDataFormat rt_data_format(const RtData *d);
/* 1 when the file was a token file (already tokenized), 0 for text, tokenized here or not. */
int rt_data_is_token_file(const RtData *d);
int64_t rt_data_num_tokens(const RtData *d);
/* Fills this rank's slice of the next global batch. Window b starts at token
 * pos + (rank*B + b)*T and holds T+1 tokens: inputs are its first T, targets its last T.
 * The position then advances by world*B*T; a batch that would run past the end starts
 * over at token 0 instead. Fails if the file holds fewer than world*B*T+1 tokens. */
int rt_data_next_batch(RtData *d, int B, int T, int32_t *inputs /* (B, T) */, int32_t *targets /* (B, T) */,
                       RtError *err);
/* Moves the position on by `batches` global batches of world*B*T tokens, as that many calls of
 * rt_data_next_batch would (wrapping over the end as they do; *wrapped says it did), in
 * constant time. Refuses more batches than one pass over the data holds, naming that count. */
int rt_data_skip(RtData *d, int B, int T, int64_t batches, int *wrapped, RtError *err);
/* The global position (token index of the next batch), for checkpoints. */
int64_t rt_data_position(const RtData *d);
int rt_data_seek(RtData *d, int64_t position, RtError *err);
/* Writes ids as an llm.c token file (version 1: 256 int32 of header, then uint16 tokens)
 * atomically. Every id must be < vocab <= 65536 and n < 2^31, else nothing is written. */
int rt_data_write_u16(const char *path, const int32_t *ids, int64_t n, int64_t vocab, RtError *err);
/* rt_data_open for the trainer's --tokenizer: a plain text file is encoded by `tok` (its ids,
 * held in memory, are the tokens: rt_data_format gives RT_DATA_TOKENS_U32); a token file is
 * opened as rt_data_open opens it. */
int rt_data_open_tok(RtData **out, const char *path, const RtTok *tok, int vocab_size, RtError *err);

/* ===== init.c: deterministic parameter initialization ================================= */

typedef enum RtInitKind {
    RT_INIT_ZEROS,
    RT_INIT_ONES,
    RT_INIT_CONSTANT,     /* value */
    RT_INIT_NORMAL,       /* mean, std */
    RT_INIT_UNIFORM,      /* [lo, hi) */
    RT_INIT_TRUNC_NORMAL, /* mean, std, resampled until within [mean+lo*std, mean+hi*std] */
} RtInitKind;

typedef struct RtInit {
    RtInitKind kind;
    float value;  /* CONSTANT */
    float mean;   /* NORMAL, TRUNC_NORMAL */
    float std;    /* NORMAL, TRUNC_NORMAL; >= 0 */
    float lo, hi; /* UNIFORM bounds; TRUNC_NORMAL bounds in units of std (0, 0 means -2, 2) */
} RtInit;

/* Fills dst[i] with element offset+i of the parameter `path`. Element k's value depends only
 * on (seed, path, k, init), so any sharding or backend gets the same weights. */
int rt_init_fill(float *dst /* (n) */, int64_t n, int64_t offset, const char *path, uint64_t seed, const RtInit *init,
                 RtError *err);
/* The counter-based generator under rt_init_fill: the k-th 64-bit draw for element `index`
 * of the stream (seed, path). Exposed so other code (dropout, tests) can share it. */
uint64_t rt_rng_u64(uint64_t seed, const char *path, int64_t index, uint32_t k);
uint64_t rt_fnv1a64(const char *s);

/* ===== safetensors.c: the safetensors file format ===================================== */

#define RT_MAX_DIMS 8

typedef enum RtDtype {
    RT_DT_BOOL,
    RT_DT_U8,
    RT_DT_I8,
    RT_DT_F8_E4M3,
    RT_DT_F8_E5M2,
    RT_DT_I16,
    RT_DT_U16,
    RT_DT_F16,
    RT_DT_BF16,
    RT_DT_I32,
    RT_DT_U32,
    RT_DT_F32,
    RT_DT_I64,
    RT_DT_U64,
    RT_DT_F64,
    RT_DT_COUNT
} RtDtype;

/* A named tensor. When writing, the caller fills every field but nbytes; when reading,
 * data points into the read-only file mapping (not necessarily aligned). */
typedef struct RtTensor {
    const char *name;
    RtDtype dtype;
    int ndim;
    int64_t shape[RT_MAX_DIMS];
    const void *data;
    int64_t nbytes;
} RtTensor;

/* One "__metadata__" entry (a string to string map in the header). */
typedef struct RtMeta {
    const char *key;
    const char *value;
} RtMeta;

typedef struct RtSt RtSt; /* an open, fully validated safetensors file */

const char *rt_dtype_name(RtDtype dt); /* "F32" */
int rt_dtype_size(RtDtype dt);         /* bytes per element */

/* Writes `path` atomically (temporary file, fsync, rename, fsync of the directory).
 * crc (may be NULL) receives the CRC-32 and size of the bytes written. */
int rt_st_write(const char *path, const RtTensor *tensors, int n_tensors, const RtMeta *meta, int n_meta, uint32_t *crc,
                int64_t *size, RtError *err);
int rt_st_open(RtSt **out, const char *path, RtError *err);
void rt_st_close(RtSt *st);
const char *rt_st_path(const RtSt *st);
int rt_st_count(const RtSt *st);
const RtTensor *rt_st_tensor(const RtSt *st, int i);          /* sorted by data offset */
const RtTensor *rt_st_find(const RtSt *st, const char *name); /* NULL if absent */
/* A shape as "[3,4]" into buf (cut short where it does not fit); returns buf. */
const char *rt_shape_text(char *buf, size_t cap, const int64_t *shape, int ndim);
/* Elements [first, first + n) of an F32, F16 or BF16 tensor as f32, into dst. */
void rt_st_convert_run(const RtTensor *t, int64_t first, int64_t n, float *dst);
const char *rt_st_meta(const RtSt *st, const char *key); /* NULL if absent */
/* The whole file as mapped, for checksums. */
const void *rt_st_bytes(const RtSt *st, int64_t *size);
/* Copies tensor `name` into dst as f32 (from F32, F16 or BF16) after checking its shape:
 * "FILE: tensor 'w': shape [3,4], expected [4,4]". */
int rt_st_read_f32(const RtSt *st, const char *name, const int64_t *shape, int ndim, float *dst, RtError *err);
/* Checks that every value of tensor `name` (NULL: of every tensor) is finite, for the float
 * dtypes (F32, F16, BF16, F64): "FILE: tensor 'w': value 3 of 12 is NaN". */
int rt_st_check_finite(const RtSt *st, const char *name, RtError *err);
/* An interpreter dump (axlc run --backend interp --dump) holds "loss", "grad:P" and "new:P".
 * Used as weights (--init, axlc convert), it is its "new:P" tensors named P: this keeps only
 * those, renamed, and returns how many; 0 (the file untouched) when `st` is not such a dump. */
int rt_st_dump_as_weights(RtSt *st);
/* A LoRA run's record of its base (checkpoint metadata axlc.base, "init FILE fnv1a64:<16 hex>"):
 * FNV-1a 64 over the stored bytes of the frozen tensors, in the parameter table's order. Start
 * from RT_FNV1A64_BASIS and fold in each tensor (absent: nothing) with rt_st_hash_tensor. */
#define RT_FNV1A64_BASIS 0xcbf29ce484222325ull
uint64_t rt_st_hash_tensor(const RtSt *st, const char *name, uint64_t h);
/* Splits such a record: 1 with file (its path, truncated to cap) and *hash ("fnv1a64:..."),
 * 0 when rec is not an "init" record (empty, "seed", or another text). */
int rt_base_record_parse(const char *rec, char *file, size_t cap, const char **hash);

/* ===== comm.c: collectives over the device mesh (MPI) =================================== */

/* A program's mesh: devices are numbered row-major over the axes, and device d is MPI rank d of
 * MPI_COMM_WORLD. naxes == 0: one device. */
#define RT_MAX_MESH_AXES  8
#define RT_MAX_SPLIT_AXES 4

typedef struct RtMesh {
    int32_t naxes;
    const char *names[RT_MAX_MESH_AXES]; /* the program's axis names (the frontend's table) */
    int64_t sizes[RT_MAX_MESH_AXES];
} RtMesh;

/* The device numbering of a mesh, for the runtime and the compiler alike (ir/ and the
 * interpreter include this header for it): devices are numbered row-major over the axes, the
 * last axis fastest. rt_mesh_coords gives device dev's coordinate on each of the naxes axes of
 * sizes; rt_mesh_device is its inverse. */
static inline void rt_mesh_coords(int32_t naxes, const int64_t *sizes, int64_t dev, int64_t *coords) {
    for (int32_t i = naxes - 1; i >= 0; i--) {
        coords[i] = dev % sizes[i];
        dev /= sizes[i];
    }
}
static inline int64_t rt_mesh_device(int32_t naxes, const int64_t *sizes, const int64_t *coords) {
    int64_t d = 0;
    for (int32_t i = 0; i < naxes; i++)
        d = d * sizes[i] + coords[i];
    return d;
}

/* Which chunk of a global tensor a device holds: dim d is cut into chunks over the mesh axes
 * axes[d][0], axes[d][1], ... (mesh axis index + 1, major first, 0 ends the list). All zero:
 * every device holds the whole tensor. Mirrors the compiler's IrSplit. */
typedef struct RtSplit {
    uint8_t axes[RT_MAX_DIMS][RT_MAX_SPLIT_AXES];
} RtSplit;

typedef enum RtCollKind {
    RT_COLL_ALL_REDUCE,     /* sum over the group, added in group-rank order */
    RT_COLL_ALL_GATHER,     /* members' operands joined along axis in group-rank order */
    RT_COLL_REDUCE_SCATTER, /* sum, then member r keeps chunk r of axis */
    RT_COLL_ALL_TO_ALL,     /* chunk j of axis to member j; received chunks joined along axis2 */
    RT_COLL_LOCAL_SLICE,    /* member r keeps chunk r of axis of its own operand; no traffic */
    RT_COLL_SEND,           /* pipeline: the operand, copied to the result and sent (MPI_Isend) to
                               the device with this one's coordinates on stage `axis` of axes[0];
                               axis2: the sending stage. Its buffer is in flight until the recv */
    RT_COLL_RECV,           /* pipeline, on the receiving stage: the result is what send `axis2`
                               (a collective index) of stage `axis` sent; on stage `axis` itself:
                               waits for that send to complete (its buffer is free again) */
    RT_COLL_SHARE,          /* pipeline: the operand of stage `axis` (of axes[0]) on every stage,
                               as rt_comm_stage_share (an OpenCL trainer's end of the step) */
    RT_COLL_KIND_COUNT
} RtCollKind;

/* One collective of the step, as the compiler placed it in the slab. The group of a device is
 * the devices that differ from it only on `axes`; a member's group rank is row-major over
 * `axes` in the order listed. Semantics are ir/interp.c's. */
typedef struct RtCollective {
    int32_t kind;  /* RtCollKind */
    int32_t dtype; /* RT_DT_F32, RT_DT_BF16 (2-byte elements) or RT_DT_I32 */
    int32_t naxes;
    int32_t axes[RT_MAX_MESH_AXES]; /* mesh axis indices, group order */
    int32_t axis, axis2;            /* axis: gather/scatter/slice/split axis; axis2: concat
                                       (send, recv: the stages, above) */
    int32_t rank;                   /* of both operand and result */
    int64_t in_shape[RT_MAX_DIMS];  /* the operand (local) */
    int64_t out_shape[RT_MAX_DIMS]; /* the result (local) */
    int64_t in_offset, out_offset;  /* slab byte offsets; they may overlap */
} RtCollective;

/* The directory of axlc's caches (compiled kernels, OpenCL device binaries), into out:
 * $AXLC_CACHE_DIR, else $XDG_CACHE_HOME/axlc, else $HOME/.cache/axlc. 0, or -1 (out "") when
 * AXLC_NO_CACHE is set (to anything but "" or "0"), when none of those is set, or when the
 * name does not fit. */
int rt_cache_dir(char *out, size_t cap);
/* AXLC_NO_CACHE's value when it turns the caches off (set, and neither "" nor "0"), else NULL. */
const char *rt_cache_off(void);

/* A cache entry (an object llvm-*.o, an OpenCL device binary ocl-*.bin) is its payload and then
 * a trailer of RT_CACHE_TRAILER_BYTES: "AXLCACHE", a format version, the payload's length and
 * its checksum (file.c). An entry whose trailer does not match (truncated, a flipped bit, not
 * written by this axlc) is damaged: it is built again, never used. */
#define RT_CACHE_TRAILER_BYTES 32
/* The trailer of the payload's n bytes, into out; the entry is the payload, then out. */
void rt_cache_entry_trailer(const void *payload, uint64_t n, unsigned char out[RT_CACHE_TRAILER_BYTES]);
/* Checks an entry's size bytes against its trailer: 0 and its payload's length in *payload, or
 * -1 and what is wrong in why (a phrase). */
int rt_cache_entry_check(const void *data, uint64_t size, uint64_t *payload, char *why, size_t cap);
/* Checks the entry at path: 1 good, 0 no such file, -1 damaged or unreadable (why: a phrase). */
int rt_cache_entry_verify(const char *path, char *why, size_t cap);

/* A file a command reads or writes, and the option that named it ("--data", "-o"). An input
 * with `within` set is a directory whose entries named within* are read (--ckpt-dir and
 * "step_"): an output inside one of them is refused; within "" refuses any output inside the
 * directory (convert's step directory). */
typedef struct RtPathArg {
    const char *opt, *path, *within;
} RtPathArg;

/* 1 when a and b both exist and are one file (same device and inode: through hard links and
 * symbolic links too), else 0. */
int rt_file_same(const char *a, const char *b);
/* Every command checks its outputs against its inputs before it writes anything: -1 (err
 * names both) when an output is an input, or lies inside an input directory's entries; else 0.
 * NULL paths are skipped; an output that does not exist yet is none of the inputs. */
int rt_file_check_outputs(const RtPathArg *out, int nout, const RtPathArg *in, int nin, RtError *err);

/* Files a user names (an option's value, a command's argument) are opened here, for reading
 * (mode "r" or "rb") or writing ("w", "wb", or "a" to append). Anything but a regular file is
 * refused at once, never waited on: a FIFO, device, socket or directory gives "PATH: not a
 * regular file (a FIFO)". A write also refuses a symbolic link ("PATH: is a symbolic link;
 * ..."), which it would write through into the link's target; a missing file is created.
 * NULL with err set. */
FILE *rt_file_open(const char *path, const char *mode, RtError *err);
/* rt_file_open's checks without opening, for a file another program writes (the linker's -o)
 * or a library opens by name: -1 with err set as rt_file_open would, else 0 (a missing file
 * too, which the opener reports). */
int rt_file_check_user(const char *path, int write, RtError *err);
/* Writes the n bytes of buf to `path` atomically and durably (a temporary file beside it,
 * fsync, rename, fsync of the directory): the file is whole or as it was. 0, or -1 with err
 * set and nothing replaced. */
int rt_file_write_atomic(const char *path, const void *buf, size_t n, RtError *err);
/* fsync of a directory, so that renames and unlinks in it are durable. */
int rt_dir_fsync(const char *dir, RtError *err);
/* The directory part of `path` into dir: "." when it names none, "/" for a file in the root. */
void rt_path_dir(const char *path, char *dir, size_t cap);

typedef struct RtComm RtComm;

/* Whether libaxrt was built with MPI. */
int rt_comm_have_mpi(void);
/* Whether the environment says this process was started by mpirun, mpiexec or srun. */
int rt_comm_launched(void);
/* Joins the job: with MPI (initialized here unless already), rank and size of MPI_COMM_WORLD;
 * without, rank 0 of 1. Fails, with how to launch, when the world size is not `devices`.
 * timeout_s bounds every wait for another rank; past it the job is aborted with the names of
 * the silent ranks (0: the default, 20 s, or AXLC_COMM_TIMEOUT). */
int rt_comm_new(RtComm **out, const RtMesh *mesh, const RtCollective *colls, int32_t ncolls, double timeout_s,
                RtError *err);
/* Leaves the job (MPI_Finalize when rt_comm_new initialized MPI). NULL is fine. */
void rt_comm_free(RtComm *c);
int rt_comm_rank(const RtComm *c);
int rt_comm_size(const RtComm *c);
/* Coordinate of this device on mesh axis a. */
int64_t rt_comm_coord(const RtComm *c, int a);
/* Which chunk of a tensor split by `axes` (mesh axis index + 1, 0 ends) device `dev` holds,
 * and how many chunks there are. */
int64_t rt_mesh_chunk(const RtMesh *m, const uint8_t axes[RT_MAX_SPLIT_AXES], int64_t dev, int64_t *count);
/* The index of the mesh axis called `name` ("pipeline", ...), or -1 where m has none. */
int rt_mesh_axis(const RtMesh *m, const char *name);
/* Collective `index` of the table on the slab; called by the generated step. Aborts the job
 * (MPI_Abort, with a message naming the silent ranks) when a member does not answer in time. */
void rt_comm_collective(RtComm *c, int32_t index, char *slab);
/* rt_comm_collective with the operand at `in` and the result at `out` (separate buffers, the
 * collective's in_shape and out_shape): an OpenCL trainer's host staging buffer. */
void rt_comm_collective_io(RtComm *c, int32_t index, const char *in, char *out);
/* The pipeline (mesh axis `axis`): the `bytes` at slab + offset of the device with this one's
 * coordinates on stage `from` replace this device's (a scalar output, or a parameter that
 * several stages read, made on one). Called by the generated step at its end. */
void rt_comm_stage_share(RtComm *c, int32_t axis, int64_t from, char *slab, int64_t offset, int64_t bytes);
/* Seconds this device has waited in the pipeline's recvs (and for its sends) so far. */
double rt_comm_p2p_wait_s(const RtComm *c);
/* This process's rank among those on its node, and their count, as the launcher's environment
 * says (OMPI_COMM_WORLD_LOCAL_RANK and _SIZE, MPI_LOCALRANKID and MPI_LOCALNRANKS, SLURM_LOCALID
 * and SLURM_TASKS_PER_NODE, PMI_LOCAL_RANK and PMI_LOCAL_SIZE); *size 0 when only the rank is
 * known. Without a launcher, or none of these: rank 0 of 1, and 0 is returned; 1 when a launcher
 * said. The variable that said is put in *from (may be NULL). */
int rt_comm_local_rank(int *rank, int *size, const char **from);
/* The same from MPI itself (a launcher that says neither): MPI is initialized here (a collective
 * call: every rank makes it) and the ranks that share this one's memory counted
 * (MPI_COMM_TYPE_SHARED). rt_comm_new, or rt_comm_node_done where none follows, finalizes it. */
int rt_comm_node_rank(int *rank, int *size, RtError *err);
void rt_comm_node_done(void);
/* Every rank passes v (n values) and gets the element-wise sum over all ranks (world); a
 * barrier with data. The same deadline applies. */
int rt_comm_sum_i64(RtComm *c, int64_t *v, int n, RtError *err);
/* Bytes this device has sent in collectives so far (counters for benchmarks). */
int64_t rt_comm_bytes_sent(const RtComm *c);
/* Bytes this device sends when every collective of the table runs once (one step), as the
 * table predicts: (G-1) times the operand for all_reduce and all_gather, (G-1) chunks of it for
 * reduce_scatter and all_to_all, nothing for local_slice. */
int64_t rt_comm_step_bytes(const RtComm *c);
/* A collective moves its blocks in rounds of at most RT_COMM_CHUNK_BYTES per block, so its
 * scratch stays bounded whatever the tensor's size. */
#define RT_COMM_CHUNK_BYTES ((int64_t)1 << 20)
/* The heap (bytes) that collective `kind` of an operand of n_in elements of elem_bytes each,
 * over a group of n, holds as scratch: n receive slots, plus n send slots where each member
 * gets its own block (reduce_scatter, all_to_all), a slot being min(block, chunk). The runtime
 * keeps one scratch, grown to the largest, for the whole run; axlc memcheck counts it. */
int64_t rt_coll_scratch_bytes(int32_t kind, int64_t n_in, int elem_bytes, int64_t n);
/* The heap an MPI library holds once it has started and run the collectives of a step (its
 * own buffers, outside the trainer's slab and scratch), for a job of more than one device.
 * Measured with Open MPI 4.1 on this machine (docs/memcheck.md, "Under MPI"): the trainer's
 * measured heap less its slab and scratch, on tiny-lm at data2, fsdp2, model2 and data4. */
#define RT_MPI_HEAP_BYTES ((int64_t)3450 * 1024)
/* The scratch the runtime holds for the whole table: the largest collective's. */
int64_t rt_comm_scratch_bytes(const RtComm *c);
/* Ends every process of the job at once with status `code` (MPI_Abort); returns without MPI. */
void rt_comm_abort(RtComm *c, int code);

/* ===== ckpt.c: checkpoints ============================================================ */

/* DIR/step_00000020/{state.safetensors, index.json}; index.json is written last and marks
 * the checkpoint complete. */
/* Where a rank's tensor lies in the global tensor (sharded checkpoints): its shape is the
 * tensor's own, `start` its first element's global index per dim. */
typedef struct RtCkptRegion {
    int64_t shape[RT_MAX_DIMS]; /* the global tensor's shape */
    int64_t start[RT_MAX_DIMS];
    int32_t owner; /* 1: this rank writes it; 0: another rank holds the same chunk */
} RtCkptRegion;

typedef struct RtCkptState {
    int64_t step;
    int64_t data_position;
    uint64_t rng_state;
    const char *config;      /* the resolved config text; may be NULL */
    const RtTensor *tensors; /* parameters by path, optimizer state as "opt/m/<path>", ... */
    int n_tensors;
    const char *fingerprint; /* the model's (rt_fingerprint); may be NULL */
    /* Sharded (format version 2) when comm has more than one rank: every rank calls
     * rt_ckpt_save with its own tensors and their regions (n_tensors), writes
     * state-rank<5 digits>.safetensors holding the ones it owns, and after a barrier rank 0
     * writes the index. NULL: one process, format version 1 (state.safetensors). */
    RtComm *comm;
    const RtCkptRegion *regions;
    /* Where the frozen parameters (a LoRA run's base, not saved) came from: "init <file>
     * fnv1a64:<hex of its frozen tensors>" or "seed"; NULL when none is frozen. */
    const char *base;
    const char *trainer_state; /* the trainer's own state as text (its outlier window); may be NULL */
} RtCkptState;

typedef struct RtCkpt RtCkpt; /* an opened, verified checkpoint */

#define RT_CKPT_ANY INT64_MAX

typedef struct RtCkptLock RtCkptLock;

/* Makes DIR (and its parents) ready for one writer before any work is done: takes an
 * exclusive lock on DIR/.lock, held until rt_ckpt_unlock (a second trainer on DIR is refused,
 * with the holder's pid), and checks that files can be created in DIR, that a checkpoint of
 * need_bytes fits the file-size limit, and that the free space takes the checkpoints that
 * coexist under keep_last (a save writes the new one before it prunes: keep_last + 1 at once,
 * those already in DIR counted; 0 keeps all: two), at most `saves` of them. */
int rt_ckpt_lock(RtCkptLock **out, const char *dir, int64_t need_bytes, int keep_last, int64_t saves, RtError *err);
void rt_ckpt_unlock(RtCkptLock *lk);

/* Saves `state` as DIR/step_<step>/, then deletes all but the newest keep_last complete
 * checkpoints (keep_last <= 0 keeps all). Refuses to replace a complete checkpoint of the
 * same step. A failure leaves every earlier checkpoint as it was and removes what it wrote.
 * Returns 0, -1 (not saved), or 1: saved, but deleting old checkpoints failed (err says why). */
int rt_ckpt_save(const char *dir, const RtCkptState *state, int keep_last, RtError *err);
/* A sharded save (format 2) in its parts, for a trainer that writes its shard off the thread that
 * runs the collectives; rt_ckpt_save with several ranks is these, in this order, on each rank.
 * begin (collective): rank 0 makes the step directory. shard_write (no collective, any thread):
 * this rank's file; info gets (failed, bytes, CRC-32). shard_gather (collective): info holds
 * 3 * ranks values, this rank's at 3 * rank and zeros elsewhere, and gets every rank's; -1 when
 * a rank failed (why: this rank's own message), and rank 0 has then removed the directory.
 * shard_index (rank 0 alone, any thread): the index, written last, then pruning as
 * rt_ckpt_save does; 0, 1 (saved, pruning failed) or -1 (the directory removed). shard_end
 * (collective): every rank learns rank 0's result rc (why: rank 0's message) and returns it as
 * rt_ckpt_save would. */
int rt_ckpt_shard_begin(const char *dir, const RtCkptState *s, RtError *err);
int rt_ckpt_shard_write(const char *dir, const RtCkptState *s, int64_t info[3], RtError *err);
int rt_ckpt_shard_gather(const char *dir, const RtCkptState *s, int64_t *info, const RtError *why, RtError *err);
int rt_ckpt_shard_index(const char *dir, const RtCkptState *s, const int64_t *info, int keep_last, RtError *err);
int rt_ckpt_shard_end(const RtCkptState *s, int rc, const RtError *why, RtError *err);
/* Newest complete checkpoint with step < below (RT_CKPT_ANY for the newest).
 * Returns 1 and sets *step if found, 0 if none, -1 on error. */
int rt_ckpt_latest(const char *dir, int64_t below, int64_t *step, RtError *err);
/* The step_<S> entries of `dir` that are symbolic links, which are not checkpoints (never
 * listed, written into, pruned or followed): their names, ", "-separated, into names (cut to
 * cap); returns how many, for the trainer to say that it ignores them. */
int rt_ckpt_links(const char *dir, char *names, size_t cap);
/* Opens and verifies (sizes, CRC-32s, step) the checkpoint of `step`. */
int rt_ckpt_open(RtCkpt **out, const char *dir, int64_t step, RtError *err);
/* Opens the newest checkpoint that verifies, falling back past damaged ones; `warn` (may be
 * NULL) receives the last damage found, or an empty message. Returns 1 if one was opened,
 * 0 if there is none, -1 on error. */
int rt_ckpt_open_latest(RtCkpt **out, const char *dir, RtError *warn, RtError *err);
void rt_ckpt_close(RtCkpt *ck);
int64_t rt_ckpt_step(const RtCkpt *ck);
int64_t rt_ckpt_data_position(const RtCkpt *ck);
uint64_t rt_ckpt_rng_state(const RtCkpt *ck);
const char *rt_ckpt_config(const RtCkpt *ck);        /* "" if none was saved */
const char *rt_ckpt_fingerprint(const RtCkpt *ck);   /* "" if none was saved */
const char *rt_ckpt_base(const RtCkpt *ck);          /* RtCkptState.base; "" if none was saved */
const char *rt_ckpt_trainer_state(const RtCkpt *ck); /* "" if none was saved */
/* Format version 1: the state file; version 2: rank 0's file (metadata, and its shards only). */
const RtSt *rt_ckpt_tensors(const RtCkpt *ck);
/* The checkpoint's tensors, whichever files hold them: name, dtype, global rank and shape
 * (data NULL). */
int rt_ckpt_count(const RtCkpt *ck);
const RtTensor *rt_ckpt_tensor(const RtCkpt *ck, int i);
const RtTensor *rt_ckpt_find(const RtCkpt *ck, const char *name); /* NULL if absent */
/* Copies the box [start, start + count) of global tensor `name` (checked against `shape`) into
 * dst (row-major over count) as f32, from the shard files that hold it. start NULL: the whole
 * tensor. Resharding: the box need not match how the checkpoint was cut. */
int rt_ckpt_read_f32(const RtCkpt *ck, const char *name, const int64_t *shape, int ndim, const int64_t *start,
                     const int64_t *count, float *dst, RtError *err);

/* ===== fingerprint.c: what makes a checkpoint belong to a model ========================== */

typedef struct RtParamSlot RtParamSlot; /* train.c */

#define RT_FINGERPRINT_MAX 32

/* "fnv1a64:<16 hex digits>" over the parameter table (path, global shape, dtype of each, in order)
 * and the "model" member of the config (may be NULL). */
void rt_fingerprint(char out[RT_FINGERPRINT_MAX], const RtParamSlot *params, int n, const char *config);
/* How a checkpoint's model (its tensors st, its config text) differs from this one: parameters
 * missing there or shaped otherwise, parameters there that this model lacks, and config values
 * under /model, as "; "-separated items in out (cut at cap bytes). Returns how many. */
int rt_model_diff(const RtParamSlot *params, int n, const char *config, const RtCkpt *ck, const char *ck_config,
                  char *out, size_t cap);
/* The same for the config outside /model (learner, input, ...): differences worth a note. */
int rt_config_diff_outside_model(const char *config, const char *ck_config, char *out, size_t cap);

/* ===== weights.c: an --init file against the parameter table ============================ */

/* What rt_init_check found. */
typedef struct RtInitCheck {
    int missing;    /* parameters the file lacks */
    int unused;     /* tensors of the file no parameter uses */
    int mismatched; /* parameters present in another shape */
    int transposed; /* of those, 2-D ones with the shape reversed: PyTorch's (out, in) */
    int pytorch;    /* transposed > 0, or the file's metadata says "format": "pt" */
    char *report;   /* one indented line per problem and a note on layouts; NULL if none;
                       the caller frees it */
} RtInitCheck;

/* Compares the file `st` with the parameters: every one missing, every unused tensor (each
 * with the closest name on the other side), every shape mismatch. The file is usable when
 * missing + mismatched == 0 and (unused == 0 or allow_unused); the report lists allowed
 * extras too. -1 only when out of memory. */
int rt_init_check(const RtParamSlot *params, int n, const RtSt *st, int allow_unused, RtInitCheck *c);
/* -1 (err says what to pass instead) when `st` is one rank's file of a sharded checkpoint: it
 * holds only that rank's parts of the tensors, under their global names, so every shape would
 * differ; else 0. */
int rt_init_refuse_shard(const RtSt *st, const char *path, RtError *err);

/* ===== pool.c: the thread pool generated kernels are split across ======================= */

typedef struct RtPool RtPool;

/* A pool of `threads` workers (the caller's thread counts as one). */
int rt_pool_new(RtPool **out, int threads, RtError *err);
void rt_pool_free(RtPool *pool);
int rt_pool_threads(const RtPool *pool);
/* Calls fn(ctx, lo, hi) on disjoint chunks covering [0, n), in parallel, and returns when all
 * are done. A NULL pool runs fn(ctx, 0, n) on the calling thread. Deterministic: the result
 * must not depend on how [0, n) is chunked (each index is owned by exactly one call). */
void rt_parallel_for(RtPool *pool, int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);
/* The same, with items claimed one at a time: fn(ctx, i, i + 1) for each i. Each thread runs
 * the items of its own chunk in order, then takes what is left of the others' from their
 * ends, so a thread the machine slows holds up only the item it is running. For an fn whose
 * items' results do not depend on which thread runs them or in what order (the runtime's own
 * product: each item writes its own pieces). */
void rt_parallel_for_claimed(RtPool *pool, int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);

/* ===== blas.c: matrix products for generated code ====================================== */

/* For each b < batch: C_b (m, n) = op(A_b) (m, k) . op(B_b) (k, n), row-major, where
 * X_b = X + b * stride_x and op transposes when ta / tb is set (A stored (k, m), B (n, k)).
 * Split over the pool in items that depend only on the shapes, so the bits do not depend on
 * the thread count. batch < 4 runs the runtime's own product on CPUs with AVX2 and FMA
 * (unless AXLC_SGEMM=openblas), the rest OpenBLAS, which should itself run single-threaded
 * (rt_train_main sees to it). */
void rt_sgemm(RtPool *pool, int64_t batch, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
              int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b, float *c, int64_t ldc, int64_t stride_c);

/* bf16 values are stored as the upper 16 bits of an f32 (uint16_t). To f32 is exact; from f32
 * rounds to nearest, ties to even, as the interpreter's ir_dtype_round does; a NaN stays a
 * quiet NaN of the same sign. */
static inline float rt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t rt_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a NaN after the cut */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* rt_sgemm with bf16 operands (bit patterns as above) and f32 accumulation: C_b (m, n) =
 * op(A_b) op(B_b), with A, B, strides and transposes as rt_sgemm's. C is f32 when c_bf16 is 0,
 * else bf16, each element rounded once from its f32 sum. The cut over the pool depends only on
 * the shapes, so the bits do not depend on the thread count. */
void rt_sbgemm(RtPool *pool, int64_t batch, int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
               int64_t lda, int64_t stride_a, const uint16_t *b, int64_t ldb, int64_t stride_b, void *c, int c_bf16,
               int64_t ldc, int64_t stride_c);

/* ===== attention.c: fused attention for generated code =================================== */

/* Attention over bn independent problems (batch x heads), each q, o of shape (tq, h) and k, v of
 * (tk, h), row-major and contiguous (problem i at X + i * t * h):
 *   o = softmax(scale * q k^T, masked to keys j <= pos[i] when causal) v          (tq, h)
 * pos: the query rows' positions (tq, non-decreasing, in [0, tk)), or NULL for pos[i] = i with
 * tq = tk (a device's chunk of a split sequence has tq < tk: its rows' places in the whole).
 * The (tq, tk) scores are never stored: query blocks of B rows (B = 32 for tq <= 128, else 64)
 * go through a scratch of B * (tk + 1) floats per thread, malloc'd and freed in the call. Split
 * over the pool in items that depend only on the shapes, so the bits do not depend on the
 * thread count. Out of memory for the scratch prints a message and aborts. */
void rt_attention(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                  float scale, const float *q, const float *k, const float *v, const int32_t *pos, float *o);
/* The gradients of sum(o * dout) for the same problems: dq at dqkv, dk at dqkv + bn*tk*h, dv at
 * dqkv + 2*bn*tk*h (a (3, bn, tk, h) tensor; dq in rows [0, tq) of its problems, zeros after).
 * The softmax statistics are recomputed, not saved; one item per problem, scratch B * (2tk + 1)
 * floats per thread. Grouped-query (group > 1): problem p reads k and v of key problem p / group
 * ((bn / group, tk, h) each), and dqkv is per key problem its group's dq, then its dk and dv
 * (ir/ir.h, ir_attention_grad_at); one item per key problem. */
void rt_attention_grad(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                       float scale, const float *q, const float *k, const float *v, const float *dout,
                       const int32_t *pos, float *dqkv);

/* The same on bf16 tensors (bit patterns, see rt_bf16_to_f32): the arithmetic, the softmax
 * statistics included, is f32; each output element is rounded once to bf16. */
void rt_attention_bf16(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                       float scale, const uint16_t *q, const uint16_t *k, const uint16_t *v, const int32_t *pos,
                       uint16_t *o);
void rt_attention_grad_bf16(RtPool *pool, int64_t bn, int64_t group, int64_t tq, int64_t tk, int64_t h, int32_t causal,
                            float scale, const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *dout,
                            const int32_t *pos, uint16_t *dqkv);

/* ===== opencl.c: OpenCL trainers (library axrt_opencl, linked with the OpenCL loader) ===== */

/* One kernel launch of the step: the kernel named `kernel` in the program's source, over a
 * `dims`-dimensional range of global[] work items in work-groups of local[] (0: the
 * driver's choice). Every kernel takes the slab buffer (`__global uchar *`) and then nargs
 * `long` byte offsets of its tensors in the slab, so that one kernel serves every launch that
 * differs only in where its tensors live.
 *
 * A matrix product may have a second body, on the tensor cores (backends/opencl/gemm.c): the
 * runtime builds the source with -DAX_MMA=N (RtOclMma, N > 0) where the device's capabilities
 * allow it (opencl.c's capability table), and then runs such a launch over mma_global[] in
 * work-groups of mma_local[]. mma_local[0] == 0: the kernel has one body. */
typedef struct RtOclLaunch {
    const char *kernel;
    int32_t dims; /* 1..3 */
    int64_t global[3], local[3];
    int32_t nargs;
    const int64_t *args;      /* (nargs) byte offsets in the slab: kernel arguments 2a + 1 ... */
    const int64_t *arg_bytes; /* (nargs) ... of tensors this long; argument 2a is their buffer */
    /* 0: a kernel. i + 1: no kernel but collective i of the program's table (a mesh of more than
     * one device): the runtime reads its operand from the device, runs it through MPI on the
     * host (rt_comm_collective_io) and writes the result back, in the queue's order. */
    int32_t collective;
    int64_t mma_global[3], mma_local[3]; /* ABI 7: the range of the tensor-core body */
    int32_t stage;                       /* ABI 9: 1 + the pipeline stage whose devices run it (a recv's also runs on
                                            its sending stage); 0: every device */
} RtOclLaunch;

/* The product kernels' body, the value of AX_MMA the runtime builds with: none (the SIMT
 * kernels), mma.sync through inline PTX (NVIDIA from compute capability 8.0), or its portable
 * emulation with the same per-lane fragments (any device; AXLC_OPENCL_MMA=emulate, the tests). */
typedef enum RtOclMma { RT_OCL_MMA_OFF = 0, RT_OCL_MMA_PTX = 1, RT_OCL_MMA_EMULATE = 2 } RtOclMma;

/* ===== train.c: the compiled step and the training loop ================================= */

/* The contract between generated code and the runtime. A compiled trainer defines one
 * RtProgram named `axlc_program`; the JIT builds one in memory. Every buffer of the step lives
 * in one slab of slab_bytes (64-byte aligned); offsets are in bytes. The step reads the
 * parameters, optimizer state, batch and step number at their offsets and writes the new
 * parameters and state over the old ones (in place) and the loss, gradient norm and learning
 * rate at theirs.
 *
 * Who writes what: the runtime zeroes the slab once, then fills the parameters (init, --init
 * or a checkpoint) and the moments (zero or a checkpoint); before every call it writes ids,
 * targets and the step number (1 for the first step; a resumed run continues the count).
 * Every other slab byte belongs to the step. The loss is that of the parameters the step
 * read, before its update (eval relies on this). The step must be deterministic: the same
 * slab in gives the same bytes out, whatever the pool's size (bit-exact resume relies on
 * this). train_program.c checks every offset against slab_bytes and 4-byte alignment before the
 * first step; docs/runtime.md has the whole contract. */
#define RT_ABI_VERSION    11
#define RT_MAX_PARAM_RANK 4

/* The program's facts: what the compiler knows of the job that the graph does not hold, defined
 * once here, one row each: X(name, C type, doc). The driver fills an RtFacts (driver/pipeline.c:
 * drv_program_facts), the backends embed it in the trainer as the program table's `facts`
 * without naming its fields (the LLVM backend's constant struct and the OpenCL backend's C are
 * both generated from this list), and the runtime reads it. Every fact is 8 bytes: int64_t,
 * uint64_t or double (RT_FACT_TYPES checks it). Adding one is a row here, its value in the
 * driver and its reader in the runtime (docs/extending.md); the layout of RtProgram changes,
 * so RT_ABI_VERSION goes up. */
#define RT_PROGRAM_FACTS(X)                                                                                            \
    X(max_steps, int64_t, "/max_steps: the default of --steps")                                                        \
    X(seed, uint64_t, "/seed: parameter init and data order, the default of --seed")                                   \
    X(ckpt_every_n_steps, int64_t,                                                                                     \
      "/checkpointer/every_n_steps: the default of --ckpt-every; 0: save only at the end")                             \
    X(ckpt_keep, int64_t, "/checkpointer/keep_last: the default of --keep, complete checkpoints kept")                 \
    X(step_flops, double,                                                                                              \
      "one step's FLOPs on one device as axlc memcheck counts them (2 per multiply-add of a product, "                 \
      "1 per element of the rest): the trainer's MFU")                                                                 \
    X(step_bf16_flops, double, "of step_flops, those in products with bf16 operands")                                  \
    X(peak_f32, double, "the target's f32 FLOP/s per device (device table); 0: unknown, no MFU")                       \
    X(peak_bf16, double, "its bf16 FLOP/s per device; 0: unknown")

typedef struct RtFacts {
#define RT_FACT_FIELD(name, type, doc) type name;
    RT_PROGRAM_FACTS(RT_FACT_FIELD)
#undef RT_FACT_FIELD
} RtFacts;

struct RtParamSlot {
    const char *path; /* "model/decoder/layer_0/self_attention/q_proj/weight" */
    int32_t rank;
    int64_t shape[RT_MAX_PARAM_RANK];                    /* this device's chunk */
    int64_t global_shape[RT_MAX_PARAM_RANK];             /* the whole parameter: shape times the split's counts */
    uint8_t split[RT_MAX_PARAM_RANK][RT_MAX_SPLIT_AXES]; /* RtSplit of the parameter and its moments */
    RtInit init;                                         /* deterministic init from (seed, path) */
    int64_t offset;                                      /* f32 parameter */
    int64_t m_offset, v_offset; /* f32 AdamW moments, same shape; both -1: frozen (LoRA's base) */
    int64_t stage;              /* ABI 9: 1 + the pipeline stage that updates it (its devices write it to a
                                   checkpoint); 0: every device (no pipeline) */
    int64_t apart;              /* ABI 10: 1 + the pipeline stage whose devices alone hold it and its moments:
                                   on the others their bytes are other stages' (passes/memplan.c), so the
                                   runtime fills them there only; 0: every device holds them */
};

/* One attention's keys or values in the KV cache of the decode step: `heads` rows of
 * row_bytes (head_dim elements) per position of the window (the program's seq). Offsets are in
 * the shared sampling slab. */
typedef struct RtKvCache {
    int64_t heads, row_bytes;
    int64_t cache_offset;   /* the decode step's input (heads, seq, row): positions < pos are read */
    int64_t row_offset;     /* the decode step's output (heads, row): the token's, for position pos */
    int64_t prefill_offset; /* the forward's output (heads, seq, row): every position's */
} RtKvCache;

/* The one-token decode step of sampling with a KV cache (ABI 6). It shares the forward's slab
 * (slab_bytes covers both; the forward uses its first RtForward.slab_bytes and leaves the rest
 * alone): the parameters lie where the forward's do, the caches past the forward's bytes. The
 * runtime fills the caches from a forward's prefill outputs, then per token writes the token
 * into ids and its position in the window into pos, calls run, copies each cache's row into the
 * cache at pos, and reads logits. */
typedef struct RtDecode {
    int64_t slab_bytes;
    int64_t ids_offset;           /* i32 (1, 1) */
    int64_t pos_offset;           /* i32 (1): 0..seq-1 */
    int64_t logits_offset;        /* f32 (1, 1, vocab) */
    const int64_t *param_offsets; /* (nparams) the forward's, or -1 where the step reads none */
    int32_t ncaches;
    const RtKvCache *caches; /* (ncaches) */
    void (*run)(char *slab, RtPool *pool, RtComm *comm);
} RtDecode;

/* The forward of one sequence (`--sample`), compiled next to the step: its own slab of
 * slab_bytes (64-byte aligned), never sharded: parameter i of the program's table lies whole
 * (global_shape) at param_offsets[i] (-1: the forward does not read it). The runtime writes
 * the context into ids (seq tokens; positions past its end are padding the causal model never
 * reads at the positions before them), calls run(slab, pool, NULL), and reads logits. With a
 * decode step (decode not NULL) the forward is also the cache's prefill. */
typedef struct RtForward {
    int64_t slab_bytes;
    int64_t ids_offset;           /* i32 (1, seq) */
    int64_t logits_offset;        /* f32 (1, seq, vocab) */
    const int64_t *param_offsets; /* (nparams) */
    void (*run)(char *slab, RtPool *pool, RtComm *comm);
    const RtDecode *decode; /* ABI 6: the decode step with a KV cache; NULL: none */
} RtForward;

typedef struct RtProgram {
    int32_t abi_version; /* RT_ABI_VERSION */
    const char *config;  /* the resolved config, canonical JSON */
    int64_t slab_bytes;
    int32_t nparams;
    const RtParamSlot *params;
    int64_t batch, seq, vocab;                        /* per-device batch B, sequence T, vocabulary */
    uint8_t batch_split[RT_MAX_SPLIT_AXES];           /* mesh axes (index + 1) dim 0 of ids/targets is cut over */
    int64_t ids_offset, targets_offset;               /* i32 (B, T) */
    int64_t step_offset;                              /* f32 scalar: the 1-based step number */
    int64_t loss_offset, grad_norm_offset, lr_offset; /* f32 scalars the step writes */
    RtMesh mesh;                                      /* naxes 0: one device */
    int32_t ncollectives;
    const RtCollective *collectives; /* (ncollectives) the step calls rt_comm_collective(comm, i, slab) */
    void (*step)(char *slab, RtPool *pool, RtComm *comm);
    const RtForward *forward;        /* ABI 3: the sampling forward; NULL: this trainer cannot sample */
    int32_t has_aux_loss;            /* ABI 4: 1 when the loss includes an auxiliary part (MoE) ... */
    int64_t aux_loss_offset;         /* ... an f32 scalar the step writes there: the metrics' aux_loss */
    RtFacts facts;                   /* ABI 8: the program's facts (RT_PROGRAM_FACTS) */
    const int64_t *stage_slab_bytes; /* ABI 11: (the pipeline axis's size) the slab a device of each
                                        stage allocates, at most slab_bytes: its kernels, and the
                                        leaves, touch no byte past it; NULL: slab_bytes everywhere */
} RtProgram;

/* An OpenCL trainer: the program table (its step is NULL: rt_ocl_main supplies it), the
 * kernels' OpenCL C source and the launches of one step, in order. */
typedef struct RtOclProgram {
    RtProgram base;
    const char *source;
    const char *build_options; /* for clBuildProgram; may be NULL */
    int32_t nlaunches;
    const RtOclLaunch *launches;
    /* The device kind it was compiled for (--target gpu-h100-1: "gpu-h100", "NVIDIA H100 SXM5
     * 80GB", "H100"): without --device the trainer takes the first GPU whose name holds
     * device_match, and refuses, listing the devices, when there is none. NULL or "": the first
     * device of all. */
    const char *device_kind, *device_doc, *device_match;
    /* --sample: base.forward's tables (their run NULL: rt_ocl_main supplies it) laid out over one
     * sampling slab on the device, and the launches of the forward and of its decode step, each
     * with its own kernels' source. nforward 0: the trainer does not sample; ndecode 0: no KV
     * cache. */
    const char *forward_source, *decode_source;
    int32_t nforward, ndecode;
    const RtOclLaunch *forward_launches, *decode_launches;
} RtOclProgram;

/* The OpenCL trainer's main (opencl.c): rt_train_main's options plus --device N|P:D and
 * --list-devices. It builds the source for the device (or loads the binary cached for the same
 * device, driver and source under $AXLC_CACHE_DIR, $XDG_CACHE_HOME/axlc or ~/.cache/axlc) and
 * runs rt_train_main with a step that runs the launches on the device. */
int rt_ocl_main(const RtOclProgram *p, int argc, char **argv);
/* rt_train_check_args for rt_ocl_main's options. */
int rt_ocl_check_args(int argc, char **argv, RtError *err);

/* The trainer's main: parses the trainer options (--help lists them) and trains. Returns the
 * process exit status: 0 done; 1 an error (the message says which); 128 + the signal when
 * stopped by SIGINT or SIGTERM (after saving); and for a supervisor, which acts on them, those of
 * axrt_event.h (RT_EXIT_NONFINITE, RT_EXIT_SDC), with its event lines. */
int rt_train_main(const RtProgram *p, int argc, char **argv);
/* rt_train_main for a step whose state lives elsewhere between steps (an OpenCL trainer's device
 * buffers): sync(slab, RT_SYNC_TO_HOST) makes the host slab current before the runtime reads it
 * whole (checkpoints, eval and replay copies, --skip-outliers' backup), sync(slab,
 * RT_SYNC_FROM_HOST) says the runtime wrote it whole, which the next step on it must take (the
 * state at the start is the first step's to take anyway). sync NULL: rt_train_main. */
#define RT_SYNC_TO_HOST   0
#define RT_SYNC_FROM_HOST 1
/* sync(slab, RT_SYNC_STATE_TO_HOST): only the parameters and moments (RtParamSlot.offset,
 * m_offset, v_offset) need be current on the host: a checkpoint, a replay's comparison. */
#define RT_SYNC_STATE_TO_HOST 2
int rt_train_main_sync(const RtProgram *p, void (*sync)(char *slab, int dir), int argc, char **argv);
/* What --sample tells a sampling forward whose slab lives elsewhere (an OpenCL device's buffer),
 * so that a call moves only what the sampler changed and reads: wrote says it wrote bytes
 * [off, off + bytes) of the host slab (the next run takes them; the weights once, then the
 * tokens), need that it reads them after the run that just returned (the logits' row), copy
 * that bytes [src, src + bytes) go to [dst, dst + bytes) (the KV caches' rows), there and not
 * on the host. NULL hooks: the slab is the state (the CPU trainer). */
typedef struct RtSampleIo {
    void (*wrote)(char *slab, int64_t off, int64_t bytes);
    void (*need)(char *slab, int64_t off, int64_t bytes);
    void (*copy)(char *slab, int64_t dst, int64_t src, int64_t bytes);
} RtSampleIo;
/* rt_train_main_sync with every hook: sync as there; copy(dst, src) makes slab dst a copy of
 * slab src where the state is (an eval or a replay: device to device), 0, or -1 when it cannot
 * (the runtime then copies on the host, between the syncs); sample for --sample. */
typedef struct RtTrainHooks {
    void (*sync)(char *slab, int dir);
    int (*copy)(char *dst, const char *src);
    const RtSampleIo *sample;
    /* Bytes the trainer holds on its device (a GPU's memory), or NULL where the slab is host
     * memory: then the trainer's memory line measures the device against the prediction and
     * reports the host heap beside it. */
    int64_t (*device_bytes)(void);
} RtTrainHooks;
int rt_train_main_hooks(const RtProgram *p, const RtTrainHooks *h, int argc, char **argv);
/* Called from inside RtProgram.step: the batch the next step on the same data reads, as
 * rt_data_next_batch would give it (batch x seq ids and targets), without moving the data's
 * position, so a step can send it to its device while its own kernels run. 0, or -1 outside a
 * step. The next step is not bound to it: a step on other data (an eval) reads its own. */
int rt_train_batch_ahead(int32_t *ids, int32_t *targets);
/* Called from inside RtProgram.step by a step that could not run and cannot be retried (an OpenCL
 * device lost): msg names the device and the call. The loop then ends with an error (exit 1)
 * that names the step and the last good checkpoint, which is kept: nothing is saved after it. */
void rt_train_step_failed(const char *msg);
/* Parses and checks the options as rt_train_main does (argv[0] is the program's name), with the
 * same messages, without a program and without touching any file: `axlc run` calls it before
 * compiling. 0 if rt_train_main would accept them, else -1 with the message in err. */
int rt_train_check_args(int argc, char **argv, RtError *err);

#endif /* AXRT_H */
