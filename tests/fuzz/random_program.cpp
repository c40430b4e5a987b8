// The random program generator; see random_program.h. One Generator builds
// one program from its own splitmix64 stream. Every op helper either returns
// a new value or std::nullopt when it does not apply to the operand it drew
// (then another op is tried), so no helper ever makes the DSL raise a user
// error. Values carry a rough magnitude (`scale`) that decides when to rescale
// by a power of two (exact in fp32 and fp64) to keep everything O(1).
#include "tests/fuzz/random_program.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "runtime/init.h"

namespace sharc::fuzz {

namespace {

constexpr int64_t kMaxElements = 4096;  // per value: keeps the naive oracle fast
constexpr int kMaxRank = 4;

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(size_t n) { return static_cast<int>(next() % n); }             // [0, n)
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  bool chance(double p) { return unit() < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  uint64_t state_;
};

// Independent streams for the mesh, the program and the input values.
uint64_t stream(uint64_t seed, uint64_t which) {
  return Rng(seed * 0x100000001B3ull + which).next();
}

Mesh random_mesh(uint64_t seed) {
  Rng rng(stream(seed, 1));
  const int naxes = 1 + rng.below(3);
  std::vector<std::pair<std::string, int>> axes;
  int devices = 1;
  for (int i = 0; i < naxes; ++i) {
    std::vector<int> sizes;  // repetition = weight
    for (int s : {1, 2, 2, 2, 4, 4, 8, 3})
      if (devices * s <= 8) sizes.push_back(s);
    const int s = rng.pick(sizes);
    devices *= s;
    axes.emplace_back(std::string(1, static_cast<char>('a' + i)), s);
  }
  return Mesh(std::move(axes), devices);
}

struct Value {
  Tensor t;
  double scale = 1.0;  // rough magnitude of the elements
  // A copy: the tracer's node list (which t.shape() points into) grows as
  // the generator adds nodes.
  ir::Shape shape() const { return t.shape(); }
  int rank() const { return static_cast<int>(t.rank()); }
};

enum class Role { kWeight, kOperand, kNormScale };

class Generator {
 public:
  Generator(uint64_t seed, const Mesh& mesh, ProgramBuilder& b)
      : rng_(stream(seed, 2)), mesh_(mesh), b_(b) {}

  std::string run() {
    pool_.push_back(input(shape(1 + rng_.below(3))));
    if (rng_.chance(0.4)) pool_.push_back(input(shape(1 + rng_.below(3))));
    if (rng_.chance(0.3)) pool_.push_back(param(shape(1 + rng_.below(2)), Role::kOperand));
    const int steps = 3 + rng_.below(10);
    for (int i = 0; i < steps; ++i) step();
    outputs();
    return ops_;
  }

 private:
  using Op = std::optional<Value> (Generator::*)(const Value&);

  // ---- shapes and layouts

  int64_t dim() {
    static const std::vector<int64_t> kDims = {2, 2, 4, 4, 4, 8, 8, 16, 6, 12, 1};
    return rng_.pick(kDims);
  }

  ir::Shape shape(int rank) {
    ir::Shape s(rank);
    for (auto& d : s) d = dim();
    return s;
  }

  // A valid spec for shape s: each mesh axis at most once, a dimension's axes
  // only when their product divides it. About 40% of dimensions stay None.
  P spec(const ir::Shape& s) {
    std::vector<std::string> free;
    for (auto& a : mesh_.axes()) free.push_back(a.name);
    rng_.shuffle(free);
    std::vector<int> order(s.size());
    std::iota(order.begin(), order.end(), 0);
    rng_.shuffle(order);
    std::vector<DimSpec> dims(s.size());
    for (int d : order) {
      if (!rng_.chance(0.6)) continue;
      const size_t want = rng_.chance(0.25) ? 2 : 1;
      std::vector<std::string> chosen;
      int64_t parts = 1;
      for (auto it = free.begin(); it != free.end() && chosen.size() < want;) {
        if (s[d] % (parts * mesh_.size(*it)) == 0) {
          parts *= mesh_.size(*it);
          chosen.push_back(*it);
          it = free.erase(it);
        } else {
          ++it;
        }
      }
      if (!chosen.empty()) dims[d] = DimSpec(chosen);
    }
    return P(dims);
  }

  // ---- sources

  Value input(const ir::Shape& s) {
    const std::string name = "x" + std::to_string(inputs_++);
    // Inputs are uniform in [-1, 1): rms 0.58.
    return {b_.input(name, s, rng_.chance(0.2) ? P() : spec(s)), 0.6};
  }

