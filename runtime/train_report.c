/*
 * train_report.c: what the trainer prints and writes besides checkpoints: the --metrics file
 * (opened, trimmed after --resume, one JSON line per step), progress lines on stdout (one
 * rewritten line on a terminal, else a plain line every --log-every steps; under the supervisor
 * its own stdout decides, through AXLC_PROGRESS; both give the step's time, which the
 * supervisor's goodput counts), the start banner, the message of a run stopped by values
 * not finite, and goodput and MFU.
 *
 * Goodput is the share of the job's wall time spent in steps that count. The wall time runs from
 * the process's start (so it holds the compile under `axlc run`, MPI's start and the load of a
 * checkpoint) and adds, after a failure, the downtime the supervisor reports (--restart-downtime)
 * and what the failed run had counted up to the checkpoint resumed (its --metrics line at that
 * step). It splits into steps, start-up, checkpoint stalls (the time the loop waits for saves),
 * lost work (steps run again after a failure: those up to --restart-step) and downtime; the rest
 * is evaluation and bookkeeping. MFU is the step's FLOPs (axlc memcheck's count, in the program)
 * at the device's peak FLOP/s (the device table's, or --peak-flops) over the step's time.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_impl.h"

/* After --resume the metrics file keeps the lines of the steps the checkpoint covers and
 * drops the rest (from a run that went on past its last checkpoint, or a torn last line):
 * those steps are run and logged again. Rewritten atomically, and only when something goes. */
static const char *const GP_KEY[GP_N] = {"wall_s", "productive_s", "startup_s", "ckpt_s", "lost_s", "downtime_s"};

/* The run resumed counted its time in its metrics lines: the line of the checkpoint's step (line,
 * len bytes) seeds this run's totals. A line without them (an older trainer's) seeds nothing. */
static void seed_goodput(Trainer *t, const char *line, size_t len) {
    char buf[2048], key[32];
    if (len >= sizeof buf)
        return;
    memcpy(buf, line, len);
    buf[len] = '\0';
    for (int k = 0; k < GP_N; k++) {
        snprintf(key, sizeof key, "\"%s\": ", GP_KEY[k]);
        const char *at = strstr(buf, key);
        double v = at ? strtod(at + strlen(key), NULL) : 0;
        t->gp.prior[k] = isfinite(v) && v > 0 ? v : 0;
    }
}

static int trim_metrics(Trainer *t, RtError *err) {
    RtMapped m;
    if (access(t->o.metrics, F_OK) != 0)
        return 0;
    if (rt_file_map(t->o.metrics, &m, err) != 0)
        return -1;
    const char *text = (const char *)m.data, *at = text, *end = text + m.size, *nl, *kept = NULL;
    while (at < end && (nl = memchr(at, '\n', (size_t)(end - at))) != NULL) {
        long long step;
        if (sscanf(at, "{\"step\": %lld", &step) == 1 && step > t->step)
            break;
        if (sscanf(at, "{\"step\": %lld", &step) == 1 && step == t->step)
            kept = at;
        at = nl + 1;
    }
    if (kept)
        seed_goodput(t, kept, (size_t)((const char *)memchr(kept, '\n', (size_t)(end - kept)) - kept));
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
    t->metrics = rt_file_open(t->o.metrics, t->o.resume ? "a" : "w", &why);
    if (!t->metrics)
        return rt_error_set(err, "--metrics: %s", why.msg);
    return 0;
}

