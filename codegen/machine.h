// The machines the planner (plan.h) costs a step on: how fast a device
// computes (by dtype) and moves memory, what a statement costs to start,
// and the links between devices, one per level of the machine (within a
// node, across nodes). Machines are JSON files: sharc knows the ones in
// codegen/machines/ by name (built into the library), and reads any other
// file a user gives (MACHINE my_cluster.json; sharc-calibrate writes one
// for the machine it runs on).
//
//   {
//     "name": "h100-ib",
//     "about": ["where each figure comes from", "..."],
//     "compute": {"flops_per_s": {"f32": 5.1e13, "bf16": 7.0e14},
//                 "memory_bytes_per_s": 2.5e12, "statement_overhead_s": 4e-6,
//                 "gemm_flops_per_s_by_shape": {"sizes": [8, 32, ...],
//                                               "nn": [...], "tn": [...], "nt": [...], "tt": [...]},
//                 "cached_memory_bytes_per_s_by_size": [{"bytes": 65536, "bytes_per_s": 5e12}, ...],
//                 "transcendentals_per_s": 4e12},
//     "links": [{"name": "nvlink", "devices": 8, "latency_s": 2e-6, "bytes_per_s": 3.6e11,
//                "bytes_per_s_by_message": [{"bytes": 65536, "bytes_per_s": 1e11}, ...],
//                "permute_bytes_per_s_by_message": [{"bytes": 65536, "bytes_per_s": 1e11}, ...],
//                "reduce_bytes_per_s_by_message": [{"bytes": 65536, "bytes_per_s": 1e11}, ...]},
//               {"name": "infiniband", "latency_s": 6e-6, "bytes_per_s": 4.5e10}]
//   }
//
// A link's "devices" is how many consecutive device numbers one unit of
// that level holds (a node's 8 GPUs); on the last level it is the most
// devices the machine has, and without it the machine has no limit. A
// collective runs on the innermost level whose units each hold a whole
// group of it: the ring crosses the slowest link it uses at every step, so
// that link's latency and rate are the collective's.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "ir/mesh.h"
#include "runtime/thread_world.h"
#include "runtime/trace.h"

namespace sharc {

// A rate measured for one size: `bytes` in one message (a ring step's
// block), or moved by one statement.
struct SizedRate {
  double bytes = 0, bytes_per_s = 0;
};

// The rate for `bytes` from rates measured at ascending sizes: interpolated
// on log(bytes) between two, the nearest outside them; `fallback` when
// there are none.
double rate_for_size(const std::vector<SizedRate>& rates, double bytes, double fallback);

// A GEMM's rate by its shape (optional, "gemm_flops_per_s_by_shape"): f32
// flop/s per device measured at every (M, N, K) drawn from `sizes`, one
// table for each way the operands are transposed. A GEMM's rate is not one
// number: on the CI machine a 128-cube ran at 9.2e9 flop/s a device, one
// with M = 8 rows against a 512x1024 B at 3.4e9 (B no longer fits a core's
// cache, and a few rows do not repay packing it). A shape between the
// sizes is interpolated on log(size) along each dimension (trilinear),
// one outside them takes the nearest edge. Empty: compute.flops_per_s for
// every GEMM.
struct GemmRates {
  std::vector<double> sizes;  // ascending
  // By transposition (index: 2 * trans_a + trans_b; JSON "nn", "nt", "tn",
  // "tt"), the rate at (sizes[i], sizes[j], sizes[k]) for (M, N, K) at
  // (i * n + j) * n + k, n = sizes.size().
  std::array<std::vector<double>, 4> rates;

  bool empty() const { return sizes.empty(); }
  double rate(double M, double N, double K, bool trans_a, bool trans_b) const;
};

struct LinkLevel {
  std::string name;       // "nvlink", "infiniband", "thread world"
  int devices = 0;        // consecutive devices one unit holds; 0: all (the last level only)
  double latency_s = 0;   // per message (a ring step)
  double bytes_per_s = 0; // per device, each way
  // Optional ("bytes_per_s_by_message"): the rate measured for messages of
  // several sizes, ascending by bytes. A link's rate depends on how big its
  // messages are: on a CPU a block that stays in a core's cache copies
  // more than twice as fast as one that does not (measured on the CI
  // machine: 2.3e9 B/s at 16 KiB, 0.84e9 at 1 MiB); NCCL changes protocol
  // with size. A collective's message is one ring step's block (a call's
  // bytes over its steps), so an all-gather over 2 devices and one over 8
  // that send the same bytes go at different rates. A size between two is
  // interpolated on log(bytes); one outside them takes the nearest. Empty:
  // bytes_per_s at every size.
  std::vector<SizedRate> by_message;
  // Optional ("permute_bytes_per_s_by_message"): the same for point-to-point
  // messages (a ppermute, a ring dot's steps, a pipeline's sends), where
  // they go at another rate than a collective's ring steps. On the thread
  // world a ppermute copies its block twice (into a message as it is sent,
  // out of it as it is received) where a ring collective lends its blocks
  // and copies them once: measured on the CI machine, a ring dot's 16 KiB
  // ppermute block took 15 us of a device's time, where the all-gathers'
  // rate for 16 KiB blocks gave 6 us. Empty: by_message.
  std::vector<SizedRate> permute_by_message;
  // Optional ("reduce_bytes_per_s_by_message"): the rate of a reducing
  // ring's steps, by the step's block, with the add of each arriving block
  // into the device's own counted in it: a reduce-scatter's steps, and the
  // first half of an all-reduce's (its second half is an all-gather's). On
  // the thread world the add is a second pass over a block just copied, and
  // the two together are not the sum of a copy at by_message's rate and an
  // add at the cached memory rate: costed that way, a data-parallel
  // gradient's all-reduces were predicted at 2 to 4 times their time
  // (bench_buckets). Empty: those two, summed.
  std::vector<SizedRate> reduce_by_message;

