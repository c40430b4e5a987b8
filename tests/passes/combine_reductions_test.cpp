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

}  // namespace
}  // namespace sharc
