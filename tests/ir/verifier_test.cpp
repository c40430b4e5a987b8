// The IR verifier and printer. Verifier: one negative test per `Constraints:`
// item in ir/verifier.cpp (and per graph-level check), each on a small
// hand-built graph that is valid except for exactly that item, asserting the
// internal-compiler-error text, the offending node and the specific reason;
// plus positive tests that the unbroken graphs and traced DSL programs verify.
// Printer: the exact one-line text of nodes, and of a whole small graph.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "ir/ir.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"

namespace sharc {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;
using ir::Shape;
using ir::Sharding;

Node make(Op op, std::vector<int> args, Shape shape) {
  Node n;
  n.op = op;
  n.args = std::move(args);
  n.shape = std::move(shape);
  return n;
}

Node source(Op op, const std::string& name, Shape shape) {
  Node n = make(op, {}, std::move(shape));
  n.name = name;
  return n;
}

Node collective(Op op, int arg, Shape shape, std::vector<std::string> axes, int dim,
                int dim2 = -1) {
  Node n = make(op, {arg}, std::move(shape));
  n.axes = std::move(axes);
  n.dim = dim;
  n.dim2 = dim2;
  return n;
}

Graph global_graph() {
  Graph g;
  g.name = "t";
  g.mesh = Mesh::parse("a=2,b=4", 8);
  return g;
}

Graph partitioned_graph() {
  Graph g = global_graph();
  g.partitioned = true;
  return g;
}

// ir::verify(g) must throw std::logic_error saying it is an internal compiler
// error, naming node %at (or, with at < 0, no node) and giving `reason`.
::testing::AssertionResult fails_with(const Graph& g, int at, const std::string& reason) {
  try {
    ir::verify(g);
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    const std::string where = at >= 0 ? "IR verification failed at " + ir::node_str(g, at) + ": "
                                      : "IR verification failed: ";
    for (const std::string& part :
         {std::string("internal compiler error (sharc bug)"), where, reason})
      if (what.find(part) == std::string::npos)
        return ::testing::AssertionFailure()
               << "message lacks \"" << part << "\"\n  message: " << what;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "not a std::logic_error: " << e.what();
  }
  return ::testing::AssertionFailure() << "verify() accepted:\n" << ir::to_string(g);
}

::testing::AssertionResult verifies(const Graph& g) {
  try {
    ir::verify(g);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << e.what() << "\n" << ir::to_string(g);
  }
  return ::testing::AssertionSuccess();
}

// --- Constraints: operands precede their user. ---------------------------------

TEST(Verifier, OperandDefinedAfterUse) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kRelu, {0}, {4, 8}));
  ASSERT_TRUE(verifies(g));
  g.nodes[1].args = {2};
  g.add(make(Op::kRelu, {0}, {4, 8}));
  EXPECT_TRUE(fails_with(g, 1, "operand %2 is not defined before use"));
}

TEST(Verifier, OperandIsItsOwnUser) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kRelu, {1}, {4, 8}));
  EXPECT_TRUE(fails_with(g, 1, "operand %1 is not defined before use"));
}

TEST(Verifier, NegativeOperand) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kRelu, {-1}, {4, 8}));
  EXPECT_TRUE(fails_with(g, 1, "operand %-1 is not defined before use"));
}

// --- Constraints: operand count matches the op's arity. -------------------------

TEST(Verifier, BinaryWithOneOperand) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kAdd, {0}, {4, 8}));
  EXPECT_TRUE(fails_with(g, 1, "wrong operand count"));
}

TEST(Verifier, UnaryWithTwoOperands) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kRelu, {0, 0}, {4, 8}));
  EXPECT_TRUE(fails_with(g, 1, "wrong operand count"));
}

TEST(Verifier, SourceWithAnOperand) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  Node c = make(Op::kConstant, {0}, {4, 8});
  g.add(c);
  EXPECT_TRUE(fails_with(g, 1, "wrong operand count"));
}

// --- Constraints: collectives and local slices appear only in partitioned IR. ---

TEST(Verifier, CollectiveInGlobalProgram) {
  Graph g = partitioned_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(collective(Op::kAllGather, 0, {8, 8}, {"a"}, 0));
  ASSERT_TRUE(verifies(g));
  g.partitioned = false;
  EXPECT_TRUE(fails_with(g, 1, "collective in a global (unpartitioned) program"));
}

