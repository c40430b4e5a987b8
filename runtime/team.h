// Team: the extra threads one device computes with when its share of the
// machine is more than one core (rt::threads_per_device). A fork-join group:
// run(parts, fn) calls fn(0) .. fn(parts-1), part 0 on the calling device
// thread and the others on the team's workers, and returns when all are
// done. Kernels find the team of the device thread they run on through
// current_team() (set by the world for the duration of a run), so generated
// code and kernel signatures do not change with the thread budget.
#pragma once

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
  explicit Team(int threads);
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
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int parts_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
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

}  // namespace sharc::rt
