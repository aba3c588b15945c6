/*
 * comm.c: the device mesh and its collectives, on MPI.
 *
 * Device d of the mesh is rank d of MPI_COMM_WORLD (devices are numbered row-major over the
 * mesh axes). Each collective of the step acts within a group: the devices that differ from
 * this one only on the collective's axes, ranked row-major over those axes in the order
 * listed. Every distinct axis list gets its own communicator (MPI_Comm_split with color = the
 * coordinates off the axes, key = the group rank), so group rank == communicator rank.
 *
 * Every collective is the same exchange: member r sends block j of its operand to member j and
 * receives member j's block r, with point-to-point messages; then it combines what it has in
 * group-rank order. all_reduce and all_gather send the whole operand; reduce_scatter and
 * all_to_all send chunk j of the axis. Sums run in double in group-rank order and are rounded
 * once to the dtype (f32, or bf16 straight from the double), which is what the reference
 * interpreter (ir/interp.c) does, so every member gets the same bits and the interpreter's.
 * Elements travel as they are, 4 bytes (f32, i32) or 2 (bf16): the sum widens on arrival, so
 * a bf16 all_reduce sends half the bytes of an f32 one and never rounds per hop. A gather-then-sum costs (G-1) times
 * the bandwidth of a ring on big groups; determinism and bit-exact resume are worth it at these sizes.
 *
 * The exchange runs in rounds: round p moves elements [p*m, (p+1)*m) of every block, m elements
 * being RT_COMM_CHUNK_BYTES at most, and combines them before the next round. Every element is
 * still summed over all members in group-rank order, so the bits do not depend on the rounds,
 * and the scratch is n receive slots (plus n send slots where each member gets its own block)
 * of one round each: a few MiB for any tensor, where whole blocks took (n+1) times a 150 MiB
 * embedding gradient. rt_coll_scratch_bytes says how much, and axlc memcheck counts it.
 *
 * Nothing waits forever: each exchange polls (MPI_Testall) against a deadline; when it passes,
 * the ranks that have stopped are named on stderr and the job is ended with MPI_Abort. A rank
 * that dies is caught by mpirun (or srun) itself, which ends the job.
 *
 * Which rank stopped is not which rank this one waits for: when rank 3 hangs, rank 1 waits for
 * it in one group and rank 0 waits for rank 1 in another. So a rank past its deadline asks every
 * rank, on a communicator of its own, and names those that do not answer within a short grace;
 * a waiting rank answers from its polling loop, a stopped or hung one cannot.
 *
 * Pipeline stages exchange activations point to point (RT_COLL_SEND, RT_COLL_RECV), on the
 * communicator of the pipeline axis: a send copies its operand into its own buffer and posts an
 * MPI_Isend from there; the matching recv, later in the step's order, receives on the other
 * stage (MPI_Irecv, waited for against the deadline) and, on the sending stage, waits for the
 * send to complete, so the send's buffer is free from the recv's position on, as the memory
 * plan assumes. Every blocking call of every rank comes in the step's one order, so no two
 * stages wait for each other. A message's tag is its send's collective index.
 *
 * Built without MPI (AXRT_HAVE_MPI undefined), or run as one process, the world is rank 0 of 1
 * and every group has one member: collectives are copies.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef AXRT_HAVE_MPI
#include <mpi.h>
#endif

#include "rt_impl.h"

typedef struct Group {
    int32_t naxes;
    int32_t axes[RT_MAX_MESH_AXES]; /* mesh axis indices, group order */
    int n, rank;                    /* size, this device's group rank */
    int *members;                   /* (n) world ranks in group order */
#ifdef AXRT_HAVE_MPI
    MPI_Comm comm;
#endif
} Group;

struct RtComm {
    int rank, size;
    int mpi;      /* MPI is initialized and in use */
    int finalize; /* rt_comm_new initialized MPI and finalizes it */
    RtMesh mesh;
    int64_t coords[RT_MAX_MESH_AXES];
    const RtCollective *colls;
    int32_t ncolls;
    int32_t *coll_group; /* (ncolls) index into groups */
    Group *groups;
    int ngroups;
    double timeout_s;
    long spin, nap_ns; /* polls before napping, and the nap */
    int64_t bytes_sent;
    char *buf; /* (cap) send and receive blocks */
    size_t cap;
    int *pending;      /* (2 * size) scratch for the watchdog */
    double p2p_wait_s; /* seconds spent waiting in pipeline recvs and sends */
#ifdef AXRT_HAVE_MPI
    MPI_Request *sends; /* (ncolls) the pipeline sends in flight, by collective index */
    char **send_copy;   /* (ncolls) a send's own copy when its buffer is a staging one (OpenCL) */
    MPI_Comm watch;     /* a duplicate of the world for the watchdog's questions and answers */
    int watch_msg;      /* the (empty) content of a question or an answer */
#endif
};

static const char *const KIND_NAME[RT_COLL_KIND_COUNT] = {"all_reduce",  "all_gather", "reduce_scatter", "all_to_all",
                                                          "local_slice", "send",       "recv",           "share"};

/* ===== the mesh ======================================================================= */

static int64_t mesh_devices(const RtMesh *m) {
    int64_t n = 1;
    for (int i = 0; i < m->naxes; i++)
        n *= m->sizes[i];
    return n;
}

static void mesh_coords(const RtMesh *m, int64_t dev, int64_t *c) {
    rt_mesh_coords(m->naxes, m->sizes, dev, c);
}

static int64_t mesh_device(const RtMesh *m, const int64_t *c) {
    return rt_mesh_device(m->naxes, m->sizes, c);
}

int64_t rt_mesh_chunk(const RtMesh *m, const uint8_t axes[RT_MAX_SPLIT_AXES], int64_t dev, int64_t *count) {
    int64_t c[RT_MAX_MESH_AXES], k = 0, n = 1;
    mesh_coords(m, dev, c);
    for (int i = 0; i < RT_MAX_SPLIT_AXES && axes[i]; i++) {
        int a = axes[i] - 1;
        k = k * m->sizes[a] + c[a];
        n *= m->sizes[a];
    }
    if (count)
        *count = n;
    return k;
}

