// drop_nodes: see the header.
#include "codegen/passes/drop_nodes.h"

#include <algorithm>

namespace sharc {

ir::Graph drop_nodes(const ir::Graph& g, const std::vector<bool>& dead, const std::string& pass) {
  if (std::find(dead.begin(), dead.end(), true) == dead.end()) return g;
  ir::Graph packed = g;
  packed.nodes.clear();
  std::vector<int> pack(g.nodes.size(), -1);
  auto at = [&](int old, const char* what) {
    if (old >= 0 && pack[old] < 0)
      internal_error(pass + " dropped a node " + what + " still reads");
    return old < 0 ? old : pack[old];
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dead[i]) continue;
    ir::Node n = g.nodes[i];
    for (int& a : n.args) a = at(a, "a live node");
    if (n.layout_of >= 0) n.layout_of = at(n.layout_of, "a parameter's layout_of");
    pack[i] = packed.add(std::move(n));
  }
  for (auto& o : packed.outputs) o.value = at(o.value, "an output");
  for (auto& u : packed.updates) {
    u.value = at(u.value, "an update");
    u.target = at(u.target, "an update");
  }
  for (auto& gr : packed.gradients) {
    gr.parameter = at(gr.parameter, "a gradient");
    gr.value = at(gr.value, "a gradient");
  }
  return packed;
}

std::vector<int> count_uses(const ir::Graph& g) {
  std::vector<int> uses(g.nodes.size(), 0);
  for (auto& n : g.nodes)
    for (int a : n.args) ++uses[a];
  for (auto& o : g.outputs) ++uses[o.value];
  for (auto& u : g.updates) ++uses[u.value];
  return uses;
}

std::vector<std::vector<int>> users_of(const ir::Graph& g) {
  std::vector<std::vector<int>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int a : g.nodes[i].args)
      if (users[a].empty() || users[a].back() != static_cast<int>(i)) users[a].push_back(static_cast<int>(i));
  return users;
}

void remap_roots(ir::Graph& g, const std::vector<int>& remap) {
  for (auto& o : g.outputs) o.value = remap[o.value];
  for (auto& u : g.updates) {
    u.value = remap[u.value];
    u.target = remap[u.target];
  }
  for (auto& gr : g.gradients) {
    gr.parameter = remap[gr.parameter];
    gr.value = remap[gr.value];
  }
}

}  // namespace sharc
