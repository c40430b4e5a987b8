// DSL ops: operand checks with user-facing errors, then IR nodes.
#include "dsl/ops.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/philox.h"

namespace sharc {

ir::Shape broadcast_shape(const ir::Shape& x, const std::string& a, const ir::Shape& y,
                          const std::string& b, const SrcLoc& loc) {
  const size_t r = std::max(x.size(), y.size());
  ir::Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t dx = i < r - x.size() ? 1 : x[i - (r - x.size())];
    const int64_t dy = i < r - y.size() ? 1 : y[i - (r - y.size())];
    if (dx != dy && dx != 1 && dy != 1)
      user_error(loc, "incompatible broadcast: " + a + " and " + b + ": dimension " +
                          std::to_string(i) + " of the result would be both " +
                          std::to_string(dx) + " and " + std::to_string(dy));
    out[i] = std::max(dx, dy);
  }
  return out;
}

namespace {

using ir::Node;
using ir::Op;
using ir::Shape;

// The tracer an operand belongs to, which must be the one tracing now: a
// tensor from another program, or from outside the shard_map body being
// traced, would otherwise be read as an unrelated node of this graph.
Tracer& tracer_of(const Tensor& a, const SrcLoc& loc) {
  if (!a.valid()) user_error(loc, "operation on an empty Tensor");
  if (a.tracer() != &Tracer::current(loc))
    // The tensor cannot be described: its tracer may be gone (a shard_map
    // body is traced again at lowering, after the program's tracer).
    user_error(loc, "a tensor passed to this call belongs to another traced program (a tensor "
                    "from outside a shard_map body?); pass it to shard_map as an operand");
  return *a.tracer();
}

Tensor make(Tracer& t, Op op, std::vector<int> args, Shape shape, const SrcLoc& loc) {
  Node n;
  n.op = op;
  n.args = std::move(args);
  n.shape = std::move(shape);
  n.loc = loc;
  return t.add(std::move(n));
}

Tensor constant_like(Tracer& t, double v, const Shape& shape, const SrcLoc& loc,
                     ir::DType dtype = ir::DType::kF32) {
  Node n;
  n.op = Op::kConstant;
  n.scalar = v;
  n.shape = shape;
  n.dtype = dtype;
  n.loc = loc;
  return t.add(std::move(n));
}

// Broadcasts x (right-aligned, numpy rules) to `shape`; identity if equal.
Tensor broadcast_impl(Tensor x, const Shape& shape, const SrcLoc& loc) {
  const Shape& in = x.shape();
  if (in == shape) return x;
  Node n;
  n.op = Op::kBroadcast;
  n.args = {x.id()};
  n.shape = shape;
  n.loc = loc;
  const int off = static_cast<int>(shape.size()) - static_cast<int>(in.size());
  for (int i = 0; i < static_cast<int>(in.size()); ++i) n.ints.push_back(off + i);
  return tracer_of(x, loc).add(std::move(n));
}

Shape broadcast_shapes(const Tensor& a, const Tensor& b, const SrcLoc& loc) {
  return broadcast_shape(a.shape(), a.describe(), b.shape(), b.describe(), loc);
}

// Element types must agree (no silent promotion: a bf16 activation meeting
// an f32 one is usually a missed astype), and i32 is for ids and labels:
// comparisons, adds and selections, no division or transcendental math.
void check_types(Op op, const Tensor& a, const Tensor* b, const SrcLoc& loc) {
  if (b && a.dtype() != b->dtype())
    user_error(loc, std::string(ir::op_name(op)) + " of " + a.describe() + " and " + b->describe() +
                        ": the element types differ; convert one with astype()");
  const bool integer_ok = op == Op::kAdd || op == Op::kSub || op == Op::kMul || op == Op::kMax ||
                          op == Op::kMin || op == Op::kGreater || op == Op::kEqual ||
                          op == Op::kNeg || op == Op::kAbs || op == Op::kSelect ||
                          op == Op::kConvert;
  if (a.dtype() == ir::DType::kI32 && !integer_ok)
    user_error(loc, std::string(ir::op_name(op)) + " of " + a.describe() +
                        ": i32 holds ids and labels; convert it with astype(x, DType::kF32) first");
}

Tensor binary(Op op, Tensor a, Tensor b, const SrcLoc& loc) {
  Tracer& t = tracer_of(a, loc);
  tracer_of(b, loc);
  check_types(op, a, &b, loc);
  const Shape out = broadcast_shapes(a, b, loc);
  a = broadcast_impl(a, out, loc);
  b = broadcast_impl(b, out, loc);
  return make(t, op, {a.id(), b.id()}, out, loc);
}

Tensor unary(Op op, Tensor x, const SrcLoc& loc) {
  Tracer& t = tracer_of(x, loc);
  check_types(op, x, nullptr, loc);
  return make(t, op, {x.id()}, x.shape(), loc);
}

int normalize_axis(const Tensor& x, int axis, const SrcLoc& loc, const char* what) {
  const int r = static_cast<int>(x.rank());
  if (axis < -r || axis >= r)
    user_error(loc, std::string(what) + ": axis " + std::to_string(axis) + " is out of range for " +
                        x.describe());
  return axis < 0 ? axis + r : axis;
}

Tensor reduce_impl(ir::ReduceKind kind, Tensor x, std::vector<int> axes, bool keepdims,
                   const SrcLoc& loc, const char* what) {
  std::set<int> ax;
  for (int a : axes)
    if (!ax.insert(normalize_axis(x, a, loc, what)).second)
      user_error(loc, std::string(what) + ": axis " + std::to_string(a) + " listed twice");
  Shape out, kept;
  for (int i = 0; i < static_cast<int>(x.rank()); ++i) {
    if (!ax.count(i)) out.push_back(x.shape()[i]);
    kept.push_back(ax.count(i) ? 1 : x.shape()[i]);
  }
  Node n;
  n.op = Op::kReduce;
  n.args = {x.id()};
  n.shape = out;
  n.reduce = kind;
  n.ints.assign(ax.begin(), ax.end());
  n.loc = loc;
  Tensor r = tracer_of(x, loc).add(std::move(n));
  return keepdims ? reshape(r, kept, loc) : r;
}

}  // namespace

