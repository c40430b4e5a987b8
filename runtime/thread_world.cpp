// ThreadWorld: the thread transport under the ring collectives (ring_comm.h):
// channels and message matching. A post copies the block (or moves a
// buffer the sender no longer needs) into the destination's channel; a lent
// block (the all-gather steps) is read by its receiver where the lender
// keeps it, and the lender waits for that read before its collective
// returns, or takes the block back if the run fails. Failure handling is a
// poison flag plus a broadcast wake-up of every channel, so a throw on one
// device cannot leave the others blocked forever.
#include "runtime/thread_world.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/blas.h"
#include "runtime/fibers.h"
#include "runtime/kernels.h"
#include "runtime/ring_comm.h"

namespace sharc::rt {
namespace detail {

using Clock = std::chrono::steady_clock;

static Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Waits on `cv` under `lk` until a notify or `until` (a device thread), or
// lets the other devices of its thread run until then (a device fiber:
// FiberPool). Either may return early; callers look again.
static void await_peer(std::unique_lock<std::mutex>& lk, std::condition_variable& cv,
                 Clock::time_point until = Clock::time_point::max()) {
  if (in_fiber()) {
    // The lock is not held across the switch (the thread's other devices
    // take it); a post in between bumps the thread's signal
    // (FiberPool::notify), so the fiber looks again after the pass.
    lk.unlock();
    fiber_wait(until);
    lk.lock();
    return;
  }
  // A thread keeps the lock into the wait: a post in between would be missed.
  if (until == Clock::time_point::max())
    cv.wait(lk);
  else
    cv.wait_until(lk, until);
}

// Sleeps until `until`, letting the thread's other devices run meanwhile
// when this device is a fiber.
static void sleep_until_arrival(Clock::time_point until) {
  while (Clock::now() < until)
    if (!fiber_wait(until)) std::this_thread::sleep_until(until);
}

class ThreadComm;

struct Message {
  Tag tag;
  Bytes data;
  Clock::time_point arrival;  // wall clock with a simulated link
  double virtual_arrival = 0;  // virtual clock
  // A lent block (RingComm::post_lent): the lender's bytes, not a copy;
  // `data` is empty. The receiver releases it to the lender after reading.
  const std::byte* lent = nullptr;
  size_t lent_bytes = 0;
  ThreadComm* lender = nullptr;
  size_t bytes() const { return lent ? lent_bytes : data.size(); }
};

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> queue;
  Clock::time_point link_free{};  // when the simulated link finishes its last block
  double virtual_link_free = 0;   // the same on the virtual clock
};

struct Fabric {
  explicit Fabric(int devices)
      : n(devices), channels(new Channel[static_cast<size_t>(devices) * devices]) {}

  Channel& at(int src, int dst) { return channels[static_cast<size_t>(src) * n + dst]; }

  // Something device `rank` may wait for has happened.
  void notify(int rank) {
    if (fibers) fibers->notify(rank);
  }

  void poison() {
    poisoned.store(true);
    if (fibers) fibers->notify_all();
    // Taking each lock before notifying closes the window between a receiver's
    // predicate check and its wait, so no receiver misses the wake-up.
    for (int i = 0; i < n * n; ++i) {
      std::lock_guard<std::mutex> lk(channels[i].mu);
      channels[i].cv.notify_all();
    }
  }

  // Empties every channel and clears the poison flag; returns how many
  // messages were left behind and the first channel holding one.
  size_t reset(int* first_src, int* first_dst) {
    size_t left = 0;
    for (int i = 0; i < n * n; ++i) {
      std::lock_guard<std::mutex> lk(channels[i].mu);
      if (!channels[i].queue.empty() && left == 0) {
        *first_src = i / n;
        *first_dst = i % n;
      }
      left += channels[i].queue.size();
      channels[i].queue.clear();
      channels[i].link_free = {};
      channels[i].virtual_link_free = 0;
    }
    poisoned.store(false);
    return left;
  }

  const int n;
  std::unique_ptr<Channel[]> channels;
  std::atomic<bool> poisoned{false};
  LinkModel link;
  bool virtual_clock = false;
  double recv_timeout_s = 60;
  FiberPool* fibers = nullptr;  // the world's, when the devices are fibers
};

class ThreadComm final : public RingComm {
 public:
  ThreadComm(Fabric& fabric, int rank) : RingComm(rank, fabric.n), fabric_(fabric) {}

  // A new run: nothing is lent (a failed run took back what it lent).
  void restart() {
    restart_sequences();
    std::lock_guard<std::mutex> lk(lent_mu_);
    lent_ = 0;
  }

  // A receiver is done reading a block this device lent.
  void release() {
    {
      std::lock_guard<std::mutex> lk(lent_mu_);
      if (--lent_ == 0) lent_cv_.notify_all();
    }
    fabric_.notify(rank());
  }

