// ThreadWorld: the loopback backend, N simulated devices in one process (a
// thread each, or fibers on one thread per core when there are fewer cores
// than devices: set_device_threads), so partitioned programs and collective
// schedules run in tests without GPUs or MPI. It is not a shared-memory shortcut: devices exchange
// blocks over per-(src, dst) FIFO channels (an all-gather step's block is
// lent, read where its sender keeps it, one copy per step as a GPU's
// peer-to-peer copy would be), and the collectives are the real ring
// algorithms, so byte counts and reduction orders match what a
// ring backend (NCCL) would do. Messages carry a (group, sequence) tag so an
// asynchronous ppermute can overlap other collectives between the same devices.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/memory.h"
#include "runtime/mesh.h"
#include "runtime/team.h"
#include "runtime/trace.h"
#include "runtime/world.h"

namespace sharc::rt {

class FiberPool;

namespace detail {
class ThreadComm;
struct Fabric;
}  // namespace detail

// A simulated link applied to every message: the receiver does not see a block
// before send time + queueing behind earlier blocks on the same (src, dst) link
// + bytes / bytes_per_s + latency_s. Defaults model an infinitely fast link.
// On the wall clock the receiver really waits; on the virtual clock the
// times are virtual and nothing waits.
struct LinkModel {
  double latency_s = 0;
  double bytes_per_s = 0;  // 0 = infinite bandwidth
};

// Every device of the mesh is local: process 0 of 1.
class ThreadWorld final : public World {
 public:
  // Throws std::invalid_argument on mismatched names/sizes, a size < 1 or a
  // repeated axis name.
  explicit ThreadWorld(MeshShape mesh);
  ~ThreadWorld();
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  const MeshShape& mesh() const override { return mesh_; }
  int process() const override { return 0; }
  int processes() const override { return 1; }
  std::vector<int> local_ranks() const override;
  bool is_local(int rank) const override { return rank >= 0 && rank < size(); }
  Communicator& comm(int rank) override;
  DeviceMemory& memory(int rank) override;

  void set_link(const LinkModel& link);
  // The threads each device computes with (runtime/blas.h): by default
  // rt::threads_per_device(size()), so that devices x threads = the
  // machine's cores. Each device gets a Team of that many threads that its
  // GEMMs split over, and OpenBLAS runs single-threaded; except that one
  // device whose GEMMs run on OpenBLAS (rt::gemm_on_blas_threads) uses
  // OpenBLAS's own threads instead. An OPENBLAS_NUM_THREADS in the
  // environment is the user's choice and is left alone. Not while running.
  void set_threads_per_device(int threads);
  int threads_per_device() const { return threads_per_device_; }
  // The OS threads the devices run on. With as many threads as devices
  // (the default when the machine has a core per device) each device has
  // its own thread; with fewer, the devices are fibers (runtime/fibers.h),
  // device r on thread r * threads / devices, and a thread switches to another of its
  // devices whenever one waits for a message. The default is
  // min(devices, cores / threads_per_device()), at least 1, when fibers are
  // built in (rt::fibers_available()); otherwise one thread per device. The
  // environment variable SHARC_DEVICE_THREADS=K sets it to min(K, devices).
  // As fibers, device r starts on thread r * threads / devices, and a thread
  // whose devices all wait runs another thread's device that can go on
  // (FiberPool::set_migration); SHARC_DEVICE_MIGRATION=0 keeps every device
  // on its own thread.
  // Throws std::invalid_argument outside [1, devices] and std::runtime_error
  // for fewer threads than devices without fibers. Not while running.
  void set_device_threads(int threads);
  int device_threads() const { return device_threads_; }
  // Every device's timeline (trace.h): off (the default), the wall clock, or
  // the virtual clock with `machine` charging each statement. Clears the
  // timelines. Not while running.
  void set_clock(ClockMode mode, const MachineModel& machine = {});
  ClockMode clock() const { return clock_; }
  Timeline& timeline(int rank) override;
  // Everything the timelines recorded since set_clock() (or clear_trace()),
  // one track per device named after its mesh coordinates.
  Trace trace() const;
  // Per device: its time so far, busy and in communication calls.
  std::vector<DeviceTime> device_times() const;
  void clear_trace();
  // A receive that waits longer than this throws (and so aborts the run): a
  // mismatched collective schedule fails instead of hanging the test suite.
  // 0 waits forever. Default 60 s.
  void set_recv_timeout(double seconds);

  // Runs fn(rank) for every device on the world's threads (see
  // set_device_threads; the caller's thread is one of them, and the others
  // are kept between runs) and waits for all. If any device
  // throws, the others are woken out of their receives and the first
  // exception is rethrown here. Throws std::logic_error if the devices all
  // returned but some message was never received (e.g. a ppermute_start with no
  // ppermute_wait). Tag sequences restart with every run; statistics and
  // timelines do not. On the virtual clock every device starts the run at
  // the latest device's time (the host joins them between runs).
  void run(const std::function<void(int rank)>& fn) override;
  std::vector<std::string> all_gather_host(const std::string& mine) override { return {mine}; }

  // Sum of every device's statistics (seconds too: a sum over devices, not a
  // wall time), and a reset of all of them.
  CommStats total_stats() const;
  CommStats local_stats() const override { return total_stats(); }
  void reset_stats();

 private:
  MeshShape mesh_;
  std::unique_ptr<detail::Fabric> fabric_;
  std::vector<std::unique_ptr<detail::ThreadComm>> comms_;
  std::vector<std::unique_ptr<DeviceMemory>> memories_;
  std::vector<std::unique_ptr<Timeline>> timelines_;
  ClockMode clock_ = ClockMode::kOff;
  MachineModel machine_;
  bool running_ = false;
  int threads_per_device_ = 1;
  std::vector<std::unique_ptr<Team>> teams_;  // per device, when threads_per_device_ > 1
  int device_threads_ = 1;
  std::unique_ptr<Team> devices_;       // one thread per device, the caller's included
  std::unique_ptr<FiberPool> fibers_;   // or the devices as fibers on fewer threads
};

}  // namespace sharc::rt
