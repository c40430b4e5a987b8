// Pass: ring_collective_matmul.
//
// Requires: a partitioned graph (after combine_reductions, so the
//   reduce_scatters it sees are final).
// Ensures: every dot whose collective is selected (below) is a RingDot
//   instead (see RingAttrs in ir.h for its schedule):
//   - gather: dot(all_gather(x, dim, {a}), w), the all_gather over ONE axis
//     of size >= 2, on a batch or free dimension of x, with the dot as its
//     only user (not an output, update or gradient) -> ring_dot(x, w)
//     gather=lhs dim; likewise for the rhs. When both operands qualify, the
//     one that moves more bytes travels (lhs on a tie); the other's
//     all_gather stays.
//   - scatter: reduce_scatter(dot(l, r), dim, {a}) sum, over ONE axis of size
//     >= 2, `dim` a free dimension of the dot's result, the reduce_scatter
//     the dot's only user -> ring_dot(l, r) scatter dim. A dot whose operand
//     was already taken for a gather ring keeps its reduce_scatter.
//   A collective is selected by the dot's own mark (with_collective_matmul:
//   always / never) if it has one, else by `options.mode`: kAlways, kNever,
//   or kAuto: when it moves more than `options.threshold_bytes` per device
//   ((n-1) blocks). The ring is bidirectional when `options.direction` asks
//   for it and the block splits in halves, else unidirectional. Values are
//   those of the synchronous form (gather: each result block is the same dot;
//   scatter: the same sums, in the ring reduce_scatter's order when
//   unidirectional), and every device sends exactly the bytes the replaced
//   collective sent, as ppermutes. Checked at the end: no selected collective
//   is left next to a Dot.
//
//   before: %2 = input() "x" : f32[8,64] [{"model"}, {}]
//           %3 = all_gather(%2) dim=0 axes={"model"} : f32[32,64] [{}, {}]
//           %4 = dot(%3, %0) contract=[1]x[0] : f32[32,128] [{}, {"model"}]
//           %5 = dot(%4, %1) contract=[1]x[0] : f32[32,64] [{}, {}] partial={"model"}
//           %6 = reduce_scatter(%5) sum dim=0 axes={"model"} : f32[8,64] [{"model"}, {}]
//   after:  %2 = input() "x" : f32[8,64] [{"model"}, {}]
//           %3 = ring_dot(%2, %0) contract=[1]x[0] gather=lhs dim=0 axes={"model"}
//                  bidirectional : f32[32,128] [{}, {"model"}]
//           %4 = ring_dot(%3, %1) contract=[1]x[0] scatter dim=0 axes={"model"}
//                  bidirectional : f32[8,64] [{"model"}, {}]
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace sharc {

// Below this many bytes sent per device, a collective is not worth a ring:
// each of its n-1 steps pays a ppermute's latency and a smaller GEMM.
inline constexpr size_t kDefaultRingThresholdBytes = 1u << 20;

struct RingOptions {
  CollectiveMatmul mode = CollectiveMatmul::kAuto;
  RingDirection direction = RingDirection::kBidirectional;
  size_t threshold_bytes = kDefaultRingThresholdBytes;
};

ir::Graph ring_collective_matmul(const ir::Graph& g, const RingOptions& options = {});

}  // namespace sharc
