/* ir.h: the tensor IR of axlc, the one header of ir/.
 *
 * A graph is an array of SSA values in topological order: every operand index is smaller than the
 * index of the value that uses it. Values are referenced by int32 index (IR_NONE = -1 marks "no
 * value" and is what a failed builder call returns). Each value carries its op, dtype, shape,
 * operands, attributes, the config path of the module that emitted it and a remat tag. Strings and
 * operand lists live in the graph's arena and are freed with the graph.
 *
 * Library functions return a status (IR_OK = 0, IR_ERR = -1) or a value index, and never exit
 * (running out of memory aborts: base/base.h).
 * Builder functions record the first error in the graph (ir_graph_error) and return IR_NONE; any
 * builder given IR_NONE as an operand returns IR_NONE again, so a caller can emit a whole module
 * and check once. See docs/ir.md for op semantics, the text form and the interpreter.
 */
#ifndef AXLC_IR_H
#define AXLC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

#define IR_MAX_RANK      8
#define IR_MAX_MESH_AXES 8
#define IR_MAX_AXIS_NAME 32
#define IR_ERR_LEN       512
#define IR_NONE          (-1)

enum { IR_OK = 0, IR_ERR = -1 };

/* ======================================================================== ops.c: op, dtype tables
 */

enum { /* op flags */
       IR_ELEMENTWISE = 1u << 0,
       IR_REDUCTION = 1u << 1,
       IR_COLLECTIVE = 1u << 2,
       IR_HAS_GRAD = 1u << 3,
       IR_LEAF = 1u << 4,
};

enum { /* attribute bits: which IrAttrs fields an op uses, and their text names */
       IR_A_NAME = 1u << 0,  /* value name (parameter, input)          text: "NAME" */
       IR_A_VALUE = 1u << 1, /* attr.value or attr.data                text: value=V | data=[...] */
       IR_A_AXIS = 1u << 2,  /* attr.axis                              text: axis=N */
       IR_A_BDIMS = 1u << 3, /* attr.axes as broadcast dims            text: bdims=[...] */
       IR_A_PERM = 1u << 4,  /* attr.axes as permutation               text: perm=[...] */
       IR_A_AXES = 1u << 5,  /* attr.axes as reduced axes              text: axes=[...] */
       IR_A_START = 1u << 6, /* attr.lo                                text: start=[...] */
       IR_A_LIMIT = 1u << 7, /* attr.hi                                text: limit=[...] */
       IR_A_LOW = 1u << 8,   /* attr.lo                                text: low=[...] */
       IR_A_HIGH = 1u << 9,  /* attr.hi                                text: high=[...] */
       IR_A_LB = 1u << 10,   /* attr.lb                                text: lhs_batch=[...] */
       IR_A_RB = 1u << 11,   /* attr.rb                                text: rhs_batch=[...] */
       IR_A_LC = 1u << 12,   /* attr.lc                                text: lhs_contract=[...] */
       IR_A_RC = 1u << 13,   /* attr.rc                                text: rhs_contract=[...] */
       IR_A_ROWS = 1u << 14, /* attr.k as row count                    text: rows=N */
       IR_A_K = 1u << 15,    /* attr.k                                 text: k=N */
       IR_A_MESH = 1u << 16, /* attr.mesh axis names                   text: mesh_axes=[a,b] */
       IR_A_SPLIT = 1u << 17,  /* attr.axis as split axis                text: split_axis=N */
       IR_A_CAT = 1u << 18,    /* attr.axis2 as concat axis              text: concat_axis=N */
       IR_A_CAUSAL = 1u << 19, /* attr.k as 1 (causal mask) or 0        text: causal=N */
       IR_A_SCALE = 1u << 20,  /* attr.value as a scale factor           text: scale=V */
       IR_A_PEER = 1u << 21,   /* attr.k as the other pipeline stage     text: peer=N */
};

typedef enum IrOp {
#define X(id, name, arity, flags, attrs, shape, grad) IR_##id,
#include "ir/ops.def"
#undef X
  IR_OP_COUNT
} IrOp;

typedef enum IrDType { DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_COUNT } IrDType;

