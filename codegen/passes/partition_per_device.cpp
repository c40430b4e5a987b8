// partition_per_device: global program + shardings -> per-device program with
// collectives; see the header for the resharding rules.
#include "codegen/passes/partition_per_device.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "codegen/passes/dim_maps.h"
#include "dsl/shard_map.h"

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using ir::Sharding;
using ir::Shape;

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool is_prefix(const std::vector<std::string>& p, const std::vector<std::string>& v) {
  return p.size() <= v.size() && std::equal(p.begin(), p.end(), v.begin());
}

class Partitioner {
 public:
  explicit Partitioner(const ir::Graph& g) : g_(g) {
    out_.name = g.name;
    out_.mesh = g.mesh;
    out_.pipeline = g.pipeline;
    out_.repeats = g.repeats;
    out_.composites = g.composites;
    out_.partitioned = true;
  }

  ir::Graph run() {
    map_.assign(g_.nodes.size(), -1);
    // For Node::origin_rank. A scanned layer's values count within their
    // layer, so that layer i's values are named as layer 0's (and the
    // emitter can write their code once, codegen/emit_cpu.cpp).
    std::map<std::tuple<Op, std::string, bool, bool, int>, int> seen;
    for (const Node& n : g_.nodes) {
      const bool scanned = n.repeat >= 0 && n.iteration >= 0 && g_.repeats[n.repeat].scan;
      rank_.push_back(seen[{n.op, n.name, n.backward, n.remat, scanned ? n.iteration : -1}]++);
    }
    for (size_t id = 0; id < g_.nodes.size(); ++id) lower(static_cast<int>(id));
    for (const ir::Output& o : g_.outputs) {
      cur_ = &g_.nodes[o.value];
      const int v = reshard(map_[o.value], *o.sharding);
      out_.outputs.push_back({o.name, v, o.loc, o.spec, o.sharding});
    }
    // Training updates: each new value in its parameter's layout.
    for (const ir::Update& u : g_.updates) {
      cur_ = &g_.nodes[u.value];
      out_.updates.push_back({map_[u.target], reshard(map_[u.value], sharding_of(map_[u.target]))});
    }
    // Gradients: the value in its propagated layout.
    for (const ir::Gradient& gr : g_.gradients)
      out_.gradients.push_back({map_[gr.parameter], map_[gr.value]});
    return std::move(out_);
  }

 private:
  const Mesh& mesh() const { return g_.mesh; }
  const Sharding& sharding_of(int new_id) const { return *out_.nodes[new_id].sharding; }
  const Shape& global_shape_of(int new_id) const { return global_[new_id]; }

  // Appends a node to the per-device graph, attributed to the DSL line of the
  // global node being lowered.
  int emit(Node n, Shape global, Sharding s) {
    n.shape = s.local_shape(global, mesh());
    n.loc = cur_->loc;
    if (n.name.empty() && !ir::is_source(n.op)) n.name = cur_->name;
    if (n.layer < 0) n.layer = cur_->layer;
    if (n.repeat < 0) n.repeat = cur_->repeat;
    if (n.iteration < 0) n.iteration = cur_->iteration;
    if (n.composite < 0) n.composite = cur_->composite;
    if (n.micro_batch < 0) n.micro_batch = cur_->micro_batch;
    // A reshard made for a gradient is part of the backward pass (the
    // emitter's parts and loops go by it), as the collectives are.
    n.backward = n.backward || cur_->backward;
    n.remat = n.remat || cur_->remat;
    n.sharding = std::move(s);
    global_.push_back(std::move(global));
    return out_.add(std::move(n));
  }

  int collective(Op op, int v, std::vector<std::string> axes, int dim, Sharding result,
                 ir::ReduceKind kind = ir::ReduceKind::kSum, int dim2 = -1) {
    Node n;
    n.op = op;
    n.args = {v};
    n.axes = std::move(axes);
    n.dim = dim;
    n.dim2 = dim2;
    n.reduce = kind;
    n.name = cur_->name;
    n.backward = cur_->backward;
    return emit(std::move(n), global_shape_of(v), std::move(result));
  }

  int64_t local_dim(int v, int d) const { return out_.nodes[v].shape[d]; }

