/*
 * find.c: where a config file named by another file, or on the command line, is read from.
 *
 * A name is looked up in order: next to the file that names it (for the command line: the
 * current directory), then in each directory of the search path (FeSearch: AXLC_PATH, then
 * the installed share/axlc, or the source tree's models/ when axlc runs from a build). A
 * name without ".json" also matches NAME.json, and a bare name (no '/') given to --apply also
 * matches modifiers/NAME.json, so `--apply moe` finds the shipped modifier. An absolute name
 * is never searched. A miss is an error that lists every directory looked in.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* dir/prefix+name+suffix if that is a file, interned; else NULL. */
static const char *try_one(FeDiag *d, const char *dir, const char *prefix, const char *name,
                           const char *suffix) {
  char *p = dir ? fe_asprintf("%s/%s%s%s", dir, prefix, name, suffix)
                : fe_asprintf("%s%s%s", prefix, name, suffix);
  const char *hit = is_file(p) ? fe_intern(d, p) : NULL;
  free(p);
  return hit;
}

/* The spellings of `name` tried in one directory, in order. */
static const char *try_dir(FeDiag *d, const char *dir, const char *name, bool modifier) {
  bool bare = !ends_with(name, ".json");
  const char *hit = try_one(d, dir, "", name, "");
  if (!hit && bare) hit = try_one(d, dir, "", name, ".json");
  if (!hit && modifier && !strchr(name, '/')) {
    hit = try_one(d, dir, "modifiers/", name, "");
    if (!hit && bare) hit = try_one(d, dir, "modifiers/", name, ".json");
  }
  return hit;
}

const char *fe_find_file(FeDiag *d, const char *file, const char *jpath, const char *dir,
                         const char *name, const FeSearch *s, bool modifier) {
  if (!*name) {
    fe_error(d, file, jpath, "expected a file name, got \"\"");
    return NULL;
  }
  if (name[0] == '/') return fe_intern(d, name); /* read (and reported) as given */
  const char *hit = try_dir(d, dir, name, modifier);
  for (int i = 0; !hit && s && i < s->ndirs; i++) hit = try_dir(d, s->dirs[i], name, modifier);
  if (hit) return hit;
  char *where = fe_asprintf("%s", dir ? dir : ".");
  for (int i = 0; s && i < s->ndirs; i++) {
    char *longer = fe_asprintf("%s, %s", where, s->dirs[i]);
    free(where);
    where = longer;
  }
  fe_error(d, file, jpath, "%s: no such file (looked in %s; AXLC_PATH adds directories)", name,
           where);
  free(where);
  return NULL;
}
