/*
 * sgemm_peak.c: the machine's measured single-precision matmul peak, the
 * denominator of model FLOP utilization in tools/bench. Times OpenBLAS
 * sgemm on square matrices with the given thread count and prints the best
 * GFLOP/s seen.
 *   usage: sgemm_peak [THREADS]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  openblas_set_num_threads(threads);
  const int n = 1024;
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
        *c = malloc(sizeof(float) * n * n);
  for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
  double best = 0;
  for (int rep = 0; rep < 12; rep++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double gflops = 2.0 * n * n * n / (now() - t0) / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%.2f\n", best);
  free(a);
  free(b);
  free(c);
  return 0;
}
