// Trains the MLP classifier (model.h: 784-512-512-10, batch 128, AdamW with
// warmup + cosine decay) on Fashion-MNIST on 8 simulated devices, with the
// parallelism strategy picked by --mesh, then measures test-set accuracy.
//
//   mlp_classifier_main [--mesh data=8] [--steps N] [--seed S] [--eval-every N] [--data-dir D]
//
// The build generated both programs (mlp_train: one training step; mlp_eval:
// logits for 1000 images) once per mesh in kStrategies; this driver only
// picks a pair. Each step prints loss, batch accuracy, gradient norm,
// learning rate and throughput; at the end (and every --eval-every steps) the
// trained parameters are copied from the training program into the eval
// program, which classifies the 10,000 test images. The default run must
// reach kTargetAccuracy (exit 1 otherwise); a shorter run must at least
// lower the loss. Bad flags or missing data exit 2.
//
// --backend cuda runs the training step generated with BACKEND cuda on
// gpu::SimGpuWorld (--world sim, the default; samples/common/worlds.h), for
// every mesh but pipe=2; evaluation runs the CPU program as always.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "mlp_eval_data4_model2.h"
#include "mlp_eval_data8.h"
#include "mlp_eval_fsdp4_model2.h"
#include "mlp_eval_fsdp8.h"
#include "mlp_eval_model8.h"
#include "mlp_eval_pipe2.h"
#include "mlp_train_auto.h"
#include "mlp_train_bf16_fsdp4_model2.h"
#include "mlp_train_data4_model2.h"
#include "mlp_train_data8.h"
#include "mlp_train_fsdp4_model2.h"
#include "mlp_train_fsdp8.h"
#include "mlp_train_model8.h"
#if SHARC_SAMPLES_CUDA
#include "mlp_train_cuda_bf16_fsdp4_model2.h"
#include "mlp_train_cuda_data4_model2.h"
#include "mlp_train_cuda_data8.h"
#include "mlp_train_cuda_fsdp4_model2.h"
#include "mlp_train_cuda_fsdp8.h"
#include "mlp_train_cuda_model8.h"
#endif
#include "mlp_train_pipe2.h"
#include "samples/common/worlds.h"
#include "runtime/thread_world.h"
#include "runtime/visualize.h"
#include "samples/mlp_classifier/fashion_mnist.h"

