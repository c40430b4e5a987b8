// DotReluDot on 8 simulated devices. The generated program (dot_relu_dot.h,
// written at build time by sharc_add_program from model.cpp for the mesh
// data=2,model=4) runs init + forward on a ThreadWorld; this driver prints how
// dot1's kernel, w2 and the output are laid out over the mesh, the bytes each
// device sent and its peak memory, and checks the output against the oracle
// (the global program traced in-process and interpreted in fp64). It exits
// non-zero on a mismatch, so `ctest` runs it as a test.
//
// `--train [--mesh M]` runs the Flax guide's training loop instead: five
// optax.adam(1e-3) steps of train_model.h's DotReluDot on one fixed batch
// (x and label standard normal, drawn with seeds 1 and 2 as the guide's
// jax.random.key(1) and key(2)), on the program generated for mesh M (default
// data=2,model=4, the guide's). Each step's loss is printed next to the
// oracle's (sharc::interpret carrying parameters and Adam state across steps
// in its `state`); it exits non-zero unless every loss is within 1e-5
// relative of the oracle's and the loss falls at every step.
//
// `--backend cuda [--world sim]` runs the same programs generated with
// BACKEND cuda (their statements as CUDA kernels) on gpu::SimGpuWorld, the
// devices on the block simulator, with the same checks: against the oracle,
// and every device's bytes sent per collective kind against the report.
// --world gpu and nccl need a GPU (samples/common/worlds.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dot_relu_dot.h"
#if SHARC_SAMPLES_CUDA
#include "dot_relu_dot_cuda.h"
#include "dot_relu_dot_train_cuda_data2_model4.h"
#include "dot_relu_dot_train_cuda_data8.h"
#include "dot_relu_dot_train_cuda_model8.h"
#endif
#include "dot_relu_dot_train_data2_model4.h"
#include "dot_relu_dot_train_data4_model2.h"
#include "dot_relu_dot_train_data8.h"
#include "dot_relu_dot_train_fsdp4_model2.h"
#include "dot_relu_dot_train_fsdp8.h"
#include "dot_relu_dot_train_model8.h"
#include "runtime/init.h"
#include "runtime/visualize.h"
#include "samples/dot_relu_dot/model.h"
#include "samples/common/worlds.h"
#include "samples/dot_relu_dot/train_model.h"

namespace gen = sharc_gen::dot_relu_dot;

