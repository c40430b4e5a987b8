// propagate_shardings: GSPMD-style fixed point over dim_links; see the header.
#include "codegen/passes/propagate_shardings.h"

#include "codegen/passes/dim_maps.h"

namespace sharc {

namespace {

struct Propagator {
  ir::Graph& g;
  std::vector<ir::Sharding> s;  // working shardings (dimensions fill in monotonically)

  // Sets dimension d of node id to `axes` if it is unsharded, the node is not
  // fixed, the axes are free in the tensor and the size divides.
  bool merge(int id, int d, const std::vector<std::string>& axes) {
    ir::Node& n = g.nodes[id];
    if (n.fixed || axes.empty() || !s[id].dims[d].empty()) return false;
    for (auto& a : axes)
      if (s[id].uses(a)) return false;
    if (n.shape[d] % g.mesh.size(axes) != 0) return false;
    s[id].dims[d] = axes;
    return true;
  }

  bool forward(int id) {
    bool changed = false;
    const ir::Node& n = g.nodes[id];
    for (const DimLink& l : dim_links(g, n))
      if (l.result_dim >= 0) changed |= merge(id, l.result_dim, s[n.args[l.arg]].dims[l.arg_dim]);
    return changed;
  }

  bool backward(int id) {
    bool changed = false;
    const ir::Node& n = g.nodes[id];
    for (const DimLink& l : dim_links(g, n)) {
      const int a = n.args[l.arg];
      if (l.result_dim >= 0) {
        changed |= merge(a, l.arg_dim, s[id].dims[l.result_dim]);
      } else {
        // Sideways between a dot's contracting dimensions.
        const int b = n.args[l.other_arg];
        changed |= merge(a, l.arg_dim, s[b].dims[l.other_dim]);
        changed |= merge(b, l.other_dim, s[a].dims[l.arg_dim]);
      }
    }
    return changed;
  }

  void run() {
    const int count = static_cast<int>(g.nodes.size());
    s.resize(count);
    for (int id = 0; id < count; ++id) {
      const ir::Node& n = g.nodes[id];
      s[id] = n.fixed ? *n.sharding : ir::Sharding::replicated(n.shape.size());
    }
    // A state parameter starts from its parameter's layout when that is fixed.
    for (int id = 0; id < count; ++id) {
      const int p = g.nodes[id].layout_of;
      if (p >= 0 && !g.nodes[id].fixed && g.nodes[p].fixed) {
        s[id] = s[p];
        g.nodes[id].fixed = true;
      }
    }
    // Outputs pinned by the user seed their values (backward information).
    for (auto& o : g.outputs)
      if (o.sharding)
        for (size_t d = 0; d < o.sharding->rank(); ++d) merge(o.value, static_cast<int>(d), o.sharding->dims[d]);
    for (bool changed = true; changed;) {
      changed = false;
      for (int id = 0; id < count; ++id) changed |= forward(id);
      for (int id = count - 1; id >= 0; --id) changed |= backward(id);
    }
    // Optimizer state is laid out like its parameter, whatever reached it.
    for (int id = 0; id < count; ++id)
      if (g.nodes[id].layout_of >= 0 && !g.nodes[id].fixed) s[id] = s[g.nodes[id].layout_of];
    for (int id = 0; id < count; ++id) g.nodes[id].sharding = s[id];
    for (auto& o : g.outputs)
      if (!o.sharding) o.sharding = s[o.value];
  }
};

}  // namespace

ir::Graph propagate_shardings(ir::Graph g) {
  Propagator{g, {}}.run();
  for (auto& n : g.nodes)
    if (!n.sharding || !n.sharding->partial.empty())
      internal_error("propagate_shardings left a node without a full sharding");
  return g;
}

}  // namespace sharc
