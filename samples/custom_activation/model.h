// The custom-activation sample's model (model.cpp): its sizes and the
// activation's constants, shared by the driver (main.cpp) and the tests.
#pragma once

#include <cstdint>

#include "dsl/program.h"

namespace custom_activation {

struct Config {
  int64_t features = 32;
  int64_t hidden = 64;
  int64_t classes = 4;
  int64_t batch = 64;
};
inline constexpr double kKnee = 1.5;  // swish_knee's knee and tail slope
inline constexpr double kTail = 0.1;
inline constexpr double kLearningRate = 3e-3;

// One AdamW step (softmax cross-entropy) on inputs "x" [batch, features] and
// "labels" [batch]; outputs loss, grad_norm, lr.
void build_train(sharc::ProgramBuilder& b, const Config& c);

}  // namespace custom_activation
