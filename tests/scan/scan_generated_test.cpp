// The GPT sample's training step generated scanned (option scan=1: stacked
// parameters, each layer's code written once and called in a loop over the
// layers) and unrolled, compiled, and run 5 steps on the same data: the
// losses of the two forms agree within 1e-6 relative and both agree with the
// fp64 oracle (interpret) within 1e-5, on data=8, fsdp=8 and data=2,model=4
// (ring TP) at 2 layers and on data=2,model=4 at 4; the scanned program's
// measured peak memory is what its report predicts, byte for byte; and its
// generated step calls the layer loop rather than repeating the layers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/sharc.h"
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
  auto read = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  const std::string scanned = read(SCAN_GENERATED_DIR "/scan_gpt2_l4_data2_model4/scan_gpt2_l4_data2_model4.cpp");
  const std::string unrolled =
      read(SCAN_GENERATED_DIR "/unrolled_gpt2_l4_data2_model4/unrolled_gpt2_l4_data2_model4.cpp");
  ASSERT_FALSE(scanned.empty());
  EXPECT_THAT(scanned, ::testing::HasSubstr("  for (int64_t l = 1; l <= 3; ++l) {\n    step.forward_h_layer(l);\n"));
  EXPECT_THAT(scanned, ::testing::HasSubstr("  for (int64_t l = 2; l >= 0; --l) {\n    step.backward_h_layer(l);\n"));
  EXPECT_THAT(scanned, ::testing::HasSubstr("void Program::Step::forward_h_layer(int64_t l) {"));
  EXPECT_THAT(scanned, ::testing::Not(::testing::HasSubstr("forward_h3")));
  EXPECT_THAT(unrolled, ::testing::HasSubstr("void Program::Step::forward_h3() {"));
  const auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  EXPECT_LT(lines(scanned), lines(unrolled) * 3 / 4) << "4 unrolled layers against 2 written (the first and the loop's)";
}

}  // namespace
}  // namespace sharc