const char *ir_op_name(IrOp op);
int32_t ir_op_arity(IrOp op);  /* -1: variadic */
uint32_t ir_op_flags(IrOp op); /* IR_ELEMENTWISE | ... */
uint32_t ir_op_attrs(IrOp op); /* IR_A_* bits */
int ir_op_lookup(const char *name, size_t len, IrOp *op);
const char *ir_dtype_name(IrDType dt);
int ir_dtype_lookup(const char *name, size_t len, IrDType *dt);
bool ir_dtype_is_float(IrDType dt);
size_t ir_dtype_size(IrDType dt);
double ir_dtype_round(IrDType dt,
                      double x); /* nearest representable, ties to even; i32 truncates */
/* x (an f32 value) rounded to TF32: 10 mantissa bits, to nearest with ties away from zero, as
 * PTX's cvt.rna.tf32.f32 (the only TF32 rounding sm_80 has) and the OpenCL kernels' ax_tf32;
 * NaN and the infinities pass, a value past TF32's largest becomes an infinity. */
double ir_tf32_round(double x);

/* ======================================================================== graph.c: graph, values
 */

typedef struct IrShape {
  int32_t rank;
  int64_t dims[IR_MAX_RANK];
} IrShape;

typedef struct IrDims { /* a small list of dims or axes */
  int32_t n;
  int64_t v[IR_MAX_RANK];
} IrDims;

typedef struct IrAttrs { /* ops.def says which fields an op uses; the rest stay zero */
  IrDims axes;           /* bdims, perm or reduced axes */
  IrDims lo, hi;         /* slice start/limit, pad low/high */
  IrDims lb, rb, lc, rc; /* dot_general batch and contracting dims of lhs and rhs */
  int64_t axis;          /* iota, concat, all_gather, reduce_scatter axis; all_to_all split axis */
  int64_t axis2;         /* all_to_all concat axis */
  int64_t k;             /* top_k k, scatter_add rows, attention's causal flag */
  double value;          /* constant splat value, pad value, attention's score scale */
  const double *data;    /* constant: numel values, row-major, or NULL for a splat */
  int32_t nmesh;         /* collectives: mesh axis names, in group order */
  const char *mesh[IR_MAX_MESH_AXES];
} IrAttrs;

/* How pass_shard cut a value of the global program over the mesh. Dim d of the global value is
 * split into chunks over the mesh axes axes[d][0], axes[d][1], ... (mesh axis index + 1, major
 * first; 0 ends the list), and each device holds the chunk of its coordinates on those axes.
 * All zero: every device holds the whole value (and so does every graph before pass_shard). */
#define IR_MAX_SPLIT_AXES 4
typedef struct IrSplit {
  uint8_t axes[IR_MAX_RANK][IR_MAX_SPLIT_AXES];
} IrSplit;

typedef struct IrValue {
  IrOp op;
  IrDType dtype;
  IrShape shape;
  int32_t nops;
  const int32_t *ops; /* (nops) operand indices, all < this value's index */
  IrAttrs attr;
  const char *name;   /* parameter/input name, else "" */
  const char *origin; /* config path of the emitting module, e.g. "/model/decoder/layer", or "" */
  const char *tag;    /* remat tag, e.g. "attention.q_proj", or "" */
  IrSplit split;      /* set by pass_shard: this value is one device's chunk (shape is local) */
  /* Pipeline parallelism (passes/pipeline.c, docs/pipeline.md). stage: 0 on every device, else
   * only the devices whose pipeline coordinate is stage - 1 compute the value (before
   * pass_pipeline, under the interleaved schedule: 1 + the chunk, on stage chunk mod P). micro: the
   * microbatch (pass_microbatch's copy) of an input-dependent value; phase: IR_PHASE_*. Copied
   * with the value; values the builders make get 0. */
  int16_t stage, micro;
  uint8_t phase;
} IrValue;

enum { IR_PHASE_NONE, IR_PHASE_FORWARD, IR_PHASE_BACKWARD };
/* The name of the mesh axis that carries pipeline stages (the frontend's axis table agrees). */
#define IR_PIPELINE_AXIS "pipeline"

typedef struct IrOutput {
  const char *name; /* "loss", "grad:/model/...", ... */
  int32_t value;
} IrOutput;

typedef struct IrMesh { /* devices are numbered row-major over the axes */
  int32_t naxes;
  char names[IR_MAX_MESH_AXES][IR_MAX_AXIS_NAME];
  int64_t sizes[IR_MAX_MESH_AXES];
} IrMesh;

