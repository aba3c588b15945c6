/*
 * train_program.c: the checks of the generated program's tables (RtProgram) before anything
 * runs. The program is trusted less than the runtime: every offset must lie in the slab, 4-byte
 * aligned, every split must name axes of the mesh, and the ABI version must be this runtime's.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "train_impl.h"

/* Every program fact is 8 bytes (int64_t, uint64_t or double): the backends emit the table
 * from RT_PROGRAM_FACTS alone, one 8-byte constant per row. */
#define RT_FACT_SIZE(name, type, doc)                                                                                  \
    _Static_assert(sizeof(type) == 8 && _Alignof(type) == 8, "program fact " #name " is not 8 bytes");
RT_PROGRAM_FACTS(RT_FACT_SIZE)
#undef RT_FACT_SIZE

int64_t train_slot_numel(const RtParamSlot *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n = s->shape[d] < 0 || (s->shape[d] > 0 && n > INT64_MAX / 4 / s->shape[d]) ? -1 : n * s->shape[d];
    return n;
}

/* `bytes` at `off` lie in the slab, 4-byte aligned. */
static int check_region(const RtProgram *p, const char *what, const char *path, int64_t off, int64_t bytes,
                        RtError *err) {
    if (bytes < 0 || off < 0 || off % 4 != 0 || off > p->slab_bytes - bytes)
        return rt_error_set(err,
                            "program: %s%s%s: %lld bytes at offset %lld, slab holds %lld (4-byte "
                            "aligned offsets expected)",
                            what, path ? " of " : "", path ? path : "", (long long)bytes, (long long)off,
                            (long long)p->slab_bytes);
    return 0;
}

/* A split names mesh axes (index + 1) of the mesh, each at most once, 0 ending the list. */
static int check_split(const RtProgram *p, const uint8_t axes[RT_MAX_SPLIT_AXES], int64_t *count) {
    *count = 1;
    for (int i = 0, end = 0; i < RT_MAX_SPLIT_AXES; i++) {
        if (!axes[i]) {
            end = 1;
            continue;
        }
        if (end || axes[i] > p->mesh.naxes)
            return -1;
        for (int j = 0; j < i; j++)
            if (axes[j] == axes[i])
                return -1;
        *count *= p->mesh.sizes[axes[i] - 1];
    }
    return 0;
}

static int check_slot(const RtProgram *p, const RtParamSlot *s, RtError *err) {
    if (!s->path || !s->path[0] || s->rank < 0 || s->rank > RT_MAX_PARAM_RANK)
        return rt_error_set(err, "program: a parameter has no path or rank %d", (int)s->rank);
    for (int d = 0; d < s->rank; d++) {
        int64_t count;
        if (check_split(p, s->split[d], &count) != 0 || s->shape[d] < 0 || s->global_shape[d] != s->shape[d] * count)
            return rt_error_set(err, "program: parameter %s: dim %d holds %lld of %lld over a bad split", s->path, d,
                                (long long)s->shape[d], (long long)s->global_shape[d]);
    }
    int64_t bytes = train_slot_numel(s) * 4;
    if (bytes < 0)
        return rt_error_set(err, "program: parameter %s has a negative or huge shape", s->path);
    if (check_region(p, "parameter", s->path, s->offset, bytes, err) != 0)
        return -1;
    if (train_slot_frozen(s)) /* no moments: both -1 */
        return s->v_offset == -1 ? 0
                                 : rt_error_set(err, "program: parameter %s has a second moment but no first", s->path);
    if (check_region(p, "first moment", s->path, s->m_offset, bytes, err) != 0 ||
        check_region(p, "second moment", s->path, s->v_offset, bytes, err) != 0)
        return -1;
    return 0;
}

static int check_mesh(const RtProgram *p, RtError *err) {
    int64_t devices = 1, count;
    if (p->mesh.naxes < 0 || p->mesh.naxes > RT_MAX_MESH_AXES)
        return rt_error_set(err, "program: a mesh of %d axes", (int)p->mesh.naxes);
    for (int a = 0; a < p->mesh.naxes; a++) {
        if (!p->mesh.names[a] || p->mesh.sizes[a] < 1 || p->mesh.sizes[a] > (1 << 20) / devices)
            return rt_error_set(err, "program: mesh axis %d has no name or a bad size", a);
        devices *= p->mesh.sizes[a];
    }
    if (check_split(p, p->batch_split, &count) != 0)
        return rt_error_set(err, "program: the batch split names an axis outside the mesh");
    return 0;
}

static int check_collectives(const RtProgram *p, RtError *err) {
    if (p->ncollectives < 0 || (p->ncollectives > 0 && !p->collectives))
        return rt_error_set(err, "program: no collective table");
    for (int32_t i = 0; i < p->ncollectives; i++) {
        const RtCollective *k = &p->collectives[i];
        if (k->rank < 0 || k->rank > RT_MAX_DIMS)
            return rt_error_set(err, "program: collective %d has rank %d", i, (int)k->rank);
        int64_t es = rt_coll_elem_bytes(k->dtype), in = es, out = es;
        if (!es)
            return rt_error_set(err,
                                "program: collective %d has dtype %d; this runtime reduces and moves f32 (%d), "
                                "bf16 (%d) and i32 (%d)",
                                i, (int)k->dtype, RT_DT_F32, RT_DT_BF16, RT_DT_I32);
        for (int d = 0; d < k->rank; d++) {
            if (k->in_shape[d] < 0 || k->out_shape[d] < 0 || (k->in_shape[d] && in > INT64_MAX / 8 / k->in_shape[d]) ||
                (k->out_shape[d] && out > INT64_MAX / 8 / k->out_shape[d]))
                return rt_error_set(err, "program: collective %d has a bad shape", i);
            in *= k->in_shape[d];
            out *= k->out_shape[d];
        }
        char what[48];
        snprintf(what, sizeof what, "collective %d", i);
        if (check_region(p, what, "its operand", k->in_offset, in, err) != 0 ||
            check_region(p, what, "its result", k->out_offset, out, err) != 0)
            return -1;
    }
    return 0;
}

/* The generated program is trusted less than the runtime: a bad table is reported, not run. */
int train_program_check(const RtProgram *p, RtError *err) {
    if (p->abi_version != RT_ABI_VERSION)
        return rt_error_set(err, "program: ABI version %d, this runtime implements %d", (int)p->abi_version,
                            RT_ABI_VERSION);
    if (!p->step || p->slab_bytes <= 0 || p->nparams < 0 || (p->nparams > 0 && !p->params))
        return rt_error_set(err, "program: no step function, slab, or parameter table");
    if (p->batch < 1 || p->seq < 1 || p->vocab < 1 || p->batch > INT32_MAX / p->seq || p->vocab > INT32_MAX)
        return rt_error_set(err,
                            "program: batch %lld x sequence %lld, vocabulary %lld: expected positive "
                            "sizes",
                            (long long)p->batch, (long long)p->seq, (long long)p->vocab);
    if (check_mesh(p, err) != 0)
        return -1;
    int pipe = rt_mesh_axis(&p->mesh, "pipeline");
    if (p->stage_slab_bytes && pipe >= 0)
        for (int64_t s = 0; s < p->mesh.sizes[pipe]; s++)
            if (p->stage_slab_bytes[s] <= 0 || p->stage_slab_bytes[s] > p->slab_bytes)
                return rt_error_set(err, "program: stage %lld's slab of %lld bytes, outside 1..%lld", (long long)s,
                                    (long long)p->stage_slab_bytes[s], (long long)p->slab_bytes);
    int64_t bt = p->batch * p->seq * 4;
    if (check_region(p, "ids", NULL, p->ids_offset, bt, err) != 0 ||
        check_region(p, "targets", NULL, p->targets_offset, bt, err) != 0 ||
        check_region(p, "step", NULL, p->step_offset, 4, err) != 0 ||
        check_region(p, "loss", NULL, p->loss_offset, 4, err) != 0 ||
        check_region(p, "grad_norm", NULL, p->grad_norm_offset, 4, err) != 0 ||
        check_region(p, "lr", NULL, p->lr_offset, 4, err) != 0 ||
        (p->has_aux_loss && check_region(p, "aux_loss", NULL, p->aux_loss_offset, 4, err) != 0))
        return -1;
    for (int i = 0; i < p->nparams; i++)
        if (check_slot(p, &p->params[i], err) != 0)
            return -1;
    return check_collectives(p, err);
}

int64_t train_slot_global_numel(const RtParamSlot *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->global_shape[d];
    return n;
}
