/*
 * hf_files.c: the files of a Hugging Face checkpoint around the weights `axlc convert` maps
 * (convert.c): the sharded form, read and written, and config.json, written.
 *
 * A checkpoint bigger than one shard is `model.safetensors.index.json`, whose "weight_map" names
 * the shard file of every tensor, and the shards `model-00001-of-0000N.safetensors` beside it.
 * Reading one checks the index against its shards before any tensor is used: a shard that does
 * not open, a tensor the index puts in a shard that lacks it, a tensor of a shard the index does
 * not name, each said with the index file. Writing cuts the tensors, in order, into shards of at
 * most --max-shard-size bytes (a larger tensor alone in its shard), as transformers does; weights
 * that fit in one shard are one file and no index. An export removes the earlier one under the
 * same name that it makes obsolete (an index and its shards, or a single file), once it is in
 * place; a model directory with an index and a model.safetensors it does not name is refused.
 *
 * Nothing already saved is lost to a failed write: every weight file is first written whole
 * under a temporary name, then config.json, and only then are the weight files renamed into
 * place; the index, which makes a sharded checkpoint whole, is written last. Every output is
 * checked against every input first (rt_file_check_outputs).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/driver.h"
#include "runtime/axrt.h"
#include "tools/convert.h"

/* ===== reading ========================================================================= */

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static json_object *read_json(const char *path, const char *expected);

/* true when the index `index` names `shard` (a file name) in its weight_map. */
static bool index_names(const char *index, const char *shard) {
  json_object *root = read_json(index, "a Hugging Face index"), *map;
  bool named = false;
  if (root && json_object_object_get_ex(root, "weight_map", &map) &&
      json_object_is_type(map, json_type_object)) {
    json_object_object_foreach(map, name, v) {
      (void)name;
      if (json_object_is_type(v, json_type_string) && !strcmp(json_object_get_string(v), shard))
        named = true;
    }
  }
  json_object_put(root);
  return named;
}

int hf_dir_weights(const char *dir, char *out, size_t cap) {
  static const char *const names[] = {"model.safetensors.index.json", "model.safetensors"};
  char single[4200];
  snprintf(single, sizeof single, "%s/%s", dir, names[1]);
  for (int i = 0; i < 2; i++) {
    snprintf(out, cap, "%s/%s", dir, names[i]);
    if (!is_file(out)) continue;
    /* both: transformers loads model.safetensors, the index names other files; which one
     * is the model is not for axlc to guess */
    if (i == 0 && is_file(single) && !index_names(out, names[1])) {
      fprintf(stderr,
              "error: %s: holds both model.safetensors.index.json and a model.safetensors that "
              "the index does not name: two different checkpoints (transformers loads "
              "model.safetensors, the index names its own shards); remove the stale one, or "
              "pass the file or the index itself\n",
              dir);
      return -1;
    }
    return 0;
  }
  fprintf(stderr,
          "error: %s: a directory without model.safetensors.index.json or model.safetensors "
          "(expected a Hugging Face model directory, an index or a safetensors file)\n",
          dir);
  return -1;
}

/* The whole JSON document in `path`, or NULL with what is wrong said (and what was expected). */
static json_object *read_json(const char *path, const char *expected) {
  RtError err;
  FILE *f = rt_file_open(path, "rb", &err);
  if (!f) {
    fprintf(stderr, "error: %s\n", err.msg);
    return NULL;
  }
  char *text = NULL;
  size_t len = 0, cap = 0, got;
  do {
    if (len + 4096 > cap) text = base_xrealloc(text, cap = 2 * cap + 4096);
    got = fread(text + len, 1, cap - len - 1, f);
    len += got;
  } while (got > 0);
  bool failed = ferror(f);
  fclose(f);
  text = base_xrealloc(text, len + 1);
  text[len] = 0;
  enum json_tokener_error jerr = json_tokener_success;
  json_object *root = failed ? NULL : json_tokener_parse_verbose(text, &jerr);
  if (failed)
    fprintf(stderr, "error: %s: read failed\n", path);
  else if (!root || jerr != json_tokener_success || strlen(text) != len)
    fprintf(stderr, "error: %s: not valid JSON (%s); expected %s\n", path,
            jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "a NUL byte", expected);
  if (root && (jerr != json_tokener_success || strlen(text) != len))
    json_object_put(root), root = NULL;
  free(text);
  return root;
}