/* How f32 matrix products treat their operands: the precision policy's `matmul`
 * (docs/precision.md). IR_MATMUL_TF32 rounds each f32 operand element of a dot_general to TF32
 * (ir_tf32_round) before the multiply, as NVIDIA's tensor cores do; the sum stays f32 or wider.
 * bf16 operands are TF32 values already. A fact of the whole graph, like its mesh: every pass
 * that rebuilds a graph copies it. */
typedef enum IrMatmul { IR_MATMUL_F32, IR_MATMUL_TF32 } IrMatmul;

typedef struct IrArena IrArena;

typedef struct IrGraph { /* read freely; change only through ir/ functions */
  IrValue *values;       /* (nvalues) in topological order */
  int32_t nvalues, cap;
  IrOutput *outputs; /* (noutputs) */
  int32_t noutputs, outcap;
  int32_t *outindex; /* (outindex_cap) hash of output names: an index into outputs, or -1 */
  int32_t outindex_cap;
  int32_t *leafindex; /* (leafindex_cap) hash of parameter and input names: a value, or -1 */
  int32_t leafindex_cap, nleaves;
  IrMesh mesh;        /* naxes == 0: one device */
  IrMatmul matmul;    /* f32 products: exact or TF32 operands */
  const char *origin; /* current origin for new values */
  const char *tag;    /* current remat tag for new values */
  IrArena *arena;
  char error[IR_ERR_LEN]; /* first recorded error, "" if none */
} IrGraph;

IrGraph *ir_graph_new(void);
/* Room for n values without growing (a pass rebuilding a graph of about n). */
void ir_graph_reserve(IrGraph *g, int32_t n);
void ir_graph_free(IrGraph *g);
const char *ir_graph_error(const IrGraph *g); /* NULL if no error was recorded */
void ir_graph_clear_error(IrGraph *g);
int ir_graph_fail(IrGraph *g, const char *fmt, ...); /* records (if first) and returns IR_ERR */
void ir_graph_set_origin(IrGraph *g, const char *path);
void ir_graph_set_tag(IrGraph *g, const char *tag);
/* A pass's rebuilt graph takes g's place: ng gets g's origin and tag, then the two swap, so g
 * holds the new graph and ng the old one (for the caller to free). */
void ir_graph_replace(IrGraph *g, IrGraph *ng);
int ir_graph_set_mesh(IrGraph *g, const IrMesh *mesh);
void ir_value_set_tag(IrGraph *g, int32_t v, const char *tag);
void ir_value_set_origin(IrGraph *g, int32_t v, const char *path);
const char *ir_graph_intern(IrGraph *g, const char *s); /* arena copy; NULL -> "" */
void *ir_graph_alloc(IrGraph *g, size_t size);          /* zeroed arena memory */
/* Append a value: proto gives op, operands, attrs, name, and for ops whose result type is not
 * implied (leaves, cast, reshape, broadcast) its dtype and shape; origin/tag NULL take the current
 * ones. Runs the shape rule; on error records it (naming the config path) and returns IR_NONE. */
int32_t ir_graph_add(IrGraph *g, const IrValue *proto);
/* Appends value v of g to ng as it is (op, attributes, name, dtype, split, origin, tag) but with
 * every operand u replaced by map[u]: how a pass that rebuilds a graph copies what it keeps. */
int32_t ir_graph_add_mapped(IrGraph *ng, const IrGraph *g, int32_t v, const int32_t *map);
int ir_graph_add_output(IrGraph *g, const char *name, int32_t v);
int32_t ir_graph_output(const IrGraph *g, const char *name);        /* value index or IR_NONE */
int32_t ir_graph_find(const IrGraph *g, IrOp op, const char *name); /* parameter/input by name */
int ir_graph_copy_into(IrGraph *dst, const IrGraph *src);           /* dst empty: deep copy */
int64_t ir_shape_numel(const IrShape *s);
bool ir_shape_eq(const IrShape *a, const IrShape *b);
IrShape ir_shape_make(int32_t rank, const int64_t *dims);
int ir_mesh_axis(const IrMesh *m, const char *name); /* index or -1 */
int64_t ir_mesh_devices(const IrMesh *m);
/* Whether device dev (row-major over m) computes v: v->stage is 0 or the device's pipeline
 * coordinate + 1. */
