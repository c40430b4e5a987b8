// Stable generated code: appending one elementwise op at the end of a
// forward program changes only the generated lines of that op and of the
// output it now feeds. Values are named after the layer and op that made
// them (EmissionPlan::var), not numbered through the program, so nothing
// before the new op is renamed. The test diffs the two generated sources
// line by line (a longest common subsequence) and checks every changed line.
// And docs/mesh_diff.md, which reads the diff of the MLP's training step on
// data=8 against fsdp=8, quotes that diff as the build generates it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/golden.h"

#include "codegen/emit_cpu.h"
#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "samples/dot_relu_dot/model.h"

namespace sharc {
namespace {

// DotReluDot at depth 64; `append` adds one relu after it, on its own line.
void build(ProgramBuilder& b, bool append) {
  dot_relu_dot::DotReluDot model(b.scope(), 64);
  Tensor y = model(b.input("x", {8, 64}, P("data", None)));
  if (append) y = relu(y);  // the appended op
  b.output("y", y);
}
constexpr int kAppendedLine = __LINE__ - 3;

SHARC_PROGRAM(stable_names_base, b) { build(b, false); }
SHARC_PROGRAM(stable_names_appended, b) { build(b, true); }

std::vector<std::string> emit_lines(const std::string& program, const std::string& mesh) {
  Lowered l = lower(trace(program, ProgramRegistry::all().at(program)), Mesh::parse(mesh));
  EmitOptions o;
  o.program = "stable_names";  // the same name for both, so only the code differs
  o.cpp_namespace = "sharc_gen::stable_names";
  o.header_name = "stable_names.h";
  o.model_file = "tests/emit/stable_names_test.cpp";
  o.templates = load_templates(SHARC_TEMPLATES_DIR);
  const EmittedFiles f = emit_cpu(l, o);
  std::vector<std::string> lines;
  std::istringstream in(f.step_header + f.source);  // the Step's members, then the code
  for (std::string s; std::getline(in, s);) lines.push_back(s);
  return lines;
}

// Marks the lines of a and b that are not in a longest common subsequence.
void diff(const std::vector<std::string>& a, const std::vector<std::string>& b, std::vector<bool>& a_changed,
          std::vector<bool>& b_changed) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  a_changed.assign(n, true);
  b_changed.assign(m, true);
  for (size_t i = 0, j = 0; i < n && j < m;) {
    if (a[i] == b[j]) {
      a_changed[i++] = false;
      b_changed[j++] = false;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      ++i;
    } else {
      ++j;
    }
  }
}

// The region of the step a line is in: the outputs section, or the
// statements of the op whose timeline mark names `model_line` (with the blank
// line before its section's rule), or the Step's member for a buffer that op
// makes.
struct Regions {
  std::vector<bool> outputs, op;
};

Regions regions(const std::vector<std::string>& lines, const std::string& model_line) {
  Regions r{std::vector<bool>(lines.size(), false), std::vector<bool>(lines.size(), false)};
  bool in_outputs = false, in_op = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    const bool mark = l.find("timeline.op(") != std::string::npos || l.find("timeline.comm_op(") != std::string::npos;
    if (l.find("// ---- outputs") != std::string::npos) in_outputs = true, in_op = false;
    if (in_outputs && l.find("}  // Program::Step::outputs") != std::string::npos) in_outputs = false;
    // A section rule names the op and line it opens: "// ---- relu (file:line) ---".
    if (l.find("// ---- ") != std::string::npos) in_op = l.find(model_line) != std::string::npos;
    if (mark) in_op = l.find(model_line) != std::string::npos;
    r.outputs[i] = in_outputs;
    r.op[i] = in_op;
    if (in_op && i > 0 && lines[i - 1].empty()) r.op[i - 1] = true;
  }
  // Step members ("  rt::Buffer relu_2;  // ...") of buffers the op assigns
  // ("  relu_2 = rt::Buffer(64, ...").
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    const size_t eq = l.find(" = rt::Buffer(");
    if (!r.op[i] || eq == std::string::npos) continue;
    const std::string member = "  rt::Buffer " + l.substr(l.find_first_not_of(' '), eq - l.find_first_not_of(' ')) + ";";
    for (size_t j = 0; j < lines.size(); ++j)
      if (lines[j].rfind(member, 0) == 0) r.op[j] = true;
  }
  return r;
}

