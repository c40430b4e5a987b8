// The CPU renderer: turns a partitioned (per-device) graph into one readable C++
// program, a header with a small typed API and a source with ONE SPMD function
// that every device runs with its own rank. It is a printer, not a compiler:
// node by node it calls the same runtime kernels and collectives as the
// per-device interpreter (execute.cpp), in the same order, so the generated
// code and the interpreter agree bit for bit. Its one liberty is fusion:
// chains of elementwise ops become one loop over scalars. Training programs
// need nothing extra from the caller: parameter shards persist in the
// Program, the step ends by moving each update's value into its parameter's
// buffer, and an all-reduce bucket (all_reduce_bucket_end) is one collective.
//
// The fixed text (includes, class skeleton, Program methods) lives in
// templates/program.h and templates/program.cpp; the emitter fills their
// @SHARC_...@ placeholders and nothing else. Output is deterministic: names
// come from the program (parameter paths, input/output names, layer labels)
// and node order, never from addresses, timestamps or absolute paths.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codegen/pipeline.h"
#include "ir/ir.h"

namespace sharc {

// The text of the two template files (see load_templates).
struct EmitTemplates {
  std::string header;  // templates/program.h
  std::string source;  // templates/program.cpp
};

// Reads program.h and program.cpp from `dir`; throws sharc::Error naming the
// missing file.
EmitTemplates load_templates(const std::string& dir);

struct EmitOptions {
  std::string program;        // the registered program name, e.g. "dot_relu_dot"
  std::string cpp_namespace;  // e.g. "sharc_gen::dot_relu_dot"
  std::string header_name;    // how the source includes the header: "dot_relu_dot.h"
  std::string model_file;     // repo-relative model file for the banner ("" = unknown)
  std::string options;        // the generation-time options, "layers=12" ("" = none), for the banner
  EmitTemplates templates;
};

// One mark on a device's timeline in the generated source: a line
// `timeline.op(...)` before a kernel or `timeline.comm_op(...)` before a
// collective. Every statement of the step has one; a ring_dot also marks
// each step's GEMM and add. The emitter records them as it writes them, so
// explain.h can say which model line became which generated line.
struct EmittedMark {
  enum class Kind { kKernel, kCollective, kRingGemm, kRingAdd };
  Kind kind = Kind::kKernel;
  int line = 0;       // 1-based, in EmittedFiles::source
  int stage = -1;     // a pipelined program: the stage whose program it is in
  int node = -1;      // the statement's node in its (stage) graph
  std::string label;  // the timeline label: "dot  model.h:21 dot1"
  std::string op;     // the node's op ("dot", "all_gather", "ring_dot")
  std::string layer;  // the node's layer label, "" outside layers
  SrcLoc loc;         // the DSL line that caused it
  double flops = 0, bytes = 0;  // a kernel's modelled cost (op_cost.h)
  // Collectives and ring_dots: what the report calls it and the bytes each
  // device sends per step (0 on devices of other pipeline stages).
  std::string what;
  std::vector<uint64_t> sent;
  // A fused loop: the elementwise ops it computes (the mark's own op too).
  std::vector<std::pair<SrcLoc, std::string>> fused;
};

struct EmittedFiles {
  std::string header, source;
  std::vector<EmittedMark> marks;  // in source order
};

// Emits the program. `partitioned` must be the output of lower() (verified,
// g.partitioned). Fails loudly (internal_error naming the op and its DSL line)
// on anything it cannot emit exactly, rather than emitting something half-right.
EmittedFiles emit_cpu(const ir::Graph& partitioned, const EmitOptions& options);
// Any lowered program, pipelined ones included: Program::forward then runs,
// on each device, the program of its pipeline stage (Lowered::stage_graphs),
// while the API (inputs, outputs, parameters) is the whole program's.
EmittedFiles emit_cpu(const Lowered& lowered, const EmitOptions& options);

// Replaces every @KEY@ in `text` by values[KEY]. Throws internal_error when a
// placeholder has no value or a value is never used (template and emitter out
// of step). Exposed for tests.
std::string fill_template(const std::string& text,
                          const std::vector<std::pair<std::string, std::string>>& values,
                          const std::string& what);

}  // namespace sharc
