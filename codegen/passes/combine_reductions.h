// Pass: combine_reductions.
//
// Requires: a partitioned graph.
// Ensures: (sum-collectives are linear, so)
//   - no add reads two sum-collectives (all_reduce, or reduce_scatter on the
//     same dimension) over the same axes whose only user it is: such an
//     add(C(a), C(b)) becomes C(add(a, b)), applied repeatedly along chains;
//   - in a chain of adds (each read only by the next) that mixes local values
//     and such collectives, the collectives are carried to the chain's end and
//     merged there: add(add(p, C(a)), y) becomes add(add(p, y), C(a)), so a
//     chain ends add(local sum, one collective per kind). The global norm of
//     gradient clipping, whose per-parameter squares are partial wherever the
//     gradient is sharded, costs one scalar all-reduce instead of one per
//     sharded parameter;
//   - all_reduce over B of all_reduce over A (the inner read by nothing
//     else), which partitioning makes of a value partial over two axes,
//     becomes one all_reduce over A and B in mesh order.
//   Values are the same sums (up to the order of float additions);
//   collectives and bytes only decrease.
//
// This is what makes gradient accumulation cheap: each micro-batch's weight
// gradient is a partial sum resolved by an all-reduce (DP) or reduce-scatter
// (FSDP); summing k of them becomes one collective over the local sum.
//
//   before: %10 = all_reduce(%9) sum axes={"data"} : f32[64,64] backward
//           %20 = all_reduce(%19) sum axes={"data"} : f32[64,64] backward
//           %21 = add(%10, %20) : f32[64,64]
//   after:  %20 = add(%9, %19) : f32[64,64] partial={"data"}
//           %21 = all_reduce(%20) sum axes={"data"} : f32[64,64] backward
#pragma once

#include "ir/ir.h"

namespace sharc {

ir::Graph combine_reductions(const ir::Graph& g);

}  // namespace sharc
