// GPU worlds: rt::World whose devices are GPUs, each with its kernels and
// its device memory (gpu::KernelSet), as the generated CUDA programs will
// run on them (issue 35). The World side is unchanged: a device's rank,
// communicator, memory account and timeline, run() over the local devices.
//
//  - SimGpuWorld: N devices on the block simulator. Device memory is host
//    memory and every device is a device of a ThreadWorld, so collectives
//    run on device buffers directly through the ThreadWorld's ring
//    communicators: the bytes each device sends equal a ThreadWorld's
//    running the same collectives, and so the cost report's.
//  - CudaWorld: N virtual devices on one GPU. Each is a ThreadWorld
//    device (its own host thread and communicator) with a KernelSet of its
//    own and device memory from cudaMalloc; the host cannot touch that
//    memory, so programs move blocks through their transfers and run
//    collectives on host copies (device_collectives.h). Each device has
//    its KernelSet's two streams; the host copies run on the legacy default
//    stream, so they wait for everything before them.
//  - NcclWorld (nccl_world.h): a GPU per rank, collectives through NCCL.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/gpu/device_ops.h"
#include "runtime/gpu/kernel_set.h"
#include "runtime/tensor_collectives.h"
#include "runtime/thread_world.h"
#include "runtime/world.h"

namespace sharc::gpu {

class GpuWorld : public rt::World {
 public:
  // Local device `rank`'s kernels and memory; throws std::out_of_range for a
  // rank this process does not drive.
  virtual KernelSet& kernels(int rank) = 0;
  // Whether device pointers are host pointers (the simulator): a program
  // may then hand device buffers to comm(rank) as they are.
  virtual bool device_memory_is_host() const = 0;
  // Bytes of local device `rank`'s memory free for a program's buffers.
  virtual size_t free_memory(int rank) = 0;
  // Non-null where comm(rank) takes device buffers as they are (NcclWorld):
  // how the dimension-aware collectives pack blocks on the device.
  virtual rt::BlockMover* device_communicator(int) { return nullptr; }
  // Non-null where comm(rank) enqueues on a device stream (NcclWorld).
  virtual StreamedCommunicator* streamed_communicator(int) { return nullptr; }
};

class SimGpuWorld final : public GpuWorld {
 public:
  // Throws std::invalid_argument as ThreadWorld does.
  explicit SimGpuWorld(rt::MeshShape mesh);

  const rt::MeshShape& mesh() const override { return threads_.mesh(); }
  int process() const override { return 0; }
  int processes() const override { return 1; }
  std::vector<int> local_ranks() const override { return threads_.local_ranks(); }
  bool is_local(int rank) const override { return threads_.is_local(rank); }
  rt::Communicator& comm(int rank) override { return threads_.comm(rank); }
  rt::DeviceMemory& memory(int rank) override { return threads_.memory(rank); }
  rt::Timeline& timeline(int rank) override { return threads_.timeline(rank); }
  void run(const std::function<void(int rank)>& fn) override { threads_.run(fn); }
  std::vector<std::string> all_gather_host(const std::string& mine) override {
    return threads_.all_gather_host(mine);
  }
  rt::CommStats local_stats() const override { return threads_.local_stats(); }

  KernelSet& kernels(int rank) override;
  bool device_memory_is_host() const override { return host_memory_; }
  // The capacity set below less what the device's DeviceMemory holds.
  size_t free_memory(int rank) override;

  // Each device's memory, as a GPU's would be limited (default: unlimited),
  // for tests of what a program does when it does not fit.
  void set_memory_capacity(size_t bytes) { capacity_ = bytes; }
  // With false, the world says its device memory is not the host's, as a
  // GPU's is not: programs then move every block between host and device
  // through their KernelSet's transfers, and run collectives on host copies
  // (device_collectives.h), which tests check on the simulator. The memory
  // stays host memory.
  void set_device_memory_is_host(bool host) { host_memory_ = host; }

  // With true, each device gets simulated kernels of its own whose two
  // streams run their work late (make_deferred_simulated_kernels): a
  // program that leaves out a wait between its streams then computes
  // something else, which its tests see. ignore_waits: the streams ignore
  // every wait, to show that they would. Before a Program is made.
  void set_deferred_streams(bool deferred, bool ignore_waits = false);

  // The devices' threads (set_device_threads, set_clock, set_recv_timeout, ...).
  // On the device clock (rt::ClockMode::kDevice) each device's stamps are
  // the host's clock when the statement is given: the simulator runs a
  // launch when it is given, so that is when its work starts.
  rt::ThreadWorld& threads() { return threads_; }

 private:
  rt::ThreadWorld threads_;
  std::vector<std::unique_ptr<rt::StampSource>> stamps_;  // per device, the host clock
  size_t capacity_ = SIZE_MAX;
  bool host_memory_ = true;
  std::vector<std::unique_ptr<KernelSet>> deferred_;
};

class CudaWorld final : public GpuWorld {
 public:
  // The mesh's devices as virtual devices on CUDA device `gpu`. Throws
  // std::runtime_error saying why where there is no such device (or sharc
  // was built without CUDA), and std::invalid_argument as ThreadWorld does.
  explicit CudaWorld(rt::MeshShape mesh, int gpu = 0);
  ~CudaWorld() override;

  const rt::MeshShape& mesh() const override { return threads_.mesh(); }
  int process() const override { return 0; }
  int processes() const override { return 1; }
  std::vector<int> local_ranks() const override { return threads_.local_ranks(); }
  bool is_local(int rank) const override { return threads_.is_local(rank); }
  rt::Communicator& comm(int rank) override { return threads_.comm(rank); }
  rt::DeviceMemory& memory(int rank) override { return threads_.memory(rank); }
  rt::Timeline& timeline(int rank) override { return threads_.timeline(rank); }
  // fn on every device's thread, each with the GPU made current.
  void run(const std::function<void(int rank)>& fn) override;
  std::vector<std::string> all_gather_host(const std::string& mine) override {
    return threads_.all_gather_host(mine);
  }
  rt::CommStats local_stats() const override { return threads_.local_stats(); }

  KernelSet& kernels(int rank) override;
  bool device_memory_is_host() const override { return false; }
  // The GPU's free memory, shared by the virtual devices: an equal share each.
  size_t free_memory(int rank) override;

  // The devices' threads. On the device clock (threads().set_clock(
  // rt::ClockMode::kDevice)) each statement is timed on the GPU, by CUDA
  // events on the device's current stream (KernelSet::stamps).
  rt::ThreadWorld& threads() { return threads_; }

 private:
  int gpu_;
  std::vector<std::unique_ptr<rt::MemorySource>> sources_;  // before threads_: they outlive its memory
  rt::ThreadWorld threads_;
  std::vector<std::unique_ptr<KernelSet>> kernels_;
};

// Local device `rank` of `world` as a BACKEND cuda program's step uses it
// (device_ops.h): the world's kernels for the device, on its stream, and
// whether the host may touch its memory. Throws std::invalid_argument
// naming `program` when `world` is not a GpuWorld, or when its devices are
// not what this build of the program runs on: the simulator for the host
// compiler's build (`simulator_build`: generated code passes
// gpu::kSimulatorBuild, which its compiler decides), GPUs for nvcc's.
DeviceContext device_context(rt::World& world, int rank, std::string_view program, bool simulator_build);

// Refuses, before anything is allocated, a program that needs more of
// device `rank`'s memory than is free: std::runtime_error naming the
// program, the device, the bytes needed and the bytes free.
void require_memory(rt::World& world, int rank, std::string_view program, size_t bytes);

}  // namespace sharc::gpu
