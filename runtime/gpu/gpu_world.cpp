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

}  // namespace sharc::gpu
