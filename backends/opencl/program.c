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

static int make_slots(const IrGraph *g, const MemPlan *mp, const OclProgramInfo *info,
                      RtParamSlot *slots, char *err, size_t cap) {
  for (int32_t i = 0; i < info->nparams; i++) {
    int32_t v = ir_graph_find(g, IR_PARAMETER, info->paths[i]);
    if (v == IR_NONE || g->values[v].shape.rank > RT_MAX_PARAM_RANK)
      return fail(err, cap,
                  "program: parameter not in the graph or of rank above 4: ", info->paths[i]);
    const IrShape *s = &g->values[v].shape;
    RtParamSlot *p = &slots[i];
    p->path = info->paths[i];
    p->rank = s->rank;
    for (int32_t d = 0; d < RT_MAX_PARAM_RANK; d++) /* one device: the chunk is the whole */
      p->shape[d] = p->global_shape[d] = d < s->rank ? s->dims[d] : 0;
    p->init = info->inits[i];
    p->offset = mp->offset[v];
    p->m_offset = named_offset(g, mp, IR_PARAMETER, "opt/m/", info->paths[i]);
    p->v_offset = named_offset(g, mp, IR_PARAMETER, "opt/v/", info->paths[i]);
  }
  return 0;
}

int ocl_program_build(const IrGraph *g, const MemPlan *mp, const OclProgramInfo *info,
                      const OclKernels *k, RtOclProgram *out, RtParamSlot **slots, char *err,
                      size_t cap) {
  memset(out, 0, sizeof *out);
  *slots = ir_xcalloc((size_t)info->nparams + 1, sizeof **slots);
  if (make_slots(g, mp, info, *slots, err, cap)) return -1;
  int32_t ids = ir_graph_find(g, IR_INPUT, "ids");
  if (ids == IR_NONE || g->values[ids].shape.rank != 2)
    return fail(err, cap, "program: the graph has no input ids (B, T)", NULL);
  RtProgram *p = &out->base;
  p->abi_version = RT_ABI_VERSION;
  p->config = info->config;
  p->slab_bytes = mp->slab_bytes;
  p->nparams = info->nparams;
  p->params = *slots;
  p->batch = g->values[ids].shape.dims[0];
  p->seq = g->values[ids].shape.dims[1];
  p->vocab = info->vocab;
  p->ids_offset = mp->offset[ids];
  p->targets_offset = named_offset(g, mp, IR_INPUT, "", "targets");
  p->step_offset = named_offset(g, mp, IR_INPUT, "", "step");
  p->loss_offset = output_offset(g, mp, "loss");
  p->grad_norm_offset = output_offset(g, mp, "grad_norm");
  p->lr_offset = output_offset(g, mp, "lr");
  p->aux_loss_offset = output_offset(g, mp, "aux_loss");
  p->has_aux_loss = p->aux_loss_offset >= 0;
  p->max_steps = info->max_steps;
  p->seed = info->seed;
  p->ckpt_every = info->ckpt_every;
  p->ckpt_keep = info->ckpt_keep;
  p->step_flops = info->flops;
  p->step_bf16_flops = info->bf16_flops;
  p->peak_f32 = info->peak_f32;
  p->peak_bf16 = info->peak_bf16;
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

/* One RtParamSlot initializer, by field name (the split stays empty: one device). */
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
  fprintf(f, ".offset = %" PRId64 ", .m_offset = %" PRId64 ", .v_offset = %" PRId64 "},\n",
          p->offset, p->m_offset, p->v_offset);
}

