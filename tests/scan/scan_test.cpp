// Repeated layers scanned over stacked parameters (dsl/layers.h) against the
// same layers unrolled: the GPT sample's blocks (2 and 4 layers) and an MLP
// of stacked residual blocks, trained 5 steps on data=8, fsdp=8 and
// data=2,model=4 with the ring collective matmul on, agree with each other
// within 1e-6 relative and with the fp64 oracle; the stacked parameters'
// layout and initial values are the unrolled layers'; autodiff through the
// scan matches finite differences; and the mistakes a model can make with
// Layers fail at its line with a message that says what to change.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "dsl/train.h"
#include "ir/autodiff.h"
#include "samples/gpt2/model.h"
#include "tests/common/expect_error.h"

namespace sharc {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBatch = 8;

// ---- the models

GPTConfig small_gpt(int64_t layers, bool scan) {
  GPTConfig c;
  c.vocab = 16;
  c.context = 8;
  c.embed = 32;
  c.heads = 8;
  c.layers = layers;
  c.dropout = 0.1;  // dropout on: layer i must draw the same masks in both forms
  c.scan = scan;
  return c;
}

Optimizer test_optimizer() {
  // eps 1e-6 as in the GPT test (gpt_test.cpp says why).
  return adamw(Schedule::warmup_cosine(1e-2, 2, 10, 1e-3), 1e-2, 0.9, 0.999, /*eps=*/1e-6);
}

// A residual MLP block: x + proj(relu(fc(x))), Megatron-split over 'model'.
class ResidualBlock : public Module {
 public:
  ResidualBlock(Scope s, int64_t width, SrcLoc loc = Here::current())
      : fc(s / "fc", width, 2 * width,
           {.kernel_init = with_partitioning(lecun_normal(), P("embed", "mlp")),
            .bias_init = with_partitioning(normal(0.1), P("mlp"))},
           loc),
        proj(s / "proj", 2 * width, width,
             {.kernel_init = with_partitioning(lecun_normal(), P("mlp", "embed")),
              .bias_init = with_partitioning(normal(0.1), P("embed"))},
             loc) {}
  Tensor operator()(Tensor x) const { return add(x, proj(relu(fc(x)))); }
  Linear fc, proj;
};

constexpr int64_t kWidth = 16;
constexpr int kResidualLayers = 3;

void build_residual_mlp(ProgramBuilder& b, bool scan, const std::string& layer_axis = "") {
  b.set_logical_rules({{"batch", "data"}, {"batch", "fsdp"}, {"mlp", "model"}, {"embed", std::nullopt}});
  b.set_sharding_rules({FSDPRule("fsdp", 64)});
  Layers<ResidualBlock> blocks(b.scope() / "res", kResidualLayers,
                               [](Scope s) { return ResidualBlock(s, kWidth); },
                               {.scan = scan, .layer_axis = layer_axis});
  Linear head(b.scope() / "head", kWidth, 4);
  Tensor x = b.input("x", {kBatch, kWidth}, P("batch", None));
  Tensor y = b.input("y", {kBatch, 4}, P("batch", None));
  train_step(
      b, {x, y},
      [&](const std::vector<Tensor>& mb) {
        Tensor h = blocks(mb[0], [](const ResidualBlock& block, Tensor x) { return block(x); });
        return mean_squared_error(head(h), mb[1]);
      },
      test_optimizer());
}

HostValues mlp_batch(int step) {
  std::vector<double> x(kBatch * kWidth), y(kBatch * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i) + step);
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::cos(0.23 * static_cast<double>(i) - step);
  return {{"x", x}, {"y", y}};
}

HostValues gpt_batch(const GPTConfig& c, int step) {
  std::vector<double> tokens(kBatch * c.context), targets(kBatch * c.context);
  auto token = [&](int64_t i) { return static_cast<double>((i * i * 7 + i * 3 + 1) % 13 % c.vocab); };
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < c.context; ++t) {
      const int64_t i = 5 * b + 3 * step + t;
      tokens[b * c.context + t] = token(i);
      targets[b * c.context + t] = token(i + 1);
    }
  return {{"tokens", tokens}, {"targets", targets}, {"dropout_seed", {static_cast<double>(step)}}};
}

// One model in both forms, with its batches.
struct Case {
  std::string name;
  ir::Graph unrolled, scanned;
  std::function<HostValues(int)> batch;
};

