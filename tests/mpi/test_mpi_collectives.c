/* test_mpi_collectives.c: the runtime's collectives (runtime/comm.c), reached through the LLVM
 * backend's lowering, against the reference interpreter. Run under `mpirun -np 4`.
 *
 * Every rank parses the same per-device program (mesh data=2 x model=2): each collective kind
 * over several axis groupings and orders, i32 data movement, and a small hand-sharded step
 * (a column-parallel product, an all_gather, a scalar all_reduce). Each rank then runs the
 * interpreter over the whole simulated mesh, runs the compiled step as its own device, and
 * compares its outputs with the interpreter's for its device: collectives bit for bit, the
 * product within float rounding.
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llvm/llvm.h"
#include "tests/backends/backend_test.h"

static const char *GRAPH =
    "mesh data=2 model=2\n"
    "%0 = input \"x\" : f32[4,6]\n"
    "%1 = input \"k\" : i32[4,2]\n"
    "%2 = all_reduce %0 mesh_axes=[data] : f32[4,6]\n"
    "%3 = all_reduce %0 mesh_axes=[model,data] : f32[4,6]\n"
    "%4 = all_reduce %0 mesh_axes=[data,model] : f32[4,6]\n"
    "%5 = all_gather %0 mesh_axes=[model] axis=1 : f32[4,12]\n"
    "%6 = all_gather %0 mesh_axes=[data,model] axis=0 : f32[16,6]\n"
    "%7 = all_gather %0 mesh_axes=[model,data] axis=1 : f32[4,24]\n"
    "%8 = reduce_scatter %0 mesh_axes=[data] axis=1 : f32[4,3]\n"
    "%9 = reduce_scatter %0 mesh_axes=[model,data] axis=0 : f32[1,6]\n"
    "%10 = all_to_all %0 mesh_axes=[model] split_axis=0 concat_axis=1 : f32[2,12]\n"
    "%11 = all_to_all %0 mesh_axes=[data,model] split_axis=0 concat_axis=0 : f32[4,6]\n"
    "%12 = all_to_all %0 mesh_axes=[data] split_axis=1 concat_axis=0 : f32[8,3]\n"
    "%13 = local_slice %0 mesh_axes=[data] axis=1 : f32[4,3]\n"
    "%14 = local_slice %0 mesh_axes=[model,data] axis=0 : f32[1,6]\n"
    "%15 = all_gather %1 mesh_axes=[data] axis=0 : i32[8,2]\n"
    "%16 = all_reduce %1 mesh_axes=[model] : i32[4,2]\n"
    "%17 = all_to_all %1 mesh_axes=[model] split_axis=0 concat_axis=1 : i32[2,4]\n"
    "%18 = parameter \"w\" : f32[6,4]\n"
    "%19 = dot_general %0, %18 lhs_batch=[] rhs_batch=[] lhs_contract=[1] rhs_contract=[0] : "
    "f32[4,4]\n"
    "%20 = all_gather %19 mesh_axes=[model] axis=1 : f32[4,8]\n"
    "%21 = tanh %20 : f32[4,8]\n"
    "%22 = reduce_sum %21 axes=[0,1] : f32[]\n"
    "%23 = all_reduce %22 mesh_axes=[data,model] : f32[]\n"
    "%24 = reduce_scatter %21 mesh_axes=[data] axis=0 : f32[2,8]\n"
    "%25 = input \"ids\" : i32[2,3]\n"
    "%26 = input \"targets\" : i32[2,3]\n"
    "%27 = input \"step\" : f32[]\n"
    /* over a MiB a block: the runtime moves these in rounds of RT_COMM_CHUNK_BYTES */
    "%28 = input \"big\" : f32[600,1000]\n"
    "%29 = all_reduce %28 mesh_axes=[data,model] : f32[600,1000]\n"
    "%30 = all_gather %28 mesh_axes=[model] axis=1 : f32[600,2000]\n"
    "%31 = reduce_scatter %28 mesh_axes=[data] axis=1 : f32[600,500]\n"
    "%32 = all_to_all %28 mesh_axes=[data] split_axis=1 concat_axis=0 : f32[1200,500]\n"
    "output \"loss\" = %23\n"
    "output \"grad_norm\" = %27\n"
    "output \"lr\" = %27\n";

