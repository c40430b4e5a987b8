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

// The text of the template files (see load_templates).
struct EmitTemplates {
  std::string header;       // templates/program.h: the API
  std::string step_header;  // templates/program_step.h: Program::Device and Program::Step
  std::string source;       // templates/program.cpp: the API's and the step's definitions
  std::string part;         // templates/program_part.cpp: more of the step's parts
};

// Reads the four templates from `dir`; throws sharc::Error naming a missing
// file.
EmitTemplates load_templates(const std::string& dir);

// What the generated program runs on. kCpu: C++ for device threads
// (rt::ThreadWorld, rt::MpiWorld). kCuda: the same program with its
// statements as GPU kernels and library calls, in .cu sources that compile
// twice, by nvcc for a GPU and by the host compiler for the block simulator;
// it runs on a gpu::GpuWorld (runtime/gpu/gpu_world.h).
enum class Backend { kCpu, kCuda };
const char* backend_name(Backend b);  // "cpu", "cuda"

struct EmitOptions {
  std::string program;        // the registered program name, e.g. "dot_relu_dot"
  std::string cpp_namespace;  // e.g. "sharc_gen::dot_relu_dot"
  std::string header_name;    // how the source includes the header: "dot_relu_dot.h"
  std::string model_file;     // repo-relative model file for the banner ("" = unknown)
  std::string options;        // the generation-time options, "layers=12" ("" = none), for the banner
  // The most .cpp files the program's step is spread over (>= 1): the step's
  // member functions fill the main source and then part files, about
  // kLinesPerFile lines to a file, in order; the files a small program does
  // not need are written empty (the build names them all in advance).
  int files = 1;
  Backend backend = Backend::kCpu;
  EmitTemplates templates;
};

// A generated file holds about this many lines before the step moves on to
// the next part file (EmitOptions::files allowing).
inline constexpr int kLinesPerFile = 2000;

// The generated files of a program whose header is STEM.h: the private header
// STEM_step.h, and file k of the step's sources (0: STEM.cpp, else
// STEM_part<k+1>.cpp; .cu for Backend::kCuda).
std::string step_header_name(const std::string& stem);
std::string source_file_name(const std::string& stem, int file, Backend backend = Backend::kCpu);

// One mark on a device's timeline in the generated source: a line
// `timeline.op(...)` before a kernel or `timeline.comm_op(...)` before a
// collective. Every statement of the step has one; a ring_dot also marks
// each step's GEMM and add. The emitter records them as it writes them, so
// explain.h can say which model line became which generated line.
struct EmittedMark {
  enum class Kind { kKernel, kCollective, kRingGemm, kRingAdd };
  Kind kind = Kind::kKernel;
  int file = 0;       // the source file it is in: 0 EmittedFiles::source, k parts[k - 1]
  int line = 0;       // 1-based, in that file
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
  std::string header;       // STEM.h, the API
  std::string step_header;  // STEM_step.h, the private header of the sources
  std::string source;       // STEM.cpp
  std::vector<std::string> parts;  // STEM_part2.cpp ...: EmitOptions::files - 1 of them, maybe empty
  std::vector<EmittedMark> marks;  // in the order of the files, then of their lines
  // The text of source file k (source_file_name).
  const std::string& file(int k) const { return k == 0 ? source : parts.at(static_cast<size_t>(k) - 1); }
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
