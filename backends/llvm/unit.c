/* unit.c: a compiled program as units, each compiled once, on several threads, through a cache.
 *
 * A unit is one LLVM module in a context of its own. Unit 0, the main unit, holds axlc_step
 * (and axlc_forward) and the program table; every kernel is a unit of one function
 * (loop.c: llvm_kernel_begin). When a kernel is closed its IR is printed and hashed with the
 * salt (axlc's unit format, LLVM's version, the triple, CPU, features and optimization level):
 * the hash names the kernel (axk_<op>_<hash>), so the kernels that every layer repeats on other
 * buffers are one unit, compiled once, and the step calls it from each layer.
 *
 * llvm_units_compile then optimizes and generates an object for each unit, on as many threads
 * as the options say (contexts are independent, so units compile in parallel without locks).
 * Kernels go through a pass pipeline of our own (KP_PIPELINE), not default<O3>: a kernel is
 * one function of counted loop nests, so the inliner, loop unswitching, GVN and the like find
 * little, and O3's unrolling (inner loops fully unrolled before the vectorizer, then partial
 * and run-time unrolling of every loop, the row loop included) made most of the compile time
 * and code, for no measurable step time. Only compute-bound kernels (exp, tanh) keep partial
 * unrolling, which makes them faster (docs/bench.md, "Compile time").
 * With a cache directory each object is also stored there as llvm-<hash>.o (written to a temporary
 * name and renamed, so concurrent compiles never see half a file), and a later compile that
 * produces a unit with the same hash takes the object from there instead of compiling it. The
 * hash covers everything that decides the object, so a cached object is the object this
 * compile would have produced. A cached object taken is touched (its mtime is its last use), and
 * a compile that stored new objects trims the directory to its size limit, least recently used
 * first (backends/cache.c).
 */
#define AXLC_LLVM_INTERNAL
#include "backends/llvm/llvm.h"

#include "backends/backend.h"

#include <errno.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Bump when something outside the IR text changes the objects (the pass pipeline, say), or the
 * entries' format (3: a trailer with a checksum), so that older entries are never read. */
#define UNIT_FORMAT "axlc-unit 3"

static int fail(char *err, size_t cap, const char *fmt, const char *arg) {
  if (err && cap) snprintf(err, cap, fmt, arg ? arg : "");
  return -1;
}

/* ---- the hash: two 64-bit FNV-1a streams with different bases, each finished by a
 * splitmix64 mix, as 32 hex digits ---- */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void hash_key(const char *salt, const char *text, char out[33]) {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  const char *parts[] = {salt, "\n", text};
  for (int k = 0; k < 3; k++)
    for (const unsigned char *s = (const unsigned char *)parts[k]; *s; s++) {
      a = (a ^ *s) * 0x100000001b3ull;
      b = (b ^ *s) * 0x100000001b3ull;
      b ^= b >> 29;
    }
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)mix64(a), (unsigned long long)mix64(b));
}

/* ---- units ---- */

static LlvmUnit *unit_add(LlvmModule *M) {
  if (M->nunits == M->cap) {
    M->cap = M->cap ? 2 * M->cap : 64;
    M->units = base_xrealloc(M->units, (size_t)M->cap * sizeof *M->units);
  }
  LlvmUnit *u = &M->units[M->nunits++];
  memset(u, 0, sizeof *u);
  return u;
}

static void unit_drop_ir(LlvmUnit *u) {
  if (u->mod) LLVMDisposeModule(u->mod);
  if (u->ctx) LLVMContextDispose(u->ctx);
  u->mod = NULL;
  u->ctx = NULL;
}

/* A module named name in a new context, for M's target. */
static LLVMModuleRef module_for(LlvmModule *M, const char *name, LLVMContextRef *ctx) {
  *ctx = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext(name, *ctx);
  LLVMSetTarget(m, M->triple);
  LLVMSetDataLayout(m, M->layout);
  return m;
}

