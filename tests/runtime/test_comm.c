/*
 * test_comm.c: the collectives (comm.c) in one process, where every group has one member:
 * bf16 operands are copied as 2-byte elements (an all_reduce of one member is its operand,
 * NaN included, -0 summed to +0 as the interpreter does), i32 and f32 as before, nothing is sent; a
 * table with a dtype the runtime does not move is refused with the dtypes it does. The sums over
 * several ranks are tested under mpirun (tests/mpi/test_mpi_comm_bf16.c). The local rank and
 * node size come from each launcher's variables (Open MPI, MPICH, srun's tasks-per-node list).
 */
#include <stdlib.h>

#include "rt_test.h"

static const RtMesh MESH1 = {.naxes = 1, .names = {"data"}, .sizes = {1}};

/* A collective over the one axis, operand (3, 5) at in_offset, result at out_offset. */
static RtCollective coll(int kind, int dtype, int64_t in_offset, int64_t out_offset) {
  return (RtCollective){.kind = kind,
                        .dtype = dtype,
                        .naxes = 1,
                        .axes = {0},
                        .axis = 1,
                        .axis2 = 0,
                        .rank = 2,
                        .in_shape = {3, 5},
                        .out_shape = {3, 5},
                        .in_offset = in_offset,
                        .out_offset = out_offset};
}

static void test_one_member_bf16(void) {
  enum { N = 15 };
  RtCollective t[] = {
      coll(RT_COLL_ALL_REDUCE, RT_DT_BF16, 0, 64),
      coll(RT_COLL_REDUCE_SCATTER, RT_DT_BF16, 0, 128),
      coll(RT_COLL_ALL_GATHER, RT_DT_BF16, 0, 192),
      coll(RT_COLL_ALL_TO_ALL, RT_DT_BF16, 0, 256),
      coll(RT_COLL_LOCAL_SLICE, RT_DT_BF16, 0, 320),
      coll(RT_COLL_ALL_REDUCE, RT_DT_F32, 384, 448),
      coll(RT_COLL_ALL_REDUCE, RT_DT_BF16, 512, 512), /* in place */
  };
  int nc = (int)(sizeof t / sizeof t[0]);
  RtComm *comm;
  RtError err;
  CHECK_OK(rt_comm_new(&comm, &MESH1, t, nc, 0, &err));
  CHECK_INT(rt_comm_size(comm), 1);
  unsigned char slab[640];
  memset(slab, 0xa5, sizeof slab); /* what no collective writes keeps this */
  uint16_t x[N];
  float f[N];
  for (int i = 0; i < N; i++) {
    x[i] = rt_bf16_from_f32((float)(i - 7) * 0.3f);
    f[i] = (float)(i - 7) * 0.3f;
  }
  x[3] = 0x7fc1; /* a NaN stays that NaN */
  x[4] = 0x8000; /* -0 stays -0 */
  memcpy(slab, x, sizeof x);
  memcpy(slab + 384, f, sizeof f);
  memcpy(slab + 512, x, sizeof x);
  for (int i = 0; i < nc; i++) rt_comm_collective(comm, i, (char *)slab);
  for (int i = 0; i < nc; i++) {
    if (t[i].dtype == RT_DT_F32) {
      CHECK_INT(memcmp(slab + t[i].out_offset, f, sizeof f), 0);
      continue;
    }
    uint16_t want[N];
    memcpy(want, x, sizeof x);
    if (t[i].kind == RT_COLL_ALL_REDUCE || t[i].kind == RT_COLL_REDUCE_SCATTER)
      want[4] = 0; /* a sum starts from +0, as the interpreter's: -0 + nothing is +0 */
    CHECK_INT(memcmp(slab + t[i].out_offset, want, sizeof want), 0);
    CHECK_INT(slab[t[i].out_offset + sizeof x], 0xa5); /* 2-byte elements: nothing past 30 bytes */
  }
  CHECK_INT(rt_comm_bytes_sent(comm), 0);
  CHECK_INT(rt_comm_step_bytes(comm), 0);
  rt_comm_free(comm);
}

static void test_bad_dtype(void) {
  RtCollective t[] = {coll(RT_COLL_ALL_GATHER, RT_DT_BF16, 0, 64),
                      coll(RT_COLL_ALL_REDUCE, RT_DT_F16, 0, 64)};
  RtComm *comm = NULL;
  RtError err;
  CHECK_FAIL(rt_comm_new(&comm, &MESH1, t, 2, 0, &err), "collective 1: dtype");
  CHECK_FAIL(rt_comm_new(&comm, &MESH1, t, 2, 0, &err), "bf16");
  CU_ASSERT_PTR_NULL(comm);
}

/* The local rank and node size from each launcher's environment (an OpenCL rank's device). */
static void test_local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "MPI_LOCALRANKID",
                                     "MPI_LOCALNRANKS",
                                     "SLURM_LOCALID",
                                     "SLURM_TASKS_PER_NODE",
                                     "SLURM_STEP_TASKS_PER_NODE",
                                     "SLURM_NODEID",
                                     "PMI_LOCAL_RANK",
                                     "PMI_LOCAL_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  int r = -1, n = -1;
  const char *from = "x";
  CHECK_INT(rt_comm_local_rank(&r, &n, &from), 0);
  CHECK_INT(r, 0);
  CHECK_INT(n, 1);
  CU_ASSERT_PTR_NULL(from);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_TASKS_PER_NODE", "2(x3),1", 1);
  setenv("SLURM_NODEID", "2", 1); /* the third node of three with 2 */
  CHECK_INT(rt_comm_local_rank(&r, &n, &from), 1);
  CHECK_INT(r, 1);
  CHECK_INT(n, 2);
  CU_ASSERT_STRING_EQUAL(from, "SLURM_LOCALID");
  setenv("SLURM_NODEID", "3", 1); /* the last node has 1: the rank says more; size unknown */
  CHECK_INT(rt_comm_local_rank(&r, &n, &from), 1);
  CHECK_INT(n, 0);
  setenv("SLURM_STEP_TASKS_PER_NODE", "4(x4)", 1); /* the step's count wins */
  CHECK_INT(rt_comm_local_rank(&r, &n, &from), 1);
  CHECK_INT(n, 4);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1); /* Open MPI's first */
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
  CHECK_INT(rt_comm_local_rank(&r, &n, &from), 1);
  CHECK_INT(r, 3);
  CHECK_INT(n, 8);
  CU_ASSERT_STRING_EQUAL(from, "OMPI_COMM_WORLD_LOCAL_RANK");
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  setenv("MPI_LOCALRANKID", "2", 1);
  setenv("MPI_LOCALNRANKS", "4", 1);
  CHECK_INT(rt_comm_local_rank(&r, &n, &from), 1);
  CHECK_INT(r, 2);
  CHECK_INT(n, 4);
  unsetenv("MPI_LOCALRANKID");
  unsetenv("MPI_LOCALNRANKS");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"the local rank from the launcher's environment", test_local_rank},
      {"one member: bf16 collectives copy 2-byte elements", test_one_member_bf16},
      {"a collective dtype the runtime does not move is refused", test_bad_dtype},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "comm", cases);
}
