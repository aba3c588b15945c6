/* test_bf16.c: bf16 values through the LLVM backend, against the interpreter.
 *
 * The backend stores bf16 as uint16_t and computes in f32, rounding every op's result to bf16
 * as the interpreter rounds (backends/llvm/types.c); the interpreter computes in double and
 * rounds once. So results agree exactly where one rounding of the same number is all there is
 * (data movement, casts, max), and otherwise to a bf16 ulp or so: RTOL is 2^-7 relative (the
 * tolerance of backend_test.h: relative to each element plus a hundredth of the largest).
 * Each test runs bt_check's variants: fused at O3 on three plans and split over threads, and
 * unfused at O0 without BLAS (so dot_general takes the loop nest there and rt_sbgemm at O3).
 */
#include "backend_test.h"

#define RTOL            (1.0 / 128)
#define OUT(g, name, v) CU_ASSERT_EQUAL(ir_graph_add_output((g), (name), (v)), IR_OK)

static const int64_t D35[] = {3, 5};

/* Casts both ways, exactly: ties to even, NaN, infinities, overflow, subnormals, -0; bf16 to
 * i32 truncating and saturating; i32 to bf16 rounding once. */
/* The cases backend_ops and backend_bf16 share (op_cases.c), on bf16. */
OP_CASES(DT_BF16, RTOL)

static void test_casts(void) {
  IrGraph *g = ir_graph_new();
  const int64_t n[] = {24};
  int32_t f = ir_param(g, "f", DT_F32, 1, n), i = ir_input(g, "i", DT_I32, 1, n);
  int32_t h = ir_param(g, "h", DT_BF16, 1, n);
  const double e = 1.0 / 256; /* half a bf16 ulp at 1 */
  double fd[24] = {1 + e,        1 + 3 * e, 1 + e + 1.0 / 65536,
                   -(1 + 3 * e), 1 - e / 2, 0.1,
                   -0.3,         NAN,       INFINITY,
                   -INFINITY,    3.4e38,    -3.39e38,
                   1e-39,        -1e-40,    1.1754944e-38,
                   -0.0,         0,         65535.5,
                   1e30,         -7.25,     2.5e-3,
                   1 + 2 * e,    3.3961e38, -1e-45};
  double id[24] = {
      0,       1,     -1, 255, 257, 259,  16777217, -16777219, 2147483647, -2147483647 - 1,
      1000003, 65537, 7,  -7,  100, -100, 511,      513,       33554435,   12345,
      -65535,  3,     -3, 0};
  double hd[24] = {1.5,     -1.5,     2.75,      -2.75, 0.99609375, -0.99609375, 3e9,   -3e9,
                   NAN,     INFINITY, -INFINITY, 0,     -0.0,       1e-39,       65536, 256.5,
                   1.9e-38, 123,      -123,      1e38,  -1e38,      0.5,         7.875, -7.875};
  OUT(g, "f_to_bf16", ir_cast(g, f, DT_BF16));
  OUT(g, "i_to_bf16", ir_cast(g, i, DT_BF16));
  OUT(g, "bf16_to_f32", ir_cast(g, h, DT_F32));
  OUT(g, "bf16_to_i32", ir_cast(g, h, DT_I32));
  OUT(g, "round_trip", ir_cast(g, ir_cast(g, f, DT_BF16), DT_F32));
  BtBind binds[] = {{"f", fd}, {"i", id}, {"h", hd}};
  bt_check(g, binds, 3, 0);
  ir_graph_free(g);
}

/* Sums rounded once from their double: row 0 is 1 + 2^-8, a bf16 tie (between 1 and 1 + 2^-7)
 * that goes to 1; row 1 is 1 + 2^-8 + 2^-30, just past the tie, so 1 + 2^-7, where rounding the
 * double to float first (1 + 2^-8) and then to bf16 would give 1. */
