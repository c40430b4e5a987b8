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

// The smallest pipelined training step, kept as a golden file of generated
// code (tests/golden/pipeline_tiny_2x2/): two layers on pipe=2, two
// micro-batches under 1F1B, data parallel inside each stage.
SHARC_PROGRAM(tiny_pipe, b) {
  using namespace sharc;
  b.set_pipeline({.axis = "pipe", .microbatches = 2, .schedule = "1f1b"});
  Linear l0(b.scope() / "l0", 4, 4, {.use_bias = false});
  Linear l1(b.scope() / "l1", 4, 4, {.use_bias = false});
  Tensor x = b.input("x", {8, 4}, P("data", None));
  train_step(
      b, {x},
      [&](const std::vector<Tensor>& mb) {
        Tensor h = mb[0];
        {
          PipelineLayer layer(0);
          h = tanh(l0(h));
        }
        {
          PipelineLayer layer(1);
          h = tanh(l1(h));
        }
        return mean(mul(h, h), {0, 1});
      },
      sgd(Schedule::constant(0.1)));
}
