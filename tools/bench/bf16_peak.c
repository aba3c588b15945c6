/*
 * bf16_peak.c: the machine's arithmetic ceiling for bf16 products with f32 accumulation, the
 * counterpart of fma_peak for rt_sbgemm: THREADS threads each run twelve independent chains of
 * vdpbf16ps (AVX512_BF16) on 16-float registers (each instruction is 32 multiplies and 32 adds,
 * two k-steps of 16 columns: 64 FLOP; nothing loaded or stored), and the best of 5 runs is
 * printed in GFLOP/s. On a CPU without AVX512_BF16 it says so on stderr and exits 1.
 * docs/bench.md ("bf16 products") gives rt_sbgemm's kernels as shares of this.
 *   usage: bf16_peak [THREADS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ITERS = 100000000 }; /* per thread and run: 12 vdpbf16ps of 16 floats each */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Twelve chains of vdpbf16ps on zmm0-zmm11, from zmm12 and zmm13 (zero: the sums stay zero, so
 * no denormal or overflow can slow a chain), n times; in assembly, as fma_peak's, so that the
 * compiler can neither spill the chains nor fold them (the mnemonic needs binutils 2.32 or
 * later). */
#define MOV0(i) "vmovaps %%zmm0, %%zmm" #i "\n\t"
#define DOT(i)  "vdpbf16ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"

static void *chains(void *arg) {
  long n = ITERS;
  (void)arg;
  __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0\n\t" MOV0(1) MOV0(2) MOV0(3) MOV0(4) MOV0(5)
                       MOV0(6) MOV0(7) MOV0(8) MOV0(9) MOV0(10) MOV0(11) MOV0(12)
                           MOV0(13) "1:\n\t" DOT(0) DOT(1) DOT(2) DOT(3) DOT(4) DOT(5) DOT(6) DOT(7)
                               DOT(8) DOT(9) DOT(10) DOT(11) "dec %0\n\tjnz 1b\n\tvzeroupper"
                   : "+r"(n)
                   :
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                     "xmm10", "xmm11", "xmm12", "xmm13", "cc");
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  if (threads < 1 || threads > 256) {
    fprintf(stderr, "bf16_peak: THREADS is 1 to 256\n");
    return 2;
  }
  if (!__builtin_cpu_supports("avx512bf16")) {
    fprintf(stderr, "bf16_peak: this CPU lacks AVX512_BF16 (no vdpbf16ps): no bf16 ceiling\n");
    return 1;
  }
  pthread_t th[256];
  double best = 0;
  for (int run = 0; run < 5; run++) {
    double t0 = now();
    int started = 0;
    for (int t = 0; t < threads; t++)
      if (pthread_create(&th[started], NULL, chains, NULL) == 0) started++;
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    double gflops = 4.0 * 16 * 12 * (double)ITERS * started / (now() - t0) / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%.2f\n", best);
  return 0;
}
#else
int main(void) {
  fprintf(stderr, "bf16_peak: needs an x86-64 CPU with AVX512_BF16\n");
  return 1;
}
#endif
