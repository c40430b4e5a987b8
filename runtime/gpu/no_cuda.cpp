// cuda_kernels() in a build without CUDA (SHARC_ENABLE_CUDA=OFF or no nvcc).
#include "runtime/gpu/kernel_set.h"

namespace sharc::gpu {

KernelSet* cuda_kernels(std::string* why_not) {
  if (why_not)
    *why_not = "sharc was built without CUDA (SHARC_ENABLE_CUDA=OFF, or no nvcc at configure time)";
  return nullptr;
}

}  // namespace sharc::gpu
