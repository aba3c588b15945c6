/* cache.c: the upkeep of the compile cache directory: its size limit, least recently used
 * out first, and what `axlc cache` shows and clears.
 *
 * Entries are the files named llvm-*.o (objects, backends/llvm/unit.c) and ocl-*.bin (OpenCL
 * device binaries, runtime/opencl.c) directly in the directory. Nothing else there is ever
 * touched, except the temporaries that a crashed compile or trainer left (.NAME.tmp of unit.c,
 * ocl-*.bin.tmp of the runtime's atomic writes), which a trim or a clear removes once they are
 * a day old: a younger one may be a file that another process is writing now. Every entry ends
 * in a trailer with its length and checksum (runtime/file.c, rt_cache_entry_check): a reader
 * that finds a damaged one says so, naming it, and builds it again in its place.
 *
 * An entry's mtime is its last use: a compile that takes an object from the cache sets it to
 * now (backend_cache_touch), as the OpenCL runtime does for a binary it loads, and a new entry
 * is new anyway. The least recently used entries are the first to go.
 *
 * backend_cache_trim runs after a compile that stored objects (unit.c), and for `axlc cache
 * --trim`. When the entries' total size is over the limit (AXLC_CACHE_MAX, default 1 GiB), it
 * removes entries until the total is at most 90% of the limit, so that the next compiles do
 * not trim again at once. It never removes an entry used or written in the last hour: a
 * compile running beside this one may have just found that entry in the cache, or just
 * stored it, and be about to link it. So the directory can stay over its limit for a while;
 * only backend_cache_clear, which a user asks for by name, removes those too. Several
 * processes may trim at once: an entry that another removed first is not an error.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"

#define RECENT_S 3600  /* an entry used this recently is never trimmed */
#define STALE_S  86400 /* a temporary this old is a crashed writer's */

typedef struct CacheFile {
  char *name;
  int64_t size;
  struct timespec used; /* mtime: the last use */
  bool gone;            /* removed (here or by another process) */
} CacheFile;

/* A look at the directory: its entries, their total size, the first error. */
typedef struct CacheScan {
  const char *dir;
  DIR *d; /* open while the entries are removed; NULL: no directory */
  CacheFile *files;
  size_t n, cap;
  int64_t bytes; /* of the files not gone */
  char *err;
  size_t errcap;
  bool failed;
} CacheScan;

/* Records the first error: "DIR/NAME: WHAT: reason", or "DIR: WHAT: reason" without a name. */
static void scan_error(CacheScan *s, const char *name, const char *what, int e) {
  if (s->failed) return;
  s->failed = true;
  if (s->err && s->errcap)
    snprintf(s->err, s->errcap, "%s%s%s: %s: %s", s->dir, name ? "/" : "", name ? name : "", what,
             strerror(e));
}

/* Whether s is pre, at least one character, then suf. */
static bool affixed(const char *s, const char *pre, const char *suf) {
  size_t n = strlen(s), p = strlen(pre), q = strlen(suf);
  return n > p + q && !strncmp(s, pre, p) && !strcmp(s + n - q, suf);
}

static bool is_entry(const char *name) {
  return affixed(name, "llvm-", ".o") || affixed(name, "ocl-", ".bin");
}

static bool is_temporary(const char *name) {
  return affixed(name, ".", ".tmp") || affixed(name, "ocl-", ".bin.tmp");
}

static void add_file(CacheScan *s, const char *name, const struct stat *st) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 256;
    s->files = base_xrealloc(s->files, s->cap * sizeof *s->files);
  }
  CacheFile *f = &s->files[s->n];
  f->name = base_xstrdup(name);
  f->size = (int64_t)st->st_size;
  f->used = st->st_mtim;
  f->gone = false;
  s->n++;
  s->bytes += f->size;
}

/* Reads the directory's entries into s. A directory that does not exist holds none. With
 * sweep, removes the temporaries last written a day ago or before, counted in *temps. */
