// rt::World: the devices of a mesh that this process drives, and how to run
// the same function on each of them. A generated Program is built on a World
// and holds only its local devices' shards; collectives between devices go
// through each device's Communicator, whichever process the peer is in.
//
// Two implementations:
//  - ThreadWorld (thread_world.h): every device of the mesh, as threads of
//    one process;
//  - MpiWorld (mpi_world.h): P processes x L local devices over MPI; global
//    rank = process * L + local index.
// Every process calls run() and the host-level exchanges alike (SPMD), as
// under mpirun.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/memory.h"
#include "runtime/mesh.h"
#include "runtime/program_info.h"
#include "runtime/trace.h"

namespace sharc::rt {

// Thrown on devices that were blocked in a receive when another device failed;
// run() reports the original failure, not these.
class WorldAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The devices a generated program runs on, and how they talk: a thread per
// device (ThreadWorld), MPI processes (MpiWorld), GPUs (gpu::CudaWorld,
// gpu::NcclWorld) or the block simulator (gpu::SimGpuWorld). A program is
// constructed on one and runs on its local devices.
class World {
 public:
  virtual ~World() = default;

  // The mesh the devices form.
  virtual const MeshShape& mesh() const = 0;
  // The number of devices, on every process.
  int size() const { return mesh().num_devices(); }
  // This process among all of them (0 of 1 for a ThreadWorld), and how many
  // there are.
  //@{
  virtual int process() const = 0;
  virtual int processes() const = 0;
  //@}
  // The devices this process drives, ascending global ranks.
  virtual std::vector<int> local_ranks() const = 0;
  // Whether this process drives device `rank`.
  virtual bool is_local(int rank) const = 0;

  // A local device's communicator, memory account and timeline; throw
  // std::out_of_range for a rank that is not local.
  //@{
  virtual Communicator& comm(int rank) = 0;
  virtual DeviceMemory& memory(int rank) = 0;
  virtual Timeline& timeline(int rank) = 0;
  //@}

  // Runs fn(rank) for every local device, concurrently (ThreadWorld: a thread
  // each, or fibers sharing the cores' threads), and joins them. If a device
  // anywhere throws, the others stop and run() rethrows.
  virtual void run(const std::function<void(int rank)>& fn) = 0;

  // Host-level exchange between processes, outside run(): every process
  // passes its bytes and gets every process's, in process order. A barrier
  // too. One process: {mine}.
  virtual std::vector<std::string> all_gather_host(const std::string& mine) = 0;

  // The sum of this process's devices' statistics.
  virtual CommStats local_stats() const = 0;
};

// Completes the global row-major array `global` of tensor `t` on every
// process: device `rank`'s block is taken from the process that drives it
// when written[rank] is set (that process filled it in), and copied into
// the arrays of all the others; blocks already local are left alone. With
// one process it does nothing. A collective: every process calls it alike,
// outside run(). It moves whole blocks with one all_gather over every device
// (counted in the devices' statistics).
void complete_global(World& world, const TensorInfo& t, std::span<float> global,
                     std::span<const uint8_t> written);

}  // namespace sharc::rt
