// combine_reductions: add(C(a), C(b)) -> C(add(a, b)) for sum collectives with
// the add as their only user. Checked on gradient accumulation (the case it
// exists for), where k micro-batches must cost one collective per gradient,
// and on hand-made graphs for the cases it must leave alone.
#include <gtest/gtest.h>

#include <cmath>

#include "codegen/execute.h"
#include "codegen/passes/combine_reductions.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "dsl/train.h"

namespace sharc {
namespace {

int count_op(const ir::Graph& g, ir::Op op, bool backward_only) {
  int n = 0;
  for (auto& v : g.nodes) n += v.op == op && (!backward_only || v.backward);
  return n;
}

ir::Graph accumulate_program(int k) {
  return trace("acc", [&](ProgramBuilder& b) {
    Linear l1(b.scope() / "l1", 16, 16, {.kernel_init = with_partitioning(lecun_normal(), P(None, None))});
    Linear l2(b.scope() / "l2", 16, 4, {.kernel_init = with_partitioning(lecun_normal(), P(None, None))});
    Tensor x = b.input("x", {32, 16}, P("data", None));
    Tensor y = b.input("y", {32, 4}, P("data", None));
    TrainOptions o;
    o.accumulate_steps = k;
    train_step(
        b, {x, y}, [&](const std::vector<Tensor>& mb) { return mean_squared_error(l2(relu(l1(mb[0]))), mb[1]); },
        sgd(Schedule::constant(0.1)), o);
  });
}

HostValues inputs() {
  std::vector<double> x(32 * 16), y(32 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * i));
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(std::cos(0.3 * i));
  return {{"x", x}, {"y", y}};
}

TEST(CombineReductions, AccumulatedGradientsCostOneAllReduceEach) {
  for (int k : {1, 4}) {
    SCOPED_TRACE("accumulate_steps=" + std::to_string(k));
    const ir::Graph g = accumulate_program(k);
    const Lowered l = lower(g, Mesh::parse("data=4", 4));
    // Four trained tensors (two kernels, two biases): one gradient all-reduce
    // each, whatever k is.
    EXPECT_EQ(count_op(l.partitioned, ir::Op::kAllReduce, /*backward_only=*/true), 4);
    const ExecResult r = execute_partitioned(l.partitioned, inputs(), 3);
    HostValues state;
    const HostValues want = interpret(g, inputs(), 3, &state);
    EXPECT_NEAR(r.outputs.at("loss")[0], want.at("loss")[0], 1e-5 * std::fabs(want.at("loss")[0]));
    for (const auto& [name, w] : state) {
      const auto& got = r.params.at(name);
      for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[i], w[i], 1e-5) << name << "[" << i << "]";
    }
  }
}

// A partitioned graph by hand: x (partial over a) -> two all-reduces -> add.
ir::Graph two_reductions(bool extra_user) {
  ir::Graph g;
  g.mesh = Mesh::parse("a=2", 2);
  g.partitioned = true;
  ir::Sharding rep = ir::Sharding::replicated(1), partial = rep;
  partial.partial = {"a"};
  auto node = [&](ir::Op op, std::vector<int> args, const ir::Sharding& s) {
    ir::Node n;
    n.op = op;
    n.args = std::move(args);
    n.shape = {4};
    n.sharding = s;
    if (op == ir::Op::kInput) n.name = "x" + std::to_string(g.nodes.size());
    if (op == ir::Op::kAllReduce) n.axes = {"a"};
    return g.add(std::move(n));
  };
  const int x0 = node(ir::Op::kInput, {}, partial), x1 = node(ir::Op::kInput, {}, partial);
  const int r0 = node(ir::Op::kAllReduce, {x0}, rep), r1 = node(ir::Op::kAllReduce, {x1}, rep);
  const int s = node(ir::Op::kAdd, {r0, r1}, rep);
  g.outputs.push_back({"s", s, {}, {}, rep});
  if (extra_user) g.outputs.push_back({"r0", r0, {}, {}, rep});
  return g;
}

TEST(CombineReductions, RewritesAddOfTwoAllReduces) {
  const ir::Graph out = combine_reductions(two_reductions(false));
  ir::verify(out);
  EXPECT_EQ(count_op(out, ir::Op::kAllReduce, false), 1);
  const ir::Node& last = out.nodes[out.outputs[0].value];
  EXPECT_EQ(last.op, ir::Op::kAllReduce);
  EXPECT_EQ(out.nodes[last.args[0]].op, ir::Op::kAdd);
  EXPECT_EQ(out.nodes[last.args[0]].sharding->str(), "[{}] partial={\"a\"}");
}

