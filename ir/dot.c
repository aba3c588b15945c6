/* dot.c: Graphviz output of a graph, for looking at what a pass did (`dot -Tsvg`).
 *
 * One box per value labelled with its index, op, name, type and remat tag; values are grouped in
 * clusters by config path so a module's subgraph reads as one block; outputs are ellipses.
 */
#include "ir/ir.h"

#include <string.h>

static void dot_escaped(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', out);
    fputc(*s == '\n' ? ' ' : *s, out);
  }
}

static void dot_node(FILE *out, const IrGraph *g, int32_t i) {
  const IrValue *v = &g->values[i];
  fprintf(out, "    v%d [label=\"%%%d %s", i, i, ir_op_name(v->op));
  if (*v->name) {
    fputc(' ', out);
    dot_escaped(out, v->name);
  }
  fprintf(out, "\\n%s[", ir_dtype_name(v->dtype));
  for (int32_t d = 0; d < v->shape.rank; d++)
    fprintf(out, "%s%lld", d ? "," : "", (long long)v->shape.dims[d]);
  fprintf(out, "]");
  if (*v->tag) {
    fprintf(out, "\\n#");
    dot_escaped(out, v->tag);
  }
  fprintf(out, "\"];\n");
}

/* Values of one origin, in order of first appearance, as a cluster. */
static void dot_cluster(FILE *out, const IrGraph *g, int32_t first, int32_t id) {
  const char *origin = g->values[first].origin;
  if (*origin) {
    fprintf(out, "  subgraph cluster_%d {\n    label=\"", id);
    dot_escaped(out, origin);
    fprintf(out, "\";\n");
  }
  for (int32_t i = first; i < g->nvalues; i++)
    if (strcmp(g->values[i].origin, origin) == 0) dot_node(out, g, i);
  if (*origin) fprintf(out, "  }\n");
}

static bool origin_seen(const IrGraph *g, int32_t i) {
  for (int32_t j = 0; j < i; j++)
    if (strcmp(g->values[j].origin, g->values[i].origin) == 0) return true;
  return false;
}

int ir_graph_print_dot(const IrGraph *g, FILE *out) {
  fprintf(out, "digraph ir {\n  node [shape=box, fontname=monospace];\n");
  for (int32_t i = 0, id = 0; i < g->nvalues; i++)
    if (!origin_seen(g, i)) dot_cluster(out, g, i, id++);
  for (int32_t i = 0; i < g->nvalues; i++)
    for (int32_t k = 0; k < g->values[i].nops; k++)
      fprintf(out, "  v%d -> v%d;\n", g->values[i].ops[k], i);
  for (int32_t k = 0; k < g->noutputs; k++) {
    fprintf(out, "  out%d [shape=ellipse, label=\"", k);
    dot_escaped(out, g->outputs[k].name);
    fprintf(out, "\"];\n  v%d -> out%d;\n", g->outputs[k].value, k);
  }
  return fprintf(out, "}\n") < 0 ? IR_ERR : IR_OK;
}
