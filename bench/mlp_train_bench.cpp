// bench_mlp_train: throughput, communication and memory of one AdamW step of
// the MLP classifier (samples/mlp_classifier) on the 1-device baseline and on
// every strategy's 8-device mesh, all measured in one run of this binary so
// the ratios between rows are comparable. It prints numbers and never judges
// them; the ctest smoke test only checks that it runs.
//
// Every simulated device is a thread and they all share this machine's
// cores, so an 8-device row measures the partitioned program's total work
// plus the collectives' cost on shared cores, not what 8 real devices would
// do. For the same reason BLAS runs single-threaded here
// (openblas_set_num_threads(1), what OPENBLAS_NUM_THREADS=1 does): a BLAS
// thread pool per device would oversubscribe the cores.
//
// Per mesh: a fresh world and program, init(0), --warmup untimed steps, then
// --steps timed steps on synthetic deterministic batches (no dataset).
// Statistics and peak memory are reset after the warm-up, so they cover the
// timed steps only. "coll %" is the mean over devices of (seconds inside
// collectives) / (wall seconds of the timed steps).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
#include "runtime/blas.h"
#include "runtime/communicator.h"
#include "runtime/thread_world.h"

namespace {

namespace rt = sharc::rt;

// The programs' shapes; every mesh's program has the same global ones.
constexpr int64_t kBatch = bench_mlp_train::data1::kInput_images_shape[0];
constexpr int64_t kFeatures = bench_mlp_train::data1::kInput_images_shape[1];
constexpr int64_t kClasses = 10;
constexpr int kNumBatches = 8;  // distinct synthetic batches, used in turn

struct Options {
  int steps = 20;
  int warmup = 3;
  double link_latency_us = 0;
  double link_gbps = 0;  // gigabits per second; 0 = infinite
};

// Synthetic, deterministic batches of uniform noise in [-1, 1) with
// independently drawn labels (a fixed-seed std::mt19937: the same values on
// every run), so the loss falls only as the random labels are memorised
// instead of collapsing toward 0, where exp() underflows and timing changes.
struct Batches {
  std::vector<std::vector<float>> images, labels;
  Batches() {
    std::mt19937 gen(2024);
    for (int b = 0; b < kNumBatches; ++b) {
      std::vector<float> x(kBatch * kFeatures), y(kBatch);
      for (float& v : x) v = static_cast<float>(gen() % 2048) / 1024.0f - 1.0f;
      for (float& v : y) v = static_cast<float>(gen() % kClasses);
      images.push_back(std::move(x));
      labels.push_back(std::move(y));
    }
  }
};

struct KindStats {
  double calls = 0;         // per device per step (the same on every device)
  double bytes_mean = 0;    // sent per device per step, mean over devices
  double bytes_max = 0;     // ... and max over devices
  double seconds_mean = 0;  // inside this kind's calls per step, mean over devices
};

struct Result {
  std::string mesh, strategy;
  int devices = 0;
  double step_s = 0;               // wall seconds per timed step
  double collective_fraction = 0;  // mean over devices of collective s / step s
  double bytes_mean = 0, bytes_max = 0;
  KindStats kinds[rt::kNumCollectiveKinds];
  size_t peak_max = 0;  // bytes, max over devices
  float loss = 0;       // of the last timed step: equal across meshes up to fp32 rounding
};

template <class Program>
Result run_mesh(const char* mesh, const char* strategy, const rt::MeshShape& shape,
                const Options& opt, const Batches& batches) {
  rt::ThreadWorld world(shape);
  if (opt.link_latency_us > 0 || opt.link_gbps > 0)
    world.set_link(rt::LinkModel{opt.link_latency_us * 1e-6, opt.link_gbps * 1e9 / 8});
  Program program(world);
  program.init(/*seed=*/0);

  float accuracy = 0, loss = 0, grad_norm = 0, lr = 0;
  typename Program::Outputs out;
  out.accuracy = &accuracy;
  out.loss = &loss;
  out.grad_norm = &grad_norm;
  out.lr = &lr;
  auto step = [&](int s) {
    typename Program::Inputs in;
    in.images = batches.images[s % kNumBatches].data();
    in.labels = batches.labels[s % kNumBatches].data();
    program.step(in, out);
  };

  const double step_s = sharc::bench::timed_steps(world, opt.warmup, opt.steps, step).step_s;

  Result res;
  res.mesh = mesh;
  res.strategy = strategy;
  res.devices = world.size();
  res.step_s = step_s;
  res.loss = loss;
  const int n = world.size();
  for (int r = 0; r < n; ++r) {
    const rt::CommStats& st = world.comm(r).stats();
    res.collective_fraction += st.total_seconds() / (step_s * opt.steps) / n;
    const double bytes = static_cast<double>(st.total_bytes()) / opt.steps;
    res.bytes_mean += bytes / n;
    res.bytes_max = std::max(res.bytes_max, bytes);
    for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
      KindStats& ks = res.kinds[k];
      const double kb = static_cast<double>(st.bytes_sent[k]) / opt.steps;
      ks.calls = std::max(ks.calls, static_cast<double>(st.calls[k]) / opt.steps);
      ks.bytes_mean += kb / n;
      ks.bytes_max = std::max(ks.bytes_max, kb);
      ks.seconds_mean += st.seconds_in[k] / opt.steps / n;
    }
    res.peak_max = std::max(res.peak_max, world.memory(r).peak());
  }
  return res;
}