int rt_mesh_axis(const RtMesh *m, const char *name) {
    for (int a = 0; a < m->naxes; a++)
        if (m->names[a] && !strcmp(m->names[a], name))
            return a;
    return -1;
}

int rt_comm_rank(const RtComm *c) {
    return c ? c->rank : 0;
}
int rt_comm_size(const RtComm *c) {
    return c ? c->size : 1;
}
int64_t rt_comm_coord(const RtComm *c, int a) {
    return c && a >= 0 && a < c->mesh.naxes ? c->coords[a] : 0;
}
int64_t rt_comm_bytes_sent(const RtComm *c) {
    return c ? c->bytes_sent : 0;
}

static int64_t numel(const int64_t *shape, int rank);

int rt_coll_elem_bytes(int32_t dtype) {
    return dtype == RT_DT_F32 || dtype == RT_DT_I32 ? 4 : dtype == RT_DT_BF16 ? 2 : 0;
}

int64_t rt_comm_step_bytes(const RtComm *c) {
    int64_t sum = 0;
    for (int32_t i = 0; c && i < c->ncolls; i++) {
        const RtCollective *k = &c->colls[i];
        int64_t g = c->groups[c->coll_group[i]].n, bytes = numel(k->in_shape, k->rank) * rt_coll_elem_bytes(k->dtype);
        if (k->kind == RT_COLL_REDUCE_SCATTER || k->kind == RT_COLL_ALL_TO_ALL)
            bytes /= g;
        if (k->kind == RT_COLL_SEND) /* the sending stage's devices send it once */
            sum += c->coords[k->axes[0]] == k->axis2 ? bytes : 0;
        else if (k->kind == RT_COLL_SHARE) /* from stage `axis` to the others */
            sum += c->coords[k->axes[0]] == k->axis ? (c->mesh.sizes[k->axes[0]] - 1) * bytes : 0;
        else if (k->kind != RT_COLL_RECV)
            sum += k->kind == RT_COLL_LOCAL_SLICE ? 0 : (g - 1) * bytes;
    }
    return sum;
}

int rt_comm_have_mpi(void) {
#ifdef AXRT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

int rt_comm_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",        "PMIX_RANK",
                                       "SLURM_STEP_ID",        "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

/* Tasks on node `node` of a SLURM tasks-per-node list ("2(x3),1": 2 on nodes 0-2, 1 on node 3),
 * or 0. */
static int slurm_tasks_on(const char *list, int node) {
    while (list && *list) {
        char *end;
        long n = strtol(list, &end, 10), times = 1;
        if (end == list || n <= 0)
            return 0;
        if (!strncmp(end, "(x", 2)) {
            times = strtol(end + 2, &end, 10);
            if (times <= 0 || *end != ')')
                return 0;
            end++;
        }
        if (node < times)
            return (int)n;
        node -= (int)times;
        list = *end == ',' ? end + 1 : NULL;
    }
    return 0;
}

int rt_comm_local_rank(int *rank, int *size, const char **from) {
    static const char *const pairs[][2] = {{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                           {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
                                           {"SLURM_LOCALID", NULL},
                                           {"PMI_LOCAL_RANK", "PMI_LOCAL_SIZE"}};
    *rank = 0;
    *size = 1;
    if (from)
        *from = NULL;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const char *r = getenv(pairs[i][0]);
        if (!r || !*r)
            continue;
        *rank = atoi(r) < 0 ? 0 : atoi(r);
        const char *n = pairs[i][1] ? getenv(pairs[i][1]) : NULL;
        *size = n && *n && atoi(n) > 0 ? atoi(n) : 0;
        if (!pairs[i][1]) { /* srun: the node's share of the step's tasks */
            const char *list = getenv("SLURM_STEP_TASKS_PER_NODE");
            const char *node = getenv("SLURM_NODEID");
            if (!list || !*list)
                list = getenv("SLURM_TASKS_PER_NODE");
            *size = slurm_tasks_on(list, node && *node ? atoi(node) : 0);
        }
        if (*size && *rank >= *size)
            *size = 0; /* the pair disagrees: trust the rank alone */
        if (from)
            *from = pairs[i][0];
        return 1;
    }
    return 0;
}

/* MPI initialized by rt_comm_node_rank, for rt_comm_new to finalize. */
static int mpi_inited_early;

int rt_comm_node_rank(int *rank, int *size, RtError *err) {
    *rank = 0;
    *size = 1;
#ifdef AXRT_HAVE_MPI
    int inited = 0, provided, rc = MPI_SUCCESS;
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return rt_error_set(err, "MPI_Init failed (%d)", rc);
        mpi_inited_early = 1;
    }
    MPI_Comm node;
    rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS)
        return rt_error_set(err, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed (%d)", rc);
    MPI_Comm_rank(node, rank);
    MPI_Comm_size(node, size);
    MPI_Comm_free(&node);
    return 0;
#else
    return rt_error_set(err, "libaxrt was built without MPI");
#endif
}

void rt_comm_node_done(void) {
#ifdef AXRT_HAVE_MPI
    if (mpi_inited_early)
        MPI_Finalize();
    mpi_inited_early = 0;
#endif
}

/* ===== groups ========================================================================= */

static int same_axes(const Group *g, const RtCollective *k) {
    if (g->naxes != k->naxes)
        return 0;
    for (int i = 0; i < k->naxes; i++)
        if (g->axes[i] != k->axes[i])
            return 0;
    return 1;
}

/* This device's group for the axes of k: its rank and the world ranks of the members. */
static int group_fill(RtComm *c, Group *g, const RtCollective *k, RtError *err) {
    g->naxes = k->naxes;
    g->n = 1;
    g->rank = 0;
    for (int i = 0; i < k->naxes; i++) {
        g->axes[i] = k->axes[i];
        g->n *= (int)c->mesh.sizes[k->axes[i]];
        g->rank = g->rank * (int)c->mesh.sizes[k->axes[i]] + (int)c->coords[k->axes[i]];
    }
    g->members = calloc((size_t)g->n, sizeof *g->members);
    if (!g->members)
        return rt_error_set(err, "comm: out of memory");
    int64_t co[RT_MAX_MESH_AXES];
    for (int j = 0; j < g->n; j++) {
        memcpy(co, c->coords, sizeof co);
        for (int i = k->naxes - 1, r = j; i >= 0; i--) {
            co[k->axes[i]] = r % c->mesh.sizes[k->axes[i]];
            r /= (int)c->mesh.sizes[k->axes[i]];
        }
        g->members[j] = (int)mesh_device(&c->mesh, co);
    }
    return 0;
}

#ifdef AXRT_HAVE_MPI
static int mpi_fail(RtError *err, const char *what, int rc) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", rc);
    return rt_error_set(err, "MPI: %s: %s", what, s);
}

