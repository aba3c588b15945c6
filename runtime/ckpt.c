/*
 * ckpt.c: checkpoints.
 *
 * A checkpoint of step S is the directory DIR/step_<S, 8 digits>/ holding
 *   state.safetensors  parameters by path and optimizer state ("opt/m/<path>", ...); its
 *                      __metadata__ holds axlc.step, axlc.data_position, axlc.rng_state,
 *                      axlc.config (the resolved config text), axlc.fingerprint,
 *                      axlc.trainer_state (the trainer's own, as text) and, for a run with
 *                      frozen parameters (LoRA), axlc.base (where its base weights came from);
 *   index.json         {"format": "axlc-checkpoint", "version": 1, "step": S,
 *                       "files": [{"name": ..., "bytes": ..., "crc32": ...}]}.
 * Every file is written under a temporary name, fsynced and renamed; index.json is written
 * last, so a checkpoint is complete exactly when its index exists. A save that fails removes
 * what it wrote. A trainer holds DIR/.lock (flock) while it uses DIR, so two never write one
 * directory. Deleting removes the
 * index first, so a half-deleted checkpoint is merely incomplete. Loading verifies every
 * listed file's size and CRC-32 before anything is read from it. Links are never followed
 * where something is deleted or created: a step_<S> entry that is a symbolic link is not a
 * checkpoint (not listed, never written into or pruned: pruning through it would delete the
 * files of the directory it points to), deletion works relative to the step directory's
 * descriptor, and the lock and probe files are opened with O_NOFOLLOW.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "rt_impl.h"

#define STATE_FILE "state.safetensors"
#define INDEX_FILE "index.json"
#define LOCK_FILE  ".lock"
#define PATH_CAP   4096

/* One stored piece of a tensor: all of it (format 1) or one rank's chunk (format 2). */
typedef struct Shard {
    const RtTensor *t;          /* in its file; t->shape is the piece's shape */
    int64_t start[RT_MAX_DIMS]; /* where it lies in the global tensor */
} Shard;

typedef struct CkTensor {
    RtTensor g; /* name, dtype, global rank and shape; data NULL */
    Shard *shards;
    int nshards, cap;
} CkTensor;

struct RtCkpt {
    int64_t step, data_position;
    uint64_t rng_state;
    const char *config, *fingerprint, *base, *trainer_state; /* point into st's metadata */
    RtSt *st;                                                /* the state file (format 1) or rank 0's (format 2) */
    RtSt **files;                                            /* (nfiles) every tensor file, st among them */
    int nfiles;
    CkTensor *tensors; /* (ntensors) */
    int ntensors;
};

/* ===== names ========================================================================== */

static int step_path(char *buf, const char *dir, int64_t step, const char *file, RtError *err) {
    int len = file ? snprintf(buf, PATH_CAP, "%s/step_%08lld/%s", dir, (long long)step, file)
                   : snprintf(buf, PATH_CAP, "%s/step_%08lld", dir, (long long)step);
    return len < PATH_CAP ? 0 : rt_error_set(err, "%s: checkpoint path too long", dir);
}

static int join_path(char *buf, const char *dir, const char *name, RtError *err) {
    if (snprintf(buf, PATH_CAP, "%s/%s", dir, name) >= PATH_CAP)
        return rt_error_set(err, "%s: path too long", dir);
    return 0;
}

/* "step_00000020" -> 20. Only the name step_path gives a step counts: anything else
 * (temporaries, "step_000000020", "step_00000020.damaged") -> -1, so no step is seen twice. */
static int64_t parse_step_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || strlen(name) < 13 || strlen(name) > 23)
        return -1;
    int64_t step = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || step > (INT64_MAX - 9) / 10)
            return -1;
        step = step * 10 + (*p - '0');
    }
    char canonical[32];
    snprintf(canonical, sizeof canonical, "step_%08lld", (long long)step);
    return strcmp(canonical, name) == 0 ? step : -1;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ===== listing ======================================================================== */

typedef struct StepList {
    int64_t *steps; /* (n) newest first */
    int n, cap;
} StepList;

static int list_push(StepList *l, int64_t step) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        int64_t *s = realloc(l->steps, (size_t)cap * sizeof *s);
        if (!s)
            return -1;
        l->steps = s;
        l->cap = cap;
    }
    l->steps[l->n++] = step;
    return 0;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* A directory itself, not a link to one (lstat). */
