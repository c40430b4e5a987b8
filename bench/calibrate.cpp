// sharc-calibrate: measures this machine as the CPU thread world uses it and
// writes a machine file for the planner (codegen/machine.h; MACHINE
// file.json, --machine file.json). The `cpu` machine sharc ships
// (codegen/machines/cpu.json) is its output on the 2-core machine CI runs on.
//
// Every figure is per device, with --devices device threads running at once
// (default 8, the samples' meshes): on a machine with fewer cores than
// devices they share the cores, so a device's compute rate is the machine's
// divided among them, which is what a partitioned program's step sees.
//   - f32 (and bf16) flop/s: every device runs the same sgemm (rt::gemm,
//     --gemm-size square) repeatedly; the flops one device did over the wall
//     time. And the same for every (M, N, K) drawn from --gemm-shapes, with
//     A, B, both or neither transposed (gemm_flops_per_s_by_shape): the
//     planner's rate for a GEMM of that shape.
//   - memory bytes/s: every device adds a vector of 1M floats into another
//     in place (two reads and a write an element), the bytes one device moved
//     over the wall time.
//   - cached memory bytes/s by size: every device repeats an in-place add
//     over the same arrays, moving each of --cached-sizes bytes a time (what
//     fits a core's cache stays there): the rate of a collective's packing
//     and adds, and a ring dot's, over the block just written or received.
//   - transcendentals/s: every device evaluates the generated code's exp,
//     gelu and random numbers over a block in cache (calibrate_kernels.cpp,
//     compiled as the generated code is, so that they vectorise as in a
//     step); one over their mean time an element.
//   - statement overhead: every device runs many 16-element adds; what each
//     took beyond its bytes at the rate above.
//   - the thread world's link: a ring all-reduce over every device of one
//     float after each of many small sgemms (2 (D - 1) ring steps of
//     latency each, beyond the sgemms alone) gives the latency, and an
//     all-gather of --message-bytes (D - 1 steps, each device sending
//     (D - 1) / D of the bytes, nothing to add) the bytes/s, as
//     codegen/plan.cpp costs a collective; and the rate by message size
//     (bytes_per_s_by_message): all-gathers over every device whose ring
//     steps move blocks of each of --message-sizes, each after an sgemm, as
//     a step's collectives come after statements; and ppermutes of those
//     blocks round the ring, each around an sgemm as a ring dot's step
//     (permute_bytes_per_s_by_message: the thread world copies a ppermute's
//     block twice, a ring collective's once); and reduce-scatters in those
//     blocks, each after an sgemm, whose steps add what arrives
//     (reduce_bytes_per_s_by_message: a reducing step's rate, its add in
//     it).
// Each measurement is the fastest of --repeats runs (a neighbour's burst
// slows a run, never speeds one up).
//
//   sharc-calibrate [--devices 8] [--out cpu.json] [--name cpu]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "bench/calibrate_kernels.h"
#include "codegen/cli.h"
#include "codegen/machine.h"
#include "runtime/blas.h"
#include "runtime/kernels.h"
#include "runtime/mesh.h"
#include "runtime/tensor_collectives.h"
#include "runtime/thread_world.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int devices = 8;
  int repeats = 15;
  int gemm_size = 256;
  int64_t message_bytes = 1 << 20;
  std::vector<int64_t> gemm_shapes = {8, 32, 128, 512, 1024};
  int gemm_repeats = 3;
  std::vector<int64_t> message_sizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
  std::vector<int64_t> cached_sizes = {16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
  std::string name = "cpu";
  std::string out;
};