/* color: the coordinates off the group's axes; key: the group rank. */
static int group_split(RtComm *c, Group *g, RtError *err) {
    int64_t co[RT_MAX_MESH_AXES];
    memcpy(co, c->coords, sizeof co);
    for (int i = 0; i < g->naxes; i++)
        co[g->axes[i]] = 0;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, (int)mesh_device(&c->mesh, co), g->rank, &g->comm);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Comm_split", rc);
    int r = -1, n = 0;
    MPI_Comm_rank(g->comm, &r);
    MPI_Comm_size(g->comm, &n);
    if (r != g->rank || n != g->n)
        return rt_error_set(err, "comm: group over %d axes: rank %d of %d, expected %d of %d", g->naxes, r, n, g->rank,
                            g->n);
    return 0;
}
#endif

/* A send or recv: one mesh axis, stages on it, a recv naming a send. */
static int check_p2p(const RtComm *c, int32_t i, RtError *err) {
    const RtCollective *k = &c->colls[i];
    int64_t stages = k->naxes == 1 && k->axes[0] >= 0 && k->axes[0] < c->mesh.naxes ? c->mesh.sizes[k->axes[0]] : 0;
    int ok = stages > 1 && k->axis >= 0 && k->axis < stages && k->rank >= 0 && k->rank <= RT_MAX_DIMS;
    if (ok && k->kind == RT_COLL_SEND)
        ok = k->axis2 >= 0 && k->axis2 < stages && k->axis2 != k->axis;
    else if (ok && k->kind == RT_COLL_SHARE)
        ok = numel(k->in_shape, k->rank) == numel(k->out_shape, k->rank);
    else if (ok)
        ok = k->axis2 >= 0 && k->axis2 < c->ncolls && c->colls[k->axis2].kind == RT_COLL_SEND &&
             c->colls[k->axis2].axis2 == k->axis &&
             numel(c->colls[k->axis2].out_shape, k->rank) == numel(k->out_shape, k->rank);
    return ok ? 0
              : rt_error_set(err,
                             "program: collective %d: a %s without one pipeline axis of 2 or more stages, or with "
                             "bad stages or send",
                             i, KIND_NAME[k->kind]);
}

static int check_coll(const RtComm *c, int32_t i, RtError *err) {
    const RtCollective *k = &c->colls[i];
    if (k->kind == RT_COLL_SEND || k->kind == RT_COLL_RECV || k->kind == RT_COLL_SHARE)
        return rt_coll_elem_bytes(k->dtype) ? check_p2p(c, i, err)
                                            : rt_error_set(err, "program: collective %d: dtype %d", i, (int)k->dtype);
    int axis_ok = k->kind == RT_COLL_ALL_REDUCE || (k->axis >= 0 && k->axis < k->rank);
    int axis2_ok = k->kind != RT_COLL_ALL_TO_ALL || (k->axis2 >= 0 && k->axis2 < k->rank);
    if (!rt_coll_elem_bytes(k->dtype))
        return rt_error_set(err, "program: collective %d: dtype %d, expected f32 (%d), bf16 (%d) or i32 (%d)", i,
                            (int)k->dtype, RT_DT_F32, RT_DT_BF16, RT_DT_I32);
    if (k->kind < 0 || k->kind >= RT_COLL_KIND_COUNT || k->naxes < 0 || k->naxes > c->mesh.naxes || k->rank < 0 ||
        k->rank > RT_MAX_DIMS || !axis_ok || !axis2_ok)
        return rt_error_set(err, "program: collective %d: bad kind, axes or rank", i);
    for (int a = 0; a < k->naxes; a++)
        if (k->axes[a] < 0 || k->axes[a] >= c->mesh.naxes)
            return rt_error_set(err, "program: collective %d: mesh axis %d outside the mesh", i, k->axes[a]);
    return 0;
}

static int groups_make(RtComm *c, RtError *err) {
    c->coll_group = calloc((size_t)c->ncolls + 1, sizeof *c->coll_group);
    c->groups = calloc((size_t)c->ncolls + 1, sizeof *c->groups);
    if (!c->coll_group || !c->groups)
        return rt_error_set(err, "comm: out of memory");
    for (int32_t i = 0; i < c->ncolls; i++) {
        if (check_coll(c, i, err) != 0)
            return -1;
        int g = 0;
        while (g < c->ngroups && !same_axes(&c->groups[g], &c->colls[i]))
            g++;
        c->coll_group[i] = g;
        if (g < c->ngroups)
            continue;
        c->ngroups++;
        if (group_fill(c, &c->groups[g], &c->colls[i], err) != 0)
            return -1;
#ifdef AXRT_HAVE_MPI
        c->groups[g].comm = MPI_COMM_NULL;
        if (c->mpi && group_split(c, &c->groups[g], err) != 0)
            return -1;
#endif
    }
    return 0;
}

/* ===== joining and leaving ============================================================= */