static const int32_t EXACT_LAST = 17; /* values up to here are pure data movement or f32 sums */
static const int32_t BIG_FIRST = 29, BIG_LAST = 32; /* so are these, on blocks over a MiB */

static int rank, world;

/* The device's data for a leaf: a function of (device, name, index). */
static void leaf_data(const IrValue *x, int64_t dev, double *d) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(dev + 1) + (uint64_t)strlen(x->name) * 7919u;
  for (int64_t i = 0, n = ir_shape_numel(&x->shape); i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) / 9007199254740992.0;
    d[i] = x->dtype == DT_I32 ? (double)(int)(u * 1000) - 500 : (double)(float)(2 * u - 1);
  }
}

static IrInterp *interp_all(IrGraph *g, int64_t ndev) {
  IrInterp *it = ir_interp_new(g, NULL);
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_INPUT && x->op != IR_PARAMETER) continue;
    double *d = malloc((size_t)ir_shape_numel(&x->shape) * sizeof *d + 8);
    for (int64_t dev = 0; dev < ndev; dev++) {
      leaf_data(x, dev, d);
      ir_interp_set(it, dev, x->name, x->shape.rank, x->shape.dims, d);
    }
    free(d);
  }
  if (ir_interp_run(it)) fprintf(stderr, "interp: %s\n", ir_interp_error(it));
  return it;
}

static void fill_slab(IrGraph *g, const MemPlan *mp, char *slab) {
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (x->op != IR_INPUT && x->op != IR_PARAMETER) continue;
    int64_t n = ir_shape_numel(&x->shape);
    double *d = malloc((size_t)n * sizeof *d + 8);
    leaf_data(x, rank, d);
    for (int64_t i = 0; i < n; i++) {
      if (x->dtype == DT_I32)
        ((int32_t *)(void *)(slab + mp->offset[v]))[i] = (int32_t)d[i];
      else
        ((float *)(void *)(slab + mp->offset[v]))[i] = (float)d[i];
    }
    free(d);
  }
}

/* Compares value v of this rank's slab with the interpreter's value on this device. */
static int compare(const IrGraph *g, IrInterp *it, const MemPlan *mp, const char *slab, int32_t v) {
  const IrValue *x = &g->values[v];
  const double *want = ir_interp_value(it, rank, v);
  int bad = 0;
  for (int64_t i = 0, n = ir_shape_numel(&x->shape); i < n && !bad; i++) {
    double have = x->dtype == DT_I32 ? ((const int32_t *)(const void *)(slab + mp->offset[v]))[i]
                                     : ((const float *)(const void *)(slab + mp->offset[v]))[i];
    bool ok = v <= EXACT_LAST || v >= BIG_FIRST
                  ? have == want[i]
                  : fabs(have - want[i]) <= 1e-5 * (1 + fabs(want[i]));
    if (!ok) {
      fprintf(stderr, "rank %d: %%%d (%s) element %lld: %.9g, interpreter %.9g\n", rank, v,
              ir_op_name(x->op), (long long)i, have, want[i]);
      bad = 1;
    }
  }
  return bad;
}

