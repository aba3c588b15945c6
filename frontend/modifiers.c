/*
 * modifiers.c: config modifiers, the tree rewrites that turn features on
 * across models without touching any module.
 *
 *   {"kind": "set",       "path": "/a/b", "value": V}
 *   {"kind": "replace",   "target": "feed_forward", "config": {"kind": "moe", ...}}
 *   {"kind": "mesh",      "shape": [...], "axes": [...], "schedule": "1f1b"}
 *                         (axes and the pipeline's schedule optional)
 *   {"kind": "remat",     "path": "/model/decoder", "policy": "save_qkvo"}
 *   {"kind": "partition", "path": "/model/.../feed_forward", "specs": {"linear1": [...]}}
 *   {"kind": "precision", "compute": "bf16", "grads": "f32"}           (each field optional)
 *   {"kind": "microbatch", "microbatches": 4}
 *   {"kind": K, FIELD: V, ...}    a trainer policy kind K (FeKind.modifier), each field optional
 *   {"kind": "chain",     "modifiers": [MOD | "file.json", ...]}
 *
 * Modifiers act on the raw tree (before defaults are filled in), so
 * `replace` keeps every field the old node set explicitly and the new kind
 * also has, unless the replacement sets it itself. A path a modifier names
 * must exist in the tree, or be a field the node's kind declares.
 */
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

typedef struct {
  FeDiag *d;
  const char *file;       /* where the modifier came from */
  const char *dir;        /* for modifier files named by relative paths */
  const FeSearch *search; /* then these directories */
  int depth;
} Ctx;

static int apply(Ctx *c, json_object **root, json_object *mod, const char *mpath);

/* ---- modifier field checks ---------------------------------------------- */

/* A modifier kind: its fields and the function that applies it (the table, `rows[]`, is
 * below the functions). The function may replace *root (replace does, at the top). */
typedef struct {
  const char *kind;
  const char *required[3];
  const char *optional[5];
  int (*apply)(Ctx *c, json_object **root, json_object *mod, const char *mpath);
} ModSchema;

static bool listed(const char *const *list, int n, const char *s) {
  for (int i = 0; i < n && list[i]; i++)
    if (strcmp(list[i], s) == 0) return true;
  return false;
}

