// Reverse-mode automatic differentiation on the global IR (jax.grad for a
// traced sharc program). It appends the gradient computation to the same
// Graph, built from the existing primitive ops, so that propagation and
// partitioning treat the backward pass like any other code; it is not a
// separate tape or a runtime. It runs before partitioning, on global shapes.
//
// Non-obvious decision: every appended node is attributed to the forward node
// whose rule created it (its SrcLoc and layer label, with `backward` set), so
// a dot's adjoint dots in generated code point at the DSL line of the forward
// matmul, and the partitioner can tell gradient code from forward code.
//
// Requires: a global (unpartitioned) graph; `loss` is a rank-0 node.
// Ensures: g keeps its nodes, outputs and updates; new nodes are appended
//   after the last existing one, all with backward = true; the returned ids
//   have the shapes of the `wrt` nodes.
//
//   before: %0 = parameter() "w" init=zeros() : f32[4,3]  // model.cpp:8
//           %1 = input() "x" spec=P(None, None) : f32[2,4]  // model.cpp:9
//           %2 = dot(%1, %0) contract=[1]x[0] : f32[2,3]  // model.cpp:10
//           %3 = reduce(%2) sum axes=[0,1] : f32[]  // model.cpp:10
//   after:  the above, then
//           %4 = constant() 1 : f32[] backward  // model.cpp:10 (the seed: d loss/d loss)
//           %5 = broadcast(%4) dims=[] : f32[2,3] backward  // model.cpp:10 (reduce's adjoint)
//           %6 = dot(%1, %5) contract=[0]x[0] : f32[4,3] backward  // model.cpp:10 (dot's)
//   and append_gradients returns {6} for wrt = {0}.
//
// Rules with a choice (the same as JAX's):
//   - max/min (elementwise) at a tie x == y give half of the gradient to each
//     operand (lax.max's balanced equality).
//   - reduce max gives each element equal to the maximum an equal share:
//     g / (number of tied elements).
//   - relu at exactly 0 has gradient 0; greater/equal have gradient 0
//     everywhere (nothing flows through them), as does random_uniform's seed.
//   - sharding_constraint's adjoint is a sharding_constraint with the same
//     spec and rules (jax.lax.with_sharding_constraint's transpose).
#pragma once

#include <optional>
#include <vector>

#include "ir/ir.h"

namespace sharc {

// Appends to g the nodes computing d(loss)/d(wrt[i]) for a scalar (rank-0)
// loss node, and returns their ids (same order as wrt; a node that does not
// reach the loss gets a zeros Constant of its shape). Only nodes on a path
// from some wrt node to the loss get adjoints. Throws user_error at `loc` if
// the loss is not a scalar; internal_error on a partitioned graph or ids out
// of range.
std::vector<int> append_gradients(ir::Graph& g, int loss, const std::vector<int>& wrt,
                                  const SrcLoc& loc);

// As append_gradients for source nodes (parameters), but each gradient as
// the separate contributions of the node's uses, in accumulation order (their
// sum is the gradient; empty when it does not reach the loss). train_step
// accumulates a pipelined program's gradients per use over micro-batches, so
// the halves of a tied embedding, computed on the first and the last stage,
// meet once after the last micro-batch instead of once per micro-batch.
std::vector<std::vector<int>> append_gradient_parts(ir::Graph& g, int loss, const std::vector<int>& wrt,
                                                    const SrcLoc& loc);

// The gradient the kGelu rule appends for y = gelu(x), gy * gelu'(x),
// written out in primitive ops (14 nodes and 8 constants). When `node` is
// the root of exactly that expression, returns its gy and x: the GPU backend
// runs it as a GEMM's GELU-backward epilogue (codegen/passes/use_gpu_kernels.h)
// when gy is a GEMM's result. The matcher lives beside the rule, so the two
// change together; tests/autodiff/autodiff_test.cpp finds the rule's output
// with it.
struct GeluGradient {
  int gy = -1, x = -1;
};
std::optional<GeluGradient> match_gelu_gradient(const ir::Graph& g, int node);

}  // namespace sharc
