// ring_collective_matmul and the RingDot op. The pass: which dot/collective
// pairs become rings (threshold, program setting, per-dot marks, the shapes it
// must leave alone), and that ring programs compute what the synchronous
// program computes (gather rings bit for bit, scatter rings within float
// summation order) and what the oracle computes, sending exactly the same
// bytes per device. The op: its printed form and one negative test per
// Constraints item (RingAttrs in ir/ir.h).
#include "codegen/passes/ring_collective_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "dsl/train.h"
#include "tests/common/expect_error.h"

namespace sharc {
namespace {

using ir::Op;
using ir::RingKind;

constexpr uint64_t kSeed = 11;
constexpr auto kUni = RingDirection::kUnidirectional;
constexpr auto kBi = RingDirection::kBidirectional;

int count_op(const ir::Graph& g, Op op) {
  int n = 0;
  for (auto& v : g.nodes) n += v.op == op;
  return n;
}

std::vector<const ir::Node*> rings(const ir::Graph& g) {
  std::vector<const ir::Node*> r;
  for (auto& v : g.nodes)
    if (v.op == Op::kRingDot) r.push_back(&v);
  return r;
}

// Deterministic O(1) values for every input of g.
HostValues inputs_for(const ir::Graph& g) {
  HostValues in;
  for (auto& n : g.nodes) {
    if (n.op != Op::kInput) continue;
    std::vector<double> v(ir::num_elements(n.shape));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(std::sin(0.37 * i + n.name.size()) + 0.25);
    in[n.name] = v;
  }
  return in;
}

Lowered lower_with(const ir::Graph& g, const std::string& mesh,
                   std::optional<CollectiveMatmul> mode, RingDirection direction = kUni,
                   size_t threshold = kDefaultRingThresholdBytes) {
  PipelineOptions o;
  o.collective_matmul = mode;
  o.ring_direction = direction;
  o.ring_threshold_bytes = threshold;
  return lower(g, Mesh::parse(mesh), o);
}

// fp32 against the fp64 oracle, relative to each output's largest magnitude:
// the dots here have at most a few hundred O(1) terms, so 1e-5 leaves a wide
// margin over fp32 accumulation error (~1e-7 per term).
void expect_matches_oracle(const ir::Graph& global, const ExecResult& got) {
  const HostValues want = interpret(global, inputs_for(global), kSeed);
  for (auto& [name, w] : want) {
    const std::vector<double>& o = got.outputs.at(name);
    ASSERT_EQ(o.size(), w.size()) << name;
    double scale = 0, worst = 0;
    for (double x : w) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::fabs(o[i] - w[i]));
    EXPECT_LE(worst, 1e-5 * scale) << "output " << name << " against the oracle";
  }
}

// The ring program against the synchronous one: bit for bit when `bitwise`,
// else within 1e-5 of the output's scale; and the same bytes sent by every
// device, now as ppermutes. Each result element is the same sum of the same
// products, but OpenBLAS does not give a block of rows (or columns) of a
// product the bits of the whole product (measured on Haswell kernels: 1-2 ulp
// apart), and bidirectional scatter rings add in another order; so only rings
// whose GEMMs are the synchronous program's GEMMs (a batch-dimension gather)
// are compared bit for bit. The emitted code matches the interpreter bit for
// bit (tests/emit).
void expect_matches_sync(const ExecResult& ring, const ExecResult& sync, bool bitwise) {
  for (auto& [name, s] : sync.outputs) {
    const std::vector<double>& r = ring.outputs.at(name);
    ASSERT_EQ(r.size(), s.size()) << name;
    double scale = 0, worst = 0;
    for (double x : s) scale = std::max(scale, std::fabs(x));
    size_t differ = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      worst = std::max(worst, std::fabs(r[i] - s[i]));
      differ += r[i] != s[i];
    }
    if (bitwise)
      EXPECT_EQ(differ, 0u) << "output " << name << ": " << differ << " elements differ, max "
                            << worst;
    else
      EXPECT_LE(worst, 1e-5 * scale) << "output " << name << " against the synchronous program";
  }
  ASSERT_EQ(ring.comm.size(), sync.comm.size());
  for (size_t d = 0; d < sync.comm.size(); ++d)
    EXPECT_EQ(ring.comm[d].total_bytes(), sync.comm[d].total_bytes())
        << "device " << d << "\nring:\n"
        << ring.comm[d].to_string() << "sync:\n"
        << sync.comm[d].to_string();
}

