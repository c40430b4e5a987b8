// The pipeline's user errors: each is a sharc::Error at the user's file:line
// (the set_pipeline call, the train_step call, or the offending parameter),
// naming the axis, the sizes and the mesh. The offending call sits on the
// line after `const int line = __LINE__ + 1;`, as in the other error suites.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "dsl/train.h"
#include "tests/common/expect_error.h"

namespace sharc {
namespace {

using ::testing::HasSubstr;

constexpr const char* kThisFile = "tests/pipeline/pipeline_errors_test.cpp";

std::string error_at(int line, const std::function<void()>& f) {
  return sharc::testing::error_at(kThisFile, line, f);
}

struct Traced : sharc::testing::Traced {
  Traced() : sharc::testing::Traced("bad_pipeline") {}
};

// `layers` pipelined layers h = tanh(h @ w_l) over a (batch, 4) input, the
// loss sum(h * h), one SGD step. The weights are made on kWeightLine.
const int kWeightLine = __LINE__ + 6;
void train_stack(Traced& t, int layers, int64_t batch, P w_spec = P(None, None)) {
  std::vector<Tensor> w;
  for (int l = 0; l < layers; ++l) {
    const std::string name = "w" + std::to_string(l);
    const Initializer init = with_partitioning(lecun_normal(), w_spec);
    w.push_back(t.b.scope().param(name, {4, 4}, init));
  }
  Tensor x = t.b.input("x", {batch, 4});
  train_step(
      t.b, {x},
      [&](const std::vector<Tensor>& mb) {
        Tensor h = mb[0];
        for (int l = 0; l < layers; ++l) {
          PipelineLayer layer(l);
          h = tanh(matmul(h, w[l]));
        }
        return sum(mul(h, h), {0, 1});
      },
      sgd(Schedule::constant(0.1)));
}

TEST(PipelineErrors, LayersDoNotDivideIntoStages) {
  Traced t;
  const int line = __LINE__ + 1;
  t.b.set_pipeline({.axis = "pipe", .microbatches = 2});
  train_stack(t, 3, 8);
  const std::string msg = error_at(line, [&] { lower(t.graph(), Mesh::parse("pipe=2")); });
  EXPECT_THAT(msg, HasSubstr("set_pipeline: 3 pipelined layers do not divide into 2 stages x 1 chunks per stage "
                             "(the 'pipe' axis of mesh <[\"pipe\"=2]>)"));
}

TEST(PipelineErrors, LayersDoNotDivideIntoChunks) {
  Traced t;
  const int line = __LINE__ + 1;
  t.b.set_pipeline({.axis = "pipe", .microbatches = 4, .schedule = "interleaved", .virtual_stages = 2});
  train_stack(t, 6, 8);
  const std::string msg = error_at(line, [&] { lower(t.graph(), Mesh::parse("pipe=2")); });
  EXPECT_THAT(msg, HasSubstr("6 pipelined layers do not divide into 2 stages x 2 chunks per stage"));
}

TEST(PipelineErrors, BatchDoesNotDivideIntoMicroBatches) {
  Traced t;
  const int pipeline_line = __LINE__ + 1;
  t.b.set_pipeline({.axis = "pipe", .microbatches = 4});
  Tensor w = t.b.scope().param("w", {4, 4}, lecun_normal());
  Tensor x = t.b.input("x", {6, 4});
  const int line = __LINE__ + 2;
  const std::string msg = error_at(line, [&] {
    train_step(t.b, {x}, [&](const std::vector<Tensor>& mb) { return sum(matmul(mb[0], w), {0, 1}); },
               sgd(Schedule::constant(0.1)));
  });
  EXPECT_THAT(msg, HasSubstr("train_step: batch dimension of input 'x' f32[6,4] does not divide into 4 "
                             "micro-batches (the pipeline's, set at " +
                             std::string(kThisFile) + ":" + std::to_string(pipeline_line) + ")"));
}

TEST(PipelineErrors, InterleavedNeedsMicroBatchesAMultipleOfTheStages) {
  Traced t;
  const int line = __LINE__ + 1;
  t.b.set_pipeline({.axis = "pipe", .microbatches = 6, .schedule = "interleaved", .virtual_stages = 2});
  train_stack(t, 8, 12);
  const std::string msg = error_at(line, [&] { lower(t.graph(), Mesh::parse("pipe=4")); });
  EXPECT_THAT(msg, HasSubstr("set_pipeline: the interleaved schedule needs the micro-batch count (6) to be a "
                             "multiple of the 4 stages on 'pipe'"));
}

TEST(PipelineErrors, PipeAxisNotInTheMesh) {
  Traced t;
  const int line = __LINE__ + 1;
  t.b.set_pipeline({.axis = "stage", .microbatches = 2});
  train_stack(t, 2, 8);
  const std::string msg = error_at(line, [&] { lower(t.graph(), Mesh::parse("data=2,model=2")); });
  EXPECT_THAT(msg, HasSubstr("set_pipeline: the pipe axis 'stage' is not in the mesh <[\"data\"=2, \"model\"=2]>; "
                             "its axes are 'data', 'model'"));
}

TEST(PipelineErrors, ParameterOutsideThePipelinePartitionedOverThePipeAxis) {
  Traced t;
  t.b.set_pipeline({.axis = "pipe", .microbatches = 2});
  const int line = __LINE__ + 1;
  Tensor head = t.b.scope().param("head", {4, 4}, with_partitioning(lecun_normal(), P("pipe", None)));
  Tensor w = t.b.scope().param("w0", {4, 4}, lecun_normal());
  Tensor x = t.b.input("x", {8, 4});
  train_step(
      t.b, {x},
      [&](const std::vector<Tensor>& mb) {
        Tensor h;
        {
          PipelineLayer layer(0);
          h = tanh(matmul(mb[0], w));
        }
        return sum(matmul(h, head), {0, 1});
      },
      sgd(Schedule::constant(0.1)));
  const std::string msg = error_at(line, [&] { lower(t.graph(), Mesh::parse("pipe=1")); });
  EXPECT_THAT(msg, HasSubstr("parameter 'head' f32[4,4] is partitioned over the pipe axis 'pipe' "
                             "([{\"pipe\"}, {}]) but is used outside the pipelined layers; that axis carries "
                             "pipeline stages only"));
}

TEST(PipelineErrors, ParameterInsideThePipelinePartitionedOverThePipeAxis) {
  Traced t;
  t.b.set_pipeline({.axis = "pipe", .microbatches = 2});
  train_stack(t, 2, 8, P(None, "pipe"));
  const std::string msg = error_at(kWeightLine, [&] { lower(t.graph(), Mesh::parse("pipe=2")); });
  EXPECT_THAT(msg, HasSubstr("parameter 'w0' f32[4,4] is partitioned over the pipe axis 'pipe' ([{}, {\"pipe\"}]); "
                             "the pipeline already places its layer on a stage"));
}

TEST(PipelineErrors, UnknownScheduleName) {
  Traced t;
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { t.b.set_pipeline({.axis = "pipe", .schedule = "zero_bubble"}); });
  EXPECT_THAT(msg, HasSubstr("set_pipeline: unknown pipeline schedule 'zero_bubble'; the schedules are 'gpipe', "
                             "'1f1b' and 'interleaved'"));
}

TEST(PipelineErrors, ChunksNeedTheInterleavedSchedule) {
  Traced t;
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { t.b.set_pipeline({.axis = "pipe", .virtual_stages = 2}); });
  EXPECT_THAT(msg, HasSubstr("set_pipeline: virtual_stages = 2 needs the 'interleaved' schedule, not '1f1b'"));
}

TEST(PipelineErrors, LayersDoNotNest) {
  Traced t;
  PipelineLayer outer(0);
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { PipelineLayer inner(1); });
  EXPECT_THAT(msg, HasSubstr("PipelineLayer 1 is opened inside pipeline layer 0; layers do not nest"));
}

TEST(PipelineErrors, AccumulateStepsDisagreeWithThePipeline) {
  Traced t;
  t.b.set_pipeline({.axis = "pipe", .microbatches = 4});
  Tensor w = t.b.scope().param("w", {4, 4}, lecun_normal());
  Tensor x = t.b.input("x", {8, 4});
  TrainOptions o;
  o.accumulate_steps = 2;
  const int line = __LINE__ + 2;
  const std::string msg = error_at(line, [&] {
    train_step(t.b, {x}, [&](const std::vector<Tensor>& mb) { return sum(matmul(mb[0], w), {0, 1}); },
               sgd(Schedule::constant(0.1)), o);
  });
  EXPECT_THAT(msg, HasSubstr("train_step: accumulate_steps = 2 differs from the pipeline's 4 micro-batches"));
}

}  // namespace
}  // namespace sharc
