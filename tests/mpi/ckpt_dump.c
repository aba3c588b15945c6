/* ckpt_dump.c: ckpt_dump DIR OUT: the newest checkpoint in DIR that verifies, whatever its format
 * and however it was sharded, as one safetensors file of whole f32 tensors (for compare.py). */
#include <stdio.h>
#include <stdlib.h>

#include "axrt.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: ckpt_dump DIR OUT.safetensors\n");
    return 2;
  }
  RtCkpt *ck;
  RtError err, warn;
  if (rt_ckpt_open_latest(&ck, argv[1], &warn, &err) != 1) {
    fprintf(stderr, "ckpt_dump: %s: no checkpoint: %s\n", argv[1], err.msg);
    return 1;
  }
  int n = rt_ckpt_count(ck), rc = 0;
  RtTensor *out = calloc((size_t)n + 1, sizeof *out);
  for (int i = 0; i < n && rc == 0; i++) {
    const RtTensor *t = rt_ckpt_tensor(ck, i);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    float *data = malloc((size_t)numel * sizeof *data + 4);
    out[i] = *t;
    out[i].dtype = RT_DT_F32;
    out[i].data = data;
    rc = rt_ckpt_read_f32(ck, t->name, t->shape, t->ndim, NULL, NULL, data, &err);
  }
  char step[32];
  snprintf(step, sizeof step, "%lld", (long long)rt_ckpt_step(ck));
  RtMeta meta[] = {{"axlc.step", step}};
  if (rc == 0) rc = rt_st_write(argv[2], out, n, meta, 1, NULL, NULL, &err);
  if (rc != 0) fprintf(stderr, "ckpt_dump: %s\n", err.msg);
  for (int i = 0; i < n; i++) free((void *)out[i].data);
  free(out);
  rt_ckpt_close(ck);
  return rc ? 1 : 0;
}
