/* test_units.c: kernels compiled once (unit.c), on threads, through the object cache.
 *
 * The same computation on other buffers (what every layer of a model repeats) must share one
 * unit; another shape or another expression must not. A second compile through a cache
 * directory takes every object from it and computes the same values; a damaged cache entry
 * (not an object, cut short, a flipped bit) is compiled again, not used. With a size limit, a
 * cache hit refreshes its entry's last use and a compile that stored objects trims the entries
 * unused for an hour; a warm compile does not.
 * All results are checked against the interpreter (bt_check_with).
 */
#include "backend_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OUT(g, name, v) CU_ASSERT_EQUAL(ir_graph_add_output((g), (name), (v)), IR_OK)

static const int64_t D35[] = {3, 5}, D45[] = {4, 5};

/* tanh(x) * y + x on three pairs of buffers of one shape, and once on another shape. */
static IrGraph *layers(void) {
  IrGraph *g = ir_graph_new();
  char xn[16], yn[16], on[16];
  for (int l = 0; l < 4; l++) {
    const int64_t *d = l < 3 ? D35 : D45;
    snprintf(xn, sizeof xn, "x%d", l);
    snprintf(yn, sizeof yn, "y%d", l);
    snprintf(on, sizeof on, "out%d", l);
    int32_t x = ir_param(g, xn, DT_F32, 2, d), y = ir_param(g, yn, DT_F32, 2, d);
    OUT(g, on, ir_add(g, ir_mul(g, ir_tanh(g, x), y), x));
  }
  return g;
}

static const LlvmStats *compile_stats(IrGraph *g, const LlvmOptions *o, LlvmModule **m) {
  MemPlan mp;
  CU_ASSERT_EQUAL_FATAL(bt_plan_simple(g, &mp), 0);
  char err[512] = "";
  int rc = llvm_compile(g, &mp, o, m, err, sizeof err);
  if (rc) fprintf(stderr, "compile: %s\n", err);
  free(mp.offset);
  free(mp.bytes);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  return llvm_module_stats(*m);
}

static void test_dedup(void) {
  IrGraph *g = layers();
  LlvmOptions o = llvm_options_default();
  LlvmModule *m;
  const LlvmStats *s = compile_stats(g, &o, &m);
  CU_ASSERT_EQUAL(s->kernels, 4); /* one fused kernel per output */
  /* The flat kernel does not depend on the shape (lo and hi are arguments), so all four
   * outputs share it: the main unit and one kernel. */
  CU_ASSERT_EQUAL(s->units, 2);
  llvm_module_free(m);
  bt_check_with(g, NULL, 0, &o, BT_PLAN_SIMPLE, 1e-6, "layers, deduplicated");
  /* Another expression is another unit. */
  int32_t x = ir_graph_find(g, IR_PARAMETER, "x0");
  OUT(g, "other", ir_sub(g, ir_exp(g, x), x));
  s = compile_stats(g, &o, &m);
  CU_ASSERT_EQUAL(s->units, 3);
  llvm_module_free(m);
  ir_graph_free(g);
}

/* The number of llvm-*.o files in dir. */
static int cache_entries(const char *dir, char *one, size_t cap) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (!strncmp(e->d_name, "llvm-", 5)) {
      n++;
      snprintf(one, cap, "%s/%s", dir, e->d_name);
    }
  if (d) closedir(d);
  return n;
}

