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
//  - step time, predicted on a machine model (machine.h): every statement's
//    cost (op_cost.h statement_cost: flops at its dtype's compute rate,
//    bytes at the memory rate, an overhead per statement) plus every
//    collective's time on the link it crosses (a latency per ring step, its
//    bytes at the link's rate), nothing overlapped but a ring dot's
//    transfers, which its GEMMs hide; a pipelined program's stages run
//    through their schedule (simulate_stage_steps), so the bubble counts.
//    The slowest device sets the time.
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
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codegen/machine.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/program.h"
#include "ir/ir.h"

namespace sharc {

struct PlanCandidate {
  std::string mesh;            // "data=2,model=4": the MESH spelling
  // What else the candidate chooses; unset: the program's own.
  std::optional<ir::PipelineSchedule> schedule;  // pipelined programs
  int virtual_stages = 1;                        // with kInterleaved
  int microbatches = 0;        // the option "microbatches" the planner chose; 0: the program's own
  int pipeline_microbatches = 0;                 // pipelined: the count traced
  std::optional<ir::RematPolicy> remat;          // every repeated block's policy
  bool ring = false;           // every tensor-parallel dot that can, as a ring (CollectiveMatmul::kAlways)
  // The gradient buckets' size the planner chose (BUCKET_BYTES); 0: the
  // options' (PipelineOptions::bucket_bytes, by default 25 MiB).
  size_t bucket_bytes = 0;
  int buckets = 0;             // gradient buckets a step all-reduces (a pipeline's: every stage's)
  bool partitions = false;     // false: `verdict` is the partitioner's error
  uint64_t peak_bytes = 0;     // per device, the largest
  uint64_t sent_bytes = 0;     // per device per step, the largest
  double compute_s = 0, comm_s = 0;  // on the slowest device
  // Of compute_s: the copies ring dots make of what is not contiguous
  // (ring_dot_seconds), which the virtual clock does not charge.
  double ring_copy_s = 0;
  double bucket_s = 0;         // of comm_s: the gradient buckets' all-reduces
  // The least those could take in buckets of any size: the same calls
  // (smaller buckets only add some), every byte at the link's best rate
  // and every add at the fastest rate of data in cache.
  double bucket_floor_s = 0;
  double step_s = 0;           // predicted step time
  double bubble = 0;           // pipelined: the schedule's idle share
  bool fits = false;           // peak_bytes <= the budget
  std::string verdict;         // "chosen", or why it lost

  // "1f1b x8", "interleaved/2 x8", "" (not pipelined).
  std::string schedule_str() const;
  // "save_dots", "" (the program's own).
  std::string remat_str() const;
  // "1MiB", "256KiB": BUCKET_BYTES as written; "" (the options').
  std::string bucket_str() const;
};

struct Plan {
  std::string program;
  int devices = 0;
  uint64_t budget_bytes = 0;  // 0: no budget
  PlanMachine machine;
  std::vector<std::string> axes;         // the axes searched, major to minor
  // The repeated blocks a remat choice covers, as TrainOptions::remat names
  // them: "\"h\"" (scanned), "\"h0\" to \"h11\"" (unrolled); "" none.
  std::string remat_blocks;
  bool program_remat = false;  // the program has remat rules of its own
  bool microbatch_search = false;  // plan() was given a Retrace
  // Meshes whose first variants bound every other variant of theirs above
  // a candidate that fits: searched no further.
  int pruned = 0;
  // Ranked: those that fit by step time (the chosen first), then those
  // over the budget by peak (so with none fitting, the smallest peak is
  // first), then those that do not partition.
  std::vector<PlanCandidate> candidates;
  int chosen = -1;  // index into candidates; -1: none fits