TEST(Verifier, LocalSliceInGlobalProgram) {
  Graph g = partitioned_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(collective(Op::kLocalSlice, 0, {4, 2}, {"b"}, 1));
  ASSERT_TRUE(verifies(g));
  g.partitioned = false;
  EXPECT_TRUE(fails_with(g, 1, "collective in a global (unpartitioned) program"));
}

// --- Constraints: binary elementwise operands and result have one shape. --------

TEST(Verifier, BinaryOperandShapesDiffer) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(source(Op::kInput, "y", {4, 8}));
  g.add(make(Op::kMul, {0, 1}, {4, 8}));
  ASSERT_TRUE(verifies(g));
  g.nodes[1].shape = {8, 4};
  EXPECT_TRUE(fails_with(g, 2, "elementwise shapes differ"));
}

TEST(Verifier, BinaryResultShapeDiffers) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kSub, {0, 0}, {4, 4}));
  EXPECT_TRUE(fails_with(g, 1, "elementwise shapes differ"));
}

// Not a Constraints item of its own (unary ops and sharding constraints keep
// their operand's shape), but checked all the same.
TEST(Verifier, UnaryShapeDiffersFromOperand) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kExp, {0}, {8, 4}));
  EXPECT_TRUE(fails_with(g, 1, "shape differs from operand"));
}

TEST(Verifier, ShardingConstraintShapeDiffersFromOperand) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kShardingConstraint, {0}, {4, 4}));
  EXPECT_TRUE(fails_with(g, 1, "shape differs from operand"));
}

// --- Constraints: sources are named. ---------------------------------------------

TEST(Verifier, UnnamedInput) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "", {4, 8}));
  EXPECT_TRUE(fails_with(g, 0, "unnamed source"));
}

TEST(Verifier, UnnamedParameter) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(source(Op::kParameter, "", {8}));
  EXPECT_TRUE(fails_with(g, 1, "unnamed source"));
}

// --- Constraints: broadcast ints map each operand dim to a strictly increasing
// output dim whose size equals the operand's, or the operand dim is 1. ---------

Graph broadcast_graph() {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {1, 8}));
  Node b = make(Op::kBroadcast, {0}, {4, 3, 8});
  b.ints = {1, 2};  // the size-1 dim may land on a dim of any size
  g.add(b);
  return g;
}

TEST(Verifier, BroadcastValid) {
  EXPECT_TRUE(verifies(broadcast_graph()));
}

TEST(Verifier, BroadcastDimsSizeDiffersFromOperandRank) {
  Graph g = broadcast_graph();
  g.nodes[1].ints = {2};
  EXPECT_TRUE(fails_with(g, 1, "broadcast dims size differs from operand rank"));
}

TEST(Verifier, BroadcastDimOutOfRange) {
  Graph g = broadcast_graph();
  g.nodes[1].ints = {1, 3};
  EXPECT_TRUE(fails_with(g, 1, "broadcast dim out of range"));
}

TEST(Verifier, BroadcastDimNegative) {
  Graph g = broadcast_graph();
  g.nodes[1].ints = {-1, 2};
  EXPECT_TRUE(fails_with(g, 1, "broadcast dim out of range"));
}

TEST(Verifier, BroadcastDimsNotIncreasing) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {8, 8}));
  Node b = make(Op::kBroadcast, {0}, {8, 8, 8});
  b.ints = {1, 0};  // sizes match: only the order is wrong
  g.add(b);
  EXPECT_TRUE(fails_with(g, 1, "broadcast dims not increasing"));
}

TEST(Verifier, BroadcastDimsRepeated) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {8, 8}));
  Node b = make(Op::kBroadcast, {0}, {8, 8, 8});
  b.ints = {1, 1};
  g.add(b);
  EXPECT_TRUE(fails_with(g, 1, "broadcast dims not increasing"));
}

TEST(Verifier, BroadcastSizeMismatch) {
  Graph g = broadcast_graph();
  g.nodes[1].shape = {4, 3, 6};  // operand dim 1 is 8, not 1
  EXPECT_TRUE(fails_with(g, 1, "broadcast size mismatch"));
}

// --- Constraints: reshape preserves the element count. ---------------------------

