// cancel_reshards: an all_gather immediately sliced back to the same block
// (same dimension, same axes) is removed and its users read the all_gather's
// operand; pairs over a different dimension or different axes are kept; an
// all_gather left without users goes too. First on the pattern that produces
// the pair in practice (LogicalDotReluDot: a constraint replicates the hidden
// dimension that the next matmul splits again), then on hand-built per-device
// graphs, each also run on the thread runtime to show the values are unchanged.
#include "codegen/passes/cancel_reshards.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/passes/partition_per_device.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"

namespace sharc {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;
using ir::Sharding;
using Steps = std::vector<std::string>;

const Mesh& mesh_2x4() {
  static const Mesh mesh = Mesh::parse("data=2,model=4", 8);
  return mesh;
}

// LogicalDotReluDot at a small size: the relu comes out [{"data"}, {"model"}],
// the constraint wants [{"data"}, {}], the second matmul's weight is split on
// its contracting dimension over 'model', so it wants [{"data"}, {"model"}] again.
void dot_relu_dot(ProgramBuilder& b) {
  b.set_logical_rules({{"batch", "data"}, {"hidden", "model"}, {"embed", std::nullopt}});
  Tensor x = b.input("x", {8, 16}, P("batch", None));
  Param w1 = b.scope().param("w1", {16, 32}, with_metadata(lecun_normal(), P("embed", "hidden")));
  Param w2 = b.scope().param("w2", {32, 16}, with_metadata(lecun_normal(), P("hidden", "embed")));
  Tensor h = relu(matmul(x, w1));
  h = with_sharding_constraint(h, P("data", None));
  b.output("y", matmul(h, w2));
}

// The collectives and local slices, in order, without source locations.
Steps steps(const Graph& g) {
  Steps r;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    Node n = g.nodes[id];
    if (!ir::is_collective(n.op) && n.op != Op::kLocalSlice) continue;
    n.loc = SrcLoc();
    n.name.clear();
    std::ostringstream os;
    os << "%" << id << " = " << n;
    r.push_back(os.str());
  }
  return r;
}

// Local slices that take back exactly what the all_gather feeding them assembled.
int round_trips(const Graph& g) {
  int n = 0;
  for (const Node& s : g.nodes) {
    if (s.op != Op::kLocalSlice) continue;
    const Node& src = g.nodes[s.args[0]];
    n += src.op == Op::kAllGather && src.dim == s.dim && src.axes == s.axes;
  }
  return n;
}

int count(const Graph& g, Op op) {
  return static_cast<int>(
      std::count_if(g.nodes.begin(), g.nodes.end(), [op](const Node& n) { return n.op == op; }));
}

HostValues input_x(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::cos(0.37 * static_cast<double>(i)) - 0.2;
  return {{"x", v}};
}

TEST(CancelReshards, DotReluDotRoundTripIsRemoved) {
  const Graph traced = trace("dot_relu_dot", dot_relu_dot);
  // What partition_per_device leaves, before the cleanup.
  const Graph before = partition_per_device(lower(traced, mesh_2x4()).global);
  SCOPED_TRACE("before:\n" + ir::to_string(before));
  ASSERT_EQ(round_trips(before), 1) << "the pattern no longer produces the pair";
  ASSERT_EQ(count(before, Op::kAllGather), 2);

  const Lowered l = lower(traced, mesh_2x4());
  const Graph& after = l.partitioned;
  SCOPED_TRACE("after:\n" + ir::to_string(after));
  EXPECT_EQ(round_trips(after), 0);
  EXPECT_EQ(count(after, Op::kLocalSlice), 0);
  // The second matmul reads the relu directly; the partial sum it leaves over
  // 'model' is reduce-scattered and gathered into the output's [{"data"}, {}].
  const Steps want = {
      R"(%6 = reduce_scatter(%5) sum dim=1 axes={"model"} : f32[4,4] [{"data"}, {"model"}])",
      R"(%7 = all_gather(%6) dim=1 axes={"model"} : f32[4,16] [{"data"}, {}])"};
  EXPECT_EQ(steps(after), want);
  ASSERT_EQ(after.nodes[5].op, Op::kDot);
  ASSERT_EQ(after.nodes[5].args.size(), 2u);
  EXPECT_EQ(after.nodes[after.nodes[5].args[0]].op, Op::kRelu);
  EXPECT_EQ(after.nodes[5].sharding->str(), R"([{"data"}, {}] partial={"model"})");
  EXPECT_EQ(after.nodes[after.nodes[5].args[0]].sharding->str(), R"([{"data"}, {"model"}])");

  // The pair was an identity: bitwise the same outputs with and without it,
  // and the oracle's values up to float32 rounding (dots of <= 32 terms of
  // O(1) values: a relative error of a few 1e-7; 1e-5 leaves room).
  const HostValues in = input_x(8 * 16);
  const ExecResult a = execute_partitioned(before, in, 3);
  const ExecResult b = execute_partitioned(after, in, 3);
  EXPECT_EQ(a.outputs, b.outputs);
  const HostValues want_y = interpret(traced, in, 3);
  const auto &got = b.outputs.at("y"), &ref = want_y.at("y");
  ASSERT_EQ(got.size(), ref.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(ref[i]));
    worst = std::max(worst, std::fabs(got[i] - ref[i]));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(worst, 1e-5 * scale) << "max abs error " << worst << " (scale " << scale << ")";
}

