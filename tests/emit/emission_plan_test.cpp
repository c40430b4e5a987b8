// The backend-neutral emission plan (codegen/emission_plan.h), asserted as
// data, before any renderer prints it:
//  - the schedule of DotReluDot on data=2,model=4, task by task: kernels and
//    GEMMs on the compute stream, the reduce_scatter and all_gather on the
//    communication stream, each behind an event on what it reads;
//  - fusion groups of the samples' training steps: elementwise chains fused
//    into one loop, never through a value with two readers or an output;
//  - every read is ordered after its writer, in every program here, across
//    streams too (the property a renderer relies on);
//  - ring-overlapped TP: the GEMM of step k is never ordered after the
//    transfer of step k+1, step k's transfer and GEMM are unordered (they
//    overlap), and what must wait does (gemm k+1 after transfer k; a scatter's
//    add after its transfer), one way and both ways round the ring;
//  - FSDP: gradient reduce-scatters on the communication stream overlap
//    backward GEMMs that do not need them.
#include "codegen/emission_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "codegen/pipeline.h"
#include "dsl/program.h"

namespace sharc {
namespace {

using ir::Op;
using TaskKind = EmissionPlan::TaskKind;

struct Planned {
  ir::Graph graph;
  EmissionPlan plan;
};

Planned plan_of(const std::string& program, const std::string& mesh) {
  auto it = ProgramRegistry::all().find(program);
  if (it == ProgramRegistry::all().end()) throw std::runtime_error("no program " + program);
  Planned p;
  p.graph = lower(trace(program, it->second), Mesh::parse(mesh)).partitioned;
  p.plan = plan_emission(p.graph);
  return p;
}

const ir::Node& node_of(const Planned& p, int task) {
  return p.graph[p.plan.buffers.stmts[p.plan.tasks[task].stmt].node];
}

TEST(EmissionPlan, DotReluDotScheduleOnTwoStreams) {
  const Planned p = plan_of("dot_relu_dot", "data=2,model=4");
  // One task per statement: the input's block, dot1, relu, dot2 (a partial
  // sum over "model"), its reduce_scatter, then the all_gather to the output.
  EXPECT_EQ(p.plan.schedule_str(),
            "t0 stmt 0 host compute\n"
            "t1 stmt 1 gemm compute\n"
            "t2 stmt 2 kernel compute\n"
            "t3 stmt 3 gemm compute\n"
            "t4 stmt 4 collective comm waits t3\n"
            "t5 stmt 5 collective comm\n");
  EXPECT_EQ(node_of(p, 1).op, Op::kDot);
  EXPECT_EQ(node_of(p, 2).op, Op::kRelu);
  EXPECT_EQ(node_of(p, 4).op, Op::kReduceScatter);
  EXPECT_EQ(node_of(p, 5).op, Op::kAllGather);
  EXPECT_TRUE(p.plan.ordered_before(3, 5));  // through t4, on the comm stream
  EXPECT_FALSE(p.plan.ordered_before(5, 3));
  EXPECT_TRUE(p.plan.ordered_before(0, 3));  // one stream
  EXPECT_EQ(p.plan.var[p.plan.buffers.stmts[0].node], "x");
  EXPECT_EQ(p.plan.inputs.size(), 1u);
  EXPECT_EQ(p.plan.inputs[0].field, "x");
  EXPECT_EQ(p.plan.group_var.at({"model"}), "group_model");
}

// Every statement's reads come after their writers, whatever the streams.
void expect_reads_ordered(const Planned& p) {
  const EmissionPlan& e = p.plan;
  std::vector<int> writer(p.graph.nodes.size(), -1);
  for (size_t s = 0; s < e.buffers.stmts.size(); ++s) {
    const BufferPlan::Stmt& st = e.buffers.stmts[s];
    ASSERT_FALSE(e.stmt_tasks[s].empty()) << "statement " << s << " has no task";
    for (int r : st.reads) {
      if (writer[r] < 0) continue;  // a parameter or a literal
      for (int t : e.stmt_tasks[s])
        EXPECT_TRUE(e.ordered_before(writer[r], t))
            << "task t" << t << " reads " << ir::describe_value(p.graph[r])
            << " before its writer t" << writer[r] << " is done\n"
            << e.schedule_str();
    }
    const int last = e.stmt_tasks[s].back();
    writer[st.node] = last;
    for (int m : st.bucket) writer[m] = last;
  }
}

TEST(EmissionPlan, ReadsAreOrderedAfterWritesOnEveryProgram) {
  for (const auto& [program, mesh] :
       std::vector<std::pair<std::string, std::string>>{{"dot_relu_dot", "data=2,model=4"},
                                                        {"dot_relu_dot_train", "data=2,model=4"},
                                                        {"mlp_train", "data=4,model=2"},
                                                        {"mlp_train", "fsdp=8"},
                                                        {"ring_ops_uni", "model=4"},
                                                        {"ring_ops_bi", "model=4"},
                                                        {"ring_mlp", "data=2,model=4"}}) {
    SCOPED_TRACE(program + " on " + mesh);
    expect_reads_ordered(plan_of(program, mesh));
  }
}

TEST(EmissionPlan, BroadcastsReadBySeveralLoopsAreReadInPlaceByEach) {
  // A layer norm's per-row statistics ([B,T,1], broadcast to [B,T,D]) are read
  // by its forward loop and again by the backward pass's loops; the softmax's
  // row sums likewise. None of those broadcasts gets a [B,T,D] buffer.
  const Planned p = plan_of("gpt2_train", "model=8");
  const BufferPlan& b = p.plan.buffers;
  int several = 0, materialised = 0;
  for (size_t i = 0; i < p.graph.nodes.size(); ++i) {
    const ir::Node& v = p.graph.nodes[i];
    if (v.op != Op::kBroadcast || b.users[i].empty()) continue;
    bool loops_only = !b.is_output[i] && !b.is_update_value[i];
    std::set<int> loops;
    for (int u : b.users[i]) {
      loops_only = loops_only && ir::is_elementwise(p.graph[u].op) &&
                   p.graph[u].micro_batch == v.micro_batch;
      loops.insert(b.root[u]);
    }
    if (!loops_only) {
      materialised += b.needs_buffer[i];
      continue;
    }
    SCOPED_TRACE("broadcast %" + std::to_string(i));
    EXPECT_FALSE(b.needs_buffer[i]);
    EXPECT_TRUE(p.plan.var[i].empty());
    for (int loop : loops) {
      const auto st = std::find_if(b.stmts.begin(), b.stmts.end(),
                                   [&](const BufferPlan::Stmt& x) { return x.node == loop; });
      ASSERT_NE(st, b.stmts.end());
      EXPECT_TRUE(std::count(st->tree.begin(), st->tree.end(), static_cast<int>(i)));
      for (int a : v.args) EXPECT_TRUE(std::count(st->reads.begin(), st->reads.end(), a) ||
                                       p.graph[a].op == Op::kConstant || p.graph[a].op == Op::kParameter ||
                                       b.inlined[a]);
    }
    if (loops.size() > 1) {
      EXPECT_TRUE(b.duplicated[i]);
      ++several;
    }
  }
  // Two layers, each with two layer norms and a softmax, and the final norm.
  EXPECT_GE(several, 10);
  // Only the broadcasts something other than a loop reads keep a buffer.
  EXPECT_LE(materialised, 2);
}

// The GPT's embedding is a one-hot product: an iota over the vocabulary,
// compared with the token ids. The vocabulary is not split on data=8, so
// the iota is computed inside the loop that compares (its index along the
// vocabulary), never stored: no [rows, vocab] f32 buffer (at GPT-2 124M's
// batch 16, 3.3 GB). Split over 'model', the iota keeps its buffer (its
// values start at the device's block).
TEST(EmissionPlan, AnIotaAlongAnUnsplitDimensionIsComputedInItsLoop) {
  for (const auto& [mesh, inlined] : {std::pair<const char*, bool>{"data=8", true}, {"model=8", false}}) {
    SCOPED_TRACE(mesh);
    const Planned p = plan_of("gpt2_train", mesh);
    const BufferPlan& b = p.plan.buffers;
    int iotas = 0;
    for (size_t i = 0; i < p.graph.nodes.size(); ++i) {
      const ir::Node& v = p.graph.nodes[i];
      if (v.op != Op::kIota || v.name != "wte") continue;  // the embedding's, over the vocabulary
      ++iotas;
      EXPECT_EQ(b.inlined[i], inlined);
      EXPECT_EQ(b.needs_buffer[i], !inlined);
      const bool statement = std::any_of(b.stmts.begin(), b.stmts.end(),
                                         [&](const BufferPlan::Stmt& x) { return x.node == static_cast<int>(i); });
      EXPECT_EQ(statement, !inlined);
    }
    EXPECT_GE(iotas, 1);
  }
}

TEST(EmissionPlan, FusionGroupsOfATrainingStep) {
  const Planned p = plan_of("mlp_train", "data=4,model=2");
  const BufferPlan& b = p.plan.buffers;
  int fused = 0, largest = 0, shared = 0, kept = 0, broadcasts = 0;
  std::set<int> seen;
  for (size_t s = 0; s < b.stmts.size(); ++s) {
    const BufferPlan::Stmt& st = b.stmts[s];
    if (st.tree.empty()) continue;
    // One loop: a single compute-stream kernel.
    ASSERT_EQ(p.plan.stmt_tasks[s].size(), 1u);
    EXPECT_EQ(p.plan.tasks[p.plan.stmt_tasks[s][0]].kind, TaskKind::kKernel);
    EXPECT_EQ(p.plan.tasks[p.plan.stmt_tasks[s][0]].stream, Stream::kCompute);
    EXPECT_EQ(st.tree.back(), st.node) << "the root is computed last";
    for (int t : st.tree) {
      // Elementwise ops, and broadcasts and iotas (the one-hot labels')
      // read in place (never a loop's root, never stored).
      const bool broadcast = p.graph[t].op == Op::kBroadcast;
      const bool in_place = broadcast || p.graph[t].op == Op::kIota;
      EXPECT_TRUE(ir::is_elementwise(p.graph[t].op) || (in_place && t != st.node && !b.kept[t]))
          << ir::op_name(p.graph[t].op);
      broadcasts += broadcast;
      // Only a broadcast or an iota read by several loops is in several of them.
      EXPECT_TRUE(seen.insert(t).second || b.duplicated[t]) << "node " << t << " is in two fusion groups";
      EXPECT_TRUE(!b.duplicated[t] || in_place);
      if (t == st.node) continue;
      EXPECT_TRUE(b.inlined[t]);
      // A value that lives to the end of the step is only ever kept.
      if (b.is_output[t] || b.is_update_value[t]) {
        EXPECT_TRUE(b.kept[t]);
      }
      const bool stored = std::count(st.stores.begin(), st.stores.end(), t) > 0;
      EXPECT_EQ(stored, static_cast<bool>(b.kept[t]));
      if (b.kept[t]) {
        // Kept: computed here and stored for readers after this loop.
        ++kept;
        EXPECT_TRUE(b.needs_buffer[t]);
        EXPECT_FALSE(p.plan.var[t].empty());
        for (int u : b.users[t])
          EXPECT_TRUE(std::count(st.tree.begin(), st.tree.end(), u) || b.root[u] > st.node)
              << "node " << t << " is read before its loop";
        continue;
      }
      // Fused away: no buffer, read only inside this loop (by one node, or
      // by several: a loop is a DAG).
      EXPECT_FALSE(b.needs_buffer[t]);
      if (b.duplicated[t]) {
        // Each reader's loop reads it in place.
        for (int u : b.users[t]) {
          EXPECT_TRUE(ir::is_elementwise(p.graph[u].op));
          const auto loop = std::find_if(b.stmts.begin(), b.stmts.end(),
                                         [&](const BufferPlan::Stmt& x) { return x.node == b.root[u]; });
          ASSERT_NE(loop, b.stmts.end());
          EXPECT_TRUE(std::count(loop->tree.begin(), loop->tree.end(), t))
              << "broadcast " << t << " is not in the loop of its reader " << u;
        }
        continue;
      }
      for (int u : b.users[t])
        EXPECT_TRUE(std::count(st.tree.begin(), st.tree.end(), u)) << "node " << t << " is read outside its loop";
      shared += b.users[t].size() > 1;
      EXPECT_TRUE(p.plan.var[t].empty());
    }
    if (st.tree.size() > 1) ++fused;
    largest = std::max(largest, static_cast<int>(st.tree.size()));
  }
  // AdamW's update is one loop per parameter, several ops long; the
  // learning-rate schedule's loop reads its warm-up mask twice; the forward
  // loops keep the activations the backward pass reads.
  EXPECT_GE(fused, 4);
  EXPECT_GE(largest, 6);
  EXPECT_GE(shared, 1);
  EXPECT_GE(kept, 2);
  // Bias adds, AdamW's bias corrections and learning rate read their
  // broadcast operands in place.
  EXPECT_GE(broadcasts, 6);
  // AdamW is one loop per parameter: the loop that computes the new weight
  // also computes and stores the new m and v.
  std::map<std::string, int> new_value;
  for (const auto& u : p.graph.updates) new_value[p.graph[u.target].name] = u.value;
  int adamw = 0;
  for (const auto& [name, value] : new_value) {
    if (name.rfind("opt/", 0) == 0) continue;
    SCOPED_TRACE(name);
    const int loop = b.root[value];
    EXPECT_EQ(loop, value) << "the new weight is its loop's root";
    EXPECT_EQ(b.root[new_value.at("opt/m/" + name)], loop);
    EXPECT_EQ(b.root[new_value.at("opt/v/" + name)], loop);
    EXPECT_TRUE(b.kept[new_value.at("opt/m/" + name)]);
    EXPECT_TRUE(b.kept[new_value.at("opt/v/" + name)]);
    ++adamw;
  }
  EXPECT_EQ(adamw, 6);  // three kernels and three biases
  // No broadcast is materialised for readers that are all loops.
  for (const BufferPlan::Stmt& st : b.stmts) {
    if (p.graph[st.node].op != Op::kBroadcast) continue;
    bool other = false;
    for (int u : b.users[st.node]) other = other || !ir::is_elementwise(p.graph[u].op);
    EXPECT_TRUE(other) << "broadcast %" << st.node << " could be read in place";
  }
}

// The RingDot statements of a plan.
std::vector<int> ring_stmts(const Planned& p) {
  std::vector<int> r;
  for (size_t s = 0; s < p.plan.buffers.stmts.size(); ++s)
    if (p.graph[p.plan.buffers.stmts[s].node].op == Op::kRingDot) r.push_back(static_cast<int>(s));
  return r;
}

void expect_ring_overlap(const Planned& p, int ring) {
  const EmissionPlan& e = p.plan;
  const std::vector<int> rings = ring_stmts(p);
  ASSERT_FALSE(rings.empty());
  for (int s : rings) {
    const bool gather = e.find(s, TaskKind::kRingAdd).empty();
    SCOPED_TRACE("statement " + std::to_string(s) + (gather ? " (gather)" : " (scatter)") + "\n" +
                 e.schedule_str());
    EXPECT_EQ(e.find(s, TaskKind::kTransfer).size(), static_cast<size_t>(ring - 1))
        << "n - 1 transfers: the all_gather's (or reduce_scatter's) bytes";
    for (int t : e.find(s, TaskKind::kTransfer)) EXPECT_EQ(e.tasks[t].stream, Stream::kComm);
    for (int t : e.find(s, TaskKind::kGemm)) EXPECT_EQ(e.tasks[t].stream, Stream::kCompute);
    for (int k = 0; k < ring; ++k) {
      const std::vector<int> gemms = e.find(s, TaskKind::kGemm, k);
      ASSERT_FALSE(gemms.empty());
      const std::vector<int> next = e.find(s, TaskKind::kTransfer, k + 1);
      const std::vector<int> here = e.find(s, TaskKind::kTransfer, k);
      for (int g : gemms) {
        // The acceptance property: GEMM k is not ordered after transfer k+1.
        for (int t : next) EXPECT_FALSE(e.ordered_before(t, g)) << "gemm t" << g;
        // And it overlaps the transfer of its own step.
        for (int t : here) {
          EXPECT_FALSE(e.ordered_before(t, g)) << "gemm t" << g << " waits for transfer t" << t;
          EXPECT_FALSE(e.ordered_before(g, t)) << "transfer t" << t << " waits for gemm t" << g;
        }
      }
      if (gather) {
        // Step k+1 multiplies the block that transfer k brought.
        for (int t : here)
          for (int g : e.find(s, TaskKind::kGemm, k + 1)) EXPECT_TRUE(e.ordered_before(t, g));
      } else if (k > 0) {
        // The running sum arrives before it is added to, and moves on after.
        for (int t : here)
          for (int a : e.find(s, TaskKind::kRingAdd, k)) EXPECT_TRUE(e.ordered_before(t, a));
        for (int a : e.find(s, TaskKind::kRingAdd, k))
          for (int t : next) EXPECT_TRUE(e.ordered_before(a, t));
      }
    }
  }
}

TEST(EmissionPlan, RingStepsOverlapUnidirectional) {
  expect_ring_overlap(plan_of("ring_ops_uni", "model=4"), 4);
}

TEST(EmissionPlan, RingStepsOverlapBidirectional) {
  const Planned p = plan_of("ring_ops_bi", "model=4");
  expect_ring_overlap(p, 4);
  // Both halves get a GEMM per step.
  const int s = ring_stmts(p)[0];
  EXPECT_EQ(p.plan.find(s, TaskKind::kGemm, 0).size(), 2u);
}

TEST(EmissionPlan, RingStepsOverlapOnTwoAxes) {
  expect_ring_overlap(plan_of("ring_mlp", "data=2,model=4"), 4);
}

TEST(EmissionPlan, GradientReductionsOverlapTheBackwardPass) {
  // FSDP: a layer's weight gradient is reduce-scattered on the comm stream
  // while the backward pass goes on to the layer below. (With data=4 the
  // gradients are one bucket after the last GEMM, so nothing is left to
  // overlap; bucketing per layer is the CPU/GPU speed issues' business.)
  const Planned p = plan_of("mlp_train", "fsdp=8");
  const EmissionPlan& e = p.plan;
  bool overlapped = false;
  for (size_t c = 0; c < e.tasks.size(); ++c) {
    if (e.tasks[c].kind != TaskKind::kCollective) continue;
    EXPECT_EQ(e.tasks[c].stream, Stream::kComm);
    for (size_t g = c + 1; g < e.tasks.size(); ++g)
      if (e.tasks[g].kind == TaskKind::kGemm &&
          !e.ordered_before(static_cast<int>(c), static_cast<int>(g)))
        overlapped = true;
  }
  EXPECT_TRUE(overlapped) << e.schedule_str();
}

}  // namespace
}  // namespace sharc
