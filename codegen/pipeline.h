// The lowering pipeline: one linear function, one line per pass (pipeline.cpp).
// Verifies at entry and exit, and after every pass when asked; writes numbered
// dumps (00_traced.ir, 01_after_resolve_logical_axes.ir, ...) when dump_dir is
// set (the DUMP_IR keyword of sharc_add_program).
#pragma once

#include <optional>
#include <string>

#include "codegen/ir.h"

namespace sharc {

struct PipelineOptions {
  std::string dump_dir;      // empty: no dumps
  bool verify_each = true;   // run the verifier after every pass
  std::optional<LogicalRules> rules;  // program-wide logical axis rules
};

struct Lowered {
  ir::Graph global;       // after propagate_shardings: the layout of every value
  ir::Graph partitioned;  // per-device program
};

Lowered lower(ir::Graph traced, const Mesh& mesh, const PipelineOptions& options = {});

}  // namespace sharc
