// Programs generated with BACKEND cuda (tests/gpu/CMakeLists.txt), run on
// gpu::SimGpuWorld and checked against the oracle: the global program traced
// here and interpreted in fp64, carrying parameters and optimizer state
// across steps. Three training steps of the MLP classifier (AdamW, warmup +
// cosine) on each of its five meshes: every output of every step, and after
// the third step every parameter. After the first step every device's bytes
// sent and calls per collective kind, its peak memory and its step arena
// equal the report's. And a BACKEND cuda program refuses a world that is not
// a GPU world, saying which it needs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "mlp_train_cuda_data4_model2.h"
#include "mlp_train_cuda_data8.h"
#include "mlp_train_cuda_fsdp4_model2.h"
#include "mlp_train_cuda_fsdp8.h"
#include "mlp_train_cuda_model8.h"
#include "runtime/gpu/gpu_world.h"
#include "runtime/init.h"
#include "samples/mlp_classifier/model.h"

namespace sharc {
namespace {

constexpr int kSteps = 3;
constexpr uint64_t kSeed = 5;

// A batch: images standard normal, labels 0..9, the same on every run.
HostValues batch(const mlp_classifier::Config& c) {
  rt::InitSpec spec;
  spec.kind = rt::InitKind::kNormal;
  spec.a = 1.0;
  spec.key = rt::init_key("images");
  std::vector<double> images(static_cast<size_t>(c.batch * c.features)), labels(static_cast<size_t>(c.batch));
  for (size_t i = 0; i < images.size(); ++i) images[i] = rt::init_element(spec, 1, i);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<double>((i * 7 + 3) % c.classes);
  return {{"images", images}, {"labels", labels}};
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Runs kSteps steps of `Program` and of the oracle of `global`; every output
// within out_rtol of the oracle's largest value of it, every parameter after
// the last step within param_atol.
template <class Program, class Outputs, class Parameters>
void expect_training_matches_oracle(const ir::Graph& global, const char* mesh, const Outputs& outputs,
                                    const Parameters& parameters, double out_rtol, double param_atol) {
  gpu::SimGpuWorld world(Program::mesh_shape());
  Program program(world);
  program.init(kSeed);
  const HostValues inputs = batch(mlp_classifier::Config{});
  std::vector<float> images(inputs.at("images").begin(), inputs.at("images").end());
  std::vector<float> labels(inputs.at("labels").begin(), inputs.at("labels").end());  // class ids, as f32
  HostValues state;
  for (int step = 1; step <= kSteps; ++step) {
    typename Program::Inputs in;
    in.set("images", std::span<const float>(images)).set("labels", std::span<const float>(labels));
    typename Program::Outputs out;
    std::vector<std::vector<float>> got;
    for (const rt::TensorInfo& info : outputs) got.emplace_back(static_cast<size_t>(info.elements()));
    for (size_t k = 0; k < got.size(); ++k) out.set(outputs[k].name, std::span<float>(got[k]));
    program.step(in, out);
    if (step == 1) {  // the collectives' bytes per device and kind, and the memory, are the report's
      std::string why;
      EXPECT_TRUE(matches(predict(lower(global, Mesh::parse(mesh)).partitioned), measure(world), &why)) << why;
    }
    const HostValues want = interpret(global, inputs, kSeed, &state);
    for (size_t k = 0; k < got.size(); ++k) {
      const std::string name(outputs[k].name);
      const std::vector<double>& w = want.at(name);
      const double tol = out_rtol * std::max(1.0, max_abs(w));
      for (size_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(got[k][i], w[i], tol) << "output \"" << name << "\" [" << i << "] at step " << step;
    }
  }
  for (const rt::TensorInfo& info : parameters) {
    const std::string path(info.name);
    const std::vector<double>& w = state.at(path);
    std::vector<float> got(w.size());
    program.get_parameter(path, got);
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(got[i] - w[i]));
    EXPECT_LE(worst, param_atol) << "parameter \"" << path << "\" after " << kSteps << " steps";
  }
}

ir::Graph mlp_train(bool bf16) {
  return trace(bf16 ? "mlp_train_bf16" : "mlp_train", [&](ProgramBuilder& b) {
    if (bf16) b.set_dtype(DType::kBF16);
    mlp_classifier::build_train(b, mlp_classifier::Config{}, mlp_classifier::default_optimizer());
  });
}

// f32 against fp64. Outputs (loss, grad norm, lr, accuracy) within 1e-5 of
// their size (or of 1). Parameters after three AdamW steps within 1e-5: a step
// moves a weight by about lr (at most 1e-3 here), and where a gradient
// element is near zero f32's rounding of it changes m / sqrt(v) by more than
// its own rounding, so the steps differ by up to ~0.5% of lr (measured:
// 4.1e-6 at worst, dense1/kernel on fsdp=4,model=2).
constexpr double kOutRtol = 1e-5, kParamAtol = 1e-5;

#define EXPECT_MATCHES_ORACLE(program, global, mesh, ...)                                          \
  expect_training_matches_oracle<sharc_gen::program::Program>(global, mesh, sharc_gen::program::kOutputs, \
                                                              sharc_gen::program::kParameters, __VA_ARGS__)

TEST(CudaPrograms, MlpTrainingOnData8MatchesTheOracle) {
  EXPECT_MATCHES_ORACLE(mlp_train_cuda_data8, mlp_train(false), "data=8", kOutRtol, kParamAtol);
}
TEST(CudaPrograms, MlpTrainingOnFsdp8MatchesTheOracle) {
  EXPECT_MATCHES_ORACLE(mlp_train_cuda_fsdp8, mlp_train(false), "fsdp=8", kOutRtol, kParamAtol);
}
TEST(CudaPrograms, MlpTrainingOnModel8MatchesTheOracle) {
  EXPECT_MATCHES_ORACLE(mlp_train_cuda_model8, mlp_train(false), "model=8", kOutRtol, kParamAtol);
}
TEST(CudaPrograms, MlpTrainingOnData4Model2MatchesTheOracle) {
  EXPECT_MATCHES_ORACLE(mlp_train_cuda_data4_model2, mlp_train(false), "data=4,model=2", kOutRtol,
                                                                                   kParamAtol);
}
TEST(CudaPrograms, MlpTrainingOnFsdp4Model2MatchesTheOracle) {
  EXPECT_MATCHES_ORACLE(mlp_train_cuda_fsdp4_model2, mlp_train(false), "fsdp=4,model=2", kOutRtol,
                                                                                   kParamAtol);
}

TEST(CudaPrograms, ProgramRefusesAWorldThatIsNotAGpuWorld) {
  rt::ThreadWorld world(sharc_gen::mlp_train_cuda_data8::mesh_shape());
  try {
    sharc_gen::mlp_train_cuda_data8::Program program(world);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("program \"mlp_train\" was generated with BACKEND cuda: it runs on a "
                                         "gpu::GpuWorld (gpu::SimGpuWorld), not on this world"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sharc
