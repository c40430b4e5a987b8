// The double-precision oracle; see interpret.h.
#include "codegen/interpret.h"

#include "dsl/shard_map.h"
#include "runtime/philox.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using ir::Shape;
using Values = std::vector<double>;

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// Calls f(flat index, multi-index) for every element of shape s.
template <class F>
void for_each_index(const Shape& s, F&& f) {
  const int64_t n = ir::num_elements(s);
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    f(e, idx);
    for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

double gelu(double x) {
  // tanh approximation (jax.nn.gelu(approximate=True)).
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

double unary(Op op, double x) {
  switch (op) {
    case Op::kNeg: return -x;
    case Op::kRelu: return x > 0 ? x : 0.0;
    case Op::kGelu: return gelu(x);
    case Op::kTanh: return std::tanh(x);
    case Op::kExp: return std::exp(x);
    case Op::kLog: return std::log(x);
    case Op::kSqrt: return std::sqrt(x);
    case Op::kSin: return std::sin(x);
    case Op::kCos: return std::cos(x);
    case Op::kAbs: return std::abs(x);
    case Op::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Op::kErf: return std::erf(x);
    case Op::kLog1p: return std::log1p(x);
    case Op::kExpm1: return std::expm1(x);
    // The oracle computes in fp64 whatever the declared types: the tests
    // bound each dtype's distance from it.
    case Op::kConvert: return x;
    default: internal_error(std::string("not unary: ") + ir::op_name(op));
  }
}

double binary(Op op, double a, double b) {
  switch (op) {
    case Op::kAdd: return a + b;
    case Op::kSub: return a - b;
    case Op::kMul: return a * b;
    case Op::kDiv: return a / b;
    case Op::kPow: return std::pow(a, b);
    case Op::kMax: return std::max(a, b);
    case Op::kMin: return std::min(a, b);
    case Op::kGreater: return a > b ? 1.0 : 0.0;
    case Op::kEqual: return a == b ? 1.0 : 0.0;
    default: internal_error(std::string("not binary: ") + ir::op_name(op));
  }
}

Values eval_dot(const Node& n, const Shape& ls, const Values& l, const Shape& rs, const Values& r) {
  const auto& d = n.dot;
  auto lst = strides_of(ls), rst = strides_of(rs);
  std::vector<int> lfree, rfree;
  auto in = [](const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  for (int i = 0; i < static_cast<int>(ls.size()); ++i)
    if (!in(d.lhs_batch, i) && !in(d.lhs_contract, i)) lfree.push_back(i);
  for (int i = 0; i < static_cast<int>(rs.size()); ++i)
    if (!in(d.rhs_batch, i) && !in(d.rhs_contract, i)) rfree.push_back(i);
  Shape cshape;
  for (int c : d.lhs_contract) cshape.push_back(ls[c]);
  Values out(ir::num_elements(n.shape));
  for_each_index(n.shape, [&](int64_t e, const std::vector<int64_t>& idx) {
    int64_t lbase = 0, rbase = 0;
    size_t k = 0;
    for (size_t i = 0; i < d.lhs_batch.size(); ++i, ++k) {
      lbase += idx[k] * lst[d.lhs_batch[i]];
      rbase += idx[k] * rst[d.rhs_batch[i]];
    }
    for (int f : lfree) lbase += idx[k++] * lst[f];
    for (int f : rfree) rbase += idx[k++] * rst[f];
    double acc = 0.0;
    for_each_index(cshape, [&](int64_t, const std::vector<int64_t>& c) {
      int64_t lo = lbase, ro = rbase;
      for (size_t i = 0; i < c.size(); ++i) {
        lo += c[i] * lst[d.lhs_contract[i]];
        ro += c[i] * rst[d.rhs_contract[i]];
      }
      acc += l[lo] * r[ro];
    });
    out[e] = acc;
  });
  return out;
}

}  // namespace

rt::InitSpec init_spec(const Initializer& init, const std::string& path, const ir::Shape& shape) {
  static_assert(static_cast<int>(InitKind::kXavierUniform) == static_cast<int>(rt::InitKind::kXavierUniform));
  rt::InitSpec s;
  s.kind = static_cast<rt::InitKind>(init.kind);
  s.a = init.a;
  s.key = rt::init_key(path);
  if (init.stack_scope.empty()) {
    rt::compute_fans(shape.data(), static_cast<int>(shape.size()), &s.fan_in, &s.fan_out);
    return s;
  }
  // Stacked: each row as its unrolled layer's parameter (rt::InitSpec::row_path).
  if (shape.empty() || path.compare(0, init.stack_scope.size(), init.stack_scope) != 0)
    internal_error("stacked parameter \"" + path + "\" is not under its scope \"" + init.stack_scope + "\"");
  const ir::Shape row(shape.begin() + 1, shape.end());
  rt::compute_fans(row.data(), static_cast<int>(row.size()), &s.fan_in, &s.fan_out);
  s.row_path = path.c_str();
  s.row_split = static_cast<int64_t>(init.stack_scope.size());
  s.row_elems = ir::num_elements(row);
  return s;
}

std::vector<float> init_global(const ir::Node& p, uint64_t seed) {
  std::vector<float> v(ir::num_elements(p.shape));
  std::vector<int64_t> zero(p.shape.size(), 0);
  rt::init_block(init_spec(p.init, p.name, p.shape), seed, p.shape.data(), zero.data(), p.shape.data(),
                 static_cast<int>(p.shape.size()), v.data());
  return v;
}

uint64_t random_stream_key(uint64_t node_key, double seed_value) {
  return rt::random_stream_key(node_key, seed_value);
}

namespace {

// Evaluates node `id` of g (any op but shard_map and the per-device
// collectives) into val[id], its operands being in val already.
void eval_node(const ir::Graph& g, size_t id, std::vector<Values>& val, const HostValues& inputs,
               uint64_t seed, const HostValues* state) {
  {
    const Node& n = g.nodes[id];
    const int64_t count = ir::num_elements(n.shape);
    auto arg = [&](int i) -> const Values& { return val[n.args[i]]; };
    auto arg_shape = [&](int i) -> const Shape& { return g.nodes[n.args[i]].shape; };
    Values& out = val[id];
    switch (n.op) {
      case Op::kParameter: {
        if (state && state->count(n.name)) {
          out = state->at(n.name);
          if (static_cast<int64_t>(out.size()) != count)
            internal_error("state for \"" + n.name + "\" has the wrong size");
          break;
        }
        auto f = init_global(n, seed);
        out.assign(f.begin(), f.end());
        break;
      }
      case Op::kIota: {
        out.resize(count);
        const int d = n.ints[0];
        for_each_index(n.shape, [&](int64_t e, const std::vector<int64_t>& idx) { out[e] = static_cast<double>(idx[d]); });
        break;
      }
      case Op::kRandomUniform: {
        out.resize(count);
        const uint64_t key = random_stream_key(n.key, arg(0)[0]);
        std::vector<float> u(static_cast<size_t>(count));
        rt::uniform_fill(key, 0, count, u.data());
        for (int64_t i = 0; i < count; ++i) out[i] = u[i];
        break;
      }
      case Op::kSlice:
      case Op::kPad: {
        const Shape& in = arg_shape(0);
        const int d = n.ints[0];
        const int64_t shift = n.op == Op::kSlice ? n.ints[1] : -n.ints[1];
        auto st = strides_of(in);
        out.assign(count, 0.0);
        for_each_index(n.shape, [&](int64_t e, const std::vector<int64_t>& idx) {
          const int64_t src = idx[d] + shift;
          if (src < 0 || src >= in[d]) return;  // padding
          int64_t off = 0;
          for (size_t i = 0; i < idx.size(); ++i) off += (static_cast<int>(i) == d ? src : idx[i]) * st[i];
          out[e] = arg(0)[off];
        });
        break;
      }
      case Op::kAddSlice: {
        // The target, plus the update at its window along dim.
        out = arg(0);
        const Shape& x = arg_shape(0);
        const int d = n.ints[0];
        auto st = strides_of(x);
        for_each_index(arg_shape(1), [&](int64_t e, const std::vector<int64_t>& idx) {
          int64_t off = 0;
          for (size_t i = 0; i < idx.size(); ++i) off += (idx[i] + (static_cast<int>(i) == d ? n.ints[1] : 0)) * st[i];
          out[off] += arg(1)[e];
        });
        break;
      }
      case Op::kInput: {
        auto it = inputs.find(n.name);
        if (it == inputs.end()) user_error(n.loc, "no value given for program input \"" + n.name + "\"");
        if (static_cast<int64_t>(it->second.size()) != count)
          user_error(n.loc, "input \"" + n.name + "\" has " + std::to_string(it->second.size()) +
                                " values, expected " + std::to_string(count));
        out = it->second;
        break;
      }
      case Op::kConstant:
        out.assign(count, n.scalar);
        break;
      case Op::kAdd:
      case Op::kSub:
      case Op::kMul:
      case Op::kDiv:
      case Op::kPow:
      case Op::kMax:
      case Op::kMin:
      case Op::kGreater:
      case Op::kEqual:
        out.resize(count);
        for (int64_t i = 0; i < count; ++i) out[i] = binary(n.op, arg(0)[i], arg(1)[i]);
        break;
      case Op::kNeg:
      case Op::kRelu:
      case Op::kGelu:
      case Op::kTanh:
      case Op::kExp:
      case Op::kLog:
      case Op::kSqrt:
      case Op::kSin:
      case Op::kCos:
      case Op::kAbs:
      case Op::kSigmoid:
      case Op::kErf:
      case Op::kLog1p:
      case Op::kExpm1:
        out.resize(count);
        for (int64_t i = 0; i < count; ++i) out[i] = unary(n.op, arg(0)[i]);
        break;
      case Op::kSelect:
        out.resize(count);
        for (int64_t i = 0; i < count; ++i) out[i] = arg(0)[i] != 0.0 ? arg(1)[i] : arg(2)[i];
        break;
      case Op::kConvert:
        // To i32 truncates; to a float type the fp64 value stays as it is.
        out.resize(count);
        for (int64_t i = 0; i < count; ++i)
          out[i] = n.dtype == ir::DType::kI32 ? std::trunc(arg(0)[i]) : arg(0)[i];
        break;
      case Op::kShardingConstraint:
      case Op::kReshape:
        out = arg(0);
        break;
      case Op::kBroadcast: {
        const Shape& in = arg_shape(0);
        auto st = strides_of(in);
        out.resize(count);
        for_each_index(n.shape, [&](int64_t e, const std::vector<int64_t>& idx) {
          int64_t off = 0;
          for (size_t i = 0; i < in.size(); ++i) off += (in[i] == 1 ? 0 : idx[n.ints[i]]) * st[i];
          out[e] = arg(0)[off];
        });
        break;
      }
      case Op::kTranspose: {
        auto st = strides_of(arg_shape(0));
        out.resize(count);
        for_each_index(n.shape, [&](int64_t e, const std::vector<int64_t>& idx) {
          int64_t off = 0;
          for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * st[n.ints[i]];
          out[e] = arg(0)[off];
        });
        break;
      }
      case Op::kReduce: {
        const bool is_max = n.reduce == ir::ReduceKind::kMax;
        out.assign(count, is_max ? -std::numeric_limits<double>::infinity() : 0.0);
        auto ost = strides_of(n.shape);
        std::vector<bool> reduced(arg_shape(0).size(), false);
        for (int a : n.ints) reduced[a] = true;
        for_each_index(arg_shape(0), [&](int64_t e, const std::vector<int64_t>& idx) {
          int64_t o = 0;
          size_t k = 0;
          for (size_t i = 0; i < idx.size(); ++i)
            if (!reduced[i]) o += idx[i] * ost[k++];
          const double x = arg(0)[e];
          out[o] = is_max ? std::max(out[o], x) : out[o] + x;
        });
        break;
      }
      case Op::kDot:
        out = eval_dot(n, arg_shape(0), arg(0), arg_shape(1), arg(1));
        break;
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
        internal_error(std::string(ir::op_name(n.op)) + " in a global program");
      case Op::kShardMap:
        internal_error("eval_node of a shard_map");
    }
  }
}

// ---- shard_map: every device simulated, in lock step -----------------------

// The rank of the device at `coords` (row-major, last axis fastest).
int rank_of(const Mesh& mesh, const std::vector<int>& coords) {
  int r = 0;
  for (size_t i = 0; i < coords.size(); ++i) r = r * mesh.axes()[i].size + coords[i];
  return r;
}

// Global coordinates of the first element of the block device `rank` holds.
std::vector<int64_t> block_start(const ir::Sharding& s, const Shape& local, const Mesh& mesh, int rank) {
  const auto coords = mesh.coords(rank);
  std::vector<int64_t> off(local.size(), 0);
  for (size_t d = 0; d < local.size(); ++d) {
    int64_t idx = 0;
    for (const auto& a : s.dims[d]) idx = idx * mesh.size(a) + coords[mesh.index(a)];
    off[d] = idx * local[d];
  }
  return off;
}

Values take_block(const Values& whole, const Shape& shape, const std::vector<int64_t>& off, const Shape& local) {
  const auto st = strides_of(shape);
  Values out(ir::num_elements(local));
  for_each_index(local, [&](int64_t e, const std::vector<int64_t>& idx) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) o += (off[d] + idx[d]) * st[d];
    out[e] = whole[o];
  });
  return out;
}

void put_block(Values& whole, const Shape& shape, const std::vector<int64_t>& off, const Shape& local,
               const Values& block) {
  const auto st = strides_of(shape);
  for_each_index(local, [&](int64_t e, const std::vector<int64_t>& idx) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) o += (off[d] + idx[d]) * st[d];
    whole[o] = block[e];
  });
}

