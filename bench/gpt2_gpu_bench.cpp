// bench_gpt2_gpu: sharc's generated GPT-2 124M training step on one GPU
// (samples/gpt2/model.cpp's gpt2_124m_train: 12 layers, d=768, vocab
// 50304, T=1024, bf16 compute on f32 master weights, AdamW, clipping at 1;
// BACKEND cuda on mesh data=1, one program per batch size, bench/CMakeLists.txt),
// beside the same step under torch.compile and JAX (bench/gpt2_peers.py) in
// the same invocation. For each it prints one line
//
//   peer NAME batch B tokens_per_s X ms_per_step Y mfu Z peak_gib W loss L
//
// with MFU = (6 N + 12 L d T) tokens/s / 989.4e12 (the H100's dense bf16
// peak) and the loss after the warm-up and timed steps. sharc's peak is its
// device memory's (rt::DeviceMemory::peak: parameters, optimizer state and
// the step's arena), as torch's is its allocator's.
//
//   bench_gpt2_gpu [--batch 16 32] [--steps 10] [--warmup 3] [--peers torch jax]
//                  [--trace FILE]    the last step's GPU timeline (CUDA events
//                                    per statement) as a Chrome trace
//
// Without a GPU it says why and exits 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "gpt2_124m_train_cuda_bf16_b16.h"
#include "gpt2_124m_train_cuda_bf16_b32.h"
#include "runtime/gpu/gpu_world.h"
#include "runtime/trace.h"
#include "samples/gpt2/train_step.h"

namespace {

constexpr double kH100Bf16Peak = 989.4e12;

struct Options {
  std::vector<int> batches = {16, 32};
  int steps = 10, warmup = 3;
  std::vector<std::string> peers = {"torch", "jax"};
  std::string trace;
};

// The command line (codegen/cli.h). Returns -1 to go on with `o` filled, or
// the status main() returns (0 after --help, 2 after a mistake).
int parse(int argc, char** argv, Options& o) {
  CLI::App app{"GPT-2 124M training steps on a GPU (bf16 compute on f32 master weights, AdamW), with "
               "torch.compile and JAX measured in the same run.",
               "bench_gpt2_gpu"};
  app.add_option("--batch", o.batches, "batch sizes (the programs are built for 16 and 32)")
      ->check(CLI::Validator(
          [](std::string& b) -> std::string {
            if (b == "16" || b == "32") return "";
            return b + ": the programs are built for batch 16 and 32 (bench/CMakeLists.txt, "
                       "gpt2_124m_train_cuda_bf16_b16 and _b32)";
          },
          "16|32"))
      ->capture_default_str();
  sharc::cli::add_steps(app, o.steps, o.warmup);
  app.add_option("--peers", o.peers, "the peers to run beside sharc: torch, jax, or none")
      ->check(CLI::IsMember({"torch", "jax", "none"}))
      ->capture_default_str();
  app.add_option("--trace", o.trace, "write the last step's GPU timeline here (Chrome trace JSON)");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (o.peers.size() == 1 && o.peers[0] == "none") o.peers.clear();
  for (const std::string& p : o.peers)
    if (p == "none") return sharc::cli::fail(app, "--peers none stands alone");
  return -1;
}

// The FLOPs of a token as the peers count them: 6N for the parameters'
// matmuls, 12 L d T for attention.
double flops_per_token(int64_t params, int64_t layers, int64_t dim, int64_t context) {
  return 6.0 * static_cast<double>(params) + 12.0 * static_cast<double>(layers * dim * context);
}

template <class Program>
void run_sharc(const Options& o) {
  sharc::gpu::CudaWorld world(Program::mesh_shape());
  const sharc::rt::TensorInfo& in = Program::input_info("tokens");
  const int64_t batch = in.shape[0], context = in.shape[1];
  int64_t params = 0;
  for (const sharc::rt::TensorInfo& p : Program::parameters())
    if (p.name.rfind("opt/", 0) != 0) params += p.elements();
  const sharc::rt::TensorInfo& wte = Program::parameter_info("wte/embedding");
  const int64_t layers = Program::parameter_info("h/ln1/scale").shape[0], dim = wte.shape[1];
  Program program(world);
  program.init(0);
  // Random tokens of GPT-2's vocabulary, the same every step (as the peers').
  std::mt19937_64 rng(1);
  std::vector<float> tokens(static_cast<size_t>(batch * context)), targets(tokens.size());
  for (float& t : tokens) t = static_cast<float>(rng() % 50257);
  for (float& t : targets) t = static_cast<float>(rng() % 50257);
  float loss = 0;
  // The outputs' download waits for the GPU: a step's time is all of its work.
  auto step = [&] { loss = gpt2::train_step(program, tokens.data(), targets.data(), /*seed=*/0.0f).loss; };
  for (int s = 0; s < o.warmup; ++s) step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < o.steps; ++s) step();
  const double step_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  const double tokens_per_s = static_cast<double>(batch * context) / step_s;
  const double mfu = flops_per_token(params, layers, dim, context) * tokens_per_s / kH100Bf16Peak;
  const double peak_gib = static_cast<double>(world.memory(0).peak()) / (1 << 30);
  std::printf("peer sharc batch %lld tokens_per_s %.0f ms_per_step %.2f mfu %.1f%% peak_gib %.2f loss %.4f\n",
              static_cast<long long>(batch), tokens_per_s, 1e3 * step_s, 100 * mfu, peak_gib, loss);
  std::fflush(stdout);
  if (!o.trace.empty()) {  // one more step on the device clock
    world.threads().set_clock(sharc::rt::ClockMode::kDevice);
    step();
    const sharc::rt::Trace trace = world.threads().trace();
    std::ofstream(o.trace) << sharc::rt::chrome_trace_json(trace);
    double end = 0, start = trace.events.empty() ? 0 : trace.events.front().start_s;
    for (const sharc::rt::TraceEvent& e : trace.events) end = std::max(end, e.end_s);
    std::printf("trace of one batch-%lld step on the GPU (CUDA events per statement): %zu statements, %.2f ms -> %s\n",
                static_cast<long long>(batch), trace.events.size(), 1e3 * (end - start), o.trace.c_str());
    world.threads().set_clock(sharc::rt::ClockMode::kOff);
  }
}

