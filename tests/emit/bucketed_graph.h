// A per-device program built by hand whose all-reduces are marked as buckets
// (dim2 = bucket id, adjacent in the node list), as bucket_all_reduces leaves
// them, for emit_bucketed_all_reduce_test and its build-time emitter
// (bucketed_emit_main.cpp). It is not a lowered model: the nodes are the
// smallest set that puts every bucket boundary rule next to each other.
#pragma once

#include "ir/ir.h"

namespace sharc::test {

// Mesh data=4,model=2. Inputs "x" f32[8,8] split over data on dim 0 and "y"
// f32[8,8] split over model on dim 1; their partial column/row sums and maxes
// are all-reduced by nine adjacent all_reduce nodes:
//   %9, %10   sum over data, bucket 0          -> ONE collective (16 floats)
//   %11       sum over data, bucket 3          -> own (another bucket id)
//   %12       max over data, bucket 3          -> own (another reduce kind)
//   %13, %14  sum over model, bucket 1         -> ONE collective
//   %15       sum over data, no bucket (-1)    -> own
//   %16, %17  sum over data, bucket 5, but %17 reads %16 -> two collectives
// Every value has 8 floats, so each group's ring chunks are equal and bytes
// per device are the same bucketed or not. With `bucketed` false every dim2
// is -1 (the same program, one collective per all_reduce).
ir::Graph bucketed_all_reduce_graph(bool bucketed);

// Node ids of the all_reduce nodes above, in order.
inline constexpr int kFirstAllReduce = 9, kEndAllReduce = 18;

}  // namespace sharc::test
