// The report's predictions against the runtime. For generated programs (the
// samples' DotReluDot on data=2,model=4 and the MLP classifier's training step
// on data=4,model=2 and fsdp=8) one step runs on a ThreadWorld, and the
// predicted bytes sent per device and kind, the calls, and every device's
// peak memory must equal rt::CommStats and rt::DeviceMemory::peak() EXACTLY:
// the prediction replays the emitter's own buffer plan and the ring
// algorithms' chunking, so there is no tolerance to allow.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/program.h"
#include "report_dot_relu_dot_2x4.h"
#include "report_mlp_train_4x2.h"
#include "report_mlp_train_fsdp8.h"
#include "tests/common/mlp_step.h"
#ifdef SHARC_REPORT_GPT
#include "report_gpt2_train_2x4.h"
#endif

namespace sharc {
namespace {

Report predicted(const std::string& program, const std::string& mesh) {
  auto it = ProgramRegistry::all().find(program);
  if (it == ProgramRegistry::all().end()) throw std::runtime_error("no program " + program);
  return predict(lower(trace(program, it->second), Mesh::parse(mesh)).partitioned);
}

template <class Array>
size_t count(const Array& shape) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

// One step of a generated program: construct, init, reset the byte counters
// (init sends nothing, but say so), one forward/step. The peak covers
// construction (the parameter shards), init and the step, as predicted.
Measured run_dot_relu_dot() {
  namespace gen = sharc_gen::report_dot_relu_dot_2x4;
  rt::ThreadWorld world(gen::mesh_shape());
  gen::Program prog(world);
  prog.init(0);
  world.reset_stats();
  const std::vector<float> x = testing::fixed_values(count(gen::kInput_x_shape), 1);
  std::vector<float> y(count(gen::kOutput_y_shape));
  typename gen::Program::Inputs in;
  in.x = x.data();
  typename gen::Program::Outputs out;
  out.y = y.data();
  prog.forward(in, out);
  return measure(world);
}

void expect_exact(const Report& r, const Measured& m) {
  ASSERT_EQ(m.comm.size(), static_cast<size_t>(r.num_devices));
  for (int d = 0; d < r.num_devices; ++d) {
    for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
      const char* kind = rt::collective_kind_name(static_cast<rt::CollectiveKind>(k));
      EXPECT_EQ(r.bytes[d][k], m.comm[d].bytes_sent[k]) << "device " << d << " " << kind;
      EXPECT_EQ(r.calls[d][k], m.comm[d].calls[k]) << "device " << d << " " << kind << " calls";
    }
    EXPECT_EQ(r.peak_bytes[d], m.peak_bytes[d]) << "device " << d << " peak";
    ASSERT_LT(d, static_cast<int>(m.arena_bytes.size()));
    EXPECT_EQ(r.arena_bytes[d], m.arena_bytes[d]) << "device " << d << " step arena";
    EXPECT_GT(r.arena_bytes[d], 0u);
    EXPECT_LE(r.arena_bytes[d], r.peak_bytes[d] * 2) << "device " << d << ": fragmentation";
  }
  std::string why;
  EXPECT_TRUE(matches(r, m, &why)) << why;
  const std::string text = format_report(r, &m);
  EXPECT_NE(text.find("prediction equals measurement"), std::string::npos) << text;
  EXPECT_EQ(text.find("\u2717"), std::string::npos) << text;  // no ✗ anywhere
}

TEST(Report, DotReluDotOnDataTwoModelFourIsExact) {
  const Report r = predicted("dot_relu_dot", "data=2,model=4");
  const Measured m = run_dot_relu_dot();
  expect_exact(r, m);
  // The layouts of the seed: dot1's kernel split on 'model' by columns, w2 by rows.
  ASSERT_EQ(r.parameters.size(), 2u);
  EXPECT_EQ(r.parameters[0].path, "dot1/kernel");
  EXPECT_EQ(r.parameters[0].spec, R"([{}, {"model"}])");
  EXPECT_EQ(r.parameters[0].global_shape, (ir::Shape{1024, 1024}));
  EXPECT_EQ(r.parameters[0].local_shape, (ir::Shape{1024, 256}));
  EXPECT_EQ(r.parameters[1].path, "w2");
  EXPECT_EQ(r.parameters[1].spec, R"([{"model"}, {}])");
  EXPECT_EQ(r.parameters[1].local_shape, (ir::Shape{256, 1024}));
  // Some collective moves data, and every device predicts the same peak.
  ASSERT_FALSE(r.collectives.empty());
  uint64_t sent = 0;
  for (uint64_t b : r.bytes[0]) sent += b;
  EXPECT_GT(sent, 0u);
  EXPECT_EQ(r.persistent_bytes, 2u * 1024 * 256 * 4);
  EXPECT_GT(r.peak_bytes[0], r.persistent_bytes);

  const std::string text = format_report(r, &m);
  EXPECT_NE(text.find("dot1/kernel"), std::string::npos) << text;
  EXPECT_NE(text.find(R"([{}, {"model"}])"), std::string::npos) << text;
  EXPECT_NE(text.find("f32[1024,256]"), std::string::npos) << text;
  EXPECT_NE(text.find("Peak memory per device, predicted vs measured"), std::string::npos) << text;
  EXPECT_NE(text.find("\u2713"), std::string::npos) << text;
  std::printf("%s", text.c_str());
}

TEST(Report, MlpTrainOnDataFourModelTwoIsExact) {
  namespace gen = sharc_gen::report_mlp_train_4x2;
  const Report r = predicted("mlp_train", "data=4,model=2");
  rt::ThreadWorld world(gen::mesh_shape());
  const Measured m = testing::mlp_train_step<gen::Program>(world).measured;
  expect_exact(r, m);
  // Gradients are all-reduced over 'data' (bucketed): uneven chunks included.
  EXPECT_GT(r.bytes[0][static_cast<int>(rt::CollectiveKind::kAllReduce)], 0u);
  std::printf("%s", format_report(r, &m).c_str());
}

TEST(Report, MlpTrainOnFsdpEightIsExact) {
  namespace gen = sharc_gen::report_mlp_train_fsdp8;
  const Report r = predicted("mlp_train", "fsdp=8");
  rt::ThreadWorld world(gen::mesh_shape());
  const Measured m = testing::mlp_train_step<gen::Program>(world).measured;
  expect_exact(r, m);
  // ZeRO-3: weights gathered, gradients reduce-scattered.
  EXPECT_GT(r.bytes[0][static_cast<int>(rt::CollectiveKind::kAllGather)], 0u);
  EXPECT_GT(r.bytes[0][static_cast<int>(rt::CollectiveKind::kReduceScatter)], 0u);
  std::printf("%s", format_report(r, &m).c_str());
}

#ifdef SHARC_REPORT_GPT
TEST(Report, Gpt2TrainOnDataTwoModelFourIsExact) {
  namespace gen = sharc_gen::report_gpt2_train_2x4;
  const Report r = predicted("gpt2_train", "data=2,model=4");
  rt::ThreadWorld world(gen::mesh_shape());
  gen::Program prog(world);
  prog.init(0);
  world.reset_stats();
  std::vector<float> tokens(count(gen::kInput_tokens_shape)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<float>((i * 7 + 3) % 64);
    targets[i] = static_cast<float>((i * 7 + 10) % 64);
  }
  const float seed = 1;
  float loss = 0, grad_norm = 0, lr = 0;
  gen::Program::Inputs in;
  in.tokens = tokens.data();
  in.targets = targets.data();
  in.dropout_seed = &seed;
  gen::Program::Outputs out;
  out.loss = &loss;
  out.grad_norm = &grad_norm;
  out.lr = &lr;
  prog.step(in, out);
  const Measured m = measure(world);
  expect_exact(r, m);
  std::printf("%s", format_report(r, &m).c_str());
}
#endif

// A measurement that differs is reported as such, naming the device.
TEST(Report, MismatchIsShown) {
  const Report r = predicted("dot_relu_dot", "data=2,model=4");
  Measured m = run_dot_relu_dot();
  m.peak_bytes[3] += 4;
  std::string why;
  EXPECT_FALSE(matches(r, m, &why));
  EXPECT_NE(why.find("device 3"), std::string::npos) << why;
  const std::string text = format_report(r, &m);
  EXPECT_NE(text.find("\u2717"), std::string::npos) << text;
}

// The all_reduce byte formula with uneven chunks, against the runtime: 10
// floats over 4 devices are chunks of 3, 3, 2, 2.
TEST(Report, AllReduceUnevenChunksMatchTheRuntime) {
  rt::ThreadWorld world(rt::MeshShape{{"x"}, {4}});
  world.run([&](int rank) {
    std::vector<float> v(10, 1.0f);
    world.comm(rank).all_reduce(v.data(), v.size(), rt::make_group(world.mesh(), rank, {0}),
                                rt::ReduceOp::kSum);
  });
  // Member p sends every chunk but p, then every chunk but p + 1.
  const std::array<uint64_t, 4> len = {3, 3, 2, 2};
  for (int p = 0; p < 4; ++p)
    EXPECT_EQ(world.comm(p).stats().bytes(rt::CollectiveKind::kAllReduce),
              4 * (20 - len[p] - len[(p + 1) % 4]))
        << "device " << p;
}

// `generator --report` prints the prediction and writes nothing.
TEST(Report, GeneratorReportFlagPrintsTheTables) {
  const std::string cmd =
      std::string(SHARC_DRD_GENERATOR) + " --program dot_relu_dot --mesh data=2,model=4 --report";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("sharc report: dot_relu_dot"), std::string::npos) << out;
  EXPECT_NE(out.find("Parameters (2):"), std::string::npos) << out;
  EXPECT_NE(out.find("dot1/kernel"), std::string::npos) << out;
  EXPECT_NE(out.find(R"([{"model"}, {}])"), std::string::npos) << out;
  EXPECT_NE(out.find("bytes/device"), std::string::npos) << out;
  EXPECT_NE(out.find("Peak memory per device"), std::string::npos) << out;
  // Its numbers are predict()'s.
  EXPECT_EQ(out, format_report(predicted("dot_relu_dot", "data=2,model=4"))) << out;
}

}  // namespace
}  // namespace sharc
