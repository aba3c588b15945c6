/*
 * test_ckpt.c: checkpoints: a full round trip, keep-last-N, incomplete and damaged
 * checkpoints (missing index, flipped byte, truncation, bad index) with fallback to the
 * previous one, failed saves that must leave earlier checkpoints intact and nothing of their
 * own, stray directory names, step entries that are symbolic links (never listed, written
 * into, pruned or followed), and the one-writer lock with its up-front checks, which follow
 * no link either.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "rt_test.h"

/* ===== fixtures ======================================================================= */

typedef struct Model {
  float w[6], m[6], v[6], b[3];
  RtTensor t[4];
} Model;

/* Parameters and Adam state whose values encode `step`. */
static void model_make(Model *md, int64_t step) {
  for (int i = 0; i < 6; i++) {
    md->w[i] = (float)(step * 100 + i);
    md->m[i] = (float)(step + i) * 0.5f;
    md->v[i] = (float)(step + i) * 0.25f;
  }
  for (int i = 0; i < 3; i++) md->b[i] = (float)-step;
  RtTensor t[4] = {
      {"model/decoder/w", RT_DT_F32, 2, {2, 3}, md->w, 0},
      {"model/decoder/b", RT_DT_F32, 1, {3}, md->b, 0},
      {"opt/m/model/decoder/w", RT_DT_F32, 2, {2, 3}, md->m, 0},
      {"opt/v/model/decoder/w", RT_DT_F32, 2, {2, 3}, md->v, 0},
  };
  memcpy(md->t, t, sizeof t);
}

/* A fresh checkpoint directory under the scratch directory. */
static const char *ckpt_dir(char *buf, size_t cap, const char *name) {
  rt_test_path(buf, cap, name);
  return buf;
}

static int save(const char *dir, int64_t step, int keep, RtError *err) {
  Model md;
  model_make(&md, step);
  RtCkptState s = {step,
                   step * 1000,
                   0xdeadbeefcafebabeull + (uint64_t)step,
                   "{\"lr\": 0.001}",
                   md.t,
                   4,
                   "fnv1a64:0123456789abcdef",
                   NULL,
                   NULL,
                   NULL,
                   NULL};
  return rt_ckpt_save(dir, &s, keep, err);
}

static const char *step_file(char *buf, size_t cap, const char *dir, int64_t step,
                             const char *file) {
  snprintf(buf, cap, "%s/step_%08lld%s%s", dir, (long long)step, file ? "/" : "", file ? file : "");
  return buf;
}

static void flip_byte(const char *path, long at) {
  size_t n;
  unsigned char *buf = rt_test_read(path, &n);
  buf[at < 0 ? (long)n + at : at] ^= 0x40;
  rt_test_write(path, buf, n);
  free(buf);
}

/* ===== round trip ===================================================================== */

static void test_round_trip(void) {
  RtError err;
  RtCkpt *ck;
  char dir[512], p[600];
  int64_t step = -1;
  ckpt_dir(dir, sizeof dir, "round");
  CHECK_OK(save(dir, 20, 0, &err));
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 20, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 20, "state.safetensors")), 1);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 20, "state.safetensors.tmp")), 0);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 20, "index.json.tmp")), 0);
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 1);
  CHECK_INT(step, 20);
  CHECK_OK(rt_ckpt_open(&ck, dir, 20, &err));
  if (!ck) return;
  CHECK_INT(rt_ckpt_step(ck), 20);
  CHECK_INT(rt_ckpt_data_position(ck), 20000);
  CHECK_INT(rt_ckpt_rng_state(ck) == 0xdeadbeefcafebabeull + 20, 1);
  CHECK_INT(strcmp(rt_ckpt_config(ck), "{\"lr\": 0.001}"), 0);
  CHECK_INT(strcmp(rt_ckpt_fingerprint(ck), "fnv1a64:0123456789abcdef"), 0);
  Model want;
  model_make(&want, 20);
  float x[6];
  CHECK_OK(rt_st_read_f32(rt_ckpt_tensors(ck), "model/decoder/w", (int64_t[]){2, 3}, 2, x, &err));
  CHECK_INT(memcmp(x, want.w, sizeof x), 0);
  CHECK_OK(
      rt_st_read_f32(rt_ckpt_tensors(ck), "opt/v/model/decoder/w", (int64_t[]){2, 3}, 2, x, &err));
  CHECK_INT(memcmp(x, want.v, sizeof x), 0);
  CHECK_FAIL(rt_st_read_f32(rt_ckpt_tensors(ck), "model/decoder/b", (int64_t[]){4}, 1, x, &err),
             "tensor 'model/decoder/b': shape [3], expected [4]");
  rt_ckpt_close(ck);
}

