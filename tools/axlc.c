/*
 * axlc.c: the command-line driver.
 *
 * Parses the command line, calls the library, prints results and picks the
 * exit status: 0 on success, 1 for any user error (bad config, bad flag,
 * unreadable file). Only this file exits.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "driver/driver.h"
#include "tools/convert.h"
#include "tools/plot.h"

#define MAX_LIST 64

struct Command;

typedef struct {
  const char *command;
  const struct Command *cmd; /* its row of commands[], once known */
  const char *model;
  FeOptions fe;
  const char *apply[MAX_LIST];
  const char *sets[MAX_LIST];
  bool json;
  const char *after;          /* ir: stop after this pass */
  const char *format;         /* ir: text or dot */
  const char *emit;           /* compile: exe (default), obj, llvm or asm */
  const char *output;         /* compile: -o */
  const char *cpu, *features; /* compile, run: code generation target */
  const char *backend;        /* compile, run: --backend */
  const char *rest[MAX_LIST]; /* run: the trainer's options, passed through */
  int nrest;
  const char *plot;           /* memcheck: --plot FILE.svg */
  const char *more[MAX_LIST]; /* plot: the metrics files after the first */
  int nmore;
  const char *labels[MAX_LIST]; /* plot: --label NAME, one per metrics file */
  int nlabels;
  const char *from, *to;         /* convert: --from hf or --to hf */
  const char *input;             /* convert: the weights file */
  const char *dtype;             /* convert --to hf: --dtype f32|bf16|f16 */
  bool merge_lora;               /* convert --merge-lora: fold a LoRA run's adapters in */
  const char *base;              /* convert --merge-lora --base: the base weights */
  bool force_base;               /* convert --merge-lora --force-base: another base on purpose */
  const char *max_shard;         /* convert --to hf: --max-shard-size SIZE */
  const char *devices;           /* memcheck, compile: --devices FILE (the device table) */
  const char *tokenizer;         /* tokenize: --tokenizer FILE */
  bool no_memcheck;              /* compile: --no-memcheck */
  bool no_cache;                 /* compile, run: --no-cache */
  bool clear, trim;              /* cache: --clear, --trim */
  int64_t cache_max;             /* compile, run, cache: AXLC_CACHE_MAX (0: no limit) */
  int jobs;                      /* compile, run: --jobs N (0: one per CPU) */
  char cache_dir[PATH_MAX + 16]; /* the compile cache's directory, when on */
  const char *search[MAX_LIST];  /* AXLC_PATH's directories, then the shipped configs' */
  char *axlc_path;               /* a copy of AXLC_PATH that search[] points into */
  char share[PATH_MAX + 16]; /* installed: PREFIX/share/axlc; in a build: the source's models/ */
  char lib[PATH_MAX + 16];   /* installed: PREFIX/lib (libaxrt.a); in a build: empty */
  LaunchSupervisor sv;       /* launch, run: --max-restarts, --min-ranks, --backoff, --report */
  bool restarts_given;       /* --max-restarts was given */
  int ranks;                 /* launch: -n N */
} Args;

/* ---- the commands ---- */

static int cmd_config(Args *a);
static int cmd_params(Args *a);
static int cmd_kinds(Args *a);
static int cmd_ir(Args *a);
static int cmd_compile(Args *a);
static int cmd_run(Args *a);
static int cmd_memcheck(Args *a);
static int cmd_plot(Args *a);
static int cmd_convert(Args *a);
static int cmd_launch(Args *a);
static int cmd_tokenize(Args *a);
static int cmd_backends(Args *a);
static int cmd_cache(Args *a);

/* How a command takes the rest of its command line. */
enum {
  CMD_TRAINS = 1u << 0,          /* compiles or runs: --target interp picks the backend */
  CMD_TRAINER_OPTIONS = 1u << 1, /* an option it does not know (and -h) is the trainer's */
  CMD_DASH = 1u << 2,            /* every argument after "--" is the trainer's */
  CMD_WEIGHTS = 1u << 3,         /* a second argument: the weights (convert) */
  CMD_MORE_FILES = 1u << 4,      /* more arguments: further files of the same kind (plot) */
};

/* One command of axlc: its name, its function, its lines in `axlc --help` and the options it
 * alone takes (space-separated; the others are every command's). The usage text, the parser
 * and the dispatch read this table. */
typedef struct Command {
  const char *name;
  int (*run)(Args *a);
  const char *help;
  const char *options;
  unsigned flags;
} Command;

static const Command commands[] = {
    {"config", cmd_config,
     "  config MODEL.json   print the resolved config (canonical JSON, every default explicit)\n",
     NULL, 0},
    {"params", cmd_params,
     "  params MODEL.json   print every parameter: path, shape, dtype, init, partition spec\n",
     NULL, 0},
    {"kinds", cmd_kinds, "  kinds [KIND]        list module kinds, or one kind's fields\n", NULL,
     0},
    {"ir", cmd_ir,
     "  ir MODEL.json       print the IR of the training step [--after PASS] [--format text|dot]\n",
     NULL, 0},
    {"compile", cmd_compile,
     "  compile MODEL.json  --target cpu -o TRAINER: a native trainer executable\n"
     "                      [--emit exe|obj|llvm|asm] [--cpu NAME] [--features +avx2,...]\n",
     NULL, CMD_TRAINS},
    {"run", cmd_run,
     "  run MODEL.json      train in process: --target cpu compiles with the LLVM JIT and\n"
     "                      takes the trainer's options (axlc run M --target cpu --help);\n"
     "                      --target interp runs the reference interpreter with\n"
     "                      --data FILE [--steps N] [--seed S] [--init W.safetensors]\n"
     "                      [--dump OUT.safetensors]\n",
     "--max-restarts --min-ranks --backoff --report", CMD_TRAINS | CMD_TRAINER_OPTIONS},
    {"memcheck", cmd_memcheck,
     "  memcheck MODEL.json --target T: will the job fit each device? where the memory goes,\n"
     "                      FLOPs and bytes sent per step [--json] [--plot FILE.svg]\n"
     "                      [--devices FILE]  (the device table; default "
     "models/rules/devices.json)\n",
     NULL, 0},
    {"plot", cmd_plot,
     "  plot METRICS.jsonl  -o FILE.svg: draw a trainer's --metrics (loss, eval loss,\n"
     "                      learning rate, gradient norm, tokens/s against the step);\n"
     "                      [MORE.jsonl ...] [--label NAME ...]: several runs on shared\n"
     "                      axes, a color and a legend entry (NAME or the file's name) each\n",
     "--label", CMD_MORE_FILES},
    {"convert", cmd_convert,
     "  convert MODEL.json  --from hf IN.safetensors -o OUT.safetensors: Hugging Face GPT-2,\n"
     "                      Llama or Mixtral weights (as the config decides; a file, a\n"
     "                      sharded index or a model directory) to axlc's parameter paths,\n"
     "                      for --init; --to hf: axlc weights (--init files, --dump output,\n"
     "                      a checkpoint or step directory) to Hugging Face's names and\n"
     "                      layouts, in --dtype f32|bf16|f16 (default: the dtype the weights\n"
     "                      came in, else f32), in shards of --max-shard-size (default 5GB)\n"
     "                      with their index, and config.json beside them; --merge-lora IN\n"
     "                      [--base BASE] (with --apply lora): a LoRA run's adapters folded\n"
     "                      into its base weights (W + alpha/r A B), a plain weights file;\n"
     "                      a BASE other than the one the run recorded is refused unless\n"
     "                      --force-base\n",
     "--merge-lora --force-base --base --dtype --max-shard-size", CMD_WEIGHTS},
    {"launch", cmd_launch,
     "  launch TRAINER -n N [--max-restarts K] [--min-ranks M] [--backoff S]\n"
     "                      [--report FILE.jsonl] -- [trainer options]: run a compiled\n"
     "                      trainer as N ranks under mpirun (srun in a Slurm allocation)\n"
     "                      and restart it from its last checkpoint when it fails (K\n"
     "                      times, default 3); with M < N, go on with fewer ranks when\n"
     "                      one keeps failing (run --target cpu-N takes these too)\n",
     "--max-restarts --min-ranks --backoff --report -n", CMD_DASH},
    {"tokenize", cmd_tokenize,
     "  tokenize TEXT       --tokenizer T -o TOKENS.bin: encode a text file with a\n"
     "                      SentencePiece .model or a Hugging Face tokenizer.json into an\n"
     "                      llm.c token file (uint16 tokens), for --data\n",
     "--tokenizer", 0},
    {"backends", cmd_backends, "  backends            list the backends and what each can do\n",
     NULL, 0},
    {"cache", cmd_cache,
     "  cache               the compile cache: its directory, entries, size and limit;\n"
     "                      --clear removes every entry, --trim trims it to the limit now\n"
     "                      (AXLC_CACHE_MAX, default 1G; 0: none; least recently used\n"
     "                      first, never an entry used in the last hour)\n",
     "--clear --trim", 0},
};
#define NCOMMANDS ((int)(sizeof commands / sizeof commands[0]))