static int check_mod_fields(Ctx *c, json_object *mod, const ModSchema *s, const char *mpath) {
  char p[512];
  int rc = 0;
  json_object_object_foreach(mod, k, v) {
    (void)v;
    if (strcmp(k, "kind") == 0 || listed(s->required, 3, k) || listed(s->optional, 5, k)) continue;
    const char *names[8];
    int n = 0;
    for (int i = 0; i < 3 && s->required[i]; i++) names[n++] = s->required[i];
    for (int i = 0; i < 5 && s->optional[i]; i++) names[n++] = s->optional[i];
    const char *near = fe_nearest(k, names, n);
    fe_path_join(p, sizeof p, mpath, k);
    rc = fe_error(c->d, c->file, p, "unknown field \"%s\" for modifier \"%s\"%s%s%s", k, s->kind,
                  near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
  }
  for (int i = 0; i < 3 && s->required[i]; i++)
    if (!json_object_object_get_ex(mod, s->required[i], NULL)) {
      fe_path_join(p, sizeof p, mpath, s->required[i]);
      rc = fe_error(c->d, c->file, p, "missing required field \"%s\" of modifier \"%s\"",
                    s->required[i], s->kind);
    }
  return rc;
}

static const char *string_field(Ctx *c, json_object *mod, const char *field, const char *mpath) {
  json_object *v = json_object_object_get(mod, field);
  if (json_object_get_type(v) == json_type_string) return json_object_get_string(v);
  char p[512], brief[96];
  fe_path_join(p, sizeof p, mpath, field);
  fe_json_brief(v, brief, sizeof brief);
  fe_error(c->d, c->file, p, "value %s is %s (expected a string)", brief, fe_json_type_name(v));
  return NULL;
}

/* ---- set ---------------------------------------------------------------- */

/* Does `parent` have `key`, or declare it in its kind's schema? */
static bool settable(json_object *parent, const char *key) {
  if (json_object_object_get_ex(parent, key, NULL)) return true;
  const char *kind = fe_node_kind(parent);
  const FeKind *k = kind ? fe_kind_find(kind) : NULL;
  return k && fe_kind_field(k, key);
}

/* Sets element `idx` of the list at the parent path; the list then counts
 * as set by this modifier (its key in the enclosing object records it). */
static int set_in_array(Ctx *c, json_object *root, const char *path, const char *ppath,
                        json_object *value) {
  json_object *arr = fe_path_get(root, ppath);
  const char *digits = strrchr(path, '/') + 1;
  bool numeric = *digits && strspn(digits, "0123456789") == strlen(digits) && strlen(digits) < 10;
  size_t idx = numeric ? (size_t)atol(digits) : 0;
  if (!numeric || idx >= json_object_array_length(arr))
    return fe_error(c->d, c->file, path,
                    "the config has no element \"%s\" in the list at %s "
                    "(expected an index below %zu)",
                    digits, ppath, json_object_array_length(arr));
  json_object_array_put_idx(arr, idx, fe_json_copy(c->d, value));
  fe_set_origin(c->d, json_object_array_get_idx(arr, idx), c->file, true);
  json_object *owner;
  char key[128];
  if (strchr(ppath + 1, '/') &&
      fe_path_parent(c->d, root, ppath, c->file, &owner, key, sizeof key) == 0)
    fe_set_origin_key(c->d, owner, key, c->file);
  else if (!strchr(ppath + 1, '/'))
    fe_set_origin_key(c->d, root, ppath + 1, c->file);
  return 0;
}

/* Adds, along path, each child module the raw tree leaves to its default (a trainer's
 * /precision or /mesh), so `--set /precision/compute=bf16` works on a config that never
 * wrote a policy. Stops at the first missing part that has no object default. */
static void add_default_children(Ctx *c, json_object *root, const char *path) {
  json_object *node = root;
  for (const char *p = path; node && *p == '/';) {
    const char *end = strchr(p + 1, '/');
    if (!end) return; /* the last part is the field being set */
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(end - p - 1), p + 1);
    json_object *child = NULL;
    if (!json_object_object_get_ex(node, key, &child)) {
      const char *kind = fe_node_kind(node); /* NULL: not a module (no "kind" string) */
      const FeKind *k = kind ? fe_kind_find(kind) : NULL;
      const FeField *f = k ? fe_kind_field(k, key) : NULL;
      if (!f || f->type != FT_CHILD || !f->dflt || f->dflt[0] != '{') return;
      child = json_tokener_parse(f->dflt);
      fe_set_origin(c->d, child, c->file, true);
      json_object_object_add(node, key, child);
      fe_set_origin_key(c->d, node, key, c->file);
    }
    node = json_object_get_type(child) == json_type_object ? child : NULL;
    p = end;
  }
}

/* Sets `path` in the raw tree to a copy of `value`. */
static int set_path(Ctx *c, json_object *root, const char *path, json_object *value) {
  if (!path || path[0] != '/' || strlen(path) < 2)
    return fe_error(c->d, c->file, path, "expected a path of the form /a/b/c");
  add_default_children(c, root, path);
  char *ppath = fe_asprintf("%.*s", (int)(strrchr(path, '/') - path), path); /* the parent */
  json_object *pobj = ppath[0] ? fe_path_get(root, ppath) : root;
  bool in_array = json_object_get_type(pobj) == json_type_array;
  int rc = in_array ? set_in_array(c, root, path, ppath, value) : 0;
  free(ppath);
  if (in_array) return rc;
  json_object *parent;
  char key[128];
  if (fe_path_parent(c->d, root, path, c->file, &parent, key, sizeof key)) return -1;
  if (!settable(parent, key)) {
    const char *kind = fe_node_kind(parent);
    return fe_error(c->d, c->file, path, "the config has no field \"%s\" here%s%s%s", key,
                    kind ? " (and kind \"" : "", kind ? kind : "",
                    kind ? "\" declares no such field)" : "");
  }
  json_object *copy = fe_json_copy(c->d, value);
  fe_set_origin(c->d, copy, c->file, true);
  json_object_object_add(parent, key, copy);
  fe_set_origin_key(c->d, parent, key, c->file);
  return 0;
}

static int mod_set(Ctx *c, json_object **root, json_object *mod, const char *mpath) {
  const char *path = string_field(c, mod, "path", mpath);
  return path ? set_path(c, *root, path, json_object_object_get(mod, "value")) : -1;
}

