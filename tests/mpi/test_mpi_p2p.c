/* test_mpi_p2p.c: the pipeline's point-to-point messages (runtime/comm.c: RT_COLL_SEND,
 * RT_COLL_RECV, rt_comm_stage_share) called directly with a hand-written collective table, as
 * the LLVM backend's step calls them. Run under `mpirun -np 2` (mesh pipeline=2) or `mpirun
 * -np 4` (pipeline=2 x data=2).
 *
 * Stage 0 sends A (f32) and then B (bf16) to stage 1, which receives B first: messages match by
 * their send's tag, not by their order. Stage 1 sends C back. Each device's data names its data
 * coordinate, so a message from another data replica shows. Three steps reuse the requests; the
 * bytes sent are those rt_comm_step_bytes predicts. A share gives stage 1's bytes to stage 0.
 * A recv that names no send is refused by rt_comm_new. One case: MPI is finalized with the
 * first communicator, so the refused tables come while it lives.
 */
#include "tests/cunit_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/axrt.h"

static int rank, world;
static RtMesh mesh;

enum {
  A_IN = 0,
  A_SEND = 64,
  B_IN = 128,
  B_SEND = 192,
  B_RECV = 256,
  A_RECV = 320,
  C_IN = 384,
  C_SEND = 448,
  C_RECV = 512,
  SLAB = 1024
};

static RtCollective p2p(int32_t kind, int32_t dtype, int64_t n, int32_t axis, int32_t axis2,
                        int64_t in, int64_t out) {
  RtCollective k = {
      .kind = kind, .dtype = dtype, .naxes = 1, .axis = axis, .axis2 = axis2, .rank = 1};
  k.axes[0] = 0; /* the pipeline, outermost */
  k.in_shape[0] = k.out_shape[0] = n;
  k.in_offset = in;
  k.out_offset = out;
  return k;
}

/* The table: 0 send A 0->1, 1 send B 0->1, 2 recv B, 3 recv A, 4 send C 1->0, 5 recv C. */
static void table(RtCollective *t) {
  t[0] = p2p(RT_COLL_SEND, RT_DT_F32, 3, 1, 0, A_IN, A_SEND);
  t[1] = p2p(RT_COLL_SEND, RT_DT_BF16, 5, 1, 0, B_IN, B_SEND);
  t[2] = p2p(RT_COLL_RECV, RT_DT_BF16, 5, 0, 1, B_SEND, B_RECV);
  t[3] = p2p(RT_COLL_RECV, RT_DT_F32, 3, 0, 0, A_SEND, A_RECV);
  t[4] = p2p(RT_COLL_SEND, RT_DT_F32, 2, 0, 1, C_IN, C_SEND);
  t[5] = p2p(RT_COLL_RECV, RT_DT_F32, 2, 1, 4, C_SEND, C_RECV);
}

static float *f32(char *slab, int64_t off) { return (float *)(void *)(slab + off); }
static uint16_t *b16(char *slab, int64_t off) { return (uint16_t *)(void *)(slab + off); }

static void errors(void);

static void test_p2p(void) {
  RtCollective t[6];
  table(t);
  RtComm *comm;
  RtError e;
  int rc = rt_comm_new(&comm, &mesh, t, 6, 0, &e);
  CHECK_MSG(rc == 0, "rt_comm_new: %.2000s", rc ? e.msg : "");
  if (rc) return;
  int64_t stage = rt_comm_coord(comm, 0), data = world == 4 ? rt_comm_coord(comm, 1) : 0;
  char *slab = calloc(1, SLAB);
  for (int step = 1; step <= 3; step++) {
    for (int i = 0; i < 3; i++) f32(slab, A_IN)[i] = (float)(100 * step + 10 * data + i);
    for (int i = 0; i < 5; i++)
      b16(slab, B_IN)[i] = rt_bf16_from_f32((float)(-step - 10 * data - i));
    for (int i = 0; i < 2; i++) f32(slab, C_IN)[i] = (float)(1000 * step + 10 * data + i);
    /* the step's order on every rank; each collective runs where the generated step runs it */
    static const int on[6][2] = {{1, 0}, {1, 0}, {1, 1}, {1, 1}, {0, 1}, {1, 1}};
    for (int k = 0; k < 6; k++)
      if (on[k][stage]) rt_comm_collective(comm, k, slab);
    if (stage == 1) {
      for (int i = 0; i < 3; i++) CHECK_NEAR(f32(slab, A_RECV)[i], 100 * step + 10 * data + i, 0);
      for (int i = 0; i < 5; i++)
        CHECK_NEAR(rt_bf16_to_f32(b16(slab, B_RECV)[i]), -step - 10 * data - i, 0);
      for (int i = 0; i < 2; i++) CHECK_NEAR(f32(slab, C_SEND)[i], 1000 * step + 10 * data + i, 0);
    } else {
      for (int i = 0; i < 2; i++) CHECK_NEAR(f32(slab, C_RECV)[i], 1000 * step + 10 * data + i, 0);
      for (int i = 0; i < 3; i++) CHECK_NEAR(f32(slab, A_SEND)[i], 100 * step + 10 * data + i, 0);
    }
  }
  /* stage 0 sends A (12 bytes) and B (10), stage 1 sends C (8), each step */
  CHECK_INT(rt_comm_step_bytes(comm), stage == 0 ? 22 : 8);
  CHECK_INT(rt_comm_bytes_sent(comm), 3 * rt_comm_step_bytes(comm));
  CHECK(rt_comm_p2p_wait_s(comm) >= 0);
  CHECK_INT(rt_comm_scratch_bytes(comm), 0); /* from and into the slab: no scratch */
  /* the share: stage 1's C_SEND bytes replace stage 0's */
  memset(slab + C_SEND, stage == 0 ? 0x55 : 0, 8);
  if (stage == 1)
    for (int i = 0; i < 2; i++) f32(slab, C_SEND)[i] = (float)(7 + data + i);
  rt_comm_stage_share(comm, 0, 1, slab, C_SEND, 8);
  for (int i = 0; i < 2; i++) CHECK_NEAR(f32(slab, C_SEND)[i], 7 + data + i, 0);
  free(slab);
  errors();
  rt_comm_free(comm);
}

static void errors(void) {
  RtCollective t[6];
  table(t);
  t[3].axis2 = 2; /* a recv naming a recv */
  RtComm *comm = NULL;
  RtError e;
  CHECK_INT(rt_comm_new(&comm, &mesh, t, 6, 0, &e), -1);
  CHECK_HAS(
      e.msg,
      "program: collective 3: a recv without one pipeline axis of 2 or more stages, or with bad "
      "stages or send");
  table(t);
  t[0].axis = 0; /* a send to its own stage */
  CHECK_INT(rt_comm_new(&comm, &mesh, t, 6, 0, &e), -1);
  CHECK_HAS(e.msg, "program: collective 0: a send without");
}

int main(int argc, char **argv) {
  rank = atoi(getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : "0");
  world = atoi(getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : "1");
  mesh.naxes = world == 4 ? 2 : 1;
  mesh.names[0] = "pipeline";
  mesh.sizes[0] = 2;
  mesh.names[1] = "data";
  mesh.sizes[1] = 2;
  static const TestCase cases[] = {{"p2p", test_p2p}, {NULL, NULL}};
  return test_main(argc, argv, "mpi_p2p", cases);
}
