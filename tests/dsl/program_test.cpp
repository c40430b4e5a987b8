// ProgramBuilder: what the declarations of a program put into the traced IR.
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen/pipeline.h"
#include "dsl/sharc.h"

namespace sharc {
namespace {

// input()'s default P() means "replicated", whatever the input's rank. It used
// to be kept as a rank-0 spec, which lower() rejected for every input of rank
// >= 1 ("spec P() has 0 entries but input 'x' f32[8,16] has rank 2").
TEST(ProgramBuilder, DefaultInputSpecReplicatesEveryDimension) {
  const ir::Graph g = trace("p", [](ProgramBuilder& b) {
    b.output("y", relu(b.input("x", {8, 16})));
  });
  const ir::Node* x = g.find("x", ir::Op::kInput);
  ASSERT_NE(x, nullptr);
  ASSERT_TRUE(x->spec.has_value());
  EXPECT_EQ(x->spec->str(), "P(None, None)");
  const Lowered l = lower(g, Mesh::parse("data=2,model=4", 8));
  const ir::Node* gx = l.global.find("x", ir::Op::kInput);
  ASSERT_NE(gx, nullptr);
  EXPECT_TRUE(gx->fixed);
  EXPECT_EQ(*gx->sharding, ir::Sharding::replicated(2));
}

TEST(ProgramBuilder, ExplicitSpecIsKept) {
  const ir::Graph g = trace("p", [](ProgramBuilder& b) {
    b.output("y", relu(b.input("x", {8, 16}, P("data", None))));
  });
  EXPECT_EQ(g.find("x", ir::Op::kInput)->spec->str(), "P('data', None)");
}

// Generation-time options (ProgramBuilder::option): the value given, else the
// default; one model file traced at two depths.
void stack(ProgramBuilder& b) {
  Tensor h = b.input("x", {4, 8});
  const int64_t layers = b.option("layers", 2);
  for (int64_t l = 0; l < layers; ++l) h = relu(h);
  b.output("y", h);
}

int count(const ir::Graph& g, ir::Op op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

TEST(ProgramOptions, GivenValueOrDefault) {
  EXPECT_EQ(count(trace("p", stack), ir::Op::kRelu), 2);
  EXPECT_EQ(count(trace("p", stack, {{"layers", "5"}}), ir::Op::kRelu), 5);
  EXPECT_EQ(count(trace("p", stack, parse_program_options("layers=3")), ir::Op::kRelu), 3);
}

TEST(ProgramOptions, AnOptionTheProgramDoesNotReadIsAnError) {
  try {
    trace("p", stack, {{"layres", "12"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("option 'layres' is given, but program \"p\" does not read it (it reads: layers)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ProgramOptions, NotAnIntegerIsAnErrorAtTheModelLine) {
  try {
    trace("p", stack, {{"layers", "twelve"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("option 'layers' is 'twelve', which is not an integer"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("tests/dsl/program_test.cpp:"), std::string::npos) << e.what();
  }
}

TEST(ProgramOptions, ParseErrors) {
  EXPECT_EQ(parse_program_options("").size(), 0u);
  EXPECT_EQ(parse_program_options("a=1,b=2").at("b"), "2");
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"layers", "option 'layers' is not name=value (options look like layers=12,heads=8)"},
           {"=3", "option '=3' is not name=value"},
           {"a=1,a=2", "option 'a' is given twice"}}) {
    try {
      parse_program_options(text);
      ADD_FAILURE() << "no error for '" << text << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace sharc
