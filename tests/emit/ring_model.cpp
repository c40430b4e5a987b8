// Programs whose dots all run as rings (ProgramBuilder::set_collective_matmul
// kAlways), for the ring equivalence test. ring_ops_{uni,bi} cover every way
// a RingDot's steps read and write (mesh model=4): a Megatron MLP with
// sequence parallelism (lhs gathered along its leading dim, result scattered
// along its leading dim: contiguous pieces), an rhs gathered along its last
// dim (strided result pieces), a batch-dim gather (the stationary operand cut
// per step), a scatter onto the rhs's last dim (strided operand pieces) and a
// scatter of a batched dot. ring_mlp is the MLP alone on data=2,model=4.
#include "dsl/sharc.h"

namespace {

using namespace sharc;

// Tokens on `tokens` (a mesh axis or two), hidden units on 'model'.
Tensor megatron_mlp(ProgramBuilder& b, DimSpec tokens, DimSpec gathered) {
  Param w1 = b.scope().param("w1", {48, 64}, with_partitioning(lecun_normal(), P(None, "model")));
  Param w2 = b.scope().param("w2", {64, 48}, with_partitioning(lecun_normal(), P("model", None)));
  Tensor x = b.input("x", {32, 48}, P(tokens, None));
  // Column-parallel layer on all tokens, row-parallel layer scattered back.
  Tensor h = relu(matmul(with_sharding_constraint(x, P(gathered, None)), w1));
  return matmul(h, w2);
}

void ring_ops(ProgramBuilder& b) {
  b.output("y", megatron_mlp(b, "model", None), P("model", None));
  // rhs gathered along dim 1.
  Param w3 = b.scope().param("w3", {24, 16}, with_partitioning(lecun_normal(), P(None, None)));
  Tensor xt = b.input("xt", {16, 32}, P(None, "model"));
  b.output("z", matmul(w3, with_sharding_constraint(xt, P(None, None))), P(None, None));
  // Batch-dim gather.
  Tensor xb = b.input("xb", {8, 6, 16}, P("model", None, None));
  Tensor wb = b.input("wb", {8, 16, 10});
  b.output("v", matmul(with_sharding_constraint(xb, P(None, None, None)), wb), P(None, None, None));
  // Scatter onto the rhs's last dim.
  Param w4 = b.scope().param("w4", {24, 64}, with_partitioning(lecun_normal(), P(None, "model")));
  Tensor ht = b.input("ht", {64, 32}, P("model", None));
  b.output("u", matmul(w4, ht), P(None, "model"));
  // Scatter of a batched dot onto an lhs dim behind the batch.
  Tensor a = b.input("a", {2, 16, 32}, P(None, None, "model"));
  Tensor c = b.input("c", {2, 32, 8}, P(None, "model", None));
  b.output("s", matmul(a, c), P(None, "model", None));
}

}  // namespace

SHARC_PROGRAM(ring_ops_uni, b) {
  b.set_collective_matmul(CollectiveMatmul::kAlways, RingDirection::kUnidirectional);
  ring_ops(b);
}

SHARC_PROGRAM(ring_ops_bi, b) {
  b.set_collective_matmul(CollectiveMatmul::kAlways, RingDirection::kBidirectional);
  ring_ops(b);
}

SHARC_PROGRAM(ring_mlp, b) {
  b.set_collective_matmul(CollectiveMatmul::kAlways);
  b.output("y", megatron_mlp(b, axes("data", "model"), "data"), P(axes("data", "model"), None));
}