namespace {

namespace rt = sharc::rt;
using Spec = std::vector<std::vector<std::string>>;
using Clock = std::chrono::steady_clock;

// The default run: 600 steps of 128 (1.3 epochs), the length over which
// model.h's default_optimizer() decays the learning rate (its kDefaultSteps;
// the generated programs carry the schedule, this file only counts steps, so
// keep the two equal). The target is the accuracy every mesh's default run
// reaches with a margin (measured 0.874; see docs/guide/samples.md).
constexpr int64_t kDefaultSteps = 600;
constexpr double kTargetAccuracy = 0.86;
constexpr int64_t kTrainBatch = 128;  // the programs' batch (model.h Config)
constexpr int64_t kEvalBatch = 1000;  // model.cpp's mlp_eval batch

struct Options {
  std::string mesh = "data=8";
  std::string dtype = "f32";
  int64_t steps = kDefaultSteps;
  uint64_t seed = 0;
  int64_t eval_every = 200;
  std::string data_dir = fashion_mnist::kDefaultDir;
  samples::WorldChoice world;  // --backend, --world
};

struct Data {
  fashion_mnist::Split train, test;
};

// What the driver needs to know of one generated pair besides its types: the
// mesh, and the training program's rows (layouts) of the parameters the
// evaluation program shares, read from the generated tables.
struct Layout {
  rt::MeshShape mesh;
  std::string mesh_text;                        // <["fsdp"=8]>
  std::vector<const rt::TensorInfo*> params;    // the model's parameters
};

template <class Train, class Eval>
Layout layout_of(std::string mesh_text) {
  Layout l{Train::mesh_shape(), std::move(mesh_text), {}};
  for (const rt::TensorInfo& p : Eval::parameters())
    l.params.push_back(&Train::parameter_info(p.name));
  return l;
}

std::string spec_text(const Spec& spec) {
  std::string s = "[";
  for (size_t d = 0; d < spec.size(); ++d) {
    s += d ? ", {" : "{";
    for (size_t a = 0; a < spec[d].size(); ++a) s += (a ? ", \"" : "\"") + spec[d][a] + "\"";
    s += "}";
  }
  return s + "]";
}

std::string bytes_text(double b) {
  char buf[32];
  if (b >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else if (b >= 1 << 10)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

void print_strategy(const char* description, const Layout& layout) {
  std::printf("MLP classifier 784-512-512-10, batch %lld, on %d simulated devices, mesh %s: %s\n\n",
              static_cast<long long>(kTrainBatch), layout.mesh.num_devices(),
              layout.mesh_text.c_str(), description);
  std::printf("parameter layouts (optimizer state is laid out like its parameter):\n");
  for (const rt::TensorInfo* p : layout.params)
    std::printf("  %-14s %-13s %s\n", std::string(p->name).c_str(), p->type_str().c_str(),
                spec_text(p->spec).c_str());
  const rt::TensorInfo& k1 = *layout.params.front();
  std::printf("\n%s:\n%s\n", std::string(k1.name).c_str(),
              rt::visualize_sharding(k1.shape, k1.spec, layout.mesh).c_str());
}

// Test-set accuracy of the parameters `train` holds, through the eval program.
template <class Train, class Eval>
double evaluate(const Train& train, Eval& eval, const Layout& layout,
                const fashion_mnist::Split& test) {
  std::vector<float> buffer;
  for (const rt::TensorInfo* p : layout.params) {
    buffer.resize(p->elements());
    train.get_parameter(p->name, buffer);
    eval.set_parameter(p->name, buffer);
  }
  const int64_t px = test.pixels();
  std::vector<float> logits(kEvalBatch * fashion_mnist::kClasses);
  int64_t correct = 0;
  for (int64_t b = 0; b < test.count / kEvalBatch; ++b) {
    typename Eval::Inputs in;
    in.images = test.images.data() + b * kEvalBatch * px;
    typename Eval::Outputs out;
    out.logits = logits.data();
    eval.forward(in, out);
    for (int64_t i = 0; i < kEvalBatch; ++i) {
      const float* row = logits.data() + i * fashion_mnist::kClasses;
      const int64_t guess = std::max_element(row, row + fashion_mnist::kClasses) - row;
      correct += guess == static_cast<int64_t>(test.labels[b * kEvalBatch + i]);
    }
  }
  return static_cast<double>(correct) / static_cast<double>(test.count / kEvalBatch * kEvalBatch);
}

template <class Train, class Eval>
int train_and_evaluate(const Options& o, const Data& data, const char* description,
                       const Layout& layout) {
  print_strategy(description, layout);
  std::string error;
  const std::unique_ptr<rt::World> made = o.world.make(layout.mesh, &error);
  if (!made) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  rt::World& world = *made;
  std::printf("backend %s\n", o.world.backend.c_str());
  Train train(world);
  train.init(o.seed);
  // Evaluation has its own world, so the training world's bytes and peak
  // memory are training's alone; on its own mesh (the same as training's,
  // but for the planner's choice, evaluated on data=8), as it takes whole
  // parameters.
  rt::ThreadWorld eval_world(Eval::mesh_shape());
  Eval eval(eval_world);

  fashion_mnist::Batcher batcher(data.train, kTrainBatch, o.seed);
  std::vector<float> images(kTrainBatch * data.train.pixels()), labels(kTrainBatch);
  float loss = 0, accuracy = 0, grad_norm = 0, lr = 0;
  typename Train::Inputs in;
  in.images = images.data();
  in.labels = labels.data();
  typename Train::Outputs out;
  out.loss = &loss;
  out.accuracy = &accuracy;
  out.grad_norm = &grad_norm;
  out.lr = &lr;

  std::printf("training %lld steps (%.2f epochs of %lld examples), seed %llu\n",
              static_cast<long long>(o.steps),
              static_cast<double>(o.steps) / static_cast<double>(batcher.batches_per_epoch()),
              static_cast<long long>(data.train.count), static_cast<unsigned long long>(o.seed));
  std::vector<double> losses;
  double train_seconds = 0;
  std::vector<double> recent;  // step times of the last few steps, for ex/s
  const int width = static_cast<int>(std::to_string(o.steps).size());
  for (int64_t step = 1; step <= o.steps; ++step) {
    batcher.next(images.data(), labels.data());
    const Clock::time_point t0 = Clock::now();
    train.step(in, out);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    train_seconds += dt;
    recent.push_back(dt);
    if (recent.size() > 20) recent.erase(recent.begin());
    double window = 0;
    for (double t : recent) window += t;
    losses.push_back(loss);
    std::printf("step %*lld/%lld  epoch %lld  loss %.4f  acc %.3f  |g| %.3f  lr %.2e  %.0f ex/s\n",
                width, static_cast<long long>(step), static_cast<long long>(o.steps),
                static_cast<long long>(batcher.epoch()), loss, accuracy, grad_norm, lr,
                static_cast<double>(kTrainBatch * recent.size()) / window);
    if (o.eval_every > 0 && step % o.eval_every == 0 && step < o.steps)
      std::printf("  test accuracy after %lld steps: %.4f\n", static_cast<long long>(step),
                  evaluate(train, eval, layout, data.test));
    std::fflush(stdout);
  }

  std::printf("\nper device, per training step: bytes sent by collectives, calls; peak memory\n");
  for (int r = 0; r < world.size(); ++r) {
    const rt::CommStats& s = world.comm(r).stats();
    std::printf("  device %d: %s sent in %.0f collective calls, peak %s\n", r,
                bytes_text(static_cast<double>(s.total_bytes()) / o.steps).c_str(),
                static_cast<double>(s.total_calls()) / o.steps,
                bytes_text(static_cast<double>(world.memory(r).peak())).c_str());
  }
  std::printf("training: %.1f s, %.0f examples/s\n", train_seconds,
              static_cast<double>(kTrainBatch * o.steps) / train_seconds);

  const double test_accuracy = evaluate(train, eval, layout, data.test);
  std::printf("\ntest accuracy after %lld steps: %.4f (%lld test images)\n",
              static_cast<long long>(o.steps), test_accuracy,
              static_cast<long long>(data.test.count));
  if (o.steps >= kDefaultSteps) {
    const bool pass = test_accuracy >= kTargetAccuracy;
    std::printf("target: %.2f for a run of %lld steps or more: %s\n", kTargetAccuracy,
                static_cast<long long>(kDefaultSteps), pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
  }
  // A short run (a smoke test) is held to a falling loss: the mean of its
  // last third below the first step's.
  const size_t tail = std::max<size_t>(1, losses.size() / 3);
  double late = 0;
  for (size_t i = losses.size() - tail; i < losses.size(); ++i) late += losses[i];
  late /= static_cast<double>(tail);
  const bool pass = late < losses.front();
  std::printf(
      "(the %.2f target applies to runs of %lld steps or more) loss %.4f -> %.4f (mean of the "
      "last %zu steps): %s\n",
      kTargetAccuracy, static_cast<long long>(kDefaultSteps), losses.front(), late, tail,
      pass ? "falling, PASS" : "not falling, FAIL");
  return pass ? 0 : 1;
}

// One row per generated pair: its mesh flag, a description and the runner.
struct Strategy {
  const char* mesh;
  const char* dtype;  // of the training step's computation
  const char* description;
  int (*run)(const Options&, const Data&, const char* description);
};

// The layouts are the training program's (evaluation takes whole parameters,
// whatever its own layouts).
#define SHARC_MLP_STRATEGY(mesh_flag, tag, text) \
  SHARC_MLP_STRATEGY_TYPED(mesh_flag, "f32", mlp_train_##tag, mlp_eval_##tag, text)
#define SHARC_MLP_CUDA_STRATEGY(mesh_flag, tag, text) \
  SHARC_MLP_STRATEGY_TYPED(mesh_flag, "f32", mlp_train_cuda_##tag, mlp_eval_##tag, text)
#define SHARC_MLP_STRATEGY_TYPED(mesh_flag, dtype, train, eval, text)                     \
  Strategy {                                                                              \
    mesh_flag, dtype, text, [](const Options& o, const Data& d, const char* description) { \
      namespace t = sharc_gen::train;                                                     \
      namespace e = sharc_gen::eval;                                                      \
      const Layout layout = layout_of<t::Program, e::Program>(std::string(t::kMesh));\
      return train_and_evaluate<t::Program, e::Program>(o, d, description, layout); \
    }                                                                               \
  }

const Strategy kStrategies[] = {
    SHARC_MLP_STRATEGY("data=8", data8, "data parallel (weights replicated, batch split 8 ways)"),
    SHARC_MLP_STRATEGY("fsdp=8", fsdp8, "FSDP / ZeRO-3 (batch and every kernel split 8 ways)"),
    SHARC_MLP_STRATEGY("model=8", model8, "tensor parallel (Megatron MLP: hidden split 8 ways)"),
    SHARC_MLP_STRATEGY("data=4,model=2", data4_model2, "data parallel x tensor parallel"),
    SHARC_MLP_STRATEGY("fsdp=4,model=2", fsdp4_model2, "FSDP x tensor parallel"),
    SHARC_MLP_STRATEGY_TYPED("fsdp=4,model=2", "bf16", mlp_train_bf16_fsdp4_model2,
                             mlp_eval_fsdp4_model2,
                             "FSDP x tensor parallel in bf16 mixed precision"),
    SHARC_MLP_STRATEGY("pipe=2", pipe2,
                       "pipeline parallel (2 stages: one hidden layer each, 1F1B over 4 micro-batches)"),
    SHARC_MLP_STRATEGY_TYPED("auto", "f32", mlp_train_auto, mlp_eval_data8,
                             "the planner's choice for 8 devices (MESH auto; mlp_train_auto_plan.txt)"),
};

// --backend cuda: the BACKEND cuda training programs, evaluated by the CPU's
// (none where sharc is built without CUDA).
#if SHARC_SAMPLES_CUDA
const Strategy kCudaStrategies[] = {
    SHARC_MLP_CUDA_STRATEGY("data=8", data8, "data parallel, as CUDA kernels"),
    SHARC_MLP_CUDA_STRATEGY("fsdp=8", fsdp8, "FSDP / ZeRO-3, as CUDA kernels"),
    SHARC_MLP_CUDA_STRATEGY("model=8", model8, "tensor parallel, as CUDA kernels"),
    SHARC_MLP_CUDA_STRATEGY("data=4,model=2", data4_model2, "data parallel x tensor parallel, as CUDA kernels"),
    SHARC_MLP_CUDA_STRATEGY("fsdp=4,model=2", fsdp4_model2, "FSDP x tensor parallel, as CUDA kernels"),
    SHARC_MLP_STRATEGY_TYPED("fsdp=4,model=2", "bf16", mlp_train_cuda_bf16_fsdp4_model2, mlp_eval_fsdp4_model2,
                             "FSDP x tensor parallel in bf16 mixed precision, as CUDA kernels"),
};
#else
const std::vector<Strategy> kCudaStrategies;
#endif

std::string valid_meshes(bool cuda = false) {
  std::string s;
  for (const Strategy& st : cuda ? std::span<const Strategy>(kCudaStrategies) : std::span<const Strategy>(kStrategies))
    s += std::string("\n  --mesh ") + st.mesh +
         (std::string(st.dtype) == "f32" ? "" : std::string(" --dtype ") + st.dtype) + "   " +
         st.description;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Trains the MLP classifier (DistJax's SimpleClassifier) on Fashion-MNIST on the strategy a "
               "mesh picks, and checks its test accuracy.",
               "mlp_classifier_main"};
  sharc::cli::add_mesh(app, o.mesh, "the strategy's mesh, one of:" + valid_meshes());
  app.add_option("--dtype", o.dtype, "f32, or bf16 mixed precision where generated")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  app.add_option("--steps", o.steps,
                 "training steps of " + std::to_string(kTrainBatch) + " examples (the test accuracy target " +
                     std::to_string(kTargetAccuracy).substr(0, 4) + " is checked for runs this long or longer)")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "parameter initialisation and data order")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "test accuracy every N steps as well as at the end (0: end only)")
      ->check(sharc::cli::at_least(0))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "folder of the Fashion-MNIST *-ubyte.gz files")->capture_default_str();
  o.world.add_to(app);
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (const std::string error = o.world.check(); !error.empty()) return sharc::cli::fail(app, error);
  if (o.world.cuda() && o.world.world != "sim") {  // say at once when there is no such world
    std::string error;
    if (!o.world.make(rt::MeshShape{{"data"}, {1}}, &error)) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      return 1;
    }
  }
  const Strategy* strategy = nullptr;
  for (const Strategy& s : o.world.cuda() ? std::span<const Strategy>(kCudaStrategies)
                                          : std::span<const Strategy>(kStrategies))
    if (o.mesh == s.mesh && o.dtype == s.dtype) strategy = &s;
  if (!strategy)
    return sharc::cli::fail(app, std::string("no ") + (o.world.cuda() ? "BACKEND cuda " : "") +
                                     "program was generated for --mesh " + o.mesh +
                                     (o.dtype == "f32" ? "" : " --dtype " + o.dtype) +
                                     "; the build generated:" + valid_meshes(o.world.cuda()));

  Data data;
  try {
    const Clock::time_point t0 = Clock::now();
    data.train = fashion_mnist::load(o.data_dir, "train");
    data.test = fashion_mnist::load(o.data_dir, "t10k");
    // Standardise both splits with the training set's pixel mean and
    // deviation (a single scalar pair, as is usual for MNIST-like data).
    const fashion_mnist::Moments m = fashion_mnist::moments(data.train);
    fashion_mnist::standardize(data.train, m);
    fashion_mnist::standardize(data.test, m);
    std::printf(
        "Fashion-MNIST from %s: %lld training and %lld test images of %lldx%lld, "
        "standardised (mean %.4f, std %.4f), loaded in %.2f s\n\n",
        o.data_dir.c_str(), static_cast<long long>(data.train.count),
        static_cast<long long>(data.test.count), static_cast<long long>(data.train.rows),
        static_cast<long long>(data.train.cols), m.mean, m.stddev,
        std::chrono::duration<double>(Clock::now() - t0).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (data.train.pixels() != 784 || data.test.pixels() != 784) {
    std::fprintf(stderr, "error: expected 28x28 images, got %lldx%lld\n",
                 static_cast<long long>(data.train.rows), static_cast<long long>(data.train.cols));
    return 2;
  }
  return strategy->run(o, data, strategy->description);
}