static LLVMTargetMachineRef machine_at(const LlvmModule *M, LLVMCodeGenOptLevel level) {
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(M->triple, &target, &msg)) {
    LLVMDisposeMessage(msg);
    return NULL;
  }
  return LLVMCreateTargetMachine(target, M->triple, M->cpu, M->features, level, LLVMRelocPIC,
                                 LLVMCodeModelDefault);
}

static LLVMTargetMachineRef machine(const LlvmModule *M) {
  return machine_at(M, LLVMCodeGenLevelAggressive);
}

int llvm_units_begin(LlvmModule *M, const LlvmOptions *o, char *err, size_t cap) {
  if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter())
    return fail(err, cap, "LLVM has no native target%s", NULL);
  char *triple = LLVMGetDefaultTargetTriple();
  char *hcpu = LLVMGetHostCPUName(), *hfeat = LLVMGetHostCPUFeatures();
  M->triple = base_xstrdup(triple);
  M->cpu = base_xstrdup(o->cpu ? o->cpu : hcpu);
  M->features = base_xstrdup(o->features ? o->features : hfeat);
  LLVMDisposeMessage(triple);
  LLVMDisposeMessage(hcpu);
  LLVMDisposeMessage(hfeat);
  LLVMTargetMachineRef tm = machine(M);
  if (!tm) return fail(err, cap, "LLVM: no target machine for %s", M->triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  M->layout = LLVMCopyStringRepOfTargetData(dl);
  LLVMDisposeTargetData(dl);
  LLVMDisposeTargetMachine(tm);
  snprintf(M->salt, sizeof M->salt, UNIT_FORMAT "|LLVM " LLVM_VERSION_STRING "|%s|%s|%s|O%d",
           M->triple, M->cpu, M->features, o->opt_level);
  LlvmUnit *u = unit_add(M);
  snprintf(u->name, sizeof u->name, "main");
  u->mod = module_for(M, "axlc", &u->ctx);
  return 0;
}

int llvm_unit_open(LlvmCtx *C) {
  if (C->c != C->M->units[0].ctx) return llvm_fail(C, "internal: a kernel inside a kernel");
  C->main_c = C->c;
  C->main_m = C->m;
  C->main_b = C->b;
  C->m = module_for(C->M, "axk", &C->c);
  LLVMContextSetDiscardValueNames(C->c, 1); /* names would only tell kernels apart */
  C->b = LLVMCreateBuilderInContext(C->c);
  llvm_ctx_types(C);
  for (int32_t k = 0; k < C->nslot_users; k++) C->slot_of[C->slot_users[k]] = -1;
  C->nslots = C->nslot_users = 0;
  C->unit_seq++;
  return 0;
}

LLVMValueRef llvm_unit_close(LlvmCtx *C) {
  LlvmModule *M = C->M;
  char key[33], name[sizeof M->units[0].name];
  /* Named axk_<op>_<hash>, the op for profiles to read; the op is part of the hashed text, so
   * the name is a function of the hash (a cached object defines the name this compile calls). */
  const char *given = LLVMGetValueName(C->fn), *op = strchr(given, '_');
  snprintf(name, sizeof name, "axk_%.24s", op ? op + 1 : given);
  LLVMSetValueName2(C->fn, name, strlen(name));
  char *text = LLVMPrintModuleToString(C->m);
  hash_key(M->salt, text, key);
  LLVMDisposeMessage(text);
  LLVMDisposeBuilder(C->b);
  int32_t found = -1;
  for (int32_t i = 1; i < M->nunits && found < 0; i++)
    if (!strcmp(M->units[i].key, key)) found = i;
  LlvmUnit *u = found < 0 ? unit_add(M) : NULL;
  if (u) {
    size_t len = strlen(name);
    snprintf(name + len, sizeof name - len, "_%s", key);
    LLVMSetValueName2(C->fn, name, strlen(name));
    memcpy(u->name, name, sizeof name);
    memcpy(u->key, key, sizeof key);
    u->ctx = C->c;
    u->mod = C->m;
  } else {
    if (found >= 0) memcpy(name, M->units[found].name, sizeof name);
    LLVMDisposeModule(C->m);
    LLVMContextDispose(C->c);
  }
  C->c = C->main_c;
  C->m = C->main_m;
  C->b = C->main_b;
  llvm_ctx_types(C);
  M->stats.kernels++;
  LLVMValueRef f = LLVMGetNamedFunction(C->m, name);
  if (!f) {
    f = LLVMAddFunction(C->m, name, C->t_kernel);
    unsigned kind = LLVMGetEnumAttributeKindForName("nounwind", 8);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(C->c, kind, 0));
  }
  return f;
}

