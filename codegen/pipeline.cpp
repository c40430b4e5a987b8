// The lowering pipeline; see pipeline.h. Order matters:
//  - resolve_logical_axes first: later passes only know mesh axes;
//  - propagate_shardings needs the fixed (user) shardings as seeds;
//  - partition_per_device needs a sharding on every node;
//  - cancel_reshards cleans up after partition_per_device.
#include "codegen/pipeline.h"

#include <filesystem>
#include <fstream>

#include "codegen/passes/cancel_reshards.h"
#include "codegen/passes/partition_per_device.h"
#include "codegen/passes/propagate_shardings.h"
#include "codegen/passes/resolve_logical_axes.h"

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

}  // namespace

Lowered lower(ir::Graph g, const Mesh& mesh, const PipelineOptions& options) {
  Stage stage(options);
  g.mesh = mesh;
  ir::verify(g);
  stage("traced", g);
  std::optional<LogicalRules> rules = options.rules ? options.rules : g.rules;
  g = resolve_logical_axes(std::move(g), rules);
  stage("after_resolve_logical_axes", g);
  g = propagate_shardings(std::move(g));
  stage("after_propagate_shardings", g);
  ir::Graph local = partition_per_device(g);
  stage("after_partition_per_device", local);
  local = cancel_reshards(local);  // after partitioning: it only sees collectives
  stage("after_cancel_reshards", local);
  ir::verify(local);
  return {std::move(g), std::move(local)};
}

}  // namespace sharc
