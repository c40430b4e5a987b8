// resolve_logical_axes alone, on traced programs: logical names resolve with
// Flax's logical_to_mesh_axes semantics (rules in order of precedence; a rule
// gives its mesh axis only while the tensor does not use it yet; a rule to
// None replicates; a rule to an axis the mesh lacks is skipped), mesh axis
// names without rules pass through, a node's own rules replace the program's,
// outputs with a spec are resolved, and every annotated node (and only those)
// comes out `fixed`.
#include "codegen/passes/resolve_logical_axes.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "dsl/sharc.h"
#include "tests/common/expect_error.h"

namespace sharc {
namespace {

using ir::Graph;
using ir::Op;

const Mesh& mesh_abc() {
  static const Mesh mesh = Mesh::parse("a=2,b=2,c=2", 8);
  return mesh;
}

// Traces fn, sets the mesh as lower() does, and runs the pass alone.
Graph resolved(const ProgramFn& fn, const std::optional<LogicalRules>& rules = std::nullopt) {
  Graph g = trace("resolve", fn);
  g.mesh = mesh_abc();
  return resolve_logical_axes(std::move(g), rules);
}

// The resolved sharding of input `name` with spec `spec` under `rules`.
std::string input_sharding(const P& spec, const std::optional<LogicalRules>& rules,
                           ir::Shape shape = {8, 8}) {
  const Graph g =
      resolved([&](ProgramBuilder& b) { b.output("y", relu(b.input("x", shape, spec))); }, rules);
  const ir::Node* x = g.find("x", Op::kInput);
  if (!x || !x->sharding) return "<unresolved>";
  return x->sharding->str();
}

TEST(ResolveLogicalAxes, RepeatedNameTakesTheRulesInOrder) {
  const LogicalRules rules = {{"x", "a"}, {"x", "b"}};
  EXPECT_EQ(input_sharding(P("x", "x"), rules), R"([{"a"}, {"b"}])");
  EXPECT_EQ(input_sharding(P("x", None), rules), R"([{"a"}, {}])");
  const LogicalRules reversed = {{"x", "b"}, {"x", "a"}};
  EXPECT_EQ(input_sharding(P("x", "x"), reversed), R"([{"b"}, {"a"}])");
  EXPECT_EQ(input_sharding(P(None, "x"), reversed), R"([{}, {"b"}])");
}

TEST(ResolveLogicalAxes, RepeatedNameInOneDimension) {
  const LogicalRules rules = {{"x", "a"}, {"x", "b"}};
  EXPECT_EQ(input_sharding(P(axes("x", "x"), None), rules), R"([{"a", "b"}, {}])");
}

// The rules' order is their precedence across the whole tensor, not per
// dimension: 'features' -> 'a' comes first, so 'batch' cannot have 'a' even
// though its dimension comes first, and falls back to its next rule.
TEST(ResolveLogicalAxes, EarlierRuleWinsAcrossDimensions) {
  const LogicalRules rules = {{"features", "a"}, {"batch", "a"}, {"batch", "b"}};
  EXPECT_EQ(input_sharding(P("batch", "features"), rules), R"([{"b"}, {"a"}])");
}

// The example of flax.linen.logical_to_mesh_axes' docstring, with None for
// its rule-less 'length' (which Flax replicates and sharc rejects).
TEST(ResolveLogicalAxes, FlaxDocstringExample) {
  const LogicalRules rules = {{"batch", "a"}, {"features", "a"}, {"heads", "b"}, {"batch", "c"}};
  EXPECT_EQ(input_sharding(P("batch", None, "heads", "features"), rules, {8, 8, 8, 8}),
            R"([{"a"}, {}, {"b"}, {}])");
}

TEST(ResolveLogicalAxes, NameWhoseRulesAreAllTakenIsReplicated) {
  const LogicalRules rules = {{"x", "a"}};
  EXPECT_EQ(input_sharding(P("x", "x"), rules), R"([{"a"}, {}])");
}

TEST(ResolveLogicalAxes, RuleToNoneReplicates) {
  const LogicalRules rules = {{"embed", std::nullopt}, {"hidden", "b"}};
  EXPECT_EQ(input_sharding(P("embed", "hidden"), rules), R"([{}, {"b"}])");
}

// A rule to None is a decision, not a miss: later rules for the name do not apply.
TEST(ResolveLogicalAxes, RuleToNoneShadowsLaterRules) {
  const LogicalRules rules = {{"embed", std::nullopt}, {"embed", "a"}};
  EXPECT_EQ(input_sharding(P("embed", None), rules), R"([{}, {}])");
  EXPECT_EQ(input_sharding(P("embed", "embed"), rules), R"([{}, {}])");
}

// A rule to a mesh axis the mesh does not have is skipped, not an error (it
// used to be "sharding rule maps 'batch' to unknown mesh axis 'dp'"), so one
// rule set serves several meshes: the name's next rule applies, or it stays
// replicated. Each skipped rule is noted once in the log.
TEST(ResolveLogicalAxes, RuleToAbsentMeshAxisIsSkipped) {
  EXPECT_EQ(input_sharding(P("batch", None), LogicalRules{{"batch", "dp"}}), "[{}, {}]");
  EXPECT_EQ(input_sharding(P("batch", None), LogicalRules{{"batch", "dp"}, {"batch", "b"}}),
            R"([{"b"}, {}])");
  EXPECT_EQ(input_sharding(P("batch", "hidden"), LogicalRules{{"batch", "dp"}, {"hidden", "c"}}),
            R"([{}, {"c"}])");
  Graph g = trace("skip", [](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8}, P("batch", None));
    b.output("y", with_sharding_constraint(relu(x), P("batch", None)));
  });
  g.mesh = mesh_abc();
  std::vector<std::string> log;
  g = resolve_logical_axes(std::move(g), LogicalRules{{"batch", "dp"}}, &log);
  EXPECT_EQ(g.find("x", Op::kInput)->sharding->str(), "[{}, {}]");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], R"(logical rule ('batch', 'dp') skipped: the mesh <["a"=2, "b"=2, "c"=2]> )"
                    R"(has no axis 'dp')");
}

