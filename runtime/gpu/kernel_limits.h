// What sharc's GPU kernels (kernel_set.h) are built for, as constants the
// generator can read without linking them: kernel selection
// (codegen/kernel_select.h) picks a kernel only where it fits.
#pragma once

#include <cstddef>

namespace sharc::gpu {

// The layer norm's backward sums its parameter gradients over slices of
// this many rows, then the slices' partials in order
// (layernorm_backward_scratch: two floats per column per slice). 256 rows:
// GPT-2 at batch 32 (32768 rows) makes 128 slices, enough blocks to fill an
// H100 while the second pass stays short (at 64 rows its 512 slices, summed
// one column per thread, took 0.6 ms of the layer norm's 0.7).
constexpr int kLayerNormSliceRows = 256;
constexpr size_t layernorm_backward_scratch_floats(int rows, int cols) {
  return static_cast<size_t>((rows + kLayerNormSliceRows - 1) / kLayerNormSliceRows) * 2 *
         static_cast<size_t>(cols);
}

// The head sizes the attention kernels are instantiated for (bf16 runs on
// the tensor cores from 16 up; 8, the sample GPT's, on the scalar kernels).
constexpr int kAttentionHeadDims[] = {8, 16, 32, 64};

constexpr bool attention_head_dim_supported(int head_dim) {
  for (int d : kAttentionHeadDims)
    if (d == head_dim) return true;
  return false;
}

}  // namespace sharc::gpu
