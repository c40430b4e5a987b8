// Pass: widen_reductions.
//
// Requires: a partitioned graph.
// Ensures: no gradient (backward) sum runs in bf16 when its result is only
//   widened to f32 afterwards: convert_f32(C(x)), C a bf16 all_reduce or
//   reduce_scatter whose one user is the convert, becomes C(convert_f32(x)),
//   the collective now in f32. Values are those of summing the bf16 partials
//   exactly (widening is exact), where the old form rounded every hop of the
//   ring to bf16. Everything else is unchanged (nodes renumbered).
//
// This is the mixed-precision policy's "gradients are reduced in f32": an
// f32 master weight used in bf16 (astype) gets its gradient through the
// convert's adjoint, convert_f32(dot_bf16(...)), and the data-parallel
// all-reduce partition_per_device puts between them moves here. It costs
// twice the bytes of a bf16 reduction; PipelineOptions::gradient_reduce_bf16
// keeps the bf16 one.
//
//   before: %27 = dot(%7, %25) : bf16[16,4] partial={"data"} backward
//           %28 = all_reduce(%27) sum axes={"data"} : bf16[16,4] backward
//           %29 = convert(%28) : f32[16,4] backward
//   after:  %27 = dot(%7, %25) : bf16[16,4] partial={"data"} backward
//           %28 = convert(%27) : f32[16,4] partial={"data"} backward
//           %29 = all_reduce(%28) sum axes={"data"} : f32[16,4] backward
#pragma once

#include "ir/ir.h"

namespace sharc {

ir::Graph widen_reductions(const ir::Graph& g);

}  // namespace sharc
