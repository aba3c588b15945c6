/*
 * opencl.c: the device side of an OpenCL trainer (libaxrt_opencl; axrt.h, "opencl.c").
 *
 * An OpenCL trainer is an RtProgram without a step function plus the kernels' OpenCL C
 * source and a launch list (RtOclProgram). rt_ocl_main takes the trainer's options, picks a
 * device (--device N or P:D; --list-devices lists them), builds the source for it, or loads
 * the binary built for the same device, driver and source from the cache, and then runs the
 * CPU trainer's loop (rt_train_main) with a step that enqueues the launches. So options,
 * metrics, checkpoints and signals are the CPU trainer's, by construction. Before building, the
 * capability table (device queries: the vendor, NVIDIA's compute capability) picks the body of
 * the matrix products, passed as -DAX_MMA=N: the tensor cores where a row says so, else the
 * SIMT kernels (AXLC_OPENCL_MMA=emulate|off overrides it).
 *
 * Memory: the state lives on the device. Each host slab (the training slab, and the eval slab
 * with --eval-data) gets a device buffer of the same layout. A step takes its batch (sent ahead
 * during the step before, through a pinned staging buffer on a second queue: batch_in,
 * batch_ahead) and the step number (the whole slab when the runtime wrote it whole: the start,
 * --init, --resume), runs every kernel in order on one in-order queue, sends the next step's
 * batch, and reads back the loss, gradient norm, learning rate and auxiliary loss. The runtime
 * asks for the rest through the hooks (rt_train_main_hooks): ocl_sync reads the parameters and
 * moments back before a checkpoint, the whole slab only when --skip-outliers undoes an update; ocl_copy
 * makes eval and replay copies on the device; sample_io moves only what --sample writes and
 * reads. AXLC_OPENCL_PROFILE prints the bytes each way.
 *
 * A mesh of several devices runs one trainer per device under MPI: a rank takes its node's
 * device by its local rank (rank_device), and each collective of the step is a launch that
 * reads its operand into a pinned staging buffer, runs it through MPI on the host
 * (rt_comm_collective_io) and writes the result back, in the queue's order (collective).
 *
 * RtProgram.step has no context argument, so the device session of the process is one
 * file-scope pointer, set by rt_ocl_main for the duration of rt_train_main. A failed OpenCL
 * call inside the step (a device lost) goes to rt_train_step_failed, naming the device and the
 * call: the loop ends with an error naming the step and the last good checkpoint, which is
 * kept; the state is never read back from the device again (the host slab is made NaN, so no
 * checkpoint is saved from it). AXLC_OPENCL_FAULT_STEP=N (a test hook) fails the middle launch
 * of step N that way.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "rt_impl.h"

#define MAX_DEVICES 64
#define MAX_SLABS   4

typedef struct DevInfo {
    cl_platform_id platform;
    cl_device_id device;
    int pi, di; /* platform index, device index within it */
    char name[256], platform_name[256], version[256], driver[256], type[16];
} DevInfo;

typedef struct SlabBuf {
    char *host;  /* the runtime's slab */
    cl_mem *mem; /* (nbufs) the device's copy, split at Session.cut: the state, between steps too */
    int whole;   /* the host wrote the slab whole (the start, an eval copy): the next step sends it all */
    int stale;   /* the device is ahead of the host: a step ran since the last read-back */
    int state;   /* ... but the host holds its parameters and moments (RT_SYNC_STATE_TO_HOST) */
} SlabBuf;

/* Bytes between host and device (AXLC_OPENCL_PROFILE reports them). */
typedef struct Traffic {
    int64_t steps;                     /* steps run */
    int64_t to_dev, to_host;           /* by the steps, whole-slab sends left out */
    int64_t step_max;                  /* the most one step moved, both ways */
    int64_t sends, send_bytes;         /* whole-slab sends: the state at the start, eval copies */
    int64_t reads, read_bytes;         /* whole-slab read-backs: eval or replay copies on the host */
    int64_t state_reads, state_bytes;  /* read-backs of the parameters and moments: checkpoints, replays */
    int64_t coll_to_dev, coll_to_host; /* by the collectives of a mesh (their operands and results) */
    double coll_s;                     /* seconds in collectives: copies and MPI */
    int64_t slices;                    /* local slices copied on the device */
    int64_t copies;                    /* whole slabs copied on the device (eval, replays) */
    int64_t ahead;                     /* steps whose batch was sent ahead, during the step before */
    int64_t scalls, sfirst;            /* sampling: runs of the forward or decode step, the slab's first send */
    int64_t s_to_dev, s_to_host;       /* sampling: the bytes of the runs after the first send */
} Traffic;

/* Byte ranges of the sampling slab the sampler wrote since the last run (RtSampleIo.wrote). */
#define MAX_DIRTY 8

typedef struct Session {
    const RtOclProgram *p;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
    cl_kernel *kernels; /* (p->nlaunches) */
    SlabBuf slabs[MAX_SLABS];
    int nbufs;            /* the buffers each slab is split into: no buffer exceeds the device's cap */
    int64_t *cut;         /* (nbufs + 1) their bounds in the slab: 0, ..., slab_bytes */
    int64_t max_alloc;    /* the cap: CL_DEVICE_MAX_MEM_ALLOC_SIZE (or AXLC_OPENCL_MAX_ALLOC) */
    int32_t *arg_buf;     /* (all launches' args) the buffer each argument's tensor lies in */
    int32_t *arg_first;   /* (nlaunches) the first of a launch's entries in arg_buf */
    const SlabBuf *bound; /* the slab whose buffers the kernels' arguments name now */
    int failed;           /* an OpenCL call in a step failed (reported once) */
    double *prof_ns;      /* (nlaunches) device time per launch, summed, with AXLC_OPENCL_PROFILE */
    int64_t prof_steps;
    Traffic traffic;
    const char *name;   /* program name for messages */
    const char *device; /* the device's name, for messages */
    int64_t fault_step; /* AXLC_OPENCL_FAULT_STEP: the step whose middle launch fails (0: none) */
    int in_step;        /* a step runs: a failure goes to rt_train_step_failed */
    int injected;       /* the failure is fault_step's */
    /* --sample: the forward's [0] and the decode step's [1] kernels over one sampling buffer */
    cl_program sprog[2];
    cl_kernel *skernels[2];
    cl_mem sbuf;
    int64_t dirty[MAX_DIRTY][2]; /* [lo, hi) the sampler wrote, to send before the next run */
    int ndirty;
    FILE *say; /* where the device line goes: stdout, or stderr when sampling */
    /* The batch: the next step's written through a pinned staging buffer (bstage: 2 slots of
     * ids | targets | step number, CL_MEM_ALLOC_HOST_PTR, mapped once) to a device buffer of 2
     * slots (ahead_mem) on a second queue (q2) while this step's kernels run; the next step
     * copies it into its slab on the device when it is the batch the runtime gave it. */
    cl_command_queue q2;
    cl_mem bstage_mem; /* NULL: bstage is plain host memory */
    char *bstage;
    cl_mem ahead_mem;
    int64_t slot_bytes;
    int slot;          /* the slot of the batch sent ahead (and of this step's batch) */
    int ahead_valid;   /* that slot holds a batch sent ahead ... */
    cl_event ahead_ev; /* ... whose write is this event */
    /* A mesh of several devices: the collectives run through MPI on the host, from a staging
     * buffer that is pinned where the driver allows (CL_MEM_ALLOC_HOST_PTR, mapped once). */
    RtComm *comm;
    cl_mem stage_mem;     /* NULL: stage is plain host memory */
    int64_t device_bytes; /* the device-only buffers made (slabs, batch slots, sampling): never freed mid-run */
    char *stage;
    int64_t stage_bytes;
    RtOclMma mma;       /* the product kernels' body on this device (the capability table) */
    char options[1024]; /* clBuildProgram's: the program's, -DAX_MMA=N and the reductions' variant */
} Session;

/* The session rt_train_main's steps run in (see the file comment). */
static Session *active;

/* ---- options ---- */

typedef struct OclOpts {
    const char *device; /* --device, or NULL */
    int list;           /* --list-devices */
    int help, config;   /* --help, --config: handled without a device */
    int sample;         /* --sample: stdout is the text, the device line goes to stderr */
    int argc;           /* the rest, for rt_train_main */
    char **argv;        /* (argc + 2): argv[0], --threads=1, the rest */
} OclOpts;

static int parse_device(const char *s, int *pi, int *di) {
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10);
    if (end == s || a < 0 || a >= MAX_DEVICES || errno)
        return -1;
    *pi = -1;
    *di = (int)a;
    if (*end == 0)
        return 0;
    if (*end != ':')
        return -1;
    const char *s2 = end + 1;
    long b = strtol(s2, &end, 10);
    if (end == s2 || *end || b < 0 || b >= MAX_DEVICES)
        return -1;
    *pi = (int)a;
    *di = (int)b;
    return 0;
}

/* Entry k of a --device list ("0,1" or "0:1,0:2"), into out; -1 past its end. */
static int device_entry(const char *list, int k, char *out, size_t cap) {
    for (; k > 0 && list; k--) {
        list = strchr(list, ',');
        list = list ? list + 1 : NULL;
    }
    if (!list)
        return -1;
    size_t n = strcspn(list, ",");
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), list);
    return 0;
}

static int device_count(const char *list) {
    int n = 1;
    for (; *list; list++)
        n += *list == ',';
    return n;
}

/* 0 when every entry of a --device list is a device. */
static int device_list_check(const char *list) {
    char e[64];
    int pi, di;
    for (int k = 0; device_entry(list, k, e, sizeof e) == 0; k++)
        if (strlen(e) > 40 || parse_device(e, &pi, &di) != 0)
            return -1;
    return 0;
}

/* Takes --device and --list-devices out of argv; the rest goes to rt_train_main, after
 * "--threads=1" (the step runs on the device, the pool's threads would only wait; a later
 * --threads wins). */
static int split_args(OclOpts *o, int argc, char **argv, RtError *err) {
    memset(o, 0, sizeof *o);
    o->argv = calloc((size_t)argc + 2, sizeof *o->argv);
    if (!o->argv)
        return rt_error_set(err, "out of memory");
    o->argv[o->argc++] = argc > 0 ? argv[0] : "trainer";
    o->argv[o->argc++] = "--threads=1";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--list-devices")) {
            o->list = 1;
        } else if (!strncmp(a, "--list-devices=", 15)) {
            return rt_error_set(err, "--list-devices takes no value");
        } else if (!strcmp(a, "--device") || !strncmp(a, "--device=", 9)) {
            const char *v = a[8] == '=' ? a + 9 : i + 1 < argc ? argv[++i] : NULL;
            if (!v)
                return rt_error_set(err, "--device needs a value: --device N or --device PLATFORM:DEVICE");
            if (device_list_check(v) != 0)
                return rt_error_set(err,
                                    "--device: '%s' is not a device number N or PLATFORM:DEVICE, or a "
                                    "comma-separated list of them, one per rank of a node (--list-devices "
                                    "lists them)",
                                    v);
            o->device = v;
        } else {
            if (!strcmp(a, "--help"))
                o->help = 1;
            if (!strcmp(a, "--config"))
                o->config = 1;
            if (!strcmp(a, "--sample") || !strncmp(a, "--sample=", 9))
                o->sample = 1;
            o->argv[o->argc++] = argv[i];
        }
    }
    return 0;
}

