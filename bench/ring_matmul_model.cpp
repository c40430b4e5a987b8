// The programs bench_ring_matmul compares: one tensor-parallel MLP layer pair
// (Megatron with sequence parallelism) on model=8, the same model three times
// with a different collective matmul setting. ring_mlp_sync keeps the
// all_gather before the column-parallel dot and the reduce_scatter after the
// row-parallel one; ring_mlp_uni and ring_mlp_bi run both as rings
// (one-way, and half of every block each way).
#include "dsl/sharc.h"

namespace {

using namespace sharc;

constexpr int64_t kTokens = 1024, kModel = 1024, kHidden = 2048;

void mlp(ProgramBuilder& b) {
  Param w1 =
      b.scope().param("w1", {kModel, kHidden}, with_partitioning(lecun_normal(), P(None, "model")));
  Param w2 =
      b.scope().param("w2", {kHidden, kModel}, with_partitioning(lecun_normal(), P("model", None)));
  Tensor x = b.input("x", {kTokens, kModel}, P("model", None));
  Tensor h = relu(matmul(with_sharding_constraint(x, P(None, None)), w1));  // all tokens, hidden/8
  b.output("y", matmul(h, w2), P("model", None));                           // summed, tokens/8
}

}  // namespace

SHARC_PROGRAM(ring_mlp_sync, b) {
  b.set_collective_matmul(CollectiveMatmul::kNever);
  mlp(b);
}

SHARC_PROGRAM(ring_mlp_uni, b) {
  b.set_collective_matmul(CollectiveMatmul::kAlways, RingDirection::kUnidirectional);
  mlp(b);
}

SHARC_PROGRAM(ring_mlp_bi, b) {
  b.set_collective_matmul(CollectiveMatmul::kAlways, RingDirection::kBidirectional);
  mlp(b);
}
