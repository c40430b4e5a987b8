// Reverse-mode autodiff on the global IR; see autodiff.h. One reverse sweep
// over the (topologically ordered) forward nodes: each node's adjoint is
// complete once all its users have been visited, and its rule then adds a
// contribution to the adjoint of each operand that lies on a path from a wrt
// node to the loss.
#include "ir/autodiff.h"

#include <algorithm>
#include <map>
#include <cmath>
#include <numbers>
#include <numeric>

namespace sharc {

namespace {

// gelu's tanh approximation: 0.5 x (1 + tanh(c (x + a x^3))), c = sqrt(2/pi).
constexpr double kGeluA = 0.044715;
double gelu_c() { return std::sqrt(2.0 / std::numbers::pi); }

using ir::Node;
using ir::Op;
using ir::Shape;

// Appends backward nodes attributed to one forward node (`at`). Never holds a
// reference into g.nodes across an add: the vector may reallocate.
class Builder {
 public:
  explicit Builder(ir::Graph& g) : g_(g) {}

  void attribute_to(const Node& forward) {
    loc_ = forward.loc;
    label_ = forward.name;
    layer_ = forward.layer;
    repeat_ = forward.repeat;
    iteration_ = forward.iteration;
    composite_ = forward.composite;
  }

  const Shape& shape(int id) const { return g_.nodes[id].shape; }

  int add(Node n) {
    n.backward = true;
    n.loc = loc_;
    n.name = label_;
    n.layer = layer_;
    n.repeat = repeat_;
    n.iteration = iteration_;
    n.composite = composite_;
    return g_.add(std::move(n));
  }

  int node(Op op, std::vector<int> args, Shape shape) {
    Node n;
    n.op = op;
    n.args = std::move(args);
    n.shape = std::move(shape);
    return add(std::move(n));
  }

  ir::DType dtype(int id) const { return g_.nodes[id].dtype; }

  int constant(double v, const Shape& s, ir::DType t) {
    Node n;
    n.op = Op::kConstant;
    n.scalar = v;
    n.shape = s;
    n.dtype = t;
    return add(std::move(n));
  }
  // A constant of x's shape and element type.
  int constant_like(double v, int x) { return constant(v, shape(x), dtype(x)); }

  int convert(int x, ir::DType t) {
    if (dtype(x) == t) return x;
    Node n;
    n.op = Op::kConvert;
    n.args = {x};
    n.shape = shape(x);
    n.dtype = t;
    return add(std::move(n));
  }

  int unary(Op op, int x) { return node(op, {x}, shape(x)); }
  int binary(Op op, int a, int b) {
    SHARC_CHECK(shape(a) == shape(b), "autodiff built a binary op over different shapes");
    return node(op, {a, b}, shape(a));
  }
  int add2(int a, int b) { return binary(Op::kAdd, a, b); }
  int mul(int a, int b) { return binary(Op::kMul, a, b); }
  int div(int a, int b) { return binary(Op::kDiv, a, b); }
  int neg(int a) { return unary(Op::kNeg, a); }
  int select(int pred, int a, int b) {
    SHARC_CHECK(shape(pred) == shape(a) && shape(a) == shape(b),
                "autodiff built a select over different shapes");
    return node(Op::kSelect, {pred, a, b}, shape(a));
  }
  // a * v for a scalar v (as a constant of a's shape).
  int scale(int a, double v) { return mul(a, constant_like(v, a)); }

  int reshape(int x, const Shape& s) {
    if (shape(x) == s) return x;
    return node(Op::kReshape, {x}, s);
  }

  int transpose(int x, const std::vector<int>& perm) {
    std::vector<int> identity(perm.size());
    std::iota(identity.begin(), identity.end(), 0);
    if (perm == identity) return x;
    Shape s;
    for (int p : perm) s.push_back(shape(x)[p]);
    Node n;
    n.op = Op::kTranspose;
    n.args = {x};
    n.shape = std::move(s);
    n.ints = perm;
    return add(std::move(n));
  }

  // ints = the output dim of each operand dim.
  int broadcast(int x, const Shape& s, std::vector<int> dims) {
    if (shape(x) == s) return x;
    Node n;
    n.op = Op::kBroadcast;
    n.args = {x};
    n.shape = s;
    n.ints = std::move(dims);
    return add(std::move(n));
  }

