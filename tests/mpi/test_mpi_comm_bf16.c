/* test_mpi_comm_bf16.c: the runtime's collectives (runtime/comm.c) on bf16 operands, called
 * directly with a hand-written collective table. Run under `mpirun -np 2` (mesh data=2) or
 * `mpirun -np 4` (mesh data=2 x model=2).
 *
 * A sum over the group must be the exact sum, added in group-rank order, rounded once to bf16
 * (the interpreter's semantics), never a bf16 sum per hop: the operands hold elements built so
 * that adding in bf16 one member at a time loses a tie that the exact sum wins (1 + 2^-8 + 2^-8
 * is 1 + 2^-7, while (1 + 2^-8) rounds to 1 first), and one where rounding the sum to f32 first
 * lands on a bf16 tie (1 + 2^-8 + 2^-40). all_gather, all_to_all and local_slice move 2-byte
 * elements: a 4-byte stride would show as wrong neighbours. The bytes sent are the 2-byte
 * elements, as rt_comm_step_bytes counts them.
 */
#include "tests/cunit_check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/axrt.h"

#define ROWS      4
#define COLS      2
#define N         (ROWS * COLS)
#define MAX_COLLS 12

static int rank, world;
static RtMesh mesh;

/* The bf16 bits of 2^e. */
static uint16_t pow2(int e) { return rt_bf16_from_f32(ldexpf(1.0f, e)); }

/* Element i of world rank r's operand (bf16 bits). Elements 0..4 are built per group rank of
 * the whole mesh (world rank); the rest are pseudo-random values in [-4, 4). */
static uint16_t operand(int r, int i) {
  static const float tie[5][4] = {
      {1.0f, 0x1p-8f, 0x1p-8f, 0.0f},    /* exact 1 + 2^-7; per hop 1 */
      {1.0f, 0x1p-8f, 0x1p-40f, 0.0f},   /* exact just above the tie 1 + 2^-8: 1 + 2^-7 */
      {3.0f, 0x1p-7f, 0x1p-7f, 0x1p-7f}, /* exact 3 + 1.5 ulp: 3 + 2^-5; per hop 3 */
      {256.0f, 1.0f, 0.5f, 0.5f},        /* exact 258; per hop 256 */
      {-3.0f, 1.5f, 0.25f, 1.25f},       /* exact 0 */
  };
  if (i < 5) return rt_bf16_from_f32(tie[i][r]);
  uint32_t s = (uint32_t)(r * 131 + i * 7919 + 17) * 2654435761u;
  return rt_bf16_from_f32(((float)(s >> 8) / 16777216.0f) * 8.0f - 4.0f);
}

/* Reference rounding, independent of comm.c's: the double's 52 fraction bits cut to bf16's 7,
 * ties to even. Only for the normal range, which every sum here is in (or zero). */
static uint16_t ref_bf16(double x) {
  if (x == 0) return 0;
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  const uint64_t cut = (uint64_t)1 << 45;
  u += cut / 2 - 1 + ((u / cut) & 1);
  u &= ~(cut - 1);
  double y;
  memcpy(&y, &u, sizeof y);
  return rt_bf16_from_f32((float)y); /* exact */
}

/* World ranks of this device's group over k's axes, in group order; returns the group rank. */
static int group(const RtCollective *k, int *members, int *n) {
  int64_t c[RT_MAX_MESH_AXES], co[RT_MAX_MESH_AXES];
  rt_mesh_coords(mesh.naxes, mesh.sizes, rank, c);
  int me = 0;
  *n = 1;
  for (int a = 0; a < k->naxes; a++) {
    *n *= (int)mesh.sizes[k->axes[a]];
    me = me * (int)mesh.sizes[k->axes[a]] + (int)c[k->axes[a]];
  }
  for (int j = 0; j < *n; j++) {
    memcpy(co, c, sizeof co);
    for (int a = k->naxes - 1, r = j; a >= 0; a--) {
      co[k->axes[a]] = r % mesh.sizes[k->axes[a]];
      r /= (int)mesh.sizes[k->axes[a]];
    }
    members[j] = (int)rt_mesh_device(mesh.naxes, mesh.sizes, co);
  }
  return me;
}

