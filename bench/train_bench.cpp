// bench_train: the sharc half of bench_vs_jax (bench/bench_vs_jax.py). One
// training program per (model, mesh), run on a ThreadWorld with synthetic
// batches, printed as one JSON object per line so that the driver can build
// the same step in JAX with the same layouts and compare:
//
//   bench_train --model mlp|gpt --mesh data=8 [--steps N] [--warmup N] [--windows N]
//   bench_train --list          the (model, mesh) pairs compiled in
//   bench_train --sgemm         this machine's sgemm rate on every core
//
// With --windows N the timed steps run as N windows of --steps steps and the
// fastest window gives examples/s; bytes per step count every timed step.
// --profile then runs --steps more steps on the wall clock and prints where
// the time went, statement by statement, on stderr. --device-threads K runs
// the devices on K threads (rt::ThreadWorld::set_device_threads; the
// default fits the machine's cores, fibers when there are fewer cores than
// devices); the row reports the count.
// A row holds examples/s, bytes sent per device per step (mean over devices,
// the ring collectives' count), peak memory per device (max over devices:
// parameter shards, optimizer state and the step's buffers, as
// rt::DeviceMemory counts them), the last loss, and the program's parameter
// and input tables (global shapes and layouts). Programs: the MLP classifier
// (samples/mlp_classifier, program mlp_train, the bench_mlp_train builds)
// and the GPT sample at its default size (samples/gpt2, program gpt2_train).
//
// Inputs are drawn from their names: integer ids ("labels", "tokens",
// "targets") uniformly below the model's class or vocabulary count, the
// dropout seed from the step number, anything else uniform in [-1, 1);
// eight distinct batches are used in turn (fixed-seed std::mt19937).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/timed_steps.h"
#include "codegen/cli.h"
#include "bench_mlp_train_data1.h"
#include "bench_mlp_train_data4_model2.h"
#include "bench_mlp_train_data8.h"
#include "bench_mlp_train_fsdp4_model2.h"
#include "bench_mlp_train_fsdp8.h"
#include "bench_mlp_train_model8.h"
#include "gpt2_train_data2_model4.h"
#include "gpt2_train_data8.h"
#include "gpt2_train_model8.h"
#include "runtime/blas.h"
#include "runtime/kernels.h"
#include "runtime/thread_world.h"

namespace {

namespace rt = sharc::rt;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model, mesh;
  int steps = 20, warmup = 3, windows = 1;
  int device_threads = 0;  // 0: the world's default
  bool profile = false;
};

std::string json_str(std::string_view s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

std::string json_shape(const std::vector<int64_t>& shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? "," : "") + std::to_string(shape[i]);
  return r + "]";
}

std::string json_spec(const rt::Spec& spec) {
  std::string r = "[";
  for (size_t d = 0; d < spec.size(); ++d) {
    r += d ? ",[" : "[";
    for (size_t a = 0; a < spec[d].size(); ++a) r += (a ? "," : "") + json_str(spec[d][a]);
    r += "]";
  }
  return r + "]";
}

std::string json_table(std::span<const rt::TensorInfo> table) {
  std::string r = "[";
  for (size_t i = 0; i < table.size(); ++i) {
    const rt::TensorInfo& t = table[i];
    r += (i ? "," : "") + std::string("{\"name\":") + json_str(t.name) +
         ",\"shape\":" + json_shape(t.shape) + ",\"spec\":" + json_spec(t.spec) + "}";
  }
  return r + "]";
}

// --profile: `steps` more steps on the wall clock (runtime/trace.h), then, on
// stderr, the statements that took the most time per step, summed over every
// device, each with its share of all devices' time. Not part of the timed
// figures: marking every statement costs a clock read.
template <class Step>
void print_profile(rt::ThreadWorld& world, int steps, Step& step, int first) {
  world.set_clock(rt::ClockMode::kWall);
  for (int s = 0; s < steps; ++s) step(first + s);
  const rt::Trace trace = world.trace();
  world.set_clock(rt::ClockMode::kOff);
  std::map<std::string, double> seconds;  // per statement label
  double total = 0;
  for (const rt::TraceEvent& e : trace.events) {
    if (e.category != "compute" && e.category != "collective") continue;
    seconds[e.name] += e.end_s - e.start_s;
    total += e.end_s - e.start_s;
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [name, sec] : seconds) rows.emplace_back(sec, name);
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(stderr, "profile: %d steps on %d devices, %.3f ms per step of device time\n",
               steps, world.size(), 1e3 * total / steps);
  for (size_t i = 0; i < rows.size() && i < 30; ++i)
    std::fprintf(stderr, "  %8.1f us  %5.1f%%  %s\n", 1e6 * rows[i].first / steps,
                 100 * rows[i].first / total, rows[i].second.c_str());
}