/* ---- the cache ---- */

/* mkdir -p; 0 when dir exists afterwards. */
static int make_dirs(const char *dir) {
  char *p = base_xstrdup(dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0777) && errno != EEXIST) break;
    *s = '/';
  }
  int rc = mkdir(p, 0777) && errno != EEXIST ? -1 : 0;
  free(p);
  return rc;
}

/* The cache directory o asks for, made if missing, or NULL: none asked for, --emit llvm/asm
 * (keep_ir), or one that cannot be made or written, which is said once on stderr (the compile
 * goes on without it: a cache is never worth failing a compile for). */
static const char *cache_dir(const LlvmOptions *o) {
  if (!o->cache_dir || o->keep_ir) return NULL;
  struct stat st;
  if (make_dirs(o->cache_dir) == 0 && stat(o->cache_dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      errno = ENOTDIR; /* a regular file there: access() would say "Permission denied" */
    else if (access(o->cache_dir, W_OK | X_OK) == 0)
      return o->cache_dir;
  }
  fprintf(stderr,
          "axlc: warning: the compile cache %s is not usable (%s); compiling without it "
          "(AXLC_CACHE_DIR moves it, AXLC_NO_CACHE=1 or --no-cache turns it off)\n",
          o->cache_dir, strerror(errno));
  return NULL;
}

static char *cache_path(const char *dir, const char *key) {
  size_t n = strlen(dir) + strlen(key) + 16;
  char *p = base_xmalloc(n);
  snprintf(p, n, "%s/llvm-%s.o", dir, key);
  return p;
}

/* Whether path holds a cache entry that matches its trailer (runtime/file.c). A damaged one
 * (truncated, a flipped bit) is said, naming it, and its unit compiled again: cache_store then
 * replaces it. */
static bool cached_object(const char *path) {
  char why[256];
  int rc = rt_cache_entry_verify(path, why, sizeof why);
  if (rc < 0)
    fprintf(stderr, "axlc: note: the compile cache entry %s is damaged (%s); compiling it again\n",
            path, why);
  return rc > 0;
}

static int write_file(const char *path, const void *data, size_t n) {
  FILE *f = rt_file_open(path, "wb", NULL); /* llvm_emit_object says why a user's path is refused */
  if (!f) return -1;
  int rc = fwrite(data, 1, n, f) == n ? 0 : -1;
  if (fclose(f) != 0) rc = -1;
  if (rc) unlink(path);
  return rc;
}

/* write_file for a cache entry: the object, then its trailer (runtime/file.c), which the
 * linker and the JIT never look at. */
static int write_entry(const char *path, const void *data, size_t n) {
  unsigned char trailer[RT_CACHE_TRAILER_BYTES];
  rt_cache_entry_trailer(data, n, trailer);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int rc = fwrite(data, 1, n, f) == n && fwrite(trailer, 1, sizeof trailer, f) == sizeof trailer
               ? 0
               : -1;
  if (fclose(f) != 0) rc = -1;
  if (rc) unlink(path);
  return rc;
}

/* Stores u's object in the cache; on success the file replaces the copy in memory. */
static void cache_store(LlvmUnit *u, const char *dir) {
  char *path = cache_path(dir, u->key);
  size_t n = strlen(dir) + 64;
  char *tmp = base_xmalloc(n);
  snprintf(tmp, n, "%s/.%s.%ld.%lx.tmp", dir, u->key, (long)getpid(),
           (unsigned long)pthread_self());
  if (write_entry(tmp, LLVMGetBufferStart(u->obj), LLVMGetBufferSize(u->obj)) == 0) {
    if (rename(tmp, path) == 0) {
      LLVMDisposeMemoryBuffer(u->obj);
      u->obj = NULL;
      u->file = path;
      path = NULL;
    } else {
      unlink(tmp);
    }
  }
  free(path);
  free(tmp);
}

/* After a compile that stored objects (a warm one never reads the directory): the least
 * recently used entries go while the cache is over its limit. A trim that fails is said once
 * and costs the compile nothing. */
static void cache_trim(const char *dir, int64_t max, bool profile) {
  BackendCacheStats st;
  char err[512];
  double t0 = rt_now_s();
  if (backend_cache_trim(dir, max, &st, err, sizeof err) != 0)
    fprintf(stderr,
            "axlc: warning: the compile cache was not trimmed to its limit: %s (AXLC_CACHE_MAX=0 "
            "turns the limit off)\n",
            err);
  else if (profile && max > 0)
    fprintf(stderr, "axlc: cache %s: %lld entries removed, %lld left (%lld bytes) in %.3f s\n", dir,
            (long long)st.removed, (long long)st.entries, (long long)st.bytes, rt_now_s() - t0);
}

/* ---- compiling ---- */

typedef struct Work {
  LlvmModule *M;
  const LlvmOptions *o;
  const char *cache_dir;
  int32_t *todo, ntodo;
  atomic_int next;
  pthread_mutex_t lock;
  int32_t done;
  double t0;
  bool tty, shown;
  bool profile; /* AXLC_COMPILE_PROFILE: a line per unit compiled */
} Work;

/* ---- the kernels' pass pipeline ---- */

/* simplifycfg as O3 runs it inside its function simplification: loops kept in their shape */
#define KP_CFG                                                                                     \
  "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;"                \
  "no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts>"

/* O3's function passes that matter for a kernel's loop nests, in O3's order: promote the
 * accumulators (sroa), clean up, rotate loops and hoist the invariant address arithmetic,
 * memset for zeroing loops (loop-idiom: scatter_add's zeroed gradient), canonical induction
 * variables, then vectorize (interleaving as the cost model says) and clean up after it.
 * Unrolling after the vectorizer is full only (loops of a few iterations left after it,
 * within O3's size threshold), unless partial: see kernel_compute_bound. */
#define KP_PIPELINE(unroll)                                                                        \
  "function(sroa,early-cse<>," KP_CFG ",instcombine,loop-mssa(licm,loop-rotate,licm)," KP_CFG      \
  ",instcombine,loop(loop-idiom,indvars,loop-deletion),"                                           \
  "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only>,loop-load-elim,"             \
  "instcombine,simplifycfg,slp-vectorizer,vector-combine,instcombine,loop-unroll<" unroll          \
  ">,instcombine,loop-mssa(licm)," KP_CFG ")"

static const char KERNEL_PASSES[] = KP_PIPELINE("O3;no-partial;no-runtime");
static const char KERNEL_PASSES_UNROLLED[] = KP_PIPELINE("O3;no-runtime");

/* Whether m's kernel does much floating-point arithmetic per element it loads or stores (a
 * polynomial: exp, tanh, GELU's derivative): there partial unrolling overlaps the long
 * dependent chains and pays (without it gpt2-124m's tanh and exp kernels took 14% longer).
 * Elsewhere the loops wait on memory and unrolling only costs compile time. Counted on the IR
 * before optimizing, where each element access is one scalar load or store (the loads of the
 * slot pointers from args are not element accesses). */
static bool kernel_compute_bound(LLVMModuleRef m) {
  int64_t arith = 0, access = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f))
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(f); b; b = LLVMGetNextBasicBlock(b))
      for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i)) {
        LLVMOpcode op = LLVMGetInstructionOpcode(i);
        if (op == LLVMFAdd || op == LLVMFSub || op == LLVMFMul || op == LLVMFDiv ||
            op == LLVMFNeg || op == LLVMCall)
          arith++;
        else if (op == LLVMLoad && LLVMGetTypeKind(LLVMTypeOf(i)) != LLVMPointerTypeKind)
          access++;
        else if (op == LLVMStore)
          access++;
      }
  return arith >= 4 * (access > 0 ? access : 1);
}

