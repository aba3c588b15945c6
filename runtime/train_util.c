/*
 * train_util.c: the helpers the trainer's files call (train_impl.h): the process's memory (heap
 * samples, peak RSS, huge pages), the slab (mapping it, typed access to its offsets, a
 * parameter's slots, the device sync), the clocks, and the warnings the trainer prints. None of
 * them runs a step; train.c is the loop that calls them.
 */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "train_impl.h"

/* ===== memory ======================================================================== */

/* The process's heap in use, as the C library counts it (the slabs are mapped on their own,
 * and train_mem_sample adds them); 0 where the C library cannot say. */
int64_t train_heap_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (int64_t)(mi.uordblks + mi.hblkhd);
#else
    return 0;
#endif
}

/* Sampled after start-up, after every step and after every checkpoint save: what the trainer
 * holds above the heap it began with is the measured side of `axlc memcheck`'s prediction. */
void train_mem_sample(Trainer *t) {
    int64_t heap = train_heap_in_use();
    if (heap == 0) /* the C library cannot say */
        return;
    int64_t used = heap - t->heap_base + t->slab_mapped + t->eval_mapped;
    if (used > t->heap_peak)
        t->heap_peak = used;
}

/* Peak resident set of the process (code, libraries and stacks included), in bytes. */
int64_t train_peak_rss(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
}

/* Anonymous memory the process holds in transparent huge pages now, in bytes; -1 where the
 * kernel does not say. */
int64_t train_huge_resident(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    char line[256];
    long long kib = -1;
    while (kib < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %lld kB", &kib) != 1)
            kib = -1;
    fclose(f);
    return kib < 0 ? -1 : (int64_t)kib * 1024;
}

/* ===== the slab ====================================================================== */

/* A zeroed slab of `bytes`, mapped on its own (its size rounded up to a page is *mapped).
 * With huge set it starts on a 2 MiB boundary and is advised for transparent huge pages: a
 * step streams the parameters, their gradients and AdamW's moments (gpt2-124m: 2.3 GiB), and
 * with 4 KiB pages the misses in the translation caches cost it 1.5 to 6% of its step
 * (docs/bench.md, "Huge pages"). Advice only: where the kernel gives none (transparent_hugepage "never",
 * or no 2 MiB page free) the slab keeps 4 KiB pages. */
char *train_slab_new(int64_t bytes, int huge, int64_t *mapped) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), big = (size_t)2 << 20;
    size_t size = ((size_t)bytes + page - 1) / page * page, over = huge ? size + big : size;
    char *m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *s = m;
    if (huge) { /* keep the aligned [s, s + size) of the larger mapping */
        s = (char *)(((uintptr_t)m + big - 1) & ~(uintptr_t)(big - 1));
        if (s > m)
            munmap(m, (size_t)(s - m));
        if (m + over > s + size)
            munmap(s + size, (size_t)(m + over - (s + size)));
#ifdef MADV_HUGEPAGE
        (void)madvise(s, size, MADV_HUGEPAGE);
#endif
    }
    /* The kernel's pages are zero already; writing them now, on one thread before the pool
     * starts, takes the page faults here. Left to the first step they cost gpt2-124m 4 s
     * more than this: a page first read maps the shared zero page, and its first write then
     * replaces it on every thread's core. */
    memset(s, 0, size);
    *mapped = (int64_t)size;
    return s;
}

void train_slab_free(char *slab, int64_t mapped) {
    if (slab)
        munmap(slab, (size_t)mapped);
}

float *train_slab_f32(char *slab, int64_t off) {
    return (float *)(void *)(slab + off);
}
int32_t *train_slab_i32(char *slab, int64_t off) {
    return (int32_t *)(void *)(slab + off);
}

void train_sync(const Trainer *t, char *slab, int dir) {
    if (t->sync && slab)
        t->sync(slab, dir);
}

float *train_slot_data(const Trainer *t, char *slab, int i, int k) {
    const RtParamSlot *s = &t->p->params[i];
    if (k > 0 && train_slot_frozen(s))
        return NULL;
    return train_slab_f32(slab, k == 0 ? s->offset : k == 1 ? s->m_offset : s->v_offset);
}

int train_slot_held(const Trainer *t, int i) {
    const RtParamSlot *s = &t->p->params[i];
    int pipe = rt_mesh_axis(&t->p->mesh, "pipeline");
    if (s->apart <= 0 || !t->comm || pipe < 0)
        return 1;
    return rt_comm_coord(t->comm, pipe) == s->apart - 1;
}

int train_slot_frozen(const RtParamSlot *s) {
    return s->m_offset < 0;
}

/* ===== the clocks ==================================================================== */

double train_now_ms(void) {
    return rt_now_s() * 1e3;
}

/* When this process started, on train_now_ms's clock: its age from /proc/self/stat (clock ticks
 * since boot, field 22) against the boot clock, so that start-up counts the exec, MPI's start and,
 * under `axlc run`, the compile. Where the kernel does not say: now. */
double train_process_start_ms(void) {
    double now = train_now_ms();
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ticks = 0;
    for (int field = 2; p && *p && field < 22; p++)
        if (*p == ' ')
            field++;
    struct timespec boot;
    long hz = sysconf(_SC_CLK_TCK);
    if (!p || sscanf(p, "%llu", &ticks) != 1 || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
        return now;
    double age = boot.tv_sec * 1e3 + boot.tv_nsec / 1e6 - (double)ticks * 1e3 / (double)hz;
    return age > 0 ? now - age : now;
}

/* ===== messages ====================================================================== */

void train_warn(const Trainer *t, const char *fmt, ...) {
    char msg[2 * RT_ERROR_MAX], text[2 * RT_ERROR_MAX + 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (t->world > 1)
        fprintf(stderr, "%s: rank %d: ", t->prog, t->rank);
    else
        fprintf(stderr, "%s: ", t->prog);
    fprintf(stderr, "%s\n", rt_event_text(msg, text, sizeof text));
}