int run_peers(const Options& o) {
  if (o.peers.empty()) return 0;
  // SHARC_GPT2_PEERS_SCRIPT overrides the script's path (a binary carried to
  // another machine: scripts/gpu_bundle.sh).
  const char* script = std::getenv("SHARC_GPT2_PEERS_SCRIPT");
  std::string cmd = "python3 " + std::string(script ? script : SHARC_BENCH_DIR "/gpt2_peers.py") + " --steps " +
                    std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) + " --batch";
  for (int b : o.batches) cmd += " " + std::to_string(b);
  cmd += " --peers";
  for (const std::string& p : o.peers) cmd += " " + p;
  std::fflush(stdout);
  return std::system(cmd.c_str());
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into a pipe
  Options o;
  if (const int code = parse(argc, argv, o); code >= 0) return code;
  std::string why;
  if (!sharc::gpu::cuda_kernels(&why)) {
    std::printf("bench_gpt2_gpu: no GPU to measure on: %s\n", why.c_str());
    return 0;
  }
  std::printf("bench_gpt2_gpu: GPT-2 124M training step, T=1024, bf16 compute on f32 master weights, AdamW, "
              "clipping at 1; %d warm-up and %d timed steps\n",
              o.warmup, o.steps);
  std::fflush(stdout);
  for (int b : o.batches) {
    Options one = o;
    if (b != o.batches.back()) one.trace.clear();  // the trace of the last batch size
    try {
      if (b == 16) run_sharc<sharc_gen::gpt2_124m_train_cuda_bf16_b16::Program>(one);
      if (b == 32) run_sharc<sharc_gen::gpt2_124m_train_cuda_bf16_b32::Program>(one);
    } catch (const std::exception& e) {  // e.g. out of memory: the other batch and the peers still run
      std::printf("peer sharc batch %d skipped: %s\n", b, e.what());
      std::fflush(stdout);
    }
  }
  return run_peers(o) == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpt2_gpu: %s\n", e.what());
  return 1;
}
