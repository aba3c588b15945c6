# layouts.sh: the models and mesh layouts of the equivalence matrix (docs/testing.md), shared by
# tests/mpi/models.sh (compiled trainers under mpirun) and tests/driver/mesh.sh (the
# interpreter's simulated mesh). Each is run against one process of the same model. Sourced with
# $AXLC set: the mesh's axes are read from it.
#   model_file MODEL   the config: tiny_lm, moe (moe-test), fuji (fuji-test: llama-style, GQA),
#                      tiny_moe and fuji_moe (tiny-lm and fuji-test with models/modifiers/moe.json:
#                      8 experts, top-2), and the *_bf16 models (the same under bf16 compute)
#   model_args MODEL   the options that go with it (--apply moe)
#   precision MODEL    its compute dtype
#   layout NAME        "AXES [SET...]": AXES the mesh as named axes, e.g. fsdp=2,model=2 (- : every
#                      axis 1, one device), each SET one more --set (no spaces in it)
#   mesh NAME          "DEVICES SHAPE [SET...]": the layout's device count and its /mesh/shape
#   mesh_shape AXES    AXES as a /mesh/shape value: a size for each axis of the default mesh, in
#                      the order `$AXLC kinds device_mesh` prints them (the axis table's), 1
#                      where AXES does not name the axis
#   ref_mesh NAME      the one-device layout a layout is compared with: one, or onemb2 / onemb4 /
#                      onemb8 (one device with the same microbatches: a MoE's load-balance loss
#                      is per microbatch, so N microbatches are not the whole batch's step there)
# MESH: one, data2, data4, fsdp4, model2, model4, data2model2, expert2, expert2fsdp2; fsdp2, fsdp2mb2, fsdp2mb4
# (fsdp=2 with 1, 2, 4 microbatches: each rank steps over slices of its rows); onemb2, onemb4;
# seq2 (context parallelism: each rank its half of every sequence, K and V gathered), seq2model2,
# seq2bal, seq4bal, seq2balmodel2 (the balanced order: rank c the chunks c and 2S - 1 - c of 2S),
# spmodel2 (Megatron sequence parallelism: /mesh/sequence_parallel on model=2), spseq2model2 (both);
# pipelines (docs/pipeline.md): pp2gpipemb4, pp2gpipemb8, pp2f1bmb4, pp2f1bmb8 (pipeline=2, GPipe
# or 1F1B, 4 or 8 microbatches), pp2data2mb4 (x data=2, 1F1B), pp2model2mb4 (x model=2, GPipe),
# pp4f1bmb4 (pipeline=4, 1F1B: a stage per layer of fuji-test), pp2expert2mb4 (x expert=2),
# pp2intmb4 and pp2intdata2mb4 (interleaved 1F1B, 2 chunks per stage; x data=2).
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
layout() {
  case $1 in
  one) echo "-" ;;
  data2) echo "data=2" ;;
  data4) echo "data=4" ;;
  fsdp4) echo "fsdp=4" ;;
  model2) echo "model=2" ;;
  model4) echo "model=4" ;;
  data2model2) echo "data=2,model=2" ;;
  expert2) echo "expert=2" ;;
  expert2fsdp2) echo "expert=2,fsdp=2" ;;
  fsdp2) echo "fsdp=2" ;;
  fsdp2mb2) echo "fsdp=2 /learner/microbatches=2" ;;
  fsdp2mb4) echo "fsdp=2 /learner/microbatches=4" ;;
  onemb2) echo "- /learner/microbatches=2" ;;
  onemb4) echo "- /learner/microbatches=4" ;;
  onemb8) echo "- /learner/microbatches=8" ;;
  pp2gpipemb4) echo "pipeline=2 /learner/microbatches=4 /mesh/pipeline_schedule=gpipe" ;;
  pp2gpipemb8) echo "pipeline=2 /learner/microbatches=8 /mesh/pipeline_schedule=gpipe" ;;
  pp2f1bmb4) echo "pipeline=2 /learner/microbatches=4 /mesh/pipeline_schedule=1f1b" ;;
  pp2f1bmb8) echo "pipeline=2 /learner/microbatches=8 /mesh/pipeline_schedule=1f1b" ;;
  pp4f1bmb4) echo "pipeline=4 /learner/microbatches=4 /mesh/pipeline_schedule=1f1b" ;;
  pp2intmb4) echo "pipeline=2 /learner/microbatches=4 /mesh/pipeline_schedule=interleaved" ;;
  pp2intdata2mb4) echo "pipeline=2,data=2 /learner/microbatches=4 /mesh/pipeline_schedule=interleaved" ;;
  pp2data2mb4) echo "pipeline=2,data=2 /learner/microbatches=4 /mesh/pipeline_schedule=1f1b" ;;
  pp2model2mb4) echo "pipeline=2,model=2 /learner/microbatches=4 /mesh/pipeline_schedule=gpipe" ;;
  pp2expert2mb4) echo "pipeline=2,expert=2 /learner/microbatches=4 /mesh/pipeline_schedule=1f1b" ;;
  seq2) echo "seq=2" ;;
  seq2bal) echo "seq=2 /mesh/seq_order=balanced" ;;
  seq4bal) echo "seq=4 /mesh/seq_order=balanced" ;;
  seq2balmodel2) echo "seq=2,model=2 /mesh/seq_order=balanced" ;;
  seq2model2) echo "seq=2,model=2" ;;
  spmodel2) echo "model=2 /mesh/sequence_parallel=true" ;;
  spseq2model2) echo "seq=2,model=2 /mesh/sequence_parallel=true" ;;
  *) echo "layouts.sh: unknown layout $1" >&2 ;;
  esac
}
# The default mesh's axes, outermost first ("pipeline data ..."), as axlc's schema lists them.
LAYOUT_AXES=$("$AXLC" kinds device_mesh | sed -n 's/^ *axes .* default \[\([^]]*\)\].*/\1/p' | tr -d '",')
[ -n "$LAYOUT_AXES" ] || echo "layouts.sh: no axes in \`$AXLC kinds device_mesh\`" >&2
mesh_shape() {
  for kv in $(echo "$1" | tr , ' '); do
    case " $LAYOUT_AXES " in
    *" ${kv%%=*} "*) ;;
    *)
      echo "layouts.sh: $1: no mesh axis ${kv%%=*} (the axes: $LAYOUT_AXES)" >&2
      return 1
      ;;
    esac
  done
  shape=
  for a in $LAYOUT_AXES; do
    n=1
    for kv in $(echo "$1" | tr , ' '); do
      [ "${kv%%=*}" = "$a" ] && n=${kv#*=}
    done
    shape="$shape${shape:+,}$n"
  done
  echo "[$shape]"
}
mesh() {
  set -- $(layout "$1")
  axes=$1
  shift
  [ "$axes" = - ] && axes=
  n=1
  for kv in $(echo "$axes" | tr , ' '); do n=$((n * ${kv#*=})); done
  echo "$n $(mesh_shape "$axes")${*:+ $*}"
}
# sets SET...: each SET as --set SET
sets() {
  for s in "$@"; do printf -- '--set %s ' "$s"; done
}
ref_mesh() {
  case $1 in
  *mb2) echo onemb2 ;;
  *mb4) echo onemb4 ;;
  *mb8) echo onemb8 ;;
  *) echo one ;;
  esac
}
