/*
 * fake_program.c: a tiny model obeying the RtProgram ABI exactly, written by hand: a bigram
 * softmax regression over FAKE_V tokens, logits[n] = W[ids[n]] + b, trained with the
 * optimizer the compiler emits (clip by global norm 1.0, AdamW b1 0.9, b2 0.95, eps 1e-8,
 * weight decay 0.01, linear warmup then cosine decay read off the slab's step number).
 *
 * Like generated code, it keeps everything in the slab and splits its loops over the pool
 * so that each output element is owned by one index and every reduction runs in a fixed
 * order: its results are the same bytes for any thread count.
 */
#include <math.h>

#include "fake_program.h"

#define V       FAKE_V
#define N       (FAKE_B * FAKE_T) /* positions per batch */
#define A64(x)  (((x) + 63) / 64 * 64)
#define WARMUP  3
#define HORIZON 100 /* the schedule's length, as a compiled config would fix it */
#define LR_MAX  0.05

/* Slab layout, in bytes. */
enum {
  OFF_W = 0,                      /* f32 (V, V) */
  OFF_B = OFF_W + A64(V * V * 4), /* f32 (V) */
  OFF_MW = OFF_B + A64(V * 4),    /* AdamW moments, same shapes */
  OFF_VW = OFF_MW + A64(V * V * 4),
  OFF_MB = OFF_VW + A64(V * V * 4),
  OFF_VB = OFF_MB + A64(V * 4),
  OFF_GW = OFF_VB + A64(V * 4), /* scratch: gradients (V, V), (V) */
  OFF_GB = OFF_GW + A64(V * V * 4),
  OFF_DL = OFF_GB + A64(V * 4),     /* scratch: dloss/dlogits (N, V) */
  OFF_RL = OFF_DL + A64(N * V * 4), /* scratch: loss per position (N) */
  OFF_IDS = OFF_RL + A64(N * 4),    /* i32 (B, T) */
  OFF_TGT = OFF_IDS + A64(N * 4),   /* i32 (B, T) */
  OFF_STEP = OFF_TGT + A64(N * 4),  /* f32 scalars */
  OFF_LOSS = OFF_STEP + 4,
  OFF_GN = OFF_LOSS + 4,
  OFF_LR = OFF_GN + 4,
  SLAB = A64(OFF_LR + 4),
};

int fake_nan_at;
int fake_spike_at;
void (*fake_after_step)(int64_t step, float *weight);

static float *f32(char *slab, int off) { return (float *)(void *)(slab + off); }
static int32_t *i32(char *slab, int off) { return (int32_t *)(void *)(slab + off); }

/* Softmax cross-entropy of position n: its loss and its row of dloss/dlogits (mean over N). */
static void forward_rows(void *ctx, int64_t lo, int64_t hi) {
  char *s = ctx;
  const float *w = f32(s, OFF_W), *b = f32(s, OFF_B);
  for (int64_t n = lo; n < hi; n++) {
    const float *row = w + i32(s, OFF_IDS)[n] * V;
    float *dl = f32(s, OFF_DL) + n * V;
    float mx = -INFINITY;
    double sum = 0;
    for (int v = 0; v < V; v++) mx = fmaxf(mx, row[v] + b[v]);
    for (int v = 0; v < V; v++) sum += dl[v] = expf(row[v] + b[v] - mx);
    int tgt = i32(s, OFF_TGT)[n];
    f32(s, OFF_RL)[n] = (float)(log(sum) - (row[tgt] + b[tgt] - mx));
    for (int v = 0; v < V; v++) dl[v] = (float)((dl[v] / sum - (v == tgt)) / N);
  }
}

/* Row r of dW sums the dlogits of the positions whose input is r, in position order; the
 * last "row" (r == V) is db. */
static void grad_rows(void *ctx, int64_t lo, int64_t hi) {
  char *s = ctx;
  for (int64_t r = lo; r < hi; r++) {
    float *g = r < V ? f32(s, OFF_GW) + r * V : f32(s, OFF_GB);
    for (int v = 0; v < V; v++) g[v] = 0;
    for (int n = 0; n < N; n++)
      if (r == V || i32(s, OFF_IDS)[n] == r)
        for (int v = 0; v < V; v++) g[v] += f32(s, OFF_DL)[n * V + v];
  }
}