bool ir_value_on_device(const IrMesh *m, const IrValue *v, int64_t dev);
bool ir_split_any(const IrSplit *s);                                  /* some dim is split */
int64_t ir_split_count(const IrMesh *m, const IrSplit *s, int32_t d); /* chunks along dim d */
/* Which chunk of dim d device `dev` (row-major over the mesh) holds. */
int64_t ir_split_index(const IrMesh *m, const IrSplit *s, int32_t d, int64_t dev);
/* Copies device dev's chunk of the global tensor (shape `global`, row-major) into local_data, or
 * with to_global the other way. For tests, the interpreter backend and checkpoints. */
void ir_split_copy(const IrMesh *m, const IrSplit *s, const IrShape *global, int64_t dev,
                   double *global_data, double *local_data, bool to_global);

/* The names of the KV cache in the sampling graphs (the frontend composes them, the backends
 * and the runtime's tables follow them). The forward (prefill) outputs
 * IR_KV_PREFILL "PRM/k" and "PRM/v" (1, K, T, H) for the attention module at parameter path PRM;
 * the decode graph reads them as inputs IR_KV_CACHE "PRM/k"... (1, K, T, H), whose rows at
 * positions below "pos" are the earlier tokens', and outputs the token's own rows IR_KV_ROW
 * "PRM/k"... (1, K, 1, H), which the runtime writes into the cache at pos. */
#define IR_KV_PREFILL "kv:"
#define IR_KV_CACHE   "kv_cache:"
#define IR_KV_ROW     "kv_row:"

/* ======================================================================== shape.c: shape rules */

/* Output dtype and shape of v from its operands in g (v need not be in g yet). On error writes a
 * message (without the value prefix) to msg and returns IR_ERR. */
int ir_value_infer(const IrGraph *g, const IrValue *v, IrDType *dt, IrShape *shape, char *msg,
                   size_t cap);
/* A dot_general as one row-major GEMM per batch element, C (M, N) = op(A) op(B) with A (M, K) or,
 * transposed, (K, M), and B (K, N) or (N, K): the layout sgemm takes. */
typedef struct IrGemm {
  int64_t batch, m, n, k;
  bool ta, tb; /* lhs stored (K, M) / rhs stored (N, K) */
} IrGemm;
/* Whether a dot_general of dtype dt with attributes a over operands of shapes lhs and rhs has
 * that layout: f32; batch dims lead in order on both sides; each side's contracting dims are
 * consecutive, in order, and sit right after the batch dims or at the end; sizes fit an int.
 * Fills *out (if out) when it does. The LLVM backend's BLAS calls, the OpenCL backend's GEMM
 * kernel and the fold of transposes into dots (passes/simplify.c) share this rule. */
bool ir_dot_sgemm(IrDType dt, const IrShape *lhs, const IrShape *rhs, const IrAttrs *a,
                  IrGemm *out);
/* The group size of a collective's mesh axes under mesh m, or -1 if an axis is unknown. */
int64_t ir_mesh_group_size(const IrMesh *m, const IrAttrs *a);

/* ======================================================================== build.c: builder API */

int32_t ir_param(IrGraph *g, const char *name, IrDType dt, int32_t rank, const int64_t *dims);
int32_t ir_input(IrGraph *g, const char *name, IrDType dt, int32_t rank, const int64_t *dims);
int32_t ir_const_scalar(IrGraph *g, IrDType dt, double value, int32_t rank, const int64_t *dims);
int32_t ir_const_data(IrGraph *g, IrDType dt, const double *data, int32_t rank,
                      const int64_t *dims); /* data: numel values, copied */
