// bench_ring_matmul: how much communication the ring collective matmul hides.
// One tensor-parallel MLP layer pair (bench/ring_matmul_model.cpp: Megatron
// with sequence parallelism on model=8, x f32[1024,1024], hidden 2048) runs
// as generated code on a ThreadWorld whose links are slow, with three
// schedules: synchronous (all_gather, dot, dot, reduce_scatter), and the
// ring (RingDot) one way and both ways. It prints the step time of each and
//   hidden = (t_sync - t_ring) / t_comm,
// where t_comm is the communication time of the synchronous step: the
// seconds each device spends inside its collectives (CommStats, mean over
// devices); and, as hidden', against t_sync - t_sync(instant link), what the
// simulated link adds to the synchronous step (a run of the same program
// without the link). It prints numbers and never
// judges them; the ctest smoke test only checks that it runs.
//
// The link (runtime/thread_world.h LinkModel) delays every message by
// latency + bytes / bandwidth per (src, dst) pair; by default the bandwidth is
// chosen so the synchronous step's communication takes as long as its
// computation, the regime the ring is for. Devices are threads sharing this
// machine's cores and BLAS is single-threaded (openblas_set_num_threads(1)),
// so "computation" is the whole mesh's work on these cores.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_ring_mlp_bi.h"
#include "bench_ring_mlp_sync.h"
#include "bench_ring_mlp_uni.h"
#include "codegen/cli.h"
#include "runtime/communicator.h"
#include "runtime/thread_world.h"

