// explain(): the map from a model's lines to the code generated from them,
// for a user reading generated code (`sharc_add_program`'s NAME_explain
// target, the generator's --explain, and STEM_explain.txt beside the
// generated files).
//
// For every line of the model that made an op (the global program's nodes,
// gradients included, and the outputs), in file and line order, it lists
// what that line became in the generated sources, each with its file and line
// there (a large program's step is spread over part files, emit_cpu.h):
//   kernel       a statement's timeline mark, with its modelled flops and
//                bytes moved per device (op_cost.h);
//   collective   a collective's mark, with the bytes each device sends per
//                step (the report's count, report.h);
//   ring gemm,   the per-step marks inside a ring-overlapped dot;
//   ring add
//   fused        an elementwise op of this line computed in a fused loop
//                whose mark stands under another line;
//   parameter    where a parameter shard is initialised;
//   output       where an output is written to the caller's array.
// A line whose ops became no code of their own (a sharding constraint that
// already holds, a constant folded into a loop) says so. Every timeline mark
// of the source appears exactly once, so the map also reads backwards: each
// generated kernel and collective names the model line it came from.
#pragma once

#include <string>

#include "codegen/emit_cpu.h"
#include "codegen/pipeline.h"

namespace sharc {

struct ExplainOptions {
  std::string program;      // the registered program name
  std::string model_file;   // the model file, as the banner names it
  std::string stem;         // the generated files' stem: "dot_relu_dot" for dot_relu_dot.cpp
                            // and its part files (source_file_name)
  Backend backend = Backend::kCpu;  // the sources' kind: .cpp or .cu
};

// `files`: emit_cpu(lowered, ...)'s output for the same program.
std::string explain(const Lowered& lowered, const EmittedFiles& files, const ExplainOptions& options);

}  // namespace sharc
