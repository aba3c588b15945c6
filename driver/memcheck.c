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
 * second. Where the job does not fit, drv_memcheck_fixes tries what would.
 *
 * This file analyses: its results are structs (DrvMemReport, DrvMemFixes) that
 * memreport.c renders as text, JSON and SVG.
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
    if (json_object_object_get_ex(o, "backend", &v))
      snprintf(out->backend, sizeof out->backend, "%s", json_object_get_string(v));
    if (json_object_object_get_ex(o, "max_alloc", &v)) out->max_alloc = json_object_get_double(v);
    if (json_object_object_get_ex(o, "opencl_device", &v))
      snprintf(out->opencl_device, sizeof out->opencl_device, "%s", json_object_get_string(v));
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
  case IR_SEND: return in; /* to one stage; a recv sends nothing */
  default: return 0;       /* local_slice, recv */
  }
}

/* FLOPs of value v: 2 per multiply-add of a product, 1 per element of the rest. The products
 * also count into *matmul, and into *bf16 when their operands are bf16. */
/* Whether attention v's query positions are in the balanced order of the seq axis (a
 * local_slice of an iota whose chunks a concat reordered: passes/shard.c, zig_order). Device c
 * then holds chunks c and 2S - 1 - c, whose queries see (Tk + 1) / 2 keys on average, the
 * same on every device. */
static bool balanced_positions(const IrGraph *g, const IrValue *v) {
  int32_t p = ir_attention_positions(v);
  return p != IR_NONE && g->values[p].op == IR_LOCAL_SLICE &&
         g->values[g->values[p].ops[0]].op == IR_CONCAT;
}

static double value_flops(const IrGraph *g, const IrValue *v, double *matmul, double *bf16) {
  bool low = v->nops > 0 && g->values[v->ops[0]].dtype == DT_BF16;
  double out = (double)ir_shape_numel(&v->shape);
  if (v->op == IR_DOT) {
    double k = 1;
    const IrShape *l = &g->values[v->ops[0]].shape;
    for (int32_t i = 0; i < v->attr.lc.n; i++) k *= (double)l->dims[v->attr.lc.v[i]];
    *matmul += 2 * out * k;
    if (low) *bf16 += 2 * out * k;
    return 2 * out * k;
  }
  if (v->op == IR_ATTENTION || v->op == IR_ATTENTION_GRAD) {
    /* the products of a fused kernel: scores and context (2 of Tq x Tk x H), and in the
     * gradient the scores again, dP, dQ, dK and dV (5); a causal one computes only the keys up
     * to each query: (T + 1) / 2 a query on average, and for a chunk of Tq queries of a split
     * sequence (query positions) in the contiguous order those of the last chunk, the slowest
     * device's, which sees Tk - Tq keys more; in the balanced order (Tk + 1) / 2 */
    const IrShape *q = &g->values[v->ops[0]].shape, *k = &g->values[v->ops[1]].shape;
    double tq = (double)q->dims[q->rank - 2], tk = (double)k->dims[k->rank - 2];
    double h = (double)q->dims[q->rank - 1];
    double keys = !v->attr.k                 ? tk
                  : balanced_positions(g, v) ? (tk + 1) / 2
                                             : tk - tq + (tq + 1) / 2;
    double n = h > 0 ? (double)ir_shape_numel(q) / h : 0;
    double f = 2 * (v->op == IR_ATTENTION ? 2 : 5) * n * keys * h;
    *matmul += f;
    if (low) *bf16 += f;
    return f;
  }
  if (is_leaf(v) || v->op == IR_CONSTANT || (ir_op_flags(v->op) & IR_COLLECTIVE)) return 0;
  if (v->op == IR_REDUCE_SUM || v->op == IR_REDUCE_MAX)
    return (double)ir_shape_numel(&g->values[v->ops[0]].shape);
  return (ir_op_flags(v->op) & IR_ELEMENTWISE) ? out : 0;
}

