/* fake_mesh_program.c: a trainer whose per-device step is written by hand, for testing the
 * trainer's multi-process behaviour without the compiler (tests/mpi/mpi.sh).
 *
 * The model is a bigram softmax regression over V tokens: logits[t] = W[ids[t]] + b, mean
 * cross-entropy over the global batch, clip-by-norm at 1 and AdamW (lr 0.05, wd 0.01). The mesh
 * comes from the environment, AXLC_FAKE_MESH="D,M" (default "1,1"): data = D devices split the
 * batch, model = M devices split W's columns and b (Megatron column-parallel). Axes of size 1 are
 * left out of the mesh, as pass_shard does. The step on one device:
 *
 *   logits_local (BT, V/M) = W_local[ids] + b_local
 *   all_gather over model (axis 1) -> logits (BT, V); softmax, loss, dlogits (BT, V) / N
 *   local_slice over model (axis 1) -> dlogits_local; dW_local, db_local
 *   all_reduce over data: dW_local, db_local, the loss
 *   all_reduce over model: the squared gradient norm; clip; AdamW on the local chunk
 *
 * so a checkpoint of D x M is cut by columns over model and written once per column chunk.
 * Every sum runs in a fixed order, so the step is deterministic on every mesh.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "axrt.h"

enum { V = 16, T = 8, BG = 8 }; /* vocabulary, sequence, global batch */

static int D = 1, M = 1; /* data and model devices */
static int64_t BL;       /* local batch */

enum { C_GATHER, C_SLICE, C_DW, C_DB, C_LOSS, C_SQ, NCOLL };
static RtCollective COLLS[NCOLL];
static int32_t coll_index[NCOLL]; /* index in the table, -1 when its group is one device */
static int32_t ncoll;

/* slab offsets (bytes) */
static int64_t O_W, O_B, O_MW, O_MB, O_VW, O_VB, O_IDS, O_TGT, O_STEP, O_LOSS, O_GN, O_LR, O_LL,
    O_LF, O_DF, O_DL, O_DW, O_DB, O_LOSSL, O_SQL, O_SQ, SLAB;

static int64_t take(int64_t bytes) {
  int64_t at = SLAB;
  SLAB += (bytes + 63) / 64 * 64;
  return at;
}

static float *F(char *s, int64_t off) { return (float *)(void *)(s + off); }
static int32_t *I(char *s, int64_t off) { return (int32_t *)(void *)(s + off); }

/* A collective, or the copy it amounts to on a group of one device. */
static void coll(RtComm *c, int k, char *slab) {
  if (coll_index[k] >= 0) {
    rt_comm_collective(c, coll_index[k], slab);
    return;
  }
  int64_t n = 1;
  for (int d = 0; d < COLLS[k].rank; d++) n *= COLLS[k].in_shape[d];
  memmove(slab + COLLS[k].out_offset, slab + COLLS[k].in_offset, (size_t)n * 4);
}