  int reduce_sum(int x, const std::vector<int>& axes) {
    if (axes.empty()) return x;
    Shape s;
    for (int i = 0; i < static_cast<int>(shape(x).size()); ++i)
      if (std::find(axes.begin(), axes.end(), i) == axes.end()) s.push_back(shape(x)[i]);
    Node n;
    n.op = Op::kReduce;
    n.args = {x};
    n.shape = std::move(s);
    n.reduce = ir::ReduceKind::kSum;
    n.ints = axes;
    std::sort(n.ints.begin(), n.ints.end());
    return add(std::move(n));
  }

  int dot(int a, int b, ir::DotDims d) {
    Node n;
    n.op = Op::kDot;
    n.args = {a, b};
    n.shape = ir::dot_shape(shape(a), shape(b), d);
    n.dot = std::move(d);
    return add(std::move(n));
  }

  int slice(int x, int dim, int start, int size) {
    Shape s = shape(x);
    s[dim] = size;
    Node n;
    n.op = Op::kSlice;
    n.args = {x};
    n.shape = std::move(s);
    n.ints = {dim, start, size};
    return add(std::move(n));
  }

  // x with y added into [start, start + y's extent) of dim.
  int add_slice(int x, int y, int dim, int start) {
    Node n;
    n.op = Op::kAddSlice;
    n.args = {x, y};
    n.shape = shape(x);
    n.ints = {dim, start};
    return add(std::move(n));
  }

  int pad(int x, int dim, int before, int after) {
    Shape s = shape(x);
    s[dim] += before + after;
    Node n;
    n.op = Op::kPad;
    n.args = {x};
    n.shape = std::move(s);
    n.ints = {dim, before, after};
    return add(std::move(n));
  }

 private:
  ir::Graph& g_;
  SrcLoc loc_;
  std::string label_;
  int layer_ = -1;
  int repeat_ = -1;
  int iteration_ = -1;
  int composite_ = -1;
};

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The transpose that brings a result whose dim j is operand dim src[j] back
// into operand order: out dim i = result dim (position of i in src).
std::vector<int> inverse_of(const std::vector<int>& src) {
  std::vector<int> perm(src.size());
  for (int j = 0; j < static_cast<int>(src.size()); ++j) perm[src[j]] = j;
  return perm;
}

// Indices of a's dims that are neither batch nor contracting, ascending.
std::vector<int> free_dims(size_t rank, const std::vector<int>& batch,
                           const std::vector<int>& contract) {
  std::vector<int> f;
  for (int i = 0; i < static_cast<int>(rank); ++i)
    if (!contains(batch, i) && !contains(contract, i)) f.push_back(i);
  return f;
}

// Positions 0..n-1 of `v` sorted by v's values: the order in which a dot's
// result lists the dims v names when they end up free.
std::vector<int> order_by_value(const std::vector<int>& v) {
  std::vector<int> k(v.size());
  std::iota(k.begin(), k.end(), 0);
  std::sort(k.begin(), k.end(), [&](int a, int b) { return v[a] < v[b]; });
  return k;
}

class Sweep {
 public:
  Sweep(ir::Graph& g, int loss, const std::vector<int>& wrt)
      : g_(g), b_(g), count_(loss + 1), adjoint_(count_, -1), on_path_(count_, false) {
    // on_path = (reachable from a wrt node) && (reaches the loss).
    std::vector<bool> from_wrt(count_, false), to_loss(count_, false);
    for (int w : wrt)
      if (w < count_) from_wrt[w] = true;
    for (int id = 0; id < count_; ++id)
      for (int a : g_.nodes[id].args) from_wrt[id] = from_wrt[id] || from_wrt[a];
    to_loss[loss] = true;
    for (int id = loss; id >= 0; --id)
      if (to_loss[id])
        for (int a : g_.nodes[id].args) to_loss[a] = true;
    for (int id = 0; id < count_; ++id) on_path_[id] = from_wrt[id] && to_loss[id];
  }

  void run(int loss) {
    if (!on_path_[loss]) return;
    b_.attribute_to(g_.nodes[loss]);
    adjoint_[loss] = b_.constant(1.0, {}, g_.nodes[loss].dtype);
    for (int id = loss; id >= 0; --id) {
      if (adjoint_[id] < 0 || !on_path_[id]) continue;
      const Node n = g_.nodes[id];  // a copy: appending reallocates g.nodes
      b_.attribute_to(n);
      differentiate(id, n, adjoint_[id]);
    }
  }

