// apply_sharding_rules on traced programs, run the way lower() runs it (mesh
// set, resolve_logical_axes, then this pass), plus a few whole lower() runs:
// Scalax's FSDP examples and the FSDP choice over many random shapes, PathRule
// matching, how rules combine with in-model annotations and with each other,
// rules that are inactive on a mesh, the log lines, rule errors (reported at
// the rule's line), and optimizer state following its parameter.
#include "codegen/passes/apply_sharding_rules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/passes/resolve_logical_axes.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "tests/common/expect_error.h"

namespace sharc {
namespace {

using ir::Graph;
using ir::Op;

// This file as the DSL records it (project-relative, -ffile-prefix-map).
constexpr const char* kThisFile = "tests/passes/apply_sharding_rules_test.cpp";

std::string here(int line) {
  return std::string(kThisFile) + ":" + std::to_string(line);
}

struct Applied {
  Graph g;
  std::vector<std::string> log;
  std::string sharding(const std::string& param) const {
    const ir::Node* n = g.find(param, Op::kParameter);
    if (!n) return "<no parameter " + param + ">";
    if (!n->sharding) return "<none>";
    return n->sharding->str() + (n->fixed ? "" : " (not fixed)");
  }
};

// lower()'s first steps on `mesh`: resolve_logical_axes, then the rules.
Applied applied(const ProgramFn& fn, const std::string& mesh, const ShardingRules& rules) {
  Applied a{trace("rules", fn), {}};
  a.g.mesh = Mesh::parse(mesh);
  ir::verify(a.g);
  const std::optional<LogicalRules> logical = a.g.rules;  // before a.g is moved from
  a.g = resolve_logical_axes(std::move(a.g), logical, &a.log);
  a.g = apply_sharding_rules(std::move(a.g), rules, &a.log);
  ir::verify(a.g);
  return a;
}

// One parameter 'w' of `shape` (with an optional in-model spec) under `rules`.
Applied one_param(ir::Shape shape, const std::string& mesh, const ShardingRules& rules,
                  std::optional<P> spec = std::nullopt, const std::string& path = "w") {
  return applied(
      [&](ProgramBuilder& b) {
        Initializer init = lecun_normal();
        if (spec) init = with_partitioning(init, *spec);
        b.output("y", relu(b.scope().param(path, shape, init)));
      },
      mesh, rules);
}

// Scalax's documented examples use min_fsdp_size 1024 on an fsdp axis of 4.
std::string fsdp4(ir::Shape shape) {
  return one_param(std::move(shape), "fsdp=4", {FSDPRule("fsdp", 1024)}).sharding("w");
}

bool contains(const std::vector<std::string>& log, const std::string& line) {
  return std::find(log.begin(), log.end(), line) != log.end();
}

std::string joined(const std::vector<std::string>& log) {
  std::string s;
  for (const std::string& l : log) s += l + "\n";
  return s;
}

// Runs f, which must throw sharc::Error at `line` of this file; returns what().
template <class F>
std::string error_at(int line, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    EXPECT_EQ(e.loc().file, kThisFile) << e.what();
    EXPECT_EQ(e.loc().line, line) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected sharc::Error, nothing was thrown";
  return "";
}

// ---- FSDPRule --------------------------------------------------------------

TEST(FSDPRule, ScalaxExamples) {
  EXPECT_EQ(fsdp4({1024, 1024}), R"([{"fsdp"}, {}])");
  EXPECT_EQ(fsdp4({1025, 1024}), R"([{}, {"fsdp"}])");  // the largest dim does not divide
  EXPECT_EQ(fsdp4({16, 16}), "[{}, {}]");               // 256 elements < 1024
  EXPECT_EQ(fsdp4({2048}), R"([{"fsdp"}])");
}

// Scalax's own FSDPShardingRule test table (tests/sharding_test.py,
// test_sharding_rule): three (axis size, min_fsdp_size) rows, seven tensors
// each. Every row holds in both of sharc's modes: the default (Scalax given
// the axis size) and kLargestPowerOfTwo (Scalax's bare FSDPShardingRule()),
// which differ from Scalax only in 'really_weird_matrix' ((m+1) x (m+1), odd
// sides): Scalax's bare rule would split dimension 0 unevenly, sharc keeps it
// replicated, which is the row's expected P().
struct ScalaxRow {
  int axis_size;
  int64_t min_fsdp_size;
};

void PrintTo(const ScalaxRow& r, std::ostream* os) {
  *os << "fsdp_axis_size=" << r.axis_size << ", min_fsdp_size=" << r.min_fsdp_size;
}

class ScalaxFSDPTable
    : public ::testing::TestWithParam<std::tuple<ScalaxRow, FSDPRule::Dimension>> {};

TEST_P(ScalaxFSDPTable, Row) {
  const auto [row, dimension] = GetParam();
  const int64_t m = row.min_fsdp_size;
  const std::string mesh = "fsdp=" + std::to_string(row.axis_size);
  const FSDPRule rule("fsdp", m, dimension);
  struct Case {
    const char* name;
    ir::Shape shape;
    const char* expected;
  };
  const std::vector<Case> cases = {
      // 'scaler' (a 0-d array): 1 element < min_fsdp_size.
      {"scaler", {}, "[]"},
      {"small_vector", {m - row.axis_size}, "[{}]"},
      {"large_vector", {m * 2}, R"([{"fsdp"}])"},
      {"small_matrix", {16, 16}, "[{}, {}]"},
      {"large_matrix", {m, m}, R"([{"fsdp"}, {}])"},
      {"weird_matrix", {m + 1, m}, R"([{}, {"fsdp"}])"},
      {"really_weird_matrix", {m + 1, m + 1}, "[{}, {}]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " " + ir::shape_str(c.shape) + " on " + mesh);
    const Applied a = applied(
        [&](ProgramBuilder& b) {
          Param w = b.scope().param(c.name, c.shape, lecun_normal());
          b.output("y", relu(w));
        },
        mesh, {rule});
    EXPECT_EQ(a.sharding(c.name), c.expected) << joined(a.log);
  }
}

INSTANTIATE_TEST_SUITE_P(
    BothModes, ScalaxFSDPTable,
    ::testing::Combine(::testing::Values(ScalaxRow{4, 1024}, ScalaxRow{8, 2048}, ScalaxRow{2, 512}),
                       ::testing::Values(FSDPRule::Dimension::kLargestDivisible,
                                         FSDPRule::Dimension::kLargestPowerOfTwo)),
    [](const auto& info) {
      const ScalaxRow row = std::get<0>(info.param);
      return "fsdp" + std::to_string(row.axis_size) + "_min" + std::to_string(row.min_fsdp_size) +
             (std::get<1>(info.param) == FSDPRule::Dimension::kLargestPowerOfTwo
                  ? "_largest_power_of_two"
                  : "_largest_divisible");
    });

// Where the two modes part: the largest dimension is not the one with the
// largest power-of-two divisor.
TEST(FSDPRule, PowerOfTwoModeDiffersFromTheDefault) {
  const auto pow2 = [](ir::Shape shape, const std::string& mesh = "fsdp=4") {
    return one_param(std::move(shape), mesh,
                     {FSDPRule("fsdp", 1024, FSDPRule::Dimension::kLargestPowerOfTwo)})
        .sharding("w");
  };
  EXPECT_EQ(fsdp4({1536, 1024}), R"([{"fsdp"}, {}])");  // 1536 is the largest and divides
  EXPECT_EQ(pow2({1536, 1024}), R"([{}, {"fsdp"}])");   // 2^10 | 1024, only 2^9 | 1536
  EXPECT_EQ(fsdp4({12, 4096, 3072}), R"([{}, {"fsdp"}, {}])");
  EXPECT_EQ(pow2({12, 4096, 3072}), R"([{}, {"fsdp"}, {}])");
  EXPECT_EQ(pow2({96, 40, 64}), R"([{}, {}, {"fsdp"}])");  // 2^6 beats 2^5 and 2^3
  EXPECT_EQ(fsdp4({96, 40, 64}), R"([{"fsdp"}, {}, {}])");
  // Ties go to the lower index, as in Scalax (a stable argsort).
  EXPECT_EQ(pow2({64, 192, 64}), R"([{"fsdp"}, {}, {}])");
  // Scalax's bare rule skips size-1 dimensions.
  EXPECT_EQ(pow2({1, 1024, 3}), R"([{}, {"fsdp"}, {}])");
  // The chosen dimension must divide by the axis: 2^1 | 1026 does not cover
  // fsdp=4, so the layout is kept (Scalax would split it unevenly) even
  // though the default mode finds 1028.
  EXPECT_EQ(pow2({1026, 1027}), "[{}, {}]");
  EXPECT_EQ(pow2({1026, 1028}), R"([{}, {"fsdp"}])");
  EXPECT_EQ(pow2({6, 2050}, "fsdp=2"), R"([{"fsdp"}, {}])");
}

TEST(FSDPRule, PowerOfTwoModeLogLines) {
  const Applied a = one_param({1026, 1027}, "fsdp=4",
                              {FSDPRule("fsdp", 1024, FSDPRule::Dimension::kLargestPowerOfTwo)});
  const int line = __LINE__ - 1;
  EXPECT_TRUE(contains(a.log, "sharding rule 1 of 1: FSDPRule('fsdp', min_fsdp_size=1024, "
                              "largest_power_of_two) at " + here(line)))
      << joined(a.log);
  EXPECT_TRUE(contains(a.log, "fsdp: 'w' f32[1026,1027]: replicated (dimension 0 (size 1026, "
                              "largest power-of-two divisor 2, does not divide by fsdp=4; Scalax "
                              "would split it unevenly)"))
      << joined(a.log);
  const Applied b = one_param({1536, 1024}, "fsdp=4",
                              {FSDPRule("fsdp", 1024, FSDPRule::Dimension::kLargestPowerOfTwo)});
  EXPECT_TRUE(contains(b.log, "fsdp: 'w' f32[1536,1024]: dimension 1 (size 1024, largest "
                              "power-of-two divisor 1024, divisible by fsdp=4)"))
      << joined(b.log);
}

TEST(FSDPRule, LargestDivisibleDimensionTiesToTheLowerIndex) {
  EXPECT_EQ(fsdp4({8, 512, 512}), R"([{}, {"fsdp"}, {}])");
  EXPECT_EQ(fsdp4({8, 256, 512}), R"([{}, {}, {"fsdp"}])");
  EXPECT_EQ(fsdp4({1023, 1025, 12}), R"([{}, {}, {"fsdp"}])");
  EXPECT_EQ(fsdp4({1023, 1025}), "[{}, {}]");  // nothing divides: left as it is
}

TEST(FSDPRule, ThresholdCountsGlobalElements) {
  EXPECT_EQ(fsdp4({32, 32}), R"([{"fsdp"}, {}])");  // exactly 1024: sharded
  EXPECT_EQ(fsdp4({31, 32}), "[{}, {}]");
  EXPECT_EQ(one_param({16, 16}, "fsdp=4", {FSDPRule("fsdp", 0)}).sharding("w"),
            R"([{"fsdp"}, {}])");
  // The default threshold is Scalax's 2^20.
  EXPECT_EQ(one_param({1024, 1023}, "fsdp=4", {FSDPRule()}).sharding("w"), "[{}, {}]");
  EXPECT_EQ(one_param({1024, 1024}, "fsdp=4", {FSDPRule()}).sharding("w"), R"([{"fsdp"}, {}])");
}

// The divisibility guarantee over many random shapes: when some dimension
// divides by the axis, exactly the largest such (lowest index among equals)
// takes the axis; otherwise the tensor is unchanged. Checked against a direct
// restatement of the rule on axis sizes 4 and 3.
TEST(FSDPRule, RandomShapesChooseTheLargestDivisibleDimension) {
  std::mt19937 rng(20240611);
  const std::vector<int64_t> sizes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 25, 30, 32, 48, 64};
  for (int axis : {4, 3}) {
    const std::string mesh = "fsdp=" + std::to_string(axis);
    for (int trial = 0; trial < 300; ++trial) {
      ir::Shape shape(1 + rng() % 4);
      for (auto& d : shape) d = sizes[rng() % sizes.size()];
      const int64_t min_size = int64_t{1} << (rng() % 12);
      SCOPED_TRACE(ir::shape_str(shape) + " on " + mesh + ", min_fsdp_size " +
                   std::to_string(min_size));
      const Applied a = one_param(shape, mesh, {FSDPRule("fsdp", min_size)});
      const ir::Sharding& s = *a.g.find("w", Op::kParameter)->sharding;
      int want = -1;
      if (ir::num_elements(shape) >= min_size) {
        for (size_t d = 0; d < shape.size(); ++d)
          if (shape[d] % axis == 0 && (want < 0 || shape[d] > shape[want]))
            want = static_cast<int>(d);
      }
      ir::Sharding expected = ir::Sharding::replicated(shape.size());
      if (want >= 0) expected.dims[want] = {"fsdp"};
      EXPECT_EQ(s, expected) << s.str();
      for (size_t d = 0; d < shape.size(); ++d) {
        if (s.dims[d].empty()) continue;
        EXPECT_EQ(shape[d] % axis, 0) << "dimension " << d;
        for (size_t e = 0; e < shape.size(); ++e) {
          if (shape[e] % axis != 0) continue;
          EXPECT_TRUE(shape[e] < shape[d] || (shape[e] == shape[d] && e >= d)) << e;
        }
      }
      EXPECT_EQ(a.log.size(), 2u) << joined(a.log);  // the rule's title, the parameter's line
    }
  }
}

TEST(FSDPRule, LogLines) {
  const Applied a = applied(
      [](ProgramBuilder& b) {
        Scope mlp = b.scope() / "mlp";
        Tensor x = b.input("x", {4, 1024});
        Linear dense1(mlp / "dense1", 1024, 1024);
        Param odd = b.scope().param("odd", {1025, 1027}, lecun_normal());
        b.output("y", dense1(x));
        b.output("o", relu(odd));
      },
      "fsdp=4", {FSDPRule("fsdp", 1 << 20)});
  const int line = __LINE__ - 1;
  EXPECT_EQ(a.log.size(), 4u) << joined(a.log);
  EXPECT_TRUE(contains(
      a.log, "sharding rule 1 of 1: FSDPRule('fsdp', min_fsdp_size=1048576) at " + here(line)))
      << joined(a.log);
  EXPECT_TRUE(contains(a.log,
                       "fsdp: 'mlp/dense1/kernel' f32[1024,1024]: dimension 0 (size 1024, largest "
                       "divisible by fsdp=4)"))
      << joined(a.log);
  EXPECT_TRUE(contains(a.log,
                       "fsdp: 'mlp/dense1/bias' f32[1024]: replicated (1024 elements < "
                       "min_fsdp_size 1048576)"))
      << joined(a.log);
  EXPECT_TRUE(contains(a.log,
                       "fsdp: 'odd' f32[1025,1027]: replicated (no dimension divisible by "
                       "fsdp=4)"))
      << joined(a.log);
}

// ---- PathRule --------------------------------------------------------------

// A two-layer model with the parameter paths most rules below match against.
void mlp_with_input(ProgramBuilder& b, const P& x_spec) {
  Scope s = b.scope() / "mlp";
  Tensor x = b.input("x", {8, 16}, x_spec);
  Linear dense1(s / "dense1", 16, 32);
  Linear dense2(s / "dense2", 32, 16);
  b.output("y", dense2(relu(dense1(x))));
}
void mlp(ProgramBuilder& b) {
  mlp_with_input(b, P());
}

TEST(PathRule, FirstMatchWinsAnywhereInThePath) {
  const Applied a = applied(mlp, "fsdp=4",
                            {PathRule({{"dense1/kernel", P(None, "fsdp")},
                                       {"kernel", P("fsdp", None)},
                                       {"dense.*bias", P("fsdp")}})});
  EXPECT_EQ(a.sharding("mlp/dense1/kernel"), R"([{}, {"fsdp"}])");
  EXPECT_EQ(a.sharding("mlp/dense2/kernel"), R"([{"fsdp"}, {}])");
  EXPECT_EQ(a.sharding("mlp/dense1/bias"), R"([{"fsdp"}])");
  EXPECT_EQ(a.sharding("mlp/dense2/bias"), R"([{"fsdp"}])");
  EXPECT_TRUE(contains(
      a.log, R"(path: 'mlp/dense2/kernel' f32[32,16]: pattern 'kernel' -> [{"fsdp"}, {}])"))
      << joined(a.log);
}

TEST(PathRule, AnchorsAreHonoured) {
  const Applied a = applied(
      mlp, "fsdp=4", {PathRule({{"^kernel", P("fsdp", None)}, {"^mlp/dense2/", P("fsdp")}})});
  EXPECT_EQ(a.sharding("mlp/dense1/kernel"), "[{}, {}]");  // '^kernel' does not match
  EXPECT_EQ(a.sharding("mlp/dense2/kernel"), R"([{"fsdp"}, {}])");
  EXPECT_EQ(a.sharding("mlp/dense2/bias"), R"([{"fsdp"}])");
}

// P() replicates whatever the rank; a shorter spec leaves the trailing
// dimensions unsharded, as in JAX.
TEST(PathRule, ShortSpecsPadWithNone) {
  const Applied a = applied(mlp, "fsdp=4", {PathRule({{"dense1", P("fsdp")}, {"dense2", P()}})});
  EXPECT_EQ(a.sharding("mlp/dense1/kernel"), R"([{"fsdp"}, {}])");
  EXPECT_EQ(a.sharding("mlp/dense2/kernel"), "[{}, {}]");
}

TEST(PathRule, ScalarsAreAlwaysReplicated) {
  const ShardingRules rules = {PathRule({{".*", P("fsdp")}}, /*strict=*/true)};
  const Applied a = one_param({}, "fsdp=4", rules, std::nullopt, "step");
  EXPECT_EQ(a.sharding("step"), "[]");
  EXPECT_TRUE(contains(a.log, "path: 'step' f32[]: scalar, replicated")) << joined(a.log);
}

TEST(PathRule, MatchReplacesTheInModelAnnotation) {
  const ShardingRules rules = {PathRule({{"w", P("model", None)}})};
  EXPECT_EQ(one_param({8, 8}, "model=2", rules, P(None, "model")).sharding("w"),
            R"([{"model"}, {}])");
}

// Unmatched, a non-strict rule keeps the in-model layout (replicated, and
// fixed, when there is none).
TEST(PathRule, NonStrictUnmatchedKeepsItsAnnotation) {
  const ShardingRules rules = {PathRule({{"kernel", P("model", None)}})};
  const Applied a = one_param({8, 8}, "model=2", rules, P(None, "model"), "encoder/w");
  EXPECT_EQ(a.sharding("encoder/w"), R"([{}, {"model"}])");
  EXPECT_TRUE(
      contains(a.log, R"(path: 'encoder/w' f32[8,8]: no pattern matches, keeps [{}, {"model"}])"))
      << joined(a.log);
  EXPECT_EQ(one_param({8, 8}, "model=2", rules, std::nullopt, "encoder/w").sharding("encoder/w"),
            "[{}, {}]");
}

TEST(PathRule, StrictUnmatchedIsAnErrorAtTheRule) {
  const int line = __LINE__ + 1;
  const PathRule rule({{"dense.*kernel", P("fsdp", None)}, {"bias", P()}}, /*strict=*/true);
  int param_line = 0;
  const std::string msg = error_at(line, [&] {
    applied(
        [&](ProgramBuilder& b) {
          param_line = __LINE__ + 1;
          Param w = (b.scope() / "encoder").param("w", {4, 4}, lecun_normal());
          b.output("y", relu(w));
        },
        "fsdp=4", {rule});
  });
  EXPECT_EQ(msg, here(line) +
                     ": error: no sharding rule matches parameter 'encoder/w' f32[4,4] "
                     "(strict PathRule at " +
                     here(line) +
                     " with patterns 'dense.*kernel', 'bias'); the parameter is "
                     "created at " +
                     here(param_line) +
                     ". Add a pattern that matches its path, or make the PathRule non-strict to "
                     "keep its in-model layout");
}

TEST(PathRule, BadRegexIsAnErrorAtTheRule) {
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [] { PathRule({{"dense(", P()}}); });
  EXPECT_NE(msg.find("PathRule pattern 'dense(' is not a valid regular expression"),
            std::string::npos)
      << msg;
}

// ---- Rule errors -----------------------------------------------------------

TEST(RuleErrors, SpecThatDoesNotDivideIsAnErrorAtTheRule) {
  const int line = __LINE__ + 1;
  const ShardingRules rules = {PathRule({{"kernel", P("fsdp", None)}})};
  const std::string msg = error_at(line, [&] {
    applied(
        [](ProgramBuilder& b) {
          Linear dense(b.scope() / "dense", 1025, 1024, {.use_bias = false});
          b.output("y", dense(b.input("x", {2, 1025})));
        },
        "fsdp=4", rules);
  });
  EXPECT_EQ(msg.substr(0, msg.find("; the parameter is created at ")),
            here(line) +
                ": error: PathRule pattern 'kernel' gives P('fsdp', None) for parameter "
                "'dense/kernel' f32[1025,1024]: dimension 0 (size 1025) does not divide "
                "by 'fsdp'=4");
  EXPECT_NE(msg.find("; the parameter is created at " + std::string(kThisFile) + ":"),
            std::string::npos)
      << msg;
}

TEST(RuleErrors, SpecOverSeveralAxesThatDoesNotDivide) {
  const int line = __LINE__ + 1;
  const ShardingRules rules = {PathRule({{"w", P(axes("fsdp", "model"), None)}})};
  const std::string msg = error_at(line, [&] { one_param({12, 8}, "fsdp=4,model=2", rules); });
  EXPECT_NE(msg.find("dimension 0 (size 12) does not divide by 'fsdp'=4 x 'model'=2 (8 blocks)"),
            std::string::npos)
      << msg;
}

TEST(RuleErrors, SpecLongerThanTheTensor) {
  const int line = __LINE__ + 1;
  const ShardingRules rules = {PathRule({{"w", P("fsdp", None, None)}})};
  const std::string msg = error_at(line, [&] { one_param({8, 8}, "fsdp=4", rules); });
  EXPECT_NE(msg.find("PathRule pattern 'w' gives P('fsdp', None, None) for parameter 'w' "
                     "f32[8,8]: the spec has 3 entries but the parameter has rank 2"),
            std::string::npos)
      << msg;
}

TEST(RuleErrors, SpecUsingAnAxisTwice) {
  const int line = __LINE__ + 1;
  const ShardingRules rules = {PathRule({{"w", P("fsdp", "fsdp")}})};
  const std::string msg = error_at(line, [&] { one_param({8, 8}, "fsdp=4", rules); });
  EXPECT_NE(msg.find("mesh axis 'fsdp' is used twice"), std::string::npos) << msg;
}

// ---- Combination with in-model annotations and other rules -----------------

TEST(Combination, FSDPAddsItsAxisToTheInModelAnnotation) {
  const Applied a =
      one_param({1024, 1024}, "fsdp=4,model=2", {FSDPRule("fsdp", 1024)}, P(None, "model"));
  EXPECT_EQ(a.sharding("w"), R"([{"fsdp"}, {"model"}])");
  EXPECT_TRUE(contains(a.log,
                       "fsdp: 'w' f32[1024,1024]: dimension 0 (size 1024, largest "
                       "unsharded divisible by fsdp=4)"))
      << joined(a.log);
  // The annotated dimension is not a candidate, even when it is the larger.
  EXPECT_EQ(one_param({512, 2048}, "fsdp=4,model=2", {FSDPRule("fsdp", 1024)}, P(None, "model"))
                .sharding("w"),
            R"([{"fsdp"}, {"model"}])");
  // Already on the axis: unchanged.
  EXPECT_EQ(
      one_param({512, 2048}, "fsdp=4", {FSDPRule("fsdp", 1024)}, P("fsdp", None)).sharding("w"),
      R"([{"fsdp"}, {}])");
}

// Logical names resolve first; the rules start from the result.
TEST(Combination, FSDPAfterLogicalNames) {
  const Applied a = applied(
      [](ProgramBuilder& b) {
        b.set_logical_rules({{"embed", "fsdp"}, {"mlp", "model"}});
        Param w = b.scope().param("w", {1024, 4096},
                                  with_partitioning(lecun_normal(), P("embed", "mlp")));
        b.output("y", relu(w));
      },
      "model=2", {FSDPRule("fsdp", 1024)});
  // ('embed', 'fsdp') is skipped on this mesh and so is the FSDPRule.
  EXPECT_EQ(a.sharding("w"), R"([{}, {"model"}])");
}

TEST(Combination, ReplicatedOverridesTheAnnotation) {
  EXPECT_EQ(one_param({8, 8}, "model=2", {Replicated()}, P(None, "model")).sharding("w"),
            "[{}, {}]");
  // Pure FSDP, whatever the model says about tensor parallelism.
  EXPECT_EQ(one_param({1024, 1024}, "fsdp=4,model=2", {Replicated(), FSDPRule("fsdp", 1024)},
                      P(None, "model"))
                .sharding("w"),
            R"([{"fsdp"}, {}])");
}

// Rules apply in order, each to the previous one's result.
TEST(Combination, RulesApplyInOrder) {
  const ShardingRules tp_then_fsdp = {PathRule({{"w", P(None, "model")}}), FSDPRule("fsdp", 1024)};
  EXPECT_EQ(one_param({1024, 1024}, "fsdp=4,model=2", tp_then_fsdp).sharding("w"),
            R"([{"fsdp"}, {"model"}])");
  // A PathRule after the FSDPRule replaces its choice.
  const ShardingRules fsdp_then_tp = {FSDPRule("fsdp", 1024), PathRule({{"w", P(None, "model")}})};
  EXPECT_EQ(one_param({1024, 1024}, "fsdp=4,model=2", fsdp_then_tp).sharding("w"),
            R"([{}, {"model"}])");
}

TEST(Combination, RuleNamingAnAbsentAxisIsInactive) {
  const int line = __LINE__ + 1;
  const ShardingRules rules = {FSDPRule("fsdp", 1024)};
  const Applied a = one_param({1024, 1024}, "data=8", rules, P(None, None));
  EXPECT_EQ(a.sharding("w"), "[{}, {}]");
  EXPECT_EQ(joined(a.log), "sharding rule 1 of 1: FSDPRule('fsdp', min_fsdp_size=1024) at " +
                               here(line) +
                               R"(: inactive, the mesh <["data"=8]> has no axis 'fsdp')" + "\n");
  // A PathRule naming 'model' anywhere is inactive as a whole on a mesh without it.
  const ShardingRules tp = {PathRule({{"w", P("fsdp", None)}, {"b", P(None, "model")}})};
  EXPECT_EQ(one_param({8, 8}, "fsdp=4", tp, P(None, None)).sharding("w"), "[{}, {}]");
}

// One rule set, three meshes: DP, FSDP, FSDP x TP, with no change to the model.
TEST(Combination, OneRuleSetServesSeveralMeshes) {
  const ShardingRules rules = {
      PathRule({{"dense1/kernel", P(None, "model")}, {"dense2/kernel", P("model", None)}}),
      FSDPRule("fsdp", 256)};
  struct Case {
    std::string mesh, kernel1, kernel2, bias1;
  };
  for (const Case& c : {
           Case{"data=8", "[{}, {}]", "[{}, {}]", "[{}]"},
           Case{"fsdp=8", R"([{}, {"fsdp"}])", R"([{"fsdp"}, {}])", "[{}]"},
           Case{"fsdp=4,model=2", R"([{"fsdp"}, {"model"}])", R"([{"model"}, {"fsdp"}])", "[{}]"},
       }) {
    SCOPED_TRACE(c.mesh);
    const Applied a = applied(mlp, c.mesh, rules);
    EXPECT_EQ(a.sharding("mlp/dense1/kernel"), c.kernel1);  // f32[16,32]
    EXPECT_EQ(a.sharding("mlp/dense2/kernel"), c.kernel2);  // f32[32,16]
    EXPECT_EQ(a.sharding("mlp/dense1/bias"), c.bias1);      // 32 elements < 256
  }
}

TEST(Combination, LogicalRulesToAbsentAxesAreSkipped) {
  const auto model = [](ProgramBuilder& b) {
    b.set_logical_rules({{"embed", "fsdp"}, {"hidden", "model"}, {"batch", "data"}});
    Tensor x = b.input("x", {8, 16}, P("batch", None));
    Param w =
        b.scope().param("w", {16, 32}, with_partitioning(lecun_normal(), P("embed", "hidden")));
    b.output("y", matmul(x, w));
  };
  EXPECT_EQ(applied(model, "model=2", {}).sharding("w"), R"([{}, {"model"}])");
  EXPECT_EQ(applied(model, "fsdp=4", {}).sharding("w"), R"([{"fsdp"}, {}])");
  EXPECT_EQ(applied(model, "data=2,fsdp=2,model=2", {}).sharding("w"), R"([{"fsdp"}, {"model"}])");
  const Lowered l = lower(trace("logical", model), Mesh::parse("model=2"));
  EXPECT_EQ(l.global.find("x", Op::kInput)->sharding->str(), "[{}, {}]");
  EXPECT_TRUE(contains(
      l.log,
      R"(logical rule ('embed', 'fsdp') skipped: the mesh <["model"=2]> has no axis 'fsdp')"))
      << joined(l.log);
}

// ---- Pass contract ----------------------------------------------------------

// No rules: the pass changes nothing; unannotated parameters stay free for
// propagation to decide.
TEST(ApplyShardingRules, NoRulesLeavesParametersAsTheyAre) {
  const Applied a = applied(mlp, "fsdp=4", {});
  EXPECT_EQ(a.sharding("mlp/dense1/kernel"), "<none>");
  EXPECT_TRUE(a.log.empty()) << joined(a.log);
}

// With rules, every parameter is fixed, even where no rule shards it.
TEST(ApplyShardingRules, WithRulesEveryParameterIsFixed) {
  const Applied a = applied(mlp, "fsdp=4", {FSDPRule("fsdp", 512)});
  for (const ir::Node& n : a.g.nodes) {
    if (n.op != Op::kParameter) continue;
    EXPECT_TRUE(n.fixed) << n.name;
    EXPECT_TRUE(n.sharding.has_value()) << n.name;
  }
  EXPECT_EQ(a.sharding("mlp/dense1/kernel"), R"([{}, {"fsdp"}])");  // 512 elements
  EXPECT_EQ(a.sharding("mlp/dense1/bias"), "[{}]");
  EXPECT_FALSE(a.g.find("x", Op::kInput)->sharding->uses("fsdp"));  // inputs untouched
}

// The program's rules (ProgramBuilder::set_sharding_rules) apply in lower();
// PipelineOptions::sharding_rules replaces them.
TEST(ApplyShardingRules, ProgramRulesAndPipelineOverride) {
  const ir::Graph g = trace("program_rules", [](ProgramBuilder& b) {
    b.set_sharding_rules({FSDPRule("fsdp", 64)});
    mlp(b);
  });
  const Lowered l = lower(g, Mesh::parse("fsdp=4"));
  EXPECT_EQ(l.global.find("mlp/dense1/kernel", Op::kParameter)->sharding->str(),
            R"([{}, {"fsdp"}])");
  EXPECT_TRUE(contains(l.log,
                       "fsdp: 'mlp/dense1/kernel' f32[16,32]: dimension 1 (size 32, largest "
                       "divisible by fsdp=4)"))
      << joined(l.log);
  PipelineOptions options;
  options.sharding_rules = ShardingRules{Replicated()};
  const Lowered r = lower(g, Mesh::parse("fsdp=4"), options);
  EXPECT_EQ(r.global.find("mlp/dense1/kernel", Op::kParameter)->sharding->str(), "[{}, {}]");
}

// Optimizer state (layout_of) is not matched by rules, whatever its own
// annotation or path, and ends with exactly its parameter's layout.
TEST(ApplyShardingRules, OptimizerStateTakesItsParameterLayout) {
  const ir::Graph g = trace("state", [](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 64}, P("data", None));
    Param w = b.scope().param("w", {64, 32}, with_partitioning(lecun_normal(), P(None, "model")));
    // A state parameter whose own annotation and path would give it another layout.
    Param mu =
        b.scope().param("opt/mu/w_kernel", {64, 32}, with_partitioning(zeros(), P("model", None)));
    b.graph()[mu.id()].layout_of = w.id();
    b.output("y", matmul(x, w));
    b.output("mu", relu(mu));
  });
  const ShardingRules rules = {PathRule({{"kernel", P(None, "data")}}), FSDPRule("data", 64)};
  PipelineOptions options;
  options.sharding_rules = rules;
  const Lowered l = lower(g, Mesh::parse("data=2,model=2"), options);
  const ir::Node* w = l.global.find("w", Op::kParameter);
  const ir::Node* mu = l.global.find("opt/mu/w_kernel", Op::kParameter);
  EXPECT_EQ(w->sharding->str(), R"([{"data"}, {"model"}])");
  EXPECT_EQ(*mu->sharding, *w->sharding);
  EXPECT_TRUE(mu->fixed);
  EXPECT_TRUE(contains(
      l.log, R"(state: 'opt/mu/w_kernel' f32[64,32]: laid out like 'w' [{"data"}, {"model"}])"))
      << joined(l.log);
  // Without rules too: the state's own annotation does not win.
  const Lowered n = lower(g, Mesh::parse("data=2,model=2"));
  EXPECT_EQ(*n.global.find("opt/mu/w_kernel", Op::kParameter)->sharding,
            *n.global.find("w", Op::kParameter)->sharding);
  EXPECT_EQ(n.global.find("w", Op::kParameter)->sharding->str(), R"([{}, {"model"}])");
  // And in the per-device program the state's block is the parameter's.
  const ir::Node* local_w = l.partitioned.find("w", Op::kParameter);
  const ir::Node* local_mu = l.partitioned.find("opt/mu/w_kernel", Op::kParameter);
  EXPECT_EQ(local_mu->shape, local_w->shape);
  EXPECT_EQ(*local_mu->sharding, *local_w->sharding);
}

