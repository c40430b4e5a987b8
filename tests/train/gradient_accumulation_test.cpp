// Gradient accumulation (TrainOptions::accumulate_steps): 4 micro-batches of 8
// from a batch of 32 give the update of the full batch of 32. The MLP
// classifier's loss is a mean over the micro-batch, so the mean of the 4
// micro-batch losses is the full-batch loss and the averaged gradients are the
// full-batch gradient. Checked in the fp64 oracle (only the order of additions
// differs) and on three meshes (data=2,model=4; data=8; fsdp=8) with the
// per-device runtime (fp32). Plain SGD makes the update the gradient itself, so nothing
// (Adam's normalisation) hides a gradient that is off by a factor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/pipeline.h"
#include "samples/mlp_classifier/model.h"
#include "tests/common/tolerance.h"

namespace sharc {
namespace {

using mlp_classifier::Config;

Config small() {
  Config c;
  c.features = 64;
  c.hidden = 64;
  c.classes = 8;
  c.batch = 32;
  return c;
}

HostValues batch_for(const Config& c, int step) {
  std::vector<double> x(c.batch * c.features), y(c.batch);
  for (int64_t i = 0; i < c.batch; ++i) {
    y[i] = static_cast<double>((i * 5 + step) % c.classes);
    for (int64_t f = 0; f < c.features; ++f)
      x[i * c.features + f] =
          static_cast<float>(std::cos(0.13 * f * (y[i] + 1) + 0.2 * i + 0.05 * step));
  }
  return {{"images", x}, {"labels", y}};
}

ir::Graph train_graph(const Config& c, int accumulate_steps) {
  TrainOptions o;
  o.accumulate_steps = accumulate_steps;
  return trace("mlp_train", [&](ProgramBuilder& b) {
    mlp_classifier::build_train(b, c, sgd(Schedule::constant(0.5)), o);
  });
}

using sharc::testing::rel_error;

struct Trajectory {
  std::vector<double> loss, grad_norm;
  HostValues params;
};

constexpr int kSteps = 3;

Trajectory oracle(const ir::Graph& g, const Config& c) {
  Trajectory r;
  for (int s = 0; s < kSteps; ++s) {
    HostValues out = interpret(g, batch_for(c, s), 0, &r.params);
    r.loss.push_back(out.at("loss")[0]);
    r.grad_norm.push_back(out.at("grad_norm")[0]);
  }
  return r;
}

Trajectory on_mesh(const ir::Graph& g, const Config& c, const std::string& mesh) {
  const Lowered l = lower(g, Mesh::parse(mesh, 8));
  Trajectory r;
  for (int s = 0; s < kSteps; ++s) {
    ExecResult e =
        execute_partitioned(l.partitioned, batch_for(c, s), 0, s == 0 ? nullptr : &r.params);
    r.loss.push_back(e.outputs.at("loss")[0]);
    r.grad_norm.push_back(e.outputs.at("grad_norm")[0]);
    r.params = std::move(e.params);
  }
  return r;
}

// Each micro-batch's loss is a mean over 8 examples, the full batch's over
// 32: in fp64 the two sides differ only in the order of additions (sums of at
// most 32 terms of magnitude ~1): measured 6e-16 relative at most; 1e-12 is
// the bound the issue sets, far below what a wrong micro-batch weighting gives.
constexpr double kOracleRel = 1e-12;

TEST(GradientAccumulation, FourMicroBatchesGiveTheFullBatchUpdateInTheOracle) {
  const Config c = small();
  const Trajectory whole = oracle(train_graph(c, 1), c);
  const Trajectory acc = oracle(train_graph(c, 4), c);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(acc.loss[s], whole.loss[s], kOracleRel * whole.loss[s]) << "step " << s;
    EXPECT_NEAR(acc.grad_norm[s], whole.grad_norm[s], kOracleRel * whole.grad_norm[s])
        << "step " << s;
  }
  ASSERT_EQ(acc.params.size(), whole.params.size());
  for (const auto& [name, w] : whole.params)
    EXPECT_LE(rel_error(acc.params.at(name), w), kOracleRel) << name;
  // The steps moved the parameters by much more than the tolerance.
  const ir::Graph g = train_graph(c, 1);
  const std::vector<float> init = init_global(*g.find("dense2/kernel", ir::Op::kParameter), 0);
  EXPECT_GT(
      rel_error(whole.params.at("dense2/kernel"), std::vector<double>(init.begin(), init.end())),
      1e-3);
}

// fp32 on the mesh against the fp64 full-batch oracle. Three SGD steps at
// lr 0.5 through dots of at most 64 terms: float rounding (6e-8 per operation)
// accumulates to a few 1e-7 of each tensor's largest value (measured: 2.6e-7
// at most); 1e-5 leaves a margin while a micro-batch weighted wrongly (1/4 vs
// 1) or dropped moves parameters by ~1e-1 relative (the three steps move them
// by 0.15 relative in all).
constexpr double kMeshRel = 1e-5;

TEST(GradientAccumulation, FourMicroBatchesOnMeshesMatchTheFullBatchOracle) {
  const Config c = small();
  const Trajectory want = oracle(train_graph(c, 1), c);
  const ir::Graph acc_graph = train_graph(c, 4);
  for (const char* mesh : {"data=2,model=4", "data=8", "fsdp=8"}) {
    SCOPED_TRACE(mesh);
    const Trajectory got = on_mesh(acc_graph, c, mesh);
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(got.loss[s], want.loss[s], kMeshRel * want.loss[s]) << "step " << s;
      EXPECT_NEAR(got.grad_norm[s], want.grad_norm[s], kMeshRel * want.grad_norm[s])
          << "step " << s;
    }
    for (const auto& [name, w] : want.params)
      EXPECT_LE(rel_error(got.params.at(name), w), kMeshRel) << name;
  }
}

// The split itself (train.h): micro-batch j holds examples j, j+k, j+2k, ...
// so a batch sharded over devices stays local. Averaging would hide a split
// that hands every micro-batch the whole batch; this cannot.
TEST(GradientAccumulation, MicroBatchJHoldsEveryKthExampleFromJ) {
  constexpr int kK = 4;
  TrainOptions options;
  options.accumulate_steps = kK;
  const ir::Graph g = trace("split", [&](ProgramBuilder& b) {
    Tensor w = b.scope().param("w", {3}, ones());
    Tensor x = b.input("x", {12, 3});
    int j = 0;
    train_step(
        b, {x},
        [&](const std::vector<Tensor>& mb) {
          EXPECT_EQ(mb[0].shape(), (ir::Shape{3, 3}));
          b.output("micro_batch" + std::to_string(j++), mb[0]);
          return sum(mul(mb[0], broadcast_to(w, {3, 3})), {0, 1});
        },
        sgd(Schedule::constant(0.1)), options);
    EXPECT_EQ(j, kK) << "one loss call per micro-batch";
  });
  std::vector<double> x(36);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  const HostValues out = interpret(g, {{"x", x}}, 0);
  for (int j = 0; j < kK; ++j) {
    std::vector<double> want;
    for (int e = j; e < 12; e += kK)
      for (int f = 0; f < 3; ++f) want.push_back(x[e * 3 + f]);
    EXPECT_EQ(out.at("micro_batch" + std::to_string(j)), want) << "micro-batch " << j;
  }
}

}  // namespace
}  // namespace sharc