Tensor add(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kAdd, a, b, loc); }
Tensor sub(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kSub, a, b, loc); }
Tensor mul(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kMul, a, b, loc); }
Tensor div(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kDiv, a, b, loc); }
Tensor add(Tensor a, double b, SrcLoc loc) {
  return binary(Op::kAdd, a, constant_like(tracer_of(a, loc), b, a.shape(), loc, a.dtype()), loc);
}
Tensor mul(Tensor a, double b, SrcLoc loc) {
  return binary(Op::kMul, a, constant_like(tracer_of(a, loc), b, a.shape(), loc, a.dtype()), loc);
}
Tensor neg(Tensor x, SrcLoc loc) { return unary(Op::kNeg, x, loc); }
Tensor relu(Tensor x, SrcLoc loc) { return unary(Op::kRelu, x, loc); }
Tensor gelu(Tensor x, SrcLoc loc) { return unary(Op::kGelu, x, loc); }
Tensor tanh(Tensor x, SrcLoc loc) { return unary(Op::kTanh, x, loc); }
Tensor exp(Tensor x, SrcLoc loc) { return unary(Op::kExp, x, loc); }
Tensor log(Tensor x, SrcLoc loc) { return unary(Op::kLog, x, loc); }
Tensor sqrt(Tensor x, SrcLoc loc) { return unary(Op::kSqrt, x, loc); }
Tensor sin(Tensor x, SrcLoc loc) { return unary(Op::kSin, x, loc); }
Tensor cos(Tensor x, SrcLoc loc) { return unary(Op::kCos, x, loc); }
Tensor abs(Tensor x, SrcLoc loc) { return unary(Op::kAbs, x, loc); }
Tensor sigmoid(Tensor x, SrcLoc loc) { return unary(Op::kSigmoid, x, loc); }
Tensor erf(Tensor x, SrcLoc loc) { return unary(Op::kErf, x, loc); }
Tensor log1p(Tensor x, SrcLoc loc) { return unary(Op::kLog1p, x, loc); }
Tensor expm1(Tensor x, SrcLoc loc) { return unary(Op::kExpm1, x, loc); }
Tensor pow(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kPow, a, b, loc); }
Tensor astype(Tensor x, ir::DType dtype, SrcLoc loc) {
  Tracer& t = tracer_of(x, loc);
  if (x.dtype() == dtype) return x;
  Node n;
  n.op = Op::kConvert;
  n.args = {x.id()};
  n.shape = x.shape();
  n.dtype = dtype;
  n.loc = loc;
  return t.add(std::move(n));
}