static const Command *command_find(const char *name) {
  for (int i = 0; name && i < NCOMMANDS; i++)
    if (!strcmp(commands[i].name, name)) return &commands[i];
  return NULL;
}

/* Whether command c takes `opt` as one of its own options. */
static bool takes(const Command *c, const char *opt) {
  size_t n = strlen(opt);
  for (const char *o = c && c->options ? c->options : ""; (o = strstr(o, opt)); o += n)
    if ((o == c->options || o[-1] == ' ') && (o[n] == ' ' || !o[n])) return true;
  return false;
}

/* The command that takes `opt` as its own, or NULL. */
static const Command *owner(const char *opt) {
  for (int i = 0; i < NCOMMANDS; i++)
    if (takes(&commands[i], opt)) return &commands[i];
  return NULL;
}

static void usage(FILE *out) {
  fprintf(out, "usage: axlc COMMAND [MODEL.json] [options]\n"
               "\n"
               "commands:\n");
  for (int i = 0; i < NCOMMANDS; i++) fputs(commands[i].help, out);
  fprintf(out,
          "\n"
          "options:\n"
          "  --target T          select the first mesh rule matching T (cpu, cpu-4,\n"
          "                      gpu-h100-256, tpu-v5p-512, ...) and size the mesh for it\n"
          "  --backend NAME      (compile, run) the code generator; default: the target's\n"
          "                      (cpu: llvm); --target interp is --target cpu --backend interp\n"
          "  --apply MOD         apply a modifier file (repeatable, in order); a name not\n"
          "                      found is looked up in AXLC_PATH and the shipped modifiers\n"
          "                      (--apply moe, --apply rope)\n"
          "  --set PATH=VALUE    set a value, e.g. --set /model/decoder/num_layers=4\n"
          "  --json              (params, memcheck) machine-readable output\n"
          "  --no-memcheck       (compile) compile even when the job does not fit the target\n"
          "  --jobs N            (compile, run) generate code on N threads (default: one per CPU)\n"
          "  --no-cache          (compile, run) neither use nor fill the compile cache\n"
          "                      ($AXLC_CACHE_DIR, else ~/.cache/axlc; AXLC_NO_CACHE=1 is\n"
          "                      the same as --no-cache)\n"
          "  -h, --help          this help\n"
          "\n"
          "passes (axlc ir --after PASS), in pipeline order:\n");
  for (int i = 0; i < drv_npasses; i++)
    fprintf(out, "  %-19s %s\n", drv_passes[i].name, drv_passes[i].what);
}

static int need_value(int i, int argc, char **argv) {
  if (i + 1 < argc) return 0;
  fprintf(stderr, "error: %s needs a value\n", argv[i]);
  return -1;
}

static int add(const char **list, int *n, const char *v, const char *flag) {
  if (*n >= MAX_LIST) {
    fprintf(stderr, "error: too many %s options (at most %d)\n", flag, MAX_LIST);
    return -1;
  }
  list[(*n)++] = v;
  return 0;
}

/* --max-restarts, --min-ranks, -n: a whole number in [lo, hi]. */
static int int_value(const char *flag, const char *v, long lo, long hi, int *out) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || end == v || n < lo || n > hi) {
    fprintf(stderr, "error: %s %s: expected a whole number from %ld to %ld\n", flag, v, lo, hi);
    return -1;
  }
  *out = (int)n;
  return 0;
}

/* The supervisor's options (launch, run: the command takes them); 1 when argv[*i] is one, -1
 * on a bad value. */
static int supervisor_option(int *i, int argc, char **argv, Args *a) {
  const char *s = argv[*i];
  bool ours = !strcmp(s, "--max-restarts") || !strcmp(s, "--min-ranks") ||
              !strcmp(s, "--backoff") || !strcmp(s, "--report") || !strcmp(s, "-n");
  if (!ours || !takes(a->cmd, s)) return 0;
  if (need_value(*i, argc, argv)) return -1;
  const char *v = argv[++*i];
  if (!strcmp(s, "--report")) {
    a->sv.report = v;
    return 1;
  }
  if (!strcmp(s, "--backoff")) {
    char *end;
    double d = strtod(v, &end);
    if (*end || end == v || !(d >= 0 && d <= 60)) {
      fprintf(stderr, "error: --backoff %s: expected seconds from 0 to 60\n", v);
      return -1;
    }
    a->sv.backoff = d;
    return 1;
  }
  a->restarts_given = a->restarts_given || !strcmp(s, "--max-restarts");
  int *slot = !strcmp(s, "-n")            ? &a->ranks
              : !strcmp(s, "--min-ranks") ? &a->sv.min_ranks
                                          : &a->sv.max_restarts;
  return int_value(s, v, !strcmp(s, "--max-restarts") ? 0 : 1, 4096, slot) ? -1 : 1;
}

