// shard_map: bodies with each per-device collective, run per device
// (execute_partitioned) against the oracle (which simulates every device in
// fp64); TPDense in each mode and TPAsyncDense against the same dense layer
// left to the partitioner; user errors with their text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ir/autodiff.h"
#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "tests/common/expect_error.h"

namespace sharc {
namespace {

using ::testing::HasSubstr;

std::vector<double> values(int64_t n, double phase) {
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::sin(0.37 * i + phase) + 0.25);
  return x;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0, worst = 0;
  size_t at = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - want[i]) > worst) worst = std::fabs(got[i] - want[i]), at = i;
  EXPECT_LE(worst, rtol * std::max(scale, 1e-30))
      << "max abs error " << worst << " at " << at << ": got " << got[at] << " want " << want[at];
}

// Lowers `fn` for `mesh` and checks execute_partitioned against the oracle
// on output "y"; returns the oracle's y.
std::vector<double> check_against_oracle(const ProgramFn& fn, const std::string& mesh, const HostValues& in) {
  ir::Graph g = trace("shard_map_test", fn);
  Lowered l = lower(g, Mesh::parse(mesh));
  auto want = interpret(l.global, in, 7);
  auto got = execute_partitioned(l.partitioned, in, 7);
  expect_close(got.outputs.at("y"), want.at("y"), 1e-5);
  return want.at("y");
}

// x f32[8,16] on P("data", "model") (blocks [4,4] on data=2,model=4).
const HostValues kX = {{"x", values(8 * 16, 0.0)}};

TEST(ShardMap, Psum) {
  // Each device sums its block's rows and psums over model: y[d, c] = sum of
  // row block d over all columns, for each of the 4 local columns... checked
  // exactly below against a serial computation too.
  auto want = check_against_oracle(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P("data", "model"));
        auto y = shard_map(
            [](const std::vector<Tensor>& l) { return std::vector<Tensor>{psum(l[0], "model")}; }, {x},
            {P("data", "model")}, {P("data", None)}, {{8, 4}});
        b.output("y", y[0]);
      },
      "data=2,model=4", kX);
  // y[r, c] = sum_k x[r, 4k + c].
  const auto& x = kX.at("x");
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += x[r * 16 + 4 * k + c];
      EXPECT_NEAR(want[r * 4 + c], s, 1e-9);
    }
}

TEST(ShardMap, AllGather) {
  auto want = check_against_oracle(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P("data", "model"));
        auto y = shard_map(
            [](const std::vector<Tensor>& l) {
              return std::vector<Tensor>{relu(all_gather(l[0], "model", 1))};
            },
            {x}, {P("data", "model")}, {P("data", None)}, {{8, 16}});
        b.output("y", y[0]);
      },
      "data=2,model=4", kX);
  const auto& x = kX.at("x");
  for (size_t i = 0; i < x.size(); ++i) EXPECT_DOUBLE_EQ(want[i], std::max(x[i], 0.0));
}

TEST(ShardMap, PsumScatter) {
  check_against_oracle(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P("data", "model"));
        auto y = shard_map(
            [](const std::vector<Tensor>& l) {
              return std::vector<Tensor>{psum_scatter(mul(l[0], l[0]), "model", 1)};
            },
            {x}, {P("data", "model")}, {P("data", "model")}, {{8, 4}});
        b.output("y", add(y[0], 1.0));
      },
      "data=2,model=4", kX);
}

TEST(ShardMap, PPermuteAndAxisIndex) {
  // Shift blocks one position right along model (the last one wraps), then
  // add each device's model coordinate; position 0 receives from 3.
  auto want = check_against_oracle(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P("data", "model"));
        auto y = shard_map(
            [](const std::vector<Tensor>& l) {
              Tensor moved = ppermute(l[0], "model", {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
              return std::vector<Tensor>{add(moved, axis_index("model"))};
            },
            {x}, {P("data", "model")}, {P("data", "model")}, {{8, 16}});
        b.output("y", y[0]);
      },
      "data=2,model=4", kX);
  const auto& x = kX.at("x");
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 16; ++c) {
      const int block = c / 4, from = (block + 3) % 4;
      EXPECT_NEAR(want[r * 16 + c], x[r * 16 + from * 4 + c % 4] + block, 1e-12);
    }
}

TEST(ShardMap, PartialPPermuteGivesZeros) {
  auto want = check_against_oracle(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P(None, "model"));
        auto y = shard_map(
            [](const std::vector<Tensor>& l) {
              return std::vector<Tensor>{ppermute(l[0], "model", {{0, 1}})};
            },
            {x}, {P(None, "model")}, {P(None, "model")}, {{8, 16}});
        b.output("y", y[0]);
      },
      "model=4", kX);
  const auto& x = kX.at("x");
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 16; ++c)
      EXPECT_EQ(want[r * 16 + c], c / 4 == 1 ? x[r * 16 + c - 4] : 0.0);
}

