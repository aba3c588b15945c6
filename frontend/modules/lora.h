/*
 * lora.h: what the LoRA kind (lora.c) decided for a built tree, for the tools and tests that
 * read it (axlc merge-lora). The frontend's walk and composing reach LoRA only through its
 * parameter transform (FeKind.transform).
 */
#ifndef AXLC_FRONTEND_MODULES_LORA_H
#define AXLC_FRONTEND_MODULES_LORA_H

#include <regex.h>

#include "frontend/frontend.h"

/* The trainer's /lora policy as the walk applies it. */
typedef struct FeLora {
  json_object *node; /* the canonical /lora node */
  regex_t re;        /* /lora/params, anchored at both ends */
  int64_t rank;
  double scale;   /* alpha / rank */
  int matched;    /* weights adapted */
  bool declaring; /* fe_param is declaring an adapter */
} FeLora;

extern const FeKind fe_kind_lora;

/* b's LoRA policy, NULL when the tree has no /lora. */
const FeLora *fe_lora(const FeBuild *b);

#endif