TEST(CombineReductions, KeepsACollectiveWithAnotherUser) {
  const ir::Graph out = combine_reductions(two_reductions(true));
  EXPECT_EQ(count_op(out, ir::Op::kAllReduce, false), 2);
  EXPECT_EQ(ir::to_string(out), ir::to_string(two_reductions(true)));
}

// add(add(all_reduce(x0), y), all_reduce(x1)): a sum chain mixing local
// values and collectives, as the global norm's is, ends with ONE collective:
// add(y, all_reduce(add(x0, x1))).
TEST(CombineReductions, CarriesACollectiveDownASumChain) {
  ir::Graph g = two_reductions(false);
  // Rebuild the tail: s = add(add(r0, y), r1).
  const int r0 = 2, r1 = 3;
  g.nodes.pop_back();
  g.outputs.clear();
  ir::Node y;
  y.op = ir::Op::kInput;
  y.name = "y";
  y.shape = {4};
  y.sharding = ir::Sharding::replicated(1);
  const int yi = g.add(y);
  ir::Node t = g.nodes[r0];
  t.op = ir::Op::kAdd;
  t.axes.clear();
  t.args = {r0, yi};
  const int ti = g.add(t);
  t.args = {ti, r1};
  const int si = g.add(t);
  g.outputs.push_back({"s", si, {}, {}, *t.sharding});
  ir::verify(g);
  ASSERT_EQ(count_op(g, ir::Op::kAllReduce, false), 2);

  const ir::Graph out = combine_reductions(g);
  ir::verify(out);
  EXPECT_EQ(count_op(out, ir::Op::kAllReduce, false), 1) << out;
  const ir::Node& last = out.nodes[out.outputs[0].value];
  ASSERT_EQ(last.op, ir::Op::kAdd) << out;
  EXPECT_EQ(out.nodes[last.args[0]].name, "y") << out;
  const ir::Node& coll = out.nodes[last.args[1]];
  ASSERT_EQ(coll.op, ir::Op::kAllReduce) << out;
  const ir::Node& sum = out.nodes[coll.args[0]];
  ASSERT_EQ(sum.op, ir::Op::kAdd) << out;
  EXPECT_EQ(out.nodes[sum.args[0]].name, "x0");
  EXPECT_EQ(out.nodes[sum.args[1]].name, "x1");
  EXPECT_EQ(sum.sharding->str(), "[{}] partial={\"a\"}");
}

// all_reduce over "b" of all_reduce over "a" of a value partial over both is
// one all_reduce over the product group, axes in mesh order whichever ran
// first.
TEST(CombineReductions, NestedAllReducesBecomeOneOverBothAxes) {
  for (bool a_first : {true, false}) {
    SCOPED_TRACE(a_first ? "a then b" : "b then a");
    ir::Graph g;
    g.mesh = Mesh::parse("a=2,b=2", 4);
    g.partitioned = true;
    ir::Sharding both = ir::Sharding::replicated(1), one = both, none = both;
    both.partial = {"a", "b"};
    one.partial = {a_first ? "b" : "a"};
    ir::Node x;
    x.op = ir::Op::kInput;
    x.name = "x";
    x.shape = {4};
    x.sharding = both;
    const int xi = g.add(x);
    ir::Node r;
    r.op = ir::Op::kAllReduce;
    r.shape = {4};
    r.args = {xi};
    r.axes = {a_first ? "a" : "b"};
    r.sharding = one;
    const int r0 = g.add(r);
    r.args = {r0};
    r.axes = {a_first ? "b" : "a"};
    r.sharding = none;
    const int r1 = g.add(r);
    g.outputs.push_back({"s", r1, {}, {}, none});
    ir::verify(g);

    const ir::Graph out = combine_reductions(g);
    ir::verify(out);
    ASSERT_EQ(count_op(out, ir::Op::kAllReduce, false), 1) << out;
    const ir::Node& last = out.nodes[out.outputs[0].value];
    EXPECT_EQ(last.op, ir::Op::kAllReduce);
    EXPECT_EQ(last.axes, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(out.nodes[last.args[0]].name, "x");
  }
}

}  // namespace
}  // namespace sharc
