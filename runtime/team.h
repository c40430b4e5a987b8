// Team: the extra threads one device computes with when its share of the
// machine is more than one core (rt::threads_per_device). A fork-join group:
// run(parts, fn) calls fn(0) .. fn(parts-1), part 0 on the calling device
// thread and the others on the team's workers, and returns when all are
// done. Idle workers spin for up to 100 us before they sleep. Kernels find
// the team of the device thread they run on through current_team() (set by
// the world for the duration of a run), so generated code and kernel
// signatures do not change with the thread budget.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sharc::rt {

class Team {
 public:
  // A team of `threads` threads in all: the caller and threads - 1 workers.
  // spin = false: workers and the caller sleep at once instead of spinning
  // (a team with more threads than the machine has cores, where a spinning
  // thread takes the core a working one needs).
  explicit Team(int threads, bool spin = true);
  ~Team();
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // parts <= size(). The first exception thrown by a part is rethrown here
  // after every part has finished.
  void run(int parts, const std::function<void(int part)>& fn);

 private:
  void work(int index);

  std::vector<std::thread> workers_;
  // Workers and the caller spin on generation_ / pending_ for a short while
  // before sleeping on the condition variables: a step's parallel loops and
  // GEMMs come tens of microseconds apart, and a wake-up from sleep costs
  // about as much as such a loop. generation_ holds the run's number above
  // its part count (the low kPartsBits bits); job_ is written before
  // generation_ is released and read, by the run's parts only, after it is
  // acquired.
  static constexpr int kPartsBits = 16;
  static constexpr uint64_t kPartsMask = (uint64_t{1} << kPartsBits) - 1;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const bool spin_;
  std::exception_ptr error_;  // under mu_
};

// The team of the device this thread runs (null: compute alone).
Team* current_team();

// Makes `team` the current one on this thread for the scope's lifetime.
class TeamScope {
 public:
  explicit TeamScope(Team* team);
  ~TeamScope();
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  Team* previous_;
};

// body(lo, hi) over [0, n): on the calling device's team (current_team()),
// one part per thread, each a whole number of `grain` steps (a flat loop
// over floats passes 64, so every part but the last starts on a cache line
// and vectorises alike); without a team, one call body(0, n). Generated
// code runs its elementwise loops of kParallelMin elements or more through
// it: each element is computed alone, so the split never changes a result.
inline constexpr int64_t kParallelMin = int64_t{1} << 16;
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& body) {
  Team* team = current_team();
  const int64_t steps = (n + grain - 1) / grain;
  if (!team || team->size() < 2 || steps < 2) {
    body(int64_t{0}, n);
    return;
  }
  const int parts = static_cast<int>(std::min<int64_t>(team->size(), steps));
  team->run(parts, [&](int part) {
    const int64_t lo = std::min(n, steps * part / parts * grain);
    const int64_t hi = std::min(n, steps * (part + 1) / parts * grain);
    if (lo < hi) body(lo, hi);
  });
}

}  // namespace sharc::rt