void print_tables(const std::vector<Result>& results) {
  const double base = kBatch / results.front().step_s;  // the 1-device row
  std::printf("%-15s %-16s %7s %10s %9s %8s %6s %14s %14s %12s %9s\n", "mesh", "strategy",
              "devices", "examples/s", "step ms", "speed-up", "coll %", "sent/dev mean",
              "sent/dev max", "peak/dev", "loss");
  for (const Result& r : results) {
    const double eps = kBatch / r.step_s;
    std::printf("%-15s %-16s %7d %10.0f %9.3f %7.2fx %6.1f %14.0f %14.0f %12zu %9.6f\n",
                r.mesh.c_str(), r.strategy.c_str(), r.devices, eps, r.step_s * 1e3, eps / base,
                100 * r.collective_fraction, r.bytes_mean, r.bytes_max, r.peak_max, r.loss);
  }
  std::printf("\nbytes sent per device per step, by collective kind\n");
  std::printf("%-15s %-15s %9s %14s %14s %10s\n", "mesh", "kind", "calls", "bytes mean",
              "bytes max", "ms mean");
  for (const Result& r : results) {
    bool any = false;
    for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
      const KindStats& ks = r.kinds[k];
      if (ks.calls == 0) continue;
      any = true;
      std::printf("%-15s %-15s %9.0f %14.0f %14.0f %10.3f\n", r.mesh.c_str(),
                  rt::collective_kind_name(static_cast<rt::CollectiveKind>(k)), ks.calls,
                  ks.bytes_mean, ks.bytes_max, ks.seconds_mean * 1e3);
    }
    if (!any) std::printf("%-15s %-15s\n", r.mesh.c_str(), "(none)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"One AdamW step of the MLP classifier on the 1-device baseline and on every strategy's "
               "8-device mesh: throughput, bytes sent, peak memory.",
               "bench_mlp_train"};
  sharc::cli::add_steps(app, opt.steps, opt.warmup);
  sharc::cli::add_link(app, opt.link_latency_us, opt.link_gbps);
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;

  std::printf(
      "bench_mlp_train: one AdamW step of the MLP classifier (batch %lld, %lld "
      "features, %lld classes), %d warm-up + %d timed steps per mesh\n",
      static_cast<long long>(kBatch), static_cast<long long>(kFeatures),
      static_cast<long long>(kClasses), opt.warmup, opt.steps);
  const rt::BlasInfo blas = rt::blas_info();
  std::printf(
      "machine: %u cores (hardware threads). Simulated devices are threads sharing these "
      "cores; each device computes with rt::threads_per_device(devices) threads. BLAS "
      "kernels: %s%s%s.\n",
      std::thread::hardware_concurrency(), blas.core.c_str(),
      blas.forced_by_env.empty() ? "" : ", forced by OPENBLAS_CORETYPE=",
      blas.forced_by_env.c_str());
  if (opt.link_latency_us > 0 || opt.link_gbps > 0) {
    std::printf("simulated link: %g us latency, %g Gbit/s per (src, dst) link\n",
                opt.link_latency_us, opt.link_gbps);
  } else {
    std::printf("simulated link: none (messages are delivered as soon as they are sent)\n");
  }
  std::printf("\n");

  const Batches batches;
  namespace b = bench_mlp_train;
  std::vector<Result> results;
  results.push_back(
      run_mesh<b::data1::Program>("data=1", "1 device", b::data1::mesh_shape(), opt, batches));
  results.push_back(
      run_mesh<b::data8::Program>("data=8", "data parallel", b::data8::mesh_shape(), opt, batches));
  results.push_back(
      run_mesh<b::fsdp8::Program>("fsdp=8", "FSDP", b::fsdp8::mesh_shape(), opt, batches));
  results.push_back(run_mesh<b::model8::Program>("model=8", "tensor parallel",
                                                 b::model8::mesh_shape(), opt, batches));
  results.push_back(run_mesh<b::data4_model2::Program>(
      "data=4,model=2", "DP x TP", b::data4_model2::mesh_shape(), opt, batches));
  results.push_back(run_mesh<b::fsdp4_model2::Program>(
      "fsdp=4,model=2", "FSDP x TP", b::fsdp4_model2::mesh_shape(), opt, batches));

  print_tables(results);
  for (const Result& r : results) {
    if (!std::isfinite(r.loss)) {
      std::fprintf(stderr, "error: mesh %s produced a non-finite loss\n", r.mesh.c_str());
      return 1;
    }
  }
  return 0;
}
