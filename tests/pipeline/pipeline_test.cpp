// Pipeline parallelism against the oracle: the stack model (stack_model.h)
// trained 3 AdamW steps on every pipe mesh of issue 9 and every schedule,
// each compared with the fp64 interpreter of the unpartitioned program; the
// schedules against each other; the stage plan's orders and bubbles on the
// virtual clock; and the plan's placement (stages hold only their layers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/buffer_plan.h"
#include "codegen/execute.h"
#include "codegen/op_cost.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "codegen/stage_plan.h"
#include "tests/pipeline/stack_model.h"
#include "tests/common/tolerance.h"

namespace sharc::pipeline_test {
namespace {

constexpr int kSteps = 3;

HostValues batch_for(const StackConfig& c, int step) {
  const int64_t B = c.batch();
  std::vector<double> x(B * c.features), y(B);
  for (int64_t i = 0; i < B; ++i) {
    y[i] = static_cast<double>((i * 3 + step) % c.classes);
    for (int64_t f = 0; f < c.features; ++f)
      x[i * c.features + f] = std::cos(0.17 * f * (y[i] + 1) + 0.31 * i + 0.07 * step);
  }
  return {{"x", x}, {"labels", y}};
}

ir::Graph stack_graph(const StackConfig& c) {
  return trace("stack_train", [&](ProgramBuilder& b) { build_stack_train(b, c); });
}

struct Trajectory {
  std::vector<double> loss;
  HostValues params;
  std::vector<ExecResult> steps;
};

Trajectory oracle(const ir::Graph& g, const StackConfig& c) {
  Trajectory r;
  for (int s = 0; s < kSteps; ++s) r.loss.push_back(interpret(g, batch_for(c, s), 0, &r.params).at("loss")[0]);
  return r;
}

Trajectory on_mesh(const ir::Graph& g, const StackConfig& c, const std::string& mesh, const PipelineOptions& o = {}) {
  const Lowered l = lower(g, Mesh::parse(mesh), o);
  EXPECT_TRUE(l.stages.has_value());
  Trajectory r;
  for (int s = 0; s < kSteps; ++s) {
    ExecResult e = execute(l, batch_for(c, s), 0, s == 0 ? nullptr : &r.params);
    r.loss.push_back(e.outputs.at("loss")[0]);
    r.params = e.params;
    r.steps.push_back(std::move(e));
  }
  return r;
}

using sharc::testing::rel_error;

double max_abs_diff(const HostValues& a, const HostValues& b) {
  double worst = 0;
  for (const auto& [name, v] : b)
    for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::fabs(a.at(name)[i] - v[i]));
  return worst;
}

struct Case {
  std::string mesh, schedule;
  int virtual_stages = 1;
  bool ring = false;  // ring collective matmul on every TP dot
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.mesh + "_" + info.param.schedule;
  if (info.param.virtual_stages > 1) s += "_v" + std::to_string(info.param.virtual_stages);
  if (info.param.ring) s += "_ring";
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class PipelineMatchesOracle : public ::testing::TestWithParam<Case> {};

// fp32 per device against the fp64 oracle, 3 AdamW steps with clipping.
// Float rounding through 8 residual blocks of width 32 gives ~1e-6 relative
// on the loss and on the weights; Adam's update is lr * m / sqrt(v), so a
// weight whose gradient is tiny moves by lr whatever its sign, and the
// bounds (1e-5 on the loss, 1e-4 on parameters) leave that room.
TEST_P(PipelineMatchesOracle, ParametersAndLossAfterThreeSteps) {
  const Case& k = GetParam();
  StackConfig c;
  c.pipeline.schedule = k.schedule;
  c.pipeline.virtual_stages = k.virtual_stages;
  const ir::Graph g = stack_graph(c);
  const Trajectory want = oracle(g, c);
  PipelineOptions o;
  if (k.ring) o.collective_matmul = CollectiveMatmul::kAlways;
  const Trajectory got = on_mesh(g, c, k.mesh, o);
  if (k.ring) {
    const Lowered l = lower(g, Mesh::parse(k.mesh), o);
    EXPECT_TRUE(std::any_of(l.partitioned.nodes.begin(), l.partitioned.nodes.end(),
                            [](const ir::Node& n) { return n.op == ir::Op::kRingDot; }));
  }
  for (int s = 0; s < kSteps; ++s)
    EXPECT_NEAR(got.loss[s], want.loss[s], 1e-5 * std::fabs(want.loss[s])) << "step " << s;
  ASSERT_EQ(got.params.size(), want.params.size());
  double worst = 0;
  for (const auto& [name, w] : want.params) {
    const double e = rel_error(got.params.at(name), w);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-4) << name;
  }
  std::printf("%s %s v=%d%s: loss %.7f vs oracle %.7f, worst parameter error %.2e\n", k.mesh.c_str(),
              k.schedule.c_str(), k.virtual_stages, k.ring ? " ring" : "", got.loss.back(), want.loss.back(), worst);
  // The steps moved the weights by much more than the tolerance.
  const std::vector<float> init = init_global(*g.find("block0/up/kernel", ir::Op::kParameter), 0);
  EXPECT_GT(rel_error(want.params.at("block0/up/kernel"), std::vector<double>(init.begin(), init.end())), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, PipelineMatchesOracle,
    ::testing::Values(Case{"pipe=2", "gpipe"}, Case{"pipe=2", "1f1b"}, Case{"pipe=2", "interleaved", 2},
                      Case{"pipe=4", "gpipe"}, Case{"pipe=4", "1f1b"}, Case{"pipe=4", "interleaved", 2},
                      Case{"pipe=8", "1f1b"}, Case{"pipe=2,data=2", "1f1b"}, Case{"pipe=2,model=2", "1f1b"},
                      Case{"pipe=2,model=2", "1f1b", 1, true}, Case{"pipe=2,fsdp=2", "1f1b"},
                      Case{"pipe=2,data=2,model=2", "gpipe"}, Case{"pipe=2,data=2,model=2", "1f1b"},
                      Case{"pipe=2,data=2,model=2", "interleaved", 2}, Case{"pipe=4,data=2", "1f1b"},
                      Case{"pipe=4,data=2", "interleaved", 2}),
    case_name);

// The schedules only reorder the same per-device computations, so on one
// mesh they agree bit for bit (the bound the issue sets is 1e-6).
TEST(PipelineSchedules, AgreeWithEachOther) {
  StackConfig c;
  const ir::Graph g = stack_graph(c);
  PipelineOptions gpipe, f1b1, interleaved;
  gpipe.schedule = PipelineSchedule::kGPipe;
  f1b1.schedule = PipelineSchedule::k1F1B;
  interleaved.schedule = PipelineSchedule::kInterleaved;
  interleaved.virtual_stages = 2;
  const Trajectory a = on_mesh(g, c, "pipe=4,data=2", gpipe);
  const Trajectory b = on_mesh(g, c, "pipe=4,data=2", f1b1);
  const Trajectory i = on_mesh(g, c, "pipe=4,data=2", interleaved);
  EXPECT_LE(max_abs_diff(a.params, b.params), 1e-6);
  EXPECT_LE(max_abs_diff(a.params, i.params), 1e-6);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(a.loss[s], b.loss[s], 1e-6);
    EXPECT_NEAR(a.loss[s], i.loss[s], 1e-6);
  }
  // And the pipelined program computes what the same mesh without a pipe
  // axis does.
  const Trajectory flat = on_mesh(g, c, "pipe=1,data=2", f1b1);
  EXPECT_LE(max_abs_diff(a.params, flat.params), 1e-6);
}

// Each stage holds (initialises, keeps, updates) only the parameters it
// reads: stage 0 the input projection and its layers, the last stage the
// head; nothing is sent but activations and their gradients.
TEST(StagePlan, StagesHoldTheirOwnLayers) {
  StackConfig c;
  const ir::Graph g = stack_graph(c);
  const Lowered l = lower(g, Mesh::parse("pipe=4"));
  ASSERT_TRUE(l.stages);
  const StagePlan& plan = *l.stages;
  const ir::Graph& local = l.partitioned;
  auto holders = [&](const std::string& name) {
    std::vector<int> s;
    const ir::Node* n = local.find(name, ir::Op::kParameter);
    const int id = static_cast<int>(n - local.nodes.data());
    for (int st = 0; st < plan.stages; ++st)
      if (plan.holds[st][id]) s.push_back(st);
    return s;
  };
  EXPECT_EQ(holders("in/kernel"), std::vector<int>{0});
  EXPECT_EQ(holders("block0/up/kernel"), std::vector<int>{0});
  EXPECT_EQ(holders("block1/down/bias"), std::vector<int>{0});
  EXPECT_EQ(holders("block2/up/kernel"), std::vector<int>{1});
  EXPECT_EQ(holders("block7/down/kernel"), std::vector<int>{3});
  EXPECT_EQ(holders("head/kernel"), std::vector<int>{3});
  EXPECT_EQ(holders("opt/m/block5/up/kernel"), std::vector<int>{2});
  // The step count is read everywhere (learning rate, bias correction).
  EXPECT_EQ(holders("opt/step"), (std::vector<int>{0, 1, 2, 3}));
  // Sends carry (micro-batch) activations forward and their gradients back,
  // plus the scalars of the global norm; every send has its receive.
  int sends = 0, recvs = 0;
  for (int s = 0; s < plan.stages; ++s)
    for (const StageStep& st : plan.steps[s]) {
      if (st.kind == StageStep::Kind::kSend) {
        ++sends;
        EXPECT_EQ(std::abs(st.peer - s) == 1 || local.nodes[st.value].shape.empty(), true)
            << "a non-scalar skips a stage: " << ir::node_str(local, st.value);
      }
      if (st.kind == StageStep::Kind::kRecv) ++recvs;
    }
  EXPECT_EQ(sends, recvs);
  EXPECT_GE(sends, 2 * 3 * c.pipeline.microbatches);  // 3 boundaries, F and B, every micro-batch
}

// Chrome traces of a pipelined step, on the wall clock (the interpreter) and
// on the virtual clock (the stage plan): valid JSON, one named track per
// device, and every send matched by exactly one receive on the peer device
// with the same tag.
void expect_valid_trace(const std::string& json, int devices, const std::string& clock) {
  const nlohmann::json t = nlohmann::json::parse(json);  // throws on invalid JSON
  EXPECT_EQ(t["otherData"]["clock"], clock);
  std::set<int> named;
  std::multiset<std::tuple<int, int, int64_t>> sends, recvs;  // (from, to, tag)
  int compute = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert(e["tid"].get<int>());
    if (e["ph"] != "X") continue;
    ASSERT_GE(e["dur"].get<double>(), 0.0);
    const int tid = e["tid"].get<int>();
    if (e["cat"] == "send") sends.insert({tid, e["args"]["peer"].get<int>(), e["args"]["tag"].get<int64_t>()});
    if (e["cat"] == "recv") recvs.insert({e["args"]["peer"].get<int>(), tid, e["args"]["tag"].get<int64_t>()});
    if (e["cat"] == "compute") ++compute;
  }
  EXPECT_EQ(static_cast<int>(named.size()), devices);
  EXPECT_FALSE(sends.empty());
  EXPECT_EQ(sends, recvs);
  EXPECT_GT(compute, 100);
}

