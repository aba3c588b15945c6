/*
 * resolve.c: from a config file to the canonical, validated tree.
 *
 * The order is fixed and is the one users reason about:
 *   1. the `base` file, resolved the same way (recursively, cycles refused),
 *      with this file's own keys merged on top (objects of the same kind
 *      merge key by key; anything else replaces);
 *   2. this file's `modifiers`, in order;
 *   3. the first mesh rule whose `match` regex matches the whole --target;
 *   4. --apply files, in order;
 *   5. --set PATH=VALUE overrides, in order;
 *   6. defaults filled in and every field validated (schema.c);
 *   7. the module walk: dims, partition specs against the mesh (build.c).
 * `base`, `modifiers` and `mesh_rules` are resolution keys, not config: they
 * never reach the canonical tree. A file's `mesh_rules` (a list, or the name
 * of a file holding one) replace its base's.
 */
#include <ctype.h>
#include <libgen.h>
#include <limits.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

#define MAX_BASE_DEPTH 16

typedef struct {
  json_object *tree;
  json_object *rules;     /* list of {match, modifiers} or NULL */
  const char *rules_file; /* for messages and relative modifier files */
  const char *rules_path; /* "/mesh_rules" when the list is in the config itself, else NULL */
  const FeSearch *search; /* for files not next to the file naming them */
} Loaded;

/* File names can be as long as the system allows: no fixed buffers. */
static const char *dir_of(FeDiag *d, const char *file) {
  char *buf = fe_asprintf("%s", file);
  const char *dir = fe_intern(d, dirname(buf));
  free(buf);
  return dir;
}

/* ---- merging a file onto its base -------------------------------------- */

static void merge(FeDiag *d, json_object *dst, json_object *src) {
  json_object_object_foreach(src, k, v) {
    json_object *old = NULL;
    bool both_objects = json_object_object_get_ex(dst, k, &old) &&
                        json_object_get_type(old) == json_type_object &&
                        json_object_get_type(v) == json_type_object;
    const char *ok = both_objects ? fe_node_kind(old) : NULL, *nk = fe_node_kind(v);
    if (both_objects && (!nk || (ok && strcmp(ok, nk) == 0))) {
      merge(d, old, v);
    } else {
      json_object_object_add(dst, k, fe_json_copy(d, v));
      fe_set_origin_key(d, dst, k, fe_origin_key(src, k));
    }
  }
}

/* Takes `key` out of `o`, returning it (owned by the caller) or NULL. */
static json_object *take(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v)) return NULL;
  json_object_get(v);
  json_object_object_del(o, key);
  return v;
}

/* ---- mesh rules ---------------------------------------------------------- */

/* Takes over `spec`: the list itself, or the name of a file holding one. */
static int load_rules(FeDiag *d, json_object *spec, const char *file, Loaded *out) {
  const char *jpath = "/mesh_rules";
  if (json_object_get_type(spec) == json_type_string) {
    const char *rf = fe_find_file(d, file, "/mesh_rules", dir_of(d, file),
                                  json_object_get_string(spec), out->search, false);
    json_object *list = rf ? fe_json_load(d, rf) : NULL;
    json_object_put(spec);
    if (!list) return -1;
    spec = list;
    file = rf;
    jpath = NULL;
  }
  if (json_object_get_type(spec) != json_type_array) {
    json_object_put(spec);
    return fe_error(d, file, "/mesh_rules",
                    "expected a list of {\"match\": REGEX, "
                    "\"modifiers\": [...]} or the name of a file holding one");
  }
  json_object_put(out->rules);
  out->rules = spec;
  out->rules_file = file;
  out->rules_path = jpath;
  return 0;
}

/* The kinds of the device table (rules/devices.json): beside the rules, beside the config, or
 * on the search path. For the message of a target no rule matches; NULL when none is found. */
static char *known_kinds(FeDiag *d, const Loaded *l, const char *file) {
  char *places[2] = {fe_asprintf("%s/devices.json", dir_of(d, l->rules_file)),
                     fe_asprintf("%s/rules/devices.json", dir_of(d, file))};
  json_object *table = NULL;
  for (int i = 0; !table && i < 2; i++) table = json_object_from_file(places[i]);
  for (int i = 0; !table && l->search && i < l->search->ndirs; i++) {
    char *p = fe_asprintf("%s/rules/devices.json", l->search->dirs[i]);
    table = json_object_from_file(p);
    free(p);
  }
  free(places[0]);
  free(places[1]);
  char *kinds = NULL;
  if (table && json_object_get_type(table) == json_type_object) {
    json_object_object_foreach(table, k, v) {
      (void)v;
      if (k[0] == '_') continue; /* "_doc" */
      char *longer = kinds ? fe_asprintf("%s, %s", kinds, k) : fe_asprintf("%s", k);
      free(kinds);
      kinds = longer;
    }
  }
  json_object_put(table);
  return kinds;
}