Case gpt_case(int64_t layers) {
  auto build = [layers](bool scan) {
    const GPTConfig c = small_gpt(layers, scan);
    return trace("gpt2_train", [c](ProgramBuilder& b) { gpt2::build_train(b, c, kBatch, test_optimizer()); });
  };
  const GPTConfig c = small_gpt(layers, false);
  return {"gpt" + std::to_string(layers), build(false), build(true), [c](int s) { return gpt_batch(c, s); }};
}

Case mlp_case() {
  return {"residual_mlp", trace("mlp", [](ProgramBuilder& b) { build_residual_mlp(b, false); }),
          trace("mlp", [](ProgramBuilder& b) { build_residual_mlp(b, true); }), mlp_batch};
}

// ---- running them

constexpr int kSteps = 5;

std::vector<double> oracle_losses(const ir::Graph& g, const std::function<HostValues(int)>& batch,
                                  HostValues* params = nullptr) {
  HostValues state;
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) losses.push_back(interpret(g, batch(s), 0, &state).at("loss")[0]);
  if (params) *params = std::move(state);
  return losses;
}

std::vector<double> mesh_losses(const ir::Graph& g, const std::function<HostValues(int)>& batch,
                                const std::string& mesh) {
  PipelineOptions ring;
  ring.collective_matmul = CollectiveMatmul::kAlways;  // ring TP on wherever 'model' splits a dot
  const Lowered l = lower(g, Mesh::parse(mesh), ring);
  std::vector<double> losses;
  HostValues params;
  for (int s = 0; s < kSteps; ++s) {
    ExecResult r = execute_partitioned(l.partitioned, batch(s), 0, s == 0 ? nullptr : &params);
    losses.push_back(r.outputs.at("loss")[0]);
    params = std::move(r.params);
  }
  return losses;
}

double worst_relative(const std::vector<double>& want, const std::vector<double>& got) {
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) worst = std::max(worst, std::fabs(got[s] - want[s]) / std::fabs(want[s]));
  return worst;
}

// ---- the layout and values of stacked parameters

TEST(ScanParameters, AreStackedUnderTheLayersScopeWithTheirLayersLayout) {
  const ir::Graph g = gpt_case(2).scanned;
  EXPECT_EQ(g.find("h0/attn/qkv/kernel", ir::Op::kParameter), nullptr);
  const ir::Node* qkv = g.find("h/attn/qkv/kernel", ir::Op::kParameter);
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (ir::Shape{2, 32, 96}));
  ASSERT_TRUE(qkv->spec.has_value());
  EXPECT_EQ(qkv->spec->str(), "P(None, 'embed', 'heads')");
  EXPECT_EQ(qkv->init.stack_scope, "h");
  ASSERT_EQ(g.repeats.size(), 1u);
  EXPECT_TRUE(g.repeats[0].scan);
  EXPECT_EQ(g.repeats[0].length, 2);
  // Each layer reads its row: a slice per layer and parameter, stamped with the layer.
  int slices[2] = {0, 0};
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kSlice && !n.args.empty() && g.nodes[n.args[0]].op == ir::Op::kParameter &&
        g.nodes[n.args[0]].repeat == 0) {
      ASSERT_GE(n.iteration, 0);
      EXPECT_EQ(n.ints, (std::vector<int>{0, n.iteration, 1}));
      ++slices[n.iteration];
    }
  EXPECT_EQ(slices[0], 12);  // ln1, qkv, proj, ln2, fc, proj: 2 each
  EXPECT_EQ(slices[1], 12);
}

// The GPT-2 124M configuration (samples/gpt2/model.h config_124m) at full
// size: 124,475,904 parameters with the vocabulary padded to 50304, the
// blocks' stacked over 12 layers, and a partitioned program whose step is
// as long as the 2-layer one's.
TEST(ScanParameters, Gpt2124MIsScannedWithItsParameterCount) {
  auto build = [](int64_t layers) {
    return trace("gpt2_124m", [layers](ProgramBuilder& b) {
      gpt2::build_train(b, gpt2::config_124m(layers, 1024), 1, gpt2::optimizer_124m());
    });
  };
  const ir::Graph g = build(12);
  int64_t count = 0;
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kParameter && n.name.rfind("opt/", 0) != 0) count += ir::num_elements(n.shape);
  EXPECT_EQ(count, 124475904);
  const ir::Node* fc = g.find("h/mlp/fc/kernel", ir::Op::kParameter);
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->shape, (ir::Shape{12, 768, 3072}));
  EXPECT_EQ(g.find("h0/mlp/fc/kernel", ir::Op::kParameter), nullptr);
  ASSERT_EQ(g.repeats.size(), 1u);
  EXPECT_EQ(g.repeats[0].length, 12);
  const int line = __LINE__ + 1;
  const std::string what = sharc::testing::error_at(__FILE__, line, [] { gpt2::config_124m(12, 2048); });
  EXPECT_THAT(what, HasSubstr("gpt2-124m: layers=12, context=2048: layers must be at least 1 and context from 1 to 1024"));
}

