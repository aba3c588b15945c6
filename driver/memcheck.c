/*
 * memcheck.c: the ahead-of-time memory report (`axlc memcheck`).
 *
 * The job is lowered through every pass to the per-device program, the
 * fusion plan of the backend that would run it is applied (the LLVM
 * backend's, where the target has no backend of its own), and memplan
 * places every buffer in the slab, exactly as a compiled trainer would. The
 * report reads that plan: the fixed region (parameters, optimizer state,
 * the batch), the live bytes after each value of the step, the values live
 * at the peak and what they are, and the step's FLOPs and bytes sent, which
 * with the device table (models/rules/devices.json) give a lower bound on the
 * step time. Nothing runs; a 70B model on 512 devices takes well under a
 * second.
 */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/driver.h"

/* ---- the device table ------------------------------------------------------------------- */

/* "gpu-h100-256" -> "gpu-h100"; "cpu-4" -> "cpu"; "cpu" -> "cpu"; "gpu-h100-8x32" -> "gpu-h100" */
static void target_kind(const char *target, char *kind, size_t cap) {
  snprintf(kind, cap, "%s", target);
  char *dash = strrchr(kind, '-');
  if (!dash) return;
  const char *p = dash + 1;
  if (!*p) return;
  for (; *p; p++)
    if (!(*p >= '0' && *p <= '9') && *p != 'x') return;
  *dash = 0;
}

static double host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

static int number_field(FeDiag *d, const char *file, const char *kind, json_object *o,
                        const char *key, double *out) {
  json_object *v;
  if (!json_object_object_get_ex(o, key, &v) ||
      (json_object_get_type(v) != json_type_double && json_object_get_type(v) != json_type_int) ||
      json_object_get_double(v) <= 0)
    return fe_error(d, file, NULL, "/%s/%s: expected a positive number", kind, key);
  *out = json_object_get_double(v);
  return 0;
}

int drv_device_lookup(FeDiag *d, const char *file, const char *target, DrvDevice *out) {
  memset(out, 0, sizeof *out);
  char kind[64];
  target_kind(target ? target : "cpu", kind, sizeof kind);
  json_object *root = fe_json_load(d, file);
  if (!root) return -1;
  int rc = 0;
  json_object *o;
  if (json_object_get_type(root) != json_type_object) {
    rc = fe_error(d, file, NULL, "expected an object of device kinds");
  } else if (!json_object_object_get_ex(root, kind, &o) ||
             json_object_get_type(o) != json_type_object) {
    char known[1024] = "";
    json_object_object_foreach(root, k, v) {
      (void)v;
      if (k[0] == '_') continue;
      size_t len = strlen(known);
      snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", k);
    }
    rc = fe_error(d, file, NULL,
                  "no device kind \"%s\" for --target %s (expected one of: %s; "
                  "a target is a kind and a device count, e.g. gpu-h100-256)",
                  kind, target ? target : "cpu", known);
  } else {
    snprintf(out->name, sizeof out->name, "%s", kind);
    json_object *v, *fl;
    if (json_object_object_get_ex(o, "doc", &v))
      snprintf(out->doc, sizeof out->doc, "%s", json_object_get_string(v));
    if (json_object_object_get_ex(o, "memory", &v) && json_object_get_type(v) == json_type_string &&
        !strcmp(json_object_get_string(v), "host")) {
      out->memory = host_memory();
      out->host = true;
    } else if (number_field(d, file, kind, o, "memory", &out->memory)) {
      rc = -1;
    }
    if (rc == 0 && (!json_object_object_get_ex(o, "flops", &fl) ||
                    number_field(d, file, kind, fl, "f32", &out->flops_f32)))
      rc = rc ? rc : fe_error(d, file, NULL, "/%s/flops: expected {\"f32\": FLOP/s, ...}", kind);
    if (rc == 0 && json_object_object_get_ex(fl, "bf16", &v))
      out->flops_bf16 = json_object_get_double(v);
    if (rc == 0 && (number_field(d, file, kind, o, "memory_bandwidth", &out->mem_bw) ||
                    number_field(d, file, kind, o, "link_bandwidth", &out->link_bw)))
      rc = -1;
  }
  json_object_put(root);
  return rc;
}

/* ---- analysis ----------------------------------------------------------------------------- */

static bool is_leaf(const IrValue *v) { return v->op == IR_PARAMETER || v->op == IR_INPUT; }

