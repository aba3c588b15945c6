/*
 * test_file.c: where the caches live (rt_cache_dir): AXLC_CACHE_DIR, else XDG_CACHE_HOME/axlc,
 * else HOME/.cache/axlc, and none at all under AXLC_NO_CACHE, for the compile cache and the
 * OpenCL runtime's device binaries alike; and how a cache entry's trailer catches damage
 * (rt_cache_entry_check): a truncated entry, any single flipped bit, a wrong length or magic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "rt_test.h"

static void test_cache_dir(void) {
  char dir[256];
  unsetenv("AXLC_NO_CACHE");
  setenv("AXLC_CACHE_DIR", "/tmp/axlc-cache", 1);
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  setenv("HOME", "/tmp/home", 1);
  CHECK_INT(rt_cache_dir(dir, sizeof dir), 0);
  CHECK_INT(strcmp(dir, "/tmp/axlc-cache"), 0);
  unsetenv("AXLC_CACHE_DIR");
  CHECK_INT(rt_cache_dir(dir, sizeof dir), 0);
  CHECK_INT(strcmp(dir, "/tmp/xdg/axlc"), 0);
  unsetenv("XDG_CACHE_HOME");
  CHECK_INT(rt_cache_dir(dir, sizeof dir), 0);
  CHECK_INT(strcmp(dir, "/tmp/home/.cache/axlc"), 0);
  CHECK_INT(rt_cache_dir(dir, 8), -1); /* does not fit */
  CHECK_INT(dir[0], 0);
  setenv("AXLC_CACHE_DIR", "/tmp/axlc-cache", 1);
  setenv("AXLC_NO_CACHE", "1", 1);
  CHECK_INT(rt_cache_dir(dir, sizeof dir), -1);
  CHECK_INT(dir[0], 0);
  setenv("AXLC_NO_CACHE", "0", 1); /* "0" and "" leave it on */
  CHECK_INT(rt_cache_dir(dir, sizeof dir), 0);
  setenv("AXLC_NO_CACHE", "", 1);
  CHECK_INT(rt_cache_dir(dir, sizeof dir), 0);
  CHECK_INT(strcmp(dir, "/tmp/axlc-cache"), 0);
}

/* An entry of n payload bytes (n + RT_CACHE_TRAILER_BYTES in e). */
static size_t make_entry(unsigned char *e, size_t n) {
  for (size_t i = 0; i < n; i++) e[i] = (unsigned char)(i * 37 + 11);
  rt_cache_entry_trailer(e, n, e + n);
  return n + RT_CACHE_TRAILER_BYTES;
}

static int entry_ok(const unsigned char *e, size_t size, uint64_t *n) {
  char why[256] = "";
  int rc = rt_cache_entry_check(e, size, n, why, sizeof why);
  CHECK_INT(rc == 0 ? 1 : why[0] != 0, 1); /* a refusal always says why */
  return rc == 0;
}

static void test_cache_entry(void) {
  unsigned char e[100 + RT_CACHE_TRAILER_BYTES];
  uint64_t n = 0;
  for (size_t len = 0; len <= 100; len += 9) { /* every payload length mod 8 */
    size_t size = make_entry(e, len);
    CHECK_INT(entry_ok(e, size, &n), 1);
    CHECK_INT((int)n, (int)len);
    for (size_t cut = 0; cut < size; cut++) /* truncated anywhere */
      CHECK_INT(entry_ok(e, cut, &n), 0);
    for (size_t bit = 0; bit < 8 * size; bit++) { /* any one bit flipped, trailer included */
      e[bit / 8] ^= (unsigned char)(1u << bit % 8);
      CHECK_INT(entry_ok(e, size, &n), 0);
      e[bit / 8] ^= (unsigned char)(1u << bit % 8);
    }
  }
  /* bytes appended after a good entry: its length no longer matches */
  size_t size = make_entry(e, 64);
  CHECK_INT(entry_ok(e, size, &n), 1);
  unsigned char longer[sizeof e + 8] = {0};
  memcpy(longer, e, size);
  CHECK_INT(entry_ok(longer, size + 8, &n), 0);
  /* through a file: good, missing (a plain miss), truncated */
  char path[] = "/tmp/axlc_entry_XXXXXX", why[256];
  int fd = mkstemp(path);
  CHECK_INT(fd >= 0, 1);
  CHECK_INT((int)write(fd, e, size), (int)size);
  close(fd);
  CHECK_INT(rt_cache_entry_verify(path, why, sizeof why), 1);
  CHECK_INT(truncate(path, (off_t)size - 1), 0);
  CHECK_INT(rt_cache_entry_verify(path, why, sizeof why), -1);
  CHECK_INT(truncate(path, 0), 0);
  CHECK_INT(rt_cache_entry_verify(path, why, sizeof why), -1);
  unlink(path);
  CHECK_INT(rt_cache_entry_verify(path, why, sizeof why), 0);
}

int main(void) {
  static const RtTestCase cases[] = {
      {"the cache directory", test_cache_dir},
      {"cache entries", test_cache_entry},
      {NULL, NULL},
  };
  return rt_test_main("runtime_file", cases);
}