  Value param(const ir::Shape& s, Role role) {
    int64_t fan_in = 1, fan_out = 1;
    rt::compute_fans(s.data(), static_cast<int>(s.size()), &fan_in, &fan_out);
    const double lecun = 1.0 / std::sqrt(static_cast<double>(fan_in));
    const double xavier = std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
    Initializer init;
    double scale = 1.0;
    const int k = rng_.below(4);
    switch (role) {
      case Role::kWeight:
        if (k < 2)
          init = lecun_normal(), scale = lecun;
        else if (k == 2)
          init = xavier_uniform(), scale = xavier;
        else
          init = normal(0.3), scale = 0.3;
        break;
      case Role::kOperand:
        if (k == 0)
          init = normal(0.5), scale = 0.5;
        else if (k == 1)
          init = uniform(1.0), scale = 0.6;
        else if (k == 2)
          init = xavier_uniform(), scale = xavier;
        else
          init = constant(0.75), scale = 0.75;
        break;
      case Role::kNormScale:
        if (k == 0)
          init = ones();
        else if (k == 1)
          init = constant(-0.5), scale = 0.5;
        else
          init = normal(1.0);
        break;
    }
    // A quarter of the parameters carry no layout: propagation chooses it.
    if (rng_.chance(0.75)) init = with_partitioning(init, spec(s));
    const std::string name = "p" + std::to_string(params_++);
    const Scope scope =
        rng_.chance(0.5) ? b_.scope() / ("block" + std::to_string(params_ % 3)) : b_.scope();
    return {scope.param(name, s, init), scale};
  }

  Value source(const ir::Shape& s, Role role) {
    return rng_.chance(0.25) ? input(s) : param(s, role);
  }

  // ---- operands

  // Mostly the latest value (a chain), otherwise any earlier one (a DAG).
  const Value& operand() { return rng_.chance(0.55) ? pool_.back() : rng_.pick(pool_); }

  template <class Pred>
  std::optional<Value> find(Pred pred) {
    std::vector<Value> hits;
    for (auto& v : pool_)
      if (pred(v.shape())) hits.push_back(v);
    if (hits.empty()) return std::nullopt;
    return rng_.pick(hits);
  }

  std::optional<Value> same_shape(const ir::Shape& s) {
    return find([&](const ir::Shape& o) { return o == s; });
  }

  // Multiplies by a power of two (exact) when the magnitude drifts from 1.
  Value settle(Value v) {
    if (v.scale > 4.0 || v.scale < 0.125) {
      const double f = std::exp2(-std::round(std::log2(v.scale)));
      v.t = mul(v.t, f);
      v.scale *= f;
    }
    return v;
  }

  void note(const std::string& what) { ops_ += (ops_.empty() ? "" : " ") + what; }

  // ---- ops

  void step() {
    struct Choice {
      Op op;
      int weight;
    };
    static const std::vector<Choice> kOps = {
        {&Generator::matmul, 3},        {&Generator::batched_matmul, 2},
        {&Generator::dot_general, 2},   {&Generator::binary, 5},
        {&Generator::activation, 3},    {&Generator::exp_op, 1},
        {&Generator::log_op, 1},        {&Generator::sqrt_op, 1},
        {&Generator::reshape_op, 3},    {&Generator::transpose_op, 2},
        {&Generator::reduce_op, 3},     {&Generator::softmax_op, 1},
        {&Generator::layer_norm_op, 1}, {&Generator::constraint, 2},
        {&Generator::linear, 1}};
    int total = 0;
    for (auto& c : kOps) total += c.weight;
    for (int attempt = 0; attempt < 20; ++attempt) {
      int r = rng_.below(total);
      Op op = nullptr;
      for (auto& c : kOps)
        if ((r -= c.weight) < 0) {
          op = c.op;
          break;
        }
      const Value x = operand();
      if (std::optional<Value> v = (this->*op)(x)) {
        pool_.push_back(settle(*v));
        return;
      }
    }
  }