/* Bytes one device sends for collective v with a bandwidth-optimal algorithm (ring). */
static double sent_bytes(const IrGraph *g, const IrValue *v) {
  double n = (double)ir_mesh_group_size(&g->mesh, &v->attr);
  if (n <= 1) return 0;
  const IrValue *x = &g->values[v->ops[0]];
  double in = (double)ir_shape_numel(&x->shape) * (double)ir_dtype_size(x->dtype);
  switch (v->op) {
  case IR_ALL_REDUCE: return 2 * (n - 1) / n * in;
  case IR_ALL_GATHER: return (n - 1) * in;
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL: return (n - 1) / n * in;
  default: return 0; /* local_slice */
  }
}

/* FLOPs of value v: 2 per multiply-add of a product, 1 per element of the rest. */
static double value_flops(const IrGraph *g, const IrValue *v, double *matmul) {
  double out = (double)ir_shape_numel(&v->shape);
  if (v->op == IR_DOT) {
    double k = 1;
    const IrShape *l = &g->values[v->ops[0]].shape;
    for (int32_t i = 0; i < v->attr.lc.n; i++) k *= (double)l->dims[v->attr.lc.v[i]];
    *matmul += 2 * out * k;
    return 2 * out * k;
  }
  if (v->op == IR_ATTENTION || v->op == IR_ATTENTION_GRAD) {
    /* the products of a fused kernel: scores and context (2 of T x T x H), and in the gradient
     * the scores again, dP, dQ, dK and dV (5); a causal one computes only the keys up to each
     * query */
    const IrShape *q = &g->values[v->ops[0]].shape;
    double t = (double)q->dims[q->rank - 2], h = (double)q->dims[q->rank - 1];
    double keys = v->attr.k ? (t + 1) / 2 : t, n = h > 0 ? (double)ir_shape_numel(q) / h : 0;
    double f = 2 * (v->op == IR_ATTENTION ? 2 : 5) * n * keys * h;
    *matmul += f;
    return f;
  }
  if (is_leaf(v) || v->op == IR_CONSTANT || (ir_op_flags(v->op) & IR_COLLECTIVE)) return 0;
  if (v->op == IR_REDUCE_SUM || v->op == IR_REDUCE_MAX)
    return (double)ir_shape_numel(&g->values[v->ops[0]].shape);
  return (ir_op_flags(v->op) & IR_ELEMENTWISE) ? out : 0;
}

/* phase[v]: 0 forward (the loss depends on it), 1 backward (a gradient does), 2 update. */
static void phases(const IrGraph *g, uint8_t *phase) {
  int32_t n = g->nvalues;
  for (int32_t v = 0; v < n; v++) phase[v] = 2;
  uint8_t *mark = calloc((size_t)n + 1, 1);
  for (int pass = 0; pass < 2; pass++) {
    memset(mark, 0, (size_t)n + 1);
    for (int32_t k = 0; k < g->noutputs; k++) {
      const char *name = g->outputs[k].name;
      if (pass == 0 ? !strcmp(name, "loss") : !strncmp(name, "grad:", 5))
        mark[g->outputs[k].value] = 1;
    }
    for (int32_t v = n - 1; v >= 0; v--)
      if (mark[v])
        for (int32_t k = 0; k < g->values[v].nops; k++) mark[g->values[v].ops[k]] = 1;
    for (int32_t v = 0; v < n; v++)
      if (mark[v] && phase[v] == 2) phase[v] = (uint8_t)pass;
  }
  free(mark);
}

static bool is_grad(const IrGraph *g, int32_t v, const bool *grad_out) {
  (void)g;
  return grad_out[v];
}

static int by_bytes_desc(const void *a, const void *b) {
  const DrvMemItem *x = a, *y = b;
  return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : x->value - y->value;
}

