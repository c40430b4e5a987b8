// ProgramBuilder: what the declarations of a program put into the traced IR.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace sharc