static void test_reduce_round_once(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d[] = {2, 34};
  int32_t x = ir_param(g, "x", DT_BF16, 2, d);
  const int32_t last[] = {1};
  OUT(g, "sum", ir_reduce_sum(g, x, 1, last));
  double xd[68] = {0};
  xd[0] = 1;
  for (int i = 1; i < 33; i++) xd[i] = 1.0 / 8192; /* 32 x 2^-13 = 2^-8 */
  xd[33] = 0;
  xd[34] = 1;
  for (int i = 35; i < 67; i++) xd[i] = 1.0 / 8192;
  xd[67] = 1.0 / (1 << 30); /* past the tie: rounds up */
  BtBind binds[] = {{"x", xd}};
  bt_check(g, binds, 1, 0);
  ir_graph_free(g);
}

/* A sum of updates that only adds up in f32: 1 + 32 x 2^-9 is 1 + 2^-4 (bf16), while adding
 * into the bf16 result one at a time would leave 1 (each 2^-9 is under half an ulp). */
static void test_scatter_round_once(void) {
  IrGraph *g = ir_graph_new();
  const int64_t ni[] = {33}, nd[] = {33, 2};
  int32_t idx = ir_input(g, "idx", DT_I32, 1, ni), upd = ir_param(g, "upd", DT_BF16, 2, nd);
  OUT(g, "scatter", ir_scatter_add(g, idx, upd, 2));
  double id[33] = {0}, ud[66];
  for (int i = 0; i < 66; i++) ud[i] = i < 2 ? 1 : 1.0 / 512;
  BtBind binds[] = {{"idx", id}, {"upd", ud}};
  bt_check(g, binds, 2, 0);
  ir_graph_free(g);
}

/* Data movement is exact: broadcast, reshape, transposes (tiled and not), slice, concat, pad,
 * iota, constants (rounded once from their double), and one-device collectives. */
static void test_layout(void) {
  IrGraph *g = ir_graph_new();
  IrMesh mesh = {.naxes = 1, .names = {"data"}, .sizes = {1}};
  CU_ASSERT_EQUAL(ir_graph_set_mesh(g, &mesh), IR_OK);
  const int64_t d3[] = {2, 3, 4}, d5[] = {5}, d2x12[] = {2, 12}, d53[] = {5, 3}, big[] = {40, 70};
  int32_t x = ir_param(g, "x", DT_BF16, 3, d3), v = ir_param(g, "v", DT_BF16, 1, d5);
  int32_t t = ir_param(g, "t", DT_BF16, 2, big);
  const int32_t b1[] = {1}, b0[] = {0}, perm[] = {2, 0, 1}, p10[] = {1, 0};
  OUT(g, "bcast_row", ir_broadcast(g, v, 2, d53, b0));
  OUT(g, "bcast_col", ir_broadcast(g, v, 2, D35, b1));
  OUT(g, "reshape", ir_reshape(g, x, 2, d2x12));
  OUT(g, "transpose", ir_transpose(g, x, perm));
  OUT(g, "transpose_tiles", ir_transpose(g, t, p10));
  const int64_t lo[] = {1, 0, 1}, hi[] = {2, 3, 3};
  OUT(g, "slice", ir_slice(g, x, lo, hi));
  const int32_t parts[] = {x, ir_neg(g, x), x};
  OUT(g, "concat", ir_concat(g, 3, parts, 1));
  const int64_t pl[] = {0, 1, 2}, ph[] = {1, 0, 1};
  OUT(g, "pad", ir_pad(g, x, pl, ph, 0.1)); /* the pad value rounds to bf16 */
  const int64_t di[] = {3, 300};
  OUT(g, "iota", ir_iota(g, DT_BF16, 2, di, 1)); /* 257 and up are not all bf16 */
  double cd[5] = {1.5, -2, 0.1, 1.0 / 3, 1e-3};
  OUT(g, "const_data", ir_const_data(g, DT_BF16, cd, 1, d5));
  OUT(g, "const_splat", ir_const_scalar(g, DT_BF16, 0.7, 3, d3));
  const char *axes[] = {"data"};
  OUT(g, "all_reduce", ir_all_reduce(g, x, 1, axes));
  OUT(g, "all_gather", ir_all_gather(g, x, 1, axes, 0));
  OUT(g, "reduce_scatter", ir_reduce_scatter(g, x, 1, axes, 1));
  OUT(g, "all_to_all", ir_all_to_all(g, x, 1, axes, 0, 1));
  bt_check(g, NULL, 0, 0);
  ir_graph_free(g);
}