/* A target that no rule matches would run on the config's default mesh: every device on
 * `data`, every parameter replicated. That is never what a rules file meant for a machine it
 * does not know, so it is an error, unless the config gives its mesh (/mesh in the file, a
 * modifier, --apply or --set) or has a catch-all rule (".*"). A config without rules runs
 * on its /mesh everywhere. */
static int check_unmatched(FeDiag *d, const Loaded *l, const char *file, const char *target,
                           const char *matched) {
  size_t n = l->rules ? json_object_array_length(l->rules) : 0;
  if (!target || matched || n == 0 || json_object_object_get_ex(l->tree, "mesh", NULL)) return 0;
  char *pats = NULL;
  for (size_t i = 0; i < n; i++) {
    const char *m = json_object_get_string(
        json_object_object_get(json_object_array_get_idx(l->rules, i), "match"));
    char *longer = pats ? fe_asprintf("%s, \"%s\"", pats, m) : fe_asprintf("\"%s\"", m);
    free(pats);
    pats = longer;
  }
  char *kinds = known_kinds(d, l, file);
  fe_error(d, l->rules_file, l->rules_path,
           "no mesh rule matches --target %s (the rules match %s; device kinds: %s). Add a rule "
           "for it, give the mesh in the config (/mesh, or --set /mesh/shape=[...]), or end the "
           "rules with {\"match\": \".*\", ...}",
           target, pats, kinds ? kinds : "no rules/devices.json found");
  free(pats);
  free(kinds);
  return -1;
}

static int check_rule(FeDiag *d, const char *file, json_object *rule, int i, regex_t *re) {
  char p[64];
  snprintf(p, sizeof p, "/mesh_rules/%d", i);
  json_object *m = NULL, *mods = NULL;
  if (json_object_get_type(rule) != json_type_object ||
      !json_object_object_get_ex(rule, "match", &m) ||
      json_object_get_type(m) != json_type_string ||
      !json_object_object_get_ex(rule, "modifiers", &mods) ||
      json_object_get_type(mods) != json_type_array || json_object_object_length(rule) != 2)
    return fe_error(d, file, p, "expected {\"match\": REGEX, \"modifiers\": [...]}");
  char pat[1024];
  snprintf(pat, sizeof pat, "^(%s)$", json_object_get_string(m));
  if (regcomp(re, pat, REG_EXTENDED | REG_NOSUB) != 0)
    return fe_error(d, file, p, "match \"%s\" is not a valid extended regex",
                    json_object_get_string(m));
  return 0;
}

/* Applies the first rule matching `target`; *matched gets its regex. */
static int apply_rules(FeDiag *d, Loaded *l, const char *target, const char **matched) {
  *matched = NULL;
  if (!l->rules) return 0;
  for (size_t i = 0; i < json_object_array_length(l->rules); i++) {
    json_object *rule = json_object_array_get_idx(l->rules, i);
    regex_t re;
    if (check_rule(d, l->rules_file, rule, (int)i, &re)) return -1;
    bool hit = target && regexec(&re, target, 0, NULL, 0) == 0;
    regfree(&re);
    if (!hit) continue;
    *matched = json_object_get_string(json_object_object_get(rule, "match"));
    json_object *chain = json_object_new_object();
    json_object_object_add(chain, "kind", json_object_new_string("chain"));
    json_object_object_add(chain, "modifiers",
                           json_object_get(json_object_object_get(rule, "modifiers")));
    int rc =
        fe_modifier_apply(d, &l->tree, chain, l->rules_file, dir_of(d, l->rules_file), l->search);
    json_object_put(chain);
    return rc;
  }
  return 0;
}

/* ---- loading a file with its bases -------------------------------------- */

static int load(FeDiag *d, const char *file, const char **stack, int depth, Loaded *out);

static int check_cycle(FeDiag *d, const char *file, const char **stack, int depth,
                       const char *real) {
  for (int i = 0; i < depth; i++) {
    if (strcmp(stack[i], real)) continue;
    char *chain = fe_asprintf("%s", stack[i]);
    for (int j = i + 1; j <= depth; j++) {
      char *longer = fe_asprintf("%s -> %s", chain, j < depth ? stack[j] : real);
      free(chain);
      chain = longer;
    }
    fe_error(d, file, "/base", "base files form a cycle: %s", chain);
    free(chain);
    return -1;
  }
  if (depth >= MAX_BASE_DEPTH)
    return fe_error(d, file, "/base", "base files nested more than %d deep", MAX_BASE_DEPTH);
  return 0;
}