static int is_dir(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_complete(const char *dir, int64_t step) {
    char index[PATH_CAP];
    return step_path(index, dir, step, INDEX_FILE, NULL) == 0 && is_file(index);
}

/* Steps of the checkpoint directories in `dir` that are complete (or, with complete == 0,
 * incomplete), newest first. A missing `dir` holds none. */
static int list_steps(const char *dir, int complete, StepList *l, RtError *err) {
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : rt_error_set(err, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *ent;
    int rc = 0;
    char path[PATH_CAP];
    while (rc == 0 && (ent = readdir(d)) != NULL) {
        int64_t step = parse_step_name(ent->d_name);
        if (step < 0 || join_path(path, dir, ent->d_name, NULL) != 0 || !is_dir(path))
            continue; /* not a checkpoint: a stray file or link of that name is not ours to delete */
        if (is_complete(dir, step) == complete && list_push(l, step) != 0)
            rc = rt_error_set(err, "%s: out of memory", dir);
    }
    if (closedir(d) != 0 && rc == 0)
        rc = rt_error_set(err, "%s: cannot close directory: %s", dir, strerror(errno));
    if (rc != 0)
        free(l->steps);
    else if (l->n > 1) /* steps is NULL when empty, and qsort wants a pointer */
        qsort(l->steps, (size_t)l->n, sizeof *l->steps, cmp_desc);
    return rc;
}

int rt_ckpt_latest(const char *dir, int64_t below, int64_t *step, RtError *err) {
    StepList l;
    if (list_steps(dir, 1, &l, err) != 0)
        return -1;
    int found = 0;
    for (int i = 0; i < l.n && !found; i++)
        if (l.steps[i] < below) {
            *step = l.steps[i];
            found = 1;
        }
    free(l.steps);
    return found;
}

int rt_ckpt_links(const char *dir, char *names, size_t cap) {
    if (cap)
        names[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *ent;
    char path[PATH_CAP];
    struct stat st;
    int n = 0;
    size_t len = 0;
    while ((ent = readdir(d)) != NULL)
        if (parse_step_name(ent->d_name) >= 0 && join_path(path, dir, ent->d_name, NULL) == 0 &&
            lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
            if (len < cap)
                len += (size_t)snprintf(names + len, cap - len, "%s%s", n ? ", " : "", ent->d_name);
            n++;
        }
    closedir(d);
    return n;
}

/* ===== deleting ======================================================================= */

/* Removes the files of the step directory open as sfd (unlinkat: a link inside is removed,
 * never followed). Takes sfd. */
static int unlink_all(int sfd, const char *sdir, RtError *err) {
    DIR *d = fdopendir(sfd);
    if (!d) {
        int e = errno;
        close(sfd);
        return rt_error_set(err, "%s: cannot list: %s", sdir, strerror(e));
    }
    struct dirent *ent;
    int rc = 0;
    while (rc == 0 && (ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        if (unlinkat(dirfd(d), ent->d_name, 0) != 0)
            rc = rt_error_set(err, "%s/%s: cannot delete: %s", sdir, ent->d_name, strerror(errno));
    }
    if (closedir(d) != 0 && rc == 0)
        rc = rt_error_set(err, "%s: cannot close directory: %s", sdir, strerror(errno));
    return rc;
}

/* Index first (and made durable), so a crash mid-delete leaves an incomplete checkpoint. The
 * step directory is opened with O_NOFOLLOW: a link in its place is refused, not pruned
 * through. */
static int remove_ckpt(const char *dir, int64_t step, RtError *err) {
    char sdir[PATH_CAP], name[32];
    if (step_path(sdir, dir, step, NULL, err) != 0)
        return -1;
    snprintf(name, sizeof name, "step_%08lld", (long long)step);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return rt_error_set(err, "%s: cannot open directory: %s", dir, strerror(errno));
    int sfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
    if (sfd < 0)
        rc = rt_error_set(err, "%s: cannot open directory%s: %s", sdir, errno == ELOOP ? " (a link: not deleted)" : "",
                          strerror(errno));
    else if (unlinkat(sfd, INDEX_FILE, 0) != 0 && errno != ENOENT)
        rc = rt_error_set(err, "%s/%s: cannot delete: %s", sdir, INDEX_FILE, strerror(errno));
    else if (fsync(sfd) != 0)
        rc = rt_error_set(err, "%s: fsync of directory failed: %s", sdir, strerror(errno));
    if (sfd >= 0 && rc != 0)
        close(sfd);
    else if (sfd >= 0 && (rc = unlink_all(sfd, sdir, err)) == 0 && unlinkat(dfd, name, AT_REMOVEDIR) != 0)
        rc = rt_error_set(err, "%s: cannot remove directory: %s", sdir, strerror(errno));
    close(dfd);
    return rc;
}

/* Keeps the newest keep_last complete checkpoints, and drops leftovers of failed saves
 * older than `saved`. */
static int prune(const char *dir, int keep_last, int64_t saved, RtError *err) {
    StepList done, partial;
    if (list_steps(dir, 1, &done, err) != 0)
        return -1;
    int rc = list_steps(dir, 0, &partial, err);
    for (int i = keep_last; rc == 0 && keep_last > 0 && i < done.n; i++)
        rc = remove_ckpt(dir, done.steps[i], err);
    for (int i = 0; rc == 0 && i < partial.n; i++)
        if (partial.steps[i] < saved)
            rc = remove_ckpt(dir, partial.steps[i], err);
    free(done.steps);
    free(partial.steps);
    return rc == 0 ? rt_dir_fsync(dir, err) : -1;
}

/* ===== saving ========================================================================= */

static int make_dir(const char *path, RtError *err) {
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return rt_error_set(err, "%s: cannot create directory: %s", path, strerror(errno));
    return 0;
}

/* A step directory that exists already (a failed save's) must be a directory, not a link:
 * a save writes into it and removes what it wrote on failure. */
static int make_step_dir(const char *sdir, RtError *err) {
    if (make_dir(sdir, err) != 0)
        return -1;
    if (!is_dir(sdir))
        return rt_error_set(err,
                            "%s: exists and is not a directory (a link?); not a checkpoint, refusing to write "
                            "into it (move it away)",
                            sdir);
    return 0;
}

/* A test hook: AXLC_TEST_SAVE_PAUSE (seconds) holds every save between its tensor files and its
 * index, so that tests can kill or stop a trainer while a checkpoint is half written (the value
 * is checked at start-up: rt_env_check). */
static void test_pause(void) {
    double s;
    if (rt_env_seconds("AXLC_TEST_SAVE_PAUSE", 0, &s, NULL) != 0 || s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int write_state(const char *dir, const RtCkptState *s, uint32_t *crc, int64_t *size, RtError *err) {
    char path[PATH_CAP], step[32], pos[32], rng[32];
    snprintf(step, sizeof step, "%lld", (long long)s->step);
    snprintf(pos, sizeof pos, "%lld", (long long)s->data_position);
    snprintf(rng, sizeof rng, "%llu", (unsigned long long)s->rng_state);
    RtMeta meta[] = {
        {"axlc.step", step},
        {"axlc.data_position", pos},
        {"axlc.rng_state", rng},
        {"axlc.config", s->config ? s->config : ""},
        {"axlc.fingerprint", s->fingerprint ? s->fingerprint : ""},
        {"axlc.trainer_state", s->trainer_state ? s->trainer_state : ""},
        {"axlc.base", s->base ? s->base : ""},
    };
    if (step_path(path, dir, s->step, STATE_FILE, err) != 0)
        return -1;
    return rt_st_write(path, s->tensors, s->n_tensors, meta, (int)(sizeof meta / sizeof meta[0]), crc, size, err);
}

static int write_index(const char *dir, const RtCkptState *s, uint32_t crc, int64_t size, RtError *err) {
    char path[PATH_CAP], text[512];
    if (step_path(path, dir, s->step, INDEX_FILE, err) != 0)
        return -1;
    int len = snprintf(text, sizeof text,
                       "{\"format\": \"axlc-checkpoint\", \"version\": 1, \"step\": %lld,\n"
                       " \"fingerprint\": \"%.64s\",\n"
                       " \"files\": [{\"name\": \"%s\", \"bytes\": %lld, \"crc32\": %lu}]}\n",
                       (long long)s->step, s->fingerprint ? s->fingerprint : "", STATE_FILE, (long long)size,
                       (unsigned long)crc);
    RtWfile w;
    if (rt_wfile_open(&w, path, err) != 0)
        return -1;
    if (rt_wfile_write(&w, text, (size_t)len, err) != 0) {
        rt_wfile_abort(&w);
        return -1;
    }
    return rt_wfile_commit(&w, err);
}

/* ===== saving a sharded checkpoint (format 2) ========================================= */

static void rank_file(char *buf, size_t cap, int rank) {
    snprintf(buf, cap, "state-rank%05d.safetensors", rank);
}

static json_object *int_array(const int64_t *v, int n) {
    json_object *a = json_object_new_array();
    for (int i = 0; a && i < n; i++)
        json_object_array_add(a, json_object_new_int64(v[i]));
    return a;
}

/* {"name": {"shape": [global], "start": [...]}, ...} for the tensors this rank owns. */
static char *regions_text(const RtCkptState *s) {
    json_object *root = json_object_new_object();
    for (int i = 0; root && i < s->n_tensors; i++) {
        if (!s->regions[i].owner)
            continue;
        json_object *r = json_object_new_object();
        json_object_object_add(r, "shape", int_array(s->regions[i].shape, s->tensors[i].ndim));
        json_object_object_add(r, "start", int_array(s->regions[i].start, s->tensors[i].ndim));
        json_object_object_add(root, s->tensors[i].name, r);
    }
    char *text =
        root ? strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE))
             : NULL;
    json_object_put(root);
    return text;
}

/* This rank's file: the tensors it owns, with their regions in the metadata. *size 0: it owns
 * none and writes nothing. */
static int write_rank_state(const char *dir, const RtCkptState *s, int rank, uint32_t *crc, int64_t *size,
                            RtError *err) {
    char path[PATH_CAP], name[64], step[32], pos[32], rng[32];
    *size = 0;
    *crc = 0;
    RtTensor *own = calloc((size_t)s->n_tensors + 1, sizeof *own);
    char *regions = regions_text(s);
    int n = 0, rc = 0;
    if (!own || !regions)
        rc = rt_error_set(err, "%s: out of memory", dir);
    for (int i = 0; rc == 0 && i < s->n_tensors; i++)
        if (s->regions[i].owner)
            own[n++] = s->tensors[i];
    snprintf(step, sizeof step, "%lld", (long long)s->step);
    snprintf(pos, sizeof pos, "%lld", (long long)s->data_position);
    snprintf(rng, sizeof rng, "%llu", (unsigned long long)s->rng_state);
    rank_file(name, sizeof name, rank);
    RtMeta meta[] = {
        {"axlc.step", step},
        {"axlc.data_position", pos},
        {"axlc.rng_state", rng},
        {"axlc.config", s->config ? s->config : ""},
        {"axlc.fingerprint", s->fingerprint ? s->fingerprint : ""},
        {"axlc.regions", regions ? regions : "{}"},
        {"axlc.trainer_state", s->trainer_state ? s->trainer_state : ""},
        {"axlc.base", s->base ? s->base : ""},
    };
    if (rc == 0 && n > 0 && step_path(path, dir, s->step, name, err) == 0)
        rc = rt_st_write(path, own, n, meta, (int)(sizeof meta / sizeof meta[0]), crc, size, err);
    else if (rc == 0 && n > 0)
        rc = -1;
    free(own);
    free(regions);
    return rc;
}

/* The "tensors" member of the index: each tensor's global shape and the region of each file
 * holding part of it, read back from the files' own metadata. */
static json_object *index_tensors(const char *sdir, const int64_t *info, int world, RtError *err) {
    json_object *tensors = json_object_new_object();
    for (int r = 0; tensors && r < world; r++) {
        if (info[3 * r + 1] == 0)
            continue;
        char name[64], path[PATH_CAP];
        rank_file(name, sizeof name, r);
        RtSt *st;
        if (join_path(path, sdir, name, err) != 0 || rt_st_open(&st, path, err) != 0) {
            json_object_put(tensors);
            return NULL;
        }
        json_object *regions = json_tokener_parse(rt_st_meta(st, "axlc.regions") ? rt_st_meta(st, "axlc.regions") : "");
        for (int i = 0; regions && i < rt_st_count(st); i++) {
            const RtTensor *t = rt_st_tensor(st, i);
            json_object *reg, *shape, *start, *entry, *shards;
            if (!json_object_object_get_ex(regions, t->name, &reg) ||
                !json_object_object_get_ex(reg, "shape", &shape) || !json_object_object_get_ex(reg, "start", &start))
                continue;
            if (!json_object_object_get_ex(tensors, t->name, &entry)) {
                entry = json_object_new_object();
                json_object_object_add(entry, "shape", json_object_get(shape));
                json_object_object_add(entry, "shards", json_object_new_array());
                json_object_object_add(tensors, t->name, entry);
            }
            json_object_object_get_ex(entry, "shards", &shards);
            json_object *sh = json_object_new_object();
            json_object_object_add(sh, "file", json_object_new_string(name));
            json_object_object_add(sh, "start", json_object_get(start));
            json_object_object_add(sh, "shape", int_array(t->shape, t->ndim));
            json_object_array_add(shards, sh);
        }
        json_object_put(regions);
        rt_st_close(st);
    }
    return tensors;
}

/* info: per rank (failed, bytes, crc32). */
static int write_index_v2(const char *dir, const RtCkptState *s, const int64_t *info, int world, RtError *err) {
    char path[PATH_CAP], sdir[PATH_CAP], name[64];
    if (step_path(path, dir, s->step, INDEX_FILE, err) != 0 || step_path(sdir, dir, s->step, NULL, err) != 0)
        return -1;
    json_object *tensors = index_tensors(sdir, info, world, err);
    if (!tensors)
        return -1;
    json_object *root = json_object_new_object(), *files = json_object_new_array();
    json_object_object_add(root, "format", json_object_new_string("axlc-checkpoint"));
    json_object_object_add(root, "version", json_object_new_int(2));
    json_object_object_add(root, "step", json_object_new_int64(s->step));
    json_object_object_add(root, "fingerprint", json_object_new_string(s->fingerprint ? s->fingerprint : ""));
    json_object_object_add(root, "ranks", json_object_new_int(world));
    for (int r = 0; r < world; r++) {
        if (info[3 * r + 1] == 0)
            continue;
        json_object *f = json_object_new_object();
        rank_file(name, sizeof name, r);
        json_object_object_add(f, "name", json_object_new_string(name));
        json_object_object_add(f, "bytes", json_object_new_int64(info[3 * r + 1]));
        json_object_object_add(f, "crc32", json_object_new_int64(info[3 * r + 2]));
        json_object_array_add(files, f);
    }
    json_object_object_add(root, "files", files);
    json_object_object_add(root, "tensors", tensors);
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    RtWfile w;
    int rc = rt_wfile_open(&w, path, err);
    if (rc == 0 && (rt_wfile_write(&w, text, strlen(text), err) != 0 || rt_wfile_write(&w, "\n", 1, err) != 0)) {
        rt_wfile_abort(&w);
        rc = -1;
    } else if (rc == 0) {
        rc = rt_wfile_commit(&w, err);
    }
    json_object_put(root);
    return rc;
}

/* Every rank learns `v` of rank 0 (a status), by a sum where the others add 0. */
static int64_t from_rank0(RtComm *c, int64_t v, RtError *err) {
    int64_t x = rt_comm_rank(c) == 0 ? v : 0;
    return rt_comm_sum_i64(c, &x, 1, err) == 0 ? x : -1;
}

int rt_ckpt_shard_begin(const char *dir, const RtCkptState *s, RtError *err) {
    RtComm *c = s->comm;
    int rank = rt_comm_rank(c), rc = 0;
    char sdir[PATH_CAP];
    RtError why = {{0}};
    if (s->step < 0)
        return rt_error_set(err, "%s: checkpoint step %lld, expected >= 0", dir, (long long)s->step);
    if (step_path(sdir, dir, s->step, NULL, err) != 0)
        return -1;
    /* rank 0 makes the step directory; the others write into it once it exists */
    if (rank == 0 && is_complete(dir, s->step))
        rc = rt_error_set(&why, "%s: a complete checkpoint of step %lld already exists", sdir, (long long)s->step);
    else if (rank == 0 && (make_dir(dir, &why) != 0 || make_step_dir(sdir, &why) != 0 || rt_dir_fsync(dir, &why) != 0))
        rc = -1;
    if (from_rank0(c, rc, err) != 0)
        return rank == 0 ? rt_error_set(err, "%s", why.msg)
                         : rt_error_set(err, "%s: rank 0 could not prepare the checkpoint directory", sdir);
    return 0;
}

int rt_ckpt_shard_write(const char *dir, const RtCkptState *s, int64_t info[3], RtError *err) {
    uint32_t crc;
    int64_t size;
    info[0] = write_rank_state(dir, s, rt_comm_rank(s->comm), &crc, &size, err) != 0;
    info[1] = size;
    info[2] = crc;
    test_pause();
    return info[0] ? -1 : 0;
}

int rt_ckpt_shard_gather(const char *dir, const RtCkptState *s, int64_t *info, const RtError *why, RtError *err) {
    RtComm *c = s->comm;
    int rank = rt_comm_rank(c), world = rt_comm_size(c), failed = -1;
    char sdir[PATH_CAP];
    if (step_path(sdir, dir, s->step, NULL, err) != 0)
        return -1;
    if (rt_comm_sum_i64(c, info, 3 * world, err) != 0)
        return -1;
    for (int r = world - 1; r >= 0; r--)
        if (info[3 * r])
            failed = r;
    if (failed < 0)
        return 0;
    if (rank == 0)
        remove_ckpt(dir, s->step, NULL);
    return info[3 * rank]
               ? rt_error_set(err, "%s", why->msg)
               : rt_error_set(err, "%s: rank %d could not write its shard (its message says why)", sdir, failed);
}

int rt_ckpt_shard_index(const char *dir, const RtCkptState *s, const int64_t *info, int keep_last, RtError *err) {
    if (write_index_v2(dir, s, info, rt_comm_size(s->comm), err) != 0) {
        remove_ckpt(dir, s->step, NULL);
        return -1;
    }
    return prune(dir, keep_last, s->step, err) != 0 ? 1 : 0;
}

int rt_ckpt_shard_end(const RtCkptState *s, int rc, const RtError *why, RtError *err) {
    RtComm *c = s->comm;
    int rank = rt_comm_rank(c);
    int64_t agreed = from_rank0(c, rc, err);
    if (agreed < 0 && rank == 0)
        return rt_error_set(err, "%s", why->msg);
    if (agreed < 0)
        return rt_error_set(err, "step %lld: rank 0 could not write the index of the checkpoint", (long long)s->step);
    if (agreed > 0)
        rt_error_set(err, "step %lld saved, but deleting old checkpoints failed: %s", (long long)s->step,
                     rank == 0 ? why->msg : "see rank 0");
    return (int)agreed;
}

/* The parts in one go, on the calling thread. */
static int save_sharded(const char *dir, const RtCkptState *s, int keep_last, RtError *err) {
    int rank = rt_comm_rank(s->comm), world = rt_comm_size(s->comm), rc = 0;
    RtError why = {{0}};
    if (rt_ckpt_shard_begin(dir, s, err) != 0)
        return -1;
    int64_t *info = calloc(3 * (size_t)world, sizeof *info);
    if (!info)
        return rt_error_set(err, "%s: out of memory", dir); /* the others will wait in vain: the watchdog */
    rt_ckpt_shard_write(dir, s, info + 3 * rank, &why);
    if (rt_ckpt_shard_gather(dir, s, info, &why, err) != 0) {
        free(info);
        return -1;
    }
    if (rank == 0)
        rc = rt_ckpt_shard_index(dir, s, info, keep_last, &why);
    free(info);
    return rt_ckpt_shard_end(s, rc, &why, err);
}

int rt_ckpt_save(const char *dir, const RtCkptState *state, int keep_last, RtError *err) {
    char sdir[PATH_CAP];
    if (state->comm && rt_comm_size(state->comm) > 1 && state->regions)
        return save_sharded(dir, state, keep_last, err);
    if (state->step < 0)
        return rt_error_set(err, "%s: checkpoint step %lld, expected >= 0", dir, (long long)state->step);
    if (step_path(sdir, dir, state->step, NULL, err) != 0)
        return -1;
    if (is_complete(dir, state->step))
        return rt_error_set(err, "%s: a complete checkpoint of step %lld already exists", sdir, (long long)state->step);
    uint32_t crc;
    int64_t size;
    if (make_dir(dir, err) != 0 || make_step_dir(sdir, err) != 0)
        return -1;
    int rc = rt_dir_fsync(dir, err) != 0 || write_state(dir, state, &crc, &size, err) != 0 ? -1 : 0;
    if (rc == 0)
        test_pause();
    if (rc != 0 || write_index(dir, state, crc, size, err) != 0) {
        remove_ckpt(dir, state->step, NULL); /* best effort: the incomplete directory is invisible anyway */
        return -1;
    }
    RtError why;
    if (prune(dir, keep_last, state->step, &why) != 0) {
        rt_error_set(err, "step %lld saved, but deleting old checkpoints failed: %s", (long long)state->step, why.msg);
        return 1;
    }
    return 0;
}

/* ===== one writer per directory ======================================================= */

struct RtCkptLock {
    int fd; /* LOCK_FILE, flock()ed exclusively while open */
};

/* mkdir -p: every missing component of `dir`, each reported by name when it cannot be made. */
static int make_dirs(const char *dir, RtError *err) {
    char path[PATH_CAP];
    if (snprintf(path, sizeof path, "%s", dir) >= PATH_CAP)
        return rt_error_set(err, "%s: path too long", dir);
    for (char *p = path + 1; *p; p++)
        if (*p == '/' && p[-1] != '/') {
            *p = '\0';
            int rc = make_dir(path, err);
            *p = '/';
            if (rc != 0)
                return -1;
        }
    if (make_dir(path, err) != 0)
        return -1;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return rt_error_set(err, "%s: not a directory", dir);
    return 0;
}

/* Another trainer holds the lock: say which, from the pid it wrote. */
static int report_holder(int fd, const char *lock, RtError *err) {
    char pid[32] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    pid[n > 0 ? n : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    return rt_error_set(err,
                        "%s: locked by another trainer%s%s%s; one checkpoint directory takes one writer "
                        "(wait for it, or choose another --ckpt-dir)",
                        lock, pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "");
}

static int write_pid(int fd, const char *lock, RtError *err) {
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        return rt_error_set(err, "%s: cannot write: %s", lock, strerror(errno));
    return 0;
}

/* The file system must take the checkpoints this run adds before it prunes any: a save writes
 * the new checkpoint before it removes the oldest one past keep_last, so with keep_last K the
 * directory holds K + 1 at once (the ones already in it count; keep_last 0 keeps all: the next
 * two). At most `saves` are written. The process's file-size limit must take one (it would
 * otherwise end the trainer mid-save with SIGXFSZ, or fail it with EFBIG). */
static int check_room(const char *dir, int64_t need, int keep_last, int64_t saves, RtError *err) {
    struct statvfs vfs;
    struct rlimit lim;
    StepList l;
    if (statvfs(dir, &vfs) != 0)
        return rt_error_set(err, "%s: cannot read the free space: %s", dir, strerror(errno));
    if (list_steps(dir, 1, &l, err) != 0)
        return -1;
    free(l.steps);
    int64_t copies = keep_last > 0 ? (int64_t)keep_last + 1 - l.n : 2;
    if (copies > saves)
        copies = saves;
    if (copies < 1)
        copies = 1;
    double avail = (double)vfs.f_bavail * (double)vfs.f_frsize, mib = 1024.0 * 1024.0;
    if (avail < (double)need * (double)copies) {
        if (copies == 1)
            return rt_error_set(err, "%s: %.1f MiB free, one checkpoint needs %.1f MiB", dir, avail / mib,
                                (double)need / mib);
        return rt_error_set(err,
                            "%s: %.1f MiB free, %lld checkpoints of %.1f MiB need %.1f MiB: a save writes the "
                            "new checkpoint before it prunes the oldest (--keep %d, %d in the directory); "
                            "free space%s",
                            dir, avail / mib, (long long)copies, (double)need / mib,
                            (double)need * (double)copies / mib, keep_last, l.n,
                            keep_last > 1 ? " or lower --keep" : "");
    }
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && (double)lim.rlim_cur < (double)need)
        return rt_error_set(err,
                            "%s: the file-size limit (ulimit -f) is %.1f MiB, one checkpoint file needs "
                            "%.1f MiB",
                            dir, (double)lim.rlim_cur / mib, (double)need / mib);
    return 0;
}

/* A file can be created, written and removed in `dir`. */
static int check_writable(const char *dir, RtError *err) {
    char probe[PATH_CAP];
    if (snprintf(probe, sizeof probe, "%s/.axlc-probe-%ld", dir, (long)getpid()) >= PATH_CAP)
        return rt_error_set(err, "%s: path too long", dir);
    unlink(probe); /* a leftover, or a link planted there: removed, never written through */
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return rt_error_set(err, "%s: cannot create files in it: %s", dir, strerror(errno));
    int ok = write(fd, "x", 1) == 1;
    int e = errno;
    close(fd);
    unlink(probe);
    return ok ? 0 : rt_error_set(err, "%s: cannot write files in it: %s", dir, strerror(e));
}

int rt_ckpt_lock(RtCkptLock **out, const char *dir, int64_t need_bytes, int keep_last, int64_t saves, RtError *err) {
    *out = NULL;
    char lock[PATH_CAP];
    if (make_dirs(dir, err) != 0 || join_path(lock, dir, LOCK_FILE, err) != 0)
        return -1;
    int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644); /* write_pid truncates it */
    if (fd < 0)
        return rt_error_set(err, "%s: cannot create the lock file: %s", lock, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int rc = errno == EWOULDBLOCK ? report_holder(fd, lock, err)
                                      : rt_error_set(err, "%s: cannot lock: %s", lock, strerror(errno));
        close(fd);
        return rc;
    }
    RtCkptLock *lk = malloc(sizeof *lk);
    if (!lk || write_pid(fd, lock, err) != 0 || check_writable(dir, err) != 0 ||
        check_room(dir, need_bytes, keep_last, saves, err) != 0) {
        if (!lk)
            rt_error_set(err, "%s: out of memory", lock);
        free(lk);
        close(fd); /* releases the lock */
        return -1;
    }
    lk->fd = fd;
    *out = lk;
    return 0;
}

/* The lock file stays: removing it would race with a trainer that has just opened it. */
void rt_ckpt_unlock(RtCkptLock *lk) {
    if (!lk)
        return;
    close(lk->fd);
    free(lk);
}

/* ===== loading ======================================================================== */

static json_object *read_json(const char *path, RtError *err) {
    RtMapped m;
    if (rt_file_map(path, &m, err) != 0)
        return NULL;
    json_tokener *tok = m.size > 0 && m.size < (1 << 20) ? json_tokener_new() : NULL;
    json_object *root = tok ? json_tokener_parse_ex(tok, (const char *)m.data, (int)m.size) : NULL;
    size_t end = tok ? json_tokener_get_parse_end(tok) : 0;
    while (end < (size_t)m.size && strchr(" \t\r\n", m.data[end]))
        end++;
    if (!root || !tok || json_tokener_get_error(tok) != json_tokener_success ||
        !json_object_is_type(root, json_type_object) || end != (size_t)m.size) {
        rt_error_set(err, "%s: not a valid JSON object%s", path,
                     root && end != (size_t)m.size ? " (bytes after the object)" : "");
        json_object_put(root);
        root = NULL;
    }
    if (tok)
        json_tokener_free(tok);
    rt_file_unmap(&m);
    return root;
}

static int64_t json_int(json_object *obj, const char *key) {
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, json_type_int))
        return -1;
    return json_object_get_int64(v);
}

/* One entry of "files": its name must be a plain file name, its size and CRC-32 must match.
 * *state is set when it is the state file. */
static int verify_file(const char *sdir, const char *index, json_object *f, int *state, RtError *err) {
    json_object *name;
    if (!json_object_object_get_ex(f, "name", &name) || !json_object_is_type(name, json_type_string) ||
        strchr(json_object_get_string(name), '/') || json_object_get_string(name)[0] == '.')
        return rt_error_set(err, "%s: a \"files\" entry has no plain file name", index);
    *state |= strcmp(json_object_get_string(name), STATE_FILE) == 0;
    int64_t bytes = json_int(f, "bytes"), crc = json_int(f, "crc32");
    char path[PATH_CAP];
    RtMapped m;
    if (join_path(path, sdir, json_object_get_string(name), err) != 0 || rt_file_map(path, &m, err) != 0)
        return -1;
    uint32_t have = m.size ? rt_crc32(0, m.data, (size_t)m.size) : 0;
    int64_t size = m.size;
    rt_file_unmap(&m);
    if (size != bytes)
        return rt_error_set(err, "%s: %lld bytes, index says %lld: checkpoint damaged", path, (long long)size,
                            (long long)bytes);
    if ((int64_t)have != crc)
        return rt_error_set(err, "%s: CRC-32 %08lx, index says %08llx: checkpoint damaged", path, (unsigned long)have,
                            (unsigned long long)crc);
    return 0;
}

/* Verifies the index of `step` and every file it lists; *version is 2 for a sharded checkpoint,
 * whose tensor files are then all those listed (the first is rank 0's), else 1. */
static int verify_index(const char *dir, int64_t step, int *version, char ***names, int *nnames, RtError *err) {
    char sdir[PATH_CAP], index[PATH_CAP];
    if (step_path(sdir, dir, step, NULL, err) != 0 || step_path(index, dir, step, INDEX_FILE, err) != 0)
        return -1;
    if (!is_file(index))
        return rt_error_set(err, "%s: missing: checkpoint of step %lld is incomplete", index, (long long)step);
    json_object *root = read_json(index, err), *files;
    if (!root)
        return -1;
    int rc = 0, state = 0;
    if (json_int(root, "step") != step || !json_object_object_get_ex(root, "files", &files) ||
        !json_object_is_type(files, json_type_array))
        rc = rt_error_set(err, "%s: expected \"step\": %lld and a \"files\" array", index, (long long)step);
    for (size_t i = 0; rc == 0 && i < json_object_array_length(files); i++)
        rc = verify_file(sdir, index, json_object_array_get_idx(files, i), &state, err);
    *version = json_int(root, "version") == 2 ? 2 : 1;
    size_t nf = rc == 0 ? json_object_array_length(files) : 0;
    if (rc == 0 && *version == 1 && !state)
        rc = rt_error_set(err, "%s: does not list %s", index, STATE_FILE);
    if (rc == 0 && *version == 2 && nf == 0)
        rc = rt_error_set(err, "%s: lists no files", index);
    *names = rc == 0 ? calloc(nf + 1, sizeof **names) : NULL;
    if (rc == 0 && !*names)
        rc = rt_error_set(err, "%s: out of memory", index);
    *nnames = 0;
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        json_object *name;
        json_object_object_get_ex(json_object_array_get_idx(files, i), "name", &name);
        const char *n = json_object_get_string(name);
        if (*version == 1 && strcmp(n, STATE_FILE) != 0)
            continue; /* format 1: only the state file holds tensors */
        if (!((*names)[(*nnames)++] = strdup(n)))
            rc = rt_error_set(err, "%s: out of memory", index);
    }
    json_object_put(root);
    return rc;
}

