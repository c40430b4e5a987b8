// explain(): the map from model lines to generated lines (codegen/explain.h),
// checked from both sides on the DotReluDot and GPT samples (training and
// logits, a pipelined GPT) and a ring-overlapped program:
//  - every timeline mark in the generated source (each kernel and
//    collective) is one entry of the map, the entry cites the mark's line,
//    and it stands under the model line the mark's label names;
//  - every model line that made an op of the global program, and every
//    line a mark names, has a heading;
//  - every collective the report counts is one collective entry;
//  - the sample's build wrote the same map beside its generated files
//    (dot_relu_dot_explain.txt), and the generator's --explain prints it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/emit_cpu.h"
#include "codegen/explain.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/program.h"
#include "tests/common/golden.h"

namespace sharc {
namespace {

namespace fs = std::filesystem;
using sharc::testing::read_file;

struct Explained {
  Lowered lowered;
  EmittedFiles files;
  std::string map;
};

Explained explain_program(const std::string& program, const std::string& mesh, const std::string& stem,
                          Backend backend = Backend::kCpu) {
  Explained e;
  PipelineOptions po;
  po.gpu_kernels = backend == Backend::kCuda;  // as the generator lowers a BACKEND cuda program
  e.lowered = lower(trace(program, ProgramRegistry::all().at(program)), Mesh::parse(mesh), po);
  EmitOptions o;
  o.backend = backend;
  o.program = program;
  o.cpp_namespace = "sharc_gen::" + stem;
  o.header_name = stem + ".h";
  o.model_file = ProgramRegistry::locations().at(program).file;
  o.templates = load_templates(SHARC_TEMPLATES_DIR);
  e.files = emit_cpu(e.lowered, o);
  e.map = explain(e.lowered, e.files,
                  {.program = program, .model_file = o.model_file, .stem = stem, .backend = backend});
  return e;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The label of a timeline mark line ("timeline.op(\"dot  model.h:21 dot1\", ...)"),
// or "" for any other line.
std::string mark_label(const std::string& line) {
  static const std::regex mark(R"(^\s*timeline\.(op|comm_op)\("([^"]*)\")");
  std::smatch m;
  return std::regex_search(line, m, mark) ? m[2].str() : "";
}

// The model line a label names: "dot  samples/x/model.h:21 dot1" -> "samples/x/model.h:21".
std::string label_line(const std::string& label) {
  static const std::regex at(R"(^\S+  (\S+:\d+))");
  std::smatch m;
  return std::regex_search(label, m, at) ? m[1].str() : "<no model line>";
}

// Checks the map of one program both ways; `stem` names its source file.
void check_both_sides(const Explained& e, const std::string& stem, int min_collectives,
                      const std::string& ext = ".cpp") {
  const std::vector<std::string> source = lines_of(e.files.source);
  const std::vector<std::string> map = lines_of(e.map);

  // Side 1, the generated source: each mark line, by line number.
  std::map<int, std::string> marks;  // line -> label
  for (size_t i = 0; i < source.size(); ++i) {
    const std::string label = mark_label(source[i]);
    if (!label.empty()) marks[static_cast<int>(i) + 1] = label;
  }
  ASSERT_GT(marks.size(), 5u);

  // Side 2, the map: headings (model lines) and the entries under them.
  const std::regex heading(R"(^(\S+:\d+|<no model line>)  )");
  const std::regex entry("^  " + stem + "\\" + ext +
                         R"(:(\d+)\s+(kernel|collective|ring gemm|ring add|fused|parameter|output)\s)");
  std::set<std::string> headings;
  std::string current;
  std::map<int, int> cited;  // source line -> times a kernel/collective entry cites it
  int collectives = 0;
  for (const std::string& l : map) {
    std::smatch m;
    if (std::regex_search(l, m, heading)) {
      current = m[1].str();
      EXPECT_TRUE(headings.insert(current).second) << "model line listed twice: " << current;
      continue;
    }
    if (!std::regex_search(l, m, entry)) continue;
    ASSERT_FALSE(current.empty()) << "an entry before any model line: " << l;
    const int line = std::stoi(m[1].str());
    const std::string kind = m[2].str();
    ASSERT_GE(line, 1);
    ASSERT_LE(line, static_cast<int>(source.size())) << l;
    if (kind == "fused" || kind == "parameter" || kind == "output") continue;
    ++cited[line];
    if (kind == "collective") ++collectives;
    auto it = marks.find(line);
    ASSERT_NE(it, marks.end()) << "the map cites " << stem << ext << ":" << line << ", which is no timeline mark:\n"
                               << source[line - 1];
    EXPECT_EQ(label_line(it->second), current)
        << stem << ext << ":" << line << " (" << it->second << ") is listed under " << current;
    if (kind == "collective")
      EXPECT_NE(source[line - 1].find("comm_op("), std::string::npos) << "a kernel mark listed as a collective";
    else
      EXPECT_NE(source[line - 1].find("timeline.op("), std::string::npos) << "a collective mark listed as a kernel";
  }
  // Both sides counted: every mark once, nothing else.
  EXPECT_EQ(cited.size(), marks.size()) << "marks in " << stem << ext << ": " << marks.size()
                                        << ", entries of the map citing them: " << cited.size();
  for (auto& [line, times] : cited) EXPECT_EQ(times, 1) << stem << ext << ":" << line << " cited " << times << " times";
  for (auto& [line, label] : marks)
    EXPECT_TRUE(cited.count(line)) << stem << ext << ":" << line << " (" << label << ") is not in the map";
  // The map's own count line says the same.
  EXPECT_NE(e.map.find(stem + ext + " has " + std::to_string(marks.size()) + " timeline marks"), std::string::npos);

  // Every model line with an op, and every line a mark names, is a heading.
  std::set<std::string> model_lines;
  for (const ir::Node& n : e.lowered.global.nodes)
    if (n.loc.known()) model_lines.insert(n.loc.str());
  for (auto& [line, label] : marks) model_lines.insert(label_line(label));
  for (const std::string& l : model_lines) EXPECT_TRUE(headings.count(l)) << "model line " << l << " is not in the map";
  EXPECT_GT(model_lines.size(), 3u);

  // The report's collectives (ring_dots with their ppermutes among them)
  // are the map's collective entries.
  const Report r = predict(e.lowered);
  EXPECT_EQ(collectives, static_cast<int>(r.collectives.size()));
  EXPECT_GE(collectives, min_collectives);
}

TEST(Explain, DotReluDotBothSides) {
  const Explained e = explain_program("dot_relu_dot", "data=2,model=4", "dot_relu_dot");
  check_both_sides(e, "dot_relu_dot", 2);
  // The seed's second dot: a partial sum reduce-scattered then gathered over
  // "model", with the bytes each device sends (4x1024 f32, 3/4 of it).
  EXPECT_NE(e.map.find("collective  reduce_scatter(model) dim=1, 12.3KB sent per device"), std::string::npos)
      << e.map;
  EXPECT_NE(e.map.find("collective  all_gather(model) dim=1, 12.3KB sent per device"), std::string::npos) << e.map;
  // The sharding constraint holds already: its line made no code.
  EXPECT_NE(e.map.find("sharding_constraint\n  (no code of its own)"), std::string::npos) << e.map;
}

// The sample's build wrote this map beside its generated files, and the
// generator prints it with --explain (what `dot_relu_dot_explain` runs).
TEST(Explain, TheBuildWritesIt) {
  const fs::path file = fs::path(SHARC_GENERATED_DIR) / "dot_relu_dot" / "dot_relu_dot_explain.txt";
  ASSERT_TRUE(fs::exists(file)) << "build the dot_relu_dot target first";
  EXPECT_EQ(read_file(file), explain_program("dot_relu_dot", "data=2,model=4", "dot_relu_dot").map);
}

TEST(Explain, GptTrainingBothSides) {
  const Explained e = explain_program("gpt2_train", "data=2,model=4", "gpt2_train");
  check_both_sides(e, "gpt2_train", 10);
  EXPECT_NE(e.map.find("gradient: "), std::string::npos);
}

// The GPT as CUDA: the layer norms are KernelSet launches, each a kernel
// entry under the block's layer_norm line, and the map ends with every
// composite region's kernel or the reason it falls back.
TEST(Explain, GptTrainingOnTheGpuBothSides) {
  const Explained e = explain_program("gpt2_train", "data=2,model=4", "gpt2_train", Backend::kCuda);
  check_both_sides(e, "gpt2_train", 10, ".cu");
  EXPECT_NE(e.map.find(" kernel      layernorm_backward h/ln1 "), std::string::npos) << e.map;
  EXPECT_NE(e.map.find("// Composite regions on the GPU: each part's KernelSet kernel (its marks above name\n"
                       "// the kernel), or why generated kernels compute it:\n"),
            std::string::npos)
      << e.map;
  EXPECT_NE(e.map.find(" h/ln1 layer_norm forward: layernorm_forward\n"), std::string::npos) << e.map;
  // The sample's default keeps dropout on the attention weights (its BACKEND
  // cuda programs turn it off: samples/gpt2/CMakeLists.txt).
  EXPECT_NE(e.map.find(" attention forward: falls back: dropout 0.1 on the attention weights: the attention "
                       "kernels have none\n"),
            std::string::npos)
      << e.map;
}

TEST(Explain, GptLogitsBothSides) {
  check_both_sides(explain_program("gpt2_logits", "model=8", "gpt2_logits"), "gpt2_logits", 5);
}

TEST(Explain, PipelinedGptBothSides) {
  const Explained e = explain_program("gpt2_train_pipelined", "pipe=2,data=2,model=2", "gpt2_pipe");
  check_both_sides(e, "gpt2_pipe", 10);
  EXPECT_NE(e.map.find("[stage 1]"), std::string::npos);
}

TEST(Explain, RingDotStepsBothSides) {
  const Explained e = explain_program("ring_mlp", "data=2,model=4", "ring_mlp");
  check_both_sides(e, "ring_mlp", 0);
  EXPECT_NE(e.map.find("ring gemm"), std::string::npos) << e.map;
  EXPECT_NE(e.map.find("collective  ring_dot(model) gather, bidirectional (ppermutes)"), std::string::npos) << e.map;
}

}  // namespace
}  // namespace sharc
