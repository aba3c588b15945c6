/* test_expand.c: pass_expand against the interpreter's fused attention (ir/interp.c), in f64 with
 * rounding off: attention (causal or not, ranks 3 and 4, T = 1 and 5) and the attention_grad that
 * autodiff makes of it compute the same numbers before and after the expansion, to 1e-12
 * relative; no fused op remains; the graph verifies and survives its text form; the new values
 * keep the replaced value's origin, tag and, on a 2-device mesh, its split; with query positions
 * (fewer queries than keys, the causal mask at the positions, dq padded to the keys' rows). */
#include "passes/passes.h"
#include "tests/ir/ir_test.h"

#define NOPS 3 /* q, k, v */

static const char *names[NOPS] = {"q", "k", "v"};

typedef struct Case {
  int32_t rank;
  int64_t dims[4]; /* (..., T, H) */
  bool causal;
  bool grad;    /* loss = sum(attention * w), differentiated: attention_grad */
  int ndev;     /* 1, or 2 on mesh axis "x" splitting the leading dim */
  double scale; /* 0: 0.6 causal, 1.3 not */
  int64_t kv;   /* grouped-query: k and v with kv heads on dim rank - 3; 0: q's shape */
  int64_t tk;   /* k and v rows, with the query positions off, off + 1, ...; 0: q's rows */
  int64_t off;
} Case;

/* Operand i's dims: q's, or k's and v's with kv heads. */
static void op_dims(const Case *c, int i, int64_t *dims) {
  for (int32_t d = 0; d < c->rank; d++) dims[d] = c->dims[d];
  if (i > 0 && c->kv) dims[c->rank - 3] = c->kv;
  if (i > 0 && c->tk) dims[c->rank - 2] = c->tk;
}

/* The elements of the largest operand. */
static int64_t case_numel(const Case *c) {
  int64_t n = 1;
  for (int32_t d = 0; d < c->rank; d++)
    n *= d == c->rank - 2 && c->tk > c->dims[d] ? c->tk : c->dims[d];
  return n;
}

/* loss = sum(y * w) with fixed weights, so every output element matters differently. */
static int32_t weighted_sum(IrGraph *g, int32_t y) {
  IrShape s = g->values[y].shape;
  int64_t n = ir_shape_numel(&s);
  double *w = malloc((size_t)n * sizeof *w);
  for (int64_t i = 0; i < n; i++) w[i] = 0.5 + 0.4 * sin(1.0 + (double)i);
  int32_t wc = ir_const_data(g, DT_F64, w, s.rank, s.dims);
  free(w);
  int32_t axes[IR_MAX_RANK];
  for (int32_t d = 0; d < s.rank; d++) axes[d] = d;
  return ir_reduce_sum(g, ir_mul(g, y, wc), s.rank, axes);
}

/* out = attention(q, k, v) (origin /model/attn, tag "attention.context"), and with c->grad the
 * loss and its gradients. Under a mesh the operands are split on dim 0 over axis "x". */
static IrGraph *case_graph(const Case *c) {
  IrGraph *g = ir_graph_new();
  if (c->ndev == 2) {
    IrMesh m = {.naxes = 1, .sizes = {2}};
    snprintf(m.names[0], IR_MAX_AXIS_NAME, "x");
    ir_graph_set_mesh(g, &m);
  }
  int32_t p[NOPS];
  for (int i = 0; i < NOPS; i++) {
    int64_t dims[4];
    op_dims(c, i, dims);
    p[i] = ir_param(g, names[i], DT_F64, c->rank, dims);
    if (c->ndev == 2 && p[i] != IR_NONE) g->values[p[i]].split.axes[0][0] = 1;
  }
  int32_t pos = IR_NONE;
  if (c->tk) {
    int64_t tq = c->dims[c->rank - 2];
    pos = ir_add(g, ir_iota(g, DT_I32, 1, &tq, 0),
                 ir_const_scalar(g, DT_I32, (double)c->off, 1, &tq));
  }
  ir_graph_set_origin(g, "/model/attn");
  ir_graph_set_tag(g, "attention.context");
  double scale = c->scale ? c->scale : c->causal ? 0.6 : 1.3;
  int32_t y = ir_attention_at(g, p[0], p[1], p[2], IR_NONE, pos, c->causal, scale);
  if (c->ndev == 2 && y != IR_NONE) g->values[y].split.axes[0][0] = 1;
  ir_graph_set_origin(g, "");
  ir_graph_set_tag(g, "");
  ir_graph_add_output(g, "out", y);
  if (c->grad) {
    ir_graph_add_output(g, "loss", weighted_sum(g, y));
    CU_ASSERT_EQUAL(pass_autodiff(g, NULL), IR_OK);
    for (int32_t v = 0; v < g->nvalues; v++)
      if (g->values[v].op == IR_ATTENTION_GRAD) {
        ir_value_set_origin(g, v, "/model/attn/grad");
        ir_value_set_tag(g, v, "attention.grad");
        if (c->ndev == 2) g->values[v].split.axes[1][0] = 1; /* as pass_shard would */
      }
  }
  return g;
}