// Lowers g with rings forced on and off, runs both, checks the values and bytes.
void check_ring_program(const ir::Graph& g, const std::string& mesh, RingDirection dir,
                        bool bitwise, int expect_rings) {
  const Lowered ring = lower_with(g, mesh, CollectiveMatmul::kAlways, dir);
  const Lowered sync = lower_with(g, mesh, CollectiveMatmul::kNever, dir);
  SCOPED_TRACE("ring program:\n" + ir::to_string(ring.partitioned));
  EXPECT_EQ(static_cast<int>(rings(ring.partitioned).size()), expect_rings);
  EXPECT_EQ(count_op(sync.partitioned, Op::kRingDot), 0);
  const HostValues in = inputs_for(g);
  const ExecResult r = execute_partitioned(ring.partitioned, in, kSeed);
  const ExecResult s = execute_partitioned(sync.partitioned, in, kSeed);
  expect_matches_oracle(g, r);
  expect_matches_sync(r, s, bitwise);
  for (const rt::CommStats& c : r.comm)
    EXPECT_EQ(c.count(rt::CollectiveKind::kPPermute) > 0, expect_rings > 0);
}

// ---- programs ---------------------------------------------------------------

// Megatron's MLP with sequence parallelism: tokens sharded on `tokens`, the
// hidden layer on 'model'. The first dot gathers the tokens (all_gather of x
// along dim 0), the second reduce-scatters its partial sums back onto them.
// `gathered`: the tokens' layout for the first layer (the axes other than
// 'model' stay).
ir::Graph megatron_mlp(DimSpec tokens, DimSpec gathered = None, int64_t t = 32, int64_t d = 48,
                       int64_t h = 64) {
  return trace("mlp", [=](ProgramBuilder& b) {
    Param w1 = b.scope().param("w1", {d, h}, with_partitioning(lecun_normal(), P(None, "model")));
    Param w2 = b.scope().param("w2", {h, d}, with_partitioning(lecun_normal(), P("model", None)));
    Tensor x = b.input("x", {t, d}, P(tokens, None));
    // All tokens for the column-parallel layer, as Megatron's sequence parallelism does.
    Tensor hid = relu(matmul(with_sharding_constraint(x, P(gathered, None)), w1));
    b.output("y", matmul(hid, w2), P(tokens, None));
  });
}

TEST(RingCollectiveMatmul, MegatronMlpOnModel4) {
  for (RingDirection dir : {kUni, kBi}) {
    SCOPED_TRACE(ir::ring_direction_name(dir));
    const ir::Graph g = megatron_mlp("model");
    const Lowered l = lower_with(g, "model=4", CollectiveMatmul::kAlways, dir);
    // Both collectives of the layer pair are gone, absorbed into two rings.
    EXPECT_EQ(count_op(l.partitioned, Op::kAllGather), 0);
    EXPECT_EQ(count_op(l.partitioned, Op::kReduceScatter), 0);
    const auto r = rings(l.partitioned);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0]->ring.kind, RingKind::kGather);
    EXPECT_EQ(r[0]->ring.operand, 0);
    EXPECT_EQ(r[0]->dim, 0);
    EXPECT_EQ(r[1]->ring.kind, RingKind::kScatter);
    EXPECT_EQ(r[1]->dim, 0);
    EXPECT_EQ(r[0]->ring.direction, dir);
    EXPECT_EQ(r[1]->ring.direction, dir);
    check_ring_program(g, "model=4", dir, /*bitwise=*/false, 2);
  }
}

TEST(RingCollectiveMatmul, MegatronMlpOnData2Model4) {
  for (RingDirection dir : {kUni, kBi}) {
    SCOPED_TRACE(ir::ring_direction_name(dir));
    const ir::Graph g = megatron_mlp(axes("data", "model"), "data");
    const Lowered l = lower_with(g, "data=2,model=4", CollectiveMatmul::kAlways, dir);
    EXPECT_EQ(count_op(l.partitioned, Op::kAllGather), 0);
    EXPECT_EQ(count_op(l.partitioned, Op::kReduceScatter), 0);
    for (const ir::Node* r : rings(l.partitioned))
      EXPECT_EQ(r->axes, std::vector<std::string>{"model"});
    check_ring_program(g, "data=2,model=4", dir, /*bitwise=*/false, 2);
  }
}

