// The stage plan of a pipelined program: which per-device nodes each
// pipeline stage runs, in which order, and which values travel between
// stages. It is computed from the final per-device graph (every device on
// stage s runs stage s's steps, SPMD over the other mesh axes) and, like the
// emission plan, it is plain data that executors walk and tests assert on.
//
// Placement. The pipelined layers (ir::Node::layer) are cut into C = p * v
// consecutive chunks of equal layer count (p stages, v chunks per stage);
// chunk c runs on stage c mod p. Every other node is either
//  - floating: a source, or computed from floating nodes only (an embedding
//    lookup, a gathered parameter, the learning rate): it is computed on
//    every stage that needs it, where it is needed, and never sent; or
//  - anchored: it takes the chunk of its largest anchored operand, sized
//    before any broadcast (ties: the later chunk), so the loss lands on the
//    last stage, a gradient on its parameter's stage and the optimizer update
//    with it, and a scalar that sums over stages (the global gradient norm)
//    on the last of them; a broadcast of an anchored value runs with its
//    earliest reader, so the value travels, not its broadcast.
// An anchored value read on another stage is sent there once, right after it
// is computed. It is received at the start of the reading unit when it comes
// from the same pass of the same micro-batch on the neighbouring chunk (the
// pipeline's activations and their gradients), otherwise right before its
// first reader. A parameter is held by every stage that reads it (a tied
// embedding by the first and the last); each holder receives its new value
// after the step.
//
// Order. Each stage runs units: `pre` (nodes traced before train_step's
// micro-batches), then the schedule's forward (F) and backward (B) units of
// (chunk, micro-batch), then `post` (the optimizer step). A node's unit is
// that of its micro-batch and direction (ir::Node::micro_batch, backward),
// moved later to follow its same-stage operands; within a unit nodes keep
// their program order. Sends never block, and every stage's order is one of
// the standard deadlock-free schedules; plan_stages checks that anyway by
// running the plan symbolically (simulate_stages).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "runtime/trace.h"

namespace sharc {

struct StageUnit {
  enum class Phase { kPre, kForward, kBackward, kPost };
  Phase phase = Phase::kPre;
  int chunk = -1;        // kForward / kBackward: the model chunk
  int micro_batch = -1;  // kForward / kBackward
  bool operator==(const StageUnit&) const = default;
  std::string str() const;  // "pre", "F3", "B0", "F1.2" (chunk 2, when v > 1), "post"
};

struct StageStep {
  enum class Kind { kCompute, kSend, kRecv };
  Kind kind = Kind::kCompute;
  int value = -1;  // the node computed, sent or received
  int peer = -1;   // kSend: the destination stage; kRecv: the source stage
  int unit = -1;   // index into StagePlan::units[stage]
};

struct StagePlan {
  std::string axis;  // the pipe mesh axis
  int stages = 1;    // p, the axis size
  int chunks_per_stage = 1;  // v
  int microbatches = 1;      // m
  int layers = 0;            // pipelined layers
  ir::PipelineSchedule schedule = ir::PipelineSchedule::k1F1B;
  std::vector<int> chunk;  // per node: its chunk, -1 when floating
  std::vector<std::vector<StageUnit>> units;  // per stage: pre, the schedule's units, post
  std::vector<std::vector<StageStep>> steps;  // per stage, in order
  // Per stage, per node: the value is on the stage during the step (computed
  // or received there, or a source loaded there).
  std::vector<std::vector<bool>> holds;
  std::vector<int> output_stage;  // per Graph::outputs entry: the stage that has it