static int parse_args(int argc, char **argv, Args *a) {
  memset(a, 0, sizeof *a);
  a->fe.apply = a->apply;
  a->fe.sets = a->sets;
  a->sv.backoff = 1;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    const Command *c = a->cmd;
    unsigned flags = c ? c->flags : 0;
    int sup = supervisor_option(&i, argc, argv, a);
    if (sup < 0) return -1;
    if (sup) continue;
    if (!strcmp(s, "--") && (flags & CMD_DASH)) {
      for (i++; i < argc; i++) /* the trainer's options, all of them */
        if (add(a->rest, &a->nrest, argv[i], "trainer")) return -1;
      break;
    }
    if ((!strcmp(s, "-h") || !strcmp(s, "--help")) && (flags & CMD_TRAINER_OPTIONS)) {
      if (add(a->rest, &a->nrest, s, "trainer")) return -1; /* the trainer's help */
    } else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(s, "--target")) {
      if (need_value(i, argc, argv)) return -1;
      a->fe.target = argv[++i];
    } else if (!strcmp(s, "--apply")) {
      if (need_value(i, argc, argv) || add(a->apply, &a->fe.napply, argv[++i], s)) return -1;
    } else if (!strcmp(s, "--set")) {
      if (need_value(i, argc, argv) || add(a->sets, &a->fe.nsets, argv[++i], s)) return -1;
    } else if (!strcmp(s, "--json")) {
      a->json = true;
    } else if (!strcmp(s, "--no-memcheck")) {
      a->no_memcheck = true;
    } else if (!strcmp(s, "--no-cache")) {
      a->no_cache = true;
    } else if (!strcmp(s, "--jobs")) {
      if (need_value(i, argc, argv)) return -1;
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || n < 1 || n > 64) {
        fprintf(stderr, "error: --jobs %s: expected a whole number from 1 to 64\n", argv[i]);
        return -1;
      }
      a->jobs = (int)n;
    } else if (!strcmp(s, "--merge-lora") && takes(c, s)) {
      a->merge_lora = true;
    } else if (!strcmp(s, "--force-base") && takes(c, s)) {
      a->force_base = true;
    } else if (!strcmp(s, "--base") && takes(c, s)) {
      if (need_value(i, argc, argv)) return -1;
      a->base = argv[++i];
    } else if ((!strcmp(s, "--dtype") || !strcmp(s, "--max-shard-size")) && takes(c, s)) {
      if (need_value(i, argc, argv)) return -1;
      *(!strcmp(s, "--dtype") ? &a->dtype : &a->max_shard) = argv[++i];
    } else if (!strcmp(s, "--from") || !strcmp(s, "--to")) {
      if (need_value(i, argc, argv)) return -1;
      *(!strcmp(s, "--from") ? &a->from : &a->to) = argv[++i];
    } else if (!strcmp(s, "--label") && takes(c, s)) {
      if (need_value(i, argc, argv) || add(a->labels, &a->nlabels, argv[++i], s)) return -1;
    } else if (!strcmp(s, "--plot") || !strcmp(s, "--devices")) {
      if (need_value(i, argc, argv)) return -1;
      *(!strcmp(s, "--plot") ? &a->plot : &a->devices) = argv[++i];
    } else if (!strcmp(s, "--after") || !strcmp(s, "--format") || !strcmp(s, "--emit") ||
               !strcmp(s, "-o") || !strcmp(s, "--cpu") || !strcmp(s, "--features") ||
               !strcmp(s, "--backend")) {
      if (need_value(i, argc, argv)) return -1;
      const char **slot = !strcmp(s, "--after")     ? &a->after
                          : !strcmp(s, "--format")  ? &a->format
                          : !strcmp(s, "--emit")    ? &a->emit
                          : !strcmp(s, "-o")        ? &a->output
                          : !strcmp(s, "--cpu")     ? &a->cpu
                          : !strcmp(s, "--backend") ? &a->backend
                                                    : &a->features;
      *slot = argv[++i];
    } else if (!strcmp(s, "--tokenizer") && takes(c, s)) {
      if (need_value(i, argc, argv)) return -1;
      a->tokenizer = argv[++i];
    } else if (s[0] == '-' && (flags & CMD_TRAINER_OPTIONS)) {
      /* the trainer's option and its value, unless it is a flag; options start with "--",
       * so "-1" is a value (a bad one, which the option's parser reports) */
      if (add(a->rest, &a->nrest, s, "trainer")) return -1;
      bool flag = !strcmp(s, "--resume") || !strcmp(s, "--partial") || !strcmp(s, "--config") ||
                  !strcmp(s, "--init-allow-unused") || strchr(s, '=');
      if (!flag && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 &&
          add(a->rest, &a->nrest, argv[++i], "trainer"))
        return -1;
    } else if ((!strcmp(s, "--clear") || !strcmp(s, "--trim")) && takes(c, s)) {
      *(!strcmp(s, "--clear") ? &a->clear : &a->trim) = true;
    } else if (s[0] == '-' && owner(s) && a->command) {
      fprintf(stderr, "error: %s is an option of axlc %s, not of axlc %s\n", s, owner(s)->name,
              a->command);
      return -1;
    } else if (s[0] == '-') {
      fprintf(stderr, "error: unknown option %s (see axlc --help)\n", s);
      return -1;
    } else if (!a->command) {
      a->command = s;
      a->cmd = command_find(s); /* NULL: dispatch says it is unknown */
    } else if (!a->model) {
      a->model = s;
    } else if (!a->input && (flags & CMD_WEIGHTS)) {
      a->input = s;
    } else if (flags & CMD_MORE_FILES) {
      if (add(a->more, &a->nmore, s, "metrics file")) return -1;
    } else {
      fprintf(stderr, "error: unexpected argument %s\n", s);
      return -1;
    }
  }
  if (!a->command) {
    usage(stderr);
    return -1;
  }
  return 0;
}

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Where the shipped configs and the runtime are. An installed axlc is PREFIX/bin/axlc next to
 * PREFIX/share/axlc and PREFIX/lib; one run from the build tree uses the source tree's models/
 * and the runtime it was built with. */
static void find_installation(Args *a) {
  char exe[PATH_MAX], prefix[PATH_MAX], path[PATH_MAX + 32];
  if (realpath("/proc/self/exe", exe)) {
    snprintf(path, sizeof path, "%s/..", dirname(exe)); /* PREFIX/bin/.. */
    struct stat st;
    if (realpath(path, prefix) &&
        snprintf(path, sizeof path, "%s/lib/libaxrt.a", prefix) < (int)sizeof path &&
        stat(path, &st) == 0 &&
        snprintf(a->share, sizeof a->share, "%s/share/axlc", prefix) < (int)sizeof a->share &&
        is_dir(a->share)) {
      snprintf(a->lib, sizeof a->lib, "%s/lib", prefix);
      return;
    }
  }
  a->lib[0] = 0;
  snprintf(a->share, sizeof a->share, "%s", AXLC_SOURCE_MODELS);
}

/* The search path of config files (frontend/find.c): AXLC_PATH (':'-separated), then share. */
static int search_path(Args *a) {
  find_installation(a);
  const char *env = getenv("AXLC_PATH");
  a->axlc_path = fe_asprintf("%s", env ? env : "");
  int n = 0;
  for (char *p = a->axlc_path, *next; p; p = next) {
    next = strchr(p, ':');
    if (next) *next++ = 0;
    if (*p && add(a->search, &n, p, "AXLC_PATH directory")) return -1;
  }
  if (is_dir(a->share) && add(a->search, &n, a->share, "AXLC_PATH directory")) return -1;
  a->fe.search = (FeSearch){a->search, n};
  return 0;
}

/* Resolves the model; prints diagnostics on failure. */
static json_object *resolve(FeDiag *d, const Args *a) {
  if (!a->model) {
    fprintf(stderr, "error: axlc %s needs a MODEL.json\n", a->command);
    return NULL;
  }
  const char *rule = NULL;
  json_object *cfg = fe_resolve(d, a->model, &a->fe, &rule);
  if (!cfg)
    fe_diag_print(d, stderr);
  else if (a->fe.target && rule)
    fprintf(stderr, "note: target %s matched mesh rule \"%s\"\n", a->fe.target, rule);
  else if (a->fe.target)
    fprintf(stderr, "note: target %s matched no mesh rule; the config's mesh stands\n",
            a->fe.target);
  json_object *policy = cfg ? fe_get_child(cfg, "precision") : NULL;
  if (policy && fe_origin_key(policy, "compute") == a->fe.bf16_why) /* auto was settled */
    fprintf(stderr, "note: precision: %s compute (%s)\n", fe_get_str(policy, "compute"),
            a->fe.bf16_why);
  return cfg;
}

/* config and params describe the model, which is fine; the tensors of its
 * training step (sized by batch and sequence) only exist in a graph, so a
 * step too large is an error for ir, compile and run and a warning here. */
static void warn_step(const FeBuild *b) {
  if (b->step_error)
    fprintf(stderr, "warning: axlc ir, compile and run refuse this config: %s\n", b->step_error);
}

static int cmd_config(Args *a) {
  FeDiag d;
  fe_diag_init(&d);
  json_object *cfg = resolve(&d, a);
  int rc = 1;
  if (cfg) {
    char *text = fe_json_canonical(cfg);
    fputs(text, stdout);
    free(text);
    FeBuild b = {0}; /* resolution built it once, and succeeded */
    int64_t devices;
    if (fe_target_devices(&d, a->fe.target, &devices) == 0 &&
        fe_build(&b, &d, a->model, cfg, devices) == 0)
      warn_step(&b);
    fe_build_free(&b);
    json_object_put(cfg);
    rc = 0;
  }
  fe_diag_free(&d);
  return rc;
}

static int cmd_params(Args *a) {
  FeDiag d;
  fe_diag_init(&d);
  json_object *cfg = resolve(&d, a);
  int rc = 1;
  FeBuild b = {0};
  int64_t devices;
  if (cfg && fe_target_devices(&d, a->fe.target, &devices) == 0 &&
      fe_build(&b, &d, a->model, cfg, devices) == 0) {
    if (a->json) {
      char *s = fe_params_json(&b, cfg);
      fputs(s, stdout);
      free(s);
    } else {
      fe_params_print(&b, cfg, stdout);
    }
    warn_step(&b);
    rc = 0;
  } else if (cfg) {
    fe_diag_print(&d, stderr);
  }
  if (cfg) fe_build_free(&b);
  json_object_put(cfg);
  fe_diag_free(&d);
  return rc;
}

static const char *type_name(const FeField *f) {
  static const char *const names[] = {
      "int",    "float",    "bool",        "string",          "enum",
      "module", "int list", "string list", "partition specs", "remat"};
  return names[f->type];
}