static int load_base(FeDiag *d, const char *file, json_object *base, const char **stack, int depth,
                     Loaded *out) {
  if (json_object_get_type(base) != json_type_string)
    return fe_error(d, file, "/base", "expected the name of a base config file");
  const char *found = fe_find_file(d, file, "/base", dir_of(d, file), json_object_get_string(base),
                                   out->search, false);
  return found ? load(d, found, stack, depth, out) : -1;
}

static int apply_own_modifiers(FeDiag *d, const char *file, json_object *mods, Loaded *out) {
  if (!mods) return 0;
  if (json_object_get_type(mods) != json_type_array)
    return fe_error(d, file, "/modifiers", "expected a list of modifiers or modifier files");
  json_object *chain = json_object_new_object();
  json_object_object_add(chain, "kind", json_object_new_string("chain"));
  json_object_object_add(chain, "modifiers", json_object_get(mods));
  int rc = fe_modifier_apply(d, &out->tree, chain, file, dir_of(d, file), out->search);
  json_object_put(chain);
  return rc;
}

static int load(FeDiag *d, const char *file, const char **stack, int depth, Loaded *out) {
  char realbuf[PATH_MAX];
  const char *real = realpath(file, realbuf) ? fe_intern(d, realbuf) : fe_intern(d, file);
  if (check_cycle(d, file, stack, depth, real)) return -1;
  stack[depth] = real;
  json_object *o = fe_json_load(d, file);
  if (!o) return -1;
  if (json_object_get_type(o) != json_type_object) {
    json_object_put(o);
    return fe_error(d, file, NULL, "expected a config object at the top level");
  }
  json_object *base = take(o, "base"), *mods = take(o, "modifiers"), *rules = take(o, "mesh_rules");
  int rc = 0;
  if (base) {
    rc = load_base(d, file, base, stack, depth + 1, out);
    if (rc == 0) merge(d, out->tree, o);
    json_object_put(o);
  } else {
    out->tree = o;
  }
  if (rc == 0 && rules) rc = load_rules(d, json_object_get(rules), file, out);
  if (rc == 0) rc = apply_own_modifiers(d, file, mods, out);
  json_object_put(base);
  json_object_put(mods);
  json_object_put(rules);
  return rc;
}

/* ---- the whole resolution ------------------------------------------------ */

/* How a kind's target names count. Google names TPU v4 and v5p slices by TensorCores (two per
 * chip: tpu-v5p-512 is 256 chips) and v5e and v6e slices by chips (tpu-v5e-256 is 256); an
 * axlc device is a chip, the unit the device table's memory and FLOP/s describe. Kinds not
 * listed (gpu-h100-256, gpu-h100-8x32, cpu-4, trn2-64) count devices. docs/memcheck.md keeps
 * the same table. */
static const FeTargetNaming target_namings[] = {
    {"tpu-v4", 2},
    {"tpu-v5p", 2},
    {"tpu-v5e", 1},
    {"tpu-v6e", 1},
};

/* The naming of the kind `kind` (len characters): the table's row, else one device a unit. */
static FeTargetNaming naming_of(const char *kind, size_t len) {
  for (size_t i = 0; i < sizeof target_namings / sizeof *target_namings; i++)
    if (strlen(target_namings[i].kind) == len && !strncmp(target_namings[i].kind, kind, len))
      return target_namings[i];
  return (FeTargetNaming){NULL, 1};
}

/* The device count of a target is its last '-' part when that part starts with a digit or is
 * made of digits and 'x' only ("gpu-h100-8x32"); a kind name alone ("gpu-h100") is one device. A
 * count that does not parse is refused, not read as one device: "cpu-0" or "gpu-h100-4x" is a
 * typo, and planning it for one device would hide it. */
static bool count_part(const char *p) {
  if (isdigit((unsigned char)*p)) return true;
  return *p && strspn(p, "0123456789x") == strlen(p);
}

FeTargetNaming fe_target_naming(const char *target) {
  if (!target) return naming_of("", 0);
  const char *last = strrchr(target, '-');
  if (last && count_part(last + 1)) return naming_of(target, (size_t)(last - target));
  return naming_of(target, strlen(target)); /* a kind name alone */
}

/* A name that counts cores must name whole chips: "tpu-v5p-3" is a typo, not 1.5 chips. */
static int cores_to_chips(FeDiag *d, const char *target, const char *count, int64_t *n) {
  FeTargetNaming k = fe_target_naming(target);
  if (k.cores_per_chip <= 1 || *n > FE_MAX_DEVICES) return 0;
  if (*n % k.cores_per_chip)
    return fe_error(d, NULL, NULL,
                    "--target %s: bad count \"%s\" (%s names count TensorCores, %d per chip: "
                    "expected a multiple of %d, e.g. %s-512 for 256 chips)",
                    target, count, k.kind, k.cores_per_chip, k.cores_per_chip, k.kind);
  *n /= k.cores_per_chip;
  return 0;
}