/* Verifies, optimizes and generates u's object with tm. */
static void compile_unit(Work *w, LLVMTargetMachineRef tm, LlvmUnit *u) {
  char *msg = NULL, buf[600];
  double t0 = rt_now_s(), t1 = 0;
  if (LLVMVerifyModule(u->mod, LLVMReturnStatusAction, &msg)) {
    snprintf(buf, sizeof buf, "internal: unit %s does not verify: %.400s", u->name, msg);
    LLVMDisposeMessage(msg);
    u->err = base_xstrdup(buf);
    return;
  }
  LLVMDisposeMessage(msg);
  msg = NULL;
  /* The main unit is kernel calls, pointer stores and BLAS calls, run once per step: neither
   * optimizing it nor the full code generator buys a measurable step time, and for gpt2-124m
   * (2945 calls) they took 11 s where O0 and the fast code generator take 0.6 s. */
  int level = w->o->opt_level;
  bool unrolled = false;
  if (u == &w->M->units[0]) level = 0;
  if (level > 0) {
    char pipeline[32];
    snprintf(pipeline, sizeof pipeline, "default<O%d>", level);
    unrolled = level >= 3 && kernel_compute_bound(u->mod);
    const char *passes = level < 3 ? pipeline : unrolled ? KERNEL_PASSES_UNROLLED : KERNEL_PASSES;
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions(); /* for default<On> */
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMErrorRef e = LLVMRunPasses(u->mod, passes, tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (e) {
      char *em = LLVMGetErrorMessage(e);
      snprintf(buf, sizeof buf, "LLVM passes: %s", em);
      LLVMDisposeErrorMessage(em);
      u->err = base_xstrdup(buf);
      return;
    }
  }
  t1 = rt_now_s();
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, u->mod, LLVMObjectFile, &msg, &u->obj)) {
    snprintf(buf, sizeof buf, "LLVM code generation: %s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    u->err = base_xstrdup(buf);
    return;
  }
  if (w->profile)
    fprintf(stderr, "axlc: unit %s: optimized in %.3f s, code in %.3f s, %zu bytes%s\n", u->name,
            t1 - t0, rt_now_s() - t1, LLVMGetBufferSize(u->obj), unrolled ? ", unrolled" : "");
  if (w->cache_dir) cache_store(u, w->cache_dir);
  if (!w->o->keep_ir) unit_drop_ir(u);
}

