/* test_cache.c: the compile cache's upkeep (backends/cache.c) on temporary directories.
 *
 * - AXLC_CACHE_MAX: sizes with and without K, M, G parse; anything else is refused, and the
 *   message names the variable, its value and what was expected.
 * - Trim: entries of chosen sizes and last uses (mtimes set with utimensat) go least recently
 *   used first until the total is at most 90% of the limit; an entry used in the last hour
 *   stays even over the limit; limit 0 removes nothing; a cache hit's touch changes the order.
 * - Only entries (llvm-*.o, ocl-*.bin, regular files) are ever removed, and temporaries
 *   (.NAME.tmp, ocl-*.bin.tmp) once a day old; other files, symbolic links and directories
 *   with entry-like names are left alone by trim and clear.
 * Runs without LLVM: the module is the backends' own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "tests/cunit_check.h"

#define MINUTE 60
#define HOUR   (60 * MINUTE)
#define DAY    (24 * HOUR)

static char dir[64];

static int make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/axlc_cache_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

static void path_of(const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", dir, name);
}

/* Sets name's mtime to age seconds ago. */
static void age(const char *name, long age_s) {
  char p[256];
  path_of(name, p, sizeof p);
  struct timespec t[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = time(NULL) - age_s}};
  CHECK_MSG(utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW) == 0, "utimensat %s: %s", p,
            strerror(errno));
}

/* A file of size bytes, last used age seconds ago. */
static void put(const char *name, int64_t size, long age_s) {
  char p[256];
  path_of(name, p, sizeof p);
  FILE *f = fopen(p, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  for (int64_t i = 0; i < size; i++) fputc('x', f);
  CU_ASSERT_EQUAL(fclose(f), 0);
  age(name, age_s);
}

static bool exists(const char *name) {
  char p[256];
  struct stat st;
  path_of(name, p, sizeof p);
  return lstat(p, &st) == 0;
}

/* Every name of the list is there (want) or not (!want). */
static void check_there(const char *const *names, bool want, const char *what) {
  for (int i = 0; names[i]; i++)
    CHECK_MSG(exists(names[i]) == want, "%s: %s %s", what, names[i],
              want ? "was removed" : "is still there");
}

/* Files that are no entries: other names, a symbolic link and a directory with entry names,
 * an old file named like a temporary but without the dot, a temporary from now. */
static const char *const others[] = {"notes.txt",     "llvm-.o", "llvm-x.obj", "xllvm-a.o",
                                     "ocl-a.bin.bak", "x.tmp",   ".fresh.tmp", "llvm-link.o",
                                     "llvm-dir.o",    "target",  NULL};

static void put_others(void) {
  for (int i = 0; i < 7; i++) put(others[i], 50, i == 6 ? 0 : 9 * DAY);
  put("target", 50, 9 * DAY);
  char p[256];
  path_of("llvm-link.o", p, sizeof p);
  CU_ASSERT_EQUAL(symlink("target", p), 0);
  age("llvm-link.o", 9 * DAY);
  path_of("llvm-dir.o", p, sizeof p);
  CU_ASSERT_EQUAL(mkdir(p, 0777), 0);
  age("llvm-dir.o", 9 * DAY);
}

/* ---- AXLC_CACHE_MAX ---- */

static void test_parse_size(void) {
  static const struct {
    const char *s;
    int64_t v;
  } good[] = {{"0", 0},          {"1", 1},
              {"4096", 4096},    {"1K", 1024},
              {"3k", 3072},      {"500M", 500ll << 20},
              {"2G", 2ll << 30}, {"2g", 2ll << 30},
              {"0G", 0},         {"8589934591G", 8589934591ll << 30}}; /* the largest */
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    int64_t v = -1;
    int rc = backend_cache_parse_size(good[i].s, &v);
    CHECK_MSG(rc == 0 && v == good[i].v, "\"%s\": rc %d, %lld, expected %lld", good[i].s, rc,
              (long long)v, (long long)good[i].v);
  }
  static const char *const bad[] = {
      "",    "lots",        "-1",  "+5",  " 5", "5 ",   "1.5G",
      "10X", "M",           "5MB", "5Mi", "1T", "0x10", "9223372036854775808",
      "5G0", "8589934592G", NULL};
  for (int i = 0; bad[i]; i++) {
    int64_t v = 77;
    int rc = backend_cache_parse_size(bad[i], &v);
    CHECK_MSG(rc == -1 && v == 77, "\"%s\" accepted: rc %d, %lld", bad[i], rc, (long long)v);
  }
}