int drv_memcheck(DrvJob *j, DrvMemReport *r) {
  memset(r, 0, sizeof *r);
  IrGraph *g = j->graph;
  int32_t n = g->nvalues;
  bool *mat = malloc(((size_t)n + 1) * sizeof *mat);
  bool *grad_out = calloc((size_t)n + 1, sizeof *grad_out);
  r->phase = malloc((size_t)n + 1);
  r->timeline = calloc((size_t)n + 1, sizeof *r->timeline);
  if (!mat || !grad_out || !r->phase || !r->timeline) {
    free(mat);
    free(grad_out);
    return fe_error(&j->diag, j->file, NULL, "out of memory");
  }
  /* the fusion plan of the backend that would compile it; without one, nothing fused. The graph
   * keeps its fused attention ops even where that backend lacks them (drv_backend_job expands
   * them later): the report is for accelerators with a fused attention kernel, which never
   * store the (T, T) scores */
  const Backend *b = drv_plan_backend(j->target);
  r->fusion = b ? b->name : "none";
  if (b)
    b->plan(g, mat);
  else
    for (int32_t v = 0; v < n; v++) mat[v] = true;
  MemPlan p;
  if (pass_memplan_fused(g, mat, &p) != IR_OK) {
    free(mat);
    free(grad_out);
    return fe_error(&j->diag, j->file, NULL, "memory planning failed: %s", ir_graph_error(g));
  }
  r->nvalues = n;
  phases(g, r->phase);
  for (int32_t k = 0; k < g->noutputs; k++)
    if (!strncmp(g->outputs[k].name, "grad:", 5)) grad_out[g->outputs[k].value] = true;
  r->params = p.param_bytes;
  r->opt_state = p.opt_bytes;
  r->inputs = p.input_bytes;
  r->fixed = p.fixed_bytes;
  r->slab = p.slab_bytes;
  /* live temporaries after each value: +bytes at its definition, -bytes after its last read */
  int64_t *delta = calloc((size_t)n + 2, sizeof *delta);
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    if (is_leaf(x) || !p.bytes[v] || p.offset[v] < p.fixed_bytes)
      continue; /* fixed, fused, in place */
    int64_t bytes = (p.bytes[v] + 63) / 64 * 64;
    delta[v] += bytes;
    delta[(p.last[v] > v ? p.last[v] : v) + 1] -= bytes;
  }
  int64_t live = 0;
  for (int32_t v = 0; v < n; v++) {
    live += delta[v];
    r->timeline[v] = live;
    if (live > r->timeline[r->peak_at]) r->peak_at = v;
  }
  free(delta);
  r->temp_peak = n ? r->timeline[r->peak_at] : 0;
  /* what is live at the peak */
  r->items = calloc((size_t)n + 1, sizeof *r->items);
  for (int32_t v = 0; v < n && r->items; v++) {
    const IrValue *x = &g->values[v];
    if (is_leaf(x) || !p.bytes[v] || p.offset[v] < p.fixed_bytes) continue;
    if (v > r->peak_at || (p.last[v] > v ? p.last[v] : v) < r->peak_at) continue;
    DrvMemItem *it = &r->items[r->nitems++];
    it->value = v;
    it->bytes = (p.bytes[v] + 63) / 64 * 64;
    if (ir_op_flags(x->op) & IR_COLLECTIVE)
      it->kind = DRV_MEM_COMM, r->comm += it->bytes;
    else if (is_grad(g, v, grad_out))
      it->kind = DRV_MEM_GRAD, r->grads += it->bytes;
    else if (r->phase[v] == 0)
      it->kind = DRV_MEM_SAVED, r->saved += it->bytes;
    else
      it->kind = DRV_MEM_TEMP, r->temps += it->bytes;
  }
  if (r->items) qsort(r->items, (size_t)r->nitems, sizeof *r->items, by_bytes_desc);
  /* cost of the step */
  int kernels = 0;
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    r->flops += value_flops(g, x, &r->matmul_flops);
    if (ir_op_flags(x->op) & IR_COLLECTIVE) {
      r->comm_bytes += sent_bytes(g, x);
      r->collectives++;
    }
    if (!is_leaf(x) && mat[v] && x->op != IR_CONSTANT) kernels++;
  }
  /* Generated code: about 2 KiB per kernel (a tiny-lm trainer's text section over its
   * kernels, measured); an estimate, not part of the slab. */
  r->code = (int64_t)kernels * 2048;
  r->peak = r->slab; /* what the trainer allocates: the live bytes plus the plan's gaps */
  free(mat);
  free(grad_out);
  pass_memplan_free(&p);
  return 0;
}

void drv_memreport_free(DrvMemReport *r) {
  free(r->timeline);
  free(r->phase);
  free(r->items);
  memset(r, 0, sizeof *r);
}

/* ---- printing ----------------------------------------------------------------------------- */

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

static double step_flops_rate(const DrvJob *j, const DrvDevice *dev) {
  (void)j; /* every step computes in f32 today */
  return dev->flops_f32;
}

