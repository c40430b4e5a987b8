// Golden files of the CPU emitter: the sample's generated dot_relu_dot.h and
// dot_relu_dot.cpp (mesh data=2,model=4, from the build tree) and the
// partitioned IR they come from, compared with tests/golden/dot_relu_dot_2x4/.
// A mismatch fails with a unified diff. When a change is intended, run
// scripts/regen_goldens.sh (it sets SHARC_UPDATE_GOLDENS=1, which makes this
// test write the goldens instead of comparing) and review the diff like code.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "codegen/emit_cpu.h"
#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "tests/common/golden.h"

namespace sharc {
namespace {

namespace fs = std::filesystem;
using sharc::testing::check_golden;
using sharc::testing::read_file;

const fs::path kGolden = fs::path(SHARC_GOLDEN_DIR) / "dot_relu_dot_2x4";
const fs::path kGenerated = fs::path(SHARC_GENERATED_DIR) / "dot_relu_dot";

Lowered lower_dot_relu_dot() {
  ir::Graph g = trace("dot_relu_dot", ProgramRegistry::all().at("dot_relu_dot"));
  return lower(std::move(g), Mesh::parse("data=2,model=4"));
}

TEST(EmitGolden, DotReluDot2x4Header) {
  ASSERT_TRUE(fs::exists(kGenerated / "dot_relu_dot.h")) << "build the dot_relu_dot target first";
  check_golden(kGolden / "dot_relu_dot.h", read_file(kGenerated / "dot_relu_dot.h"));
}

TEST(EmitGolden, DotReluDot2x4StepHeader) {
  ASSERT_TRUE(fs::exists(kGenerated / "dot_relu_dot_step.h")) << "build the dot_relu_dot target first";
  check_golden(kGolden / "dot_relu_dot_step.h", read_file(kGenerated / "dot_relu_dot_step.h"));
}

TEST(EmitGolden, DotReluDot2x4Source) {
  ASSERT_TRUE(fs::exists(kGenerated / "dot_relu_dot.cpp")) << "build the dot_relu_dot target first";
  check_golden(kGolden / "dot_relu_dot.cpp", read_file(kGenerated / "dot_relu_dot.cpp"));
}

TEST(EmitGolden, DotReluDot2x4PartitionedIr) {
  check_golden(kGolden / "partitioned.ir", ir::to_string(lower_dot_relu_dot().partitioned));
}

// The in-process emitter, run twice, gives the generator's files byte for
// byte: output depends on the program only (no addresses, times or paths).
TEST(EmitGolden, EmitIsDeterministicAndMatchesTheGenerator) {
  const Lowered l = lower_dot_relu_dot();
  EmitOptions o;
  o.program = "dot_relu_dot";
  o.cpp_namespace = "sharc_gen::dot_relu_dot";
  o.header_name = "dot_relu_dot.h";
  o.model_file = ProgramRegistry::locations().at("dot_relu_dot").file;
  o.templates = load_templates(SHARC_TEMPLATES_DIR);
  const EmittedFiles a = emit_cpu(l.partitioned, o), b = emit_cpu(l.partitioned, o);
  EXPECT_EQ(a.header, b.header);
  EXPECT_EQ(a.step_header, b.step_header);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.header, read_file(kGenerated / "dot_relu_dot.h"));
  EXPECT_EQ(a.step_header, read_file(kGenerated / "dot_relu_dot_step.h"));
  EXPECT_EQ(a.source, read_file(kGenerated / "dot_relu_dot.cpp"));
  const std::string root = fs::path(SHARC_GOLDEN_DIR).parent_path().parent_path().string();
  EXPECT_EQ(a.header.find(root), std::string::npos) << "absolute path in the generated header";
  EXPECT_EQ(a.step_header.find(root), std::string::npos) << "absolute path in the generated step header";
  EXPECT_EQ(a.source.find(root), std::string::npos) << "absolute path in the generated source";
}

}  // namespace
}  // namespace sharc
