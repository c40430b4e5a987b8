// resolve_logical_axes: user specs -> validated mesh shardings; see the header.
#include "codegen/passes/resolve_logical_axes.h"

#include <algorithm>
#include <set>

namespace sharc {

namespace {

std::string what(const ir::Graph& g, const ir::Node& n) {
  switch (n.op) {
    case ir::Op::kParameter:
    case ir::Op::kInput: return ir::describe_value(n);
    case ir::Op::kShardMap:
      return "shard_map result " + std::to_string(n.ints.size() == 2 ? n.ints[1] : -1) + " " +
             ir::shape_str(n.shape) + (n.loc.known() ? " of the shard_map at " + n.loc.str() : "");
    default:
      // Name the constrained value the way Tensor::describe() does, so the
      // user can find it: "with_sharding_constraint of relu result f32[8,16]
      // from 'mlp' at model.h:12".
      if (n.args.empty()) return "with_sharding_constraint " + ir::shape_str(n.shape);
      return "with_sharding_constraint of " + ir::describe_value(g.nodes[n.args[0]]);
  }
}

std::string rules_str(const LogicalRules& rules) {
  std::string s = "(";
  for (size_t i = 0; i < rules.size(); ++i)
    s += (i ? ", ('" : "('") + rules[i].logical + "', " +
         (rules[i].mesh_axis ? "'" + *rules[i].mesh_axis + "'" : std::string("None")) + ")";
  return s + ")";
}

// Rules skipped because their mesh axis is not in the mesh, noted once each.
struct SkipLog {
  std::vector<std::string>* log = nullptr;
  std::set<std::string> seen;
  void skipped(const LogicalRule& r, const Mesh& mesh) {
    const std::string line = "logical rule ('" + r.logical + "', '" + *r.mesh_axis +
                             "') skipped: the mesh " + mesh.str() + " has no axis '" +
                             *r.mesh_axis + "'";
    if (log && seen.insert(line).second) log->push_back(line);
  }
};

ir::Sharding resolve(const P& spec, const std::optional<LogicalRules>& rules,
                     const ir::Shape& shape, const Mesh& mesh, const SrcLoc& loc,
                     const std::string& subject, SkipLog& skips) {
  if (spec.rank() != shape.size())
    user_error(loc, "spec " + spec.str() + " has " + std::to_string(spec.rank()) +
                        (spec.rank() == 1 ? " entry" : " entries") + " but " + subject + " has rank " +
                        std::to_string(shape.size()));
  // One slot per name in the spec, in dimension order.
  struct Slot {
    size_t dim = 0;
    std::string name;
    bool has_rule = false, done = false;
    std::optional<std::string> axis;  // none: replicated
  };
  std::vector<Slot> slots;
  for (size_t d = 0; d < shape.size(); ++d)
    for (const std::string& name : spec[d].axes) {
      Slot sl;
      sl.dim = d;
      sl.name = name;
      if (rules)
        for (const auto& r : *rules) sl.has_rule = sl.has_rule || r.logical == name;
      slots.push_back(std::move(sl));
    }
  // 1. A name without a rule must be a mesh axis, and claims it before any rule applies.
  for (Slot& sl : slots) {
    if (sl.has_rule) continue;
    if (!mesh.has(sl.name)) {
      if (rules)
        user_error(loc, "logical axis name '" + sl.name + "' in " + spec.str() + " for " + subject +
                            " has no rule in sharding_rules " + rules_str(*rules) +
                            " and is not a mesh axis (mesh axes: " + mesh.names() + ")");
      user_error(loc, "unknown mesh axis '" + sl.name + "' in " + spec.str() + " for " + subject +
                          "; the mesh " + mesh.str() + " has axes " + mesh.names());
    }
    sl.axis = sl.name;
    sl.done = true;
  }
  // 2. Flax semantics: rules in order of precedence, each taking the unresolved
  //    names it matches if its mesh axis is still free in the tensor (so an
  //    earlier rule wins across dimensions too); a rule to None replicates.
  //    A rule to an axis the mesh lacks is skipped, so one rule set serves
  //    several meshes. Names no rule could take stay replicated.
  auto is_free = [&](const std::string& axis) {
    for (const Slot& sl : slots)
      if (sl.done && sl.axis == axis) return false;
    return true;
  };
  if (rules)
    for (const auto& r : *rules)
      for (Slot& sl : slots) {
        if (sl.done || sl.name != r.logical || (r.mesh_axis && !is_free(*r.mesh_axis))) continue;
        if (r.mesh_axis && !mesh.has(*r.mesh_axis)) {
          skips.skipped(r, mesh);
          continue;
        }
        sl.axis = r.mesh_axis;
        sl.done = true;
      }
  ir::Sharding s = ir::Sharding::replicated(shape.size());
  std::vector<std::string> used;
  for (const Slot& sl : slots) {
    if (!sl.axis) continue;
    if (std::find(used.begin(), used.end(), *sl.axis) != used.end())
      user_error(loc, "mesh axis '" + *sl.axis + "' is used twice in " + spec.str() + " for " +
                          subject + "; a mesh axis may shard at most one dimension of a tensor");
    used.push_back(*sl.axis);
    s.dims[sl.dim].push_back(*sl.axis);
  }
  for (size_t d = 0; d < shape.size(); ++d) {
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

ir::Graph resolve_logical_axes(ir::Graph g, const std::optional<LogicalRules>& program_rules,
                               std::vector<std::string>* log) {
  SkipLog skips{log, {}};
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    ir::Node& n = g.nodes[id];
    if (!n.spec) continue;
    const auto& rules = n.rules ? n.rules : program_rules;
    n.sharding =
        resolve(*n.spec, rules, n.shape, g.mesh, n.loc, what(g, n), skips);
    n.fixed = true;
  }
  for (auto& o : g.outputs) {
    if (!o.spec) continue;
    const ir::Node& v = g.nodes[o.value];
    o.sharding = resolve(*o.spec, program_rules, v.shape, g.mesh, o.loc,
                         "output '" + o.name + "' " + ir::shape_str(v.shape), skips);
  }
  return g;
}

}  // namespace sharc
