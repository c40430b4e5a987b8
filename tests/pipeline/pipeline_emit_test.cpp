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
#include <regex>
#include <set>
#include <tuple>
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
#include "tests/common/tolerance.h"

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

using sharc::testing::rel_error;

// One step's Inputs and Outputs of a stack program, pointing into `inputs`
// and into outputs of its own.
template <class Program>
struct StepIo {
  explicit StepIo(const std::map<std::string, std::vector<float>>& inputs) {
    in.x = inputs.at("x").data();
    in.labels = inputs.at("labels").data();
    out.loss = &loss;
    out.grad_norm = &grad_norm;
    out.lr = &lr;
  }
  StepIo(const StepIo&) = delete;
  StepIo& operator=(const StepIo&) = delete;
  float loss = 0, grad_norm = 0, lr = 0;
  typename Program::Inputs in;
  typename Program::Outputs out;
};

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

// The runtime's clocks on generated code. On the virtual clock the
// generated step and the interpreter mark the same statements with the same
// costs, so every device's trace is the same, event for event and to the
// bit (names, categories, times, peers, tags, bytes), and the devices' busy
// and communication times are equal. On the wall clock the generated step's
// trace names every compute event after its DSL line and matches every send
// with a receive.
TYPED_TEST(GeneratedPipeline, TimelinesOnBothClocks) {
  const ir::Graph global = trace(TypeParam::kProgram, ProgramRegistry::all().at(TypeParam::kProgram));
  const Lowered lowered = lower(global, Mesh::parse(TypeParam::kMeshText));
  const rt::LinkModel link{.latency_s = 20e-6, .bytes_per_s = 2e9};
  const rt::MachineModel machine;
  rt::ThreadWorld world(TypeParam::mesh_shape());
  world.set_link(link);
  typename TypeParam::Program program(world);
  program.init(kSeed);
  const auto inputs = step_inputs(0);
  StepIo<typename TypeParam::Program> io(inputs);

  world.set_clock(rt::ClockMode::kVirtual, machine);
  program.step(io.in, io.out);
  const rt::Trace generated = world.trace();
  rt::Trace interpreted;
  ExecOptions o;
  o.trace = &interpreted;
  o.link = link;
  o.virtual_clock = true;
  o.machine = machine;
  const ExecResult exec = execute(lowered, to_host(inputs), kSeed, nullptr, o);
  EXPECT_EQ(generated.clock, "virtual");
  EXPECT_EQ(generated.track_names, interpreted.track_names);
  ASSERT_EQ(generated.events.size(), interpreted.events.size());
  for (size_t i = 0; i < generated.events.size(); ++i) {
    const rt::TraceEvent &a = generated.events[i], &b = interpreted.events[i];
    SCOPED_TRACE("event " + std::to_string(i) + " on device " + std::to_string(a.device) + ": " + a.name);
    ASSERT_EQ(a.device, b.device);
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.category, b.category);
    ASSERT_EQ(a.start_s, b.start_s);
    ASSERT_EQ(a.end_s, b.end_s);
    ASSERT_EQ(a.peer, b.peer);
    ASSERT_EQ(a.tag, b.tag);
    ASSERT_EQ(a.bytes, b.bytes);
  }
  const std::vector<rt::DeviceTime> times = world.device_times();
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(times[r].now_s, exec.device_times[r].now_s) << "device " << r;
    EXPECT_EQ(times[r].busy_s, exec.device_times[r].busy_s) << "device " << r;
    EXPECT_GT(times[r].busy_s, 0.0) << "device " << r;
    // Every statement is marked: a device's time is compute plus communication.
    EXPECT_NEAR(times[r].busy_s + times[r].comm_s, times[r].now_s, 1e-12 * times[r].now_s) << "device " << r;
  }

  world.set_clock(rt::ClockMode::kWall);
  program.step(io.in, io.out);
  const rt::Trace wall = world.trace();
  EXPECT_EQ(wall.clock, "wall");
  std::multiset<std::tuple<int, int, int64_t>> sends, recvs;  // (from, to, tag)
  int compute = 0;
  const std::regex dsl_line(R"(^[a-z_]+  [^ ]+\.(cpp|h):[0-9]+)");  // "dot  model.cpp:31 l0"
  for (const rt::TraceEvent& e : wall.events) {
    EXPECT_LE(e.start_s, e.end_s) << e.name;
    if (e.category == "send") sends.insert({e.device, e.peer, e.tag});
    if (e.category == "recv") recvs.insert({e.peer, e.device, e.tag});
    if (e.category == "compute") {
      ++compute;
      EXPECT_TRUE(std::regex_search(e.name, dsl_line)) << "no DSL line: " << e.name;
    }
  }
  EXPECT_FALSE(sends.empty());
  EXPECT_EQ(sends, recvs);
  EXPECT_GT(compute, 50);
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
  StepIo<typename TypeParam::Program> io(inputs);
  program.step(io.in, io.out);
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