/* Opens every shard the index names, once each: -1, every one that does not open said. */
static int open_shards(HfFiles *f, const char *index, json_object *map) {
  char dir[4096], path[8192];
  rt_path_dir(index, dir, sizeof dir);
  json_object *seen = json_object_new_object(); /* shard -> tensors named for it */
  int bad = 0;
  json_object_object_foreach(map, name, v) {
    const char *shard = json_object_get_string(v);
    json_object *count;
    if (!json_object_is_type(v, json_type_string) || !*shard || strchr(shard, '/')) {
      fprintf(stderr,
              "error: %s: tensor '%s': shard %s (expected the name of a file beside the index)\n",
              index, name, json_object_to_json_string_ext(v, JSON_C_TO_STRING_NOSLASHESCAPE));
      bad++;
    } else if (json_object_object_get_ex(seen, shard, &count)) {
      json_object_set_int(count, json_object_get_int(count) + 1);
    } else {
      json_object_object_add(seen, shard, json_object_new_int(1));
    }
  }
  json_object_object_foreach(seen, shard, count) {
    RtError err;
    RtSt *st;
    snprintf(path, sizeof path, "%s/%s", dir, shard);
    if (rt_st_open(&st, path, &err)) {
      fprintf(stderr, "error: %s: shard %s (of %d tensors): %s\n", index, shard,
              json_object_get_int(count), err.msg);
      bad++;
      continue;
    }
    f->st = base_xrealloc(f->st, (size_t)(f->nst + 1) * sizeof *f->st);
    f->st[f->nst++] = st;
  }
  json_object_put(seen);
  return bad ? -1 : 0;
}

/* The open shard named `shard`. */
static RtSt *shard_named(const HfFiles *f, const char *shard) {
  for (int i = 0; i < f->nst; i++) {
    const char *path = rt_st_path(f->st[i]);
    if (!strcmp(strrchr(path, '/') + 1, shard)) return f->st[i];
  }
  return NULL;
}

/* Every tensor of every shard must be in the index, under that shard. */
static int unlisted_tensors(const HfFiles *f, const char *index, json_object *map) {
  int bad = 0;
  for (int i = 0; i < f->nst; i++) {
    const char *path = rt_st_path(f->st[i]), *base = strrchr(path, '/') + 1;
    for (int j = 0; j < rt_st_count(f->st[i]); j++) {
      const char *name = rt_st_tensor(f->st[i], j)->name;
      json_object *v;
      if (json_object_object_get_ex(map, name, &v) && !strcmp(json_object_get_string(v), base))
        continue;
      if (bad++ < 20)
        fprintf(stderr, "error: %s: shard %s holds tensor '%s', which the index %s\n", index, base,
                name, v ? "puts in another shard" : "does not name");
    }
  }
  return bad;
}

/* Says why the JSON document `root` of `index` is no Hugging Face index. */
static void not_an_index(const char *index, json_object *root) {
  json_object *format;
  if (json_object_object_get_ex(root, "format", &format) &&
      json_object_is_type(format, json_type_string) &&
      !strcmp(json_object_get_string(format), "axlc-checkpoint")) {
    char dir[4096];
    rt_path_dir(index, dir, sizeof dir);
    fprintf(stderr, "error: %s: an axlc checkpoint's index; pass its step directory (%s)\n", index,
            dir);
    return;
  }
  fprintf(stderr,
          "error: %s: no \"weight_map\" object (expected a Hugging Face index, "
          "{\"weight_map\": {\"tensor\": \"shard file\", ...}})\n",
          index);
}