double drv_step_flops(const IrGraph *g, double *bf16) {
  double flops = 0, matmul = 0;
  *bf16 = 0;
  for (int32_t v = 0; v < g->nvalues; v++) flops += value_flops(g, &g->values[v], &matmul, bf16);
  return flops;
}

/* phase[v]: 0 forward (the loss depends on it), 1 backward (a gradient does), 2 update. */
static void phases(const IrGraph *g, uint8_t *phase) {
  int32_t n = g->nvalues;
  for (int32_t v = 0; v < n; v++) phase[v] = 2;
  uint8_t *mark = base_xcalloc((size_t)n + 1, 1);
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

/* Under microbatches the gradients are also each microbatch's and their running sums: the
 * values tagged PASS_MICROBATCH_TAG after the forward (the loss's sums are in it) and what
 * they add. mb[v]: v is one of these (a reduce-scattered microbatch gradient, which is the
 * running sum until the next microbatch adds to it, is a gradient, not a buffer in flight). */
static void mark_microbatch_grads(const IrGraph *g, const uint8_t *phase, bool *grad_out,
                                  bool *mb) {
  for (int32_t v = 0; v < g->nvalues; v++) {
    const IrValue *x = &g->values[v];
    if (phase[v] == 0 || strcmp(x->tag, PASS_MICROBATCH_TAG) != 0) continue;
    grad_out[v] = mb[v] = true;
    for (int32_t k = 0; k < x->nops; k++)
      if (phase[x->ops[k]] != 0) grad_out[x->ops[k]] = mb[x->ops[k]] = true;
  }
}

static int by_bytes_desc(const void *a, const void *b) {
  const DrvMemItem *x = a, *y = b;
  return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : x->value - y->value;
}

/* Describes each item by its value of g, for renderers that see no graph. */
static void describe_items(const IrGraph *g, DrvMemReport *r) {
  for (int32_t i = 0; i < r->nitems; i++) {
    DrvMemItem *it = &r->items[i];
    const IrValue *x = &g->values[it->value];
    it->op = x->op;
    it->dtype = x->dtype;
    it->shape = x->shape;
    it->origin = fe_asprintf("%s", x->origin ? x->origin : "");
    it->tag = fe_asprintf("%s", x->tag ? x->tag : "");
  }
}

int drv_memcheck(DrvJob *j, DrvMemReport *r) { return drv_memcheck_on(j, NULL, r); }

/* The backend whose fusion plan applies: the one the device table names for the kind (gpu-*:
 * opencl), else the one whose target names match, else the LLVM backend's. */
static const Backend *plan_backend(const DrvJob *j, const DrvDevice *dev) {
  const Backend *b = dev && dev->backend[0] ? backend_find(dev->backend) : NULL;
  return b && b->plan ? b : drv_plan_backend(j->target);
}

/* Plans g (the per-device program, or one pipeline stage's part of it) into r: the fusion plan
 * of b, the slab, what is live at the peak, the step's cost. phase: each value's phase (NULL:
 * from g's outputs); standin: values that stand for another stage's (a recv's operand), which
 * get no buffer. */
static int memcheck_graph(DrvJob *j, IrGraph *g, const Backend *b, const DrvDevice *dev,
                          const uint8_t *phase, const bool *standin, DrvMemReport *r) {
  int32_t n = g->nvalues;
  bool *mat = base_xmalloc(((size_t)n + 1) * sizeof *mat);
  bool *grad_out = base_xcalloc((size_t)n + 1, sizeof *grad_out);
  bool *mb_grad = base_xcalloc((size_t)n + 1, sizeof *mb_grad);
  r->phase = base_xmalloc((size_t)n + 1);
  r->timeline = base_xcalloc((size_t)n + 1, sizeof *r->timeline);
  /* the fusion plan of the backend that would compile it; without one, nothing fused. The graph
   * keeps its fused attention ops even where that backend lacks them (drv_backend_job expands
   * them later): the report is for accelerators with a fused attention kernel, which never
   * store the (T, T) scores */
  r->fusion = b ? b->name : "none";
  if (b)
    b->plan(g, mat);
  else
    for (int32_t v = 0; v < n; v++) mat[v] = true;
  for (int32_t v = 0; standin && v < n; v++)
    if (standin[v]) mat[v] = false;
  /* the OpenCL backend plans a GPU kind's slab in pieces of max_alloc, as compile does */
  int64_t split =
      b && !strcmp(b->name, "opencl") && dev && dev->max_alloc > 0 ? (int64_t)dev->max_alloc : 0;
  MemPlan p;
  if (pass_memplan_split(g, mat, split, &p) != IR_OK) {
    free(mat);
    free(grad_out);
    free(mb_grad);
    return fe_error(&j->diag, j->file, NULL, "memory planning failed: %s", ir_graph_error(g));
  }
  r->nvalues = n;
  if (phase)
    memcpy(r->phase, phase, (size_t)n);
  else
    phases(g, r->phase);
  for (int32_t k = 0; k < g->noutputs; k++)
    if (!strncmp(g->outputs[k].name, "grad:", 5)) grad_out[g->outputs[k].value] = true;
  mark_microbatch_grads(g, r->phase, grad_out, mb_grad);
  r->params = p.param_bytes;
  r->opt_state = p.opt_bytes;
  r->inputs = p.input_bytes;
  r->fixed = p.fixed_bytes;
  r->slab = p.slab_bytes;
  /* the kernels' own scratch past the plan (OpenCL's two-stage reductions), as compile adds it */
  int64_t scratch = b && b->scratch ? b->scratch(g, mat) : 0;
  if (scratch > 0) r->slab = (p.slab_bytes + 63) / 64 * 64 + scratch;
  for (int32_t v = 0; v < n; v++)
    if (p.bytes[v] > r->largest) r->largest = p.bytes[v];
  /* live temporaries after each value: +bytes at its definition, -bytes after its last read */
  int64_t *delta = base_xcalloc((size_t)n + 2, sizeof *delta);
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
  r->items = base_xcalloc((size_t)n + 1, sizeof *r->items);
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    if (is_leaf(x) || !p.bytes[v] || p.offset[v] < p.fixed_bytes) continue;
    if (v > r->peak_at || (p.last[v] > v ? p.last[v] : v) < r->peak_at) continue;
    DrvMemItem *it = &r->items[r->nitems++];
    it->value = v;
    it->bytes = (p.bytes[v] + 63) / 64 * 64;
    int32_t last = p.last[v] > v ? p.last[v] : v;
    /* a forward collective's result that the backward reads (a reduced projection that remat
     * saves) is a saved activation, not a buffer in flight */
    bool kept = r->phase[v] == 0 && last < n && r->phase[last] != 0;
    if ((ir_op_flags(x->op) & IR_COLLECTIVE) && !kept && !mb_grad[v])
      it->kind = DRV_MEM_COMM, r->comm += it->bytes;
    else if (is_grad(g, v, grad_out))
      it->kind = DRV_MEM_GRAD, r->grads += it->bytes;
    else if (r->phase[v] == 0)
      it->kind = DRV_MEM_SAVED, r->saved += it->bytes;
    else
      it->kind = DRV_MEM_TEMP, r->temps += it->bytes;
  }
  if (r->items) qsort(r->items, (size_t)r->nitems, sizeof *r->items, by_bytes_desc);
  if (r->items) describe_items(g, r);
  /* cost of the step */
  int kernels = 0;
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    r->flops += value_flops(g, x, &r->matmul_flops, &r->bf16_flops);
    if (ir_op_flags(x->op) & IR_COLLECTIVE) {
      r->comm_bytes += sent_bytes(g, x);
      r->collectives++;
    }
    if (!is_leaf(x) && mat[v] && x->op != IR_CONSTANT) kernels++;
  }
  /* Generated code: about 2 KiB per kernel (a tiny-lm trainer's text section over its
   * kernels, measured); an estimate, not part of the slab. */
  r->code = (int64_t)kernels * 2048;
  /* what the trainer allocates: the live bytes plus the plan's gaps, then the heap under MPI */
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    if (!(ir_op_flags(x->op) & IR_COLLECTIVE)) continue;
    const IrValue *in = &g->values[x->ops[0]];
    int32_t kind = x->op == IR_ALL_REDUCE       ? RT_COLL_ALL_REDUCE
                   : x->op == IR_ALL_GATHER     ? RT_COLL_ALL_GATHER
                   : x->op == IR_REDUCE_SCATTER ? RT_COLL_REDUCE_SCATTER
                   : x->op == IR_ALL_TO_ALL     ? RT_COLL_ALL_TO_ALL
                                                : RT_COLL_LOCAL_SLICE;
    int64_t b =
        rt_coll_scratch_bytes(kind, ir_shape_numel(&in->shape), (int)ir_dtype_size(in->dtype),
                              ir_mesh_group_size(&g->mesh, &x->attr));
    if (b > r->comm_scratch) r->comm_scratch = b;
  }
  r->mpi_heap = ir_mesh_devices(&g->mesh) > 1 ? RT_MPI_HEAP_BYTES : 0;
  r->peak = r->slab + r->comm_scratch + r->mpi_heap;
  free(mat);
  free(grad_out);
  free(mb_grad);
  pass_memplan_free(&p);
  return 0;
}