  int stage_of_chunk(int c) const { return c % stages; }
  // One line per step: "stage 1: [F0] compute %12 dot | send %12 -> 2 | ...".
  std::string str(const ir::Graph& g) const;
};

// The units stage `stage` runs, in order, between pre and post (exclusive).
std::vector<StageUnit> schedule_units(ir::PipelineSchedule schedule, int stages, int stage,
                                      int chunks_per_stage, int microbatches);

// User errors for a pipeline that cannot run on `g.mesh` (g is the traced
// global graph after resolve_logical_axes, so shardings are resolved): the
// axis is not in the mesh; the layers do not divide into stages x chunks;
// interleaved with micro-batches not a multiple of the stage count; a value
// partitioned over the pipe axis. Each names the set_pipeline line, or the
// offending value's.
void check_pipeline(const ir::Graph& g, ir::PipelineSchedule schedule, int virtual_stages);

// The plan for per-device graph `local` (whose `pipeline` is set).
StagePlan plan_stages(const ir::Graph& local, ir::PipelineSchedule schedule, int virtual_stages);

// The stage programs: stage s's steps as a per-device graph of its own (its
// node k is steps[s][k]), a send node per kSend and a recv node per kRecv
// (tagged with the value's id in `local`), with the outputs, updates and
// gradients the stage has. Executors and renderers run these; the devices
// at position s on the pipe axis run graph s.
std::vector<ir::Graph> split_stages(const ir::Graph& local, const StagePlan& plan);

// Runs a plan on a virtual clock: a compute step of node n takes
// compute_seconds(n), a send costs the sender nothing and its value arrives
// link_seconds(n) later, a receive waits for that arrival. Deterministic.
struct StageTimeline {
  struct Span {
    int step = -1;  // index into StagePlan::steps[stage]
    double start = 0, end = 0;
  };
  std::vector<std::vector<Span>> spans;  // per stage: every step's time
  std::vector<double> busy;              // per stage: time in compute steps
  double makespan = 0;                   // when the last stage finishes
  // Idle share of the stages' time: 1 - sum(busy) / (stages * makespan).
  double bubble_fraction() const;
  // Per stage, each forward or backward unit that took time: from its first
  // costed step's start to its last one's end.
  struct UnitSpan {
    int unit = -1;  // index into StagePlan::units[stage]
    double start = 0, end = 0;
  };
  std::vector<std::vector<UnitSpan>> unit_spans(const StagePlan& plan) const;
};
// Throws internal_error naming the stuck stages if the plan deadlocks.
StageTimeline simulate_stages(const StagePlan& plan, const ir::Graph& g,
                              const std::function<double(int node)>& compute_seconds,
                              const std::function<double(int node)>& link_seconds);
// The same with a cost per step: step k of stage s (node k of its stage
// program) takes step_seconds(s, k). Given the stage programs' statement
// costs (op_cost.h statement_seconds) and an instant link, its times are
// those the runtime's virtual clock measures on a mesh with only the pipe
// axis (pipeline_test.cpp checks it).
StageTimeline simulate_stage_steps(const StagePlan& plan, const ir::Graph& g,
                                   const std::function<double(int stage, int step)>& step_seconds,
                                   const std::function<double(int node)>& link_seconds);

// The schedule's own cost model: each pipelined layer's forward of a
// micro-batch costs 1 and its backward 2, charged to the layer's first node
// in that unit, and everything else is free, so stages of equal layer counts
// cost the same and units are atomic. On it the bubble of GPipe and 1F1B is
// (p-1)/(m+p-1), interleaved (p-1)/(v m+p-1). Holds a reference to `local`.
std::function<double(int node)> layer_unit_costs(const StagePlan& plan, const ir::Graph& local);

// The schedule as an SVG picture: a stage x time grid with one cell per
// forward (F) or backward (B) unit, labelled with its micro-batch (and its
// chunk, as F3.1, when stages hold several), and the bubble in the title.
// Deterministic: tests keep it as a golden file.
std::string schedule_svg(const StagePlan& plan, const StageTimeline& timeline, const std::string& title);

// A timeline as a Chrome trace on the virtual clock: one track per device
// (the devices of a stage share its timeline), one event per compute step,
// send and receive, named after the op and its DSL line; every send carries
// the tag and peer device its receive carries.
rt::Trace virtual_trace(const StagePlan& plan, const std::vector<ir::Graph>& stage_graphs,
                        const StageTimeline& timeline);

}  // namespace sharc
