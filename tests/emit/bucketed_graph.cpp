// The hand-built bucketed program; see bucketed_graph.h.
#include "tests/emit/bucketed_graph.h"

namespace sharc::test {

namespace {

using ir::Node;
using ir::Op;
using ir::ReduceKind;
using ir::Sharding;

Sharding layout(std::vector<std::vector<std::string>> dims, std::vector<std::string> partial = {},
                ReduceKind kind = ReduceKind::kSum) {
  Sharding s;
  s.dims = std::move(dims);
  s.partial = std::move(partial);
  s.partial_kind = kind;
  return s;
}

}  // namespace

ir::Graph bucketed_all_reduce_graph(bool bucketed) {
  ir::Graph g;
  g.name = "bucketed_all_reduce";
  g.mesh = Mesh::parse("data=4,model=2");
  g.partitioned = true;
  auto node = [&](Op op, std::vector<int> args, ir::Shape shape, Sharding s,
                  SrcLoc loc = Here::current()) {
    Node n;
    n.op = op;
    n.args = std::move(args);
    n.shape = std::move(shape);
    n.sharding = std::move(s);
    n.loc = std::move(loc);
    return n;
  };
  auto input = [&](const std::string& name, ir::Shape shape, Sharding s,
                   SrcLoc loc = Here::current()) {
    Node n = node(Op::kInput, {}, std::move(shape), std::move(s), std::move(loc));
    n.name = name;
    return g.add(std::move(n));
  };
  auto reduce = [&](int arg, int axis, ReduceKind kind, const std::string& over,
                    SrcLoc loc = Here::current()) {
    Node n = node(Op::kReduce, {arg}, {8}, layout({{}}, {over}, kind), std::move(loc));
    n.ints = {axis};
    n.reduce = kind;
    n.name = "partials";
    return g.add(std::move(n));
  };
  auto all_reduce = [&](int arg, const std::string& axis, ReduceKind kind, int bucket,
                        SrcLoc loc = Here::current()) {
    Node n = node(Op::kAllReduce, {arg}, {8}, layout({{}}), std::move(loc));
    n.axes = {axis};
    n.reduce = kind;
    n.dim2 = bucketed ? bucket : -1;
    n.name = "grads";
    return g.add(std::move(n));
  };
  const int x = input("x", {2, 8}, layout({{"data"}, {}}));   // %0
  const int y = input("y", {8, 4}, layout({{}, {"model"}}));  // %1
  const int sum_x = reduce(x, 0, ReduceKind::kSum, "data");   // %2
  const int xx = g.add(node(Op::kMul, {x, x}, {2, 8}, layout({{"data"}, {}})));
  const int sum_xx = reduce(xx, 0, ReduceKind::kSum, "data");  // %4
  const int max_x = reduce(x, 0, ReduceKind::kMax, "data");    // %5
  const int sum_y = reduce(y, 1, ReduceKind::kSum, "model");   // %6
  const int yy = g.add(node(Op::kMul, {y, y}, {8, 4}, layout({{}, {"model"}})));
  const int sum_yy = reduce(yy, 1, ReduceKind::kSum, "model");  // %8
  std::vector<std::pair<std::string, int>> outs = {
      {"sum_x", all_reduce(sum_x, "data", ReduceKind::kSum, 0)},    // %9
      {"sum_xx", all_reduce(sum_xx, "data", ReduceKind::kSum, 0)},  // %10
      {"sum_x_b3", all_reduce(sum_x, "data", ReduceKind::kSum, 3)},
      {"max_x", all_reduce(max_x, "data", ReduceKind::kMax, 3)},
      {"sum_y", all_reduce(sum_y, "model", ReduceKind::kSum, 1)},
      {"sum_yy", all_reduce(sum_yy, "model", ReduceKind::kSum, 1)},
      {"sum_xx_alone", all_reduce(sum_xx, "data", ReduceKind::kSum, -1)},  // %15
  };
  const int chain = all_reduce(sum_x, "data", ReduceKind::kSum, 5);  // %16
  outs.push_back({"chain", chain});
  outs.push_back({"chain2", all_reduce(chain, "data", ReduceKind::kSum, 5)});  // %17
  for (auto& [name, v] : outs) g.outputs.push_back({name, v, Here::current(), {}, layout({{}})});
  ir::verify(g);
  return g;
}

}  // namespace sharc::test
