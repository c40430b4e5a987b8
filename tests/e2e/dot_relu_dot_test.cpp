// DotReluDot from the seed, end to end on the in-process path: trace, lower for
// each mesh, run the per-device program on 8 simulated devices, compare with
// the double-precision oracle.
#include <gtest/gtest.h>

#include <cmath>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "samples/dot_relu_dot/model.h"

namespace sharc {
namespace {

HostValues make_input(int64_t n) {
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::sin(0.37 * i) + 0.25);
  return {{"x", x}};
}

// fp32 per-device math against the fp64 oracle: a 1024-long dot of O(1)
// values accumulates ~1e-7 relative error per term; 1e-5 relative to the
// output's max magnitude leaves a 10x margin.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0, worst = 0;
  size_t at = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - want[i]) > worst) worst = std::fabs(got[i] - want[i]), at = i;
  EXPECT_LE(worst, rtol * scale) << "max abs error " << worst << " at " << at << ": got " << got[at]
                                 << " want " << want[at] << " (scale " << scale << ")";
}

class DotReluDotMeshes : public ::testing::TestWithParam<std::string> {};

TEST_P(DotReluDotMeshes, MatchesOracle) {
  ir::Graph g = trace("dot_relu_dot", [](ProgramBuilder& b) { dot_relu_dot::build_dot_relu_dot(b); });
  Lowered l = lower(g, Mesh::parse(GetParam(), 8));
  auto in = make_input(dot_relu_dot::kBatch * dot_relu_dot::kDepth);
  auto want = interpret(g, in, 0);
  auto got = execute_partitioned(l.partitioned, in, 0);
  expect_close(got.outputs.at("y"), want.at("y"), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Meshes, DotReluDotMeshes,
                         ::testing::Values("data=8,model=1", "data=4,model=2", "data=2,model=4",
                                           "data=1,model=8"));

}  // namespace
}  // namespace sharc
