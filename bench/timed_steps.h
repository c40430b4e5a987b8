// The measurement protocol the training benchmarks share: warm-up steps,
// then the world's byte counters and every device's memory peak are
// cleared, then the timed steps run on the wall clock, in one or more
// windows of `steps` steps each.
#pragma once

#include <algorithm>
#include <chrono>

#include "runtime/thread_world.h"

namespace sharc::bench {

struct Timing {
  double step_s = 0;  // seconds per step in the fastest window
  int steps = 0;      // steps run after the warm-up, over every window
};

// Runs step(0 .. warmup-1) untimed, then `windows` timed windows of `steps`
// steps each, numbering the steps on from the warm-up. The fastest window
// gives the step time: on a shared machine a neighbour's burst slows some
// windows, never speeds one up, so the minimum is the least disturbed.
template <class Step>
Timing timed_steps(rt::ThreadWorld& world, int warmup, int steps, Step&& step, int windows = 1) {
  for (int s = 0; s < warmup; ++s) step(s);
  world.reset_stats();
  for (int r = 0; r < world.size(); ++r) world.memory(r).reset_peak();
  Timing t;
  for (int w = 0; w < windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) step(warmup + t.steps + s);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.step_s = w == 0 ? wall / steps : std::min(t.step_s, wall / steps);
    t.steps += steps;
  }
  return t;
}

}  // namespace sharc::bench
