// User errors in a DSL program: every mistake is a sharc::Error whose what()
// starts with the user's file:line (the DSL call that made the mistake, made
// relative to the project root by -ffile-prefix-map) and names the tensors,
// axes and sizes involved. One test per documented check. The offending call
// always sits on the line right after `const int line = __LINE__ + 1;`.
//
// Programs are traced in the test body (a Tracer plus a ProgramBuilder, as
// trace() does) rather than in a lambda, so the line idiom stays exact. Spec
// errors are only detected by lower() (resolve_logical_axes needs the mesh),
// but they still point at the param / input / constraint call.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include <fstream>
#include <functional>
#include <string>

#include "tests/common/expect_error.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"

namespace sharc {
namespace {

// This file as the DSL records it: project-relative, no absolute path.
constexpr const char* kThisFile = "tests/dsl/errors_test.cpp";

// Runs f, which must throw sharc::Error at this file and `line`; returns what().
std::string error_at(int line, const std::function<void()>& f) {
  return sharc::testing::error_at(kThisFile, line, f);
}

// A program traced in the test body, so the line idiom stays exact.
struct Traced : sharc::testing::Traced {
  Traced() : sharc::testing::Traced("bad_program") {}
};

const Mesh& mesh_2x4() {
  static const Mesh mesh = Mesh::parse("data=2,model=4", 8);
  return mesh;
}

using ::testing::HasSubstr;

TEST(SpecErrors, UnknownMeshAxisInInputSpec) {
  Traced t;
  const int line = __LINE__ + 1;
  Tensor x = t.b.input("x", {8, 16}, P("data", "modle"));
  t.b.output("y", relu(x));
  const std::string msg = error_at(line, [&] { lower(t.graph(), mesh_2x4()); });
  EXPECT_THAT(msg, HasSubstr("unknown mesh axis 'modle' in P('data', 'modle')"));
  EXPECT_THAT(msg, HasSubstr("input 'x' f32[8,16]"));
  EXPECT_THAT(msg, HasSubstr("the mesh <[\"data\"=2, \"model\"=4]> has axes 'data', 'model'"));
}

TEST(SpecErrors, AxisUsedTwiceInParamSpec) {
  Traced t;
  Tensor x = t.b.input("x", {8, 16});
  const Initializer init = with_partitioning(lecun_normal(), P("model", "model"));
  const int line = __LINE__ + 1;
  Param w = t.b.scope().param("w", {16, 32}, init);
  t.b.output("y", matmul(x, w));
  const std::string msg = error_at(line, [&] { lower(t.graph(), mesh_2x4()); });
  EXPECT_THAT(msg, HasSubstr("mesh axis 'model' is used twice in P('model', 'model')"));
  EXPECT_THAT(msg, HasSubstr("parameter 'w' f32[16,32]"));
  EXPECT_THAT(msg, HasSubstr("at most one dimension"));
}

TEST(SpecErrors, SpecRankDiffersFromTensorRankInConstraint) {
  Traced t;
  Tensor x = t.b.input("x", {8, 16}, P("data", None));
  Tensor h = relu(x);
  const int line = __LINE__ + 1;
  Tensor c = with_sharding_constraint(h, P("data"));
  t.b.output("y", c);
  const std::string msg = error_at(line, [&] { lower(t.graph(), mesh_2x4()); });
  EXPECT_THAT(msg, HasSubstr("spec P('data') has 1 entry but"));
  // The value is named by what made it and where, never by an IR node number.
  EXPECT_THAT(msg, HasSubstr("with_sharding_constraint of relu result f32[8,16] at "
                             "tests/dsl/errors_test.cpp:" + std::to_string(line - 2) +
                             " has rank 2"));
}

TEST(SpecErrors, DimensionNotDivisibleByItsAxes) {
  Traced t;
  Tensor x = t.b.input("x", {8, 6});
  const int line = __LINE__ + 1;
  Param w = t.b.scope().param("w", {6, 16}, with_partitioning(lecun_normal(), P("model", None)));
  t.b.output("y", matmul(x, w));
  const std::string msg = error_at(line, [&] { lower(t.graph(), mesh_2x4()); });
  EXPECT_THAT(msg, HasSubstr("dimension 0 of parameter 'w' f32[6,16] has size 6, which does not "
                             "divide by 'model'=4 (4 blocks) in P('model', None)"));
}

TEST(SpecErrors, DimensionNotDivisibleBySeveralAxes) {
  Traced t;
  const int line = __LINE__ + 1;
  Tensor x = t.b.input("x", {4, 16}, P(axes("data", "model"), None));
  t.b.output("y", relu(x));
  const std::string msg = error_at(line, [&] { lower(t.graph(), mesh_2x4()); });
  EXPECT_THAT(msg, HasSubstr("dimension 0 of input 'x' f32[4,16] has size 4, which does not "
                             "divide by 'data'=2 x 'model'=4 (8 blocks)"));
}

TEST(MeshErrors, SizeDiffersFromDeviceCount) {
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [] { Mesh::parse("data=2,model=4", 6); });
  EXPECT_THAT(msg, HasSubstr("mesh <[\"data\"=2, \"model\"=4]> has 8 devices but 6 devices were "
                             "given"));
}

TEST(MeshErrors, TwoRestAxes) {
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [] { Mesh::parse("data=-1,model=-1", 8); });
  EXPECT_THAT(msg, HasSubstr("mesh axes \"data\" and \"model\" are both -1"));
  EXPECT_THAT(msg, HasSubstr("at most one axis"));
}

