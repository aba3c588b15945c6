/*
 * test_train.c: the trainer (rt_train_main) driven by argv arrays, in process, with the
 * hand-written program of fake_program.c: training lowers the loss; checkpoint every N and
 * keep the last N; 20 steps straight equal 10 + --resume + 10 bit for bit (with different
 * thread counts, across a wrap of the data); damaged checkpoints are skipped and set aside;
 * --init; the default seeded init; eval leaves the run unchanged; a non-finite loss stops
 * with the step and the last good checkpoint; bad options and files are refused clearly.
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_program.h"
#include "rt_test.h"

#define MAX_ARGS 40
#define PATH_CAP 600

/* ===== fixtures ======================================================================= */

/* An llm.c token file (version 1) of `count` tokens: mostly next = (5 * prev + 3) % V,
 * every fifth token random, so a bigram model can learn most of it; with period > 0 the
 * first `period` tokens repeat. */
static void write_tokens(const char *path, int count, uint32_t seed, int period) {
  size_t size = 1024 + 2 * (size_t)count;
  unsigned char *buf = calloc(1, size);
  int32_t header[3] = {RT_DATA_MAGIC, 1, count};
  memcpy(buf, header, sizeof header);
  uint32_t tok = 1, lcg = seed;
  for (int i = 0; i < count; i++) {
    lcg = lcg * 1664525u + 1013904223u;
    tok = (lcg >> 24) % 5 == 0 ? (lcg >> 8) % FAKE_V : (5 * tok + 3) % FAKE_V;
    buf[1024 + 2 * i] =
        period > 0 && i >= period ? buf[1024 + 2 * (i % period)] : (unsigned char)tok;
  }
  rt_test_write(path, buf, size);
  free(buf);
}

/* Shared data files, made once. 900 tokens: the data wraps after 14 batches of 64. */
static const char *train_file(void) {
  static char path[PATH_CAP];
  if (!path[0]) {
    rt_test_path(path, sizeof path, "train.bin");
    write_tokens(path, 900, 1, 0);
  }
  return path;
}

static const char *eval_file(void) {
  static char path[PATH_CAP];
  if (!path[0]) {
    rt_test_path(path, sizeof path, "eval.bin");
    write_tokens(path, 400, 2, FAKE_B * FAKE_T); /* every eval batch is the same */
  }
  return path;
}

static const char *scratch(char *buf, const char *name) {
  return rt_test_path(buf, PATH_CAP, name);
}

static const char *step_file(char *buf, const char *dir, int64_t step, const char *file) {
  if (snprintf(buf, PATH_CAP, "%s/step_%08lld%s%s", dir, (long long)step, file ? "/" : "",
               file ? file : "") >= PATH_CAP)
    abort();
  return buf;
}

/* ===== running the trainer ============================================================ */

typedef struct Run {
  int rc;
  char *out, *err; /* what it printed */
} Run;

static void run_free(Run *r) {
  free(r->out);
  free(r->err);
}

static char *slurp(const char *path) {
  size_t n;
  unsigned char *buf = rt_test_read(path, &n);
  buf[n] = '\0';
  return (char *)buf;
}

/* rt_train_main(p, {"trainer", args...}) with stdout and stderr captured. args ends with NULL. */
static Run run_program(const RtProgram *p, const char *const *args) {
  char *argv[MAX_ARGS + 2] = {"trainer"};
  int argc = 1;
  for (; args[argc - 1] && argc <= MAX_ARGS; argc++) argv[argc] = (char *)args[argc - 1];
  char out[PATH_CAP], err[PATH_CAP];
  scratch(out, "stdout.txt");
  scratch(err, "stderr.txt");
  fflush(stdout);
  fflush(stderr);
  int so = dup(1), se = dup(2);
  int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644),
      fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fo, 1);
  dup2(fe, 2);
  Run r = {.rc = rt_train_main(p, argc, argv)};
  fflush(stdout);
  fflush(stderr);
  dup2(so, 1);
  dup2(se, 2);
  close(so), close(se), close(fo), close(fe);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

static Run run(const char *const *args) { return run_program(&axlc_program, args); }

#define CHECK_RUN(r, want)                                                                         \
  CHECK_MSG((r).rc == (want), "exit %d, expected %d; stderr: %.600s", (r).rc, want, (r).err)

/* ===== metrics ======================================================================== */

#define MAX_LINES 128

/* The metrics file split into lines; the deterministic head of each (step, loss, grad_norm,
 * lr: everything before tokens_per_s) is compared between runs. */
typedef struct Metrics {
  int n;
  char *line[MAX_LINES];
  char *text;
} Metrics;

static Metrics metrics_read(const char *path) {
  Metrics m = {.text = slurp(path)};
  for (char *s = m.text, *nl; *s && m.n < MAX_LINES; s = nl + 1) {
    nl = strchr(s, '\n');
    if (!nl) break;
    *nl = '\0';
    m.line[m.n++] = s;
  }
  return m;
}

static double metric(const Metrics *m, int i, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\": ", key);
  const char *at = i < m->n ? strstr(m->line[i], k) : NULL;
  return at && strncmp(at + strlen(k), "null", 4) != 0 ? strtod(at + strlen(k), NULL) : NAN;
}

static size_t head_len(const char *line) {
  const char *t = strstr(line, ", \"tokens_per_s\"");
  return t ? (size_t)(t - line) : strlen(line);
}

static int same_heads(const Metrics *a, int ia, const Metrics *b, int ib, int count) {
  for (int i = 0; i < count; i++) {
    if (ia + i >= a->n || ib + i >= b->n) return 0;
    const char *x = a->line[ia + i], *y = b->line[ib + i];
    if (head_len(x) != head_len(y) || strncmp(x, y, head_len(x)) != 0) {
      fprintf(stderr, "\n  differ: %s\n          %s\n", x, y);
      return 0;
    }
  }
  return 1;
}

static int same_file(const char *a, const char *b) {
  size_t na, nb;
  unsigned char *x = rt_test_read(a, &na), *y = rt_test_read(b, &nb);
  int same = na == nb && memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

/* ===== training ======================================================================= */

static void test_lowers_loss(void) {
  char mp[PATH_CAP];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "60", "--threads", "3",
                               "--metrics", scratch(mp, "lower.jsonl"), NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.out, "step 60 loss");
  Metrics m = metrics_read(mp);
  CHECK_INT(m.n, 60);
  double first = metric(&m, 0, "loss"), last = metric(&m, 59, "loss");
  CHECK_NEAR(first, log(FAKE_V), 0.05);
  CHECK_INT(last < 0.6 * first, 1);
  CHECK_INT(metric(&m, 59, "step"), 60);
  CHECK_INT(metric(&m, 0, "tokens_per_s") > 0 && metric(&m, 0, "step_ms") >= 0, 1);
  CHECK_INT(metric(&m, 0, "grad_norm") > 0 && metric(&m, 0, "lr") > 0, 1);
  printf("\n    loss %.4f -> %.4f over 60 steps ", first, last);
  free(m.text);
  run_free(&r);
}

