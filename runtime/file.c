/*
 * file.c: the runtime's file access. Reads map a whole file read-only; writes go to
 * "<path>.tmp", are fsynced, renamed over `path` and the directory is fsynced, so a reader
 * sees either the old file or the complete new one, never a torn one; a failed write removes
 * its temporary. Every system call is checked here and reported with the path and
 * strerror(errno). Only regular files are read: a FIFO or device is refused at once, never
 * waited on; and only regular files are replaced: a write to a device, FIFO, socket or
 * directory (or a link to one) is refused before anything is created, since the rename would
 * put a plain file in its place (/dev/full would become a file). rt_file_check_outputs lets
 * every command refuse an output that is one of its inputs before it writes anything.
 * rt_file_open opens every other file a user names, refusing what is not a regular file
 * without blocking, and, for a write, a symbolic link (which a plain write would follow).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_impl.h"

/* ===== mapped reads =================================================================== */

/* What a file that is not a regular one is, for messages. */
static const char *kind_name(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" : "a device";
}

static int map_fd(int fd, const char *path, RtMapped *m, RtError *err) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        return rt_error_set(err, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return rt_error_set(err, "%s: not a regular file (%s); expected a file that can be memory-mapped", path,
                            kind_name(st.st_mode));
    m->size = (int64_t)st.st_size;
    if (m->size == 0)
        return 0;
    void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return rt_error_set(err, "%s: cannot map %lld bytes: %s", path, (long long)m->size, strerror(errno));
    m->data = p;
    return 0;
}

int rt_file_map(const char *path, RtMapped *m, RtError *err) {
    m->data = NULL;
    m->size = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; map_fd then refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return rt_error_set(err, "%s: cannot open: %s", path, strerror(errno));
    int rc = map_fd(fd, path, m, err);
    if (close(fd) != 0 && rc == 0) {
        rt_file_unmap(m);
        return rt_error_set(err, "%s: cannot close: %s", path, strerror(errno));
    }
    return rc;
}

/* munmap fails only for arguments rt_file_map never produces, so its status is not needed. */
void rt_file_unmap(RtMapped *m) {
    if (m->data)
        munmap((void *)m->data, (size_t)m->size);
    m->data = NULL;
    m->size = 0;
}

/* ===== files a user names ============================================================= */

static int refuse_kind(const char *path, mode_t mode, RtError *err) {
    return rt_error_set(err, "%s: not a regular file (%s)", path, kind_name(mode));
}

static int refuse_link(const char *path, RtError *err) {
    return rt_error_set(err,
                        "%s: is a symbolic link; refusing to write through it into its target (name the "
                        "file itself, or remove the link)",
                        path);
}

int rt_file_check_user(const char *path, int write, RtError *err) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (write && S_ISLNK(st.st_mode))
        return refuse_link(path, err);
    if (S_ISLNK(st.st_mode) && stat(path, &st) != 0)
        return 0; /* a dangling link: the opener says so */
    return S_ISREG(st.st_mode) ? 0 : refuse_kind(path, st.st_mode, err);
}

FILE *rt_file_open(const char *path, const char *mode, RtError *err) {
    int write = mode[0] != 'r';
    if (rt_file_check_user(path, write, err) != 0)
        return NULL;
    /* O_NONBLOCK: a FIFO that appears after the check opens (or fails with ENXIO) at once and
     * is refused by fstat, instead of waiting for its other end; O_NOFOLLOW likewise refuses a
     * link that appears. Truncation waits until the file is known to be a regular one. */
    int flags = write ? O_WRONLY | O_CREAT | O_NOFOLLOW | (mode[0] == 'a' ? O_APPEND : 0) : O_RDONLY;
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0666);
    struct stat st;
    if (fd < 0) {
        int e = errno;
        if (write && e == ELOOP)
            refuse_link(path, err);
        else if (e == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            refuse_kind(path, st.st_mode, err);
        else
            rt_error_set(err, "%s: cannot open: %s", path, strerror(e));
        return NULL;
    }
    FILE *f = NULL;
    if (fstat(fd, &st) != 0)
        rt_error_set(err, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        refuse_kind(path, st.st_mode, err);
    else if (mode[0] == 'w' && ftruncate(fd, 0) != 0)
        rt_error_set(err, "%s: cannot truncate: %s", path, strerror(errno));
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || (f = fdopen(fd, mode)) == NULL)
        rt_error_set(err, "%s: cannot open: %s", path, strerror(errno));
    if (!f)
        close(fd);
    return f;
}

/* ===== atomic writes ================================================================== */