static int count_op(const IrGraph *g, IrOp op) {
  int n = 0;
  for (int32_t v = 0; v < g->nvalues; v++) n += g->values[v].op == op;
  return n;
}

/* Runs g with the case's operands (different per device) and returns a malloc'd copy of every
 * output, per device, one after the other; NULL on error (printed). */
static double *run_outputs(const IrGraph *g, const Case *c, int64_t *total) {
  IrInterp *it = ir_interp_new(g, NULL);
  ir_interp_set_rounding(it, false);
  int64_t n = case_numel(c);
  double *x = malloc((size_t)n * sizeof *x), *res = NULL;
  uint64_t seed = 99;
  for (int64_t d = 0; d < c->ndev; d++)
    for (int i = 0; i < NOPS; i++) {
      for (int64_t e = 0; e < n; e++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[e] = -1.5 + 3.0 * (double)(seed >> 11) / 9007199254740992.0;
      }
      int64_t dims[4];
      op_dims(c, i, dims);
      ir_interp_set(it, d, names[i], c->rank, dims, x); /* the first numel of x */
    }
  if (ir_interp_run(it) == IR_OK) {
    *total = 0;
    for (int32_t k = 0; k < g->noutputs; k++)
      *total += ir_shape_numel(&g->values[g->outputs[k].value].shape) * c->ndev;
    res = malloc((size_t)(*total + 1) * sizeof *res);
    double *at = res;
    for (int64_t d = 0; d < c->ndev; d++)
      for (int32_t k = 0; k < g->noutputs; k++) {
        IrShape s;
        const double *o = ir_interp_output(it, d, g->outputs[k].name, &s);
        memcpy(at, o, (size_t)ir_shape_numel(&s) * sizeof *at);
        at += ir_shape_numel(&s);
      }
  } else {
    fprintf(stderr, "run: %s\n", ir_interp_error(it));
  }
  free(x);
  ir_interp_free(it);
  return res;
}

/* The values expand made carry the replaced value's origin and tag: the forward's (origin
 * /model/attn, tag attention.context) and the gradient's (relabelled in case_graph to origin
 * /model/attn/grad, tag attention.grad; autodiff's own values there carry /model/attn and no
 * tag). Under a mesh, their leading dim (after attention_grad's stack) carries the split. */
static void check_provenance(const IrGraph *g, const Case *c) {
  int nfwd = 0, ngrad = 0;
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    bool fwd = !strcmp(x->tag, "attention.context"), grad = !strcmp(x->origin, "/model/attn/grad");
    if (fwd && strcmp(x->origin, "/model/attn") != 0)
      fprintf(stderr, "%%%d (%s): origin \"%s\"\n", v, ir_op_name(x->op), x->origin);
    if (grad && strcmp(x->tag, "attention.grad") != 0)
      fprintf(stderr, "%%%d (%s): tag \"%s\"\n", v, ir_op_name(x->op), x->tag);
    CU_ASSERT(!fwd || !strcmp(x->origin, "/model/attn"));
    CU_ASSERT(!grad || !strcmp(x->tag, "attention.grad"));
    nfwd += fwd;
    ngrad += grad;
    int32_t lead = x->shape.rank == c->rank + 1 ? 1 : 0; /* attention_grad's stack */
    if (c->ndev != 2 || !(fwd || grad) || x->shape.dims[lead] != c->dims[0]) continue;
    if (x->split.axes[lead][0] != 1)
      fprintf(stderr, "%%%d (%s): dim %d not split\n", v, ir_op_name(x->op), lead);
    CU_ASSERT_EQUAL(x->split.axes[lead][0], 1);
  }
  CU_ASSERT(nfwd >= 11); /* dot, scale, max, sub, exp, sum, div, dot, ... */
  CU_ASSERT(!c->grad || ngrad >= 20);
}