// --- Hand-built per-device graphs on <["a"=2, "b"=4]>. ---------------------------

Graph base() {
  Graph g;
  g.name = "cancel";
  g.mesh = Mesh::parse("a=2,b=4", 8);
  g.partitioned = true;
  return g;
}

Node input(ir::Shape local, Sharding s) {
  Node n;
  n.op = Op::kInput;
  n.name = "x";
  n.shape = std::move(local);
  n.sharding = std::move(s);
  return n;
}

Node coll(Op op, int arg, ir::Shape local, std::vector<std::string> axes, int dim, Sharding s) {
  Node n;
  n.op = op;
  n.args = {arg};
  n.shape = std::move(local);
  n.axes = std::move(axes);
  n.dim = dim;
  n.sharding = std::move(s);
  return n;
}

Node unary(Op op, int arg, const Graph& g) {
  Node n;
  n.op = op;
  n.args = {arg};
  n.shape = g.nodes[arg].shape;
  n.sharding = g.nodes[arg].sharding;
  return n;
}

void add_output(Graph& g, const std::string& name, int v) {
  g.outputs.push_back({name, v, {}, {}, g.nodes[v].sharding});
}

Sharding sh(std::vector<std::vector<std::string>> dims) {
  return Sharding{std::move(dims), {}};
}

// x [8,8] split on a over dim 0 -> all_gather(a, dim 0) -> local_slice(axes, dim)
// -> neg -> output.
Graph gather_then_slice(int dim, std::vector<std::string> axes, ir::Shape sliced, Sharding s) {
  Graph g = base();
  g.add(input({4, 8}, sh({{"a"}, {}})));
  g.add(coll(Op::kAllGather, 0, {8, 8}, {"a"}, 0, sh({{}, {}})));
  g.add(coll(Op::kLocalSlice, 1, std::move(sliced), std::move(axes), dim, std::move(s)));
  g.add(unary(Op::kNeg, 2, g));
  add_output(g, "y", 3);
  return g;
}

// Values for input x (node 0) of its global shape.
HostValues x_values(const Graph& g) {
  const Node& x = g.nodes[0];
  int64_t n = 1;
  for (size_t d = 0; d < x.shape.size(); ++d) n *= x.shape[d] * x.sharding->parts(g.mesh, d);
  return input_x(n);
}

// cancel_reshards(g), verified and checked to compute what g computes.
Graph cancelled(const Graph& g) {
  ir::verify(g);
  Graph out = cancel_reshards(g);
  ir::verify(out);
  const HostValues in = x_values(g);
  EXPECT_EQ(execute_partitioned(out, in, 0).outputs, execute_partitioned(g, in, 0).outputs);
  return out;
}

TEST(CancelReshards, SameDimensionSameAxesIsRemovedAndUsersRewired) {
  const Graph g = gather_then_slice(0, {"a"}, {4, 8}, sh({{"a"}, {}}));
  const Graph out = cancelled(g);
  EXPECT_EQ(ir::to_string(out),
            "program @cancel mesh=<[\"a\"=2, \"b\"=4]> per-device {\n"
            "  %0 = input() \"x\" : f32[4,8] [{\"a\"}, {}]\n"
            "  %1 = neg(%0) : f32[4,8] [{\"a\"}, {}]\n"
            "  return \"y\" %1 [{\"a\"}, {}]\n"
            "}\n");
}