TEST(Verifier, ReshapeChangesElementCount) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kReshape, {0}, {2, 16}));
  ASSERT_TRUE(verifies(g));
  g.nodes[1].shape = {5, 6};
  EXPECT_TRUE(fails_with(g, 1, "reshape changes element count"));
}

// --- Constraints: transpose ints is a permutation; out dim i has operand dim
// perm[i]'s size. -----------------------------------------------------------------

Graph transpose_graph() {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8, 2}));
  Node t = make(Op::kTranspose, {0}, {2, 4, 8});
  t.ints = {2, 0, 1};
  g.add(t);
  return g;
}

TEST(Verifier, TransposeValid) {
  EXPECT_TRUE(verifies(transpose_graph()));
}

TEST(Verifier, TransposePermRepeatsADim) {
  Graph g = transpose_graph();
  g.nodes[1].ints = {2, 0, 0};
  EXPECT_TRUE(fails_with(g, 1, "perm is not a permutation"));
}

TEST(Verifier, TransposePermTooShort) {
  Graph g = transpose_graph();
  g.nodes[1].ints = {1, 0};
  EXPECT_TRUE(fails_with(g, 1, "perm is not a permutation"));
}

TEST(Verifier, TransposePermOutOfRange) {
  Graph g = transpose_graph();
  g.nodes[1].ints = {3, 0, 1};
  EXPECT_TRUE(fails_with(g, 1, "perm is not a permutation"));
}

TEST(Verifier, TransposeShapeMismatch) {
  Graph g = transpose_graph();
  g.nodes[1].shape = {2, 8, 4};  // perm [2,0,1] of [4,8,2] is [2,4,8]
  EXPECT_TRUE(fails_with(g, 1, "transpose shape mismatch"));
}

// --- Constraints: reduce axes are distinct operand dims, removed from the shape. --

Graph reduce_graph() {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8, 2}));
  Node r = make(Op::kReduce, {0}, {8});
  r.ints = {0, 2};
  g.add(r);
  return g;
}

TEST(Verifier, ReduceValid) {
  EXPECT_TRUE(verifies(reduce_graph()));
}

TEST(Verifier, ReduceDuplicateAxis) {
  Graph g = reduce_graph();
  g.nodes[1].ints = {0, 0};
  g.nodes[1].shape = {8, 2};
  EXPECT_TRUE(fails_with(g, 1, "duplicate reduce axis"));
}

TEST(Verifier, ReduceAxisOutOfRange) {
  Graph g = reduce_graph();
  g.nodes[1].ints = {3};
  g.nodes[1].shape = {4, 8, 2};
  EXPECT_TRUE(fails_with(g, 1, "reduce axis out of range"));
}

TEST(Verifier, ReduceShapeKeepsReducedAxis) {
  Graph g = reduce_graph();
  g.nodes[1].shape = {1, 8, 1};  // keepdims is a reshape after the reduce
  EXPECT_TRUE(fails_with(g, 1, "reduce shape mismatch"));
}

// --- Constraints: dot batch and contracting lists pair up with equal sizes; the
// result shape is dot_shape(). ------------------------------------------------------

Graph dot_graph() {
  Graph g = global_graph();
  g.add(source(Op::kInput, "l", {2, 4, 8}));
  g.add(source(Op::kInput, "r", {2, 8, 16}));
  Node d = make(Op::kDot, {0, 1}, {2, 4, 16});
  d.dot = {{0}, {0}, {2}, {1}};
  g.add(d);
  return g;
}

TEST(Verifier, DotValid) {
  EXPECT_TRUE(verifies(dot_graph()));
}

TEST(Verifier, DotUnpairedBatchDims) {
  Graph g = dot_graph();
  g.nodes[2].dot.rhs_batch = {};
  EXPECT_TRUE(fails_with(g, 2, "unpaired dot dimensions"));
}

TEST(Verifier, DotUnpairedContractingDims) {
  Graph g = dot_graph();
  g.nodes[2].dot.lhs_contract = {2, 1};
  EXPECT_TRUE(fails_with(g, 2, "unpaired dot dimensions"));
}

TEST(Verifier, DotContractingDimOutOfRange) {
  Graph g = dot_graph();
  g.nodes[2].dot.lhs_contract = {3};
  EXPECT_TRUE(fails_with(g, 2, "dot dimension out of range"));
}