int32_t ir_iota(IrGraph *g, IrDType dt, int32_t rank, const int64_t *dims, int32_t axis);
int32_t ir_unary(IrGraph *g, IrOp op, int32_t x);
int32_t ir_binary(IrGraph *g, IrOp op, int32_t a, int32_t b);
int32_t ir_neg(IrGraph *g, int32_t x);
int32_t ir_exp(IrGraph *g, int32_t x);
int32_t ir_log(IrGraph *g, int32_t x);
int32_t ir_tanh(IrGraph *g, int32_t x);
int32_t ir_sqrt(IrGraph *g, int32_t x);
int32_t ir_rsqrt(IrGraph *g, int32_t x);
int32_t ir_abs(IrGraph *g, int32_t x);
int32_t ir_sin(IrGraph *g, int32_t x);
int32_t ir_cos(IrGraph *g, int32_t x);
int32_t ir_erf(IrGraph *g, int32_t x);
int32_t ir_logistic(IrGraph *g, int32_t x);
int32_t ir_stop_gradient(IrGraph *g, int32_t x); /* x, through which autodiff passes nothing */
int32_t ir_add(IrGraph *g, int32_t a, int32_t b);
int32_t ir_sub(IrGraph *g, int32_t a, int32_t b);
int32_t ir_mul(IrGraph *g, int32_t a, int32_t b);
int32_t ir_div(IrGraph *g, int32_t a, int32_t b);
int32_t ir_max(IrGraph *g, int32_t a, int32_t b);
int32_t ir_min(IrGraph *g, int32_t a, int32_t b);
int32_t ir_pow(IrGraph *g, int32_t a, int32_t b);
int32_t ir_eq(IrGraph *g, int32_t a, int32_t b);
int32_t ir_ne(IrGraph *g, int32_t a, int32_t b);
int32_t ir_lt(IrGraph *g, int32_t a, int32_t b);
int32_t ir_le(IrGraph *g, int32_t a, int32_t b);
int32_t ir_gt(IrGraph *g, int32_t a, int32_t b);
int32_t ir_ge(IrGraph *g, int32_t a, int32_t b);
int32_t ir_select(IrGraph *g, int32_t pred, int32_t a, int32_t b);
int32_t ir_cast(IrGraph *g, int32_t x, IrDType dt);
int32_t ir_broadcast(IrGraph *g, int32_t x, int32_t rank, const int64_t *dims,
                     const int32_t *bdims); /* bdims: (rank of x) */
int32_t ir_reshape(IrGraph *g, int32_t x, int32_t rank, const int64_t *dims);
int32_t ir_transpose(IrGraph *g, int32_t x, const int32_t *perm); /* perm: (rank of x) */
int32_t ir_slice(IrGraph *g, int32_t x, const int64_t *start, const int64_t *limit);
int32_t ir_concat(IrGraph *g, int32_t n, const int32_t *xs, int32_t axis);
int32_t ir_pad(IrGraph *g, int32_t x, const int64_t *low, const int64_t *high, double value);
int32_t ir_reduce_sum(IrGraph *g, int32_t x, int32_t naxes, const int32_t *axes);
int32_t ir_reduce_max(IrGraph *g, int32_t x, int32_t naxes, const int32_t *axes);
int32_t ir_dot(IrGraph *g, int32_t a, int32_t b, int32_t nbatch, const int32_t *lhs_batch,
               const int32_t *rhs_batch, int32_t ncontract, const int32_t *lhs_contract,
               const int32_t *rhs_contract);
int32_t ir_matmul(IrGraph *g, int32_t a, int32_t b); /* (..., M, K) x (K, N) -> (..., M, N) */
int32_t ir_gather(IrGraph *g, int32_t table, int32_t idx);
int32_t ir_scatter_add(IrGraph *g, int32_t idx, int32_t updates, int64_t rows);
int32_t ir_top_k_indices(IrGraph *g, int32_t x, int64_t k);
/* q, k, v (..., T, H), the same shape: softmax(scale * q k^T) v per leading index, masked to keys
 * j <= query i when causal. attention_grad gives (3, ..., T, H): dq, dk and dv of sum(out * dout).
 * Grouped-query: k, v (..., K, T, H) against q (..., N, T, H), N = G K: query problem b (a
 * leading index, flattened) reads key problem b / G, and attention_grad gives
 * (..., K, G + 2, T, H): per key head its G query heads' dq, then its dk and dv (summed over the
 * group). ir_attention_group gives G (0: the shapes do not fit).
 * Query positions (a last operand, i32 (Tq), non-decreasing, each in [0, Tk)): q and dout have
 * Tq <= Tk rows, k and v Tk, and with causal query row i sees keys j <= pos[i] (a device's chunk
 * of a split sequence: its rows' places in the whole one). attention_grad's result keeps Tk rows
 * a slot: dq fills rows [0, Tq) of its slot and zeros the rest. Without them pos[i] = i and
 * Tq = Tk.
 */
int64_t ir_attention_group(const IrShape *q, const IrShape *k);
/* Where attention_grad puts query problem b's dq, and its key problem's dk and dv, in problems
 * (Tk H elements) from the start of the result; nb query problems, group G. */