#ifdef AXRT_HAVE_MPI
static int join_mpi(RtComm *c, int64_t devices, RtError *err) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && devices <= 1 && !rt_comm_launched())
        return 0; /* one device, started by hand: no MPI at all */
    if (!inited) {
        int provided, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(err, "MPI_Init", rc);
        c->finalize = 1;
    } else if (mpi_inited_early) { /* rt_comm_node_rank's: finalized here */
        c->finalize = 1;
        mpi_inited_early = 0;
    }
    c->mpi = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    return 0;
}
#endif

static int check_size(const RtComm *c, int64_t devices, RtError *err) {
    if (c->size == devices)
        return 0;
    if (devices > 1 && !rt_comm_have_mpi())
        return rt_error_set(err,
                            "this program runs on %lld devices (one process each), but libaxrt was built "
                            "without MPI; rebuild axlc with libopenmpi-dev installed, then launch it with "
                            "`mpirun -np %lld TRAINER ...` or `srun -n %lld TRAINER ...`",
                            (long long)devices, (long long)devices, (long long)devices);
    return rt_error_set(err,
                        "this program runs on %lld devices, one process each, but %d process%s started; "
                        "launch it with `mpirun -np %lld TRAINER ...` (add --oversubscribe when the machine has "
                        "fewer cores) or `srun -n %lld TRAINER ...`, or compile it for --target cpu-%d",
                        (long long)devices, c->size, c->size == 1 ? " was" : "es were", (long long)devices,
                        (long long)devices, c->size);
}