/* A fused chain of bf16 ops: every op rounds, also inside one kernel. (x + 2^-10) - x is 0 in
 * bf16 for |x| in [0.5, 1) (the add rounds back to x), 2^-10 if the add were left in f32. */
static void test_fused_chain(void) {
  IrGraph *g = ir_graph_new();
  const int64_t d[] = {4, 40};
  int32_t x = ir_param(g, "x", DT_BF16, 2, d), y = ir_param(g, "y", DT_BF16, 2, d);
  int32_t c = ir_const_scalar(g, DT_BF16, 1.0 / 1024, 2, d);
  int32_t add = ir_add(g, x, c);
  OUT(g, "absorbed", ir_sub(g, add, x));
  int32_t t = ir_mul(g, ir_tanh(g, ir_add(g, ir_mul(g, x, y), x)), ir_exp(g, y));
  OUT(g, "chain", ir_div(g, t, ir_add(g, ir_abs(g, y), ir_const_scalar(g, DT_BF16, 1, 2, d))));
  /* a cast inside a chain: f32 math on a bf16 input, rounded back to bf16 */
  int32_t f = ir_mul(g, ir_cast(g, x, DT_F32), ir_const_scalar(g, DT_F32, 1.0 / 3, 2, d));
  OUT(g, "mixed", ir_add(g, ir_cast(g, f, DT_BF16), y));
  double xd[160];
  for (int i = 0; i < 160; i++) xd[i] = (i % 2 ? -1 : 1) * (0.5 + (i % 64) / 128.0);
  BtBind binds[] = {{"x", xd}};
  bool mat[64];
  CU_ASSERT_FATAL(g->nvalues <= 64);
  CU_ASSERT_EQUAL(pass_fusion_plan(g, mat), 0);
  CU_ASSERT_FALSE(mat[add]); /* inlined into the sub's kernel */
  bt_check(g, binds, 1, RTOL);
  ir_graph_free(g);
}

/* The LLVM IR text of g compiled fused at O3 (optionally with a program table); "" on error. */
static char *ir_text(IrGraph *g, const BackendProgram *prog, LlvmModule **keep) {
  MemPlan mp;
  bt_plan_simple(g, &mp);
  LlvmOptions o = llvm_options_default();
  o.keep_ir = true;
  o.program = prog;
  char err[512] = "", *text = NULL;
  size_t len = 0;
  LlvmModule *m = NULL;
  if (llvm_compile(g, &mp, &o, &m, err, sizeof err)) fprintf(stderr, "compile: %s\n", err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  FILE *f = open_memstream(&text, &len);
  CU_ASSERT_EQUAL(llvm_emit_text(m, f, false, err, sizeof err), 0);
  fclose(f);
  if (keep)
    *keep = m;
  else
    llvm_module_free(m);
  free(mp.offset);
  free(mp.bytes);
  return text;
}

/* GEMM-shaped bf16 dots call rt_sbgemm (c_bf16 as the result's dtype says), bf16 attention the
 * runtime's bf16 kernels; f32 stays on rt_sgemm. */
static void test_runtime_calls(void) {
  IrGraph *g = ir_graph_new();
  const int64_t mk[] = {6, 8}, kn[] = {8, 5}, s[] = {1, 2, 9, 4};
  int32_t A = ir_param(g, "A", DT_BF16, 2, mk), B = ir_param(g, "B", DT_BF16, 2, kn);
  OUT(g, "mm", ir_matmul(g, A, B));
  int32_t q = ir_param(g, "q", DT_BF16, 4, s);
  OUT(g, "att", ir_attention(g, q, q, q, true, 0.5));
  OUT(g, "att_grad", ir_attention_grad(g, q, q, q, q, true, 0.5));
  char *text = ir_text(g, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "call void @rt_sbgemm("));
  CU_ASSERT_PTR_NULL(strstr(text, "@rt_sgemm("));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "call void @rt_attention_bf16("));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "call void @rt_attention_grad_bf16("));
  free(text);
  ir_graph_free(g);
}