static int cmd_kinds(Args *a) {
  if (!a->model) {
    for (int i = 0; i < fe_kind_count(); i++)
      printf("%-18s %s\n", fe_kind_at(i)->name, fe_kind_at(i)->doc);
    return 0;
  }
  const FeKind *k = fe_kind_find(a->model);
  if (!k) {
    fprintf(stderr, "error: unknown module kind \"%s\" (see axlc kinds)\n", a->model);
    return 1;
  }
  printf("%s: %s\n", k->name, k->doc);
  for (int i = 0; i < k->nfields; i++) {
    const FeField *f = &k->fields[i];
    printf("  %-24s %-15s %s%s%s%s  %s\n", f->name, type_name(f), f->dflt ? "default " : "required",
           f->dflt ? f->dflt : "", f->choices ? "  one of " : "", f->choices ? f->choices : "",
           f->doc);
  }
  return 0;
}

/* Loads and lowers the model; prints diagnostics on failure. */
static int lower(DrvJob *j, const Args *a, const char *after) {
  if (!a->model) {
    fprintf(stderr, "error: axlc %s needs a MODEL.json\n", a->command);
    return -1;
  }
  if (drv_load(j, a->model, &a->fe) || drv_lower(j, after)) {
    fe_diag_print(&j->diag, stderr);
    return -1;
  }
  return 0;
}

static int cmd_ir(Args *a) {
  const char *format = a->format ? a->format : "text";
  if (strcmp(format, "text") && strcmp(format, "dot")) {
    fprintf(stderr, "error: --format %s: expected text or dot\n", format);
    return 1;
  }
  DrvJob j;
  int rc = lower(&j, a, a->after) ? 1 : 0;
  if (rc == 0 && !strcmp(format, "dot"))
    ir_graph_print_dot(j.graph, stdout);
  else if (rc == 0) {
    int pa = ir_mesh_axis(&j.graph->mesh, IR_PIPELINE_AXIS);
    if (pa >= 0 && j.last_pass && !strcmp(j.last_pass, "pipeline")) { /* the schedule first */
      json_object *mesh = fe_get_child(j.cfg, "mesh");
      PassPipeline p = {.stages = (int32_t)j.graph->mesh.sizes[pa],
                        .schedule = pass_schedule_parse(fe_get_str(mesh, "pipeline_schedule")),
                        .virtual_stages = (int32_t)fe_get_int(mesh, "pipeline_virtual"),
                        .microbatches = j.facts.microbatches};
      pass_pipeline_timeline(&p, stdout);
    }
    ir_graph_print(j.graph, stdout);
  }
  drv_free(&j);
  return rc;
}

static int memcheck_job(const Args *a, DrvJob *j, bool suggest, FILE *out);

/* ---- backends: run, compile ---- */

static void print_emits(const Backend *b, FILE *out) {
  for (const BackendEmit *e = b->emits; e && e->name; e++) {
    bool last = !e[1].name;
    fprintf(out, "%s%s", e == b->emits ? "" : last ? " or " : ", ", e->name);
  }
}

static int cmd_backends(Args *a) {
  (void)a;
  for (int i = 0; backend_table[i]; i++) {
    const Backend *b = backend_table[i];
    printf("%-8s %s\n", b->name, b->doc);
    printf("         run: %s  compile: ", b->run || b->run_trainer ? "yes" : "no");
    if (b->compile)
      print_emits(b, stdout);
    else
      printf("no");
    printf("  trainer executable: %s  dtypes:", b->standalone ? "yes" : "no");
    for (int dt = 0; dt < DT_COUNT; dt++)
      if (b->dtypes & 1u << dt) printf(" %s", ir_dtype_name((IrDType)dt));
    printf("\n");
  }
  return 0;
}

static const char *devices_file(const Args *a, char *buf, size_t cap);

/* The device kind of --target in the device table; -1 when the table has none (no message). */
static int target_device(const Args *a, DrvDevice *dev) {
  char buf[4096];
  FeDiag d;
  fe_diag_init(&d);
  int rc = a->fe.target ? drv_device_lookup(&d, devices_file(a, buf, sizeof buf), a->fe.target, dev)
                        : -1;
  fe_diag_free(&d);
  return rc;
}

/* The backend of run and compile: --backend NAME, else the one the device table names for the
 * target's kind ("backend": cpu: llvm, opencl and gpu-*: opencl), else the backend whose target
 * names match (a table without the kind). --target interp is --backend interp with the cpu mesh
 * rule; it rewrites a->fe.target. */
static const Backend *pick_backend(Args *a) {
  char names[256];
  backend_names(names, sizeof names);
  const char *name = a->backend;
  if (a->fe.target && !strcmp(a->fe.target, "interp")) {
    if (name && strcmp(name, "interp") != 0) {
      fprintf(stderr, "error: --target interp means --backend interp, not --backend %s\n", name);
      return NULL;
    }
    name = "interp";
    a->fe.target = "cpu";
  } else if (name && !a->fe.target) {
    a->fe.target = "cpu"; /* every backend here runs on the host */
  }
  DrvDevice dev;
  if (!name && target_device(a, &dev) == 0) {
    if (!dev.backend[0]) {
      fprintf(stderr,
              "error: axlc %s: --target %s: no backend trains on %s (%s); axlc memcheck plans "
              "for it (expected a kind whose \"backend\" the device table names: cpu, opencl, "
              "gpu-h100, ...)\n",
              a->command, a->fe.target, dev.name, dev.doc);
      return NULL;
    }
    const Backend *t = backend_find(dev.backend);
    if (t) return t;
    if (strcmp(dev.backend, "llvm") != 0) {
      fprintf(stderr,
              "error: axlc %s: --target %s needs the %s backend, which this axlc was built "
              "without (axlc backends lists those it has)\n",
              a->command, a->fe.target, dev.backend);
      return NULL;
    }
  }
  const Backend *b = name ? backend_find(name) : backend_for_target(a->fe.target);
  if (name && !b)
    fprintf(stderr, "error: unknown backend '%s' (expected one of: %s)\n", name, names);
  else if (!b && backend_find("llvm"))
    fprintf(stderr,
            "error: axlc %s: --target %s is not available (expected cpu, or interp for "
            "the reference interpreter)\n",
            a->command, a->fe.target ? a->fe.target : "(none)");
  else if (!b)
    fprintf(stderr,
            "error: axlc %s: --target %s is not available (this axlc was built without "
            "LLVM; expected --target interp)\n",
            a->command, a->fe.target ? a->fe.target : "(none)");
  return b;
}

static BackendOptions backend_options(Args *a) {
  BackendOptions o = {0};
  o.cpu = a->cpu;
  o.features = a->features;
  o.runtime_dir = a->lib[0] ? a->lib : NULL;
  bool cache = !a->no_cache && backend_cache_dir_default(a->cache_dir, sizeof a->cache_dir);
  o.cache_dir = cache ? a->cache_dir : NULL;
  o.cache_max = a->cache_max;
  o.jobs = a->jobs;
  o.progress = true;
  return o;
}

/* AXLC_CACHE_MAX into a->cache_max: a bad value is an error before any work. */
static int cache_limit(Args *a) {
  char err[512];
  if (backend_cache_limit(&a->cache_max, err, sizeof err) == 0) return 0;
  fprintf(stderr, "error: %s\n", err);
  return -1;
}

static int check_inputs(const Args *a, const FeDiag *d, const char *opt, const char *out);

/* The files run's options write (--metrics, --dump, as "--opt FILE" or "--opt=FILE") against
 * every config file the job read: the backend checks them against --data and --init only, as
 * a trainer knows no config file. */
static int check_run_outputs(const Args *a, const FeDiag *d) {
  static const char *const outs[] = {"--metrics", "--dump"};
  for (int i = 0; i < a->nrest; i++)
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
      size_t n = strlen(outs[k]);
      const char *arg = a->rest[i], *val = NULL;
      if (!strncmp(arg, outs[k], n) && arg[n] == '=')
        val = arg + n + 1;
      else if (!strcmp(arg, outs[k]) && i + 1 < a->nrest)
        val = a->rest[i + 1];
      if (val && check_inputs(a, d, outs[k], val)) return -1;
      RtError err; /* a FIFO, a device or a link to write through */
      if (val && rt_file_check_user(val, 1, &err)) {
        fprintf(stderr, "error: %s %s\n", outs[k], err.msg);
        return -1;
      }
    }
  return 0;
}

/* The target's peak FLOP/s from the device table, for the trainer's MFU (none, 0, when the table
 * has no entry for it: MFU is then left out, and the run goes on), and the device kind an
 * OpenCL trainer looks for. */