namespace {

namespace rt = sharc::rt;
namespace sync_ns = sharc_gen::bench_ring_mlp_sync;
using Clock = std::chrono::steady_clock;

constexpr auto kXShape = sync_ns::kInput_x_shape;
constexpr auto kYShape = sync_ns::kOutput_y_shape;
constexpr int kDevices = sync_ns::kNumDevices;

struct Options {
  int steps = 10;
  int warmup = 2;
  double latency_us = 20;
  double gbps = 0;  // Gbit/s per (src, dst) link; 0: chosen so communication ~ computation
};

struct Result {
  std::string schedule;
  double step_s = 0;        // median wall time of one forward step
  double coll_s = 0;        // per device per step: seconds inside collectives (mean over devices)
  double bytes = 0;         // per device per step: bytes sent (max over devices)
  double max_rel_diff = 0;  // against the synchronous schedule's output
  std::vector<float> y;
};

int64_t elements(const auto& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

template <class Program>
Result run(const std::string& schedule, const rt::MeshShape& mesh, const rt::LinkModel& link,
           const Options& opt, const std::vector<float>& x) {
  rt::ThreadWorld world(mesh);
  world.set_link(link);
  Program program(world);
  program.init(0);
  Result r;
  r.schedule = schedule;
  r.y.assign(elements(kYShape), 0.0f);
  typename Program::Inputs in;
  typename Program::Outputs out;
  in.x = x.data();
  out.y = r.y.data();
  for (int s = 0; s < opt.warmup; ++s) program.forward(in, out);
  world.reset_stats();
  std::vector<double> times;
  for (int s = 0; s < opt.steps; ++s) {
    const auto t0 = Clock::now();
    program.forward(in, out);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  r.step_s = times[times.size() / 2];
  for (int d = 0; d < world.size(); ++d) {
    const rt::CommStats& st = world.comm(d).stats();
    r.coll_s += st.total_seconds() / world.size() / opt.steps;
    r.bytes = std::max(r.bytes, static_cast<double>(st.total_bytes()) / opt.steps);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"How much communication the ring collective matmul hides: a tensor-parallel MLP pair on "
               "model=8 with slow links, synchronous and as rings.",
               "bench_ring_matmul"};
  sharc::cli::add_steps(app, opt.steps, opt.warmup);
  sharc::cli::add_link(app, opt.latency_us, opt.gbps);
  app.footer("--link-gbps 0 (the default) picks the bandwidth that makes the synchronous step's communication "
             "as long as its computation.");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  openblas_set_num_threads(1);  // each simulated device is already a thread

  std::vector<float> x(elements(kXShape));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i) + 0.25);
  const rt::MeshShape mesh = sync_ns::mesh_shape();

  std::printf(
      "bench_ring_matmul: Megatron MLP (sequence parallel) x f32[%lld,%lld] on model=%d, "
      "%d warm-up + %d timed forward steps per schedule (median)\n",
      static_cast<long long>(kXShape[0]), static_cast<long long>(kXShape[1]), kDevices, opt.warmup,
      opt.steps);
  std::printf(
      "machine: %u hardware threads shared by the %d simulated devices; BLAS single-threaded\n",
      std::thread::hardware_concurrency(), kDevices);

  // Computation alone: the synchronous program on an instant link.
  const Result fast = run<sync_ns::Program>("sync, instant link", mesh, rt::LinkModel{}, opt, x);
  // Each collective is n-1 ring hops of one token block.
  const double hops = 2.0 * (kDevices - 1);
  const double block_bytes = 4.0 * elements(kXShape) / kDevices;
  rt::LinkModel link;
  link.latency_s = opt.latency_us * 1e-6;
  if (opt.gbps > 0) {
    link.bytes_per_s = opt.gbps * 1e9 / 8;
  } else {
    const double budget = fast.step_s / hops - link.latency_s;
    link.bytes_per_s = block_bytes / std::max(budget, 1e-6);
  }
  std::printf("simulated link: %.0f us latency, %.3f Gbit/s per (src, dst) link%s\n\n",
              opt.latency_us, link.bytes_per_s * 8 / 1e9,
              opt.gbps > 0 ? "" : " (chosen: communication ~ computation)");

  std::vector<Result> results;
  results.push_back(run<sync_ns::Program>("sync", mesh, link, opt, x));
  results.push_back(
      run<sharc_gen::bench_ring_mlp_uni::Program>("ring, one way", mesh, link, opt, x));
  results.push_back(
      run<sharc_gen::bench_ring_mlp_bi::Program>("ring, both ways", mesh, link, opt, x));
  const Result& sync = results[0];
  double scale = 0;
  for (float v : sync.y) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (Result& r : results)
    for (size_t i = 0; i < r.y.size(); ++i)
      r.max_rel_diff =
          std::max(r.max_rel_diff, std::fabs(static_cast<double>(r.y[i]) - sync.y[i]) / scale);

  // Two measures of the synchronous step's communication: the runtime's
  // seconds inside collectives, and what the slow link adds to the step.
  const double t_comm = sync.coll_s;
  const double t_link = sync.step_s - fast.step_s;
  std::printf("%-20s %9s %12s %12s %10s %10s %11s\n", "schedule", "step ms", "coll ms/dev",
              "bytes/dev", "hidden", "hidden'", "max |diff|");
  auto row = [&](const Result& r, bool ring) {
    char h[16] = "-", h2[16] = "-";
    if (ring) {
      std::snprintf(h, sizeof h, "%.0f%%", 100 * (sync.step_s - r.step_s) / t_comm);
      std::snprintf(h2, sizeof h2, "%.0f%%", 100 * (sync.step_s - r.step_s) / t_link);
    }
    std::printf("%-20s %9.2f %12.2f %12.0f %10s %10s %11.1e\n", r.schedule.c_str(), r.step_s * 1e3,
                r.coll_s * 1e3, r.bytes, h, h2, r.max_rel_diff);
  };
  row(fast, false);
  for (const Result& r : results) row(r, &r != &sync);
  std::printf(
      "\nhidden  = (t_sync - t_ring) / t_comm, t_comm = %.2f ms: the synchronous step's seconds "
      "inside all_gather + reduce_scatter per device (CommStats)\n"
      "hidden' = (t_sync - t_ring) / (t_sync - t_sync on the instant link) = .../ %.2f ms\n"
      "With more devices than cores, a device also waits in a collective for its peers to get a "
      "core "
      "(\"coll ms/dev\" of the instant-link row), which t_comm counts and the step-time difference "
      "does not. \"coll ms/dev\" of a ring is the time spent starting and waiting for its "
      "ppermutes. max |diff| is relative to the largest |y|.\n",
      t_comm * 1e3, t_link * 1e3);
  for (const Result& r : results)
    if (!(r.max_rel_diff < 1e-4)) {
      std::fprintf(stderr, "error: schedule '%s' computes another result\n", r.schedule.c_str());
      return 1;
    }
  return 0;
}
