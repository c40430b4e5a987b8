// Pass: apply_sharding_rules.
//
// Requires: resolve_logical_axes has run (annotated parameters are fixed with
//   their resolved in-model layout); g.mesh set.
// Ensures: with a non-empty rule list, every parameter without layout_of is
//   fixed, its layout being its in-model one (replicated when unannotated)
//   transformed by the active rules in order (dsl/sharding_rules.h); every
//   sharding names only mesh axes, each at most once, and divides its
//   dimension. Whatever the rules, a parameter with layout_of (optimizer
//   state) carries exactly its parameter's sharding and is fixed when that
//   parameter is fixed, and is left unfixed (for propagate_shardings to copy
//   the parameter's propagated layout) otherwise. With no rules nothing else
//   changes. Non-parameter nodes are unchanged.
//
// A rule naming a mesh axis the mesh lacks is inactive (skipped). Rule
// mistakes (a strict PathRule that matches nothing, a spec that does not
// divide) are user errors at the rule's line that name the parameter and its
// own line. Every decision is appended to `log` when given, one line each:
//   fsdp: 'mlp/dense1/kernel' f32[1024,1024]: dimension 0 (size 1024, largest divisible by fsdp=4)
//
//   rules:  FSDPRule('fsdp', min_fsdp_size=1024) on <["fsdp"=4, "model"=2]>
//   before: %1 = parameter() "w" ... : f32[1024,1024] [{}, {"model"}] fixed
//   after:  %1 = parameter() "w" ... : f32[1024,1024] [{"fsdp"}, {"model"}] fixed
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"
#include "dsl/sharding_rules.h"

namespace sharc {

ir::Graph apply_sharding_rules(ir::Graph g, const ShardingRules& rules,
                               std::vector<std::string>* log = nullptr);

}  // namespace sharc
