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
//                 "memory_bytes_per_s": 2.5e12, "statement_overhead_s": 4e-6},
//     "links": [{"name": "nvlink", "devices": 8, "latency_s": 2e-6, "bytes_per_s": 3.6e11,
//                "bytes_per_s_by_size": [{"bytes": 65536, "bytes_per_s": 1e11}, ...]},
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

#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "ir/mesh.h"
#include "runtime/thread_world.h"
#include "runtime/trace.h"

namespace sharc {

// A rate measured for collectives of one size: `bytes` sent per device by
// one call.
struct SizedRate {
  double bytes = 0, bytes_per_s = 0;
};

struct LinkLevel {
  std::string name;       // "nvlink", "infiniband", "thread world"
  int devices = 0;        // consecutive devices one unit holds; 0: all (the last level only)
  double latency_s = 0;   // per message (a ring step)
  double bytes_per_s = 0; // per device, each way
  // Optional ("bytes_per_s_by_size"): the rate measured at several sizes,
  // ascending by bytes. A link's rate depends on how much one collective
  // moves (caches on a CPU, protocols and channels in NCCL); a call of a
  // size between two is interpolated on log(bytes), one outside them takes
  // the nearest. Empty: bytes_per_s at every size.
  std::vector<SizedRate> by_size;

  // The rate for a collective that sends `bytes` per device in one call.
  double rate_for(double bytes) const;
};

struct PlanMachine {
  std::string name = "cpu";
  std::vector<std::string> about;  // the figures' sources, a line each
  // f32 rates: flops, memory bytes per second, overhead per statement.
  rt::MachineModel compute;
  double bf16_flops_per_s = 0;  // 0: compute.flops_per_s
  // Innermost first; at least one.
  std::vector<LinkLevel> links{{.name = "thread world", .devices = 0, .latency_s = 20e-6, .bytes_per_s = 2e9, .by_size = {}}};
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