  // Rewrites value v (of its current sharding, possibly partial) into sharding t.
  int reshard(int v, const Sharding& t) {
    Sharding s = sharding_of(v);
    // 1. Pending partial sums/maxes: reduce-scatter onto a dimension, else all-reduce.
    while (!s.partial.empty()) {
      const std::string a = s.partial.front();
      const int n = mesh().size(a);
      Sharding r = s;
      r.partial.erase(r.partial.begin());
      if (r.partial.empty()) r.partial_kind = ir::ReduceKind::kSum;
      int dim = -1;
      for (size_t d = 0; d < t.rank() && dim < 0; ++d) {
        auto want = s.dims[d];
        want.push_back(a);
        if (is_prefix(want, t.dims[d]) && local_dim(v, d) % n == 0) dim = static_cast<int>(d);
      }
      if (dim < 0 && !cur_->backward) {
        // No dimension of t takes `a`: scatter onto the largest divisible
        // dimension; step 3 gathers it back (reduce-scatter + all-gather is the
        // ring all-reduce, same bytes, and leaves each half schedulable).
        // Gradients (backward nodes) are all-reduced instead, so that
        // bucket_all_reduces can group them into few large collectives.
        int64_t best = 0;
        for (size_t d = 0; d < s.rank(); ++d)
          if (local_dim(v, d) % n == 0 && local_dim(v, d) > best) {
            best = local_dim(v, d);
            dim = static_cast<int>(d);
          }
      }
      if (dim >= 0) {
        r.dims[dim].push_back(a);
        v = collective(Op::kReduceScatter, v, {a}, dim, r, s.partial_kind);
      } else {
        v = collective(Op::kAllReduce, v, {a}, -1, r, s.partial_kind);
      }
      s = r;
    }
    // 2. An axis that moves from the end of one dimension to the next free
    //    position of another: all_to_all.
    for (size_t i = 0; i < s.rank(); ++i) {
      if (s.dims[i].empty() || is_prefix(s.dims[i], t.dims[i])) continue;
      const std::string a = s.dims[i].back();
      std::vector<std::string> rest(s.dims[i].begin(), s.dims[i].end() - 1);
      if (!is_prefix(rest, t.dims[i])) continue;
      for (size_t j = 0; j < s.rank(); ++j) {
        if (j == i) continue;
        auto want = s.dims[j];
        want.push_back(a);
        if (!is_prefix(want, t.dims[j]) || local_dim(v, j) % mesh().size(a) != 0) continue;
        Sharding r = s;
        r.dims[i] = rest;
        r.dims[j] = want;
        v = collective(Op::kAllToAll, v, {a}, static_cast<int>(j), r, ir::ReduceKind::kSum,
                       static_cast<int>(i));
        s = r;
        break;
      }
    }
    // 3. Gather the axes beyond the common prefix, minor first.
    std::vector<size_t> keep(s.rank());
    for (size_t d = 0; d < s.rank(); ++d) {
      size_t k = 0;
      while (k < s.dims[d].size() && k < t.dims[d].size() && s.dims[d][k] == t.dims[d][k]) ++k;
      keep[d] = k;
      while (s.dims[d].size() > k) {
        Sharding r = s;
        const std::string a = r.dims[d].back();
        r.dims[d].pop_back();
        v = collective(Op::kAllGather, v, {a}, static_cast<int>(d), r);
        s = r;
      }
    }
    // 4. Take this device's block for the axes t adds (no communication).
    for (size_t d = 0; d < s.rank(); ++d)
      for (size_t k = keep[d]; k < t.dims[d].size(); ++k) {
        Sharding r = s;
        r.dims[d].push_back(t.dims[d][k]);
        Node n;
        n.op = Op::kLocalSlice;
        n.args = {v};
        n.axes = {t.dims[d][k]};
        n.dim = static_cast<int>(d);
        n.name = cur_->name;
        v = emit(std::move(n), global_shape_of(v), r);
        s = r;
      }
    if (!(s == t)) internal_error("reshard did not reach " + t.str() + " from " + s.str());
    return v;
  }

  // The sharding operand `arg` must have for node n to compute its result in
  // sharding `res` locally, per dim_links; dimensions without a link keep the
  // operand's current axes when those are free (reduced/contracting dims).
  Sharding required(const Node& n, int arg, const Sharding& res, const std::vector<DimLink>& links) {
    const Shape& shape = g_.nodes[n.args[arg]].shape;
    Sharding want = Sharding::replicated(shape.size());
    for (const DimLink& l : links)
      if (l.arg == arg && l.result_dim >= 0) want.dims[l.arg_dim] = res.dims[l.result_dim];
    return want;
  }