// Skipping does not make an unknown name legal: a name with no rule at all
// must still be a mesh axis.
TEST(ResolveLogicalAxes, NameWithoutRuleIsStillAnErrorNextToSkippedRules) {
  try {
    input_sharding(P("batch", "embed"), LogicalRules{{"batch", "dp"}});
    ADD_FAILURE() << "'embed' resolved though no rule names it and it is not a mesh axis";
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    EXPECT_NE(std::string(e.what()).find("logical axis name 'embed' in P('batch', 'embed') for "
                                         "input 'x' f32[8,8] has no rule in sharding_rules "
                                         "(('batch', 'dp')) and is not a mesh axis"),
              std::string::npos)
        << e.what();
  }
}

TEST(ResolveLogicalAxes, MeshAxisWithoutRulesPassesThrough) {
  EXPECT_EQ(input_sharding(P("b", "a"), std::nullopt), R"([{"b"}, {"a"}])");
  const LogicalRules rules = {{"batch", "a"}};
  EXPECT_EQ(input_sharding(P("batch", "c"), rules), R"([{"a"}, {"c"}])");
  EXPECT_EQ(input_sharding(P(axes("c", "batch"), None), rules), R"([{"c", "a"}, {}])");
}

// An axis the spec names directly is taken, whichever dimension comes first.
TEST(ResolveLogicalAxes, DirectlyNamedAxisIsNotFreeForRules) {
  const LogicalRules rules = {{"x", "a"}, {"x", "b"}};
  EXPECT_EQ(input_sharding(P("x", "a"), rules), R"([{"b"}, {"a"}])");
  EXPECT_EQ(input_sharding(P("a", "x"), rules), R"([{"a"}, {"b"}])");
}

TEST(ResolveLogicalAxes, NodeRulesOverrideProgramRules) {
  const LogicalRules program = {{"hidden", "a"}, {"embed", std::nullopt}};
  const LogicalRules own = {{"hidden", "b"}};
  const Graph g = resolved(
      [&](ProgramBuilder& b) {
        Tensor x = b.input("x", {8, 8}, P(None, "hidden"));
        Param w =
            b.scope().param("w", {8, 8}, with_metadata(lecun_normal(), P("hidden", None), own));
        Param v = b.scope().param("v", {8, 8}, with_metadata(lecun_normal(), P("embed", "hidden")));
        b.output("y", matmul(matmul(x, w), v));
      },
      program);
  EXPECT_EQ(g.find("x", Op::kInput)->sharding->str(), R"([{}, {"a"}])");
  EXPECT_EQ(g.find("w", Op::kParameter)->sharding->str(), R"([{"b"}, {}])");
  EXPECT_EQ(g.find("v", Op::kParameter)->sharding->str(), R"([{}, {"a"}])");
}