static void program_peak(const Args *a, BackendProgram *p) {
  static DrvDevice dev; /* p points into it */
  if (target_device(a, &dev) == 0) {
    p->facts.peak_f32 = dev.flops_f32;
    p->facts.peak_bf16 = dev.flops_bf16 > 0 ? dev.flops_bf16 : dev.flops_f32;
    p->device_kind = dev.name;
    p->device_doc = dev.doc;
    p->device_match = dev.opencl_device;
    p->max_alloc = (int64_t)dev.max_alloc;
  }
}

/* run --tokenizer T: its vocabulary against the config's, named by its file, before compiling. */
static int check_run_tokenizer(const Args *a, const DrvJob *j) {
  const char *path = NULL;
  for (int i = 0; i < a->nrest; i++)
    if (!strncmp(a->rest[i], "--tokenizer=", 12))
      path = a->rest[i] + 12;
    else if (!strcmp(a->rest[i], "--tokenizer") && i + 1 < a->nrest)
      path = a->rest[i + 1];
  if (!path) return 0;
  RtTok *tok;
  RtError err;
  int rc = rt_tok_open(&tok, path, &err) || rt_tok_check_vocab(tok, j->facts.vocab, a->model, &err);
  if (rc) fprintf(stderr, "error: --tokenizer: %s\n", err.msg);
  rt_tok_close(tok);
  return rc ? -1 : 0;
}

static int check_output(const Args *a, const char *opt, const char *out);
static int check_report(const Args *a);

static int parse_args(int argc, char **argv, Args *a);
static int search_path(Args *a);
static int cmd_compile(Args *a);
static int read_text(const char *path, char **text, size_t *n);

/* The supervisor's elastic rebuild (launch.h: LaunchRebuild): the job of the resolved config
 * file `config` planned for `to` ranks (drv_elastic_plan), compiled to exe as `axlc compile
 * CONFIG --target cpu-TO --set /learner/microbatches=K --set /mesh/shape=[...] -o EXE` would,
 * memcheck included. */
static int elastic_rebuild(void *ctx, const char *prog, const char *config, int from, int to,
                           const char *exe, LaunchShrink *done) {
  (void)ctx;
  char *text = NULL, why[256];
  size_t len;
  DrvElasticPlan plan;
  if (read_text(config, &text, &len) || drv_elastic_plan(text, from, to, &plan, why, sizeof why)) {
    if (text) fprintf(stderr, "%s: elastic: %s\n", prog, why);
    free(text);
    return -1;
  }
  free(text);
  char target[32], setmb[64], shape[256] = "/mesh/shape=[";
  snprintf(target, sizeof target, to == 1 ? "cpu" : "cpu-%d", to);
  snprintf(setmb, sizeof setmb, "/learner/microbatches=%lld", (long long)plan.microbatches);
  for (int i = 0; i < plan.naxes; i++) /* at most 8 sizes of 20 digits: it fits */
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld%s", i ? "," : "",
             (long long)plan.shape[i], i + 1 == plan.naxes ? "]" : "");
  fprintf(stderr, "%s: elastic: compiling the job for %d ranks: %s %s %s\n", prog, to, target,
          setmb, shape);
  char *argv[] = {"axlc", "compile", (char *)config, "--target", target,      "--set",
                  setmb,  "--set",   shape,          "-o",       (char *)exe, NULL};
  static Args q; /* large; one rebuild at a time */
  int rc = parse_args((int)(sizeof argv / sizeof *argv) - 1, argv, &q) ? 1 : 0;
  if (rc == 0) {
    q.fe.bf16_dot = drv_bf16_dot(q.fe.target, q.cpu, q.features, &q.fe.bf16_why);
    rc = search_path(&q) ? 1 : cmd_compile(&q);
    free(q.axlc_path);
  }
  if (rc != 0) {
    fprintf(stderr, "%s: elastic: the job does not compile for %d ranks (axlc compile exited %d)\n",
            prog, to, rc);
    return -1;
  }
  done->microbatches = plan.microbatches;
  done->global_batch = plan.global_batch;
  return 0;
}

/* What launch and run leave to the supervisor's defaults: restarts (launch 3, run none), one
 * repeat at a step, two failures of a rank before elastic drops it; this axlc rebuilds. */
static void supervisor_defaults(Args *a, const char *prog, int restarts) {
  a->sv.prog = prog;
  if (!a->restarts_given) a->sv.max_restarts = restarts;
  a->sv.same_step = 2;
  a->sv.shrink_after = 2;
  a->sv.rebuild = (LaunchRebuild){elastic_rebuild, a};
}

/* axlc launch TRAINER -n N [supervisor options] -- [trainer options] */
static int cmd_launch(Args *a) {
  if (!a->model || !a->ranks) {
    fprintf(stderr, "error: usage: axlc launch TRAINER -n N [--max-restarts K] [--min-ranks M] "
                    "[--backoff S] [--report FILE.jsonl] -- [trainer options]\n");
    return 1;
  }
  struct stat st;
  const char *why = stat(a->model, &st) != 0      ? strerror(errno)
                    : !S_ISREG(st.st_mode)        ? "not a file"
                    : access(a->model, X_OK) != 0 ? "not executable"
                                                  : NULL;
  if (why) {
    fprintf(stderr,
            "error: axlc launch: %s: %s (expected a trainer executable: axlc compile "
            "MODEL.json --target cpu-%d -o TRAINER)\n",
            a->model, why, a->ranks);
    return 1;
  }
  if (a->sv.min_ranks > a->ranks) {
    fprintf(stderr, "error: axlc launch: --min-ranks %d is more than -n %d\n", a->sv.min_ranks,
            a->ranks);
    return 1;
  }
  if (a->sv.report && (check_output(a, "--report", a->sv.report) || check_report(a))) return 1;
  supervisor_defaults(a, "axlc launch", 3);
  /* TRAINER is a file here (stat found it), never a name to look up in PATH: the elastic
   * planner runs it (TRAINER --config) through execvp, which would search PATH for a bare name */
  char here[4096];
  snprintf(here, sizeof here, "%s%s", strchr(a->model, '/') ? "" : "./", a->model);
  a->sv.trainer = here;
  a->sv.ranks = a->ranks;
  a->sv.argc = a->nrest;
  a->sv.argv = (char *const *)a->rest;
  char *tool = a->ranks > 1 ? launch_launcher() : NULL;
  if (a->ranks > 1 && !tool) {
    fprintf(stderr, "error: %s was not found on PATH\n", launch_in_slurm() ? "srun" : "mpirun");
    return 1;
  }
  a->sv.launcher = tool;
  int rc = launch_supervise(&a->sv);
  free(tool);
  return rc;
}

static int cmd_run(Args *a) {
  if (cache_limit(a) ||
      (a->sv.report && (check_output(a, "--report", a->sv.report) || check_report(a))))
    return 1;
  const Backend *b = pick_backend(a);
  if (!b) return 1;
  if (!b->run && !b->run_trainer) {
    fprintf(stderr, "error: backend %s cannot train in process; use axlc compile\n", b->name);
    return 1;
  }
  char *argv[MAX_LIST + 2] = {"axlc run"};
  for (int i = 0; i < a->nrest; i++) argv[i + 1] = (char *)a->rest[i];
  if (b->check_run_args) { /* so a typo costs no lowering or compiling */
    FeDiag d;
    fe_diag_init(&d);
    BackendDiag sink = drv_backend_diag(&d);
    int bad = b->check_run_args(a->nrest + 1, argv, &sink);
    fe_diag_print(&d, stderr);
    fe_diag_free(&d);
    if (bad) return 1;
  }
  DrvJob j;
  if (lower(&j, a, NULL) || check_run_outputs(a, &j.diag) || check_run_tokenizer(a, &j)) {
    /* all print their errors */
    drv_free(&j);
    return 1;
  }
  bool supervised = a->restarts_given || a->sv.min_ranks || a->sv.report;
  if (supervised && ir_mesh_devices(&j.graph->mesh) == 1) {
    fprintf(stderr, "error: axlc run: --max-restarts, --min-ranks and --report supervise a job "
                    "of several processes (--target cpu-N); this one runs in this process\n");
    drv_free(&j);
    return 1;
  }
  BackendJob bj;
  BackendOptions o = backend_options(a);
  supervisor_defaults(a, "axlc run", 0);
  int rc = drv_backend_job(&j, b, &bj) ? 1
                                       : (program_peak(a, &bj.program),
                                          drv_run(&j, b, &bj, &o, &a->sv, a->nrest + 1, argv));
  fe_diag_print(&j.diag, stderr);
  if (rc == 0 && j.diag.n) rc = 1;
  drv_free(&j);
  return rc;
}

