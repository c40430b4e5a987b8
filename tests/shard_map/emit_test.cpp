// Generated C++ for a shard_map program (TPAsyncDense's ppermute ring,
// axis_index, TPDense's psum_scatter) equals execute_partitioned on the same
// per-device IR bit for bit, and the oracle within 1e-5.
#include <gtest/gtest.h>

#include <cmath>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "shard_map_tp_async_2x4.h"

namespace sharc {
namespace {

namespace gen = sharc_gen::shard_map_tp_async_2x4;

TEST(ShardMapEmit, TPAsyncDenseBitwiseEqualToInterpreter) {
  constexpr uint64_t kSeed = 11;
  std::vector<float> x(8 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i) + 0.25);

  rt::ThreadWorld world(gen::mesh_shape());
  gen::Program program(world);
  program.init(kSeed);
  std::vector<float> y(8 * 16, 0.0f);
  gen::Program::Inputs in;
  gen::Program::Outputs out;
  in.x = x.data();
  out.y = y.data();
  program.forward(in, out);

  ir::Graph g = trace("tp_async_model", ProgramRegistry::all().at("tp_async_model"));
  Lowered l = lower(g, Mesh::parse("data=2,model=4"));
  const HostValues inputs = {{"x", std::vector<double>(x.begin(), x.end())}};
  auto got = execute_partitioned(l.partitioned, inputs, kSeed);
  const auto& want = got.outputs.at("y");
  ASSERT_EQ(want.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(static_cast<double>(y[i]), want[i]) << "at " << i;
  for (int r = 0; r < world.size(); ++r)
    EXPECT_EQ(world.comm(r).stats().total_bytes(), got.comm[r].total_bytes()) << "device " << r;

  auto oracle = interpret(l.global, inputs, kSeed).at("y");
  double scale = 0, worst = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    scale = std::max(scale, std::fabs(oracle[i]));
    worst = std::max(worst, std::fabs(oracle[i] - y[i]));
  }
  EXPECT_LE(worst, 1e-5 * scale);
}

}  // namespace
}  // namespace sharc
