/*
 * train_outlier.c: bad steps. With --skip-outliers Z, a step whose loss or gradient norm lies
 * more than Z standard deviations above the mean of the last --outlier-window steps' is
 * skipped: its update is not applied. The optimizer is part of the compiled step, which updates
 * the parameters and moments in place, so the trainer copies them before each step and copies
 * them back after an outlier; the step number and the data position still advance (the batch
 * is passed over, as a step that was run). The window holds the steps that were applied; it is
 * saved in every checkpoint (metadata axlc.trainer_state), so a resumed run skips exactly the
 * steps the uninterrupted one does, and stays bit for bit the same.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

#define STATE_TAG "outliers"

/* The parameters and moments a step updates: the checkpoint's table (a frozen base is not). */
static int64_t state_bytes(const Trainer *t) {
    int64_t bytes = 0;
    for (int j = 0; j < 3 * t->p->nparams; j++)
        if (!train_slot_frozen(&t->p->params[j % t->p->nparams]))
            bytes += train_slot_numel(&t->p->params[j % t->p->nparams]) * 4;
    return bytes;
}

int train_outlier_init(Trainer *t, RtError *err) {
    Outliers *w = &t->outliers;
    w->cap = t->o.outlier_window > 0 ? (int)t->o.outlier_window : RT_OUTLIER_WINDOW;
    w->loss = calloc((size_t)w->cap + 1, sizeof *w->loss);
    w->gnorm = calloc((size_t)w->cap + 1, sizeof *w->gnorm);
    w->text = malloc((size_t)w->cap * 34 + 32);
    if (!w->loss || !w->gnorm || !w->text)
        return rt_error_set(err, "out of memory for the outlier window");
    if (t->o.skip_outliers > 0 && !(w->backup = malloc((size_t)state_bytes(t) + 1)))
        return rt_error_set(err, "out of memory for the copy of the state that --skip-outliers keeps (%.1f MiB)",
                            (double)state_bytes(t) / 1048576);
    return 0;
}

void train_outlier_free(Trainer *t) {
    Outliers *w = &t->outliers;
    free(w->loss);
    free(w->gnorm);
    free(w->text);
    free(w->backup);
    memset(w, 0, sizeof *w);
}

/* Copies the parameters and moments into the backup (back) or from it (back == 0). */
static void state_copy(Trainer *t, int back) {
    char *at = t->outliers.backup;
    /* the backup takes the state alone; undoing an update sends the slab back to a device
     * whole, so the host's is made current whole first */
    train_sync(t, t->slab, back ? RT_SYNC_TO_HOST : RT_SYNC_STATE_TO_HOST);
    for (int j = 0; j < 3 * t->p->nparams; j++) {
        if (train_slot_frozen(&t->p->params[j % t->p->nparams]))
            continue;
        float *x = train_slot_data(t, t->slab, j % t->p->nparams, j / t->p->nparams);
        size_t n = (size_t)train_slot_numel(&t->p->params[j % t->p->nparams]) * 4;
        if (back)
            memcpy(x, at, n);
        else
            memcpy(at, x, n);
        at += n;
    }
    if (back)
        train_sync(t, t->slab, RT_SYNC_FROM_HOST);
}

void train_outlier_before(Trainer *t) {
    if (t->o.skip_outliers > 0)
        state_copy(t, 0);
}

static void window_push(Outliers *w, float loss, float gnorm) {
    if (w->n == w->cap) { /* drop the oldest */
        memmove(w->loss, w->loss + 1, (size_t)(w->cap - 1) * sizeof *w->loss);
        memmove(w->gnorm, w->gnorm + 1, (size_t)(w->cap - 1) * sizeof *w->gnorm);
        w->n--;
    }
    w->loss[w->n] = loss;
    w->gnorm[w->n++] = gnorm;
}

/* How many standard deviations x lies above the mean of v[0..n) (0 when they do not vary). */
static double zscore(const float *v, int n, double x) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += v[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        var += (v[i] - mean) * (v[i] - mean);
    double sd = sqrt(var / n);
    return sd > 0 ? (x - mean) / sd : 0;
}

int train_outlier_after(Trainer *t, const StepOut *s) {
    Outliers *w = &t->outliers;
    if (t->o.skip_outliers > 0 && w->n == w->cap) {
        double zl = zscore(w->loss, w->n, s->loss), zg = zscore(w->gnorm, w->n, s->grad_norm);
        if (zl > t->o.skip_outliers || zg > t->o.skip_outliers) {
            state_copy(t, 1);
            if (t->rank == 0) {
                fflush(stdout);
                fprintf(stderr,
                        "%s: step %lld: loss %.6g (z %.1f), grad_norm %.6g (z %.1f) against the last %d steps: an "
                        "outlier above %g; update skipped\n",
                        t->prog, (long long)t->step, s->loss, zl, s->grad_norm, zg, w->n, t->o.skip_outliers);
            }
            t->skipped++;
            return 1;
        }
    }
    window_push(w, s->loss, s->grad_norm);
    return 0;
}

const char *train_outlier_text(Trainer *t) {
    Outliers *w = &t->outliers;
    int len = snprintf(w->text, 32, "%s %d", STATE_TAG, w->n);
    for (int i = 0; i < w->n; i++)
        len += sprintf(w->text + len, " %.9g %.9g", w->loss[i], w->gnorm[i]);
    return w->text;
}

int train_outlier_restore(Trainer *t, const char *text, const char *where, RtError *err) {
    Outliers *w = &t->outliers;
    w->n = 0;
    if (!*text)
        return 0; /* a checkpoint without one: the window starts empty */
    int n, at;
    if (sscanf(text, STATE_TAG " %d%n", &n, &at) != 1 || n < 0)
        return rt_error_set(err, "%s: metadata axlc.trainer_state: expected \"%s N\" and N pairs of numbers", where,
                            STATE_TAG);
    for (int i = 0; i < n; i++) {
        float l, g;
        int used;
        if (sscanf(text + at, " %g %g%n", &l, &g, &used) != 2)
            return rt_error_set(err, "%s: metadata axlc.trainer_state: pair %d of %d is not two numbers", where, i + 1,
                                n);
        at += used;
        window_push(w, l, g); /* a smaller window keeps the newest */
    }
    return 0;
}
