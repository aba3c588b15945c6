/*
 * link.c: the link step of a trainer executable, for every backend that writes one.
 *
 *   $CC [-fuse-ld=lld] [-std=c11 -O1 -w -I INCLUDE] -o OUT OBJECTS... [SOURCE]
 *       MAIN libaxrt.a [-lOpenCL] -lopenblas -ljson-c -lm -lpthread [LDFLAGS] [TOK...] [MPI...]
 *
 * MAIN is libaxrt_main.a (the CPU trainer's main, which reads the generated axlc_program), or
 * libaxrt_opencl.a for a trainer whose main the backend wrote (OpenCL: rt_ocl_main). The
 * libraries and axrt.h come from BackendOptions.runtime_dir (an installed axlc's lib/, and
 * ../include next to it), else from the build tree (AXLC_RUNTIME_*, set by CMake). One copy,
 * so that what an installed axlc links cannot differ between backends.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "backends/backend.h"

#ifndef AXLC_RUNTIME_LIB
#error "AXLC_RUNTIME_LIB and the other runtime paths must be defined by the build"
#endif

/* A runtime file: dir/name when the options name a runtime directory, else the build's path. */
static char *runtime_path(const BackendOptions *o, const char *name, const char *built) {
  return o && o->runtime_dir ? base_join(o->runtime_dir, "/", name) : base_join(built, "", "");
}

/* What a failed link needs installed, for its message. */
static const char *link_needs(const BackendLink *l) {
  return l->opencl ? "the OpenCL loader, ocl-icd-opencl-dev, libopenblas-dev and libjson-c-dev"
                   : "libopenblas-dev and libjson-c-dev";
}