/* The part of pipeline program g that a device of stage s runs: the values of that stage and
 * the every-device values (stage 0) that they read, directly or through others (an
 * every-device value no stage reads, on every stage), in g's order, which the pipeline pass
 * made the schedule's. A leaf is there when one of those reads it: a layer's parameters and
 * optimizer state are on its stage alone. An operand from another stage (a recv's send) is a
 * stand-in constant (standin[v]) that gets no buffer. orig[v]: v's value in g. */
static IrGraph *stage_graph(const IrGraph *g, int32_t s, bool **standin, int32_t **orig) {
  int32_t n = g->nvalues;
  uint8_t *keep = base_xcalloc((size_t)n + 1, 1), *any = base_xcalloc((size_t)n + 1, 1);
  for (int32_t v = n - 1; v >= 0; v--) {
    const IrValue *x = &g->values[v];
    if (x->stage == s + 1) keep[v] = 1;
    if (x->stage > 0) any[v] = 1;
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k];
      if (g->values[o].stage != 0) continue;
      if (keep[v]) keep[o] = 1;
      if (any[v]) any[o] = 1;
    }
  }
  int32_t *map = base_xmalloc(((size_t)n + 1) * sizeof *map);
  IrGraph *sub = ir_graph_new();
  ir_graph_reserve(sub, n / 2 + 16);
  sub->mesh = g->mesh;
  sub->matmul = g->matmul;
  size_t cap = (size_t)n + 1; /* the values, and at most a stand-in per operand */
  for (int32_t v = 0; v < n; v++) cap += (size_t)g->values[v].nops;
  *standin = base_xcalloc(cap, sizeof **standin);
  *orig = base_xmalloc(cap * sizeof **orig);
  for (int32_t v = 0; v < n; v++) {
    const IrValue *x = &g->values[v];
    map[v] = IR_NONE;
    if (!keep[v] && !(x->stage == 0 && !any[v])) continue;
    for (int32_t k = 0; k < x->nops; k++) {
      int32_t o = x->ops[k];
      if (map[o] != IR_NONE) continue;
      const IrValue *y = &g->values[o];
      map[o] = ir_const_scalar(sub, y->dtype, 0, y->shape.rank, y->shape.dims);
      if (map[o] == IR_NONE) break;
      (*standin)[map[o]] = true;
      (*orig)[map[o]] = o;
    }
    int32_t h = ir_graph_add_mapped(sub, g, v, map);
    for (int32_t k = 0; k < x->nops; k++) /* a stand-in serves its reader only */
      if (map[x->ops[k]] != IR_NONE && (*standin)[map[x->ops[k]]]) map[x->ops[k]] = IR_NONE;
    if (h == IR_NONE) break;
    (*orig)[h] = v;
    map[v] = h;
  }
  for (int32_t o = 0; o < g->noutputs && !ir_graph_error(sub); o++)
    if (map[g->outputs[o].value] != IR_NONE)
      ir_graph_add_output(sub, g->outputs[o].name, map[g->outputs[o].value]);
  free(keep);
  free(any);
  free(map);
  return sub;
}

