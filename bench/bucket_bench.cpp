// bench_buckets: what the size of a gradient bucket costs on the thread
// world, against what the planner predicts (plan.h collective_seconds on a
// machine, default `cpu`). A data-parallel step ends with its gradients'
// all-reduces, grouped by bucket_all_reduces into buckets of at most
// BUCKET_BYTES; each bucket is one ring all-reduce. Large buckets pay the
// ring's latency few times but send blocks too large for a core's cache;
// small ones the reverse. For a few gradient sizes (the MLP's and the GPT
// sample's data=8 gradients are about 2.6 MiB and 1 MiB a device), this
// all-reduces the gradient over --devices devices in buckets of each size,
// and prints the measured and the predicted seconds, and per gradient size
// which bucket each puts first.
//
// Each measurement is the fastest of --repeats runs of the whole gradient's
// buckets. Times are measured, never judged (docs/guide/planning.md quotes
// a run).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "codegen/machine.h"
#include "codegen/plan.h"
#include "runtime/thread_world.h"

namespace {

namespace rt = sharc::rt;
using Clock = std::chrono::steady_clock;

struct Options {
  int devices = 8;
  int repeats = 15;
  std::string machine = "cpu";
  std::vector<int64_t> gradients_kib = {640, 2688, 10240};
  std::vector<int64_t> buckets_kib = {25600, 4096, 1024, 512, 256, 128, 64, 16};
};

// The planner's seconds for all-reducing `floats` f32 values over `devices`
// devices in buckets of `bucket` floats: each bucket one call, as the report
// lists a bucket (one CollectiveReport of one call), its bytes as the ring
// sends them (runtime/ring_comm.cpp: 2 (g - 1) blocks of ceil(n / g)).
double predicted(const sharc::PlanMachine& m, int devices, size_t floats, size_t bucket) {
  sharc::CollectiveReport col;
  col.kind = rt::CollectiveKind::kAllReduce;
  col.group_size = devices;
  col.calls = 1;
  const sharc::LinkLevel& link = m.links.front();
  double s = 0;
  for (size_t at = 0; at < floats; at += bucket) {
    const size_t n = std::min(bucket, floats - at);
    const size_t block = (n + devices - 1) / devices;
    const uint64_t sent = 2ull * (devices - 1) * block * sizeof(float);
    s += sharc::collective_seconds(col, sent, link, m);
  }
  return s;
}

std::string kib_str(int64_t kib) {
  return kib >= 1024 && kib % 1024 == 0 ? std::to_string(kib / 1024) + " MiB" : std::to_string(kib) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The gradient bucket's size on the thread world: all-reduces of a gradient in buckets of each size, "
               "measured and as the planner predicts them.",
               "bench_buckets"};
  app.add_option("--devices", o.devices, "devices in the all-reduce's group")
      ->check(sharc::cli::at_least(2))
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "runs per measurement; the fastest counts")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--machine", o.machine, "the machine the prediction is costed on")->capture_default_str();
  app.add_option("--gradients", o.gradients_kib, "a device's gradient, KiB")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--buckets", o.buckets_kib, "bucket sizes, KiB")->check(sharc::cli::at_least(1))->capture_default_str();
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  sharc::PlanMachine machine;
  try {
    machine = sharc::load_machine(o.machine);
  } catch (const std::exception& e) {
    return sharc::cli::fail(app, e.what());
  }

  rt::ThreadWorld world(rt::MeshShape{{"data"}, {o.devices}});
  std::vector<int> all(o.devices);
  for (int i = 0; i < o.devices; ++i) all[i] = i;
  std::printf("all-reduce over %d devices, in buckets; machine %s\n\n", o.devices, machine.name.c_str());
  std::printf("%10s  %10s  %7s  %12s  %12s\n", "gradient", "bucket", "calls", "measured", "predicted");
  for (int64_t gradient_kib : o.gradients_kib) {
    const size_t floats = static_cast<size_t>(gradient_kib) * 1024 / sizeof(float);
    std::vector<std::vector<float>> grad(o.devices, std::vector<float>(floats, 1.0f));
    double best_measured = 1e30, best_predicted = 1e30;
    int64_t fastest = 0, chosen = 0;
    for (int64_t bucket_kib : o.buckets_kib) {
      const size_t bucket = std::max<size_t>(1, static_cast<size_t>(bucket_kib) * 1024 / sizeof(float));
      double measured = 1e30;
      for (int r = 0; r < o.repeats; ++r) {
        const auto t0 = Clock::now();
        world.run([&](int rank) {
          const rt::Group g{all, rank};
          for (size_t at = 0; at < floats; at += bucket)
            world.comm(rank).all_reduce(grad[rank].data() + at, std::min(bucket, floats - at), g, rt::ReduceOp::kSum);
        });
        measured = std::min(measured, std::chrono::duration<double>(Clock::now() - t0).count());
      }
      const double p = predicted(machine, o.devices, floats, bucket);
      const size_t calls = (floats + bucket - 1) / bucket;
      std::printf("%10s  %10s  %7zu  %9.3f ms  %9.3f ms\n", kib_str(gradient_kib).c_str(), kib_str(bucket_kib).c_str(),
                  calls, measured * 1e3, p * 1e3);
      if (measured < best_measured) best_measured = measured, fastest = bucket_kib;
      if (p < best_predicted) best_predicted = p, chosen = bucket_kib;
    }
    std::printf("%10s  fastest measured: %s buckets; fastest predicted: %s buckets\n\n",
                kib_str(gradient_kib).c_str(), kib_str(fastest).c_str(), kib_str(chosen).c_str());
  }
  return 0;
}
