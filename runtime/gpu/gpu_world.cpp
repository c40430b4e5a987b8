// GPU worlds; see gpu_world.h.
#include "runtime/gpu/gpu_world.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sharc::gpu {
namespace {

// The simulator's device clock: the host's, when each stamp is given.
class HostStamps final : public rt::StampSource {
 public:
  void stamp() override { at_.push_back(std::chrono::steady_clock::now()); }
  std::vector<double> read_stamps() override {
    std::vector<double> seconds;
    for (const auto& t : at_) seconds.push_back(std::chrono::duration<double>(t - at_.front()).count());
    at_.clear();
    return seconds;
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> at_;
};

}  // namespace

SimGpuWorld::SimGpuWorld(rt::MeshShape mesh) : threads_(std::move(mesh)) {
  // A thread per device: the simulator runs a block's CUDA threads as fibers
  // on the launching thread, which it cannot when that is itself a fiber
  // (it then takes an OS thread per CUDA thread, and a warp shuffle costs a
  // futex round trip per lane: a layer norm kernel of a few hundred rows
  // takes seconds instead of milliseconds).
  threads_.set_device_threads(threads_.size());
  for (int rank : threads_.local_ranks()) {
    stamps_.push_back(std::make_unique<HostStamps>());
    threads_.timeline(rank).set_stamps(stamps_.back().get());
  }
}

KernelSet& SimGpuWorld::kernels(int rank) {
  if (!is_local(rank))
    throw std::out_of_range("SimGpuWorld: device " + std::to_string(rank) + " is not one of its " +
                            std::to_string(size()) + " devices");
  // The simulator keeps no per-device state: its memory is the host's and
  // its launches run on the calling device's thread. Deferred streams are
  // per device.
  if (!deferred_.empty()) return *deferred_[static_cast<size_t>(rank)];
  return simulated_kernels();
}

void SimGpuWorld::set_deferred_streams(bool deferred, bool ignore_waits) {
  deferred_.clear();
  if (!deferred) return;
  for (int r = 0; r < size(); ++r) deferred_.push_back(make_deferred_simulated_kernels(ignore_waits));
}

CudaWorld::CudaWorld(rt::MeshShape mesh, int gpu) : gpu_(gpu), threads_(std::move(mesh)) {
  cuda_set_device(gpu_);
  for (int rank : threads_.local_ranks()) {
    sources_.push_back(make_cuda_memory(gpu_));
    threads_.memory(rank).set_source(sources_.back().get());
    kernels_.push_back(make_cuda_kernels(gpu_));
    threads_.timeline(rank).set_stamps(kernels_.back()->stamps());
  }
}

CudaWorld::~CudaWorld() = default;

void CudaWorld::run(const std::function<void(int rank)>& fn) {
  threads_.run([&](int rank) {
    cuda_set_device(gpu_);
    fn(rank);
  });
}

KernelSet& CudaWorld::kernels(int rank) {
  if (!is_local(rank))
    throw std::out_of_range("CudaWorld: device " + std::to_string(rank) + " is not one of its " +
                            std::to_string(size()) + " devices");
  return *kernels_[static_cast<size_t>(rank)];
}

size_t CudaWorld::free_memory(int) {
  return cuda_free_memory(gpu_) / static_cast<size_t>(size());
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

DeviceContext device_context(rt::World& world, int rank, std::string_view program, bool simulator_build) {
  auto* gpu = dynamic_cast<GpuWorld*>(&world);
  if (!gpu)
    throw std::invalid_argument("program \"" + std::string(program) +
                                "\" was generated with BACKEND cuda: it runs on a gpu::GpuWorld "
                                "(gpu::SimGpuWorld), not on this world; generate it with BACKEND "
                                "cpu to run it on rt::ThreadWorld or rt::MpiWorld");
  KernelSet& kernels = gpu->kernels(rank);
  const bool simulated = kernels.name() == simulated_kernels().name();
  if (simulated != simulator_build)
    throw std::invalid_argument(
        "program \"" + std::string(program) + "\" (BACKEND cuda) was compiled " +
        (simulator_build ? "for the block simulator (the library NAME), but this world's devices are " +
                               kernels.name() + ": link its nvcc build, NAME_device"
                         : "by nvcc for a GPU (the library NAME_device), but this world's devices are the "
                           "simulator's: link its simulator build, NAME"));
  DeviceContext d;
  d.kernels = &kernels;
  d.stream = d.compute_stream = kernels.compute_stream();
  d.comm_stream = kernels.comm_stream();
  d.host_memory = gpu->device_memory_is_host();
  d.device_comm = gpu->device_communicator(rank);
  d.streamed_comm = gpu->streamed_communicator(rank);
  return d;
}

}  // namespace sharc::gpu
