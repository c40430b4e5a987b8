// Pass: partition_per_device.
//
// Requires: propagate_shardings has run (every node and output has a sharding).
// Ensures: a partitioned graph (g.partitioned) of the same program as run by
//   each device: shapes are local blocks, every node's `sharding` says which
//   block of the global value it holds (or that it is a partial sum), and
//   collectives / local slices are inserted wherever an operand's sharding
//   does not fit what its user computes locally. Outputs hold exactly their
//   requested sharding. No ShardingConstraint nodes remain. Mesh axes of
//   size 1 appear in no partitioned layout (they split nothing), so they
//   never cost a collective or a copy.
//
// Resharding from S to T (per dimension, axes major first): keep the common
// prefix; an axis that moves to another dimension is an all_to_all; axes
// beyond the prefix are all-gathered (minor first); axes T adds are taken by a
// local_slice (no communication). A dot whose contracting dimension is
// sharded over axis a on both operands computes partial sums over a, resolved
// by reduce_scatter onto a result dimension (the one T shards on a, else the
// largest divisible free dimension; an all_gather follows when T wants the
// result replicated on a: the two halves of a ring all-reduce, same bytes), or
// all_reduce when no dimension divides. A reduce over a dimension sharded on a
// likewise leaves partial sums (or maxes) over a, resolved the same way.
//
//   before: %4 = dot(%3, %1) contract=[1]x[0] : f32[8,1024] [{"data"}, {}]
//   after:  %6 = dot(%5, %1) contract=[1]x[0] : f32[4,1024] [{"data"}, {}] partial={"model"}
//           %7 = reduce_scatter(%6) sum dim=1 axes={"model"} : f32[4,256] [{"data"}, {"model"}]
#pragma once

#include "ir/ir.h"

namespace sharc {

ir::Graph partition_per_device(const ir::Graph& g);

// Block index of `rank` along dimension d of sharding s (0 when unsharded):
// the mixed-radix number of the rank's coordinates on the dimension's axes.
int64_t block_index(const ir::Sharding& s, size_t d, const Mesh& mesh, int rank);

}  // namespace sharc