Tensor maximum(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kMax, a, b, loc); }
Tensor minimum(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kMin, a, b, loc); }
Tensor greater(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kGreater, a, b, loc); }
Tensor equal(Tensor a, Tensor b, SrcLoc loc) { return binary(Op::kEqual, a, b, loc); }

Tensor where(Tensor pred, Tensor on_true, Tensor on_false, SrcLoc loc) {
  Tracer& t = tracer_of(pred, loc);
  tracer_of(on_true, loc);
  tracer_of(on_false, loc);
  check_types(Op::kSelect, on_true, &on_false, loc);
  const Shape out = broadcast_shape(pred.shape(), "the condition " + pred.describe(),
                                    broadcast_shapes(on_true, on_false, loc),
                                    "the branches " + on_true.describe() + ", " +
                                        on_false.describe(),
                                    loc);
  pred = broadcast_impl(pred, out, loc);
  on_true = broadcast_impl(on_true, out, loc);
  on_false = broadcast_impl(on_false, out, loc);
  return make(t, Op::kSelect, {pred.id(), on_true.id(), on_false.id()}, out, loc);
}

Tensor clamp(Tensor x, Tensor lo, Tensor hi, SrcLoc loc) {
  return minimum(maximum(x, lo, loc), hi, loc);
}

Tensor full(std::vector<int64_t> shape, double value, SrcLoc loc) {
  for (auto d : shape)
    if (d <= 0) user_error(loc, "full: non-positive dimension in " + ir::shape_str(shape));
  return constant_like(Tracer::current(loc), value, shape, loc);
}

Tensor iota(std::vector<int64_t> shape, int dim, SrcLoc loc) {
  const int r = static_cast<int>(shape.size());
  if (dim < -r || dim >= r) user_error(loc, "iota: dimension " + std::to_string(dim) + " out of range for " + ir::shape_str(shape));
  for (auto d : shape)
    if (d <= 0) user_error(loc, "iota: non-positive dimension in " + ir::shape_str(shape));
  Node n;
  n.op = Op::kIota;
  n.shape = std::move(shape);
  n.ints = {dim < 0 ? dim + r : dim};
  n.loc = loc;
  return Tracer::current(loc).add(std::move(n));
}

Tensor random_uniform(std::vector<int64_t> shape, Tensor seed, SrcLoc loc) {
  Tracer& t = tracer_of(seed, loc);
  if (seed.rank() != 0) user_error(loc, "random_uniform: the seed must be a scalar, got " + seed.describe());
  for (auto d : shape)
    if (d <= 0) user_error(loc, "random_uniform: non-positive dimension in " + ir::shape_str(shape));
  Node n;
  n.op = Op::kRandomUniform;
  n.args = {seed.id()};
  n.shape = std::move(shape);
  n.loc = loc;
  // A distinct stream per call site and per call (two calls on one line
  // differ): keyed by the number of random_uniform calls traced before, not
  // by node numbers, so that layer i of a Layers draws the same masks
  // unrolled and scanned (the two forms trace different parameter nodes).
  n.key = rt::hash_name(loc.str() + "#" + std::to_string(t.next_random()));
  return t.add(std::move(n));
}

Tensor slice(Tensor x, int dim, int64_t start, int64_t size, SrcLoc loc) {
  Tracer& t = tracer_of(x, loc);
  dim = normalize_axis(x, dim, loc, "slice");
  if (start < 0 || size <= 0 || start + size > x.dim(dim))
    user_error(loc, "slice: [" + std::to_string(start) + ", " + std::to_string(start + size) +
                        ") is not inside dimension " + std::to_string(dim) + " of " + x.describe());
  Shape out = x.shape();
  out[dim] = size;
  Node n;
  n.op = Op::kSlice;
  n.args = {x.id()};
  n.shape = out;
  n.ints = {dim, static_cast<int>(start), static_cast<int>(size)};
  n.loc = loc;
  return t.add(std::move(n));
}

