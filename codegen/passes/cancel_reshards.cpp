// cancel_reshards: drop all_gather -> local_slice round trips; see the header.
#include "codegen/passes/cancel_reshards.h"

namespace sharc {

ir::Graph cancel_reshards(const ir::Graph& g) {
  if (!g.partitioned) internal_error("cancel_reshards needs a partitioned graph");
  const int count = static_cast<int>(g.nodes.size());
  // forward[id]: the node whose value id's users should read instead.
  std::vector<int> forward(count);
  for (int id = 0; id < count; ++id) {
    forward[id] = id;
    const ir::Node& n = g.nodes[id];
    if (n.op != ir::Op::kLocalSlice) continue;
    const ir::Node& src = g.nodes[n.args[0]];
    if (src.op == ir::Op::kAllGather && src.dim == n.dim && src.axes == n.axes)
      forward[id] = forward[src.args[0]];
  }
  // Keep a node if an output, a parameter update or a kept node reads it
  // (after forwarding).
  std::vector<bool> live(count, false);
  for (auto& o : g.outputs) live[forward[o.value]] = true;
  for (auto& u : g.updates) live[forward[u.value]] = true;
  for (int id = count - 1; id >= 0; --id) {
    if (!live[id] && g.nodes[id].op != ir::Op::kParameter && g.nodes[id].op != ir::Op::kInput) continue;
    live[id] = true;
    for (int a : g.nodes[id].args) live[forward[a]] = true;
  }
  ir::Graph out = g;
  out.nodes.clear();
  std::vector<int> remap(count, -1);
  for (int id = 0; id < count; ++id) {
    if (!live[id] || forward[id] != id) continue;
    ir::Node n = g.nodes[id];
    for (int& a : n.args) a = remap[forward[a]];
    if (n.layout_of >= 0) n.layout_of = remap[n.layout_of];  // a parameter: always kept
    remap[id] = out.add(std::move(n));
  }
  for (auto& o : out.outputs) o.value = remap[forward[o.value]];
  for (auto& u : out.updates) {
    u.target = remap[u.target];
    u.value = remap[forward[u.value]];
  }
  for (auto& gr : out.gradients) {
    gr.parameter = remap[gr.parameter];
    gr.value = remap[forward[gr.value]];
  }
  return out;
}

}  // namespace sharc