static void json_num(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

void train_metrics_write(Trainer *t, const StepOut *s, double tok_s, const double *eval, int skipped) {
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
    if (skipped)
        fputs(", \"skipped\": true", t->metrics);
    double ideal = train_ideal_s(t), g[GP_N];
    if (ideal > 0)
        json_num(t->metrics, "mfu", ideal / (s->ms / 1e3), "%.6g");
    train_goodput(t, train_now_ms(), g);
    for (int k = 0; k < GP_N; k++)
        json_num(t->metrics, GP_KEY[k], g[k], "%.6f");
    json_num(t->metrics, "goodput", g[GP_WALL] > 0 ? g[GP_STEPS] / g[GP_WALL] : 0, "%.6g");
    fputs("}\n", t->metrics);
    fflush(t->metrics);
}

static void format_eta(char *buf, size_t cap, double ms) {
    double secs = ms / 1e3 + 0.5;
    long long s = secs < 1e12 ? (long long)secs : 999999999999ll; /* no overflowing cast */
    snprintf(buf, cap, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

int train_progress_tty(void) {
    const char *how = getenv("AXLC_PROGRESS");
    if (how && !strcmp(how, "plain"))
        return 0;
    if (how && !strcmp(how, "terminal"))
        return 1;
    return isatty(STDOUT_FILENO);
}

void train_progress_print(Trainer *t, const StepOut *s, double tok_s, const double *eval) {
    if (t->rank != 0)
        return;
    char eta[32];
    format_eta(eta, sizeof eta, t->run_ms / (double)t->run_steps * (double)(t->o.steps - t->step));
    if (t->tty) {
        if (eval)
            printf("\r\033[Keval step %lld loss %.6f\n", (long long)t->step, *eval);
        printf("\rstep %lld/%lld  loss %.4f  %.0f tok/s  %.1f ms  ETA %s\033[K", (long long)t->step,
               (long long)t->o.steps, s->loss, tok_s, s->ms, eta);
    } else {
        if (t->step % t->o.log_every == 0 || t->step == t->o.steps || t->run_steps == 1)
            printf("step %lld loss %.6f grad_norm %.4f lr %.4e tok/s %.0f step_ms %.3f eta %s\n", (long long)t->step,
                   s->loss, s->grad_norm, s->lr, tok_s, s->ms, eta);
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
           t->prog, (int)t->p->nparams, (long long)elems, (double)t->slab_bytes / (1 << 20),
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

void train_report_stop(Trainer *t, const char *what, const char *tensor) {
    char buf[RT_ERROR_MAX], msg[2 * RT_ERROR_MAX], text[2 * RT_ERROR_MAX + 16];
    if (t->tty)
        printf("\n");
    fflush(stdout);
    if (t->world > 1)
        snprintf(msg, sizeof msg,
                 "%s: rank %d: step %lld: %s: not finite; training stopped, nothing saved for this step.\n%s: %s",
                 t->prog, t->rank, (long long)t->step, what, t->prog, train_last_good(t, buf, sizeof buf));
    else
        snprintf(msg, sizeof msg,
                 "%s: step %lld: %s: not finite; training stopped, nothing saved for this step.\n%s: %s", t->prog,
                 (long long)t->step, what, t->prog, train_last_good(t, buf, sizeof buf));
    fprintf(stderr, "%s\n", rt_event_text(msg, text, sizeof text));
    rt_event_failure(RT_CAUSE_NONFINITE, t->rank, t->step, tensor);
}

double train_ideal_s(const Trainer *t) {
    const RtProgram *p = t->p;
    double f32 = t->o.peak_flops > 0 ? t->o.peak_flops : p->facts.peak_f32;
    double bf16 = t->o.peak_flops > 0 ? t->o.peak_flops : p->facts.peak_bf16 > 0 ? p->facts.peak_bf16 : f32;
    if (p->facts.step_flops <= 0 || f32 <= 0)
        return 0;
    return (p->facts.step_flops - p->facts.step_bf16_flops) / f32 + p->facts.step_bf16_flops / bf16;
}

void train_goodput(const Trainer *t, double now_ms, double *g) {
    const Goodput *gp = &t->gp;
    double run[GP_N] = {(now_ms - gp->start_ms) / 1e3 + t->o.restart_downtime,
                        gp->steps_ms / 1e3,
                        gp->startup_ms / 1e3,
                        t->ckpt_ms / 1e3,
                        gp->lost_ms / 1e3,
                        t->o.restart_downtime};
    for (int k = 0; k < GP_N; k++)
        g[k] = gp->prior[k] + run[k];
}

void train_stages_print(const Trainer *t) {
    const RtMesh *m = &t->p->mesh;
    int a = rt_mesh_axis(m, "pipeline");
    if (a < 0 || m->sizes[a] < 2 || m->sizes[a] > 64)
        return;
    int n = (int)m->sizes[a], first = 1;
    int64_t v[128] = {0}; /* per stage: microseconds waited, microseconds in steps */
    for (int i = 0; i < m->naxes; i++)
        if (i != a && rt_comm_coord(t->comm, i) != 0)
            first = 0;
    int64_t s = rt_comm_coord(t->comm, a);
    if (first) {
        v[s] = (int64_t)(rt_comm_p2p_wait_s(t->comm) * 1e6);
        v[n + s] = (int64_t)(t->gp.steps_ms * 1e3);
    }
    RtError err;
    if (rt_comm_sum_i64(t->comm, v, 2 * n, &err) != 0 || t->rank != 0)
        return;
    for (int k = 0; k < n; k++)
        printf("%s: pipeline stage %d: waited %.3f s for the other stages of %.3f s in steps (%.1f%%)\n", t->prog, k,
               (double)v[k] / 1e6, (double)v[n + k] / 1e6,
               v[n + k] > 0 ? 100.0 * (double)v[k] / (double)v[n + k] : 0.0);
    fflush(stdout);
}

/* The run's last line: "goodput 91.3% of 12.4 s (steps 11.3 s, ...); MFU 21.0% ...". */
void train_goodput_print(const Trainer *t, double now_ms) {
    double g[GP_N];
    train_goodput(t, now_ms, g);
    printf("%s: goodput %.1f%% of %.2f s%s: steps %.2f s, start-up %.2f s, checkpoint stalls %.3f s, lost work "
           "%.2f s, restart downtime %.2f s",
           t->prog, g[GP_WALL] > 0 ? 100 * g[GP_STEPS] / g[GP_WALL] : 0.0, g[GP_WALL],
           t->gp.prior[GP_WALL] > 0 ? " (the job's, across restarts)" : "", g[GP_STEPS], g[GP_STARTUP], g[GP_CKPT],
           g[GP_LOST], g[GP_DOWN]);
    double peak = t->o.peak_flops > 0 ? t->o.peak_flops : t->p->facts.peak_f32;
    if (t->gp.ideal_s > 0 && t->gp.steps_ms > 0)
        printf("; MFU %.1f%% (peak %.4g FLOP/s per device%s)", 100 * t->gp.ideal_s / (t->gp.steps_ms / 1e3), peak,
               t->o.peak_flops > 0 ? ", --peak-flops" : ", the device table's");
    printf("\n");
    fflush(stdout);
}