static void check_case(const Case *c) {
  IrGraph *g = case_graph(c);
  char msg[IR_ERR_LEN] = "";
  CU_ASSERT_PTR_NULL_FATAL(ir_graph_error(g));
  CHECK_INT(count_op(g, c->grad ? IR_ATTENTION_GRAD : IR_ATTENTION), 1);
  int64_t n0 = 0, n1 = 0;
  double *before = run_outputs(g, c, &n0);
  CU_ASSERT_EQUAL(pass_expand(g, NULL), IR_OK);
  if (ir_graph_error(g)) fprintf(stderr, "expand: %s\n", ir_graph_error(g));
  CHECK_INT(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  if (msg[0]) fprintf(stderr, "verify: %s\n", msg);
  CHECK_INT(count_op(g, IR_ATTENTION) + count_op(g, IR_ATTENTION_GRAD), 0);
  check_provenance(g, c);
  double *after = run_outputs(g, c, &n1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(before);
  CU_ASSERT_PTR_NOT_NULL_FATAL(after);
  CHECK_INT(n1, n0);
  int bad = 0;
  for (int64_t i = 0; i < n0 && n1 == n0; i++)
    if (!(fabs(after[i] - before[i]) <= 1e-12 * fmax(1.0, fabs(before[i]))) && bad++ < 5)
      fprintf(stderr,
              "rank %d T %lld causal %d grad %d ndev %d: [%lld] expanded %.17g, fused %.17g\n",
              c->rank, (long long)c->dims[c->rank - 2], c->causal, c->grad, c->ndev, (long long)i,
              after[i], before[i]);
  CHECK_INT(bad, 0);
  /* the text form keeps the expansion (the causal mask's -inf included) */
  char *text = ir_graph_to_string(g);
  IrGraph *back = ir_graph_parse(text, msg, sizeof msg);
  if (!back) fprintf(stderr, "parse: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL(back);
  if (back) {
    char *again = ir_graph_to_string(back);
    CU_ASSERT_STRING_EQUAL(again, text);
    free(again);
  }
  ir_graph_free(back);
  free(text);
  free(before);
  free(after);
  ir_graph_free(g);
}

/* Every combination of causal, rank 3 (2, T, 3) or 4 (2, 2, T, 3), and T = 1 or 5. */
static void check_all(bool grad, int ndev, double scale) {
  for (int causal = 0; causal < 2; causal++)
    for (int32_t rank = 3; rank <= 4; rank++)
      for (int64_t t = 1; t <= 5; t += 4) {
        Case c = {.rank = rank, .causal = causal, .grad = grad, .ndev = ndev, .scale = scale};
        for (int32_t d = 0; d < rank - 2; d++) c.dims[d] = 2;
        c.dims[rank - 2] = t;
        c.dims[rank - 1] = 3;
        check_case(&c);
      }
}

static void test_attention(void) { check_all(false, 1, 0); }
/* Grouped-query: (2, 6, T, 3) queries against 2 and 1 key heads (groups of 3 and 6), causal or
 * not, T = 1 and 5, the forward and attention_grad's (2, K, G + 2, T, 3): the expansion
 * broadcasts k and v to the query heads and sums dk and dv over each group. */
static void test_grouped(void) {
  for (int grad = 0; grad < 2; grad++)
    for (int causal = 0; causal < 2; causal++)
      for (int64_t kv = 1; kv <= 2; kv++)
        for (int64_t t = 1; t <= 5; t += 4) {
          Case c = {
              .rank = 4, .dims = {2, 6, t, 3}, .causal = causal, .grad = grad, .ndev = 1, .kv = kv};
          check_case(&c);
        }
}
static void test_attention_grad(void) { check_all(true, 1, 0); }
/* Query positions: 3 queries at 0, 1, 2 (the first chunk: keys 3 and 4 seen by none), and at
 * 2, 3, 4 (the last), of 5 keys; 1 query at 3 (the mask's edge); grouped and not, causal and
 * not, forward and gradient. */
static void test_positions(void) {
  static const int64_t tq[3] = {3, 3, 1}, off[3] = {0, 2, 3};
  for (int grad = 0; grad < 2; grad++)
    for (int causal = 0; causal < 2; causal++)
      for (int64_t kv = 0; kv <= 2; kv += 2)
        for (int i = 0; i < 3; i++) {
          Case c = {.rank = 4,
                    .dims = {2, 4, tq[i], 3},
                    .causal = causal,
                    .grad = grad,
                    .ndev = 1,
                    .kv = kv,
                    .tk = 5,
                    .off = off[i]};
          check_case(&c);
        }
}
static void test_mesh(void) {
  check_all(false, 2, 0);
  check_all(true, 2, 0);
}
/* Scores in the thousands: exp overflows unless the row max comes off first. */
static void test_large_scores(void) {
  check_all(false, 1, 400);
  check_all(true, 1, -400);
}

/* A graph without attention is left alone (the same text). */
static void test_nothing_to_do(void) {
  char msg[IR_ERR_LEN];
  const char *text = "%0 = input \"x\" : f32[2,3]\n"
                     "%1 = exp %0 : f32[2,3]\n"
                     "output \"y\" = %1\n";
  IrGraph *g = ir_graph_parse(text, msg, sizeof msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(pass_expand(g, NULL), IR_OK);
  char *got = ir_graph_to_string(g);
  CU_ASSERT_STRING_EQUAL(got, text);
  free(got);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"attention", test_attention},           {"grouped-query attention", test_grouped},
      {"attention_grad", test_attention_grad}, {"two_devices", test_mesh},
      {"query_positions", test_positions},     {"large_scores", test_large_scores},
      {"nothing_to_do", test_nothing_to_do},   {NULL, NULL},
  };
  return test_main(argc, argv, "expand", cases);
}