/* ===== the tensors of a checkpoint, over its files ====================================== */

static CkTensor *tensor_entry(RtCkpt *ck, const RtTensor *t, int ndim, const int64_t *shape) {
    for (int i = 0; i < ck->ntensors; i++)
        if (strcmp(ck->tensors[i].g.name, t->name) == 0)
            return &ck->tensors[i];
    if ((ck->ntensors & (ck->ntensors - 1)) == 0) { /* grow at powers of two */
        CkTensor *n = realloc(ck->tensors, (size_t)(ck->ntensors ? 2 * ck->ntensors : 1) * sizeof *n);
        if (!n)
            return NULL;
        ck->tensors = n;
    }
    CkTensor *e = &ck->tensors[ck->ntensors++];
    memset(e, 0, sizeof *e);
    e->g = (RtTensor){.name = t->name, .dtype = t->dtype, .ndim = ndim};
    memcpy(e->g.shape, shape, (size_t)ndim * sizeof *shape);
    return e;
}

/* A JSON array of n non-negative integers into v. */
static int json_dims(json_object *a, int n, int64_t *v) {
    if (!json_object_is_type(a, json_type_array) || (int)json_object_array_length(a) != n)
        return -1;
    for (int i = 0; i < n; i++) {
        json_object *x = json_object_array_get_idx(a, i);
        if (!json_object_is_type(x, json_type_int) || (v[i] = json_object_get_int64(x)) < 0)
            return -1;
    }
    return 0;
}