static void test_limit_env(void) {
  int64_t max = -1;
  char err[256] = "";
  unsetenv("AXLC_CACHE_MAX");
  CU_ASSERT_EQUAL(backend_cache_limit(&max, err, sizeof err), 0);
  CHECK_INT(max, 1ll << 30);
  setenv("AXLC_CACHE_MAX", "", 1); /* set to nothing: the default */
  CU_ASSERT_EQUAL(backend_cache_limit(&max, err, sizeof err), 0);
  CHECK_INT(max, 1ll << 30);
  setenv("AXLC_CACHE_MAX", "0", 1);
  CU_ASSERT_EQUAL(backend_cache_limit(&max, err, sizeof err), 0);
  CHECK_INT(max, 0);
  setenv("AXLC_CACHE_MAX", "250M", 1);
  CU_ASSERT_EQUAL(backend_cache_limit(&max, err, sizeof err), 0);
  CHECK_INT(max, 250ll << 20);
  setenv("AXLC_CACHE_MAX", "lots", 1);
  CU_ASSERT_EQUAL(backend_cache_limit(&max, err, sizeof err), -1);
  const char *want = "AXLC_CACHE_MAX=lots: expected a size in bytes such as 500M or 2G (K, M, G: "
                     "KiB, MiB, GiB), or 0 for no limit";
  CHECK_MSG(!strcmp(err, want), "message \"%s\", expected \"%s\"", err, want);
  CHECK_INT(max, 1ll << 30);
  unsetenv("AXLC_CACHE_MAX");
}

/* ---- trim ---- */

/* Five entries of 100 bytes, used 5, 4, 3 and 2 days and 10 minutes ago, and the others. */
static const char *const entries[] = {"llvm-a.o", "llvm-b.o", "ocl-c.bin",
                                      "llvm-d.o", "llvm-e.o", NULL};

static void put_entries(void) {
  static const long ages[] = {5 * DAY, 4 * DAY, 3 * DAY, 2 * DAY, 10 * MINUTE};
  for (int i = 0; entries[i]; i++) put(entries[i], 100, ages[i]);
  put_others();
}

static void test_trim_lru(void) {
  CU_ASSERT_EQUAL_FATAL(make_dir(), 0);
  put_entries();
  put(".llvm-f.o.123.abc.tmp", 50, 2 * DAY); /* a crashed compile's */
  put("ocl-g.bin.tmp", 50, 2 * DAY);         /* a crashed trainer's */
  BackendCacheStats st;
  char err[512] = "";
  /* 500 bytes, limit 400: down to 360 or less, the least recently used first */
  CU_ASSERT_EQUAL(backend_cache_trim(dir, 400, &st, err, sizeof err), 0);
  check_there((const char *const[]){"llvm-a.o", "llvm-b.o", NULL}, false, "limit 400");
  check_there(entries + 2, true, "limit 400");
  check_there(others, true, "limit 400");
  CU_ASSERT(!exists(".llvm-f.o.123.abc.tmp") && !exists("ocl-g.bin.tmp"));
  CHECK_INT(st.removed, 2);
  CHECK_INT(st.removed_bytes, 200);
  CHECK_INT(st.temps, 2);
  CHECK_INT(st.entries, 3);
  CHECK_INT(st.bytes, 300);
  CU_ASSERT(st.bytes <= 360);
  CHECK_INT(st.recent, 0);
  /* under the limit: nothing */
  CU_ASSERT_EQUAL(backend_cache_trim(dir, 300, &st, err, sizeof err), 0);
  CHECK_INT(st.removed, 0);
  check_there(entries + 2, true, "limit 300, 300 bytes");
  /* 15 bytes: the old ones go, the one used 10 minutes ago stays over the limit */
  CU_ASSERT_EQUAL(backend_cache_trim(dir, 15, &st, err, sizeof err), 0);
  check_there((const char *const[]){"ocl-c.bin", "llvm-d.o", NULL}, false, "limit 15");
  CU_ASSERT(exists("llvm-e.o"));
  check_there(others, true, "limit 15");
  CHECK_INT(st.removed, 2);
  CHECK_INT(st.entries, 1);
  CHECK_INT(st.bytes, 100);
  CHECK_INT(st.recent, 1);
  remove_dir();
}

/* The hour's protection is by last use: an entry written long ago but used 59 minutes ago
 * stays, one last used 61 minutes ago goes. */
static void test_trim_recent(void) {
  CU_ASSERT_EQUAL_FATAL(make_dir(), 0);
  put("llvm-old.o", 1000, 61 * MINUTE);
  put("llvm-used.o", 1000, 59 * MINUTE);
  put("ocl-new.bin", 1000, 0);
  BackendCacheStats st;
  char err[512] = "";
  CU_ASSERT_EQUAL(backend_cache_trim(dir, 1, &st, err, sizeof err), 0);
  CU_ASSERT(!exists("llvm-old.o"));
  CU_ASSERT(exists("llvm-used.o") && exists("ocl-new.bin"));
  CHECK_INT(st.removed, 1);
  CHECK_INT(st.recent, 2);
  CHECK_INT(st.bytes, 2000);
  remove_dir();
}