static void step(char *s, RtPool *pool, RtComm *c) {
  (void)pool;
  int64_t bt = BL * T, vl = V / M, n = BG * T;
  const int32_t *ids = I(s, O_IDS), *tgt = I(s, O_TGT);
  float *w = F(s, O_W), *b = F(s, O_B);
  for (int64_t t = 0; t < bt; t++)
    for (int64_t j = 0; j < vl; j++) F(s, O_LL)[t * vl + j] = w[ids[t] * vl + j] + b[j];
  coll(c, C_GATHER, s);
  double loss = 0;
  for (int64_t t = 0; t < bt; t++) {
    const float *l = F(s, O_LF) + t * V;
    float *dl = F(s, O_DF) + t * V;
    double mx = l[0], sum = 0;
    for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
    for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
    loss += -(l[tgt[t]] - mx - log(sum)) / (double)n;
    for (int j = 0; j < V; j++) dl[j] = (float)((exp(l[j] - mx) / sum - (j == tgt[t])) / (double)n);
  }
  *F(s, O_LOSSL) = (float)loss;
  coll(c, C_SLICE, s);
  memset(F(s, O_DW), 0, (size_t)(V * vl) * 4);
  memset(F(s, O_DB), 0, (size_t)vl * 4);
  for (int64_t t = 0; t < bt; t++)
    for (int64_t j = 0; j < vl; j++) {
      float g = F(s, O_DL)[t * vl + j];
      F(s, O_DW)[ids[t] * vl + j] += g;
      F(s, O_DB)[j] += g;
    }
  coll(c, C_DW, s);
  coll(c, C_DB, s);
  coll(c, C_LOSS, s);
  double sq = 0;
  for (int64_t i = 0; i < V * vl; i++) sq += (double)F(s, O_DW)[i] * F(s, O_DW)[i];
  for (int64_t j = 0; j < vl; j++) sq += (double)F(s, O_DB)[j] * F(s, O_DB)[j];
  *F(s, O_SQL) = (float)sq;
  coll(c, C_SQ, s);
  float norm = sqrtf(*F(s, O_SQ)), scale = norm > 1.0f ? 1.0f / norm : 1.0f, lr = 0.05f;
  float t = *F(s, O_STEP), bc1 = 1.0f - powf(0.9f, t), bc2 = 1.0f - powf(0.999f, t);
  for (int k = 0; k < 2; k++) {
    int64_t len = k ? vl : V * vl;
    float *p = F(s, k ? O_B : O_W), *m = F(s, k ? O_MB : O_MW), *v = F(s, k ? O_VB : O_VW);
    const float *g = F(s, k ? O_DB : O_DW);
    for (int64_t i = 0; i < len; i++) {
      float gi = g[i] * scale;
      m[i] = 0.9f * m[i] + 0.1f * gi;
      v[i] = 0.999f * v[i] + 0.001f * gi * gi;
      p[i] -= lr * ((m[i] / bc1) / (sqrtf(v[i] / bc2) + 1e-8f) + (k ? 0.0f : 0.01f * p[i]));
    }
  }
  *F(s, O_LOSS) = *F(s, O_LOSSL);
  *F(s, O_GN) = norm;
  *F(s, O_LR) = lr;
}

static RtMesh mesh;
static int ax_data = -1, ax_model = -1; /* mesh axis indices, -1 when left out */

static void set_coll(int k, RtCollKind kind, int axis, int rank, const int64_t *in,
                     const int64_t *out, int64_t in_off, int64_t out_off) {
  RtCollective *c = &COLLS[k];
  int a = k == C_GATHER || k == C_SLICE || k == C_SQ ? ax_model : ax_data;
  *c = (RtCollective){.kind = kind,
                      .dtype = RT_DT_F32,
                      .naxes = 1,
                      .axis = axis,
                      .rank = rank,
                      .in_offset = in_off,
                      .out_offset = out_off};
  c->axes[0] = a;
  for (int d = 0; d < rank; d++) {
    c->in_shape[d] = in[d];
    c->out_shape[d] = out[d];
  }
  coll_index[k] = a >= 0 ? ncoll++ : -1;
}