/* On a mesh of two, a bf16 collective's table entry says RT_DT_BF16 (the runtime moves 2-byte
 * elements and sums in f32); f32 and i32 ones are as before. */
static void test_collective_dtype(void) {
  IrGraph *g = ir_graph_new();
  IrMesh mesh = {.naxes = 1, .names = {"data"}, .sizes = {2}};
  CU_ASSERT_EQUAL(ir_graph_set_mesh(g, &mesh), IR_OK);
  const char *axes[] = {"data"};
  const int64_t bt[] = {2, 3};
  int32_t ids = ir_input(g, "ids", DT_I32, 2, bt);
  OUT(g, "h", ir_all_reduce(g, ir_param(g, "h", DT_BF16, 2, D35), 1, axes));
  OUT(g, "f", ir_all_reduce(g, ir_param(g, "f", DT_F32, 2, D35), 1, axes));
  OUT(g, "i", ir_all_gather(g, ids, 1, axes, 0));
  BackendProgram prog = {.config = "{}", .vocab = 4, .facts = {.max_steps = 1}};
  LlvmModule *m = NULL;
  free(ir_text(g, &prog, &m));
  LlvmJit *jit = NULL;
  LlvmStepFn step;
  char err[512] = "";
  CU_ASSERT_EQUAL_FATAL(llvm_jit(m, &step, &jit, err, sizeof err), 0);
  const RtProgram *p = llvm_jit_program(jit);
  CU_ASSERT_FATAL(p && p->ncollectives == 3);
  CU_ASSERT_EQUAL(p->collectives[0].dtype, RT_DT_BF16);
  CU_ASSERT_EQUAL(p->collectives[1].dtype, RT_DT_F32);
  CU_ASSERT_EQUAL(p->collectives[2].dtype, RT_DT_I32);
  llvm_jit_free(jit);
  llvm_module_free(m);
  ir_graph_free(g);
}

/* A whole training step in mixed precision: a tiny MLP whose f32 parameters are cast to bf16
 * where the forward reads them (an embedding gather, a bias, two bf16 products, tanh), a
 * log-softmax cross-entropy in f32, and autodiff's gradients (scatter_add of bf16 rows, bf16
 * products of the transposed operands, casts back to f32) with one SGD update. */
static const char *const MLP =
    "%0 = parameter \"emb\" : f32[10,8]\n"
    "%1 = parameter \"w1\" : f32[8,16]\n"
    "%2 = parameter \"b1\" : f32[16]\n"
    "%3 = parameter \"w2\" : f32[16,10]\n"
    "%4 = input \"ids\" : i32[2,3]\n"
    "%5 = input \"onehot\" : f32[2,3,10]\n"
    "%6 = cast %0 : bf16[10,8]\n"
    "%7 = gather %6, %4 : bf16[2,3,8]\n"
    "%8 = cast %1 : bf16[8,16]\n"
    "%9 = dot_general %7, %8 lhs_batch=[] rhs_batch=[] lhs_contract=[2] rhs_contract=[0] : "
    "bf16[2,3,16]\n"
    "%10 = cast %2 : bf16[16]\n"
    "%11 = broadcast_in_dim %10 bdims=[2] : bf16[2,3,16]\n"
    "%12 = add %9, %11 : bf16[2,3,16]\n"
    "%13 = tanh %12 : bf16[2,3,16]\n"
    "%14 = cast %3 : bf16[16,10]\n"
    "%15 = dot_general %13, %14 lhs_batch=[] rhs_batch=[] lhs_contract=[2] rhs_contract=[0] : "
    "bf16[2,3,10]\n"
    "%16 = cast %15 : f32[2,3,10]\n"
    "%17 = reduce_max %16 axes=[2] : f32[2,3]\n"
    "%18 = broadcast_in_dim %17 bdims=[0,1] : f32[2,3,10]\n"
    "%19 = sub %16, %18 : f32[2,3,10]\n"
    "%20 = exp %19 : f32[2,3,10]\n"
    "%21 = reduce_sum %20 axes=[2] : f32[2,3]\n"
    "%22 = log %21 : f32[2,3]\n"
    "%23 = broadcast_in_dim %22 bdims=[0,1] : f32[2,3,10]\n"
    "%24 = sub %19, %23 : f32[2,3,10]\n"
    "%25 = mul %24, %5 : f32[2,3,10]\n"
    "%26 = reduce_sum %25 axes=[0,1,2] : f32[]\n"
    "%27 = constant value=-0.16666666666666666 : f32[]\n"
    "%28 = mul %26, %27 : f32[]\n"
    "output \"loss\" = %28\n";