// The rhs travels: out = w @ x^T with x^T's columns (tokens) sharded; each
// step's result block is a column block, placed with place_block.
TEST(RingCollectiveMatmul, RhsGatheredAlongItsLastDim) {
  const ir::Graph g = trace("rhs", [](ProgramBuilder& b) {
    Param w = b.scope().param("w", {24, 16}, with_partitioning(lecun_normal(), P(None, None)));
    Tensor xt = b.input("xt", {16, 32}, P(None, "model"));
    b.output("y", matmul(w, with_sharding_constraint(xt, P(None, None))), P(None, None));
  });
  for (RingDirection dir : {kUni, kBi}) {
    SCOPED_TRACE(ir::ring_direction_name(dir));
    const Lowered l = lower_with(g, "model=4", CollectiveMatmul::kAlways, dir);
    const auto r = rings(l.partitioned);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0]->ring.kind, RingKind::kGather);
    EXPECT_EQ(r[0]->ring.operand, 1);
    EXPECT_EQ(r[0]->dim, 1);
    check_ring_program(g, "model=4", dir, /*bitwise=*/false, 1);
  }
}

// The lhs travels along a middle dimension (sequence of a [B, S, D]
// activation): result pieces are strided, placed with place_block.
TEST(RingCollectiveMatmul, LhsGatheredAlongAMiddleDim) {
  const ir::Graph g = trace("mid", [](ProgramBuilder& b) {
    Param w = b.scope().param("w", {16, 24}, with_partitioning(lecun_normal(), P(None, None)));
    Tensor x = b.input("x", {3, 16, 16}, P(None, "model", None));
    b.output("y", matmul(with_sharding_constraint(x, P(None, None, None)), w), P(None, None, None));
  });
  for (RingDirection dir : {kUni, kBi}) {
    SCOPED_TRACE(ir::ring_direction_name(dir));
    check_ring_program(g, "model=4", dir, /*bitwise=*/false, 1);
  }
}

// Gathering a batch dimension: the stationary operand is cut to the block's
// batch at every step. Each batch is one GEMM of the same shape as in the
// synchronous program, so here the ring is bit for bit the same.
TEST(RingCollectiveMatmul, GatherAlongABatchDim) {
  const ir::Graph g = trace("batch", [](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 6, 16}, P("model", None, None));
    Tensor w = b.input("w", {8, 16, 10}, P(None, None, None));
    b.output("y", matmul(with_sharding_constraint(x, P(None, None, None)), w), P(None, None, None));
  });
  for (RingDirection dir : {kUni, kBi}) {
    SCOPED_TRACE(ir::ring_direction_name(dir));
    const Lowered l = lower_with(g, "model=4", CollectiveMatmul::kAlways, dir);
    const auto r = rings(l.partitioned);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0]->ring.kind, RingKind::kGather);
    EXPECT_EQ(r[0]->dim, 0);
    check_ring_program(g, "model=4", dir, /*bitwise=*/true, 1);
  }
}

// Scatter onto the rhs's free dimension (the last): every step slices a
// column block of the rhs; bidirectional halves are placed with place_block.
TEST(RingCollectiveMatmul, ScatterOntoAnRhsFreeDim) {
  const ir::Graph g = trace("rs_rhs", [](ProgramBuilder& b) {
    Param w = b.scope().param("w", {24, 64}, with_partitioning(lecun_normal(), P(None, "model")));
    Tensor h = b.input("h", {64, 32}, P("model", None));
    b.output("y", matmul(w, h), P(None, "model"));
  });
  for (RingDirection dir : {kUni, kBi}) {
    SCOPED_TRACE(ir::ring_direction_name(dir));
    const Lowered l = lower_with(g, "model=4", CollectiveMatmul::kAlways, dir);
    const auto r = rings(l.partitioned);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0]->ring.kind, RingKind::kScatter);
    EXPECT_EQ(r[0]->dim, 1);
    check_ring_program(g, "model=4", dir, /*bitwise=*/false, 1);
  }
}