static int scan(CacheScan *s, bool sweep, int64_t *temps) {
  s->d = opendir(s->dir);
  if (!s->d && errno == ENOENT) return 0;
  if (!s->d) {
    scan_error(s, NULL, "cannot read the compile cache directory", errno);
    return -1;
  }
  time_t stale = time(NULL) - STALE_S;
  errno = 0;
  for (struct dirent *e; (e = readdir(s->d)); errno = 0) {
    bool entry = is_entry(e->d_name), temp = sweep && is_temporary(e->d_name);
    struct stat st;
    if (!entry && !temp) continue;
    if (fstatat(dirfd(s->d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) scan_error(s, e->d_name, "cannot stat", errno);
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    if (entry) add_file(s, e->d_name, &st);
    if (temp && st.st_mtime < stale) {
      if (unlinkat(dirfd(s->d), e->d_name, 0) == 0)
        ++*temps;
      else if (errno != ENOENT)
        scan_error(s, e->d_name, "cannot remove", errno);
    }
  }
  if (errno) scan_error(s, NULL, "cannot read the compile cache directory", errno);
  return s->failed ? -1 : 0;
}

/* Least recently used first; the name breaks ties, so the order is the same every time. */
static int by_use(const void *pa, const void *pb) {
  const CacheFile *a = pa, *b = pb;
  if (a->used.tv_sec != b->used.tv_sec) return a->used.tv_sec < b->used.tv_sec ? -1 : 1;
  if (a->used.tv_nsec != b->used.tv_nsec) return a->used.tv_nsec < b->used.tv_nsec ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* Removes f: 1 removed here, 0 gone already (another axlc trimmed it), -1 failed. */
static int remove_file(CacheScan *s, CacheFile *f) {
  int removed = unlinkat(dirfd(s->d), f->name, 0) == 0;
  if (!removed && errno != ENOENT) {
    scan_error(s, f->name, "cannot remove", errno);
    return -1;
  }
  f->gone = true;
  s->bytes -= f->size;
  return removed;
}

/* The entries left in s, into st; then frees s. 0, or -1 when anything failed. */
static int finish(CacheScan *s, BackendCacheStats *st) {
  st->entries = 0;
  st->bytes = s->bytes;
  for (size_t i = 0; i < s->n; i++) {
    const CacheFile *f = &s->files[i];
    if (f->gone) continue;
    if (!st->entries || f->used.tv_sec < st->oldest) st->oldest = f->used.tv_sec;
    if (!st->entries || f->used.tv_sec > st->newest) st->newest = f->used.tv_sec;
    st->entries++;
  }
  for (size_t i = 0; i < s->n; i++) free(s->files[i].name);
  free(s->files);
  if (s->d) closedir(s->d);
  return s->failed ? -1 : 0;
}

/* Whether f was used since it was listed: a compile that found it in the cache meanwhile
 * (unit.c touches an object before it checks it) keeps it. */
static bool used_since(CacheScan *s, const CacheFile *f) {
  struct stat st;
  return fstatat(dirfd(s->d), f->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         (st.st_mtim.tv_sec != f->used.tv_sec || st.st_mtim.tv_nsec != f->used.tv_nsec);
}

int backend_cache_trim(const char *dir, int64_t max, BackendCacheStats *st, char *err, size_t cap) {
  memset(st, 0, sizeof *st);
  if (max <= 0) return 0; /* no limit: not even a look at the directory */
  CacheScan s = {.dir = dir, .err = err, .errcap = cap};
  int64_t target = max / 10 * 9 + max % 10 * 9 / 10; /* 90% of max, rounded down */
  time_t recent = time(NULL) - RECENT_S;
  if (scan(&s, true, &st->temps) == 0 && s.bytes > max) {
    qsort(s.files, s.n, sizeof *s.files, by_use);
    for (size_t i = 0; i < s.n && s.bytes > target; i++) {
      CacheFile *f = &s.files[i];
      if (f->used.tv_sec >= recent || used_since(&s, f)) {
        st->recent++; /* a compile beside this one may be about to link it */
        continue;
      }
      int64_t size = f->size;
      if (remove_file(&s, f) == 1) st->removed++, st->removed_bytes += size;
    }
  }
  return finish(&s, st);
}

int backend_cache_clear(const char *dir, BackendCacheStats *st, char *err, size_t cap) {
  memset(st, 0, sizeof *st);
  CacheScan s = {.dir = dir, .err = err, .errcap = cap};
  if (scan(&s, true, &st->temps) == 0)
    for (size_t i = 0; i < s.n; i++) {
      int64_t size = s.files[i].size;
      if (remove_file(&s, &s.files[i]) == 1) st->removed++, st->removed_bytes += size;
    }
  return finish(&s, st);
}

int backend_cache_stats(const char *dir, BackendCacheStats *st, char *err, size_t cap) {
  memset(st, 0, sizeof *st);
  CacheScan s = {.dir = dir, .err = err, .errcap = cap};
  scan(&s, false, NULL);
  return finish(&s, st);
}

void backend_cache_touch(const char *path) {
  /* A cache that cannot be written (a shared, read-only one) just does not record the use. */
  (void)utimensat(AT_FDCWD, path, NULL, 0);
}

int backend_cache_parse_size(const char *s, int64_t *out) {
  if (!s || !isdigit((unsigned char)*s)) return -1;
  errno = 0;
  char *end;
  long long n = strtoll(s, &end, 10);
  int shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 0: break;
  case 'K': shift = 10; break;
  case 'M': shift = 20; break;
  case 'G': shift = 30; break;
  default: return -1;
  }
  if (errno || (shift && end[1]) || n > INT64_MAX >> shift) return -1;
  *out = (int64_t)n << shift;
  return 0;
}

int backend_cache_limit(int64_t *max, char *err, size_t cap) {
  const char *v = getenv("AXLC_CACHE_MAX");
  *max = BACKEND_CACHE_MAX_DEFAULT;
  if (!v || !*v || backend_cache_parse_size(v, max) == 0) return 0;
  *max = BACKEND_CACHE_MAX_DEFAULT;
  if (err && cap)
    snprintf(err, cap,
             "AXLC_CACHE_MAX=%s: expected a size in bytes such as 500M or 2G (K, M, G: "
             "KiB, MiB, GiB), or 0 for no limit",
             v);
  return -1;
}
