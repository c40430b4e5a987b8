// combine_reductions: add(C(a), C(b)) -> C(add(a, b)); see the header.
#include "codegen/passes/combine_reductions.h"

#include <algorithm>

#include "codegen/passes/drop_nodes.h"

namespace sharc {

namespace {

bool is_sum_collective(const ir::Node& n) {
  return (n.op == ir::Op::kAllReduce || n.op == ir::Op::kReduceScatter) && n.reduce == ir::ReduceKind::kSum;
}

bool same_collective(const ir::Node& a, const ir::Node& b) {
  return a.op == b.op && a.axes == b.axes && a.dim == b.dim && a.reduce == b.reduce;
}

}  // namespace

ir::Graph combine_reductions(const ir::Graph& g) {
  if (!g.partitioned) internal_error("combine_reductions needs a partitioned graph");
  const int count = static_cast<int>(g.nodes.size());
  // Users in the input graph; a combined collective keeps its add's users.
  const std::vector<int> uses = count_uses(g);

  ir::Graph out = g;
  out.nodes.clear();
  std::vector<int> remap(count, -1);
  std::vector<int> out_uses;  // uses in the input graph of the node each output node stands for
  std::vector<bool> dead;     // output nodes made unused by a combination
  for (int id = 0; id < count; ++id) {
    ir::Node n = g.nodes[id];
    for (int& a : n.args) a = remap[a];
    if (n.layout_of >= 0) n.layout_of = remap[n.layout_of];
    if (n.op == ir::Op::kAdd && n.args[0] != n.args[1]) {
      const int a = n.args[0], b = n.args[1];
      const ir::Node &ca = out.nodes[a], &cb = out.nodes[b];
      if (is_sum_collective(ca) && same_collective(ca, cb) && out_uses[a] == 1 && out_uses[b] == 1 &&
          out.nodes[ca.args[0]].shape == out.nodes[cb.args[0]].shape) {
        // add of the two partial operands, then one collective.
        ir::Node sum = n;
        sum.args = {ca.args[0], cb.args[0]};
        sum.shape = out.nodes[ca.args[0]].shape;
        sum.sharding = out.nodes[ca.args[0]].sharding;
        sum.backward = n.backward || ca.backward;
        ir::Node coll = ca;
        coll.backward = ca.backward || cb.backward;
        coll.micro_batch = std::max({n.micro_batch, ca.micro_batch, cb.micro_batch});
        dead[a] = dead[b] = true;
        const int s = out.add(std::move(sum));
        out_uses.push_back(1);
        dead.push_back(false);
        coll.args = {s};
        coll.shape = n.shape;
        coll.sharding = n.sharding;
        coll.name = n.name;
        coll.loc = n.loc;
        remap[id] = out.add(std::move(coll));
        out_uses.push_back(uses[id]);
        dead.push_back(false);
        continue;
      }
    }
    remap[id] = out.add(std::move(n));
    out_uses.push_back(uses[id]);
    dead.push_back(false);
  }
  remap_roots(out, remap);
  // Drop the collectives the combinations replaced.
  return drop_nodes(out, dead, "combine_reductions");
}

}  // namespace sharc