int hf_index_open(HfFiles *f, const char *index) {
  memset(f, 0, sizeof *f);
  json_object *root = read_json(index, "a Hugging Face index, {\"weight_map\": {\"tensor\": "
                                       "\"shard file\", ...}}"),
              *map = NULL;
  if (!root) return -1;
  if (!json_object_is_type(root, json_type_object) ||
      !json_object_object_get_ex(root, "weight_map", &map) ||
      !json_object_is_type(map, json_type_object)) {
    not_an_index(index, root);
    json_object_put(root);
    return -1;
  }
  int bad = open_shards(f, index, map) ? 1 : 0;
  f->t = base_xcalloc((size_t)json_object_object_length(map) + 1, sizeof *f->t);
  json_object_object_foreach(map, name, v) {
    const char *shard = json_object_get_string(v);
    RtSt *st = bad ? NULL : shard_named(f, shard);
    const RtTensor *t = st ? rt_st_find(st, name) : NULL;
    if (st && !t) {
      fprintf(stderr, "error: %s: tensor '%s': the index puts it in %s, which does not hold it\n",
              index, name, shard);
      bad++;
    }
    if (t) f->t[f->n++] = *t;
  }
  bad += bad ? 0 : unlisted_tensors(f, index, map);
  json_object_put(root);
  if (!bad) return 0;
  hf_files_close(f);
  return -1;
}

void hf_files_close(HfFiles *f) {
  for (int i = 0; i < f->nst; i++) rt_st_close(f->st[i]);
  free(f->st);
  free(f->t);
  memset(f, 0, sizeof *f);
}

/* ===== shard sizes ===================================================================== */

int hf_shard_size_parse(const char *s, int64_t *bytes) {
  static const struct {
    const char *unit;
    double scale;
  } units[] = {{"", 1},      {"b", 1},        {"kb", 1e3},        {"mb", 1e6},     {"gb", 1e9},
               {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 0x1p30}, {"tib", 0x1p40}};
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  char unit[8];
  size_t n = strlen(end);
  for (size_t i = 0; i < n && i < sizeof unit - 1; i++)
    unit[i] = (char)tolower((unsigned char)end[i]);
  unit[n < sizeof unit - 1 ? n : sizeof unit - 1] = 0;
  for (size_t i = 0; end != s && !errno && n < sizeof unit && i < sizeof units / sizeof *units; i++)
    if (!strcmp(unit, units[i].unit) && v * units[i].scale >= 1 && v * units[i].scale < 0x1p62) {
      *bytes = (int64_t)(v * units[i].scale);
      return 0;
    }
  fprintf(stderr,
          "error: --max-shard-size %s: expected a size of at least 1 byte: bytes, or with a unit: "
          "KB, MB, GB (powers of 1000) or KiB, MiB, GiB (of 1024), e.g. 5GB\n",
          s);
  return -1;
}

/* ===== writing ========================================================================= */

/* The files one conversion writes: the weights (one file, or the shards and their index), and
 * config.json beside them. */
typedef struct Plan {
  int nfiles;
  char **file;   /* (nfiles): OUT, or the shards */
  int *shard_of; /* (n tensors): the file each tensor goes to */
  char index[4200], config[4200];
  /* an earlier export under -o's name that this one makes obsolete, removed once it is in
   * place: one file: the index OUT.index.json and the shards it names; shards: OUT */
  int nstale;
  char **stale; /* (nstale): the index first */
} Plan;

static void plan_free(Plan *p) {
  for (int i = 0; i < p->nfiles; i++) free(p->file[i]);
  for (int i = 0; i < p->nstale; i++) free(p->stale[i]);
  free(p->file);
  free(p->stale);
  free(p->shard_of);
}

static void stale_add(Plan *p, const char *path) {
  for (int i = 0; i < p->nstale; i++)
    if (!strcmp(p->stale[i], path)) return;
  p->stale = base_xrealloc(p->stale, (size_t)(p->nstale + 1) * sizeof *p->stale);
  p->stale[p->nstale++] = fe_asprintf("%s", path);
}

/* What an export to `out` makes obsolete (Plan.stale): -1 (said) when an earlier index cannot
 * be read, as which shards are its own is then unknown. */
