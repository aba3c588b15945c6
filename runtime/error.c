/*
 * error.c: the runtime's status convention, its clock, its checksum, and the environment
 * variables that tune a trainer.
 *
 * Every fallible runtime function returns 0 or -1 and fills a caller-owned RtError; there is
 * no global error state, so several trainers (or tests) can share a process.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "axrt.h"

/* ===== the clock ====================================================================== */

double rt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ===== errors ========================================================================= */

/* A message too long for RtError keeps its head and its tail, joined by " ... ": the head
 * names what failed, the tail says why. */
int rt_error_set(RtError *err, const char *fmt, ...) {
    if (!err)
        return -1;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int len = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    char *whole = len >= (int)sizeof err->msg ? malloc((size_t)len + 1) : NULL;
    if (whole) {
        vsnprintf(whole, (size_t)len + 1, fmt, again);
        const size_t keep = (sizeof err->msg - 6) / 2;
        snprintf(err->msg, sizeof err->msg, "%.*s ... %s", (int)keep, whole, whole + len - keep);
        free(whole);
    }
    va_end(again);
    return -1;
}

/* ===== CRC-32 ========================================================================= */

/* Bitwise CRC-32 (reflected, polynomial 0xEDB88320), one nibble at a time through a 16-entry
 * table: no mutable table to build, and fast enough for checkpoint files. */
uint32_t rt_crc32(uint32_t crc, const void *buf, size_t n) {
    static const uint32_t nibble[16] = {
        0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4, 0x4db26158, 0x5005713c,
        0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c, 0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
    };
    const unsigned char *p = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ nibble[crc & 15];
        crc = (crc >> 4) ^ nibble[crc & 15];
    }
    return ~crc;
}

/* ===== environment ==================================================================== */

int rt_env_int(const char *name, int64_t dflt, int64_t lo, int64_t hi, int64_t *out, RtError *err) {
    const char *s = getenv(name);
    *out = dflt;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno == ERANGE || v < lo || v > hi)
        return rt_error_set(err, "%s=%s: expected a whole number from %lld to %lld (unset: %lld)", name, s,
                            (long long)lo, (long long)hi, (long long)dflt);
    *out = v;
    return 0;
}

int rt_env_seconds(const char *name, double dflt, double *out, RtError *err) {
    const char *s = getenv(name);
    *out = dflt;
    if (!s || !*s)
        return 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || v <= 0)
        return rt_error_set(err, "%s=%s: expected a number of seconds above 0 (unset: %g)", name, s, dflt);
    *out = v;
    return 0;
}

int rt_env_comm(double *timeout_s, int64_t *spin, int64_t *nap_ns, RtError *err) {
    if (rt_env_seconds("AXLC_COMM_TIMEOUT", 20.0, timeout_s, err) != 0 ||
        rt_env_int("AXLC_COMM_SPIN", 100, 0, 1000000000, spin, err) != 0 ||
        rt_env_int("AXLC_COMM_NAP", 20000, 0, 999999999, nap_ns, err) != 0) /* under 1 s: nanosleep */
        return -1;
    return 0;
}

int rt_env_hugepages(int64_t *on, RtError *err) {
    return rt_env_int("AXLC_HUGEPAGES", 1, 0, 1, on, err);
}

int rt_env_check(RtError *err) {
    int64_t spin, nap, huge;
    double timeout, pause;
    const char *sgemm = getenv("AXLC_SGEMM");
    if (sgemm && *sgemm && strcmp(sgemm, "openblas") != 0 && strcmp(sgemm, "own") != 0)
        return rt_error_set(err, "AXLC_SGEMM=%s: expected openblas or own (unset: own where the CPU has AVX2 and FMA)",
                            sgemm);
    const char *sb = getenv("AXLC_SBGEMM");
    if (sb && *sb && strcmp(sb, "widen") != 0 && strcmp(sb, "dot") != 0 && strcmp(sb, "ref") != 0)
        return rt_error_set(err, "AXLC_SBGEMM=%s: expected widen, dot or ref (unset: widen)", sb);
    const char *progress = getenv("AXLC_PROGRESS");
    if (progress && *progress && strcmp(progress, "terminal") != 0 && strcmp(progress, "plain") != 0)
        return rt_error_set(err, "AXLC_PROGRESS=%s: expected terminal or plain (unset: whether stdout is a terminal)",
                            progress);
    if (rt_env_hugepages(&huge, err) != 0 || rt_env_seconds("AXLC_TEST_SAVE_PAUSE", 0, &pause, err) != 0)
        return -1;
    return rt_env_comm(&timeout, &spin, &nap, err);
}
