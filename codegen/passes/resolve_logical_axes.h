// Pass: resolve_logical_axes.
//
// Requires: a traced global graph with g.mesh set; annotations (`spec`) on
//   parameters, inputs, sharding constraints and outputs as the user wrote them.
// Ensures: every annotated node (and output) has `sharding` set, `fixed` true,
//   naming only mesh axes, each axis at most once, with a rank equal to the
//   tensor's and every dimension divisible by the product of its axes' sizes.
//   Violations are user errors at the annotation's DSL line.
//
// A name is logical if the node's rules (or the program's) have a rule for it;
// otherwise it must be a mesh axis, which it names directly. Logical names
// follow Flax's logical_to_mesh_axes: the rules are applied in order of
// precedence, each giving its mesh axis to the names it matches if the tensor
// does not use that axis yet (directly named axes count as used), so with
// (('features', 'a'), ('batch', 'a'), ('batch', 'b')) P('batch', 'features')
// becomes [{"b"}, {"a"}]. A rule to None replicates, as does a name no rule
// could take. A rule to a mesh axis the mesh does not have is skipped (and
// noted in `log` when given), so one rule set serves several meshes.
//
//   before: %1 = parameter() "w2" init=lecun_normal() spec=P('hidden', 'embed') : f32[1024,1024]
//   after:  %1 = parameter() "w2" ... : f32[1024,1024] [{"model"}, {}] fixed
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace sharc {

ir::Graph resolve_logical_axes(ir::Graph g,
                               const std::optional<LogicalRules>& program_rules = std::nullopt,
                               std::vector<std::string>* log = nullptr);

}  // namespace sharc