 protected:
  void post(int dst, Tag tag, Bytes&& block) override {
    Message m;
    m.tag = tag;
    m.data = std::move(block);
    enqueue(dst, std::move(m));
  }

  void post_lent(int dst, Tag tag, const std::byte* data, size_t bytes) override {
    {
      std::lock_guard<std::mutex> lk(lent_mu_);
      ++lent_;
    }
    Message m;
    m.tag = tag;
    m.lent = data;
    m.lent_bytes = bytes;
    m.lender = this;
    enqueue(dst, std::move(m));
  }

  Bytes receive(int src, Tag tag) override {
    Message m = take(src, tag);
    if (!m.lent) return std::move(m.data);
    Bytes copy = copy_of(m.lent, m.lent_bytes);
    m.lender->release();
    return copy;
  }

  void receive_with(int src, Tag tag,
                    const std::function<void(const std::byte*, size_t)>& fn) override {
    Message m = take(src, tag);
    if (!m.lent) {
      fn(m.data.data(), m.data.size());
      recycle(std::move(m.data));
      return;
    }
    struct Release {
      ThreadComm* lender;
      ~Release() { lender->release(); }
    } release{m.lender};
    fn(m.lent, m.lent_bytes);
  }

  void wait_lent() override {
    std::unique_lock<std::mutex> lk(lent_mu_);
    const double timeout = fabric_.recv_timeout_s;
    const Clock::time_point deadline = Clock::now() + seconds(timeout);
    while (lent_ > 0) {
      // Receivers that failed never take their blocks: look at the poison
      // flag now and then (a release wakes this at once).
      await_peer(lk, lent_cv_, Clock::now() + std::chrono::milliseconds(10));
      if (lent_ == 0) return;
      const bool poisoned = fabric_.poisoned.load();
      if (poisoned || (timeout > 0 && Clock::now() > deadline)) {
        lk.unlock();
        abandon_lent();
        if (poisoned)
          throw WorldAborted("rank " + std::to_string(rank()) +
                             " aborted while its blocks were read: another device failed");
        throw std::runtime_error("rank " + std::to_string(rank()) + " waited " +
                                 std::to_string(timeout) +
                                 " s for its ring neighbour to take a block it sent; the devices "
                                 "probably issued collectives in different orders or groups");
      }
    }
  }

  void abandon_lent() noexcept override {
    // Take back every lent block still queued, then wait for the reads in
    // progress (they do not block, so they end soon).
    int taken_back = 0;
    for (int dst = 0; dst < fabric_.n; ++dst) {
      Channel& ch = fabric_.at(rank(), dst);
      std::lock_guard<std::mutex> lk(ch.mu);
      for (auto it = ch.queue.begin(); it != ch.queue.end();) {
        if (it->lender == this) {
          it = ch.queue.erase(it);
          ++taken_back;
        } else {
          ++it;
        }
      }
    }
    std::unique_lock<std::mutex> lk(lent_mu_);
    lent_ -= taken_back;
    while (lent_ > 0) await_peer(lk, lent_cv_);
  }

 private:
  void enqueue(int dst, Message&& m) {
    Channel& ch = fabric_.at(rank(), dst);
    {
      std::lock_guard<std::mutex> lk(ch.mu);
      const LinkModel& link = fabric_.link;
      const double transfer_s =
          link.bytes_per_s > 0 ? static_cast<double>(m.bytes()) / link.bytes_per_s : 0.0;
      if (fabric_.virtual_clock) {
        const double start = std::max(timeline()->now(), ch.virtual_link_free);
        ch.virtual_link_free = start + transfer_s;
        m.virtual_arrival = ch.virtual_link_free + link.latency_s;
      } else if (link.latency_s > 0 || link.bytes_per_s > 0) {
        const Clock::time_point start = std::max(Clock::now(), ch.link_free);
        ch.link_free = start + seconds(transfer_s);
        m.arrival = ch.link_free + seconds(link.latency_s);
      }
      ch.queue.push_back(std::move(m));
    }
    ch.cv.notify_all();
    fabric_.notify(dst);
  }

