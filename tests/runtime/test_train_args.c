/*
 * test_train_args.c: rt_train_check_args, the trainer's option checks without a program (what
 * `axlc run --target cpu` runs before compiling). It accepts what rt_train_main accepts and
 * refuses the rest with rt_train_main's exact message, whatever defaults the program gives.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_program.h"
#include "rt_test.h"

#define MAX_ARGS 8

/* {"trainer", args...}; args ends with NULL. Returns argc. */
static int make_argv(char **argv, const char *const *args) {
  int argc = 1;
  argv[0] = "trainer";
  for (; args[argc - 1] && argc <= MAX_ARGS; argc++) argv[argc] = (char *)args[argc - 1];
  return argc;
}

/* What rt_train_main(p, argv) prints on stderr (a malloc'd string), and its exit status. */
static char *trainer_stderr(const RtProgram *p, int argc, char **argv, int *rc) {
  char path[600];
  rt_test_path(path, sizeof path, "stderr.txt");
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 2);
  *rc = rt_train_main(p, argc, argv);
  fflush(stderr);
  dup2(saved, 2);
  close(saved), close(fd);
  size_t n;
  char *text = (char *)rt_test_read(path, &n);
  text[n] = '\0';
  return text;
}

typedef struct {
  const char *args[MAX_ARGS + 1];
  const char *msg; /* the whole message */
} BadCase;

static const BadCase bad[] = {
    {{"--data", "d.bin", "--bogus", NULL}, "unknown option '--bogus' (--help lists the options)"},
    {{"--data", "d.bin", "stray", NULL}, "unknown argument 'stray' (--help lists the options)"},
    {{"--data", "d.bin", "--steps", NULL}, "--steps needs a value: --steps N"},
    {{"--data", "d.bin", "--steps", "abc", NULL}, "--steps: 'abc' is not an integer"},
    {{"--data", "d.bin", "--steps", "-1", NULL},
     "--steps: -1 is out of range, expected 0..9223372036854775807"},
    {{"--data", "d.bin", "--threads", "0", NULL}, "--threads: 0 is out of range, expected 1..1024"},
    {{"--data", "d.bin", "--seed", "-1", NULL}, "--seed: '-1' is not an unsigned 64-bit integer"},
    {{"--data", "d.bin", "--resume=yes", NULL}, "--resume takes no value"},
    {{"--data=", NULL}, "--data: empty value"},
    {{"--steps", "3", NULL}, "--data FILE is required (--help lists the options)"},
    {{"--data", "d.bin", "--resume", NULL}, "--resume needs --ckpt-dir DIR"},
    {{"--data", "d.bin", "--partial", NULL}, "--partial needs --resume"},
    {{"--data", "d.bin", "--eval-every", "2", NULL}, "--eval-every needs --eval-data FILE"},
    {{"--sample", "0", "--ckpt-dir", "ck", NULL},
     "--sample: 0 is out of range, expected 1..1073741824"},
    {{"--sample", "3", NULL},
     "--sample needs weights: --ckpt-dir DIR (its newest checkpoint) or --init FILE"},
    {{"--sample", "3", "--ckpt-dir", "ck", "--temperature", "-1", NULL},
     "--temperature: -1 is negative; expected 0 (greedy) or more"},
    {{"--sample", "3", "--ckpt-dir", "ck", "--temperature", "nan", NULL},
     "--temperature: 'nan' is not a finite number"},
    {{"--data", "d.bin", "--temperature", "0.5", NULL}, "--temperature needs --sample N"},
    {{"--data", "d.bin", "--prompt", "hi", NULL}, "--prompt needs --sample N"},
    {{"--sample", "3", "--ckpt-dir", "ck", "--data", "d.bin", NULL},
     "--sample generates text and does not train: --data is not used with it"},
    {{"--sample", "3", "--init", "w.st", "--metrics", "m.jsonl", NULL},
     "--sample generates text and does not train: --metrics is not used with it"},
    {{"--data", "d.bin", "--peak-flops", "-1e12", NULL},
     "--peak-flops: -1e12 is out of range, expected a device's peak FLOP/s from 1e6 to 1e18 (leave "
     "it "
     "out for the device table's)"},
    {{"--data", "d.bin", "--peak-flops", "0", NULL},
     "--peak-flops: 0 is out of range, expected a device's peak FLOP/s from 1e6 to 1e18 (leave it "
     "out "
     "for the device table's)"},
    {{"--data", "d.bin", "--peak-flops", "1e-300", NULL},
     "--peak-flops: 1e-300 is out of range, expected a device's peak FLOP/s from 1e6 to 1e18 "
     "(leave "
     "it out for the device table's)"},
    {{"--data", "d.bin", "--steps", "99999999999999999999", NULL},
     "--steps: 99999999999999999999 is out of range, expected 0..9223372036854775807"},
    {{"--data", "d.bin", "--outlier-window", "8", NULL},
     "--outlier-window 8 needs --skip-outliers Z (the window is what a step's loss is measured "
     "against; without --skip-outliers nothing is)"},
    {{"--data", "d.bin", "--restart-downtime", "inf", NULL},
     "--restart-downtime: 'inf' is not a finite number"},
    {{"--data", "d.bin", "--outlier-window", "1", NULL},
     "--outlier-window: 1 is out of range, expected 2..1048576"},
    {{"--data", "d.bin", "--sdc-check-every", "-2", NULL},
     "--sdc-check-every: -2 is out of range, expected 0..9223372036854775807"},
    {{"--data", "d.bin", "--skip-outliers", "x", NULL},
     "--skip-outliers: 'x' is not a finite number"},
};

