// MESH auto, generated: the MLP classifier's training step that
// sharc_add_program planned for 8 devices (tests/plan/CMakeLists.txt), with
// no budget and with MEMORY 1900KiB. Each program's mesh is the plan's choice,
// its NAME_plan.txt the plan's table, and one step's measured peak memory
// per device the peak the plan predicted for that mesh, byte for byte.
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

}  // namespace
}  // namespace sharc