/* The expected result of k on this device, written out element by element (operands ROWS x
 * COLS, axes 0 or 1). */
static void expect(const RtCollective *k, uint16_t *out) {
  int m[16], n, me = group(k, m, &n);
  int oc = (int)k->out_shape[1];
  for (int i = 0; i < (int)k->out_shape[0]; i++)
    for (int c = 0; c < oc; c++) {
      int ri = i, ci = c, from = rank; /* the source element, for the moving kinds */
      double s = 0;
      switch (k->kind) {
      case RT_COLL_ALL_REDUCE:
      case RT_COLL_REDUCE_SCATTER:
        if (k->kind == RT_COLL_REDUCE_SCATTER) {
          if (k->axis == 0)
            ri = me * (int)k->out_shape[0] + i;
          else
            ci = me * oc + c;
        }
        for (int j = 0; j < n; j++) s += rt_bf16_to_f32(operand(m[j], ri * COLS + ci));
        out[i * oc + c] = ref_bf16(s);
        continue;
      case RT_COLL_ALL_GATHER: /* member j's operand j-th along axis */
        if (k->axis == 0)
          from = m[i / ROWS], ri = i % ROWS;
        else
          from = m[c / COLS], ci = c % COLS;
        break;
      case RT_COLL_ALL_TO_ALL: { /* member j's chunk `me` of axis, j-th along axis2 */
        int pr = k->axis == 0 ? ROWS / n : ROWS, pc = k->axis == 0 ? COLS : COLS / n;
        int j = k->axis2 == 0 ? i / pr : c / pc;
        int li = k->axis2 == 0 ? i % pr : i, lc = k->axis2 == 0 ? c : c % pc;
        from = m[j];
        ri = k->axis == 0 ? me * pr + li : li;
        ci = k->axis == 0 ? lc : me * pc + lc;
        break;
      }
      default: /* local_slice: this device's own chunk `me` */
        if (k->axis == 0)
          ri = me * (int)k->out_shape[0] + i;
        else
          ci = me * oc + c;
      }
      out[i * oc + c] = operand(from, ri * COLS + ci);
    }
}

/* A collective of the table: operand ROWS x COLS at `*at`, then its result, 64-byte aligned. */
static RtCollective coll(int kind, int naxes, int a0, int a1, int axis, int axis2, int64_t *at) {
  RtCollective k = {.kind = kind,
                    .dtype = RT_DT_BF16,
                    .naxes = naxes,
                    .axes = {a0, a1},
                    .axis = axis,
                    .axis2 = axis2,
                    .rank = 2,
                    .in_shape = {ROWS, COLS}};
  int n = 1;
  for (int a = 0; a < naxes; a++) n *= (int)mesh.sizes[k.axes[a]];
  int64_t *o = k.out_shape;
  o[0] = ROWS, o[1] = COLS;
  if (kind == RT_COLL_ALL_GATHER) o[axis] *= n;
  if (kind == RT_COLL_REDUCE_SCATTER || kind == RT_COLL_LOCAL_SLICE) o[axis] /= n;
  if (kind == RT_COLL_ALL_TO_ALL) o[axis] /= n, o[axis2] *= n;
  k.in_offset = *at;
  k.out_offset = *at + 64;
  *at += 128;
  return k;
}