Tensor pad(Tensor x, int dim, int64_t before, int64_t after, SrcLoc loc) {
  Tracer& t = tracer_of(x, loc);
  dim = normalize_axis(x, dim, loc, "pad");
  if (before < 0 || after < 0) user_error(loc, "pad: negative padding for " + x.describe());
  Shape out = x.shape();
  out[dim] += before + after;
  Node n;
  n.op = Op::kPad;
  n.args = {x.id()};
  n.shape = out;
  n.ints = {dim, static_cast<int>(before), static_cast<int>(after)};
  n.loc = loc;
  return t.add(std::move(n));
}

Tensor one_hot(Tensor labels, int64_t num_classes, SrcLoc loc) {
  Tracer& t = tracer_of(labels, loc);
  if (num_classes <= 0) user_error(loc, "one_hot: num_classes must be positive");
  labels = astype(labels, DType::kF32, loc);  // i32 ids compare as f32: exact below 2^24
  Shape out = labels.shape();
  out.push_back(num_classes);
  Tensor classes = iota(out, static_cast<int>(out.size()) - 1, loc);
  Node n;
  n.op = Op::kBroadcast;
  n.args = {labels.id()};
  n.shape = out;
  n.loc = loc;
  for (int i = 0; i < static_cast<int>(labels.rank()); ++i) n.ints.push_back(i);
  return equal(t.add(std::move(n)), classes, loc);
}

namespace {

// -log softmax(logits)[label] per position: (B..., C), (B...) -> (B...).
Tensor cross_entropy_per_example(Tensor logits, Tensor labels, SrcLoc loc) {
  tracer_of(logits, loc);
  tracer_of(labels, loc);
  Shape batch = logits.shape();
  if (batch.empty()) user_error(loc, "softmax_cross_entropy: logits must have a class dimension, got " + logits.describe());
  batch.pop_back();
  if (labels.shape() != batch)
    user_error(loc, "softmax_cross_entropy: labels " + labels.describe() + " must have the batch shape " +
                        ir::shape_str(batch) + " of logits " + logits.describe());
  const int c = static_cast<int>(logits.rank()) - 1;
  // The per-example losses (and, through autodiff, their gradient) are one
  // composite region, a cross_entropy kernel's work on a GPU; the mean
  // over the batch is not (it crosses the devices of a batch axis).
  CompositeScope region(tracer_of(logits, loc), ir::make_composite(ir::CompositeKind::kSoftmaxCrossEntropy, loc));
  logits = astype(logits, DType::kF32, loc);  // the loss is f32 (mixed precision)
  // logsumexp(x) - x[label], with the max subtracted for stability.
  Tensor m = max(logits, {c}, /*keepdims=*/true, loc);
  Tensor lse = add(log(sum(exp(sub(logits, m, loc), loc), {c}, false, loc), loc), reshape(m, batch, loc), loc);
  Tensor picked = sum(mul(logits, one_hot(labels, logits.dim(-1), loc), loc), {c}, false, loc);
  return sub(lse, picked, loc);
}

std::vector<int> all_dims(const Tensor& t) {
  std::vector<int> all;
  for (int i = 0; i < static_cast<int>(t.rank()); ++i) all.push_back(i);
  return all;
}

}  // namespace

Tensor softmax_cross_entropy(Tensor logits, Tensor labels, SrcLoc loc) {
  const Tensor per_example = cross_entropy_per_example(logits, labels, loc);
  return per_example.rank() == 0 ? per_example : mean(per_example, all_dims(per_example), false, loc);
}