/* ---- replace ------------------------------------------------------------ */

typedef struct {
  FeDiag *d;
  const char *target;
  json_object *config;
  const FeKind *newk;
  const char *file;
  int count;
} Replace;

/* Gives `n` (part of the replacement) the fields of `old` it leaves unset, and
 * does the same inside each child module that both set with the same kind: so
 * rope.json's {"rope": {"kind": "rope"}} keeps a model's own rope theta. */
static void keep_old_fields(Replace *r, json_object *n, json_object *old, const FeKind *k) {
  json_object_object_foreach(old, key, v) {
    json_object *nv = NULL;
    if (strcmp(key, "kind") == 0 || (k && !fe_kind_field(k, key))) continue;
    if (!json_object_object_get_ex(n, key, &nv)) {
      json_object_object_add(n, key, fe_json_copy(r->d, v));
      fe_set_origin_key(r->d, n, key, fe_origin_key(old, key));
      continue;
    }
    const char *ok = fe_node_kind(v), *nk = fe_node_kind(nv);
    if (ok && nk && strcmp(ok, nk) == 0) keep_old_fields(r, nv, v, fe_kind_find(nk));
  }
}

/* The replacement for `old`: the new config plus the fields `old` set that
 * the new kind also has and the new config leaves unset. */
static json_object *replacement(Replace *r, json_object *old) {
  json_object *n = fe_json_copy(r->d, r->config);
  fe_set_origin(r->d, n, r->file, true);
  keep_old_fields(r, n, old, r->newk);
  r->count++;
  return n;
}

static bool matches(Replace *r, json_object *o) {
  const char *k = fe_node_kind(o);
  return k && strcmp(k, r->target) == 0;
}

static void replace_walk(Replace *r, json_object *o) {
  if (json_object_get_type(o) == json_type_object) {
    json_object_object_foreach(o, k, v) {
      if (matches(r, v))
        json_object_object_add(o, k, replacement(r, v));
      else
        replace_walk(r, v);
    }
  } else if (json_object_get_type(o) == json_type_array) {
    for (size_t i = 0; i < json_object_array_length(o); i++) {
      json_object *v = json_object_array_get_idx(o, i);
      if (matches(r, v))
        json_object_array_put_idx(o, i, replacement(r, v));
      else
        replace_walk(r, v);
    }
  }
}