static void progress(Work *w) {
  pthread_mutex_lock(&w->lock);
  w->done++;
  if (w->o->progress && w->tty && rt_now_s() - w->t0 > 1.0) {
    fprintf(stderr, "\raxlc: generating code: %d of %d units", (int)w->done, (int)w->ntodo);
    w->shown = true;
  }
  pthread_mutex_unlock(&w->lock);
}

static void *worker(void *arg) {
  Work *w = arg;
  LLVMTargetMachineRef tm = NULL;
  for (int i; (i = atomic_fetch_add(&w->next, 1)) < w->ntodo;) {
    LlvmUnit *u = &w->M->units[w->todo[i]];
    /* The main unit's code runs once per kernel call: the fast code generator will do. */
    bool is_main = w->todo[i] == 0;
    LLVMTargetMachineRef use = is_main ? machine_at(w->M, LLVMCodeGenLevelNone) : tm;
    if (!use && !is_main) use = tm = machine(w->M);
    if (!use)
      u->err = base_xstrdup("LLVM: no target machine");
    else
      compile_unit(w, use, u);
    if (is_main && use) LLVMDisposeTargetMachine(use);
    progress(w);
  }
  if (tm) LLVMDisposeTargetMachine(tm);
  return NULL;
}

static int jobs_for(const LlvmOptions *o, int32_t ntodo) {
  long n = o->jobs > 0 ? o->jobs : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > ntodo) n = ntodo;
  return (int)(n < 1 ? 1 : n);
}