Tensor softmax_cross_entropy(Tensor logits, Tensor labels, IgnoreLabel ignore, SrcLoc loc) {
  tracer_of(logits, loc);
  const double classes = logits.rank() > 0 ? static_cast<double>(logits.dim(-1)) : 0.0;
  if (!std::isfinite(ignore.value))
    user_error(loc, "softmax_cross_entropy: the IgnoreLabel is not a finite number; labels are floats, "
                    "so mark padding with one that is no class index, such as -100");
  if (ignore.value >= 0 && ignore.value < classes && ignore.value == std::floor(ignore.value))
    user_error(loc, "softmax_cross_entropy: IgnoreLabel{" + std::to_string(static_cast<int64_t>(ignore.value)) +
                        "} is a class index of the " + std::to_string(static_cast<int64_t>(classes)) +
                        " classes, so positions of that class would be ignored; use a value that is none, "
                        "such as -100");
  const Tensor per_example = cross_entropy_per_example(logits, labels, loc);
  if (per_example.rank() == 0)
    user_error(loc, "softmax_cross_entropy: IgnoreLabel needs labels with a batch dimension, got " + labels.describe());
  // 1 where the position has a target, 0 where its label is the ignored one.
  const Tensor valid = add(neg(equal(labels, full({}, ignore.value, loc), loc), loc), 1.0, loc);
  const std::vector<int> dims = all_dims(per_example);
  const Tensor total = sum(mul(per_example, valid, loc), dims, false, loc);
  const Tensor count = sum(valid, dims, false, loc);
  return div(total, maximum(count, full({}, 1.0, loc), loc), loc);
}

Tensor mean_squared_error(Tensor prediction, Tensor target, SrcLoc loc) {
  tracer_of(prediction, loc);
  if (prediction.shape() != target.shape())
    user_error(loc, "mean_squared_error: " + prediction.describe() + " and " + target.describe() +
                        " have different shapes");
  // The loss is f32 (mixed precision).
  Tensor d = sub(astype(prediction, DType::kF32, loc), astype(target, DType::kF32, loc), loc);
  std::vector<int> all;
  for (int i = 0; i < static_cast<int>(d.rank()); ++i) all.push_back(i);
  return mean(mul(d, d, loc), all, false, loc);
}

Tensor dropout(Tensor x, double rate, Tensor seed, SrcLoc loc) {
  tracer_of(x, loc);
  if (rate < 0.0 || rate >= 1.0) user_error(loc, "dropout: rate " + std::to_string(rate) + " is not in [0, 1)");
  if (rate == 0.0) return x;
  Tensor keep = astype(greater(random_uniform(x.shape(), seed, loc), full({}, rate, loc), loc),
                       x.dtype(), loc);
  return mul(mul(x, keep, loc), 1.0 / (1.0 - rate), loc);
}

Tensor dot_general(Tensor a, Tensor b, ir::DotDims d, SrcLoc loc) {
  Tracer& t = tracer_of(a, loc);
  tracer_of(b, loc);
  const Shape &l = a.shape(), &r = b.shape();
  auto check_dims = [&](const std::vector<int>& v, const Tensor& x, const char* which) {
    std::set<int> seen;
    for (int i : v)
      if (i < 0 || i >= static_cast<int>(x.rank()) || !seen.insert(i).second)
        user_error(loc, std::string("dot_general: bad ") + which + " dimension " + std::to_string(i) +
                            " for " + x.describe());
  };
  check_dims(d.lhs_batch, a, "lhs batch");
  check_dims(d.rhs_batch, b, "rhs batch");
  check_dims(d.lhs_contract, a, "lhs contracting");
  check_dims(d.rhs_contract, b, "rhs contracting");
  if (d.lhs_batch.size() != d.rhs_batch.size() || d.lhs_contract.size() != d.rhs_contract.size())
    user_error(loc, "dot_general: lhs and rhs list different numbers of batch or contracting dimensions");
  for (size_t i = 0; i < d.lhs_contract.size(); ++i)
    if (l[d.lhs_contract[i]] != r[d.rhs_contract[i]])
      user_error(loc, "matmul contraction mismatch: " + a.describe() + " contracts dimension " +
                          std::to_string(d.lhs_contract[i]) + " of size " +
                          std::to_string(l[d.lhs_contract[i]]) + " with dimension " +
                          std::to_string(d.rhs_contract[i]) + " of size " +
                          std::to_string(r[d.rhs_contract[i]]) + " of " + b.describe());
  for (size_t i = 0; i < d.lhs_batch.size(); ++i)
    if (l[d.lhs_batch[i]] != r[d.rhs_batch[i]])
      user_error(loc, "matmul batch mismatch: " + a.describe() + " and " + b.describe() +
                          " have batch sizes " + std::to_string(l[d.lhs_batch[i]]) + " and " +
                          std::to_string(r[d.rhs_batch[i]]));
  if (a.dtype() != b.dtype() || a.dtype() == ir::DType::kI32)
    user_error(loc, "matmul of " + a.describe() + " and " + b.describe() +
                        ": operands must share one floating element type (f32 or bf16; a bf16 "
                        "product accumulates in f32); convert with astype()");
  Node n;
  n.op = Op::kDot;
  n.args = {a.id(), b.id()};
  n.shape = ir::dot_shape(l, r, d);
  n.dot = std::move(d);
  n.loc = loc;
  return t.add(std::move(n));
}