TEST(PipelineTrace, WallAndVirtualClockTracesAreValid) {
  StackConfig c;
  const ir::Graph g = stack_graph(c);
  const Lowered l = lower(g, Mesh::parse("pipe=2,data=2"));
  rt::Trace wall;
  execute(l, batch_for(c, 0), 0, nullptr, {.trace = &wall});
  const std::string json = rt::chrome_trace_json(wall);
  expect_valid_trace(json, 4, "wall");
  EXPECT_NE(json.find("stack_model.h:"), std::string::npos) << "events name their DSL line";
  const StageTimeline t = simulate_stages(*l.stages, l.partitioned, layer_unit_costs(*l.stages, l.partitioned),
                                          [](int) { return 0.1; });
  expect_valid_trace(rt::chrome_trace_json(virtual_trace(*l.stages, l.stage_graphs, t)), 4, "virtual");
}

// Activation memory from the memory accounting (simulate_activations, a
// replay of the buffer plan the generated code and the report share): with
// the micro-batch size fixed, stage 0 keeps every micro-batch's forward
// values under GPipe, m of them, and at most p under 1F1B, whatever m; the
// bytes follow.
TEST(PipelineMemory, OneFOneBHoldsAtMostPMicroBatchesAndGPipeHoldsM) {
  std::printf("%-6s %2s %3s %18s %12s\n", "", "p", "m", "micro-batches held", "bytes");
  const std::vector<int> ms = {4, 8, 16};
  for (int p : {2, 4}) {
    std::vector<uint64_t> gpipe_bytes, f1b1_bytes;
    for (int m : ms)
      for (const char* schedule : {"gpipe", "1f1b"}) {
        StackConfig c;
        c.pipeline.microbatches = m;
        c.pipeline.schedule = schedule;
        const Lowered l = lower(stack_graph(c), Mesh::parse("pipe=" + std::to_string(p)));
        const ir::Graph& stage0 = l.stage_graphs[0];
        const ActivationProfile held = simulate_activations(stage0, plan_buffers(stage0));
        std::printf("%-6s %2d %3d %18d %12llu\n", schedule, p, m, held.max_micro_batches,
                    static_cast<unsigned long long>(held.max_bytes));
        const bool gpipe = std::string(schedule) == "gpipe";
        EXPECT_EQ(held.max_micro_batches, gpipe ? m : std::min(p, m)) << schedule << " p=" << p << " m=" << m;
        (gpipe ? gpipe_bytes : f1b1_bytes).push_back(held.max_bytes);
      }
    // The bytes follow: GPipe's grow by one micro-batch's activations per
    // micro-batch, 1F1B's do not grow at all.
    EXPECT_EQ(gpipe_bytes[2] - gpipe_bytes[1], 2 * (gpipe_bytes[1] - gpipe_bytes[0])) << "p=" << p;
    EXPECT_EQ(f1b1_bytes[0], f1b1_bytes[1]) << "p=" << p;
    EXPECT_EQ(f1b1_bytes[1], f1b1_bytes[2]) << "p=" << p;
    EXPECT_LT(f1b1_bytes[2], gpipe_bytes[2]) << "p=" << p;
  }
}

