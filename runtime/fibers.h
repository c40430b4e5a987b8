// FiberPool: simulated devices on fewer threads than devices. When a
// ThreadWorld has more devices than the machine has cores, a thread per
// device makes the kernel's scheduler interleave them: every wait for a
// message is a futex sleep and a wake-up (~5 us each, hundreds per step), and
// the core a device gives up goes to whichever thread the kernel picks, not
// to the device that can go on. A FiberPool instead runs each device on a
// fiber (its own stack, switched in user space by Boost.Context's fcontext in
// tens of nanoseconds) and the fibers on `threads` OS threads, one per core:
// a thread runs one of its devices until that device must wait for another
// (a message not posted yet, a lent block not read yet), then goes on with
// its next device, and so round-robin. A thread whose devices all wait spins
// for a short while (when each thread has a core) and then sleeps until a
// message for one of them is posted (notify) or a waiting device's deadline
// passes.
//
// Threads take contiguous blocks of devices: device i's home is thread
// i * threads / fibers (so ring neighbours mostly share a thread). By
// default a fiber runs only on its home thread, so thread-locals stay with
// their device between switches. With set_migration(true) (ThreadWorld's
// devices) a thread whose own fibers have all waited for 10 us takes
// another thread's fiber that was notified since it last waited and runs
// it until it waits again; the fiber then goes back to its home thread's
// round. Devices cost what they cost, not the same: one thread's block of
// devices finishes its work before the other's, and without migration it
// idles at the next collective that needs them (GPT-2 fsdp=8 on 2 cores:
// 14% of each thread's time).
//
// A migrating fiber carries its current Team; other thread-locals are the
// thread's, so device code must not hold one across a wait, nor the
// thread's identity: within one function the compiler may keep
// pthread_self()'s answer (std::this_thread::get_id()) or errno's address
// across a call, as both are declared const. A fiber only ever waits
// inside fiber_wait(): device code that blocks by other means (a mutex
// held across a collective, a sleep) blocks the thread it is on, as it
// would a real accelerator's host thread.
//
// Under AddressSanitizer and ThreadSanitizer every switch is announced to the
// sanitizer (__sanitizer_start_switch_fiber, __tsan_switch_to_fiber), so both
// see each fiber's stack as its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace sharc::rt {

class Team;

class FiberPool {
 public:
  using Clock = std::chrono::steady_clock;

  // `fibers` fibers on `threads` threads (1 <= threads <= fibers), each fiber
  // with a stack of `stack_bytes` (reserved, touched as used) above a guard
  // page. Throws std::invalid_argument on bad counts and std::runtime_error
  // if the stacks cannot be mapped or fibers are not built in (fibers_available()).
  FiberPool(int fibers, int threads, size_t stack_bytes = size_t{8} << 20);
  ~FiberPool();
  FiberPool(const FiberPool&) = delete;
  FiberPool& operator=(const FiberPool&) = delete;

  int fibers() const { return static_cast<int>(fibers_.size()); }
  int threads() const { return static_cast<int>(workers_.size()); }

  // Whether an idle thread may run another thread's waiting fibers (see
  // above); off by default. Not while running.
  void set_migration(bool on);
  bool migration() const { return migrate_; }

  // Calls fn(i) for every i in [0, fibers()), each on fiber i, the caller's
  // thread running thread 0's fibers; returns when all have returned. The
  // first exception a call throws is rethrown here once all are done (fn
  // should not rely on it: a throwing device whose peers wait for it forever
  // hangs the run, so ThreadWorld catches and poisons instead). Not reentrant.
  void run(const std::function<void(int)>& fn);

  // Something a waiting fiber `fiber` may be waiting for has happened (a
  // message posted to it, a block it lent released): if its thread sleeps,
  // wake it. Any thread may call these, inside a run or not.
  void notify(int fiber);
  void notify_all();

  // Defined and used in fibers.cpp only.
  struct Fiber;
  struct Worker;

 private:
  friend struct FiberAccess;
  void schedule(Worker& w);
  void run_fiber(Worker& w, Fiber& f);
  bool steal(Worker& w);
  bool stealable(const Worker& w) const;
  bool idle(Worker& w, unsigned long long seen, Clock::time_point wake_by);
  static void wake(Worker& w);

  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<Team> threads_;
  bool spin_ = true;  // threads <= cores
  bool migrate_ = false;
  std::atomic<int> live_{0};  // fibers of the current run not yet returned
  const std::function<void(int)>* job_ = nullptr;
  std::mutex error_mu_;
  std::exception_ptr error_;
};

// Whether this build has fibers (Boost.Context was found at configure time).
bool fibers_available();

// Whether the calling code runs on a FiberPool's fiber.
bool in_fiber();

// Called by a device that must wait for another: on a FiberPool's fiber, lets
// the thread run its other fibers and returns true once this one is resumed
// (after a notify for it, or after `until` has passed, or earlier: the
// caller re-checks what it waits for and calls again). Elsewhere returns
// false at once; the caller then waits by other means (a condition variable).
bool fiber_wait(FiberPool::Clock::time_point until = FiberPool::Clock::time_point::max());

}  // namespace sharc::rt