  int adjoint(int id) const { return id < count_ ? adjoint_[id] : -1; }

  // Keep the contributions to source node `id` (a parameter) apart instead
  // of summing them; parts(id) lists them in accumulation order.
  void keep_parts(int id) {
    if (id < count_ && ir::is_source(g_.nodes[id].op)) parts_[id];
  }
  const std::vector<int>& parts(int id) const {
    static const std::vector<int> none;
    auto it = parts_.find(id);
    return it == parts_.end() ? none : it->second;
  }

 private:
  bool wants(const Node& n, int i) const { return on_path_[n.args[i]]; }

  void accumulate(int id, int contribution) {
    SHARC_CHECK(b_.shape(contribution) == g_.nodes[id].shape,
                "adjoint of %" + std::to_string(id) + " has the wrong shape");
    if (auto it = parts_.find(id); it != parts_.end()) {  // a source: nothing reads its adjoint
      it->second.push_back(contribution);
      return;
    }
    adjoint_[id] = adjoint_[id] < 0 ? contribution : b_.add2(adjoint_[id], contribution);
  }

  // Adds contributions to the adjoints of n's operands given n's adjoint gy.
  void differentiate(int id, const Node& n, int gy) {
    // Nothing to propagate when no operand is on a path from a wrt node (the
    // node is itself a wrt value computed from non-wrt values).
    bool any = false;
    for (size_t i = 0; i < n.args.size(); ++i) any = any || wants(n, i);
    if (!any) return;
    const int x = n.args.empty() ? -1 : n.args[0];
    const int y = n.args.size() > 1 ? n.args[1] : -1;
    const Shape& s = n.shape;
    switch (n.op) {
      case Op::kParameter:
      case Op::kInput:
      case Op::kConstant:
      case Op::kIota:
        break;  // leaves
      case Op::kGreater:
      case Op::kEqual:
      case Op::kRandomUniform:
        break;  // piecewise constant in their operands: zero gradient
      case Op::kAdd:
        if (wants(n, 0)) accumulate(x, gy);
        if (wants(n, 1)) accumulate(y, gy);
        break;
      case Op::kSub:
        if (wants(n, 0)) accumulate(x, gy);
        if (wants(n, 1)) accumulate(y, b_.neg(gy));
        break;
      case Op::kMul:
        if (wants(n, 0)) accumulate(x, b_.mul(gy, y));
        if (wants(n, 1)) accumulate(y, b_.mul(gy, x));
        break;
      case Op::kDiv:
        // d(x/y)/dx = 1/y; d(x/y)/dy = -(x/y)/y.
        if (wants(n, 0)) accumulate(x, b_.div(gy, y));
        if (wants(n, 1)) accumulate(y, b_.neg(b_.div(b_.mul(gy, id), y)));
        break;
      case Op::kMax:
      case Op::kMin: {
        // The selected operand gets the gradient; at a tie each gets half.
        // wx = [x wins] + 0.5 [x == y], and the other operand gets gy - gx
        // (exactly one of <, ==, > holds).
        const int wins =
            n.op == Op::kMax ? b_.binary(Op::kGreater, x, y) : b_.binary(Op::kGreater, y, x);
        const int tie = b_.scale(b_.binary(Op::kEqual, x, y), 0.5);
        const int gx = b_.mul(gy, b_.add2(wins, tie));
        if (wants(n, 0)) accumulate(x, gx);
        if (wants(n, 1)) accumulate(y, b_.binary(Op::kSub, gy, gx));
        break;
      }
      case Op::kPow: {
        // d(x^y)/dx = y x^(y-1), 0 where y == 0; d(x^y)/dy = x^y log(x),
        // taken as 0 where x == 0 (where 0^y is flat in y for y > 0), as
        // jax.lax.pow.
        if (wants(n, 0)) {
          // (y x^(y-1) would be 0 * inf at x == 0, y == 0.)
          const int ym1 = b_.binary(Op::kSub, y, b_.constant_like(1.0, y));
          const int d = b_.mul(y, b_.binary(Op::kPow, x, ym1));
          const int y_is_0 = b_.binary(Op::kEqual, y, b_.constant_like(0.0, y));
          accumulate(x, b_.mul(gy, b_.select(y_is_0, b_.constant_like(0.0, y), d)));
        }
        if (wants(n, 1)) {
          const int zero = b_.constant_like(0.0, x);
          const int x_is_0 = b_.binary(Op::kEqual, x, zero);
          const int safe_x = b_.select(x_is_0, b_.constant_like(1.0, x), x);
          accumulate(y, b_.mul(gy, b_.mul(id, b_.unary(Op::kLog, safe_x))));
        }
        break;
      }
      case Op::kSelect:
        // The branch taken gets the gradient, the other none; pred (a
        // comparison's mask) is piecewise constant.
        if (wants(n, 1)) accumulate(n.args[1], b_.select(x, gy, b_.constant_like(0.0, gy)));
        if (wants(n, 2)) accumulate(n.args[2], b_.select(x, b_.constant_like(0.0, gy), gy));
        break;
      case Op::kAbs: {
        // sign(x), 0 at x == 0 (as jax.numpy.abs).
        const int zero = b_.constant_like(0.0, x);
        const int sign = b_.binary(Op::kSub, b_.binary(Op::kGreater, x, zero),
                                   b_.binary(Op::kGreater, zero, x));
        accumulate(x, b_.mul(gy, sign));
        break;
      }
      case Op::kSigmoid:
        // s (1 - s), from the forward value.
        accumulate(x, b_.mul(gy, b_.mul(id, b_.binary(Op::kSub, b_.constant_like(1.0, x), id))));
        break;
      case Op::kErf:
        // 2/sqrt(pi) exp(-x^2).
        accumulate(x, b_.mul(gy, b_.scale(b_.unary(Op::kExp, b_.neg(b_.mul(x, x))),
                                          2.0 / std::sqrt(std::numbers::pi))));
        break;
      case Op::kLog1p:
        accumulate(x, b_.div(gy, b_.add2(x, b_.constant_like(1.0, x))));
        break;
      case Op::kExpm1:
        // exp(x) = expm1(x) + 1, from the forward value.
        accumulate(x, b_.mul(gy, b_.add2(id, b_.constant_like(1.0, x))));
        break;
      case Op::kNeg:
        accumulate(x, b_.neg(gy));
        break;
      case Op::kRelu:
        // Gradient 0 at x == 0 (as jax.nn.relu).
        accumulate(x, b_.mul(gy, b_.binary(Op::kGreater, x, b_.constant_like(0.0, x))));
        break;
      case Op::kGelu: {
        // gelu(x) = 0.5 x (1 + t), t = tanh(u), u = c (x + a x^3), c = sqrt(2/pi):
        // gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
        // match_gelu_gradient (below) recognises exactly these nodes.
        const double c = gelu_c(), a = kGeluA;
        const int x2 = b_.mul(x, x);
        const int u = b_.mul(x, b_.add2(b_.constant_like(c, x), b_.scale(x2, c * a)));
        const int t = b_.unary(Op::kTanh, u);
        const int du = b_.add2(b_.constant_like(c, x), b_.scale(x2, 3.0 * c * a));
        const int sech2 = b_.binary(Op::kSub, b_.constant_like(1.0, x), b_.mul(t, t));
        const int left = b_.scale(b_.add2(t, b_.constant_like(1.0, x)), 0.5);
        const int right = b_.mul(b_.mul(b_.scale(x, 0.5), sech2), du);
        accumulate(x, b_.mul(gy, b_.add2(left, right)));
        break;
      }
      case Op::kTanh:
        // 1 - tanh(x)^2, from the forward value.
        accumulate(x, b_.mul(gy, b_.binary(Op::kSub, b_.constant_like(1.0, x), b_.mul(id, id))));
        break;
      case Op::kExp:
        accumulate(x, b_.mul(gy, id));
        break;
      case Op::kLog:
        accumulate(x, b_.div(gy, x));
        break;
      case Op::kSqrt:
        // 1 / (2 sqrt(x)), from the forward value.
        accumulate(x, b_.div(b_.scale(gy, 0.5), id));
        break;
      case Op::kSin:
        accumulate(x, b_.mul(gy, b_.unary(Op::kCos, x)));
        break;
      case Op::kCos:
        accumulate(x, b_.mul(gy, b_.neg(b_.unary(Op::kSin, x))));
        break;
      case Op::kConvert:
        // The cotangent goes back in the operand's type (an f32 master
        // weight's gradient is f32 even when its use ran in bf16).
        accumulate(x, b_.convert(gy, b_.dtype(x)));
        break;
      case Op::kBroadcast: {
        // Sum over the dims the broadcast created: output dims no operand dim
        // maps to, and operand size-1 dims stretched to a larger size; then
        // put the stretched size-1 dims back with a reshape.
        const Shape in = g_.nodes[x].shape;  // a copy: adds reallocate
        std::vector<int> summed;
        for (int o = 0; o < static_cast<int>(s.size()); ++o) {
          const auto it = std::find(n.ints.begin(), n.ints.end(), o);
          if (it == n.ints.end()) {
            summed.push_back(o);
          } else if (in[it - n.ints.begin()] != s[o]) {
            summed.push_back(o);  // 1 -> s[o]
          }
        }
        accumulate(x, b_.reshape(b_.reduce_sum(gy, summed), in));
        break;
      }
      case Op::kReshape:
        accumulate(x, b_.reshape(gy, g_.nodes[x].shape));
        break;
      case Op::kTranspose:
        accumulate(x, b_.transpose(gy, inverse_of(n.ints)));
        break;
      case Op::kDot:
        differentiate_dot(n, gy);
        break;
      case Op::kReduce: {
        const Shape in = g_.nodes[x].shape;  // a copy: adds reallocate
        std::vector<int> kept;
        for (int i = 0; i < static_cast<int>(in.size()); ++i)
          if (!contains(n.ints, i)) kept.push_back(i);
        if (n.reduce == ir::ReduceKind::kSum) {
          accumulate(x, b_.broadcast(gy, in, kept));
          break;
        }
        // max: the elements equal to the maximum share the gradient equally
        // (jax's reduce_max rule): gy / count(ties) at each tied element.
        const int mask = b_.binary(Op::kEqual, x, b_.broadcast(id, in, kept));
        const int share = b_.div(gy, b_.reduce_sum(mask, n.ints));
        accumulate(x, b_.mul(b_.broadcast(share, in, kept), mask));
        break;
      }
      case Op::kSlice: {
        const int d = n.ints[0], start = n.ints[1], size = n.ints[2];
        if (adjoint_[x] >= 0 && !parts_.count(x)) {
          // Another slice of x already contributed: add this one into its
          // rows in place, not as a zero-padded copy of all of x (a scanned
          // layer's stacked parameter has one slice per layer).
          adjoint_[x] = b_.add_slice(adjoint_[x], gy, d, start);
          break;
        }
        if (g_.nodes[x].op == Op::kParameter && !g_.nodes[x].init.stack_scope.empty() && !parts_.count(x)) {
          // The first layer's row of a stacked parameter's gradient: added
          // into zeros like every later row, so every layer's backward pass
          // is the same code.
          adjoint_[x] = b_.add_slice(b_.constant_like(0.0, x), gy, d, start);
          break;
        }
        const int64_t extent = g_.nodes[x].shape[d];
        accumulate(x, b_.pad(gy, d, start, static_cast<int>(extent - start - size)));
        break;
      }
      case Op::kAddSlice:
        if (wants(n, 0)) accumulate(x, gy);
        if (wants(n, 1)) accumulate(y, b_.slice(gy, n.ints[0], n.ints[1], static_cast<int>(g_.nodes[y].shape[n.ints[0]])));
        break;
      case Op::kPad:
        accumulate(
            x, b_.slice(gy, n.ints[0], n.ints[1], static_cast<int>(g_.nodes[x].shape[n.ints[0]])));
        break;
      case Op::kShardingConstraint: {
        // The cotangent is pinned to the same layout (with_sharding_constraint's
        // transpose in JAX).
        Node c;
        c.op = Op::kShardingConstraint;
        c.args = {gy};
        c.shape = s;
        c.spec = n.spec;
        c.rules = n.rules;
        c.sharding = n.sharding;
        c.fixed = n.fixed;
        accumulate(x, b_.add(std::move(c)));
        break;
      }
      case Op::kAllGather:
      case Op::kReduceScatter:
      case Op::kAllReduce:
      case Op::kAllToAll:
      case Op::kLocalSlice:
      case Op::kRingDot:
      case Op::kPPermute:
      case Op::kAxisIndex:
      case Op::kSend:
      case Op::kRecv:
      case Op::kKernel:
      case Op::kKernelOutput:
        internal_error(std::string("autodiff met ") + ir::op_name(n.op) +
                       " in a global program at " + ir::node_str(g_, id));
      case Op::kShardMap:
        user_error(n.loc, "cannot differentiate through shard_map: its result " +
                              ir::shape_str(n.shape) +
                              (n.name.empty() ? "" : " in '" + n.name + "'") +
                              " lies on the gradient path; sharc has no autodiff for shard_map "
                              "bodies");
    }
  }