TEST(Verifier, DotBatchDimOutOfRange) {
  Graph g = dot_graph();
  g.nodes[2].dot.rhs_batch = {-1};
  EXPECT_TRUE(fails_with(g, 2, "dot dimension out of range"));
}

TEST(Verifier, DotBatchSizeMismatch) {
  Graph g = dot_graph();
  g.nodes[1].shape = {3, 8, 16};
  EXPECT_TRUE(fails_with(g, 2, "batch size mismatch"));
}

TEST(Verifier, DotContractionSizeMismatch) {
  Graph g = dot_graph();
  g.nodes[1].shape = {2, 7, 16};
  EXPECT_TRUE(fails_with(g, 2, "contraction size mismatch"));
}

TEST(Verifier, DotResultShapeMismatch) {
  Graph g = dot_graph();
  g.nodes[2].shape = {2, 16, 4};  // free dims are lhs then rhs
  EXPECT_TRUE(fails_with(g, 2, "dot result shape mismatch"));
}

// --- Constraints: collectives name at least one mesh axis, no axis twice; dim
// (and dim2) are in range. Each also has a result shape that follows from its
// operand's, checked below. --------------------------------------------------------

// Partitioned: %0 = input [4,8]; %1 = the collective.
Graph with_collective(Node c) {
  Graph g = partitioned_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(std::move(c));
  return g;
}

TEST(Verifier, CollectivesValid) {
  EXPECT_TRUE(verifies(with_collective(collective(Op::kAllGather, 0, {4, 64}, {"a", "b"}, 1))));
  EXPECT_TRUE(verifies(with_collective(collective(Op::kReduceScatter, 0, {2, 8}, {"a"}, 0))));
  EXPECT_TRUE(verifies(with_collective(collective(Op::kAllReduce, 0, {4, 8}, {"b"}, -1))));
  EXPECT_TRUE(verifies(with_collective(collective(Op::kAllToAll, 0, {1, 32}, {"b"}, 0, 1))));
  EXPECT_TRUE(verifies(with_collective(collective(Op::kLocalSlice, 0, {4, 1}, {"a", "b"}, 1))));
}

TEST(Verifier, CollectiveOverNoAxes) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllGather, 0, {4, 8}, {}, 0)), 1,
                         "collective over no axes"));
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllReduce, 0, {4, 8}, {}, -1)), 1,
                         "collective over no axes"));
}

TEST(Verifier, CollectiveOverUnknownAxis) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kReduceScatter, 0, {2, 8}, {"c"}, 0)), 1,
                         "unknown mesh axis \"c\""));
}

TEST(Verifier, CollectiveRepeatsAnAxis) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllGather, 0, {16, 8}, {"a", "a"}, 0)), 1,
                         "axis repeated"));
}

TEST(Verifier, AllReduceChangesShape) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllReduce, 0, {8, 8}, {"a"}, -1)), 1,
                         "all_reduce changes shape"));
}

TEST(Verifier, CollectiveDimOutOfRange) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllGather, 0, {4, 8}, {"a"}, 2)), 1,
                         "dim out of range"));
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kLocalSlice, 0, {4, 8}, {"a"}, -1)), 1,
                         "dim out of range"));
}

TEST(Verifier, ReduceScatterDimDoesNotDivide) {
  // 4 rows cannot be split 8 ways (a x b).
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kReduceScatter, 0, {1, 8}, {"a", "b"}, 0)),
                         1, "dim does not divide by axes"));
}

TEST(Verifier, LocalSliceDimDoesNotDivide) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kLocalSlice, 0, {1, 8}, {"a", "b"}, 0)), 1,
                         "dim does not divide by axes"));
}

TEST(Verifier, AllToAllConcatDimEqualsSplitDim) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllToAll, 0, {4, 8}, {"b"}, 1, 1)), 1,
                         "bad concat dim"));
}

TEST(Verifier, AllToAllConcatDimOutOfRange) {
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllToAll, 0, {4, 8}, {"b"}, 1, 2)), 1,
                         "bad concat dim"));
}

TEST(Verifier, AllToAllSplitDimDoesNotDivide) {
  // Split dim 0 (size 4) over a x b = 8.
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllToAll, 0, {1, 64}, {"a", "b"}, 0, 1)),
                         1, "split dim does not divide by axes"));
}