static void test_mlp_step(void) {
  char msg[IR_ERR_LEN] = "";
  IrGraph *g = ir_graph_parse(MLP, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  PassOptions po = {0};
  if (pass_autodiff(g, &po)) fprintf(stderr, "autodiff: %s\n", ir_graph_error(g));
  CU_ASSERT_EQUAL_FATAL(g->noutputs, 5); /* loss and four gradients */
  const char *params[] = {"emb", "w1", "b1", "w2"};
  for (int i = 0; i < 4; i++) { /* new:P = P - 0.5 grad:P, over P (the memory plan's alias) */
    char name[32];
    snprintf(name, sizeof name, "grad:%s", params[i]);
    int32_t gr = ir_graph_output(g, name), p = ir_graph_find(g, IR_PARAMETER, params[i]);
    CU_ASSERT_FATAL(gr != IR_NONE && g->values[gr].dtype == DT_F32);
    const IrShape *s = &g->values[p].shape;
    int32_t step = ir_mul(g, gr, ir_const_scalar(g, DT_F32, 0.5, s->rank, s->dims));
    snprintf(name, sizeof name, "new:%s", params[i]);
    OUT(g, name, ir_sub(g, p, step));
  }
  double ids[6] = {3, 0, 9, 3, 3, 7}, hot[60] = {0}; /* repeated rows: the scatter sums */
  for (int i = 0; i < 6; i++) hot[i * 10 + (i * 7 + 2) % 10] = 1;
  BtBind binds[] = {{"ids", ids}, {"onehot", hot}};
  bt_check(g, binds, 2, RTOL);
  ir_graph_free(g);
}

/* llvm_compile with a program table fails, naming what it must. */
static void expect_program_error(IrGraph *g, const BackendProgram *prog, const char *needle) {
  MemPlan mp;
  bt_plan_simple(g, &mp);
  LlvmOptions o = llvm_options_default();
  o.program = prog;
  char err[512] = "";
  LlvmModule *m = NULL;
  CU_ASSERT_EQUAL(llvm_compile(g, &mp, &o, &m, err, sizeof err), -1);
  CU_ASSERT_PTR_NULL(m);
  if (!strstr(err, needle)) fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, needle);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
  free(mp.offset);
  free(mp.bytes);
}

/* The runtime fills parameters and reads the loss as f32: a bf16 one in a trainer's program
 * table is an error, not floats written over 2-byte elements. */
static void test_program_errors(void) {
  const int64_t bt[] = {2, 3};
  BackendParam pi = {.path = "w", .init = {.kind = RT_INIT_ZEROS}};
  BackendProgram prog = {
      .config = "{}", .vocab = 4, .facts = {.max_steps = 1}, .nparams = 1, .params = &pi};
  IrGraph *g = ir_graph_new();
  ir_input(g, "ids", DT_I32, 2, bt);
  OUT(g, "y", ir_exp(g, ir_param(g, "w", DT_BF16, 2, D35)));
  expect_program_error(g, &prog, "parameter w is bf16; the runtime keeps it in f32");
  ir_graph_free(g);
  g = ir_graph_new();
  ir_input(g, "ids", DT_I32, 2, bt);
  int32_t w = ir_param(g, "w", DT_F32, 2, D35);
  const int32_t all[] = {0, 1};
  OUT(g, "loss", ir_reduce_sum(g, ir_cast(g, w, DT_BF16), 2, all));
  expect_program_error(g, &prog, "output loss is bf16");
  ir_graph_free(g);
}

/* The sampler reads f32 logits (runtime/sample.c): bf16 logits of the sampling forward are
 * widened into an f32 copy past the forward's slab, which its RtForward table names. */