static const FeKind *kind_arg(Ctx *c, const char *name, const char *p) {
  const FeKind *k = fe_kind_find(name);
  if (k) return k;
  const char *names[64];
  int n = 0;
  for (int i = 0; i < fe_kind_count() && n < 64; i++) names[n++] = fe_kind_at(i)->name;
  const char *near = fe_nearest(name, names, n);
  fe_error(c->d, c->file, p, "unknown module kind \"%s\"%s%s%s", name,
           near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
  return NULL;
}

static int mod_replace(Ctx *c, json_object **root, json_object *mod, const char *mpath) {
  const char *target = string_field(c, mod, "target", mpath);
  if (!target) return -1;
  char p[512];
  fe_path_join(p, sizeof p, mpath, "target");
  if (!kind_arg(c, target, p)) return -1;
  json_object *config = json_object_object_get(mod, "config");
  fe_path_join(p, sizeof p, mpath, "config");
  const char *nk = fe_node_kind(config);
  if (!nk) return fe_error(c->d, c->file, p, "expected a module config object with a \"kind\"");
  char kp[512];
  fe_path_join(kp, sizeof kp, p, "kind");
  Replace r = {c->d, target, config, kind_arg(c, nk, kp), c->file, 0};
  if (!r.newk) return -1;
  if (matches(&r, *root)) {
    json_object *n = replacement(&r, *root);
    json_object_put(*root);
    *root = n;
  } else {
    replace_walk(&r, *root);
  }
  return 0;
}

/* ---- mesh, remat, partition --------------------------------------------- */

static int mod_mesh(Ctx *c, json_object **rootp, json_object *mod, const char *mpath) {
  (void)mpath;
  json_object *root = *rootp, *mesh = json_object_object_get(root, "mesh");
  if (json_object_get_type(mesh) != json_type_object) {
    mesh = json_object_new_object();
    json_object_object_add(mesh, "kind", json_object_new_string("device_mesh"));
    fe_set_origin(c->d, mesh, c->file, false);
    json_object_object_add(root, "mesh", mesh);
  }
  json_object_object_add(mesh, "shape", fe_json_copy(c->d, json_object_object_get(mod, "shape")));
  fe_set_origin_key(c->d, mesh, "shape", c->file);
  json_object *axes = NULL;
  if (json_object_object_get_ex(mod, "axes", &axes)) {
    json_object_object_add(mesh, "axes", fe_json_copy(c->d, axes));
    fe_set_origin_key(c->d, mesh, "axes", c->file);
  }
  json_object *schedule = NULL; /* the pipeline's, per target (docs/pipeline.md) */
  if (json_object_object_get_ex(mod, "schedule", &schedule)) {
    json_object_object_add(mesh, "pipeline_schedule", fe_json_copy(c->d, schedule));
    fe_set_origin_key(c->d, mesh, "pipeline_schedule", c->file);
  }
  return 0;
}

/* The module at `path` whose kind declares `field`. */
static json_object *module_with(Ctx *c, json_object *root, const char *path, const char *field,
                                const char *what) {
  json_object *node = path ? fe_path_get(root, path) : NULL;
  if (!path) return NULL;
  if (!node) {
    fe_error(c->d, c->file, path, "the config has nothing at this path");
    return NULL;
  }
  const char *kind = fe_node_kind(node);
  const FeKind *k = kind ? fe_kind_find(kind) : NULL;
  if (!k || !fe_kind_field(k, field)) {
    fe_error(c->d, c->file, path, "%s%s%s takes no %s (expected a module with a \"%s\" field)",
             kind ? "kind \"" : "this value", kind ? kind : "", kind ? "\"" : "", what, field);
    return NULL;
  }
  return node;
}

static int mod_remat(Ctx *c, json_object **rootp, json_object *mod, const char *mpath) {
  json_object *root = *rootp;
  const char *path = string_field(c, mod, "path", mpath);
  json_object *node = module_with(c, root, path, "remat_policy", "remat policy");
  if (!node) return -1;
  json_object *policy = fe_json_copy(c->d, json_object_object_get(mod, "policy"));
  fe_set_origin(c->d, policy, c->file, true);
  json_object_object_add(node, "remat_policy", policy);
  fe_set_origin_key(c->d, node, "remat_policy", c->file);
  return 0;
}

static int mod_partition(Ctx *c, json_object **rootp, json_object *mod, const char *mpath) {
  json_object *root = *rootp;
  const char *path = string_field(c, mod, "path", mpath);
  json_object *node = module_with(c, root, path, "param_partition_specs", "partition specs");
  if (!node) return -1;
  json_object *specs = json_object_object_get(mod, "specs");
  if (json_object_get_type(specs) != json_type_object) {
    char p[512];
    fe_path_join(p, sizeof p, mpath, "specs");
    return fe_error(c->d, c->file, p, "expected an object mapping parameter names to specs");
  }
  json_object *cur = json_object_object_get(node, "param_partition_specs");
  if (json_object_get_type(cur) != json_type_object) {
    /* Start from the kind's defaults: the modifier changes only what it names. */
    const FeField *f = fe_kind_field(fe_kind_find(fe_node_kind(node)), "param_partition_specs");
    cur = json_tokener_parse(f->dflt);
    fe_set_origin(c->d, cur, fe_origin(node), false);
    json_object_object_add(node, "param_partition_specs", cur);
  }
  json_object_object_foreach(specs, k, v) {
    json_object_object_add(cur, k, fe_json_copy(c->d, v));
    fe_set_origin_key(c->d, cur, k, c->file);
  }
  return 0;
}

/* Sets the fields it names in the trainer's /precision policy (made if the tree has none).
 * Values are checked with the rest of the tree, against the policy's schema. */
/* The trainer's child module `key` of kind `kind`, made if the tree has none. */
static json_object *trainer_child(Ctx *c, json_object *root, const char *key, const char *kind) {
  json_object *node = json_object_object_get(root, key);
  if (json_object_get_type(node) == json_type_object) return node;
  node = json_object_new_object();
  json_object_object_add(node, "kind", json_object_new_string(kind));
  fe_set_origin(c->d, node, c->file, false);
  json_object_object_add(root, key, node);
  fe_set_origin_key(c->d, root, key, c->file);
  return node;
}

static int mod_precision(Ctx *c, json_object **rootp, json_object *mod, const char *mpath) {
  json_object *policy = trainer_child(c, *rootp, "precision", "precision_policy");
  json_object_object_foreach(mod, k, v) {
    if (strcmp(k, "kind") == 0) continue;
    if (json_object_get_type(v) != json_type_string) {
      string_field(c, mod, k, mpath); /* the error: expected a string */
      return -1;
    }
    /* auto (a mesh rule's) is a default: it never overrides a dtype the config chose */
    if (!strcmp(json_object_get_string(v), "auto") && json_object_object_get_ex(policy, k, NULL))
      continue;
    json_object_object_add(policy, k, fe_json_copy(c->d, v));
    fe_set_origin_key(c->d, policy, k, c->file);
  }
  return 0;
}

/* Sets the learner's microbatches (gradient accumulation). The value is checked with the rest
 * of the tree, against the learner's schema, and with the batch it must divide. */
static int mod_microbatch(Ctx *c, json_object **rootp, json_object *mod, const char *mpath) {
  json_object *learner = json_object_object_get(*rootp, "learner");
  if (json_object_get_type(learner) != json_type_object)
    return fe_error(c->d, c->file, mpath,
                    "modifier \"microbatch\": the config has no /learner to set microbatches in "
                    "(expected a trainer config)");
  json_object_object_add(learner, "microbatches",
                         fe_json_copy(c->d, json_object_object_get(mod, "microbatches")));
  fe_set_origin_key(c->d, learner, "microbatches", c->file);
  return 0;
}

/* Turns on a trainer policy kind (FeKind.modifier): the trainer's child of the kind's name,
 * with the fields the modifier names (the rest keep their defaults). Values are checked with
 * the rest of the tree, against the kind's schema. */
static int mod_policy(Ctx *c, json_object **rootp, json_object *mod, const char *mpath) {
  (void)mpath;
  const char *kind = fe_node_kind(mod);
  json_object *policy = trainer_child(c, *rootp, kind, kind);
  json_object_object_foreach(mod, k, v) {
    if (strcmp(k, "kind") == 0) continue;
    json_object_object_add(policy, k, fe_json_copy(c->d, v));
    fe_set_origin_key(c->d, policy, k, c->file);
  }
  return 0;
}

/* ---- chain and files ---------------------------------------------------- */

static int mod_chain(Ctx *c, json_object **root, json_object *mod, const char *mpath) {
  json_object *list = json_object_object_get(mod, "modifiers");
  char p[512];
  fe_path_join(p, sizeof p, mpath, "modifiers");
  if (json_object_get_type(list) != json_type_array)
    return fe_error(c->d, c->file, p, "expected a list of modifiers");
  for (size_t i = 0; i < json_object_array_length(list); i++) {
    char ip[512];
    fe_path_join_index(ip, sizeof ip, p, (int)i);
    if (apply(c, root, json_object_array_get_idx(list, i), ip)) return -1;
  }
  return 0;
}

static int apply_file(Ctx *c, json_object **root, const char *name, const char *mpath) {
  if (c->depth > 16)
    return fe_error(c->d, c->file, mpath, "modifier files nested more than 16 deep (a cycle?)");
  const char *found = fe_find_file(c->d, c->file, mpath, c->dir, name, c->search, true);
  if (!found) return -1;
  char *path = fe_asprintf("%s", found);
  json_object *mod = fe_json_load(c->d, path);
  Ctx sub = {c->d, found, NULL, c->search, c->depth + 1};
  sub.dir = fe_intern(c->d, dirname(path)); /* dirname writes into path */
  free(path);
  if (!mod) return -1;
  int rc = apply(&sub, root, mod, "");
  json_object_put(mod);
  return rc;
}

/* ---- the modifier kinds ---------------------------------------------------- */

/* A new modifier kind is one row here and its function above; the error messages and the
 * field checks read this table. A trainer policy kind (FeKind.modifier) adds its own row
 * before chain's, from the kind registry (table()). */
static const ModSchema rows[] = {
    {"set", {"path", "value"}, {0}, mod_set},
    {"replace", {"target", "config"}, {0}, mod_replace},
    {"mesh", {"shape"}, {"axes", "schedule"}, mod_mesh},
    {"remat", {"path", "policy"}, {0}, mod_remat},
    {"partition", {"path", "specs"}, {0}, mod_partition},
    {"precision", {0}, {"params", "compute", "grads", "optimizer", "matmul"}, mod_precision},
    {"microbatch", {"microbatches"}, {0}, mod_microbatch},
};
static const ModSchema chain = {"chain", {"modifiers"}, {0}, mod_chain};
enum { NROWS = sizeof rows / sizeof rows[0], MAX_MODIFIERS = 32 };

/* The rows, then a row per trainer policy kind, then chain, into m; returns their number. */
static int table(ModSchema *m) {
  int n = 0;
  for (int i = 0; i < NROWS; i++) m[n++] = rows[i];
  for (int i = 0; i < fe_kind_count() && n + 1 < MAX_MODIFIERS; i++) {
    const FeKind *k = fe_kind_at(i);
    if (!k->modifier) continue;
    ModSchema r = {k->name, {0}, {0}, mod_policy};
    for (int f = 0; f < k->nfields && f < 5; f++) r.optional[f] = k->fields[f].name;
    m[n++] = r;
  }
  m[n++] = chain;
  return n;
}

/* "set, replace, ... or chain", from the table. */
static const char *kind_list(const ModSchema *m, int nm, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < nm && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s",
                          i == 0       ? ""
                          : i + 1 < nm ? ", "
                                       : " or ",
                          m[i].kind);
  return buf;
}