void check_append(const std::string& mesh) {
  SCOPED_TRACE("mesh " + mesh);
  const std::vector<std::string> a = emit_lines("stable_names_base", mesh);
  const std::vector<std::string> b = emit_lines("stable_names_appended", mesh);
  std::vector<bool> a_changed, b_changed;
  diff(a, b, a_changed, b_changed);
  const std::string model_line = "tests/emit/stable_names_test.cpp:" + std::to_string(kAppendedLine);
  const Regions ra = regions(a, model_line), rb = regions(b, model_line);
  int added_in_op = 0, changed = 0;
  for (size_t j = 0; j < b.size(); ++j) {
    if (!b_changed[j]) continue;
    ++changed;
    added_in_op += rb.op[j];
    // The arena the constructor reserves grows by the new op's buffer.
    const bool arena = b[j].find("mem.reserve_arena(") != std::string::npos;
    EXPECT_TRUE(rb.op[j] || rb.outputs[j] || arena)
        << "line " << j + 1 << " changed outside the appended op and the outputs:\n" << b[j];
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a_changed[i]) continue;
    ++changed;
    const bool arena = a[i].find("mem.reserve_arena(") != std::string::npos;
    EXPECT_TRUE(ra.outputs[i] || arena) << "line " << i + 1 << " of the program before the append is gone:\n"
                                        << a[i];
  }
  // The appended op is there (its mark, buffer and loop), and something changed.
  EXPECT_GE(added_in_op, 3) << "the appended relu's statement is missing";
  EXPECT_GT(changed, 0);
}

TEST(StableNames, AppendedOpChangesOnlyItsLinesAndTheOutput2x4) { check_append("data=2,model=4"); }
TEST(StableNames, AppendedOpChangesOnlyItsLinesAndTheOutputData8) { check_append("data=8,model=1"); }
TEST(StableNames, AppendedOpChangesOnlyItsLinesAndTheOutputModel8) { check_append("data=1,model=8"); }

// Every line of the diff blocks in docs/mesh_diff.md ("..." aside) is a line
// of `diff -u` between the sample's two generated programs.
TEST(StableNames, MeshDiffDocQuotesTheRealDiff) {
  namespace fs = std::filesystem;
  const fs::path dir = SHARC_GENERATED_DIR;
  // The doc's two commands: the private headers, then the sources.
  std::string command, out;
  for (const std::string file : {"_step.h", ".cpp"}) {
    const fs::path a = dir / "mlp_train_data8" / ("mlp_train_data8" + file);
    const fs::path b = dir / "mlp_train_fsdp8" / ("mlp_train_fsdp8" + file);
    ASSERT_TRUE(fs::exists(a) && fs::exists(b)) << "build the samples' mlp_train_data8 and mlp_train_fsdp8 first";
    command = "diff -u '" + a.string() + "' '" + b.string() + "'";
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr) << command;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
    pclose(pipe);
  }
  std::set<std::string> diff_lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) diff_lines.insert(l);
  ASSERT_GT(diff_lines.size(), 100u) << command << " printed:\n" << out;

  std::istringstream doc(sharc::testing::read_file(SHARC_MESH_DIFF_DOC));
  int quoted = 0;
  bool in_block = false;
  for (std::string l; std::getline(doc, l);) {
    if (l == "```diff") {
      in_block = true;
    } else if (l == "```") {
      in_block = false;
    } else if (in_block && !l.empty() && l != "...") {
      ++quoted;
      EXPECT_TRUE(diff_lines.count(l)) << "docs/mesh_diff.md quotes a line the diff does not have:\n" << l;
    }
  }
  EXPECT_GT(quoted, 20);
}

}  // namespace
}  // namespace sharc
