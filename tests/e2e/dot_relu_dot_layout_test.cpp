// The layouts and collectives the seed's DotReluDot gets on the mesh
// <["data"=2, "model"=4]>, as in the Flax NNX guide: dot1's kernel is split by
// columns over 'model' (and replicated over 'data'), the second matmul is a
// local dot followed by a reduce-scatter over 'model' (never an all-reduce),
// and the output is batch-sharded over 'data'. LogicalDotReluDot, which spells
// the same layouts with logical names and rules, must end up identical.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/passes/partition_per_device.h"
#include "codegen/pipeline.h"
#include "samples/dot_relu_dot/model.h"

namespace sharc {
namespace {

using Dims = std::vector<std::vector<std::string>>;

const Mesh& mesh_2x4() {
  static const Mesh mesh = Mesh::parse("data=2,model=4", 8);
  return mesh;
}

Lowered lower_dot_relu_dot(bool logical) {
  ir::Graph g = trace("dot_relu_dot", [logical](ProgramBuilder& b) {
    if (logical)
      dot_relu_dot::build_logical_dot_relu_dot(b);
    else
      dot_relu_dot::build_dot_relu_dot(b);
  });
  PipelineOptions options;
  if (logical) options.rules = dot_relu_dot::kShardingRules;
  return lower(std::move(g), mesh_2x4(), options);
}

const ir::Node& param(const ir::Graph& g, const std::string& name) {
  const ir::Node* n = g.find(name, ir::Op::kParameter);
  if (!n) throw std::runtime_error("no parameter " + name + " in\n" + ir::to_string(g));
  return *n;
}

const ir::Output& output(const ir::Graph& g, const std::string& name) {
  for (auto& o : g.outputs)
    if (o.name == name) return o;
  throw std::runtime_error("no output " + name + " in\n" + ir::to_string(g));
}

HostValues make_input() {
  std::vector<double> x(dot_relu_dot::kBatch * dot_relu_dot::kDepth);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.11 * i) - 0.1);
  return {{"x", x}};
}

TEST(DotReluDotLayout, Dot1KernelIsColumnShardedOverModel) {
  const Lowered l = lower_dot_relu_dot(false);
  const ir::Node& k = param(l.global, "dot1/kernel");
  ASSERT_TRUE(k.sharding.has_value());
  EXPECT_EQ(k.sharding->dims, (Dims{{}, {"model"}})) << k.sharding->str();
  EXPECT_TRUE(k.sharding->partial.empty());
  EXPECT_EQ(k.sharding->str(), "[{}, {\"model\"}]");

  // Column block k of the kernel lives on exactly the devices {k, k+4}: the
  // two devices with model coordinate k, one per 'data' row (rank = data*4 + model).
  std::map<int64_t, std::set<int>> holders;  // column block -> ranks
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(block_index(*k.sharding, 0, mesh_2x4(), rank), 0) << "rank " << rank;
    holders[block_index(*k.sharding, 1, mesh_2x4(), rank)].insert(rank);
  }
  const std::map<int64_t, std::set<int>> want = {
      {0, {0, 4}}, {1, {1, 5}}, {2, {2, 6}}, {3, {3, 7}}};
  EXPECT_EQ(holders, want);

  // Each device holds a (1024, 256) block of the (1024, 1024) kernel.
  const ir::Node& local = param(l.partitioned, "dot1/kernel");
  EXPECT_EQ(local.shape, (ir::Shape{1024, 256}));
}

TEST(DotReluDotLayout, OutputIsBatchShardedOverData) {
  const Lowered l = lower_dot_relu_dot(false);
  const ir::Output& y = output(l.global, "y");
  ASSERT_TRUE(y.sharding.has_value());
  EXPECT_EQ(y.sharding->dims, (Dims{{"data"}, {}})) << y.sharding->str();
  EXPECT_TRUE(y.sharding->partial.empty());
  const ir::Output& local_y = output(l.partitioned, "y");
  EXPECT_EQ(*local_y.sharding, *y.sharding);
  EXPECT_EQ(l.partitioned[local_y.value].shape, (ir::Shape{4, 1024}));
}

TEST(DotReluDotLayout, SecondMatmulIsLocalDotThenReduceScatterOverModel) {
  const Lowered l = lower_dot_relu_dot(false);
  const ir::Graph& g = l.partitioned;
  SCOPED_TRACE("partitioned IR:\n" + ir::to_string(g));
  int w2 = -1, dot = -1;
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const ir::Node& n = g[id];
    if (n.op == ir::Op::kParameter && n.name == "w2") w2 = id;
    if (w2 >= 0 && n.op == ir::Op::kDot && (n.args[0] == w2 || n.args[1] == w2)) {
      EXPECT_EQ(dot, -1) << "two dots use w2";
      dot = id;
    }
    EXPECT_NE(n.op, ir::Op::kAllReduce) << "all_reduce at " << ir::node_str(g, id);
  }
  ASSERT_GE(w2, 0);
  ASSERT_GE(dot, 0) << "no dot takes parameter w2 directly";
  // The local dot contracts this device's 256 hidden units: a partial sum
  // over 'model' of the full (4, 1024) result.
  EXPECT_EQ(g[dot].shape, (ir::Shape{4, 1024}));
  EXPECT_EQ(g[dot].sharding->partial, (std::vector<std::string>{"model"}));
  // ...directly followed by the reduce-scatter of that partial result.
  ASSERT_LT(dot + 1, static_cast<int>(g.nodes.size()));
  const ir::Node& rs = g[dot + 1];
  EXPECT_EQ(rs.op, ir::Op::kReduceScatter) << ir::node_str(g, dot + 1);
  EXPECT_EQ(rs.args, (std::vector<int>{dot}));
  EXPECT_EQ(rs.axes, (std::vector<std::string>{"model"}));
  EXPECT_EQ(rs.reduce, ir::ReduceKind::kSum);
  EXPECT_TRUE(rs.sharding->partial.empty());
}

TEST(DotReluDotLayout, LogicalVariantHasTheSameLayoutsAndValues) {
  const Lowered plain = lower_dot_relu_dot(false);
  const Lowered logical = lower_dot_relu_dot(true);
  SCOPED_TRACE("logical global IR:\n" + ir::to_string(logical.global));
  for (const char* name : {"dot1/kernel", "w2"}) {
    const ir::Node& a = param(plain.global, name);
    const ir::Node& b = param(logical.global, name);
    EXPECT_EQ(*a.sharding, *b.sharding)
        << name << ": " << a.sharding->str() << " vs " << b.sharding->str();
  }
  EXPECT_EQ(param(logical.global, "w2").sharding->dims, (Dims{{"model"}, {}}));
  EXPECT_EQ(*output(plain.global, "y").sharding, *output(logical.global, "y").sharding);

  // Same weights (same paths and seed), same per-device math up to where the
  // intermediate lives; allow 1e-6 relative to the output's magnitude for a
  // different summation order, though in practice the values are bitwise equal.
  const HostValues in = make_input();
  const ExecResult a = execute_partitioned(plain.partitioned, in, 7);
  const ExecResult b = execute_partitioned(logical.partitioned, in, 7);
  const auto& ya = a.outputs.at("y");
  const auto& yb = b.outputs.at("y");
  ASSERT_EQ(ya.size(), yb.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < ya.size(); ++i) {
    scale = std::max(scale, std::fabs(ya[i]));
    worst = std::max(worst, std::fabs(ya[i] - yb[i]));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(worst, 1e-6 * scale) << "max abs difference " << worst << " (scale " << scale << ")";
  EXPECT_EQ(a.params, b.params);
}

}  // namespace
}  // namespace sharc