  // out = dot_general(lhs, rhs) with out dims [batch, lhs free, rhs free].
  //   d lhs = dot_general(gy, rhs): batch with batch, gy's rhs-free dims
  //     contracted with rhs's free dims -> [batch, lhs free, lhs contracting
  //     (in the order of the rhs contracting dims they pair with)], then a
  //     transpose into lhs's dim order.
  //   d rhs = dot_general(lhs, gy): batch with batch, lhs's free dims
  //     contracted with gy's lhs-free dims -> [batch, rhs contracting (in the
  //     order of the lhs contracting dims they pair with), rhs free], then a
  //     transpose into rhs's dim order.
  void differentiate_dot(const Node& n, int gy) {
    const int lhs = n.args[0], rhs = n.args[1];
    const ir::DotDims& d = n.dot;
    const std::vector<int> lfree =
        free_dims(g_.nodes[lhs].shape.size(), d.lhs_batch, d.lhs_contract);
    const std::vector<int> rfree =
        free_dims(g_.nodes[rhs].shape.size(), d.rhs_batch, d.rhs_contract);
    const int nb = static_cast<int>(d.lhs_batch.size());
    const int nl = static_cast<int>(lfree.size()), nr = static_cast<int>(rfree.size());
    std::vector<int> gy_batch(nb), gy_lfree(nl), gy_rfree(nr);
    std::iota(gy_batch.begin(), gy_batch.end(), 0);
    std::iota(gy_lfree.begin(), gy_lfree.end(), nb);
    std::iota(gy_rfree.begin(), gy_rfree.end(), nb + nl);

    if (on_path_[lhs]) {
      ir::DotDims dl{gy_batch, d.rhs_batch, gy_rfree, rfree};
      std::vector<int> src = d.lhs_batch;  // result dim j holds lhs dim src[j]
      src.insert(src.end(), lfree.begin(), lfree.end());
      for (int k : order_by_value(d.rhs_contract)) src.push_back(d.lhs_contract[k]);
      accumulate(lhs, b_.transpose(b_.dot(gy, rhs, dl), inverse_of(src)));
    }
    if (on_path_[rhs]) {
      ir::DotDims dr{d.lhs_batch, gy_batch, lfree, gy_lfree};
      std::vector<int> src = d.rhs_batch;  // result dim j holds rhs dim src[j]
      for (int k : order_by_value(d.lhs_contract)) src.push_back(d.rhs_contract[k]);
      src.insert(src.end(), rfree.begin(), rfree.end());
      accumulate(rhs, b_.transpose(b_.dot(lhs, gy, dr), inverse_of(src)));
    }
  }

