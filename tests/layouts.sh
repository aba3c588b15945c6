# layouts.sh: the models and mesh layouts of the equivalence matrix (docs/testing.md), shared by
# tests/mpi/models.sh (compiled trainers under mpirun) and tests/driver/mesh.sh (the
# interpreter's simulated mesh). Each is run against one process of the same model.
#   model_file MODEL   the config: tiny_lm, moe (moe-test), fuji (fuji-test: llama-style, GQA),
#                      tiny_moe and fuji_moe (tiny-lm and fuji-test with models/modifiers/moe.json:
#                      8 experts, top-2), and the *_bf16 models (the same under bf16 compute)
#   model_args MODEL   the options that go with it (--apply moe)
#   precision MODEL    its compute dtype
#   mesh NAME          "DEVICES SHAPE [SET]", SHAPE over [pipeline, data, expert, fsdp, seq, model],
#                      SET one more --set
#   ref_mesh NAME      the one-device layout a layout is compared with: one, or onemb2 / onemb4
#                      (one device with the same microbatches: a MoE's load-balance loss is
#                      per microbatch, so N microbatches are not the whole batch's step there)
# MESH: one, data2, data4, fsdp4, model2, data2model2, expert2, expert2fsdp2; fsdp2, fsdp2mb2, fsdp2mb4
# (fsdp=2 with 1, 2, 4 microbatches: each rank steps over slices of its rows); onemb2, onemb4;
# seq2 (context parallelism: each rank its half of every sequence, K and V gathered), seq2model2,
# spmodel2 (Megatron sequence parallelism: /mesh/sequence_parallel on model=2), spseq2model2 (both).
model_file() {
  case $1 in
  tiny_lm | tiny_bf16 | tiny_moe) echo "$SRC/models/tiny-lm.json" ;;
  moe | moe_bf16) echo "$SRC/models/moe-test.json" ;;
  fuji | fuji_bf16 | fuji_moe) echo "$SRC/models/fuji-test.json" ;;
  esac
}
model_args() {
  case $1 in
  *_moe) echo "--apply moe" ;;
  esac
}
precision() {
  case $1 in
  *_bf16) echo bf16 ;;
  *) echo f32 ;;
  esac
}
mesh() {
  case $1 in
  one) echo "1 [1,1,1,1,1,1]" ;;
  data2) echo "2 [1,2,1,1,1,1]" ;;
  data4) echo "4 [1,4,1,1,1,1]" ;;
  fsdp4) echo "4 [1,1,1,4,1,1]" ;;
  model2) echo "2 [1,1,1,1,1,2]" ;;
  data2model2) echo "4 [1,2,1,1,1,2]" ;;
  expert2) echo "2 [1,1,2,1,1,1]" ;;
  expert2fsdp2) echo "4 [1,1,2,2,1,1]" ;;
  fsdp2) echo "2 [1,1,1,2,1,1]" ;;
  fsdp2mb2) echo "2 [1,1,1,2,1,1] /learner/microbatches=2" ;;
  fsdp2mb4) echo "2 [1,1,1,2,1,1] /learner/microbatches=4" ;;
  onemb2) echo "1 [1,1,1,1,1,1] /learner/microbatches=2" ;;
  onemb4) echo "1 [1,1,1,1,1,1] /learner/microbatches=4" ;;
  seq2) echo "2 [1,1,1,1,2,1]" ;;
  seq2model2) echo "4 [1,1,1,1,2,2]" ;;
  spmodel2) echo "2 [1,1,1,1,1,2] /mesh/sequence_parallel=true" ;;
  spseq2model2) echo "4 [1,1,1,1,2,2] /mesh/sequence_parallel=true" ;;
  esac
}
ref_mesh() {
  case $1 in
  *mb2) echo onemb2 ;;
  *mb4) echo onemb4 ;;
  *) echo one ;;
  esac
}