static int apply(Ctx *c, json_object **root, json_object *mod, const char *mpath) {
  ModSchema modifiers[MAX_MODIFIERS];
  int nmodifiers = table(modifiers);
  if (json_object_get_type(mod) == json_type_string)
    return apply_file(c, root, json_object_get_string(mod), mpath);
  const char *kind = fe_node_kind(mod);
  char kinds[256];
  if (!kind)
    return fe_error(c->d, c->file, mpath,
                    "expected a modifier (an object with a \"kind\": %s) or a modifier file name",
                    kind_list(modifiers, nmodifiers, kinds, sizeof kinds));
  const char *names[MAX_MODIFIERS];
  for (int i = 0; i < nmodifiers; i++) {
    names[i] = modifiers[i].kind;
    if (strcmp(kind, modifiers[i].kind)) continue;
    if (check_mod_fields(c, mod, &modifiers[i], mpath)) return -1;
    return modifiers[i].apply(c, root, mod, mpath);
  }
  const char *near = fe_nearest(kind, names, nmodifiers);
  char p[512];
  fe_path_join(p, sizeof p, mpath, "kind");
  return fe_error(c->d, c->file, p, "unknown modifier kind \"%s\" (expected %s)%s%s%s", kind,
                  kind_list(modifiers, nmodifiers, kinds, sizeof kinds),
                  near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
}

int fe_modifier_apply(FeDiag *d, json_object **root, json_object *mod, const char *file,
                      const char *dir, const FeSearch *search) {
  Ctx c = {d, file ? fe_intern(d, file) : NULL, dir ? fe_intern(d, dir) : NULL, search, 0};
  if (json_object_get_type(*root) != json_type_object)
    return fe_error(d, file, NULL, "the config is not an object");
  return apply(&c, root, mod, "");
}

int fe_set_override(FeDiag *d, json_object *root, const char *assignment) {
  const char *eq = strchr(assignment, '=');
  if (!eq || eq == assignment)
    return fe_error(d, "--set", NULL, "\"%s\" is not PATH=VALUE", assignment);
  char *path = fe_asprintf("%.*s", (int)(eq - assignment), assignment);
  json_tokener *tok = json_tokener_new();
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
  /* Include the terminating NUL so a bare number ends where the text does. */
  size_t len = strlen(eq + 1);
  json_object *value = json_tokener_parse_ex(tok, eq + 1, (int)len + 1);
  bool ok = json_tokener_get_error(tok) == json_tokener_success &&
            json_tokener_get_parse_end(tok) >= len && len > 0;
  json_tokener_free(tok);
  if (!ok) { /* not JSON: take it as a string */
    json_object_put(value);
    value = json_object_new_string(eq + 1);
  }
  Ctx c = {d, "--set", NULL, NULL, 0};
  int rc = set_path(&c, root, path, value);
  json_object_put(value);
  free(path);
  return rc;
}
