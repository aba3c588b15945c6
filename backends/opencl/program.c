/* program.c: the RtOclProgram of a step graph (runtime/axrt.h), in memory or as C source.
 *
 * The table is the CPU trainer's RtProgram (shapes from the graph, offsets from the memory
 * plan, defaults from the config) plus the kernels' source and launch list. `axlc run` hands
 * the in-memory table to rt_ocl_main; `axlc compile` writes the same table as a C file whose
 * main calls rt_ocl_main, and links it with libaxrt_opencl (backend.c). Coupled with
 * RtParamSlot, RtProgram, RtOclLaunch and RtOclProgram in runtime/axrt.h: the C file names
 * every field, so a change there that is not made here fails to compile, loudly.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/opencl/opencl.h"

static int fail(char *err, size_t cap, const char *msg, const char *arg) {
  if (err && cap) snprintf(err, cap, "%s%s", msg, arg ? arg : "");
  return -1;
}

static int64_t named_offset(const IrGraph *g, const MemPlan *mp, IrOp op, const char *prefix,
                            const char *name) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s%s", prefix, name);
  int32_t v = ir_graph_find(g, op, buf);
  return v == IR_NONE ? -1 : mp->offset[v];
}

static int64_t output_offset(const IrGraph *g, const MemPlan *mp, const char *name) {
  int32_t v = ir_graph_output(g, name);
  return v == IR_NONE ? -1 : mp->offset[v];
}

static int make_slots(const IrGraph *g, const MemPlan *mp, const BackendProgram *info,
                      RtParamSlot *slots, char *err, size_t cap) {
  bool multi = ir_mesh_devices(&g->mesh) > 1;
  for (int32_t i = 0; i < info->nparams; i++) {
    const char *path = info->params[i].path;
    int32_t v = ir_graph_find(g, IR_PARAMETER, path);
    if (v == IR_NONE || g->values[v].shape.rank > RT_MAX_PARAM_RANK)
      return fail(err, cap, "program: parameter not in the graph or of rank above 4: ", path);
    const IrShape *s = &g->values[v].shape;
    RtParamSlot *p = &slots[i];
    p->path = path;
    p->rank = s->rank;
    const IrSplit *sp = &g->values[v].split;
    for (int32_t d = 0; d < RT_MAX_PARAM_RANK; d++) { /* this device's chunk, and the whole */
      p->shape[d] = d < s->rank ? s->dims[d] : 0;
      p->global_shape[d] = d < s->rank ? s->dims[d] * ir_split_count(&g->mesh, sp, d) : 0;
      for (int k = 0; k < RT_MAX_SPLIT_AXES; k++)
        p->split[d][k] = d < s->rank && k < IR_MAX_SPLIT_AXES && multi ? sp->axes[d][k] : 0;
    }
    p->init = info->params[i].init;
    p->offset = mp->offset[v];
    p->m_offset = named_offset(g, mp, IR_PARAMETER, "opt/m/", path);
    p->v_offset = named_offset(g, mp, IR_PARAMETER, "opt/v/", path);
    p->stage = backend_update_stage(g, path);
    p->apart = mp->region ? mp->region[v] : 0;
  }
  return 0;
}

/* The mesh and the collective table of a mesh of several devices (the LLVM backend's, from
 * backends/llvm/program.c: the same numbering, the same fields). */
