// partition_per_device on small hand-written programs: which collectives a
// reduction produces, and that the per-device program still computes the
// oracle's values. Regression tests for bugs the fuzzer (tests/fuzz/) found.
#include <gtest/gtest.h>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"

namespace sharc {
namespace {

int count(const ir::Graph& g, ir::Op op) {
  int n = 0;
  for (auto& node : g.nodes) n += node.op == op;
  return n;
}

HostValues iota_input(const std::string& name, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7) % 11) - 5.0;
  return {{name, v}};
}

// A max over a dimension no device splits is purely local. It used to leave
// partial_kind = max on a sharding with no partial axes, which reshard()
// could never match ("reshard did not reach [{"a"}] from [{"a"}]").
TEST(PartitionPerDevice, MaxOverUnshardedDimensionIsLocal) {
  const ir::Graph g = trace("max_local", [](ProgramBuilder& b) {
    b.output("y", max(b.input("x", {4, 8}, P("a", None)), {1}));
  });
  const Lowered l = lower(g, Mesh::parse("a=2", 2));
  SCOPED_TRACE(ir::to_string(l.partitioned));
  const ir::Node* reduce = nullptr;
  for (auto& n : l.partitioned.nodes)
    if (n.op == ir::Op::kReduce) reduce = &n;
  ASSERT_NE(reduce, nullptr);
  EXPECT_EQ(*reduce->sharding, (ir::Sharding{{{"a"}}, {}, ir::ReduceKind::kSum}));
  for (ir::Op op :
       {ir::Op::kAllGather, ir::Op::kAllReduce, ir::Op::kReduceScatter, ir::Op::kAllToAll})
    EXPECT_EQ(count(l.partitioned, op), 0) << ir::op_name(op);
  const HostValues in = iota_input("x", 32);
  EXPECT_EQ(execute_partitioned(l.partitioned, in, 0).outputs, interpret(g, in, 0));
}

// Over the split dimension, each device's max is partial; the scalar result
// has no dimension to scatter onto, so it is a max all-reduce.
TEST(PartitionPerDevice, MaxOverShardedDimensionIsMaxAllReduce) {
  const ir::Graph g = trace(
      "max_all", [](ProgramBuilder& b) { b.output("y", max(b.input("x", {8}, P("a")), {0})); });
  const Lowered l = lower(g, Mesh::parse("a=4", 4));
  SCOPED_TRACE(ir::to_string(l.partitioned));
  ASSERT_EQ(count(l.partitioned, ir::Op::kAllReduce), 1);
  for (auto& n : l.partitioned.nodes)
    if (n.op == ir::Op::kAllReduce) {
      EXPECT_EQ(n.reduce, ir::ReduceKind::kMax);
      EXPECT_EQ(n.axes, (std::vector<std::string>{"a"}));
    }
  const HostValues in = iota_input("x", 8);
  EXPECT_EQ(execute_partitioned(l.partitioned, in, 0).outputs, interpret(g, in, 0));
}

}  // namespace
}  // namespace sharc
