// The ops of the DSL. Each validates its operands against the global shapes
// and reports mistakes at the caller's line (matmul contraction mismatch,
// incompatible broadcast, bad axes), then appends IR nodes. Composite ops
// (softmax, layer_norm, mean) expand into primitive nodes so that propagation,
// partitioning and autodiff only know the primitives; the emitter fuses them
// back into loops.
#pragma once

#include <optional>
#include <vector>

#include "dsl/tensor.h"

namespace sharc {

// Elementwise arithmetic and functions, with numpy broadcasting; a double
// operand is a scalar constant.
//@{
Tensor add(Tensor a, Tensor b, SrcLoc loc = Here::current());
Tensor sub(Tensor a, Tensor b, SrcLoc loc = Here::current());
Tensor mul(Tensor a, Tensor b, SrcLoc loc = Here::current());
Tensor div(Tensor a, Tensor b, SrcLoc loc = Here::current());
Tensor add(Tensor a, double b, SrcLoc loc = Here::current());
Tensor mul(Tensor a, double b, SrcLoc loc = Here::current());
Tensor neg(Tensor x, SrcLoc loc = Here::current());
Tensor relu(Tensor x, SrcLoc loc = Here::current());
Tensor gelu(Tensor x, SrcLoc loc = Here::current());
Tensor tanh(Tensor x, SrcLoc loc = Here::current());
Tensor exp(Tensor x, SrcLoc loc = Here::current());
Tensor log(Tensor x, SrcLoc loc = Here::current());
Tensor sqrt(Tensor x, SrcLoc loc = Here::current());
Tensor sin(Tensor x, SrcLoc loc = Here::current());
Tensor cos(Tensor x, SrcLoc loc = Here::current());
Tensor abs(Tensor x, SrcLoc loc = Here::current());
Tensor sigmoid(Tensor x, SrcLoc loc = Here::current());
Tensor erf(Tensor x, SrcLoc loc = Here::current());
//@}
Tensor log1p(Tensor x, SrcLoc loc = Here::current());  // log(1 + x), exact near 0
Tensor expm1(Tensor x, SrcLoc loc = Here::current());  // exp(x) - 1, exact near 0
// a^b elementwise (std::pow's special cases). Its gradient in b is
// a^b log(a), so differentiate through b only where a > 0.
Tensor pow(Tensor a, Tensor b, SrcLoc loc = Here::current());
// The elementwise larger and smaller of a and b (jnp.maximum, jnp.minimum);
// on a tie the gradient goes to a.
//@{
Tensor maximum(Tensor a, Tensor b, SrcLoc loc = Here::current());
Tensor minimum(Tensor a, Tensor b, SrcLoc loc = Here::current());
//@}
// 1.0 where the comparison (a > b, a == b) holds, else 0.0 (masks are floats
// in sharc).
//@{
Tensor greater(Tensor a, Tensor b, SrcLoc loc = Here::current());
Tensor equal(Tensor a, Tensor b, SrcLoc loc = Here::current());
//@}
// jnp.where: on_true where pred != 0, else on_false, broadcast to one shape.
// The gradient flows to the branch taken; pred gets none.
Tensor where(Tensor pred, Tensor on_true, Tensor on_false, SrcLoc loc = Here::current());
// min(max(x, lo), hi), as std::clamp for lo <= hi.
Tensor clamp(Tensor x, Tensor lo, Tensor hi, SrcLoc loc = Here::current());
// The numpy broadcast of shapes x and y; `x_is` and `y_is` describe them in
// the error that an incompatible pair raises at `loc`.
ir::Shape broadcast_shape(const ir::Shape& x, const std::string& x_is, const ir::Shape& y,
                          const std::string& y_is, const SrcLoc& loc);
// A constant of the given shape (a scalar when shape is empty).
Tensor full(std::vector<int64_t> shape, double value, SrcLoc loc = Here::current());
// Each element is its global index along `dim` (lax.broadcasted_iota).
Tensor iota(std::vector<int64_t> shape, int dim, SrcLoc loc = Here::current());
// Uniform (0, 1) noise drawn from the element's global index and a stream
// chosen by `seed` (a scalar tensor, e.g. the step number) and the call site,
// so masks are the same on every mesh.
Tensor random_uniform(std::vector<int64_t> shape, Tensor seed, SrcLoc loc = Here::current());
// x[..., start:start+size, ...] along dim.
Tensor slice(Tensor x, int dim, int64_t start, int64_t size, SrcLoc loc = Here::current());
// slice's adjoint: x with `before` and `after` zeros around it along dim.
Tensor pad(Tensor x, int dim, int64_t before, int64_t after, SrcLoc loc = Here::current());

// Operators take no location (operators cannot have default arguments); the
// nodes they create are attributed to the enclosing module call if any.
//@{
inline Tensor operator+(Tensor a, Tensor b) { return add(a, b, SrcLoc()); }
inline Tensor operator-(Tensor a, Tensor b) { return sub(a, b, SrcLoc()); }
inline Tensor operator*(Tensor a, Tensor b) { return mul(a, b, SrcLoc()); }
inline Tensor operator/(Tensor a, Tensor b) { return div(a, b, SrcLoc()); }
inline Tensor operator*(Tensor a, double b) { return mul(a, b, SrcLoc()); }
inline Tensor operator+(Tensor a, double b) { return add(a, b, SrcLoc()); }
//@}

// The element type (ir::DType: kF32, kBF16, kI32) of x changed to `dtype`,
// like jnp.astype: to bf16 rounds to nearest, ties to even; to i32 truncates.
// Identity when x already has it. Its gradient converts back.
Tensor astype(Tensor x, ir::DType dtype, SrcLoc loc = Here::current());

// numpy.matmul: (..., M, K) x (K, N) or batched (B..., M, K) x (B..., K, N).
Tensor matmul(Tensor a, Tensor b, SrcLoc loc = Here::current());
// jnp.dot for 1-D/2-D operands (same as matmul there).
Tensor dot(Tensor a, Tensor b, SrcLoc loc = Here::current());
// lax.dot_general: explicit batch and contracting dimensions.
Tensor dot_general(Tensor a, Tensor b, ir::DotDims dims, SrcLoc loc = Here::current());

// x's elements in a new shape, row-major (jnp.reshape); one entry may be -1.
Tensor reshape(Tensor x, std::vector<int64_t> shape, SrcLoc loc = Here::current());
// x's dimensions permuted: result dimension i is x's dimension perm[i].
Tensor transpose(Tensor x, std::vector<int> perm, SrcLoc loc = Here::current());
// x broadcast to `shape` by numpy's rules (jnp.broadcast_to).
Tensor broadcast_to(Tensor x, std::vector<int64_t> shape, SrcLoc loc = Here::current());

// Reductions over the given axes (negative counts from the end), which are
// removed from the shape unless keepdims.
//@{
Tensor sum(Tensor x, std::vector<int> axes, bool keepdims = false, SrcLoc loc = Here::current());
Tensor mean(Tensor x, std::vector<int> axes, bool keepdims = false, SrcLoc loc = Here::current());
Tensor max(Tensor x, std::vector<int> axes, bool keepdims = false, SrcLoc loc = Here::current());
//@}

// exp(x - max) / sum(exp(x - max)) along `axis` (jax.nn.softmax).
Tensor softmax(Tensor x, int axis = -1, SrcLoc loc = Here::current());
// Normalizes over the last axis; scale and bias are 1-D of that size. The
// statistics are f32 whatever x's dtype; the result has x's dtype.
Tensor layer_norm(Tensor x, Tensor scale, Tensor bias, double eps = 1e-6,
                  SrcLoc loc = Here::current());

// Labels (class indices stored as floats, exact below 2^24) to one-hot rows:
// (B...) -> (B..., num_classes).
Tensor one_hot(Tensor labels, int64_t num_classes, SrcLoc loc = Here::current());
// Mean over the batch of -log softmax(logits)[label]; logits (B..., C), labels (B...).
Tensor softmax_cross_entropy(Tensor logits, Tensor labels, SrcLoc loc = Here::current());
// The label that marks a position with no target, such as padding
// (PyTorch's ignore_index and Hugging Face's -100).
struct IgnoreLabel {
  double value = -100;  // any value that is not a class index
};
// The mean of -log softmax(logits)[label] over the positions whose label is
// not `ignore.value` (0 when all are), as torch's cross_entropy with
// ignore_index computes it; those positions get no gradient. A value of
// `ignore` that is a class index is an error at this line.
//   Tensor loss = softmax_cross_entropy(logits, targets, IgnoreLabel{-100});
Tensor softmax_cross_entropy(Tensor logits, Tensor labels, IgnoreLabel ignore, SrcLoc loc = Here::current());
// Mean squared error over all elements.
Tensor mean_squared_error(Tensor prediction, Tensor target, SrcLoc loc = Here::current());
// Inverted dropout: zeroes each element with probability `rate` and scales the
// rest by 1/(1-rate); the mask comes from random_uniform(seed).
Tensor dropout(Tensor x, double rate, Tensor seed, SrcLoc loc = Here::current());

// Pins the layout of an intermediate value (jax.lax.with_sharding_constraint).
Tensor with_sharding_constraint(Tensor x, P spec, SrcLoc loc = Here::current());

// Asks for (enable) or forbids the ring collective matmul on this dot: the
// all_gather of an operand, or the reduce_scatter of the result, that the
// partitioner puts next to it overlaps its GEMMs as a ring of ppermutes (see
// ring_collective_matmul.h). Wins over ProgramBuilder::set_collective_matmul
// and the size threshold. `dot_result` must be the result of matmul / dot /
// dot_general itself (mark the matmul, not a bias added to it); returns it.
Tensor with_collective_matmul(Tensor dot_result, bool enable, SrcLoc loc = Here::current());

}  // namespace sharc
