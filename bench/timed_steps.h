// The measurement protocol the training benchmarks share: warm-up steps,
// then the world's byte counters and every device's memory peak are
// cleared, then the timed steps run on the wall clock.
#pragma once

#include <chrono>

#include "runtime/thread_world.h"

namespace sharc::bench {

// Runs step(0 .. warmup-1) untimed, then step(warmup .. warmup+steps-1);
// returns the seconds the timed steps took.
template <class Step>
double timed_steps(rt::ThreadWorld& world, int warmup, int steps, Step&& step) {
  for (int s = 0; s < warmup; ++s) step(s);
  world.reset_stats();
  for (int r = 0; r < world.size(); ++r) world.memory(r).reset_peak();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step(warmup + s);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace sharc::bench