/* The schedule's microbatches with saved activations at once on stage s of P (0: no rule in
 * whole microbatches: the interleaved schedule keeps chunks of them, pass_pipeline_live). */
static int64_t schedule_live(const char *schedule, int32_t P, int32_t s, int64_t M) {
  if (!strcmp(schedule, "gpipe")) return M;
  if (!strcmp(schedule, "1f1b")) return P - s < M ? P - s : M;
  return 0;
}

int drv_memcheck_on(DrvJob *j, const DrvDevice *dev, DrvMemReport *r) {
  memset(r, 0, sizeof *r);
  r->file = fe_asprintf("%s", j->file);
  r->target = fe_asprintf("%s", j->target ? j->target : "cpu");
  r->mesh = j->build.mesh;
  IrGraph *g = j->graph;
  const Backend *b = plan_backend(j, dev);
  int a = ir_mesh_axis(&g->mesh, IR_PIPELINE_AXIS);
  int32_t P = a >= 0 ? (int32_t)g->mesh.sizes[a] : 1;
  if (P < 2) return memcheck_graph(j, g, b, dev, NULL, NULL, r);
  /* a pipeline: each stage's plan, the worst one reported */
  uint8_t *phase = base_xmalloc((size_t)g->nvalues + 1);
  phases(g, phase);
  json_object *mesh = fe_get_child(j->cfg, "mesh");
  const char *schedule = mesh ? fe_get_str(mesh, "pipeline_schedule") : NULL;
  DrvMemStage *rows = base_xcalloc((size_t)P, sizeof *rows);
  DrvMemReport worst = {0};
  int rc = 0;
  for (int32_t s = 0; s < P && rc == 0; s++) {
    bool *standin = NULL;
    int32_t *orig = NULL;
    IrGraph *sub = stage_graph(g, s, &standin, &orig);
    if (ir_graph_error(sub)) {
      rc = fe_error(&j->diag, j->file, NULL, "memory planning of pipeline stage %d failed: %s", s,
                    ir_graph_error(sub));
    } else {
      uint8_t *sub_phase = base_xmalloc((size_t)sub->nvalues + 1);
      for (int32_t v = 0; v < sub->nvalues; v++) sub_phase[v] = phase[orig[v]];
      DrvMemReport t = {0};
      t.file = r->file;
      t.target = r->target;
      t.mesh = r->mesh;
      rc = memcheck_graph(j, sub, b, dev, sub_phase, standin, &t);
      free(sub_phase);
      t.file = t.target = NULL;
      if (rc) drv_memreport_free(&t);
      if (rc == 0) {
        DrvMemStage *row = &rows[s];
        row->peak = t.peak, row->code = t.code, row->params = t.params;
        row->opt_state = t.opt_state, row->saved = t.saved;
        row->flops = t.flops, row->bf16_flops = t.bf16_flops, row->comm_bytes = t.comm_bytes;
        row->live_micro = schedule_live(schedule ? schedule : "", P, s, j->facts.microbatches);
        uint64_t seen[8] = {0}; /* the microbatches of the saved activations at the peak */
        for (int32_t i = 0; i < t.nitems; i++) {
          /* a forward tensor of a microbatch: not a leaf's value (no phase), not its loss (a
           * scalar the step sums at the end); a received one (a stage's input, each chunk's
           * under the interleaved schedule) by the stamps of what was sent */
          const IrValue *x = &g->values[orig[t.items[i].value]];
          if (x->op == IR_RECV && g->values[x->ops[0]].op == IR_SEND)
            x = &g->values[g->values[x->ops[0]].ops[0]];
          int m = x->micro;
          if (t.items[i].kind != DRV_MEM_SAVED || x->phase != IR_PHASE_FORWARD ||
              x->shape.rank == 0 || m < 0 || m >= 512)
            continue;
          if (!(seen[m / 64] >> (m % 64) & 1)) row->peak_micro++;
          seen[m / 64] |= (uint64_t)1 << (m % 64);
        }
        if (s == 0 || t.peak + t.code > worst.peak + worst.code) {
          drv_memreport_free(&worst);
          worst = t;
          worst.worst = s;
        } else {
          drv_memreport_free(&t);
        }
      }
    }
    free(standin);
    free(orig);
    ir_graph_free(sub);
  }
  free(phase);
  if (rc) {
    drv_memreport_free(&worst);
    free(rows);
    return rc;
  }
  char *file = r->file, *target = r->target;
  *r = worst;
  r->file = file, r->target = target, r->mesh = j->build.mesh;
  r->stages = P;
  r->microbatches = j->facts.microbatches;
  snprintf(r->schedule, sizeof r->schedule, "%s", schedule ? schedule : "gpipe");
  r->per_stage = rows;
  PassPipeline pp = {.stages = P, .microbatches = j->facts.microbatches};
  pp.schedule = pass_schedule_parse(r->schedule);
  pp.virtual_stages = pp.schedule == PASS_SCHEDULE_INTERLEAVED && mesh
                          ? (int32_t)fe_get_int(mesh, "pipeline_virtual")
                          : 1;
  r->sched_units = 2 * (int64_t)pass_pipeline_virtual(&pp) *
                   (j->facts.microbatches > 0 ? j->facts.microbatches : 1);
  r->sched_steps = pass_pipeline_run(&pp, NULL);
  if (r->sched_steps < r->sched_units) r->sched_steps = r->sched_units; /* cannot deadlock here */
  return 0;
}

