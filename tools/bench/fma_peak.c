/*
 * fma_peak.c: the machine's arithmetic ceiling for single precision: THREADS threads each run
 * twelve independent chains of fused multiply-adds on the widest registers the CPU has (16
 * floats with AVX-512F, else 8 with AVX2 and FMA: two FMA units of a core kept busy, nothing
 * loaded or stored), and the best of 5 runs is printed in GFLOP/s.
 * sgemm_peak's OpenBLAS figure, the denominator of MFU in tools/bench, is a fraction of this
 * (docs/bench.md, "The arithmetic ceiling").
 *   usage: fma_peak [THREADS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ITERS = 100000000 }; /* per thread and run: 12 FMAs of 8 floats each */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Twelve chains of fused multiply-adds on registers R0-R11 (R: "ymm", 8 floats, or "zmm", 16
 * with AVX-512F), from R12 and R13, n times; written in assembly so that the compiler can
 * neither spill the chains nor fold them. The clobbers name the registers' low parts, which
 * stand for the whole registers. */
#define MOV0(R, i) "vmovaps %%" R "0, %%" R #i "\n\t"
#define FMA(R, i)  "vfmadd231ps %%" R "12, %%" R "13, %%" R #i "\n\t"
#define CHAINS(R)                                                                                  \
  __asm__ volatile("vxorps %%xmm0, %%xmm0, %%xmm0\n\t" MOV0(R, 1) MOV0(R, 2) MOV0(R, 3) MOV0(R, 4) \
                       MOV0(R, 5) MOV0(R, 6) MOV0(R, 7) MOV0(R, 8) MOV0(R, 9) MOV0(R, 10)          \
                           MOV0(R, 11) MOV0(R, 12) MOV0(R, 13) "1:\n\t" FMA(R, 0) FMA(R, 1)        \
                               FMA(R, 2) FMA(R, 3) FMA(R, 4) FMA(R, 5) FMA(R, 6) FMA(R, 7)         \
                                   FMA(R, 8) FMA(R, 9) FMA(R, 10)                                  \
                                       FMA(R, 11) "dec %0\n\tjnz 1b\n\tvzeroupper"                 \
                   : "+r"(n)                                                                       \
                   :                                                                               \
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",       \
                     "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc")

static void *chains(void *arg) {
  long n = ITERS;
  (void)arg;
  CHAINS("ymm");
  return NULL;
}

/* The same with 16-float registers (AVX-512F; at the frequency the cores keep for them). */
static void *chains512(void *arg) {
  long n = ITERS;
  (void)arg;
  CHAINS("zmm");
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  if (threads < 1 || threads > 256) {
    fprintf(stderr, "fma_peak: THREADS is 1 to 256\n");
    return 2;
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    fprintf(stderr, "fma_peak: this CPU lacks AVX2 or FMA\n");
    return 1;
  }
  int wide = __builtin_cpu_supports("avx512f");
  pthread_t th[256];
  double best = 0;
  for (int run = 0; run < 5; run++) {
    double t0 = now();
    int started = 0;
    for (int t = 0; t < threads; t++)
      if (pthread_create(&th[started], NULL, wide ? chains512 : chains, NULL) == 0) started++;
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    double gflops = 2.0 * (wide ? 16 : 8) * 12 * (double)ITERS * started / (now() - t0) / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%.2f\n", best);
  return 0;
}
#else
int main(void) {
  fprintf(stderr, "fma_peak: needs an x86-64 CPU with AVX2 and FMA\n");
  return 1;
}
#endif
