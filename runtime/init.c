/*
 * init.c: deterministic parameter initialization.
 *
 * Element k of parameter `path` under `seed` gets its random bits from a counter-based
 * generator, with no state carried between elements:
 *     key    = mix(mix(seed) ^ fnv1a64(path))
 *     elem   = mix(key ^ mix(k))
 *     draw j = mix(elem + (j+1) * 0x9e3779b97f4a7c15)        (a splitmix64 stream)
 * where mix is splitmix64's finalizer. So a value depends only on (seed, path, k): a shard
 * that fills elements [offset, offset+n) gets exactly the slice an unsharded run gets, and
 * every backend gets its weights from the same host code. Normals use Box-Muller on draws
 * 0 and 1 (attempt a of a truncated normal uses draws 2a and 2a+1), in double precision,
 * rounded once to float.
 */
#include <math.h>

#include "axrt.h"

#define GOLDEN          0x9e3779b97f4a7c15ull
#define TRUNC_MAX_TRIES 64 /* then clamp; only bounds far in one tail need that many */

/* ===== counter-based generator ======================================================== */

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rt_fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static uint64_t stream_key(uint64_t seed, const char *path) {
    return mix(mix(seed) ^ rt_fnv1a64(path));
}

static uint64_t draw(uint64_t key, int64_t index, uint32_t j) {
    uint64_t elem = mix(key ^ mix((uint64_t)index));
    return mix(elem + ((uint64_t)j + 1) * GOLDEN);
}

uint64_t rt_rng_u64(uint64_t seed, const char *path, int64_t index, uint32_t k) {
    return draw(stream_key(seed, path), index, k);
}

/* ===== distributions ================================================================== */

static double unit(uint64_t bits) {
    return (double)(bits >> 11) * 0x1.0p-53;
} /* [0, 1) */

static double normal(uint64_t key, int64_t index, uint32_t attempt) {
    double u1 = 1.0 - unit(draw(key, index, 2 * attempt)); /* (0, 1]: log is finite */
    double u2 = unit(draw(key, index, 2 * attempt + 1));
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

static double trunc_normal(uint64_t key, int64_t index, double lo, double hi) {
    double z = 0;
    for (uint32_t a = 0; a < TRUNC_MAX_TRIES; a++) {
        z = normal(key, index, a);
        if (z >= lo && z <= hi)
            return z;
    }
    return z < lo ? lo : hi;
}

static float sample(const RtInit *in, uint64_t key, int64_t index) {
    switch (in->kind) {
    case RT_INIT_ZEROS: return 0.0f;
    case RT_INIT_ONES: return 1.0f;
    case RT_INIT_CONSTANT: return in->value;
    case RT_INIT_NORMAL: return (float)(in->mean + in->std * normal(key, index, 0));
    case RT_INIT_UNIFORM: return (float)(in->lo + ((double)in->hi - in->lo) * unit(draw(key, index, 0)));
    case RT_INIT_TRUNC_NORMAL: {
        double lo = in->lo, hi = in->hi;
        if (lo == 0 && hi == 0)
            lo = -2, hi = 2;
        return (float)(in->mean + in->std * trunc_normal(key, index, lo, hi));
    }
    }
    return 0.0f;
}

/* ===== filling ======================================================================== */

static int check_init(const char *path, const RtInit *in, RtError *err) {
    if ((unsigned)in->kind > RT_INIT_TRUNC_NORMAL)
        return rt_error_set(err, "parameter '%s': unknown initializer kind %d", path, (int)in->kind);
    if ((in->kind == RT_INIT_NORMAL || in->kind == RT_INIT_TRUNC_NORMAL) &&
        !(in->std >= 0 && isfinite(in->std) && isfinite(in->mean)))
        return rt_error_set(err, "parameter '%s': normal init mean %g std %g, expected finite, std >= 0", path,
                            in->mean, in->std);
    if (in->kind == RT_INIT_UNIFORM && !(in->lo < in->hi && isfinite(in->lo) && isfinite(in->hi)))
        return rt_error_set(err, "parameter '%s': uniform init [%g, %g), expected finite lo < hi", path, in->lo,
                            in->hi);
    if (in->kind == RT_INIT_TRUNC_NORMAL && !(in->lo == 0 && in->hi == 0) && !(in->lo < in->hi))
        return rt_error_set(err, "parameter '%s': truncated normal bounds [%g, %g] std, expected lo < hi", path, in->lo,
                            in->hi);
    return 0;
}

int rt_init_fill(float *dst, int64_t n, int64_t offset, const char *path, uint64_t seed, const RtInit *init,
                 RtError *err) {
    if (!path || !init)
        return rt_error_set(err, "rt_init_fill: no parameter path or initializer");
    if (n < 0 || offset < 0 || (n > 0 && !dst))
        return rt_error_set(err, "parameter '%s': fill of %lld elements at offset %lld into %p", path, (long long)n,
                            (long long)offset, (void *)dst);
    if (check_init(path, init, err) != 0)
        return -1;
    uint64_t key = stream_key(seed, path);
    for (int64_t i = 0; i < n; i++)
        dst[i] = sample(init, key, offset + i);
    return 0;
}
