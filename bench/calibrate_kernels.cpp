// See calibrate_kernels.h.
#include "bench/calibrate_kernels.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runtime/elementwise.h"
#include "runtime/philox.h"

namespace sharc::bench {

double transcendental_seconds(rt::ThreadWorld& world, int repeats) {
  const int devices = world.size();
  const int64_t e = 4096;  // 16 KiB a block
  const int reps = 400;
  std::vector<std::vector<float>> x(devices, std::vector<float>(e, 0.25f)), y = x;
  double mean = 0;
  // One function over a block, as a generated loop calls it (its
  // iterations independent), by every device at once.
  auto time_each = [&](const char* name, auto block) {
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      world.run([&](int d) {
        for (int i = 0; i < reps; ++i) block(x[d].data(), y[d].data(), i);
      });
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double each = best / (static_cast<double>(reps) * e);
    std::fprintf(stderr, "sharc-calibrate: %s: %.3g s an element\n", name, each);
    mean += each / 3;
  };
  time_each("exp", [&](const float* in, float* out, int) {
    SHARC_INDEPENDENT_ITERATIONS
    for (int64_t j = 0; j < e; ++j) out[j] = rt::exp(in[j]);
  });
  time_each("gelu", [&](const float* in, float* out, int) {
    SHARC_INDEPENDENT_ITERATIONS
    for (int64_t j = 0; j < e; ++j) out[j] = rt::gelu(in[j]);
  });
  time_each("random_uniform", [&](const float*, float* out, int i) {
    rt::uniform_fill(0x5eed, static_cast<uint64_t>(i) * e, e, out);
  });
  return mean;
}

void add_in_place(float* c, const float* x, int64_t n) {
  SHARC_INDEPENDENT_ITERATIONS
  for (int64_t j = 0; j < n; ++j) c[j] += x[j];
}

}  // namespace sharc::bench