  std::optional<Value> matmul(const Value& x) {
    if (x.rank() < 1 || x.rank() > 3) return std::nullopt;
    const int64_t k = x.shape().back();
    std::optional<Value> w;
    if (rng_.chance(0.3))  // reuse an activation as the right operand
      w = find([&](const ir::Shape& s) {
        return s.size() == 2 && s[0] == k && ir::num_elements(x.shape()) / k * s[1] <= kMaxElements;
      });
    if (!w) {
      const int64_t n = dim();
      if (ir::num_elements(x.shape()) / k * n > kMaxElements) return std::nullopt;
      w = source({k, n}, Role::kWeight);
    }
    note(x.rank() == 1 ? "matmul(vec)" : "matmul");
    return Value{sharc::matmul(x.t, w->t), x.scale * w->scale * std::sqrt(static_cast<double>(k))};
  }

  // (B..., M, K) x (B..., K, N), the batch dimensions shared.
  std::optional<Value> batched_matmul(const Value& x) {
    if (x.rank() < 3) return std::nullopt;
    const ir::Shape& xs = x.shape();
    const int64_t k = xs.back();
    ir::Shape ws(xs.begin(), xs.end() - 1);
    ws.back() = k;
    ws.push_back(dim());
    if (ir::num_elements(xs) / k * ws.back() > kMaxElements) return std::nullopt;
    std::optional<Value> w;
    if (rng_.chance(0.3))
      w = find([&](const ir::Shape& s) {
        return s.size() == ws.size() && std::equal(s.begin(), s.end() - 1, ws.begin()) &&
               ir::num_elements(xs) / k * s.back() <= kMaxElements;
      });
    if (!w) w = source(ws, Role::kWeight);
    note("matmul(batched)");
    return Value{sharc::matmul(x.t, w->t), x.scale * w->scale * std::sqrt(static_cast<double>(k))};
  }

  // Random batch and contracting dimensions; the right operand is either a
  // new source with those dimensions in a random order, or a value of x's
  // own shape (x itself: a Gram matrix) contracted on the same dimensions.
  std::optional<Value> dot_general(const Value& x) {
    const int r = x.rank();
    if (r < 1) return std::nullopt;
    const ir::Shape& xs = x.shape();
    std::vector<int> perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    rng_.shuffle(perm);
    const int nb = (r >= 2 && rng_.chance(0.4)) ? 1 : 0;
    const int nc = (r - nb >= 2 && rng_.chance(0.3)) ? 2 : 1;
    ir::DotDims d;
    d.lhs_batch.assign(perm.begin(), perm.begin() + nb);
    d.lhs_contract.assign(perm.begin() + nb, perm.begin() + nb + nc);
    const int lhs_free = r - nb - nc;
    int64_t contracted = 1;
    for (int c : d.lhs_contract) contracted *= xs[c];
    std::optional<Value> y;
    std::string what;
    if (rng_.chance(0.35)) {
      y = same_shape(xs);  // never empty: x itself is in the pool
      d.rhs_batch = d.lhs_batch;
      d.rhs_contract = d.lhs_contract;
      const ir::Shape out = ir::dot_shape(xs, xs, d);
      if (out.empty() || out.size() > static_cast<size_t>(kMaxRank) ||
          ir::num_elements(out) > kMaxElements)
        y.reset();
      what = "dot_general(gram)";
    }
    if (!y) {
      d.rhs_batch.clear();
      d.rhs_contract.clear();
      const int nfree = (lhs_free + nb == 0 || rng_.chance(0.6)) ? 1 : 0;
      // rhs dims: batch, contract, free, then shuffled.
      std::vector<int64_t> sizes;
      std::vector<int> tag;  // 0..nb-1 batch, 100+i contract i, -1 free
      for (int i = 0; i < nb; ++i) sizes.push_back(xs[d.lhs_batch[i]]), tag.push_back(i);
      for (int i = 0; i < nc; ++i) sizes.push_back(xs[d.lhs_contract[i]]), tag.push_back(100 + i);
      for (int i = 0; i < nfree; ++i) sizes.push_back(dim()), tag.push_back(-1);
      std::vector<int> order(sizes.size());
      std::iota(order.begin(), order.end(), 0);
      rng_.shuffle(order);
      ir::Shape ys;
      d.rhs_batch.assign(nb, -1);
      d.rhs_contract.assign(nc, -1);
      for (int p = 0; p < static_cast<int>(order.size()); ++p) {
        const int i = order[p];
        ys.push_back(sizes[i]);
        if (tag[i] >= 100)
          d.rhs_contract[tag[i] - 100] = p;
        else if (tag[i] >= 0)
          d.rhs_batch[tag[i]] = p;
      }
      const int rank = nb + lhs_free + nfree;
      if (rank < 1 || rank > kMaxRank) return std::nullopt;
      if (ys.size() > static_cast<size_t>(kMaxRank)) return std::nullopt;
      y = source(ys, Role::kWeight);
      what = "dot_general";
    }
    const ir::Shape out = ir::dot_shape(xs, y->shape(), d);
    if (out.empty() || ir::num_elements(out) > kMaxElements) return std::nullopt;
    note(what);
    return Value{sharc::dot_general(x.t, y->t, d),
                 x.scale * y->scale * std::sqrt(static_cast<double>(contracted))};
  }