/* The emit kind of compile, checked before any work. */
static const BackendEmit *pick_emit(const Args *a, const Backend *b) {
  if (!b->compile) {
    fprintf(stderr, "error: backend %s cannot compile a trainer; use --backend llvm\n", b->name);
    return NULL;
  }
  const BackendEmit *e = a->emit ? backend_emit_find(b, a->emit) : b->emits;
  if (!e) {
    fprintf(stderr, "error: --emit %s: expected ", a->emit);
    print_emits(b, stderr);
    fprintf(stderr, "\n");
  } else if (!a->output && e->needs_file) {
    fprintf(stderr, "error: axlc compile needs -o FILE\n");
    return NULL;
  }
  return e;
}

/* Why `out` cannot be written, or NULL. Checked before any work: an existing directory, a
 * missing parent or one that cannot be written in would otherwise fail at the very end. */
static char *output_problem(const char *out) {
  struct stat st;
  if (!*out) return fe_asprintf("-o: expected a file name, got \"\"");
  if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
    return fe_asprintf("%s: is a directory (expected a file name for the output)", out);
  char *copy = fe_asprintf("%s", out), *why = NULL;
  const char *dir = dirname(copy);
  if (stat(dir, &st) != 0)
    why = errno == ENOENT
              ? fe_asprintf("%s: the directory %s does not exist", out, dir)
              : fe_asprintf("%s: cannot use the directory %s: %s", out, dir, strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    why = fe_asprintf("%s: %s is not a directory", out, dir);
  else if (access(dir, W_OK | X_OK) != 0)
    why = fe_asprintf("%s: cannot write in the directory %s: %s", out, dir, strerror(errno));
  else if (access(out, F_OK) == 0 && access(out, W_OK) != 0)
    why = fe_asprintf("%s: cannot write: %s", out, strerror(errno));
  free(copy);
  return why;
}

/* Every file the command reads (to free; *count of them): those its command line names and,
 * once the job is loaded, every config file resolution opened (bases, modifiers, mesh rules,
 * the device table) into d. */
static RtPathArg *input_args(const Args *a, const FeDiag *d, int *count) {
  int nfiles = d ? d->nfiles : 0, n = 0;
  RtPathArg *in = base_xcalloc((size_t)(5 + a->fe.napply + a->nmore + nfiles), sizeof *in);
  bool plot = !strcmp(a->command, "plot");
  bool launch = !strcmp(a->command, "launch");
  in[n++] = (RtPathArg){plot     ? "the metrics file"
                        : launch ? "the trainer"
                                 : "the config",
                        a->model, NULL};
  for (int i = 0; i < a->nmore; i++) in[n++] = (RtPathArg){"the metrics file", a->more[i], NULL};
  /* convert reads a checkpoint, step or Hugging Face model directory as the weights: nothing
   * inside it is an output */
  struct stat st;
  bool dir = a->input && stat(a->input, &st) == 0 && S_ISDIR(st.st_mode);
  in[n++] = (RtPathArg){"the weights", a->input, dir ? "" : NULL};
  in[n++] = (RtPathArg){"--devices", a->devices, NULL};
  /* convert --merge-lora --base: the run's base weights, which its checkpoints need to resume */
  bool base_dir = a->base && stat(a->base, &st) == 0 && S_ISDIR(st.st_mode);
  in[n++] = (RtPathArg){"--base", a->base, base_dir ? "" : NULL};
  for (int i = 0; i < a->fe.napply; i++) in[n++] = (RtPathArg){"--apply", a->apply[i], NULL};
  for (int i = 0; i < nfiles; i++) in[n++] = (RtPathArg){"the config file", d->files[i], NULL};
  *count = n;
  return in;
}

/* The output `out` (given by `opt`) against every file the command reads (input_args). An
 * output that is an input would destroy it. */
static int check_inputs(const Args *a, const FeDiag *d, const char *opt, const char *out) {
  int n;
  RtPathArg *in = input_args(a, d, &n);
  RtError err;
  RtPathArg o = {opt, out, NULL};
  int rc = rt_file_check_outputs(&o, 1, in, n, &err);
  if (rc) fprintf(stderr, "error: %s\n", err.msg);
  free(in);
  return rc;
}

static int check_output(const Args *a, const char *opt, const char *out) {
  char *why = output_problem(out);
  int bad = why != NULL;
  if (bad) fprintf(stderr, "error: %s\n", why);
  free(why);
  if (bad || check_inputs(a, NULL, opt, out)) return -1;
  RtError err; /* a FIFO would block the write; a link would be written through */
  if (rt_file_check_user(out, 1, &err) == 0) return 0;
  fprintf(stderr, "error: %s %s\n", opt, err.msg);
  return -1;
}

/* The path `path` names, resolved: the file's real path, else its directory's and its name (a
 * file not there yet), else the path as given. */
static void resolved(const char *path, char *out) {
  if (realpath(path, out)) return;
  char *copy = fe_asprintf("%s", path), *base = fe_asprintf("%s", path), dir[PATH_MAX];
  char *full = realpath(dirname(copy), dir)
                   ? fe_asprintf("%s/%s", strcmp(dir, "/") ? dir : "", basename(base))
                   : fe_asprintf("%s", path);
  snprintf(out, PATH_MAX, "%.*s", PATH_MAX - 1, full);
  free(full);
  free(copy);
  free(base);
}

/* The value of the trainer option `name` in a->rest (launch.h: launch_option), or NULL. */
static const char *trainer_option(const Args *a, const char *name) {
  return launch_option(a->nrest, a->rest, name);
}

/* launch and run --report FILE against the files the trainer reads and writes: one of them, or
 * anything inside its --ckpt-dir (the lock, a step), would be overwritten by the report or mixed
 * with it. Compared by identity (device and inode) and, for files not there yet, by the resolved
 * path; refused before anything runs. */
static int check_report(const Args *a) {
  static const char *const files[] = {"--data",    "--eval-data", "--init",    "--tokenizer",
                                      "--metrics", "--dump",      "--ckpt-dir"};
  char rep[PATH_MAX], other[PATH_MAX];
  resolved(a->sv.report, rep);
  for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
    const char *v = trainer_option(a, files[k]);
    if (!v || !*v) continue;
    resolved(v, other);
    bool dir = !strcmp(files[k], "--ckpt-dir");
    size_t n = strcmp(other, "/") ? strlen(other) : 0;
    if (rt_file_same(a->sv.report, v) || !strcmp(rep, other)) {
      fprintf(stderr,
              "error: --report %s is the trainer's %s %s; refusing to write the report over it "
              "(choose another report path)\n",
              a->sv.report, files[k], v);
      return -1;
    }
    if (dir && !strncmp(rep, other, n) && rep[n] == '/') {
      fprintf(stderr,
              "error: --report %s lies inside the trainer's --ckpt-dir %s, which the trainer "
              "writes and prunes; refusing to write the report there (choose a path outside "
              "it)\n",
              a->sv.report, v);
      return -1;
    }
  }
  return 0;
}

