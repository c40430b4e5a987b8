// The planner (MESH auto): for a traced program and a device count, every
// way of splitting the devices over the mesh axes the program can use,
// each partitioned by the real pipeline and costed before anything runs,
// ranked, and the fastest that fits a memory budget chosen.
//
// A candidate's numbers:
//  - peak memory per device: the report's (report.h), the generated code's
//    buffer plan replayed; exact (the report tests assert it equal to what
//    the runtime measures);
//  - bytes sent per device: the report's collectives, exact as well;
//  - step time, predicted on a machine model: every statement's cost
//    (op_cost.h statement_seconds: flops at the compute rate, bytes at the
//    memory rate, an overhead per statement) plus every collective's time
//    on the link (a latency per runtime call, its bytes at the link's
//    rate), nothing overlapped; a pipelined program's stages run through
//    their schedule (simulate_stage_steps), so the bubble counts. The
//    slowest device sets the time.
//
// The axes come from the program: the mesh axes its logical rules map to,
// the axes its sharding rules name (an FSDP rule's), names in its specs
// that no rule maps (mesh axes themselves), and its pipeline's axis. Every
// ordered factorisation of the device count over them is a candidate
// (axes of size 1 left out); one the partitioner refuses (a dimension a
// split does not divide, heads the model axis does not divide) is kept in
// the table with the partitioner's reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/pipeline.h"
#include "ir/ir.h"
#include "runtime/thread_world.h"
#include "runtime/trace.h"

namespace sharc {

// What the planner costs time on: the statement cost model's rates and the
// link every collective call crosses.
struct PlanMachine {
  std::string name = "cpu";
  rt::MachineModel compute;  // flops/s, memory bytes/s, overhead per statement
  rt::LinkModel link{.latency_s = 20e-6, .bytes_per_s = 2e9};
  // "cpu (1e+11 flop/s, 2e+10 B/s memory; link 20 us + 2e+09 B/s)".
  std::string str() const;
};

// The machines sharc knows by name: "cpu" (the runtime's default rates on
// the thread world's modelled link). Nullopt for another name.
std::optional<PlanMachine> known_machine(const std::string& name);

struct PlanCandidate {
  std::string mesh;            // "data=2,model=4": the MESH spelling
  bool partitions = false;     // false: `rejected` is the partitioner's error
  uint64_t peak_bytes = 0;     // per device, the largest
  uint64_t sent_bytes = 0;     // per device per step, the largest
  double compute_s = 0, comm_s = 0;  // on the slowest device
  double step_s = 0;           // predicted step time
  double bubble = 0;           // pipelined: the schedule's idle share
  bool fits = false;           // peak_bytes <= the budget
  std::string verdict;         // "chosen", or why it lost
};

struct Plan {
  std::string program;
  int devices = 0;
  uint64_t budget_bytes = 0;  // 0: no budget
  PlanMachine machine;
  std::vector<std::string> axes;         // the axes searched, major to minor
  // Ranked: those that fit by step time (the chosen first), then those
  // over the budget by peak (so with none fitting, the smallest peak is
  // first), then those that do not partition.
  std::vector<PlanCandidate> candidates;
  int chosen = -1;  // index into candidates; -1: none fits
};

// The mesh axes `traced` can use, major to minor (pipe, data, fsdp, the
// others as the rules name them, model or tensor last), and those every
// mesh must have: axes the specs name directly, and the pipeline's.
struct PlanAxes {
  std::vector<std::string> axes, required;
};
PlanAxes plan_axes(const ir::Graph& traced);

// Every ordered way of writing `devices` as a product of sizes of the axes
// (an axis of size 1 left out unless required), as MESH spellings, in a
// fixed order.
std::vector<std::string> plan_meshes(const PlanAxes& axes, int devices);

// Plans `traced` (sharc::trace's global program) on `devices` devices.
// budget_bytes 0: no budget. `options` is what every candidate is lowered
// with (the backend's). Throws Error (no location) when no axis split can
// use the devices.
Plan plan(const std::string& program, const ir::Graph& traced, int devices, uint64_t budget_bytes,
          const PlanMachine& machine, const PipelineOptions& options = {});

// NAME_plan.txt: the ranked table (mesh, predicted step time and its
// compute and communication parts, peak memory and bytes sent per device,
// the verdict) and the chosen plan as a MESH the user could write.
std::string format_plan(const Plan& p);

// "16GiB", "512MiB", "1e9" (bytes): a budget's bytes, or nullopt.
std::optional<uint64_t> parse_bytes(const std::string& text);

}  // namespace sharc
