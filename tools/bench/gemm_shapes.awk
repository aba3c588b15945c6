# gemm_shapes.awk: the matrix products of one training step, from a trainer's LLVM IR.
# Counts the `call void @rt_sgemm(...)` in the step function (axlc_step and its parts, not the
# sampling function axlc_forward) by their constant arguments, as rt_sgemm in runtime/axrt.h
# takes them: COUNT BATCH TA TB M N K, then lda ldb ldc and the batch strides.
#   usage: axlc compile MODEL.json --target cpu --emit llvm -o M.ll
#          awk -f tools/bench/gemm_shapes.awk M.ll
/^define/ { step = ($0 ~ /@axlc_step/) }
step && /call void @rt_sgemm\(/ {
  args = $0
  sub(/.*@rt_sgemm\(/, "", args)
  sub(/\).*/, "", args)
  n = split(args, a, ", ")
  for (i = 1; i <= n; i++) sub(/^[^ ]* /, "", a[i]) # drop the type
  key = a[2] " " a[3] " " a[4] " " a[5] " " a[6] " " a[7] "  ld " a[9] " " a[12] " " a[15] \
        "  stride " a[10] " " a[13] " " a[16]
  count[key]++
}
END { for (k in count) print count[k], k }