static void test_empty_dir(void) {
  RtError err, warn;
  RtCkpt *ck;
  char dir[512];
  int64_t step;
  CHECK_INT(rt_ckpt_latest(ckpt_dir(dir, sizeof dir, "never-created"), RT_CKPT_ANY, &step, &err),
            0);
  CHECK_INT(rt_ckpt_open_latest(&ck, dir, &warn, &err), 0);
  CHECK_INT(ck == NULL, 1);
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 10, &err),
             "index.json: missing: checkpoint of step 10 is incomplete");
}

/* ===== keep last N ==================================================================== */

static void test_keep_last(void) {
  RtError err;
  char dir[512], p[600];
  int64_t step;
  ckpt_dir(dir, sizeof dir, "keep");
  for (int64_t s = 10; s <= 50; s += 10) CHECK_OK(save(dir, s, 2, &err));
  for (int64_t s = 10; s <= 30; s += 10)
    CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, s, NULL)), 0);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 40, "index.json")), 1);
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 1);
  CHECK_INT(step, 50);
  CHECK_INT(rt_ckpt_latest(dir, 50, &step, &err), 1);
  CHECK_INT(step, 40);
  CHECK_INT(rt_ckpt_latest(dir, 40, &step, &err), 0);
}

/* Leftovers of a crashed save older than a new checkpoint are removed; keep_last 0 keeps all. */
static void test_prunes_leftovers(void) {
  RtError err;
  char dir[512], p[600];
  ckpt_dir(dir, sizeof dir, "leftover");
  CHECK_OK(save(dir, 10, 0, &err));
  CHECK_INT(mkdir(step_file(p, sizeof p, dir, 15, NULL), 0777), 0);
  rt_test_write(step_file(p, sizeof p, dir, 15, "state.safetensors.tmp"), "junk", 4);
  CHECK_OK(save(dir, 20, 0, &err));
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 15, NULL)), 0);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 10, "index.json")), 1);
}

/* ===== damage and fallback ============================================================ */

static void test_missing_index(void) {
  RtError err;
  char dir[512], p[600];
  int64_t step;
  ckpt_dir(dir, sizeof dir, "noindex");
  CHECK_OK(save(dir, 10, 0, &err));
  CHECK_OK(save(dir, 20, 0, &err));
  CHECK_INT(unlink(step_file(p, sizeof p, dir, 20, "index.json")), 0);
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 1);
  CHECK_INT(step, 10);
  RtCkpt *ck;
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "step_00000020/index.json: missing");
  CHECK_OK(save(dir, 20, 0, &err)); /* an incomplete checkpoint is simply redone */
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 1);
  CHECK_INT(step, 20);
}

/* A flipped byte anywhere (data, header, length) is caught by the CRC, and open_latest
 * falls back to the previous checkpoint, reporting why. */
