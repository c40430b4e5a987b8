// propagate_shardings on small traced programs, run the way lower() runs it
// (mesh set, resolve_logical_axes, then propagate_shardings), one rule per
// test: forward through elementwise ops, backward from pinned values, sideways
// across a dot's contracting dimensions, dot batch/free dimensions, reduce,
// transpose, broadcast, reshape, and the invariants (fixed nodes keep their
// layout, no axis twice in a tensor, non-divisible dimensions stay whole).
// Each test asserts exact Sharding::str() strings.
#include "codegen/passes/propagate_shardings.h"

#include <gtest/gtest.h>

#include <string>

#include "codegen/passes/resolve_logical_axes.h"
#include "dsl/sharc.h"

namespace sharc {
namespace {

using ir::Graph;

// lower()'s first steps on `mesh`, each followed by the verifier.
Graph propagated(const ProgramFn& fn, const std::string& mesh = "a=2,b=4") {
  Graph g = trace("propagate", fn);
  g.mesh = Mesh::parse(mesh);
  ir::verify(g);
  g = resolve_logical_axes(std::move(g), std::optional<LogicalRules>(g.rules));
  ir::verify(g);
  g = propagate_shardings(std::move(g));
  ir::verify(g);
  return g;
}

std::string sh(const Graph& g, int id) {
  const ir::Node& n = g.nodes.at(id);
  return n.sharding ? n.sharding->str() : "<none>";
}

std::string out(const Graph& g, const std::string& name) {
  for (const ir::Output& o : g.outputs)
    if (o.name == name) return o.sharding ? o.sharding->str() : "<none>";
  return "<no output " + name + ">";
}

// An unannotated parameter: propagation may choose its layout.
Param free_param(ProgramBuilder& b, const std::string& name, std::vector<int64_t> shape) {
  return b.scope().param(name, std::move(shape), lecun_normal());
}

TEST(PropagateShardings, ForwardThroughUnaryOps) {
  int r = -1, e = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8}, P("a", None));
    Tensor t = relu(x);
    Tensor u = exp(t);
    r = t.id();
    e = u.id();
    b.output("y", u);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, r), R"([{"a"}, {}])");
  EXPECT_EQ(sh(g, e), R"([{"a"}, {}])");
  EXPECT_EQ(out(g, "y"), R"([{"a"}, {}])");
}

TEST(PropagateShardings, ForwardThroughBinaryOpsUnifiesDimensions) {
  int s = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8}, P("a", None));
    Tensor y = b.input("y", {8, 8}, P(None, "b"));
    Tensor t = x * y;
    s = t.id();
    b.output("z", t);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, s), R"([{"a"}, {"b"}])");
}

TEST(PropagateShardings, BackwardFromPinnedOutputToOperands) {
  int w = -1, n = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Param p = free_param(b, "w", {8, 8});
    Tensor t = neg(p);
    w = p.id();
    n = t.id();
    b.output("y", t, P("b", "a"));
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, n), R"([{"b"}, {"a"}])");
  EXPECT_EQ(sh(g, w), R"([{"b"}, {"a"}])");
  EXPECT_EQ(out(g, "y"), R"([{"b"}, {"a"}])");
}

TEST(PropagateShardings, BackwardFromConstraint) {
  int w = -1, r = -1, c = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Param p = free_param(b, "w", {8, 8});
    Tensor t = relu(p);
    Tensor u = with_sharding_constraint(t, P(None, "b"));
    w = p.id();
    r = t.id();
    c = u.id();
    b.output("y", u);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, c), R"([{}, {"b"}])");
  EXPECT_EQ(sh(g, r), R"([{}, {"b"}])");
  EXPECT_EQ(sh(g, w), R"([{}, {"b"}])");
}

TEST(PropagateShardings, SidewaysAcrossContractingDimensions) {
  int w = -1, d = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 16}, P(None, "b"));
    Param p = free_param(b, "w", {16, 8});
    Tensor y = matmul(x, p);
    w = p.id();
    d = y.id();
    b.output("y", y);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, w), R"([{"b"}, {}])");
  // A contracting dimension has no result dimension to go to.
  EXPECT_EQ(sh(g, d), "[{}, {}]");
}

TEST(PropagateShardings, SidewaysFromRhsToLhs) {
  int l = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Param x = free_param(b, "x", {8, 16});
    Param w = b.scope().param("w", {16, 8}, with_partitioning(lecun_normal(), P("a", None)));
    l = x.id();
    b.output("y", matmul(x, w));
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, l), R"([{}, {"a"}])");
}

TEST(PropagateShardings, DotFreeDimensions) {
  int d = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 16}, P("a", None));
    Param w = b.scope().param("w", {16, 8}, with_partitioning(lecun_normal(), P(None, "b")));
    Tensor y = matmul(x, w);
    d = y.id();
    b.output("y", y);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, d), R"([{"a"}, {"b"}])");
}