void drv_memreport_print(const DrvJob *j, const DrvDevice *dev, const DrvMemReport *r, int top,
                         FILE *out) {
  char a[32], b[32], c[32];
  const IrGraph *g = j->graph;
  fprintf(out, "memcheck: %s on %s (%lld device%s: %s, %s of memory each)\n", j->file,
          j->target ? j->target : "cpu", (long long)j->build.mesh.devices,
          j->build.mesh.devices == 1 ? "" : "s", dev->doc[0] ? dev->doc : dev->name,
          human(dev->memory, a, sizeof a));
  fprintf(out, "mesh:");
  for (int i = 0; i < j->build.mesh.n; i++)
    if (j->build.mesh.shape[i] > 1)
      fprintf(out, " %s=%lld", j->build.mesh.axes[i], (long long)j->build.mesh.shape[i]);
  if (j->build.mesh.devices <= 1) fprintf(out, " one device");
  fprintf(out, "; fusion plan: %s\n\nper device:\n", r->fusion);
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
  fprintf(out, "  peak                %12s  (the slab a trainer allocates; %s live at once)\n",
          human((double)r->peak, a, sizeof a),
          human((double)(r->fixed + r->temp_peak), b, sizeof b));
  fprintf(out, "  generated code      %12s  (estimate, outside the slab)\n",
          human((double)r->code, a, sizeof a));
  double total = (double)r->peak + (double)r->code;
  if (total <= dev->memory)
    fprintf(out, "verdict: fits, with %s headroom of %s\n", human(dev->memory - total, a, sizeof a),
            human(dev->memory, b, sizeof b));
  else
    fprintf(out, "verdict: does not fit: over by %s (needs %s of %s)\n",
            human(total - dev->memory, a, sizeof a), human(total, b, sizeof b),
            human(dev->memory, c, sizeof c));
  if (top > 0 && r->nitems) {
    fprintf(out, "\nlargest values live at the peak:\n");
    for (int i = 0; i < r->nitems && i < top; i++) {
      const IrValue *x = &g->values[r->items[i].value];
      char shape[128] = "";
      size_t len = 0;
      for (int32_t d = 0; d < x->shape.rank; d++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? "," : "",
                                (long long)x->shape.dims[d]);
      fprintf(out, "  %10s  %-16s  %s[%s] %s  %s%s%s\n",
              human((double)r->items[i].bytes, a, sizeof a), kind_name(r->items[i].kind),
              ir_dtype_name(x->dtype), shape, ir_op_name(x->op), *x->origin ? x->origin : "?",
              *x->tag ? "  #" : "", x->tag);
    }
  }
  double rate = step_flops_rate(j, dev);
  double tc = r->flops / rate, tm = r->comm_bytes / dev->link_bw;
  fprintf(out,
          "\nstep, per device: %.4g FLOPs (%.1f%% in matrix products), %s sent in %d collectives\n",
          r->flops, r->flops > 0 ? 100 * r->matmul_flops / r->flops : 0.0,
          human(r->comm_bytes, a, sizeof a), r->collectives);
  fprintf(out,
          "lower bound on the step time: %s (compute %s at %.3g FLOP/s f32; communication %s "
          "at %.3g B/s)\n",
          seconds(fmax(tc, tm), a, sizeof a), seconds(tc, b, sizeof b), rate,
          seconds(tm, c, sizeof c), dev->link_bw);
}

char *drv_memreport_json(const DrvJob *j, const DrvDevice *dev, const DrvMemReport *r, int top) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "model", json_object_new_string(j->file));
  json_object_object_add(o, "target", json_object_new_string(j->target ? j->target : "cpu"));
  json_object_object_add(o, "device_kind", json_object_new_string(dev->name));
  json_object_object_add(o, "devices", json_object_new_int64(j->build.mesh.devices));
  json_object *mesh = json_object_new_object();
  for (int i = 0; i < j->build.mesh.n; i++)
    json_object_object_add(mesh, j->build.mesh.axes[i],
                           json_object_new_int64(j->build.mesh.shape[i]));
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
  json_object_object_add(o, "breakdown_in_bytes", parts);
  double total = (double)r->peak + (double)r->code;
  json_object_object_add(o, "fits", json_object_new_boolean(total <= dev->memory));
  json_object_object_add(o, "headroom_in_bytes",
                         json_object_new_int64((int64_t)(dev->memory - total)));
  json_object_object_add(o, "flops", json_object_new_double(r->flops));
  json_object_object_add(o, "matmul_flops", json_object_new_double(r->matmul_flops));
  json_object_object_add(o, "bytes_sent", json_object_new_double(r->comm_bytes));
  double tc = r->flops / step_flops_rate(j, dev), tm = r->comm_bytes / dev->link_bw;
  json_object_object_add(o, "step_time_lower_bound_s", json_object_new_double(fmax(tc, tm)));
  json_object *live = json_object_new_array();
  for (int i = 0; i < r->nitems && i < top; i++) {
    const IrValue *x = &j->graph->values[r->items[i].value];
    json_object *e = json_object_new_object();
    json_object_object_add(e, "bytes", json_object_new_int64(r->items[i].bytes));
    json_object_object_add(e, "kind", json_object_new_string(kind_name(r->items[i].kind)));
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

int drv_memreport_svg(const DrvJob *j, const DrvDevice *dev, const DrvMemReport *r, FILE *out) {
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
  fprintf(out,
          "<text x=\"%.0f\" y=\"22\" font-size=\"15\">Live memory per device: %s on %s "
          "(peak %s)</text>\n",
          L, j->file, j->target ? j->target : "cpu", human(top, a, sizeof a));
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
