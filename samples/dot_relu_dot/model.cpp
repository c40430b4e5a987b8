// The DotReluDot programs for the generator: sharc_add_program() links this
// file with the generator's main(), which looks the programs up by name.
// The models themselves live in model.h (forward) and train_model.h, shared
// with the tests and the sample's driver.
#include "samples/dot_relu_dot/model.h"

#include "samples/dot_relu_dot/train_model.h"

// The seed's model on a mesh with 'data' and 'model' axes.
SHARC_PROGRAM(dot_relu_dot, b) {
  dot_relu_dot::build_dot_relu_dot(b);
}

// The same model annotated with logical axis names; the program-wide rules
// map them to mesh axes ('batch'->'data', 'hidden'->'model', 'embed'->None).
SHARC_PROGRAM(logical_dot_relu_dot, b) {
  b.set_logical_rules(dot_relu_dot::kShardingRules);
  dot_relu_dot::build_logical_dot_relu_dot(b);
}

// One training step (Adam 1e-3, mean squared error) of the logical-names
// variant, which runs on any strategy's mesh (train_model.h). Option "bf16"
// (default 0; 1: bf16 compute on f32 master weights).
SHARC_PROGRAM(dot_relu_dot_train, b) {
  if (b.option("bf16", 0) != 0) b.set_dtype(sharc::DType::kBF16);
  dot_relu_dot::build_dot_relu_dot_train(b);
}
