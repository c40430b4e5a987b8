// MESH auto, generated: the MLP classifier's training step that
// sharc_add_program planned for 8 devices (tests/plan/CMakeLists.txt), with
// no budget and with MEMORY 1900KiB. Each program's mesh is the plan's choice,
// its NAME_plan.txt the plan's table, and one step's measured peak memory
// per device the peak the plan predicted for that mesh, byte for byte. And
// BUCKET_BYTES, the size the planner searches, given by hand: data=8 in
// 64 KiB gradient buckets against the oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/plan.h"
#include "codegen/report.h"
#include "dsl/program.h"
#include "plan_mlp_auto.h"
#include "plan_mlp_auto_1900kib.h"
#include "plan_mlp_data8_buckets64kib.h"
#include "codegen/interpret.h"
#include "tests/common/mlp_step.h"

namespace sharc {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Plan mlp_plan(uint64_t budget) {
  auto it = ProgramRegistry::all().find("mlp_train");
  return plan("mlp_train", trace("mlp_train", it->second), 8, budget, load_machine("cpu"));
}

template <class Program>
void expect_the_plans_choice(const std::string& name, uint64_t budget) {
  const Plan p = mlp_plan(budget);
  ASSERT_GE(p.chosen, 0);
  const PlanCandidate& chosen = p.candidates[p.chosen];
  EXPECT_EQ(Program::mesh_shape().to_string(), Mesh::parse(chosen.mesh).str()) << chosen.mesh;
  EXPECT_EQ(read(std::string(SHARC_PLAN_DIR) + "/" + name + "/" + name + "_plan.txt"), format_plan(p));
  rt::ThreadWorld world(Program::mesh_shape());
  const testing::MlpStep step = testing::mlp_train_step<Program>(world);
  EXPECT_TRUE(std::isfinite(step.loss));
  const std::vector<uint64_t>& peaks = step.measured.peak_bytes;
  EXPECT_EQ(*std::max_element(peaks.begin(), peaks.end()), chosen.peak_bytes) << chosen.mesh;
  if (budget) {
    EXPECT_LE(chosen.peak_bytes, budget);
  }
}

TEST(PlannedPrograms, AreThePlansChoiceAndItsPeak) {
  expect_the_plans_choice<sharc_gen::plan_mlp_auto::Program>("plan_mlp_auto", 0);
}

TEST(PlannedPrograms, FitTheirBudget) {
  expect_the_plans_choice<sharc_gen::plan_mlp_auto_1900kib::Program>("plan_mlp_auto_1900kib", 1900u << 10);
  // The budget changed the choice: the fastest plan's peak is over it.
  const Plan free = mlp_plan(0);
  EXPECT_GT(free.candidates[free.chosen].peak_bytes, 1900u << 10);
}

// BUCKET_BYTES 64KiB: the MLP's data-parallel gradients go in more, smaller
// all-reduces than with the default 25 MiB (as many as the report of that
// lowering counts), and one step's loss and every parameter are the
// oracle's (the global program interpreted in fp64) within 1e-5 of each
// tensor's largest magnitude.
TEST(PlannedPrograms, SmallGradientBucketsMatchTheOracle) {
  using Program = sharc_gen::plan_mlp_data8_buckets64kib::Program;
  const ir::Graph global = trace("mlp_train", ProgramRegistry::all().at("mlp_train"));
  const Mesh mesh = Mesh::parse("data=8");
  PipelineOptions small;
  small.bucket_bytes = 64u << 10;
  const Report with = predict(lower(global, mesh, small)), without = predict(lower(global, mesh));
  const auto all_reduces = [](const Report& r) { return r.calls[0][static_cast<int>(rt::CollectiveKind::kAllReduce)]; };
  EXPECT_GT(all_reduces(with), all_reduces(without) + 2);

  rt::ThreadWorld world(Program::mesh_shape());
  Program program(world);
  program.init(0);
  world.reset_stats();
  testing::MlpFeed<Program> feed;
  feed.step(program);
  EXPECT_EQ(world.comm(0).stats().calls[static_cast<int>(rt::CollectiveKind::kAllReduce)], all_reduces(with));

  HostValues inputs, state;
  inputs["images"] = std::vector<double>(feed.images.begin(), feed.images.end());
  inputs["labels"] = std::vector<double>(feed.labels.begin(), feed.labels.end());
  const HostValues oracle = interpret(global, inputs, 0, &state);
  EXPECT_NEAR(feed.loss, oracle.at("loss")[0], 1e-5 * std::fabs(oracle.at("loss")[0]));
  for (std::string_view p : sharc_gen::plan_mlp_data8_buckets64kib::kParameterPaths) {
    const std::string path(p);
    std::vector<float> got(Program::parameter_info(path).elements());
    program.get_parameter(path, got);
    const std::vector<double>& want = state.at(path);
    ASSERT_EQ(got.size(), want.size()) << path;
    double scale = 0, worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      worst = std::max(worst, std::fabs(got[i] - want[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << path;
  }
}

}  // namespace
}  // namespace sharc