int rt_ocl_check_args(int argc, char **argv, RtError *err) {
    OclOpts o;
    int rc = split_args(&o, argc, argv, err);
    if (rc == 0 && !o.list)
        rc = rt_train_check_args(o.argc, o.argv, err);
    free(o.argv);
    return rc;
}

/* ---- devices ---- */

static const char *cl_err_name(cl_int e) {
    switch (e) {
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
    case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_HOST_PTR: return "CL_INVALID_HOST_PTR";
    case CL_MAP_FAILURE: return "CL_MAP_FAILURE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "an OpenCL error";
    }
}

static void dev_string(cl_device_id d, cl_device_info what, char *out, size_t cap) {
    if (clGetDeviceInfo(d, what, cap, out, NULL) != CL_SUCCESS)
        snprintf(out, cap, "?");
    out[cap - 1] = 0;
}

/* Every device of every platform, in platform order; returns how many (0 with the reason in
 * err when there are none). */
static int list_devices(DevInfo *out, RtError *err) {
    cl_platform_id plats[16];
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(16, plats, &np);
    if (e != CL_SUCCESS || np == 0)
        return rt_error_set(err,
                            "no OpenCL platform found (clGetPlatformIDs: %d, %s); install one "
                            "(pocl-opencl-icd gives a CPU device) or check OCL_ICD_VENDORS",
                            (int)e, cl_err_name(e)),
               0;
    int n = 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && n < MAX_DEVICES; d++, n++) {
            DevInfo *x = &out[n];
            x->platform = plats[p];
            x->device = devs[d];
            x->pi = (int)p;
            x->di = (int)d;
            dev_string(devs[d], CL_DEVICE_NAME, x->name, sizeof x->name);
            dev_string(devs[d], CL_DEVICE_VERSION, x->version, sizeof x->version);
            dev_string(devs[d], CL_DRIVER_VERSION, x->driver, sizeof x->driver);
            if (clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof x->platform_name, x->platform_name, NULL) !=
                CL_SUCCESS)
                snprintf(x->platform_name, sizeof x->platform_name, "?");
            x->platform_name[sizeof x->platform_name - 1] = 0;
            cl_device_type t = 0;
            clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
            snprintf(x->type, sizeof x->type, "%s",
                     t & CL_DEVICE_TYPE_GPU           ? "GPU"
                     : t & CL_DEVICE_TYPE_CPU         ? "CPU"
                     : t & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
                                                      : "other");
        }
    }
    if (n == 0)
        rt_error_set(err, "no OpenCL device found on %u platform%s", np, np == 1 ? "" : "s");
    return n;
}

static void print_devices(FILE *f, const DevInfo *d, int n) {
    for (int i = 0; i < n; i++)
        fprintf(f, "  %d (%d:%d)  %s  [%s, %s, %s, driver %s]\n", i, d[i].pi, d[i].di, d[i].name, d[i].platform_name,
                d[i].type, d[i].version, d[i].driver);
}

/* The device --device names (NULL: the first), or NULL with err set. */
static const DevInfo *pick_device(const DevInfo *d, int n, const char *spec, RtError *err) {
    int pi = -1, di = 0;
    if (spec && parse_device(spec, &pi, &di) != 0)
        return rt_error_set(err, "--device: '%s' is not a device", spec), NULL;
    for (int i = 0; i < n; i++)
        if (pi < 0 ? i == di : d[i].pi == pi && d[i].di == di)
            return &d[i];
    rt_error_set(err, "--device %s: no such OpenCL device; found %d", spec, n);
    return NULL;
}

/* The k-th GPU whose name holds match (the device kind's "opencl_device"), or NULL; *count
 * gets how many there are. */
static const DevInfo *nth_match(const DevInfo *d, int n, const char *match, int k, int *count) {
    const DevInfo *hit = NULL;
    *count = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(d[i].type, "GPU") && strstr(d[i].name, match) && (*count)++ == k)
            hit = &d[i];
    return hit;
}

/* Whether ranks of a node may share device d: AXLC_OPENCL_SHARE_DEVICES=1 lets them share any
 * (a mesh tried on one GPU), =0 none; unset, a CPU device only (PoCL: the host's cores, which
 * ranks share as cpu-N's ranks do). A GPU is one rank's. */
static int may_share(const DevInfo *d) {
    const char *env = getenv("AXLC_OPENCL_SHARE_DEVICES");
    if (env && *env)
        return strcmp(env, "0") != 0;
    return !strcmp(d->type, "CPU");
}

/* ---- the capability table: what the kernels may use on a device ---- */

/* What device queries say of a device, for the choice of kernel bodies. */
typedef struct DevCaps {
    char vendor[128]; /* CL_DEVICE_VENDOR */
    int cc;           /* NVIDIA's compute capability, major * 10 + minor (cl_nv_device_attribute_query); 0: none */
} DevCaps;

/* The device kinds whose matrix products run on tensor cores: a device whose vendor holds
 * `vendor` and whose compute capability is at least min_cc builds the products' tensor-core
 * body (backends/opencl/gemm.c) as `mma`. Every other device keeps the SIMT kernels, the
 * fastest there. Adding a kind is a row here, and a body in gemm.c if its instruction is new
 * (docs/backends.md, "Adding a device kind"). */
static const struct {
    const char *vendor;
    int min_cc;
    RtOclMma mma;
    const char *what;
} mma_kinds[] = {
    {"NVIDIA", 80, RT_OCL_MMA_PTX, "mma.sync through inline PTX (bf16 m16n8k16, tf32 m16n8k8)"},
};

#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001

static void dev_caps(cl_device_id dev, DevCaps *c) {
    memset(c, 0, sizeof *c);
    dev_string(dev, CL_DEVICE_VENDOR, c->vendor, sizeof c->vendor);
    char ext[8192];
    dev_string(dev, CL_DEVICE_EXTENSIONS, ext, sizeof ext);
    cl_uint major = 0, minor = 0;
    if (strstr(ext, "cl_nv_device_attribute_query") &&
        clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) == CL_SUCCESS)
        c->cc = (int)(major * 10 + minor);
}

/* The products' body on device d: the table's, or AXLC_OPENCL_MMA's (emulate: the portable
 * emulation of the tensor-core body, which the tests run on PoCL; off: the SIMT kernels);
 * -1 with err set for another value. `why` says where the choice came from. */
static int pick_mma(const DevInfo *d, RtOclMma *out, char *why, size_t cap, RtError *err) {
    const char *env = getenv("AXLC_OPENCL_MMA");
    if (env && *env && strcmp(env, "auto") != 0) {
        if (strcmp(env, "emulate") != 0 && strcmp(env, "off") != 0)
            return rt_error_set(err, "AXLC_OPENCL_MMA: '%s' is not auto, emulate or off", env);
        *out = !strcmp(env, "emulate") ? RT_OCL_MMA_EMULATE : RT_OCL_MMA_OFF;
        snprintf(why, cap, "AXLC_OPENCL_MMA=%s", env);
        return 0;
    }
    DevCaps c;
    dev_caps(d->device, &c);
    *out = RT_OCL_MMA_OFF;
    snprintf(why, cap, "vendor %s%s", c.vendor, c.cc ? "" : ", no compute capability");
    if (c.cc)
        snprintf(why + strlen(why), cap - strlen(why), ", compute capability %d.%d", c.cc / 10, c.cc % 10);
    for (size_t i = 0; i < sizeof mma_kinds / sizeof mma_kinds[0]; i++)
        if (strstr(c.vendor, mma_kinds[i].vendor) && c.cc >= mma_kinds[i].min_cc) {
            *out = mma_kinds[i].mma;
            snprintf(why + strlen(why), cap - strlen(why), ": %s", mma_kinds[i].what);
        }
    return 0;
}

/* Chooses the products' body and the build options; says the choice when a product has a
 * tensor-core body. */
static int choose_bodies(Session *S, const DevInfo *d, RtError *err) {
    char why[512];
    if (pick_mma(d, &S->mma, why, sizeof why, err) != 0)
        return -1;
    const char *base = S->p->build_options ? S->p->build_options : "";
    snprintf(S->options, sizeof S->options, "%s%s", base, *base && S->mma ? " " : "");
    if (S->mma)
        snprintf(S->options + strlen(S->options), sizeof S->options - strlen(S->options), "-DAX_MMA=%d", (int)S->mma);
    int32_t n = 0;
    for (int32_t i = 0; i < S->p->nlaunches; i++)
        n += S->p->launches[i].mma_local[0] > 0;
    if (n > 0)
        fprintf(S->say ? S->say : stdout, "%s: OpenCL products: %d of %d launches have a tensor-core body; %s (%s)\n",
                S->name, (int)n, (int)S->p->nlaunches,
                S->mma == RT_OCL_MMA_PTX       ? "it runs on the tensor cores"
                : S->mma == RT_OCL_MMA_EMULATE ? "it runs emulated"
                                               : "they run their SIMT body",
                why);
    return 0;
}

/* ---- building, with the per-device binary cache ---- */

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static void mkdirs(const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(buf, 0755);
            *s = '/';
        }
    mkdir(buf, 0755);
}

/* The cache file of this program on this device: keyed by the entries' format, platform,
 * device, device and driver versions, build options and source. */
static void cache_path(const Session *S, const DevInfo *d, char *out, size_t cap) {
    char dir[3500];
    rt_cache_dir(dir, sizeof dir);
    if (!*dir) {
        out[0] = 0;
        return;
    }
    /* the entries' format first: 2, a trailer with a checksum (older entries are never read) */
    static const char format[] = "axlc-ocl-cache 2";
    uint64_t h = fnv_bytes(0xcbf29ce484222325ull, format, sizeof format);
    const char *parts[] = {d->platform_name, d->name, d->version, d->driver, S->options, S->p->source};
    for (int i = 0; i < 6; i++)
        h = fnv_bytes(h, parts[i], strlen(parts[i]) + 1);
    snprintf(out, cap, "%s/ocl-%016llx.bin", dir, (unsigned long long)h);
}

static void build_log(cl_program prog, cl_device_id dev, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, cap - 1, out, &n) == CL_SUCCESS)
        out[n < cap ? n : cap - 1] = 0;
}

/* Builds the program from the cache entry at path: -1 when there is none, or when it is
 * damaged, which is said naming the entry. The driver never sees a damaged binary: PoCL, for
 * one, asserts on a truncated one, which would fail every start until the cache was cleared. */