TEST(ScanParameters, RowIIsInitialisedAsUnrolledLayerI) {
  const Case k = gpt_case(2);
  for (const char* leaf : {"attn/qkv/kernel", "mlp/proj/kernel", "ln1/scale"}) {
    SCOPED_TRACE(leaf);
    const ir::Node* stacked = k.scanned.find(std::string("h/") + leaf, ir::Op::kParameter);
    ASSERT_NE(stacked, nullptr);
    const std::vector<float> all = init_global(*stacked, 7);
    for (int i = 0; i < 2; ++i) {
      const ir::Node* layer = k.unrolled.find("h" + std::to_string(i) + "/" + leaf, ir::Op::kParameter);
      ASSERT_NE(layer, nullptr);
      const std::vector<float> row = init_global(*layer, 7);
      ASSERT_EQ(all.size(), 2 * row.size());
      EXPECT_TRUE(std::equal(row.begin(), row.end(), all.begin() + static_cast<ptrdiff_t>(i * row.size())))
          << "row " << i;
    }
  }
}

TEST(ScanParameters, FsdpSplitsALayerDimensionNotTheLayerAxis) {
  const Lowered l = lower(mlp_case().scanned, Mesh::parse("fsdp=8"));
  const ir::Node* fc = l.partitioned.find("res/fc/kernel", ir::Op::kParameter);
  ASSERT_NE(fc, nullptr);
  ASSERT_TRUE(fc->sharding.has_value());
  EXPECT_EQ(fc->sharding->str(), "[{}, {}, {\"fsdp\"}]");  // [3, 16, 32]: the 32 columns, as unrolled
}

// ---- scanned against unrolled against the oracle

TEST(ScanTraining, ScannedAndUnrolledGiveTheSameLossesOnEveryMeshAndTheOracles) {
  for (const Case& k : {mlp_case(), gpt_case(2), gpt_case(4)}) {
    SCOPED_TRACE(k.name);
    const std::vector<double> oracle = oracle_losses(k.unrolled, k.batch);
    const std::vector<double> oracle_scanned = oracle_losses(k.scanned, k.batch);
    EXPECT_LT(oracle.back(), oracle.front()) << "the loss must fall";
    EXPECT_LE(worst_relative(oracle, oracle_scanned), 1e-12) << "the fp64 oracle runs both forms alike";
    for (const char* mesh : {"data=8", "fsdp=8", "data=2,model=4"}) {
      SCOPED_TRACE(mesh);
      const std::vector<double> unrolled = mesh_losses(k.unrolled, k.batch, mesh);
      const std::vector<double> scanned = mesh_losses(k.scanned, k.batch, mesh);
      const double between = worst_relative(unrolled, scanned);
      const double to_oracle = worst_relative(oracle, scanned);
      EXPECT_LE(between, 1e-6);
      EXPECT_LE(to_oracle, 1e-5);  // fp32 against fp64, as gpt_test.cpp's tolerance
      std::printf("%-13s %-15s scanned vs unrolled %.1e, vs oracle %.1e\n", k.name.c_str(), mesh, between,
                  to_oracle);
    }
  }
}

// A layer axis split over a mesh axis: each device holds its layers' rows,
// and a layer's row reaches every device that computes with it.
TEST(ScanTraining, ALayerAxisSplitOverAMeshAxisMatchesTheOracle) {
  const ir::Graph g = trace("mlp", [](ProgramBuilder& b) { build_residual_mlp(b, true, "layer"); });
  const ir::Node* fc = g.find("res/fc/kernel", ir::Op::kParameter);
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->spec->str(), "P('layer', 'embed', 'mlp')");
  const std::vector<double> oracle = oracle_losses(g, mlp_batch);
  // layer=3 splits the 3 layers one per device; data=2 beside it.
  const std::vector<double> got = mesh_losses(g, mlp_batch, "data=2,layer=3");
  EXPECT_LE(worst_relative(oracle, got), 1e-5);
}

