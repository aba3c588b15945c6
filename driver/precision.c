/*
 * precision.c: what `/precision/compute: auto` becomes on a target (drv_bf16_dot).
 *
 * The shipped cpu rule asks for auto: bf16 compute where the CPU that runs the trainer has
 * bf16 dot-product instructions (AVX512_BF16's vdpbf16ps, which the runtime's bf16 product
 * uses), f32 elsewhere, where bf16 would only convert and round without running faster.
 * The CPU is the host's unless --cpu or --features name another: an explicit +avx512bf16 or
 * -avx512bf16 in --features decides, then a --cpu known to have the instructions.
 * OpenCL devices are not asked (f32); GPU and TPU rules say bf16 themselves.
 */
#include <string.h>

#include "driver/driver.h"

/* LLVM CPU names with AVX512_BF16. */
static const char *const bf16_cpus[] = {"cooperlake",    "sapphirerapids", "graniterapids",
                                        "emeraldrapids", "znver4",         "znver5"};

static bool host_has_bf16(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool drv_bf16_dot(const char *target, const char *cpu, const char *features, const char **why) {
  *why = NULL;
  bool on_cpu = !target || strncmp(target, "cpu", 3) == 0 || strcmp(target, "interp") == 0;
  if (!on_cpu) {
    *why = "compute: auto is f32 off the CPU targets";
    return false;
  }
  const char *f = features ? strstr(features, "avx512bf16") : NULL;
  if (f && f > features && (f[-1] == '+' || f[-1] == '-')) {
    *why = f[-1] == '+' ? "compute: auto with --features +avx512bf16"
                        : "compute: auto with --features -avx512bf16";
    return f[-1] == '+';
  }
  if (cpu && strcmp(cpu, "native") != 0) {
    for (size_t i = 0; i < sizeof bf16_cpus / sizeof bf16_cpus[0]; i++)
      if (strcmp(cpu, bf16_cpus[i]) == 0) {
        *why = "compute: auto on a --cpu with avx512_bf16";
        return true;
      }
    *why = "compute: auto on a --cpu without avx512_bf16";
    return false;
  }
  bool has = host_has_bf16();
  *why = has ? "compute: auto on this host, which has avx512_bf16"
             : "compute: auto on this host, which lacks avx512_bf16";
  return has;
}
