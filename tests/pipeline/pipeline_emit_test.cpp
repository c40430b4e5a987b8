// Generated pipelined programs (stack_programs.cpp, three schedules on three
// pipe meshes): three steps of the generated Program against three steps of
// the per-device interpreter running the same stage programs (bit for bit:
// outputs, every parameter, every device's calls and bytes per collective
// kind, send/recv included) and against the fp64 oracle (loss within 1e-5,
// parameters within 1e-4 of each tensor's largest magnitude, as in
// pipeline_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/program.h"
#include "emit_stack_1f1b_2x2x2.h"
#include "emit_stack_gpipe_2x2.h"
#include "emit_stack_interleaved_4.h"
#include "gpt2_train_pipe2_data2_model2.h"
#include "tests/pipeline/stack_model.h"

namespace sharc::pipeline_test {
namespace {

#define SHARC_STACK_TRAITS(Name, ns, program_name, mesh_text) \
  struct Name {                                              \
    using Program = ns::Program;                             \
    static constexpr const char* kProgram = program_name;    \
    static constexpr const char* kMeshText = mesh_text;      \
    static constexpr auto& kParameterPaths = ns::kParameterPaths; \
    static rt::MeshShape mesh_shape() { return ns::mesh_shape(); } \
  };

SHARC_STACK_TRAITS(OneFOneB, sharc_gen::emit_stack_1f1b_2x2x2, "stack_1f1b", "pipe=2,data=2,model=2")
SHARC_STACK_TRAITS(GPipe, sharc_gen::emit_stack_gpipe_2x2, "stack_gpipe", "pipe=2,fsdp=2")
SHARC_STACK_TRAITS(Interleaved, sharc_gen::emit_stack_interleaved_4, "stack_interleaved", "pipe=4")

constexpr uint64_t kSeed = 3;
constexpr int kSteps = 3;

std::map<std::string, std::vector<float>> step_inputs(int step) {
  const StackConfig c;
  std::map<std::string, std::vector<float>> a;
  for (int64_t i = 0; i < c.batch(); ++i) {
    a["labels"].push_back(static_cast<float>((i * 3 + step) % c.classes));
    for (int64_t f = 0; f < c.features; ++f)
      a["x"].push_back(static_cast<float>(std::cos(0.17 * f * (a["labels"].back() + 1) + 0.31 * i + 0.07 * step)));
  }
  return a;
}

HostValues to_host(const std::map<std::string, std::vector<float>>& a) {
  HostValues h;
  for (auto& [k, v] : a) h[k].assign(v.begin(), v.end());
  return h;
}

double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 1e-300, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  return worst / scale;
}

template <class G>
class GeneratedPipeline : public ::testing::Test {};
using Programs = ::testing::Types<OneFOneB, GPipe, Interleaved>;
TYPED_TEST_SUITE(GeneratedPipeline, Programs);

TYPED_TEST(GeneratedPipeline, MatchesTheInterpreterBitForBitAndTheOracle) {
  const ir::Graph global = trace(TypeParam::kProgram, ProgramRegistry::all().at(TypeParam::kProgram));
  const Lowered lowered = lower(global, Mesh::parse(TypeParam::kMeshText));
  ASSERT_FALSE(lowered.stage_graphs.empty());
  rt::ThreadWorld world(TypeParam::mesh_shape());
  typename TypeParam::Program program(world);
  program.init(kSeed);
  HostValues exec_state, oracle_state;
  for (int k = 0; k < kSteps; ++k) {
    SCOPED_TRACE("step " + std::to_string(k) + " of " + TypeParam::kProgram + " on " + TypeParam::kMeshText);
    const auto inputs = step_inputs(k);
    std::map<std::string, std::vector<float>> outputs{{"loss", {0}}, {"grad_norm", {0}}, {"lr", {0}}};
    typename TypeParam::Program::Inputs in;
    typename TypeParam::Program::Outputs out;
    in.x = inputs.at("x").data();
    in.labels = inputs.at("labels").data();
    out.loss = outputs["loss"].data();
    out.grad_norm = outputs["grad_norm"].data();
    out.lr = outputs["lr"].data();
    std::vector<rt::CommStats> before;
    for (int r = 0; r < world.size(); ++r) before.push_back(world.comm(r).stats());
    program.step(in, out);

    const ExecResult exec = execute(lowered, to_host(inputs), kSeed, k == 0 ? nullptr : &exec_state);
    const double oracle_loss = interpret(global, to_host(inputs), kSeed, &oracle_state).at("loss")[0];
    exec_state = exec.params;
    for (auto& [name, got] : outputs) EXPECT_EQ(got[0], static_cast<float>(exec.outputs.at(name)[0])) << name;
    EXPECT_NEAR(outputs["loss"][0], oracle_loss, 1e-5 * std::fabs(oracle_loss));
    for (std::string_view p : TypeParam::kParameterPaths) {
      const std::string path(p);
      std::vector<float> got(exec.params.at(path).size(), std::nanf(""));
      program.get_parameter(path, got);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], static_cast<float>(exec.params.at(path)[i])) << path << "[" << i << "]";
      EXPECT_LE(rel_error(got, oracle_state.at(path)), 1e-4) << path;
    }
    for (int r = 0; r < world.size(); ++r)
      for (int c = 0; c < rt::kNumCollectiveKinds; ++c) {
        const char* kind = rt::collective_kind_name(static_cast<rt::CollectiveKind>(c));
        EXPECT_EQ(world.comm(r).stats().calls[c] - before[r].calls[c], exec.comm[r].calls[c])
            << "device " << r << " " << kind;
        EXPECT_EQ(world.comm(r).stats().bytes_sent[c] - before[r].bytes_sent[c], exec.comm[r].bytes_sent[c])
            << "device " << r << " " << kind;
      }
  }
  // Stages really talk: every device sent and received.
  for (int r = 0; r < world.size(); ++r)
    EXPECT_GT(world.comm(r).stats().count(rt::CollectiveKind::kSendRecv), 0u) << "device " << r;
}

