/*
 * axlc.c: the command-line driver.
 *
 * Parses the command line, calls the library, prints results and picks the
 * exit status: 0 on success, 1 for any user error (bad config, bad flag,
 * unreadable file). Only this file exits.
 */
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"

#define MAX_LIST 64

typedef struct {
  const char *command;
  const char *model;
  FeOptions fe;
  const char *apply[MAX_LIST];
  const char *sets[MAX_LIST];
  bool json;
  const char *after;       /* ir: stop after this pass */
  const char *format;      /* ir: text or dot */
  DrvTrainOptions train;   /* run */
} Args;

static void usage(FILE *out) {
  fprintf(out,
          "usage: axlc COMMAND [MODEL.json] [options]\n"
          "\n"
          "commands:\n"
          "  config MODEL.json   print the resolved config (canonical JSON, every default explicit)\n"
          "  params MODEL.json   print every parameter: path, shape, dtype, init, partition spec\n"
          "  kinds [KIND]        list module kinds, or one kind's fields\n"
          "  ir MODEL.json       print the IR of the training step [--after PASS] [--format text|dot]\n"
          "                      passes: compose, autodiff, optimizer, simplify\n"
          "  run MODEL.json      train; --target interp runs the reference interpreter\n"
          "                      --data FILE (text bytes or llm.c tokens) [--steps N] [--seed S]\n"
          "                      [--init W.safetensors] [--dump OUT.safetensors]\n"
          "\n"
          "options:\n"
          "  --target T          select the first mesh rule matching T (cpu, cpu-4,\n"
          "                      gpu-h100-256, tpu-v5p-512, ...) and size the mesh for it\n"
          "  --apply FILE        apply a modifier file (repeatable, in order)\n"
          "  --set PATH=VALUE    set a value, e.g. --set /model/decoder/num_layers=4\n"
          "  --json              (params) machine-readable output\n"
          "  -h, --help          this help\n");
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

static int parse_args(int argc, char **argv, Args *a) {
  memset(a, 0, sizeof *a);
  a->train.seed = -1;
  a->fe.apply = a->apply;
  a->fe.sets = a->sets;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
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
    } else if (!strcmp(s, "--after") || !strcmp(s, "--format") || !strcmp(s, "--data") ||
               !strcmp(s, "--init") || !strcmp(s, "--dump")) {
      if (need_value(i, argc, argv)) return -1;
      const char **slot = !strcmp(s, "--after")    ? &a->after
                          : !strcmp(s, "--format") ? &a->format
                          : !strcmp(s, "--data")   ? &a->train.data
                          : !strcmp(s, "--init")   ? &a->train.init
                                                   : &a->train.dump;
      *slot = argv[++i];
    } else if (!strcmp(s, "--steps") || !strcmp(s, "--seed")) {
      if (need_value(i, argc, argv)) return -1;
      char *end;
      long long v = strtoll(argv[++i], &end, 10);
      if (*end || end == argv[i] || v < 0 || v > (1LL << 40)) {
        fprintf(stderr, "error: %s %s: expected a non-negative integer\n", s, argv[i]);
        return -1;
      }
      if (!strcmp(s, "--steps")) a->train.steps = v;
      else a->train.seed = v;
    } else if (s[0] == '-') {
      fprintf(stderr, "error: unknown option %s (see axlc --help)\n", s);
      return -1;
    } else if (!a->command) {
      a->command = s;
    } else if (!a->model) {
      a->model = s;
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

/* Resolves the model; prints diagnostics on failure. */
static json_object *resolve(FeDiag *d, const Args *a) {
  if (!a->model) {
    fprintf(stderr, "error: axlc %s needs a MODEL.json\n", a->command);
    return NULL;
  }
  const char *rule = NULL;
  json_object *cfg = fe_resolve(d, a->model, &a->fe, &rule);
  if (!cfg) fe_diag_print(d, stderr);
  else if (a->fe.target && rule)
    fprintf(stderr, "note: target %s matched mesh rule \"%s\"\n", a->fe.target, rule);
  else if (a->fe.target)
    fprintf(stderr, "note: target %s matched no mesh rule; the config's mesh stands\n",
            a->fe.target);
  return cfg;
}

static int cmd_config(const Args *a) {
  FeDiag d;
  fe_diag_init(&d);
  json_object *cfg = resolve(&d, a);
  int rc = 1;
  if (cfg) {
    char *text = fe_json_canonical(cfg);
    fputs(text, stdout);
    free(text);
    json_object_put(cfg);
    rc = 0;
  }
  fe_diag_free(&d);
  return rc;
}

static int cmd_params(const Args *a) {
  FeDiag d;
  fe_diag_init(&d);
  json_object *cfg = resolve(&d, a);
  int rc = 1;
  FeBuild b;
  if (cfg && fe_build(&b, &d, a->model, cfg, fe_target_devices(a->fe.target)) == 0) {
    if (a->json) {
      char *s = fe_params_json(&b);
      fputs(s, stdout);
      free(s);
    } else {
      fe_params_print(&b, stdout);
    }
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
  static const char *const names[] = {"int", "float", "bool", "string", "enum", "module",
                                      "int list", "string list", "partition specs", "remat"};
  return names[f->type];
}

static int cmd_kinds(const Args *a) {
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

static int cmd_ir(const Args *a) {
  const char *format = a->format ? a->format : "text";
  if (strcmp(format, "text") && strcmp(format, "dot")) {
    fprintf(stderr, "error: --format %s: expected text or dot\n", format);
    return 1;
  }
  DrvJob j;
  int rc = lower(&j, a, a->after) ? 1 : 0;
  if (rc == 0 && !strcmp(format, "dot")) ir_graph_print_dot(j.graph, stdout);
  else if (rc == 0) ir_graph_print(j.graph, stdout);
  drv_free(&j);
  return rc;
}

static int cmd_run(const Args *a) {
  if (!a->fe.target || strcmp(a->fe.target, "interp") != 0) {
    fprintf(stderr, "error: axlc run: --target %s is not available yet (expected --target "
            "interp, the reference interpreter)\n", a->fe.target ? a->fe.target : "(none)");
    return 1;
  }
  DrvJob j;
  int rc = lower(&j, a, NULL) ? 1 : 0;
  if (rc == 0) {
    DrvTrainOptions o = a->train;
    o.log = stdout;
    if (drv_train_interp(&j, &o)) {
      fe_diag_print(&j.diag, stderr);
      rc = 1;
    }
  }
  drv_free(&j);
  return rc;
}

int main(int argc, char **argv) {
  Args a;
  if (parse_args(argc, argv, &a)) return 1;
  if (!strcmp(a.command, "config")) return cmd_config(&a);
  if (!strcmp(a.command, "params")) return cmd_params(&a);
  if (!strcmp(a.command, "kinds")) return cmd_kinds(&a);
  if (!strcmp(a.command, "ir")) return cmd_ir(&a);
  if (!strcmp(a.command, "run")) return cmd_run(&a);
  fprintf(stderr, "error: unknown command \"%s\" (see axlc --help)\n", a.command);
  return 1;
}