// Scatter of a batched dot onto an lhs free dimension behind the batch: the
// lhs pieces are strided (slice_block).
TEST(RingCollectiveMatmul, ScatterOfABatchedDot) {
  const ir::Graph g = trace("rs_batched", [](ProgramBuilder& b) {
    Tensor a = b.input("a", {2, 16, 32}, P(None, None, "model"));
    Tensor c = b.input("c", {2, 32, 8}, P(None, "model", None));
    b.output("y", matmul(a, c), P(None, "model", None));
  });
  for (RingDirection dir : {kUni, kBi}) {
    SCOPED_TRACE(ir::ring_direction_name(dir));
    const Lowered l = lower_with(g, "model=4", CollectiveMatmul::kAlways, dir);
    const auto r = rings(l.partitioned);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0]->ring.kind, RingKind::kScatter);
    EXPECT_EQ(r[0]->dim, 1);
    check_ring_program(g, "model=4", dir, /*bitwise=*/false, 1);
  }
}

// A block of odd size cannot be halved: bidirectional falls back to one way.
TEST(RingCollectiveMatmul, OddBlocksRunOneWay) {
  const ir::Graph g = megatron_mlp("model", None, /*t=*/12);  // 3 tokens per device
  const Lowered l = lower_with(g, "model=4", CollectiveMatmul::kAlways, kBi);
  const auto r = rings(l.partitioned);
  ASSERT_EQ(r.size(), 2u);
  for (const ir::Node* n : r) EXPECT_EQ(n->ring.direction, kUni);
  check_ring_program(g, "model=4", kBi, /*bitwise=*/false, 2);
}

// ---- selection --------------------------------------------------------------

TEST(RingCollectiveMatmul, ThresholdSelectsByBytesSent) {
  const ir::Graph g = megatron_mlp("model");
  // The all_gather of x: 3 blocks of f32[8,48]; the reduce_scatter: 3 blocks of f32[8,48].
  constexpr size_t kBytes = 3 * 8 * 48 * sizeof(float);
  EXPECT_EQ(count_op(lower_with(g, "model=4", std::nullopt).partitioned, Op::kRingDot), 0)
      << "the default 1 MiB threshold rings nothing this small";
  EXPECT_EQ(count_op(lower_with(g, "model=4", CollectiveMatmul::kAuto, kUni, kBytes).partitioned,
                     Op::kRingDot),
            0)
      << "rings only what sends MORE than the threshold";
  const Lowered on = lower_with(g, "model=4", CollectiveMatmul::kAuto, kUni, kBytes - 1);
  EXPECT_EQ(count_op(on.partitioned, Op::kRingDot), 2);
  EXPECT_EQ(count_op(lower_with(g, "model=4", CollectiveMatmul::kNever, kUni, 0).partitioned,
                     Op::kRingDot),
            0);
  EXPECT_EQ(
      count_op(lower_with(g, "model=4", CollectiveMatmul::kAlways, kUni, SIZE_MAX).partitioned,
               Op::kRingDot),
      2);
}

