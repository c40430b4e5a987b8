// Rematerialization (TrainOptions::remat, codegen/passes/rematerialize.h).
//
// The GPT-2 sample's training step on data=2,model=4 (ring TP on; its blocks
// scanned, the sample's default, so each layer is its own block), generated
// three times: saving every activation, recomputing each block (option
// remat=1) and saving only matmul outputs (remat=2). For each, the report's
// predicted peak memory equals what the runtime measures, exactly; the f32
// losses of three steps are bitwise equal to those without remat (the copies
// run the same kernels on the same values); and recomputing each block lowers
// the measured peak. The IR tests check where the pass puts the copies, and
// the error tests the messages a model gets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/passes/rematerialize.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/sharc.h"
#include "dsl/train.h"
#include "remat_gpt2_none.h"
#include "remat_gpt2_recompute.h"
#include "remat_gpt2_save_dots.h"
#include "tests/common/expect_error.h"
#include "tests/common/gpt2_steps.h"

namespace sharc {
namespace {

using ::testing::HasSubstr;

using sharc::testing::Gpt2Steps;
using sharc::testing::run_gpt2_steps;

Report predicted_gpt2(int remat) {
  const ProgramOptions o = {{"remat", std::to_string(remat)}};
  return predict(
      lower(trace("gpt2_train", ProgramRegistry::all().at("gpt2_train"), o), Mesh::parse("data=2,model=4"))
          .partitioned);
}

uint64_t max_peak(const Measured& m) {
  uint64_t p = 0;
  for (uint64_t b : m.peak_bytes) p = std::max(p, b);
  return p;
}

TEST(Remat, Gpt2PoliciesPredictTheirPeakAndKeepTheLossBitForBit) {
  const Gpt2Steps none = run_gpt2_steps<sharc_gen::remat_gpt2_none::Program>(3);
  const Gpt2Steps full = run_gpt2_steps<sharc_gen::remat_gpt2_recompute::Program>(3);
  const Gpt2Steps dots = run_gpt2_steps<sharc_gen::remat_gpt2_save_dots::Program>(3);
  const std::vector<std::pair<const char*, const Gpt2Steps*>> runs = {
      {"save_all", &none}, {"recompute_all", &full}, {"save_dots", &dots}};
  for (int policy = 0; policy < 3; ++policy) {
    SCOPED_TRACE(runs[policy].first);
    const Gpt2Steps& r = *runs[policy].second;
    const Report rep = predicted_gpt2(policy);
    ASSERT_EQ(rep.peak_bytes.size(), r.first.peak_bytes.size());
    for (size_t d = 0; d < rep.peak_bytes.size(); ++d)
      EXPECT_EQ(rep.peak_bytes[d], r.first.peak_bytes[d]) << "device " << d << " peak";
    std::string why;
    EXPECT_TRUE(matches(rep, r.first, &why)) << why;
    ASSERT_EQ(r.losses.size(), none.losses.size());
    for (size_t s = 0; s < r.losses.size(); ++s)
      EXPECT_EQ(r.losses[s], none.losses[s]) << "step " << s << " (bitwise)";
  }
  EXPECT_LT(max_peak(full.first), max_peak(none.first)) << "recomputing each block saves nothing";
  EXPECT_LE(max_peak(dots.first), max_peak(none.first));
  std::printf("GPT-2 data=2,model=4, peak per device: save_all %llu B, recompute_all %llu B, save_dots %llu B\n",
              static_cast<unsigned long long>(max_peak(none.first)),
              static_cast<unsigned long long>(max_peak(full.first)),
              static_cast<unsigned long long>(max_peak(dots.first)));
}

// The pipelined GPT step (pipe=2,data=2,model=2, 1F1B over 8 micro-batches):
// copies go into each micro-batch's backward unit, so the losses are the same
// bits and every device's peak is lower.
TEST(Remat, PipelinedGpt2RecomputesInTheBackwardUnits) {
  HostValues in;
  const ir::Graph g0 = trace("gpt2_train_pipelined", ProgramRegistry::all().at("gpt2_train_pipelined"));
  for (const ir::Node& v : g0.nodes)
    if (v.op == ir::Op::kInput) {
      std::vector<double> x(ir::num_elements(v.shape));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>((i * 7 + (v.name == "targets" ? 10 : 3)) % 64);
      in[v.name] = x;
    }
  ExecResult runs[2];
  for (int remat = 0; remat < 2; ++remat) {
    const ir::Graph g = trace("gpt2_train_pipelined", ProgramRegistry::all().at("gpt2_train_pipelined"),
                              {{"remat", std::to_string(remat)}});
    runs[remat] = execute(lower(g, Mesh::parse("pipe=2,data=2,model=2")), in, 3);
  }
  EXPECT_EQ(runs[1].outputs.at("loss"), runs[0].outputs.at("loss"));
  EXPECT_EQ(runs[1].outputs.at("grad_norm"), runs[0].outputs.at("grad_norm"));
  ASSERT_EQ(runs[1].peak_bytes.size(), runs[0].peak_bytes.size());
  for (size_t d = 0; d < runs[0].peak_bytes.size(); ++d)
    EXPECT_LT(runs[1].peak_bytes[d], runs[0].peak_bytes[d]) << "device " << d;
}

// ---- the pass on a small program ------------------------------------------

constexpr const char* kThisFile = "tests/remat/remat_test.cpp";

// Two blocks "b0" and "b1" (dot, tanh) and a loss, trained with options `o`
// (whose rules the test bodies make, so a rule's line is the test's).
ir::Graph two_blocks(const TrainOptions& o) {
  sharc::testing::Traced t("remat_two_blocks");
  Tensor x = t.b.input("x", {4, 8});
  for (const char* name : {"b0", "b1"}) {
    Param w = (t.b.scope() / name).param("kernel", {8, 8}, normal(0.1));
    LabelScope label(t.tracer, name);
    x = tanh(dot(x, w));
  }
  train_step(t.b, {x}, [](const std::vector<Tensor>& mb) { return sum(mul(mb[0], mb[0]), {0, 1}); },
             sgd(Schedule::constant(0.1)), o);
  return t.graph();
}

int count_remat(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& v : g.nodes) n += v.remat;
  return n;
}

// Recomputing b1: its dot and tanh are copied once, before the first gradient
// node that reads them; no gradient node reads b1's originals any more, and
// b0 (no rule) is untouched.
TEST(RematPass, RecomputeAllCopiesTheBlockBeforeItsBackward) {
  TrainOptions o;
  o.remat.push_back(remat("b1", RematPolicy::kRecomputeAll));
  const ir::Graph before = two_blocks(o);
  const ir::Graph after = rematerialize(before);
  ir::verify(after);
  EXPECT_EQ(after.nodes.size(), before.nodes.size() + 2);
  int first_backward = -1, dot_copy = -1, tanh_copy = -1;
  for (size_t i = 0; i < after.nodes.size(); ++i) {
    const ir::Node& v = after.nodes[i];
    if (v.backward && first_backward < 0) first_backward = static_cast<int>(i);
    if (!v.remat) continue;
    EXPECT_EQ(v.name, "b1");
    EXPECT_FALSE(v.backward);
    if (v.op == ir::Op::kDot) dot_copy = static_cast<int>(i);
    if (v.op == ir::Op::kTanh) tanh_copy = static_cast<int>(i);
  }
  ASSERT_GE(dot_copy, 0);
  ASSERT_GE(tanh_copy, 0);
  EXPECT_GT(dot_copy, first_backward) << "copies are made in the backward pass, not before it";
  EXPECT_EQ(after.nodes[tanh_copy].args[0], dot_copy);
  for (const ir::Node& v : after.nodes) {
    if (!v.backward) continue;
    for (int a : v.args) {
      const ir::Node& read = after.nodes[a];
      EXPECT_FALSE(read.name == "b1" && !read.remat && !read.backward && read.op != ir::Op::kParameter)
          << "a gradient node still reads b1's forward " << ir::op_name(read.op);
    }
  }
  // The printer marks copies.
  std::ostringstream text;
  text << after;
  EXPECT_THAT(text.str(), HasSubstr(" remat  //"));
}

// Saving dots: only the tanh is copied, from the saved dot.
TEST(RematPass, SaveDotsKeepsTheDot) {
  TrainOptions o;
  o.remat.push_back(remat("b0", RematPolicy::kSaveDots));
  o.remat.push_back(remat("b1", RematPolicy::kSaveDots));
  const ir::Graph after = rematerialize(two_blocks(o));
  ir::verify(after);
  EXPECT_EQ(count_remat(after), 2);
  for (const ir::Node& v : after.nodes)
    if (v.remat) {
      EXPECT_EQ(v.op, ir::Op::kTanh);
      EXPECT_EQ(after.nodes[v.args[0]].op, ir::Op::kDot);
      EXPECT_FALSE(after.nodes[v.args[0]].remat);
    }
}

TEST(RematPass, SaveAllAndNoRulesChangeNothing) {
  TrainOptions o;
  o.remat.push_back(remat("b0", RematPolicy::kSaveAll));
  const ir::Graph g = two_blocks(o);
  EXPECT_EQ(count_remat(rematerialize(g)), 0);
  EXPECT_EQ(rematerialize(g).nodes.size(), g.nodes.size());
  EXPECT_EQ(rematerialize(two_blocks({})).nodes.size(), g.nodes.size());
}

// The partitioned program with copies computes what the oracle does.
TEST(RematPass, LoweredProgramEqualsTheOracle) {
  TrainOptions o;
  o.remat.push_back(remat("b0", RematPolicy::kRecomputeAll));
  o.remat.push_back(remat("b1", RematPolicy::kSaveDots));
  const ir::Graph g = two_blocks(o);
  for (const char* mesh : {"data=4", "model=4", "data=2,model=2"}) {
    SCOPED_TRACE(mesh);
    const Lowered l = lower(g, Mesh::parse(mesh));
    EXPECT_GT(count_remat(l.partitioned), 0);
    HostValues in;
    in["x"] = std::vector<double>(32);
    for (size_t i = 0; i < 32; ++i) in["x"][i] = std::sin(0.3 * static_cast<double>(i));
    HostValues state, want_state;
    const HostValues want = interpret(g, in, 7, &state);
    const ExecResult run = execute(l, in, 7);
    HostValues got = run.outputs;
    for (const auto& [path, values] : run.params) got["param " + path] = values;
    for (const auto& [path, values] : state) want_state["param " + path] = values;
    for (const auto& [name, values] : want) want_state[name] = values;
    for (const auto& [name, values] : want_state) {
      ASSERT_TRUE(got.count(name)) << name;
      ASSERT_EQ(got.at(name).size(), values.size()) << name;
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_NEAR(got.at(name)[i], values[i], 1e-5 * (1 + std::abs(values[i]))) << name << "[" << i << "]";
    }
  }
}

// ---- errors -----------------------------------------------------------------

TEST(RematErrors, UnknownBlockIsReportedAtTheRule) {
  TrainOptions o;
  const int line = __LINE__ + 1;
  o.remat.push_back(remat("b7", RematPolicy::kRecomputeAll));
  const ir::Graph g = two_blocks(o);
  const std::string msg = sharc::testing::error_at(kThisFile, line, [&] { lower(g, Mesh::parse("data=2")); });
  EXPECT_THAT(msg, HasSubstr("remat: no block named \"b7\" in the program (its blocks are layer labels: b0, b1)"));
}

TEST(RematErrors, TwoPoliciesForOneBlock) {
  TrainOptions o;
  const int first = __LINE__ + 1;
  o.remat.push_back(remat("b0", RematPolicy::kRecomputeAll));
  const int line = __LINE__ + 1;
  o.remat.push_back(remat("b0", RematPolicy::kSaveDots));
  const ir::Graph g = two_blocks(o);
  const std::string msg = sharc::testing::error_at(kThisFile, line, [&] { lower(g, Mesh::parse("data=2")); });
  EXPECT_THAT(msg, HasSubstr("remat: block \"b0\" already has a policy (recompute_all, at " + std::string(kThisFile) +
                             ":" + std::to_string(first) + ")"));
}

TEST(RematErrors, GptOptionOutOfRange) {
  try {
    trace("gpt2_train", ProgramRegistry::all().at("gpt2_train"), {{"remat", "3"}});
    ADD_FAILURE() << "remat=3 was taken";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("gpt2: option remat=3 is not 0 (save all), 1 (recompute each block) or 2 "
                                    "(save matmul outputs)"));
    EXPECT_THAT(e.loc().file, HasSubstr("samples/gpt2/model.cpp"));
  }
}

}  // namespace
}  // namespace sharc
