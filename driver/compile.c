/*
 * compile.c: the CPU backend's end of the pipeline.
 *
 *   step graph -> fusion plan -> memory plan -> LLVM module -> object file + runtime -> trainer
 *                                                           -> JIT -> rt_train_main in process
 *
 * The trainer executable is the generated object (the step function and the `axlc_program`
 * table), libaxrt_main (main) and libaxrt, linked by the system C compiler with OpenBLAS,
 * json-c and libm. Nothing of axlc, LLVM or the config file is needed at run time: the resolved
 * config is embedded (`./trainer --config`).
 */
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver/driver.h"

#ifndef AXLC_RUNTIME_LIB
#error "AXLC_RUNTIME_LIB (the path of libaxrt.a) must be defined by the build"
#endif

void drv_compiled_free(DrvCompiled *c) {
  llvm_module_free(c->module);
  pass_memplan_free(&c->plan);
  free(c->params);
  free(c->config);
  memset(c, 0, sizeof *c);
}

/* The program table's facts that the graph does not hold. */
static void program_info(DrvJob *j, DrvCompiled *c) {
  c->params = calloc((size_t)j->build.nparams + 1, sizeof *c->params);
  for (int i = 0; i < j->build.nparams; i++) {
    c->params[i].path = j->build.params[i].path;
    c->params[i].init = drv_param_init(&j->build.params[i]);
  }
  json_object *ckpt = fe_get_child(j->cfg, "checkpointer");
  c->config = fe_json_canonical(j->cfg);
  c->info = (LlvmProgramInfo){
      .config = c->config,
      .nparams = j->build.nparams,
      .params = c->params,
      .vocab = fe_get_int(fe_get_child(j->cfg, "model"), "vocab_size"),
      .max_steps = fe_get_int(j->cfg, "max_steps"),
      .ckpt_every = fe_get_int(ckpt, "every_n_steps"),
      .ckpt_keep = (int32_t)fe_get_int(ckpt, "keep_last"),
      .seed = (uint64_t)fe_get_int(j->cfg, "seed"),
  };
}

int drv_check_output(FeDiag *d, const char *path) {
  struct stat st;
  if (!*path) return fe_error(d, NULL, NULL, "-o: expected a file name, got \"\"");
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return fe_error(d, path, NULL, "is a directory (expected a file name for the output)");
  char *copy = fe_asprintf("%s", path);
  const char *dir = dirname(copy);
  int rc = 0, err = stat(dir, &st) == 0 ? 0 : errno;
  if (err == ENOENT)
    rc = fe_error(d, path, NULL, "the directory %s does not exist", dir);
  else if (err)
    rc = fe_error(d, path, NULL, "cannot use the directory %s: %s", dir, strerror(err));
  else if (!S_ISDIR(st.st_mode))
    rc = fe_error(d, path, NULL, "%s is not a directory", dir);
  else if (access(dir, W_OK | X_OK) != 0)
    rc = fe_error(d, path, NULL, "cannot write in the directory %s: %s", dir, strerror(errno));
  else if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
    rc = fe_error(d, path, NULL, "cannot write: %s", strerror(errno));
  free(copy);
  return rc;
}

int drv_compile_cpu(DrvJob *j, const DrvCompileOptions *o, DrvCompiled *c) {
  memset(c, 0, sizeof *c);
  if (j->build.mesh.devices > 1)
    return fe_error(&j->diag, j->file, "/mesh", "the cpu backend runs one device; this mesh has "
                    "%lld (sharding over several devices is not implemented yet)",
                    (long long)j->build.mesh.devices);
  LlvmOptions lo = llvm_options_default();
  if (o) {
    if (o->cpu) lo.cpu = o->cpu;
    if (o->features) lo.features = o->features;
    if (o->no_fuse) lo.fuse = false;
    if (o->no_threads) lo.threads = false;
  }
  bool *mat = malloc(((size_t)j->graph->nvalues + 1) * sizeof *mat);
  if (lo.fuse) llvm_fusion_plan(j->graph, mat);
  int rc = pass_memplan_fused(j->graph, lo.fuse ? mat : NULL, &c->plan);
  free(mat);
  if (rc != IR_OK)
    return fe_error(&j->diag, j->file, NULL, "memory planning failed: %s",
                    ir_graph_error(j->graph));
  program_info(j, c);
  lo.program = &c->info;
  char err[1024];
  if (llvm_compile(j->graph, &c->plan, &lo, &c->module, err, sizeof err))
    return fe_error(&j->diag, j->file, NULL, "code generation failed: %s", err);
  return 0;
}

/* Runs argv (NULL-terminated) and waits; 0 if it exited 0. */
static int spawn(char *const *argv) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int drv_link_trainer(DrvJob *j, DrvCompiled *c, const char *out) {
  char err[1024];
  char *obj = fe_asprintf("%s.step.o", out); /* as long as `out` needs */
  if (llvm_emit_object(c->module, obj, NULL, NULL, err, sizeof err)) {
    fe_error(&j->diag, obj, NULL, "writing the object failed: %s", err);
    free(obj);
    return -1;
  }
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  char *argv[] = {(char *)cc, "-o", (char *)out, obj, AXLC_RUNTIME_MAIN_LIB, AXLC_RUNTIME_LIB,
                  "-lopenblas", "-ljson-c", "-lm", "-lpthread", AXLC_TRAINER_LDFLAGS, NULL};
  if (!*AXLC_TRAINER_LDFLAGS) argv[10] = NULL;
  int rc = spawn(argv);
  unlink(obj);
  free(obj);
  if (rc)
    return fe_error(&j->diag, out, NULL, "linking the trainer with %s failed (it needs "
                    "libopenblas-dev and libjson-c-dev)", cc);
  return 0;
}