static int plan_stale(Plan *p, const char *out) {
  if (p->nfiles > 1) {
    if (is_file(out)) stale_add(p, out);
    return 0;
  }
  char index[4200], dir[4096];
  snprintf(index, sizeof index, "%s.index.json", out);
  struct stat st;
  if (lstat(index, &st) != 0) return 0;
  json_object *root = S_ISREG(st.st_mode) ? read_json(index, "a Hugging Face index") : NULL;
  json_object *map = NULL;
  if (!root || !json_object_object_get_ex(root, "weight_map", &map) ||
      !json_object_is_type(map, json_type_object)) {
    fprintf(stderr,
            "error: %s: an earlier index beside -o %s that is not a Hugging Face index; one "
            "file at -o would leave it beside the new weights, and it cannot say which shards "
            "are its own: remove it\n",
            index, out);
    json_object_put(root);
    return -1;
  }
  stale_add(p, index);
  rt_path_dir(out, dir, sizeof dir);
  json_object_object_foreach(map, name, v) {
    (void)name;
    const char *shard = json_object_get_string(v);
    if (!json_object_is_type(v, json_type_string) || !*shard || strchr(shard, '/')) continue;
    char path[8200];
    snprintf(path, sizeof path, "%s/%s", dir, shard);
    if (strcmp(path, out) != 0 && !rt_file_same(path, out) && is_file(path)) stale_add(p, path);
  }
  json_object_put(root);
  return 0;
}

/* Removes the stale files once the new export is in place, and says so. */
static void remove_stale(const Plan *p, const char *out) {
  int removed = 0;
  for (int i = 0; i < p->nstale; i++) {
    if (unlink(p->stale[i]) == 0)
      removed++;
    else if (errno != ENOENT)
      fprintf(stderr, "warning: %s: cannot remove this stale file: %s\n", p->stale[i],
              strerror(errno));
  }
  if (!removed) return;
  if (p->nfiles > 1)
    fprintf(stderr,
            "note: removed %s, an earlier single-file export, which transformers would load in "
            "place of the index %s\n",
            out, p->index);
  else
    fprintf(stderr,
            "note: removed the earlier sharded export under -o's name: its index %s and the %d "
            "shards it names (readers of the directory would take them for the model in place "
            "of %s)\n",
            p->stale[0], p->nstale - 1, out);
}

