// resolve_logical_axes: user specs -> validated mesh shardings; see the header.
#include "codegen/passes/resolve_logical_axes.h"

#include <algorithm>

namespace sharc {

namespace {

std::string what(const ir::Graph& g, const ir::Node& n, int id) {
  switch (n.op) {
    case ir::Op::kParameter: return "parameter '" + n.name + "' " + ir::shape_str(n.shape);
    case ir::Op::kInput: return "input '" + n.name + "' " + ir::shape_str(n.shape);
    default: {
      // Name the constrained value the way Tensor::describe() does, so the
      // user can find it: "with_sharding_constraint of relu result %3 f32[8,16]".
      if (n.args.empty()) return "with_sharding_constraint %" + std::to_string(id);
      const ir::Node& a = g.nodes[n.args[0]];
      std::string v;
      if (a.op == ir::Op::kParameter) v = "parameter '" + a.name + "'";
      else if (a.op == ir::Op::kInput) v = "input '" + a.name + "'";
      else v = std::string(ir::op_name(a.op)) + " result %" + std::to_string(n.args[0]);
      if (!a.name.empty() && !ir::is_source(a.op)) v += " in '" + a.name + "'";
      return "with_sharding_constraint of " + v + " " + ir::shape_str(n.shape);
    }
  }
}

std::string rules_str(const LogicalRules& rules) {
  std::string s = "(";
  for (size_t i = 0; i < rules.size(); ++i)
    s += (i ? ", ('" : "('") + rules[i].logical + "', " +
         (rules[i].mesh_axis ? "'" + *rules[i].mesh_axis + "'" : std::string("None")) + ")";
  return s + ")";
}

ir::Sharding resolve(const P& spec, const std::optional<LogicalRules>& rules, const ir::Shape& shape,
                     const Mesh& mesh, const SrcLoc& loc, const std::string& subject) {
  if (spec.rank() != shape.size())
    user_error(loc, "spec " + spec.str() + " has " + std::to_string(spec.rank()) +
                        (spec.rank() == 1 ? " entry" : " entries") + " but " + subject + " has rank " +
                        std::to_string(shape.size()));
  ir::Sharding s = ir::Sharding::replicated(shape.size());
  std::vector<std::string> used;
  for (size_t d = 0; d < shape.size(); ++d) {
    for (const std::string& name : spec[d].axes) {
      bool has_rule = false;
      std::optional<std::string> axis;
      if (rules) {
        // Flax semantics: the first rule for this name whose mesh axis is still free.
        for (const auto& r : *rules) {
          if (r.logical != name) continue;
          has_rule = true;
          if (!r.mesh_axis || std::find(used.begin(), used.end(), *r.mesh_axis) == used.end()) {
            axis = r.mesh_axis;
            break;
          }
        }
      }
      if (!has_rule) {
        if (!mesh.has(name)) {
          if (rules)
            user_error(loc, "logical axis name '" + name + "' in " + spec.str() + " for " + subject +
                                " has no rule in sharding_rules " + rules_str(*rules) +
                                " and is not a mesh axis (mesh axes: " + mesh.names() + ")");
          user_error(loc, "unknown mesh axis '" + name + "' in " + spec.str() + " for " + subject +
                              "; the mesh " + mesh.str() + " has axes " + mesh.names());
        }
        axis = name;
      }
      if (!axis) continue;  // a rule to None: replicated
      if (!mesh.has(*axis))
        user_error(loc, "sharding rule maps '" + name + "' to unknown mesh axis '" + *axis + "' in " +
                            spec.str() + " for " + subject + " (mesh axes: " + mesh.names() + ")");
      if (std::find(used.begin(), used.end(), *axis) != used.end())
        user_error(loc, "mesh axis '" + *axis + "' is used twice in " + spec.str() + " for " + subject +
                            "; a mesh axis may shard at most one dimension of a tensor");
      used.push_back(*axis);
      s.dims[d].push_back(*axis);
    }
    const int64_t parts = s.parts(mesh, d);
    if (shape[d] % parts != 0) {
      std::string axes;
      for (auto& a : s.dims[d]) axes += (axes.empty() ? "'" : " x '") + a + "'=" + std::to_string(mesh.size(a));
      user_error(loc, "dimension " + std::to_string(d) + " of " + subject + " has size " +
                          std::to_string(shape[d]) + ", which does not divide by " + axes + " (" +
                          std::to_string(parts) + " blocks) in " + spec.str());
    }
  }
  return s;
}

}  // namespace

ir::Graph resolve_logical_axes(ir::Graph g, const std::optional<LogicalRules>& program_rules) {
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    ir::Node& n = g.nodes[id];
    if (!n.spec) continue;
    const auto& rules = n.rules ? n.rules : program_rules;
    n.sharding = resolve(*n.spec, rules, n.shape, g.mesh, n.loc, what(g, n, static_cast<int>(id)));
    n.fixed = true;
  }
  for (auto& o : g.outputs) {
    if (!o.spec) continue;
    const ir::Node& v = g.nodes[o.value];
    o.sharding = resolve(*o.spec, program_rules, v.shape, g.mesh, o.loc,
                         "output '" + o.name + "' " + ir::shape_str(v.shape));
  }
  return g;
}

}  // namespace sharc
