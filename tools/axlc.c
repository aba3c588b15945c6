/*
 * axlc.c: the command-line driver.
 *
 * Parses the command line, calls the library, prints results and picks the
 * exit status: 0 on success, 1 for any user error (bad config, bad flag,
 * unreadable file). Only this file exits.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

#define MAX_LIST 64

typedef struct {
  const char *command;
  const char *model;
  FeOptions fe;
  const char *apply[MAX_LIST];
  const char *sets[MAX_LIST];
  bool json;
} Args;

static void usage(FILE *out) {
  fprintf(out,
          "usage: axlc COMMAND [MODEL.json] [options]\n"
          "\n"
          "commands:\n"
          "  config MODEL.json   print the resolved config (canonical JSON, every default explicit)\n"
          "  params MODEL.json   print every parameter: path, shape, dtype, init, partition spec\n"
          "  kinds [KIND]        list module kinds, or one kind's fields\n"
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

int main(int argc, char **argv) {
  Args a;
  if (parse_args(argc, argv, &a)) return 1;
  if (!strcmp(a.command, "config")) return cmd_config(&a);
  if (!strcmp(a.command, "params")) return cmd_params(&a);
  if (!strcmp(a.command, "kinds")) return cmd_kinds(&a);
  fprintf(stderr, "error: unknown command \"%s\" (see axlc --help)\n", a.command);
  return 1;
}