/* Each bad command line: the check's message, and the trainer's stderr is "trainer: " and
 * that message, for programs whose defaults differ (the check has no program). */
static void test_same_messages(void) {
  RtProgram other = axlc_program;
  other.facts.max_steps = 0;
  other.facts.seed = 7;
  other.facts.ckpt_every_n_steps = 3;
  other.facts.ckpt_keep = 1;
  const RtProgram *programs[] = {&axlc_program, &other};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *argv[MAX_ARGS + 2];
    int argc = make_argv(argv, bad[i].args);
    RtError err = {{0}};
    CHECK_FAIL(rt_train_check_args(argc, argv, &err), bad[i].msg);
    CHECK_INT(strcmp(err.msg, bad[i].msg), 0);
    char want[RT_ERROR_MAX + 16];
    snprintf(want, sizeof want, "trainer: %s\n", bad[i].msg);
    for (int k = 0; k < 2; k++) {
      int rc;
      char *got = trainer_stderr(programs[k], argc, argv, &rc);
      CHECK_MSG(rc == 1 && strcmp(got, want) == 0,
                "case %zu, program %d: trainer printed \"%.400s\", expected \"%.400s\"", i, k, got,
                want);
      free(got);
    }
  }
}

/* Accepted: what only a run can check (the files) is not looked at; --help and --config need
 * nothing else, since the trainer prints and exits. */
static void test_accepts(void) {
  const char *const good[][MAX_ARGS + 1] = {
      {"--data", "/no/such/file.bin", NULL},
      {"--data=d.bin", "--steps", "0", "--seed", "18446744073709551615", NULL},
      {"--data", "d.bin", "--ckpt-dir", "/no/such/dir", "--resume", "--keep", "0", NULL},
      {"--data", "d.bin", "--eval-data", "e.bin", "--eval-every", "5", NULL},
      {"--help", NULL},
      {"--config", NULL},
      {"--steps", "3", "--help", NULL},
      {"--sample", "3", "--ckpt-dir", "/no/such/dir", "--prompt", "x", "--temperature", "0", NULL},
      {"--sample=1", "--init", "w.safetensors", "--init-allow-unused", "--seed", "5", NULL},
  };
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    char *argv[MAX_ARGS + 2];
    int argc = make_argv(argv, good[i]);
    RtError err = {{0}};
    CHECK_OK(rt_train_check_args(argc, argv, &err));
  }
}