  void lower(int id) {
    const Node& n = g_.nodes[id];
    cur_ = &n;
    const Sharding& S = *n.sharding;
    Node m = n;
    m.spec.reset();
    m.rules.reset();
    m.fixed = false;
    m.origin_rank = rank_[id];
    if (n.layout_of >= 0) m.layout_of = map_[n.layout_of];
    if (ir::is_source(n.op)) {
      map_[id] = emit(std::move(m), n.shape, S);
      return;
    }
    if (n.op == Op::kShardMap) {
      lower_shard_map(id);
      return;
    }
    auto links = dim_links(g_, n);
    if (n.op == Op::kShardingConstraint) {
      map_[id] = reshard(map_[n.args[0]], S);
      return;
    }
    if (ir::is_elementwise(n.op) || n.op == Op::kBroadcast || n.op == Op::kTranspose) {
      for (size_t a = 0; a < n.args.size(); ++a)
        m.args[a] = reshard(map_[n.args[a]], required(n, static_cast<int>(a), S, links));
      map_[id] = emit(std::move(m), n.shape, S);
      return;
    }
    if (n.op == Op::kReshape) {
      lower_reshape(id, std::move(m), links);
      return;
    }
    if (n.op == Op::kRandomUniform) {
      // Each device draws its own block from the global index: the seed
      // operand is all it needs.
      m.args[0] = reshard(map_[n.args[0]], Sharding::replicated(0));
      map_[id] = emit(std::move(m), n.shape, S);
      return;
    }
    if (n.op == Op::kSlice || n.op == Op::kPad) {
      // Local when the sliced/padded dimension is whole on every device.
      Sharding local = S;
      local.dims[n.ints[0]].clear();
      m.args[0] = reshard(map_[n.args[0]], required(n, 0, local, links));
      const int v = emit(std::move(m), n.shape, local);
      map_[id] = reshard(v, S);
      return;
    }
    if (n.op == Op::kAddSlice) {
      // Local when the dimension added into is whole on every device and
      // both operands are laid out alike elsewhere.
      Sharding local = S;
      local.dims[n.ints[0]].clear();
      local.partial.clear();
      for (int a = 0; a < 2; ++a) m.args[a] = reshard(map_[n.args[a]], required(n, a, local, links));
      const int v = emit(std::move(m), n.shape, local);
      map_[id] = reshard(v, S);
      return;
    }
    if (n.op == Op::kReduce) {
      lower_reduce(id, std::move(m), links);
      return;
    }
    if (n.op == Op::kDot) {
      lower_dot(id, std::move(m), links);
      return;
    }
    internal_error(std::string("partition_per_device cannot lower ") + ir::op_name(n.op));
  }

  // A reshape is local when every group's sharding sits on its major
  // dimension on both sides (with the same axes) and the rest is unsharded.
  void lower_reshape(int id, Node m, const std::vector<DimLink>&) {
    const Node& n = g_.nodes[id];
    const Sharding& S = *n.sharding;
    const Shape& in = g_.nodes[n.args[0]].shape;
    Sharding want = Sharding::replicated(in.size());
    bool local = true;
    for (auto& gr : reshape_groups(in, n.shape)) {
      for (int j = gr.out_begin; j < gr.out_end; ++j)
        if (j != gr.out_begin && !S.dims[j].empty()) local = false;
      if (gr.out_end > gr.out_begin && !S.dims[gr.out_begin].empty()) {
        if (gr.in_end == gr.in_begin || in[gr.in_begin] % mesh().size(S.dims[gr.out_begin]) != 0)
          local = false;
        else
          want.dims[gr.in_begin] = S.dims[gr.out_begin];
      }
    }
    if (local) {
      m.args[0] = reshard(map_[n.args[0]], want);
      map_[id] = emit(std::move(m), n.shape, S);
    } else {
      // Not expressible locally: reshape the replicated value, then slice.
      m.args[0] = reshard(map_[n.args[0]], Sharding::replicated(in.size()));
      const int r = emit(std::move(m), n.shape, Sharding::replicated(n.shape.size()));
      map_[id] = reshard(r, S);
    }
  }