template <class Program>
std::string run(const char* model, const char* mesh, int64_t id_range, const Options& opt) {
  rt::ThreadWorld world(Program::mesh_shape());
  if (opt.device_threads > 0) world.set_device_threads(std::min(opt.device_threads, world.size()));
  Program program(world);
  program.init(/*seed=*/0);

  // Eight synthetic batches, values drawn by input name.
  std::mt19937 gen(2024);
  std::vector<std::vector<std::vector<float>>> batches(8);
  for (auto& batch : batches)
    for (const rt::TensorInfo& in : Program::inputs()) {
      std::vector<float> v(in.elements());
      const bool ids = in.name == "labels" || in.name == "tokens" || in.name == "targets";
      for (float& x : v)
        x = ids ? static_cast<float>(gen() % id_range)
                : static_cast<float>(gen() % 2048) / 1024.0f - 1.0f;
      batch.push_back(std::move(v));
    }
  std::vector<std::vector<float>> outputs;
  typename Program::Outputs out;
  for (const rt::TensorInfo& o : Program::outputs()) {
    outputs.emplace_back(o.elements());
    out.set(o.name, outputs.back());
  }
  float loss = 0;
  auto step = [&](int s) {
    typename Program::Inputs in;
    auto& batch = batches[s % batches.size()];
    size_t k = 0;
    for (const rt::TensorInfo& i : Program::inputs()) {
      if (i.name == "dropout_seed") batch[k][0] = static_cast<float>(s);
      in.set(i.name, batch[k++]);
    }
    program.step(in, out);
    size_t o = 0;
    for (const rt::TensorInfo& info : Program::outputs()) {
      if (info.name == "loss") loss = outputs[o][0];
      ++o;
    }
  };
  const sharc::bench::Timing timing =
      sharc::bench::timed_steps(world, opt.warmup, opt.steps, step, opt.windows);

  if (opt.profile) print_profile(world, opt.steps, step, opt.warmup + timing.steps);

  double bytes = 0;
  size_t peak = 0;
  for (int r = 0; r < world.size(); ++r) {
    bytes += static_cast<double>(world.comm(r).stats().total_bytes()) / timing.steps / world.size();
    peak = std::max(peak, world.memory(r).peak());
  }
  const int64_t examples = Program::inputs()[0].shape[0];
  const rt::MeshShape shape = Program::mesh_shape();
  std::string axes = "[";
  for (size_t a = 0; a < shape.axis_names.size(); ++a)
    axes += (a ? ",[" : "[") + json_str(shape.axis_names[a]) + "," +
            std::to_string(shape.axis_sizes[a]) + "]";
  axes += "]";
  const rt::BlasInfo blas = rt::blas_info();
  char numbers[512];
  std::snprintf(numbers, sizeof numbers,
                "\"devices\":%d,\"device_threads\":%d,\"threads_per_device\":%d,\"step_s\":%.9g,\"examples_per_s\":%.9g,"
                "\"bytes_per_device\":%.9g,\"peak_bytes\":%zu,\"loss\":%.9g,",
                world.size(), world.device_threads(), world.threads_per_device(), timing.step_s,
                examples / timing.step_s, bytes, peak, static_cast<double>(loss));
  return std::string("{\"model\":") + json_str(model) + ",\"mesh\":" + json_str(mesh) +
         ",\"axes\":" + axes + "," + numbers + "\"blas\":" + json_str(blas.core) +
         ",\"blas_forced_by_env\":" + json_str(blas.forced_by_env) +
         ",\"gemm\":" + json_str(rt::gemm_kernels()) +
         ",\"parameters\":" + json_table(Program::parameters()) +
         ",\"inputs\":" + json_table(Program::inputs()) + "}";
}

struct Entry {
  const char* model;
  const char* mesh;
  std::function<std::string(const Options&)> run;
};