int llvm_units_compile(LlvmModule *M, const LlvmOptions *o, char *err, size_t cap) {
  double t0 = rt_now_s();
  M->stats.units = M->nunits;
  /* The main unit's key: everything it holds, offsets and program table included. */
  char *text = LLVMPrintModuleToString(M->units[0].mod);
  hash_key(M->salt, text, M->units[0].key);
  LLVMDisposeMessage(text);
  const char *dir = cache_dir(o);
  const char *prof = getenv("AXLC_COMPILE_PROFILE");
  Work w = {.M = M,
            .o = o,
            .cache_dir = dir,
            .t0 = t0,
            .tty = isatty(2),
            .profile = prof && *prof && strcmp(prof, "0") != 0};
  w.todo = base_xmalloc((size_t)M->nunits * sizeof *w.todo);
  for (int32_t i = 0; i < M->nunits; i++) {
    LlvmUnit *u = &M->units[i];
    char *path = dir ? cache_path(dir, u->key) : NULL;
    /* Touched before it is checked: a trim beside this compile that listed the entry as
     * unused sees the new mtime before it removes it (backends/cache.c: used_since). */
    if (path) backend_cache_touch(path);
    if (path && cached_object(path)) {
      u->file = path;
      unit_drop_ir(u);
      M->stats.cached++;
      continue;
    }
    free(path);
    w.todo[w.ntodo++] = i;
  }
  atomic_init(&w.next, 0);
  pthread_mutex_init(&w.lock, NULL);
  int nthreads = jobs_for(o, w.ntodo);
  pthread_t th[64];
  if (nthreads > 64) nthreads = 64;
  int started = 0;
  for (int t = 1; t < nthreads; t++)
    if (pthread_create(&th[started], NULL, worker, &w) == 0) started++;
  worker(&w);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&w.lock);
  if (w.shown) fprintf(stderr, "\r\033[K");
  int32_t stored = 0;
  for (int32_t k = 0; k < w.ntodo; k++) stored += M->units[w.todo[k]].file != NULL;
  free(w.todo);
  M->stats.jobs = started + 1;
  M->stats.codegen_s = rt_now_s() - t0;
  if (stored) cache_trim(dir, o->cache_max, w.profile);
  for (int32_t i = 0; i < M->nunits; i++)
    if (M->units[i].err) return fail(err, cap, "%s", M->units[i].err);
  return 0;
}

/* ---- the results ---- */

void llvm_paths_free(char **paths) {
  for (char **p = paths; p && *p; p++) free(*p);
  free(paths);
}

int llvm_object_files(LlvmModule *M, const char *dir, char ***out, int *n, char *err, size_t cap) {
  *out = NULL;
  *n = 0;
  char **paths = base_xcalloc((size_t)M->nunits + 1, sizeof *paths);
  for (int32_t i = 0; i < M->nunits; i++) {
    LlvmUnit *u = &M->units[i];
    if (u->file) {
      paths[i] = base_xstrdup(u->file);
    } else if (u->obj) {
      size_t len = strlen(dir) + strlen(u->name) + 8;
      paths[i] = base_xmalloc(len);
      snprintf(paths[i], len, "%s/%s.o", dir, u->name);
      if (write_file(paths[i], LLVMGetBufferStart(u->obj), LLVMGetBufferSize(u->obj))) {
        fail(err, cap, "%s: cannot write the object", paths[i]);
        llvm_paths_free(paths);
        return -1;
      }
    } else {
      llvm_paths_free(paths);
      return fail(err, cap, "unit %s has no object (was it compiled?)", u->name);
    }
  }
  *out = paths;
  *n = M->nunits;
  return 0;
}

