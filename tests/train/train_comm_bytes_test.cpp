// Bytes each device sends in one training step of the MLP classifier
// (samples/mlp_classifier/model.h, small config, AdamW, accumulate_steps=1),
// as counted by the thread runtime, against the analytical ring values for
// data parallelism (data=8) and FSDP (fsdp=8, the model's FSDPRule("fsdp",
// 1024)). Exact equality: the runtime's rings send exactly what the formulas
// say, so any extra, missing or unbucketed collective shows as a difference.
//
// Ring costs per device for a group of n (runtime/thread_world.cpp):
//  - all_gather / reduce_scatter of B bytes in all: (n-1)/n * B;
//  - all_reduce of `count` floats: chunk i holds count/n floats plus one for
//    the first count % n chunks; member p sends its reduce-scatter chunks
//    (all but chunk p) and its all-gather chunks (all but chunk p+1):
//    4 * (2 * count - chunk[p] - chunk[p+1]) bytes, = 2(n-1)/n * 4 * count
//    when n divides count. A scalar (count 1) costs 4 bytes on the first and
//    last member and 8 on the others.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/pipeline.h"
#include "samples/mlp_classifier/model.h"

namespace sharc {
namespace {

using mlp_classifier::Config;
using rt::CollectiveKind;

constexpr int kN = 8;  // devices, all on the one mesh axis

Config small() {
  Config c;
  c.features = 64;
  c.hidden = 64;
  c.classes = 8;
  c.batch = 32;
  return c;
}

// Element counts of the trained parameters, from the model's definition.
struct Sizes {
  int64_t kernel1, bias1, kernel2, bias2, kernel3, bias3;
  int64_t total() const { return kernel1 + bias1 + kernel2 + bias2 + kernel3 + bias3; }
};

Sizes sizes(const Config& c) {
  return {c.features * c.hidden, c.hidden, c.hidden * c.hidden, c.hidden,
          c.hidden * c.classes,  c.classes};
}

uint64_t all_reduce_bytes(int64_t count, int n, int p) {
  auto chunk = [&](int i) { return count / n + (i < count % n ? 1 : 0); };
  return 4 * static_cast<uint64_t>(2 * count - chunk(p) - chunk((p + 1) % n));
}

// (n-1)/n of `elements` floats, for all_gather and reduce_scatter.
uint64_t ring_share_bytes(int64_t elements, int n) {
  EXPECT_EQ(elements % n, 0) << "a sharded parameter divides by the axis";
  return 4 * static_cast<uint64_t>(elements / n * (n - 1));
}

HostValues batch(const Config& c) {
  std::vector<double> x(c.batch * c.features), y(c.batch);
  for (int64_t i = 0; i < c.batch; ++i) {
    y[i] = static_cast<double>(i % c.classes);
    for (int64_t f = 0; f < c.features; ++f)
      x[i * c.features + f] = 0.01 * static_cast<double>((i * 31 + f) % 17);
  }
  return {{"images", x}, {"labels", y}};
}

struct Step {
  Lowered lowered;
  ExecResult result;
};

Step one_step(const std::string& mesh) {
  const Config c = small();
  const ir::Graph g = trace("mlp_train", [&](ProgramBuilder& b) {
    mlp_classifier::build_train(b, c, adamw(Schedule::constant(1e-2), 1e-4));
  });
  Step s{lower(g, Mesh::parse(mesh, kN)), {}};
  s.result = execute_partitioned(s.lowered.partitioned, batch(c), 0);
  return s;
}

// Scalar (rank-0) all_reduce nodes of the per-device program: the metric
// partial sums.
int scalar_all_reduces(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes)
    if (node.op == ir::Op::kAllReduce && node.shape.empty()) ++n;
  return n;
}

// Backward all_reduce nodes: how many, their elements, and their bucket ids.
struct GradientAllReduces {
  int nodes = 0;
  int64_t elements = 0;
  std::vector<int> buckets;
};

GradientAllReduces gradient_all_reduces(const ir::Graph& g) {
  GradientAllReduces r;
  for (const ir::Node& node : g.nodes)
    if (node.op == ir::Op::kAllReduce && node.backward) {
      ++r.nodes;
      r.elements += ir::num_elements(node.shape);
      r.buckets.push_back(node.dim2);
    }
  return r;
}

TEST(TrainCommBytes, DataParallelIsOneBucketedGradientAllReducePlusScalarMetrics) {
  const Sizes sz = sizes(small());
  const Step s = one_step("data=8");
  const ir::Graph& local = s.lowered.partitioned;

  // Every gradient is a partial sum over 'data' resolved by an all_reduce, and
  // all six form one bucket: one collective of 8840 floats.
  const GradientAllReduces grads = gradient_all_reduces(local);
  EXPECT_EQ(grads.nodes, 6);
  EXPECT_EQ(grads.elements, sz.total());
  ASSERT_FALSE(grads.buckets.empty());
  for (int b : grads.buckets) EXPECT_EQ(b, grads.buckets.front()) << "one bucket";
  EXPECT_GE(grads.buckets.front(), 0);
  // The metrics: the batch means of the loss and of the accuracy, partial
  // over 'data'. The global norm needs none: the gradients are replicated.
  ASSERT_EQ(scalar_all_reduces(local), 2);

  for (int p = 0; p < kN; ++p) {
    SCOPED_TRACE("device " + std::to_string(p));
    const rt::CommStats& st = s.result.comm[p];
    const uint64_t want = all_reduce_bytes(sz.total(), kN, p) + 2 * all_reduce_bytes(1, kN, p);
    EXPECT_EQ(st.bytes(CollectiveKind::kAllReduce), want);
    EXPECT_EQ(st.count(CollectiveKind::kAllReduce), 1u + 2u) << "one gradient bucket + two metrics";
    EXPECT_EQ(st.total_bytes(), st.bytes(CollectiveKind::kAllReduce)) << st.to_string();
  }
  // The numbers, for the record: 8840 floats divide by 8, so the bucket costs
  // 2*7/8 * 35360 = 61880 bytes on every device.
  EXPECT_EQ(s.result.comm[0].bytes(CollectiveKind::kAllReduce), 61880u + 8u);
  EXPECT_EQ(s.result.comm[3].bytes(CollectiveKind::kAllReduce), 61880u + 16u);
}

// FSDP with the model's FSDPRule("fsdp", 1024): the two 64x64 kernels are
// sharded (on their first dimension); the biases and the 64x8 = 512-element
// last kernel stay replicated.
//
// A sharded kernel is all-gathered for the forward dot, all-gathered again in
// the backward pass where its input gradient (dx = dy . W^T) needs it, and its
// gradient is reduce-scattered: 3(n-1)/n of its bytes. The issue's
// "3(n-1)/n of the parameter bytes" holds for every parameter whose input
// gradient is computed; the FIRST layer's input is the images, which need no
// gradient, so dense1/kernel costs 2(n-1)/n (forward gather + reduce-scatter).
// Replicated parameters' gradients are all-reduced, in one bucket.
TEST(TrainCommBytes, FsdpGathersTwiceScattersOnceAndAllReducesTheReplicated) {
  const Sizes sz = sizes(small());
  const Step s = one_step("fsdp=8");
  const ir::Graph& local = s.lowered.partitioned;

  for (const char* name : {"dense1/kernel", "dense2/kernel"})
    EXPECT_EQ(local.find(name, ir::Op::kParameter)->sharding->str(), "[{\"fsdp\"}, {}]") << name;
  for (const char* name : {"dense1/bias", "dense2/bias", "dense3/kernel", "dense3/bias"})
    EXPECT_TRUE(local.find(name, ir::Op::kParameter)->sharding->is_replicated()) << name;

  // Per sharded parameter: gathers (forward, and backward when the input
  // gradient is computed) and one reduce-scatter of its gradient.
  const uint64_t k1 = ring_share_bytes(sz.kernel1, kN), k2 = ring_share_bytes(sz.kernel2, kN);
  const uint64_t gather = 1 * k1 + 2 * k2;
  const uint64_t scatter = k1 + k2;
  EXPECT_EQ(gather + scatter, 2 * k1 + 3 * k2)
      << "per parameter: 2(n-1)/n for dense1, 3(n-1)/n for dense2";
  // The replicated parameters' gradients: one bucket of 648 floats.
  const int64_t replicated = sz.bias1 + sz.bias2 + sz.kernel3 + sz.bias3;
  const GradientAllReduces grads = gradient_all_reduces(local);
  EXPECT_EQ(grads.nodes, 4);
  EXPECT_EQ(grads.elements, replicated);
  ASSERT_FALSE(grads.buckets.empty());
  for (int b : grads.buckets) EXPECT_EQ(b, grads.buckets.front()) << "one bucket";
  // Metrics: loss and accuracy means, and the global norm's sum of squares,
  // partial wherever a gradient is sharded (each device holds 1/8 of the two
  // sharded ones): combine_reductions sums those partials locally, so ONE
  // all-reduce resolves the norm, not one per sharded gradient.
  ASSERT_EQ(scalar_all_reduces(local), 3);

  for (int p = 0; p < kN; ++p) {
    SCOPED_TRACE("device " + std::to_string(p));
    const rt::CommStats& st = s.result.comm[p];
    EXPECT_EQ(st.bytes(CollectiveKind::kAllGather), gather);
    EXPECT_EQ(st.count(CollectiveKind::kAllGather), 3u);
    EXPECT_EQ(st.bytes(CollectiveKind::kReduceScatter), scatter);
    EXPECT_EQ(st.count(CollectiveKind::kReduceScatter), 2u);
    EXPECT_EQ(st.bytes(CollectiveKind::kAllReduce),
              all_reduce_bytes(replicated, kN, p) + 3 * all_reduce_bytes(1, kN, p));
    EXPECT_EQ(st.count(CollectiveKind::kAllReduce), 1u + 3u)
        << "one gradient bucket + loss, accuracy and the global norm";
    EXPECT_EQ(st.bytes(CollectiveKind::kAllToAll), 0u);
    EXPECT_EQ(st.bytes(CollectiveKind::kPPermute), 0u);
  }
  // The numbers: 14336 bytes per (n-1)/n of a 64x64 kernel; gathers 3 x 14336
  // = 43008, reduce-scatters 2 x 14336 = 28672, the bucket 2*7/8 * 2592 = 4536
  // plus three one-float all-reduces (4 bytes each on the first and last
  // device, 8 on the others): 12 or 24 bytes.
  EXPECT_EQ(gather, 43008u);
  EXPECT_EQ(scatter, 28672u);
  EXPECT_EQ(s.result.comm[0].bytes(CollectiveKind::kAllReduce), 4536u + 12u);
  EXPECT_EQ(s.result.comm[1].bytes(CollectiveKind::kAllReduce), 4536u + 24u);
}

}  // namespace
}  // namespace sharc