void drv_memreport_free(DrvMemReport *r) {
  for (int32_t i = 0; r->items && i < r->nitems; i++) {
    free(r->items[i].origin);
    free(r->items[i].tag);
  }
  free(r->file);
  free(r->target);
  free(r->timeline);
  free(r->phase);
  free(r->items);
  free(r->per_stage);
  memset(r, 0, sizeof *r);
}

bool drv_memreport_fits(const DrvMemReport *r, const DrvDevice *dev) {
  /* a GPU kind's slab lies in buffers of at most max_alloc, which no tensor may cross */
  return (double)(r->peak + r->code) <= dev->memory &&
         (dev->max_alloc <= 0 || (double)r->largest <= dev->max_alloc);
}

/* ---- what would fit ------------------------------------------------------------------------ */

/* Lowers `file` with opt and one more --set option and returns its peak plus code, or -1; -2
 * when a tensor is still larger than the device's largest buffer. */
static int64_t peak_with(const char *file, const FeOptions *opt, const DrvDevice *dev,
                         const char *extra) {
  FeOptions o = *opt;
  const char **sets = base_xmalloc(((size_t)opt->nsets + 1) * sizeof *sets);
  for (int i = 0; i < opt->nsets; i++) sets[i] = opt->sets[i];
  sets[opt->nsets] = extra;
  o.sets = sets;
  o.nsets = opt->nsets + 1;
  DrvJob j;
  int64_t peak = -1;
  DrvMemReport r;
  if (drv_load(&j, file, &o) == 0 && drv_lower(&j, NULL) == 0 &&
      drv_memcheck_on(&j, dev, &r) == 0) {
    peak = dev->max_alloc > 0 && (double)r.largest > dev->max_alloc ? -2 : r.peak + r.code;
    drv_memreport_free(&r);
  }
  drv_free(&j);
  free(sets);
  return peak;
}