// ---- autodiff through the scan

// The gradient of every stacked parameter against central finite
// differences of the fp64 oracle's loss (step 1e-6, tolerance 1e-6 of the
// largest gradient; autodiff_test.cpp explains the figures).
TEST(ScanAutodiff, StackedGradientsMatchFiniteDifferences) {
  ir::Graph g = trace("scan_fd", [](ProgramBuilder& b) {
    Layers<ResidualBlock> blocks(b.scope() / "res", kResidualLayers, [](Scope s) { return ResidualBlock(s, 4); },
                                 {.scan = true});
    Tensor x = b.input("x", {3, 4});
    Tensor h = blocks(x, [](const ResidualBlock& block, Tensor x) { return tanh(block(x)); });
    b.output("loss", sum(mul(h, h), {0, 1}));
  });
  const ir::Graph forward = g;
  int loss = forward.outputs.at(0).value;
  std::vector<int> wrt;
  for (int id = 0; id < static_cast<int>(forward.nodes.size()); ++id)
    if (forward.nodes[id].op == ir::Op::kParameter) wrt.push_back(id);
  ASSERT_EQ(wrt.size(), 4u);  // fc and proj, kernel and bias, each [3, ...]
  const std::vector<int> grads = append_gradients(g, loss, wrt, SrcLoc("scan_test.cpp", 1));
  int add_slices = 0;
  for (const ir::Node& n : g.nodes) add_slices += n.op == ir::Op::kAddSlice;
  EXPECT_EQ(add_slices, 4 * kResidualLayers) << "each stacked gradient is one buffer every layer adds its row into";
  for (size_t i = 0; i < wrt.size(); ++i) g.outputs.push_back({"d/" + forward.nodes[wrt[i]].name, grads[i], SrcLoc(), {}, {}});
  ir::verify(g);

  HostValues params, inputs = {{"x", {}}};
  for (int i = 0; i < 12; ++i) inputs["x"].push_back(std::sin(1.0 + i));
  for (int w : wrt) {
    const ir::Node& n = forward.nodes[w];
    const std::vector<float> v = init_global(n, 3);
    params[n.name].assign(v.begin(), v.end());
  }
  HostValues state = params;
  const HostValues out = interpret(g, inputs, 3, &state);
  auto loss_at = [&](const HostValues& p) {
    HostValues s = p;
    return interpret(forward, inputs, 3, &s).at("loss")[0];
  };
  for (int w : wrt) {
    const std::string& name = forward.nodes[w].name;
    SCOPED_TRACE(name);
    const std::vector<double>& analytic = out.at("d/" + name);
    double scale = 0;
    std::vector<double> fd(analytic.size());
    for (size_t e = 0; e < analytic.size(); ++e) {
      HostValues p = params;
      const double base = p[name][e], h = 1e-6 * std::max(1.0, std::fabs(base));
      p[name][e] = base + h;
      const double up = loss_at(p);
      p[name][e] = base - h;
      fd[e] = (up - loss_at(p)) / (2 * h);
      scale = std::max({scale, std::fabs(fd[e]), std::fabs(analytic[e])});
    }
    EXPECT_GT(scale, 1e-3) << "a trivially zero gradient checks nothing";
    for (size_t e = 0; e < analytic.size(); ++e)
      EXPECT_NEAR(analytic[e], fd[e], 1e-6 * scale + 1e-9) << "element " << e << " (layer " << e * kResidualLayers / analytic.size() << ")";
  }
}

// ---- mistakes

TEST(ScanErrors, ALayerAxisThatDoesNotDivideByItsMeshAxis) {
  const ir::Graph g = trace("mlp", [](ProgramBuilder& b) { build_residual_mlp(b, true, "layer"); });
  // 3 layers over layer=2: the first stacked parameter made (at the Layers' line) is reported.
  const ir::Node* fc = g.find("res/fc/kernel", ir::Op::kParameter);
  ASSERT_NE(fc, nullptr);
  const std::string what = sharc::testing::error_at(fc->loc.file.c_str(), fc->loc.line, [&] {
    lower(g, Mesh::parse("data=4,layer=2"));
  });
  EXPECT_THAT(what, HasSubstr("'res/fc/kernel'"));
  EXPECT_THAT(what, HasSubstr("size 3, which does not divide by 'layer'=2"));
}

