// The step arena of every sample program on every mesh its sample builds:
// the buffer plan's replay (simulate_memory) places each step buffer in the
// arena, and no two buffers live at the same time share a byte; all lie in
// the arena the report predicts, which holds at least the step's share of
// the peak. Then a generated program's second step allocates nothing from
// the system. (custom_activation's model needs sharc-lift and is not linked
// here.)
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/buffer_plan.h"
#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "report_mlp_train_4x2.h"

namespace sharc {
namespace {

const std::vector<std::string> kStrategies = {"data=8", "fsdp=8", "model=8", "data=4,model=2",
                                              "fsdp=4,model=2"};

// program -> the meshes its sample generates it for (samples/*/CMakeLists.txt).
std::map<std::string, std::vector<std::string>> sample_programs() {
  std::vector<std::string> drd = kStrategies;
  drd.insert(drd.begin(), "data=2,model=4");
  std::vector<std::string> gpt = {"data=8", "model=8", "data=2,model=4", "data=4,model=2",
                                  "fsdp=4,model=2"};
  std::vector<std::string> mlp_eval = kStrategies, gpt_logits = gpt;
  mlp_eval.push_back("pipe=2");
  gpt_logits.push_back("pipe=2,data=2,model=2");
  return {
      {"dot_relu_dot", {"data=2,model=4"}},
      {"dot_relu_dot_train", drd},
      {"mlp_train", kStrategies},
      {"mlp_eval", mlp_eval},
      {"mlp_train_bf16", {"fsdp=4,model=2"}},
      {"mlp_train_pipelined", {"pipe=2"}},
      {"gpt2_train", gpt},
      {"gpt2_logits", gpt_logits},
      {"gpt2_train_pipelined", {"pipe=2,data=2,model=2"}},
  };
}

// Checks one per-device program's placements; returns its arena size.
uint64_t expect_no_overlap(const ir::Graph& g, const std::string& what) {
  const BufferPlan plan = plan_buffers(g);
  std::vector<ArenaPlacement> placed;
  const MemoryProfile m = simulate_memory(g, plan, &placed);
  EXPECT_FALSE(placed.empty()) << what;
  EXPECT_GE(m.peak_bytes, m.persistent_bytes) << what;
  // Sorted by offset, a buffer can only collide with those after it that
  // start before it ends.
  std::sort(placed.begin(), placed.end(),
            [](const ArenaPlacement& a, const ArenaPlacement& b) { return a.offset < b.offset; });
  int pairs = 0;
  for (size_t i = 0; i < placed.size(); ++i) {
    const ArenaPlacement& a = placed[i];
    EXPECT_EQ(a.offset % 64, 0) << what;
    EXPECT_LE(static_cast<uint64_t>(a.offset) + a.bytes, m.arena_bytes) << what;
    EXPECT_LT(a.allocated, a.freed) << what;
    for (size_t j = i + 1; j < placed.size(); ++j) {
      const ArenaPlacement& b = placed[j];
      if (static_cast<uint64_t>(b.offset) >= static_cast<uint64_t>(a.offset) + a.bytes) break;
      ++pairs;
      // Same bytes: their lifetimes must not meet.
      EXPECT_TRUE(a.freed <= b.allocated || b.freed <= a.allocated)
          << what << ": [" << a.offset << ", +" << a.bytes << ") live over events " << a.allocated
          << ".." << a.freed << " and [" << b.offset << ", +" << b.bytes << ") over "
          << b.allocated << ".." << b.freed;
    }
  }
  EXPECT_GT(pairs, 0) << what << ": no block reuses another's bytes";
  return m.arena_bytes;
}

TEST(StepArena, NoTwoLiveBuffersOverlapInAnySample) {
  int programs = 0;
  for (const auto& [name, meshes] : sample_programs()) {
    auto it = ProgramRegistry::all().find(name);
    ASSERT_NE(it, ProgramRegistry::all().end()) << name;
    const ir::Graph g = trace(name, it->second);
    for (const std::string& mesh : meshes) {
      const std::string what = name + " on " + mesh;
      SCOPED_TRACE(what);
      const Lowered l = lower(g, Mesh::parse(mesh));
      if (l.stage_graphs.empty()) {
        expect_no_overlap(l.partitioned, what);
      } else {
        for (size_t s = 0; s < l.stage_graphs.size(); ++s)
          expect_no_overlap(l.stage_graphs[s], what + ", stage " + std::to_string(s));
      }
      ++programs;
    }
  }
  EXPECT_EQ(programs, 32);
}

// Two steps of a generated program: the first may learn the arena's size
// (it is reserved up front, so it should not need to); the second takes every
// buffer from the arena or from the blocks the parameters gave back.
TEST(StepArena, ASecondStepAllocatesNothing) {
  namespace gen = sharc_gen::report_mlp_train_4x2;
  rt::ThreadWorld world(gen::mesh_shape());
  gen::Program prog(world);
  prog.init(0);
  auto count = [](const auto& shape) {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    return n;
  };
  std::vector<float> images(count(gen::kInput_images_shape)), labels(count(gen::kInput_labels_shape));
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i % 17) / 17.0f;
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  float loss = 0, accuracy = 0, grad_norm = 0, lr = 0;
  gen::Program::Inputs in;
  in.images = images.data();
  in.labels = labels.data();
  gen::Program::Outputs out;
  out.loss = &loss;
  out.accuracy = &accuracy;
  out.grad_norm = &grad_norm;
  out.lr = &lr;
  prog.step(in, out);
  for (int r = 0; r < world.size(); ++r) {
    rt::DeviceMemory& mem = world.memory(r);
    EXPECT_EQ(mem.arena_bytes(), mem.arena_needed()) << "device " << r << ": reserved as predicted";
    mem.reset_step_allocations();
  }
  prog.step(in, out);
  for (int r = 0; r < world.size(); ++r)
    EXPECT_EQ(world.memory(r).step_allocations(), 0u) << "device " << r;
}

// AdamW's new parameter, m and v are written over the old ones on every
// mesh: no parameter-sized block is allocated for a new value. Where the
// optimizer state is replicated (data parallel) the step's peak is at the
// updates, so the replayed peak is lower than with a new block for each;
// sharded, the peak is elsewhere (gathered weights, activations).
TEST(InPlaceUpdates, EveryAdamWUpdateOfTheMlpIsInPlace) {
  auto it = ProgramRegistry::all().find("mlp_train");
  ASSERT_NE(it, ProgramRegistry::all().end());
  const ir::Graph g = trace("mlp_train", it->second);
  for (const std::string& mesh : kStrategies) {
    SCOPED_TRACE(mesh);
    const ir::Graph local = lower(g, Mesh::parse(mesh)).partitioned;
    const BufferPlan plan = plan_buffers(local);
    // dense1..3 kernel and bias, each with m and v, and the step count.
    ASSERT_EQ(local.updates.size(), 19u);
    for (const ir::Update& u : local.updates)
      EXPECT_EQ(plan.in_place_of[u.value], u.target) << local[u.target].name;
    // The same plan without in-place updates needs more memory.
    BufferPlan copied = plan;
    std::fill(copied.in_place_of.begin(), copied.in_place_of.end(), -1);
    if (mesh.rfind("data", 0) == 0)
      EXPECT_GT(simulate_memory(local, copied).peak_bytes, simulate_memory(local, plan).peak_bytes);
    else
      EXPECT_GE(simulate_memory(local, copied).peak_bytes, simulate_memory(local, plan).peak_bytes);
  }
}

// A parameter whose old value is read after its update loop (here by an
// output) keeps a separate new block; the others stay in place.
TEST(InPlaceUpdates, AnOldValueReadLaterIsNotOverwritten) {
  auto it = ProgramRegistry::all().find("mlp_train");
  ASSERT_NE(it, ProgramRegistry::all().end());
  ir::Graph local = lower(trace("mlp_train", it->second), Mesh::parse("data=8")).partitioned;
  int kernel = -1;
  for (size_t i = 0; i < local.nodes.size(); ++i)
    if (local.nodes[i].op == ir::Op::kParameter && local.nodes[i].name == "dense2/kernel")
      kernel = static_cast<int>(i);
  ASSERT_GE(kernel, 0);
  ir::Node old = local.nodes[kernel];
  old.op = ir::Op::kNeg;
  old.args = {kernel};
  old.name.clear();
  local.nodes.push_back(old);
  ir::Output out;
  out.name = "old_kernel";
  out.value = static_cast<int>(local.nodes.size()) - 1;
  out.sharding = local.nodes.back().sharding;
  local.outputs.push_back(out);
  const BufferPlan plan = plan_buffers(local);
  int in_place = 0;
  for (const ir::Update& u : local.updates) {
    if (u.target == kernel)
      EXPECT_EQ(plan.in_place_of[u.value], -1);
    else
      in_place += plan.in_place_of[u.value] == u.target;
  }
  EXPECT_EQ(in_place, 18);
}

}  // namespace
}  // namespace sharc