  // x (op) y with numpy broadcasting; y is a value of x's shape, a rank-1
  // bias, a source with size-1 / missing leading dimensions, or a keepdims
  // reduction. Division is only by a positive, bounded-away-from-0 value.
  std::optional<Value> binary(const Value& x) {
    const ir::Shape& xs = x.shape();
    const int kind = rng_.below(4);  // add, sub, mul, div
    std::optional<Value> y;
    std::string what;
    switch (rng_.below(4)) {
      case 0:
        y = same_shape(xs);
        if (!y) y = source(xs, Role::kOperand);
        what = "same";
        break;
      case 1:
        y = source({xs.back()}, Role::kOperand);
        what = "bias";
        break;
      case 2: {
        ir::Shape s(xs.begin() + rng_.below(xs.size()), xs.end());
        for (auto& d : s)
          if (rng_.chance(0.4)) d = 1;
        y = source(s, Role::kOperand);
        what = "bcast";
        break;
      }
      default: {
        Value z = same_shape(xs).value_or(x);
        std::vector<int> axes;
        for (int i = 0; i < x.rank(); ++i)
          if (rng_.chance(0.5)) axes.push_back(rng_.chance(0.3) ? i - x.rank() : i);
        if (axes.empty()) axes.push_back(x.rank() - 1);
        int64_t count = 1;
        for (int a : axes) count *= xs[a < 0 ? a + x.rank() : a];
        switch (rng_.below(3)) {
          case 0:
            y = Value{sum(z.t, axes, true), z.scale * static_cast<double>(count)};
            break;
          case 1:
            y = Value{mean(z.t, axes, true), z.scale};
            break;
          default:
            y = Value{max(z.t, axes, true), z.scale};
            break;
        }
        what = "keepdims";
      }
    }
    Value a = x, b = *y;
    if (rng_.chance(0.3)) std::swap(a, b);
    static const char* kNames[] = {"add", "sub", "mul", "div"};
    note(std::string(kNames[kind]) + "(" + what + ")");
    switch (kind) {
      case 0:
        return Value{add(a.t, b.t), a.scale + b.scale};
      case 1:
        return Value{sub(a.t, b.t), a.scale + b.scale};
      case 2:
        return Value{mul(a.t, b.t), a.scale * b.scale};
      default:
        if (rng_.chance(0.5)) return Value{div(a.t, add(mul(b.t, b.t), 1.0)), a.scale};  // >= 1
        return Value{div(a.t, exp(tanh(b.t))), a.scale * 2.7};                           // >= 1/e
    }
  }

  std::optional<Value> activation(const Value& x) {
    switch (rng_.below(8)) {
      case 4:
        note("abs");
        return Value{abs(x.t), x.scale};
      case 5:
        note("sigmoid");
        return Value{sigmoid(x.t), 1.0};
      case 6:
        note("erf");
        return Value{erf(x.t), 1.0};
      case 7:
        // A lifted branch's shape: x where x > 0, else x / 2.
        note("where(x>0)");
        return Value{where(greater(x.t, full({}, 0.0)), x.t, mul(x.t, 0.5)), x.scale};
      case 0:
        note("relu");
        return Value{relu(x.t), x.scale};
      case 1:
        note("gelu");
        return Value{gelu(x.t), x.scale};
      case 2:
        note("tanh");
        return Value{tanh(x.t), std::min(x.scale, 1.0)};
      default:
        note("neg");
        return Value{neg(x.t), x.scale};
    }
  }

  std::optional<Value> exp_op(const Value& x) {
    if (rng_.chance(0.3)) {
      note("expm1(tanh)");
      return Value{expm1(tanh(x.t)), 1.7};  // in (1/e - 1, e - 1)
    }
    note("exp(tanh)");
    return Value{exp(tanh(x.t)), 1.5};  // in (1/e, e)
  }

  std::optional<Value> log_op(const Value& x) {
    if (rng_.chance(0.3)) {
      note("log1p(x*x)");
      return Value{log1p(mul(x.t, x.t)), std::log1p(x.scale * x.scale) + 0.1};
    }
    note("log(x*x+1)");
    return Value{log(add(mul(x.t, x.t), 1.0)), std::log(x.scale * x.scale + 1.0) + 0.1};
  }