static void test_default_steps(void) {
  char mp[PATH_CAP];
  Run r = run(
      (const char *[]){"--data", train_file(), "--metrics", scratch(mp, "default.jsonl"), NULL});
  CHECK_RUN(r, 0);
  Metrics m = metrics_read(mp);
  CHECK_INT(m.n, axlc_program.facts.max_steps);
  free(m.text);
  run_free(&r);
}

/* ===== checkpoints ==================================================================== */

static void test_ckpt_every_keep(void) {
  char dir[PATH_CAP], all[PATH_CAP], p[PATH_CAP];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "12", "--ckpt-every", "5",
                               "--keep", "2", "--ckpt-dir", scratch(dir, "keep2"), NULL});
  CHECK_RUN(r, 0);
  CHECK_INT(rt_test_exists(step_file(p, dir, 5, NULL)), 0);
  CHECK_INT(rt_test_exists(step_file(p, dir, 10, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, dir, 12, "index.json")), 1);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "12", "--ckpt-every=5", "--keep=0",
                           "--ckpt-dir", scratch(all, "keepall"), NULL});
  CHECK_RUN(r, 0);
  for (int s = 5; s <= 12; s++)
    CHECK_INT(rt_test_exists(step_file(p, all, s, "index.json")), s == 5 || s == 10 || s == 12);
  run_free(&r);
}

/* The checkpoint holds every parameter and both moments, the step, the data position and
 * the config. */
static void test_ckpt_contents(void) {
  char dir[PATH_CAP];
  RtError err;
  RtCkpt *ck = NULL;
  Run r = run((const char *[]){"--data", train_file(), "--steps", "3", "--ckpt-dir",
                               scratch(dir, "contents"), NULL});
  CHECK_RUN(r, 0);
  CHECK_OK(rt_ckpt_open(&ck, dir, 3, &err));
  if (ck) {
    const RtSt *st = rt_ckpt_tensors(ck);
    CHECK_INT(rt_st_count(st), 6);
    CHECK_INT(rt_st_find(st, "model/bigram/weight") != NULL, 1);
    CHECK_INT(rt_st_find(st, "opt/m/model/bigram/weight") != NULL, 1);
    CHECK_INT(rt_st_find(st, "opt/v/model/bigram/bias") != NULL, 1);
    CHECK_INT(rt_ckpt_data_position(ck), 3 * FAKE_B * FAKE_T);
    CHECK_INT(rt_ckpt_rng_state(ck), axlc_program.facts.seed);
    CHECK_INT(strcmp(rt_ckpt_config(ck), axlc_program.config), 0);
    rt_ckpt_close(ck);
  }
  run_free(&r);
}

/* 20 steps straight (4 threads) vs 10 (2 threads), then --resume to 20 (1 thread): the same
 * metrics and the same checkpoint bytes. The data wraps at step 15. */
static void test_resume_bit_exact(void) {
  char a[PATH_CAP], b[PATH_CAP], ma[PATH_CAP], mb[PATH_CAP], pa[PATH_CAP], pb[PATH_CAP];
  scratch(a, "straight");
  scratch(b, "resumed");
  scratch(ma, "straight.jsonl");
  scratch(mb, "resumed.jsonl");
  Run r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-every", "10",
                               "--threads", "4", "--ckpt-dir", a, "--metrics", ma, NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "10", "--threads", "2", "--ckpt-dir",
                           b, "--metrics", mb, NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "20", "--threads", "1", "--ckpt-dir",
                           b, "--metrics", mb, "--resume", NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.out, "resumed from");
  CHECK_HAS(r.out, "step_00000010");
  run_free(&r);
  CHECK_INT(same_file(step_file(pa, a, 10, "state.safetensors"),
                      step_file(pb, b, 10, "state.safetensors")),
            1);
  CHECK_INT(same_file(step_file(pa, a, 20, "state.safetensors"),
                      step_file(pb, b, 20, "state.safetensors")),
            1);
  Metrics x = metrics_read(ma), y = metrics_read(mb);
  CHECK_INT(x.n, 20);
  CHECK_INT(y.n, 20);
  CHECK_INT(same_heads(&x, 0, &y, 0, 20), 1);
  free(x.text);
  free(y.text);
}

static void flip_byte(const char *path, long at) {
  size_t n;
  unsigned char *buf = rt_test_read(path, &n);
  buf[at < 0 ? (long)n + at : at] ^= 0x40;
  rt_test_write(path, buf, n);
  free(buf);
}

/* The newest checkpoint is damaged: resume uses the previous one, sets the damaged one aside
 * and, being deterministic, writes the same bytes the damaged one had. */
static void test_resume_damaged(void) {
  char dir[PATH_CAP], p[PATH_CAP], aside[PATH_CAP];
  scratch(dir, "damaged");
  Run r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-every", "5",
                               "--keep", "0", "--ckpt-dir", dir, NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  size_t n;
  unsigned char *good = rt_test_read(step_file(p, dir, 20, "state.safetensors"), &n);
  flip_byte(p, -3);
  r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-dir", dir, "--resume",
                           NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.err, "damaged");
  CHECK_HAS(r.err, "step_00000020");
  CHECK_HAS(r.out, "resumed from");
  CHECK_HAS(r.out, "step_00000015");
  if (snprintf(aside, sizeof aside, "%s/step_00000020.damaged/state.safetensors", dir) >= PATH_CAP)
    abort();
  CHECK_INT(rt_test_exists(aside), 1);
  size_t m;
  unsigned char *again = rt_test_read(step_file(p, dir, 20, "state.safetensors"), &m);
  CHECK_INT(m == n && memcmp(good, again, n) == 0, 1);
  free(good);
  free(again);
  run_free(&r);
}

/* Rewrites the state file of a checkpoint through edit() and its index to match, so the CRC-32
 * verifies: what a tool that edits checkpoints, or a bit flip before the CRC-32 was taken,
 * leaves behind. */
typedef void (*CkptEdit)(float *weight, int64_t n, const char **meta_value);
/* The tensor an edit gets: the bigram's weight, or (edit_negative_moment) its second moment. */
static const char *edit_tensor(CkptEdit edit);

static const char *const META_KEYS[] = {"axlc.step", "axlc.data_position", "axlc.rng_state",
                                        "axlc.config", "axlc.fingerprint"};
enum { N_META = 5, META_POSITION = 1 };

