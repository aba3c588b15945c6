/*
 * memreport.c: the memory report (memcheck.c: DrvMemReport) rendered, as text for a person,
 * as JSON for a program (the field names of XLA's CompiledMemoryStats where they exist), and
 * as an SVG plot of the live bytes over the step; and the fixes memcheck found (DrvMemFixes).
 * Renderers read the structs alone: no job, no graph.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"

/* ---- text ----------------------------------------------------------------------------- */

static const char *human(double bytes, char *buf, size_t cap) {
  return fe_human_bytes(bytes, buf, cap);
}

static const char *seconds(double s, char *buf, size_t cap) {
  if (s >= 1)
    snprintf(buf, cap, "%.2f s", s);
  else if (s >= 1e-3)
    snprintf(buf, cap, "%.2f ms", s * 1e3);
  else
    snprintf(buf, cap, "%.1f us", s * 1e6);
  return buf;
}

static const char *kind_name(int k) {
  static const char *const names[] = {"saved activation", "gradient", "temporary", "communication"};
  return names[k];
}

double drv_memreport_compute_s(const DrvMemReport *r, const DrvDevice *dev) {
  double bf16_rate = dev->flops_bf16 > 0 ? dev->flops_bf16 : dev->flops_f32;
  return (r->flops - r->bf16_flops) / dev->flops_f32 + r->bf16_flops / bf16_rate;
}

double drv_memreport_stage_s(const DrvMemReport *r, const DrvDevice *dev, int32_t *slowest) {
  double bf16_rate = dev->flops_bf16 > 0 ? dev->flops_bf16 : dev->flops_f32, most = 0;
  for (int32_t s = 0; s < r->stages; s++) {
    const DrvMemStage *st = &r->per_stage[s];
    double t = fmax((st->flops - st->bf16_flops) / dev->flops_f32 + st->bf16_flops / bf16_rate,
                    st->comm_bytes / dev->link_bw);
    if (s == 0 || t > most) most = t, *slowest = s;
  }
  return most;
}

double drv_memreport_step_s(const DrvMemReport *r, const DrvDevice *dev) {
  if (r->stages < 2) return fmax(drv_memreport_compute_s(r, dev), r->comm_bytes / dev->link_bw);
  /* each time step of the schedule takes the slowest stage's unit, busy / units: the stages
   * idle (steps - units) / steps of the step ((P-1)/(M+P-1) for GPipe and 1F1B,
   * (P-1)/(VM+P-1) interleaved) */
  int32_t slow = 0;
  double busy = drv_memreport_stage_s(r, dev, &slow);
  return busy * (double)r->sched_steps / (double)r->sched_units;
}