TEST(PropagateShardings, DotBatchDimensionsLinkBothOperandsAndResult) {
  int r = -1, d = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    // (B, M, K) x (B, K, N) -> (B, M, N)
    Tensor x = b.input("x", {4, 8, 16}, P("a", "b", None));
    Param w = free_param(b, "w", {4, 16, 8});
    Tensor y = matmul(x, w);
    r = w.id();
    d = y.id();
    b.output("y", y);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, d), R"([{"a"}, {"b"}, {}])");
  // The rhs batch dimension follows the result's; its free dimension has
  // nothing to follow (result dim 2 is unsharded).
  EXPECT_EQ(sh(g, r), R"([{"a"}, {}, {}])");
}

TEST(PropagateShardings, DotGeneralWithTransposedOperands) {
  int d = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    // lhs (K, B, M), rhs (N, K, B): batch [1]x[2], contract [0]x[1] -> (B, M, N)
    Tensor x = b.input("x", {16, 4, 8}, P(None, "a", None));
    Tensor w = b.input("w", {8, 16, 4}, P("b", None, None));
    Tensor y = dot_general(x, w, {{1}, {2}, {0}, {1}});
    d = y.id();
    b.output("y", y);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, d), R"([{"a"}, {}, {"b"}])");
}

TEST(PropagateShardings, ReduceDropsReducedDimensions) {
  int s0 = -1, s1 = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8}, P("a", "b"));
    Tensor u = sum(x, {0});
    Tensor v = max(x, {1});
    s0 = u.id();
    s1 = v.id();
    b.output("u", u);
    b.output("v", v);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, s0), R"([{"b"}])");
  EXPECT_EQ(sh(g, s1), R"([{"a"}])");
}

TEST(PropagateShardings, ReduceBackwardSkipsReducedDimensions) {
  int w = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Param p = free_param(b, "w", {8, 8, 8});
    w = p.id();
    b.output("y", sum(p, {1}), P("b", "a"));
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, w), R"([{"b"}, {}, {"a"}])");
}

TEST(PropagateShardings, TransposePermutes) {
  int t = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8, 2}, P("a", "b", None));
    Tensor y = transpose(x, {2, 0, 1});
    t = y.id();
    b.output("y", y);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, t), R"([{}, {"a"}, {"b"}])");
}

TEST(PropagateShardings, TransposeBackward) {
  int w = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Param p = free_param(b, "w", {2, 8, 4});
    w = p.id();
    b.output("y", transpose(p, {1, 2, 0}), P("b", None, "a"));
  });
  SCOPED_TRACE(ir::to_string(g));
  // out dim i = operand dim perm[i]: out 0 <- 1, out 2 <- 0.
  EXPECT_EQ(sh(g, w), R"([{"a"}, {"b"}, {}])");
}

TEST(PropagateShardings, BroadcastMapsKeptDimensions) {
  int bias = -1, bc = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8}, P("a", "b"));
    Param p = free_param(b, "bias", {8});
    bias = p.id();
    Tensor y = x + p;
    bc = y.id() - 1;  // add(x, broadcast(bias))
    b.output("y", y);
  });
  SCOPED_TRACE(ir::to_string(g));
  ASSERT_EQ(g.nodes[bc].op, ir::Op::kBroadcast);
  EXPECT_EQ(sh(g, bc), R"([{"a"}, {"b"}])");
  EXPECT_EQ(sh(g, bias), R"([{"b"}])");
}

// A size-1 dimension that broadcast expands has no counterpart: its axes go
// neither forward nor backward. On a size-1 mesh axis the size-1 dimension can
// be "split", so only the missing link keeps the axis out.
TEST(PropagateShardings, BroadcastDoesNotPropagateThroughExpandedDims) {
  int fwd = -1, back = -1, bparam = -1;
  const Graph g = propagated(
      [&](ProgramBuilder& b) {
        Tensor row = b.input("row", {1, 8}, P("a", "b"));
        Tensor x = b.input("x", {8, 8});
        Tensor y = x + row;
        fwd = y.id() - 1;
        b.output("y", y);
        Param p = free_param(b, "p", {1, 8});
        Tensor z = x + p;
        back = z.id() - 1;
        bparam = p.id();
        b.output("z", z, P("a", "b"));
      },
      "a=1,b=2");
  SCOPED_TRACE(ir::to_string(g));
  ASSERT_EQ(g.nodes[fwd].op, ir::Op::kBroadcast);
  ASSERT_EQ(g.nodes[back].op, ir::Op::kBroadcast);
  EXPECT_EQ(sh(g, fwd), R"([{}, {"b"}])");
  EXPECT_EQ(sh(g, back), R"([{"a"}, {"b"}])");
  EXPECT_EQ(sh(g, bparam), R"([{}, {"b"}])");
}

TEST(PropagateShardings, ReshapeMergeKeepsMajorDimensionAxes) {
  int major = -1, minor = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {4, 8}, P("a", None));
    Tensor y = b.input("y", {4, 8}, P(None, "b"));
    Tensor u = reshape(x, {32});
    Tensor v = reshape(y, {32});
    major = u.id();
    minor = v.id();
    b.output("u", u);
    b.output("v", v);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, major), R"([{"a"}])");
  // A block of the minor dimension is not a contiguous block of the merged one.
  EXPECT_EQ(sh(g, minor), "[{}]");
}