static void test_forward_logits(void) {
  const int64_t ids_d[] = {1, 4}, wd[] = {8, 6};
  IrGraph *g = ir_graph_new(), *fw = ir_graph_new();
  int32_t ids = ir_input(g, "ids", DT_I32, 2, ids_d), w = ir_param(g, "w", DT_F32, 2, wd);
  const int32_t all[] = {0, 1, 2};
  int32_t e = ir_gather(g, ir_cast(g, w, DT_BF16), ids);
  OUT(g, "loss", ir_reduce_sum(g, ir_cast(g, e, DT_F32), 3, all));
  ids = ir_input(fw, "ids", DT_I32, 2, ids_d);
  w = ir_param(fw, "w", DT_F32, 2, wd);
  int32_t lg = ir_neg(fw, ir_gather(fw, ir_cast(fw, w, DT_BF16), ids));
  CU_ASSERT_EQUAL(ir_graph_add_output(fw, "logits", lg), IR_OK);
  MemPlan mp, fmp;
  bt_plan_simple(g, &mp);
  bt_plan_simple(fw, &fmp);
  BackendParam pi = {.path = "w", .init = {.kind = RT_INIT_ZEROS}};
  BackendProgram prog = {
      .config = "{}", .vocab = 6, .facts = {.max_steps = 1}, .nparams = 1, .params = &pi};
  LlvmOptions o = llvm_options_default();
  o.program = &prog;
  o.forward = fw;
  o.forward_plan = &fmp;
  char err[512] = "";
  LlvmModule *m = NULL;
  LlvmJit *jit = NULL;
  LlvmStepFn step;
  if (llvm_compile(g, &mp, &o, &m, err, sizeof err) || llvm_jit(m, &step, &jit, err, sizeof err))
    fprintf(stderr, "forward: %s\n", err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(jit);
  llvm_module_free(m);
  const RtForward *f = llvm_jit_program(jit)->forward;
  CU_ASSERT_FATAL(f && f->slab_bytes >= fmp.slab_bytes + 24 * 4);
  CU_ASSERT(f->logits_offset >= fmp.slab_bytes && f->logits_offset % 4 == 0);
  char *slab = aligned_alloc(64, (size_t)bt_align(f->slab_bytes));
  memset(slab, 0xff, (size_t)bt_align(f->slab_bytes));
  float *wp = (float *)(slab + f->param_offsets[0]);
  for (int i = 0; i < 48; i++) wp[i] = 0.01f * (float)i - 0.2f;
  const int32_t id[4] = {5, 0, 7, 5};
  memcpy(slab + f->ids_offset, id, sizeof id);
  f->run(slab, NULL, NULL);
  const float *got = (const float *)(slab + f->logits_offset);
  for (int i = 0; i < 24; i++) {
    float x = rt_bf16_to_f32(rt_bf16_from_f32(wp[id[i / 6] * 6 + i % 6]));
    float want = -x;
    if (got[i] != want) fprintf(stderr, "logits[%d]: got %.9g, want %.9g\n", i, got[i], want);
    CU_ASSERT_EQUAL(got[i], want);
  }
  free(slab);
  llvm_jit_free(jit);
  free(mp.offset);
  free(mp.bytes);
  free(fmp.offset);
  free(fmp.bytes);
  ir_graph_free(g);
  ir_graph_free(fw);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"unary", test_unary},
      {"binary", test_binary},
      {"casts", test_casts},
      {"reduce_runs", test_reduce_runs},
      {"reduce_round_once", test_reduce_round_once},
      {"dot", test_dot},
      {"gather_scatter_topk", test_gather_scatter_topk},
      {"scatter_round_once", test_scatter_round_once},
      {"attention", test_attention},
      {"layout", test_layout},
      {"fused_chain", test_fused_chain},
      {"runtime_calls", test_runtime_calls},
      {"collective_dtype", test_collective_dtype},
      {"mlp_step", test_mlp_step},
      {"program_errors", test_program_errors},
      {"forward_logits", test_forward_logits},
      {NULL, NULL},
  };
  return test_main(argc, argv, "backend_bf16", cases);
}
