// ring_collective_matmul: dot + all_gather / reduce_scatter -> RingDot; see the
// header for which pairs are selected and ir.h (RingAttrs) for the schedule.
#include "codegen/passes/ring_collective_matmul.h"

#include <algorithm>
#include <optional>
#include <string>

namespace sharc {

namespace {

using ir::Node;
using ir::Op;

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// One selected rewrite: dot `dot` absorbs collective `collective`.
struct Choice {
  int dot = -1;
  int collective = -1;
  ir::RingKind kind = ir::RingKind::kGather;
  int operand = 0;  // kGather: the travelling operand
};

class Selector {
 public:
  Selector(const ir::Graph& g, const RingOptions& o) : g_(g), o_(o) {
    const int count = static_cast<int>(g.nodes.size());
    uses_.assign(count, 0);
    user_.assign(count, -1);
    for (int id = 0; id < count; ++id)
      for (int a : g.nodes[id].args) {
        ++uses_[a];
        user_[a] = id;
      }
    // Values the program hands out keep their node.
    for (auto& o : g.outputs) uses_[o.value] += 2;
    for (auto& u : g.updates) uses_[u.value] += 2;
    for (auto& gr : g.gradients) uses_[gr.value] += 2;
  }

  // The rewrite chosen for Dot `id`, if any.
  std::optional<Choice> choose(int id) const {
    const Node& d = g_[id];
    if (d.op != Op::kDot) return std::nullopt;
    const CollectiveMatmul mode =
        d.collective_matmul != CollectiveMatmul::kAuto ? d.collective_matmul : o_.mode;
    if (mode == CollectiveMatmul::kNever) return std::nullopt;
    std::optional<Choice> best;
    size_t best_bytes = 0;
    for (int w = 0; w < 2; ++w) {
      const size_t bytes = gather_bytes(d, w);
      if (bytes > 0 && selected(mode, bytes) && (!best || bytes > best_bytes)) {
        best = Choice{id, d.args[w], ir::RingKind::kGather, w};
        best_bytes = bytes;
      }
    }
    if (best) return best;
    const size_t bytes = scatter_bytes(id);
    if (bytes > 0 && selected(mode, bytes)) return Choice{id, user_[id], ir::RingKind::kScatter, 0};
    return std::nullopt;
  }

  // Whether the ring over `c` can split its blocks in halves.
  bool halves(const Choice& c) const {
    const Node& coll = g_[c.collective];
    const ir::Shape& block = c.kind == ir::RingKind::kGather ? g_[coll.args[0]].shape : coll.shape;
    return block[coll.dim] % 2 == 0;
  }

 private:
  bool selected(CollectiveMatmul mode, size_t bytes) const {
    return mode == CollectiveMatmul::kAlways || bytes > o_.threshold_bytes;
  }

  // Bytes per device of the all_gather feeding operand w of dot d, when it is
  // one the ring can replace; 0 otherwise.
  size_t gather_bytes(const Node& d, int w) const {
    const int a = d.args[w];
    const Node& ag = g_[a];
    if (ag.op != Op::kAllGather || ag.axes.size() != 1 || uses_[a] != 1 || d.args[0] == d.args[1])
      return 0;
    const std::vector<int>& contract = w == 0 ? d.dot.lhs_contract : d.dot.rhs_contract;
    if (contains(contract, ag.dim)) return 0;
    const int64_t n = g_.mesh.size(ag.axes);
    if (n < 2) return 0;
    return static_cast<size_t>(n - 1) * ir::num_elements(g_[ag.args[0]].shape) * sizeof(float);
  }

  // Bytes per device of the reduce_scatter that is dot `id`'s only user, when
  // the ring can replace it; 0 otherwise.
  size_t scatter_bytes(int id) const {
    if (uses_[id] != 1) return 0;
    const Node& d = g_[id];
    const Node& rs = g_[user_[id]];
    if (rs.op != Op::kReduceScatter || rs.axes.size() != 1 || rs.reduce != ir::ReduceKind::kSum)
      return 0;
    if (rs.dim < static_cast<int>(d.dot.lhs_batch.size())) return 0;  // a batch dimension
    // The partitioner scatters only sums the dot leaves pending on that axis.
    if (d.sharding && std::find(d.sharding->partial.begin(), d.sharding->partial.end(),
                                rs.axes[0]) == d.sharding->partial.end())
      return 0;
    const int64_t n = g_.mesh.size(rs.axes);
    if (n < 2) return 0;
    return static_cast<size_t>(n - 1) * ir::num_elements(rs.shape) * sizeof(float);
  }