int rt_comm_new(RtComm **out, const RtMesh *mesh, const RtCollective *colls, int32_t ncolls, double timeout_s,
                RtError *err) {
    *out = NULL;
    RtComm *c = calloc(1, sizeof *c);
    if (!c)
        return rt_error_set(err, "comm: out of memory");
    static const RtMesh none;
    c->mesh = mesh ? *mesh : none;
    c->colls = colls;
    c->ncolls = colls ? ncolls : 0;
    c->size = 1;
#ifdef AXRT_HAVE_MPI
    c->watch = MPI_COMM_NULL;
#endif
    int64_t spin, nap_ns;
    if (rt_env_comm(&c->timeout_s, &spin, &nap_ns, err) != 0) {
        free(c);
        return -1;
    }
    if (timeout_s > 0)
        c->timeout_s = timeout_s;
    c->spin = (long)spin, c->nap_ns = (long)nap_ns;
    int64_t devices = c->mesh.naxes >= 0 && c->mesh.naxes <= RT_MAX_MESH_AXES ? mesh_devices(&c->mesh) : 0;
    if (c->mesh.naxes < 0 || c->mesh.naxes > RT_MAX_MESH_AXES || devices < 1 || devices > (1 << 20)) {
        int naxes = (int)c->mesh.naxes;
        free(c);
        return rt_error_set(err, "program: a mesh of %d axes and %lld devices", naxes, (long long)devices);
    }
    int rc = 0;
#ifdef AXRT_HAVE_MPI
    rc = join_mpi(c, devices, err);
#endif
    if (rc == 0)
        rc = check_size(c, devices, err);
    if (rc == 0) {
        mesh_coords(&c->mesh, c->rank, c->coords);
        c->pending = calloc(2 * (size_t)c->size, sizeof *c->pending);
        rc = c->pending ? groups_make(c, err) : rt_error_set(err, "comm: out of memory");
    }
#ifdef AXRT_HAVE_MPI
    if (rc == 0) {
        c->sends = malloc(((size_t)c->ncolls + 1) * sizeof *c->sends);
        c->send_copy = calloc((size_t)c->ncolls + 1, sizeof *c->send_copy);
        for (int32_t i = 0; c->sends && i <= c->ncolls; i++)
            c->sends[i] = MPI_REQUEST_NULL;
        if (!c->sends || !c->send_copy)
            rc = rt_error_set(err, "comm: out of memory");
    }
#endif
#ifdef AXRT_HAVE_MPI
    if (rc == 0 && c->mpi && c->size > 1) {
        int dup = MPI_Comm_dup(MPI_COMM_WORLD, &c->watch);
        if (dup != MPI_SUCCESS)
            rc = mpi_fail(err, "MPI_Comm_dup", dup);
    }
#endif
    if (rc != 0) {
        rt_comm_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void rt_comm_free(RtComm *c) {
    if (!c)
        return;
    for (int g = 0; g < c->ngroups; g++) {
#ifdef AXRT_HAVE_MPI
        if (c->groups[g].comm != MPI_COMM_NULL)
            MPI_Comm_free(&c->groups[g].comm);
#endif
        free(c->groups[g].members);
    }
#ifdef AXRT_HAVE_MPI
    for (int32_t i = 0; c->sends && i < c->ncolls; i++)
        if (c->sends[i] != MPI_REQUEST_NULL)
            MPI_Request_free(&c->sends[i]);
    for (int32_t i = 0; c->send_copy && i < c->ncolls; i++)
        free(c->send_copy[i]);
    free(c->send_copy);
    free(c->sends);
    if (c->watch != MPI_COMM_NULL)
        MPI_Comm_free(&c->watch);
    if (c->finalize)
        MPI_Finalize();
#endif
    free(c->groups);
    free(c->coll_group);
    free(c->pending);
    free(c->buf);
    free(c);
}

void rt_comm_abort(RtComm *c, int code) {
#ifdef AXRT_HAVE_MPI
    if (c && c->mpi && c->size > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)c;
    (void)code;
#endif
}

/* ===== blocks ========================================================================= */

static int64_t numel(const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    return n;
}

static int64_t prod(const int64_t *shape, int lo, int hi) {
    int64_t n = 1;
    for (int d = lo; d < hi; d++)
        n *= shape[d];
    return n;
}

/* Copies `len` slices of axis: src[.., src_at + i, ..] -> dst[.., dst_at + i, ..] (elements of
 * es bytes; the shapes agree off the axis). */
static void block_copy(const char *src, const int64_t *ss, char *dst, const int64_t *ds, int rank, int axis,
                       int64_t src_at, int64_t dst_at, int64_t len, int es) {
    int64_t outer = prod(ss, 0, axis), inner = prod(ss, axis + 1, rank) * es;
    for (int64_t o = 0; o < outer; o++)
        memcpy(dst + ((o * ds[axis] + dst_at) * inner), src + ((o * ss[axis] + src_at) * inner), (size_t)(len * inner));
}

/* bf16 nearest to x, ties to even, rounded once: the interpreter's ir_dtype_round. (float)x
 * first and then rt_bf16_from_f32 would round twice, which differs where the f32 rounding lands
 * on a bf16 tie. bf16 keeps 8 significant bits down to 2^-126, then a fixed step of 2^-133. */
static uint16_t bf16_from_double(double x) {
    if (!isfinite(x) || x == 0)
        return rt_bf16_from_f32((float)x);
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    int step = e - 8 < -133 ? -133 : e - 8;
    double r = ldexp(nearbyint(ldexp(x, -step)), step); /* exact; ties to even (the default mode) */
    return rt_bf16_from_f32((float)r);                  /* exact, or past the largest bf16: inf */
}

static void sum_blocks(const RtCollective *k, const char *blocks, int n, int64_t count, char *out) {
    if (k->dtype == RT_DT_BF16) {
        for (int64_t i = 0; i < count; i++) {
            double s = 0;
            for (int j = 0; j < n; j++)
                s += rt_bf16_to_f32(((const uint16_t *)(const void *)blocks)[(int64_t)j * count + i]);
            ((uint16_t *)(void *)out)[i] = bf16_from_double(s);
        }
        return;
    }
    if (k->dtype == RT_DT_F32) {
        for (int64_t i = 0; i < count; i++) {
            double s = 0;
            for (int j = 0; j < n; j++)
                s += ((const float *)(const void *)blocks)[(int64_t)j * count + i];
            ((float *)(void *)out)[i] = (float)s;
        }
        return;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t s = 0;
        for (int j = 0; j < n; j++)
            s += ((const int32_t *)(const void *)blocks)[(int64_t)j * count + i];
        ((int32_t *)(void *)out)[i] = s > INT32_MAX ? INT32_MAX : s < INT32_MIN ? INT32_MIN : (int32_t)s;
    }
}

/* Where the elements of a block (packed row-major) lie in an operand or result: element f of the
 * block is element base + (f / run) * stride + f % run of the tensor. */
typedef struct View {
    int64_t run, stride, base;
} View;

/* Copies elements [p0, p1) of a block between its packed form and the tensor: into packed
 * (to_packed) or out of it. */
static void view_copy(char *tensor, const View *v, char *packed, int64_t p0, int64_t p1, int es, int to_packed) {
    for (int64_t f = p0; f < p1;) {
        int64_t row = f / v->run, col = f % v->run, len = v->run - col < p1 - f ? v->run - col : p1 - f;
        char *t = tensor + (v->base + row * v->stride + col) * es, *q = packed + (f - p0) * es;
        memcpy(to_packed ? q : t, to_packed ? t : q, (size_t)(len * es));
        f += len;
    }
}

/* Block j this member sends (reduce_scatter, all_to_all: chunk j of axis of the operand). */
static View send_view(const RtCollective *k, int n, int j) {
    int64_t chunk = k->in_shape[k->axis] / n, inner = prod(k->in_shape, k->axis + 1, k->rank);
    return (View){chunk * inner, k->in_shape[k->axis] * inner, j * chunk * inner};
}

/* Where block j, received from member j, lands in the result (all_gather, all_to_all). */
static View recv_view(const RtCollective *k, int n, int j) {
    if (k->kind == RT_COLL_ALL_GATHER) {
        int64_t len = k->in_shape[k->axis], inner = prod(k->in_shape, k->axis + 1, k->rank);
        return (View){len * inner, k->out_shape[k->axis] * inner, j * len * inner};
    }
    int64_t piece[RT_MAX_DIMS]; /* all_to_all: member j's chunk of the split axis, j-th along concat */
    memcpy(piece, k->in_shape, sizeof piece);
    piece[k->axis] /= n;
    int64_t len = piece[k->axis2], inner = prod(piece, k->axis2 + 1, k->rank);
    return (View){len * inner, k->out_shape[k->axis2] * inner, j * len * inner};
}

static int whole_operand(int32_t kind) {
    return kind == RT_COLL_ALL_REDUCE || kind == RT_COLL_ALL_GATHER;
}

int64_t rt_coll_scratch_bytes(int32_t kind, int64_t n_in, int elem_bytes, int64_t n) {
    if (kind == RT_COLL_LOCAL_SLICE || kind >= RT_COLL_SEND || n < 1 || elem_bytes < 1)
        return 0; /* no traffic, or point to point from and into the slab */
    int64_t bs = whole_operand(kind) ? n_in : n_in / n, per = RT_COMM_CHUNK_BYTES / elem_bytes;
    int64_t slot = (bs < per ? bs : per) * elem_bytes;
    return (whole_operand(kind) ? n : 2 * n) * slot;
}

int64_t rt_comm_scratch_bytes(const RtComm *c) {
    int64_t most = 0;
    for (int32_t i = 0; c && i < c->ncolls; i++) {
        const RtCollective *k = &c->colls[i];
        int64_t b = rt_coll_scratch_bytes(k->kind, numel(k->in_shape, k->rank), rt_coll_elem_bytes(k->dtype),
                                          c->groups[c->coll_group[i]].n);
        most = b > most ? b : most;
    }
    return most;
}

static char *scratch(RtComm *c, size_t bytes) {
    if (bytes <= c->cap)
        return c->buf;
    char *b = realloc(c->buf, bytes);
    if (!b)
        return NULL;
    c->buf = b;
    c->cap = bytes;
    return b;
}

/* ===== exchange and watchdog ============================================================ */

static void die(RtComm *c, const char *fmt, ...) RT_PRINTF(2, 3);
static void die(RtComm *c, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char text[sizeof msg + 16];
    fflush(stdout);
    fprintf(stderr, "trainer: rank %d of %d: %s\n", c->rank, c->size, rt_event_text(msg, text, sizeof text));
    fflush(stderr);
    rt_comm_abort(c, 1);
    abort(); /* without MPI there is nobody to wait for; never reached */
}

#ifdef AXRT_HAVE_MPI
enum { WATCH_ASK = 1, WATCH_ANSWER = 2 };

/* Answers every question of the watchdog that has arrived: this rank is alive. */
static void watch_serve(RtComm *c) {
    int flag = 0;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, WATCH_ASK, c->watch, &flag, &st) == MPI_SUCCESS && flag) {
        MPI_Request r;
        if (MPI_Recv(&c->watch_msg, 1, MPI_INT, st.MPI_SOURCE, WATCH_ASK, c->watch, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
            MPI_Isend(&c->watch_msg, 1, MPI_INT, st.MPI_SOURCE, WATCH_ANSWER, c->watch, &r) != MPI_SUCCESS)
            return;
        MPI_Request_free(&r);
    }
}

/* Asks every other rank whether it is alive and writes the world ranks that do not answer
 * within `grace` seconds into names ("" when all answer). It goes on answering the others'
 * questions meanwhile: several ranks usually pass their deadlines together. */
static void watch_blame(RtComm *c, double grace, char *names, size_t cap) {
    int *answered = c->pending; /* (size) */
    memset(answered, 0, (size_t)c->size * sizeof *answered);
    int left = c->size - 1;
    answered[c->rank] = 1;
    for (int j = 0; j < c->size; j++) {
        MPI_Request r;
        if (j != c->rank && MPI_Isend(&c->watch_msg, 1, MPI_INT, j, WATCH_ASK, c->watch, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
    double deadline = rt_now_s() + grace;
    while (left > 0 && rt_now_s() < deadline) {
        int flag = 0, msg;
        MPI_Status st;
        watch_serve(c);
        while (left > 0 && MPI_Iprobe(MPI_ANY_SOURCE, WATCH_ANSWER, c->watch, &flag, &st) == MPI_SUCCESS && flag) {
            MPI_Recv(&msg, 1, MPI_INT, st.MPI_SOURCE, WATCH_ANSWER, c->watch, MPI_STATUS_IGNORE);
            left -= !answered[st.MPI_SOURCE];
            answered[st.MPI_SOURCE] = 1;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    size_t len = 0;
    names[0] = 0;
    for (int j = 0; j < c->size; j++)
        if (!answered[j] && len < cap - 16)
            len += (size_t)snprintf(names + len, cap - len, "%s%d", len ? ", " : "", j);
}

/* Waits for reqs[0..n) (2 per peer: receive, send); past the deadline (timeout_s) names the
 * ranks that have stopped answering (peers[i/2] are the world ranks waited for) and aborts the
 * job. */
static void wait_all(RtComm *c, MPI_Request *reqs, int n, const int *peers, const char *what, double timeout_s) {
    double deadline = rt_now_s() + timeout_s;
    long spins = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            die(c, "%s: MPI error %d (another rank has probably died); aborting the job", what, rc);
        if (done)
            return;
        if (++spins > c->spin) { /* then give the core away: ranks often outnumber cores */
            struct timespec ts = {0, spins > 100000 ? 1000000 : c->nap_ns};
            nanosleep(&ts, NULL);
        }
        if ((spins & 63) == 0) {
            watch_serve(c);
            if (rt_now_s() > deadline)
                break;
        }
    }
    /* A waiting rank answers within a nap; the grace only bounds the wait for those that cannot. */
    double grace = timeout_s / 4 < 0.5 ? 0.5 : timeout_s / 4 > 2 ? 2 : timeout_s / 4;
    char stopped[1024], waited[1024] = "";
    watch_blame(c, grace, stopped, sizeof stopped);
    size_t len = 0;
    for (int i = 0; i < n; i += 2) {
        int flag = 0;
        MPI_Request_get_status(reqs[i], &flag, MPI_STATUS_IGNORE);
        if (!flag && len < sizeof waited - 16)
            len += (size_t)snprintf(waited + len, sizeof waited - len, "%s%d", len ? ", " : "", peers[i / 2]);
    }
    if (stopped[0])
        rt_event_failure(RT_CAUSE_WATCHDOG, atoi(stopped), -1, NULL); /* the first that stopped */
    if (stopped[0])
        die(c,
            "%s: no answer from rank %s for %.0f s (dead, stopped or hung; the other ranks answer); aborting "
            "the job. The last complete checkpoint stays valid: --resume continues from it",
            what, stopped, timeout_s);
    die(c,
        "%s: nothing from rank %s for %.0f s, though every rank answers (the ranks are at different "
        "collectives); aborting the job. The last complete checkpoint stays valid: --resume continues from it",
        what, waited[0] ? waited : "?", timeout_s);
}
#endif

/* Member r sends send + j * send_stride to member j and receives member j's block into recv[j];
 * its own block is copied. Blocks are `bytes` long. */
static void exchange(RtComm *c, Group *g, int32_t index, const char *send, size_t send_stride, char *recv,
                     size_t bytes) {
    memcpy(recv + (size_t)g->rank * bytes, send + (size_t)g->rank * send_stride, bytes);
    if (g->n == 1)
        return;
#ifdef AXRT_HAVE_MPI
    MPI_Request *reqs = malloc(2 * (size_t)g->n * sizeof *reqs);
    int *peers = malloc((size_t)g->n * sizeof *peers), nr = 0;
    if (!reqs || !peers || bytes > (size_t)INT32_MAX)
        die(c, "collective %d: out of memory or a message over 2 GiB", index);
    int tag = index < 0 ? 32001 : index % 32000, rc = MPI_SUCCESS;
    for (int j = 0; j < g->n && rc == MPI_SUCCESS; j++) {
        if (j == g->rank)
            continue;
        peers[nr / 2] = g->members[j];
        rc = MPI_Irecv(recv + (size_t)j * bytes, (int)bytes, MPI_BYTE, j, tag, g->comm, &reqs[nr++]);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(send + (size_t)j * send_stride, (int)bytes, MPI_BYTE, j, tag, g->comm, &reqs[nr++]);
        c->bytes_sent += (int64_t)bytes;
    }
    if (rc != MPI_SUCCESS)
        die(c, "collective %d: MPI error %d posting messages; aborting the job", index, rc);
    char what[160];
    const RtCollective *k = index >= 0 ? &c->colls[index] : NULL;
    if (k) {
        int len = snprintf(what, sizeof what, "collective %d (%s over [", index, KIND_NAME[k->kind]);
        for (int a = 0; a < k->naxes && len < (int)sizeof what - 40; a++)
            len += snprintf(what + len, sizeof what - (size_t)len, "%s%s", a ? "," : "",
                            c->mesh.names[k->axes[a]] ? c->mesh.names[k->axes[a]] : "?");
        snprintf(what + len, sizeof what - (size_t)len, "])");
    } else {
        snprintf(what, sizeof what, "a barrier of all ranks");
    }
    /* Barriers (around checkpoint saves) wait as long as collectives: a hung rank must end the
     * job within the deadline wherever it stops. A job whose shards take longer to write than
     * the deadline raises AXLC_COMM_TIMEOUT. */
    wait_all(c, reqs, nr, peers, what, c->timeout_s);
    free(reqs);
    free(peers);
#else
    (void)c;
    (void)index;
    (void)send_stride;
#endif
}

/* The pipeline's point-to-point messages (see the top). On the sending stage a recv completes
 * its send; elsewhere it receives. A send's `out` is in the slab (in_slab), or a staging buffer
 * the caller reuses at once (an OpenCL trainer's): then it is sent from a copy of its own. */
static void p2p(RtComm *c, int32_t index, const char *in, char *out, int in_slab) {
    const RtCollective *k = &c->colls[index];
    Group *g = &c->groups[c->coll_group[index]];
    size_t bytes = (size_t)numel(k->out_shape, k->rank) * (size_t)rt_coll_elem_bytes(k->dtype);
    if ((k->kind == RT_COLL_SEND || k->kind == RT_COLL_SHARE) && out != in)
        memmove(out, in, bytes);
    if (k->kind == RT_COLL_SHARE) {
        rt_comm_stage_share(c, k->axes[0], k->axis, out, 0, (int64_t)bytes);
        return;
    }
    if (g->n == 1)
        return;
#ifdef AXRT_HAVE_MPI
    int32_t send = k->kind == RT_COLL_SEND ? index : k->axis2;
    int peer = k->axis, tag = send % 32000, rc = MPI_SUCCESS;
    if (bytes > (size_t)INT32_MAX)
        die(c, "collective %d: a message over 2 GiB", index);
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int peers[1] = {g->members[peer]};
    char what[160];
    snprintf(what, sizeof what, "collective %d (%s %s stage %d over [%s])", index, KIND_NAME[k->kind],
             k->kind == RT_COLL_SEND ? "to" : "from", peer,
             c->mesh.names[k->axes[0]] ? c->mesh.names[k->axes[0]] : "?");
    double t0 = rt_now_s();
    if (k->kind == RT_COLL_SEND) {
        if (c->sends[index] != MPI_REQUEST_NULL) { /* last step's, never completed by its recv */
            reqs[0] = c->sends[index];
            wait_all(c, reqs, 2, peers, what, c->timeout_s);
        }
        char *from = out;
        if (!in_slab) {
            if (!c->send_copy[index] && !(c->send_copy[index] = malloc(bytes + 1)))
                die(c, "%s: out of memory", what);
            from = memcpy(c->send_copy[index], out, bytes);
        }
        rc = MPI_Isend(from, (int)bytes, MPI_BYTE, peer, tag, g->comm, &c->sends[index]);
        c->bytes_sent += (int64_t)bytes;
    } else if (g->rank == peer) { /* the sender: its buffer is needed again from here on */
        reqs[0] = c->sends[send];
        c->sends[send] = MPI_REQUEST_NULL;
        wait_all(c, reqs, 2, peers, what, c->timeout_s);
    } else {
        rc = MPI_Irecv(out, (int)bytes, MPI_BYTE, peer, tag, g->comm, &reqs[0]);
        if (rc == MPI_SUCCESS)
            wait_all(c, reqs, 2, peers, what, c->timeout_s);
    }
    c->p2p_wait_s += rt_now_s() - t0;
    if (rc != MPI_SUCCESS)
        die(c, "%s: MPI error %d posting a message; aborting the job", what, rc);
#else
    (void)index;
    (void)in_slab;
#endif
}

double rt_comm_p2p_wait_s(const RtComm *c) {
    return c ? c->p2p_wait_s : 0;
}

void rt_comm_stage_share(RtComm *c, int32_t axis, int64_t from, char *slab, int64_t offset, int64_t bytes) {
    if (!c || axis < 0 || axis >= c->mesh.naxes || c->mesh.sizes[axis] < 2 || bytes <= 0)
        return;
#ifdef AXRT_HAVE_MPI
    if (!c->mpi || bytes > INT32_MAX)
        die(c, "sharing %lld bytes across the pipeline stages: %s", (long long)bytes, c->mpi ? "over 2 GiB" : "no MPI");
    int64_t co[RT_MAX_MESH_AXES];
    memcpy(co, c->coords, sizeof co);
    int n = (int)c->mesh.sizes[axis], me = (int)c->coords[axis], nr = 0, rc = MPI_SUCCESS;
    MPI_Request *reqs = malloc(2 * (size_t)n * sizeof *reqs);
    int *peers = malloc((size_t)n * sizeof *peers);
    if (!reqs || !peers)
        die(c, "sharing across the pipeline stages: out of memory");
    for (int j = 0; j < n && rc == MPI_SUCCESS; j++) {
        if (j == me || (me != from && j != from))
            continue;
        co[axis] = j;
        int peer = peers[nr / 2] = (int)mesh_device(&c->mesh, co);
        reqs[nr] = reqs[nr + 1] = MPI_REQUEST_NULL;
        if (me == from) {
            rc = MPI_Isend(slab + offset, (int)bytes, MPI_BYTE, peer, 32002, MPI_COMM_WORLD, &reqs[nr + 1]);
            c->bytes_sent += bytes;
        } else {
            rc = MPI_Irecv(slab + offset, (int)bytes, MPI_BYTE, peer, 32002, MPI_COMM_WORLD, &reqs[nr]);
        }
        nr += 2;
    }
    if (rc != MPI_SUCCESS)
        die(c, "sharing across the pipeline stages: MPI error %d; aborting the job", rc);
    char what[96];
    snprintf(what, sizeof what, "sharing %lld bytes of stage %lld with the other stages", (long long)bytes,
             (long long)from);
    wait_all(c, reqs, nr, peers, what, c->timeout_s);
    free(reqs);
    free(peers);
#else
    (void)from;
    (void)slab;
    (void)offset;
#endif
}

static void collective_io(RtComm *c, int32_t index, const char *in, char *out, int in_slab);

void rt_comm_collective(RtComm *c, int32_t index, char *slab) {
    const RtCollective *k = &c->colls[index];
    collective_io(c, index, slab + k->in_offset, slab + k->out_offset, 1);
}

void rt_comm_collective_io(RtComm *c, int32_t index, const char *in, char *out) {
    collective_io(c, index, in, out, 0);
}

static void collective_io(RtComm *c, int32_t index, const char *in, char *out, int in_slab) {
    const RtCollective *k = &c->colls[index];
    if (k->kind >= RT_COLL_SEND) {
        p2p(c, index, in, out, in_slab);
        return;
    }
    Group *g = &c->groups[c->coll_group[index]];
    int64_t n_in = numel(k->in_shape, k->rank), n = g->n;
    int es = rt_coll_elem_bytes(k->dtype);
    size_t in_bytes = (size_t)n_in * (size_t)es, out_bytes = (size_t)numel(k->out_shape, k->rank) * (size_t)es;
    /* The planner gives the operand and the result bytes of their own; where they overlap
     * anyway (an all_reduce in place works round by round), the operand is staged first. */
    int overlap = in < out + out_bytes && out < in + in_bytes && !(k->kind == RT_COLL_ALL_REDUCE && in == out);
    char *staged = NULL;
    if (overlap) {
        staged = malloc(in_bytes + 4);
        if (!staged)
            die(c, "collective %d: out of memory", index);
        memcpy(staged, in, in_bytes);
        in = staged;
    }
    if (k->kind == RT_COLL_LOCAL_SLICE) {
        int64_t len = k->out_shape[k->axis];
        block_copy(in, k->in_shape, out, k->out_shape, k->rank, k->axis, g->rank * len, 0, len, es);
        free(staged);
        return;
    }
    int whole = whole_operand(k->kind);
    int64_t bs = whole ? n_in : n_in / n, per = RT_COMM_CHUNK_BYTES / es, m = bs < per ? bs : per;
    size_t slot = (size_t)m * (size_t)es;
    char *buf = scratch(c, (size_t)rt_coll_scratch_bytes(k->kind, n_in, es, n) + 4);
    if (!buf)
        die(c, "collective %d: out of memory", index);
    char *send = buf, *recv = buf + (whole ? 0 : (size_t)n * slot);
    for (int64_t p0 = 0; p0 < bs; p0 += m) {
        int64_t p1 = p0 + m < bs ? p0 + m : bs;
        size_t bytes = (size_t)(p1 - p0) * (size_t)es;
        if (whole) { /* every member gets the same block: sent from the operand itself */
            exchange(c, g, index, in + p0 * es, 0, recv, bytes);
        } else {
            for (int j = 0; j < n; j++) {
                View v = send_view(k, (int)n, j);
                view_copy((char *)(uintptr_t)in, &v, send + (size_t)j * slot, p0, p1, es, 1); /* read only */
            }
            exchange(c, g, index, send, slot, recv, bytes);
        }
        if (k->kind == RT_COLL_ALL_REDUCE || k->kind == RT_COLL_REDUCE_SCATTER) {
            sum_blocks(k, recv, (int)n, p1 - p0, out + p0 * es);
            continue;
        }
        for (int j = 0; j < n; j++) {
            View v = recv_view(k, (int)n, j);
            view_copy(out, &v, recv + (size_t)j * bytes, p0, p1, es, 0);
        }
    }
    free(staged);
}

int rt_comm_sum_i64(RtComm *c, int64_t *v, int n, RtError *err) {
    if (!c || c->size == 1)
        return 0;
    Group world = {.n = c->size, .rank = c->rank, .members = NULL};
    world.members = malloc((size_t)c->size * sizeof *world.members);
    char *blocks = malloc((size_t)c->size * (size_t)n * 8 + 8);
    if (!world.members || !blocks) {
        free(world.members);
        free(blocks);
        return rt_error_set(err, "comm: out of memory");
    }
    for (int j = 0; j < c->size; j++)
        world.members[j] = j;
#ifdef AXRT_HAVE_MPI
    world.comm = MPI_COMM_WORLD;
#endif
    exchange(c, &world, -1, (const char *)v, 0, blocks, (size_t)n * 8);
    for (int i = 0; i < n; i++) {
        int64_t s = 0;
        for (int j = 0; j < c->size; j++)
            s += ((const int64_t *)(const void *)blocks)[(size_t)j * (size_t)n + (size_t)i];
        v[i] = s;
    }
    free(world.members);
    free(blocks);
    return 0;
}