static int make_mesh(const IrGraph *g, const MemPlan *mp, RtProgram *p, RtCollective **colls,
                     char *err, size_t cap) {
  *colls = NULL;
  if (ir_mesh_devices(&g->mesh) <= 1) return 0;
  if (g->mesh.naxes > RT_MAX_MESH_AXES)
    return fail(err, cap, "program: the mesh has more axes than the runtime takes", NULL);
  p->mesh.naxes = g->mesh.naxes;
  for (int a = 0; a < g->mesh.naxes; a++) {
    p->mesh.names[a] = g->mesh.names[a];
    p->mesh.sizes[a] = g->mesh.sizes[a];
  }
  int32_t n = 0;
  for (int32_t v = 0; v < g->nvalues; v++) n += ocl_is_collective(g, v);
  /* then a pipeline's shares at the end of the step (emit.c: share_launches) */
  int32_t *made = base_xmalloc(((size_t)g->noutputs + 4) * sizeof *made);
  int32_t *buffer = base_xmalloc(((size_t)g->noutputs + 4) * sizeof *buffer);
  int32_t nshare = backend_pipeline_shares(g, made, buffer);
  *colls = base_xcalloc((size_t)(n + nshare) + 1, sizeof **colls);
  for (int32_t k = 0; k < nshare; k++) {
    const IrValue *x = &g->values[buffer[k]];
    RtCollective *c = &(*colls)[n + k];
    c->kind = RT_COLL_SHARE;
    c->dtype = x->dtype == DT_I32 ? RT_DT_I32 : x->dtype == DT_BF16 ? RT_DT_BF16 : RT_DT_F32;
    c->naxes = 1;
    c->axes[0] = ir_mesh_axis(&g->mesh, IR_PIPELINE_AXIS);
    c->axis = g->values[made[k]].stage - 1;
    c->rank = x->shape.rank;
    for (int d = 0; d < x->shape.rank; d++) c->in_shape[d] = c->out_shape[d] = x->shape.dims[d];
    c->in_offset = c->out_offset = mp->offset[buffer[k]];
  }
  free(made);
  free(buffer);
  for (int32_t v = 0, i = 0; v < g->nvalues; v++) {
    if (!ocl_is_collective(g, v)) continue;
    const IrValue *x = &g->values[v];
    const IrShape *in = &g->values[x->ops[0]].shape;
    if (x->attr.nmesh > RT_MAX_MESH_AXES || x->shape.rank > RT_MAX_DIMS)
      return fail(err, cap, "program: a collective with too many mesh axes or dims for the runtime",
                  NULL);
    RtCollective *c = &(*colls)[i++];
    c->kind = backend_coll_kind(x->op);
    c->dtype = x->dtype == DT_I32 ? RT_DT_I32 : x->dtype == DT_BF16 ? RT_DT_BF16 : RT_DT_F32;
    c->naxes = x->attr.nmesh;
    for (int a = 0; a < x->attr.nmesh; a++) c->axes[a] = ir_mesh_axis(&g->mesh, x->attr.mesh[a]);
    c->axis = x->op == IR_ALL_REDUCE ? 0 : x->attr.axis;
    c->axis2 = x->op == IR_ALL_TO_ALL ? x->attr.axis2 : 0;
    if (x->op == IR_SEND || x->op == IR_RECV) { /* runtime/axrt.h: RT_COLL_SEND, RT_COLL_RECV */
      c->axis = (int32_t)x->attr.k;
      c->axis2 = x->op == IR_SEND ? x->stage - 1 : ocl_collective_index(g, x->ops[0]);
    }
    c->rank = x->shape.rank;
    for (int d = 0; d < x->shape.rank; d++) {
      c->in_shape[d] = in->dims[d];
      c->out_shape[d] = x->shape.dims[d];
    }
    c->in_offset = mp->offset[x->ops[0]];
    c->out_offset = mp->offset[v];
  }
  p->ncollectives = n + nshare;
  p->collectives = *colls;
  return 0;
}

int ocl_program_build(const IrGraph *g, const MemPlan *mp, const BackendProgram *info,
                      const OclKernels *k, RtOclProgram *out, RtParamSlot **slots,
                      RtCollective **colls, char *err, size_t cap) {
  memset(out, 0, sizeof *out);
  *colls = NULL;
  *slots = base_xcalloc((size_t)info->nparams + 1, sizeof **slots);
  if (make_slots(g, mp, info, *slots, err, cap)) return -1;
  if (make_mesh(g, mp, &out->base, colls, err, cap)) return -1;
  int32_t ids = ir_graph_find(g, IR_INPUT, "ids");
  if (ids == IR_NONE || g->values[ids].shape.rank != 2)
    return fail(err, cap, "program: the graph has no input ids (B, T)", NULL);
  RtProgram *p = &out->base;
  p->abi_version = RT_ABI_VERSION;
  p->config = info->config;
  /* the plan's slab, then the two-stage reductions' partial results (emit.c) */
  p->slab_bytes = k->slab_bytes > mp->slab_bytes ? k->slab_bytes : mp->slab_bytes;
  p->nparams = info->nparams;
  p->params = *slots;
  p->batch = g->values[ids].shape.dims[0];
  p->seq = g->values[ids].shape.dims[1];
  p->vocab = info->vocab;
  for (int k2 = 0; k2 < RT_MAX_SPLIT_AXES && k2 < IR_MAX_SPLIT_AXES; k2++)
    p->batch_split[k2] = p->mesh.naxes ? g->values[ids].split.axes[0][k2] : 0;
  p->ids_offset = mp->offset[ids];
  p->targets_offset = named_offset(g, mp, IR_INPUT, "", "targets");
  p->step_offset = named_offset(g, mp, IR_INPUT, "", "step");
  p->loss_offset = output_offset(g, mp, "loss");
  p->grad_norm_offset = output_offset(g, mp, "grad_norm");
  p->lr_offset = output_offset(g, mp, "lr");
  p->aux_loss_offset = output_offset(g, mp, "aux_loss");
  p->has_aux_loss = p->aux_loss_offset >= 0;
  p->facts = info->facts;
  out->source = k->source;
  out->build_options = "-cl-std=CL1.2";
  out->nlaunches = k->nlaunches;
  out->launches = k->launches;
  out->device_kind = info->device_kind;
  out->device_doc = info->device_doc;
  out->device_match = info->device_match;
  return 0;
}

