// partition_per_device's resharding rules, one at a time, on single-op
// programs (an input with layout S, a with_sharding_constraint to T, the
// output; or one dot / reduce whose result is pinned): the exact collectives
// and local slices of the partitioned IR, in order, as the printer spells
// them, and that the per-device program (thread runtime) computes exactly
// what the oracle does. Inputs are small integers, so every sum here is exact
// in float32 and the comparison with the double-precision oracle is equality.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/passes/partition_per_device.h"
#include "codegen/passes/propagate_shardings.h"
#include "codegen/passes/resolve_logical_axes.h"
#include "dsl/sharc.h"

namespace sharc {
namespace {

using ir::Graph;
using ir::Op;
using Steps = std::vector<std::string>;

struct Partitioned {
  Graph global, local;
};

// lower()'s steps up to partition_per_device (cancel_reshards is tested on its own).
Partitioned partition(const ProgramFn& fn, const std::string& mesh = "a=2,b=4") {
  Graph g = trace("reshard", fn);
  g.mesh = Mesh::parse(mesh);
  g = propagate_shardings(resolve_logical_axes(std::move(g), std::optional<LogicalRules>(g.rules)));
  ir::verify(g);
  Graph local = partition_per_device(g);
  ir::verify(local);
  return {std::move(g), std::move(local)};
}

// The input x with layout s, constrained to t, is the output.
Partitioned reshard(const ir::Shape& shape, const P& s, const P& t) {
  return partition([&](ProgramBuilder& b) {
    b.output("y", with_sharding_constraint(b.input("x", shape, s), t));
  });
}

// Every collective and local slice of the per-device program, in order, printed
// without its source location (which names this file's lines).
Steps steps(const Graph& g) {
  Steps r;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    ir::Node n = g.nodes[id];
    if (!ir::is_collective(n.op) && n.op != Op::kLocalSlice) continue;
    n.loc = SrcLoc();
    n.name.clear();
    std::ostringstream os;
    os << "%" << id << " = " << n;
    r.push_back(os.str());
  }
  return r;
}

std::string joined(const Steps& s) {
  std::string r;
  for (auto& line : s) r += "\n  " + line;
  return r;
}

// Small integers in [-5, 5]: sums of their products are exact in float32.
HostValues integer_inputs(const Graph& g) {
  HostValues v;
  int k = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.op != Op::kInput) continue;
    std::vector<double>& x = v[n.name];
    for (int64_t i = 0; i < ir::num_elements(n.shape); ++i, ++k)
      x.push_back(static_cast<double>((k * 7 + 3) % 11) - 5.0);
  }
  return v;
}

void expect_matches_oracle(const Partitioned& p) {
  const HostValues in = integer_inputs(p.global);
  EXPECT_EQ(execute_partitioned(p.local, in, 1).outputs, interpret(p.global, in, 1))
      << ir::to_string(p.local);
}

#define EXPECT_STEPS(p, ...)                                                                    \
  do {                                                                                          \
    const Steps want_ = {__VA_ARGS__};                                                          \
    const Steps got_ = steps((p).local);                                                        \
    EXPECT_EQ(got_, want_) << "got:" << joined(got_) << "\nwant:" << joined(want_) << "\nin:\n" \
                           << ir::to_string((p).local);                                         \
  } while (0)

// --- Moving axes between layouts. -------------------------------------------------