/* Tensor t of file st: its region from the file's "axlc.regions" metadata, or (format 1, or a
 * tensor without one) the whole tensor. */
static int add_shard(RtCkpt *ck, const RtSt *st, const RtTensor *t, json_object *regions, RtError *err) {
    int64_t shape[RT_MAX_DIMS], start[RT_MAX_DIMS] = {0};
    json_object *reg, *js, *jt;
    memcpy(shape, t->shape, sizeof shape);
    if (regions && json_object_object_get_ex(regions, t->name, &reg)) {
        if (!json_object_object_get_ex(reg, "shape", &js) || !json_object_object_get_ex(reg, "start", &jt) ||
            json_dims(js, t->ndim, shape) != 0 || json_dims(jt, t->ndim, start) != 0)
            return rt_error_set(err, "%s: tensor '%s': a bad region in axlc.regions", rt_st_path(st), t->name);
        for (int d = 0; d < t->ndim; d++)
            if (start[d] > shape[d] || t->shape[d] > shape[d] - start[d])
                return rt_error_set(err, "%s: tensor '%s': its region lies outside the global shape", rt_st_path(st),
                                    t->name);
    }
    CkTensor *e = tensor_entry(ck, t, t->ndim, shape);
    if (!e)
        return rt_error_set(err, "%s: out of memory", rt_st_path(st));
    if (e->g.ndim != t->ndim || memcmp(e->g.shape, shape, (size_t)t->ndim * sizeof *shape) != 0 ||
        e->g.dtype != t->dtype)
        return rt_error_set(err, "%s: tensor '%s': its global shape or dtype differs from another file's",
                            rt_st_path(st), t->name);
    if (e->nshards == e->cap) {
        int cap = e->cap ? 2 * e->cap : 4;
        Shard *n = realloc(e->shards, (size_t)cap * sizeof *n);
        if (!n)
            return rt_error_set(err, "%s: out of memory", rt_st_path(st));
        e->shards = n;
        e->cap = cap;
    }
    Shard *sh = &e->shards[e->nshards++];
    sh->t = t;
    memcpy(sh->start, start, sizeof start);
    return 0;
}

