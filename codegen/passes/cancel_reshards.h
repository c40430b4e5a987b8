// Pass: cancel_reshards.
//
// Requires: a partitioned graph (partition_per_device has run).
// Ensures: no local_slice takes back exactly the block an all_gather just
//   assembled (same dimension, same axes); such a pair is replaced by the
//   all_gather's operand, and an all_gather left without users is removed
//   (as is any other node no output or parameter update depends on;
//   parameters and inputs stay). Values, outputs, updates and every other
//   node are unchanged (node ids in updates and layout_of are renumbered).
//
// The pair appears when one op wants a value replicated on an axis (e.g. a
// with_sharding_constraint) and its user wants it split on that axis again.
//
//   before: %5 = all_gather(%4) dim=1 axes={"model"} : f32[4,1024] [{"data"}, {}]
//           %6 = local_slice(%5) dim=1 axes={"model"} : f32[4,256] [{"data"}, {"model"}]
//           %7 = dot(%6, %1) ...
//   after:  %5 = dot(%4, %1) ...
#pragma once

#include "ir/ir.h"

namespace sharc {

ir::Graph cancel_reshards(const ir::Graph& g);

}  // namespace sharc