static int build_from_binary(Session *S, const DevInfo *d, const char *path) {
    RtMapped m = {0};
    if (rt_file_map(path, &m, NULL) != 0)
        return -1;
    uint64_t n = 0;
    char why[256] = "an empty binary";
    if (rt_cache_entry_check(m.data, (uint64_t)m.size, &n, why, sizeof why) != 0 || n == 0) {
        rt_file_unmap(&m);
        fprintf(stderr, "%s: note: the OpenCL binary cache entry %s is damaged (%s); building the kernels again\n",
                S->name, path, why);
        return -1;
    }
    size_t len = (size_t)n;
    const unsigned char *bin = m.data;
    cl_int st, e;
    S->prog = clCreateProgramWithBinary(S->ctx, 1, &d->device, &len, &bin, &st, &e);
    rt_file_unmap(&m);
    if (e != CL_SUCCESS || st != CL_SUCCESS) {
        if (S->prog)
            clReleaseProgram(S->prog);
        S->prog = NULL;
        return -1;
    }
    if (clBuildProgram(S->prog, 1, &d->device, S->options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(S->prog);
        S->prog = NULL;
        return -1;
    }
    return 0;
}

/* Saves the built binary; a failure costs only the next start's build time. */
static void cache_save(Session *S, const char *path) {
    size_t len = 0;
    if (clGetProgramInfo(S->prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS || !len)
        return;
    unsigned char *bin = malloc(len);
    RtWfile w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    mkdirs(dir);
    if (bin && clGetProgramInfo(S->prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS &&
        rt_wfile_open(&w, path, NULL) == 0) {
        unsigned char trailer[RT_CACHE_TRAILER_BYTES];
        rt_cache_entry_trailer(bin, len, trailer);
        if (rt_wfile_write(&w, bin, len, NULL) == 0 && rt_wfile_write(&w, trailer, sizeof trailer, NULL) == 0)
            rt_wfile_commit(&w, NULL);
        else
            rt_wfile_abort(&w);
    }
    free(bin);
}

/* The reductions' variant (emit.c), after the options choose_bodies set: on NVIDIA's platform
 * AXLC_NV_SHFL, warp shuffles in inline PTX, which no other driver would compile; on a CPU
 * device AXLC_CPU_REDUCE, each run summed by one work item without the local-memory tree
 * (PoCL runs a work-group's items as loops around each barrier: the tree cost more than it
 * saved). */
static void build_opts(Session *S, const DevInfo *d) {
    const char *v = strstr(d->platform_name, "NVIDIA") ? "-DAXLC_NV_SHFL"
                    : !strcmp(d->type, "CPU")          ? "-DAXLC_CPU_REDUCE"
                                                       : "";
    size_t n = strlen(S->options);
    snprintf(S->options + n, sizeof S->options - n, "%s%s", *v && n ? " " : "", v);
}

static int build_program(Session *S, const DevInfo *d, RtError *err) {
    build_opts(S, d);
    char path[4096];
    cache_path(S, d, path, sizeof path);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int cached = *path && build_from_binary(S, d, path) == 0;
    if (cached) /* its mtime is its last use: the compile cache's trim removes the least recent */
        (void)utimensat(AT_FDCWD, path, NULL, 0);
    if (!cached) {
        cl_int e;
        const char *src = S->p->source;
        S->prog = clCreateProgramWithSource(S->ctx, 1, &src, NULL, &e);
        if (e != CL_SUCCESS)
            return rt_error_set(err, "clCreateProgramWithSource: %d (%s)", (int)e, cl_err_name(e));
        e = clBuildProgram(S->prog, 1, &d->device, S->options, NULL, NULL);
        if (e != CL_SUCCESS) {
            char log[4096];
            build_log(S->prog, d->device, log, sizeof log);
            return rt_error_set(err, "%s: building the kernels failed (%d, %s): %s", d->name, (int)e, cl_err_name(e),
                                log);
        }
        if (*path)
            cache_save(S, path);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(S->say ? S->say : stdout, "%s: OpenCL device %s [%s]: kernels %s in %.2f s%s%s\n", S->name, d->name,
            d->platform_name, cached ? "loaded from the cache" : "built", s, *path ? ", cache " : "", path);
    return 0;
}

/* A span of the slab that one buffer must hold whole: a tensor, or the scalars the runtime reads. */
typedef struct Extent {
    int64_t lo, hi;
} Extent;

static int extent_cmp(const void *a, const void *b) {
    const Extent *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int add_cut(Session *S, int64_t at, RtError *err) {
    int64_t *c = realloc(S->cut, ((size_t)S->nbufs + 2) * sizeof *c);
    if (!c)
        return rt_error_set(err, "out of memory");
    S->cut = c;
    S->cut[++S->nbufs] = at;
    return 0;
}

/* The buffer of the slab that holds byte `at` (the last for the end). */
static int32_t buf_of(const Session *S, int64_t at) {
    int32_t lo = 0, hi = S->nbufs - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (S->cut[mid] <= at)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Splits the slab into as few buffers of at most max_alloc bytes as the tensors allow: a cut
 * never falls inside a tensor any kernel reads or writes (the memory plan reuses bytes, so
 * tensors that overlap are one span), nor inside a parameter, its moments, the batch or the
 * scalars the runtime reads. A span larger than the cap alone is an error that names it. */
static int plan_split(Session *S, const DevInfo *d, RtError *err) {
    const RtProgram *p = &S->p->base;
    cl_ulong cap = 0;
    clGetDeviceInfo(d->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof cap, &cap, NULL);
    const char *env = getenv("AXLC_OPENCL_MAX_ALLOC"); /* a smaller cap, to test the split */
    if (env && *env && strtoll(env, NULL, 10) > 0 && (cap == 0 || (cl_ulong)strtoll(env, NULL, 10) < cap))
        cap = (cl_ulong)strtoll(env, NULL, 10);
    if (cap == 0)
        cap = (cl_ulong)p->slab_bytes;
    S->max_alloc = (int64_t)cap;
    int64_t n = 0, batch = p->batch * p->seq * (int64_t)sizeof(int32_t);
    for (int32_t i = 0; i < S->p->nlaunches; i++)
        n += S->p->launches[i].nargs;
    Extent *x = calloc((size_t)n + 3 * (size_t)p->nparams + 8, sizeof *x);
    S->arg_buf = calloc((size_t)n + 1, sizeof *S->arg_buf);
    S->arg_first = calloc((size_t)S->p->nlaunches + 1, sizeof *S->arg_first);
    S->cut = malloc(2 * sizeof *S->cut);
    if (!x || !S->arg_buf || !S->arg_first || !S->cut)
        return free(x), rt_error_set(err, "out of memory");
    int64_t m = 0;
    for (int32_t i = 0; i < S->p->nlaunches; i++)
        for (int32_t a = 0; a < S->p->launches[i].nargs; a++) {
            const RtOclLaunch *L = &S->p->launches[i];
            int64_t bytes = L->arg_bytes ? L->arg_bytes[a] : p->slab_bytes - L->args[a];
            x[m++] = (Extent){L->args[a], L->args[a] + bytes};
        }
    for (int32_t i = 0; i < p->nparams; i++) {
        const RtParamSlot *s = &p->params[i];
        int64_t bytes = 4;
        for (int r = 0; r < s->rank; r++)
            bytes *= s->shape[r];
        const int64_t at[3] = {s->offset, s->m_offset, s->v_offset};
        for (int k = 0; k < 3; k++)
            if (at[k] >= 0)
                x[m++] = (Extent){at[k], at[k] + bytes};
    }
    const int64_t scalars[] = {p->step_offset, p->loss_offset, p->grad_norm_offset, p->lr_offset,
                               p->has_aux_loss ? p->aux_loss_offset : -1};
    x[m++] = (Extent){p->ids_offset, p->ids_offset + batch};
    x[m++] = (Extent){p->targets_offset, p->targets_offset + batch};
    for (int k = 0; k < 5; k++)
        if (scalars[k] >= 0)
            x[m++] = (Extent){scalars[k], scalars[k] + 4};
    x[m++] = (Extent){p->slab_bytes, p->slab_bytes}; /* the end */
    qsort(x, (size_t)m, sizeof *x, extent_cmp);
    S->nbufs = 0;
    S->cut[0] = 0;
    int64_t start = 0, step = (int64_t)cap & ~(int64_t)4095;
    if (step <= 0)
        step = (int64_t)cap;
    for (int64_t i = 0; i < m;) {
        Extent span = x[i++];
        while (i < m && x[i].lo < span.hi) /* overlapping tensors: one span */
            span.hi = x[i].hi > span.hi ? x[i].hi : span.hi, i++;
        if (span.hi - span.lo > (int64_t)cap) {
            free(x);
            return rt_error_set(
                err,
                "the tensors at bytes %lld..%lld of the slab (%.2f MiB) do not fit one buffer of "
                "this device, which holds at most %.2f MiB (CL_DEVICE_MAX_MEM_ALLOC_SIZE%s); compile for "
                "its kind (--target, the device table's max_alloc) to plan the slab in "
                "pieces that fit",
                (long long)span.lo, (long long)span.hi, (double)(span.hi - span.lo) / 1048576.0,
                (double)cap / 1048576.0, env && *env ? ", or AXLC_OPENCL_MAX_ALLOC" : "");
        }
        while (span.hi - start > (int64_t)cap) { /* cut before the span, or inside the gap */
            int64_t c = span.lo - start > step ? start + step : span.lo;
            if (add_cut(S, c, err) != 0)
                return free(x), -1;
            start = c;
        }
    }
    free(x);
    if (add_cut(S, p->slab_bytes, err) != 0)
        return -1;
    for (int32_t i = 0, k = 0; i < S->p->nlaunches; i++) {
        S->arg_first[i] = k;
        for (int32_t a = 0; a < S->p->launches[i].nargs; a++)
            S->arg_buf[k++] = buf_of(S, S->p->launches[i].args[a]);
    }
    if (S->nbufs > 1)
        printf("%s: OpenCL: the %.2f MiB slab in %d buffers (this device's largest is %.2f MiB)\n", S->name,
               (double)p->slab_bytes / 1048576.0, S->nbufs, (double)cap / 1048576.0);
    return 0;
}

/* The slab against the device's memory (CL_DEVICE_GLOBAL_MEM_SIZE, or the smaller
 * AXLC_OPENCL_MEM_SIZE, a test hook): a job that cannot fit is refused before its first step,
 * where a driver that allocates lazily would fail inside it. */
static int check_memory(const Session *S, const DevInfo *d, RtError *err) {
    cl_ulong mem = 0;
    clGetDeviceInfo(d->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    const char *env = getenv("AXLC_OPENCL_MEM_SIZE");
    if (env && *env && strtoll(env, NULL, 10) > 0 && (mem == 0 || (cl_ulong)strtoll(env, NULL, 10) < mem))
        mem = (cl_ulong)strtoll(env, NULL, 10);
    int64_t slab = S->p->base.slab_bytes;
    if (mem == 0 || (cl_ulong)slab <= mem)
        return 0;
    return rt_error_set(err,
                        "the %.2f MiB slab of this job does not fit the %.2f MiB of memory of OpenCL device %s "
                        "(CL_DEVICE_GLOBAL_MEM_SIZE%s); nothing was trained. axlc memcheck --target %s%s says what "
                        "would fit (remat, microbatches, bf16, more devices)",
                        (double)slab / 1048576.0, (double)mem / 1048576.0, d->name,
                        env && *env ? ", or AXLC_OPENCL_MEM_SIZE" : "",
                        S->p->device_kind && *S->p->device_kind ? S->p->device_kind : "KIND",
                        S->p->device_kind && *S->p->device_kind ? "-1" : " (this device's kind)");
}

/* Every kernel's arguments (a __global pointer and a long offset per buffer) against the
 * device's CL_DEVICE_MAX_PARAMETER_SIZE (or the smaller AXLC_OPENCL_PARAM_SIZE, a test hook).
 * axlc keeps each kernel within OpenCL 1.2's least, 1,024 bytes (backends/opencl: 60 pairs at
 * most); a device that takes less is refused here, naming the kernel, not in clEnqueue. */
static int check_params(const Session *S, const DevInfo *d, RtError *err) {
    size_t most = 0;
    cl_uint bits = 64;
    clGetDeviceInfo(d->device, CL_DEVICE_MAX_PARAMETER_SIZE, sizeof most, &most, NULL);
    clGetDeviceInfo(d->device, CL_DEVICE_ADDRESS_BITS, sizeof bits, &bits, NULL);
    const char *env = getenv("AXLC_OPENCL_PARAM_SIZE");
    if (env && *env && atoll(env) > 0 && (most == 0 || (size_t)atoll(env) < most))
        most = (size_t)atoll(env);
    if (most == 0)
        return 0;
    for (int32_t i = 0; i < S->p->nlaunches; i++) {
        const RtOclLaunch *L = &S->p->launches[i];
        size_t bytes = (size_t)L->nargs * (bits / 8 + sizeof(cl_long));
        if (L->collective == 0 && bytes > most)
            return rt_error_set(err,
                                "kernel %s takes %d buffers (%zu bytes of arguments), over the %zu bytes of "
                                "OpenCL device %s (CL_DEVICE_MAX_PARAMETER_SIZE%s); nothing was trained",
                                L->kernel, (int)L->nargs, bytes, most, d->name,
                                env && *env ? ", or AXLC_OPENCL_PARAM_SIZE" : "");
    }
    return 0;
}

static int make_kernels(Session *S, RtError *err) {
    S->kernels = calloc((size_t)S->p->nlaunches + 1, sizeof *S->kernels);
    if (!S->kernels)
        return rt_error_set(err, "out of memory");
    for (int32_t i = 0; i < S->p->nlaunches; i++) {
        cl_int e;
        const RtOclLaunch *L = &S->p->launches[i];
        if (L->collective > 0) /* the runtime's, on the host: no kernel */
            continue;
        S->kernels[i] = clCreateKernel(S->prog, L->kernel, &e);
        if (e != CL_SUCCESS)
            return rt_error_set(err, "clCreateKernel(%s): %d (%s)", L->kernel, (int)e, cl_err_name(e));
        for (int32_t a = 0; a < L->nargs; a++) {
            /* the offset within the buffer that holds the tensor */
            cl_long off = (cl_long)(L->args[a] - S->cut[S->arg_buf[S->arg_first[i] + a]]);
            e = clSetKernelArg(S->kernels[i], (cl_uint)(2 * a + 1), sizeof off, &off);
            if (e != CL_SUCCESS)
                return rt_error_set(err, "clSetKernelArg(%s, %d): %d (%s)", L->kernel, 2 * a + 1, (int)e,
                                    cl_err_name(e));
        }
    }
    return 0;
}

static int session_open(Session *S, const DevInfo *d, RtError *err) {
    cl_int e;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d->platform, 0};
    S->ctx = clCreateContext(props, 1, &d->device, NULL, NULL, &e);
    if (e != CL_SUCCESS)
        return rt_error_set(err, "%s: clCreateContext: %d (%s)", d->name, (int)e, cl_err_name(e));
    const char *prof = getenv("AXLC_OPENCL_PROFILE");
    if (prof && *prof && strcmp(prof, "0") != 0)
        S->prof_ns = calloc((size_t)S->p->nlaunches + 1, sizeof *S->prof_ns);
    S->q = clCreateCommandQueue(S->ctx, d->device, S->prof_ns ? CL_QUEUE_PROFILING_ENABLE : 0, &e);
    if (e != CL_SUCCESS)
        return rt_error_set(err, "%s: clCreateCommandQueue: %d (%s)", d->name, (int)e, cl_err_name(e));
    return check_memory(S, d, err) != 0 || check_params(S, d, err) != 0 || choose_bodies(S, d, err) != 0 ||
                   build_program(S, d, err) != 0 || plan_split(S, d, err) != 0
               ? -1
               : make_kernels(S, err);
}

/* AXLC_OPENCL_PROFILE: the bytes between host and device, and the launches that took the most
 * device time, on stderr. */
static void profile_report(Session *S) {
    const Traffic *T = &S->traffic;
    if (S->prof_ns && T->scalls > 0)
        fprintf(stderr,
                "%s: OpenCL sampling traffic: %lld runs; the first sent %lld B (the weights), then per run %.0f B "
                "to the device and %.0f B back\n",
                S->name, (long long)T->scalls, (long long)T->sfirst,
                T->scalls > 1 ? (double)T->s_to_dev / (double)(T->scalls - 1) : 0.0,
                (double)T->s_to_host / (double)T->scalls);
    if (!S->prof_ns || S->prof_steps == 0)
        return;
    fprintf(stderr,
            "%s: OpenCL traffic: %lld steps, per step %.0f B to the device and %.0f B back (at most %lld B in "
            "one step); the whole %.2f MiB slab sent %lld times (the start, host copies), read back %lld times "
            "(host copies, --skip-outliers undoing an update) and copied on the device %lld times (eval, replays); the "
            "state "
            "(%.2f MiB of parameters and moments) read back %lld times (checkpoints, replays, --skip-outliers)\n",
            S->name, (long long)T->steps, T->steps ? (double)T->to_dev / (double)T->steps : 0.0,
            T->steps ? (double)T->to_host / (double)T->steps : 0.0, (long long)T->step_max,
            (double)S->p->base.slab_bytes / 1048576.0, (long long)T->sends, (long long)T->reads, (long long)T->copies,
            T->state_reads ? (double)T->state_bytes / (double)T->state_reads / 1048576.0 : 0.0,
            (long long)T->state_reads);
    fprintf(stderr,
            "%s: OpenCL batch: through %s staging buffer; %lld of %lld steps took the batch sent ahead during the "
            "step before (a second queue)\n",
            S->name, S->bstage_mem ? "a pinned" : "a host", (long long)T->ahead, (long long)T->steps);
    if (S->p->base.ncollectives > 0)
        fprintf(stderr,
                "%s: OpenCL collectives: per step %.0f B read back and %.0f B sent through the host for MPI, "
                "%.3f ms (%s staging buffer); %.0f local slices copied on the device\n",
                S->name, T->steps ? (double)T->coll_to_host / (double)T->steps : 0.0,
                T->steps ? (double)T->coll_to_dev / (double)T->steps : 0.0,
                T->steps ? T->coll_s * 1e3 / (double)T->steps : 0.0, S->stage_mem ? "a pinned" : "a host",
                T->steps ? (double)T->slices / (double)T->steps : 0.0);
    double total = 0;
    for (int32_t i = 0; i < S->p->nlaunches; i++)
        total += S->prof_ns[i];
    int32_t reductions = 0; /* emit.c names them kN_reduce_sum, kN_reduce_max_parts, ... */
    double red_ns = 0;
    for (int32_t i = 0; i < S->p->nlaunches; i++)
        if (strstr(S->p->launches[i].kernel, "_reduce_"))
            reductions++, red_ns += S->prof_ns[i];
    fprintf(stderr,
            "%s: OpenCL profile: %d launches per step (%d of them reductions, %.3f ms), %.3f ms of device time "
            "per step; the most:\n",
            S->name, S->p->nlaunches, reductions, red_ns / 1e6 / (double)S->prof_steps,
            total / 1e6 / (double)S->prof_steps);
    for (int k = 0; k < 12; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < S->p->nlaunches; i++)
            if (S->prof_ns[i] >= 0 && (best < 0 || S->prof_ns[i] > S->prof_ns[best]))
                best = i;
        if (best < 0)
            break;
        fprintf(stderr, "  %8.3f ms  %s\n", S->prof_ns[best] / 1e6 / (double)S->prof_steps,
                S->p->launches[best].kernel);
        S->prof_ns[best] = -1;
    }
}

static void session_close(Session *S) {
    profile_report(S);
    for (int w = 0; w < 2; w++) {
        int32_t n = w ? S->p->ndecode : S->p->nforward;
        for (int32_t i = 0; S->skernels[w] && i < n; i++)
            if (S->skernels[w][i])
                clReleaseKernel(S->skernels[w][i]);
        free(S->skernels[w]);
        if (S->sprog[w])
            clReleaseProgram(S->sprog[w]);
    }
    if (S->sbuf)
        clReleaseMemObject(S->sbuf);
    free(S->prof_ns);
    /* The slabs are freed by now: buffers are released without unmapping, which would
     * write to the freed host memory on a driver that copies. */
    for (int i = 0; i < MAX_SLABS; i++) {
        for (int k = 0; S->slabs[i].mem && k < S->nbufs; k++)
            if (S->slabs[i].mem[k])
                clReleaseMemObject(S->slabs[i].mem[k]);
        free(S->slabs[i].mem);
    }
    if (S->stage_mem) {
        if (S->stage)
            clEnqueueUnmapMemObject(S->q, S->stage_mem, S->stage, 0, NULL, NULL);
        clFinish(S->q);
        clReleaseMemObject(S->stage_mem);
    } else {
        free(S->stage);
    }
    if (S->q2)
        clFinish(S->q2);
    if (S->ahead_ev)
        clReleaseEvent(S->ahead_ev);
    if (S->bstage_mem) {
        if (S->bstage)
            clEnqueueUnmapMemObject(S->q, S->bstage_mem, S->bstage, 0, NULL, NULL);
        clFinish(S->q);
        clReleaseMemObject(S->bstage_mem);
    } else {
        free(S->bstage);
    }
    if (S->ahead_mem)
        clReleaseMemObject(S->ahead_mem);
    if (S->q2)
        clReleaseCommandQueue(S->q2);
    free(S->cut);
    free(S->arg_buf);
    free(S->arg_first);
    for (int32_t i = 0; S->kernels && i < S->p->nlaunches; i++)
        if (S->kernels[i])
            clReleaseKernel(S->kernels[i]);
    free(S->kernels);
    if (S->prog)
        clReleaseProgram(S->prog);
    if (S->q)
        clReleaseCommandQueue(S->q);
    if (S->ctx)
        clReleaseContext(S->ctx);
}

/* ---- the step ---- */

static int step_fail(Session *S, const char *what, cl_int e) {
    if (!S->failed) {
        char msg[1024];
        snprintf(msg, sizeof msg, "OpenCL device %s: %s failed: %d (%s)%s; the state on the device is lost", S->device,
                 what, (int)e, cl_err_name(e), S->injected ? ", injected by AXLC_OPENCL_FAULT_STEP" : "");
        if (S->in_step)
            rt_train_step_failed(msg);
        else
            fprintf(stderr, "%s: %s\n", S->name, msg);
    }
    S->failed = 1;
    return -1;
}

/* The device buffer of a host slab, made on first use (to be sent whole by its first step). */
static SlabBuf *slab_buf(Session *S, char *slab) {
    for (int i = 0; i < MAX_SLABS; i++)
        if (S->slabs[i].mem && S->slabs[i].host == slab)
            return &S->slabs[i];
    for (int i = 0; i < MAX_SLABS; i++) {
        if (S->slabs[i].mem)
            continue;
        cl_int e = CL_SUCCESS;
        S->slabs[i].mem = calloc((size_t)S->nbufs, sizeof *S->slabs[i].mem);
        if (!S->slabs[i].mem) {
            step_fail(S, "allocating the buffer table", CL_OUT_OF_HOST_MEMORY);
            return NULL;
        }
        for (int k = 0; k < S->nbufs && e == CL_SUCCESS; k++) {
            size_t bytes = (size_t)(S->cut[k + 1] - S->cut[k]);
            S->slabs[i].mem[k] = clCreateBuffer(S->ctx, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &e);
            if (e == CL_SUCCESS)
                S->device_bytes += (int64_t)(bytes ? bytes : 4);
        }
        if (e != CL_SUCCESS) {
            step_fail(S, "clCreateBuffer for the slab", e);
            for (int k = 0; k < S->nbufs; k++)
                if (S->slabs[i].mem[k])
                    clReleaseMemObject(S->slabs[i].mem[k]);
            free(S->slabs[i].mem);
            S->slabs[i].mem = NULL;
            return NULL;
        }
        S->slabs[i].host = slab;
        S->slabs[i].whole = 1;
        S->slabs[i].stale = 0;
        return &S->slabs[i];
    }
    step_fail(S, "a fifth slab", CL_OUT_OF_RESOURCES);
    return NULL;
}

/* Bytes [off, off + bytes) of the slab between host and device, over the buffers that hold
 * them: host -> device (write) without waiting (the step's end, a blocking read, waits), or
 * device -> host, the last piece blocking when wait. */
static int xfer_at(Session *S, SlabBuf *b, int64_t off, int64_t bytes, int write, cl_bool wait, char *host) {
    if (off < 0 || bytes <= 0)
        return 0;
    host -= off; /* host + lo: byte lo of the slab */
    for (int32_t k = buf_of(S, off); k < S->nbufs && S->cut[k] < off + bytes; k++) {
        int64_t lo = off > S->cut[k] ? off : S->cut[k];
        int64_t hi = off + bytes < S->cut[k + 1] ? off + bytes : S->cut[k + 1];
        if (hi <= lo)
            continue;
        int last = hi == off + bytes;
        cl_int e = write ? clEnqueueWriteBuffer(S->q, b->mem[k], CL_FALSE, (size_t)(lo - S->cut[k]), (size_t)(hi - lo),
                                                host + lo, 0, NULL, NULL)
                         : clEnqueueReadBuffer(S->q, b->mem[k], last ? wait : CL_FALSE, (size_t)(lo - S->cut[k]),
                                               (size_t)(hi - lo), host + lo, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            return step_fail(S, write ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", e);
    }
    return 0;
}

static int xfer(Session *S, SlabBuf *b, int64_t off, int64_t bytes, int write, cl_bool wait) {
    return xfer_at(S, b, off, bytes, write, wait, b->host + off);
}

static int send(Session *S, SlabBuf *b, int64_t off, int64_t bytes) {
    return xfer(S, b, off, bytes, 1, CL_FALSE);
}

static int fetch(Session *S, SlabBuf *b, int64_t off, int64_t bytes, cl_bool wait) {
    return xfer(S, b, off, bytes, 0, wait);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The staging buffer of the collectives, made at the first: large enough for the largest
 * operand and result together (64-byte aligned halves), pinned where the driver gives a
 * CL_MEM_ALLOC_HOST_PTR buffer and maps it, else plain host memory. */
static int stage_make(Session *S) {
    if (S->stage)
        return 0;
    int64_t need = 64;
    for (int32_t i = 0; i < S->p->nlaunches; i++) {
        const RtOclLaunch *L = &S->p->launches[i];
        int64_t n = L->collective > 0 ? (L->arg_bytes[0] + 63) / 64 * 64 + L->arg_bytes[1] : 0;
        need = n > need ? n : need;
    }
    cl_int e = CL_SUCCESS;
    if (need <= S->max_alloc)
        S->stage_mem = clCreateBuffer(S->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, (size_t)need, NULL, &e);
    if (S->stage_mem && e == CL_SUCCESS)
        S->stage = clEnqueueMapBuffer(S->q, S->stage_mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, (size_t)need, 0, NULL,
                                      NULL, &e);
    if (!S->stage || e != CL_SUCCESS) { /* no pinned buffer: host memory does, more slowly */
        if (S->stage_mem)
            clReleaseMemObject(S->stage_mem);
        S->stage_mem = NULL;
        S->stage = aligned_alloc(64, (size_t)(need + 63) / 64 * 64);
        if (!S->stage)
            return step_fail(S, "allocating the collectives' staging buffer", CL_OUT_OF_HOST_MEMORY);
    }
    S->stage_bytes = need;
    return 0;
}

/* The batch's staging buffer, its device slots and the second queue, made at the first step:
 * pinned where the driver gives a CL_MEM_ALLOC_HOST_PTR buffer and maps it, else plain host
 * memory (then the driver copies from pageable memory, more slowly). */
static int batch_make(Session *S) {
    if (S->bstage)
        return 0;
    const RtProgram *p = &S->p->base;
    int64_t batch = p->batch * p->seq * (int64_t)sizeof(int32_t);
    S->slot_bytes = (2 * batch + 4 + 127) / 128 * 128;
    cl_int e;
    cl_device_id dev;
    clGetCommandQueueInfo(S->q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
    S->q2 = clCreateCommandQueue(S->ctx, dev, 0, &e);
    if (e != CL_SUCCESS)
        return step_fail(S, "clCreateCommandQueue (the batch's queue)", e);
    S->ahead_mem = clCreateBuffer(S->ctx, CL_MEM_READ_WRITE, (size_t)(2 * S->slot_bytes), NULL, &e);
    if (e != CL_SUCCESS)
        return step_fail(S, "clCreateBuffer (the batch's device slots)", e);
    S->device_bytes += 2 * S->slot_bytes;
    S->bstage_mem =
        clCreateBuffer(S->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, (size_t)(2 * S->slot_bytes), NULL, &e);
    if (S->bstage_mem && e == CL_SUCCESS)
        S->bstage = clEnqueueMapBuffer(S->q, S->bstage_mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                       (size_t)(2 * S->slot_bytes), 0, NULL, NULL, &e);
    if (!S->bstage || e != CL_SUCCESS) {
        if (S->bstage_mem)
            clReleaseMemObject(S->bstage_mem);
        S->bstage_mem = NULL;
        S->bstage = aligned_alloc(64, (size_t)(2 * S->slot_bytes));
        if (!S->bstage)
            return step_fail(S, "allocating the batch's staging buffer", CL_OUT_OF_HOST_MEMORY);
    }
    memset(S->bstage, 0, (size_t)(2 * S->slot_bytes));
    return 0;
}

/* Bytes [off, off + bytes) of the slab from ahead_mem at src, on the device, after `wait`. */
static int copy_in(Session *S, SlabBuf *b, int64_t src, int64_t off, int64_t bytes, cl_event *wait) {
    int32_t k = buf_of(S, off);
    cl_int e = clEnqueueCopyBuffer(S->q, S->ahead_mem, b->mem[k], (size_t)src, (size_t)(off - S->cut[k]), (size_t)bytes,
                                   wait ? 1 : 0, wait, NULL);
    return e == CL_SUCCESS ? 0 : step_fail(S, "clEnqueueCopyBuffer (the batch)", e);
}

/* This step's batch and step number to the device: the batch sent ahead during the step before,
 * copied on the device, where it is the one the runtime loaded (the same bytes); else the host's,
 * through the staging slot. The step number goes from the slot. The bytes sent now. */
static int64_t batch_in(Session *S, SlabBuf *b) {
    const RtProgram *p = &S->p->base;
    int64_t batch = p->batch * p->seq * (int64_t)sizeof(int32_t), at = S->slot * S->slot_bytes, sent = 4;
    char *h = S->bstage + at;
    const char *ids = b->host + p->ids_offset, *targets = b->host + p->targets_offset;
    int hit = S->ahead_valid && !memcmp(h, ids, (size_t)batch) && !memcmp(h + batch, targets, (size_t)batch);
    if (S->ahead_ev && !hit) { /* the slot is written again: its write must be done */
        clWaitForEvents(1, &S->ahead_ev);
    }
    if (hit) {
        if (copy_in(S, b, at, p->ids_offset, batch, &S->ahead_ev) != 0 ||
            copy_in(S, b, at + batch, p->targets_offset, batch, NULL) != 0)
            return -1;
        S->traffic.ahead++;
    } else {
        memcpy(h, ids, (size_t)batch);
        memcpy(h + batch, targets, (size_t)batch);
        if (xfer_at(S, b, p->ids_offset, batch, 1, CL_FALSE, h) != 0 ||
            xfer_at(S, b, p->targets_offset, batch, 1, CL_FALSE, h + batch) != 0)
            return -1;
        sent += 2 * batch;
    }
    if (S->ahead_ev)
        clReleaseEvent(S->ahead_ev);
    S->ahead_ev = NULL;
    S->ahead_valid = 0;
    memcpy(h + 2 * batch, b->host + p->step_offset, 4);
    return xfer_at(S, b, p->step_offset, 4, 1, CL_FALSE, h + 2 * batch) != 0 ? -1 : sent;
}

/* The next step's batch (rt_train_batch_ahead) into the other staging slot and on to the device
 * on the second queue, while this step's kernels run. The bytes sent. */
static int64_t batch_ahead(Session *S) {
    const RtProgram *p = &S->p->base;
    int64_t batch = p->batch * p->seq * (int64_t)sizeof(int32_t);
    int next = 1 - S->slot;
    char *h = S->bstage + next * S->slot_bytes;
    if (rt_train_batch_ahead((int32_t *)(void *)h, (int32_t *)(void *)(h + batch)) != 0)
        return 0;
    cl_int e = clEnqueueWriteBuffer(S->q2, S->ahead_mem, CL_FALSE, (size_t)(next * S->slot_bytes), (size_t)(2 * batch),
                                    h, 0, NULL, &S->ahead_ev);
    if (e == CL_SUCCESS)
        e = clFlush(S->q2);
    if (e != CL_SUCCESS)
        return step_fail(S, "clEnqueueWriteBuffer (the next batch)", e);
    S->slot = next;
    S->ahead_valid = 1;
    return 2 * batch;
}

/* A local_slice (this member's chunk of its own operand along an axis: no traffic) copied on the
 * device: a run of bytes per index of the dims before the axis, one rectangular copy between two
 * buffers, or a copy per run within one (OpenCL gives both sides of a rectangular copy within
 * one buffer the same pitch), up to 64 runs. 1 where it cannot (operand and result overlap, a
 * tensor spans two buffers, more runs, a failed enqueue): the host does it then. */
static int local_slice(Session *S, SlabBuf *b, const RtOclLaunch *L, const RtCollective *k) {
    const RtMesh *m = &S->p->base.mesh;
    int64_t member = 0, es = rt_coll_elem_bytes(k->dtype), outer = 1, inner = es;
    for (int i = 0; i < k->naxes; i++)
        member = member * m->sizes[k->axes[i]] + rt_comm_coord(S->comm, k->axes[i]);
    for (int d = 0; d < k->axis; d++)
        outer *= k->in_shape[d];
    for (int d = k->axis + 1; d < k->rank; d++)
        inner *= k->in_shape[d];
    int64_t in = L->args[0], out = L->args[1], len = k->out_shape[k->axis], row = len * inner;
    int64_t pitch = k->in_shape[k->axis] * inner;
    int32_t bi = buf_of(S, in), bo = buf_of(S, out);
    /* one buffer takes one pitch for both sides (OpenCL): a copy per row then, if they are few */
    if (bi != buf_of(S, in + L->arg_bytes[0] - 1) || bo != buf_of(S, out + L->arg_bytes[1] - 1) ||
        (bi == bo && in < out + L->arg_bytes[1] && out < in + L->arg_bytes[0]) || outer <= 0 || row <= 0 ||
        (bi == bo && outer > 64))
        return 1;
    int64_t src = in - S->cut[bi] + member * row, dst = out - S->cut[bo];
    cl_int e = CL_SUCCESS;
    if (bi != bo && outer > 1) {
        size_t so[3] = {(size_t)src, 0, 0}, dor[3] = {(size_t)dst, 0, 0}, region[3] = {(size_t)row, (size_t)outer, 1};
        e = clEnqueueCopyBufferRect(S->q, b->mem[bi], b->mem[bo], so, dor, region, (size_t)pitch, 0, (size_t)row, 0, 0,
                                    NULL, NULL);
    } else {
        for (int64_t o = 0; o < outer && e == CL_SUCCESS; o++)
            e = clEnqueueCopyBuffer(S->q, b->mem[bi], b->mem[bo], (size_t)(src + o * pitch), (size_t)(dst + o * row),
                                    (size_t)row, 0, NULL, NULL);
    }
    return e == CL_SUCCESS ? 0 : 1; /* the host does it then */
}

/* Collective launch i: its operand from the device into the staging buffer (waiting for the
 * kernels before it), the exchange through MPI on the host, and its result back to the device
 * ahead of the kernels after it (the in-order queue orders them; the next read, blocking,
 * waits for this write before the staging buffer is used again). */
/* This device's stage on the pipeline axis, or -1 without one. */
static int64_t pipeline_coord(const Session *S) {
    int a = rt_mesh_axis(&S->p->base.mesh, "pipeline");
    return S->comm && a >= 0 ? rt_comm_coord(S->comm, a) : -1;
}

static int collective(Session *S, SlabBuf *b, int32_t i) {
    const RtOclLaunch *L = &S->p->launches[i];
    if (!S->comm)
        return step_fail(S, "a collective without the mesh (no communicator)", CL_INVALID_VALUE);
    const RtCollective *k = &S->p->base.collectives[L->collective - 1];
    if (k->kind == RT_COLL_LOCAL_SLICE && local_slice(S, b, L, k) == 0) {
        S->traffic.slices++;
        return 0;
    }
    if (stage_make(S) != 0)
        return -1;
    double t0 = now_s();
    int64_t in = L->arg_bytes[0], out = L->arg_bytes[1], at = (in + 63) / 64 * 64;
    if (k->kind == RT_COLL_RECV && pipeline_coord(S) == k->axis) {
        rt_comm_collective_io(S->comm, L->collective - 1, NULL, NULL); /* the sender: completes it */
        return 0;
    }
    /* a recv's operand is the other stage's send: nothing to read here, but the staging buffer
     * is written at once, so the writes to the device from it before must be done */
    if (k->kind == RT_COLL_RECV) {
        cl_int e = clFinish(S->q);
        if (e != CL_SUCCESS)
            return step_fail(S, "clFinish (before a pipeline recv)", e);
    } else if (xfer_at(S, b, L->args[0], in, 0, CL_TRUE, S->stage) != 0) {
        return -1;
    }
    rt_comm_collective_io(S->comm, L->collective - 1, S->stage, S->stage + at);
    /* a send's result is its operand, which the device has (and the plan may put the two in
     * the same bytes, which a write from the staging buffer, reused by the next recv at once,
     * could spoil) */
    if (k->kind != RT_COLL_SEND && xfer_at(S, b, L->args[1], out, 1, CL_FALSE, S->stage + at) != 0)
        return -1;
    S->traffic.coll_to_host += in;
    S->traffic.coll_to_dev += out;
    S->traffic.coll_s += now_s() - t0;
    return 0;
}

/* Whether launch L runs on this device: every launch but a pipeline's of another stage (a recv
 * also runs on its sending stage, where it completes the send). */
static int launch_here(const Session *S, const RtOclLaunch *L) {
    if (L->stage <= 0 || !S->comm)
        return 1;
    const RtCollective *k = L->collective > 0 ? &S->p->base.collectives[L->collective - 1] : NULL;
    int64_t me = pipeline_coord(S);
    return me == L->stage - 1 || (k && k->kind == RT_COLL_RECV && me == k->axis);
}

/* The range of launch L as this session's build runs it: its tensor-core body's where the
 * kernels were built with one (-DAX_MMA) and L has one; 1 where it sets a work-group size. */
static int launch_range(const Session *S, const RtOclLaunch *L, size_t g[3], size_t l[3]) {
    int has_local = 0, mma = S->mma && L->mma_local[0] > 0;
    for (int d = 0; d < L->dims; d++) {
        g[d] = (size_t)(mma ? L->mma_global[d] : L->global[d]);
        l[d] = (size_t)(mma ? L->mma_local[d] : L->local[d]);
        has_local |= l[d] > 0;
    }
    return has_local;
}

static int launch(Session *S, SlabBuf *b, int32_t i) {
    const RtOclLaunch *L = &S->p->launches[i];
    if (!launch_here(S, L))
        return 0;
    if (L->collective > 0)
        return collective(S, b, i);
    size_t g[3], l[3];
    int has_local = launch_range(S, L, g, l);
    cl_int e = CL_SUCCESS;
    for (int32_t a = 0; S->bound != b && a < L->nargs && e == CL_SUCCESS; a++) /* another slab's buffers */
        e = clSetKernelArg(S->kernels[i], (cl_uint)(2 * a), sizeof(cl_mem), &b->mem[S->arg_buf[S->arg_first[i] + a]]);
    if (e != CL_SUCCESS)
        return step_fail(S, "clSetKernelArg", e);
    cl_event ev = NULL;
    e = clEnqueueNDRangeKernel(S->q, S->kernels[i], (cl_uint)L->dims, NULL, g, has_local ? l : NULL, 0, NULL,
                               S->prof_ns ? &ev : NULL);
    if (ev) {
        cl_ulong t0 = 0, t1 = 0;
        clWaitForEvents(1, &ev);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        S->prof_ns[i] += (double)(t1 - t0);
        clReleaseEvent(ev);
    }
    if (e != CL_SUCCESS) {
        char what[300];
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", L->kernel);
        return step_fail(S, what, e);
    }
    return 0;
}

/* One step on the device. The state stays there: the step sends the batch and the step number
 * (the whole slab when the host wrote it whole) and reads back the scalars the runtime reads
 * after a step: the loss, the gradient norm, the learning rate and the auxiliary loss. */
static int run_launches(Session *S, char *slab) {
    SlabBuf *b = slab_buf(S, slab);
    if (!b)
        return -1;
    const RtProgram *p = &S->p->base;
    Traffic *T = &S->traffic;
    int64_t to_dev = 0, to_host = 0;
    if (batch_make(S) != 0)
        return -1;
    if (b->whole) {
        if (S->ahead_ev) /* a batch sent ahead goes unused: the slab carries this step's */
            clWaitForEvents(1, &S->ahead_ev), clReleaseEvent(S->ahead_ev);
        S->ahead_ev = NULL;
        S->ahead_valid = 0;
        if (send(S, b, 0, p->slab_bytes) != 0)
            return -1;
        T->sends++;
        T->send_bytes += p->slab_bytes;
        b->whole = 0;
    } else if ((to_dev = batch_in(S, b)) < 0) {
        return -1;
    }
    float number = 0;
    memcpy(&number, b->host + p->step_offset, sizeof number);
    for (int32_t i = 0; i < S->p->nlaunches; i++) {
        if (S->fault_step > 0 && (int64_t)number == S->fault_step && i == S->p->nlaunches / 2) {
            char what[300];
            snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", S->p->launches[i].kernel);
            S->injected = 1;
            S->bound = NULL;
            return step_fail(S, what, CL_OUT_OF_RESOURCES);
        }
        if (launch(S, b, i) != 0) {
            S->bound = NULL;
            return -1;
        }
    }
    S->bound = b;
    S->prof_steps++;
    b->stale = 1;
    b->state = 0;
    cl_int e = clFlush(S->q);
    int64_t ahead = e == CL_SUCCESS ? batch_ahead(S) : step_fail(S, "clFlush", e);
    if (ahead < 0)
        return -1;
    to_dev += ahead;
    const int64_t scalars[] = {p->grad_norm_offset, p->lr_offset, p->has_aux_loss ? p->aux_loss_offset : -1,
                               p->loss_offset};
    for (int k = 0; k < 4; k++) {
        if (fetch(S, b, scalars[k], 4, k == 3 ? CL_TRUE : CL_FALSE) != 0)
            return -1;
        to_host += scalars[k] >= 0 ? 4 : 0;
    }
    T->steps++;
    T->to_dev += to_dev;
    T->to_host += to_host;
    if (to_dev + to_host > T->step_max)
        T->step_max = to_dev + to_host;
    return 0;
}

/* rt_train_main_sync's hook: the device's state into the host slab before the runtime reads it
 * whole, or the host's to the device at the next step after the runtime wrote it whole. A
 * read-back that fails leaves the host with an older state than the step count says: the first
 * parameter is made NaN there, so no checkpoint is saved from it (a non-finite state never is). */
static int span_cmp(const void *a, const void *b) {
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

/* The parameters and moments of slab b to the host, spans that touch merged; the bytes, or -1. */
static int64_t fetch_state(Session *S, SlabBuf *b) {
    const RtProgram *p = &S->p->base;
    int64_t(*span)[2] = malloc((size_t)(3 * p->nparams + 1) * sizeof *span), bytes = 0;
    int n = 0;
    if (!span)
        return step_fail(S, "allocating the state's spans", CL_OUT_OF_HOST_MEMORY);
    for (int i = 0; i < p->nparams; i++) {
        const RtParamSlot *ps = &p->params[i];
        int64_t len = 4;
        for (int d = 0; d < ps->rank; d++)
            len *= ps->shape[d];
        const int64_t at[3] = {ps->offset, ps->m_offset, ps->v_offset};
        for (int k = 0; k < 3; k++)
            if (at[k] >= 0 && len > 0)
                span[n][0] = at[k], span[n++][1] = at[k] + len;
    }
    qsort(span, (size_t)n, sizeof *span, span_cmp);
    int rc = 0;
    for (int i = 0, j; i < n && rc == 0; i = j) {
        int64_t lo = span[i][0], hi = span[i][1];
        for (j = i + 1; j < n && span[j][0] <= hi; j++)
            hi = span[j][1] > hi ? span[j][1] : hi;
        rc = fetch(S, b, lo, hi - lo, j == n ? CL_TRUE : CL_FALSE);
        bytes += hi - lo;
    }
    free(span);
    return rc != 0 ? -1 : bytes;
}

static void ocl_sync(char *slab, int dir) {
    Session *S = active;
    SlabBuf *b = NULL;
    for (int i = 0; S && i < MAX_SLABS && !b; i++)
        if (S->slabs[i].mem && S->slabs[i].host == slab)
            b = &S->slabs[i];
    if (!b) /* no step ran on it yet: its first sends it whole */
        return;
    if (dir == RT_SYNC_FROM_HOST) {
        b->whole = 1;
        b->stale = 0;
        return;
    }
    if (!b->stale || (dir == RT_SYNC_STATE_TO_HOST && b->state))
        return;
    int64_t state = 0;
    if (S->failed || (dir == RT_SYNC_STATE_TO_HOST ? (state = fetch_state(S, b)) < 0
                                                   : fetch(S, b, 0, S->p->base.slab_bytes, CL_TRUE) != 0)) {
        const RtProgram *p = &S->p->base;
        float nan = NAN;
        if (p->nparams > 0)
            memcpy(slab + p->params[0].offset, &nan, sizeof nan);
        memcpy(slab + p->loss_offset, &nan, sizeof nan);
        return;
    }
    if (dir == RT_SYNC_STATE_TO_HOST) {
        b->state = 1;
        S->traffic.state_reads++;
        S->traffic.state_bytes += state;
        return;
    }
    b->stale = 0;
    S->traffic.reads++;
    S->traffic.read_bytes += S->p->base.slab_bytes;
}

/* RtTrainHooks.device_bytes: what the trainer holds on the device, the side of memcheck's
 * prediction a GPU has (pinned staging buffers are host memory there, as PoCL's buffers all are). */
static int64_t ocl_device_bytes(void) {
    return active ? active->device_bytes : 0;
}

/* RtTrainHooks.copy: slab dst a copy of slab src on the device, buffer by buffer (an eval's or a
 * replay's copy: nothing crosses to the host). -1 where the device does not hold src's state
 * (no step ran on it, or the host wrote it whole since): the runtime copies on the host then. */
static int ocl_copy(char *dst, const char *src) {
    Session *S = active;
    SlabBuf *from = NULL;
    for (int i = 0; S && i < MAX_SLABS && !from; i++)
        if (S->slabs[i].mem && S->slabs[i].host == src)
            from = &S->slabs[i];
    if (!from || from->whole || S->failed)
        return -1;
    SlabBuf *to = slab_buf(S, dst);
    if (!to)
        return -1;
    for (int k = 0; k < S->nbufs; k++) {
        cl_int e = clEnqueueCopyBuffer(S->q, from->mem[k], to->mem[k], 0, 0, (size_t)(S->cut[k + 1] - S->cut[k]), 0,
                                       NULL, NULL);
        if (e != CL_SUCCESS) {
            step_fail(S, "clEnqueueCopyBuffer (a copy of the slab)", e);
            return -1;
        }
    }
    to->whole = 0;
    to->stale = 1;
    to->state = 0;
    S->traffic.copies++;
    return 0;
}

static void ocl_step(char *slab, RtPool *pool, RtComm *comm) {
    (void)pool;
    Session *S = active;
    if (!S)
        return;     /* only rt_ocl_main's sessions run steps */
    S->comm = comm; /* the mesh's collectives (rt_train_main_sync joined it) */
    S->in_step = 1;
    if (S->failed) {
        char msg[512];
        snprintf(msg, sizeof msg, "OpenCL device %s failed before this step (said above); its state is lost",
                 S->device);
        rt_train_step_failed(msg);
    }
    if (S->failed || run_launches(S, slab) != 0) {
        float nan = NAN;
        memcpy(slab + S->p->base.loss_offset, &nan, sizeof nan);
    }
    S->in_step = 0;
}

/* ---- sampling (--sample) ---- */

/* The sampling slab's buffer, and the kernels of the forward (w 0) or the decode step (w 1)
 * built and bound to it, on first use. */
static int sampling_setup(Session *S, int w, int64_t bytes) {
    cl_int e = CL_SUCCESS;
    if (!S->sbuf) {
        S->sbuf = clCreateBuffer(S->ctx, CL_MEM_READ_WRITE, (size_t)bytes, NULL, &e);
        if (e != CL_SUCCESS)
            return step_fail(S, "clCreateBuffer for the sampling slab", e);
        S->device_bytes += bytes;
    }
    if (S->skernels[w])
        return 0;
    const char *src = w ? S->p->decode_source : S->p->forward_source;
    int32_t n = w ? S->p->ndecode : S->p->nforward;
    const RtOclLaunch *L = w ? S->p->decode_launches : S->p->forward_launches;
    S->sprog[w] = clCreateProgramWithSource(S->ctx, 1, &src, NULL, &e);
    if (e != CL_SUCCESS)
        return step_fail(S, "clCreateProgramWithSource (sampling)", e);
    cl_device_id dev;
    clGetCommandQueueInfo(S->q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
    e = clBuildProgram(S->sprog[w], 1, &dev, S->options, NULL, NULL);
    if (e != CL_SUCCESS)
        return step_fail(S, w ? "building the decode step's kernels" : "building the forward's kernels", e);
    S->skernels[w] = calloc((size_t)n + 1, sizeof *S->skernels[w]);
    if (!S->skernels[w])
        return step_fail(S, "allocating the sampling kernels", CL_OUT_OF_HOST_MEMORY);
    for (int32_t i = 0; i < n; i++) {
        S->skernels[w][i] = clCreateKernel(S->sprog[w], L[i].kernel, &e);
        for (int32_t a = 0; e == CL_SUCCESS && a < L[i].nargs; a++) {
            cl_long off = (cl_long)L[i].args[a];
            e = clSetKernelArg(S->skernels[w][i], (cl_uint)(2 * a), sizeof(cl_mem), &S->sbuf);
            if (e == CL_SUCCESS)
                e = clSetKernelArg(S->skernels[w][i], (cl_uint)(2 * a + 1), sizeof off, &off);
        }
        if (e != CL_SUCCESS)
            return step_fail(S, "clCreateKernel or clSetKernelArg (sampling)", e);
    }
    return 0;
}

/* RtSampleIo.wrote: the range goes to the device before the next run (ranges merged; more than
 * MAX_DIRTY: their hull). */
static void sio_wrote(char *slab, int64_t off, int64_t bytes) {
    (void)slab;
    Session *S = active;
    if (!S || bytes <= 0)
        return;
    int64_t lo = off, hi = off + bytes;
    for (int i = 0; i < S->ndirty; i++)
        if (lo <= S->dirty[i][1] && S->dirty[i][0] <= hi) { /* touches: merge */
            lo = lo < S->dirty[i][0] ? lo : S->dirty[i][0];
            hi = hi > S->dirty[i][1] ? hi : S->dirty[i][1];
            S->dirty[i][0] = S->dirty[--S->ndirty][0];
            S->dirty[i][1] = S->dirty[S->ndirty][1];
            i = -1; /* again: the merged range may touch others */
        }
    if (S->ndirty == MAX_DIRTY) {
        for (int i = 0; i < S->ndirty; i++) {
            lo = lo < S->dirty[i][0] ? lo : S->dirty[i][0];
            hi = hi > S->dirty[i][1] ? hi : S->dirty[i][1];
        }
        S->ndirty = 0;
    }
    S->dirty[S->ndirty][0] = lo;
    S->dirty[S->ndirty++][1] = hi;
}

/* RtSampleIo.need: the range read back from the run that returned (blocking); NaN where the
 * device failed, which the sampler reports. */
static void sio_need(char *slab, int64_t off, int64_t bytes) {
    Session *S = active;
    cl_int e = S && !S->failed && S->sbuf ? CL_SUCCESS : CL_OUT_OF_RESOURCES;
    if (e == CL_SUCCESS) {
        e = clEnqueueReadBuffer(S->q, S->sbuf, CL_TRUE, (size_t)off, (size_t)bytes, slab + off, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            step_fail(S, "clEnqueueReadBuffer (sampling)", e);
        else
            S->traffic.s_to_host += bytes;
    }
    if (e != CL_SUCCESS)
        for (int64_t i = 0; i + 4 <= bytes; i += 4)
            memcpy(slab + off + i, &(float){NAN}, 4);
}

/* RtSampleIo.copy: within the sampling buffer, on the device (the KV caches' rows). */
static void sio_copy(char *slab, int64_t dst, int64_t src, int64_t bytes) {
    (void)slab;
    Session *S = active;
    if (!S || S->failed || !S->sbuf || bytes <= 0)
        return;
    cl_int e = clEnqueueCopyBuffer(S->q, S->sbuf, S->sbuf, (size_t)src, (size_t)dst, (size_t)bytes, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        step_fail(S, "clEnqueueCopyBuffer (sampling)", e);
}

static const RtSampleIo sample_io = {sio_wrote, sio_need, sio_copy};

/* RtForward.run (w 0) or RtDecode.run (w 1) on the device. The sampling slab lives in one device
 * buffer (the decode step's slab lies over the forward's), and the sampler says what crosses
 * (sample_io): a run sends the ranges it wrote since the last (the weights once, then the
 * tokens), runs the launches, and the sampler reads back the logits' row it samples from (need);
 * the KV caches are filled on the device (copy). A failure is said once; the logits read
 * after it are NaN, which the sampler reports. */
static void sample_run(int w, char *slab) {
    Session *S = active;
    const RtForward *f = S ? S->p->base.forward : NULL;
    if (!f)
        return;
    const RtDecode *d = S->p->ndecode > 0 ? f->decode : NULL;
    int64_t cap = d ? d->slab_bytes : f->slab_bytes;
    int32_t n = w ? S->p->ndecode : S->p->nforward;
    const RtOclLaunch *L = w ? S->p->decode_launches : S->p->forward_launches;
    cl_int e = S->failed || sampling_setup(S, w, cap) != 0 ? CL_OUT_OF_RESOURCES : CL_SUCCESS;
    int first = S->traffic.scalls == 0;
    for (int i = 0; e == CL_SUCCESS && i < S->ndirty; i++) {
        int64_t lo = S->dirty[i][0], hi = S->dirty[i][1] < cap ? S->dirty[i][1] : cap;
        if (hi <= lo)
            continue;
        e = clEnqueueWriteBuffer(S->q, S->sbuf, CL_FALSE, (size_t)lo, (size_t)(hi - lo), slab + lo, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            step_fail(S, "clEnqueueWriteBuffer (sampling)", e);
        else if (first)
            S->traffic.sfirst += hi - lo;
        else
            S->traffic.s_to_dev += hi - lo;
    }
    S->ndirty = 0;
    for (int32_t i = 0; e == CL_SUCCESS && i < n; i++) {
        size_t g[3], l[3];
        int has_local = launch_range(S, &L[i], g, l); /* built with S->options, as the step's */
        e = clEnqueueNDRangeKernel(S->q, S->skernels[w][i], (cl_uint)L[i].dims, NULL, g, has_local ? l : NULL, 0, NULL,
                                   NULL);
        if (e != CL_SUCCESS)
            step_fail(S, "clEnqueueNDRangeKernel (sampling)", e);
    }
    /* the sampler's need() next, a blocking read, waits for the writes above before it writes
     * the host slab again */
    if (e == CL_SUCCESS && (e = clFlush(S->q)) != CL_SUCCESS)
        step_fail(S, "clFlush (sampling)", e);
    S->traffic.scalls++;
}

static void ocl_forward_run(char *slab, RtPool *pool, RtComm *comm) {
    (void)pool;
    (void)comm;
    sample_run(0, slab);
}

static void ocl_decode_run(char *slab, RtPool *pool, RtComm *comm) {
    (void)pool;
    (void)comm;
    sample_run(1, slab);
}

/* ---- main ---- */

static const char *base_name(const char *s) {
    const char *b = strrchr(s, '/');
    return b ? b + 1 : s;
}

static void print_ocl_help(void) {
    printf("\nOpenCL options:\n"
           "  --device N|P:D      the OpenCL device: N-th of all devices, or device D of platform P\n"
           "                      (default: the first of the compiled kind); on a mesh, a list\n"
           "                      (--device 0,1) gives each rank of a node its own (default: the\n"
           "                      local rank's; AXLC_OPENCL_SHARE_DEVICES=1 lets ranks share one)\n"
           "  --list-devices      list the OpenCL devices and exit\n");
}

/* Runs the trainer on device d. */
static int train_on(const RtOclProgram *p, const DevInfo *d, OclOpts *o, const char *name) {
    const char *fault = getenv("AXLC_OPENCL_FAULT_STEP");
    Session S = {.p = p,
                 .name = name,
                 .device = d->name,
                 .fault_step = fault ? strtoll(fault, NULL, 10) : 0,
                 .say = o->sample ? stderr : stdout};
    RtError err = {{0}};
    int rc = 1;
    if (session_open(&S, d, &err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
    } else {
        RtProgram prog = p->base;
        prog.step = ocl_step;
        RtForward fwd;
        RtDecode dec;
        prog.forward = NULL;
        if (p->base.forward && p->nforward > 0) { /* --sample runs the forward on the device */
            fwd = *p->base.forward;
            fwd.run = ocl_forward_run;
            fwd.decode = NULL;
            if (p->base.forward->decode && p->ndecode > 0) {
                dec = *p->base.forward->decode;
                dec.run = ocl_decode_run;
                fwd.decode = &dec;
            }
            prog.forward = &fwd;
        }
        active = &S;
        RtTrainHooks hooks = {.sync = ocl_sync,
                              .copy = ocl_copy,
                              .sample = prog.forward ? &sample_io : NULL,
                              .device_bytes = ocl_device_bytes};
        rc = rt_train_main_hooks(&prog, &hooks, o->argc, o->argv);
        active = NULL;
    }
    session_close(&S);
    return rc;
}

/* "rank R of this node (of N, OMPI_COMM_WORLD_LOCAL_RANK)" for messages. */
static void rank_words(char *out, size_t cap, int lr, int ls, const char *from) {
    if (ls > 0)
        snprintf(out, cap, "local rank %d of the %d ranks on this node (%s)", lr, ls, from ? from : "");
    else
        snprintf(out, cap, "local rank %d on this node (%s)", lr, from ? from : "");
}

/* An error every rank of a mesh finds alike (no device of the kind, a --device that names none)
 * is rank 0's to print: another rank says nothing and leaves rank 0 the time to print before
 * it exits (the launcher then ends the job), as the trainer's start errors do. 1 on such a
 * rank, after the wait. */
static int quiet_rank(int64_t mesh) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; mesh > 1 && i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v)
            continue;
        if (atoi(v) <= 0)
            return 0;
        fflush(stdout);
        nanosleep(&(struct timespec){.tv_sec = 2}, NULL);
        return 1;
    }
    return 0;
}

/* The device of this rank: --device's entry for its local rank, or the local rank's among the
 * devices of the program's kind (every device for --target opencl-N), wrapped onto the
 * first ones only where devices may be shared. NULL, with the reason printed, when there is
 * none. */
static const DevInfo *rank_device(const RtOclProgram *p, const DevInfo *devs, int n, const OclOpts *o,
                                  const char *name) {
    RtError err = {{0}};
    int64_t mesh = 1;
    for (int a = 0; a < p->base.mesh.naxes; a++)
        mesh *= p->base.mesh.sizes[a];
    int lr = 0, ls = 1;
    const char *from = NULL;
    if (mesh > 1 && !rt_comm_local_rank(&lr, &ls, &from) && rt_comm_launched()) {
        /* a launcher that does not say: MPI's ranks that share this node's memory */
        if (rt_comm_node_rank(&lr, &ls, &err) != 0) {
            fprintf(stderr, "%s: the rank on this node: %s\n", name, err.msg);
            return NULL;
        }
        from = "MPI_COMM_TYPE_SHARED";
    }
    char who[200];
    rank_words(who, sizeof who, lr, ls, from);
    const char *match = p->device_match && *p->device_match ? p->device_match : NULL;
    const DevInfo *d = NULL;
    if (o->device) {
        int count = device_count(o->device);
        char e[64];
        device_entry(o->device, lr % count, e, sizeof e);
        if (!(d = pick_device(devs, n, e, &err))) {
            if (quiet_rank(mesh))
                return NULL;
            fprintf(stderr, "%s: %s:\n", name, err.msg);
            print_devices(stderr, devs, n);
            return NULL;
        }
        if (lr >= count && !may_share(d)) {
            fprintf(stderr,
                    "%s: --device %s names %d device%s, and this trainer is %s: one rank per device; name one "
                    "for each rank of the node (--device 0,1,...), or set AXLC_OPENCL_SHARE_DEVICES=1 to let "
                    "ranks share a device\n",
                    name, o->device, count, count == 1 ? "" : "s", who);
            return NULL;
        }
        return d;
    }
    int count = n;
    d = match ? nth_match(devs, n, match, lr, &count) : lr < n ? &devs[lr] : NULL;
    if (count == 0) {
        if (quiet_rank(mesh))
            return NULL;
        fprintf(stderr,
                "%s: this trainer was compiled for %s (%s), and no OpenCL GPU here has \"%s\" in its "
                "name; the OpenCL devices of this host:\n",
                name, p->device_kind && *p->device_kind ? p->device_kind : "a GPU",
                p->device_doc && *p->device_doc ? p->device_doc : "the device table's kind", match);
        print_devices(stderr, devs, n);
        fprintf(stderr, "%s: --device N trains on one of them by hand\n", name);
        return NULL;
    }
    if (d)
        return d;
    const DevInfo *wrap = match ? nth_match(devs, n, match, lr % count, &count) : &devs[lr % count];
    if (may_share(wrap)) {
        printf("%s: %s shares OpenCL device %s with another rank (%s)\n", name, who, wrap->name,
               strcmp(wrap->type, "CPU") ? "AXLC_OPENCL_SHARE_DEVICES" : "a CPU device: its cores are shared");
        return wrap;
    }
    fprintf(stderr,
            "%s: more ranks than devices: this trainer is %s, and this node has %d OpenCL device%s%s%s%s: one "
            "rank per device; start at most %d rank%s per node (mpirun --map-by ppr:%d:node, srun "
            "--ntasks-per-node=%d), or set AXLC_OPENCL_SHARE_DEVICES=1 to let ranks share a device. The devices:\n",
            name, who, count, count == 1 ? "" : "s", match ? " with \"" : "", match ? match : "",
            match ? "\" in its name" : "", count, count == 1 ? "" : "s", count, count);
    print_devices(stderr, devs, n);
    return NULL;
}

/* Lists the devices, or picks one and trains on it. */
static int with_device(const RtOclProgram *p, OclOpts *o, const char *name) {
    RtError err = {{0}};
    DevInfo *devs = calloc(MAX_DEVICES, sizeof *devs);
    if (!devs)
        return fprintf(stderr, "%s: out of memory\n", name), 1;
    int n = list_devices(devs, &err), rc = 1;
    const DevInfo *d = NULL;
    if (n == 0) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
    } else if (o->list) {
        printf("OpenCL devices:\n");
        print_devices(stdout, devs, n);
        rc = 0;
    } else if ((d = rank_device(p, devs, n, o, name)) != NULL) {
        rc = train_on(p, d, o, name);
    }
    rt_comm_node_done(); /* MPI, where rank_device started it and no mesh was joined */
    free(devs);
    return rc;
}

int rt_ocl_main(const RtOclProgram *p, int argc, char **argv) {
    const char *name = base_name(argc > 0 ? argv[0] : "trainer");
    OclOpts o;
    RtError err = {{0}};
    int rc = 1;
    if (split_args(&o, argc, argv, &err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
    } else if (o.help || o.config) { /* no device needed */
        RtProgram prog = p->base;
        prog.step = ocl_step;
        rc = rt_train_main(&prog, o.argc, o.argv);
        if (o.help && rc == 0)
            print_ocl_help();
    } else if (!o.list && rt_train_check_args(o.argc, o.argv, &err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err.msg); /* before looking for a device */
    } else {
        rc = with_device(p, &o, name);
    }
    free(o.argv);
    return rc;
}