  // The first message from `src` under `tag`, once it has arrived.
  Message take(int src, Tag tag) {
    Channel& ch = fabric_.at(src, rank());
    std::unique_lock<std::mutex> lk(ch.mu);
    const double timeout = fabric_.recv_timeout_s;
    const Clock::time_point deadline = Clock::now() + seconds(timeout);
    for (bool timed_out = false;;) {
      // First match in FIFO order: blocks of one collective between the same
      // pair of devices arrive in the order they were sent.
      auto it = std::find_if(ch.queue.begin(), ch.queue.end(),
                             [&](const Message& m) { return m.tag == tag; });
      if (it != ch.queue.end()) {
        Message m = std::move(*it);
        ch.queue.erase(it);
        lk.unlock();
        if (fabric_.virtual_clock)
          timeline()->arrive(m.virtual_arrival);
        else if (m.arrival > Clock::now())
          sleep_until_arrival(m.arrival);
        return m;
      }
      if (fabric_.poisoned.load()) {
        throw WorldAborted("rank " + std::to_string(rank()) + " aborted while waiting for rank " +
                           std::to_string(src) + ": another device failed");
      }
      if (timed_out) {
        throw std::runtime_error(
            "rank " + std::to_string(rank()) + " waited " + std::to_string(timeout) +
            " s for a message from rank " + std::to_string(src) +
            "; the devices probably issued collectives in different orders or groups");
      }
      if (timeout <= 0) {
        await_peer(lk, ch.cv);
      } else {
        // Look at the queue once more after a timeout before giving up.
        await_peer(lk, ch.cv, deadline);
        timed_out = Clock::now() >= deadline;
      }
    }
  }

  Fabric& fabric_;
  std::mutex lent_mu_;
  std::condition_variable lent_cv_;
  int lent_ = 0;  // blocks lent and not yet released
};

}  // namespace detail

ThreadWorld::ThreadWorld(MeshShape mesh) : mesh_(std::move(mesh)) {
  if (mesh_.axis_names.size() != mesh_.axis_sizes.size()) {
    throw std::invalid_argument("ThreadWorld: " + std::to_string(mesh_.axis_names.size()) +
                                " axis names but " + std::to_string(mesh_.axis_sizes.size()) +
                                " sizes");
  }
  for (size_t i = 0; i < mesh_.axis_names.size(); ++i) {
    if (mesh_.axis_sizes[i] < 1) {
      throw std::invalid_argument("ThreadWorld: axis \"" + mesh_.axis_names[i] + "\" has size " +
                                  std::to_string(mesh_.axis_sizes[i]));
    }
    if (mesh_.axis_index(mesh_.axis_names[i]) != static_cast<int>(i)) {
      throw std::invalid_argument("ThreadWorld: duplicate axis name: \"" + mesh_.axis_names[i] +
                                  "\"");
    }
  }
  const int n = size();
  fabric_ = std::make_unique<detail::Fabric>(n);
  for (int r = 0; r < n; ++r) {
    comms_.push_back(std::make_unique<detail::ThreadComm>(*fabric_, r));
    memories_.push_back(std::make_unique<DeviceMemory>());
    timelines_.push_back(std::make_unique<Timeline>(r));
    comms_.back()->set_timeline(timelines_.back().get());
  }
  set_threads_per_device(rt::threads_per_device(n));
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int threads = fibers_available() ? std::clamp(cores / threads_per_device_, 1, n) : n;
  // SHARC_DEVICE_THREADS=K (a positive number) overrides the default, as
  // min(K, devices): the tests run the worlds both ways through it.
  if (const char* env = std::getenv("SHARC_DEVICE_THREADS")) {
    char* end = nullptr;
    const long k = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && k > 0)
      threads = fibers_available() ? static_cast<int>(std::min<long>(k, n)) : n;
  }
  set_device_threads(threads);
}

void ThreadWorld::set_device_threads(int threads) {
  if (running_) throw std::logic_error("ThreadWorld::set_device_threads while running");
  const int n = size();
  if (threads < 1 || threads > n)
    throw std::invalid_argument("ThreadWorld::set_device_threads(" + std::to_string(threads) +
                                "): between 1 and the " + std::to_string(n) + " devices");
  if (threads < n && !fibers_available())
    throw std::runtime_error("ThreadWorld::set_device_threads(" + std::to_string(threads) +
                             "): fewer threads than devices needs fibers, and sharc was built "
                             "without Boost.Context (apt-get install libboost-context-dev)");
  device_threads_ = threads;
  fabric_->fibers = nullptr;
  fibers_.reset();
  devices_.reset();
  if (threads < n) {
    fibers_ = std::make_unique<FiberPool>(n, threads);
    // A thread whose devices all wait runs another's ready device (fibers.h).
    const char* migrate = std::getenv("SHARC_DEVICE_MIGRATION");
    fibers_->set_migration(!(migrate && std::string(migrate) == "0"));
    fabric_->fibers = fibers_.get();
  } else {
    // The device threads spin between steps only if each has a core.
    devices_ = std::make_unique<Team>(n, n <= static_cast<int>(std::thread::hardware_concurrency()));
  }
}