TEST(ShardMap, TwoOutputsOneBody) {
  check_against_oracle(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P("data", "model"));
        auto ys = shard_map(
            [](const std::vector<Tensor>& l) {
              Tensor s = psum(l[0], "model");
              return std::vector<Tensor>{s, l[0]};
            },
            {x}, {P("data", "model")}, {P("data", None), P("data", "model")}, {{8, 4}, {8, 16}});
        b.output("y", add(ys[1], broadcast_to(reshape(sum(ys[0], {1}), {8, 1}), {8, 16})));
      },
      "data=2,model=4", kX);
}

// ---- TPDense / TPAsyncDense against the automatic path --------------------

constexpr int64_t kBatch = 8, kIn = 32, kOut = 16;

TPDenseOptions tp_options(const std::string& mesh, TPMode mode) {
  TPDenseOptions o;
  o.mode = mode;
  if (mesh.find("data") != std::string::npos) o.batch_axis = "data";
  o.bias_init = normal(0.5);
  return o;
}

// The automatic path: the same parameters (paths, initialisers, layouts),
// the same input and output layouts, a plain matmul.
std::vector<double> automatic(const std::string& mesh, TPMode mode, const HostValues& in) {
  ir::Graph g = trace("automatic", [&](ProgramBuilder& b) {
    const TPDenseOptions o = tp_options(mesh, mode);
    Scope s = b.scope() / "dense";
    Tensor x = b.input("x", {kBatch, kIn}, TPDense::x_spec(o, 2));
    Param k = s.param("kernel", {kIn, kOut}, with_partitioning(o.kernel_init, TPDense::kernel_spec(o)));
    Param bias = s.param("bias", {kOut}, with_partitioning(o.bias_init, P(o.axis)));
    b.output("y", with_sharding_constraint(add(matmul(x, k), bias), TPDense::y_spec(o, 2)));
  });
  Lowered l = lower(g, Mesh::parse(mesh));
  auto want = interpret(l.global, in, 3);
  auto got = execute_partitioned(l.partitioned, in, 3);
  expect_close(got.outputs.at("y"), want.at("y"), 1e-5);
  return got.outputs.at("y");
}

struct TPCase {
  std::string mesh;
  TPMode mode;
  bool async;
};

class TPDenseTest : public ::testing::TestWithParam<TPCase> {};

TEST_P(TPDenseTest, MatchesAutomaticPath) {
  const TPCase c = GetParam();
  const HostValues in = {{"x", values(kBatch * kIn, 0.5)}};
  const std::vector<double> base = automatic(c.mesh, c.mode, in);
  ir::Graph g = trace("tp", [&](ProgramBuilder& b) {
    const TPDenseOptions o = tp_options(c.mesh, c.mode);
    Tensor x = b.input("x", {kBatch, kIn}, TPDense::x_spec(o, 2));
    Tensor y;
    if (c.async)
      y = TPAsyncDense(b.scope() / "dense", kIn, kOut, o)(x);
    else
      y = TPDense(b.scope() / "dense", kIn, kOut, o)(x);
    b.output("y", y, TPDense::y_spec(o, 2));
  });
  Lowered l = lower(g, Mesh::parse(c.mesh));
  auto want = interpret(l.global, in, 3);
  auto got = execute_partitioned(l.partitioned, in, 3);
  expect_close(got.outputs.at("y"), want.at("y"), 1e-5);
  expect_close(got.outputs.at("y"), base, 1e-5);
  if (c.async) {
    // The ring moves x's blocks with ppermute and never gathers it.
    int ppermutes = 0, gathers = 0;
    for (auto& n : l.partitioned.nodes) {
      ppermutes += n.op == ir::Op::kPPermute;
      gathers += n.op == ir::Op::kAllGather;
    }
    EXPECT_EQ(ppermutes, 3);
    EXPECT_EQ(gathers, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, TPDenseTest,
    ::testing::Values(TPCase{"model=4", TPMode::kGather, false}, TPCase{"model=4", TPMode::kScatter, false},
                      TPCase{"model=4", TPMode::kNone, false}, TPCase{"model=4", TPMode::kGather, true},
                      TPCase{"data=2,model=4", TPMode::kGather, false},
                      TPCase{"data=2,model=4", TPMode::kScatter, false},
                      TPCase{"data=2,model=4", TPMode::kNone, false},
                      TPCase{"data=2,model=4", TPMode::kGather, true}),
    [](const ::testing::TestParamInfo<TPCase>& i) {
      std::string m = i.param.mesh.find("data") != std::string::npos ? "Data2Model4" : "Model4";
      const char* mode = i.param.async ? "Async"
                         : i.param.mode == TPMode::kGather  ? "Gather"
                         : i.param.mode == TPMode::kScatter ? "Scatter"
                                                            : "None";
      return m + mode;
    });

// ---- errors -----------------------------------------------------------------

std::string lower_error(const ProgramFn& fn, const std::string& mesh) {
  try {
    lower(trace("bad", fn), Mesh::parse(mesh));
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    return e.what();
  }
  return "no error";
}

TEST(ShardMapErrors, PPermuteNotAPermutation) {
  int line = 0;
  const std::string msg = lower_error(
      [&](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P(None, "model"));
        auto y = shard_map(
            [&](const std::vector<Tensor>& l) {
              line = __LINE__ + 1;
              return std::vector<Tensor>{ppermute(l[0], "model", {{0, 1}, {1, 1}})};
            },
            {x}, {P(None, "model")}, {P(None, "model")}, {{8, 16}});
        b.output("y", y[0]);
      },
      "model=4");
  EXPECT_THAT(msg, HasSubstr("shard_map_test.cpp:" + std::to_string(line) + ": error: "));
  EXPECT_THAT(msg, HasSubstr("ppermute over 'model': pair (1, 1) is not a permutation: destination 1 appears twice"));
}

TEST(ShardMapErrors, PPermutePositionOutOfRange) {
  const std::string msg = lower_error(
      [&](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P(None, "model"));
        auto y = shard_map(
            [&](const std::vector<Tensor>& l) {
              return std::vector<Tensor>{ppermute(l[0], "model", {{0, 4}})};
            },
            {x}, {P(None, "model")}, {P(None, "model")}, {{8, 16}});
        b.output("y", y[0]);
      },
      "model=4");
  EXPECT_THAT(msg, HasSubstr("pair (0, 4) is not a pair of positions 0..3 (the axis has 4 devices)"));
}