TEST(Verifier, CollectiveResultShapeMismatch) {
  // all_gather over a (2) of [4,8] along dim 0 is [8,8].
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllGather, 0, {4, 8}, {"a"}, 0)), 1,
                         "collective result shape mismatch"));
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kReduceScatter, 0, {4, 2}, {"a"}, 1)), 1,
                         "collective result shape mismatch"));
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kLocalSlice, 0, {4, 8}, {"b"}, 1)), 1,
                         "collective result shape mismatch"));
  EXPECT_TRUE(fails_with(with_collective(collective(Op::kAllToAll, 0, {1, 8}, {"b"}, 0, 1)), 1,
                         "collective result shape mismatch"));
}

// --- Graph-level checks: shapes, shardings against the mesh, outputs. -------------

TEST(Verifier, NonPositiveDimension) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 0}));
  EXPECT_TRUE(fails_with(g, 0, "non-positive dimension"));
}

Graph sharded_input(Sharding s, bool partitioned = false) {
  Graph g = partitioned ? partitioned_graph() : global_graph();
  Node x = source(Op::kInput, "x", {4, 8});
  x.sharding = std::move(s);
  g.add(std::move(x));
  return g;
}

TEST(Verifier, ShardingValid) {
  EXPECT_TRUE(verifies(sharded_input({{{"a"}, {"b"}}, {}})));
  EXPECT_TRUE(verifies(sharded_input({{{"a"}, {}}, {"b"}})));
}

TEST(Verifier, ShardingRankDiffersFromTensorRank) {
  EXPECT_TRUE(
      fails_with(sharded_input({{{"a"}}, {}}), 0, "sharding rank differs from tensor rank"));
}

TEST(Verifier, ShardingNamesUnknownMeshAxis) {
  EXPECT_TRUE(
      fails_with(sharded_input({{{"c"}, {}}, {}}), 0, "sharding names unknown mesh axis \"c\""));
}

TEST(Verifier, ShardingUsesAnAxisTwice) {
  EXPECT_TRUE(fails_with(sharded_input({{{"a"}, {"a"}}, {}}), 0, "mesh axis \"a\" used twice"));
  // In a dimension and as a pending partial sum.
  EXPECT_TRUE(fails_with(sharded_input({{{"b"}, {}}, {"b"}}), 0, "mesh axis \"b\" used twice"));
}

TEST(Verifier, GlobalShardingDimensionDoesNotDivide) {
  // Dim 0 has 4 rows; a x b splits it 8 ways.
  EXPECT_TRUE(fails_with(sharded_input({{{"a", "b"}, {}}, {}}), 0,
                         "dimension 0 does not divide by its axes"));
  // Per-device shapes are blocks already: nothing to divide.
  EXPECT_TRUE(verifies(sharded_input({{{"a", "b"}, {}}, {}}, /*partitioned=*/true)));
}

TEST(Verifier, OutputRefersToNoNode) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.outputs.push_back({"y", 0, {}, {}, {}});
  ASSERT_TRUE(verifies(g));
  g.outputs[0].value = 1;
  EXPECT_TRUE(fails_with(g, -1, "output \"y\" refers to no node"));
  g.outputs[0].value = -1;
  EXPECT_TRUE(fails_with(g, -1, "output \"y\" refers to no node"));
}

TEST(Verifier, TwoOutputsWithOneName) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(make(Op::kNeg, {0}, {4, 8}));
  g.outputs.push_back({"y", 0, {}, {}, {}});
  g.outputs.push_back({"y", 1, {}, {}, {}});
  EXPECT_TRUE(fails_with(g, -1, "two outputs named \"y\""));
}