static int cmd_compile(Args *a) {
  if (cache_limit(a)) return 1;
  DrvDevice dev;
  const char *t = a->fe.target;
  bool cpu =
      t && (!strcmp(t, "cpu") || !strcmp(t, "interp") ||
            (!strncmp(t, "cpu-", 4) && t[4] && strspn(t + 4, "0123456789") == strlen(t + 4)));
  if (!a->backend && !cpu && !(t && backend_for_target(t)) && target_device(a, &dev) != 0) {
    fprintf(stderr,
            "error: axlc compile: --target %s is not available (expected --target cpu, cpu-N, "
            "opencl, or a GPU kind of the device table: gpu-h100-1, ...)\n",
            a->fe.target ? a->fe.target : "(none)");
    return 1;
  }
  const Backend *b = pick_backend(a);
  const BackendEmit *e = b ? pick_emit(a, b) : NULL;
  if (!e || (a->output && check_output(a, "-o", a->output))) return 1;
  DrvJob j;
  int rc = 1;
  if (lower(&j, a, NULL) == 0 && !(a->output && check_inputs(a, &j.diag, "-o", a->output))) {
    int fit = 0;
    if (!a->no_memcheck) { /* a job that cannot fit its target is not worth a trainer */
      char *text = NULL;
      size_t len = 0;
      FILE *mem = open_memstream(&text, &len);
      Args q = *a;
      q.json = false;
      q.plot = NULL;
      fit = mem ? memcheck_job(&q, &j, true, mem) : 0;
      if (mem) fclose(mem);
      if (fit == 1)
        fprintf(stderr,
                "error: the job does not fit --target %s (compile anyway with "
                "--no-memcheck):\n%s",
                a->fe.target ? a->fe.target : "cpu", text);
      free(text);
    }
    if (fit == 0) {
      BackendJob bj;
      BackendOptions o = backend_options(a);
      rc = drv_backend_job(&j, b, &bj) || (program_peak(a, &bj.program), 0) ||
                   b->compile(&bj, &o, e->name, a->output)
               ? 1
               : 0;
      fe_diag_print(&j.diag, stderr);
    }
  }
  drv_free(&j);
  return rc;
}

/* ---- memcheck ---- */

/* The device table: --devices, else devices.json next to the model, else the shipped one
 * (the installed share/axlc, or the source tree's models/). */
static const char *devices_file(const Args *a, char *buf, size_t cap) {
  if (a->devices) return a->devices;
  char *copy = fe_asprintf("%s", a->model);
  snprintf(buf, cap, "%s/rules/devices.json", dirname(copy));
  free(copy);
  if (access(buf, R_OK) == 0) return buf;
  char *first = fe_asprintf("%s", buf);
  bool fits = snprintf(buf, cap, "%s/rules/devices.json", a->share) < (int)cap;
  if (!fits || access(buf, R_OK) != 0)
    snprintf(buf, cap, "%s", first); /* the error names the first place looked */
  free(first);
  return buf;
}

/* Runs the report on a lowered job: prints it (text or JSON), writes the plot; 0 when it fits. */
static int memcheck_job(const Args *a, DrvJob *j, bool suggest, FILE *out) {
  char buf[4096];
  DrvDevice dev;
  DrvMemReport r;
  if (drv_device_lookup(&j->diag, devices_file(a, buf, sizeof buf), a->fe.target, &dev) ||
      drv_memcheck_on(j, &dev, &r)) {
    fe_diag_print(&j->diag, stderr);
    return -1;
  }
  bool fits = drv_memreport_fits(&r, &dev);
  if (a->json) {
    char *s = drv_memreport_json(&r, &dev, 20);
    fputs(s, out);
    free(s);
  } else {
    drv_memreport_print(&r, &dev, 12, out);
    if (!fits && suggest) { /* tried, not guessed: each lowered and planned again */
      DrvMemFixes fixes;
      drv_memcheck_fixes(a->model, &a->fe, j, &dev, &fixes);
      drv_memfixes_print(&fixes, &dev, out);
    }
  }
  int rc = fits ? 0 : 1;
  if (a->plot && check_inputs(a, &j->diag, "--plot", a->plot)) { /* the device table is read now */
    rc = -1;
  } else if (a->plot) {
    RtError err;
    FILE *f = rt_file_open(a->plot, "w", &err);
    if (!f) {
      fprintf(stderr, "error: --plot %s\n", err.msg);
      rc = -1;
    } else if (drv_memreport_svg(&r, &dev, f) || fclose(f)) {
      fprintf(stderr, "error: %s: cannot write the plot: %s\n", a->plot, strerror(errno));
      rc = -1;
    }
  }
  drv_memreport_free(&r);
  return rc;
}

static int cmd_memcheck(Args *a) {
  if (!a->fe.target) {
    fprintf(stderr,
            "error: axlc memcheck needs --target (cpu, cpu-4, gpu-h100-256, tpu-v5p-512, ...)\n");
    return 1;
  }
  if (a->plot && check_output(a, "--plot", a->plot)) return 1;
  DrvJob j;
  int rc = lower(&j, a, NULL) ? 1 : memcheck_job(a, &j, true, stdout) ? 1 : 0;
  drv_free(&j);
  return rc;
}

static int cmd_plot(Args *a) {
  if (!a->model || !a->output) {
    fprintf(stderr,
            "error: usage: axlc plot METRICS.jsonl [MORE.jsonl ...] -o FILE.svg [--label NAME "
            "...]\n");
    return 1;
  }
  int n = 1 + a->nmore;
  if (a->nlabels && a->nlabels != n) {
    fprintf(stderr,
            "error: axlc plot: %d --label for %d metrics files (expected none, or one per file "
            "in the order of the files)\n",
            a->nlabels, n);
    return 1;
  }
  if (check_output(a, "-o", a->output)) return 1;
  const char *files[MAX_LIST + 1] = {a->model};
  for (int i = 0; i < a->nmore; i++) files[1 + i] = a->more[i];
  return plot_metrics_many(files, a->nlabels ? a->labels : NULL, n, a->output) ? 1 : 0;
}

/* The whole file at path, malloc'd and NUL-terminated, into *text and *n; prints the error. */
static int read_text(const char *path, char **text, size_t *n) {
  RtError err;
  FILE *f = rt_file_open(path, "rb", &err);
  struct stat st;
  *text = NULL;
  if (!f || fstat(fileno(f), &st) != 0) {
    fprintf(stderr, "error: %s\n", f ? strerror(errno) : err.msg);
    if (f) fclose(f);
    return -1;
  }
  *text = malloc((size_t)st.st_size + 1);
  *n = *text ? fread(*text, 1, (size_t)st.st_size, f) : 0;
  int bad = !*text || *n != (size_t)st.st_size || ferror(f);
  if (*text) (*text)[*n] = 0; /* a C string too: the elastic plan parses it as JSON */
  fclose(f);
  if (bad) fprintf(stderr, "error: %s: cannot read %lld bytes\n", path, (long long)st.st_size);
  return bad ? -1 : 0;
}

/* axlc tokenize TEXT --tokenizer T -o TOKENS.bin */
static int cmd_tokenize(Args *a) {
  if (!a->model || !a->tokenizer || !a->output) {
    fprintf(stderr,
            "error: usage: axlc tokenize TEXT --tokenizer T.model|tokenizer.json -o TOKENS.bin\n");
    return 1;
  }
  RtError err;
  const RtPathArg out = {"-o", a->output, NULL};
  const RtPathArg in[] = {{"the text", a->model, NULL}, {"--tokenizer", a->tokenizer, NULL}};
  RtTok *tok = NULL;
  char *text = NULL;
  int32_t *ids = NULL;
  int64_t n = 0;
  size_t len = 0;
  int rc = rt_file_check_outputs(&out, 1, in, 2, &err);
  if (!rc && rt_file_check_user(a->output, 1, &err)) { /* a FIFO, a device, a link */
    fprintf(stderr, "error: -o %s\n", err.msg);
    return 1;
  }
  rc = rc || rt_tok_open(&tok, a->tokenizer, &err);
  if (!rc && read_text(a->model, &text, &len)) {
    free(text);
    rt_tok_close(tok);
    return 1;
  }
  if (!rc) rc = rt_tok_encode(tok, text, len, &ids, &n, &err);
  if (!rc) rc = rt_data_write_u16(a->output, ids, n, rt_tok_vocab(tok), &err);
  if (rc)
    fprintf(stderr, "error: %s\n", err.msg);
  else
    printf("%s: %zu bytes -> %lld tokens (%s, vocabulary %lld), %.2f bytes per token\n", a->output,
           len, (long long)n, rt_tok_kind(tok), (long long)rt_tok_vocab(tok),
           n ? (double)len / (double)n : 0.0);
  free(ids);
  free(text);
  rt_tok_close(tok);
  return rc ? 1 : 0;
}

