// A small program that exercises every op the CPU emitter prints, for the
// generated-code equivalence test: a Linear with bias (broadcast + add),
// elementwise chains that fuse (gelu of a scaled sum, tanh/exp/log/neg with
// constants), a value read by two users (so not fused), layer_norm and softmax
// (reductions that become partial sums and all-reduces across 'model'), a
// transpose, a reshape and a second matmul whose contraction is sharded.
// Several outputs, one of them also read further on, and outputs whose
// requested layouts need all_to_all, local_slice and all_reduce.
#include "dsl/sharc.h"

namespace {

using namespace sharc;

struct Block : Module {
  Linear up;
  LayerNorm norm;
  Param w_down;
  Block(Scope s, int64_t width, int64_t hidden)
      : up(s / "up", width, hidden,
           {.kernel_init = with_partitioning(lecun_normal(), P(None, "model")),
            .bias_init = with_partitioning(normal(0.5), P("model"))}),
        norm(s / "norm", hidden),
        // Stored (out, in), so the matmul below contracts its dim 1: the local
        // dot transposes it to (contract, free) before the GEMM.
        w_down(s.param("w_down", {width, hidden},
                       with_partitioning(xavier_uniform(), P(None, "model")))) {}

  // Returns {y, h}: h is the normalised hidden activation, y the block output.
  std::pair<Tensor, Tensor> operator()(Tensor x) const {
    Tensor h = up(x);
    Tensor g = gelu(h * 0.5 + 0.25);           // one fused loop: mul, add, gelu
    Tensor t = tanh(g) + exp(neg(g)) * 0.125;  // g has several users: a buffer
    Tensor n = norm(t);
    Tensor p = softmax(n, -1);
    Tensor y = dot_general(
        p, w_down, {.lhs_batch = {}, .rhs_batch = {}, .lhs_contract = {1}, .rhs_contract = {1}});
    Tensor r = reshape(log(exp(y) + 1.0), {y.dim(0), 8, y.dim(1) / 8});
    r = reshape(transpose(r, {0, 2, 1}), {y.dim(0), y.dim(1)});
    return {r + x, n};
  }
};

}  // namespace

SHARC_PROGRAM(ops_model, b) {
  Block block(b.scope(), 64, 128);
  Tensor x = b.input("x", {8, 64}, P("data", None));
  auto [y, h] = block(x);
  b.output("y", y, P("data", None));
  b.output("h", h);
  // Layout changes the partitioner expresses as an all_to_all ('data' moves
  // from dim 0 to dim 1), a local_slice (adds 'model', no communication) and
  // an all_reduce (a full sum to a scalar: no dimension left to scatter over).
  b.output("moved", mul(x, 2.0), P(None, "data"));
  b.output("sliced", add(x, 1.0), P("data", "model"));
  b.output("total", sum(mul(h, h), {0, 1}));
}