static int64_t box_volume(const int64_t *count, int n) {
    int64_t v = 1;
    for (int d = 0; d < n; d++)
        v *= count[d];
    return v;
}

/* The shards of each tensor tile it: inside it (add_shard), pairwise disjoint, volumes adding up. */
static int check_tiling(const RtCkpt *ck, const char *where, RtError *err) {
    for (int i = 0; i < ck->ntensors; i++) {
        const CkTensor *e = &ck->tensors[i];
        int64_t sum = 0;
        for (int a = 0; a < e->nshards; a++) {
            sum += box_volume(e->shards[a].t->shape, e->g.ndim);
            for (int b = 0; b < a; b++) {
                int apart = 0;
                for (int d = 0; d < e->g.ndim && !apart; d++)
                    apart = e->shards[a].start[d] >= e->shards[b].start[d] + e->shards[b].t->shape[d] ||
                            e->shards[b].start[d] >= e->shards[a].start[d] + e->shards[a].t->shape[d];
                if (!apart && box_volume(e->shards[a].t->shape, e->g.ndim) &&
                    box_volume(e->shards[b].t->shape, e->g.ndim))
                    return rt_error_set(err, "%s: tensor '%s': two files hold overlapping parts", where, e->g.name);
            }
        }
        if (sum != box_volume(e->g.shape, e->g.ndim))
            return rt_error_set(err, "%s: tensor '%s': its files hold %lld of its %lld values", where, e->g.name,
                                (long long)sum, (long long)box_volume(e->g.shape, e->g.ndim));
    }
    return 0;
}

