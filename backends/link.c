/*
 * link.c: the link step of a trainer executable, for every backend that writes one.
 *
 *   $CC [-fuse-ld=lld] [-std=c11 -O1 -w -I INCLUDE] -o OUT OBJECTS... [SOURCE]
 *       MAIN libaxrt.a [-lOpenCL] -lopenblas -ljson-c -lm -lpthread [LDFLAGS] [MPI...]
 *
 * MAIN is libaxrt_main.a (the CPU trainer's main, which reads the generated axlc_program), or
 * libaxrt_opencl.a for a trainer whose main the backend wrote (OpenCL: rt_ocl_main). The
 * libraries and axrt.h come from BackendOptions.runtime_dir (an installed axlc's lib/, and
 * ../include next to it), else from the build tree (AXLC_RUNTIME_*, set by CMake). One copy,
 * so that what an installed axlc links cannot differ between backends.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

#ifndef AXLC_RUNTIME_LIB
#error "AXLC_RUNTIME_LIB and the other runtime paths must be defined by the build"
#endif

/* A runtime file: dir/name when the options name a runtime directory, else the build's path. */
static char *runtime_path(const BackendOptions *o, const char *name, const char *built) {
  return o && o->runtime_dir ? backend_join(o->runtime_dir, "/", name)
                             : backend_join(built, "", "");
}

/* What a failed link needs installed, for its message. */
static const char *link_needs(const BackendLink *l) {
  return l->opencl ? "the OpenCL loader, ocl-icd-opencl-dev, libopenblas-dev and libjson-c-dev"
                   : "libopenblas-dev and libjson-c-dev";
}

int backend_link_trainer(const BackendLink *l, const BackendOptions *o, const BackendDiag *d) {
  char *rt = runtime_path(o, "libaxrt.a", AXLC_RUNTIME_LIB);
  char *main_lib = l->opencl ? runtime_path(o, "libaxrt_opencl.a", AXLC_RUNTIME_OPENCL_LIB)
                             : runtime_path(o, "libaxrt_main.a", AXLC_RUNTIME_MAIN_LIB);
  char *include = runtime_path(o, "../include", AXLC_RUNTIME_INCLUDE);
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  /* AXLC_TRAINER_MPI_LIBS: the MPI libraries libaxrt was built with, ';'-separated (CMake) */
  char *mpi = strdup(AXLC_TRAINER_MPI_LIBS);
  size_t cap = (size_t)l->nobjects + strlen(AXLC_TRAINER_MPI_LIBS) + 32;
  char **argv = calloc(cap, sizeof *argv);
  if (!argv || !mpi) {
    fprintf(stderr, "axlc: out of memory\n");
    abort();
  }
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
  for (char *lib = strtok(mpi, ";"); lib && n + 1 < cap; lib = strtok(NULL, ";")) argv[n++] = lib;
  argv[n] = NULL;
  int rc = backend_spawn(argv) == 0 ? 0 : -1;
  free(argv);
  free(mpi);
  free(rt);
  free(main_lib);
  free(include);
  if (rc)
    return backend_error(d, l->out, NULL, "linking the trainer with %s failed (it needs %s)", cc,
                         link_needs(l));
  return 0;
}