// The report (predict(Lowered)) before anything runs equals what one step of
// the generated program counts on every device: bytes and calls per kind,
// send/recv included, and the peak memory of each device's stage.
TYPED_TEST(GeneratedPipeline, ReportEqualsMeasurement) {
  const ir::Graph global = trace(TypeParam::kProgram, ProgramRegistry::all().at(TypeParam::kProgram));
  const Report predicted = predict(lower(global, Mesh::parse(TypeParam::kMeshText)));
  rt::ThreadWorld world(TypeParam::mesh_shape());
  typename TypeParam::Program program(world);
  program.init(kSeed);
  world.reset_stats();
  const auto inputs = step_inputs(0);
  std::vector<float> loss(1), grad_norm(1), lr(1);
  typename TypeParam::Program::Inputs in;
  typename TypeParam::Program::Outputs out;
  in.x = inputs.at("x").data();
  in.labels = inputs.at("labels").data();
  out.loss = loss.data();
  out.grad_norm = grad_norm.data();
  out.lr = lr.data();
  program.step(in, out);
  const Measured measured = measure(world);
  std::string why;
  EXPECT_TRUE(matches(predicted, measured, &why)) << why << "\n" << format_report(predicted, &measured);
  // Stages hold different parameters, so their peaks differ.
  ASSERT_EQ(predicted.stage_persistent_bytes.size(), static_cast<size_t>(world.mesh().axis_sizes[0]));
  const std::string text = format_report(predicted, &measured);
  EXPECT_NE(text.find("by pipeline stage"), std::string::npos) << text;
  EXPECT_NE(text.find("send_recv"), std::string::npos) << text;
}

// The GPT sample's pipelined step (one block per stage, 1F1B over 8
// micro-batches, x data x model): the report's per-stage peak memory and
// bytes per device and kind equal one generated step's.
TEST(GeneratedPipelineGpt, ReportEqualsMeasurementOnPipe2Data2Model2) {
  namespace gen = sharc_gen::gpt2_train_pipe2_data2_model2;
  const ir::Graph global = trace("gpt2_train_pipelined", ProgramRegistry::all().at("gpt2_train_pipelined"));
  const Report predicted = predict(lower(global, Mesh::parse("pipe=2,data=2,model=2")));
  rt::ThreadWorld world(gen::mesh_shape());
  gen::Program program(world);
  program.init(kSeed);
  world.reset_stats();
  std::vector<float> tokens(16 * 64), targets(16 * 64), seed = {1};
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<float>((i * 7) % 96);
    targets[i] = static_cast<float>((i * 7 + 1) % 96);
  }
  float loss = 0, grad_norm = 0, lr = 0;
  gen::Program::Inputs in;
  in.tokens = tokens.data();
  in.targets = targets.data();
  in.dropout_seed = seed.data();
  gen::Program::Outputs out;
  out.loss = &loss;
  out.grad_norm = &grad_norm;
  out.lr = &lr;
  program.step(in, out);
  const Measured measured = measure(world);
  std::string why;
  EXPECT_TRUE(matches(predicted, measured, &why)) << why << "\n" << format_report(predicted, &measured);
  EXPECT_NE(predicted.stage_persistent_bytes[0], predicted.stage_persistent_bytes[1]);
  EXPECT_GT(measured.comm[0].count(rt::CollectiveKind::kSendRecv), 0u);
}

}  // namespace
}  // namespace sharc::pipeline_test
