// Parameters are initialised shard by shard: each device evaluates the
// initializer only for the block it owns (largest_param_bytes proves no device
// allocates a whole sharded parameter), and because values are a pure function
// of (seed, path, global index), the global weights assembled from the shards
// are bitwise identical on every mesh and equal the oracle's init_global().
// The second half checks the initializers' statistics against Flax's
// definitions on a 1024 x 1024 tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "samples/dot_relu_dot/model.h"

namespace sharc {
namespace {

constexpr uint64_t kSeed = 42;
constexpr size_t kFullBytes = 1024 * 1024 * sizeof(float);  // one (1024, 1024) f32 weight

ir::Graph trace_dot_relu_dot() {
  return trace("dot_relu_dot", [](ProgramBuilder& b) { dot_relu_dot::build_dot_relu_dot(b); });
}

HostValues zero_input() {
  return {{"x", std::vector<double>(dot_relu_dot::kBatch * dot_relu_dot::kDepth, 0.0)}};
}

bool bitwise_equal(const std::vector<double>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = static_cast<float>(got[i]);
    if (static_cast<double>(g) != got[i] || std::memcmp(&g, &want[i], sizeof(float)) != 0)
      return false;
  }
  return true;
}

struct MeshCase {
  const char* mesh;
  int model;  // size of the 'model' axis, which splits both weights
};

class InitPerMesh : public ::testing::TestWithParam<MeshCase> {};

TEST_P(InitPerMesh, EachDeviceAllocatesOnlyItsShard) {
  const MeshCase c = GetParam();
  const Lowered l = lower(trace_dot_relu_dot(), Mesh::parse(c.mesh, 8));
  const ExecResult r = execute_partitioned(l.partitioned, zero_input(), kSeed);
  // Both weights are split c.model ways (dot1/kernel by columns, w2 by rows)
  // and replicated over 'data', so every device holds one (1024, 1024/model)
  // or (1024/model, 1024) block of each: full/model bytes.
  const size_t shard_bytes = kFullBytes / c.model;
  ASSERT_EQ(r.largest_param_bytes.size(), 8u);
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(r.largest_param_bytes[rank], shard_bytes) << "rank " << rank;
    if (c.model > 1) {
      EXPECT_LT(r.largest_param_bytes[rank], kFullBytes) << "rank " << rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, InitPerMesh,
    ::testing::Values(MeshCase{"data=8,model=1", 1}, MeshCase{"data=4,model=2", 2},
                      MeshCase{"data=2,model=4", 4}, MeshCase{"data=1,model=8", 8}),
    [](const auto& info) { return "model" + std::to_string(info.param.model); });

TEST(InitAcrossMeshes, GlobalWeightsAreBitwiseIdenticalAndEqualInitGlobal) {
  const ir::Graph traced = trace_dot_relu_dot();
  std::vector<HostValues> params;
  for (const char* mesh :
       {"data=8,model=1", "data=4,model=2", "data=2,model=4", "data=1,model=8"}) {
    const Lowered l = lower(traced, Mesh::parse(mesh, 8));
    params.push_back(execute_partitioned(l.partitioned, zero_input(), kSeed).params);
    ASSERT_EQ(params.back().size(), 2u) << mesh;
  }
  for (const char* name : {"dot1/kernel", "w2"}) {
    SCOPED_TRACE(name);
    const ir::Node* node = traced.find(name, ir::Op::kParameter);
    ASSERT_NE(node, nullptr);
    const std::vector<float> want = init_global(*node, kSeed);
    ASSERT_EQ(want.size(), 1024u * 1024u);
    for (size_t m = 0; m < params.size(); ++m) {
      const std::vector<double>& got = params[m].at(name);
      EXPECT_TRUE(bitwise_equal(got, want)) << "mesh #" << m;
      EXPECT_TRUE(got == params[0].at(name)) << "mesh #" << m << " differs from mesh #0";
    }
  }
  // Different paths give different weights (the path keys the generator).
  EXPECT_NE(params[0].at("dot1/kernel"), params[0].at("w2"));
}

// Statistics of one (1024, 1024) parameter, sharded over 'model' on a 2x4 mesh
// and assembled from the devices' shards.
struct Stats {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

std::vector<double> init_sharded(Initializer init, ir::Shape shape) {
  const ir::Graph g = trace("init", [&](ProgramBuilder& b) {
    std::vector<DimSpec> spec(shape.size());
    spec.back() = "model";
    b.output("w", b.scope().param("w", shape, with_partitioning(init, P(spec))));
  });
  const Lowered l = lower(g, Mesh::parse("data=2,model=4", 8));
  const ExecResult r = execute_partitioned(l.partitioned, {}, kSeed);
  const std::vector<double>& w = r.params.at("w");
  EXPECT_TRUE(bitwise_equal(w, init_global(g.nodes[0], kSeed)));
  EXPECT_EQ(r.outputs.at("w"), w);
  return w;
}

Stats stats_of(const std::vector<double>& w) {
  Stats s;
  s.min = *std::min_element(w.begin(), w.end());
  s.max = *std::max_element(w.begin(), w.end());
  for (double x : w) s.mean += x;
  s.mean /= static_cast<double>(w.size());
  for (double x : w) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(s.stddev / static_cast<double>(w.size()));
  return s;
}

// With N = 2^20 samples the sample mean's standard error is stddev/1024 and
// the sample stddev's relative standard error about 1/sqrt(2N) = 0.07%, so the
// bounds below (5 standard errors for the mean, 2% for the stddev) can only
// fail for a wrong distribution, not by chance.
TEST(InitStatistics, LecunNormal) {
  const std::vector<double> w = init_sharded(lecun_normal(), {1024, 1024});
  const Stats s = stats_of(w);
  const double fan_in = 1024, want_std = 1.0 / std::sqrt(fan_in);  // 0.03125
  EXPECT_NEAR(s.mean, 0.0, 5 * want_std / 1024);
  EXPECT_NEAR(s.stddev, want_std, 0.02 * want_std);
  // Truncated at 2 sigma of the unscaled normal, then divided by the
  // truncated normal's stddev (0.8796) to restore the variance.
  const double bound = 2.0 / std::sqrt(fan_in) / 0.8796;
  EXPECT_LT(std::max(-s.min, s.max), bound);
  // ...and the tails do reach close to the truncation point.
  EXPECT_GT(std::max(-s.min, s.max), 0.95 * bound);
}

TEST(InitStatistics, LecunNormalUsesFanInOfTheGlobalShape) {
  // fan_in is shape[-2] of the GLOBAL shape (256 here), not of a device's shard.
  const Stats s = stats_of(init_sharded(lecun_normal(), {256, 4096}));
  EXPECT_NEAR(s.stddev, 1.0 / 16, 0.02 / 16);
}

TEST(InitStatistics, XavierUniform) {
  const std::vector<double> w = init_sharded(xavier_uniform(), {512, 2048});
  const Stats s = stats_of(w);
  const double limit = std::sqrt(6.0 / (512 + 2048));  // U(-limit, limit)
  EXPECT_GE(s.min, -limit);
  EXPECT_LE(s.max, limit);
  EXPECT_LT(s.min, -0.999 * limit);
  EXPECT_GT(s.max, 0.999 * limit);
  EXPECT_NEAR(s.mean, 0.0, 5 * limit / std::sqrt(3.0) / 1024);
  EXPECT_NEAR(s.stddev, limit / std::sqrt(3.0), 0.02 * limit / std::sqrt(3.0));
}

TEST(InitStatistics, ZerosOnesConstantAreExact) {
  for (double v : init_sharded(zeros(), {64, 64})) ASSERT_EQ(v, 0.0);
  for (double v : init_sharded(ones(), {64, 64})) ASSERT_EQ(v, 1.0);
  for (double v : init_sharded(constant(0.25), {64, 64})) ASSERT_EQ(v, 0.25);
  for (double v : init_sharded(constant(-3.5), {8, 16, 32})) ASSERT_EQ(v, -3.5);
}

TEST(InitStatistics, NormalAndUniform) {
  const Stats n = stats_of(init_sharded(normal(0.02), {1024, 1024}));
  EXPECT_NEAR(n.mean, 0.0, 5 * 0.02 / 1024);
  EXPECT_NEAR(n.stddev, 0.02, 0.02 * 0.02);
  // flax uniform(scale): U[0, scale).
  const Stats u = stats_of(init_sharded(uniform(0.5), {1024, 1024}));
  EXPECT_GE(u.min, 0.0);
  EXPECT_LT(u.max, 0.5);
  EXPECT_NEAR(u.mean, 0.25, 5 * 0.5 / std::sqrt(12.0) / 1024);
}

}  // namespace
}  // namespace sharc
