// MpiWorld: the devices of a mesh spread over P MPI processes with L local
// devices each (global rank = process * L + local index, so a process holds
// consecutive ranks), one thread per local device. Every device gets a
// Communicator running the same ring collectives as ThreadWorld
// (ring_comm.h) over MPI messages, so results, reduction orders and bytes
// sent are those of the thread world on the same mesh.
//
// Messages go point to point (MPI_Isend to the destination's process, tagged
// with the destination's local index, each carrying its sender and sharc's
// own matching tag), including between devices of one process; receivers
// poll with matched probes, so MPI must provide MPI_THREAD_MULTIPLE. Failure
// is never a hang: a device that throws sends an abort message to every
// process, whose waiting devices stop with an error naming the failed rank,
// and a receive that waits longer than the timeout (default 60 s) throws,
// naming the rank it waited for.
//
// Built when CMake finds MPI (Debian: libopenmpi-dev openmpi-bin).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/memory.h"
#include "runtime/mesh.h"
#include "runtime/trace.h"
#include "runtime/world.h"

namespace sharc::rt {

namespace detail {
class MpiComm;
struct MpiFabric;
}  // namespace detail

class MpiWorld final : public World {
 public:
  // Initialises MPI (MPI_THREAD_MULTIPLE) unless the caller did. Throws
  // std::invalid_argument when processes x local_devices is not the mesh's
  // device count, and std::runtime_error when MPI lacks thread support.
  MpiWorld(MeshShape mesh, int local_devices);
  ~MpiWorld();  // finalises MPI if it initialised it
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  const MeshShape& mesh() const override { return mesh_; }
  int process() const override { return process_; }
  int processes() const override { return processes_; }
  int local_devices() const { return local_; }
  // This process's devices' global ranks, ascending.
  std::vector<int> local_ranks() const override;
  bool is_local(int rank) const override { return rank >= 0 && rank / local_ == process_; }

  // Local devices only; throw std::out_of_range for another process's rank.
  Communicator& comm(int rank) override;
  DeviceMemory& memory(int rank) override;
  Timeline& timeline(int rank) override;

  void set_recv_timeout(double seconds);

  // Runs fn(rank) for every local device on its own thread and joins them;
  // every process must call run() alike. If a device anywhere throws, the
  // others stop (WorldAborted naming it) and run() rethrows: the original
  // exception in its process, the abort elsewhere. Tag sequences restart
  // with every run.
  void run(const std::function<void(int rank)>& fn) override;
  // MPI_Allgather of the sizes, then MPI_Allgatherv of the bytes.
  std::vector<std::string> all_gather_host(const std::string& mine) override;

  // Sum of this process's devices' statistics.
  CommStats local_stats() const override;

 private:
  MeshShape mesh_;
  int local_ = 1, process_ = 0, processes_ = 1;
  bool finalize_ = false;
  std::unique_ptr<detail::MpiFabric> fabric_;
  std::vector<std::unique_ptr<detail::MpiComm>> comms_;
  std::vector<std::unique_ptr<DeviceMemory>> memories_;
  std::vector<std::unique_ptr<Timeline>> timelines_;
};

}  // namespace sharc::rt
