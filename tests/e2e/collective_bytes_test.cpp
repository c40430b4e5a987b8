// The bytes each device sends for DotReluDot's forward pass on
// <["data"=2, "model"=4]> (batch 8, depth 1024), as counted by the runtime's
// communicator, against the analytical ring-collective values. A ring
// reduce-scatter or all-gather over n devices sends n-1 chunks of 1/n of the
// full buffer from every device; nothing else may communicate.
#include <gtest/gtest.h>

#include "codegen/execute.h"
#include "codegen/pipeline.h"
#include "samples/dot_relu_dot/model.h"

namespace sharc {
namespace {

using rt::CollectiveKind;

TEST(CollectiveBytes, DotReluDotOnData2Model4) {
  constexpr uint64_t kF32 = sizeof(float);
  constexpr uint64_t kBatch = dot_relu_dot::kBatch;  // 8
  constexpr uint64_t kDepth = dot_relu_dot::kDepth;  // 1024
  constexpr uint64_t kData = 2, kModel = 4;
  static_assert(kBatch == 8 && kDepth == 1024);

  const ir::Graph g =
      trace("dot_relu_dot", [](ProgramBuilder& b) { dot_relu_dot::build_dot_relu_dot(b); });
  const Lowered l = lower(g, Mesh::parse("data=2,model=4", 8));
  HostValues in = {{"x", std::vector<double>(kBatch * kDepth, 0.5)}};
  const ExecResult r = execute_partitioned(l.partitioned, in, 0);
  ASSERT_EQ(r.comm.size(), 8u);

  // Per device, the batch rows are split over 'data': 8/2 = 4 rows.
  constexpr uint64_t kRows = kBatch / kData;  // 4
  // dot1 (x @ kernel, kernel split by columns) and relu are local: (4, 256).
  // dot2 contracts the 256 local hidden units against w2's matching rows: a
  // partial sum f32[4,1024] over 'model'. Its ring reduce-scatter over n = 4
  // sends n-1 of the n chunks of that buffer:
  constexpr uint64_t kReduceScatter = (kModel - 1) * (kRows * kDepth * kF32) / kModel;  // 12288
  // The output y is ('data', None), so the scattered f32[4,256] block is
  // all-gathered back over 'model' to f32[4,1024]: each device forwards the
  // n-1 blocks it does not own, one f32[4,256] each.
  constexpr uint64_t kAllGather = (kModel - 1) * (kRows * (kDepth / kModel) * kF32);  // 12288
  static_assert(kReduceScatter == 12288 && kAllGather == 12288);

  for (int rank = 0; rank < 8; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ":\n" + r.comm[rank].to_string() +
                 "partitioned IR:\n" + ir::to_string(l.partitioned));
    const rt::CommStats& s = r.comm[rank];
    EXPECT_EQ(s.bytes(CollectiveKind::kReduceScatter), kReduceScatter);
    EXPECT_EQ(s.bytes(CollectiveKind::kAllGather), kAllGather);
    EXPECT_EQ(s.count(CollectiveKind::kReduceScatter), 1u);
    EXPECT_EQ(s.count(CollectiveKind::kAllGather), 1u);
    // Nothing else: no all-reduce, all-to-all or point-to-point traffic.
    EXPECT_EQ(s.bytes(CollectiveKind::kAllReduce), 0u);
    EXPECT_EQ(s.bytes(CollectiveKind::kAllToAll), 0u);
    EXPECT_EQ(s.bytes(CollectiveKind::kPPermute), 0u);
    EXPECT_EQ(s.count(CollectiveKind::kAllReduce), 0u);
    EXPECT_EQ(s.count(CollectiveKind::kAllToAll), 0u);
    EXPECT_EQ(s.count(CollectiveKind::kPPermute), 0u);
    EXPECT_EQ(s.total_bytes(), kReduceScatter + kAllGather);
  }
}

}  // namespace
}  // namespace sharc
