// combine_reductions: add(C(a), C(b)) -> C(add(a, b)); see the header.
#include "codegen/passes/combine_reductions.h"

#include <algorithm>
#include <functional>

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
  // Users in the input graph; a rewritten add keeps its users.
  const std::vector<int> uses = count_uses(g);

  ir::Graph out = g;
  out.nodes.clear();
  std::vector<int> remap(count, -1);
  std::vector<int> out_uses;  // uses in the input graph of the node each output node stands for
  std::vector<bool> dead;     // output nodes made unused by a rewrite
  auto emit = [&](ir::Node n, int n_uses) {
    const int id = out.add(std::move(n));
    out_uses.push_back(n_uses);
    dead.push_back(false);
    return id;
  };

  for (int id = 0; id < count; ++id) {
    ir::Node n = g.nodes[id];
    for (int& a : n.args) a = remap[a];
    if (n.layout_of >= 0) n.layout_of = remap[n.layout_of];
    // all_reduce(all_reduce(x) over A) over B -> all_reduce(x) over A and B
    // (in mesh order): what a value partial over two axes gets, one
    // collective over the product group.
    if (n.op == ir::Op::kAllReduce && is_sum_collective(n)) {
      const int a = n.args[0];
      const ir::Node& inner = out.nodes[a];
      if (inner.op == ir::Op::kAllReduce && is_sum_collective(inner) && out_uses[a] == 1) {
        std::vector<std::string> axes = inner.axes;
        axes.insert(axes.end(), n.axes.begin(), n.axes.end());
        std::sort(axes.begin(), axes.end(), [&](const std::string& x, const std::string& y) {
          return g.mesh.index(x) < g.mesh.index(y);
        });
        if (std::adjacent_find(axes.begin(), axes.end()) == axes.end()) {
          dead[a] = true;
          n.args = inner.args;
          n.axes = std::move(axes);
          n.backward = n.backward || inner.backward;
          n.micro_batch = std::max(n.micro_batch, inner.micro_batch);
          remap[id] = emit(std::move(n), uses[id]);
          continue;
        }
      }
    }
    if (n.op != ir::Op::kAdd || n.args[0] == n.args[1]) {
      remap[id] = emit(std::move(n), uses[id]);
      continue;
    }
    // A collective this add may move: a sum collective of the add's shape
    // read by nothing else.
    auto movable = [&](int c) {
      const ir::Node& nc = out.nodes[c];
      return is_sum_collective(nc) && out_uses[c] == 1 && nc.shape == n.shape;
    };
    // Peels the collectives off the end of a chain: x = add(rest, C) read
    // only by this chain, recursively; returns what is left (-1 if nothing)
    // and appends the collectives innermost first and the peeled adds.
    std::vector<int> colls, peeled;
    std::function<int(int)> peel = [&](int x) -> int {
      if (movable(x)) {
        colls.push_back(x);
        return -1;
      }
      const ir::Node& nx = out.nodes[x];
      if (nx.op != ir::Op::kAdd || out_uses[x] != 1 || nx.args[0] == nx.args[1] ||
          nx.shape != n.shape || nx.sharding != n.sharding)
        return x;
      for (int side : {1, 0}) {
        const int c = nx.args[side], rest = nx.args[1 - side];
        if (!movable(c)) continue;
        peeled.push_back(x);
        const int base = peel(rest);
        colls.push_back(c);
        return base;
      }
      return x;
    };
    const int base0 = peel(n.args[0]);
    const int base1 = peel(n.args[1]);
    // The collectives grouped by kind (op, axes, dim, operand shape), in
    // order of first appearance.
    std::vector<std::vector<int>> groups;
    for (int c : colls) {
      auto fits = [&](const std::vector<int>& grp) {
        const ir::Node &a = out.nodes[grp[0]], &b = out.nodes[c];
        return same_collective(a, b) && out.nodes[a.args[0]].shape == out.nodes[b.args[0]].shape;
      };
      auto it = std::find_if(groups.begin(), groups.end(), fits);
      if (it == groups.end())
        groups.push_back({c});
      else
        it->push_back(c);
    }
    const bool merges = groups.size() < colls.size();
    if (!merges && peeled.empty()) {  // already add(rest, C), or no collective at all
      remap[id] = emit(std::move(n), uses[id]);
      continue;
    }
    for (int x : peeled) dead[x] = true;
    // The local part first, then one collective per kind.
    int result = -1;
    auto add_to_result = [&](int v) {
      if (result < 0) {
        result = v;
        return;
      }
      ir::Node a = n;
      a.args = {result, v};
      result = emit(std::move(a), 1);
    };
    if (base0 >= 0) add_to_result(base0);
    if (base1 >= 0) add_to_result(base1);
    for (const std::vector<int>& grp : groups) {
      if (grp.size() == 1) {
        add_to_result(grp[0]);
        continue;
      }
      // Sum the partial operands, then one collective over the sum.
      const ir::Node first = out.nodes[grp[0]];
      int sum = first.args[0];
      bool backward = n.backward;
      int micro_batch = n.micro_batch;
      for (int c : grp) {
        backward = backward || out.nodes[c].backward;
        micro_batch = std::max(micro_batch, out.nodes[c].micro_batch);
        dead[c] = true;
      }
      for (size_t k = 1; k < grp.size(); ++k) {
        ir::Node a = n;
        a.args = {sum, out.nodes[grp[k]].args[0]};
        a.shape = out.nodes[first.args[0]].shape;
        a.sharding = out.nodes[first.args[0]].sharding;
        a.backward = backward;
        sum = emit(std::move(a), 1);
      }
      ir::Node coll = first;
      coll.args = {sum};
      coll.backward = backward;
      coll.micro_batch = std::max(micro_batch, n.micro_batch);
      coll.name = n.name;
      coll.loc = n.loc;
      add_to_result(emit(std::move(coll), 1));
    }
    // The last node stands for the add: it takes its users.
    out_uses[result] = uses[id];
    remap[id] = result;
  }
  remap_roots(out, remap);
  // Drop the collectives and adds the rewrites replaced.
  return drop_nodes(out, dead, "combine_reductions");
}

}  // namespace sharc