/* Keeps `set` in out when the job fits dev with it. */
static void try_fix(const char *file, const FeOptions *opt, const DrvDevice *dev, const char *set,
                    DrvMemFixes *out) {
  int64_t peak = peak_with(file, opt, dev, set);
  if (peak < 0 || peak > dev->memory || out->n >= (int)(sizeof out->fix / sizeof out->fix[0]))
    return;
  snprintf(out->fix[out->n].set, sizeof out->fix[out->n].set, "%s", set);
  out->fix[out->n++].peak = peak;
}

void drv_memcheck_fixes(const char *file, const FeOptions *opt, const DrvJob *j,
                        const DrvDevice *dev, DrvMemFixes *out) {
  static const char *const presets[] = {"save_qkvo", "save_dots", "full"};
  char set[128];
  memset(out, 0, sizeof *out);
  FePrecision policy;
  fe_precision_facts(j->cfg, &policy);
  if (policy.compute == DT_F32) /* bf16 activations: half the saved bytes */
    try_fix(file, opt, dev, "/precision/compute=\"bf16\"", out);
  /* sequence parallelism on a model axis: no extra work, the layout of the activations outside
   * attention and feed-forward split over the sequence (docs/sharding.md) */
  const FeMesh *m = &j->build.mesh;
  if (fe_role_split(m, FE_AXIS_TENSOR) > 1 &&
      !fe_get_bool(fe_get_child(j->cfg, "mesh"), "sequence_parallel"))
    try_fix(file, opt, dev, "/mesh/sequence_parallel=true", out);
  for (int i = 0; i < 3; i++) {
    snprintf(set, sizeof set, "/model/decoder/remat_policy=\"%s\"", presets[i]);
    try_fix(file, opt, dev, set, out);
  }
  /* microbatches: the smallest count above the job's that divides each device's part of the
   * batch and fits (the saved activations fall by the count) */
  int64_t per_device = j->facts.global_batch / fe_batch_split(&j->build.mesh);
  for (int64_t n = j->facts.microbatches + 1, tried = 0; n <= per_device && tried < 6; n++) {
    if (per_device % n) continue;
    int before = out->n;
    snprintf(set, sizeof set, "/learner/microbatches=%lld", (long long)n);
    try_fix(file, opt, dev, set, out);
    if (out->n > before) break;
    tried++;
  }
  /* mesh changes: every batch device on the one that shards the parameters (fsdp); twice the
   * tensor axis (model), taken from the plain batch axis (data) or that one */
  int di = fe_mesh_axis(m, FE_AXIS_BATCH, FE_AXIS_PARAMS | FE_AXIS_EXPERTS),
      fi = fe_mesh_axis(m, FE_AXIS_BATCH | FE_AXIS_PARAMS, FE_AXIS_EXPERTS),
      mi = fe_mesh_axis(m, FE_AXIS_TENSOR, 0);
  for (int c = 0; c < 3 && di >= 0 && fi >= 0 && mi >= 0; c++) {
    int64_t shape[FE_MAX_MESH];
    memcpy(shape, m->shape, sizeof shape);
    if (c == 0 && shape[di] > 1)
      shape[fi] *= shape[di], shape[di] = 1;
    else if (c == 1 && shape[fi] % 2 == 0)
      shape[fi] /= 2, shape[mi] *= 2;
    else if (c == 2 && shape[di] % 2 == 0)
      shape[di] /= 2, shape[mi] *= 2;
    else
      continue;
    size_t len = (size_t)snprintf(set, sizeof set, "/mesh/shape=[");
    for (int i = 0; i < m->n; i++)
      len += (size_t)snprintf(set + len, sizeof set - len, "%s%lld", i ? "," : "",
                              (long long)shape[i]);
    snprintf(set + len, sizeof set - len, "]");
    try_fix(file, opt, dev, set, out);
  }
}
