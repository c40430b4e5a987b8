// Runs a partitioned (per-device) graph on the thread runtime: one thread per
// device, each interpreting the same per-device IR with the runtime's float32
// kernels and real collectives. bf16 values are held in f32 buffers rounded
// to bf16 after every op, and every collective and ring dot on them runs in
// bf16, so values, rounding and bytes sent are those of bf16 storage (memory
// counts them at four bytes). i32 values (ids, labels) are held in f32 and
// truncated after every op: exact, and equal to generated code's int32_t
// buffers, for magnitudes below 2^24. It is the quick way to check a partitioning
// against the oracle without generating and compiling C++; the emitted code
// (emit_cpu.h) calls the same kernels and collectives in the same order.
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "ir/ir.h"
#include "runtime/communicator.h"
#include "runtime/thread_world.h"
#include "runtime/trace.h"

namespace sharc {

struct ExecResult {
  HostValues outputs;  // each output assembled from the devices' blocks (global shape)
  std::vector<rt::CommStats> comm;  // per device
  std::vector<size_t> peak_bytes;   // per device, from the runtime's accounting
  // Per device, the largest single allocation made while initialising
  // parameters (proves no device materialised a whole sharded parameter).
  std::vector<size_t> largest_param_bytes;
  // Per device, the bytes of its Parameter buffers: trained parameters,
  // optimizer state and the step count, the state a device keeps between
  // steps. Summed from those buffers as allocated (each charged to the
  // device's rt::DeviceMemory), not from shapes.
  std::vector<size_t> persistent_bytes;
  // Per device, the bytes of the gradients the optimizer applies
  // (Graph::gradients: one value per trained parameter, after averaging and
  // clipping, in the layout propagation gave it), summed from their buffers as
  // computed. 0 for a program without train_step.
  std::vector<size_t> gradient_bytes;
  // Every parameter's global value after the step (its update applied, if
  // any), assembled from the devices' shards.
  HostValues params;
  // Per device, its timeline's totals (zeros with the clock off).
  std::vector<rt::DeviceTime> device_times;
};

// `inputs` holds global values; each device takes its own block. Parameters
// found in `state` (global values by path, e.g. a previous step's
// ExecResult::params) are loaded block by block instead of initialised.
// How to run. `trace`: every statement of every device is recorded
// (rt::Trace, Chrome trace JSON), on the wall clock unless `virtual_clock`.
// `virtual_clock`: the thread world's virtual clock (runtime/trace.h), each
// statement charged its op_cost.h cost on `machine`; ExecResult::device_times
// then holds exact busy and idle times. `link`: the thread world's simulated
// link (on the wall clock it delays every message; default instant).
struct ExecOptions {
  rt::Trace* trace = nullptr;
  rt::LinkModel link = {};
  bool virtual_clock = false;
  rt::MachineModel machine = {};
};

ExecResult execute_partitioned(const ir::Graph& local, const HostValues& inputs, uint64_t seed,
                               const HostValues* state = nullptr, const ExecOptions& options = {});

// A pipelined program (Lowered::stage_graphs): the devices at position s of
// the pipe axis run stages[s], values travel between stages by send/recv
// (bf16 ones in bf16), and a stage holds only the parameters it reads.
// Outputs and parameters are assembled from the stages that have them.
ExecResult execute_stages(const std::vector<ir::Graph>& stages, const HostValues& inputs, uint64_t seed,
                          const HostValues* state = nullptr, const ExecOptions& options = {});

// Whichever of the two a lowered program needs.
ExecResult execute(const Lowered& lowered, const HostValues& inputs, uint64_t seed,
                   const HostValues* state = nullptr, const ExecOptions& options = {});

// The all-reduce bucket that starts at node `first`, as one past its last
// member. A bucket is a maximal run of adjacent AllReduce nodes with the same
// bucket id (dim2 >= 0, set by bucket_all_reduces), the same axes, the same
// reduce kind and the same element type, none reading another member. Executors (this interpreter and
// the emitted code) pack its operands into one buffer, run ONE all_reduce and
// unpack the results. Any other node is a run of one: returns first + 1.
int all_reduce_bucket_end(const ir::Graph& g, int first);

// Global coordinates of the first element of the block `rank` holds.
std::vector<int64_t> block_offset(const ir::Sharding& s, const ir::Shape& local_shape,
                                  const Mesh& mesh, int rank);

}  // namespace sharc
