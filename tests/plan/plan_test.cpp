// The planner (codegen/plan.h) on the samples' programs on 8 devices: the
// axes it searches, the candidates it enumerates, its predicted step time
// against the runtime's virtual clock running each candidate (the same
// statement costs and link, with the waiting the prediction leaves out),
// its peak memory against the report's, budgets, and the table.
#include "codegen/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/report.h"
#include "dsl/program.h"

namespace sharc {
namespace {

ir::Graph traced(const std::string& program) {
  auto it = ProgramRegistry::all().find(program);
  if (it == ProgramRegistry::all().end()) throw std::runtime_error("no program " + program);
  return trace(program, it->second);
}

// Deterministic global inputs for `g`: values in [-1, 1), class indices
// (below `classes`) for inputs named labels or targets.
HostValues inputs_for(const ir::Graph& g, int classes) {
  HostValues in;
  for (const ir::Node& n : g.nodes) {
    if (n.op != ir::Op::kInput) continue;
    std::vector<double> v(static_cast<size_t>(ir::num_elements(n.shape)));
    const bool ids = n.name == "labels" || n.name == "targets" || n.name == "tokens";
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = ids ? static_cast<double>(i * 7 % classes)
                 : static_cast<double>(static_cast<int>((i * 2654435761u) % 2001) - 1000) / 1000.0;
    in[n.name] = std::move(v);
  }
  return in;
}

TEST(Plan, SearchesTheAxesTheProgramUses) {
  const PlanAxes gpt = plan_axes(traced("gpt2_train"));
  EXPECT_EQ(gpt.axes, (std::vector<std::string>{"data", "fsdp", "model"}));
  EXPECT_TRUE(gpt.required.empty());
  // DotReluDot names its mesh axes in its specs: every mesh needs both.
  const PlanAxes drd = plan_axes(traced("dot_relu_dot"));
  EXPECT_EQ(drd.axes, (std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(drd.required, (std::vector<std::string>{"data", "model"}));
  const PlanAxes pipe = plan_axes(traced("gpt2_train_pipelined"));
  EXPECT_EQ(pipe.axes, (std::vector<std::string>{"pipe", "data", "fsdp", "model"}));
  EXPECT_EQ(pipe.required, (std::vector<std::string>{"pipe"}));
}

TEST(Plan, EnumeratesEveryFactorisation) {
  EXPECT_EQ(plan_meshes({{"data", "model"}, {}}, 4),
            (std::vector<std::string>{"model=4", "data=2,model=2", "data=4"}));
  EXPECT_EQ(plan_meshes({{"data", "model"}, {"data", "model"}}, 2),
            (std::vector<std::string>{"data=1,model=2", "data=2,model=1"}));
  // 2^6 over 4 axes: C(9, 3) ordered factorisations.
  EXPECT_EQ(plan_meshes({{"pipe", "data", "fsdp", "model"}, {}}, 64).size(), 84u);
  EXPECT_EQ(plan_meshes({{"data", "fsdp", "model"}, {}}, 8).size(), 10u);
  EXPECT_EQ(plan_meshes({{"data"}, {}}, 1), (std::vector<std::string>{"data=1"}));
}

// Each candidate that partitions: the report's peak, and a step time within
// 5% of the virtual clock's, which runs the program (the interpreter, each
// statement charged its op_cost.h cost, each message its time on the link;
// deterministic). They agree to 0.01% where nothing overlaps; the virtual
// clock is faster by up to 4.7% where a pipeline stage's messages or FSDP's
// gathers overlap other work (measured: MLP on fsdp=8, the pipelined GPT-2's
// pipe=2 meshes), which the prediction leaves out.
void expect_predictions_hold(const std::string& program, int classes) {
  const ir::Graph g = traced(program);
  const PlanMachine machine;
  const Plan p = plan(program, g, 8, 0, machine);
  ASSERT_EQ(p.chosen, 0);
  const HostValues in = inputs_for(g, classes);
  int ran = 0;
  for (const PlanCandidate& c : p.candidates) {
    if (!c.partitions) continue;
    const Lowered l = lower(g, Mesh::parse(c.mesh, 8));
    const Report r = predict(l);
    EXPECT_EQ(c.peak_bytes, *std::max_element(r.peak_bytes.begin(), r.peak_bytes.end())) << c.mesh;
    const ExecResult e =
        execute(l, in, 0, nullptr, {.link = machine.link, .virtual_clock = true, .machine = machine.compute});
    double measured = 0;
    for (const rt::DeviceTime& t : e.device_times) measured = std::max(measured, t.now_s);
    std::printf("%-24s predicted %9.3f us  virtual clock %9.3f us  (%+.1f%%)\n", c.mesh.c_str(), c.step_s * 1e6,
                measured * 1e6, 100 * (c.step_s - measured) / measured);
    EXPECT_NEAR(c.step_s, measured, 0.05 * measured) << c.mesh;
    ++ran;
  }
  EXPECT_GE(ran, 2);
}

TEST(Plan, PredictsTheVirtualClockOfDotReluDot) { expect_predictions_hold("dot_relu_dot", 10); }
TEST(Plan, PredictsTheVirtualClockOfTheMlp) { expect_predictions_hold("mlp_train", 10); }
TEST(Plan, PredictsTheVirtualClockOfGpt2) { expect_predictions_hold("gpt2_train", 96); }
TEST(Plan, PredictsTheVirtualClockOfThePipelinedGpt2) { expect_predictions_hold("gpt2_train_pipelined", 96); }

TEST(Plan, RanksFittingCandidatesByStepTime) {
  const Plan p = plan("mlp_train", traced("mlp_train"), 8, 0, PlanMachine{});
  ASSERT_EQ(p.candidates.size(), 10u);
  for (size_t i = 1; i < p.candidates.size(); ++i) EXPECT_LE(p.candidates[i - 1].step_s, p.candidates[i].step_s);
  EXPECT_EQ(p.candidates[0].verdict, "chosen");
  EXPECT_NE(p.candidates[1].verdict.find("% slower: "), std::string::npos) << p.candidates[1].verdict;
}

TEST(Plan, ATighterBudgetNeverChoosesALargerPeak) {
  const ir::Graph g = traced("mlp_train");
  const Plan free = plan("mlp_train", g, 8, 0, PlanMachine{});
  uint64_t data8 = 0;
  for (const PlanCandidate& c : free.candidates)
    if (c.mesh == "data=8") data8 = c.peak_bytes;
  ASSERT_GT(data8, 0u);
  // Under data parallel's peak: a sharded plan, which fits.
  const Plan under = plan("mlp_train", g, 8, data8 - 1, PlanMachine{});
  ASSERT_GE(under.chosen, 0);
  EXPECT_NE(under.candidates[under.chosen].mesh, "data=8");
  EXPECT_LT(under.candidates[under.chosen].peak_bytes, data8);
  uint64_t last = UINT64_MAX;
  for (uint64_t budget = data8; budget > 0; budget = budget * 3 / 4) {
    const Plan b = plan("mlp_train", g, 8, budget, PlanMachine{});
    if (b.chosen < 0) {
      EXPECT_NE(format_plan(b).find("nothing fits the budget"), std::string::npos);
      break;
    }
    EXPECT_LE(b.candidates[b.chosen].peak_bytes, budget);
    EXPECT_LE(b.candidates[b.chosen].peak_bytes, last);
    last = b.candidates[b.chosen].peak_bytes;
  }
  for (const PlanCandidate& c : under.candidates) {
    if (!c.fits && c.partitions) {
      EXPECT_EQ(c.verdict.rfind("over the budget by ", 0), 0u) << c.verdict;
    }
  }
}

TEST(Plan, KeepsTheCandidatesThatDoNotPartitionWithTheReason) {
  const Plan p = plan("gpt2_train_pipelined", traced("gpt2_train_pipelined"), 8, 0, PlanMachine{});
  const auto it = std::find_if(p.candidates.begin(), p.candidates.end(),
                               [](const PlanCandidate& c) { return c.mesh == "pipe=8"; });
  ASSERT_NE(it, p.candidates.end());
  EXPECT_FALSE(it->partitions);
  EXPECT_NE(it->verdict.find("does not partition: samples/gpt2/model.cpp:26: error: set_pipeline: 2 pipelined "
                             "layers do not divide into 8 stages"),
            std::string::npos)
      << it->verdict;
  const std::string table = format_plan(p);
  EXPECT_NE(table.find("axes searched: pipe, data, fsdp, model (20 candidates)"), std::string::npos) << table;
}

TEST(Plan, ParsesBudgets) {
  EXPECT_EQ(parse_bytes("16GiB"), 16ull << 30);
  EXPECT_EQ(parse_bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1.5KiB"), 1536u);
  EXPECT_EQ(parse_bytes("1000"), 1000u);
  EXPECT_EQ(parse_bytes("2GB"), 2000000000u);
  EXPECT_EQ(parse_bytes("16 GiB"), std::nullopt);
  EXPECT_EQ(parse_bytes("lots"), std::nullopt);
  EXPECT_EQ(parse_bytes("-1MiB"), std::nullopt);
}

}  // namespace
}  // namespace sharc