// The same model under one rule set on three meshes computes the oracle's
// values. Tolerance: fp32 against fp64 over 16- and 32-term dot products,
// relative to the output's largest magnitude; 1e-5 leaves a wide margin.
TEST(ApplyShardingRules, ShardedByRulesMatchesTheOracle) {
  const ir::Graph g = trace("mlp", [](ProgramBuilder& b) {
    // The batch goes to whichever of 'data' and 'fsdp' the mesh has.
    b.set_logical_rules({{"batch", "data"}, {"batch", "fsdp"}});
    b.set_sharding_rules(
        {PathRule({{"dense1/kernel", P(None, "model")}, {"dense2/kernel", P("model", None)}}),
         FSDPRule("fsdp", 256)});
    mlp_with_input(b, P("batch", None));
  });
  std::vector<double> x(8 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
  const HostValues in = {{"x", x}};
  const HostValues want = interpret(g, in, 5);
  for (const char* mesh : {"data=8", "fsdp=8", "fsdp=4,model=2"}) {
    SCOPED_TRACE(mesh);
    const Lowered l = lower(g, Mesh::parse(mesh));
    EXPECT_TRUE(l.global.find("x", Op::kInput)->sharding->dims[0].size() == 1);
    const HostValues got = execute_partitioned(l.partitioned, in, 5).outputs;
    const std::vector<double>& w = want.at("y");
    const std::vector<double>& y = got.at("y");
    ASSERT_EQ(y.size(), w.size());
    double scale = 0, err = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      scale = std::max(scale, std::abs(w[i]));
      err = std::max(err, std::abs(y[i] - w[i]));
    }
    EXPECT_LE(err, 1e-5 * scale) << "max abs error " << err << " of " << scale;
  }
}

}  // namespace
}  // namespace sharc
