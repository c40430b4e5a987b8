// Pass: propagate_shardings (GSPMD-style).
//
// Requires: resolve_logical_axes has run (fixed nodes carry valid shardings).
// Ensures: every node has a sharding (replicated where nothing reached it),
//   no partial axes, fixed nodes unchanged; every output has a sharding (its
//   pinned one, else its value's).
//
// Shardings flow forward (operands -> result) and backward (result ->
// operands, and sideways between a dot's contracting dimensions) until
// nothing changes. A dimension only ever goes from unsharded to sharded, and
// a mesh axis is never used twice in one tensor, so the iteration terminates.
// Rules per op: elementwise ops unify dimension by dimension; dot maps batch
// and free dimensions to the result and contracting dimensions to each other;
// reduce drops reduced dimensions; transpose permutes; broadcast maps kept
// dimensions; reshape maps dimensions of equal-size groups (and a split/merged
// dimension's axes to its major part when divisible).
//
//   before: %3 = relu(%2) : f32[8,1024]
//   after:  %3 = relu(%2) : f32[8,1024] [{"data"}, {"model"}]
#pragma once

#include "ir/ir.h"

namespace sharc {

ir::Graph propagate_shardings(ir::Graph g);

}  // namespace sharc