TEST(OpErrors, MatmulContractionMismatch) {
  Traced t;
  Tensor x = t.b.input("x", {8, 16});
  Param w = t.b.scope().param("w", {32, 4}, lecun_normal());
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { matmul(x, w); });
  EXPECT_THAT(msg, HasSubstr("matmul contraction mismatch: input 'x' f32[8,16] contracts "
                             "dimension 1 of size 16 with dimension 0 of size 32 of parameter "
                             "'w' f32[32,4]"));
}

TEST(OpErrors, IncompatibleBroadcast) {
  Traced t;
  Tensor a = t.b.input("a", {8, 16});
  Tensor b = t.b.input("b", {8, 12});
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { add(a, b); });
  EXPECT_THAT(msg, HasSubstr("incompatible broadcast: input 'a' f32[8,16] and input 'b' "
                             "f32[8,12]: dimension 1 of the result would be both 16 and 12"));
}

TEST(OpErrors, AnIgnoredLabelThatIsAClassIndex) {
  Traced t;
  Tensor logits = t.b.input("logits", {8, 10});
  Tensor labels = t.b.input("labels", {8});
  const int line = __LINE__ + 1;
  const std::string msg = error_at(line, [&] { softmax_cross_entropy(logits, labels, IgnoreLabel{3}); });
  EXPECT_THAT(msg, HasSubstr("softmax_cross_entropy: IgnoreLabel{3} is a class index of the 10 classes, so "
                             "positions of that class would be ignored; use a value that is none, such as -100"));
  const int line2 = __LINE__ + 1;
  const std::string msg2 = error_at(line2, [&] { softmax_cross_entropy(logits, labels, IgnoreLabel{NAN}); });
  EXPECT_THAT(msg2, HasSubstr("the IgnoreLabel is not a finite number"));
}

TEST(LogicalErrors, NameWithNoRuleInParamRules) {
  const LogicalRules rules = {{"batch", "data"}, {"hidden", "model"}};
  Traced t;
  Tensor x = t.b.input("x", {8, 16});
  const Initializer init = with_metadata(lecun_normal(), P("embed", "hidden"), rules);
  const int line = __LINE__ + 1;
  Param w = t.b.scope().param("w", {16, 32}, init);
  t.b.output("y", matmul(x, w));
  const std::string msg = error_at(line, [&] { lower(t.graph(), mesh_2x4()); });
  EXPECT_THAT(msg, HasSubstr("logical axis name 'embed' in P('embed', 'hidden') for parameter "
                             "'w' f32[16,32] has no rule in sharding_rules (('batch', 'data'), "
                             "('hidden', 'model'))"));
  EXPECT_THAT(msg, HasSubstr("is not a mesh axis (mesh axes: 'data', 'model')"));
}

TEST(LogicalErrors, NameWithNoRuleInProgramRules) {
  PipelineOptions options;
  options.rules = LogicalRules{{"batch", "data"}, {"embed", std::nullopt}};
  Traced t;
  const int line = __LINE__ + 1;
  Tensor x = t.b.input("x", {8, 16}, P("batch", "heads"));
  t.b.output("y", relu(x));
  const std::string msg = error_at(line, [&] { lower(t.graph(), mesh_2x4(), options); });
  EXPECT_THAT(msg, HasSubstr("logical axis name 'heads' in P('batch', 'heads') for input 'x' "
                             "f32[8,16] has no rule in sharding_rules (('batch', 'data'), "
                             "('embed', None))"));
}

