// The host side of a generated CUDA program (BACKEND cuda): its collectives
// on device buffers, and its parameter API's transfers.
//
// Collectives: the calls a CPU program makes on its rt::Communicator and through
// runtime/tensor_collectives.h, with the device first. Where the device's
// memory is host memory (DeviceContext::host_memory, gpu::SimGpuWorld) they
// are those calls on the buffers as they are, so the bytes sent are the CPU
// program's. Elsewhere each stages through host memory: the device's inputs
// are downloaded, the collective runs on host copies, the results are
// uploaded. That is correct on any world whose communicator moves host
// memory, and slow. A world whose communicator takes device buffers
// (DeviceContext::device_comm: gpu::NcclWorld) gets them as they are, and
// interleaved blocks are packed on the device. The bytes each device sends
// are the same every way: the staging is local. Host code only: compiled once, called from both compilations of a
// program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <string_view>

#include "runtime/communicator.h"
#include "runtime/gpu/device_ops.h"
#include "runtime/init.h"

namespace sharc::gpu {

template <class T>
void all_reduce(const DeviceContext& d, rt::Communicator& comm, T* data, size_t count, const rt::Group& group,
                rt::ReduceOp op);
// One collective over several buffers (an all-reduce bucket).
template <class T>
void all_reduce(const DeviceContext& d, rt::Communicator& comm, const std::vector<rt::Segment<T>>& segments,
                const rt::Group& group, rt::ReduceOp op);
template <class T>
void all_gather_dim(const DeviceContext& d, rt::Communicator& comm, const rt::Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int dim, T* out);
template <class T>
void reduce_scatter_dim(const DeviceContext& d, rt::Communicator& comm, const rt::Group& group, const T* in,
                        const std::vector<int64_t>& full_shape, int dim, T* out, rt::ReduceOp op);
template <class T>
void all_to_all_dim(const DeviceContext& d, rt::Communicator& comm, const rt::Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int split_dim, int concat_dim, T* out);
template <class T>
void ppermute(const DeviceContext& d, rt::Communicator& comm, const T* in, T* out, size_t count,
              const rt::Group& group, const rt::Permutation& perm);
template <class T>
void send(const DeviceContext& d, rt::Communicator& comm, const T* in, size_t count, int dst, uint64_t tag);
template <class T>
void recv(const DeviceContext& d, rt::Communicator& comm, T* out, size_t count, int src, uint64_t tag);

// A ring step's transfer in flight (ppermute_start .. ppermute_wait): the
// communicator's pending receive, and where staged, the host copies and the
// device buffer the arriving block goes to.
struct PendingTransfer {
  rt::PendingRecv recv;
  std::shared_ptr<std::vector<std::byte>> staged_in, staged_out;
  void* device_out = nullptr;
  size_t bytes = 0;
};
template <class T>
PendingTransfer ppermute_start(const DeviceContext& d, rt::Communicator& comm, const T* in, T* out, size_t count,
                               const rt::Group& group, const rt::Permutation& perm);
void ppermute_wait(const DeviceContext& d, rt::Communicator& comm, PendingTransfer& pending);

// The parameter API (Program::init, set_parameter, get_parameter) writes and
// reads whole shards from the host: rt::init_block into the device's shard,
// through a host copy where the host cannot write device memory.
void init_block(const DeviceContext& d, const rt::InitSpec& spec, uint64_t seed, const int64_t* global_shape,
                const int64_t* offset, const int64_t* local_shape, int rank, float* device, size_t count);
// Program::parameter_shard hands out a pointer into the device's memory for
// the host to read or write (checkpoints do): std::invalid_argument naming
// the program and the device where the host cannot.
void require_host_memory(const DeviceContext& d, std::string_view program, std::string_view call);

}  // namespace sharc::gpu