// A node's rules replace the program's entirely; they are not merged.
TEST(ResolveLogicalAxes, NodeRulesAreNotMergedWithProgramRules) {
  const LogicalRules program = {{"embed", std::nullopt}};
  const LogicalRules own = {{"hidden", "b"}};
  try {
    resolved(
        [&](ProgramBuilder& b) {
          Tensor x = b.input("x", {8, 8});
          Param w = b.scope().param("w", {8, 8},
                                    with_metadata(lecun_normal(), P("hidden", "embed"), own));
          b.output("y", matmul(x, w));
        },
        program);
    ADD_FAILURE() << "'embed' resolved though w's own rules lack it";
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    EXPECT_NE(std::string(e.what()).find("logical axis name 'embed' in P('hidden', 'embed') for "
                                         "parameter 'w' f32[8,8] has no rule in sharding_rules "
                                         "(('hidden', 'b'))"),
              std::string::npos)
        << e.what();
  }
}

TEST(ResolveLogicalAxes, ConstraintsUseProgramRules) {
  const LogicalRules rules = {{"batch", "a"}, {"hidden", "c"}};
  const Graph g = resolved(
      [](ProgramBuilder& b) {
        Tensor h = relu(b.input("x", {8, 8}));
        b.output("y", with_sharding_constraint(h, P("batch", "hidden")));
      },
      rules);
  const ir::Node& c = g.nodes[2];
  ASSERT_EQ(c.op, Op::kShardingConstraint);
  ASSERT_TRUE(c.sharding.has_value());
  EXPECT_EQ(c.sharding->str(), R"([{"a"}, {"c"}])");
}

TEST(ResolveLogicalAxes, OutputsWithASpecAreResolved) {
  const LogicalRules rules = {{"batch", "b"}};
  const Graph g = resolved(
      [](ProgramBuilder& b) {
        Tensor h = relu(b.input("x", {8, 8}));
        b.output("pinned", h, P("batch", "a"));
        b.output("replicated", h, P(None, None));
        b.output("free", h);
      },
      rules);
  ASSERT_EQ(g.outputs.size(), 3u);
  ASSERT_TRUE(g.outputs[0].sharding.has_value());
  EXPECT_EQ(g.outputs[0].sharding->str(), R"([{"b"}, {"a"}])");
  ASSERT_TRUE(g.outputs[1].sharding.has_value());
  EXPECT_EQ(g.outputs[1].sharding->str(), "[{}, {}]");
  EXPECT_FALSE(g.outputs[2].sharding.has_value()) << "propagation chooses it, not this pass";
  // The output's spec does not annotate the value it names.
  EXPECT_FALSE(g.nodes[g.outputs[0].value].fixed);
}

TEST(ResolveLogicalAxes, AnnotatedNodesAndOnlyThoseAreFixed) {
  const Graph g = resolved([](ProgramBuilder& b) {
    Tensor x = b.input("x", {8, 8}, P("a", None));
    Tensor r = b.input("r", {8, 8});  // default spec: replicated, still pinned
    Param w = b.scope().param("w", {8, 8}, with_partitioning(lecun_normal(), P(None, "b")));
    Param u = b.scope().param("u", {8, 8}, lecun_normal());  // no layout: propagation decides
    Tensor h = with_sharding_constraint(relu(matmul(x + r, w)), P("a", "b"));
    b.output("y", matmul(h, u));
  });
  SCOPED_TRACE(ir::to_string(g));
  for (const ir::Node& n : g.nodes) {
    const bool annotated = n.op == Op::kInput || n.op == Op::kShardingConstraint ||
                           (n.op == Op::kParameter && n.name == "w");
    EXPECT_EQ(n.fixed, annotated) << ir::op_name(n.op) << " " << n.name;
    EXPECT_EQ(n.sharding.has_value(), annotated) << ir::op_name(n.op) << " " << n.name;
  }
  EXPECT_EQ(g.find("x", Op::kInput)->sharding->str(), R"([{"a"}, {}])");
  EXPECT_EQ(g.find("r", Op::kInput)->sharding->str(), "[{}, {}]");
  EXPECT_EQ(g.find("w", Op::kParameter)->sharding->str(), R"([{}, {"b"}])");
}

TEST(ResolveLogicalAxes, RuleAxisThatDoesNotDivideIsAUserError) {
  const LogicalRules rules = {{"batch", "a"}};
  try {
    input_sharding(P("batch", None), rules, {3, 8});
    ADD_FAILURE() << "3 rows split over 'a'=2 were accepted";
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    EXPECT_NE(std::string(e.what()).find("dimension 0 of input 'x' f32[3,8] has size 3, which "
                                         "does not divide by 'a'=2 (2 blocks) in P('batch', None)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sharc
