// The lowering pipeline; see pipeline.h. Order matters:
//  - resolve_logical_axes first: later passes only know mesh axes;
//  - apply_sharding_rules starts from the resolved in-model layouts;
//  - propagate_shardings needs the fixed (user) shardings as seeds;
//  - partition_per_device needs a sharding on every node;
//  - cancel_reshards cleans up after partition_per_device;
//  - combine_reductions merges summed collectives (gradient accumulation);
//  - widen_reductions sums bf16 gradients of f32 weights in f32;
//  - ring_collective_matmul fuses dots with their all_gather / reduce_scatter
//    (after combine_reductions: it must see the final reduce_scatters);
//  - use_gpu_kernels (GPU programs) replaces composite regions by kernels
//    once the collectives are final (a collective inside a region keeps it
//    from its kernel);
//  - bucket_all_reduces groups the gradient all-reduces that remain.
#include "codegen/pipeline.h"

#include <filesystem>
#include <fstream>

#include "codegen/passes/apply_sharding_rules.h"
#include "codegen/passes/bucket_all_reduces.h"
#include "codegen/passes/cancel_reshards.h"
#include "codegen/passes/combine_reductions.h"
#include "codegen/passes/partition_per_device.h"
#include "codegen/passes/propagate_shardings.h"
#include "codegen/passes/rematerialize.h"
#include "codegen/passes/resolve_logical_axes.h"
#include "codegen/passes/ring_collective_matmul.h"
#include "codegen/passes/use_gpu_kernels.h"
#include "codegen/passes/widen_reductions.h"

namespace sharc {

namespace {

class Stage {
 public:
  explicit Stage(const PipelineOptions& o) : o_(o) {}
  void operator()(const std::string& name, const ir::Graph& g) {
    if (o_.verify_each) ir::verify(g);
    if (o_.dump_dir.empty()) return;
    char prefix[8];
    std::snprintf(prefix, sizeof prefix, "%02d_", index_++);
    std::filesystem::create_directories(o_.dump_dir);
    std::ofstream(std::filesystem::path(o_.dump_dir) / (prefix + name + ".ir")) << g;
  }

 private:
  const PipelineOptions& o_;
  int index_ = 0;
};

// PipelineOptions::sharding_rules replace the program's; neither: no rules.
ShardingRules sharding_rules_for(const ir::Graph& g, const PipelineOptions& options) {
  if (options.sharding_rules) return *options.sharding_rules;
  return g.sharding_rules ? *g.sharding_rules : ShardingRules{};
}

// PipelineOptions' ring settings replace the program's.
RingOptions ring_options_for(const ir::Graph& g, const PipelineOptions& options) {
  RingOptions r;
  r.mode = options.collective_matmul.value_or(g.collective_matmul);
  r.direction = options.ring_direction.value_or(g.ring_direction.value_or(r.direction));
  r.threshold_bytes = options.ring_threshold_bytes;
  return r;
}

}  // namespace

Lowered lower(ir::Graph g, const Mesh& mesh, const PipelineOptions& options) {
  Stage stage(options);
  g.mesh = mesh;
  ir::verify(g);
  stage("traced", g);
  g = rematerialize(g);  // on the global program: copies are ordinary forward ops
  stage("after_rematerialize", g);
  std::vector<std::string> log;
  std::optional<LogicalRules> rules = options.rules ? options.rules : g.rules;
  g = resolve_logical_axes(std::move(g), rules, &log);
  stage("after_resolve_logical_axes", g);
  const ShardingRules sharding_rules = sharding_rules_for(g, options);
  g = apply_sharding_rules(std::move(g), sharding_rules, &log);
  stage("after_apply_sharding_rules", g);
  // A pipeline is checked once every user layout is known.
  ir::PipelineSchedule schedule = ir::PipelineSchedule::k1F1B;
  int virtual_stages = 1;
  if (g.pipeline) {
    schedule = options.schedule.value_or(g.pipeline->schedule);
    virtual_stages = options.virtual_stages.value_or(g.pipeline->virtual_stages);
    check_pipeline(g, schedule, virtual_stages);
  }
  g = propagate_shardings(std::move(g));
  stage("after_propagate_shardings", g);
  ir::Graph local = partition_per_device(g);
  stage("after_partition_per_device", local);
  local = cancel_reshards(local);  // after partitioning: it only sees collectives
  stage("after_cancel_reshards", local);
  local = combine_reductions(local);  // before bucketing: fewer, larger collectives
  stage("after_combine_reductions", local);
  // After combining: widens the final sums. Staged either way, so the dump
  // files keep their numbers.
  if (!options.gradient_reduce_bf16) local = widen_reductions(local);
  stage("after_widen_reductions", local);
  local = ring_collective_matmul(local, ring_options_for(g, options));  // sees final collectives
  stage("after_ring_collective_matmul", local);
  std::vector<KernelChoice> kernels;
  if (options.gpu_kernels) {
    local = use_gpu_kernels(local, &kernels);
    stage("after_use_gpu_kernels", local);
  }
  // Last: it only reorders and groups.
  local = bucket_all_reduces(local, options.bucket_bytes.value_or(kDefaultBucketBytes));
  stage("after_bucket_all_reduces", local);
  ir::verify(local);
  std::optional<StagePlan> stages;
  std::vector<ir::Graph> stage_graphs;
  if (local.pipeline) {
    stages = plan_stages(local, schedule, virtual_stages);
    stage_graphs = split_stages(local, *stages);
    for (size_t s = 0; s < stage_graphs.size(); ++s) stage("stage" + std::to_string(s), stage_graphs[s]);
  }
  return {std::move(g),           std::move(local), std::move(stages), std::move(stage_graphs),
          std::move(log),         std::move(kernels)};
}

}  // namespace sharc