  // The rate for messages of `message_bytes` each.
  double rate_for(double message_bytes) const;
  // ... for point-to-point messages.
  double permute_rate_for(double message_bytes) const;
  // ... for a reducing ring's steps, their adds included; 0 where the link
  // has no reduce_by_message (the caller then adds the adds' time).
  double reduce_rate_for(double message_bytes) const;
  // This link with every collective's message at its best rate: the same
  // latency, and at every size one figure, the fastest of bytes_per_s,
  // by_message and reduce_by_message (a bound from below on the time of
  // any collective calls on it; point-to-point rates are left out).
  LinkLevel at_best_rate() const;
};

struct PlanMachine {
  std::string name = "cpu";
  std::vector<std::string> about;  // the figures' sources, a line each
  // f32 rates: flops, memory bytes per second, overhead per statement.
  rt::MachineModel compute;
  double bf16_flops_per_s = 0;  // 0: compute.flops_per_s
  GemmRates gemm;               // f32; a bf16 GEMM's scaled by bf16_flops_per_s / compute.flops_per_s
  // Optional ("cached_memory_bytes_per_s_by_size"): the memory rate of a
  // copy or add over data that was just written, by the bytes it moves: a
  // collective's packing and the adds of a reducing one, a ring dot's adds
  // and copies, which touch the block the statement before them wrote or
  // the message that just arrived. Such data is still in a core's cache,
  // and moves faster than compute.bytes_per_s, which is the rate of a
  // statement whose operands were last touched a layer or a step before
  // (measured on the CI machine, statement by statement: at that rate the
  // MLP's reduce-scatters were predicted at 2.3 times their time). Empty:
  // compute.bytes_per_s.
  std::vector<SizedRate> cached_memory;
  // Optional ("transcendentals_per_s"): exp, tanh, gelu, a random number
  // and the like (op_cost.h statement_transcendentals) evaluated per second
  // per device. A statement's are its compute beside its flops. 0: each
  // counts as a flop (the virtual clock's op_cost.h cost). On the CI
  // machine one took about 150 flops' time at the GEMM rate.
  double transcendentals_per_s = 0;
  // Innermost first; at least one.
  std::vector<LinkLevel> links{{.name = "thread world", .devices = 0, .latency_s = 20e-6, .bytes_per_s = 2e9, .by_message = {}, .permute_by_message = {}, .reduce_by_message = {}}};
  // Whether a device's transfers run while it computes (a GPU's copy
  // engines and NICs: a ring step of a collective matmul takes the longer
  // of its GEMM and its transfer), or take the same cores (the CPU thread
  // world, whose messages are copies by the device threads: the sum).
  bool overlaps_compute = true;

  // The most devices the machine has; 0: no limit.
  int max_devices() const { return links.back().devices; }
  // The statement cost model for a statement whose result is `dtype` (bf16
  // at the bf16 rate, everything else at f32's).
  rt::MachineModel compute_for(ir::DType dtype) const;
  // The same for a GEMM statement of that shape (M x K times K x N, its A
  // or B transposed by the flags): its flops at the rate `gemm` gives for
  // the shape, when the machine has one.
  rt::MachineModel compute_for_gemm(ir::DType dtype, double M, double N, double K, bool trans_a,
                                    bool trans_b) const;
  // The statement cost model for a copy or add of `dtype` over data just
  // written that moves `bytes` (cached_memory's rate for them).
  rt::MachineModel compute_for_cached(ir::DType dtype, double bytes) const;
  // The link a collective over `axes` of `mesh` crosses.
  const LinkLevel& link_for(const Mesh& mesh, const std::vector<std::string>& axes) const;
  // The link model of the thread world's fabric: the innermost level.
  rt::LinkModel thread_link() const { return {.latency_s = links[0].latency_s, .bytes_per_s = links[0].bytes_per_s}; }
  // "h100-ib: 7e+14 bf16 flop/s, 5.1e+13 f32, 2.5e+12 B/s memory, 4 us a
  // statement; nvlink (8 devices) 2 us + 3.6e+11 B/s; infiniband ...".
  std::string str() const;
};

// The machine called `name` (codegen/machines/NAME.json), or nullopt.
std::optional<PlanMachine> known_machine(const std::string& name);
// The names known_machine answers, in order ("cpu, h100-ib, h100-nvlink").
std::string known_machine_names();
// A machine from JSON text; errors (Error, no location) name `origin` and
// the field at fault.
PlanMachine parse_machine(const std::string& json_text, const std::string& origin);
// MACHINE's value: a known name, or a file ending in .json. Errors name it.
PlanMachine load_machine(const std::string& name_or_file);
// The JSON parse_machine reads back (sharc-calibrate writes it).
std::string machine_json(const PlanMachine& m);

}  // namespace sharc