  ir::Graph& g_;
  Builder b_;
  const int count_;  // forward nodes that can reach the loss: ids 0..loss
  std::vector<int> adjoint_;
  std::vector<bool> on_path_;
  std::map<int, std::vector<int>> parts_;  // keep_parts: source -> its contributions
};

}  // namespace

std::vector<int> append_gradients(ir::Graph& g, int loss, const std::vector<int>& wrt,
                                  const SrcLoc& loc) {
  if (g.partitioned)
    internal_error("append_gradients runs on the global graph, before partitioning");
  const int count = static_cast<int>(g.nodes.size());
  if (loss < 0 || loss >= count)
    internal_error("append_gradients: loss %" + std::to_string(loss) + " is not a node");
  for (int w : wrt)
    if (w < 0 || w >= count)
      internal_error("append_gradients: wrt %" + std::to_string(w) + " is not a node");
  if (!g.nodes[loss].shape.empty())
    user_error(loc, "loss must be a scalar, got " + ir::shape_str(g.nodes[loss].shape) + " (the " +
                        ir::describe_value(g.nodes[loss]) +
                        "); reduce it first, e.g. with sum() or mean()");

  Sweep sweep(g, loss, wrt);
  sweep.run(loss);

  std::vector<int> grads;
  Builder zero_builder(g);
  for (int w : wrt) {
    int a = sweep.adjoint(w);
    if (a < 0) {
      // Does not reach the loss (or only through zero-gradient ops).
      zero_builder.attribute_to(g.nodes[w]);
      a = zero_builder.constant(0.0, g.nodes[w].shape, g.nodes[w].dtype);
    }
    SHARC_CHECK(g.nodes[a].shape == g.nodes[w].shape,
                "gradient of %" + std::to_string(w) + " has the wrong shape");
    grads.push_back(a);
  }
  return grads;
}

std::vector<std::vector<int>> append_gradient_parts(ir::Graph& g, int loss, const std::vector<int>& wrt,
                                                    const SrcLoc& loc) {
  if (g.partitioned)
    internal_error("append_gradient_parts runs on the global graph, before partitioning");
  for (int w : wrt)
    if (w < 0 || w >= static_cast<int>(g.nodes.size()) || !ir::is_source(g.nodes[w].op))
      internal_error("append_gradient_parts: wrt %" + std::to_string(w) + " is not a source node");
  if (loss < 0 || loss >= static_cast<int>(g.nodes.size()))
    internal_error("append_gradient_parts: loss %" + std::to_string(loss) + " is not a node");
  if (!g.nodes[loss].shape.empty())
    user_error(loc, "loss must be a scalar, got " + ir::shape_str(g.nodes[loss].shape) + " (the " +
                        ir::describe_value(g.nodes[loss]) + "); reduce it first, e.g. with sum() or mean()");
  Sweep sweep(g, loss, wrt);
  for (int w : wrt) sweep.keep_parts(w);
  sweep.run(loss);
  std::vector<std::vector<int>> parts;
  for (int w : wrt) parts.push_back(sweep.parts(w));
  return parts;
}

std::optional<GeluGradient> match_gelu_gradient(const ir::Graph& g, int root) {
  const double c = gelu_c(), a = kGeluA;
  auto constant = [&](int id, double v) {
    return g[id].op == Op::kConstant && std::abs(g[id].scalar - v) <= 1e-12 * std::abs(v);
  };
  // `id` is op(l, r): binds its operands.
  auto binary = [&](int id, Op op, int& l, int& r) {
    if (g[id].op != op || g[id].args.size() != 2) return false;
    l = g[id].args[0];
    r = g[id].args[1];
    return true;
  };
  // The kGelu rule's nodes, outside in: gy * (left + right).
  int gy, sum, left, right;
  if (!binary(root, Op::kMul, gy, sum) || !binary(sum, Op::kAdd, left, right)) return std::nullopt;
  // left = (t + 1) * 0.5, t = tanh(u), u = x * (c + x2 * (c a)), x2 = x * x.
  int t_plus_1, half, t, one, x, inner, c1, x2_ca, x2, ca, xa, xb;
  if (!binary(left, Op::kMul, t_plus_1, half) || !constant(half, 0.5) || !binary(t_plus_1, Op::kAdd, t, one) ||
      !constant(one, 1.0) || g[t].op != Op::kTanh)
    return std::nullopt;
  if (!binary(g[t].args[0], Op::kMul, x, inner) || !binary(inner, Op::kAdd, c1, x2_ca) || !constant(c1, c) ||
      !binary(x2_ca, Op::kMul, x2, ca) || !constant(ca, c * a) || !binary(x2, Op::kMul, xa, xb) || xa != x ||
      xb != x)
    return std::nullopt;
  // right = ((x * 0.5) * (1 - t * t)) * (c + x2 * (3 c a)).
  int x_sech2, du, x_half, sech2, x_again, half2, one2, t2, ta, tb, c2, x2_3ca, x2_again, three_ca;
  if (!binary(right, Op::kMul, x_sech2, du) || !binary(x_sech2, Op::kMul, x_half, sech2) ||
      !binary(x_half, Op::kMul, x_again, half2) || x_again != x || !constant(half2, 0.5) ||
      !binary(sech2, Op::kSub, one2, t2) || !constant(one2, 1.0) || !binary(t2, Op::kMul, ta, tb) || ta != t ||
      tb != t || !binary(du, Op::kAdd, c2, x2_3ca) || !constant(c2, c) ||
      !binary(x2_3ca, Op::kMul, x2_again, three_ca) || x2_again != x2 || !constant(three_ca, 3.0 * c * a))
    return std::nullopt;
  return GeluGradient{gy, x};
}

}  // namespace sharc
