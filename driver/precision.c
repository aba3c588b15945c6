/*
 * precision.c: what `/precision/compute: auto` becomes on a target (drv_bf16_dot).
 *
 * The shipped cpu rule asks for auto: bf16 compute where the CPU that runs the trainer
 * multiplies bf16 faster than f32, f32 elsewhere. That is a CPU with AMX-BF16 (tile
 * products, many times the FMA units' f32 rate). AVX512_BF16 alone is not enough: its
 * vdpbf16ps does 32 products per instruction where an f32 FMA does 16, but at half the
 * issue rate, so on the machines measured (docs/bench.md, "bf16 products") a bf16 product
 * runs at the f32 rate at best, and the rounding after every bf16 op makes a whole step
 * slower than in f32. Those hosts stay f32 unless the config asks for bf16.
 * The CPU is the host's unless --cpu or --features name another: an explicit +amx-bf16 or
 * -amx-bf16 in --features decides, then a --cpu known to have AMX. OpenCL devices are not
 * asked (f32); GPU and TPU rules say bf16 themselves.
 */
#include <string.h>

#include "driver/driver.h"

/* LLVM CPU names with AMX-BF16. */
static const char *const amx_cpus[] = {"sapphirerapids", "emeraldrapids", "graniterapids",
                                       "graniterapids-d", "diamondrapids"};

static bool host_has(const char *what) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (strcmp(what, "amx") == 0) return __builtin_cpu_supports("amx-bf16");
  return __builtin_cpu_supports("avx512bf16");
#else
  (void)what;
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
  const char *f = features ? strstr(features, "amx-bf16") : NULL;
  if (f && f > features && (f[-1] == '+' || f[-1] == '-')) {
    *why = f[-1] == '+' ? "compute: auto with --features +amx-bf16"
                        : "compute: auto with --features -amx-bf16";
    return f[-1] == '+';
  }
  if (cpu && strcmp(cpu, "native") != 0) {
    for (size_t i = 0; i < sizeof amx_cpus / sizeof amx_cpus[0]; i++)
      if (strcmp(cpu, amx_cpus[i]) == 0) {
        *why = "compute: auto on a --cpu with AMX-BF16";
        return true;
      }
    *why = "compute: auto on a --cpu without AMX-BF16";
    return false;
  }
  if (host_has("amx")) {
    *why = "compute: auto on this host, which has AMX-BF16";
    return true;
  }
  *why = host_has("avx512bf16") ? "compute: auto on this host, which has AVX512_BF16 but no "
                                  "AMX-BF16: bf16 products run no faster than f32 here"
                                : "compute: auto on this host, which has no bf16 products";
  return false;
}