static void ckpt_rewrite(const char *dir, int64_t step, CkptEdit edit) {
  char path[PATH_CAP], text[1024];
  RtError err;
  RtSt *st = NULL;
  CHECK_OK(rt_st_open(&st, step_file(path, dir, step, "state.safetensors"), &err));
  if (!st) return;
  int n = rt_st_count(st);
  RtTensor *ts = calloc((size_t)n, sizeof *ts);
  float *weight = NULL;
  int64_t nweight = 0;
  for (int i = 0; i < n; i++) {
    ts[i] = *rt_st_tensor(st, i);
    void *copy = malloc((size_t)ts[i].nbytes + 1);
    memcpy(copy, ts[i].data, (size_t)ts[i].nbytes);
    ts[i].data = copy;
    if (!strcmp(ts[i].name, edit_tensor(edit))) weight = copy, nweight = ts[i].nbytes / 4;
  }
  RtMeta meta[N_META];
  const char *values[N_META];
  for (int k = 0; k < N_META; k++) values[k] = rt_st_meta(st, META_KEYS[k]);
  edit(weight, nweight, values);
  for (int k = 0; k < N_META; k++) meta[k] = (RtMeta){META_KEYS[k], values[k]};
  uint32_t crc;
  int64_t size;
  char tmp[PATH_CAP];
  CHECK_OK(
      rt_st_write(scratch(tmp, "rewrite.safetensors"), ts, n, meta, N_META, &crc, &size, &err));
  for (int i = 0; i < n; i++) free((void *)ts[i].data);
  free(ts);
  rt_st_close(st);
  CHECK_INT(rename(tmp, path), 0);
  int len = snprintf(text, sizeof text,
                     "{\"format\": \"axlc-checkpoint\", \"version\": 1, \"step\": %lld,\n"
                     " \"files\": [{\"name\": \"state.safetensors\", \"bytes\": %lld, "
                     "\"crc32\": %lu}]}\n",
                     (long long)step, (long long)size, (unsigned long)crc);
  rt_test_write(step_file(path, dir, step, "index.json"), text, (size_t)len);
}

static void edit_nan(float *weight, int64_t n, const char **meta) {
  (void)meta;
  if (n > 5) weight[5] = NAN;
}

static void edit_negative_position(float *weight, int64_t n, const char **meta) {
  (void)weight, (void)n;
  meta[META_POSITION] = "-5";
}

static void edit_negative_moment(float *v, int64_t n, const char **meta) {
  (void)meta;
  if (n > 7) v[7] = -0.25f;
}

static const char *edit_tensor(CkptEdit edit) {
  return edit == edit_negative_moment ? "opt/v/model/bigram/weight" : "model/bigram/weight";
}

/* A checkpoint whose CRC-32 verifies but which holds a NaN, a negative second moment or a
 * negative data position, is damaged: resume falls back to the one before and sets it aside,
 * and it is never named the last good checkpoint. With nothing before it, resume refuses to start
 * over. */
static void test_resume_bad_values(void) {
  static const struct {
    CkptEdit edit;
    const char *why;
  } cases[] = {
      {edit_nan, "state.safetensors: tensor 'model/bigram/weight': value 5 of 1024 is NaN: "
                 "checkpoint damaged"},
      {edit_negative_position, "state.safetensors: invalid metadata: 'axlc.data_position' is -5, "
                               "a token position is >= 0: checkpoint damaged"},
      {edit_negative_moment, "state.safetensors: tensor 'opt/v/model/bigram/weight': value 7 of "
                             "1024 is -0.25, below 0 (a second moment): checkpoint damaged"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char dir[PATH_CAP], p[PATH_CAP + 64], name[64];
    snprintf(name, sizeof name, "badvalues%zu", c);
    Run r = run((const char *[]){"--data", train_file(), "--steps", "10", "--ckpt-every", "5",
                                 "--keep", "0", "--ckpt-dir", scratch(dir, name), NULL});
    CHECK_RUN(r, 0);
    run_free(&r);
    ckpt_rewrite(dir, 10, cases[c].edit);
    fake_nan_at = 12; /* the run then fails: the checkpoint it names must be a good one */
    r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-dir", dir, "--resume",
                             NULL});
    fake_nan_at = 0;
    CHECK_RUN(r, RT_EXIT_NONFINITE);
    CHECK_HAS(r.err, "skipping a damaged checkpoint: ");
    CHECK_HAS(r.err, "step_00000010/");
    CHECK_HAS(r.err, cases[c].why);
    CHECK_HAS(r.out, "resumed from");
    CHECK_HAS(r.out, "step_00000005");
    CHECK_HAS(r.err, "step 12:");
    CHECK_HAS(r.err, "the last good checkpoint is ");
    CHECK_HAS(r.err, "step_00000005 (step 5)");
    snprintf(p, sizeof p, "%s/step_00000010.damaged/index.json", dir);
    CHECK_INT(rt_test_exists(p), 1);
    run_free(&r);
    /* The same damage with nothing before it. */
    snprintf(name, sizeof name, "badvalues-only%zu", c);
    r = run((const char *[]){"--data", train_file(), "--steps", "5", "--ckpt-dir",
                             scratch(dir, name), NULL});
    CHECK_RUN(r, 0);
    run_free(&r);
    ckpt_rewrite(dir, 5, cases[c].edit);
    r = run((const char *[]){"--data", train_file(), "--steps", "8", "--ckpt-dir", dir, "--resume",
                             NULL});
    CHECK_RUN(r, 1);
    CHECK_HAS(r.err, cases[c].why);
    CHECK_HAS(r.err, "refusing to start over");
    run_free(&r);
  }
}

