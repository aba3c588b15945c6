/*
 * fingerprint.c: what makes a checkpoint belong to a model.
 *
 * A model's fingerprint is "fnv1a64:<16 hex digits>" over its parameter table (path, dtype
 * and shape of every parameter, in order) and the "model" member of its config. Checkpoints
 * store it; a trainer resuming compares it with its own, and when they differ rt_model_diff
 * says how, item by item, so that a changed model is refused with what changed rather than
 * loaded half-way. Configs are compared as JSON trees, path by path.
 */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rt_impl.h"

/* ===== fingerprints =================================================================== */

static uint64_t fnv1a(uint64_t h, const void *buf, size_t n) {
    const unsigned char *p = buf;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The "model" member of a config text, as compact JSON; NULL if there is none. The caller
 * frees it with json_object_put(*root). */
static const char *model_text(const char *config, json_object **root) {
    *root = config && config[0] ? json_tokener_parse(config) : NULL;
    json_object *model;
    if (!*root || !json_object_object_get_ex(*root, "model", &model))
        return NULL;
    return json_object_to_json_string_ext(model, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

void rt_fingerprint(char out[RT_FINGERPRINT_MAX], const RtParamSlot *params, int n, const char *config) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        char line[64];
        h = fnv1a(h, params[i].path, strlen(params[i].path) + 1);
        for (int d = 0; d < params[i].rank; d++) {
            int len = snprintf(line, sizeof line, "%lld,", (long long)params[i].global_shape[d]);
            h = fnv1a(h, line, (size_t)len);
        }
        h = fnv1a(h, "F32;", 4); /* every parameter is f32 in the slab (RtParamSlot) */
    }
    json_object *root;
    const char *model = model_text(config, &root);
    if (model)
        h = fnv1a(h, model, strlen(model));
    json_object_put(root);
    snprintf(out, RT_FINGERPRINT_MAX, "fnv1a64:%016" PRIx64, h);
}

/* ===== differences ==================================================================== */

/* A "; "-separated list of items, cut at its capacity; count goes on past the cut. */
typedef struct Diff {
    char *out;
    size_t cap, len;
    int count;
} Diff;

static void diff_add(Diff *d, const char *fmt, ...) RT_PRINTF(2, 3);
static void diff_add(Diff *d, const char *fmt, ...) {
    if (d->count++ > 0 && d->len + 2 < d->cap) {
        memcpy(d->out + d->len, "; ", 3);
        d->len += 2;
    }
    if (d->len + 1 >= d->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->out + d->len, d->cap - d->len, fmt, ap);
    va_end(ap);
    d->len = n < 0 ? d->len : d->len + (size_t)n >= d->cap ? d->cap - 1 : d->len + (size_t)n;
}

static const char *short_json(json_object *v, char *buf, size_t cap) {
    const char *s = v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "absent";
    if (strlen(s) < cap)
        return strcpy(buf, s);
    snprintf(buf, cap, "%.*s...", (int)cap - 4, s);
    return buf;
}

static void diff_value(Diff *d, const char *path, json_object *here, json_object *there) {
    char a[48], b[48];
    diff_add(d, "%s: %s here, %s in the checkpoint", path, short_json(here, a, sizeof a),
             short_json(there, b, sizeof b));
}

/* Every path where the trees differ: objects member by member, anything else as a value. */
static void diff_json(Diff *d, const char *path, json_object *here, json_object *there) {
    if (!json_object_is_type(here, json_type_object) || !json_object_is_type(there, json_type_object)) {
        if (!json_object_equal(here, there))
            diff_value(d, path, here, there);
        return;
    }
    char sub[1024];
    json_object_object_foreach(here, key, value) {
        json_object *other;
        snprintf(sub, sizeof sub, "%s/%s", path, key);
        if (json_object_object_get_ex(there, key, &other))
            diff_json(d, sub, value, other);
        else
            diff_value(d, sub, value, NULL);
    }
    json_object_object_foreach(there, key2, value2) {
        if (!json_object_object_get_ex(here, key2, NULL)) {
            snprintf(sub, sizeof sub, "%s/%s", path, key2);
            diff_value(d, sub, NULL, value2);
        }
    }
}

/* Config differences inside /model (model != 0) or outside it (model == 0). A config that is
 * empty or not JSON (a checkpoint saved without one) is not compared. */
static void diff_configs(Diff *d, const char *here, const char *there, int model) {
    json_object *a = here && here[0] ? json_tokener_parse(here) : NULL;
    json_object *b = there && there[0] ? json_tokener_parse(there) : NULL;
    if (json_object_is_type(a, json_type_object) && json_object_is_type(b, json_type_object)) {
        json_object *ma = NULL, *mb = NULL;
        json_object_object_get_ex(a, "model", &ma);
        json_object_object_get_ex(b, "model", &mb);
        if (model && (ma || mb)) {
            diff_json(d, "/model", ma, mb);
        } else if (!model) {
            json_object_object_del(a, "model");
            json_object_object_del(b, "model");
            diff_json(d, "", a, b);
        }
    }
    json_object_put(a);
    json_object_put(b);
}

#define NAMES_SHOWN 3

/* Appends one item for a group of parameter names: "N parameters WHAT: a, b, c and M more". */
typedef struct Group {
    const char *what;
    int n;
    char names[3 * 256];
} Group;

static void group_add(Group *g, const char *name) {
    if (g->n++ < NAMES_SHOWN) {
        size_t len = strlen(g->names);
        snprintf(g->names + len, sizeof g->names - len, "%s%.200s", len ? ", " : "", name);
    }
}

static void group_flush(Diff *d, const Group *g) {
    if (g->n == 0)
        return;
    char more[48] = "";
    if (g->n > NAMES_SHOWN)
        snprintf(more, sizeof more, " and %d more", g->n - NAMES_SHOWN);
    diff_add(d, "%d parameter%s %s: %s%s", g->n, g->n == 1 ? "" : "s", g->what, g->names, more);
    d->count += g->n - 1;
}

/* Parameters missing from st, with another shape there, and tensors of st that are neither a
 * parameter nor an optimizer slot ("opt/...") of one. Shape differences are listed one by one
 * (with both shapes); missing and extra names by group. */
static void diff_tensors(Diff *d, const RtParamSlot *params, int n, const RtCkpt *ck) {
    char a[96], b[96];
    Group missing = {.what = "not in the checkpoint"}, extra = {.what = "only in the checkpoint"};
    for (int i = 0; i < n; i++) {
        const RtTensor *t = rt_ckpt_find(ck, params[i].path);
        if (!t && params[i].m_offset < 0 && rt_ckpt_base(ck)[0]) /* a LoRA run's frozen base: never saved */
            continue;
        if (!t) {
            group_add(&missing, params[i].path);
        } else if (t->ndim != params[i].rank ||
                   memcmp(t->shape, params[i].global_shape, (size_t)t->ndim * sizeof *t->shape) != 0) {
            rt_shape_text(a, sizeof a, params[i].global_shape, params[i].rank);
            rt_shape_text(b, sizeof b, t->shape, t->ndim);
            diff_add(d, "parameter %s: shape %s here, %s in the checkpoint", params[i].path, a, b);
        }
    }
    for (int j = 0; j < rt_ckpt_count(ck); j++) {
        const char *name = rt_ckpt_tensor(ck, j)->name;
        int known = strncmp(name, "opt/", 4) == 0;
        for (int i = 0; i < n && !known; i++)
            known = strcmp(name, params[i].path) == 0;
        if (!known)
            group_add(&extra, name);
    }
    group_flush(d, &missing);
    group_flush(d, &extra);
}

int rt_model_diff(const RtParamSlot *params, int n, const char *config, const RtCkpt *ck, const char *ck_config,
                  char *out, size_t cap) {
    Diff d = {out, cap, 0, 0};
    out[0] = '\0';
    diff_configs(&d, config, ck_config, 1);
    diff_tensors(&d, params, n, ck);
    return d.count;
}
int rt_config_diff_outside_model(const char *config, const char *ck_config, char *out, size_t cap) {
    Diff d = {out, cap, 0, 0};
    out[0] = '\0';
    diff_configs(&d, config, ck_config, 0);
    return d.count;
}