static void test_cache(void) {
  char dir[] = "/tmp/axlc_units_XXXXXX";
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  char sub[64], one[512] = "";
  snprintf(sub, sizeof sub, "%s/made/by/the/compile", dir); /* created on demand */
  IrGraph *g = layers();
  int32_t x = ir_graph_find(g, IR_PARAMETER, "x1");
  OUT(g, "other", ir_sub(g, ir_exp(g, x), x));
  LlvmOptions o = llvm_options_default();
  o.cache_dir = sub;
  LlvmModule *m;
  const LlvmStats *s = compile_stats(g, &o, &m);
  CU_ASSERT_EQUAL(s->cached, 0);
  int32_t units = s->units;
  llvm_module_free(m);
  CU_ASSERT_EQUAL(cache_entries(sub, one, sizeof one), units);
  s = compile_stats(g, &o, &m); /* warm: every object from the cache */
  CU_ASSERT_EQUAL(s->cached, units);
  llvm_module_free(m);
  bt_check_with(g, NULL, 0, &o, BT_PLAN_SIMPLE, 1e-6, "from the cache");
  /* A damaged entry is not an object: it is compiled again and replaced. */
  FILE *f = fopen(one, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs("not an object", f);
  fclose(f);
  s = compile_stats(g, &o, &m);
  CU_ASSERT_EQUAL(s->cached, units - 1);
  llvm_module_free(m);
  s = compile_stats(g, &o, &m);
  CU_ASSERT_EQUAL(s->cached, units);
  llvm_module_free(m);
  bt_check_with(g, NULL, 0, &o, BT_PLAN_SIMPLE, 1e-6, "after a damaged entry");
  /* Nor is an object cut short, or one with a flipped bit: its trailer no longer matches. */
  struct stat st;
  CU_ASSERT_EQUAL_FATAL(stat(one, &st), 0);
  for (int k = 0; k < 2; k++) {
    if (k == 0) {
      CU_ASSERT_EQUAL(truncate(one, st.st_size / 2), 0);
    } else {
      f = fopen(one, "r+b");
      CU_ASSERT_PTR_NOT_NULL_FATAL(f);
      fseek(f, st.st_size / 3, SEEK_SET);
      int c = fgetc(f);
      fseek(f, st.st_size / 3, SEEK_SET);
      fputc(c ^ 0x10, f);
      fclose(f);
    }
    s = compile_stats(g, &o, &m);
    CU_ASSERT_EQUAL(s->cached, units - 1);
    llvm_module_free(m);
    struct stat again;
    CU_ASSERT_EQUAL(stat(one, &again), 0); /* replaced by a whole entry */
    CU_ASSERT_EQUAL(again.st_size, st.st_size);
    s = compile_stats(g, &o, &m);
    CU_ASSERT_EQUAL(s->cached, units);
    llvm_module_free(m);
  }
  bt_check_with(g, NULL, 0, &o, BT_PLAN_SIMPLE, 1e-6, "after a truncated and a flipped entry");
  /* A cache directory that cannot be made is no cache, not an error. */
  o.cache_dir = "/proc/axlc-cannot-be-here";
  s = compile_stats(g, &o, &m);
  CU_ASSERT_EQUAL(s->cached, 0);
  llvm_module_free(m);
  ir_graph_free(g);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

/* Sets the last use (mtime) of every file in dir to age_s seconds ago. */
static void age_all(const char *dir, long age_s) {
  DIR *d = opendir(dir);
  struct timespec t[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = time(NULL) - age_s}};
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.') CU_ASSERT_EQUAL(utimensat(dirfd(d), e->d_name, t, 0), 0);
  if (d) closedir(d);
}

/* The files in dir last used over age_s seconds ago. */
static int count_older(const char *dir, long age_s) {
  DIR *d = opendir(dir);
  struct stat st;
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
         st.st_mtime < time(NULL) - age_s;
  if (d) closedir(d);
  return n;
}

static void test_cache_limit(void) {
  char dir[] = "/tmp/axlc_units_XXXXXX", one[512], junk[600];
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  IrGraph *g = layers();
  LlvmOptions o = llvm_options_default();
  o.cache_dir = dir;
  o.cache_max = 1; /* at the next trim, every entry unused for an hour goes */
  LlvmModule *m;
  const LlvmStats *s = compile_stats(g, &o, &m);
  int32_t units = s->units;
  llvm_module_free(m);
  CU_ASSERT_EQUAL(cache_entries(dir, one, sizeof one), units); /* new: kept over the limit */
  snprintf(junk, sizeof junk, "%s/llvm-junk.o", dir);          /* an entry no compile here uses */
  FILE *f = fopen(junk, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs("an old object", f);
  fclose(f);
  age_all(dir, 2 * 86400);
  /* warm: every object from the cache, each touched; nothing stored, so no trim */
  s = compile_stats(g, &o, &m);
  CU_ASSERT_EQUAL(s->cached, units);
  llvm_module_free(m);
  CU_ASSERT_EQUAL(access(junk, F_OK), 0);
  CU_ASSERT_EQUAL(count_older(dir, 3600), 1); /* the junk only */
  /* another output: new objects stored, then the trim takes the junk, not the touched ones */
  int32_t x = ir_graph_find(g, IR_PARAMETER, "x2");
  OUT(g, "other", ir_sub(g, ir_exp(g, x), x));
  s = compile_stats(g, &o, &m);
  int32_t stored = s->units - s->cached;
  CU_ASSERT(stored >= 2); /* the main unit and the new kernel */
  llvm_module_free(m);
  CU_ASSERT_NOT_EQUAL(access(junk, F_OK), 0);
  CU_ASSERT_EQUAL(cache_entries(dir, one, sizeof one), units + stored);
  CU_ASSERT_EQUAL(count_older(dir, 3600), 0);
  ir_graph_free(g);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

/* One thread or four: the same units, the same values. */
static void test_jobs(void) {
  IrGraph *g = layers();
  for (int jobs = 1; jobs <= 4; jobs += 3) {
    LlvmOptions o = llvm_options_default();
    o.jobs = jobs;
    LlvmModule *m;
    const LlvmStats *s = compile_stats(g, &o, &m);
    CU_ASSERT_EQUAL(s->jobs, jobs == 1 ? 1 : 2); /* no more threads than units */
    llvm_module_free(m);
    bt_check_with(g, NULL, 0, &o, BT_PLAN_MEMPLAN, 1e-6, jobs == 1 ? "1 job" : "4 jobs");
  }
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"dedup", test_dedup}, {"cache", test_cache}, {"cache limit", test_cache_limit},
      {"jobs", test_jobs},   {NULL, NULL},
  };
  return test_main(argc, argv, "backend_units", cases);
}
