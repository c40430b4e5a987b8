// drop_nodes and remap_roots: the graph without the nodes marked dead, renumbered (args,
// layout_of, outputs, updates, gradients). A shared tail of the passes that
// replace nodes: they build the new graph in order, mark what the rewrite
// made unused, and drop it here. Throws internal_error naming `pass` when a
// live node, an output, an update or a gradient still reads a dropped node.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace sharc {

ir::Graph drop_nodes(const ir::Graph& g, const std::vector<bool>& dead, const std::string& pass);

// After a pass rebuilt g.nodes from an old graph's (remap: old id -> new id),
// points the outputs, updates and gradients (still old ids) at the new nodes.
void remap_roots(ir::Graph& g, const std::vector<int>& remap);

}  // namespace sharc