static void test_collectives(void) {
  char msg[512];
  IrGraph *g = ir_graph_parse(GRAPH, msg, sizeof msg);
  if (!g) fprintf(stderr, "parse: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL_FATAL(ir_graph_verify(g, msg, sizeof msg), IR_OK);
  for (int32_t v = 2; v <= BIG_LAST; v++) { /* outputs: nothing is dead, every value is compared */
    char name[32];
    snprintf(name, sizeof name, "v%d", v);
    if (v <= 24 || v >= BIG_FIRST) ir_graph_add_output(g, name, v);
  }
  IrInterp *it = interp_all(g, 4);
  MemPlan mp;
  bt_plan_simple(g, &mp);
  BackendProgram P = {.config = "{}", .vocab = 8, .facts = {.max_steps = 1}};
  LlvmOptions o = llvm_options_default();
  o.program = &P;
  LlvmModule *m;
  LlvmJit *jit;
  LlvmStepFn step;
  char err[1024];
  int rc = llvm_compile(g, &mp, &o, &m, err, sizeof err);
  if (rc == 0) rc = llvm_jit(m, &step, &jit, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  llvm_module_free(m);
  const RtProgram *p = llvm_jit_program(jit);
  CU_ASSERT_EQUAL(p->mesh.naxes, 2);
  CU_ASSERT_EQUAL(p->ncollectives, 23);
  RtComm *comm;
  RtError e;
  rc = rt_comm_new(&comm, &p->mesh, p->collectives, p->ncollectives, 0, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  CU_ASSERT_EQUAL(rt_comm_size(comm), 4);
  CU_ASSERT_EQUAL(rt_comm_rank(comm), rank);
  char *slab = aligned_alloc(64, (size_t)bt_align(mp.slab_bytes));
  memset(slab, 0xff, (size_t)mp.slab_bytes); /* NaN: a buffer nothing wrote shows */
  fill_slab(g, &mp, slab);
  /* The scratch is bounded by the rounds, not the tensors: 4 receive slots of a MiB for the
   * all_reduce over 4, 2 send and 2 receive slots for the reduce_scatter and all_to_all over 2
   * (whole blocks took 5 x 2.4 MB). The heap the step leaves held is that scratch. */
  CU_ASSERT_EQUAL(rt_comm_scratch_bytes(comm), 4 * RT_COMM_CHUNK_BYTES);
  struct mallinfo2 before = mallinfo2();
  p->step(slab, NULL, comm);
  struct mallinfo2 after = mallinfo2();
  int64_t held =
      (int64_t)(after.uordblks + after.hblkhd) - (int64_t)(before.uordblks + before.hblkhd);
  if (held > rt_comm_scratch_bytes(comm) + 65536)
    fprintf(stderr, "rank %d: the step holds %lld bytes of heap, the scratch is %lld\n", rank,
            (long long)held, (long long)rt_comm_scratch_bytes(comm));
  CU_ASSERT(held <= rt_comm_scratch_bytes(comm) + 65536);
  int bad = 0;
  for (int32_t v = 2; v <= BIG_LAST; v++)
    if (g->values[v].op != IR_PARAMETER && (v <= 24 || v >= BIG_FIRST))
      bad += compare(g, it, &mp, slab, v);
  CU_ASSERT_EQUAL(bad, 0);
  /* the same step again gives the same bits (determinism) */
  char *again = aligned_alloc(64, (size_t)bt_align(mp.slab_bytes));
  memcpy(again, slab, (size_t)mp.slab_bytes);
  fill_slab(g, &mp, again);
  p->step(again, NULL, comm);
  CU_ASSERT_EQUAL(memcmp(again, slab, (size_t)mp.slab_bytes), 0);
  CU_ASSERT(rt_comm_bytes_sent(comm) > 0);
  int64_t sum[2] = {rank, 1};
  CU_ASSERT_EQUAL(rt_comm_sum_i64(comm, sum, 2, &e), 0);
  CU_ASSERT_EQUAL(sum[0], 0 + 1 + 2 + 3);
  CU_ASSERT_EQUAL(sum[1], 4);
  free(again);
  free(slab);
  rt_comm_free(comm); /* finalizes MPI */
  llvm_jit_free(jit);
  ir_interp_free(it);
  free(mp.offset);
  free(mp.bytes);
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  rank = atoi(getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : "0");
  world = atoi(getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : "1");
  if (world != 4) {
    fprintf(stderr, "run me with mpirun -np 4 (world is %d)\n", world);
    return 1;
  }
  static const TestCase cases[] = {{"collectives against the interpreter", test_collectives},
                                   {NULL, NULL}};
  return test_main(argc, argv, "mpi_collectives", cases);
}