  std::optional<Value> sqrt_op(const Value& x) {
    if (rng_.chance(0.25)) {
      note("pow(exp(tanh), 1.5)");
      return Value{pow(exp(tanh(x.t)), full({}, 1.5)), 4.5};  // in (e^-1.5, e^1.5)
    }
    if (rng_.chance(0.5)) {
      note("sqrt(exp)");
      return Value{sqrt(exp(tanh(x.t))), 1.2};
    }
    note("sqrt(x*x+1)");
    return Value{sqrt(add(mul(x.t, x.t), 1.0)), std::sqrt(x.scale * x.scale + 1.0)};
  }

  // Splits, merges, inserts or drops a size-1 dimension, or refactors the
  // whole shape (groups that do not align, e.g. [4,6] -> [6,4]).
  std::optional<Value> reshape_op(const Value& x) {
    ir::Shape s = x.shape();
    const int r = x.rank();
    std::string what;
    switch (rng_.below(5)) {
      case 0: {  // split
        if (r >= kMaxRank) return std::nullopt;
        const int d = rng_.below(r);
        std::vector<int64_t> divs;
        for (int64_t a = 2; a < s[d]; ++a)
          if (s[d] % a == 0) divs.push_back(a);
        if (divs.empty()) return std::nullopt;
        const int64_t a = rng_.pick(divs);
        s[d] /= a;
        s.insert(s.begin() + d, a);
        what = "split";
        break;
      }
      case 1: {  // merge
        if (r < 2) return std::nullopt;
        const int d = rng_.below(r - 1);
        s[d] *= s[d + 1];
        s.erase(s.begin() + d + 1);
        what = "merge";
        break;
      }
      case 2:  // insert a size-1 dimension
        if (r >= kMaxRank) return std::nullopt;
        s.insert(s.begin() + rng_.below(r + 1), 1);
        what = "insert1";
        break;
      case 3: {  // drop a size-1 dimension
        auto it = std::find(s.begin(), s.end(), 1);
        if (r < 2 || it == s.end()) return std::nullopt;
        s.erase(it);
        what = "drop1";
        break;
      }
      default: {  // refactor the element count
        int64_t left = ir::num_elements(s);
        s.clear();
        const std::vector<int64_t> factors = {2, 3, 4, 6, 8, 12, 16};
        while (left > 1 && static_cast<int>(s.size()) < kMaxRank - 1) {
          std::vector<int64_t> ok;
          for (int64_t f : factors)
            if (left % f == 0) ok.push_back(f);
          if (ok.empty()) break;
          s.push_back(rng_.pick(ok));
          left /= s.back();
        }
        s.push_back(left);
        rng_.shuffle(s);
        what = "refactor";
      }
    }
    if (s == x.shape()) return std::nullopt;
    if (rng_.chance(0.3)) s[rng_.below(s.size())] = -1;
    note("reshape(" + what + ")");
    return Value{reshape(x.t, s), x.scale};
  }

  std::optional<Value> transpose_op(const Value& x) {
    const int r = x.rank();
    if (r < 2) return std::nullopt;
    std::vector<int> perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    while (std::is_sorted(perm.begin(), perm.end())) rng_.shuffle(perm);
    note("transpose");
    return Value{transpose(x.t, perm), x.scale};
  }

  std::optional<Value> reduce_op(const Value& x) {
    const int r = x.rank();
    std::vector<int> axes;
    for (int i = 0; i < r; ++i)
      if (rng_.chance(0.4)) axes.push_back(rng_.chance(0.3) ? i - r : i);
    if (axes.empty()) axes.push_back(rng_.below(r));
    bool keepdims = rng_.chance(0.3);
    if (static_cast<int>(axes.size()) == r) keepdims = true;  // no rank-0 values in the pool
    int64_t count = 1;
    for (int a : axes) count *= x.shape()[a < 0 ? a + r : a];
    switch (rng_.below(3)) {
      case 0:
        note("sum");
        return Value{sum(x.t, axes, keepdims), x.scale * static_cast<double>(count)};
      case 1:
        note("mean");
        return Value{mean(x.t, axes, keepdims), x.scale};
      default:
        note("max");
        return Value{max(x.t, axes, keepdims), x.scale};
    }
  }

