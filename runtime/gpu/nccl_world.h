// NcclWorld: one GPU per rank (one process per GPU, launched by mpirun), its
// collectives NCCL's on device buffers.
//
// Each process builds one NcclWorld for its rank and runs a generated
// BACKEND cuda program on it as on any rt::World (its one local device):
//
//   sharc::gpu::MpiBootstrap boot;                         // nccl_mpi.h
//   sharc::gpu::NcclWorld world(Program::mesh_shape(), boot);
//   Program program(world);
//
// What it does:
//  - rank 0's ncclGetUniqueId reaches every rank through the bootstrap (MPI
//    in production), and ncclCommInitRank makes the world's communicator;
//  - ncclCommSplit makes one communicator per set of mesh axes (2^axes - 1
//    of them, every rank splitting alike at construction), so a collective
//    over a group of the mesh runs on its axes' communicator;
//  - collectives take device buffers as they are (DeviceContext::
//    device_comm): all-reduce, all-gather and reduce-scatter are NCCL's;
//    all-to-all, ppermute and pipeline sends are grouped ncclSend/ncclRecv;
//    interleaved blocks are packed on the device (rt::BlockMover);
//    bf16 goes as ncclBfloat16;
//  - every call waits for its completion with a deadline (Options::timeout);
//    a peer that never arrives, or NCCL's asynchronous error, aborts the
//    communicators (ncclCommAbort) and throws an error naming the rank.
//
// NCCL matches point-to-point messages by order, not by tag: a pipeline's
// receives between two ranks must come in the order of the sends, as the
// generated schedules issue them.
//
// The NCCL calls go through NcclApi: libnccl's (nccl_library(), built with
// SHARC_ENABLE_CUDA), or a stand-in. Tests run NcclWorld on the block
// simulator with one that moves host memory between threads and fails where
// they say (tests/gpu/nccl_world_test.cpp), so CI checks the world, its
// groups and its errors without a GPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/gpu/gpu_world.h"
#include "runtime/tensor_collectives.h"

namespace sharc::gpu {

// A failed NCCL call: its name and NCCL's message.
class NcclError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The NCCL calls NcclWorld makes, on one rank. Operations are enqueued on
// the rank's stream (the one its kernels run on) and complete later: done()
// says whether all of a communicator's have. Each throws NcclError.
class NcclApi {
 public:
  using Comm = void*;
  virtual ~NcclApi() = default;

  virtual std::string unique_id() = 0;  // ncclGetUniqueId's bytes
  virtual Comm init(int nranks, const std::string& id, int rank) = 0;
  // ncclCommSplit: every rank of `parent` calls it, in the same order.
  virtual Comm split(Comm parent, int color, int key) = 0;

  virtual void all_reduce(const void* in, void* out, size_t count, rt::DType dtype, rt::ReduceOp op, Comm comm) = 0;
  virtual void all_gather(const void* in, void* out, size_t count_per_rank, rt::DType dtype, Comm comm) = 0;
  virtual void reduce_scatter(const void* in, void* out, size_t count_per_rank, rt::DType dtype, rt::ReduceOp op,
                              Comm comm) = 0;
  // Point to point between ranks of `comm`, grouped by group_start/end.
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void send(const void* in, size_t count, rt::DType dtype, int peer, Comm comm) = 0;
  virtual void recv(void* out, size_t count, rt::DType dtype, int peer, Comm comm) = 0;

  // Whether everything enqueued on `comm` has completed; throws NcclError
  // for an asynchronous error (ncclCommGetAsyncError).
  virtual bool done(Comm comm) = 0;
  // The device stream the operations from now on are enqueued on, and
  // that done() asks about (NcclWorld: the program's compute stream, or its
  // comm stream for a ring's transfers).
  virtual void use_stream(void* stream) {}
  virtual void abort(Comm comm) = 0;    // ncclCommAbort
  virtual void destroy(Comm comm) = 0;  // ncclCommDestroy
};

// libnccl on CUDA device `device`, its operations on the stream use_stream
// names; null with *why_not saying why where sharc was built without CUDA.
std::unique_ptr<NcclApi> nccl_library(int device, std::string* why_not);

// How the processes find each other before NCCL can: rank `rank()` of
// `size()` exchanges host bytes with all the others (MPI_Allgather in
// production: nccl_mpi.h).
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank passes its bytes and gets every rank's, in rank order.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
};

class NcclCommunicator;

class NcclWorld final : public GpuWorld {
 public:
  struct Options {
    int gpu = -1;  // the CUDA device: -1, the rank modulo the node's devices
    // How long a collective may take before the world gives up on a peer.
    std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  };

  // The mesh's devices, one per rank of `boot` (boot.size() must be the
  // mesh's device count). With libnccl on CUDA device options.gpu; throws
  // std::runtime_error saying why where there is no GPU.
  NcclWorld(rt::MeshShape mesh, Bootstrap& boot, Options options);
  NcclWorld(rt::MeshShape mesh, Bootstrap& boot) : NcclWorld(std::move(mesh), boot, Options{}) {}
  // With the given NCCL and kernels (tests: a stand-in and the simulator,
  // whose device memory is host memory).
  NcclWorld(rt::MeshShape mesh, Bootstrap& boot, std::unique_ptr<NcclApi> nccl, KernelSet& kernels,
            std::unique_ptr<rt::MemorySource> memory, size_t memory_capacity, Options options);
  ~NcclWorld() override;

  const rt::MeshShape& mesh() const override { return mesh_; }
  int process() const override { return rank_; }
  int processes() const override { return mesh_.num_devices(); }
  std::vector<int> local_ranks() const override { return {rank_}; }
  bool is_local(int rank) const override { return rank == rank_; }
  rt::Communicator& comm(int rank) override;
  rt::DeviceMemory& memory(int rank) override;
  rt::Timeline& timeline(int rank) override;
  void run(const std::function<void(int rank)>& fn) override;
  std::vector<std::string> all_gather_host(const std::string& mine) override { return boot_.all_gather(mine); }
  rt::CommStats local_stats() const override;

  KernelSet& kernels(int rank) override;
  bool device_memory_is_host() const override { return false; }
  rt::BlockMover* device_communicator(int rank) override;
  StreamedCommunicator* streamed_communicator(int rank) override;
  // The GPU's free memory (a stand-in's: the capacity given less what the
  // device holds).
  size_t free_memory(int rank) override;

 private:
  struct Parts {
    std::unique_ptr<NcclApi> nccl;
    std::unique_ptr<KernelSet> own_kernels;
    KernelSet* kernels = nullptr;
    std::unique_ptr<rt::MemorySource> memory;
    size_t capacity = 0;
    int gpu = -1;  // -1: no CUDA device (a stand-in)
  };
  static Parts libnccl_parts(const Bootstrap& boot, const Options& options);
  NcclWorld(rt::MeshShape mesh, Bootstrap& boot, Parts parts, Options options);
  void check_rank(int rank, const char* what) const;

  rt::MeshShape mesh_;
  Bootstrap& boot_;
  int rank_;
  Parts parts_;  // before memory_: its source outlives the account
  std::unique_ptr<rt::DeviceMemory> memory_;
  rt::Timeline timeline_;
  std::unique_ptr<NcclCommunicator> comm_;
};

}  // namespace sharc::gpu
