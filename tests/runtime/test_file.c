/*
 * test_file.c: where the caches live (rt_cache_dir): AXLC_CACHE_DIR, else XDG_CACHE_HOME/axlc,
 * else HOME/.cache/axlc, and none at all under AXLC_NO_CACHE, for the compile cache and the
 * OpenCL runtime's device binaries alike; and how a cache entry's trailer catches damage
 * (rt_cache_entry_check): a truncated entry, any single flipped bit, a wrong length or magic.
 * Outputs against inputs (rt_file_same,
 * rt_file_check_outputs): one file through hard and symbolic links, an output inside a
 * checkpoint. Atomic writes (through rt_st_write) refuse to replace a FIFO, a link to one, a
 * directory or a device node, and never follow a link left at the temporary's name. Every
 * special file here is made in the scratch directory: a regression replaces that, never
 * anything in /dev. rt_file_open, for the files users name: FIFOs, directories and devices
 * refused at once for reads and writes, links refused for writes and their targets unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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

/* ===== outputs against inputs ========================================================= */

static void test_same_file(void) {
  char a[512], b[512], hard[512], sym[512], missing[512], rel[600];
  rt_test_write(rt_test_path(a, sizeof a, "same-a.txt"), "a", 1);
  rt_test_write(rt_test_path(b, sizeof b, "same-b.txt"), "a", 1); /* equal bytes, another file */
  CHECK_INT(link(a, rt_test_path(hard, sizeof hard, "same-hard.txt")), 0);
  CHECK_INT(symlink(a, rt_test_path(sym, sizeof sym, "same-sym.txt")), 0);
  rt_test_path(missing, sizeof missing, "same-missing.txt");
  snprintf(rel, sizeof rel, "%s/./same-a.txt", rt_test_dir());
  CHECK_INT(rt_file_same(a, a), 1);
  CHECK_INT(rt_file_same(a, rel), 1);
  CHECK_INT(rt_file_same(hard, a), 1);
  CHECK_INT(rt_file_same(a, sym), 1);
  CHECK_INT(rt_file_same(a, b), 0);
  CHECK_INT(rt_file_same(missing, missing), 0); /* a new output is no input */
  CHECK_INT(rt_file_same(a, NULL), 0);
}

static void test_check_outputs(void) {
  RtError err;
  char data[512], sym[512], fresh[512], ck[512], step[600], inside[700], top[600];
  rt_test_write(rt_test_path(data, sizeof data, "check-data.txt"), "tokens", 6);
  CHECK_INT(symlink(data, rt_test_path(sym, sizeof sym, "check-sym.txt")), 0);
  rt_test_path(fresh, sizeof fresh, "check-metrics.jsonl");
  rt_test_path(ck, sizeof ck, "check-ck");
  snprintf(step, sizeof step, "%s/step_00000002", ck);
  snprintf(inside, sizeof inside, "%s/state.safetensors", step);
  snprintf(top, sizeof top, "%s/metrics.jsonl", ck);
  CHECK_INT(mkdir(ck, 0777), 0);
  CHECK_INT(mkdir(step, 0777), 0);
  rt_test_write(inside, "st", 2);
  RtPathArg in[] = {{"--data", data, NULL}, {"--init", NULL, NULL}, {"--ckpt-dir", ck, "step_"}};
  RtPathArg out = {"--metrics", fresh, NULL};
  CHECK_OK(rt_file_check_outputs(&out, 1, in, 3, &err));
  out.path = NULL; /* no output given */
  CHECK_OK(rt_file_check_outputs(&out, 1, in, 3, &err));
  out.path = top; /* beside the checkpoints, not in one: allowed */
  CHECK_OK(rt_file_check_outputs(&out, 1, in, 3, &err));
  out.path = data;
  CHECK_FAIL(rt_file_check_outputs(&out, 1, in, 3, &err), "is the same file as --data");
  CHECK_INT(strstr(err.msg, "--metrics ") != NULL, 1);
  out.path = sym;
  CHECK_FAIL(rt_file_check_outputs(&out, 1, in, 3, &err),
             "check-sym.txt is the same file as --data");
  out.path = inside; /* existing, and a new name in the step directory alike */
  CHECK_FAIL(rt_file_check_outputs(&out, 1, in, 3, &err), "step_00000002 of --ckpt-dir");
  snprintf(inside, sizeof inside, "%s/new.jsonl", step);
  CHECK_FAIL(rt_file_check_outputs(&out, 1, in, 3, &err), "lies inside");
  /* within "": every path inside the directory is refused (convert's step directory) */
  RtPathArg dir = {"the weights", step, ""};
  CHECK_FAIL(rt_file_check_outputs(&out, 1, &dir, 1, &err), "lies inside the weights");
  out.path = top;
  CHECK_OK(rt_file_check_outputs(&out, 1, &dir, 1, &err));
}