typedef struct Update {
  char *slab;
  float lr, scale, t;
} Update;

static void adamw(float *p, float *m, float *v, float g, const Update *u) {
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.01f;
  g *= u->scale;
  *m = b1 * *m + (1 - b1) * g;
  *v = b2 * *v + (1 - b2) * g * g;
  float mh = *m / (1 - powf(b1, u->t)), vh = *v / (1 - powf(b2, u->t));
  *p -= u->lr * (mh / (sqrtf(vh) + eps) + wd * *p);
}

/* Elements [0, V*V) are W, [V*V, V*V+V) are b. */
static void update_elems(void *ctx, int64_t lo, int64_t hi) {
  const Update *u = ctx;
  char *s = u->slab;
  for (int64_t i = lo; i < hi; i++) {
    if (i < V * V)
      adamw(f32(s, OFF_W) + i, f32(s, OFF_MW) + i, f32(s, OFF_VW) + i, f32(s, OFF_GW)[i], u);
    else
      adamw(f32(s, OFF_B) + i - V * V, f32(s, OFF_MB) + i - V * V, f32(s, OFF_VB) + i - V * V,
            f32(s, OFF_GB)[i - V * V], u);
  }
}

static float schedule(float t) {
  if (t <= WARMUP) return (float)(LR_MAX * t / WARMUP);
  double x = fmin(1.0, (t - WARMUP) / (HORIZON - WARMUP));
  return (float)(LR_MAX * (0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * x))));
}

static void fake_step(char *slab, RtPool *pool, RtComm *comm) {
  (void)comm;
  float t = *f32(slab, OFF_STEP);
  rt_parallel_for(pool, N, forward_rows, slab);
  rt_parallel_for(pool, V + 1, grad_rows, slab);
  double loss = 0, sq = 0;
  for (int n = 0; n < N; n++) loss += f32(slab, OFF_RL)[n];
  for (int i = 0; i < V * V; i++) sq += (double)f32(slab, OFF_GW)[i] * f32(slab, OFF_GW)[i];
  for (int i = 0; i < V; i++) sq += (double)f32(slab, OFF_GB)[i] * f32(slab, OFF_GB)[i];
  float norm = (float)sqrt(sq);
  Update u = {slab, schedule(t), norm > 1.0f ? 1.0f / norm : 1.0f, t};
  rt_parallel_for(pool, V * V + V, update_elems, &u);
  *f32(slab, OFF_LOSS) = (int)t == fake_nan_at     ? NAN
                         : (int)t == fake_spike_at ? (float)(50 * loss / N)
                                                   : (float)(loss / N);
  *f32(slab, OFF_GN) = norm;
  *f32(slab, OFF_LR) = u.lr;
  if (fake_after_step) fake_after_step((int64_t)t, f32(slab, OFF_W));
}

static const RtParamSlot PARAMS[] = {
    {.path = "model/bigram/weight",
     .rank = 2,
     .shape = {V, V},
     .global_shape = {V, V},
     .init = {.kind = RT_INIT_NORMAL, .std = 0.02f},
     .offset = OFF_W,
     .m_offset = OFF_MW,
     .v_offset = OFF_VW},
    {.path = "model/bigram/bias",
     .rank = 1,
     .shape = {V},
     .global_shape = {V},
     .init = {.kind = RT_INIT_ZEROS},
     .offset = OFF_B,
     .m_offset = OFF_MB,
     .v_offset = OFF_VB},
};

const RtProgram axlc_program = {
    .abi_version = RT_ABI_VERSION,
    .config = "{\"model\": {\"klass\": \"FakeBigram\", \"vocab_size\": 32}, \"max_steps\": 30}",
    .slab_bytes = SLAB,
    .nparams = 2,
    .params = PARAMS,
    .batch = FAKE_B,
    .seq = FAKE_T,
    .vocab = V,
    .ids_offset = OFF_IDS,
    .targets_offset = OFF_TGT,
    .step_offset = OFF_STEP,
    .loss_offset = OFF_LOSS,
    .grad_norm_offset = OFF_GN,
    .lr_offset = OFF_LR,
    .step = fake_step,
    .facts = {.max_steps = 30, .seed = 1234, .ckpt_every_n_steps = 0, .ckpt_keep = 3},
};
