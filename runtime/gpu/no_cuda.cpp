// cuda_kernels() and the CudaWorld factories in a build without CUDA
// (SHARC_ENABLE_CUDA=OFF or no nvcc).
#include <stdexcept>
#include <string>

#include "runtime/gpu/gpu_world.h"
#include "runtime/gpu/nccl_world.h"

namespace sharc::gpu {

KernelSet* cuda_kernels(std::string* why_not) {
  if (why_not)
    *why_not = "sharc was built without CUDA (SHARC_ENABLE_CUDA=OFF, or no nvcc at configure time)";
  return nullptr;
}

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) +
                           ": sharc was built without CUDA (SHARC_ENABLE_CUDA=OFF, or no nvcc at configure time)");
}
}  // namespace

std::unique_ptr<KernelSet> make_cuda_kernels(int) { no_cuda("make_cuda_kernels"); }
std::unique_ptr<rt::MemorySource> make_cuda_memory(int) { no_cuda("make_cuda_memory"); }
size_t cuda_free_memory(int) { no_cuda("cuda_free_memory"); }
void cuda_set_device(int) { no_cuda("cuda_set_device"); }
int cuda_device_count() { no_cuda("cuda_device_count"); }

std::unique_ptr<NcclApi> nccl_library(int, std::string* why_not) {
  if (why_not) *why_not = "sharc was built without CUDA (SHARC_ENABLE_CUDA=OFF, or no nvcc at configure time)";
  return nullptr;
}

}  // namespace sharc::gpu