TEST(PartitionPerDeviceReshard, SameLayoutIsFree) {
  const Partitioned p = reshard({8, 16}, P("a", "b"), P("a", "b"));
  EXPECT_STEPS(p);
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, DroppedAxisIsAllGathered) {
  const Partitioned p = reshard({8, 16}, P("a", None), P(None, None));
  EXPECT_STEPS(p, R"(%1 = all_gather(%0) dim=0 axes={"a"} : f32[8,16] [{}, {}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, AddedAxisIsALocalSlice) {
  const Partitioned p = reshard({8, 16}, P(None, None), P(None, "b"));
  EXPECT_STEPS(p, R"(%1 = local_slice(%0) dim=1 axes={"b"} : f32[8,4] [{}, {"b"}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, AxisMovingToAnotherDimensionIsAllToAll) {
  const Partitioned p = reshard({8, 16}, P("a", None), P(None, "a"));
  EXPECT_STEPS(p, R"(%1 = all_to_all(%0) split=1 concat=0 axes={"a"} : f32[8,8] [{}, {"a"}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, AllToAllKeepsTheOtherAxes) {
  // 'b' stays on dim 0; 'a', minor there, moves to dim 1.
  const Partitioned p = reshard({8, 16}, P(axes("b", "a"), None), P("b", "a"));
  EXPECT_STEPS(p, R"(%1 = all_to_all(%0) split=1 concat=0 axes={"a"} : f32[2,8] [{"b"}, {"a"}])");
  expect_matches_oracle(p);
}

// A mesh axis of size 1 splits nothing: layouts lose it before partitioning,
// so neither a reshard over it nor a contraction sharded on it costs a step.
TEST(PartitionPerDeviceReshard, SizeOneAxesMakeNoCollectives) {
  const Partitioned moved = partition(
      [](ProgramBuilder& b) {
        b.output("y", with_sharding_constraint(b.input("x", {8, 16}, P("a", "b")), P("b", "a")));
      },
      "a=1,b=4");
  EXPECT_STEPS(moved, R"(%1 = all_to_all(%0) split=0 concat=1 axes={"b"} : f32[2,16] [{"b"}, {}])");
  expect_matches_oracle(moved);
  const Partitioned contracted = partition(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P(None, "a"));
        Tensor w = b.input("w", {16, 4}, P("a", None));
        b.output("y", dot(x, w), P(None, None));
      },
      "a=1,b=4");
  EXPECT_STEPS(contracted);  // the partial sum over 'a' is over one device
  expect_matches_oracle(contracted);
  for (const ir::Node& n : contracted.local.nodes) {
    ASSERT_TRUE(n.sharding.has_value());
    EXPECT_FALSE(n.sharding->uses("a")) << n;
  }
}

TEST(PartitionPerDeviceReshard, MultiAxisDimensionGathersOnlyTheMinorAxis) {
  const Partitioned p = reshard({16, 8}, P(axes("a", "b"), None), P("a", None));
  EXPECT_STEPS(p, R"(%1 = all_gather(%0) dim=0 axes={"b"} : f32[8,8] [{"a"}, {}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, MultiAxisDimensionSlicesOnlyTheNewMinorAxis) {
  const Partitioned p = reshard({16, 8}, P("a", None), P(axes("a", "b"), None));
  EXPECT_STEPS(p, R"(%1 = local_slice(%0) dim=0 axes={"b"} : f32[2,8] [{"a", "b"}, {}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, ReorderedAxesAreGatheredMinorFirstThenSliced) {
  // {b, a} and {a, b} share no prefix: the blocks differ, so all of it moves.
  const Partitioned p = reshard({16, 8}, P(axes("b", "a"), None), P(axes("a", "b"), None));
  EXPECT_STEPS(p, R"(%1 = all_gather(%0) dim=0 axes={"a"} : f32[4,8] [{"b"}, {}])",
               R"(%2 = all_gather(%1) dim=0 axes={"b"} : f32[16,8] [{}, {}])",
               R"(%3 = local_slice(%2) dim=0 axes={"a"} : f32[8,8] [{"a"}, {}])",
               R"(%4 = local_slice(%3) dim=0 axes={"b"} : f32[2,8] [{"a", "b"}, {}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, GatherAndSliceInOneReshard) {
  const Partitioned p = reshard({8, 16}, P("a", None), P(None, "b"));
  EXPECT_STEPS(p, R"(%1 = all_gather(%0) dim=0 axes={"a"} : f32[8,16] [{}, {}])",
               R"(%2 = local_slice(%1) dim=1 axes={"b"} : f32[8,4] [{}, {"b"}])");
  expect_matches_oracle(p);
}

// --- Partial sums and maxes. ---------------------------------------------------------

// x (M, K) split on K over b, w (K, N) split on K over b: each device's local
// dot is a partial sum over b of the whole (M, N) result.
Partitioned sharded_contraction(int64_t m, int64_t n, const P& result) {
  return partition([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {m, 16}, P(None, "b"));
    Tensor w = b.input("w", {16, n}, P("b", None));
    b.output("y", with_sharding_constraint(matmul(x, w), result));
  });
}

TEST(PartitionPerDeviceReshard, PartialSumWantedShardedOnItsAxisIsOneReduceScatter) {
  const Partitioned p = sharded_contraction(8, 8, P(None, "b"));
  EXPECT_STEPS(p, R"(%3 = reduce_scatter(%2) sum dim=1 axes={"b"} : f32[8,2] [{}, {"b"}])");
  ASSERT_EQ(p.local.nodes[2].op, Op::kDot);
  EXPECT_EQ(p.local.nodes[2].sharding->str(), R"([{}, {}] partial={"b"})");
  EXPECT_EQ(p.local.nodes[2].shape, (ir::Shape{8, 8}));
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, PartialSumScattersOntoTheDimensionTheResultWants) {
  const Partitioned p = sharded_contraction(8, 8, P("b", None));
  EXPECT_STEPS(p, R"(%3 = reduce_scatter(%2) sum dim=0 axes={"b"} : f32[2,8] [{"b"}, {}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, PartialSumWantedReplicatedIsReduceScatterThenAllGather) {
  // Scattered onto the largest divisible dimension (N=8, not M=4), then gathered:
  // the two halves of a ring all-reduce.
  const Partitioned p = sharded_contraction(4, 8, P(None, None));
  EXPECT_STEPS(p, R"(%3 = reduce_scatter(%2) sum dim=1 axes={"b"} : f32[4,2] [{}, {"b"}])",
               R"(%4 = all_gather(%3) dim=1 axes={"b"} : f32[4,8] [{}, {}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, PartialSumWithNoDivisibleDimensionIsAllReduce) {
  const Partitioned p = sharded_contraction(3, 6, P(None, None));
  EXPECT_STEPS(p, R"(%3 = all_reduce(%2) sum axes={"b"} : f32[3,6] [{}, {}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, PartialSumAlongsideAShardedFreeDimension) {
  // x also split on M over a: the result keeps 'a' on dim 0 and scatters 'b' onto dim 1.
  const Partitioned p = partition([](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 16}, P("a", "b"));
    Tensor w = b.input("w", {16, 8}, P("b", None));
    b.output("y", with_sharding_constraint(matmul(x, w), P("a", "b")));
  });
  EXPECT_STEPS(p, R"(%3 = reduce_scatter(%2) sum dim=1 axes={"b"} : f32[4,2] [{"a"}, {"b"}])");
  EXPECT_EQ(p.local.nodes[2].sharding->str(), R"([{"a"}, {}] partial={"b"})");
  expect_matches_oracle(p);
}

// max over the dimension split on b, result (M) pinned to `result`.
Partitioned sharded_max(int64_t m, const P& result) {
  return partition([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {m, 16}, P(None, "b"));
    b.output("y", with_sharding_constraint(max(x, {1}), result));
  });
}

TEST(PartitionPerDeviceReshard, PartialMaxWantedReplicatedIsMaxReduceScatterThenAllGather) {
  const Partitioned p = sharded_max(8, P(None));
  EXPECT_STEPS(p, R"(%2 = reduce_scatter(%1) max dim=0 axes={"b"} : f32[2] [{"b"}])",
               R"(%3 = all_gather(%2) dim=0 axes={"b"} : f32[8] [{}])");
  ASSERT_EQ(p.local.nodes[1].op, Op::kReduce);
  EXPECT_EQ(p.local.nodes[1].sharding->str(), R"([{}] partial_max={"b"})");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, PartialMaxWithNoDivisibleDimensionIsMaxAllReduce) {
  const Partitioned p = sharded_max(3, P(None));
  EXPECT_STEPS(p, R"(%2 = all_reduce(%1) max axes={"b"} : f32[3] [{}])");
  expect_matches_oracle(p);
}

// As for a dot: the axis the reduction leaves pending is the one the result
// wants, so one reduce-scatter of the partial result does it (not an
// all_to_all of the operand, which moves the whole reduced dimension).
TEST(PartitionPerDeviceReshard, PartialMaxWantedShardedOnItsAxisIsOneReduceScatter) {
  const Partitioned p = sharded_max(8, P("b"));
  EXPECT_STEPS(p, R"(%2 = reduce_scatter(%1) max dim=0 axes={"b"} : f32[2] [{"b"}])");
  expect_matches_oracle(p);
}

TEST(PartitionPerDeviceReshard, PartialSumOfAReduceWantedShardedOnItsAxisIsOneReduceScatter) {
  const Partitioned p = partition([](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 16, 4}, P(None, axes("a", "b"), None));
    b.output("y", with_sharding_constraint(sum(x, {1}), P(axes("a", "b"), None)));
  });
  EXPECT_STEPS(
      p, R"(%2 = reduce_scatter(%1) sum dim=0 axes={"a"} : f32[4,4] [{"a"}, {}] partial={"b"})",
      R"(%3 = reduce_scatter(%2) sum dim=0 axes={"b"} : f32[1,4] [{"a", "b"}, {}])");
  expect_matches_oracle(p);
}

}  // namespace
}  // namespace sharc