static void test_flipped_byte(void) {
  static const long where[] = {-1, 3, 40};
  for (int k = 0; k < 3; k++) {
    RtError err, warn;
    RtCkpt *ck;
    char dir[512], name[32], p[600];
    snprintf(name, sizeof name, "flip%d", k);
    ckpt_dir(dir, sizeof dir, name);
    CHECK_OK(save(dir, 10, 0, &err));
    CHECK_OK(save(dir, 20, 0, &err));
    flip_byte(step_file(p, sizeof p, dir, 20, "state.safetensors"), where[k]);
    CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "step_00000020/state.safetensors: CRC-32");
    CHECK_INT(strstr(err.msg, "checkpoint damaged") != NULL, 1);
    CHECK_INT(rt_ckpt_open_latest(&ck, dir, &warn, &err), 1);
    if (!ck) continue;
    CHECK_INT(rt_ckpt_step(ck), 10);
    CHECK_INT(strstr(warn.msg, "step_00000020/state.safetensors: CRC-32") != NULL, 1);
    rt_ckpt_close(ck);
  }
}

static void test_truncated_state(void) {
  RtError err;
  RtCkpt *ck;
  char dir[512], p[600];
  size_t n;
  ckpt_dir(dir, sizeof dir, "trunc");
  CHECK_OK(save(dir, 10, 0, &err));
  unsigned char *buf = rt_test_read(step_file(p, sizeof p, dir, 10, "state.safetensors"), &n);
  rt_test_write(p, buf, n - 5);
  free(buf);
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 10, &err), "bytes, index says");
  CHECK_INT(ck == NULL, 1);
}

static void test_bad_index(void) {
  RtError err, warn;
  RtCkpt *ck;
  char dir[512], p[600];
  ckpt_dir(dir, sizeof dir, "badindex");
  CHECK_OK(save(dir, 10, 0, &err));
  CHECK_OK(save(dir, 20, 0, &err));
  rt_test_write(step_file(p, sizeof p, dir, 20, "index.json"), "{\"step\": 20, \"files\": [", 23);
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "index.json: not a valid JSON object");
  rt_test_write(p, "{\"step\": 21, \"files\": []}", 25);
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "expected \"step\": 20");
  const char *evil =
      "{\"step\": 20, \"files\": [{\"name\": \"../x\", \"bytes\": 1, \"crc32\": 0}]}";
  rt_test_write(p, evil, strlen(evil));
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "no plain file name");
  rt_test_write(p, "{\"step\": 20, \"files\": []}", 25);
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "index.json: does not list state.safetensors");
  rt_test_write(p, "", 0);
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "not a valid JSON object");
  rt_test_write(p, "{\"step\": 20, \"files\": []} {}", 28);
  CHECK_FAIL(rt_ckpt_open(&ck, dir, 20, &err), "not a valid JSON object (bytes after the object)");
  CHECK_INT(rt_ckpt_open_latest(&ck, dir, &warn, &err), 1);
  if (ck) CHECK_INT(rt_ckpt_step(ck), 10);
  rt_ckpt_close(ck);
}

/* ===== failed saves =================================================================== */

static void test_failed_save_keeps_old(void) {
  RtError err;
  RtCkpt *ck;
  char dir[512], p[600];
  int64_t step;
  ckpt_dir(dir, sizeof dir, "failed");
  CHECK_OK(save(dir, 10, 1, &err));
  rt_test_write(step_file(p, sizeof p, dir, 20, NULL), "x", 1); /* blocks the step directory */
  CHECK_FAIL(save(dir, 20, 1, &err), "step_00000020");
  Model md;
  model_make(&md, 30);
  md.t[1].name = md.t[0].name; /* a duplicate name: the state file cannot be written */
  RtCkptState s = {30, 0, 0, NULL, md.t, 4, NULL, NULL, NULL, NULL, NULL};
  CHECK_FAIL(rt_ckpt_save(dir, &s, 1, &err), "appears twice");
  CHECK_FAIL(save(dir, 10, 1, &err), "a complete checkpoint of step 10 already exists");
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 1);
  CHECK_INT(step, 10);
  CHECK_OK(rt_ckpt_open(&ck, dir, 10, &err));
  if (ck) CHECK_INT(rt_ckpt_data_position(ck), 10000);
  rt_ckpt_close(ck);
  CHECK_FAIL(rt_ckpt_save(dir, &(RtCkptState){.step = -1}, 1, &err), "step -1");
}