static inline void ir_attention_grad_at(int64_t nb, int64_t G, int64_t b, int64_t *dq, int64_t *dk,
                                        int64_t *dv) {
  if (G == 1) {
    *dq = b, *dk = nb + b, *dv = 2 * nb + b;
    return;
  }
  *dq = b / G * (G + 2) + b % G;
  *dk = b / G * (G + 2) + G;
  *dv = *dk + 1;
}
/* The query positions operand of attention value v (attention or attention_grad), or IR_NONE. */
static inline int32_t ir_attention_positions(const IrValue *v) {
  int32_t base = v->op == IR_ATTENTION ? 3 : 4;
  return v->nops > base ? v->ops[base] : IR_NONE;
}
int32_t ir_attention(IrGraph *g, int32_t q, int32_t k, int32_t v, bool causal, double scale);
int32_t ir_attention_grad(IrGraph *g, int32_t q, int32_t k, int32_t v, int32_t dout, bool causal,
                          double scale);
/* Either op with the query positions pos (IR_NONE: none); dout IR_NONE builds attention. */
int32_t ir_attention_at(IrGraph *g, int32_t q, int32_t k, int32_t v, int32_t dout, int32_t pos,
                        bool causal, double scale);
int32_t ir_all_reduce(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes);
int32_t ir_all_gather(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes, int32_t axis);
int32_t ir_reduce_scatter(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes,
                          int32_t axis);
int32_t ir_local_slice(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes, int32_t axis);
int32_t ir_all_to_all(IrGraph *g, int32_t x, int32_t naxes, const char *const *axes,
                      int32_t split_axis, int32_t concat_axis);
/* Pipeline point-to-point: send x to stage `peer` over the mesh axis `axis`; recv of such a
 * send on stage `peer`'s receiver is the send's data as the sending stage `from` computed it. */
int32_t ir_send(IrGraph *g, int32_t x, const char *axis, int64_t peer);
int32_t ir_recv(IrGraph *g, int32_t send, const char *axis, int64_t from);

/* ======================================================================== verify.c: verifier */

/* Checks operand order, arity, dtype and shape rules, names and outputs. On failure writes
 * "%N (op) at /config/path: what" to msg (if msg) and returns IR_ERR. */
int ir_graph_verify(const IrGraph *g, char *msg, size_t cap);

/* ======================================================================== text.c: text form */

int ir_graph_print(const IrGraph *g, FILE *out);
char *ir_graph_to_string(const IrGraph *g); /* malloc'd */
/* Parses text into a new graph; NULL on error with "line:col: what" in msg. */
IrGraph *ir_graph_parse(const char *text, char *msg, size_t cap);

/* ======================================================================== dot.c: Graphviz */

int ir_graph_print_dot(const IrGraph *g, FILE *out);

/* ======================================================================== interp.c: interpreter */

typedef struct IrInterp IrInterp;

/* mesh NULL: the graph's mesh. A given mesh must have every axis the graph's mesh has, same size.
 */
/* NULL when the value slots of all devices (devices x values, from the config) do not fit. */
IrInterp *ir_interp_new(const IrGraph *g, const IrMesh *mesh);
void ir_interp_free(IrInterp *it);
const char *ir_interp_error(const IrInterp *it);
int64_t ir_interp_devices(const IrInterp *it);
void ir_interp_set_rounding(IrInterp *it, bool round); /* round results to dtype; default on */
/* keep false: a run frees each value once nothing reads it, keeping only the outputs (and
 * ir_interp_value then answers NULL for the others). For large graphs; default true. */
void ir_interp_set_keep_all(IrInterp *it, bool keep);
/* Binds a parameter or input by name on one device (device < 0: every device); data is copied
 * and must have the value's shape. */
int ir_interp_set(IrInterp *it, int64_t device, const char *name, int32_t rank, const int64_t *dims,
                  const double *data);
int ir_interp_run(IrInterp *it);
/* Result of a named output on a device after a run; NULL (with an error) if unknown. */
const double *ir_interp_output(IrInterp *it, int64_t device, const char *name, IrShape *shape);
const double *ir_interp_value(const IrInterp *it, int64_t device, int32_t v);
/* Evaluates one non-collective, non-input value from its operands' data (args[i]: numel of
 * operand i); used by the interpreter and constant folding. */
int ir_eval_value(const IrGraph *g, int32_t v, const double *const *args, double *out, bool round,
                  char *msg, size_t cap);

#endif