TEST(CancelReshards, OtherDimensionIsKept) {
  const Graph g = gather_then_slice(1, {"a"}, {8, 4}, sh({{}, {"a"}}));
  EXPECT_EQ(ir::to_string(cancelled(g)), ir::to_string(g));
}

TEST(CancelReshards, OtherAxisIsKept) {
  const Graph g = gather_then_slice(0, {"b"}, {2, 8}, sh({{"b"}, {}}));
  EXPECT_EQ(ir::to_string(cancelled(g)), ir::to_string(g));
}

// Over {a, b} then {b, a}: the same device count, a different block.
TEST(CancelReshards, AxesInAnotherOrderAreKept) {
  for (bool same : {true, false}) {
    Graph g = base();
    g.add(input({2, 8}, sh({{"a", "b"}, {}})));
    g.add(coll(Op::kAllGather, 0, {16, 8}, {"a", "b"}, 0, sh({{}, {}})));
    const std::vector<std::string> axes =
        same ? std::vector<std::string>{"a", "b"} : std::vector<std::string>{"b", "a"};
    g.add(coll(Op::kLocalSlice, 1, {2, 8}, axes, 0, sh({axes, {}})));
    add_output(g, "y", 2);
    const Graph out = cancelled(g);
    SCOPED_TRACE(ir::to_string(out));
    EXPECT_EQ(out.nodes.size(), same ? 1u : 3u);
    EXPECT_EQ(out.outputs[0].value, same ? 0 : 2);
  }
}

TEST(CancelReshards, OutputReadingTheSliceIsRewired) {
  Graph g = base();
  g.add(input({4, 8}, sh({{"a"}, {}})));
  g.add(coll(Op::kAllGather, 0, {8, 8}, {"a"}, 0, sh({{}, {}})));
  g.add(coll(Op::kLocalSlice, 1, {4, 8}, {"a"}, 0, sh({{"a"}, {}})));
  add_output(g, "y", 2);
  const Graph out = cancelled(g);
  ASSERT_EQ(out.nodes.size(), 1u) << ir::to_string(out);
  EXPECT_EQ(out.nodes[0].op, Op::kInput);
  EXPECT_EQ(out.outputs[0].value, 0);
}

TEST(CancelReshards, ChainedRoundTripsCollapse) {
  Graph g = base();
  g.add(input({4, 8}, sh({{"a"}, {}})));
  g.add(coll(Op::kAllGather, 0, {8, 8}, {"a"}, 0, sh({{}, {}})));
  g.add(coll(Op::kLocalSlice, 1, {4, 8}, {"a"}, 0, sh({{"a"}, {}})));
  g.add(coll(Op::kAllGather, 2, {8, 8}, {"a"}, 0, sh({{}, {}})));
  g.add(coll(Op::kLocalSlice, 3, {4, 8}, {"a"}, 0, sh({{"a"}, {}})));
  g.add(unary(Op::kExp, 4, g));
  add_output(g, "y", 5);
  const Graph out = cancelled(g);
  ASSERT_EQ(out.nodes.size(), 2u) << ir::to_string(out);
  EXPECT_EQ(out.nodes[1].op, Op::kExp);
  EXPECT_EQ(out.nodes[1].args, (std::vector<int>{0}));
}

TEST(CancelReshards, AllGatherWithOtherUsersIsKept) {
  Graph g = gather_then_slice(0, {"a"}, {4, 8}, sh({{"a"}, {}}));
  g.add(unary(Op::kExp, 1, g));  // %4 reads the gathered value
  add_output(g, "z", 4);
  const Graph out = cancelled(g);
  SCOPED_TRACE(ir::to_string(out));
  EXPECT_EQ(count(out, Op::kAllGather), 1);
  EXPECT_EQ(count(out, Op::kLocalSlice), 0);
  ASSERT_EQ(out.nodes.size(), 4u);
  EXPECT_EQ(out.nodes[1].op, Op::kAllGather);
  EXPECT_EQ(out.nodes[2].op, Op::kNeg);
  EXPECT_EQ(out.nodes[2].args, (std::vector<int>{0}));  // rewired past the pair
  EXPECT_EQ(out.nodes[3].op, Op::kExp);
  EXPECT_EQ(out.nodes[3].args, (std::vector<int>{1}));
}