/* A directory whose name is not exactly step_path's ("step_000000030": nine digits) is not a
 * checkpoint, even holding a copy of one: it neither counts toward keep_last (the real step 30
 * would be counted twice) nor is deleted. */
static void test_stray_names(void) {
  RtError err;
  char dir[512], p[700], stray[600];
  int64_t step;
  ckpt_dir(dir, sizeof dir, "stray");
  for (int64_t s = 10; s <= 30; s += 10) CHECK_OK(save(dir, s, 0, &err));
  snprintf(stray, sizeof stray, "%s/step_000000030", dir);
  CHECK_INT(mkdir(stray, 0777), 0);
  size_t n;
  unsigned char *index = rt_test_read(step_file(p, sizeof p, dir, 30, "index.json"), &n);
  snprintf(p, sizeof p, "%s/index.json", stray);
  rt_test_write(p, index, n);
  free(index);
  CHECK_OK(save(dir, 40, 2, &err));
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 30, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 40, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 20, NULL)), 0);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 10, NULL)), 0);
  snprintf(p, sizeof p, "%s/index.json", stray);
  CHECK_INT(rt_test_exists(p), 1);
  CHECK_INT(rt_ckpt_latest(dir, 40, &step, &err), 1);
  CHECK_INT(step, 30);
}

/* A victim directory holding two files, and a link to it named `name` in dir. */
static void link_victim(const char *dir, const char *name, const char *victim) {
  char p[700];
  CHECK_INT(mkdir(victim, 0777), 0);
  snprintf(p, sizeof p, "%s/a.txt", victim);
  rt_test_write(p, "precious", 8);
  snprintf(p, sizeof p, "%s/b.txt", victim);
  rt_test_write(p, "kept", 4);
  snprintf(p, sizeof p, "%s/%s", dir, name);
  CHECK_INT(symlink(victim, p), 0);
}

static int victim_intact(const char *victim) {
  char p[700];
  snprintf(p, sizeof p, "%s/a.txt", victim);
  int a = rt_test_exists(p);
  snprintf(p, sizeof p, "%s/b.txt", victim);
  return a && rt_test_exists(p);
}

/* step_<S> entries that are links to directories, one of them holding a copy of a complete
 * checkpoint: pruning (keep_last 1, and leftovers older than a save) deletes nothing through
 * them, a save of their step does not write into them, and listing skips them. */
static void test_step_links(void) {
  RtError err;
  char dir[512], v1[512], v2[512], v3[512], p[700], q[700], names[256];
  int64_t step;
  ckpt_dir(dir, sizeof dir, "links");
  CHECK_OK(save(dir, 2, 0, &err));
  rt_test_path(v1, sizeof v1, "links-victim1");
  rt_test_path(v2, sizeof v2, "links-victim2");
  rt_test_path(v3, sizeof v3, "links-victim3");
  link_victim(dir, "step_00000001", v1); /* incomplete: a leftover to prune */
  link_victim(dir, "step_00000003", v3); /* the step of the next save */
  /* victim 2: the complete checkpoint of step 2, moved out and linked back */
  snprintf(p, sizeof p, "%s/step_00000002", dir);
  CHECK_INT(rename(p, v2), 0);
  CHECK_INT(symlink(v2, p), 0);
  snprintf(q, sizeof q, "%s/a.txt", v2);
  rt_test_write(q, "precious", 8);
  snprintf(q, sizeof q, "%s/b.txt", v2);
  rt_test_write(q, "kept", 4);
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 0); /* no checkpoint but links */
  CHECK_INT(rt_ckpt_links(dir, names, sizeof names), 3);
  CHECK_INT(strstr(names, "step_00000001") && strstr(names, "step_00000002") &&
                strstr(names, "step_00000003"),
            1);
  CHECK_FAIL(save(dir, 3, 1, &err), "not a directory (a link?)");
  snprintf(q, sizeof q, "%s/state.safetensors", v3);
  CHECK_INT(rt_test_exists(q), 0); /* nothing written through the link */
  for (int64_t s = 4; s <= 6; s++) CHECK_OK(save(dir, s, 1, &err));
  CHECK_INT(victim_intact(v1) && victim_intact(v2) && victim_intact(v3), 1);
  snprintf(q, sizeof q, "%s/index.json", v2);
  CHECK_INT(rt_test_exists(q), 1);
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 1);
  CHECK_INT(step, 6);
  CHECK_INT(rt_ckpt_latest(dir, 6, &step, &err), 0);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 5, NULL)), 0);
}

