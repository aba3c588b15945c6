/*
 * train_report.c: what the trainer prints and writes besides checkpoints: the --metrics file
 * (opened, trimmed after --resume, one JSON line per step), progress lines on stdout (one
 * rewritten line on a terminal), the start banner and the message of a run stopped by values
 * not finite.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train_impl.h"

/* After --resume the metrics file keeps the lines of the steps the checkpoint covers and
 * drops the rest (from a run that went on past its last checkpoint, or a torn last line):
 * those steps are run and logged again. Rewritten atomically, and only when something goes. */
static int trim_metrics(Trainer *t, RtError *err) {
    RtMapped m;
    if (access(t->o.metrics, F_OK) != 0)
        return 0;
    if (rt_file_map(t->o.metrics, &m, err) != 0)
        return -1;
    const char *text = (const char *)m.data, *at = text, *end = text + m.size, *nl;
    while (at < end && (nl = memchr(at, '\n', (size_t)(end - at))) != NULL) {
        long long step;
        if (sscanf(at, "{\"step\": %lld", &step) == 1 && step > t->step)
            break;
        at = nl + 1;
    }
    int rc = 0;
    if (at < end) {
        RtWfile w;
        rc = rt_wfile_open(&w, t->o.metrics, err);
        if (rc == 0 && (rc = rt_wfile_write(&w, text, (size_t)(at - text), err)) != 0)
            rt_wfile_abort(&w);
        else if (rc == 0)
            rc = rt_wfile_commit(&w, err);
    }
    rt_file_unmap(&m);
    return rc;
}

int train_metrics_open(Trainer *t, RtError *err) {
    if (!t->o.metrics || t->rank != 0)
        return 0;
    RtError why;
    if (t->o.resume && trim_metrics(t, &why) != 0)
        return rt_error_set(err, "--metrics: %s", why.msg);
    t->metrics = fopen(t->o.metrics, t->o.resume ? "a" : "w");
    if (!t->metrics)
        return rt_error_set(err, "--metrics: %s: cannot open: %s", t->o.metrics, strerror(errno));
    return 0;
}

static void json_num(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

void train_metrics_write(Trainer *t, const StepOut *s, double tok_s, const double *eval) {
    if (!t->metrics || t->rank != 0)
        return;
    fprintf(t->metrics, "{\"step\": %lld", (long long)t->step);
    json_num(t->metrics, "loss", s->loss, "%.9g");
    if (t->p->has_aux_loss) { /* loss = ce_loss + aux_loss */
        json_num(t->metrics, "ce_loss", s->loss - s->aux_loss, "%.9g");
        json_num(t->metrics, "aux_loss", s->aux_loss, "%.9g");
    }
    json_num(t->metrics, "grad_norm", s->grad_norm, "%.9g");
    json_num(t->metrics, "lr", s->lr, "%.9g");
    json_num(t->metrics, "tokens_per_s", tok_s, "%.1f");
    json_num(t->metrics, "step_ms", s->ms, "%.3f");
    if (t->world > 1)
        json_num(t->metrics, "comm_bytes", (double)s->comm_bytes, "%.0f");
    if (eval)
        json_num(t->metrics, "eval_loss", *eval, "%.9g");
    fputs("}\n", t->metrics);
    fflush(t->metrics);
}

static void format_eta(char *buf, size_t cap, double ms) {
    double secs = ms / 1e3 + 0.5;
    long long s = secs < 1e12 ? (long long)secs : 999999999999ll; /* no overflowing cast */
    snprintf(buf, cap, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

void train_progress_print(Trainer *t, const StepOut *s, double tok_s, const double *eval) {
    if (t->rank != 0)
        return;
    char eta[32];
    format_eta(eta, sizeof eta, t->run_ms / (double)t->run_steps * (double)(t->o.steps - t->step));
    if (t->tty) {
        if (eval)
            printf("\r\033[Keval step %lld loss %.6f\n", (long long)t->step, *eval);
        printf("\rstep %lld/%lld  loss %.4f  %.0f tok/s  ETA %s\033[K", (long long)t->step, (long long)t->o.steps,
               s->loss, tok_s, eta);
    } else {
        if (t->step % t->o.log_every == 0 || t->step == t->o.steps || t->run_steps == 1)
            printf("step %lld loss %.6f grad_norm %.4f lr %.4e tok/s %.0f eta %s\n", (long long)t->step, s->loss,
                   s->grad_norm, s->lr, tok_s, eta);
        if (eval)
            printf("eval step %lld loss %.6f\n", (long long)t->step, *eval);
    }
    fflush(stdout);
}

void train_banner_print(const Trainer *t) {
    int64_t elems = 0;
    if (t->rank != 0)
        return;
    for (int i = 0; i < t->p->nparams; i++)
        elems += train_slot_global_numel(&t->p->params[i]);
    printf("%s: %d parameters (%lld values), slab %.3f MiB, %lld x %lld tokens per step, %lld threads, "
           "steps %lld..%lld",
           t->prog, (int)t->p->nparams, (long long)elems, (double)t->p->slab_bytes / (1 << 20),
           (long long)(t->batch_count * t->p->batch), (long long)t->p->seq, (long long)t->o.threads,
           (long long)t->step + 1, (long long)t->o.steps);
    if (t->world > 1) {
        printf(", %d devices (", t->world);
        for (int a = 0; a < t->p->mesh.naxes; a++)
            printf("%s%s=%lld", a ? " " : "", t->p->mesh.names[a], (long long)t->p->mesh.sizes[a]);
        printf("), %d collectives sending %lld bytes per device per step", (int)t->p->ncollectives,
               (long long)rt_comm_step_bytes(t->comm));
    }
    printf("\n");
    fflush(stdout);
}

void train_report_stop(Trainer *t, const char *what) {
    char buf[RT_ERROR_MAX];
    if (t->tty)
        printf("\n");
    fflush(stdout);
    if (t->world > 1)
        fprintf(stderr,
                "%s: rank %d: step %lld: %s: not finite; training stopped, nothing saved for this step.\n"
                "%s: %s\n",
                t->prog, t->rank, (long long)t->step, what, t->prog, train_last_good(t, buf, sizeof buf));
    else
        fprintf(stderr, "%s: step %lld: %s: not finite; training stopped, nothing saved for this step.\n%s: %s\n",
                t->prog, (long long)t->step, what, t->prog, train_last_good(t, buf, sizeof buf));
}