int fe_target_devices(FeDiag *d, const char *target, int64_t *devices) {
  *devices = target ? 1 : 0;
  if (!target) return 0;
  const char *last = strrchr(target, '-'), *count = last ? last + 1 : target;
  if (!(count_part(count) || (last && !*count))) return 0;
  int64_t n = 1;
  for (const char *p = count;;) {
    char *end = (char *)p;
    long long v = isdigit((unsigned char)*p) ? strtoll(p, &end, 10) : 0;
    if (v < 1 || (*end != 'x' && *end != 0) || (*end == 'x' && !end[1])) {
      int len = last ? (int)(last - target) : 4;
      const char *kind = last ? target : "KIND";
      return fe_error(d, NULL, NULL,
                      "--target %s: bad device count \"%s\" (expected %.*s-N with N a whole number "
                      ">= 1, or %.*s-AxB... with each factor a whole number >= 1)",
                      target, count, len, kind, len, kind);
    }
    if (v > FE_MAX_DEVICES) v = FE_MAX_DEVICES + 1;
    if (n <= FE_MAX_DEVICES) n *= v;
    if (*end == 0) break;
    p = end + 1;
  }
  if (cores_to_chips(d, target, count, &n)) return -1;
  /* Too many devices: the mesh check reports it, with the limit. */
  *devices = n > FE_MAX_DEVICES ? FE_MAX_DEVICES + 1 : n;
  return 0;
}

static int apply_cli(FeDiag *d, Loaded *l, const FeOptions *opt) {
  for (int i = 0; i < opt->napply; i++) {
    const char *file = fe_find_file(d, "--apply", NULL, NULL, opt->apply[i], &opt->search, true);
    json_object *mod = file ? fe_json_load(d, file) : NULL;
    if (!mod) return -1;
    int rc = fe_modifier_apply(d, &l->tree, mod, file, dir_of(d, file), &opt->search);
    json_object_put(mod);
    if (rc) return -1;
  }
  for (int i = 0; i < opt->nsets; i++)
    if (fe_set_override(d, l->tree, opt->sets[i])) return -1;
  return 0;
}

/* "gpu-h100-abc": a kind of the device table, then a last part that is no count. Read as a
 * kind name alone it would be one device of an unknown kind, which a catch-all rule accepts;
 * the count is checked here, before any rule is matched, whatever the rules are. */
static int check_kind_count(FeDiag *d, const Loaded *l, const char *file, const char *target) {
  const char *last = target ? strrchr(target, '-') : NULL;
  if (!last || count_part(last + 1)) return 0;
  char *kinds = known_kinds(d, l, file);
  int rc = 0;
  size_t len = (size_t)(last - target);
  for (const char *k = kinds; k && *k;) {
    size_t n = strcspn(k, ",");
    if (n == len && !strncmp(k, target, len)) {
      rc = fe_error(d, NULL, NULL,
                    "--target %s: bad device count \"%s\" (expected %.*s-N with N a whole number "
                    ">= 1, or %.*s-AxB... with each factor a whole number >= 1)",
                    target, last + 1, (int)len, target, (int)len, target);
      break;
    }
    k += n;
    k += strspn(k, ", ");
  }
  free(kinds);
  return rc;
}

json_object *fe_resolve(FeDiag *d, const char *file, const FeOptions *opt, const char **rule) {
  static const FeOptions none = {0};
  if (!opt) opt = &none;
  const char *stack[MAX_BASE_DEPTH + 1];
  Loaded l = {.search = &opt->search};
  const char *matched = NULL;
  json_object *canon = NULL;
  int64_t devices;
  if (fe_target_devices(d, opt->target, &devices)) return NULL;
  if (file && file[0] != '/' && !strchr(file, '/'))
    file = fe_find_file(d, NULL, NULL, NULL, file, &opt->search, false);
  if (file && load(d, file, stack, 0, &l) == 0 && check_kind_count(d, &l, file, opt->target) == 0 &&
      apply_rules(d, &l, opt->target, &matched) == 0 && apply_cli(d, &l, opt) == 0 &&
      check_unmatched(d, &l, file, opt->target, matched) == 0)
    canon = fe_canonicalize(d, l.tree, "", "trainer");
  if (canon) fe_precision_settle(d, canon, opt->bf16_dot, opt->bf16_why);
  if (canon) {
    FeBuild b;
    int rc = fe_build(&b, d, file, canon, devices);
    fe_build_free(&b);
    if (rc) {
      json_object_put(canon);
      canon = NULL;
    }
  }
  if (rule) *rule = matched ? fe_intern(d, matched) : NULL;
  json_object_put(l.tree);
  json_object_put(l.rules);
  return canon;
}