/* ---- as C ---- */

/* s as a C string literal, one literal per source line. */
static void c_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n')
      fputs(s[1] ? "\\n\"\n  \"" : "\\n", f);
    else if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 32 || c >= 127)
      fprintf(f, "\\%03o", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void c_float(FILE *f, float x) {
  if (isnan(x))
    fputs("NAN", f);
  else if (isinf(x))
    fputs(x < 0 ? "-INFINITY" : "INFINITY", f);
  else
    fprintf(f, "(float)%.9g", (double)x);
}

/* An array of n int64s as a C initializer. */
static void c_i64s(FILE *f, const int64_t *v, int n) {
  fputc('{', f);
  for (int i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", v[i]);
  fputc('}', f);
}

/* One RtParamSlot initializer, by field name. */
static void c_slot(FILE *f, const RtParamSlot *p) {
  fputs("  {.path = ", f);
  c_string(f, p->path);
  fprintf(f, ", .rank = %d, .shape = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "}", p->rank,
          p->shape[0], p->shape[1], p->shape[2], p->shape[3]);
  fprintf(f,
          ", .global_shape = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "}, .init = {%d, ",
          p->global_shape[0], p->global_shape[1], p->global_shape[2], p->global_shape[3],
          (int)p->init.kind);
  const float in[] = {p->init.value, p->init.mean, p->init.std, p->init.lo, p->init.hi};
  for (int i = 0; i < 5; i++) {
    c_float(f, in[i]);
    fputs(i < 4 ? ", " : "}, ", f);
  }
  fputs(".split = {", f);
  for (int d = 0; d < RT_MAX_PARAM_RANK; d++) {
    fputs(d ? ", {" : "{", f);
    for (int k = 0; k < RT_MAX_SPLIT_AXES; k++) fprintf(f, "%s%d", k ? ", " : "", p->split[d][k]);
    fputc('}', f);
  }
  fprintf(f,
          "}, .offset = %" PRId64 ", .m_offset = %" PRId64 ", .v_offset = %" PRId64
          ", .stage = %" PRId64 ", .apart = %" PRId64 "},\n",
          p->offset, p->m_offset, p->v_offset, p->stage, p->apart);
}

/* The launch list `n` launches as C: PREFIXargs, PREFIXarg_bytes and PREFIXlaunches. */
static void c_launches(FILE *f, const char *prefix, int32_t n, const RtOclLaunch *launches) {
  int64_t nargs = 0;
  fprintf(f, "static const int64_t %sargs[] = {", prefix);
  for (int32_t i = 0; i < n; i++)
    for (int32_t a = 0; a < launches[i].nargs; a++, nargs++)
      fprintf(f, "%s%s%" PRId64, nargs ? "," : "", nargs % 8 ? " " : "\n  ", launches[i].args[a]);
  fprintf(f, "%s};\n\nstatic const int64_t %sarg_bytes[] = {", nargs ? "" : "0", prefix);
  nargs = 0;
  for (int32_t i = 0; i < n; i++)
    for (int32_t a = 0; a < launches[i].nargs; a++, nargs++)
      fprintf(f, "%s%s%" PRId64, nargs ? "," : "", nargs % 8 ? " " : "\n  ",
              launches[i].arg_bytes[a]);
  fprintf(f, "%s};\n\nstatic const RtOclLaunch %slaunches[%d] = {\n", nargs ? "" : "0", prefix,
          n > 0 ? n : 1);
  nargs = 0;
  for (int32_t i = 0; i < n; i++) {
    const RtOclLaunch *L = &launches[i];
    fputs("  {", f);
    c_string(f, L->kernel);
    fprintf(f,
            ", %d, {%" PRId64 ", %" PRId64 ", %" PRId64 "}, {%" PRId64 ", %" PRId64 ", %" PRId64
            "}, %d, %sargs + %" PRId64 ", %sarg_bytes + %" PRId64 ", %d, {%" PRId64 ", %" PRId64
            ", %" PRId64 "}, {%" PRId64 ", %" PRId64 ", %" PRId64 "}, %d},\n",
            L->dims, L->global[0], L->global[1], L->global[2], L->local[0], L->local[1],
            L->local[2], L->nargs, prefix, nargs, prefix, nargs, L->collective, L->mma_global[0],
            L->mma_global[1], L->mma_global[2], L->mma_local[0], L->mma_local[1], L->mma_local[2],
            L->stage);
    nargs += L->nargs;
  }
  fputs("};\n\n", f);
}

static void c_offsets(FILE *f, const char *name, int32_t n, const int64_t *o) {
  fprintf(f, "static const int64_t %s[%d] = {", name, n > 0 ? n : 1);
  for (int32_t i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", o[i]);
  fputs(n ? "};\n\n" : "0};\n\n", f);
}

/* The sampling tables (RtForward, RtDecode) and their kernels, when the program has them. */
static void c_sampling(FILE *f, const RtOclProgram *P) {
  const RtForward *fw = P->base.forward;
  const RtDecode *d = fw->decode;
  fputs("static const char forward_source[] =\n  ", f);
  c_string(f, P->forward_source);
  fputs(";\n\n", f);
  c_launches(f, "fwd_", P->nforward, P->forward_launches);
  c_offsets(f, "fwd_params", P->base.nparams, fw->param_offsets);
  if (d && P->ndecode > 0) {
    fputs("static const char decode_source[] =\n  ", f);
    c_string(f, P->decode_source);
    fputs(";\n\n", f);
    c_launches(f, "dec_", P->ndecode, P->decode_launches);
    c_offsets(f, "dec_params", P->base.nparams, d->param_offsets);
    fprintf(f, "static const RtKvCache caches[%d] = {\n", d->ncaches > 0 ? d->ncaches : 1);
    for (int32_t i = 0; i < d->ncaches; i++) {
      const RtKvCache *c = &d->caches[i];
      fprintf(f,
              "  {.heads = %" PRId64 ", .row_bytes = %" PRId64 ", .cache_offset = %" PRId64
              ", .row_offset = %" PRId64 ", .prefill_offset = %" PRId64 "},\n",
              c->heads, c->row_bytes, c->cache_offset, c->row_offset, c->prefill_offset);
    }
    fprintf(f,
            "};\n\nstatic const RtDecode decode = {.slab_bytes = %" PRId64
            ", .ids_offset = %" PRId64 ", .pos_offset = %" PRId64 ", .logits_offset = %" PRId64
            ", .param_offsets = dec_params, .ncaches = %d, .caches = caches, .run = 0};\n\n",
            d->slab_bytes, d->ids_offset, d->pos_offset, d->logits_offset, d->ncaches);
  }
  fprintf(f,
          "static const RtForward forward = {.slab_bytes = %" PRId64 ", .ids_offset = %" PRId64
          ", .logits_offset = %" PRId64
          ", .param_offsets = fwd_params, .run = 0, .decode = %s};\n\n",
          fw->slab_bytes, fw->ids_offset, fw->logits_offset, d && P->ndecode > 0 ? "&decode" : "0");
}

/* The program facts as a C initializer, from RT_PROGRAM_FACTS alone: a new fact needs nothing
 * here. Doubles print with 17 digits, so they read back to the same bits. */
static void fact_i64(FILE *f, int64_t v) { fprintf(f, "%" PRId64, v); }
static void fact_u64(FILE *f, uint64_t v) { fprintf(f, "%" PRIu64 "u", v); }
static void fact_f64(FILE *f, double v) { fprintf(f, "%.17g", v); }

static void c_facts(FILE *f, const RtFacts *F) {
  fputc('{', f);
#define FACT_C(name, type, doc)                                                                    \
  fputs(" ." #name " = ", f);                                                                      \
  _Generic(F->name, double : fact_f64, uint64_t : fact_u64, default : fact_i64)(f, F->name);       \
  fputc(',', f);
  RT_PROGRAM_FACTS(FACT_C)
#undef FACT_C
  fputs(" }", f);
}

int ocl_program_write_c(FILE *f, const RtOclProgram *P) {
  int sampling = P->base.forward && P->nforward > 0;
  int decoding = sampling && P->base.forward->decode && P->ndecode > 0;
  const RtProgram *p = &P->base;
  fputs("/* generated by axlc --target opencl: an OpenCL trainer (runtime/axrt.h: rt_ocl_main) */\n"
        "#include <math.h>\n#include <stdint.h>\n#include \"axrt.h\"\n\nstatic const char source[] "
        "=\n  ",
        f);
  c_string(f, P->source);
  fputs(";\n\nstatic const char config[] =\n  ", f);
  c_string(f, p->config ? p->config : "");
  fprintf(f, ";\n\nstatic const RtParamSlot params[%d] = {\n", p->nparams > 0 ? p->nparams : 1);
  for (int32_t i = 0; i < p->nparams; i++) c_slot(f, &p->params[i]);
  fputs("};\n\n", f);
  c_launches(f, "", P->nlaunches, P->launches);
  if (sampling) c_sampling(f, P);
  /* the mesh and its collectives (a mesh of several devices: one trainer per device) */
  fprintf(f, "static const RtCollective collectives[%d] = {\n",
          p->ncollectives > 0 ? p->ncollectives : 1);
  for (int32_t i = 0; i < p->ncollectives; i++) {
    const RtCollective *c = &p->collectives[i];
    fprintf(f, "  {.kind = %d, .dtype = %d, .naxes = %d, .axes = {", c->kind, c->dtype, c->naxes);
    for (int a = 0; a < RT_MAX_MESH_AXES; a++) fprintf(f, "%s%d", a ? ", " : "", c->axes[a]);
    fprintf(f, "}, .axis = %d, .axis2 = %d, .rank = %d,\n   .in_shape = ", c->axis, c->axis2,
            c->rank);
    c_i64s(f, c->in_shape, RT_MAX_DIMS);
    fputs(", .out_shape = ", f);
    c_i64s(f, c->out_shape, RT_MAX_DIMS);
    fprintf(f, ", .in_offset = %" PRId64 ", .out_offset = %" PRId64 "},\n", c->in_offset,
            c->out_offset);
  }
  fputs("};\n\n", f);
  fprintf(
      f,
      "static const RtOclProgram program = {\n"
      "  .base = {.abi_version = %d, .config = config, .slab_bytes = %" PRId64 ", .nparams = %d,\n"
      "           .params = params, .batch = %" PRId64 ", .seq = %" PRId64 ", .vocab = %" PRId64
      ",\n"
      "           .ids_offset = %" PRId64 ", .targets_offset = %" PRId64 ", .step_offset = %" PRId64
      ",\n"
      "           .loss_offset = %" PRId64 ", .grad_norm_offset = %" PRId64
      ", .lr_offset = %" PRId64 ",\n"
      "           .step = 0, .has_aux_loss = %d, .aux_loss_offset = %" PRId64 ", .forward = %s,\n"
      "           .ncollectives = %d, .collectives = collectives, .batch_split = {%d, %d, %d, "
      "%d},\n"
      "           .mesh = {.naxes = %d, .names = {",
      p->abi_version, p->slab_bytes, p->nparams, p->batch, p->seq, p->vocab, p->ids_offset,
      p->targets_offset, p->step_offset, p->loss_offset, p->grad_norm_offset, p->lr_offset,
      (int)p->has_aux_loss, p->aux_loss_offset, sampling ? "&forward" : "0", p->ncollectives,
      p->batch_split[0], p->batch_split[1], p->batch_split[2], p->batch_split[3], p->mesh.naxes);
  if (p->mesh.naxes == 0) fputs("0", f);
  for (int a = 0; a < p->mesh.naxes; a++) {
    fputs(a ? ", " : "", f);
    c_string(f, p->mesh.names[a] ? p->mesh.names[a] : "");
  }
  fputs("}, .sizes = ", f);
  c_i64s(f, p->mesh.sizes, RT_MAX_MESH_AXES);
  fputs("},\n           .facts = ", f);
  c_facts(f, &p->facts);
  fputs("},\n  .source = source,\n  .build_options = ", f);
  c_string(f, P->build_options ? P->build_options : "");
  fprintf(f, ",\n  .nlaunches = %d,\n  .launches = launches,\n  .device_kind = ", P->nlaunches);
  c_string(f, P->device_kind ? P->device_kind : "");
  fputs(",\n  .device_doc = ", f);
  c_string(f, P->device_doc ? P->device_doc : "");
  fputs(",\n  .device_match = ", f);
  c_string(f, P->device_match ? P->device_match : "");
  if (sampling)
    fprintf(
        f,
        ",\n  .forward_source = forward_source, .nforward = %d, .forward_launches = fwd_launches",
        P->nforward);
  if (decoding)
    fprintf(f,
            ",\n  .decode_source = decode_source, .ndecode = %d, .decode_launches = dec_launches",
            P->ndecode);
  fprintf(f, ",\n};\n\n"
             "int main(int argc, char **argv) { return rt_ocl_main(&program, argc, argv); }\n");
  return ferror(f) ? -1 : 0;
}
