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

namespace sharc {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(SHARC_GOLDEN_DIR) / "dot_relu_dot_2x4";
const fs::path kGenerated = fs::path(SHARC_GENERATED_DIR) / "dot_relu_dot";

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

bool updating() {
  const char* e = std::getenv("SHARC_UPDATE_GOLDENS");
  return e != nullptr && *e != '\0' && std::string(e) != "0";
}

std::string unified_diff(const fs::path& golden, const std::string& actual) {
  const fs::path tmp = fs::temp_directory_path() /
                       ("sharc_golden_" + golden.filename().string() + "." +
                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::ofstream(tmp, std::ios::binary) << actual;
  const std::string cmd = "diff -u --label '" + golden.string() + "' --label generated '" +
                          golden.string() + "' '" + tmp.string() + "' 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  fs::remove(tmp);
  return out;
}

void check_golden(const fs::path& golden, const std::string& actual) {
  if (updating()) {
    fs::create_directories(golden.parent_path());
    std::ofstream(golden, std::ios::binary) << actual;
    std::printf("updated %s\n", golden.string().c_str());
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing; run scripts/regen_goldens.sh";
  const std::string want = read_file(golden);
  if (want == actual) return;
  ADD_FAILURE() << golden.filename() << " differs from the golden (--- golden, +++ generated):\n"
                << unified_diff(golden, actual)
                << "If the change is intended, run scripts/regen_goldens.sh and review the diff.";
}

Lowered lower_dot_relu_dot() {
  ir::Graph g = trace("dot_relu_dot", ProgramRegistry::all().at("dot_relu_dot"));
  return lower(std::move(g), Mesh::parse("data=2,model=4"));
}

TEST(EmitGolden, DotReluDot2x4Header) {
  ASSERT_TRUE(fs::exists(kGenerated / "dot_relu_dot.h")) << "build the dot_relu_dot target first";
  check_golden(kGolden / "dot_relu_dot.h", read_file(kGenerated / "dot_relu_dot.h"));
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
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.header, read_file(kGenerated / "dot_relu_dot.h"));
  EXPECT_EQ(a.source, read_file(kGenerated / "dot_relu_dot.cpp"));
  const std::string root = fs::path(SHARC_GOLDEN_DIR).parent_path().parent_path().string();
  EXPECT_EQ(a.header.find(root), std::string::npos) << "absolute path in the generated header";
  EXPECT_EQ(a.source.find(root), std::string::npos) << "absolute path in the generated source";
}

}  // namespace
}  // namespace sharc