/* The bytes of t's data (a tensor to write has no nbytes). */
static int64_t data_bytes(const RtTensor *t) {
  int64_t n = rt_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

/* Tensors in order into files of at most max bytes, as transformers cuts them. */
static void plan_make(Plan *p, const char *out, const RtTensor *t, int n, int64_t max) {
  memset(p, 0, sizeof *p);
  p->shard_of = base_xcalloc((size_t)n + 1, sizeof *p->shard_of);
  int64_t used = 0;
  int shard = 0;
  for (int i = 0; i < n; i++) {
    int64_t bytes = data_bytes(&t[i]);
    if (used > 0 && used + bytes > max) shard++, used = 0;
    used += bytes;
    p->shard_of[i] = shard;
  }
  p->nfiles = n ? shard + 1 : 1;
  p->file = base_xcalloc((size_t)p->nfiles, sizeof *p->file);
  size_t len = strlen(out), ext = strlen(".safetensors");
  int stem = (int)(len > ext && !strcmp(out + len - ext, ".safetensors") ? len - ext : len);
  for (int i = 0; i < p->nfiles; i++)
    p->file[i] = p->nfiles == 1
                     ? fe_asprintf("%s", out)
                     : fe_asprintf("%.*s-%05d-of-%05d.safetensors", stem, out, i + 1, p->nfiles);
  if (p->nfiles > 1) snprintf(p->index, sizeof p->index, "%s.index.json", out);
  char dir[4096];
  rt_path_dir(out, dir, sizeof dir);
  snprintf(p->config, sizeof p->config, "%s/config.json", dir);
}

/* An output that exists must be a regular file (a link to one): a weight file is renamed
 * into place, which would replace a FIFO or a device rather than write to it. */
static int refuse_special(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return 0;
  fprintf(stderr,
          "error: %s: exists and is %s, not a regular file; refusing to replace it (name a new "
          "file)\n",
          path,
          S_ISDIR(st.st_mode)    ? "a directory"
          : S_ISFIFO(st.st_mode) ? "a FIFO"
          : S_ISSOCK(st.st_mode) ? "a socket"
                                 : "a device");
  return -1;
}

/* Every output against every input, before anything is written. */
static int plan_check(const Plan *p, const char *out, const RtPathArg *in, int nin) {
  for (int i = 0; i < p->nfiles; i++)
    if (refuse_special(p->file[i])) return -1;
  (void)out;
  RtPathArg *o = base_xcalloc((size_t)(p->nfiles + p->nstale) + 2, sizeof *o);
  int n = 0;
  for (int i = 0; i < p->nfiles; i++)
    o[n++] = (RtPathArg){p->nfiles == 1 ? "-o" : "a shard of -o", p->file[i], NULL};
  if (p->index[0]) o[n++] = (RtPathArg){"the index of -o", p->index, NULL};
  o[n++] = (RtPathArg){"config.json beside -o", p->config, NULL};
  /* what is removed must not be read either */
  for (int i = 0; i < p->nstale; i++)
    o[n++] = (RtPathArg){"a stale file of an earlier export to -o (removed)", p->stale[i], NULL};
  RtError err;
  int rc = rt_file_check_outputs(o, n, in, nin, &err);
  if (rc) fprintf(stderr, "error: %s\n", err.msg);
  free(o);
  return rc;
}

/* Text into `path`, atomically. */
static int write_text(const char *path, const char *text) {
  RtError err;
  if (rt_file_write_atomic(path, text, strlen(text), &err) == 0) return 0;
  fprintf(stderr, "error: %s\n", err.msg);
  return -1;
}

static char *staged(const char *file) { return fe_asprintf("%s.tmp", file); }

/* Removes the temporaries of weight files [from, to). */
static void unstage(const Plan *p, int from, int to) {
  for (int f = from; f < to; f++) {
    char *tmp = staged(p->file[f]);
    unlink(tmp);
    free(tmp);
  }
}

/* Each weight file whole under its temporary name; on a failure none is left. */
static int write_staged(const Plan *p, const RtTensor *t, int n, const RtMeta *meta, int nmeta) {
  RtTensor *part = base_xcalloc((size_t)n + 1, sizeof *part);
  int written = 0;
  for (; written < p->nfiles; written++) {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (p->shard_of[i] == written) part[k++] = t[i];
    char *tmp = staged(p->file[written]);
    RtError err;
    int rc = rt_st_write(tmp, part, k, meta, nmeta, NULL, NULL, &err);
    free(tmp);
    if (rc) {
      fprintf(stderr, "error: %s\n", err.msg);
      break;
    }
  }
  free(part);
  if (written == p->nfiles) return 0;
  unstage(p, 0, written);
  return -1;
}

/* The staged weight files renamed into place; on a failure the rest are removed. */
static int commit_staged(const Plan *p, const char *out) {
  for (int f = 0; f < p->nfiles; f++) {
    char *tmp = staged(p->file[f]);
    int rc = rename(tmp, p->file[f]);
    if (rc)
      fprintf(stderr, "error: %s: cannot rename to %s: %s\n", tmp, p->file[f], strerror(errno));
    free(tmp);
    if (rc) {
      unstage(p, f, p->nfiles);
      return -1;
    }
  }
  char dir[4096];
  RtError err;
  rt_path_dir(out, dir, sizeof dir);
  if (rt_dir_fsync(dir, &err) == 0) return 0;
  fprintf(stderr, "error: %s\n", err.msg);
  return -1;
}

/* The index: the total size and every tensor's shard, by name. */
static char *index_text(const Plan *p, const RtTensor *t, int n) {
  const RtTensor **sorted = base_xcalloc((size_t)n + 1, sizeof *sorted);
  int64_t total = 0;
  for (int i = 0; i < n; i++) sorted[i] = &t[i], total += data_bytes(&t[i]);
  for (int i = 1; i < n; i++) /* insertion sort: names, for a stable index */
    for (int j = i; j > 0 && strcmp(sorted[j - 1]->name, sorted[j]->name) > 0; j--) {
      const RtTensor *x = sorted[j];
      sorted[j] = sorted[j - 1], sorted[j - 1] = x;
    }
  json_object *root = json_object_new_object(), *meta = json_object_new_object();
  json_object *map = json_object_new_object();
  json_object_object_add(meta, "total_size", json_object_new_int64(total));
  json_object_object_add(root, "metadata", meta);
  for (int i = 0; i < n; i++) {
    const char *file = p->file[p->shard_of[sorted[i] - t]], *slash = strrchr(file, '/');
    json_object_object_add(map, sorted[i]->name, json_object_new_string(slash ? slash + 1 : file));
  }
  json_object_object_add(root, "weight_map", map);
  char *text = fe_asprintf("%s\n", json_object_to_json_string_ext(
                                       root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(root);
  free(sorted);
  return text;
}

int hf_write(const HfWrite *w) {
  Plan p;
  plan_make(&p, w->out, w->t, w->n, w->max_shard);
  int rc = plan_stale(&p, w->out);
  if (!rc) rc = plan_check(&p, w->out, w->inputs, w->ninputs);
  if (!rc) rc = write_staged(&p, w->t, w->n, w->meta, w->nmeta);
  if (!rc && write_text(p.config, w->config)) {
    unstage(&p, 0, p.nfiles);
    rc = -1;
  }
  if (!rc) rc = commit_staged(&p, w->out);
  if (!rc && p.index[0]) { /* last: the index makes the shards a checkpoint */
    char *text = index_text(&p, w->t, w->n);
    rc = write_text(p.index, text);
    free(text);
  }
  if (!rc) remove_stale(&p, w->out);
  plan_free(&p);
  return rc;
}

/* ===== config.json ===================================================================== */

static void put_int(json_object *o, const char *key, int64_t v) {
  json_object_object_add(o, key, json_object_new_int64(v));
}

static void put_num(json_object *o, const char *key, double v) {
  json_object_object_add(o, key, json_object_new_double(v));
}

static void put_bool(json_object *o, const char *key, bool v) {
  json_object_object_add(o, key, json_object_new_boolean(v));
}

static void put_str(json_object *o, const char *key, const char *v) {
  json_object_object_add(o, key, v ? json_object_new_string(v) : NULL);
}

/* The last dimension of parameter `path` of b (a hidden size), 0 when there is none. */
static int64_t last_dim(const FeBuild *b, const char *path) {
  int i = fe_param_find(b, path);
  return i < 0 ? 0 : b->params[i].shape[b->params[i].rank - 1];
}

static void config_gpt2(json_object *o, const FeBuild *b, json_object *model) {
  json_object *dec = fe_get_child(model, "decoder"), *layer = fe_get_child(dec, "layer");
  json_object *attn = fe_get_child(layer, "self_attention");
  put_str(o, "model_type", "gpt2");
  put_int(o, "n_embd", fe_get_int(model, "dim"));
  put_int(o, "n_layer", fe_get_int(dec, "num_layers"));
  put_int(o, "n_head", fe_get_int(attn, "num_heads"));
  put_int(o, "n_inner", last_dim(b, "model/decoder/layer_0/feed_forward/linear1/weight"));
  put_int(o, "n_positions", fe_get_int(fe_get_child(model, "pos_emb"), "max_len"));
  put_str(o, "activation_function", "gelu_new");
  put_num(o, "layer_norm_epsilon", fe_get_float(fe_get_child(layer, "norm"), "eps"));
  /* axlc trains without dropout; GPT-2's default is 0.1 */
  put_num(o, "attn_pdrop", 0), put_num(o, "embd_pdrop", 0), put_num(o, "resid_pdrop", 0);
}

/* Llama's fields, and Mixtral's (`experts` > 0) on top of them. */
static void config_llama(json_object *o, const FeBuild *b, json_object *root, int64_t experts) {
  json_object *model = fe_get_child(root, "model"), *dec = fe_get_child(model, "decoder");
  json_object *layer = fe_get_child(dec, "layer"), *attn = fe_get_child(layer, "self_attention");
  json_object *ff = fe_get_child(layer, "feed_forward");
  int64_t dim = fe_get_int(model, "dim"), heads = fe_get_int(attn, "num_heads");
  int64_t kv = fe_get_int(attn, "num_kv_heads");
  put_str(o, "model_type", experts ? "mixtral" : "llama");
  put_int(o, "hidden_size", dim);
  put_int(o, "intermediate_size",
          last_dim(b, "model/decoder/layer_0/feed_forward/linear1_0/weight"));
  put_int(o, "num_hidden_layers", fe_get_int(dec, "num_layers"));
  put_int(o, "num_attention_heads", heads);
  put_int(o, "num_key_value_heads", kv ? kv : heads);
  put_int(o, "head_dim", dim / heads);
  put_str(o, "hidden_act", "silu");
  put_int(o, "max_position_embeddings", fe_get_int(fe_get_child(root, "input"), "seq_len"));
  put_num(o, "rms_norm_eps", fe_get_float(fe_get_child(layer, "norm"), "eps"));
  put_num(o, "rope_theta", fe_get_float(fe_get_child(attn, "rope"), "theta"));
  put_str(o, "rope_scaling", NULL);
  put_num(o, "attention_dropout", 0);
  if (!experts) {
    put_bool(o, "attention_bias", fe_get_bool(attn, "bias"));
    put_bool(o, "mlp_bias", fe_get_bool(ff, "bias"));
    return;
  }
  put_int(o, "num_local_experts", experts);
  put_int(o, "num_experts_per_tok", fe_get_int(ff, "top_k"));
  put_num(o, "router_aux_loss_coef", fe_get_float(ff, "load_balance_loss_weight"));
  put_bool(o, "output_router_logits", false);
  put_num(o, "router_jitter_noise", 0);
  put_str(o, "sliding_window", NULL); /* axlc attends to the whole causal window */
}

char *hf_config_text(const FeBuild *b, const char *family, RtDtype dtype) {
  json_object *root = b->root, *model = fe_get_child(root, "model");
  bool gpt2 = !strcmp(family, "GPT-2"), moe = !strcmp(family, "Mixtral");
  const char *arch = gpt2 ? "GPT2LMHeadModel" : moe ? "MixtralForCausalLM" : "LlamaForCausalLM";
  json_object *o = json_object_new_object(), *archs = json_object_new_array();
  json_object_array_add(archs, json_object_new_string(arch));
  json_object_object_add(o, "architectures", archs);
  if (gpt2)
    config_gpt2(o, b, model);
  else
    config_llama(
        o, b, root,
        moe ? fe_get_int(fe_get_child(fe_get_child(fe_get_child(model, "decoder"), "layer"),
                                      "feed_forward"),
                         "num_experts")
            : 0);
  put_int(o, "vocab_size", fe_get_int(model, "vocab_size"));
  put_bool(o, "tie_word_embeddings", fe_get_bool(fe_get_child(model, "lm_head"), "tied"));
  put_str(o, "torch_dtype",
          dtype == RT_DT_BF16  ? "bfloat16"
          : dtype == RT_DT_F16 ? "float16"
                               : "float32");
  char *text = fe_asprintf(
      "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(o);
  return text;
}

/* ===== config.json beside weights read ================================================= */

/* One number of config.json and what the axlc config says it is. */
typedef struct Field {
  const char *key;
  double want;
  const char *axlc; /* the config path that sets it, for the message */
} Field;

/* Number `key` of cfg into *v; 0 when it is absent or null (nothing to check). */
static int number(json_object *cfg, const char *key, double *v) {
  json_object *x;
  if (!json_object_object_get_ex(cfg, key, &x) || !x) return 0;
  if (json_object_is_type(x, json_type_boolean)) {
    *v = json_object_get_boolean(x);
    return 1;
  }
  if (!json_object_is_type(x, json_type_int) && !json_object_is_type(x, json_type_double)) return 0;
  *v = json_object_get_double(x);
  return 1;
}

static int check_fields(const char *path, json_object *cfg, const Field *f, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    double got;
    if (!number(cfg, f[i].key, &got) || fabs(got - f[i].want) <= 1e-9 * fabs(f[i].want)) continue;
    fprintf(stderr, "error: %s: %s is %.10g, but %s is %.10g (set it to match: --set)\n", path,
            f[i].key, got, f[i].axlc, f[i].want);
    bad++;
  }
  return bad;
}

#define LAYER_PATH "/model/decoder/layer"

/* The fields of config.json each family's weights are computed with, from the axlc config. */
static int family_fields(const FeBuild *b, bool gpt2, bool moe, Field *f) {
  json_object *model = fe_get_child(b->root, "model"), *dec = fe_get_child(model, "decoder");
  json_object *layer = fe_get_child(dec, "layer"), *attn = fe_get_child(layer, "self_attention");
  json_object *ff = fe_get_child(layer, "feed_forward");
  double dim = (double)fe_get_int(model, "dim"), heads = (double)fe_get_int(attn, "num_heads");
  double kv = (double)fe_get_int(attn, "num_kv_heads"),
         eps = fe_get_float(fe_get_child(layer, "norm"), "eps");
  double tied = fe_get_bool(fe_get_child(model, "lm_head"), "tied");
  int n = 0;
  f[n++] = (Field){"vocab_size", (double)fe_get_int(model, "vocab_size"), "/model/vocab_size"};
  f[n++] = (Field){"tie_word_embeddings", tied, "/model/lm_head/tied"};
  if (gpt2) {
    f[n++] = (Field){"n_embd", dim, "/model/dim"};
    f[n++] = (Field){"n_layer", (double)fe_get_int(dec, "num_layers"), "/model/decoder/num_layers"};
    f[n++] = (Field){"n_head", heads, LAYER_PATH "/self_attention/num_heads"};
    f[n++] = (Field){"layer_norm_epsilon", eps, LAYER_PATH "/norm/eps"};
    return n;
  }
  f[n++] = (Field){"hidden_size", dim, "/model/dim"};
  f[n++] = (Field){"num_hidden_layers", (double)fe_get_int(dec, "num_layers"),
                   "/model/decoder/num_layers"};
  f[n++] = (Field){"num_attention_heads", heads, LAYER_PATH "/self_attention/num_heads"};
  f[n++] =
      (Field){"num_key_value_heads", kv ? kv : heads, LAYER_PATH "/self_attention/num_kv_heads"};
  f[n++] = (Field){"head_dim", dim / heads, "/model/dim / num_heads"};
  f[n++] = (Field){"rms_norm_eps", eps, LAYER_PATH "/norm/eps"};
  f[n++] = (Field){"rope_theta", fe_get_float(fe_get_child(attn, "rope"), "theta"),
                   LAYER_PATH "/self_attention/rope/theta"};
  if (!moe) return n;
  f[n++] = (Field){"num_local_experts", (double)fe_get_int(ff, "num_experts"),
                   LAYER_PATH "/feed_forward/num_experts"};
  f[n++] = (Field){"num_experts_per_tok", (double)fe_get_int(ff, "top_k"),
                   LAYER_PATH "/feed_forward/top_k"};
  return n;
}

/* model_type against the family: Mistral's dense models have Llama's names and layouts. */
static int check_type(const char *path, json_object *cfg, const char *family) {
  json_object *x;
  if (!json_object_object_get_ex(cfg, "model_type", &x) ||
      !json_object_is_type(x, json_type_string))
    return 0;
  const char *type = json_object_get_string(x);
  bool ok = !strcmp(family, "GPT-2")     ? !strcmp(type, "gpt2")
            : !strcmp(family, "Mixtral") ? !strcmp(type, "mixtral")
                                         : !strcmp(type, "llama") || !strcmp(type, "mistral");
  if (ok) return 0;
  fprintf(stderr,
          "error: %s: model_type \"%s\", but the config makes a %s model (a learned position "
          "embedding makes GPT-2, a moe feed_forward Mixtral, else Llama)\n",
          path, type, family);
  return 1;
}

/* axlc attends to the whole causal window: a sliding window no shorter than seq_len is the same. */
static int check_window(const char *path, json_object *cfg, int64_t seq) {
  double w, use = 1;
  if (!number(cfg, "sliding_window", &w) || (number(cfg, "use_sliding_window", &use) && !use) ||
      w >= (double)seq)
    return 0;
  fprintf(stderr,
          "error: %s: sliding_window is %.0f, below /input/seq_len %lld: axlc does not model "
          "sliding-window attention (set /input/seq_len to at most %.0f, where the two agree)\n",
          path, w, (long long)seq, w);
  return 1;
}

int hf_config_check(const FeBuild *b, const char *family, const char *path) {
  json_object *cfg = read_json(path, "a Hugging Face model's config.json");
  if (!cfg) return -1;
  Field f[16];
  bool gpt2 = !strcmp(family, "GPT-2"), moe = !strcmp(family, "Mixtral");
  int bad = check_type(path, cfg, family);
  if (!bad) bad += check_fields(path, cfg, f, family_fields(b, gpt2, moe, f));
  if (!bad) bad += check_window(path, cfg, fe_get_int(fe_get_child(b->root, "input"), "seq_len"));
  json_object_put(cfg);
  return bad ? -1 : 0;
}