void drv_memreport_print(const DrvMemReport *r, const DrvDevice *dev, int top, FILE *out) {
  char a[32], b[32], c[32];
  const FeMesh *m = &r->mesh;
  FeTargetNaming k = fe_target_naming(r->target);
  fprintf(out, "memcheck: %s on %s (%lld device%s: %s, %s of memory each", r->file, r->target,
          (long long)m->devices, m->devices == 1 ? "" : "s", dev->doc[0] ? dev->doc : dev->name,
          human(dev->memory, a, sizeof a));
  if (k.cores_per_chip > 1) /* tpu-v5p-512 is 256 chips: say why the count is not 512 */
    fprintf(out, "; the name counts TensorCores, %d per chip", k.cores_per_chip);
  fprintf(out, ")\n");
  fprintf(out, "mesh:");
  for (int i = 0; i < m->n; i++)
    if (m->shape[i] > 1) fprintf(out, " %s=%lld", m->axes[i], (long long)m->shape[i]);
  if (m->devices <= 1) fprintf(out, " one device");
  fprintf(out, "; fusion plan: %s\n", r->fusion);
  if (r->stages > 1) {
    fprintf(out,
            "pipeline: %d stages, %s schedule, %lld microbatches; each stage planned on its own "
            "(its layers' parameters and state, every device's values)\n",
            r->stages, r->schedule, (long long)r->microbatches);
    for (int32_t s = 0; s < r->stages; s++) {
      const DrvMemStage *st = &r->per_stage[s];
      fprintf(out, "  stage %d: peak %s, parameters %s, saved activations %s of %lld microbatch%s",
              s, human((double)st->peak, a, sizeof a), human((double)st->params, b, sizeof b),
              human((double)st->saved, c, sizeof c), (long long)st->peak_micro,
              st->peak_micro == 1 ? "" : "es");
      if (st->live_micro > 0) fprintf(out, " (the schedule keeps %lld)", (long long)st->live_micro);
      fprintf(out, "%s\n", s == r->worst ? "  <- the largest, below" : "");
    }
  }
  if (r->stages > 1)
    fprintf(out, "\nper device of stage %d:\n", r->worst);
  else
    fprintf(out, "\nper device:\n");
  fprintf(out, "  parameters          %12s\n", human((double)r->params, a, sizeof a));
  fprintf(out, "  optimizer state     %12s\n", human((double)r->opt_state, a, sizeof a));
  fprintf(out, "  batch               %12s\n", human((double)r->inputs, a, sizeof a));
  fprintf(out, "  at the peak, %s of the step:\n",
          r->phase && r->nvalues ? (const char *[]){"in the forward pass", "in the backward pass",
                                                    "in the update"}[r->phase[r->peak_at]]
                                 : "");
  fprintf(out, "    gradients         %12s\n", human((double)r->grads, a, sizeof a));
  fprintf(out, "    saved activations %12s\n", human((double)r->saved, a, sizeof a));
  fprintf(out, "    temporaries       %12s\n", human((double)r->temps, a, sizeof a));
  fprintf(out, "    communication     %12s\n", human((double)r->comm, a, sizeof a));
  if (r->comm_scratch + r->mpi_heap > 0) {
    fprintf(out, "  slab                %12s  (every buffer of the step at its planned offset)\n",
            human((double)r->slab, a, sizeof a));
    fprintf(out, "  communication       %12s  (scratch of the collectives, rounds of %s)\n",
            human((double)r->comm_scratch, a, sizeof a),
            human((double)RT_COMM_CHUNK_BYTES, b, sizeof b));
    fprintf(out, "  MPI library         %12s  (its own heap, as measured with Open MPI)\n",
            human((double)r->mpi_heap, a, sizeof a));
    fprintf(out, "  peak                %12s  (the slab and these two; %s live at once)\n",
            human((double)r->peak, a, sizeof a),
            human((double)(r->fixed + r->temp_peak), b, sizeof b));
  } else {
    fprintf(out, "  peak                %12s  (the slab a trainer allocates; %s live at once)\n",
            human((double)r->peak, a, sizeof a),
            human((double)(r->fixed + r->temp_peak), b, sizeof b));
  }
  fprintf(out, "  generated code      %12s  (estimate, outside the slab)\n",
          human((double)r->code, a, sizeof a));
  double total = (double)r->peak + (double)r->code;
  if (drv_memreport_fits(r, dev))
    fprintf(out, "verdict: fits, with %s headroom of %s\n", human(dev->memory - total, a, sizeof a),
            human(dev->memory, b, sizeof b));
  else if (total <= dev->memory)
    fprintf(out,
            "verdict: does not fit: a tensor of %s is larger than the device's largest buffer, %s "
            "(max_alloc in the device table)\n",
            human((double)r->largest, a, sizeof a), human(dev->max_alloc, b, sizeof b));
  else
    fprintf(out, "verdict: does not fit: over by %s (needs %s of %s)\n",
            human(total - dev->memory, a, sizeof a), human(total, b, sizeof b),
            human(dev->memory, c, sizeof c));
  if (top > 0 && r->nitems) {
    fprintf(out, "\nlargest values live at the peak:\n");
    for (int i = 0; i < r->nitems && i < top; i++) {
      const DrvMemItem *x = &r->items[i];
      char shape[128] = "";
      size_t len = 0;
      for (int32_t d = 0; d < x->shape.rank; d++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? "," : "",
                                (long long)x->shape.dims[d]);
      fprintf(out, "  %10s  %-16s  %s[%s] %s  %s%s%s\n", human((double)x->bytes, a, sizeof a),
              kind_name(x->kind), ir_dtype_name(x->dtype), shape, ir_op_name(x->op),
              *x->origin ? x->origin : "?", *x->tag ? "  #" : "", x->tag);
    }
  }
  double tc = drv_memreport_compute_s(r, dev), tm = r->comm_bytes / dev->link_bw;
  char who[48] = "";
  if (r->stages > 1) snprintf(who, sizeof who, " of stage %d", r->worst);
  fprintf(out,
          "\nstep, per device%s: %.4g FLOPs (%.1f%% in matrix products), %s sent in %d "
          "collectives\n",
          who, r->flops, r->flops > 0 ? 100 * r->matmul_flops / r->flops : 0.0,
          human(r->comm_bytes, a, sizeof a), r->collectives);
  char rates[128];
  if (r->bf16_flops > 0)
    snprintf(rates, sizeof rates, "%.0f%% in bf16 products at %.3g FLOP/s, the rest at %.3g f32",
             100 * r->bf16_flops / r->flops, dev->flops_bf16 > 0 ? dev->flops_bf16 : dev->flops_f32,
             dev->flops_f32);
  else
    snprintf(rates, sizeof rates, "at %.3g FLOP/s f32", dev->flops_f32);
  if (r->stages > 1) {
    int32_t slow = 0;
    double busy = drv_memreport_stage_s(r, dev, &slow), step = drv_memreport_step_s(r, dev);
    const DrvMemStage *st = &r->per_stage[slow];
    double bf = st->bf16_flops, rate = dev->flops_bf16 > 0 ? dev->flops_bf16 : dev->flops_f32;
    fprintf(out,
            "lower bound on the step time: %s (the slowest stage, %d: compute %s, communication "
            "%s; ",
            seconds(step, a, sizeof a), slow,
            seconds((st->flops - bf) / dev->flops_f32 + bf / rate, b, sizeof b),
            seconds(st->comm_bytes / dev->link_bw, c, sizeof c));
    fprintf(out, "busy %s, and the bubble, (P-1)/(%sM+P-1) = %lld/%lld of the step, idle)\n",
            seconds(busy, a, sizeof a), strcmp(r->schedule, "interleaved") ? "" : "V",
            (long long)(r->sched_steps - r->sched_units) / 2, (long long)r->sched_steps / 2);
    return;
  }
  fprintf(out, "lower bound on the step time: %s (compute %s, %s; communication %s at %.3g B/s)\n",
          seconds(fmax(tc, tm), a, sizeof a), seconds(tc, b, sizeof b), rates,
          seconds(tm, c, sizeof c), dev->link_bw);
}

