// The stack model's training programs for the generator (and, linked into
// the tests, for tracing the same programs in process): 1F1B, GPipe, and
// interleaved 1F1B with two chunks per stage.
#include "tests/pipeline/stack_model.h"

namespace {

sharc::pipeline_test::StackConfig with_schedule(const char* schedule, int virtual_stages = 1) {
  sharc::pipeline_test::StackConfig c;
  c.pipeline.schedule = schedule;
  c.pipeline.virtual_stages = virtual_stages;
  return c;
}

}  // namespace

SHARC_PROGRAM(stack_1f1b, b) { sharc::pipeline_test::build_stack_train(b, with_schedule("1f1b")); }
SHARC_PROGRAM(stack_gpipe, b) { sharc::pipeline_test::build_stack_train(b, with_schedule("gpipe")); }
SHARC_PROGRAM(stack_interleaved, b) {
  sharc::pipeline_test::build_stack_train(b, with_schedule("interleaved", 2));
}