static void test_trim_no_limit(void) {
  CU_ASSERT_EQUAL_FATAL(make_dir(), 0);
  put_entries();
  put(".stale.tmp", 50, 2 * DAY);
  BackendCacheStats st;
  char err[512] = "";
  CU_ASSERT_EQUAL(backend_cache_trim(dir, 0, &st, err, sizeof err), 0);
  check_there(entries, true, "limit 0");
  check_there(others, true, "limit 0");
  CU_ASSERT(exists(".stale.tmp")); /* no limit: the directory is not even read */
  CHECK_INT(st.removed, 0);
  remove_dir();
}

/* A cache hit touches its entry: the oldest becomes the newest, and another goes first. */
static void test_touch_order(void) {
  CU_ASSERT_EQUAL_FATAL(make_dir(), 0);
  put("llvm-1.o", 100, 3 * DAY);
  put("llvm-2.o", 100, 2 * DAY);
  put("llvm-3.o", 100, 1 * DAY);
  char p[256];
  path_of("llvm-1.o", p, sizeof p);
  backend_cache_touch(p);
  struct stat st;
  CU_ASSERT(stat(p, &st) == 0 && st.st_mtime >= time(NULL) - MINUTE);
  BackendCacheStats s;
  char err[512] = "";
  CU_ASSERT_EQUAL(backend_cache_trim(dir, 250, &s, err, sizeof err), 0); /* 300 -> <= 225 */
  CU_ASSERT(exists("llvm-1.o"));
  CU_ASSERT(!exists("llvm-2.o"));
  CU_ASSERT(exists("llvm-3.o"));
  CHECK_INT(s.removed, 1);
  path_of("llvm-missing.o", p, sizeof p);
  backend_cache_touch(p); /* a miss: nothing happens */
  CU_ASSERT(!exists("llvm-missing.o"));
  remove_dir();
}

/* ---- clear and stats ---- */

static void test_clear(void) {
  CU_ASSERT_EQUAL_FATAL(make_dir(), 0);
  put_entries();
  put(".llvm-f.o.1.2.tmp", 50, 2 * DAY);
  BackendCacheStats st;
  char err[512] = "";
  CU_ASSERT_EQUAL(backend_cache_clear(dir, &st, err, sizeof err), 0);
  check_there(entries, false, "clear"); /* the one used 10 minutes ago too */
  check_there(others, true, "clear");
  CU_ASSERT(!exists(".llvm-f.o.1.2.tmp"));
  CU_ASSERT(exists(".fresh.tmp")); /* a temporary from now may be a compile's at work */
  CHECK_INT(st.removed, 5);
  CHECK_INT(st.removed_bytes, 500);
  CHECK_INT(st.temps, 1);
  CHECK_INT(st.entries, 0);
  CHECK_INT(st.bytes, 0);
  remove_dir();
}

static void test_stats(void) {
  CU_ASSERT_EQUAL_FATAL(make_dir(), 0);
  time_t now = time(NULL);
  put_entries();
  put(".stale.tmp", 50, 2 * DAY);
  BackendCacheStats st;
  char err[512] = "";
  CU_ASSERT_EQUAL(backend_cache_stats(dir, &st, err, sizeof err), 0);
  CHECK_INT(st.entries, 5);
  CHECK_INT(st.bytes, 500);
  CU_ASSERT(st.oldest >= now - 5 * DAY && st.oldest <= now - 5 * DAY + MINUTE);
  CU_ASSERT(st.newest >= now - 10 * MINUTE && st.newest <= now - 10 * MINUTE + MINUTE);
  CU_ASSERT(exists(".stale.tmp")); /* stats only look */
  /* a directory that does not exist holds nothing; one that is a file is an error naming it */
  char sub[256];
  path_of("not-yet", sub, sizeof sub);
  CU_ASSERT_EQUAL(backend_cache_stats(sub, &st, err, sizeof err), 0);
  CHECK_INT(st.entries, 0);
  CHECK_INT(st.oldest, 0);
  path_of("notes.txt", sub, sizeof sub);
  CU_ASSERT_EQUAL(backend_cache_stats(sub, &st, err, sizeof err), -1);
  CHECK_MSG(strstr(err, sub) && strstr(err, "Not a directory"), "message: %s", err);
  CU_ASSERT_EQUAL(backend_cache_trim(sub, 1, &st, err, sizeof err), -1);
  CU_ASSERT_EQUAL(backend_cache_clear(sub, &st, err, sizeof err), -1);
  remove_dir();
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"AXLC_CACHE_MAX sizes", test_parse_size},
      {"AXLC_CACHE_MAX from the environment", test_limit_env},
      {"trim: least recently used first, to 90%", test_trim_lru},
      {"trim: never an entry used in the last hour", test_trim_recent},
      {"trim: limit 0 removes nothing", test_trim_no_limit},
      {"touch: a hit changes the order", test_touch_order},
      {"clear: entries and stale temporaries only", test_clear},
      {"stats", test_stats},
      {NULL, NULL},
  };
  return test_main(argc, argv, "backend_cache", cases);
}
