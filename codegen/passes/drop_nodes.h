// Helpers of the passes that replace nodes: they count uses in the old graph
// (count_uses, users_of), build the new graph in order, point the roots at it
// (remap_roots), mark what the rewrite made unused and drop it (drop_nodes:
// the graph without the nodes marked dead, renumbered: args, layout_of,
// outputs, updates, gradients). Throws internal_error naming `pass` when a
// live node, an output, an update or a gradient still reads a dropped node.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace sharc {

ir::Graph drop_nodes(const ir::Graph& g, const std::vector<bool>& dead, const std::string& pass);

// Per node: how many times it is read, by node operands, outputs and updates.
std::vector<int> count_uses(const ir::Graph& g);

// Per node: the nodes that read it as an operand, each once, in order.
std::vector<std::vector<int>> users_of(const ir::Graph& g);

// After a pass rebuilt g.nodes from an old graph's (remap: old id -> new id),
// points the outputs, updates and gradients (still old ids) at the new nodes.
void remap_roots(ir::Graph& g, const std::vector<int>& remap);

}  // namespace sharc