void ThreadWorld::set_threads_per_device(int threads) {
  if (running_) throw std::logic_error("ThreadWorld::set_threads_per_device while running");
  if (threads < 1)
    throw std::invalid_argument("ThreadWorld::set_threads_per_device(" + std::to_string(threads) +
                                "): at least one thread per device");
  threads_per_device_ = threads;
  teams_.clear();
  // One device uses OpenBLAS's pool when OpenBLAS runs the GEMMs; libxsmm's
  // kernels are single-threaded, so then it gets a team as well.
  if ((size() > 1 || !gemm_on_blas_threads()) && threads > 1)
    for (int r = 0; r < size(); ++r) teams_.push_back(std::make_unique<Team>(threads));
}

ThreadWorld::~ThreadWorld() = default;

Communicator& ThreadWorld::comm(int rank) {
  return *comms_.at(rank);
}
DeviceMemory& ThreadWorld::memory(int rank) {
  return *memories_.at(rank);
}
void ThreadWorld::set_link(const LinkModel& link) {
  fabric_->link = link;
}
void ThreadWorld::set_clock(ClockMode mode, const MachineModel& machine) {
  if (running_) throw std::logic_error("ThreadWorld::set_clock while running");
  clock_ = mode;
  machine_ = machine;
  fabric_->virtual_clock = mode == ClockMode::kVirtual;
  clear_trace();
}

Timeline& ThreadWorld::timeline(int rank) {
  return *timelines_.at(rank);
}

Trace ThreadWorld::trace() const {
  Trace t;
  t.clock = clock_mode_name(clock_);
  for (int r = 0; r < size(); ++r) {
    t.track_names.push_back(mesh_.describe(r));
    for (const TraceEvent& e : timelines_[r]->events()) t.events.push_back(e);
  }
  return t;
}

std::vector<DeviceTime> ThreadWorld::device_times() const {
  std::vector<DeviceTime> times;
  for (const auto& t : timelines_) times.push_back(t->time());
  return times;
}

void ThreadWorld::clear_trace() {
  if (running_) throw std::logic_error("ThreadWorld::clear_trace while running");
  const auto origin = std::chrono::steady_clock::now();
  for (auto& t : timelines_) {
    t->clear();
    t->configure(clock_, machine_, origin);
  }
}

void ThreadWorld::set_recv_timeout(double seconds) {
  fabric_->recv_timeout_s = seconds;
}

void ThreadWorld::run(const std::function<void(int rank)>& fn) {
  if (running_) throw std::logic_error("ThreadWorld::run is not reentrant");
  running_ = true;
  // OpenBLAS's thread count is one per process: the whole budget for a
  // single device, else 1 (the devices' teams split GEMMs instead).
  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    set_blas_threads(size() == 1 && gemm_on_blas_threads() ? threads_per_device_ : 1);
  int src = -1, dst = -1;
  fabric_->reset(&src, &dst);
  for (auto& c : comms_) c->restart();
  if (clock_ == ClockMode::kVirtual) {
    double latest = 0;
    for (auto& t : timelines_) latest = std::max(latest, t->time().now_s);
    for (auto& t : timelines_) t->start_at(latest);
  }

  std::mutex mu;
  std::exception_ptr first;
  // The devices run on the pool's threads (the caller's is device 0), kept
  // from run to run: a step pays two wake-ups per device, not a thread
  // start and join.
  const std::function<void(int)> device = [&](int r) {
    try {
      TeamScope team(teams_.empty() ? nullptr : teams_[r].get());
      fn(r);
      timelines_[r]->finish();
    } catch (...) {
      try {
        timelines_[r]->finish();
      } catch (...) {  // the run's own failure is the one to report
      }
      {
        // Record before poisoning: the WorldAborted exceptions the poison
        // causes elsewhere must never be the one reported.
        std::lock_guard<std::mutex> lk(mu);
        if (!first) first = std::current_exception();
      }
      fabric_->poison();
    }
  };
  if (fibers_)
    fibers_->run(device);
  else
    devices_->run(size(), device);
  running_ = false;

  const size_t left = fabric_->reset(&src, &dst);
  if (first) std::rethrow_exception(first);
  if (left) {
    throw std::logic_error("ThreadWorld::run: " + std::to_string(left) +
                           " message(s) sent but never received (first from rank " +
                           std::to_string(src) + " to rank " + std::to_string(dst) +
                           "); is a ppermute_start missing its ppermute_wait?");
  }
}

std::vector<int> ThreadWorld::local_ranks() const {
  std::vector<int> ranks(static_cast<size_t>(size()));
  for (int r = 0; r < size(); ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

CommStats ThreadWorld::total_stats() const {
  CommStats total;
  for (const auto& c : comms_) total += c->stats();
  return total;
}

void ThreadWorld::reset_stats() {
  for (auto& c : comms_) c->reset_stats();
}

}  // namespace sharc::rt
