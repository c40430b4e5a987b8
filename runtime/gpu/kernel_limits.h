// What sharc's GPU kernels (kernel_set.h) are built for, as constants the
// generator can read without linking them: kernel selection
// (codegen/kernel_select.h) picks a kernel only where it fits.
#pragma once

namespace sharc::gpu {

// The head sizes the attention kernels are instantiated for.
constexpr int kAttentionHeadDims[] = {16, 32, 64};

constexpr bool attention_head_dim_supported(int head_dim) {
  for (int d : kAttentionHeadDims)
    if (d == head_dim) return true;
  return false;
}

}  // namespace sharc::gpu
