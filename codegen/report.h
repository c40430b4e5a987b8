// The report: what a partitioned program will cost each device, predicted
// before anything runs, and the same numbers as the runtime measured them
// after one step, side by side (`generator --report`, `ninja NAME_report`).
//
// Predicted per program and mesh:
//  - every parameter's layout (Sharding::str()), global and local shape;
//  - every collective of the step in program order (an all-reduce bucket is
//    ONE collective; a ring_dot is its ppermutes), with its DSL line and the
//    bytes each device SENDS, from the ring algorithms of
//    runtime/thread_world.cpp: all_gather, reduce_scatter and all_to_all send
//    n-1 chunks; all_reduce splits its count into n chunks of count/n (the
//    first count%n one float longer) and sends every chunk but its own in the
//    reduce-scatter half and every chunk but its right neighbour's in the
//    all-gather half; a ring_dot sends its travelling piece n-1 times per
//    half; a group of one sends nothing;
//  - each device's peak memory: the generated code's buffer plan
//    (buffer_plan.h) replayed with every temporary it allocates, on top of
//    the persistent parameter shards.
// Both are exact: the tests assert them equal to rt::CommStats and
// rt::DeviceMemory::peak() after one step of the generated program.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/pipeline.h"
#include "ir/ir.h"
#include "runtime/communicator.h"
#include "runtime/thread_world.h"

namespace sharc {

struct ParameterReport {
  std::string path;
  std::string spec;  // Sharding::str(): [{"data"}, {}]
  ir::Shape global_shape, local_shape;
  uint64_t local_bytes = 0;
  SrcLoc loc;
  std::vector<int> stages;  // pipelined: the stages holding it (empty: every device)
};

using KindBytes = std::array<uint64_t, rt::kNumCollectiveKinds>;

struct CollectiveReport {
  int node = -1;                   // the node (a bucket's first member)
  rt::CollectiveKind kind{};       // what the runtime counts it as
  std::string what;                // "all_gather dim=0", "all_reduce bucket 0 (3 values)", ...
  std::vector<std::string> axes;
  std::string where;               // DSL line and layer label, "" when unknown
  int64_t elements = 0;            // elements per device handed to the collective
  int group_size = 1;
  uint64_t calls = 0;              // runtime calls per device (a ring_dot: its ppermutes)
  bool ring_dot = false;           // a RingDot's transfers, which its GEMMs overlap
  bool bucket = false;             // a gradient bucket (bucket_all_reduces; maybe of one value)
  std::vector<uint64_t> bytes;     // bytes sent, per device (rank)
};

struct Report {
  std::string program;
  std::string mesh;  // Mesh::str()
  int num_devices = 0;
  std::vector<ParameterReport> parameters;
  std::vector<CollectiveReport> collectives;
  // Per device: bytes sent and calls per kind (index rt::CollectiveKind).
  std::vector<KindBytes> bytes, calls;
  uint64_t persistent_bytes = 0;     // parameter shards, per device
  std::vector<uint64_t> peak_bytes;  // per device
  // Per device: the step arena it reserves (MemoryProfile::arena_bytes), at
  // least the step's share of the peak.
  std::vector<uint64_t> arena_bytes;
  std::string peak_at;               // the statement where the peak is reached
  // Pipelined programs: each device's stage, and per stage its parameter
  // shards and where its peak is reached (each stage runs its own program;
  // persistent_bytes and peak_at are then the largest stage's).
  std::vector<int> stage_of_device;
  std::vector<uint64_t> stage_persistent_bytes;
  std::vector<std::string> stage_peak_at;
  // A GPU program (PipelineOptions::gpu_kernels): each composite region
  // part's KernelSet kernel, or why generated kernels compute it, a line each
  // (format_kernel_choices).
  std::string kernels;
};

// `partitioned`: lower()'s per-device graph.
Report predict(const ir::Graph& partitioned);
// Any lowered program; a pipelined one is predicted stage by stage (each
// device by its stage's program; send/recv count as kSendRecv).
Report predict(const Lowered& lowered);

// What the runtime counted, per device.
struct Measured {
  std::vector<rt::CommStats> comm;
  std::vector<uint64_t> peak_bytes;
  std::vector<uint64_t> arena_bytes;  // DeviceMemory::arena_needed
};

// Every device's CommStats and DeviceMemory peak, as they stand. For the
// numbers of one step: construct the Program, init, reset_stats, one step.
inline Measured measure(rt::World& world) {
  Measured m;
  for (int r = 0; r < world.size(); ++r) {
    m.comm.push_back(world.comm(r).stats());
    m.peak_bytes.push_back(world.memory(r).peak());
    m.arena_bytes.push_back(world.memory(r).arena_needed());
  }
  return m;
}

// True when every device's bytes and calls per kind, its peak memory and
// (when measured) its step arena equal the prediction; otherwise `why` (if given) says where they differ first.
bool matches(const Report& r, const Measured& m, std::string* why = nullptr);

// The tables: parameters; collectives (bytes per device, with the measured
// total per kind when `m` is given); per device bytes per kind and peak
// memory, predicted vs measured with a ✓/✗ column when `m` is given.
std::string format_report(const Report& r, const Measured* m = nullptr);

}  // namespace sharc