/* AdamW's second moments ("opt/v/<path>", the trainer's names: train.c's TENSOR_PREFIX) are
 * averages of squares. A negative one was never saved by a trainer, and the update's square
 * root would turn the first step after resume into NaN, so it is damage, like a NaN. */
static int check_moments(const RtSt *st, RtError *err) {
    for (int i = 0; i < rt_st_count(st); i++) {
        const RtTensor *t = rt_st_tensor(st, i);
        if (strncmp(t->name, "opt/v/", 6) != 0 || t->dtype != RT_DT_F32)
            continue;
        const float *v = t->data;
        for (int64_t k = 0, n = t->nbytes / 4; k < n; k++)
            if (v[k] < 0)
                return rt_error_set(err, "%s: tensor '%s': value %lld of %lld is %g, below 0 (a second moment)",
                                    rt_st_path(st), t->name, (long long)k, (long long)n, (double)v[k]);
    }
    return 0;
}

static int open_files(RtCkpt *ck, const char *sdir, char **names, int n, RtError *err) {
    ck->files = calloc((size_t)n + 1, sizeof *ck->files);
    if (!ck->files)
        return rt_error_set(err, "%s: out of memory", sdir);
    for (int f = 0; f < n; f++) {
        char path[PATH_CAP];
        if (join_path(path, sdir, names[f], err) != 0 || rt_st_open(&ck->files[f], path, err) != 0)
            return -1;
        ck->nfiles++;
        /* A NaN with a matching CRC-32 was saved that way (or written by hand): resuming it
         * would fail again at once, so it is damage, like a bad CRC-32. */
        RtError why;
        if (rt_st_check_finite(ck->files[f], NULL, &why) != 0 || check_moments(ck->files[f], &why) != 0)
            return rt_error_set(err, "%s: checkpoint damaged", why.msg);
        const char *text = rt_st_meta(ck->files[f], "axlc.regions");
        json_object *regions = text ? json_tokener_parse(text) : NULL;
        if (text && !json_object_is_type(regions, json_type_object)) {
            json_object_put(regions);
            return rt_error_set(err, "%s: metadata 'axlc.regions' is not a JSON object", path);
        }
        int rc = 0;
        for (int i = 0; rc == 0 && i < rt_st_count(ck->files[f]); i++)
            rc = add_shard(ck, ck->files[f], rt_st_tensor(ck->files[f], i), regions, err);
        json_object_put(regions);
        if (rc != 0)
            return -1;
    }
    ck->st = ck->files[0];
    return check_tiling(ck, sdir, err);
}