static void layout(void) {
  int64_t vl = V / M, bt = BL * T;
  O_W = take(V * vl * 4), O_B = take(vl * 4), O_MW = take(V * vl * 4), O_MB = take(vl * 4);
  O_VW = take(V * vl * 4), O_VB = take(vl * 4), O_IDS = take(bt * 4), O_TGT = take(bt * 4);
  O_STEP = take(4), O_LOSS = take(4), O_GN = take(4), O_LR = take(4);
  O_LL = take(bt * vl * 4), O_LF = take(bt * V * 4), O_DF = take(bt * V * 4),
  O_DL = take(bt * vl * 4);
  O_DW = take(V * vl * 4), O_DB = take(vl * 4), O_LOSSL = take(4), O_SQL = take(4), O_SQ = take(4);
  /* the table holds the collectives of groups of more than one device, in step order */
  set_coll(C_GATHER, RT_COLL_ALL_GATHER, 1, 2, (int64_t[]){bt, vl}, (int64_t[]){bt, V}, O_LL, O_LF);
  set_coll(C_SLICE, RT_COLL_LOCAL_SLICE, 1, 2, (int64_t[]){bt, V}, (int64_t[]){bt, vl}, O_DF, O_DL);
  set_coll(C_DW, RT_COLL_ALL_REDUCE, 0, 2, (int64_t[]){V, vl}, (int64_t[]){V, vl}, O_DW, O_DW);
  set_coll(C_DB, RT_COLL_ALL_REDUCE, 0, 1, (int64_t[]){vl}, (int64_t[]){vl}, O_DB, O_DB);
  set_coll(C_LOSS, RT_COLL_ALL_REDUCE, 0, 0, NULL, NULL, O_LOSSL, O_LOSSL);
  set_coll(C_SQ, RT_COLL_ALL_REDUCE, 0, 0, NULL, NULL, O_SQL, O_SQ);
}

static RtParamSlot PARAMS[2];
static RtCollective TABLE[NCOLL];

static void make_mesh(void) {
  const char *env = getenv("AXLC_FAKE_MESH");
  if (env && sscanf(env, "%d,%d", &D, &M) != 2) D = M = 1;
  if (D < 1 || M < 1 || BG % D || V % M) D = M = 1;
  BL = BG / D;
  if (D > 1) {
    ax_data = mesh.naxes;
    mesh.names[mesh.naxes] = "data";
    mesh.sizes[mesh.naxes++] = D;
  }
  if (M > 1) {
    ax_model = mesh.naxes;
    mesh.names[mesh.naxes] = "model";
    mesh.sizes[mesh.naxes++] = M;
  }
}

int main(int argc, char **argv) {
  make_mesh();
  layout();
  int n = 0;
  for (int k = 0; k < NCOLL; k++)
    if (coll_index[k] >= 0) TABLE[n++] = COLLS[k];
  int64_t vl = V / M;
  PARAMS[0] = (RtParamSlot){.path = "model/bigram/weight",
                            .rank = 2,
                            .shape = {V, vl},
                            .global_shape = {V, V},
                            .init = {.kind = RT_INIT_NORMAL, .std = 0.5f},
                            .offset = O_W,
                            .m_offset = O_MW,
                            .v_offset = O_VW};
  PARAMS[1] = (RtParamSlot){.path = "model/bigram/bias",
                            .rank = 1,
                            .shape = {vl},
                            .global_shape = {V},
                            .init = {.kind = RT_INIT_UNIFORM, .lo = -0.1f, .hi = 0.1f},
                            .offset = O_B,
                            .m_offset = O_MB,
                            .v_offset = O_VB};
  if (ax_model >= 0) {
    PARAMS[0].split[1][0] = (uint8_t)(ax_model + 1);
    PARAMS[1].split[0][0] = (uint8_t)(ax_model + 1);
  }
  RtProgram p = {
      .abi_version = RT_ABI_VERSION,
      .config =
          "{\"model\": {\"klass\": \"FakeMeshBigram\", \"vocab_size\": 16}, \"max_steps\": 10}",
      .nparams = 2,
      .params = PARAMS,
      .batch = BL,
      .seq = T,
      .vocab = V,
      .ids_offset = O_IDS,
      .targets_offset = O_TGT,
      .step_offset = O_STEP,
      .loss_offset = O_LOSS,
      .grad_norm_offset = O_GN,
      .lr_offset = O_LR,
      .facts = {.max_steps = 10, .seed = 99, .ckpt_keep = 3},
      .mesh = mesh,
      .ncollectives = n,
      .collectives = TABLE,
      .step = step,
  };
  p.slab_bytes = SLAB;
  if (ax_data >= 0) p.batch_split[0] = (uint8_t)(ax_data + 1);
  return rt_train_main(&p, argc, argv);
}
