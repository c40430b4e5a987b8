// GPU worlds; see gpu_world.h.
#include "runtime/gpu/gpu_world.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace sharc::gpu {

SimGpuWorld::SimGpuWorld(rt::MeshShape mesh) : threads_(std::move(mesh)) {}

KernelSet& SimGpuWorld::kernels(int rank) {
  if (!is_local(rank))
    throw std::out_of_range("SimGpuWorld: device " + std::to_string(rank) + " is not one of its " +
                            std::to_string(size()) + " devices");
  // The simulator keeps no per-device state: its memory is the host's and
  // its launches run on the calling device's thread.
  return simulated_kernels();
}

size_t SimGpuWorld::free_memory(int rank) {
  const size_t used = memory(rank).current();
  return capacity_ > used ? capacity_ - used : 0;
}

void require_memory(rt::World& world, int rank, std::string_view program, size_t bytes) {
  auto& gpu = dynamic_cast<GpuWorld&>(world);
  const size_t free = gpu.free_memory(rank);
  if (bytes <= free) return;
  throw std::runtime_error("program \"" + std::string(program) + "\" needs " + std::to_string(bytes) +
                           " bytes on device " + std::to_string(rank) + " (" + gpu.kernels(rank).name() +
                           ") for its parameters and step buffers, but " + std::to_string(free) +
                           " bytes are free there");
}

DeviceContext device_context(rt::World& world, int rank, std::string_view program) {
  auto* gpu = dynamic_cast<GpuWorld*>(&world);
  if (!gpu)
    throw std::invalid_argument("program \"" + std::string(program) +
                                "\" was generated with BACKEND cuda: it runs on a gpu::GpuWorld "
                                "(gpu::SimGpuWorld), not on this world; generate it with BACKEND "
                                "cpu to run it on rt::ThreadWorld or rt::MpiWorld");
  return DeviceContext{&gpu->kernels(rank), nullptr, gpu->device_memory_is_host()};
}

}  // namespace sharc::gpu