  // Reduced dimensions keep their axes: the local reduce then leaves partial
  // results over those axes, resolved by reshard() into the node's sharding.
  // As for a dot, an axis S also uses must end its result dimension: the local
  // result leaves it out and the reduce-scatter of the partial puts it back
  // (cheaper than moving the operand's reduced dimension with an all_to_all).
  void lower_reduce(int id, Node m, const std::vector<DimLink>& links) {
    const Node& n = g_.nodes[id];
    const Sharding& S = *n.sharding;
    const int a = map_[n.args[0]];
    Sharding local = S;
    local.partial_kind = n.reduce;
    std::vector<std::pair<int, std::vector<std::string>>> kept;  // reduced dim, its axes
    for (int r : n.ints) {
      const auto& have = sharding_of(a).dims[r];
      if (have.empty()) continue;
      Sharding trial = local;
      bool ok = true;
      for (auto ax = have.rbegin(); ax != have.rend() && ok; ++ax)  // minor axis first
        for (auto& d : trial.dims)
          if (contains(d, *ax)) {
            ok = d.back() == *ax;
            if (ok) d.pop_back();
            break;
          }
      if (!ok) continue;  // gathered by reshard() instead
      local = std::move(trial);
      local.partial.insert(local.partial.end(), have.begin(), have.end());
      kept.emplace_back(r, have);
    }
    Sharding want = required(n, 0, local, links);
    for (auto& [r, axes] : kept) want.dims[r] = axes;
    // A kind without partial axes is not a layout: keep shardings canonical
    // (Sharding::operator== compares partial_kind too).
    if (local.partial.empty()) local.partial_kind = ir::ReduceKind::kSum;
    m.args[0] = reshard(a, want);
    const int v = emit(std::move(m), n.shape, local);
    map_[id] = reshard(v, S);
  }

  void lower_dot(int id, Node m, const std::vector<DimLink>& links) {
    const Node& n = g_.nodes[id];
    const Sharding& S = *n.sharding;
    const int lhs = map_[n.args[0]], rhs = map_[n.args[1]];
    // Pick the contracting layout: the operands' own, preferring one both
    // share, else the one that lets the other side slice instead of gather.
    std::vector<std::vector<std::string>> contract(n.dot.lhs_contract.size());
    for (size_t i = 0; i < contract.size(); ++i) {
      const auto& l = sharding_of(lhs).dims[n.dot.lhs_contract[i]];
      const auto& r = sharding_of(rhs).dims[n.dot.rhs_contract[i]];
      contract[i] = !l.empty() ? l : r;
    }
    // Axes the result uses cannot also split a contracting dimension; the
    // axes of S that come from contraction are produced by reduce-scatter.
    // An axis an operand already holds on a batch or free dimension stays
    // there: contracting over it would move that operand (an activation, in
    // FSDP: batch and weights on one axis) and then reduce-scatter the result
    // back, where gathering the other operand (the weight) keeps the layout.
    auto held_on_kept_dim = [&](const std::string& a) {
      for (const DimLink& l : links) {
        if (l.result_dim < 0) continue;
        const int v = l.arg == 0 ? lhs : rhs;
        if (contains(sharding_of(v).dims[l.arg_dim], a)) return true;
      }
      return false;
    };
    Sharding local = S;
    std::vector<std::string> used;
    for (auto& c : contract) {
      std::vector<std::string> ok;
      for (auto& a : c) {
        if (contains(used, a) || held_on_kept_dim(a)) continue;
        bool at_end = true, in_s = false;
        for (auto& d : local.dims)
          if (contains(d, a)) {
            in_s = true;
            at_end = d.back() == a;
          }
        if (in_s && !at_end) continue;
        if (in_s)
          for (auto& d : local.dims)
            if (!d.empty() && d.back() == a) d.pop_back();
        ok.push_back(a);
        used.push_back(a);
      }
      c = ok;
    }
    local.partial = used;
    Sharding want_l = required(n, 0, local, links), want_r = required(n, 1, local, links);
    for (size_t i = 0; i < contract.size(); ++i) {
      want_l.dims[n.dot.lhs_contract[i]] = contract[i];
      want_r.dims[n.dot.rhs_contract[i]] = contract[i];
    }
    m.args[0] = reshard(lhs, want_l);
    m.args[1] = reshard(rhs, want_r);
    const int v = emit(std::move(m), n.shape, local);
    map_[id] = reshard(v, S);
  }