/* The total size of the files among argv[1..] (a link's inputs; not the -o output). */
static int64_t inputs_size(char *const *argv) {
  int64_t total = 0;
  struct stat st;
  for (int i = 1; argv[i]; i++) {
    if (!strcmp(argv[i], "-o") && argv[i + 1]) {
      i++; /* the output, perhaps an older trainer */
      continue;
    }
    if (argv[i][0] != '-' && stat(argv[i], &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  }
  return total;
}

/* The directory of `path` and TMPDIR: the first with less than `need` bytes free, or NULL. */
static const char *short_of_space(const char *path, int64_t need, char *dir, size_t cap,
                                  int64_t *avail) {
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  const char *slash = strrchr(path, '/');
  for (int k = 0; k < 2; k++) {
    if (k == 0 && !slash)
      snprintf(dir, cap, ".");
    else if (k == 0)
      snprintf(dir, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    else
      snprintf(dir, cap, "%s", tmp);
    struct statvfs vs;
    if (statvfs(dir, &vs) == 0 && (int64_t)vs.f_bavail * (int64_t)vs.f_frsize < need) {
      *avail = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
      return dir;
    }
  }
  return NULL;
}

/* Reports a failed link of `out` by `cc`: a full disk or a file-size limit as such, anything
 * else as missing libraries (`needs`). A full disk is no missing package. The linker may say so in
 * `log`
 * ("No space left on device"), or die of SIGBUS writing its memory-mapped output; then the
 * free space, against the inputs' in_bytes, tells. Returns -1. */
static int link_failed(const BackendDiag *d, const char *out, const char *cc, const char *log,
                       int64_t in_bytes, const char *needs) {
  const char *full = strstr(log, "No space left on device") ? "No space left on device"
                     : strstr(log, "Disk quota exceeded")   ? "Disk quota exceeded"
                                                            : NULL;
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[4096];
  int64_t avail = 0;
  if (strstr(log, "File too large"))
    return backend_error(
        d, out, NULL,
        "linking the trainer with %s failed: File too large (the linker's message "
        "above): the trainer is larger than the file-size limit (ulimit -f) or than the "
        "file system takes; raise the limit or write it elsewhere, then compile again",
        cc);
  if (full)
    return backend_error(
        d, out, NULL,
        "linking the trainer with %s failed: %s (the linker's message above); free "
        "space where the trainer is written and in TMPDIR (%s), then compile again",
        cc, full, tmp);
  if (short_of_space(out, in_bytes, dir, sizeof dir, &avail))
    return backend_error(
        d, out, NULL,
        "linking the trainer with %s failed, and %s has %lld KiB free while the "
        "link's inputs take %lld KiB: the disk is probably full; free space there, "
        "then compile again",
        cc, dir, (long long)(avail >> 10), (long long)(in_bytes >> 10));
  return backend_error(d, out, NULL, "linking the trainer with %s failed (it needs %s)", cc, needs);
}

int backend_link_trainer(const BackendLink *l, const BackendOptions *o, const BackendDiag *d) {
  char *rt = runtime_path(o, "libaxrt.a", AXLC_RUNTIME_LIB);
  char *main_lib = l->opencl ? runtime_path(o, "libaxrt_opencl.a", AXLC_RUNTIME_OPENCL_LIB)
                             : runtime_path(o, "libaxrt_main.a", AXLC_RUNTIME_MAIN_LIB);
  char *include = runtime_path(o, "../include", AXLC_RUNTIME_INCLUDE);
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  /* AXLC_TRAINER_TOK_LIBS: the SentencePiece flags libaxrt was built with, space-separated;
   * AXLC_TRAINER_MPI_LIBS: its MPI libraries, ';'-separated (CMake) */
  char *tok = base_xstrdup(AXLC_TRAINER_TOK_LIBS);
  char *mpi = base_xstrdup(AXLC_TRAINER_MPI_LIBS);
  size_t cap = (size_t)l->nobjects + strlen(tok) + strlen(mpi) + 32;
  char **argv = base_xcalloc(cap, sizeof *argv);
  size_t n = 0;
  argv[n++] = (char *)cc;
  /* AXLC_TRAINER_FUSE_LD: -fuse-ld=lld where CMake found that the compiler can use it */
  if (*AXLC_TRAINER_FUSE_LD) argv[n++] = AXLC_TRAINER_FUSE_LD;
  if (l->source) {
    const char *cflags[] = {"-std=c11", "-O1", "-w", "-I", include};
    for (size_t i = 0; i < sizeof cflags / sizeof cflags[0]; i++) argv[n++] = (char *)cflags[i];
  }
  argv[n++] = "-o";
  argv[n++] = (char *)l->out;
  for (int i = 0; i < l->nobjects; i++) argv[n++] = l->objects[i];
  if (l->source) argv[n++] = (char *)l->source;
  argv[n++] = main_lib;
  argv[n++] = rt;
  if (l->opencl) argv[n++] = "-lOpenCL";
  const char *libs[] = {"-lopenblas", "-ljson-c", "-lm", "-lpthread"};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) argv[n++] = (char *)libs[i];
  if (*AXLC_TRAINER_LDFLAGS) argv[n++] = AXLC_TRAINER_LDFLAGS;
  for (char *lib = strtok(tok, " "); lib && n + 1 < cap; lib = strtok(NULL, " ")) argv[n++] = lib;
  for (char *lib = strtok(mpi, ";"); lib && n + 1 < cap; lib = strtok(NULL, ";")) argv[n++] = lib;
  argv[n] = NULL;
  char log[4096];
  int rc = base_run_log(argv, log, sizeof log) == 0 ? 0 : -1;
  int64_t in_bytes = rc ? inputs_size(argv) : 0;
  free(argv);
  free(tok);
  free(mpi);
  free(rt);
  free(main_lib);
  free(include);
  return rc ? link_failed(d, l->out, cc, log, in_bytes, link_needs(l)) : 0;
}

int32_t backend_pipeline_shares(const IrGraph *g, int32_t *made, int32_t *buffer) {
  int a = ir_mesh_axis(&g->mesh, IR_PIPELINE_AXIS);
  if (a < 0 || g->mesh.sizes[a] < 2) return 0;
  int32_t n = 0;
  static const char *const named[] = {"loss", "grad_norm", "lr", "aux_loss"};
  for (int i = 0; i < 4; i++) {
    int32_t v = ir_graph_output(g, named[i]);
    if (v != IR_NONE && g->values[v].stage > 0) made[n] = buffer[n] = v, n++;
  }
  for (int32_t i = 0; i < g->noutputs; i++) {
    const IrOutput *o = &g->outputs[i];
    int32_t x = strncmp(o->name, "new:", 4) ? IR_NONE : ir_graph_find(g, IR_PARAMETER, o->name + 4);
    if (x != IR_NONE && g->values[x].stage <= 0 && g->values[o->value].stage > 0)
      made[n] = o->value, buffer[n] = x, n++;
  }
  return n;
}

int64_t backend_update_stage(const IrGraph *g, const char *path) {
  char name[1024];
  snprintf(name, sizeof name, "new:%s", path);
  int32_t v = ir_graph_output(g, name);
  int a = ir_mesh_axis(&g->mesh, IR_PIPELINE_AXIS);
  return v == IR_NONE || a < 0 || g->mesh.sizes[a] < 2 ? 0 : g->values[v].stage;
}

int32_t backend_coll_kind(IrOp op) {
  switch (op) {
  case IR_ALL_REDUCE: return RT_COLL_ALL_REDUCE;
  case IR_ALL_GATHER: return RT_COLL_ALL_GATHER;
  case IR_REDUCE_SCATTER: return RT_COLL_REDUCE_SCATTER;
  case IR_ALL_TO_ALL: return RT_COLL_ALL_TO_ALL;
  case IR_SEND: return RT_COLL_SEND;
  case IR_RECV: return RT_COLL_RECV;
  default: return RT_COLL_LOCAL_SLICE;
  }
}