// The program's setting applies unless PipelineOptions replace it; a dot's
// own mark wins over both.
TEST(RingCollectiveMatmul, ProgramSettingAndPerDotMarks) {
  auto mlp = [](std::optional<CollectiveMatmul> program, std::optional<bool> first,
                std::optional<bool> second) {
    return trace("mlp", [=](ProgramBuilder& b) {
      if (program) b.set_collective_matmul(*program, kUni);
      Param w1 =
          b.scope().param("w1", {48, 64}, with_partitioning(lecun_normal(), P(None, "model")));
      Param w2 =
          b.scope().param("w2", {64, 48}, with_partitioning(lecun_normal(), P("model", None)));
      Tensor x = b.input("x", {32, 48}, P("model", None));
      Tensor up = matmul(with_sharding_constraint(x, P(None, None)), w1);
      if (first) up = with_collective_matmul(up, *first);
      Tensor hid = relu(up);
      Tensor down = matmul(hid, w2);
      if (second) down = with_collective_matmul(down, *second);
      b.output("y", down, P("model", None));
    });
  };
  auto kinds = [](const ir::Graph& g) {
    std::string s;
    const Lowered l = lower(g, Mesh::parse("model=4"));
    for (const ir::Node* r : rings(l.partitioned))
      s += r->ring.kind == RingKind::kGather ? "G" : "S";
    return s;
  };
  EXPECT_EQ(kinds(mlp(std::nullopt, std::nullopt, std::nullopt)), "");
  EXPECT_EQ(kinds(mlp(CollectiveMatmul::kAlways, std::nullopt, std::nullopt)), "GS");
  EXPECT_EQ(kinds(mlp(CollectiveMatmul::kAlways, false, std::nullopt)), "S");
  EXPECT_EQ(kinds(mlp(CollectiveMatmul::kNever, std::nullopt, true)), "S");
  EXPECT_EQ(kinds(mlp(std::nullopt, true, std::nullopt)), "G");
  // PipelineOptions replace the program's setting, not the marks.
  const ir::Graph g = mlp(CollectiveMatmul::kAlways, std::nullopt, true);
  EXPECT_EQ(count_op(lower_with(g, "model=4", CollectiveMatmul::kNever).partitioned, Op::kRingDot),
            1);
  // The mark travels to the per-device dot, and prints.
  const Lowered never =
      lower_with(mlp(std::nullopt, false, std::nullopt), "model=4", CollectiveMatmul::kNever);
  bool printed = false;
  for (int i = 0; i < static_cast<int>(never.partitioned.nodes.size()); ++i)
    printed = printed || ir::node_str(never.partitioned, i).find("collective_matmul=never") !=
                             std::string::npos;
  EXPECT_TRUE(printed) << ir::to_string(never.partitioned);
  // The program's direction reaches the rings.
  const ir::Graph bi = trace("bi", [](ProgramBuilder& b) {
    b.set_collective_matmul(CollectiveMatmul::kAlways);  // bidirectional by default
    Param w1 = b.scope().param("w1", {48, 64}, with_partitioning(lecun_normal(), P(None, "model")));
    Tensor x = b.input("x", {32, 48}, P("model", None));
    b.output("y", matmul(with_sharding_constraint(x, P(None, None)), w1), P(None, "model"));
  });
  const Lowered l = lower(bi, Mesh::parse("model=4"));
  const auto r = rings(l.partitioned);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]->ring.direction, kBi);
}