int llvm_emit_object(LlvmModule *M, const char *path, char *err, size_t cap) {
  if (!M || !M->nunits) return fail(err, cap, "llvm_emit_object: no module%s", NULL);
  RtError refused;
  if (rt_file_check_user(path, 1, &refused)) return fail(err, cap, "%s", refused.msg);
  if (M->nunits == 1 && M->units[0].obj)
    return write_file(path, LLVMGetBufferStart(M->units[0].obj), LLVMGetBufferSize(M->units[0].obj))
               ? fail(err, cap, "%s: cannot write the object", path)
               : 0;
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/axlc-obj-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return fail(err, cap, "%s: cannot create a temporary directory", dir);
  char **objs;
  int n, rc = llvm_object_files(M, dir, &objs, &n, err, cap);
  if (rc == 0) {
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    char **argv = base_xcalloc((size_t)n + 8, sizeof *argv);
    int k = 0;
    argv[k++] = (char *)cc;
    argv[k++] = "-r";
    argv[k++] = "-nostdlib";
    argv[k++] = "-o";
    argv[k++] = (char *)path;
    for (int i = 0; i < n; i++) argv[k++] = objs[i];
    rc = base_run(argv) == 0 ? 0 : fail(err, cap, "%s: `cc -r` failed to join the objects", path);
    free(argv);
    for (int i = 0; i < n; i++)
      if (!strncmp(objs[i], dir, strlen(dir))) unlink(objs[i]);
    llvm_paths_free(objs);
  }
  rmdir(dir);
  return rc;
}

int llvm_emit_text(LlvmModule *M, FILE *out, bool as_asm, char *err, size_t cap) {
  LLVMTargetMachineRef tm = as_asm ? machine(M) : NULL;
  if (as_asm && !tm) return fail(err, cap, "LLVM: no target machine%s", NULL);
  int rc = 0;
  for (int32_t i = 0; i < M->nunits && rc == 0; i++) {
    LlvmUnit *u = &M->units[i];
    if (!u->mod) {
      rc = fail(err, cap, "unit %s: its IR was not kept (compile with keep_ir)", u->name);
      break;
    }
    if (!as_asm) {
      char *s = LLVMPrintModuleToString(u->mod);
      if (fprintf(out, "; ---- unit %s\n", u->name) < 0 || fputs(s, out) < 0)
        rc = fail(err, cap, "cannot write the LLVM IR%s", NULL);
      LLVMDisposeMessage(s);
      continue;
    }
    LLVMMemoryBufferRef buf = NULL;
    char *msg = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, u->mod, LLVMAssemblyFile, &msg, &buf)) {
      rc = fail(err, cap, "LLVM assembly: %s", msg);
      LLVMDisposeMessage(msg);
      break;
    }
    size_t n = LLVMGetBufferSize(buf);
    if (fprintf(out, "# ---- unit %s\n", u->name) < 0 ||
        fwrite(LLVMGetBufferStart(buf), 1, n, out) != n)
      rc = fail(err, cap, "cannot write the assembly%s", NULL);
    LLVMDisposeMemoryBuffer(buf);
  }
  if (tm) LLVMDisposeTargetMachine(tm);
  return rc;
}

const LlvmStats *llvm_module_stats(const LlvmModule *M) { return &M->stats; }

void llvm_module_free(LlvmModule *M) {
  if (!M) return;
  for (int32_t i = 0; i < M->nunits; i++) {
    LlvmUnit *u = &M->units[i];
    unit_drop_ir(u);
    if (u->obj) LLVMDisposeMemoryBuffer(u->obj);
    free(u->file);
    free(u->err);
  }
  free(M->units);
  free(M->cpu);
  free(M->features);
  free(M->triple);
  if (M->layout) LLVMDisposeMessage(M->layout);
  free(M);
}