static void test_resume_all_damaged(void) {
  char dir[PATH_CAP], p[PATH_CAP];
  scratch(dir, "alldamaged");
  Run r = run((const char *[]){"--data", train_file(), "--steps", "4", "--ckpt-dir", dir, NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  flip_byte(step_file(p, dir, 4, "state.safetensors"), 100);
  r = run((const char *[]){"--data", train_file(), "--steps", "8", "--ckpt-dir", dir, "--resume",
                           NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "refusing to start over");
  CHECK_INT(rt_test_exists(step_file(p, dir, 4, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, dir, 8, NULL)), 0);
  run_free(&r);
}

static void test_resume_empty_and_done(void) {
  char dir[PATH_CAP], p[PATH_CAP];
  scratch(dir, "fresh");
  Run r = run((const char *[]){"--data", train_file(), "--steps", "3", "--ckpt-dir", dir,
                               "--resume", NULL});
  CHECK_RUN(r, 0); /* nothing to resume: starts from scratch */
  CHECK_INT(rt_test_exists(step_file(p, dir, 3, "index.json")), 1);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "3", "--ckpt-dir", dir, "--resume",
                           NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.out, "nothing to do");
  run_free(&r);
  /* Without --resume, a directory with checkpoints is refused and left as it was. */
  r = run((const char *[]){"--data", train_file(), "--steps", "3", "--ckpt-dir", dir, NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "--resume");
  CHECK_INT(rt_test_exists(step_file(p, dir, 3, "index.json")), 1);
  run_free(&r);
}

/* ===== initialization ================================================================= */

static float *read_tensor(const char *dir, int64_t step, const char *name, int64_t numel) {
  char p[PATH_CAP];
  RtError err;
  RtSt *st = NULL;
  float *x = calloc((size_t)numel, sizeof *x);
  const RtTensor *t;
  CHECK_OK(rt_st_open(&st, step_file(p, dir, step, "state.safetensors"), &err));
  if (st && (t = rt_st_find(st, name)) != NULL && t->nbytes == numel * 4)
    memcpy(x, t->data, (size_t)numel * 4);
  rt_st_close(st);
  return x;
}

static void test_seeded_init(void) {
  char dir[PATH_CAP];
  RtError err;
  Run r = run((const char *[]){"--data", train_file(), "--steps", "0", "--seed", "77", "--ckpt-dir",
                               scratch(dir, "seed77"), NULL});
  CHECK_RUN(r, 0);
  float want[FAKE_V * FAKE_V];
  const RtParamSlot *w = &axlc_program.params[0];
  CHECK_OK(rt_init_fill(want, FAKE_V * FAKE_V, 0, w->path, 77, &w->init, &err));
  float *got = read_tensor(dir, 0, w->path, FAKE_V * FAKE_V),
        *m = read_tensor(dir, 0, "opt/m/model/bigram/weight", FAKE_V * FAKE_V);
  CHECK_INT(memcmp(got, want, sizeof want), 0);
  CHECK_INT(m[0] == 0 && m[FAKE_V * FAKE_V - 1] == 0, 1);
  free(got);
  free(m);
  run_free(&r);
}

static void test_init_file(void) {
  char dir[PATH_CAP], file[PATH_CAP], bad[PATH_CAP];
  RtError err;
  float w[FAKE_V * FAKE_V], b[FAKE_V];
  for (int i = 0; i < FAKE_V * FAKE_V; i++) w[i] = (float)i * 0.001f - 0.5f;
  for (int i = 0; i < FAKE_V; i++) b[i] = (float)i * 0.01f;
  RtTensor ts[2] = {
      {"model/bigram/weight", RT_DT_F32, 2, {FAKE_V, FAKE_V}, w, 0},
      {"model/bigram/bias", RT_DT_F32, 1, {FAKE_V}, b, 0},
  };
  CHECK_OK(rt_st_write(scratch(file, "init.safetensors"), ts, 2, NULL, 0, NULL, NULL, &err));
  Run r = run((const char *[]){"--data", train_file(), "--steps", "0", "--init", file, "--ckpt-dir",
                               scratch(dir, "fromfile"), NULL});
  CHECK_RUN(r, 0);
  float *gw = read_tensor(dir, 0, "model/bigram/weight", FAKE_V * FAKE_V),
        *gb = read_tensor(dir, 0, "model/bigram/bias", FAKE_V);
  CHECK_INT(memcmp(gw, w, sizeof w), 0);
  CHECK_INT(memcmp(gb, b, sizeof b), 0);
  free(gw);
  free(gb);
  run_free(&r);
  /* A tensor of the wrong shape is named. */
  ts[1].shape[0] = FAKE_V + 1;
  float b2[FAKE_V + 1] = {0};
  ts[1].data = b2;
  CHECK_OK(rt_st_write(scratch(bad, "bad-init.safetensors"), ts, 2, NULL, 0, NULL, NULL, &err));
  r = run((const char *[]){"--data", train_file(), "--steps", "1", "--init", bad, NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "--init");
  CHECK_HAS(r.err, "model/bigram/bias");
  CHECK_HAS(r.err, "shape [33]");
  run_free(&r);
  /* A NaN or an infinity is refused before step 1, naming the tensor and the file. */
  ts[1].shape[0] = FAKE_V;
  ts[1].data = b;
  w[5] = NAN;
  CHECK_OK(rt_st_write(bad, ts, 2, NULL, 0, NULL, NULL, &err));
  r = run((const char *[]){"--data", train_file(), "--steps", "1", "--init", bad, NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "--init: ");
  CHECK_HAS(r.err, "bad-init.safetensors: tensor 'model/bigram/weight': value 5 of 1024 is NaN; "
                   "refusing to start from weights that are not finite");
  CHECK_INT(strstr(r.out, "step 1") == NULL, 1);
  run_free(&r);
  w[5] = 0;
  b[3] = -INFINITY;
  CHECK_OK(rt_st_write(bad, ts, 2, NULL, 0, NULL, NULL, &err));
  r = run((const char *[]){"--data", train_file(), "--steps", "1", "--init", bad, NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "tensor 'model/bigram/bias': value 3 of 32 is -inf");
  run_free(&r);
  /* One rank's file of a sharded checkpoint is said to be one, not listed shape by shape. */
  b[3] = 0;
  RtMeta shard[] = {{"axlc.regions", "{}"}};
  CHECK_OK(rt_st_write(bad, ts, 2, shard, 1, NULL, NULL, &err));
  r = run((const char *[]){"--data", train_file(), "--steps", "1", "--init", bad, NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "bad-init.safetensors: one rank's file of a sharded checkpoint");
  run_free(&r);
}

/* ===== eval =========================================================================== */

static void test_eval_leaves_run(void) {
  char m1[PATH_CAP], m2[PATH_CAP];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "10", "--metrics",
                               scratch(m1, "noeval.jsonl"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "10", "--eval-data", eval_file(),
                           "--eval-every", "5", "--eval-batches", "3", "--metrics",
                           scratch(m2, "eval.jsonl"), NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.out, "eval step 5 loss");
  Metrics a = metrics_read(m1), b = metrics_read(m2);
  CHECK_INT(same_heads(&a, 0, &b, 0, 10), 1);
  CHECK_INT(isnan(metric(&b, 3, "eval_loss")), 1);
  double e5 = metric(&b, 4, "eval_loss"), e10 = metric(&b, 9, "eval_loss");
  CHECK_INT(isfinite(e5) && isfinite(e10) && e10 < e5, 1);
  run_free(&r);
  /* Every eval batch holds the same tokens, so each must see the same parameters. */
  r = run((const char *[]){"--data", train_file(), "--steps", "5", "--eval-data", eval_file(),
                           "--eval-batches", "1", "--metrics", scratch(m1, "eval1.jsonl"), NULL});
  CHECK_RUN(r, 0);
  Metrics c = metrics_read(m1);
  CHECK_INT(metric(&c, 4, "eval_loss") == e5, 1);
  free(a.text);
  free(b.text);
  free(c.text);
  run_free(&r);
}

/* ===== failures ======================================================================= */

static void test_nonfinite(void) {
  char dir[PATH_CAP], mp[PATH_CAP], p[PATH_CAP];
  fake_nan_at = 7;
  Run r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-every", "5",
                               "--ckpt-dir", scratch(dir, "nan"), "--metrics",
                               scratch(mp, "nan.jsonl"), NULL});
  CHECK_RUN(r, RT_EXIT_NONFINITE);
  CHECK_HAS(r.err, "step 7:");
  CHECK_HAS(r.err, "not finite");
  CHECK_HAS(r.err, "step_00000005");
  CHECK_INT(rt_test_exists(step_file(p, dir, 5, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, dir, 7, NULL)), 0);
  CHECK_INT(rt_test_exists(step_file(p, dir, 10, NULL)), 0);
  Metrics m = metrics_read(mp);
  CHECK_INT(m.n, 7);
  CHECK_HAS(m.line[6], "\"loss\": null");
  free(m.text);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "20", NULL});
  CHECK_RUN(r, RT_EXIT_NONFINITE);
  CHECK_HAS(r.err, "step 7:");
  CHECK_HAS(r.err, "no checkpoint");
  run_free(&r);
  fake_nan_at = 0;
}

/* --sdc-check-every: the replays agree over many steps; a bit flipped in one replay (the test
 * hook) is caught, named with the rank and the tensor, and ends the run with its own status,
 * the checkpoint before it kept; a flip in a step that is not replayed goes unseen. */
static void test_sdc(void) {
  char dir[PATH_CAP], p[PATH_CAP];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "60", "--sdc-check-every", "1",
                               "--threads", "2", NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  setenv("AXLC_TEST_SDC_FLIP", "9", 1);
  r = run((const char *[]){"--data", train_file(), "--steps", "20", "--sdc-check-every", "3",
                           "--ckpt-every", "5", "--ckpt-dir", scratch(dir, "sdc"), NULL});
  CHECK_RUN(r, RT_EXIT_SDC);
  CHECK_HAS(r.err, "rank 0: step 9: silent data corruption: tensor model/bigram/bias, value 0 of ");
  CHECK_HAS(r.err, "in the step, ");
  CHECK_HAS(r.err, "in its replay from the same state");
  CHECK_INT(rt_test_exists(step_file(p, dir, 5, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, dir, 10, NULL)), 0);
  run_free(&r);
  setenv("AXLC_TEST_SDC_FLIP", "10", 1);
  r = run(
      (const char *[]){"--data", train_file(), "--steps", "20", "--sdc-check-every", "3", NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  setenv("AXLC_TEST_SDC_FLIP", "9@", 1);
  r = run(
      (const char *[]){"--data", train_file(), "--steps", "20", "--sdc-check-every", "3", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "AXLC_TEST_SDC_FLIP=9@: expected STEP or STEP@RANK");
  run_free(&r);
  unsetenv("AXLC_TEST_SDC_FLIP");
}

/* The tensors of checkpoint `step` of dir (every one, as bytes) are those of `other`. */
static int same_state(const char *dir, int64_t step, int64_t other) {
  RtCkpt *a, *b;
  RtError err;
  if (rt_ckpt_open(&a, dir, step, &err) != 0) return -1;
  if (rt_ckpt_open(&b, dir, other, &err) != 0) return rt_ckpt_close(a), -1;
  int same = rt_ckpt_count(a) == rt_ckpt_count(b);
  for (int i = 0; same && i < rt_st_count(rt_ckpt_tensors(a)); i++) {
    const RtTensor *x = rt_st_tensor(rt_ckpt_tensors(a), i);
    const RtTensor *y = rt_st_find(rt_ckpt_tensors(b), x->name);
    same = y && x->nbytes == y->nbytes && memcmp(x->data, y->data, (size_t)x->nbytes) == 0;
  }
  rt_ckpt_close(a);
  rt_ckpt_close(b);
  return same;
}

/* --skip-outliers: a loss spike past the window's z-score leaves the state as it was (a
 * checkpoint after it holds the bytes of the one before it), says so, and marks its metrics
 * line; a resumed run skips the same step (the window travels in the checkpoint), bit for bit
 * with the uninterrupted one, which a fresh window would not; without the option the spike is
 * applied. --skip-batches moves the data position as that many steps would. */
static void test_outliers(void) {
  char dir[PATH_CAP], d2[PATH_CAP], d3[PATH_CAP], p[PATH_CAP], q[PATH_CAP], mp[PATH_CAP];
  fake_spike_at = 15;
  const char *skip[] = {"--skip-outliers", "4", "--outlier-window", "8", NULL};
  Run r =
      run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-every", "1", "--keep",
                           "0", "--ckpt-dir", scratch(dir, "outl"), "--metrics",
                           scratch(mp, "outl.jsonl"), skip[0], skip[1], skip[2], skip[3], NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.err, "step 15: loss ");
  CHECK_HAS(r.err, "against the last 8 steps: an outlier above 4; update skipped");
  CHECK_INT(same_state(dir, 15, 14), 1);
  CHECK_INT(same_state(dir, 16, 15), 0);
  Metrics m = metrics_read(mp);
  CHECK_INT(m.n, 20);
  CHECK_HAS(m.line[14], "\"skipped\": true");
  CHECK_INT(strstr(m.line[13], "skipped") == NULL, 1);
  /* the skipped step's time is lost work, not productive: productive_s stands still at step
   * 15 while lost_s grows by its step time (both at the metrics' microsecond precision) */
  CHECK_INT(metric(&m, 14, "step_ms") > 0.004, 1);
  CHECK_NEAR(metric(&m, 14, "lost_s") - metric(&m, 13, "lost_s"), metric(&m, 14, "step_ms") / 1e3,
             1.5e-6);
  CHECK_NEAR(metric(&m, 14, "productive_s"), metric(&m, 13, "productive_s"), 1.5e-6);
  free(m.text);
  run_free(&r);
  /* 12 steps, then --resume to 20: the same step 20 */
  r = run((const char *[]){"--data", train_file(), "--steps", "12", "--ckpt-dir",
                           scratch(d2, "outl2"), skip[0], skip[1], skip[2], skip[3], NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-dir", d2, "--resume",
                           skip[0], skip[1], skip[2], skip[3], NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.err, "step 15: loss ");
  run_free(&r);
  CHECK_INT(same_file(step_file(p, dir, 20, "state.safetensors"),
                      step_file(q, d2, 20, "state.safetensors")),
            1);
  /* without the option the spike's update is applied */
  r = run((const char *[]){"--data", train_file(), "--steps", "15", "--ckpt-every", "1", "--keep",
                           "0", "--ckpt-dir", scratch(d3, "outl3"), NULL});
  CHECK_RUN(r, 0);
  CHECK_INT(strstr(r.err, "outlier") == NULL, 1);
  CHECK_INT(same_state(d3, 15, 14), 0);
  run_free(&r);
  fake_spike_at = 0;
  /* --skip-batches 3 then 2 steps: the data position of 5 steps */
  r = run((const char *[]){"--data", train_file(), "--steps", "2", "--skip-batches", "3",
                           "--ckpt-dir", scratch(d2, "skipb"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  RtCkpt *a, *b;
  RtError err;
  CHECK_OK(rt_ckpt_open(&a, d2, 2, &err));
  CHECK_OK(rt_ckpt_open(&b, dir, 5, &err));
  CHECK_INT(rt_ckpt_data_position(a), rt_ckpt_data_position(b));
  rt_ckpt_close(a);
  rt_ckpt_close(b);
  /* past the data's 14 batches: refused at once with the count (it skipped batch by batch for
   * ever, or wrapped silently) */
  r = run((const char *[]){"--data", train_file(), "--steps", "2", "--skip-batches",
                           "4000000000000000000", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "--skip-batches 4000000000000000000: 4000000000000000000 batches is more than ");
  CHECK_HAS(r.err, " holds: 14 global batches of 1 x 4 x 16 (ranks x batch x sequence) in its 900 "
                   "tokens; expected 0..14");
  run_free(&r);
}

/* ===== not losing the run ============================================================= */

static int64_t hook_step;
static int hook_signal;
static void hook_raise(int64_t step, float *weight) {
  (void)weight;
  if (step == hook_step) raise(hook_signal);
}

/* SIGINT ends the run after the current step with a checkpoint and status 130; resuming from
 * it gives the bits of an uninterrupted run. SIGTERM without --ckpt-dir: status 143, and the
 * message says nothing was saved. */
static void test_signal_saves(void) {
  char a[PATH_CAP], b[PATH_CAP], ma[PATH_CAP], mb[PATH_CAP], pa[PATH_CAP], pb[PATH_CAP];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-dir",
                               scratch(a, "sig-straight"), "--metrics",
                               scratch(ma, "sig-straight.jsonl"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  hook_step = 7, hook_signal = SIGINT, fake_after_step = hook_raise;
  r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-dir",
                           scratch(b, "sig-int"), "--metrics", scratch(mb, "sig-int.jsonl"), NULL});
  fake_after_step = NULL;
  CHECK_RUN(r, 130);
  CHECK_HAS(r.err, "SIGINT: stopped after step 7; checkpoint");
  CHECK_HAS(r.err, "step_00000007; --resume continues from it");
  CHECK_INT(rt_test_exists(step_file(pb, b, 7, "index.json")), 1);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-dir", b, "--metrics",
                           mb, "--resume", NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  CHECK_INT(same_file(step_file(pa, a, 20, "state.safetensors"),
                      step_file(pb, b, 20, "state.safetensors")),
            1);
  Metrics x = metrics_read(ma), y = metrics_read(mb);
  CHECK_INT(y.n, 20);
  CHECK_INT(same_heads(&x, 0, &y, 0, 20), 1);
  free(x.text);
  free(y.text);
  hook_step = 3, hook_signal = SIGTERM, fake_after_step = hook_raise;
  r = run((const char *[]){"--data", train_file(), "--steps", "20", NULL});
  fake_after_step = NULL;
  CHECK_RUN(r, 143);
  CHECK_HAS(r.err, "SIGTERM: stopped after step 3; nothing saved (no --ckpt-dir)");
  run_free(&r);
}

/* A save that fails mid-run is reported and training goes on; the next save succeeds. Here a
 * stray file takes the name of step 10's directory. When the final save fails, the run fails
 * and names the last good checkpoint, and nothing promises a save after the last step. */
static void test_failed_save_goes_on(void) {
  char dir[PATH_CAP], p[PATH_CAP];
  scratch(dir, "savefail");
  CHECK_INT(mkdir(dir, 0777), 0);
  rt_test_write(step_file(p, dir, 10, NULL), "x", 1);
  rt_test_write(step_file(p, dir, 20, NULL), "x", 1);
  Run r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-every", "5",
                               "--keep", "0", "--ckpt-dir", dir, NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "step 10: checkpoint not saved: ");
  CHECK_HAS(r.err, "training goes on and saves again at step 15; the last good checkpoint is ");
  CHECK_HAS(r.err, "could not save the checkpoint of step 20: ");
  CHECK_HAS(r.err, "; the run ends without it; the last good checkpoint is ");
  CHECK_HAS(r.err, "step_00000015 (step 15); --resume continues from it");
  CHECK_INT(strstr(r.err, "step 20: checkpoint not saved") == NULL, 1);
  CHECK_INT(strstr(r.err, "saves again at step 25") == NULL, 1);
  CHECK_INT(rt_test_exists(step_file(p, dir, 15, "index.json")), 1);
  CHECK_INT(rt_test_exists(step_file(p, dir, 5, "index.json")), 1);
  run_free(&r);
  /* the next save is the last step's, 2 steps on */
  scratch(dir, "savefail-last");
  CHECK_INT(mkdir(dir, 0777), 0);
  rt_test_write(step_file(p, dir, 10, NULL), "x", 1);
  r = run((const char *[]){"--data", train_file(), "--steps", "12", "--ckpt-every", "5", "--keep",
                           "0", "--ckpt-dir", dir, NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.err, "training goes on and saves again at step 12, the last; ");
  CHECK_INT(rt_test_exists(step_file(p, dir, 12, "index.json")), 1);
  run_free(&r);
}

/* The file-size limit: too small for one checkpoint, refused before step 1; lowered during
 * the run, the save fails with EFBIG (not SIGXFSZ, which would kill the trainer), leaves no
 * temporary, and the run goes on. */
static struct rlimit saved_limit;
static void hook_fsize(int64_t step, float *weight) {
  (void)weight;
  struct rlimit small = saved_limit;
  small.rlim_cur = 4096;
  if (step == 8) setrlimit(RLIMIT_FSIZE, &small);
  if (step == 12) setrlimit(RLIMIT_FSIZE, &saved_limit);
}

static void test_file_size_limit(void) {
  char dir[PATH_CAP], p[PATH_CAP], mp[PATH_CAP];
  getrlimit(RLIMIT_FSIZE, &saved_limit);
  struct rlimit small = saved_limit;
  small.rlim_cur = 20000;
  setrlimit(RLIMIT_FSIZE, &small);
  Run r =
      run((const char *[]){"--data", train_file(), "--steps", "5", "--ckpt-dir",
                           scratch(dir, "fsize"), "--metrics", scratch(mp, "fsize.jsonl"), NULL});
  setrlimit(RLIMIT_FSIZE, &saved_limit);
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "--ckpt-dir: ");
  CHECK_HAS(r.err, "the file-size limit (ulimit -f) is 0.0 MiB, one checkpoint file needs");
  CHECK_INT(rt_test_exists(mp), 0); /* refused before anything was written */
  run_free(&r);
  fake_after_step = hook_fsize; /* --ckpt-sync: the save must be written while the limit holds */
  r = run((const char *[]){"--data", train_file(), "--steps", "15", "--ckpt-every", "5", "--keep",
                           "0", "--ckpt-sync", "--ckpt-dir", scratch(dir, "fsize-mid"), NULL});
  fake_after_step = NULL;
  setrlimit(RLIMIT_FSIZE, &saved_limit);
  CHECK_RUN(r, 0);
  CHECK_HAS(r.err, "step 10: checkpoint not saved: ");
  CHECK_HAS(r.err, "File too large");
  CHECK_INT(rt_test_exists(step_file(p, dir, 10, NULL)), 0);
  CHECK_INT(rt_test_exists(step_file(p, dir, 15, "index.json")), 1);
  run_free(&r);
}

/* --ckpt-dir is made with its parents, or refused before step 1 when it cannot be. */
static void test_ckpt_dir_up_front(void) {
  char dir[PATH_CAP + 8], p[PATH_CAP], file[PATH_CAP], mp[PATH_CAP];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "3", "--ckpt-dir",
                               scratch(dir, "new/nested/dir"), NULL});
  CHECK_RUN(r, 0);
  CHECK_INT(rt_test_exists(step_file(p, dir, 3, "index.json")), 1);
  run_free(&r);
  rt_test_write(scratch(file, "a-file"), "x", 1);
  snprintf(dir, sizeof dir, "%s/ckpt", file);
  r = run((const char *[]){"--data", train_file(), "--steps", "3", "--ckpt-dir", dir, "--metrics",
                           scratch(mp, "updir.jsonl"), NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "--ckpt-dir: ");
  CHECK_HAS(r.err, "a-file/ckpt: cannot create directory: Not a directory");
  CHECK_INT(rt_test_exists(mp), 0);
  run_free(&r);
}

/* A second trainer on a directory in use is refused, and nothing in it is touched. */
static void test_second_writer(void) {
  char dir[PATH_CAP], p[PATH_CAP], want[64];
  RtError err;
  RtCkptLock *lock = NULL;
  Run r = run((const char *[]){"--data", train_file(), "--steps", "4", "--ckpt-dir",
                               scratch(dir, "twowriters"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  CHECK_OK(rt_ckpt_lock(&lock, dir, 0, 1, 1, &err)); /* the first trainer, still running */
  r = run((const char *[]){"--data", train_file(), "--steps", "8", "--ckpt-dir", dir, "--resume",
                           NULL});
  CHECK_RUN(r, 1);
  snprintf(want, sizeof want, "locked by another trainer (pid %ld)", (long)getpid());
  CHECK_HAS(r.err, want);
  CHECK_INT(rt_test_exists(step_file(p, dir, 8, NULL)), 0);
  run_free(&r);
  rt_ckpt_unlock(lock);
  r = run((const char *[]){"--data", train_file(), "--steps", "8", "--ckpt-dir", dir, "--resume",
                           NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
}

/* A checkpoint of another model is refused with what differs, and kept; --partial loads what
 * matches. A config change outside /model is a note. */
static void test_other_model(void) {
  char dir[PATH_CAP], p[PATH_CAP];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "4", "--keep", "1", "--ckpt-dir",
                               scratch(dir, "othermodel"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  RtParamSlot params[2];
  memcpy(params, axlc_program.params, sizeof params);
  params[1].path = "model/bigram/offset";
  RtProgram other = axlc_program;
  other.params = params;
  other.config = "{\"model\": {\"klass\": \"FakeBigram\", \"vocab_size\": 32, \"offsets\": true}, "
                 "\"max_steps\": 30}";
  r = run_program(&other, (const char *[]){"--data", train_file(), "--steps", "8", "--keep", "1",
                                           "--ckpt-dir", dir, "--resume", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "step_00000004 holds another model: ");
  CHECK_HAS(r.err, "1 parameter not in the checkpoint: model/bigram/offset");
  CHECK_HAS(r.err, "1 parameter only in the checkpoint: model/bigram/bias");
  CHECK_HAS(r.err, "/model/offsets: true here, absent in the checkpoint");
  CHECK_HAS(r.err, "refusing to resume (--partial");
  CHECK_INT(rt_test_exists(step_file(p, dir, 4, "index.json")), 1);
  run_free(&r);
  r = run_program(&other, (const char *[]){"--data", train_file(), "--steps", "8", "--keep", "1",
                                           "--ckpt-dir", dir, "--resume", "--partial", NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.err, "--partial: loaded 1 of 2 parameters");
  CHECK_HAS(r.out, "resumed from");
  run_free(&r);
  other = axlc_program;
  other.config = "{\"model\": {\"klass\": \"FakeBigram\", \"vocab_size\": 32}, \"max_steps\": 40}";
  r = run_program(&other, (const char *[]){"--data", train_file(), "--steps", "10", "--ckpt-dir",
                                           scratch(dir, "othermodel2"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--steps", "12", "--ckpt-dir", dir, "--resume",
                           NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(
      r.err,
      "note: the config differs from the checkpoint's: /max_steps: 30 here, 40 in the checkpoint");
  run_free(&r);
  r = run((const char *[]){"--data", train_file(), "--partial", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "--partial needs --resume");
  run_free(&r);
  /* --partial that would load nothing is another model's step and data position only. */
  params[0].path = "other/w";
  params[1].path = "other/b";
  other = axlc_program;
  other.params = params;
  r = run_program(&other, (const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-dir",
                                           dir, "--resume", "--partial", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "othermodel2/step_00000012: --partial: 0 of 2 parameters matched by name and "
                   "shape, so nothing of it would be loaded; this model expects 'other/w', "
                   "'other/b'; the checkpoint holds 'model/bigram/weight', 'model/bigram/bias'");
  CHECK_INT(strstr(r.out, "resumed from") == NULL, 1);
  CHECK_INT(rt_test_exists(step_file(p, dir, 20, NULL)), 0);
  run_free(&r);
}

/* Weights that stop being finite are never saved, and the report names the checkpoint before. */
static void hook_spoil(int64_t step, float *weight) {
  if (step == 10) weight[5] = NAN;
}

static void test_nonfinite_weights(void) {
  char dir[PATH_CAP], p[PATH_CAP];
  fake_after_step = hook_spoil;
  Run r = run((const char *[]){"--data", train_file(), "--steps", "20", "--ckpt-every", "5",
                               "--ckpt-dir", scratch(dir, "spoiled"), NULL});
  fake_after_step = NULL;
  CHECK_RUN(r, RT_EXIT_NONFINITE);
  CHECK_HAS(r.err, "step 10: model/bigram/weight after the update: not finite");
  CHECK_HAS(r.err, "the last good checkpoint is ");
  CHECK_HAS(r.err, "step_00000005 (step 5)");
  CHECK_INT(rt_test_exists(step_file(p, dir, 10, NULL)), 0);
  run_free(&r);
}

/* Resuming past the end of the data blames the checkpoint; a damaged checkpoint set aside
 * twice gets a second name; metrics of steps redone after a resume are not repeated. */
static void test_resume_details(void) {
  char dir[PATH_CAP], p[PATH_CAP], shortdata[PATH_CAP], mp[PATH_CAP], ms[PATH_CAP],
      aside[PATH_CAP + 32];
  Run r = run((const char *[]){"--data", train_file(), "--steps", "10", "--ckpt-every", "5",
                               "--keep", "0", "--ckpt-dir", scratch(dir, "details"), "--metrics",
                               scratch(mp, "details.jsonl"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  write_tokens(scratch(shortdata, "short.bin"), 200, 3, 0);
  r = run(
      (const char *[]){"--data", shortdata, "--steps", "12", "--ckpt-dir", dir, "--resume", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "step_00000010: data position 640 is past the end of --data ");
  CHECK_HAS(r.err, "(200 tokens): the checkpoint was made with other data");
  run_free(&r);
  /* Step 10 damaged, and an earlier step_00000010.damaged in the way. */
  snprintf(aside, sizeof aside, "%s/step_00000010.damaged", dir);
  CHECK_INT(mkdir(aside, 0777), 0);
  unlink(step_file(p, dir, 10, "state.safetensors"));
  rt_test_write(p, "junk", 4);
  r = run((const char *[]){"--data", train_file(), "--steps", "10", "--ckpt-dir", dir, "--resume",
                           "--metrics", mp, NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.err, "step_00000010.damaged.2");
  run_free(&r);
  Metrics m = metrics_read(mp);
  CHECK_INT(m.n, 10);
  for (int i = 0; i < m.n; i++) CHECK_INT(metric(&m, i, "step"), i + 1);
  free(m.text);
  r = run((const char *[]){"--data", train_file(), "--steps", "10", "--metrics",
                           scratch(ms, "details-s.jsonl"), NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  Metrics x = metrics_read(ms), y = metrics_read(mp);
  CHECK_INT(same_heads(&x, 0, &y, 0, 10), 1);
  free(x.text);
  free(y.text);
}

/* Data files that are not what they seem, and messages that keep their reason however long
 * the path. */
static void test_bad_data_files(void) {
  char fifo[PATH_CAP], magic[PATH_CAP];
  CHECK_INT(mkfifo(scratch(fifo, "data.fifo"), 0600), 0);
  Run r = run((const char *[]){"--data", fifo, "--steps", "1", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "data.fifo: not a regular file (a FIFO)");
  run_free(&r);
  unsigned char header[2048] = {0};
  header[0] = 0x89; /* 20240521 = 0x0134d889: a near miss of the magic number */
  header[1] = 0xd8, header[2] = 0x34, header[3] = 0x01, header[4] = 1, header[8] = 0x80;
  rt_test_write(scratch(magic, "badmagic.bin"), header, sizeof header);
  r = run((const char *[]){"--data", magic, "--steps", "1", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "starts like an llm.c token file but its magic number is 20240521");
  run_free(&r);
  char *longpath = malloc(4200);
  strcpy(longpath, "/tmp");
  while (strlen(longpath) < 4000) strcat(longpath, "/./.");
  strcat(longpath, "/missing.bin");
  r = run((const char *[]){"--data", longpath, "--steps", "1", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "missing.bin: cannot open: ");
  run_free(&r);
  free(longpath);
}

typedef struct BadCase {
  const char *args[8];
  const char *expect;
} BadCase;

static void test_bad_options(void) {
  char missing[PATH_CAP];
  scratch(missing, "no-such-file.bin");
  const char *data = train_file();
  const BadCase cases[] = {
      {{"--data", data, "--bogus", NULL}, "unknown option '--bogus'"},
      {{"--data", data, "stray", NULL}, "unknown argument 'stray'"},
      {{"--data", data, "--steps", NULL}, "--steps needs a value"},
      {{"--data", data, "--steps", "abc", NULL}, "--steps: 'abc' is not an integer"},
      {{"--data", data, "--steps", "-2", NULL}, "--steps: -2 is out of range"},
      {{"--data", data, "--threads", "0", NULL}, "--threads: 0 is out of range"},
      {{"--data", data, "--seed", "-1", NULL}, "--seed: '-1'"},
      {{"--data", data, "--resume=yes", NULL}, "--resume takes no value"},
      {{"--data", missing, NULL}, "--data: "},
      {{"--steps", "3", NULL}, "--data FILE is required"},
      {{"--data", data, "--resume", NULL}, "--resume needs --ckpt-dir"},
      {{"--data", data, "--eval-every", "2", NULL}, "--eval-every needs --eval-data"},
      {{"--data", data, "--eval-data", missing, NULL}, "--eval-data: "},
      {{"--data", data, "--init", missing, NULL}, "--init: "},
      {{"--data", data, "--metrics", "/nonexistent-dir/m.jsonl", NULL},
       "--metrics: /nonexistent-dir"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    Run r = run(cases[i].args);
    CHECK_RUN(r, 1);
    CHECK_HAS(r.err, cases[i].expect);
    if (strstr(cases[i].expect, "--data: ") || strstr(cases[i].expect, "-data: ") ||
        strstr(cases[i].expect, "--init: "))
      CHECK_HAS(r.err, "no-such-file.bin");
    run_free(&r);
  }
}

static void test_bad_program(void) {
  RtProgram p = axlc_program;
  p.abi_version = 99;
  Run r = run_program(&p, (const char *[]){"--data", train_file(), NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "ABI version 99");
  run_free(&r);
  p = axlc_program;
  p.loss_offset = p.slab_bytes;
  r = run_program(&p, (const char *[]){"--data", train_file(), NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "program: loss");
  run_free(&r);
  /* collectives: a dtype no collective moves is named; a bf16 operand takes 2 bytes an element
   * (8 of them fit in the slab's last 16 bytes, as 4-byte elements they would not) */
  RtCollective coll = {.kind = RT_COLL_ALL_REDUCE,
                       .dtype = RT_DT_F16,
                       .rank = 1,
                       .in_shape = {8},
                       .out_shape = {8},
                       .in_offset = axlc_program.slab_bytes - 16,
                       .out_offset = axlc_program.slab_bytes - 16};
  p = axlc_program;
  p.ncollectives = 1;
  p.collectives = &coll;
  r = run_program(&p, (const char *[]){"--data", train_file(), "--steps", "1", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "program: collective 0 has dtype");
  CHECK_HAS(r.err, "f32");
  CHECK_HAS(r.err, "bf16");
  run_free(&r);
  coll.dtype = RT_DT_BF16;
  r = run_program(&p, (const char *[]){"--data", train_file(), "--steps", "1", NULL});
  CHECK_RUN(r, 0);
  run_free(&r);
  coll.dtype = RT_DT_F32;
  r = run_program(&p, (const char *[]){"--data", train_file(), "--steps", "1", NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "program: collective 0 of its operand: 32 bytes");
  run_free(&r);
  p = axlc_program;
  p.vocab = 8; /* the data holds tokens up to 31 */
  r = run_program(&p, (const char *[]){"--data", train_file(), NULL});
  CHECK_RUN(r, 1);
  CHECK_HAS(r.err, "outside the vocabulary");
  run_free(&r);
}

static void test_help_config(void) {
  Run r = run((const char *[]){"--help", NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.out, "--ckpt-dir DIR");
  CHECK_HAS(r.out, "--resume");
  run_free(&r);
  r = run((const char *[]){"--config", NULL});
  CHECK_RUN(r, 0);
  CHECK_HAS(r.out, axlc_program.config);
  run_free(&r);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"training lowers the loss", test_lowers_loss},
      {"--steps defaults to max_steps", test_default_steps},
      {"checkpoint every N, keep N", test_ckpt_every_keep},
      {"checkpoint contents", test_ckpt_contents},
      {"20 straight == 10 + resume + 10", test_resume_bit_exact},
      {"damaged newest checkpoint skipped", test_resume_damaged},
      {"all checkpoints damaged refused", test_resume_all_damaged},
      {"NaN or bad metadata under a good CRC", test_resume_bad_values},
      {"resume: empty dir, done, no --resume", test_resume_empty_and_done},
      {"seeded init", test_seeded_init},
      {"--init from safetensors", test_init_file},
      {"eval leaves the run unchanged", test_eval_leaves_run},
      {"non-finite loss stops", test_nonfinite},
      {"--sdc-check-every", test_sdc},
      {"--skip-outliers, --skip-batches", test_outliers},
      {"bad options and files", test_bad_options},
      {"SIGINT and SIGTERM stop cleanly", test_signal_saves},
      {"a failed save: the run goes on", test_failed_save_goes_on},
      {"file-size limit", test_file_size_limit},
      {"--ckpt-dir checked up front", test_ckpt_dir_up_front},
      {"one writer per directory", test_second_writer},
      {"checkpoint of another model", test_other_model},
      {"non-finite weights never saved", test_nonfinite_weights},
      {"resume: data, .damaged, metrics", test_resume_details},
      {"FIFO, bad magic, long paths", test_bad_data_files},
      {"bad program", test_bad_program},
      {"--help and --config", test_help_config},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_train", cases);
}
