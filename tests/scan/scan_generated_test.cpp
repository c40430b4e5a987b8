// The GPT sample's training step generated scanned (option scan=1: stacked
// parameters, each layer's code written once and called in a loop over the
// layers) and unrolled, compiled, and run 5 steps on the same data: the
// losses of the two forms agree within 1e-6 relative and both agree with the
// fp64 oracle (interpret) within 1e-5, on data=8, fsdp=8 and data=2,model=4
// (ring TP) at 2 layers and on data=2,model=4 at 4; the scanned program's
// measured peak memory is what its report predicts, byte for byte; its
// generated step calls the layer loop rather than repeating the layers; a
// large step is spread over part files (sharc_add_program's CPP_FILES); and no
// function of any generated program in the build passes 2,000 lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/sharc.h"
#include "tests/common/golden.h"
#include "scan_gpt2_data2_model4.h"
#include "tests/common/gpt2_steps.h"
#include "scan_gpt2_data8.h"
#include "scan_gpt2_fsdp8.h"
#include "scan_gpt2_l4_data2_model4.h"
#include "unrolled_gpt2_data2_model4.h"
#include "unrolled_gpt2_data8.h"
#include "unrolled_gpt2_fsdp8.h"
#include "unrolled_gpt2_l4_data2_model4.h"