// ---- clang-style display: file:line:col, the source line and a caret ------
//
// render_diagnostic is what the generator prints. The caret sits under the
// first character of the call that made the mistake (g++ records the column
// of its '(' and clang that of the callee; both show the callee).

// Throws and renders; the file is found under the source root as recorded.
template <class F>
std::string rendered(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    sharc::testing::user_message(e);
    return render_diagnostic(e, {SHARC_SOURCE_ROOT});
  }
  ADD_FAILURE() << "expected sharc::Error, nothing was thrown";
  return "";
}

// What render_diagnostic must print for an error at `line` of this file whose
// call starts at the first `call` on that line.
std::string expected_display(int line, const std::string& call, const std::string& message) {
  std::ifstream f(std::string(SHARC_SOURCE_ROOT) + "/" + kThisFile);
  std::string text;
  for (int i = 1; i <= line && std::getline(f, text); ++i) {
  }
  const size_t col = text.find(call);
  EXPECT_NE(col, std::string::npos) << "line " << line << " has no '" << call << "': " << text;
  const std::string num = std::to_string(line);
  return std::string(kThisFile) + ":" + num + ":" + std::to_string(col + 1) + ": error: " +
         message + "\n " + num + " | " + text + "\n" + std::string(num.size() + 2, ' ') + "| " +
         std::string(col, ' ') + "^\n";
}

TEST(CaretDisplay, MatmulContractionMismatch) {
  Traced t;
  Tensor x = t.b.input("x", {8, 16});
  Param w = t.b.scope().param("w", {32, 4}, lecun_normal());
  const int line = __LINE__ + 1;
  const std::string shown = rendered([&] { [[maybe_unused]] Tensor y = matmul(x, w); });
  EXPECT_EQ(shown, expected_display(line, "matmul(",
                                    "matmul contraction mismatch: input 'x' f32[8,16] contracts "
                                    "dimension 1 of size 16 with dimension 0 of size 32 of "
                                    "parameter 'w' f32[32,4]"));
}

TEST(CaretDisplay, IncompatibleBroadcastInsideAnExpression) {
  Traced t;
  Tensor a = t.b.input("a", {8, 16});
  Tensor b = t.b.input("b", {8, 12});
  const int line = __LINE__ + 1;
  const std::string shown = rendered([&] { [[maybe_unused]] Tensor y = relu(add(a, b)); });
  // The caret names the inner call, the one that failed.
  EXPECT_EQ(shown, expected_display(line, "add(",
                                    "incompatible broadcast: input 'a' f32[8,16] and input 'b' "
                                    "f32[8,12]: dimension 1 of the result would be both 16 and 12"));
}

TEST(CaretDisplay, UnknownMeshAxisAtTheParameterDeclaration) {
  Traced t;
  Tensor x = t.b.input("x", {8, 16});
  const int line = __LINE__ + 1;
  Param w = t.b.scope().param("w", {16, 16}, with_partitioning(lecun_normal(), P(None, "modle")));
  t.b.output("y", matmul(x, w));
  const std::string shown = rendered([&] { lower(t.graph(), mesh_2x4()); });
  const std::string head = expected_display(line, "param(", "");
  // Same location line and caret; the message is the spec error's.
  const std::string where = head.substr(0, head.find(": error: ") + 9);
  EXPECT_EQ(shown.substr(0, where.size()), where) << shown;
  EXPECT_THAT(shown, HasSubstr("unknown mesh axis 'modle' in P(None, 'modle') for parameter 'w'"));
  EXPECT_EQ(shown.substr(shown.find('\n')), head.substr(head.find('\n'))) << shown;
}

TEST(CaretDisplay, WithoutTheFileOnlyTheHeadline) {
  const Error e(SrcLoc("no/such/model.cpp", 12, 7), "something is wrong");
  EXPECT_EQ(render_diagnostic(e, {SHARC_SOURCE_ROOT}),
            "no/such/model.cpp:12:7: error: something is wrong\n");
  const Error unknown_column(SrcLoc("no/such/model.cpp", 12), "something is wrong");
  EXPECT_EQ(render_diagnostic(unknown_column), "no/such/model.cpp:12: error: something is wrong\n");
}

}  // namespace
}  // namespace sharc