/* A bad tuning variable in the environment ends the run before it starts, for training and
 * for sampling, with the same message from the check and from the trainer. */
static void test_bad_environment(void) {
  static const char *const runs[][MAX_ARGS + 1] = {
      {"--data", "d.bin", NULL},
      {"--sample", "3", "--ckpt-dir", "/no/such/dir", NULL},
  };
  const char *msg =
      "AXLC_SGEMM=blis: expected openblas or own (unset: own where the CPU has AVX2 and FMA)";
  setenv("AXLC_SGEMM", "blis", 1);
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
    char *argv[MAX_ARGS + 2];
    int argc = make_argv(argv, runs[i]), rc;
    RtError err = {{0}};
    CHECK_FAIL(rt_train_check_args(argc, argv, &err), msg);
    CHECK_INT(strcmp(err.msg, msg), 0);
    char *got = trainer_stderr(&axlc_program, argc, argv, &rc);
    char want[300];
    snprintf(want, sizeof want, "trainer: %s\n", msg);
    CHECK_MSG(rc == 1 && strcmp(got, want) == 0, "run %zu: trainer printed \"%.400s\"", i, got);
    free(got);
  }
  unsetenv("AXLC_SGEMM");
}

/* --metrics naming --data (through a symbolic link here) is refused by the check, so by
 * `axlc run` before it compiles, with the trainer's message; the data is left as it was. */
static void test_metrics_is_data(void) {
  char data[512], link_[512], msg[1100], want[RT_ERROR_MAX + 16];
  rt_test_write(rt_test_path(data, sizeof data, "args-data.txt"), "some tokens here", 16);
  CHECK_INT(symlink(data, rt_test_path(link_, sizeof link_, "args-metrics.jsonl")), 0);
  const char *const args[] = {"--data", data, "--metrics", link_, NULL};
  char *argv[MAX_ARGS + 2];
  int argc = make_argv(argv, args), rc;
  snprintf(msg, sizeof msg, "--metrics %s is the same file as --data %s", link_, data);
  RtError err = {{0}};
  CHECK_FAIL(rt_train_check_args(argc, argv, &err), msg);
  char *got = trainer_stderr(&axlc_program, argc, argv, &rc);
  snprintf(want, sizeof want, "trainer: %s", err.msg);
  CHECK_MSG(rc == 1 && strncmp(got, want, strlen(want)) == 0, "trainer printed \"%.400s\"", got);
  free(got);
  size_t n;
  unsigned char *text = rt_test_read(data, &n);
  CHECK_INT(n, 16);
  free(text);
}

/* A program without a sampling forward (the fake one, like an OpenCL trainer's) says so. */
static void test_no_forward(void) {
  const char *const args[] = {"--sample", "3", "--ckpt-dir", "/no/such/dir", NULL};
  char *argv[MAX_ARGS + 2];
  int argc = make_argv(argv, args), rc;
  char *got = trainer_stderr(&axlc_program, argc, argv, &rc);
  CHECK_INT(rc, 1);
  CHECK_MSG(strstr(got, "trainer: --sample: this trainer has no sampling forward") != NULL,
            "trainer printed \"%.400s\"", got);
  free(got);
}

int main(int argc, char **argv) {
  static const TestCase cases[] = {
      {"refused with the trainer's messages", test_same_messages},
      {"accepted without a program", test_accepts},
      {"--sample needs the program's forward", test_no_forward},
      {"a bad tuning variable in the environment", test_bad_environment},
      {"--metrics naming --data", test_metrics_is_data},
      {NULL, NULL},
  };
  return rt_test_main(argc, argv, "runtime_train_args", cases);
}