namespace sharc {
namespace {

constexpr int kSteps = 5;

using sharc::testing::gpt2_token;

ir::Graph traced(int layers, bool scan) {
  return trace("gpt2_train", ProgramRegistry::all().at("gpt2_train"),
               {{"layers", std::to_string(layers)}, {"scan", scan ? "1" : "0"}});
}

std::vector<double> oracle(int layers) {
  const ir::Graph g = traced(layers, false);
  HostValues in, state;
  for (const ir::Node& v : g.nodes)
    if (v.op == ir::Op::kInput && v.name != "dropout_seed") {
      std::vector<double> x(static_cast<size_t>(ir::num_elements(v.shape)));
      for (size_t i = 0; i < x.size(); ++i) x[i] = gpt2_token(i, v.name == "targets");
      in[v.name] = x;
    }
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    in["dropout_seed"] = {static_cast<double>(step + 1)};
    losses.push_back(interpret(g, in, 0, &state).at("loss")[0]);
  }
  return losses;
}

double worst(const std::vector<double>& want, const std::vector<double>& got) {
  double w = 0;
  for (size_t s = 0; s < want.size(); ++s) w = std::max(w, std::fabs(got[s] - want[s]) / std::fabs(want[s]));
  return w;
}

template <class Scanned, class Unrolled>
void expect_same(const char* what, int layers, const char* mesh, const std::vector<double>& want) {
  SCOPED_TRACE(what);
  const sharc::testing::Gpt2Steps scanned_run = sharc::testing::run_gpt2_steps<Scanned>(kSteps);
  const std::vector<double> scanned(scanned_run.losses.begin(), scanned_run.losses.end());
  const std::vector<float> unrolled_f = sharc::testing::run_gpt2_steps<Unrolled>(kSteps).losses;
  const std::vector<double> unrolled(unrolled_f.begin(), unrolled_f.end());
  const double between = worst(unrolled, scanned);
  EXPECT_LE(between, 1e-6);
  EXPECT_LE(worst(want, scanned), 1e-5);
  EXPECT_LE(worst(want, unrolled), 1e-5);
  // The scanned program's memory is what its report predicts.
  const Report rep = predict(lower(traced(layers, true), Mesh::parse(mesh)).partitioned);
  std::string why;
  EXPECT_TRUE(matches(rep, scanned_run.first, &why)) << why;
  std::printf("%-28s scanned vs unrolled %.1e, scanned vs oracle %.1e\n", what, between, worst(want, scanned));
}

TEST(ScanGenerated, TwoLayersScannedEqualUnrolledAndTheOracle) {
  const std::vector<double> want = oracle(2);
  expect_same<sharc_gen::scan_gpt2_data8::Program, sharc_gen::unrolled_gpt2_data8::Program>("2 layers, data=8", 2,
                                                                                            "data=8", want);
  expect_same<sharc_gen::scan_gpt2_fsdp8::Program, sharc_gen::unrolled_gpt2_fsdp8::Program>("2 layers, fsdp=8", 2,
                                                                                            "fsdp=8", want);
  expect_same<sharc_gen::scan_gpt2_data2_model4::Program, sharc_gen::unrolled_gpt2_data2_model4::Program>(
      "2 layers, data=2,model=4", 2, "data=2,model=4", want);
}

TEST(ScanGenerated, FourLayersScannedEqualUnrolledAndTheOracle) {
  expect_same<sharc_gen::scan_gpt2_l4_data2_model4::Program, sharc_gen::unrolled_gpt2_l4_data2_model4::Program>(
      "4 layers, data=2,model=4", 4, "data=2,model=4", oracle(4));
}

// The scanned step runs the blocks as loops over a layer function each way;
// the unrolled one has a part per block.
TEST(ScanGenerated, TheScannedStepLoopsOverOneLayerFunction) {
  using sharc::testing::read_generated;
  const std::string scanned = read_generated(SCAN_GENERATED_DIR "/scan_gpt2_l4_data2_model4", "scan_gpt2_l4_data2_model4");
  const std::string unrolled =
      read_generated(SCAN_GENERATED_DIR "/unrolled_gpt2_l4_data2_model4", "unrolled_gpt2_l4_data2_model4");
  ASSERT_FALSE(scanned.empty());
  EXPECT_THAT(scanned, ::testing::HasSubstr("  for (int64_t l = 1; l <= 3; ++l) {\n    step.forward_h_layer(l);\n"));
  EXPECT_THAT(scanned, ::testing::HasSubstr("  for (int64_t l = 2; l >= 0; --l) {\n    step.backward_h_layer(l);\n"));
  EXPECT_THAT(scanned, ::testing::HasSubstr("void Program::Step::forward_h_layer(int64_t l) {"));
  EXPECT_THAT(scanned, ::testing::Not(::testing::HasSubstr("forward_h3")));
  EXPECT_THAT(unrolled, ::testing::HasSubstr("void Program::Step::forward_h3() {"));
  const auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  EXPECT_LT(lines(scanned), lines(unrolled) * 3 / 4) << "4 unrolled layers against 2 written (the first and the loop's)";
}

// The top-level function definitions of a generated source (a line at
// column 0 that opens a block, not a namespace or struct, to the next line
// starting with '}'): name and length in lines.
std::vector<std::pair<std::string, int>> functions(const std::string& text) {
  std::vector<std::pair<std::string, int>> out;
  std::istringstream in(text);
  std::string head;
  int start = -1, n = 0;
  for (std::string l; std::getline(in, l); ++n) {
    if (start < 0 && !l.empty() && l[0] != ' ' && l[0] != '/' && l[0] != '#' && l.back() == '{' &&
        l.rfind("namespace", 0) != 0 && l.rfind("struct", 0) != 0 && l.rfind("class", 0) != 0) {
      start = n;
      head = l;
    } else if (start >= 0 && !l.empty() && l[0] == '}') {
      out.emplace_back(head, n - start + 1);
      start = -1;
    }
  }
  return out;
}

// A program whose step passes kLinesPerFile is spread over its part files
// (CPP_FILES, 4 by default), each of the step's functions defined once, in
// the order they run; the sources say where the parts are, and the
// model-line map cites the part files.
TEST(ScanGenerated, ALargeStepIsSpreadOverPartFiles) {
  namespace fs = std::filesystem;
  using sharc::testing::read_file;
  for (const std::string stem : {"scan_gpt2_l4_data2_model4", "unrolled_gpt2_l4_data2_model4"}) {
    SCOPED_TRACE(stem);
    const fs::path dir = fs::path(SCAN_GENERATED_DIR) / stem;
    const std::string header = read_file(dir / (stem + "_step.h"));
    ASSERT_FALSE(header.empty());
    // The parts the step struct declares, in order.
    std::vector<std::string> declared;
    std::istringstream in(header);
    for (std::string l; std::getline(in, l);)
      if (l.rfind("  void ", 0) == 0) declared.push_back(l.substr(7, l.find('(') - 7));
    ASSERT_GT(declared.size(), 10u);
    std::vector<std::string> defined;
    int used = 0;
    for (int k = 1; k <= 4; ++k) {
      const std::string file = k == 1 ? stem + ".cpp" : stem + "_part" + std::to_string(k) + ".cpp";
      ASSERT_TRUE(fs::exists(dir / file)) << file;
      const std::string text = read_file(dir / file);
      int here = 0;
      for (const auto& [head, n] : functions(text))
        if (head.rfind("void Program::Step::", 0) == 0) {
          defined.push_back(head.substr(20, head.find('(') - 20));
          ++here;
        }
      if (here == 0) continue;
      ++used;
      if (k > 1) {
        EXPECT_THAT(text, ::testing::HasSubstr("#include \"" + stem + "_step.h\""));
        EXPECT_THAT(text, ::testing::HasSubstr("// Part " + std::to_string(k) + " of 4 of program gpt2_train's step: "));
        EXPECT_NE(read_file(dir / (stem + ".cpp")).find(file), std::string::npos)
            << stem << ".cpp's head does not say where the parts are";
        EXPECT_NE(read_file(dir / (stem + "_explain.txt")).find("  " + file + ":"), std::string::npos)
            << "the model-line map cites no line of " << file;
      }
    }
    EXPECT_EQ(defined, declared) << "each part defined once, in the order the struct declares them";
    EXPECT_GE(used, 3) << "more than 4,000 lines of step in one file";
  }
}

// No generated function of the build's programs (the samples', the tests'
// and the benchmarks', scanned and unrolled, C++ and CUDA) is longer than
// 2,000 lines.
TEST(ScanGenerated, NoGeneratedFunctionIsLongerThan2000Lines) {
  namespace fs = std::filesystem;
  int files = 0, cuda_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(SCAN_GENERATED_DIR)) {
    const bool cuda = e.path().extension() == ".cu";
    if (e.path().extension() != ".cpp" && !cuda) continue;
    ++files;
    cuda_files += cuda;
    for (const auto& [head, n] : functions(sharc::testing::read_file(e.path())))
      EXPECT_LE(n, 2000) << e.path().filename().string() << ": " << head;
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(cuda_files, 20);  // the BACKEND cuda programs' step sources
}

}  // namespace
}  // namespace sharc