static int meta_int(const RtSt *st, const char *key, long long *out, RtError *err) {
    const char *s = rt_st_meta(st, key);
    char *end;
    errno = 0;
    if (s && *s)
        *out = strtoll(s, &end, 10);
    if (!s || !*s || *end || errno)
        return rt_error_set(err, "%s: metadata '%s' missing or not an integer", rt_st_path(st), key);
    return 0;
}

static int read_meta(RtCkpt *ck, int64_t step, RtError *err) {
    long long v, pos;
    const char *rng = rt_st_meta(ck->st, "axlc.rng_state");
    char *end;
    if (meta_int(ck->st, "axlc.step", &v, err) != 0 || meta_int(ck->st, "axlc.data_position", &pos, err) != 0)
        return -1;
    if (v != step)
        return rt_error_set(err, "%s: metadata says step %lld, directory says %lld", rt_st_path(ck->st), v,
                            (long long)step);
    if (pos < 0)
        return rt_error_set(err,
                            "%s: invalid metadata: 'axlc.data_position' is %lld, a token position is >= 0: "
                            "checkpoint damaged",
                            rt_st_path(ck->st), pos);
    errno = 0;
    ck->rng_state = rng ? strtoull(rng, &end, 10) : 0;
    if (!rng || !*rng || *end || errno)
        return rt_error_set(err, "%s: metadata 'axlc.rng_state' missing or not an integer", rt_st_path(ck->st));
    ck->step = step;
    ck->data_position = pos;
    ck->config = rt_st_meta(ck->st, "axlc.config");
    ck->fingerprint = rt_st_meta(ck->st, "axlc.fingerprint");
    ck->trainer_state = rt_st_meta(ck->st, "axlc.trainer_state");
    if (!ck->trainer_state)
        ck->trainer_state = "";
    ck->base = rt_st_meta(ck->st, "axlc.base");
    if (!ck->base)
        ck->base = "";
    if (!ck->config)
        ck->config = "";
    if (!ck->fingerprint)
        ck->fingerprint = "";
    return 0;
}