/* ---- JSON ---- */

char *drv_memreport_json(const DrvMemReport *r, const DrvDevice *dev, int top) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "model", json_object_new_string(r->file));
  json_object_object_add(o, "target", json_object_new_string(r->target));
  json_object_object_add(o, "device_kind", json_object_new_string(dev->name));
  json_object_object_add(o, "devices", json_object_new_int64(r->mesh.devices));
  json_object *mesh = json_object_new_object();
  for (int i = 0; i < r->mesh.n; i++)
    json_object_object_add(mesh, r->mesh.axes[i], json_object_new_int64(r->mesh.shape[i]));
  json_object_object_add(o, "mesh", mesh);
  json_object_object_add(o, "device_memory_in_bytes", json_object_new_int64((int64_t)dev->memory));
  /* the names of XLA's CompiledMemoryStats, per device */
  json_object_object_add(o, "argument_size_in_bytes",
                         json_object_new_int64(r->params + r->opt_state + r->inputs));
  json_object_object_add(o, "output_size_in_bytes",
                         json_object_new_int64(r->params + r->opt_state));
  json_object_object_add(o, "alias_size_in_bytes", json_object_new_int64(r->params + r->opt_state));
  json_object_object_add(o, "temp_size_in_bytes", json_object_new_int64(r->temp_peak));
  json_object_object_add(o, "generated_code_size_in_bytes", json_object_new_int64(r->code));
  json_object_object_add(o, "peak_memory_in_bytes", json_object_new_int64(r->peak));
  json_object *parts = json_object_new_object();
  json_object_object_add(parts, "parameters", json_object_new_int64(r->params));
  json_object_object_add(parts, "optimizer_state", json_object_new_int64(r->opt_state));
  json_object_object_add(parts, "batch", json_object_new_int64(r->inputs));
  json_object_object_add(parts, "gradients", json_object_new_int64(r->grads));
  json_object_object_add(parts, "saved_activations", json_object_new_int64(r->saved));
  json_object_object_add(parts, "temporaries", json_object_new_int64(r->temps));
  json_object_object_add(parts, "communication", json_object_new_int64(r->comm));
  json_object_object_add(parts, "communication_scratch", json_object_new_int64(r->comm_scratch));
  json_object_object_add(parts, "mpi_library", json_object_new_int64(r->mpi_heap));
  json_object_object_add(o, "breakdown_in_bytes", parts);
  json_object_object_add(o, "slab_in_bytes", json_object_new_int64(r->slab));
  double total = (double)r->peak + (double)r->code;
  json_object_object_add(o, "fits", json_object_new_boolean(drv_memreport_fits(r, dev)));
  json_object_object_add(o, "headroom_in_bytes",
                         json_object_new_int64((int64_t)(dev->memory - total)));
  json_object_object_add(o, "flops", json_object_new_double(r->flops));
  json_object_object_add(o, "matmul_flops", json_object_new_double(r->matmul_flops));
  json_object_object_add(o, "bf16_flops", json_object_new_double(r->bf16_flops));
  json_object_object_add(o, "bytes_sent", json_object_new_double(r->comm_bytes));
  json_object_object_add(o, "step_time_lower_bound_s",
                         json_object_new_double(drv_memreport_step_s(r, dev)));
  if (r->stages > 1) {
    json_object *pp = json_object_new_object();
    json_object_object_add(pp, "stages", json_object_new_int(r->stages));
    json_object_object_add(pp, "schedule", json_object_new_string(r->schedule));
    json_object_object_add(pp, "microbatches", json_object_new_int64(r->microbatches));
    json_object_object_add(pp, "worst_stage", json_object_new_int(r->worst));
    json_object_object_add(
        pp, "bubble",
        json_object_new_double((double)(r->sched_steps - r->sched_units) / (double)r->sched_steps));
    json_object *rows = json_object_new_array();
    for (int32_t s = 0; s < r->stages; s++) {
      const DrvMemStage *st = &r->per_stage[s];
      json_object *e = json_object_new_object();
      json_object_object_add(e, "peak_memory_in_bytes", json_object_new_int64(st->peak));
      json_object_object_add(e, "generated_code_size_in_bytes", json_object_new_int64(st->code));
      json_object_object_add(e, "parameters", json_object_new_int64(st->params));
      json_object_object_add(e, "optimizer_state", json_object_new_int64(st->opt_state));
      json_object_object_add(e, "saved_activations", json_object_new_int64(st->saved));
      json_object_object_add(e, "live_microbatches", json_object_new_int64(st->peak_micro));
      json_object_object_add(e, "schedule_live_microbatches",
                             json_object_new_int64(st->live_micro));
      json_object_object_add(e, "flops", json_object_new_double(st->flops));
      json_object_object_add(e, "bytes_sent", json_object_new_double(st->comm_bytes));
      json_object_array_add(rows, e);
    }
    json_object_object_add(pp, "per_stage", rows);
    json_object_object_add(o, "pipeline", pp);
  }
  json_object *live = json_object_new_array();
  for (int i = 0; i < r->nitems && i < top; i++) {
    const DrvMemItem *x = &r->items[i];
    json_object *e = json_object_new_object();
    json_object_object_add(e, "bytes", json_object_new_int64(x->bytes));
    json_object_object_add(e, "kind", json_object_new_string(kind_name(x->kind)));
    json_object_object_add(e, "op", json_object_new_string(ir_op_name(x->op)));
    json_object_object_add(e, "config_path", json_object_new_string(x->origin));
    json_object_object_add(e, "tag", json_object_new_string(x->tag));
    json_object *shape = json_object_new_array();
    for (int32_t d = 0; d < x->shape.rank; d++)
      json_object_array_add(shape, json_object_new_int64(x->shape.dims[d]));
    json_object_object_add(e, "shape", shape);
    json_object_array_add(live, e);
  }
  json_object_object_add(o, "live_at_peak", live);
  char *s = fe_json_canonical(o);
  json_object_put(o);
  return s;
}