// Runs shard_map node n's body on every device of g.mesh (fp64) and
// assembles the global results (a block held by several devices is taken
// from the lowest-ranked one).
std::vector<Values> simulate_shard_map(const ir::Graph& g, const Node& n, const std::vector<Values>& args) {
  if (g.mesh.axes().empty())
    user_error(n.loc, "the oracle runs a shard_map per device and needs the mesh: interpret the lowered "
                      "global graph (Lowered::global) or set Graph::mesh");
  const Mesh& mesh = g.mesh;
  const ShardMapBody& b = shard_map_body(g, n);
  const ShardMapInstance inst = instantiate_shard_map(b, mesh);
  const ir::Graph& body = inst.body;
  const int ndev = mesh.num_devices();
  std::vector<std::vector<Values>> dv(ndev, std::vector<Values>(body.nodes.size()));
  // The group of device r along `axis`: ranks by position, and r's position.
  auto group = [&](int r, const std::string& axis, int* position) {
    const int ax = mesh.index(axis);
    auto c = mesh.coords(r);
    *position = c[ax];
    std::vector<int> ranks;
    for (int k = 0; k < mesh.size(axis); ++k) {
      c[ax] = k;
      ranks.push_back(rank_of(mesh, c));
    }
    return ranks;
  };
  int next_input = 0;
  for (size_t id = 0; id < body.nodes.size(); ++id) {
    const Node& m = body.nodes[id];
    switch (m.op) {
      case Op::kInput: {
        const int k = next_input++;
        for (int r = 0; r < ndev; ++r)
          dv[r][id] = take_block(args.at(k), b.in_shapes[k], block_start(inst.in[k], m.shape, mesh, r), m.shape);
        break;
      }
      case Op::kAxisIndex:
        for (int r = 0; r < ndev; ++r) dv[r][id] = {static_cast<double>(mesh.coords(r)[mesh.index(m.axes[0])])};
        break;
      case Op::kAllGather:
      case Op::kAllReduce:
      case Op::kReduceScatter:
      case Op::kPPermute: {
        const Shape& in = body.nodes[m.args[0]].shape;
        for (int r = 0; r < ndev; ++r) {
          int p = 0;
          const auto ranks = group(r, m.axes[0], &p);
          const int gs = static_cast<int>(ranks.size());
          Values& out = dv[r][id];
          out.assign(ir::num_elements(m.shape), 0.0);
          if (m.op == Op::kAllGather) {
            for (int k = 0; k < gs; ++k) {
              std::vector<int64_t> off(in.size(), 0);
              off[m.dim] = k * in[m.dim];
              put_block(out, m.shape, off, in, dv[ranks[k]][m.args[0]]);
            }
          } else if (m.op == Op::kPPermute) {
            for (size_t i = 0; i + 1 < m.ints.size(); i += 2)
              if (m.ints[i + 1] == p) out = dv[ranks[m.ints[i]]][m.args[0]];
          } else {
            const bool is_max = m.reduce == ir::ReduceKind::kMax;
            Values acc = dv[ranks[0]][m.args[0]];
            for (int k = 1; k < gs; ++k) {
              const Values& x = dv[ranks[k]][m.args[0]];
              for (size_t e = 0; e < acc.size(); ++e) acc[e] = is_max ? std::max(acc[e], x[e]) : acc[e] + x[e];
            }
            if (m.op == Op::kAllReduce) {
              out = std::move(acc);
            } else {
              std::vector<int64_t> off(in.size(), 0);
              off[m.dim] = p * m.shape[m.dim];
              out = take_block(acc, in, off, m.shape);
            }
          }
        }
        break;
      }
      case Op::kParameter:
      case Op::kAllToAll:
      case Op::kLocalSlice:
      case Op::kRingDot:
      case Op::kShardMap:
        internal_error(std::string("shard_map body holds ") + ir::op_name(m.op));
      default:
        for (int r = 0; r < ndev; ++r) eval_node(body, id, dv[r], {}, 0, nullptr);
        break;
    }
  }
  std::vector<Values> results;
  for (size_t j = 0; j < body.outputs.size(); ++j) {
    const Shape& gs = b.out_shapes[j];
    const int v = body.outputs[j].value;
    const Shape& local = body.nodes[v].shape;
    Values whole(ir::num_elements(gs), 0.0);
    for (int r = ndev - 1; r >= 0; --r)
      put_block(whole, gs, block_start(inst.out[j], local, mesh, r), local, dv[r][v]);
    results.push_back(std::move(whole));
  }
  return results;
}

}  // namespace

HostValues interpret(const ir::Graph& g, const HostValues& inputs, uint64_t seed, HostValues* state) {
  if (g.partitioned) internal_error("the oracle interprets global programs only");
  std::vector<Values> val(g.nodes.size());
  // Results of each shard_map body (by body index), computed at its first output node.
  std::map<int, std::vector<Values>> shard_map_results;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const Node& n = g.nodes[id];
    if (n.op != Op::kShardMap) {
      eval_node(g, id, val, inputs, seed, state);
      continue;
    }
    auto it = shard_map_results.find(n.ints[0]);
    if (it == shard_map_results.end()) {
      std::vector<Values> args;
      for (int a : n.args) args.push_back(val[a]);
      it = shard_map_results.emplace(n.ints[0], simulate_shard_map(g, n, args)).first;
    }
    val[id] = it->second.at(n.ints[1]);
  }
  HostValues result;
  for (auto& o : g.outputs) result[o.name] = val[o.value];
  if (state) {
    for (auto& n : g.nodes)
      if (n.op == Op::kParameter) (*state)[n.name] = val[&n - g.nodes.data()];
    for (auto& u : g.updates) (*state)[g.nodes[u.target].name] = val[u.value];
  }
  return result;
}

}  // namespace sharc
