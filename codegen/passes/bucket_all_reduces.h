// Pass: bucket_all_reduces.
//
// Requires: a partitioned graph.
// Ensures: all_reduce nodes of the backward pass (Node::backward) over the
//   same axes and reduce kind are grouped into buckets of at most
//   `bucket_bytes` (local bytes, counted per device; a larger single value
//   gets a bucket of its own). The members of a bucket are adjacent in the node
//   list, in their original order, and carry the bucket's id in `dim2`
//   (other all_reduce nodes keep dim2 = -1). Executors run each bucket as ONE
//   collective over the concatenated values (execute.cpp, emit_cpu.cpp), so
//   data-parallel gradients cost a few large all-reduces instead of one per
//   tensor. Bytes sent are unchanged; values are the same sums, though on
//   groups of more than two devices packing changes which ring chunk an
//   element travels in, and so the order of its additions (last-bit
//   differences; all executors bucket identically, so they agree exactly).
//
// A member is moved down to its bucket's last member; a bucket is closed early
// whenever moving would put a value after one of its users.
//
//   before: %20 = all_reduce(%19) sum axes={"data"} : f32[64,10] backward
//           %21 = mul(%18, %18) ...
//           %22 = all_reduce(%21) sum axes={"data"} : f32[10] backward
//   after:  %20 = mul(%18, %18) ...
//           %21 = all_reduce(%19) sum axes={"data"} : f32[64,10] backward   (dim2 = bucket 0)
//           %22 = all_reduce(%20) sum axes={"data"} : f32[10] backward      (dim2 = bucket 0)
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace sharc {

// PyTorch DDP's default bucket size.
inline constexpr size_t kDefaultBucketBytes = 25u << 20;

ir::Graph bucket_all_reduces(const ir::Graph& g, size_t bucket_bytes = kDefaultBucketBytes);

}  // namespace sharc
