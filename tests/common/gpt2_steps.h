// The GPT-2 sample's generated training programs run on fixed data, for the
// suites that compare two generated forms of it (remat policies, scanned and
// unrolled blocks): the token windows, and `steps` steps of a Program on a
// ThreadWorld with the memory measured after the first. Header-only.
#pragma once

#include <cstddef>
#include <vector>

#include "codegen/report.h"
#include "runtime/thread_world.h"
#include "samples/gpt2/train_step.h"

namespace sharc::testing {

// Token i of the fixed windows, or of their targets.
inline float gpt2_token(size_t i, bool target) { return static_cast<float>((i * 7 + (target ? 10 : 3)) % 64); }

// The fixed windows and their targets for Program's "tokens" shape, made
// once; step(program, seed) runs one training step on them.
template <class Program>
struct Gpt2Feed {
  std::vector<float> tokens, targets;
  Gpt2Feed() : tokens(Program::input_info("tokens").elements()), targets(tokens.size()) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = gpt2_token(i, false);
      targets[i] = gpt2_token(i, true);
    }
  }
  gpt2::StepResult step(Program& program, float seed) {
    return gpt2::train_step(program, tokens.data(), targets.data(), seed);
  }
};

struct Gpt2Steps {
  std::vector<float> losses;  // per step
  Measured first;             // after construction, init(0) and the first step
};

// `steps` steps of Program from init(0); step s draws dropout with seed s + 1.
template <class Program>
Gpt2Steps run_gpt2_steps(int steps) {
  rt::ThreadWorld world(Program::mesh_shape());
  Program prog(world);
  prog.init(0);
  world.reset_stats();
  Gpt2Feed<Program> feed;
  Gpt2Steps r;
  for (int step = 0; step < steps; ++step) {
    r.losses.push_back(feed.step(prog, static_cast<float>(step + 1)).loss);
    if (step == 0) r.first = measure(world);
  }
  return r;
}

}  // namespace sharc::testing