static void test_bf16_collectives(void) {
  RtCollective t[MAX_COLLS];
  int nc = 0, all = mesh.naxes; /* the whole mesh: axes [0] or [0,1] */
  int64_t at = 0;
  t[nc++] = coll(RT_COLL_ALL_REDUCE, all, 0, 1, 0, 0, &at);
  t[nc++] = coll(RT_COLL_REDUCE_SCATTER, all, 0, 1, 0, 0, &at);
  t[nc++] = coll(RT_COLL_REDUCE_SCATTER, 1, 0, 0, 1, 0, &at); /* over data, along the columns */
  t[nc++] = coll(RT_COLL_ALL_GATHER, all, 0, 1, 1, 0, &at);
  t[nc++] = coll(RT_COLL_ALL_GATHER, 1, 0, 0, 0, 0, &at);
  t[nc++] = coll(RT_COLL_ALL_TO_ALL, all, 0, 1, 0, 1, &at);
  t[nc++] = coll(RT_COLL_ALL_TO_ALL, 1, 0, 0, 0, 0, &at);
  t[nc++] = coll(RT_COLL_LOCAL_SLICE, all, 0, 1, 0, 0, &at);
  if (world == 4) { /* groups of two over each axis, and the whole mesh in the other order */
    t[nc++] = coll(RT_COLL_ALL_REDUCE, 1, 1, 0, 0, 0, &at);
    t[nc++] = coll(RT_COLL_ALL_REDUCE, 2, 1, 0, 0, 0, &at);
    t[nc++] = coll(RT_COLL_ALL_TO_ALL, 1, 1, 0, 1, 0, &at);
  }
  RtComm *comm;
  RtError e;
  int rc = rt_comm_new(&comm, &mesh, t, nc, 0, &e);
  if (rc) fprintf(stderr, "rank %d: %s\n", rank, e.msg);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  CU_ASSERT_EQUAL(rt_comm_rank(comm), rank);
  char *slab = aligned_alloc(64, (size_t)at);
  memset(slab, 0xff, (size_t)at); /* NaN: an element nothing wrote shows */
  for (int i = 0; i < nc; i++)
    for (int j = 0; j < N; j++) ((uint16_t *)(void *)(slab + t[i].in_offset))[j] = operand(rank, j);
  for (int i = 0; i < nc; i++) rt_comm_collective(comm, i, slab);
  int bad = 0;
  for (int i = 0; i < nc && bad < 8; i++) {
    uint16_t want[4 * N];
    expect(&t[i], want);
    const uint16_t *have = (const uint16_t *)(const void *)(slab + t[i].out_offset);
    for (int j = 0; j < (int)(t[i].out_shape[0] * t[i].out_shape[1]); j++)
      if (have[j] != want[j]) {
        fprintf(
            stderr,
            "rank %d: collective %d (kind %d) element %d: %#06x (%.9g), expected %#06x (%.9g)\n",
            rank, i, t[i].kind, j, have[j], rt_bf16_to_f32(have[j]), want[j],
            rt_bf16_to_f32(want[j]));
        bad++;
      }
  }
  CU_ASSERT_EQUAL(bad, 0);
  /* The whole-mesh all_reduce of element 0 is the exact sum once rounded: 1 + 2^-7 on four
   * ranks, 1 + 2^-8 -> 1 (a tie, to even) on two. */
  uint16_t e0 = ((const uint16_t *)(const void *)(slab + t[0].out_offset))[0];
  CU_ASSERT_EQUAL(e0, world == 4 ? rt_bf16_from_f32(1.0f + 0x1p-7f) : pow2(0));
  /* 2 bytes an element went out: (G - 1) blocks per collective, as the table's account says */
  CU_ASSERT_EQUAL(rt_comm_bytes_sent(comm), rt_comm_step_bytes(comm));
  CU_ASSERT_EQUAL(rt_comm_step_bytes(comm) % 2, 0);
  int64_t whole = (world - 1) * N * 2; /* the first all_reduce alone */
  CU_ASSERT(rt_comm_step_bytes(comm) > whole);
  free(slab);
  rt_comm_free(comm); /* finalizes MPI */
}

int main(int argc, char **argv) {
  rank = atoi(getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : "0");
  world = atoi(getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : "1");
  if (world != 2 && world != 4) {
    fprintf(stderr, "run me with mpirun -np 2 or -np 4 (world is %d)\n", world);
    return 1;
  }
  mesh = (RtMesh){.naxes = world == 4 ? 2 : 1, .names = {"data", "model"}, .sizes = {2, 2}};
  static const TestCase cases[] = {
      {"bf16 collectives: one rounding of the exact sum, 2-byte moves", test_bf16_collectives},
      {NULL, NULL}};
  return test_main(argc, argv, "mpi_comm_bf16", cases);
}