TEST(ScanErrors, ABodyWhoseCarryChangesShape) {
  sharc::testing::Traced t;
  Layers<Linear> layers(t.b.scope() / "grow", 2, [](Scope s) { return Linear(s, 4, 4); }, {.scan = true});
  Tensor x = t.b.input("x", {2, 4});
  const int line = __LINE__ + 1;
  const std::string what = sharc::testing::error_at(__FILE__, line, [&] { layers(x, [](const Linear&, Tensor x) { return reshape(x, {8}); }); });
  EXPECT_THAT(what, HasSubstr("Layers 'grow': layer 0 maps f32[2,4] to f32[8]; every layer must return its input's "
                              "shape and element type"));
}

TEST(ScanErrors, ARematPolicyNamingAnUnknownBlock) {
  sharc::testing::Traced t;
  Layers<ResidualBlock> blocks(t.b.scope() / "res", 2, [](Scope s) { return ResidualBlock(s, 4); }, {.scan = true});
  Tensor x = t.b.input("x", {2, 4});
  const int line = __LINE__ + 1;
  TrainOptions o{.remat = {remat("res0", RematPolicy::kRecomputeAll)}};
  train_step(
      t.b, {x},
      [&](const std::vector<Tensor>& mb) {
        return sum(blocks(mb[0], [](const ResidualBlock& block, Tensor x) { return block(x); }), {0, 1});
      },
      sgd(Schedule::constant(0.1)), o);
  const std::string what =
      sharc::testing::error_at(__FILE__, line, [&] { lower(t.graph(), Mesh::parse("data=2")); });
  EXPECT_THAT(what, HasSubstr("remat: no block named \"res0\""));
  EXPECT_THAT(what, HasSubstr("res"));
}

TEST(ScanErrors, ALayerAxisWithoutScan) {
  sharc::testing::Traced t;
  const std::string what = sharc::testing::error_at(__FILE__, __LINE__ + 1, [&] {
    Layers<Linear> layers(t.b.scope() / "l", 2, [](Scope s) { return Linear(s, 4, 4); }, {.layer_axis = "model"});
  });
  EXPECT_THAT(what, HasSubstr("Layers 'l': layer_axis \"model\" lays out the stacked parameters of a scanned "
                              "Layers, but scan is off"));
}

TEST(ScanErrors, AModuleThatMakesDifferentParametersPerLayer) {
  sharc::testing::Traced t;
  int made = 0;
  const int line = __LINE__ + 1;
  Layers<Linear> layers(t.b.scope() / "l", 2, [&made](Scope s) { return Linear(s, 4, 4 + 4 * (made++ > 0)); },
                        {.scan = true});
  Tensor x = t.b.input("x", {2, 4});
  const std::string what = sharc::testing::error_at(__FILE__, line, [&] {
    layers(x, [](const Linear& l, Tensor x) { return l(x); });
  });
  EXPECT_THAT(what, HasSubstr("scanned Layers 'l': layer 0 asks for parameter \"l/kernel\" f32[4,8], but the stacked "
                              "one is f32[2,4,4]"));
}

}  // namespace
}  // namespace sharc

namespace sharc {
namespace {

// A scanned Layers has no PipelineLayer per layer to place on stages.
TEST(ScanErrors, AScannedLayersInAPipelinedProgram) {
  const ir::Graph g = trace("gpt2_train_pipelined", [](ProgramBuilder& b) {
    b.set_pipeline(gpt2::pipeline());
    gpt2::build_train(b, small_gpt(2, true), kBatch, test_optimizer());
  });
  ASSERT_EQ(g.repeats.size(), 1u);
  const SrcLoc at = g.repeats[0].loc;
  const std::string what = sharc::testing::error_at(at.file.c_str(), at.line, [&] {
    lower(g, Mesh::parse("pipe=2,model=2"));
  });
  EXPECT_THAT(what, HasSubstr("Layers 'h' is scanned (its parameters stacked over one layer axis), which set_pipeline "
                              "cannot place on stages yet"));
}

}  // namespace
}  // namespace sharc