  // shard_map: the operands are resharded to the in specs, the body (traced
  // for this mesh, already per device) is inlined, and each result is the
  // body's value labelled with its out spec. Values inside the body are
  // device-varying; they are labelled replicated with their local shape as
  // global shape (nothing after partitioning reads a global shape from them).
  void lower_shard_map(int id) {
    const Node& n = g_.nodes[id];
    const int index = n.ints[0];
    auto done = shard_map_results_.find(index);
    if (done == shard_map_results_.end()) {
      const ShardMapInstance inst = instantiate_shard_map(shard_map_body(g_, n), mesh());
      const ir::Graph& body = inst.body;
      std::vector<int> operands;
      for (size_t i = 0; i < n.args.size(); ++i) operands.push_back(reshard(map_[n.args[i]], inst.in[i]));
      std::vector<int> bmap(body.nodes.size(), -1);
      std::vector<bool> claimed(body.nodes.size(), false);
      int next_input = 0;
      for (size_t b = 0; b < body.nodes.size(); ++b) {
        const Node& bn = body.nodes[b];
        if (bn.op == Op::kInput) {
          bmap[b] = operands.at(next_input++);
          claimed[b] = true;  // an operand's node keeps its own layout
          continue;
        }
        Node m = bn;
        for (int& a : m.args) a = bmap[a];
        if (m.name.empty() || m.name == body.name) m.name = n.name;
        m.backward = n.backward;
        m.layer = n.layer;
        m.micro_batch = n.micro_batch;
        m.sharding = Sharding::replicated(m.shape.size());
        global_.push_back(m.shape);
        bmap[b] = out_.add(std::move(m));
      }
      std::vector<int> results;
      for (size_t j = 0; j < body.outputs.size(); ++j) {
        const int b = body.outputs[j].value;
        const Shape global = shard_map_body(g_, n).out_shapes[j];
        if (!claimed[b]) {
          // Relabel the body's own node as the block of the global result.
          claimed[b] = true;
          out_.nodes[bmap[b]].sharding = inst.out[j];
          global_[bmap[b]] = global;
          results.push_back(bmap[b]);
        } else {
          // An operand or a value returned twice: a copy under the new label.
          Node c;
          c.op = Op::kReshape;
          c.args = {bmap[b]};
          c.name = n.name;
          results.push_back(emit(std::move(c), global, inst.out[j]));
        }
      }
      done = shard_map_results_.emplace(index, std::move(results)).first;
    }
    map_[id] = done->second.at(n.ints[1]);
    if (!(sharding_of(map_[id]) == *n.sharding)) map_[id] = reshard(map_[id], *n.sharding);
  }

  const ir::Graph& g_;
  std::map<int, std::vector<int>> shard_map_results_;  // body index -> result node per output
  ir::Graph out_;
  std::vector<int> map_;     // global node id -> per-device node id
  std::vector<int> rank_;    // global node id -> its Node::origin_rank
  std::vector<Shape> global_;  // per-device node id -> global shape
  const Node* cur_ = nullptr;
};

ir::Graph checked(ir::Graph out) {
  for (auto& n : out.nodes)
    if (n.op == Op::kShardingConstraint) internal_error("sharding constraint left after partitioning");
  return out;
}

}  // namespace

ir::Graph partition_per_device(const ir::Graph& g) {
  for (auto& n : g.nodes)
    if (!n.sharding) internal_error("partition_per_device needs propagate_shardings first");
  // A mesh axis of size 1 splits nothing and sums over one device: dropped
  // from every layout first, it never makes a collective or a local slice
  // (a data=1 program would otherwise copy each gradient through a
  // one-device all-reduce).
  const auto size_one = [&](const std::string& a) { return g.mesh.size(a) == 1; };
  bool any = false;
  for (const auto& axis : g.mesh.axes()) any = any || axis.size == 1;
  if (!any) return checked(Partitioner(g).run());
  ir::Graph stripped = g;
  auto strip = [&](std::optional<Sharding>& s) {
    if (!s) return;
    for (auto& d : s->dims) std::erase_if(d, size_one);
    std::erase_if(s->partial, size_one);
    if (s->partial.empty()) s->partial_kind = ir::ReduceKind::kSum;
  };
  for (Node& n : stripped.nodes) strip(n.sharding);
  for (ir::Output& o : stripped.outputs) strip(o.sharding);
  return checked(Partitioner(stripped).run());
}

int64_t block_index(const ir::Sharding& s, size_t d, const Mesh& mesh, int rank) {
  const auto coords = mesh.coords(rank);
  int64_t idx = 0;
  for (const auto& a : s.dims[d]) idx = idx * mesh.size(a) + coords[mesh.index(a)];
  return idx;
}

}  // namespace sharc