int rt_ckpt_open(RtCkpt **out, const char *dir, int64_t step, RtError *err) {
    *out = NULL;
    char sdir[PATH_CAP];
    char **names = NULL;
    int version, n = 0;
    if (step_path(sdir, dir, step, NULL, err) != 0)
        return -1;
    RtCkpt *ck = verify_index(dir, step, &version, &names, &n, err) == 0 ? calloc(1, sizeof *ck) : NULL;
    int rc = ck ? open_files(ck, sdir, names, n, err) : -1;
    if (ck && rc == 0)
        rc = read_meta(ck, step, err);
    if (names && !ck)
        rt_error_set(err, "%s: out of memory", sdir);
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    if (rc != 0) {
        rt_ckpt_close(ck);
        return -1;
    }
    *out = ck;
    return 0;
}

int rt_ckpt_count(const RtCkpt *ck) {
    return ck->ntensors;
}
const RtTensor *rt_ckpt_tensor(const RtCkpt *ck, int i) {
    return &ck->tensors[i].g;
}

const RtTensor *rt_ckpt_find(const RtCkpt *ck, const char *name) {
    for (int i = 0; i < ck->ntensors; i++)
        if (strcmp(ck->tensors[i].g.name, name) == 0)
            return &ck->tensors[i].g;
    return NULL;
}

static const CkTensor *find_entry(const RtCkpt *ck, const char *name) {
    const RtTensor *t = rt_ckpt_find(ck, name);
    return t ? (const CkTensor *)(const void *)((const char *)t - offsetof(CkTensor, g)) : NULL;
}

/* Copies the part of shard sh inside the box [start, start + count) into dst (row-major over
 * count); returns the number of values copied. */
static int64_t copy_shard(const Shard *sh, int ndim, const int64_t *start, const int64_t *count, float *dst) {
    int64_t lo[RT_MAX_DIMS], n[RT_MAX_DIMS], idx[RT_MAX_DIMS] = {0}, rows = 1;
    for (int d = 0; d < ndim; d++) {
        int64_t a = start[d] > sh->start[d] ? start[d] : sh->start[d];
        int64_t b =
            start[d] + count[d] < sh->start[d] + sh->t->shape[d] ? start[d] + count[d] : sh->start[d] + sh->t->shape[d];
        if (b <= a)
            return 0;
        lo[d] = a;
        n[d] = b - a;
        if (d + 1 < ndim)
            rows *= n[d];
    }
    int64_t len = ndim ? n[ndim - 1] : 1;
    for (int64_t r = 0; r < rows; r++) {
        int64_t src = 0, out = 0;
        for (int d = 0; d < ndim; d++) {
            int64_t g = lo[d] + (d + 1 < ndim ? idx[d] : 0);
            src = src * sh->t->shape[d] + (g - sh->start[d]);
            out = out * count[d] + (g - start[d]);
        }
        rt_st_convert_run(sh->t, src, len, dst + out);
        for (int d = ndim - 2; d >= 0 && ++idx[d] == n[d]; d--)
            idx[d] = 0;
    }
    return rows * len;
}

int rt_ckpt_read_f32(const RtCkpt *ck, const char *name, const int64_t *shape, int ndim, const int64_t *start,
                     const int64_t *count, float *dst, RtError *err) {
    const CkTensor *e = find_entry(ck, name);
    if (!e)
        return rt_error_set(err, "%s: no tensor '%s'", rt_st_path(ck->st), name);
    if (e->g.ndim != ndim || memcmp(e->g.shape, shape, (size_t)ndim * sizeof *shape) != 0)
        return rt_error_set(err, "%s: tensor '%s': rank %d global shape differs from the expected one (rank %d)",
                            rt_st_path(ck->st), name, e->g.ndim, ndim);
    if (e->g.dtype != RT_DT_F32 && e->g.dtype != RT_DT_F16 && e->g.dtype != RT_DT_BF16)
        return rt_error_set(err, "%s: tensor '%s': dtype %s, expected F32, F16 or BF16", rt_st_path(ck->st), name,
                            rt_dtype_name(e->g.dtype));
    int64_t zero[RT_MAX_DIMS] = {0}, got = 0;
    if (!start) {
        start = zero;
        count = shape;
    }
    for (int d = 0; d < ndim; d++)
        if (start[d] < 0 || count[d] < 0 || start[d] > shape[d] || count[d] > shape[d] - start[d])
            return rt_error_set(err, "%s: tensor '%s': a region outside it was asked for", rt_st_path(ck->st), name);
    for (int i = 0; i < e->nshards; i++)
        got += copy_shard(&e->shards[i], ndim, start, count, dst);
    if (got != box_volume(count, ndim))
        return rt_error_set(err, "%s: tensor '%s': its files hold %lld of the %lld values asked for",
                            rt_st_path(ck->st), name, (long long)got, (long long)box_volume(count, ndim));
    return 0;
}

int rt_ckpt_open_latest(RtCkpt **out, const char *dir, RtError *warn, RtError *err) {
    *out = NULL;
    if (warn)
        warn->msg[0] = '\0';
    int64_t below = RT_CKPT_ANY, step;
    for (;;) {
        int found = rt_ckpt_latest(dir, below, &step, err);
        if (found <= 0)
            return found;
        if (rt_ckpt_open(out, dir, step, warn) == 0)
            return 1;
        below = step;
    }
}

void rt_ckpt_close(RtCkpt *ck) {
    if (!ck)
        return;
    for (int f = 0; f < ck->nfiles; f++)
        rt_st_close(ck->files[f]);
    for (int i = 0; i < ck->ntensors; i++)
        free(ck->tensors[i].shards);
    free(ck->tensors);
    free(ck->files);
    free(ck);
}

int64_t rt_ckpt_step(const RtCkpt *ck) {
    return ck->step;
}
int64_t rt_ckpt_data_position(const RtCkpt *ck) {
    return ck->data_position;
}
uint64_t rt_ckpt_rng_state(const RtCkpt *ck) {
    return ck->rng_state;
}
const char *rt_ckpt_config(const RtCkpt *ck) {
    return ck->config;
}
const char *rt_ckpt_fingerprint(const RtCkpt *ck) {
    return ck->fingerprint;
}

const char *rt_ckpt_base(const RtCkpt *ck) {
    return ck->base;
}
const char *rt_ckpt_trainer_state(const RtCkpt *ck) {
    return ck->trainer_state;
}
const RtSt *rt_ckpt_tensors(const RtCkpt *ck) {
    return ck->st;
}