  std::optional<Value> softmax_op(const Value& x) {
    const int r = x.rank();
    note("softmax");
    return Value{softmax(x.t, rng_.chance(0.5) ? -1 : rng_.below(r)), 1.0};
  }

  // eps = 0.1 bounds 1/sqrt(var + eps) by 3.2: rows that are (nearly)
  // constant, e.g. broadcast from size 1, must not amplify rounding noise.
  std::optional<Value> layer_norm_op(const Value& x) {
    const int64_t c = x.shape().back();
    if (c < 2) return std::nullopt;
    if (rng_.chance(0.5)) {
      const int id = layers_++;
      auto init = [&](Initializer i) {
        return rng_.chance(0.6) ? with_partitioning(i, spec({c})) : i;
      };
      LayerNorm ln(
          b_.scope() / ("ln" + std::to_string(id)), c,
          {.epsilon = 0.1, .scale_init = init(normal(1.0)), .bias_init = init(normal(0.5))});
      note("LayerNorm");
      return Value{ln(x.t), 2.5};
    }
    const Value scale = source({c}, Role::kNormScale);
    const Value bias = source({c}, Role::kOperand);
    note("layer_norm");
    return Value{layer_norm(x.t, scale.t, bias.t, 0.1), 2.0 * scale.scale + bias.scale};
  }

  std::optional<Value> constraint(const Value& x) {
    note("constraint");
    return Value{with_sharding_constraint(x.t, spec(x.shape())), x.scale};
  }

  std::optional<Value> linear(const Value& x) {
    if (x.rank() < 1 || x.rank() > 3) return std::nullopt;
    const int64_t k = x.shape().back(), n = dim();
    if (ir::num_elements(x.shape()) / k * n > kMaxElements) return std::nullopt;
    LinearOptions o;
    if (rng_.chance(0.7)) o.kernel_init = with_partitioning(lecun_normal(), spec({k, n}));
    o.bias_init = normal(0.5);
    if (rng_.chance(0.5)) o.bias_init = with_partitioning(o.bias_init, spec({n}));
    o.use_bias = rng_.chance(0.7);
    Linear lin(b_.scope() / ("linear" + std::to_string(layers_++)), k, n, o);
    note("Linear");
    return Value{lin(x.t), x.scale + 0.5};
  }

  // ---- outputs

  std::optional<P> out_spec(const ir::Shape& s) {
    return rng_.chance(0.3) ? std::optional<P>(spec(s)) : std::nullopt;
  }

  void outputs() {
    const Value& last = pool_.back();
    b_.output("y0", last.t, out_spec(last.shape()));
    if (pool_.size() > 1 && rng_.chance(0.5)) {
      const Value& v = pool_[rng_.below(pool_.size() - 1)];
      b_.output("y1", v.t, out_spec(v.shape()));
    }
    if (rng_.chance(0.2)) {  // a scalar: reduces every dimension
      const Value& v = rng_.pick(pool_);
      std::vector<int> all(v.rank());
      std::iota(all.begin(), all.end(), 0);
      Tensor t = rng_.chance(0.5) ? mean(v.t, all) : max(v.t, all);
      b_.output("total", t, rng_.chance(0.3) ? std::optional<P>(P()) : std::nullopt);
      note("total");
    }
  }

  Rng rng_;
  const Mesh& mesh_;
  ProgramBuilder& b_;
  std::vector<Value> pool_;
  std::string ops_;
  int inputs_ = 0, params_ = 0, layers_ = 0;
};

}  // namespace

RandomProgram random_program(uint64_t seed) {
  RandomProgram p;
  p.seed = seed;
  p.name = "random_" + std::to_string(seed);
  p.mesh = random_mesh(seed);
  const Mesh mesh = p.mesh;
  p.fn = [seed, mesh](ProgramBuilder& b) { Generator(seed, mesh, b).run(); };
  {
    // Trace once more to learn the op summary (run() is deterministic).
    Tracer tracer(p.name);
    ProgramBuilder b(tracer);
    p.ops = Generator(seed, mesh, b).run();
  }
  p.graph = trace(p.name, p.fn);
  Rng rng(stream(seed, 3));
  for (const ir::Node& n : p.graph.nodes) {
    if (n.op != ir::Op::kInput) continue;
    std::vector<double>& v = p.inputs[n.name];
    v.resize(ir::num_elements(n.shape));
    for (double& x : v) x = static_cast<float>(2.0 * rng.unit() - 1.0);
  }
  return p;
}

}  // namespace sharc::fuzz