TEST(PropagateShardings, ReshapeSplitMovesAxesToMajorDimensionWhenDivisible) {
  int ok = -1, small = -1, keep = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {32}, P("b"));
    Tensor u = reshape(x, {4, 8});
    Tensor v = reshape(x, {2, 16});  // 2 rows do not split 4 ways
    Tensor w = reshape(b.input("y", {2, 8, 3}, P(None, "b", None)), {2, 4, 6});
    ok = u.id();
    small = v.id();
    keep = w.id();
    b.output("u", u);
    b.output("v", v);
    b.output("w", w);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, ok), R"([{"b"}, {}])");
  EXPECT_EQ(sh(g, small), "[{}, {}]");
  // Groups: [2]->[2] and [8,3]->[4,6]; the second group's major dim is 4.
  EXPECT_EQ(sh(g, keep), R"([{}, {"b"}, {}])");
}

TEST(PropagateShardings, ReshapeBackward) {
  int w = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Param p = free_param(b, "w", {32});
    w = p.id();
    b.output("y", reshape(p, {8, 4}), P("b", None));
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, w), R"([{"b"}])");
}

TEST(PropagateShardings, FixedNodesNeverChange) {
  int x = -1, c = -1, e = -1, r = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor in = b.input("x", {8, 8});  // replicated by default, and pinned
    Tensor t = relu(in);
    Tensor u = with_sharding_constraint(t, P(None, None));
    Tensor v = exp(u);
    x = in.id();
    r = t.id();
    c = u.id();
    e = v.id();
    b.output("y", v, P("a", "b"));
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, e), R"([{"a"}, {"b"}])");
  EXPECT_EQ(sh(g, c), "[{}, {}]");  // pinned replicated, though its user is split
  EXPECT_TRUE(g.nodes[c].fixed);
  EXPECT_EQ(sh(g, r), "[{}, {}]");  // nothing sharded reaches it
  EXPECT_EQ(sh(g, x), "[{}, {}]");
  EXPECT_TRUE(g.nodes[x].fixed);
}

TEST(PropagateShardings, FixedParameterKeepsItsLayoutNextToAnother) {
  int w = -1, s = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Param p = b.scope().param("w", {8, 8}, with_partitioning(lecun_normal(), P("a", None)));
    Tensor y = b.input("y", {8, 8}, P(None, "b"));
    Tensor t = p + y;
    w = p.id();
    s = t.id();
    b.output("z", t);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, w), R"([{"a"}, {}])");
  EXPECT_EQ(sh(g, s), R"([{"a"}, {"b"}])");
}

TEST(PropagateShardings, AnAxisIsNeverUsedTwiceInOneTensor) {
  int s = -1, d = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8}, P("a", None));
    Tensor y = b.input("y", {8, 8}, P(None, "a"));
    Tensor t = x + y;
    Param w = b.scope().param("w", {8, 8}, with_partitioning(lecun_normal(), P(None, "a")));
    Tensor u = matmul(x, w);
    s = t.id();
    d = u.id();
    b.output("t", t);
    b.output("u", u);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, s), R"([{"a"}, {}])");
  EXPECT_EQ(sh(g, d), R"([{"a"}, {}])");
}

TEST(PropagateShardings, NonDivisibleDimensionsStayUnsharded) {
  int r = -1;
  const Graph g = propagated([&](ProgramBuilder& b) {
    // Regrouped [8,6] -> [6,8]: dim 0 would take 'b' (4), but 6 rows do not split 4 ways.
    Tensor x = b.input("x", {8, 6}, P("b", None));
    Tensor y = reshape(x, {6, 8});
    r = y.id();
    b.output("y", y);
  });
  SCOPED_TRACE(ir::to_string(g));
  EXPECT_EQ(sh(g, r), "[{}, {}]");
}

TEST(PropagateShardings, EveryNodeAndOutputGetsAFullSharding) {
  const Graph g = propagated([](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 16}, P("a", None));
    Linear l(b.scope() / "l", 16, 8);
    b.output("y", softmax(l(x)));
    b.output("pinned",
             layer_norm(x, b.scope().param("s", {16}, ones()), b.scope().param("t", {16}, zeros())),
             P(None, "b"));
  });
  SCOPED_TRACE(ir::to_string(g));
  for (const ir::Node& n : g.nodes) {
    ASSERT_TRUE(n.sharding.has_value()) << ir::op_name(n.op);
    EXPECT_EQ(n.sharding->rank(), n.shape.size());
    EXPECT_TRUE(n.sharding->partial.empty());
  }
  EXPECT_EQ(out(g, "y"), R"([{"a"}, {}])");
  EXPECT_EQ(out(g, "pinned"), R"([{}, {"b"}])");
}

}  // namespace
}  // namespace sharc