  // How many candidates fit: they come first, so candidates[0, fitting())
  // are the ranks a CANDIDATE k may name.
  int fitting() const {
    int n = 0;
    while (n < static_cast<int>(candidates.size()) && candidates[n].fits) ++n;
    return n;
  }
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
// with (the backend's), the candidate's choices on top (lower_candidate).
// Throws Error (no location) when no axis split can use the devices, or
// when the machine has fewer devices than asked for.
//
// Beyond the mesh, each candidate chooses (when the program has them):
//  - a pipelined program's schedule: gpipe, 1f1b, and interleaved with two
//    chunks per stage where the layers divide;
//  - the rematerialisation of its repeated blocks (Layers): save_all,
//    save_dots, recompute_all, tried in that order and only while the one
//    before does not fit (recomputing only ever adds statements, so it is
//    never faster);
//  - tensor-parallel dots as rings or not, on meshes with a model or
//    tensor axis where a ring changes anything;
//  - the gradient buckets' size, when `options` does not fix it: smaller
//    buckets than the default 25 MiB (kBucketSizes), for a candidate
//    whose buckets' all-reduces are enough of its time that it could
//    become the fastest, tried from the largest down while each is
//    predicted faster than the one before (a bucket pays a ring's
//    latency per call, and its ring steps' blocks go at the link's rate
//    for their size: on the CPU thread world a block that stays in a
//    core's cache moves faster);
//  - with a Retrace, the micro-batch count (the program's option
//    "microbatches": gradient accumulation, or a pipeline's micro-batches).
//
// A Retrace traces the program again with the option "microbatches" set
// to its argument (throwing Error when the count does not trace); the
// generator gives one when the program reads that option and the build
// did not set it.
using Retrace = std::function<ir::Graph(int microbatches)>;

// The bucket sizes the search tries below the default, largest first.
inline constexpr size_t kBucketSizes[] = {size_t{4} << 20, size_t{1} << 20, size_t{256} << 10};

Plan plan(const std::string& program, const ir::Graph& traced, int devices, uint64_t budget_bytes,
          const PlanMachine& machine, const PipelineOptions& options = {}, const Retrace& retrace = {});

// A program traced for plan(): `fn` with `options`, and the Retrace to give
// plan() when the program reads the option "microbatches" and `options`
// does not set it (empty otherwise). The generator and bench_plan trace
// through it, so both plan the same candidates.
struct PlanTrace {
  ir::Graph traced;
  Retrace retrace;
};
PlanTrace trace_for_plan(const std::string& program, const ProgramFn& fn, const ProgramOptions& options);

// The candidate as the pipeline lowers it: `traced` (the program traced
// with the candidate's micro-batch count) with its remat rules, `options`
// with its schedule and collective matmul, on its mesh.
Lowered lower_candidate(const ir::Graph& traced, const PlanCandidate& c, int devices,
                        const PipelineOptions& options = {});

// NAME_plan.txt: the ranked table (mesh, predicted step time and its
// compute and communication parts, peak memory and bytes sent per device,
// the verdict) and the chosen plan as a MESH the user could write.
std::string format_plan(const Plan& p);

// One collective's seconds on one device that sends `sent` bytes in it
// (over all its calls) across `link` of machine `m`: each call's latency,
// one per ring step (an all-reduce's ring goes round twice; an all-to-all
// and a permute wait once), its bytes at the link's rate for its messages'
// size (a call's bytes over its messages: a ring step's block, an
// all-to-all's block for one peer; a permute's or a send's at the rate for
// point-to-point messages), and a reducing ring's adds (at the rate of data
// in cache). On a link that measured its reducing steps with their adds
// (LinkLevel::reduce_by_message), a reduce-scatter's steps, and an
// all-reduce's first half, go at that rate instead, with no adds beside.
double collective_seconds(const CollectiveReport& col, uint64_t sent, const LinkLevel& link, const PlanMachine& m);

// RingDot `n` of `g` on one device of machine `m`, as the emitted loop runs
// it: its steps' GEMMs (never faster than the whole GEMM they are cut
// from), each step's transfers (a piece for each half) beside them or after
// them, a scatter ring's adds, and the copies of what is not contiguous.
// `copy_s`, when given, gets the copies' part.
double ring_dot_seconds(const ir::Graph& g, const ir::Node& n, const PlanMachine& m, double* copy_s = nullptr);

// "16GiB", "512MiB", "1e9" (bytes): a budget's bytes, or nullopt.
std::optional<uint64_t> parse_bytes(const std::string& text);

}  // namespace sharc
