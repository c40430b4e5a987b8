// The MLP classifier's programs, registered for the generator: one training
// step (AdamW, warmup + cosine schedule) and an evaluation forward pass. Which
// strategy they run is decided by the MESH each sharc_add_program call gives
// (see model.h); the model code is the same for all of them.
#include "samples/mlp_classifier/model.h"

namespace {
constexpr int64_t kEvalBatch = 1000;  // the 10,000 test images in 10 batches
}

// Option "clip" (default 0, none): the gradients' global norm is clipped at
// this value (optax.clip_by_global_norm). Option "ring" (default 0, the size
// threshold decides; 1: every dot whose all-gather or reduce-scatter can be
// a ring is one, its transfers beside its GEMMs).
SHARC_PROGRAM(mlp_train, b) {
  if (b.option("ring", 0) != 0) b.set_collective_matmul(sharc::CollectiveMatmul::kAlways);
  const int64_t clip = b.option("clip", 0);
  sharc::TrainOptions o;
  if (clip > 0) o.clip_global_norm = static_cast<double>(clip);
  mlp_classifier::build_train(b, mlp_classifier::Config{}, mlp_classifier::default_optimizer(), o);
}

// The same step in bf16 mixed precision (--dtype bf16): activations and
// matmul inputs in bf16, f32 master weights and AdamW state, f32 loss. The
// model code is the same; evaluation stays f32 on the trained weights.
SHARC_PROGRAM(mlp_train_bf16, b) {
  b.set_dtype(sharc::DType::kBF16);
  mlp_classifier::build_train(b, mlp_classifier::Config{}, mlp_classifier::default_optimizer());
}

// The same step pipelined over a 'pipe' axis (--mesh pipe=2): the model code
// is the same, set_pipeline says how.
SHARC_PROGRAM(mlp_train_pipelined, b) {
  b.set_pipeline(mlp_classifier::pipeline());
  mlp_classifier::build_train(b, mlp_classifier::Config{}, mlp_classifier::default_optimizer());
}

// The same step with its layouts from path rules (path_rules(), Scalax's
// TreePathShardingRule) instead of the logical names and FSDP; run it on a
// mesh with 'fsdp' and 'model' (docs/guide/from-jax.md uses fsdp=2,model=4).
SHARC_PROGRAM(mlp_train_path_rules, b) {
  mlp_classifier::build_train(b, mlp_classifier::Config{}, mlp_classifier::default_optimizer(), {},
                              mlp_classifier::path_rules());
}

SHARC_PROGRAM(mlp_eval, b) {
  mlp_classifier::Config c;
  c.batch = kEvalBatch;
  mlp_classifier::build_eval(b, c);
}