TEST(Verifier, GradientOfNoParameterOrOfAnotherShape) {
  Graph g = global_graph();
  g.add(source(Op::kParameter, "w", {4, 8}));
  g.add(make(Op::kNeg, {0}, {4, 8}));
  g.add(make(Op::kReduce, {1}, {4}));
  g.nodes[2].ints = {1};
  g.gradients.push_back({0, 1});
  ASSERT_TRUE(verifies(g));
  const std::string reason = "is not a value of a parameter's shape";
  g.gradients[0] = {1, 1};  // not a parameter
  EXPECT_TRUE(fails_with(g, -1, "gradient %1 of %1 " + reason));
  g.gradients[0] = {0, 3};  // no such node
  EXPECT_TRUE(fails_with(g, -1, "gradient %3 of %0 " + reason));
  g.gradients[0] = {0, 2};  // f32[4] for an f32[4,8] parameter
  EXPECT_TRUE(fails_with(g, -1, "gradient %2 of %0 " + reason));
  // Per-device: the gradient's layout may differ from its parameter's.
  g.partitioned = true;
  for (auto& n : g.nodes) n.sharding = Sharding::replicated(n.shape.size());
  EXPECT_TRUE(verifies(g));
}

// --- Positive: traced programs verify, before and after lowering. -----------------

TEST(Verifier, TracedProgramVerifies) {
  const Graph g = trace("mlp", [](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 16}, P("a", None));
    Linear l1(b.scope() / "l1", 16, 32,
              {.kernel_init = with_partitioning(lecun_normal(), P(None, "b"))});
    Tensor h = gelu(l1(x));
    h = with_sharding_constraint(h, P("a", "b"));
    Tensor w = b.scope().param("w", {32, 16}, with_partitioning(lecun_normal(), P("b", None)));
    Tensor y = softmax(matmul(h, w));
    b.output("y", y);
    b.output("s", sum(transpose(reshape(y, {4, 2, 16}), {2, 0, 1}), {0, 2}));
  });
  EXPECT_TRUE(verifies(g));
  const Lowered l = lower(g, Mesh::parse("a=2,b=4", 8));
  EXPECT_TRUE(verifies(l.global));
  EXPECT_TRUE(verifies(l.partitioned));
  EXPECT_TRUE(l.partitioned.partitioned);
}

// --- Printer. --------------------------------------------------------------------

TEST(Printer, Sources) {
  Graph g = global_graph();
  Node x = source(Op::kInput, "x", {4, 8});
  x.spec = P("a", None);
  g.add(x);
  Node w = source(Op::kParameter, "l1/kernel", {8, 16});
  w.init = with_partitioning(normal(0.5), P(None, axes("a", "b")));
  w.spec = w.init.sharding;
  g.add(w);
  Node c = make(Op::kConstant, {}, {2});
  c.scalar = 0.125;
  g.add(c);
  EXPECT_EQ(ir::node_str(g, 0), "%0 = input() \"x\" spec=P('a', None) : f32[4,8]");
  EXPECT_EQ(ir::node_str(g, 1),
            "%1 = parameter() \"l1/kernel\" init=normal(0.5) spec=P(None, ('a', 'b')) : f32[8,16]");
  EXPECT_EQ(ir::node_str(g, 2), "%2 = constant() 0.125 : f32[2]");
}

TEST(Printer, DotWithBatchDims) {
  EXPECT_EQ(ir::node_str(dot_graph(), 2),
            "%2 = dot(%0, %1) batch=[0]x[0] contract=[2]x[1] : f32[2,4,16]");
}

TEST(Printer, LayoutOps) {
  EXPECT_EQ(ir::node_str(reduce_graph(), 1), "%1 = reduce(%0) sum axes=[0,2] : f32[8]");
  Graph r = reduce_graph();
  r.nodes[1].reduce = ir::ReduceKind::kMax;
  EXPECT_EQ(ir::node_str(r, 1), "%1 = reduce(%0) max axes=[0,2] : f32[8]");
  EXPECT_EQ(ir::node_str(broadcast_graph(), 1), "%1 = broadcast(%0) dims=[1,2] : f32[4,3,8]");
  EXPECT_EQ(ir::node_str(transpose_graph(), 1), "%1 = transpose(%0) perm=[2,0,1] : f32[2,4,8]");
}

