// The lowering pipeline: one linear function, one line per pass (pipeline.cpp).
// Verifies at entry and exit, and after every pass when asked; writes numbered
// dumps (00_traced.ir, 01_after_resolve_logical_axes.ir, ...) when dump_dir is
// set (the DUMP_IR keyword of sharc_add_program).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "codegen/passes/bucket_all_reduces.h"
#include "codegen/passes/ring_collective_matmul.h"
#include "codegen/kernel_select.h"
#include "codegen/stage_plan.h"
#include "dsl/sharding_rules.h"

namespace sharc {

struct PipelineOptions {
  std::string dump_dir;      // empty: no dumps
  bool verify_each = true;   // run the verifier after every pass
  std::optional<LogicalRules> rules;  // program-wide logical axis rules
  // Rules applied from outside the model to every parameter (Scalax style);
  // when set, they replace the program's (ProgramBuilder::set_sharding_rules).
  std::optional<ShardingRules> sharding_rules;
  // Ring collective matmul (passes/ring_collective_matmul.h). When set, these
  // replace the program's (ProgramBuilder::set_collective_matmul); a dot's own
  // with_collective_matmul mark wins over both. Default: kAuto, bidirectional.
  std::optional<CollectiveMatmul> collective_matmul;
  std::optional<RingDirection> ring_direction;
  // kAuto rings a collective that sends more than this many bytes per device.
  size_t ring_threshold_bytes = kDefaultRingThresholdBytes;
  // Mixed precision: gradients of f32 master weights used in bf16 are summed
  // across devices in f32 (passes/widen_reductions.h) unless this is set,
  // which keeps the bf16 sum (half the bytes, rounded at every ring hop).
  bool gradient_reduce_bf16 = false;
  // Pipeline parallelism: when set, these replace the program's
  // (ProgramBuilder::set_pipeline) schedule and chunks per stage; the
  // micro-batch count is fixed when train_step is traced.
  std::optional<ir::PipelineSchedule> schedule;
  std::optional<int> virtual_stages;
  // A GPU program (BACKEND cuda): composite regions run as KernelSet kernels
  // where they fit (passes/use_gpu_kernels.h); Lowered::kernels says which.
  bool gpu_kernels = false;
  // Gradient buckets (passes/bucket_all_reduces.h): the most local bytes
  // one bucket's all-reduce carries (BUCKET_BYTES of sharc_add_program).
  // Unset: kDefaultBucketBytes, and MESH auto searches the size.
  std::optional<size_t> bucket_bytes;
};

struct Lowered {
  ir::Graph global;       // after propagate_shardings: the layout of every value
  ir::Graph partitioned;  // per-device program
  // A pipelined program's stage plan (codegen/stage_plan.h): what each stage
  // of the pipe axis runs; nullopt without set_pipeline.
  std::optional<StagePlan> stages;
  // Its stage programs (split_stages): what the devices at each position of
  // the pipe axis run. Empty without a pipeline.
  std::vector<ir::Graph> stage_graphs;
  // Why each parameter has its layout and which rules were skipped, one line
  // per decision (apply_sharding_rules, resolve_logical_axes), for a verbose
  // generator to print.
  std::vector<std::string> log;
  // With PipelineOptions::gpu_kernels: every composite region part's kernel,
  // or why it falls back (codegen/kernel_select.h), in region order.
  std::vector<KernelChoice> kernels;
};

Lowered lower(ir::Graph traced, const Mesh& mesh, const PipelineOptions& options = {});

}  // namespace sharc