/* ===== atomic writes never replace what is not a regular file ========================== */

static int write_one(const char *path, RtError *err) {
  static const float x[2] = {1, 2};
  RtTensor t = {"x", RT_DT_F32, 1, {2}, x, 0};
  return rt_st_write(path, &t, 1, NULL, 0, NULL, NULL, err);
}

static int is_kind(const char *path, mode_t kind) {
  struct stat st;
  return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

static void test_write_refuses_special(void) {
  RtError err;
  char fifo[512], link_[512], dir[512], dev[512], fresh[512], tmp[600];
  CHECK_INT(mkfifo(rt_test_path(fifo, sizeof fifo, "w-fifo"), 0600), 0);
  CHECK_INT(symlink(fifo, rt_test_path(link_, sizeof link_, "w-fifo-link")), 0);
  CHECK_INT(mkdir(rt_test_path(dir, sizeof dir, "w-dir"), 0777), 0);
  CHECK_FAIL(write_one(fifo, &err), "is a FIFO, not a regular file");
  CHECK_FAIL(write_one(link_, &err), "w-fifo-link: exists and is a FIFO");
  CHECK_FAIL(write_one(dir, &err), "is a directory");
  CHECK_INT(is_kind(fifo, S_IFIFO), 1);
  CHECK_INT(is_kind(link_, S_IFLNK), 1);
  snprintf(tmp, sizeof tmp, "%s.tmp", fifo);
  CHECK_INT(rt_test_exists(tmp), 0); /* refused before the temporary was made */
  /* /dev/full's numbers, made here (root only): the node in the scratch directory is what a
   * regression would replace */
  if (mknod(rt_test_path(dev, sizeof dev, "w-full"), S_IFCHR | 0600, makedev(1, 7)) == 0) {
    CHECK_FAIL(write_one(dev, &err), "is a device, not a regular file");
    CHECK_INT(is_kind(dev, S_IFCHR), 1);
  }
  /* new files and regular files are written as before */
  CHECK_OK(write_one(rt_test_path(fresh, sizeof fresh, "w-new.safetensors"), &err));
  CHECK_OK(write_one(fresh, &err));
  CHECK_INT(is_kind(fresh, S_IFREG), 1);
}

/* A link left where the temporary goes is removed, not written through. */
static void test_write_tmp_link(void) {
  RtError err;
  char victim[512], out[512], tmp[600];
  size_t n;
  rt_test_write(rt_test_path(victim, sizeof victim, "t-victim.txt"), "precious", 8);
  rt_test_path(out, sizeof out, "t-out.safetensors");
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  CHECK_INT(symlink(victim, tmp), 0);
  CHECK_OK(write_one(out, &err));
  unsigned char *text = rt_test_read(victim, &n);
  CHECK_INT(n == 8 && memcmp(text, "precious", 8) == 0, 1);
  free(text);
  CHECK_INT(rt_test_exists(tmp), 0);
}

/* ===== files a user names: rt_file_open ================================================ */

/* NULL with err holding want (opening never blocks: alarm ends a hang with a failure). */
static void open_fails(const char *path, const char *mode, const char *want) {
  RtError err = {{0}};
  alarm(5);
  FILE *f = rt_file_open(path, mode, &err);
  alarm(0);
  CHECK_MSG(f == NULL && strstr(err.msg, want) != NULL,
            "rt_file_open(%s, \"%s\"): \"%.600s\" should contain \"%s\"", path, mode, err.msg,
            want);
  if (f) fclose(f);
}

static void test_user_open(void) {
  RtError err;
  char fifo[512], link_[512], fifo_link[512], dir[512], dev[512], file[512], msg[1200], none[600];
  size_t n;
  CHECK_INT(mkfifo(rt_test_path(fifo, sizeof fifo, "u-fifo"), 0600), 0);
  CHECK_INT(mkdir(rt_test_path(dir, sizeof dir, "u-dir"), 0777), 0);
  rt_test_write(rt_test_path(file, sizeof file, "u-precious.txt"), "precious", 8);
  CHECK_INT(symlink(file, rt_test_path(link_, sizeof link_, "u-link")), 0);
  CHECK_INT(symlink(fifo, rt_test_path(fifo_link, sizeof fifo_link, "u-fifo-link")), 0);
  static const char *const modes[] = {"r", "rb", "w", "wb", "a"};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    snprintf(msg, sizeof msg, "%s: not a regular file (a FIFO)", fifo);
    open_fails(fifo, modes[i], msg);
    snprintf(msg, sizeof msg, "%s: not a regular file (a directory)", dir);
    open_fails(dir, modes[i], msg);
  }
  /* /dev/null's numbers, made here (root only) */
  if (mknod(rt_test_path(dev, sizeof dev, "u-null"), S_IFCHR | 0600, makedev(1, 3)) == 0) {
    snprintf(msg, sizeof msg, "%s: not a regular file (a device)", dev);
    open_fails(dev, "r", msg);
    open_fails(dev, "w", msg);
  }
  /* reads follow a link, to a regular file only; writes never follow one */
  snprintf(msg, sizeof msg, "%s: not a regular file (a FIFO)", fifo_link);
  open_fails(fifo_link, "r", msg);
  snprintf(msg, sizeof msg, "%s: is a symbolic link; refusing to write through it", link_);
  open_fails(link_, "w", msg);
  open_fails(link_, "a", msg);
  FILE *f = rt_file_open(link_, "r", &err);
  CHECK_INT(f != NULL, 1);
  if (f) fclose(f);
  unsigned char *text = rt_test_read(file, &n);
  CHECK_INT(n == 8 && memcmp(text, "precious", 8) == 0, 1);
  free(text);
  /* regular files: "w" truncates, "a" appends, a missing file is created or named */
  static const char *const writes[][2] = {{"w", "ab"}, {"a", "c"}};
  for (int i = 0; i < 2; i++) {
    CHECK_INT((f = rt_file_open(file, writes[i][0], &err)) != NULL, 1);
    if (f) {
      fputs(writes[i][1], f);
      fclose(f);
    }
  }
  text = rt_test_read(file, &n);
  CHECK_INT(n == 3 && memcmp(text, "abc", 3) == 0, 1);
  free(text);
  snprintf(msg, sizeof msg, "%s/none: cannot open: No such file or directory", dir);
  snprintf(none, sizeof none, "%s/none", dir);
  open_fails(none, "r", msg);
  /* the check alone, for files others open */
  CHECK_OK(rt_file_check_user(none, 1, &err)); /* missing: the opener says so */
  CHECK_OK(rt_file_check_user(link_, 0, &err));
  CHECK_FAIL(rt_file_check_user(link_, 1, &err), "is a symbolic link");
  CHECK_FAIL(rt_file_check_user(dir, 0, &err), "not a regular file (a directory)");
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"the cache directory", test_cache_dir},
      {"cache entries", test_cache_entry},
      {"one file through links", test_same_file},
      {"outputs against inputs", test_check_outputs},
      {"writes refuse special files", test_write_refuses_special},
      {"a link at the temporary", test_write_tmp_link},
      {"files a user names", test_user_open},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_file", cases);
}
