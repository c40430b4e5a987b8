// Golden files of pipelined programs, under tests/golden/: the generated
// code of the smallest pipelined training step (tiny_pipe on pipe=2,data=2:
// header and source, from the build tree) and the schedule pictures
// (schedule_svg) of the stack model under 1F1B and interleaved 1F1B on
// pipe=4. scripts/regen_goldens.sh rewrites them; review the diff like code.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "codegen/pipeline.h"
#include "codegen/stage_plan.h"
#include "dsl/program.h"
#include "tests/common/golden.h"

namespace sharc {
namespace {

namespace fs = std::filesystem;
using sharc::testing::check_golden;
using sharc::testing::read_file;

const fs::path kGolden = fs::path(SHARC_GOLDEN_DIR);
const fs::path kGenerated = fs::path(SHARC_GENERATED_DIR) / "pipeline_tiny_2x2";

TEST(PipelineGolden, TinyPipeHeader) {
  ASSERT_TRUE(fs::exists(kGenerated / "pipeline_tiny_2x2.h")) << "build the pipeline_tiny_2x2 target first";
  check_golden(kGolden / "pipeline_tiny_2x2" / "pipeline_tiny_2x2.h", read_file(kGenerated / "pipeline_tiny_2x2.h"));
}

TEST(PipelineGolden, TinyPipeStepHeader) {
  ASSERT_TRUE(fs::exists(kGenerated / "pipeline_tiny_2x2_step.h")) << "build the pipeline_tiny_2x2 target first";
  check_golden(kGolden / "pipeline_tiny_2x2" / "pipeline_tiny_2x2_step.h",
               read_file(kGenerated / "pipeline_tiny_2x2_step.h"));
}

TEST(PipelineGolden, TinyPipeSource) {
  ASSERT_TRUE(fs::exists(kGenerated / "pipeline_tiny_2x2.cpp")) << "build the pipeline_tiny_2x2 target first";
  check_golden(kGolden / "pipeline_tiny_2x2" / "pipeline_tiny_2x2.cpp",
               read_file(kGenerated / "pipeline_tiny_2x2.cpp"));
}

std::string picture(const std::string& program, const std::string& mesh) {
  const Lowered l = lower(trace(program, ProgramRegistry::all().at(program)), Mesh::parse(mesh));
  const StageTimeline t = simulate_stages(*l.stages, l.partitioned, layer_unit_costs(*l.stages, l.partitioned),
                                          [](int) { return 0.0; });
  return schedule_svg(*l.stages, t, program + " on " + mesh);
}

TEST(PipelineGolden, ScheduleSvg1F1B) {
  check_golden(kGolden / "pipeline_schedules" / "stack_1f1b_pipe4.svg", picture("stack_1f1b", "pipe=4"));
}

TEST(PipelineGolden, ScheduleSvgInterleaved) {
  check_golden(kGolden / "pipeline_schedules" / "stack_interleaved_pipe4.svg",
               picture("stack_interleaved", "pipe=4"));
}

}  // namespace
}  // namespace sharc
