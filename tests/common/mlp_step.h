// One training step of a generated MLP classifier program (the
// samples/mlp_classifier model's mlp_train, on any mesh) on fixed inputs,
// for the suites that compare it with a prediction (the report, the
// planner). Header-only.
#pragma once

#include <cstddef>
#include <vector>

#include "codegen/report.h"
#include "runtime/thread_world.h"

namespace sharc::testing {

// Deterministic values in [-1, 1), varied by `salt`.
inline std::vector<float> fixed_values(size_t n, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 2654435761u + salt) % 2001) - 1000) / 1000.0f;
  return v;
}

// The inputs and outputs of the MLP's step, made once: fixed images
// (fixed_values, salt 2) and labels i % 10.
template <class Program>
struct MlpFeed {
  std::vector<float> images = fixed_values(Program::input_info("images").elements(), 2);
  std::vector<float> labels = [] {
    std::vector<float> l(Program::input_info("labels").elements());
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(i % 10);
    return l;
  }();
  float loss = 0, accuracy = 0, grad_norm = 0, lr = 0;

  // One step of `program` on the fixed batch; the loss lands in `loss`.
  void step(Program& program) {
    typename Program::Inputs in;
    in.images = images.data();
    in.labels = labels.data();
    typename Program::Outputs out;
    out.loss = &loss;
    out.accuracy = &accuracy;
    out.grad_norm = &grad_norm;
    out.lr = &lr;
    program.step(in, out);
  }
};

struct MlpStep {
  float loss = 0;
  Measured measured;  // every device's bytes, calls and peak after the step
};

// Constructs the program on `world`, inits it (seed 0), resets the byte
// counters (init sends nothing, but say so) and runs one step of MlpFeed.
// The peak covers construction (the parameter shards), init and the step,
// as the report predicts.
template <class Program>
MlpStep mlp_train_step(rt::ThreadWorld& world) {
  Program prog(world);
  prog.init(0);
  world.reset_stats();
  MlpFeed<Program> feed;
  feed.step(prog);
  return {.loss = feed.loss, .measured = measure(world)};
}

}  // namespace sharc::testing