// A GPT with tied embeddings: the token table is read on the first stage
// (embedding) and the last (output head). Its gradient halves are summed once
// after the micro-batches (train_step keeps them apart per use), so the
// stages do not wait for each other inside a micro-batch: the bubble is the
// schedule's own, and two SGD steps equal the oracle (plain SGD, because
// Adam turns the fp32 noise on an exactly-zero gradient, like attention's
// key bias, into a full step of either sign).
TEST(PipelineGpt, TiedEmbeddingKeepsTheScheduleAndMatchesTheOracle) {
  GPTConfig c;
  c.vocab = 16;
  c.context = 8;
  c.embed = 16;
  c.heads = 2;
  c.layers = 4;
  c.dropout = 0.0;
  const int64_t batch = 8;
  const ir::Graph g = trace("tiny_gpt", [&](ProgramBuilder& b) {
    b.set_pipeline({.axis = "pipe", .microbatches = 4, .schedule = "1f1b"});
    b.set_logical_rules(transformer_logical_rules());
    GPT model(b.scope(), c);
    Tensor tokens = b.input("tokens", {batch, c.context}, P("batch", "seq"));
    Tensor targets = b.input("targets", {batch, c.context}, P("batch", "seq"));
    train_step(
        b, {tokens, targets}, [&](const std::vector<Tensor>& mb) { return softmax_cross_entropy(model(mb[0]), mb[1]); },
        sgd(Schedule::constant(0.1)));  // the update is the gradient: nothing normalises an error away
  });
  ASSERT_TRUE(c.tie_embeddings);
  const Lowered l = lower(g, Mesh::parse("pipe=4"));
  const StageTimeline t =
      simulate_stages(*l.stages, l.partitioned, layer_unit_costs(*l.stages, l.partitioned), [](int) { return 0.0; });
  EXPECT_NEAR(t.bubble_fraction(), 3.0 / 7.0, 0.01);
  HostValues in;
  for (int64_t i = 0; i < batch * c.context; ++i) {
    in["tokens"].push_back(static_cast<double>((i * 5) % c.vocab));
    in["targets"].push_back(static_cast<double>((i * 5 + 3) % c.vocab));
  }
  HostValues want_state, got_state;
  for (int s = 0; s < 2; ++s) {
    const double want = interpret(g, in, 0, &want_state).at("loss")[0];
    const ExecResult got = execute(l, in, 0, s == 0 ? nullptr : &got_state);
    got_state = got.params;
    EXPECT_NEAR(got.outputs.at("loss")[0], want, 1e-5 * want) << "step " << s;
  }
  for (const auto& [name, w] : want_state) EXPECT_LE(rel_error(got_state.at(name), w), 1e-4) << name;
}