namespace {

template <size_t N>
void show_layout(const char* what, const std::array<int64_t, N>& shape,
                 const std::vector<std::vector<std::string>>& spec,
                 const sharc::rt::MeshShape& mesh) {
  std::printf("%s:\n%s\n", what,
              sharc::rt::visualize_sharding({shape.begin(), shape.end()}, spec, mesh).c_str());
}

void show_traffic(sharc::rt::World& world, const char* when = "") {
  std::printf("per device%s: bytes sent by collectives, peak memory\n", when);
  for (int r = 0; r < world.size(); ++r) {
    const sharc::rt::CommStats& s = world.comm(r).stats();
    std::printf("  device %d: %llu bytes sent (%llu collective calls), peak %zu bytes\n", r,
                static_cast<unsigned long long>(s.total_bytes()),
                static_cast<unsigned long long>(s.total_calls()), world.memory(r).peak());
  }
}

// ---- --train: the guide's training loop.

constexpr int kTrainSteps = 5;

// A standard normal (batch, depth) array drawn from `seed` with the runtime's
// counter-based generator, the same on every machine.
std::vector<float> normal_batch(uint64_t seed) {
  sharc::rt::InitSpec spec;
  spec.kind = sharc::rt::InitKind::kNormal;
  spec.a = 1.0;
  spec.key = sharc::rt::init_key("batch");
  std::vector<float> v(dot_relu_dot::kBatch * dot_relu_dot::kDepth);
  for (size_t i = 0; i < v.size(); ++i) v[i] = sharc::rt::init_element(spec, seed, i);
  return v;
}

samples::WorldChoice choice;  // --backend, --world

template <class Program>
int train(const char* mesh_text, const sharc::rt::MeshShape& mesh,
          const std::array<int64_t, 2>& kernel_shape,
          const std::vector<std::vector<std::string>>& kernel_spec,
          const std::vector<std::vector<std::string>>& w2_spec) {
  std::string error;
  const std::unique_ptr<sharc::rt::World> made = choice.make(mesh, &error);
  if (!made) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  sharc::rt::World& world = *made;
  Program program(world);
  program.init(/*seed=*/0);
  const std::vector<float> x = normal_batch(1), label = normal_batch(2);

  std::printf("DotReluDot training (Adam 1e-3, mean squared error) on %d devices, mesh %s, backend %s\n\n",
              world.size(), mesh_text, choice.backend.c_str());
  show_layout("dot1/kernel", kernel_shape, kernel_spec, world.mesh());
  show_layout("w2", kernel_shape, w2_spec, world.mesh());

  // The oracle: the same training step traced here, interpreted in fp64 with
  // parameters and Adam state kept across steps in `state`.
  const sharc::ir::Graph global = sharc::trace("dot_relu_dot_train", [](sharc::ProgramBuilder& b) {
    dot_relu_dot::build_dot_relu_dot_train(b);
  });
  const sharc::HostValues inputs = {{"x", std::vector<double>(x.begin(), x.end())},
                                    {"label", std::vector<double>(label.begin(), label.end())}};
  sharc::HostValues state;

  // fp32 per-device math against fp64, 1e-5 relative: the loss is a mean of
  // 8192 squares of 1024-term dot products (~1e-7 relative rounding each),
  // and five Adam steps add fp32 rounding in the update itself. Measured:
  // 3e-6 at worst (step 2), the same on every mesh, so it is fp32 against
  // fp64 arithmetic, not partitioning; a 3x margin.
  const double tolerance = 1e-5;
  bool match = true, falling = true;
  float previous = 0;
  for (int step = 1; step <= kTrainSteps; ++step) {
    float loss = 0, grad_norm = 0, lr = 0;
    typename Program::Inputs in;
    in.x = x.data();
    in.label = label.data();
    typename Program::Outputs out;
    out.loss = &loss;
    out.grad_norm = &grad_norm;
    out.lr = &lr;
    program.step(in, out);
    const double want = sharc::interpret(global, inputs, /*seed=*/0, &state).at("loss")[0];
    const double rel = std::fabs(loss - want) / std::fabs(want);
    match = match && rel <= tolerance;
    if (step > 1) falling = falling && loss < previous;
    previous = loss;
    std::printf("step %d/%d  loss %.7f  oracle %.7f  rel err %.1e  |g| %.4f  lr %.0e\n", step,
                kTrainSteps, loss, want, rel, grad_norm, lr);
  }
  std::printf("\n");
  show_traffic(world, (", over the " + std::to_string(kTrainSteps) + " steps").c_str());
  std::printf("\nloss within %.0e of the oracle at every step: %s; loss falls at every step: %s\n",
              tolerance, match ? "PASS" : "FAIL", falling ? "PASS" : "FAIL");
  return match && falling ? 0 : 1;
}

#define SHARC_TRAIN_STRATEGY(mesh_flag, tag)                                            \
  TrainStrategy {                                                                       \
    mesh_flag, [] {                                                                     \
      namespace t = sharc_gen::dot_relu_dot_train_##tag;                                \
      return train<t::Program>(mesh_flag, t::mesh_shape(), t::kParam_dot1_kernel_shape, \
                               t::kParam_dot1_kernel_spec, t::kParam_w2_spec);          \
    }                                                                                   \
  }

struct TrainStrategy {
  const char* mesh;
  int (*run)();
};

// BACKEND cuda's programs (samples/dot_relu_dot/CMakeLists.txt; none where
// sharc is built without CUDA).
#if SHARC_SAMPLES_CUDA
const TrainStrategy kCudaTrainStrategies[] = {
    SHARC_TRAIN_STRATEGY("data=2,model=4", cuda_data2_model4),
    SHARC_TRAIN_STRATEGY("data=8", cuda_data8),
    SHARC_TRAIN_STRATEGY("model=8", cuda_model8),
};
#else
const std::vector<TrainStrategy> kCudaTrainStrategies;
#endif

const TrainStrategy kTrainStrategies[] = {
    SHARC_TRAIN_STRATEGY("data=2,model=4", data2_model4),
    SHARC_TRAIN_STRATEGY("data=8", data8),
    SHARC_TRAIN_STRATEGY("fsdp=8", fsdp8),
    SHARC_TRAIN_STRATEGY("model=8", model8),
    SHARC_TRAIN_STRATEGY("data=4,model=2", data4_model2),
    SHARC_TRAIN_STRATEGY("fsdp=4,model=2", fsdp4_model2),
};

std::string meshes(std::span<const TrainStrategy> strategies) {
  std::string s;
  for (const TrainStrategy& t : strategies) s += (s.empty() ? "" : ", ") + std::string(t.mesh);
  return s;
}

// ---- the default: one forward pass on data=2,model=4.

template <class Program>
int forward() {
  std::string error;
  const std::unique_ptr<sharc::rt::World> made = choice.make(gen::mesh_shape(), &error);
  if (!made) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  sharc::rt::World& world = *made;
  Program program(world);
  program.init(/*seed=*/0);

  // A deterministic input batch: x[i] = sin(0.37 i) + 0.25, the tests' input.
  const int64_t n_in = gen::kInput_x_shape[0] * gen::kInput_x_shape[1];
  std::vector<float> x(n_in);
  for (int64_t i = 0; i < n_in; ++i) x[i] = static_cast<float>(std::sin(0.37 * i) + 0.25);
  std::vector<float> y(gen::kOutput_y_shape[0] * gen::kOutput_y_shape[1]);
  typename Program::Inputs in;
  in.x = x.data();
  typename Program::Outputs out;
  out.y = y.data();
  program.forward(in, out);

  std::printf("DotReluDot on %d devices, mesh %s, backend %s\n\n", gen::kNumDevices,
              std::string(gen::kMesh).c_str(), choice.backend.c_str());
  show_layout("dot1/kernel", gen::kParam_dot1_kernel_shape, gen::kParam_dot1_kernel_spec,
              world.mesh());
  show_layout("w2", gen::kParam_w2_shape, gen::kParam_w2_spec, world.mesh());
  show_layout("y", gen::kOutput_y_shape, gen::kOutput_y_spec, world.mesh());

  show_traffic(world);

  // The oracle: the same program, traced here and interpreted globally in fp64.
  sharc::ir::Graph global = sharc::trace(
      "dot_relu_dot", [](sharc::ProgramBuilder& b) { dot_relu_dot::build_dot_relu_dot(b); });
  const std::vector<double> want =
      sharc::interpret(global, {{"x", std::vector<double>(x.begin(), x.end())}}, /*seed=*/0)
          .at("y");
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(y[i] - want[i]));
  }
  // fp32 per-device math against the fp64 oracle: a 1024-long dot of O(1)
  // values accumulates ~1e-7 relative error per term; 1e-5 of max|y| leaves a
  // 10x margin.
  const double tolerance = 1e-5 * scale;
  bool pass = worst <= tolerance;
  std::printf("\nmax |y - oracle| = %.3g (tolerance %.3g = 1e-5 * max|y| %.3g): %s\n", worst,
              tolerance, scale, pass ? "PASS" : "FAIL");

  // The costs sharc predicted before anything ran, beside what the runtime
  // measured (codegen/report.h); they must be equal.
  const sharc::Report report =
      sharc::predict(sharc::lower(global, sharc::Mesh::parse("data=2,model=4")).partitioned);
  const sharc::Measured measured = sharc::measure(world);
  std::printf("\n%s", sharc::format_report(report, &measured).c_str());
  pass = sharc::matches(report, measured) && pass;
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DotReluDot (the Flax NNX guide's model): one forward pass on data=2,model=4 against the "
               "oracle, or, with --train, the guide's five Adam steps.",
               "dot_relu_dot_main"};
  bool train_mode = false;
  std::string mesh = "data=2,model=4";
  app.add_flag("--train", train_mode, "run the guide's training loop instead of one forward pass");
  CLI::Option* mesh_option = sharc::cli::add_mesh(
      app, mesh,
      "with --train, the program's mesh: " + meshes(kTrainStrategies) + " (--backend cuda: " +
          meshes(kCudaTrainStrategies) + ")");
  choice.add_to(app);
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (const std::string error = choice.check(); !error.empty()) return sharc::cli::fail(app, error);
  if (!train_mode) {
    if (mesh_option->count() > 0 && mesh != "data=2,model=4")
      return sharc::cli::fail(app, "the forward program is generated for data=2,model=4 only; --mesh is for --train");
#if SHARC_SAMPLES_CUDA
    if (choice.cuda()) return forward<sharc_gen::dot_relu_dot_cuda::Program>();
#endif
    return forward<gen::Program>();
  }
  const std::span<const TrainStrategy> strategies =
      choice.cuda() ? std::span<const TrainStrategy>(kCudaTrainStrategies)
                    : std::span<const TrainStrategy>(kTrainStrategies);
  for (const TrainStrategy& s : strategies)
    if (mesh == s.mesh) return s.run();
  return sharc::cli::fail(app, "no " + choice.backend + " training program was generated for --mesh " + mesh +
                                   "; the build generated: " + meshes(strategies));
}
