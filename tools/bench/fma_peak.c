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
/* Written in assembly so that the compiler can neither spill the chains nor fold them. */
static void *chains(void *arg) {
  long n = ITERS;
  (void)arg;
  __asm__ volatile(
      "vxorps %%ymm0, %%ymm0, %%ymm0\n\t"
      "vmovaps %%ymm0, %%ymm1\n\tvmovaps %%ymm0, %%ymm2\n\tvmovaps %%ymm0, %%ymm3\n\t"
      "vmovaps %%ymm0, %%ymm4\n\tvmovaps %%ymm0, %%ymm5\n\tvmovaps %%ymm0, %%ymm6\n\t"
      "vmovaps %%ymm0, %%ymm7\n\tvmovaps %%ymm0, %%ymm8\n\tvmovaps %%ymm0, %%ymm9\n\t"
      "vmovaps %%ymm0, %%ymm10\n\tvmovaps %%ymm0, %%ymm11\n\t"
      "vmovaps %%ymm0, %%ymm12\n\tvmovaps %%ymm0, %%ymm13\n"
      "1:\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm0\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm1\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm2\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm3\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm4\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm5\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm6\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm7\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm8\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm9\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm10\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm11\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "cc");
  return NULL;
}

/* The same with 16-float registers (AVX-512F; the frequency the cores keep for them). */
static void *chains512(void *arg) {
  long n = ITERS;
  (void)arg;
  __asm__ volatile(
      "vxorps %%xmm0, %%xmm0, %%xmm0\n\t"
      "vmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\t"
      "vmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\tvmovaps %%zmm0, %%zmm6\n\t"
      "vmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\tvmovaps %%zmm0, %%zmm9\n\t"
      "vmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\t"
      "vmovaps %%zmm0, %%zmm12\n\tvmovaps %%zmm0, %%zmm13\n"
      "1:\n\t"
      "vfmadd231ps %%zmm12, %%zmm13, %%zmm0\n\tvfmadd231ps %%zmm12, %%zmm13, %%zmm1\n\t"
      "vfmadd231ps %%zmm12, %%zmm13, %%zmm2\n\tvfmadd231ps %%zmm12, %%zmm13, %%zmm3\n\t"
      "vfmadd231ps %%zmm12, %%zmm13, %%zmm4\n\tvfmadd231ps %%zmm12, %%zmm13, %%zmm5\n\t"
      "vfmadd231ps %%zmm12, %%zmm13, %%zmm6\n\tvfmadd231ps %%zmm12, %%zmm13, %%zmm7\n\t"
      "vfmadd231ps %%zmm12, %%zmm13, %%zmm8\n\tvfmadd231ps %%zmm12, %%zmm13, %%zmm9\n\t"
      "vfmadd231ps %%zmm12, %%zmm13, %%zmm10\n\tvfmadd231ps %%zmm12, %%zmm13, %%zmm11\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "cc");
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