TEST(StagePlan, ScheduleOrders) {
  auto str = [](std::vector<StageUnit> u) {
    std::string s;
    for (const StageUnit& x : u) s += x.str() + (x.chunk >= 0 ? "c" + std::to_string(x.chunk) : "") + " ";
    return s;
  };
  using S = PipelineSchedule;
  EXPECT_EQ(str(schedule_units(S::kGPipe, 2, 1, 1, 3)), "F0c1 F1c1 F2c1 B0c1 B1c1 B2c1 ");
  // 1F1B: stage r warms up with p - r - 1 forwards.
  EXPECT_EQ(str(schedule_units(S::k1F1B, 4, 0, 1, 4)), "F0c0 F1c0 F2c0 F3c0 B0c0 B1c0 B2c0 B3c0 ");
  EXPECT_EQ(str(schedule_units(S::k1F1B, 4, 1, 1, 6)), "F0c1 F1c1 F2c1 B0c1 F3c1 B1c1 F4c1 B2c1 F5c1 B3c1 B4c1 B5c1 ");
  EXPECT_EQ(str(schedule_units(S::k1F1B, 4, 3, 1, 3)), "F0c3 B0c3 F1c3 B1c3 F2c3 B2c3 ");
  // Interleaved, p = 2, v = 2, m = 4: stage 0 holds chunks 0 and 2;
  // micro-batches go through a chunk in groups of p; warm-up (p-r-1)*2+(v-1)*p.
  EXPECT_EQ(str(schedule_units(S::kInterleaved, 2, 0, 2, 4)),
            "F0c0 F1c0 F0c2 F1c2 F2c0 B0c2 F3c0 B1c2 F2c2 B0c0 F3c2 B1c0 B2c2 B3c2 B2c0 B3c0 ");
  EXPECT_EQ(str(schedule_units(S::kInterleaved, 2, 1, 2, 4)),
            "F0c1 F1c1 F0c3 B0c3 F1c3 B1c3 F2c1 B0c1 F3c1 B1c1 F2c3 B2c3 F3c3 B3c3 B2c1 B3c1 ");
}

