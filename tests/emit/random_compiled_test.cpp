// Random programs from the fuzz suite, emitted as C++ at build time
// (random_emit_main.cpp), compiled into this one binary, run on the thread
// runtime and compared with the oracle: the emitted code, not only the
// per-device interpreter, must agree on programs nobody wrote by hand.
// Built twice: emit_random_compiled_test (BACKEND cpu, rt::ThreadWorld) and
// emit_random_cuda_sim_test (BACKEND cuda on gpu::SimGpuWorld, with
// SHARC_RANDOM_CUDA=1: at least 100 programs).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/emit/random_cases.h"
#include "tests/fuzz/random_program.h"

namespace {

// Same tolerance as the fuzz suite (tests/fuzz/random_partitioning_test.cpp):
// the generator keeps values O(1) and inside the ops' domains, so fp32 against
// fp64 is ~1e-6 relative to the output's magnitude; 1e-4 leaves margin.
constexpr double kRtol = 1e-4, kAtol = 1e-6;

#if SHARC_RANDOM_CUDA
TEST(EmitRandomCompiled, AtLeastAHundredCases) { EXPECT_GE(random_cases().size(), 100u); }
#else
TEST(EmitRandomCompiled, AtLeastTwentyCases) { EXPECT_GE(random_cases().size(), 20u); }
#endif

TEST(EmitRandomCompiled, GeneratedCodeMatchesOracle) {
  for (const RandomCase& c : random_cases()) {
    const sharc::fuzz::RandomProgram p = sharc::fuzz::random_program(c.seed);
    SCOPED_TRACE(p.name + " on " + p.mesh.str() + ": " + p.ops);
    const sharc::HostValues want = sharc::interpret(p.graph, p.inputs, /*seed=*/7);
    const sharc::HostValues got = c.run(p.inputs, /*seed=*/7);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) {
      const auto& g = got.at(name);
      ASSERT_EQ(g.size(), w.size()) << name;
      double scale = 0, worst = 0;
      for (double x : w) scale = std::max(scale, std::fabs(x));
      for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
      EXPECT_LE(worst, kRtol * scale + kAtol)
          << "output " << name << ": max abs error " << worst << " (max|want| " << scale << ")\n"
          << sharc::ir::to_string(p.graph);
    }
  }
}

}  // namespace
