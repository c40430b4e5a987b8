// EmissionPlan: everything about one partitioned (per-device) graph that a
// backend's renderer needs and that is not spelling. It is decided once, here,
// and every renderer prints it: the CPU renderer (emit_cpu.cpp) as C++ on a
// device thread, the CUDA renderer as kernels and library calls on streams.
// Tests assert on the plan directly (tests/emit/emission_plan_test.cpp).
//
// What it holds:
//  - buffers: the BufferPlan (fusion groups of elementwise ops, which values
//    get a buffer, the statements in order, and where each buffer is
//    released), the same one the report replays to predict memory;
//  - names: the C++ identifier of every value that has a buffer, of each mesh
//    axis coordinate and collective group, and of the Inputs/Outputs fields,
//    so two renderers of one graph name things alike;
//  - the schedule: each statement broken into tasks, each task on a stream
//    (compute or communication), and the events between the streams.
//
// The schedule. A device has two streams. Kernels and GEMMs run on the
// compute stream; collectives and a ring_dot's transfers run on the
// communication stream, so a transfer can overlap the GEMM beside it. Within a
// stream, tasks run in plan order. Across streams, a task waits for the tasks
// of the other stream that wrote what it reads (data flow) and, for a ring's
// reused receive buffers, for the last task that read the buffer it
// overwrites. Those waits are the events a CUDA renderer records and waits on;
// a single-threaded renderer may ignore them, since plan order respects them.
// The CUDA renderer (emit_ring_dot) writes each as gpu::stream_wait at the
// point where "the other stream's work so far" is exactly the tasks waited
// for; the simulator's deferred streams (SimGpuWorld::set_deferred_streams)
// check the result against the oracle.
//
// Ring-overlapped TP (a RingDot of n steps), per step k:
//   gather:  transfer k (comm) sends the block held at step k on while
//            gemm k (compute) multiplies it; gemm k+1 waits for transfer k
//            (its block arrives there) and transfer k+1 waits for gemm k
//            (it receives into the buffer gemm k read). There are n - 1
//            transfers: the last step sends nothing.
//   scatter: gemm k (compute) computes this device's partial of one block
//            while transfer k (comm, k > 0) moves the running sum of the
//            previous step on; add k (compute) waits for transfer k and adds.
// Either way the GEMM of step k is never ordered after the transfer of step
// k+1, which is what lets communication hide behind compute.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "codegen/buffer_plan.h"
#include "codegen/cpp_writer.h"
#include "ir/ir.h"

namespace sharc {

enum class Stream { kCompute, kComm };
const char* stream_name(Stream s);  // "compute", "comm"

// The suffix that marks a name as an element of a scanned layer's member
// array, for layer `iteration`: "\x01" "3" "\x02". The renderer replaces it
// with "[3]", or "[l]" (relative to the layer variable l) in the code it
// writes once for every layer.
std::string iteration_marker(int iteration);

struct EmissionPlan {
  // ---- buffers --------------------------------------------------------------
  BufferPlan buffers;

  // ---- names ----------------------------------------------------------------
  // Per node: the C++ name of its buffer (parameters: a member of the
  // generated Device; inputs: the user's name; else the layer and op that
  // made it, "dense1_dot", "grad_dense1_dot_2": see value_name()),
  // "" when it has none (fused away). A scanned layer's value ends in
  // iteration_marker(its layer), which the renderer spells as an index.
  std::vector<std::string> var;
  std::map<std::string, std::string> axis_var;                // axis -> coordinate member
  std::map<std::vector<std::string>, std::string> group_var;  // axes -> rt::Group member
  std::map<std::string, std::string> input_field, output_field;
  // Their rows in the program's kInputs and kOutputs tables (the scope's
  // order), which index Inputs::blocks and Outputs::blocks.
  std::map<std::string, int> input_index, output_index;
  // The names taken in the generated step function, for the renderer to add
  // its own temporaries to without a clash.
  cpp::Names locals;

  // The program's inputs (trace order) or outputs (declaration order) as the
  // API lists them.
  struct Io {
    std::string name, field;
    int value;
    SrcLoc loc;
  };
  std::vector<Io> inputs, outputs;

  // ---- schedule -------------------------------------------------------------
  enum class TaskKind {
    kHost,        // copy from the caller's arrays (an input's block)
    kKernel,      // an elementwise loop (a fusion group) or a layout/reduction kernel
    kGemm,        // a local dot_general (GEMM), or one ring step's GEMM
    kCollective,  // a whole collective (all_reduce, all_gather, bucket, ...)
    kTransfer,    // one ring step's ppermute (both halves when bidirectional)
    kRingAdd,     // a scatter ring step's sum: partial + arriving
  };
  struct Task {
    int stmt;  // index into buffers.stmts
    TaskKind kind;
    Stream stream;
    int ring_step = -1;      // RingDot tasks: the step k; -1 otherwise
    int half = -1;           // RingDot GEMMs of a bidirectional ring: 0 or 1
    std::vector<int> waits;  // tasks on the other stream this one waits for
  };
  std::vector<Task> tasks;
  // Per statement: its tasks, in order.
  std::vector<std::vector<int>> stmt_tasks;

  // True when task a must complete before task b starts: a precedes b on one
  // stream, or b waits (transitively) on a.
  bool ordered_before(int a, int b) const;
  // The tasks of statement `stmt` of one kind (and ring step, if >= 0).
  std::vector<int> find(int stmt, TaskKind kind, int ring_step = -1) const;
  // One line per task: "t12 gemm compute ring_step=2 waits t9, t10".
  std::string schedule_str() const;
};

const char* task_kind_name(EmissionPlan::TaskKind k);

// The plan of a partitioned graph (lower()'s output, verified). A pipeline
// stage's program (split_stages) passes the whole partitioned program as
// `device_scope`: the Device members (parameters, coordinates, groups) and
// the Inputs/Outputs fields are then named from it, as every stage shares
// them.
EmissionPlan plan_emission(const ir::Graph& partitioned, const ir::Graph* device_scope = nullptr);

}  // namespace sharc