int rt_wfile_open(RtWfile *w, const char *path, RtError *err) {
    memset(w, 0, sizeof *w);
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path ||
        snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path) >= (int)sizeof w->tmp)
        return rt_error_set(err, "%s: path too long", path);
    /* stat follows a link: a link to a device is refused like the device. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return rt_error_set(err, "%s: exists and is %s, not a regular file; refusing to replace it (name a new file)",
                            path, kind_name(st.st_mode));
    /* A leftover temporary (a file or a link) is removed, not opened: opening would follow a
     * link planted there, or truncate a file that is also linked elsewhere. */
    int stale = lstat(w->tmp, &st) == 0;
    if (stale && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return rt_error_set(err, "%s: exists and is %s; refusing to use it as the temporary of %s", w->tmp,
                            kind_name(st.st_mode), path);
    if (stale && unlink(w->tmp) != 0)
        return rt_error_set(err, "%s: cannot remove the leftover temporary: %s", w->tmp, strerror(errno));
    int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 || (w->f = fdopen(fd, "wb")) == NULL) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(w->tmp);
        }
        return rt_error_set(err, "%s: cannot create: %s", w->tmp, strerror(e));
    }
    return 0;
}

int rt_wfile_write(RtWfile *w, const void *buf, size_t n, RtError *err) {
    if (n == 0)
        return 0;
    if (fwrite(buf, 1, n, w->f) != n)
        return rt_error_set(err, "%s: write failed: %s", w->tmp, strerror(errno));
    w->crc = rt_crc32(w->crc, buf, n);
    w->size += (int64_t)n;
    return 0;
}

void rt_path_dir(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == path)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

static int flush_and_close(RtWfile *w, RtError *err) {
    FILE *f = w->f;
    w->f = NULL;
    if (fflush(f) != 0) {
        int e = errno;
        fclose(f);
        return rt_error_set(err, "%s: write failed: %s", w->tmp, strerror(e));
    }
    if (fsync(fileno(f)) != 0) {
        int e = errno;
        fclose(f);
        return rt_error_set(err, "%s: fsync failed: %s", w->tmp, strerror(e));
    }
    if (fclose(f) != 0)
        return rt_error_set(err, "%s: close failed: %s", w->tmp, strerror(errno));
    return 0;
}

int rt_wfile_commit(RtWfile *w, RtError *err) {
    if (flush_and_close(w, err) != 0) {
        rt_wfile_abort(w);
        return -1;
    }
    if (rename(w->tmp, w->path) != 0) {
        int e = errno;
        rt_wfile_abort(w);
        return rt_error_set(err, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(e));
    }
    char dir[4096];
    rt_path_dir(w->path, dir, sizeof dir);
    return rt_dir_fsync(dir, err);
}

int rt_file_write_atomic(const char *path, const void *buf, size_t n, RtError *err) {
    RtWfile w;
    if (rt_wfile_open(&w, path, err) != 0)
        return -1;
    if (rt_wfile_write(&w, buf, n, err) == 0 && rt_wfile_commit(&w, err) == 0)
        return 0;
    rt_wfile_abort(&w);
    return -1;
}

/* Best effort: the write has already failed, and its error is the one to report. */
void rt_wfile_abort(RtWfile *w) {
    if (w->f)
        fclose(w->f);
    w->f = NULL;
    if (w->tmp[0])
        unlink(w->tmp);
}

int rt_dir_fsync(const char *dir, RtError *err) {
    int fd = open(dir, O_RDONLY);
    if (fd < 0)
        return rt_error_set(err, "%s: cannot open directory: %s", dir, strerror(errno));
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return rt_error_set(err, "%s: fsync of directory failed: %s", dir, strerror(e));
    }
    if (close(fd) != 0)
        return rt_error_set(err, "%s: cannot close directory: %s", dir, strerror(errno));
    return 0;
}

/* ===== outputs against inputs ========================================================= */