// The fastest of `repeats` wall times of world.run(fn).
double fastest_run(sharc::rt::ThreadWorld& world, int repeats, const std::function<void(int)>& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    world.run(fn);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Measures this machine as sharc's CPU thread world uses it (GEMMs, memory, statements, the "
               "thread world's messages, with every device thread running at once) and writes a machine "
               "file for the planner (MACHINE file.json).",
               "sharc-calibrate"};
  app.add_option("--devices", a.devices, "device threads running at once (the mesh size planned for)")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--repeats", a.repeats, "runs per measurement; the fastest counts")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--gemm-size", a.gemm_size, "the square sgemm's size")->check(sharc::cli::at_least(16))->capture_default_str();
  app.add_option("--gemm-shapes", a.gemm_shapes, "the sizes whose every (M, N, K) is timed for the GEMM rate by shape")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--gemm-repeats", a.gemm_repeats, "runs per GEMM shape; the fastest counts")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--message-bytes", a.message_bytes, "the all-gather's bytes (the link's bytes per second)")
      ->check(sharc::cli::at_least(4096))
      ->capture_default_str();
  app.add_option("--message-sizes", a.message_sizes,
                 "bytes of one message (a ring step's block) in the all-gathers, reduce-scatters and ppermutes timed for the rates by message size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--cached-sizes", a.cached_sizes,
                 "bytes one add moves, for the memory rate of data in cache by size (an add repeated over the same "
                 "arrays)")
      ->check(CLI::Range(int64_t{12}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--name", a.name, "the machine's name in the file")->capture_default_str();
  app.add_option("--out", a.out, "the machine file to write (default: print it)");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;

  sharc::rt::ThreadWorld world(sharc::rt::MeshShape{{"data"}, {a.devices}});
  const int D = a.devices;
  std::vector<int> all(D);
  for (int i = 0; i < D; ++i) all[i] = i;

  // GEMMs.
  const int64_t n = a.gemm_size;
  const int gemm_reps = std::max<int>(1, static_cast<int>(2e8 / (2.0 * n * n * n)));
  std::vector<std::vector<float>> ga(D, std::vector<float>(n * n, 0.5f)), gb = ga, gc = ga;
  const double gemm_s = fastest_run(world, a.repeats, [&](int r) {
    for (int i = 0; i < gemm_reps; ++i)
      sharc::rt::gemm(1, n, n, n, ga[r].data(), false, gb[r].data(), false, gc[r].data(), 0.0f);
  });
  const double flops = 2.0 * n * n * n * gemm_reps / gemm_s;

  // GEMMs by shape: every (M, N, K) of the sizes, each transposition, the
  // flops one device did over the wall time (enough calls for about 20
  // MFLOP a device, at least one).
  sharc::GemmRates by_shape;
  std::sort(a.gemm_shapes.begin(), a.gemm_shapes.end());
  a.gemm_shapes.erase(std::unique(a.gemm_shapes.begin(), a.gemm_shapes.end()), a.gemm_shapes.end());
  for (int64_t s : a.gemm_shapes) by_shape.sizes.push_back(static_cast<double>(s));
  {
    const int64_t most = a.gemm_shapes.back() * a.gemm_shapes.back();
    std::vector<std::vector<float>> sa(D, std::vector<float>(most, 0.5f)), sb = sa, sc = sa;
    for (int t = 0; t < 4; ++t)
      for (int64_t M : a.gemm_shapes)
        for (int64_t N : a.gemm_shapes)
          for (int64_t K : a.gemm_shapes) {
            const double f = 2.0 * M * N * K;
            const int calls = std::max(1, static_cast<int>(2e7 / f));
            const double s = fastest_run(world, a.gemm_repeats, [&](int r) {
              for (int i = 0; i < calls; ++i)
                sharc::rt::gemm(1, M, N, K, sa[r].data(), t & 2, sb[r].data(), t & 1, sc[r].data(), 0.0f);
            });
            by_shape.rates[t].push_back(f * calls / s);
          }
  }

  // Memory: c += a over 1M floats, 12 bytes an element (two reads and a
  // write, as op_cost.h counts a statement's bytes). In place, so the bytes
  // counted are the bytes moved: c = a + b into a third array would also
  // read c's lines before writing them (write-allocate), a third more
  // traffic than it counts, and measured 1.97e9 B/s against this 2.5e9 on
  // the CI machine; the steps' elementwise statements ran at 2.5-3.1e9.
  // Every device adds `elements` floats into as many in place, `reps`
  // times over the same arrays: the bytes one device moved a second.
  auto in_place_add_rate = [&](int64_t elements, int reps) {
    std::vector<std::vector<float>> x(D, std::vector<float>(elements, 1.0f)), c = x;
    const double s = fastest_run(world, a.repeats, [&](int r) {
      for (int i = 0; i < reps; ++i) {
        sharc::bench::add_in_place(c[r].data(), x[r].data(), elements);
      }
    });
    return 12.0 * elements * reps / s;
  };
  const double bytes_per_s = in_place_add_rate(int64_t{1} << 20, 10);
  // Cached memory by size: the same add repeated over the same arrays, so
  // that what fits a core's cache stays there, as the block a collective
  // packs or adds was just written by the statement before it (or
  // received). By the bytes one add moves, 12 an element.
  std::vector<sharc::SizedRate> cached;
  std::sort(a.cached_sizes.begin(), a.cached_sizes.end());
  for (int64_t size : a.cached_sizes) {
    const int64_t e = std::max<int64_t>(1, (size + 11) / 12);  // at least `size` bytes an add
    if (!cached.empty() && 12.0 * e <= cached.back().bytes) continue;
    const int reps = static_cast<int>(std::clamp<int64_t>((int64_t{48} << 20) / (12 * e), 4, 100000));
    cached.push_back({.bytes = 12.0 * e, .bytes_per_s = in_place_add_rate(e, reps)});
  }

  // Transcendentals (calibrate_kernels.cpp): the rate of one, their mean
  // time.
  const double transcendentals_per_s = 1 / sharc::bench::transcendental_seconds(world, a.repeats);

  // Statement overhead: tiny adds, beyond their bytes.
  std::vector<std::vector<float>> xa(D, std::vector<float>(64 * 16, 1.0f)), xc = xa;
  const int tiny_reps = 20000;
  const double tiny_s = fastest_run(world, a.repeats, [&](int r) {
    for (int i = 0; i < tiny_reps; ++i) {
      sharc::bench::add_in_place(xc[r].data() + (i % 64) * 16, xa[r].data(), 16);
    }
  });
  const double overhead = std::max(0.0, tiny_s / tiny_reps - 12.0 * 16 / bytes_per_s);

  // The link: a ring all-reduce over every device takes 2 (D - 1) steps of
  // latency, its bytes at the link's rate, and adds half of them.
  double latency = 0, link_rate = 0;
  std::vector<sharc::SizedRate> by_message, permute_by_message, reduce_by_message;
  if (D > 1) {
    const int small_reps = 200;
    std::vector<std::vector<float>> one(D, std::vector<float>(1, 1.0f));
    const double small_s = fastest_run(world, a.repeats, [&](int r) {
      const sharc::rt::Group g{all, r};
      for (int i = 0; i < small_reps; ++i)
        world.comm(r).all_reduce(one[r].data(), 1, g, sharc::rt::ReduceOp::kSum);
    });
    const double idle_latency = small_s / small_reps / (2.0 * (D - 1));
    // In a step the devices compute between collectives: a device reaching
    // one finds its neighbours still computing, or asleep, and each ring
    // step then waits for a thread to be woken and scheduled. So the
    // latency the planner uses is measured that way: every device runs
    // small sgemms with a one-float all-reduce after each, and the time
    // beyond the sgemms alone is 2 (D - 1) ring steps per all-reduce.
    const int64_t k = 96;
    const int loaded_reps = 200;
    std::vector<std::vector<float>> ka(D, std::vector<float>(k * k, 0.5f)), kb = ka, kc = ka;
    auto small_sgemm = [&](int r) {
      sharc::rt::gemm(1, k, k, k, ka[r].data(), false, kb[r].data(), false, kc[r].data(), 0.0f);
    };
    const double sgemms_s = fastest_run(world, a.repeats, [&](int r) {
      for (int i = 0; i < loaded_reps; ++i) small_sgemm(r);
    });
    const double loaded_s = fastest_run(world, a.repeats, [&](int r) {
      const sharc::rt::Group g{all, r};
      for (int i = 0; i < loaded_reps; ++i) {
        small_sgemm(r);
        world.comm(r).all_reduce(one[r].data(), 1, g, sharc::rt::ReduceOp::kSum);
      }
    });
    latency = std::max(idle_latency, (loaded_s - sgemms_s) / loaded_reps / (2.0 * (D - 1)));
    std::fprintf(stderr, "sharc-calibrate: a ring step's latency %.3g s idle, %.3g s between sgemms (used)\n",
                 idle_latency, latency);
    // Bytes at the link's rate: an all-gather of --message-bytes (each
    // device sends (D - 1) / D of them, (D - 1) steps of latency, nothing
    // to add).
    const int64_t per_rank = a.message_bytes / 4 / D;
    const int big_reps = 5;
    std::vector<std::vector<float>> piece(D, std::vector<float>(per_rank, 1.0f)),
        gathered(D, std::vector<float>(per_rank * D));
    const double big_s = fastest_run(world, a.repeats, [&](int r) {
      const sharc::rt::Group g{all, r};
      for (int i = 0; i < big_reps; ++i)
        world.comm(r).all_gather(piece[r].data(), gathered[r].data(), static_cast<size_t>(per_rank), g);
    });
    const double sent = static_cast<double>(D - 1) * per_rank * 4;
    const double per_call = big_s / big_reps;
    const double transfer = per_call - (D - 1) * latency;
    link_rate = transfer > 0 ? sent / transfer : sent / (0.1 * per_call);
    // The rates by message size: each kind of message timed in blocks of
    // each size, less the sgemm and the latency (below).
    const double sgemm_s = sgemms_s / loaded_reps;
    // One call's seconds on every device, `call` timed `reps` times over:
    // with an sgemm between its start and its end each time (`between`),
    // less the sgemm, as in a step; and never counted faster than the same
    // calls alone. Between sgemms a call's time is the difference of two
    // runs, and where the sgemms take most of it their noise can leave less
    // than the messages alone take (on a 2-core EPYC it once left a
    // negative time, and a negative rate in the file).
    using Call = std::function<void(int, const sharc::rt::Group&, const std::function<void()>&)>;
    auto seconds_a_call = [&](int reps, const Call& call) {
      auto timed = [&](bool with_sgemm) {
        return fastest_run(world, a.repeats, [&](int r) {
          const sharc::rt::Group g{all, r};
          const std::function<void()> between = [&] {
            if (with_sgemm) small_sgemm(r);
          };
          for (int i = 0; i < reps; ++i) call(r, g, between);
        });
      };
      return std::max(timed(true) / reps - sgemm_s, timed(false) / reps);
    };
    std::vector<int64_t> sizes = a.message_sizes;  // ascending, each more than the one before
    std::sort(sizes.begin(), sizes.end());
    int64_t last_floats = 0;
    for (int64_t size : sizes) {
      // Messages of at least `size` bytes, so the file's sizes read as asked.
      const int64_t floats = std::max<int64_t>(1, (size + 3) / 4);
      if (floats <= last_floats) continue;
      last_floats = floats;
      const size_t count = static_cast<size_t>(floats);
      const double block = floats * 4.0;
      // Enough calls to time: about 64 MiB sent a device.
      const int reps = static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / (floats * 4 * (D - 1)), 2, 20));
      std::vector<std::vector<float>> in(D, std::vector<float>(floats * D, 1.0f)), out(D, std::vector<float>(floats * D));
      // The rate of `steps` ring steps of a block each that took `call`
      // seconds, less their latency.
      auto rate = [&](double steps, double call) {
        const double moving = std::max(call - steps * latency, 0.1 * call);
        return steps * block / moving;
      };
      // An all-gather over every device whose ring steps each move a block
      // of the size, after an sgemm each time (a step's statements evict the
      // caches a message would otherwise stay in). Blocks that stay in a
      // core's cache copy faster than those that do not (on the 2-core CI
      // machine: 2.3e9 B/s at 16 KiB, 0.84e9 at 1 MiB and above).
      const double gather = seconds_a_call(reps, [&](int r, const sharc::rt::Group& g, const std::function<void()>& between) {
        between();
        world.comm(r).all_gather(in[r].data(), out[r].data(), count, g);
      });
      by_message.push_back({.bytes = block, .bytes_per_s = rate(D - 1, gather)});
      // A reduce-scatter of the same blocks: each step copies a block and
      // adds it into the device's own (reduce_bytes_per_s_by_message).
      const double scatter = seconds_a_call(reps, [&](int r, const sharc::rt::Group& g, const std::function<void()>& between) {
        between();
        world.comm(r).reduce_scatter(in[r].data(), out[r].data(), count, g, sharc::rt::ReduceOp::kSum);
      });
      reduce_by_message.push_back({.bytes = block, .bytes_per_s = rate(D - 1, scatter)});
      // The same block as a ppermute round the ring, started before an
      // sgemm and waited for after it, as a ring dot's step runs it.
      const sharc::rt::Permutation right = sharc::rt::ring_shift(D, +1);
      const double permute = seconds_a_call(reps, [&](int r, const sharc::rt::Group& g, const std::function<void()>& between) {
        sharc::rt::PendingRecv recv = world.comm(r).ppermute_start(in[r].data(), out[r].data(), count, g, right);
        between();
        world.comm(r).ppermute_wait(recv);
      });
      permute_by_message.push_back({.bytes = block, .bytes_per_s = rate(1, permute)});
      std::fprintf(stderr,
                   "sharc-calibrate: %lld-byte messages: an all-gather %.3g s (%.3g B/s), a reduce-scatter %.3g s "
                   "(%.3g B/s), a ppermute %.3g s (%.3g B/s)\n",
                   static_cast<long long>(floats * 4), gather, by_message.back().bytes_per_s, scatter,
                   reduce_by_message.back().bytes_per_s, permute, permute_by_message.back().bytes_per_s);
    }
  }

  std::string shapes;
  for (int64_t b : a.gemm_shapes) shapes += (shapes.empty() ? "" : ", ") + std::to_string(b);
  std::string sizes;
  for (int64_t b : a.message_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(b);
  std::string cached_text;
  for (const sharc::SizedRate& r : cached)
    cached_text += (cached_text.empty() ? "" : ", ") + std::to_string(static_cast<int64_t>(r.bytes));
  sharc::PlanMachine machine;
  machine.name = a.name;
  const std::string core = sharc::rt::blas_info().core;
  machine.about = {
      "Measured by sharc-calibrate (bench/calibrate.cpp) with " + std::to_string(D) +
          " device threads running at once on this machine (" + std::to_string(std::thread::hardware_concurrency()) +
          " hardware threads, OpenBLAS core " + (core.empty() ? "unknown" : core) + "):",
      "an sgemm of " + std::to_string(n) + " and sgemms of every (M, N, K) of " + shapes +
          " with each transposition (gemm_flops_per_s_by_shape),",
      "exp, gelu and philox random numbers over 4096 floats (transcendentals_per_s), "
      "in-place adds of 1M and of 16 floats, and adds moving " + cached_text +
          " bytes repeated over the same arrays (cached_memory_bytes_per_s_by_size), a ring all-reduce over every device of",
      "4 bytes after each of many sgemms of 96 (the latency), an all-gather of " + std::to_string(a.message_bytes) +
          " bytes (bytes_per_s),",
      "and all-gathers over every device in messages of " + sizes + " bytes after sgemms of 96 (bytes_per_s_by_message),",
      "reduce-scatters in those blocks after sgemms of 96, each step's add included (reduce_bytes_per_s_by_message),",
      "and ppermutes round the ring of those bytes around sgemms of 96 (permute_bytes_per_s_by_message), each call never",
      "counted faster than the same messages alone;",
      "each figure the fastest of " + std::to_string(a.repeats) + " runs."};
  machine.compute.flops_per_s = flops;
  machine.gemm = by_shape;
  machine.compute.bytes_per_s = bytes_per_s;
  machine.compute.overhead_s = overhead;
  machine.bf16_flops_per_s = flops;  // bf16 GEMMs widen to one sgemm here (runtime/kernels.h)
  machine.overlaps_compute = false;  // the device threads copy the messages themselves
  machine.cached_memory = cached;
  machine.transcendentals_per_s = transcendentals_per_s;
  machine.links = {sharc::LinkLevel{.name = "thread world", .devices = 0, .latency_s = latency, .bytes_per_s = link_rate,
                                    .by_message = by_message, .permute_by_message = permute_by_message,
                                    .reduce_by_message = reduce_by_message}};
  const std::string json = sharc::machine_json(machine);
  // What the planner will read: a figure it refuses (a rate of 0 from a
  // measurement that came out empty) fails here, not at MACHINE file.json.
  try {
    sharc::parse_machine(json, a.out.empty() ? "sharc-calibrate's output" : a.out);
  } catch (const std::exception& e) {
    std::cerr << "sharc-calibrate: the measurements do not make a machine the planner accepts, so nothing was "
                 "written: "
              << e.what() << "\n";
    return 1;
  }
  std::fprintf(stderr,
               "sharc-calibrate, %d devices: %.3g flop/s, %.3g B/s of memory, %.3g s a statement; link %.3g s + "
               "%.3g B/s\n",
               D, flops, bytes_per_s, overhead, latency, link_rate);
  if (a.out.empty()) {
    std::cout << json;
    return 0;
  }
  std::ofstream out(a.out);
  out << json;
  if (!out) {
    std::cerr << "sharc-calibrate: cannot write " << a.out << "\n";
    return 1;
  }
  return 0;
}