std::vector<Entry> entries() {
  namespace m = bench_mlp_train;
  namespace g = sharc_gen;
  // Class count of the MLP (its head's bias), vocabulary of the GPT (its
  // token table's rows).
  const int64_t classes = m::data1::parameter_info("dense3/bias").shape[0];
  const int64_t vocab = g::gpt2_train_data8::parameter_info("wte/embedding").shape[0];
  return {
      {"mlp", "data=1", [=](const Options& o) { return run<m::data1::Program>("mlp", "data=1", classes, o); }},
      {"mlp", "data=8", [=](const Options& o) { return run<m::data8::Program>("mlp", "data=8", classes, o); }},
      {"mlp", "fsdp=8", [=](const Options& o) { return run<m::fsdp8::Program>("mlp", "fsdp=8", classes, o); }},
      {"mlp", "model=8", [=](const Options& o) { return run<m::model8::Program>("mlp", "model=8", classes, o); }},
      {"mlp", "data=4,model=2",
       [=](const Options& o) { return run<m::data4_model2::Program>("mlp", "data=4,model=2", classes, o); }},
      {"mlp", "fsdp=4,model=2",
       [=](const Options& o) { return run<m::fsdp4_model2::Program>("mlp", "fsdp=4,model=2", classes, o); }},
      {"gpt", "data=8",
       [=](const Options& o) { return run<g::gpt2_train_data8::Program>("gpt", "data=8", vocab, o); }},
      {"gpt", "model=8",
       [=](const Options& o) { return run<g::gpt2_train_model8::Program>("gpt", "model=8", vocab, o); }},
      {"gpt", "data=2,model=4", [=](const Options& o) {
         return run<g::gpt2_train_data2_model4::Program>("gpt", "data=2,model=4", vocab, o);
       }},
  };
}

// GFLOP/s of a 2048^3 sgemm on every core, repeated for at least a second.
double sgemm_gflops() {
  const int n = 2048;
  std::vector<float> a(size_t{n} * n, 0.5f), b(size_t{n} * n, 0.25f), c(size_t{n} * n);
  rt::set_blas_threads(static_cast<int>(std::thread::hardware_concurrency()));
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  once();  // warm-up
  int reps = 0;
  const Clock::time_point t0 = Clock::now();
  double wall = 0;
  do {
    once();
    ++reps;
    wall = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (wall < 1.0);
  return 2.0 * n * n * n * reps / wall / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"One generated training program's step time as JSON (bench/bench_vs_jax.py runs it beside JAX).",
               "bench_train"};
  bool list = false, sgemm = false;
  app.add_option("--model", opt.model, "mlp or gpt")->check(CLI::IsMember({"mlp", "gpt"}));
  sharc::cli::add_mesh(app, opt.mesh, "the program's mesh (--list shows the built ones)");
  sharc::cli::add_steps(app, opt.steps, opt.warmup);
  app.add_option("--windows", opt.windows,
                 "run the timed steps as N windows of --steps; the fastest gives examples/s")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--device-threads", opt.device_threads,
                 "run the devices on K threads (default: fits the cores, fibers when fewer)")
      ->check(sharc::cli::at_least(1));
  app.add_flag("--profile", opt.profile,
               "then --steps more steps on the wall clock, printed statement by statement on stderr");
  app.add_flag("--list", list, "print the built model and mesh pairs");
  app.add_flag("--sgemm", sgemm, "print this machine's sgemm rate (GFLOP/s, every core) as JSON");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (list) {
    for (const Entry& e : entries()) std::printf("%s %s\n", e.model, e.mesh);
    return 0;
  }
  if (sgemm) {
    const rt::BlasInfo blas = rt::blas_info();
    std::printf("{\"sgemm_gflops\":%.6g,\"cores\":%u,\"blas\":%s,\"blas_forced_by_env\":%s}\n", sgemm_gflops(),
                std::thread::hardware_concurrency(), json_str(blas.core).c_str(), json_str(blas.forced_by_env).c_str());
    return 0;
  }
  for (const Entry& e : entries())
    if (opt.model == e.model && opt.mesh == e.mesh) {
      std::printf("%s\n", e.run(opt).c_str());
      return 0;
    }
  return sharc::cli::fail(app, "no program for model '" + opt.model + "' on mesh '" + opt.mesh + "' (see --list)");
}
