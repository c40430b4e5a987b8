// The MLP classifier's programs, registered for the generator: one training
// step (AdamW, warmup + cosine schedule) and an evaluation forward pass. Which
// strategy they run is decided by the MESH each sharc_add_program call gives
// (see model.h); the model code is the same for all of them.
#include "samples/mlp_classifier/model.h"

namespace {
constexpr int64_t kEvalBatch = 1000;  // the 10,000 test images in 10 batches
}

SHARC_PROGRAM(mlp_train, b) {
  mlp_classifier::build_train(b, mlp_classifier::Config{}, mlp_classifier::default_optimizer());
}

SHARC_PROGRAM(mlp_eval, b) {
  mlp_classifier::Config c;
  c.batch = kEvalBatch;
  mlp_classifier::build_eval(b, c);
}