// The virtual clock (simulate_stages) on the stack's real plan with equal,
// atomic stages: each pipelined layer's forward of a micro-batch costs 1 and
// its backward 2, charged to the layer's first node in that unit; everything
// else (the input projection, head, loss, optimizer) costs 0 and links are
// free, so the bubble is the schedule's own: (p-1)/(m+p-1) for GPipe and
// 1F1B, (p-1)/(v*m+p-1) interleaved. (With the cost spread over the layer's
// nodes the bubble comes out up to 1.4 points lower: a stage sends the input
// gradient as soon as it has it and computes the weight gradients after.)
TEST(StagePlan, BubbleFractionOnTheVirtualClock) {
  std::printf("%-12s %2s %3s %2s %9s %9s\n", "schedule", "p", "m", "v", "bubble", "expected");
  for (const char* schedule : {"gpipe", "1f1b", "interleaved"})
    for (int p : {2, 4})
      for (int m : {4, 8, 16})
        for (int v : {1, 2}) {
          if (v == 2 && std::string(schedule) != "interleaved") continue;
          StackConfig c;
          c.layers = 8;
          c.microbatch = 1;
          c.pipeline.microbatches = m;
          c.pipeline.schedule = schedule;
          c.pipeline.virtual_stages = v;
          const ir::Graph g = stack_graph(c);
          const Lowered l = lower(g, Mesh::parse("pipe=" + std::to_string(p)));
          const ir::Graph& local = l.partitioned;
          const StageTimeline t =
              simulate_stages(*l.stages, local, layer_unit_costs(*l.stages, local), [](int) { return 0.0; });
          const double expected = (p - 1.0) / (v * m + p - 1.0);
          std::printf("%-12s %2d %3d %2d %9.4f %9.4f\n", schedule, p, m, v, t.bubble_fraction(), expected);
          EXPECT_NEAR(t.bubble_fraction(), expected, 0.01) << schedule << " p=" << p << " m=" << m << " v=" << v;
        }
}