static int cmd_convert(Args *a) {
  const char *fmt = a->from ? a->from : a->to;
  if (a->merge_lora && (!a->model || !a->input || !a->output || fmt)) {
    fprintf(stderr, "error: usage: axlc convert MODEL.json --apply lora --merge-lora "
                    "IN [--base BASE.safetensors] -o OUT.safetensors\n");
    return 1;
  }
  if (!a->merge_lora && (a->base || a->force_base)) {
    fprintf(stderr, "error: %s goes with --merge-lora\n", a->base ? "--base" : "--force-base");
    return 1;
  }
  if (a->force_base && !a->base) {
    fprintf(stderr, "error: --force-base goes with --base BASE (the base weights to merge onto)\n");
    return 1;
  }
  if (a->merge_lora) fmt = "hf"; /* past the format checks: the weights stay axlc's */
  if (!a->model || !a->input || !a->output || (a->from && a->to) || !fmt) {
    fprintf(stderr, "error: usage: axlc convert MODEL.json (--from hf | --to hf [--dtype "
                    "f32|bf16|f16] [--max-shard-size SIZE]) IN.safetensors -o OUT.safetensors\n");
    return 1;
  }
  if (strcmp(fmt, "hf") != 0) {
    fprintf(stderr,
            "error: %s %s: expected hf (Hugging Face GPT-2, Llama or Mixtral safetensors)\n",
            a->from ? "--from" : "--to", fmt);
    return 1;
  }
  if (check_output(a, "-o", a->output)) return 1;
  FeDiag d;
  fe_diag_init(&d);
  json_object *cfg = resolve(&d, a);
  int rc = 1;
  FeBuild b = {0};
  int64_t devices;
  if (cfg && check_inputs(a, &d, "-o", a->output)) { /* a base config named by -o */
    json_object_put(cfg);
    cfg = NULL;
  }
  bool built = cfg && fe_target_devices(&d, a->fe.target, &devices) == 0 &&
               fe_build(&b, &d, a->model, cfg, devices) == 0;
  if (built && a->merge_lora) {
    rc = merge_lora(&b, a->model, a->input, a->base, a->force_base, a->output) ? 1 : 0;
  } else if (built) {
    ConvertOpts o = {.to_hf = a->to != NULL,
                     .dtype = a->dtype,
                     .max_shard = a->max_shard,
                     .in = a->input,
                     .out = a->output};
    RtPathArg *in = input_args(a, &d, &o.ninputs);
    o.inputs = in;
    rc = convert_weights(&b, a->model, &o) ? 1 : 0;
    free(in);
  } else if (cfg)
    fe_diag_print(&d, stderr);
  if (cfg) fe_build_free(&b);
  json_object_put(cfg);
  fe_diag_free(&d);
  return rc;
}

/* ---- cache ---- */

static const char *entry_word(int64_t n) { return n == 1 ? "entry" : "entries"; }

static const char *local_time(time_t t, char *buf, size_t cap) {
  struct tm tm;
  if (!localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M", &tm)) snprintf(buf, cap, "?");
  return buf;
}

static void print_cache(const Args *a, const BackendCacheStats *st) {
  char b1[32], b2[32];
  printf("directory: %s\n", a->cache_dir);
  printf("entries: %lld (%s)", (long long)st->entries,
         fe_human_bytes((double)st->bytes, b1, sizeof b1));
  if (st->entries)
    printf(", last used from %s to %s", local_time(st->oldest, b1, sizeof b1),
           local_time(st->newest, b2, sizeof b2));
  printf("\n");
  if (!a->cache_max) {
    printf("limit: none (AXLC_CACHE_MAX=0)\n");
    return;
  }
  const char *env = getenv("AXLC_CACHE_MAX");
  printf("limit: %s (%s)\n", fe_human_bytes((double)a->cache_max, b1, sizeof b1),
         env && *env ? "AXLC_CACHE_MAX" : "the default; AXLC_CACHE_MAX sets it");
  if (st->bytes > a->cache_max)
    printf("over the limit: the next compile that stores objects, or axlc cache --trim, removes "
           "the least recently used (never one used in the last hour)\n");
}

/* What --clear or --trim removed, and for --trim what is left. */
static void print_removed(const Args *a, const BackendCacheStats *st) {
  char b1[32], b2[32];
  printf("removed %lld %s (%s) from %s", (long long)st->removed, entry_word(st->removed),
         fe_human_bytes((double)st->removed_bytes, b1, sizeof b1), a->cache_dir);
  if (st->temps)
    printf(", and %lld stale temporary file%s", (long long)st->temps, st->temps == 1 ? "" : "s");
  printf("\n");
  if (!a->trim) return;
  printf("left: %lld %s (%s), limit %s\n", (long long)st->entries, entry_word(st->entries),
         fe_human_bytes((double)st->bytes, b1, sizeof b1),
         fe_human_bytes((double)a->cache_max, b2, sizeof b2));
  if (st->bytes > a->cache_max)
    printf("%lld %s used in the last hour kept over the limit (a compile may be about to link "
           "them); axlc cache --clear removes them too\n",
           (long long)st->recent, entry_word(st->recent));
}

/* axlc cache [--clear | --trim]: the compile cache's directory, entries and limit. */
static int cmd_cache(Args *a) {
  const char *flag = a->clear ? "--clear" : a->trim ? "--trim" : NULL;
  if (a->model) {
    fprintf(stderr,
            "error: axlc cache takes no MODEL (got %s); usage: axlc cache [--clear | --trim]\n",
            a->model);
    return 1;
  }
  if (a->clear && a->trim) {
    fprintf(stderr, "error: axlc cache: --clear or --trim, not both\n");
    return 1;
  }
  if (cache_limit(a)) return 1;
  if (rt_cache_off() && !flag) {
    printf("the compile cache is off (AXLC_NO_CACHE=%s)\n", rt_cache_off());
    return 0;
  }
  if (rt_cache_off()) {
    fprintf(stderr,
            "error: axlc cache %s: the compile cache is off (AXLC_NO_CACHE=%s); run it with "
            "AXLC_NO_CACHE unset to name the directory\n",
            flag, rt_cache_off());
    return 1;
  }
  if (!backend_cache_dir_default(a->cache_dir, sizeof a->cache_dir)) {
    fprintf(stderr, "error: axlc cache: no cache directory (expected AXLC_CACHE_DIR, "
                    "XDG_CACHE_HOME or HOME to be set)\n");
    return 1;
  }
  if (a->trim && !a->cache_max) {
    printf("no limit (AXLC_CACHE_MAX=0): nothing to trim in %s\n", a->cache_dir);
    return 0;
  }
  BackendCacheStats st;
  char err[1024];
  int rc = a->clear  ? backend_cache_clear(a->cache_dir, &st, err, sizeof err)
           : a->trim ? backend_cache_trim(a->cache_dir, a->cache_max, &st, err, sizeof err)
                     : backend_cache_stats(a->cache_dir, &st, err, sizeof err);
  /* After a failure only what was removed is worth a line: "removed 0 entries" next to the
   * error would read as a success. */
  if (flag && (rc == 0 || st.removed || st.temps))
    print_removed(a, &st);
  else if (!flag && rc == 0)
    print_cache(a, &st);
  if (rc) fprintf(stderr, "error: %s\n", err);
  return rc ? 1 : 0;
}

static int dispatch(Args *a) {
  /* --target interp is the cpu target run by the interpreter: run and compile pick the backend
   * from it (pick_backend); the commands that only resolve and plan see the cpu target, so its
   * mesh rule and device kind apply. */
  const Command *c = a->cmd;
  if (!c) {
    fprintf(stderr, "error: unknown command \"%s\" (see axlc --help)\n", a->command);
    return 1;
  }
  if (!(c->flags & CMD_TRAINS) && a->fe.target && !strcmp(a->fe.target, "interp"))
    a->fe.target = "cpu";
  return c->run(a);
}

int main(int argc, char **argv) {
  static Args a; /* large (paths); static keeps it off the stack */
#if defined(__GLIBC__)
  /* Every pass rebuilds the graph into fresh arrays (48 MB of values for llama2-70b). Served
   * by mmap, each is a new mapping whose pages fault in zeroed: half of memcheck's time. From
   * the heap, kept after free, the next pass reuses warm pages (memcheck of llama2-70b on
   * gpu-h100-512: 0.46 -> 0.36 s; with the fix search, 2.2 -> 1.3 s). */
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
  if (parse_args(argc, argv, &a)) return 1;
  a.fe.bf16_dot = drv_bf16_dot(a.fe.target, a.cpu, a.features, &a.fe.bf16_why);
  int rc = search_path(&a) ? 1 : dispatch(&a);
  free(a.axlc_path);
  return rc;
}