  const ir::Graph& g_;
  const RingOptions& o_;
  std::vector<int> uses_, user_;
};

Node ring_node(const ir::Graph& g, const Choice& c, RingDirection direction) {
  const Node& d = g[c.dot];
  const Node& coll = g[c.collective];
  Node r = d;
  r.op = Op::kRingDot;
  r.axes = coll.axes;
  r.dim = coll.dim;
  r.dim2 = -1;
  r.backward = d.backward || coll.backward;
  r.micro_batch = std::max(d.micro_batch, coll.micro_batch);
  r.collective_matmul = CollectiveMatmul::kAuto;
  r.ring = {c.kind, c.operand, direction};
  if (c.kind == ir::RingKind::kGather) {
    r.args[c.operand] = coll.args[0];
  } else {
    r.shape = coll.shape;
    r.sharding = coll.sharding;
  }
  return r;
}

}  // namespace

ir::Graph ring_collective_matmul(const ir::Graph& g, const RingOptions& options) {
  if (!g.partitioned) internal_error("ring_collective_matmul needs a partitioned graph");
  const int count = static_cast<int>(g.nodes.size());
  const Selector select(g, options);
  // replaced_by[x] = y: node x is dropped and its users read y (an old id).
  // ring[id]: the RingDot that takes old node id's place.
  std::vector<int> replaced_by(count, -1);
  std::vector<std::optional<Node>> ring(count);
  for (int id = 0; id < count; ++id) {
    const std::optional<Choice> c = select.choose(id);
    if (!c) continue;
    const RingDirection dir =
        options.direction == RingDirection::kBidirectional && select.halves(*c)
            ? RingDirection::kBidirectional
            : RingDirection::kUnidirectional;
    if (c->kind == ir::RingKind::kGather) {
      replaced_by[c->collective] = g[c->collective].args[0];
      ring[id] = ring_node(g, *c, dir);
    } else {
      // The dot disappears; the RingDot stands where its reduce_scatter was.
      replaced_by[id] = c->collective;
      ring[c->collective] = ring_node(g, *c, dir);
    }
  }

  ir::Graph out = g;
  out.nodes.clear();
  std::vector<int> remap(count, -1);
  // A dropped all_gather reads as its operand, a dropped dot (scatter) as the
  // RingDot at its reduce_scatter's place.
  auto mapped = [&](int old) {
    while (replaced_by[old] >= 0 && !ring[old]) old = replaced_by[old];
    if (remap[old] < 0) internal_error("ring_collective_matmul lost node %" + std::to_string(old));
    return remap[old];
  };
  for (int id = 0; id < count; ++id) {
    if (replaced_by[id] >= 0) continue;
    Node n = ring[id] ? *ring[id] : g.nodes[id];
    for (int& a : n.args) a = mapped(a);
    if (n.layout_of >= 0) n.layout_of = mapped(n.layout_of);
    remap[id] = out.add(std::move(n));
  }
  for (auto& o : out.outputs) o.value = mapped(o.value);
  for (auto& u : out.updates) {
    u.target = mapped(u.target);
    u.value = mapped(u.value);
  }
  for (auto& gr : out.gradients) {
    gr.parameter = mapped(gr.parameter);
    gr.value = mapped(gr.value);
  }

  // Postcondition: nothing selected is left (one ring per dot, so a dot that
  // has become a RingDot is not looked at again).
  const Selector check(out, options);
  for (int id = 0; id < static_cast<int>(out.nodes.size()); ++id)
    if (check.choose(id))
      internal_error("ring_collective_matmul left a selected collective at " +
                     ir::node_str(out, id));
  return out;
}

}  // namespace sharc