// The runtime's own virtual clock (ExecOptions::virtual_clock: every
// statement of the stage programs charged its op_cost.h cost on a machine
// model, messages over an instant link) against the plan's simulation of
// the same costs (simulate_stage_steps over statement_seconds). With only
// the pipe axis in the mesh they are one computation done twice, so every
// device ends when its stage does, is busy as long, and the bubbles are
// equal. The table prints them beside the equal-cost bubble of the schedule
// (the embedding, head, loss and optimizer step make real stages unequal).
TEST(PipelineVirtualClock, RuntimeAgreesWithThePlanSimulation) {
  const rt::MachineModel machine;  // the defaults: 100 GFLOP/s, 20 GB/s
  std::printf("%-12s %2s %3s %2s %14s %14s %12s %14s\n", "schedule", "p", "m", "v", "runtime bubble",
              "plan bubble", "equal-cost", "step (virtual)");
  for (const char* schedule : {"gpipe", "1f1b", "interleaved"})
    for (int p : {2, 4})
      for (int m : {4, 8}) {
        const int v = std::string(schedule) == "interleaved" ? 2 : 1;
        StackConfig c;
        c.layers = 8;
        c.pipeline.microbatches = m;
        c.pipeline.schedule = schedule;
        c.pipeline.virtual_stages = v;
        const Lowered l = lower(stack_graph(c), Mesh::parse("pipe=" + std::to_string(p)));
        ExecOptions o;
        o.virtual_clock = true;
        o.machine = machine;
        const ExecResult r = execute(l, batch_for(c, 0), 0, nullptr, o);
        std::vector<std::vector<double>> seconds;
        for (const ir::Graph& sg : l.stage_graphs) seconds.push_back(statement_seconds(sg, machine));
        const StageTimeline t = simulate_stage_steps(
            *l.stages, l.partitioned, [&](int s, int k) { return seconds[s][k]; }, [](int) { return 0.0; });
        ASSERT_EQ(r.device_times.size(), static_cast<size_t>(p));
        double busy = 0, end = 0;
        for (int d = 0; d < p; ++d) {
          SCOPED_TRACE(std::string(schedule) + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " device " +
                       std::to_string(d));
          EXPECT_DOUBLE_EQ(r.device_times[d].now_s, t.spans[d].back().end);
          EXPECT_DOUBLE_EQ(r.device_times[d].busy_s, t.busy[d]);
          EXPECT_GT(r.device_times[d].busy_s, 0.0);
          busy += r.device_times[d].busy_s;
          end = std::max(end, r.device_times[d].now_s);
        }
        const double bubble = 1 - busy / (p * end);
        EXPECT_NEAR(bubble, t.bubble_fraction(), 1e-12);
        std::printf("%-12s %2d %3d %2d %14.4f %14.4f %12.4f %11.1f us\n", schedule, p, m, v, bubble,
                    t.bubble_fraction(), (p - 1.0) / (v * m + p - 1.0), 1e6 * end);
      }
}

}  // namespace
}  // namespace sharc::pipeline_test