int rt_file_same(const char *a, const char *b) {
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* The real path `path` names: realpath of the file, or of its directory and then its name when
 * the file does not exist yet. -1 when the directory does not resolve either. */
static int real_target(const char *path, char *out) {
    char dir[PATH_MAX], real[PATH_MAX];
    if (realpath(path, out))
        return 0;
    rt_path_dir(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!realpath(dir, real))
        return -1;
    return snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", base) < PATH_MAX ? 0 : -1;
}

/* The entry of the directory `in` (named within*) that `out` lies inside, or is, into entry;
 * 0 if none. */
static int inside_entry(const char *out, const RtPathArg *in, char *entry, size_t cap) {
    char o[PATH_MAX], d[PATH_MAX];
    if (real_target(out, o) != 0 || !realpath(in->path, d))
        return 0;
    size_t n = strcmp(d, "/") ? strlen(d) : 0;
    const char *rest = o + n + 1;
    if (strncmp(o, d, n) != 0 || o[n] != '/' || strncmp(rest, in->within, strlen(in->within)) != 0)
        return 0;
    snprintf(entry, cap, "%.*s", (int)strcspn(rest, "/"), rest);
    return 1;
}

int rt_file_check_outputs(const RtPathArg *out, int nout, const RtPathArg *in, int nin, RtError *err) {
    char entry[256];
    for (int i = 0; i < nout; i++)
        for (int j = 0; j < nin && out[i].path; j++) {
            if (!in[j].path)
                continue;
            if (!in[j].within && rt_file_same(out[i].path, in[j].path))
                return rt_error_set(err,
                                    "%s %s is the same file as %s %s; refusing to overwrite an input (choose "
                                    "another output path)",
                                    out[i].opt, out[i].path, in[j].opt, in[j].path);
            if (in[j].within && !in[j].within[0] && inside_entry(out[i].path, &in[j], entry, sizeof entry))
                return rt_error_set(err,
                                    "%s %s lies inside %s %s, which this run reads; refusing to write "
                                    "there (choose a path outside it)",
                                    out[i].opt, out[i].path, in[j].opt, in[j].path);
            if (in[j].within && inside_entry(out[i].path, &in[j], entry, sizeof entry))
                return rt_error_set(err,
                                    "%s %s lies inside %s/%s of %s %s, whose old checkpoints this run "
                                    "deletes; refusing to use it (choose a path outside it)",
                                    out[i].opt, out[i].path, in[j].path, entry, in[j].opt, in[j].path);
        }
    return 0;
}

const char *rt_cache_off(void) {
    const char *off = getenv("AXLC_NO_CACHE");
    return off && *off && strcmp(off, "0") != 0 ? off : NULL;
}

int rt_cache_dir(char *out, size_t cap) {
    const char *a = getenv("AXLC_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n = -1;
    if (rt_cache_off())
        ; /* every cache turned off */
    else if (a && *a)
        n = snprintf(out, cap, "%s", a);
    else if (x && *x)
        n = snprintf(out, cap, "%s/axlc", x);
    else if (h && *h)
        n = snprintf(out, cap, "%s/.cache/axlc", h);
    if (n > 0 && (size_t)n < cap)
        return 0;
    if (cap)
        out[0] = 0;
    return -1;
}

/* ===== cache entries ================================================================== */

/* An entry ends in a trailer, not a header: the linker and the JIT read an object entry as it
 * is, and ELF readers look only where the ELF header points, so bytes after the sections are
 * ignored. The checksum is FNV-1a over 8-byte words (then the tail bytes): each step is a
 * bijection of the state, so a change to any one word, a flipped bit included, always changes
 * the sum; the length catches truncation and appending. Native byte order: a cache is one
 * machine's (its keys name the CPU or device). */
#define CACHE_MAGIC   "AXLCACHE"
#define CACHE_VERSION 1u

typedef struct CacheTrailer {
    char magic[8];
    uint32_t version, zero;
    uint64_t length, sum;
} CacheTrailer;

_Static_assert(sizeof(CacheTrailer) == RT_CACHE_TRAILER_BYTES, "the trailer is 32 bytes");

static uint64_t cache_sum(const unsigned char *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; n; p++, n--)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

void rt_cache_entry_trailer(const void *payload, uint64_t n, unsigned char out[RT_CACHE_TRAILER_BYTES]) {
    CacheTrailer t = {.version = CACHE_VERSION, .length = n, .sum = cache_sum(payload, n)};
    memcpy(t.magic, CACHE_MAGIC, 8);
    memcpy(out, &t, sizeof t);
}

int rt_cache_entry_check(const void *data, uint64_t size, uint64_t *payload, char *why, size_t cap) {
    CacheTrailer t;
    const char *what = NULL;
    if (size < sizeof t) {
        snprintf(why, cap, "%llu bytes, shorter than its %d-byte trailer", (unsigned long long)size,
                 RT_CACHE_TRAILER_BYTES);
        return -1;
    }
    memcpy(&t, (const unsigned char *)data + size - sizeof t, sizeof t);
    if (memcmp(t.magic, CACHE_MAGIC, 8) != 0)
        what = "no " CACHE_MAGIC " trailer: truncated, or not written by this axlc";
    else if (t.version != CACHE_VERSION || t.zero != 0)
        what = "a trailer of another format version";
    else if (t.length != size - sizeof t) {
        snprintf(why, cap, "%llu bytes before its trailer, which says %llu", (unsigned long long)(size - sizeof t),
                 (unsigned long long)t.length);
        return -1;
    } else if (t.sum != cache_sum(data, t.length))
        what = "checksum mismatch";
    if (what) {
        snprintf(why, cap, "%s", what);
        return -1;
    }
    *payload = t.length;
    return 0;
}

int rt_cache_entry_verify(const char *path, char *why, size_t cap) {
    RtMapped m;
    RtError err = {0};
    if (rt_file_map(path, &m, &err) != 0) {
        if (access(path, F_OK) != 0 && errno == ENOENT)
            return 0; /* not in the cache: the usual miss */
        snprintf(why, cap, "%s", err.msg);
        return -1;
    }
    uint64_t n;
    int rc = rt_cache_entry_check(m.data, (uint64_t)m.size, &n, why, cap) == 0 ? 1 : -1;
    rt_file_unmap(&m);
    return rc;
}

int rt_json_nul_string(const char *text, size_t len, size_t *start, size_t *end) {
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            in_str = text[i] == '"';
            *start = i;
        } else if (text[i] == '"') {
            in_str = 0;
        } else if (text[i] == '\\' && i + 1 < len) {
            if (len - i >= 6 && memcmp(text + i + 1, "u0000", 5) == 0) {
                size_t e = i + 6;
                while (e < len && text[e] != '"')
                    e += text[e] == '\\' ? 2 : 1;
                *end = e < len ? e : len - 1;
                return 1;
            }
            i++; /* the escaped character: \" does not end the string */
        }
    }
    return 0;
}