TEST(Printer, Collectives) {
  auto line = [](Node c) { return ir::node_str(with_collective(std::move(c)), 1); };
  EXPECT_EQ(line(collective(Op::kAllGather, 0, {4, 64}, {"a", "b"}, 1)),
            "%1 = all_gather(%0) dim=1 axes={\"a\", \"b\"} : f32[4,64]");
  Node rs = collective(Op::kReduceScatter, 0, {2, 8}, {"a"}, 0);
  EXPECT_EQ(line(rs), "%1 = reduce_scatter(%0) sum dim=0 axes={\"a\"} : f32[2,8]");
  Node ar = collective(Op::kAllReduce, 0, {4, 8}, {"b"}, -1);
  ar.reduce = ir::ReduceKind::kMax;
  EXPECT_EQ(line(ar), "%1 = all_reduce(%0) max axes={\"b\"} : f32[4,8]");
  EXPECT_EQ(line(collective(Op::kAllToAll, 0, {1, 32}, {"b"}, 0, 1)),
            "%1 = all_to_all(%0) split=0 concat=1 axes={\"b\"} : f32[1,32]");
  EXPECT_EQ(line(collective(Op::kLocalSlice, 0, {4, 1}, {"a", "b"}, 1)),
            "%1 = local_slice(%0) dim=1 axes={\"a\", \"b\"} : f32[4,1]");
}

TEST(Printer, ShardingPartialAndSourceLocation) {
  Graph g = global_graph();
  g.add(source(Op::kInput, "x", {4, 8}));
  g.add(source(Op::kParameter, "w", {8, 16}));
  Node d = make(Op::kDot, {0, 1}, {4, 16});
  d.dot = {{}, {}, {1}, {0}};
  d.sharding = Sharding{{{"a"}, {}}, {"b"}};
  d.loc = SrcLoc("model.cpp", 31);
  d.name = "dot2";
  g.add(d);
  EXPECT_EQ(ir::node_str(g, 2),
            "%2 = dot(%0, %1) contract=[1]x[0] : f32[4,16] [{\"a\"}, {}] partial={\"b\"}  "
            "// model.cpp:31 dot2");

  Node m = make(Op::kReduce, {0}, {4});
  m.ints = {1};
  m.reduce = ir::ReduceKind::kMax;
  m.sharding = Sharding{{{}}, {"a", "b"}, ir::ReduceKind::kMax};
  m.name = "pool";  // a label without a location
  g.add(m);
  EXPECT_EQ(ir::node_str(g, 3),
            "%3 = reduce(%0) max axes=[1] : f32[4] [{}] partial_max={\"a\", \"b\"}  // pool");

  Node x = source(Op::kInput, "y", {4, 8});
  x.spec = P("a", None);
  x.sharding = Sharding{{{"a"}, {}}, {}};
  x.fixed = true;
  x.loc = SrcLoc("model.cpp", 7);
  g.add(x);
  // A source's name is printed in quotes, not repeated as a label.
  EXPECT_EQ(ir::node_str(g, 4),
            "%4 = input() \"y\" spec=P('a', None) : f32[4,8] [{\"a\"}, {}] fixed  // model.cpp:7");
}

TEST(Printer, TracedNodeCarriesItsDslLine) {
  int line = 0;
  const Graph g = trace("p", [&line](ProgramBuilder& b) {
    Tensor x = b.input("x", {4, 8});
    line = __LINE__ + 1;
    b.output("y", relu(x));
  });
  EXPECT_EQ(ir::node_str(g, 1),
            "%1 = relu(%0) : f32[4,8]  // tests/ir/verifier_test.cpp:" + std::to_string(line));
}

TEST(Printer, WholeGraph) {
  Graph g = partitioned_graph();
  g.name = "p";
  Node x = source(Op::kInput, "x", {2, 8});
  x.sharding = Sharding{{{"a"}, {}}, {}};
  g.add(x);
  Node ag = collective(Op::kAllGather, 0, {4, 8}, {"a"}, 0);
  ag.sharding = Sharding::replicated(2);
  g.add(ag);
  g.outputs.push_back({"y", 1, {}, P(None, None), Sharding::replicated(2)});
  g.outputs.push_back({"z", 0, {}, P("a", None), std::nullopt});
  EXPECT_EQ(ir::to_string(g),
            "program @p mesh=<[\"a\"=2, \"b\"=4]> per-device {\n"
            "  %0 = input() \"x\" : f32[2,8] [{\"a\"}, {}]\n"
            "  %1 = all_gather(%0) dim=0 axes={\"a\"} : f32[4,8] [{}, {}]\n"
            "  return \"y\" %1 [{}, {}]\n"
            "  return \"z\" %0 spec=P('a', None)\n"
            "}\n");
}

}  // namespace
}  // namespace sharc