TEST(CancelReshards, SlicesOfOtherValuesAreKept) {
  // local_slice of an input (no all_gather before it): nothing to cancel.
  Graph g = base();
  g.add(input({8, 8}, sh({{}, {}})));
  g.add(coll(Op::kLocalSlice, 0, {8, 2}, {"b"}, 1, sh({{}, {"b"}})));
  add_output(g, "y", 1);
  EXPECT_EQ(ir::to_string(cancelled(g)), ir::to_string(g));
}

// Dead code goes with the dead all_gathers; sources stay (every device still
// initialises every parameter shard).
TEST(CancelReshards, UnusedValuesAreDroppedButSourcesStay) {
  Graph g = base();
  g.add(input({8, 8}, sh({{}, {}})));
  Node w;
  w.op = Op::kParameter;
  w.name = "unused_w";
  w.shape = {8, 8};
  w.sharding = sh({{}, {}});
  g.add(w);
  g.add(unary(Op::kTanh, 1, g));  // read by nothing
  g.add(unary(Op::kNeg, 0, g));
  add_output(g, "y", 3);
  const Graph out = cancelled(g);
  EXPECT_EQ(ir::to_string(out),
            "program @cancel mesh=<[\"a\"=2, \"b\"=4]> per-device {\n"
            "  %0 = input() \"x\" : f32[8,8] [{}, {}]\n"
            "  %1 = parameter() \"unused_w\" init=zeros() : f32[8,8] [{}, {}]\n"
            "  %2 = neg(%0) : f32[8,8] [{}, {}]\n"
            "  return \"y\" %2 [{}, {}]\n"
            "}\n");
}

// Training programs: a value read only by a parameter update is live, update
// and layout_of ids follow the renumbering, and a round trip feeding an
// update is cancelled like any other.
TEST(CancelReshards, UpdatesKeepTheirValuesAndIdsFollowTheRenumbering) {
  Graph g = base();
  g.add(input({8, 8}, sh({{}, {}})));
  g.add(unary(Op::kTanh, 0, g));  // %1: read by nothing, dropped
  Node w;
  w.op = Op::kParameter;
  w.name = "w";
  w.shape = {4, 8};
  w.sharding = sh({{"a"}, {}});
  const int wid = g.add(w);  // %2
  w.name = "w_momentum";
  w.layout_of = wid;
  const int mid = g.add(w);                                            // %3
  g.add(coll(Op::kAllGather, wid, {8, 8}, {"a"}, 0, sh({{}, {}})));    // %4
  g.add(coll(Op::kLocalSlice, 4, {4, 8}, {"a"}, 0, sh({{"a"}, {}})));  // %5 = %2
  g.add(unary(Op::kNeg, 5, g));                                        // %6
  g.add(unary(Op::kExp, mid, g));                                      // %7
  g.add(unary(Op::kNeg, 0, g));                                        // %8
  add_output(g, "y", 8);
  g.updates = {{wid, 6}, {mid, 7}};
  const Graph out = cancelled(g);
  EXPECT_EQ(ir::to_string(out),
            "program @cancel mesh=<[\"a\"=2, \"b\"=4]> per-device {\n"
            "  %0 = input() \"x\" : f32[8,8] [{}, {}]\n"
            "  %1 = parameter() \"w\" init=zeros() : f32[4,8] [{\"a\"}, {}]\n"
            "  %2 = parameter() \"w_momentum\" init=zeros() layout_of=%1 : f32[4,8] [{\"a\"}, {}]\n"
            "  %3 = neg(%1) : f32[4,8] [{\"a\"}, {}]\n"
            "  %4 = exp(%2) : f32[4,8] [{\"a\"}, {}]\n"
            "  %5 = neg(%0) : f32[8,8] [{}, {}]\n"
            "  return \"y\" %5 [{}, {}]\n"
            "  update %1 = %3\n"
            "  update %2 = %4\n"
            "}\n");
  HostValues state = x_values(g);
  state["w"] = std::vector<double>(64, 0.5);
  state["w_momentum"] = std::vector<double>(64, -0.25);
  EXPECT_EQ(execute_partitioned(out, state, 0, &state).params,
            execute_partitioned(g, state, 0, &state).params);
}

TEST(CancelReshards, NeedsAPartitionedGraph) {
  Graph g = base();
  g.partitioned = false;
  g.add(input({8, 8}, sh({{}, {}})));
  add_output(g, "y", 0);
  try {
    cancel_reshards(g);
    ADD_FAILURE() << "accepted a global graph";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("cancel_reshards needs a partitioned graph"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sharc