Tensor matmul(Tensor a, Tensor b, SrcLoc loc) {
  tracer_of(a, loc);
  tracer_of(b, loc);
  const int ra = static_cast<int>(a.rank()), rb = static_cast<int>(b.rank());
  if (ra == 0 || rb == 0)
    user_error(loc, "matmul of a scalar: " + a.describe() + " x " + b.describe());
  ir::DotDims d;
  if (rb <= 2) {
    // (..., K) x (K[, N]): contract a's last with b's first.
    d.lhs_contract = {ra - 1};
    d.rhs_contract = {0};
  } else {
    // Batched: (B..., M, K) x (B..., K, N) with equal leading batch dims.
    if (ra != rb)
      user_error(loc, "matmul: batched operands need equal ranks, got " + a.describe() + " and " +
                          b.describe());
    for (int i = 0; i < ra - 2; ++i) {
      d.lhs_batch.push_back(i);
      d.rhs_batch.push_back(i);
    }
    d.lhs_contract = {ra - 1};
    d.rhs_contract = {rb - 2};
  }
  return dot_general(a, b, std::move(d), loc);
}

Tensor dot(Tensor a, Tensor b, SrcLoc loc) { return matmul(a, b, loc); }

Tensor reshape(Tensor x, std::vector<int64_t> shape, SrcLoc loc) {
  Tracer& t = tracer_of(x, loc);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) user_error(loc, "reshape: more than one -1 in " + ir::shape_str(shape));
      infer = i;
    } else if (shape[i] <= 0) {
      user_error(loc, "reshape: bad dimension " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  const int64_t total = ir::num_elements(x.shape());
  if (infer >= 0 && total % known == 0) shape[infer] = total / known;
  if (ir::num_elements(shape) != total || (infer >= 0 && total % known != 0))
    user_error(loc, "reshape: cannot reshape " + x.describe() + " (" + std::to_string(total) +
                        " elements) to " + ir::shape_str(shape));
  if (shape == x.shape()) return x;
  return make(t, Op::kReshape, {x.id()}, shape, loc);
}

Tensor transpose(Tensor x, std::vector<int> perm, SrcLoc loc) {
  Tracer& t = tracer_of(x, loc);
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = perm.size() == x.rank();
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<int>(i);
  if (!ok) user_error(loc, "transpose: perm is not a permutation of the dimensions of " + x.describe());
  Shape out;
  for (int p : perm) out.push_back(x.shape()[p]);
  Node n;
  n.op = Op::kTranspose;
  n.args = {x.id()};
  n.shape = out;
  n.ints = std::move(perm);
  n.loc = loc;
  return t.add(std::move(n));
}

Tensor broadcast_to(Tensor x, std::vector<int64_t> shape, SrcLoc loc) {
  Tracer& t = tracer_of(x, loc);
  Tensor probe = constant_like(t, 0.0, shape, loc);  // only for the shape check
  const Shape out = broadcast_shapes(x, probe, loc);
  t.graph().nodes.pop_back();
  if (out != shape)
    user_error(loc, "incompatible broadcast: cannot broadcast " + x.describe() + " to " +
                        ir::shape_str(shape));
  return broadcast_impl(x, shape, loc);
}

Tensor sum(Tensor x, std::vector<int> axes, bool keepdims, SrcLoc loc) {
  return reduce_impl(ir::ReduceKind::kSum, x, std::move(axes), keepdims, loc, "sum");
}

Tensor max(Tensor x, std::vector<int> axes, bool keepdims, SrcLoc loc) {
  return reduce_impl(ir::ReduceKind::kMax, x, std::move(axes), keepdims, loc, "max");
}

Tensor mean(Tensor x, std::vector<int> axes, bool keepdims, SrcLoc loc) {
  int64_t count = 1;
  for (int a : axes) count *= x.shape()[normalize_axis(x, a, loc, "mean")];
  Tensor s = reduce_impl(ir::ReduceKind::kSum, x, std::move(axes), keepdims, loc, "mean");
  return mul(s, 1.0 / static_cast<double>(count), loc);
}

Tensor softmax(Tensor x, int axis, SrcLoc loc) {
  axis = normalize_axis(x, axis, loc, "softmax");
  // In f32 whatever comes in (mixed precision), the result in x's type.
  const DType dt = x.dtype();
  x = astype(x, DType::kF32, loc);
  Tensor m = max(x, {axis}, /*keepdims=*/true, loc);
  Tensor e = exp(sub(x, m, loc), loc);
  return astype(div(e, sum(e, {axis}, /*keepdims=*/true, loc), loc), dt, loc);
}

Tensor layer_norm(Tensor x, Tensor scale, Tensor bias, double eps, SrcLoc loc) {
  const int64_t c = x.dim(-1);
  if (scale.rank() != 1 || scale.dim(0) != c || bias.rank() != 1 || bias.dim(0) != c)
    user_error(loc, "layer_norm: scale " + scale.describe() + " and bias " + bias.describe() +
                        " must be 1-D of size " + std::to_string(c) + " to normalize " + x.describe());
  ir::Composite ln = ir::make_composite(ir::CompositeKind::kLayerNorm, loc);
  ln.eps = eps;
  CompositeScope region(tracer_of(x, loc), std::move(ln));
  const DType in = x.dtype();
  x = astype(x, DType::kF32, loc);  // statistics in f32 (mixed precision)
  scale = astype(scale, DType::kF32, loc);
  bias = astype(bias, DType::kF32, loc);
  Tensor mu = mean(x, {-1}, /*keepdims=*/true, loc);
  Tensor xc = sub(x, mu, loc);
  Tensor var = mean(mul(xc, xc, loc), {-1}, /*keepdims=*/true, loc);
  Tensor inv = div(constant_like(tracer_of(x, loc), 1.0, var.shape(), loc, var.dtype()),
                   sqrt(add(var, eps, loc), loc), loc);
  // In x's dtype, as Flax's LayerNorm: a bf16 stream stays bf16 (what reads
  // it computes in bf16 anyway), and the GPU's kernels read and write one
  // dtype (passes/use_gpu_kernels.cpp).
  return astype(add(mul(mul(xc, inv, loc), scale, loc), bias, loc), in, loc);
}

Tensor with_collective_matmul(Tensor dot_result, bool enable, SrcLoc loc) {
  Tracer& t = tracer_of(dot_result, loc);
  Node& n = t.graph()[dot_result.id()];
  if (n.op != Op::kDot)
    user_error(loc, "with_collective_matmul: " + dot_result.describe() + " is the result of " +
                        ir::op_name(n.op) +
                        ", not of a matmul; pass the matmul's result itself (before any bias or "
                        "activation)");
  n.collective_matmul = enable ? CollectiveMatmul::kAlways : CollectiveMatmul::kNever;
  return dot_result;
}

Tensor with_sharding_constraint(Tensor x, P spec, SrcLoc loc) {
  Tracer& t = tracer_of(x, loc);
  Node n;
  n.op = Op::kShardingConstraint;
  n.args = {x.id()};
  n.shape = x.shape();
  n.spec = std::move(spec);
  n.loc = loc;
  return t.add(std::move(n));
}

}  // namespace sharc
