// widen_reductions: convert_f32(C_bf16(x)) -> C_f32(convert_f32(x)); see the header.
#include "codegen/passes/widen_reductions.h"

#include "codegen/passes/drop_nodes.h"

namespace sharc {

ir::Graph widen_reductions(const ir::Graph& g) {
  if (!g.partitioned) internal_error("widen_reductions needs a partitioned graph");
  const int count = static_cast<int>(g.nodes.size());
  // A recorded gradient is a use too: the collective it names must stay.
  std::vector<int> uses = count_uses(g);
  for (auto& gr : g.gradients) ++uses[gr.value];

  ir::Graph out = g;
  out.nodes.clear();
  std::vector<int> remap(count, -1);
  std::vector<bool> dead;  // per output node
  auto keep = [&](ir::Node n) {
    dead.push_back(false);
    return out.add(std::move(n));
  };
  for (int id = 0; id < count; ++id) {
    const ir::Node& old = g.nodes[id];
    ir::Node n = old;
    for (int& a : n.args) a = remap[a];
    if (n.layout_of >= 0) n.layout_of = remap[n.layout_of];
    if (n.op == ir::Op::kConvert && n.dtype == ir::DType::kF32 && n.backward) {
      const ir::Node& c = g.nodes[old.args[0]];
      const bool sum = (c.op == ir::Op::kAllReduce || c.op == ir::Op::kReduceScatter) &&
                       c.reduce == ir::ReduceKind::kSum && c.dtype == ir::DType::kBF16;
      if (sum && uses[old.args[0]] == 1) {
        const int coll = n.args[0];  // the collective, already copied
        const int x = out.nodes[coll].args[0];
        ir::Node widen = n;  // the convert, moved before the collective
        widen.args = {x};
        widen.shape = out.nodes[x].shape;
        widen.sharding = out.nodes[x].sharding;
        ir::Node reduce = out.nodes[coll];
        dead[coll] = true;
        reduce.args = {keep(std::move(widen))};  // Graph::add makes it f32
        reduce.backward = true;
        remap[id] = keep(std::move(reduce));
        continue;
      }
    }
    remap[id] = keep(std::move(n));
  }
  remap_roots(out, remap);
  return drop_nodes(out, dead, "widen_reductions");
}

}  // namespace sharc
