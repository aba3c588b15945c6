/*
 * test_file.c: where the caches live (rt_cache_dir): AXLC_CACHE_DIR, else XDG_CACHE_HOME/axlc,
 * else HOME/.cache/axlc, and none at all under AXLC_NO_CACHE, for the compile cache and the
 * OpenCL runtime's device binaries alike.
 */
#include <stdlib.h>

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

int main(void) {
  static const RtTestCase cases[] = {
      {"the cache directory", test_cache_dir},
      {NULL, NULL},
  };
  return rt_test_main("runtime_file", cases);
}