TEST(RingCollectiveMatmul, MarkingANonDotIsAUserError) {
  try {
    trace("bad", [](ProgramBuilder& b) {
      Tensor x = b.input("x", {4, 4});
      with_collective_matmul(relu(x), true);
    });
    FAIL() << "accepted";
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    EXPECT_NE(std::string(e.what()).find("with_collective_matmul: "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("is the result of relu, not of a matmul"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("ring_collective_matmul_test.cpp"), std::string::npos)
        << e.what();
  }
}

// Hand-built per-device graphs the pass must leave alone (forced on).
class LeftAlone : public ::testing::Test {
 protected:
  ir::Graph g;
  void SetUp() override {
    g.name = "t";
    g.mesh = Mesh::parse("a=2,b=4", 8);
    g.partitioned = true;
  }
  int add(Op op, std::vector<int> args, ir::Shape shape) {
    ir::Node n;
    n.op = op;
    n.args = std::move(args);
    n.shape = std::move(shape);
    if (op == Op::kInput) n.name = "in" + std::to_string(g.nodes.size());
    if (op == Op::kDot) n.dot.lhs_contract = {1}, n.dot.rhs_contract = {0};
    return g.add(std::move(n));
  }
  int gather(int x, ir::Shape shape, std::vector<std::string> axes, int dim) {
    const int id = add(Op::kAllGather, {x}, std::move(shape));
    g.nodes[id].axes = std::move(axes);
    g.nodes[id].dim = dim;
    return id;
  }
  int unchanged_rings() {
    ir::verify(g);
    const ir::Graph out = ring_collective_matmul(g, {CollectiveMatmul::kAlways, kUni, 0});
    EXPECT_EQ(ir::to_string(out), ir::to_string(g));
    return count_op(out, Op::kRingDot);
  }
};

TEST_F(LeftAlone, AllGatherWithTwoUsers) {
  const int x = add(Op::kInput, {}, {2, 8}), w = add(Op::kInput, {}, {8, 8});
  const int ag = gather(x, {8, 8}, {"b"}, 0);
  const int d = add(Op::kDot, {ag, w}, {8, 8});
  g.outputs.push_back({"y", d, {}, std::nullopt, std::nullopt});
  g.outputs.push_back({"g", ag, {}, std::nullopt, std::nullopt});
  EXPECT_EQ(unchanged_rings(), 0);
}

TEST_F(LeftAlone, AllGatherOverTwoAxes) {
  const int x = add(Op::kInput, {}, {1, 8}), w = add(Op::kInput, {}, {8, 8});
  const int d = add(Op::kDot, {gather(x, {8, 8}, {"a", "b"}, 0), w}, {8, 8});
  g.outputs.push_back({"y", d, {}, std::nullopt, std::nullopt});
  EXPECT_EQ(unchanged_rings(), 0);
}

TEST_F(LeftAlone, AllGatherOfAContractingDim) {
  const int x = add(Op::kInput, {}, {8, 2}), w = add(Op::kInput, {}, {8, 8});
  const int d = add(Op::kDot, {gather(x, {8, 8}, {"b"}, 1), w}, {8, 8});
  g.outputs.push_back({"y", d, {}, std::nullopt, std::nullopt});
  EXPECT_EQ(unchanged_rings(), 0);
}

TEST_F(LeftAlone, MaxReduceScatter) {
  const int x = add(Op::kInput, {}, {8, 8}), w = add(Op::kInput, {}, {8, 8});
  const int d = add(Op::kDot, {x, w}, {8, 8});
  const int rs = add(Op::kReduceScatter, {d}, {2, 8});
  g.nodes[rs].axes = {"b"};
  g.nodes[rs].dim = 0;
  g.nodes[rs].reduce = ir::ReduceKind::kMax;
  g.outputs.push_back({"y", rs, {}, std::nullopt, std::nullopt});
  EXPECT_EQ(unchanged_rings(), 0);
}

// ---- training: backward dots ring too ----------------------------------------

TEST(RingCollectiveMatmul, TrainStepMatchesSynchronous) {
  const ir::Graph g = trace("train", [](ProgramBuilder& b) {
    Linear l1(b.scope() / "l1", 32, 64,
              {.kernel_init = with_partitioning(lecun_normal(), P(None, "model"))});
    Linear l2(b.scope() / "l2", 64, 32,
              {.kernel_init = with_partitioning(lecun_normal(), P("model", None))});
    Tensor x = b.input("x", {16, 32}, P("model", None));
    Tensor y = b.input("y", {16, 32}, P("model", None));
    train_step(
        b, {x, y},
        [&](const std::vector<Tensor>& mb) {
          Tensor h = with_sharding_constraint(relu(l1(mb[0])), P(None, "model"));
          return mean_squared_error(with_sharding_constraint(l2(h), P("model", None)), mb[1]);
        },
        sgd(Schedule::constant(0.1)));
  });
  const Lowered ring = lower_with(g, "model=4", CollectiveMatmul::kAlways, kBi);
  const Lowered sync = lower_with(g, "model=4", CollectiveMatmul::kNever, kBi);
  EXPECT_GE(count_op(ring.partitioned, Op::kRingDot), 2) << ir::to_string(ring.partitioned);
  const HostValues in = inputs_for(g);
  const ExecResult r = execute_partitioned(ring.partitioned, in, kSeed);
  const ExecResult s = execute_partitioned(sync.partitioned, in, kSeed);
  expect_matches_sync(r, s, /*bitwise=*/false);
  for (auto& [name, want] : s.params) {
    const auto& got = r.params.at(name);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5) << name << "[" << i << "]";
  }
}

// ---- the op: printer and verifier -------------------------------------------

ir::Graph ring_graph(RingKind kind) {
  ir::Graph g;
  g.name = "t";
  g.mesh = Mesh::parse("a=2,b=4", 8);
  g.partitioned = true;
  auto input = [&](ir::Shape s) {
    ir::Node n;
    n.op = Op::kInput;
    n.name = "in" + std::to_string(g.nodes.size());
    n.shape = std::move(s);
    return g.add(std::move(n));
  };
  ir::Node r;
  r.op = Op::kRingDot;
  r.dot.lhs_contract = {1};
  r.dot.rhs_contract = {0};
  r.axes = {"b"};
  r.dim = 0;
  r.ring.kind = kind;
  if (kind == RingKind::kGather) {
    r.args = {input({2, 8}), input({8, 6})};
    r.shape = {8, 6};  // the lhs block f32[2,8] gathered 4 ways
  } else {
    r.args = {input({8, 8}), input({8, 6})};
    r.shape = {2, 6};  // block of the f32[8,6] dot
  }
  g.add(std::move(r));
  return g;
}

TEST(RingDotPrinter, OneLine) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].ring.direction = kBi;
  EXPECT_EQ(ir::node_str(g, 2),
            "%2 = ring_dot(%0, %1) contract=[1]x[0] gather=lhs dim=0 axes={\"b\"} bidirectional : "
            "f32[8,6]");
  g = ring_graph(RingKind::kScatter);
  EXPECT_EQ(ir::node_str(g, 2),
            "%2 = ring_dot(%0, %1) contract=[1]x[0] scatter dim=0 axes={\"b\"} unidirectional : "
            "f32[2,6]");
  ir::verify(g);
  ir::verify(ring_graph(RingKind::kGather));
}