int ocl_program_write_c(FILE *f, const RtOclProgram *P) {
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
  int64_t nargs = 0;
  fputs("};\n\nstatic const int64_t args[] = {", f);
  for (int32_t i = 0; i < P->nlaunches; i++)
    for (int32_t a = 0; a < P->launches[i].nargs; a++, nargs++)
      fprintf(f, "%s%s%" PRId64, nargs ? "," : "", nargs % 8 ? " " : "\n  ",
              P->launches[i].args[a]);
  fprintf(f, "%s};\n\nstatic const int64_t arg_bytes[] = {", nargs ? "" : "0");
  nargs = 0;
  for (int32_t i = 0; i < P->nlaunches; i++)
    for (int32_t a = 0; a < P->launches[i].nargs; a++, nargs++)
      fprintf(f, "%s%s%" PRId64, nargs ? "," : "", nargs % 8 ? " " : "\n  ",
              P->launches[i].arg_bytes[a]);
  fprintf(f, "%s};\n\nstatic const RtOclLaunch launches[%d] = {\n", nargs ? "" : "0",
          P->nlaunches > 0 ? P->nlaunches : 1);
  nargs = 0;
  for (int32_t i = 0; i < P->nlaunches; i++) {
    const RtOclLaunch *L = &P->launches[i];
    fputs("  {", f);
    c_string(f, L->kernel);
    fprintf(f,
            ", %d, {%" PRId64 ", %" PRId64 ", %" PRId64 "}, {%" PRId64 ", %" PRId64 ", %" PRId64
            "}, %d, args + %" PRId64 ", arg_bytes + %" PRId64 ", {%" PRId64 ", %" PRId64
            ", %" PRId64 "}, {%" PRId64 ", %" PRId64 ", %" PRId64 "}},\n",
            L->dims, L->global[0], L->global[1], L->global[2], L->local[0], L->local[1],
            L->local[2], L->nargs, nargs, nargs, L->mma_global[0], L->mma_global[1],
            L->mma_global[2], L->mma_local[0], L->mma_local[1], L->mma_local[2]);
    nargs += L->nargs;
  }
  fprintf(
      f,
      "};\n\nstatic const RtOclProgram program = {\n"
      "  .base = {.abi_version = %d, .config = config, .slab_bytes = %" PRId64 ", .nparams = %d,\n"
      "           .params = params, .batch = %" PRId64 ", .seq = %" PRId64 ", .vocab = %" PRId64
      ",\n"
      "           .ids_offset = %" PRId64 ", .targets_offset = %" PRId64 ", .step_offset = %" PRId64
      ",\n"
      "           .loss_offset = %" PRId64 ", .grad_norm_offset = %" PRId64
      ", .lr_offset = %" PRId64 ",\n"
      "           .max_steps = %" PRId64 ", .seed = %" PRIu64 "u, .ckpt_every = %" PRId64 ",\n"
      "           .ckpt_keep = %d, .step = 0, .has_aux_loss = %d, .aux_loss_offset = %" PRId64 ",\n"
      "           .step_flops = %.17g, .step_bf16_flops = %.17g, .peak_f32 = %.17g, .peak_bf16 = "
      "%.17g},\n"
      "  .source = source,\n  .build_options = ",
      p->abi_version, p->slab_bytes, p->nparams, p->batch, p->seq, p->vocab, p->ids_offset,
      p->targets_offset, p->step_offset, p->loss_offset, p->grad_norm_offset, p->lr_offset,
      p->max_steps, p->seed, p->ckpt_every, p->ckpt_keep, (int)p->has_aux_loss, p->aux_loss_offset,
      p->step_flops, p->step_bf16_flops, p->peak_f32, p->peak_bf16);
  c_string(f, P->build_options ? P->build_options : "");
  fprintf(f, ",\n  .nlaunches = %d,\n  .launches = launches,\n  .device_kind = ", P->nlaunches);
  c_string(f, P->device_kind ? P->device_kind : "");
  fputs(",\n  .device_doc = ", f);
  c_string(f, P->device_doc ? P->device_doc : "");
  fputs(",\n  .device_match = ", f);
  c_string(f, P->device_match ? P->device_match : "");
  fprintf(f, ",\n};\n\n"
             "int main(int argc, char **argv) { return rt_ocl_main(&program, argc, argv); }\n");
  return ferror(f) ? -1 : 0;
}