/* A save that fails part-way (here the file-size limit, as a full disk would) leaves no
 * temporary and no step directory behind, and the earlier checkpoint as it was. */
static void test_failed_save_cleans_up(void) {
  RtError err;
  char dir[512], p[600];
  int64_t step;
  struct rlimit old, small;
  ckpt_dir(dir, sizeof dir, "fsize");
  CHECK_OK(save(dir, 10, 0, &err));
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  getrlimit(RLIMIT_FSIZE, &old);
  small = old;
  small.rlim_cur = 64;
  CHECK_INT(setrlimit(RLIMIT_FSIZE, &small), 0);
  int rc = save(dir, 20, 0, &err);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  CHECK_INT(rc, -1);
  CHECK_INT(strstr(err.msg, "File too large") != NULL, 1);
  CHECK_INT(rt_test_exists(step_file(p, sizeof p, dir, 20, NULL)), 0);
  CHECK_INT(rt_ckpt_latest(dir, RT_CKPT_ANY, &step, &err), 1);
  CHECK_INT(step, 10);
}

/* ===== the directory lock ============================================================= */

static void test_lock(void) {
  RtError err;
  RtCkptLock *a = NULL, *b = NULL;
  char dir[512], file[512], sub[600];
  char want[64];
  ckpt_dir(dir, sizeof dir, "locked/deeper/dir"); /* parents are made too */
  CHECK_OK(rt_ckpt_lock(&a, dir, 1000, 1, 1, &err));
  snprintf(want, sizeof want, "locked by another trainer (pid %ld)", (long)getpid());
  CHECK_FAIL(rt_ckpt_lock(&b, dir, 1000, 1, 1, &err), want);
  CHECK_INT(b == NULL, 1);
  rt_ckpt_unlock(a);
  CHECK_OK(rt_ckpt_lock(&b, dir, 1000, 1, 1, &err));
  rt_ckpt_unlock(b);
  /* Cannot be made, no room, a file-size limit too small for one checkpoint. */
  rt_test_write(rt_test_path(file, sizeof file, "plainfile"), "x", 1);
  snprintf(sub, sizeof sub, "%s/ckpt", file);
  CHECK_FAIL(rt_ckpt_lock(&a, sub, 1000, 1, 1, &err), "cannot create directory");
  CHECK_FAIL(rt_ckpt_lock(&a, dir, INT64_MAX / 2, 1, 1, &err), "MiB free, one checkpoint needs");
  struct rlimit old, small;
  getrlimit(RLIMIT_FSIZE, &old);
  small = old;
  small.rlim_cur = 1 << 20;
  CHECK_INT(setrlimit(RLIMIT_FSIZE, &small), 0);
  int rc = rt_ckpt_lock(&a, dir, 2 << 20, 1, 1, &err);
  setrlimit(RLIMIT_FSIZE, &old);
  CHECK_INT(rc, -1);
  CHECK_INT(strstr(err.msg,
                   "file-size limit (ulimit -f) is 1.0 MiB, one checkpoint file needs 2.0 MiB") !=
                NULL,
            1);
  CHECK_INT(a == NULL, 1);
}

/* --keep 1 on a disk with room for one checkpoint: a save writes the new one before it prunes
 * the old, so the start-up check wants room for both (it passed, and every save after the first
 * failed); a run of one save, or a directory that already holds the one to prune, needs one. */