TEST(ShardMapErrors, OutSpecDoesNotMatchBody) {
  int line = 0;
  const std::string msg = lower_error(
      [&](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P("data", "model"));
        line = __LINE__ + 1;
        auto y = shard_map([](const std::vector<Tensor>& l) { return std::vector<Tensor>{all_gather(l[0], "model", 1)}; },
                           {x}, {P("data", "model")}, {P("data", "model")}, {{8, 16}});
        b.output("y", y[0]);
      },
      "data=2,model=4");
  EXPECT_THAT(msg, HasSubstr("shard_map_test.cpp:" + std::to_string(line) + ": error: "));
  EXPECT_THAT(msg, HasSubstr("shard_map body returns f32[4,16] for output 0 but out spec P('data', 'model') on "
                             "global f32[8,16] needs f32[4,4]"));
}

TEST(ShardMapErrors, TensorFromOutsideTheBody) {
  int line = 0;
  const std::string msg = lower_error(
      [&](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 16}, P("data", "model"));
        Tensor outside = b.input("w", {4, 4}, P());
        // The body runs again at lowering, so it captures by value.
        auto y = shard_map(
            [outside, &line](const std::vector<Tensor>& l) {
              line = __LINE__ + 1;
              return std::vector<Tensor>{add(l[0], outside)};
            },
            {x}, {P("data", "model")}, {P("data", "model")}, {{8, 16}});
        b.output("y", y[0]);
      },
      "data=2,model=4");
  EXPECT_THAT(msg, HasSubstr("shard_map_test.cpp:" + std::to_string(line) + ": error: "));
  EXPECT_THAT(msg, HasSubstr("a tensor passed to this call belongs to another traced program (a "
                             "tensor from outside a shard_map body?); pass it to shard_map as an "
                             "operand"));
}

TEST(ShardMapErrors, CollectiveOutsideBody) {
  try {
    trace("bad", [](ProgramBuilder& b) {
      Tensor x = b.input("x", {8, 16});
      b.output("y", psum(x, "model"));
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    EXPECT_THAT(e.what(), HasSubstr("per-device collectives are only valid inside a shard_map body"));
  }
}

TEST(ShardMapErrors, GradientThroughShardMap) {
  int line = 0;
  ir::Graph g = trace("grad", [&](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 16}, P(None, "model"));
    line = __LINE__ + 1;
    Tensor y = TPDense(b.scope() / "dense", 16, 8)(x);
    b.output("loss", sum(y, {0, 1}));
  });
  const int loss = g.outputs[0].value;
  const int kernel = static_cast<int>(g.find("dense/kernel", ir::Op::kParameter) - g.nodes.data());
  try {
    append_gradients(g, loss, {kernel}, SrcLoc());
    FAIL() << "no error";
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    EXPECT_THAT(e.what(), HasSubstr("shard_map_test.cpp:" + std::to_string(line) + ": error: "));
    EXPECT_THAT(e.what(), HasSubstr("cannot differentiate through shard_map: its result f32[8,8] "
                                    "in 'dense' lies on the gradient path"));
  }
}

}  // namespace
}  // namespace sharc
