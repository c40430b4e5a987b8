// User errors in training programs: each is a sharc::Error whose what() starts
// with this file and the line of the DSL call that made the mistake (the
// train_step call, or the input whose batch does not divide), and names the
// tensor, the sizes and the mesh axis. One test per check. As in
// tests/dsl/errors_test.cpp, the offending call sits on the line right after
// `const int line = __LINE__ + 1;`. Rule errors (a non-divisible rule, an
// unmatched strict path) are tested in tests/passes/apply_sharding_rules_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/common/expect_error.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "dsl/train.h"

namespace sharc {
namespace {

using ::testing::HasSubstr;

constexpr const char* kThisFile = "tests/train/train_step_errors_test.cpp";

// Runs f, which must throw sharc::Error at this file and `line`; returns what().
std::string error_at(int line, const std::function<void()>& f) {
  return sharc::testing::error_at(kThisFile, line, f);
}

// A program traced in the test body, so the line idiom stays exact.
struct Traced : sharc::testing::Traced {
  Traced() : sharc::testing::Traced("bad_train_program") {}
};

const Optimizer kSgd = sgd(Schedule::constant(0.1));

// 0.5 * sum((w - x)^2) over every dimension: a valid scalar loss.
LossFn quadratic(Tensor w) {
  return [w](const std::vector<Tensor>& mb) {
    Tensor d = sub(broadcast_to(w, mb[0].shape()), mb[0]);
    std::vector<int> all;
    for (int i = 0; i < static_cast<int>(d.rank()); ++i) all.push_back(i);
    return mul(sum(mul(d, d), all), 0.5);
  };
}

TEST(TrainStepErrors, LossIsNotAScalar) {
  Traced t;
  Tensor w = t.b.scope().param("w", {4}, zeros());
  Tensor x = t.b.input("x", {6, 4});
  const LossFn per_example = [&](const std::vector<Tensor>& mb) {
    return sum(mul(mb[0], broadcast_to(w, {6, 4})), {1});
  };
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { train_step(t.b, {x}, per_example, kSgd); });
  EXPECT_THAT(msg, HasSubstr("train_step: the loss must be a scalar, got reduce result"));
  EXPECT_THAT(msg, HasSubstr(" f32[6]"));
}

TEST(TrainStepErrors, BatchDoesNotDivideByTheDataAxis) {
  Traced t;
  t.b.set_logical_rules({{"batch", "data"}});
  Tensor w = t.b.scope().param("w", {3}, zeros());
  const int line = __LINE__ + 1;
  Tensor x = t.b.input("x", {12, 3}, P("batch", None));
  train_step(t.b, {x}, quadratic(w), kSgd);
  const std::string msg = error_at(line, [&] { lower(t.graph(), Mesh::parse("data=8", 8)); });
  EXPECT_THAT(msg,
              HasSubstr("dimension 0 of input 'x' f32[12,3] has size 12, which does not divide by "
                        "'data'=8 (8 blocks) in P('batch', None)"));
}

TEST(TrainStepErrors, AccumulateStepsDoNotDivideTheBatch) {
  Traced t;
  Tensor w = t.b.scope().param("w", {3}, zeros());
  Tensor x = t.b.input("x", {12, 3});
  TrainOptions o;
  o.accumulate_steps = 5;
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { train_step(t.b, {x}, quadratic(w), kSgd, o); });
  EXPECT_THAT(msg, HasSubstr("train_step: batch dimension of input 'x' f32[12,3] does not divide "
                             "into 5 micro-batches"));
}

TEST(TrainStepErrors, AccumulateStepsBelowOne) {
  Traced t;
  Tensor w = t.b.scope().param("w", {3}, zeros());
  Tensor x = t.b.input("x", {12, 3});
  TrainOptions o;
  o.accumulate_steps = 0;
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { train_step(t.b, {x}, quadratic(w), kSgd, o); });
  EXPECT_THAT(msg, HasSubstr("train_step: accumulate_steps must be at least 1, got 0"));
}

TEST(TrainStepErrors, NoParameters) {
  Traced t;
  Tensor x = t.b.input("x", {12, 3});
  const LossFn sum_of_squares = [](const std::vector<Tensor>& mb) {
    return sum(mul(mb[0], mb[0]), {0, 1});
  };
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { train_step(t.b, {x}, sum_of_squares, kSgd); });
  EXPECT_THAT(msg, HasSubstr("train_step: the program has no parameters to train"));
}

// A weight decay mask's pattern that matches no parameter is a typo that
// would otherwise decay everything.
TEST(TrainStepErrors, DecayMaskPatternMatchingNoParameter) {
  Traced t;
  Tensor w = t.b.scope().param("w", {3}, zeros());
  Tensor bias = t.b.scope().param("bias", {3}, zeros());
  Tensor x = t.b.input("x", {12, 3});
  const Optimizer opt = adamw(Schedule::constant(0.1), 0.1, decay_mask(0, {"bais"}));
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { train_step(t.b, {x}, quadratic(add(w, bias)), opt); });
  EXPECT_THAT(msg, HasSubstr("train_step: the weight decay mask's pattern 'bais' matches no parameter; the "
                             "parameters are w, bias"));
}

// A learning-rate group's pattern that matches nothing would leave its
// parameters at the schedule's rate without a word; a scale of zero or
// below, or not finite, is no learning rate.
TEST(TrainStepErrors, LearningRateGroupThatMatchesNothingOrHasNoScale) {
  for (const auto& [group, want] : std::vector<std::pair<LrGroup, std::string>>{
           {lr_group({"w", "bais"}, 0.1),
            "train_step: learning-rate group 0's pattern 'bais' matches no parameter; the parameters are w, bias"},
           {lr_group({"w"}, 0.0), "train_step: learning-rate group 0's scale must be positive and finite, got 0"},
           {lr_group({"w"}, -2.0), "train_step: learning-rate group 0's scale must be positive and finite, got -2"},
           {lr_group({}, 0.5), "train_step: learning-rate group 0 has no pattern"}}) {
    Traced t;
    Tensor w = t.b.scope().param("w", {3}, zeros());
    Tensor bias = t.b.scope().param("bias", {3}, zeros());
    Optimizer opt = adamw(Schedule::constant(0.1), 0.1);
    opt.lr_groups = {group};
    const int line = __LINE__ + 1;
    const std::string msg = error_at(line, [&] { train_step(t.b, {t.b.input("x", {12, 3})}, quadratic(add(w, bias)), opt); });
    EXPECT_THAT(msg, HasSubstr(want));
  }
}

}  // namespace
}  // namespace sharc