// ir::verify must fail naming node %2 with `reason`.
void expect_rejected(const ir::Graph& g, const std::string& reason) {
  try {
    ir::verify(g);
    ADD_FAILURE() << "verify() accepted:\n" << ir::to_string(g);
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("IR verification failed at " + ir::node_str(g, 2) + ": " + reason),
              std::string::npos)
        << what;
  }
}

TEST(RingDotVerifier, OnlyInPartitionedIr) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.partitioned = false;
  expect_rejected(g, "collective in a global (unpartitioned) program");
}

TEST(RingDotVerifier, ExactlyOneAxis) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].axes = {"a", "b"};
  expect_rejected(g, "ring_dot runs over exactly one mesh axis");
}

TEST(RingDotVerifier, KnownAxis) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].axes = {"c"};
  expect_rejected(g, "unknown mesh axis \"c\"");
}

TEST(RingDotVerifier, AxisOfSizeTwoOrMore) {
  ir::Graph g = ring_graph(RingKind::kScatter);
  g.mesh = Mesh::parse("a=2,b=1", 2);
  g.nodes[2].shape = {8, 6};
  expect_rejected(g, "ring_dot over an axis of size 1");
}

TEST(RingDotVerifier, GatherOperandIsLhsOrRhs) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].ring.operand = 2;
  expect_rejected(g, "ring_dot gathers neither lhs nor rhs");
}

TEST(RingDotVerifier, GatherDimInRange) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].dim = 2;
  expect_rejected(g, "ring_dot gather dim out of range");
}

TEST(RingDotVerifier, GatherDimIsNotContracting) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].dim = 1;
  expect_rejected(g, "ring_dot gathers a contracting dimension");
}

TEST(RingDotVerifier, GatherResultIsTheGatheredDot) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].shape = {2, 6};
  expect_rejected(g, "dot result shape mismatch");
}

TEST(RingDotVerifier, GatherDotDimsValid) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[2].dot.rhs_contract = {};
  expect_rejected(g, "unpaired dot dimensions");
}

TEST(RingDotVerifier, ScatterDimIsAFreeResultDim) {
  ir::Graph g = ring_graph(RingKind::kScatter);
  g.nodes[2].dim = 2;
  expect_rejected(g, "ring_dot scatter dim is not a free dimension of the result");
}

TEST(RingDotVerifier, ScatterResultIsABlockOfTheDot) {
  ir::Graph g = ring_graph(RingKind::kScatter);
  g.nodes[2].shape = {8, 6};
  expect_rejected(g, "dot result shape mismatch");
}

TEST(RingDotVerifier, BidirectionalBlocksSplitInHalves) {
  ir::Graph g = ring_graph(RingKind::kGather);
  g.nodes[0].shape = {3, 8};
  g.nodes[2].shape = {12, 6};
  g.nodes[2].ring.direction = kBi;
  expect_rejected(g, "bidirectional ring_dot block does not split in halves");
  g = ring_graph(RingKind::kScatter);
  g.nodes[0].shape = {12, 8};
  g.nodes[2].shape = {3, 6};
  g.nodes[2].ring.direction = kBi;
  expect_rejected(g, "bidirectional ring_dot block does not split in halves");
}

}  // namespace
}  // namespace sharc