/* ---- the plot ----------------------------------------------------------------------------- */

int drv_memreport_svg(const DrvMemReport *r, const DrvDevice *dev, FILE *out) {
  const double W = 900, H = 430, L = 80, R = 20, T = 60, B = 60;
  double pw = W - L - R, ph = H - T - B;
  double top = (double)r->fixed + (double)(r->nvalues ? r->timeline[r->peak_at] : 0);
  bool show_cap = dev->memory <= 1.5 * top;
  double ymax = (show_cap ? fmax(top, dev->memory) : top) * 1.08;
  if (ymax <= 0) ymax = 1;
  int n = r->nvalues > 0 ? r->nvalues : 1;
  char a[32], b[32];
  fprintf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n",
          W, H);
  fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  char stage[64] = ""; /* a pipeline's plot is its worst stage's */
  if (r->stages > 1) snprintf(stage, sizeof stage, ", stage %d of %d", r->worst, r->stages);
  fprintf(out,
          "<text x=\"%.0f\" y=\"22\" font-size=\"15\">Live memory per device: %s on %s "
          "(peak %s%s)</text>\n",
          L, r->file, r->target, human(top, a, sizeof a), stage);
  /* phase bands */
  static const char *const fill[] = {"#e8f0fe", "#fdecea", "#e6f4ea"};
  static const char *const label[] = {"forward", "backward", "update"};
  for (int v = 0; v < r->nvalues;) {
    int p = r->phase[v], e = v;
    while (e < r->nvalues && r->phase[e] == p) e++;
    double x0 = L + pw * v / n, x1 = L + pw * e / n;
    fprintf(out, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"%s\"/>\n", x0,
            T, x1 - x0, ph, fill[p]);
    if (x1 - x0 > 60)
      fprintf(out, "<text x=\"%.1f\" y=\"%.0f\" fill=\"#555\">%s</text>\n", x0 + 4, T - 6,
              label[p]);
    v = e;
  }
  /* axes and ticks */
  fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L,
          T + ph, L + pw, T + ph);
  fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T,
          L, T + ph);
  for (int i = 0; i <= 4; i++) {
    double yv = ymax * i / 4, y = T + ph - ph * i / 4;
    fprintf(out, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ccc\"/>\n", L, y,
            L + pw, y);
    fprintf(out, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", L - 6, y + 4,
            human(yv, a, sizeof a));
  }
  fprintf(out,
          "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step, in execution order (%d "
          "values)</text>\n",
          L + pw / 2, H - 20, r->nvalues);
  /* the fixed region, then fixed + live temporaries */
  double yf = T + ph - ph * (double)r->fixed / ymax;
  fprintf(out,
          "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" fill=\"#9aa0a6\" "
          "opacity=\"0.5\"/>\n",
          L, yf, pw, T + ph - yf);
  fprintf(
      out,
      "<text x=\"%.0f\" y=\"%.1f\" fill=\"#333\">parameters, optimizer state, batch: %s</text>\n",
      L + 6, fmin(yf + 14, T + ph - 4), human((double)r->fixed, a, sizeof a));
  fprintf(out, "<polyline fill=\"none\" stroke=\"#1a73e8\" stroke-width=\"1.5\" points=\"");
  int stride = r->nvalues > 4000 ? r->nvalues / 2000 : 1;
  for (int v = 0; v < r->nvalues; v += stride) {
    int64_t m = r->timeline[v]; /* the most in this stride, so no peak is lost */
    for (int k = v; k < v + stride && k < r->nvalues; k++)
      if (r->timeline[k] > m) m = r->timeline[k];
    fprintf(out, "%.1f,%.1f ", L + pw * v / n, T + ph - ph * ((double)r->fixed + (double)m) / ymax);
  }
  fprintf(out, "\"/>\n");
  double xp = L + pw * r->peak_at / n, yp = T + ph - ph * top / ymax;
  fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d93025\"/>\n", xp, yp);
  fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d93025\" text-anchor=\"%s\">peak %s</text>\n",
          xp + (xp > L + pw * 0.8 ? -8 : 8), yp - 6, xp > L + pw * 0.8 ? "end" : "start",
          human(top, a, sizeof a));
  if (show_cap) {
    double yc = T + ph - ph * dev->memory / ymax;
    fprintf(out,
            "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#d93025\" "
            "stroke-dasharray=\"6,4\"/>\n",
            L, yc, L + pw, yc);
    fprintf(out,
            "<text x=\"%.0f\" y=\"%.1f\" fill=\"#d93025\" text-anchor=\"end\">device memory "
            "%s</text>\n",
            L + pw - 4, yc - 4, human(dev->memory, b, sizeof b));
  }
  fprintf(out, "</svg>\n");
  return ferror(out) ? -1 : 0;
}

/* ---- what would fit ---- */

void drv_memfixes_print(const DrvMemFixes *f, const DrvDevice *dev, FILE *out) {
  char a1[32], a2[32];
  fprintf(out, "\nwhat would fit (each lowered and planned again):\n");
  for (int i = 0; i < f->n; i++)
    fprintf(out, "  --set '%s': peak %s, headroom %s\n", f->fix[i].set,
            fe_human_bytes((double)f->fix[i].peak, a1, sizeof a1),
            fe_human_bytes(dev->memory - (double)f->fix[i].peak, a2, sizeof a2));
  if (!f->n)
    fprintf(out, "  none of the remat presets or mesh changes tried fits; try more devices\n");
}