static void test_lock_coexist(void) {
  RtError err;
  RtCkptLock *a = NULL;
  char dir[512], p[700];
  struct statvfs vfs;
  ckpt_dir(dir, sizeof dir, "coexist");
  CHECK_INT(mkdir(dir, 0777), 0);
  CHECK_INT(statvfs(dir, &vfs), 0);
  int64_t need = (int64_t)((double)vfs.f_bavail * (double)vfs.f_frsize * 0.6); /* fits once */
  CHECK_FAIL(rt_ckpt_lock(&a, dir, need, 1, 10, &err), "2 checkpoints of ");
  CHECK_INT(strstr(err.msg,
                   ": a save writes the new checkpoint before it prunes the oldest (--keep 1, 0 in "
                   "the directory); free space") != NULL,
            1);
  CHECK_INT(a == NULL, 1);
  CHECK_FAIL(rt_ckpt_lock(&a, dir, need, 2, 10, &err), "3 checkpoints of ");
  CHECK_INT(strstr(err.msg, "(--keep 2, 0 in the directory); free space or lower --keep") != NULL,
            1);
  CHECK_FAIL(rt_ckpt_lock(&a, dir, need, 0, 10, &err), "2 checkpoints of "); /* keep all */
  CHECK_OK(rt_ckpt_lock(&a, dir, need, 1, 1, &err));                         /* one save */
  rt_ckpt_unlock(a);
  /* a checkpoint already there: the one save it takes is the one that coexists with it */
  snprintf(p, sizeof p, "%s/step_00000005", dir);
  CHECK_INT(mkdir(p, 0777), 0);
  snprintf(p, sizeof p, "%s/step_00000005/index.json", dir);
  rt_test_write(p, "{}", 2);
  CHECK_OK(rt_ckpt_lock(&a, dir, need, 1, 10, &err));
  rt_ckpt_unlock(a);
  CHECK_FAIL(rt_ckpt_lock(&a, dir, need, 2, 10, &err), "(--keep 2, 1 in the directory)");
}

/* The lock file and the write probe are never opened through a link: the lock's pid would
 * truncate the file it points to, the probe would write into it. */
static void test_lock_links(void) {
  RtError err;
  RtCkptLock *a = NULL;
  char dir[512], victim[512], p[700];
  size_t n;
  ckpt_dir(dir, sizeof dir, "locklinks");
  CHECK_INT(mkdir(dir, 0777), 0);
  rt_test_write(rt_test_path(victim, sizeof victim, "lock-victim.txt"), "precious", 8);
  snprintf(p, sizeof p, "%s/.axlc-probe-%ld", dir, (long)getpid());
  CHECK_INT(symlink(victim, p), 0);
  CHECK_OK(rt_ckpt_lock(&a, dir, 1000, 1, 1, &err)); /* the link is removed, a fresh probe made */
  rt_ckpt_unlock(a);
  a = NULL;
  snprintf(p, sizeof p, "%s/.lock", dir);
  CHECK_INT(unlink(p), 0);
  CHECK_INT(symlink(victim, p), 0);
  CHECK_FAIL(rt_ckpt_lock(&a, dir, 1000, 1, 1, &err), ".lock: cannot create the lock file");
  CHECK_INT(a == NULL, 1);
  unsigned char *text = rt_test_read(victim, &n);
  CHECK_INT(n == 8 && memcmp(text, "precious", 8) == 0, 1);
  free(text);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"round trip", test_round_trip},
      {"empty directory", test_empty_dir},
      {"keep last N", test_keep_last},
      {"prunes leftovers", test_prunes_leftovers},
      {"missing index", test_missing_index},
      {"flipped byte", test_flipped_byte},
      {"truncated state", test_truncated_state},
      {"bad index", test_bad_index},
      {"failed save keeps old", test_failed_save_keeps_old},
      {"stray step names ignored", test_stray_names},
      {"failed save cleans up", test_failed_save_cleans_up},
      {"directory lock and checks", test_lock},
      {"lock: room for the checkpoints that coexist (--keep)", test_lock_coexist},
      {"the lock follows no link", test_lock_links},
      {"step links are not checkpoints", test_step_links},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_ckpt", cases);
}
