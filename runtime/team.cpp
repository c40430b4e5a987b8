// Team: see team.h.
#include "runtime/team.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "runtime/spin.h"

namespace sharc::rt {

namespace {
thread_local Team* t_current = nullptr;
}  // namespace

Team::Team(int threads, bool spin) : spin_(spin) {
  if (threads < 1 || static_cast<uint64_t>(threads) > kPartsMask)
    throw std::invalid_argument("Team: " + std::to_string(threads) + " threads");
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

Team::~Team() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

namespace {

// Spins for up to 100 us when the team spins (spin_for); returns pred().
template <class Pred>
bool spin_until(bool spin, Pred pred) {
  return spin ? spin_for(std::chrono::microseconds(100), pred) : pred();
}

}  // namespace

void Team::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto started = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(spin_, started)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, started);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    // One load gives the run and its part count together: a worker with no
    // part in a run is not waited for, and by the time it looks, the caller
    // may have started the next run.
    seen = generation_.load(std::memory_order_acquire);
    if (index >= static_cast<int>(seen & kPartsMask)) continue;
    const std::function<void(int)>* job = job_;
    std::exception_ptr error;
    try {
      (*job)(index);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      // This thread's reference goes before the run is marked done: the
      // caller may rethrow and free the exception as soon as it is.
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::move(error);
      error = nullptr;
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be asleep: wake it under the lock it checks under.
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void Team::run(int parts, const std::function<void(int part)>& fn) {
  if (parts < 1 || parts > size())
    throw std::invalid_argument("Team::run: " + std::to_string(parts) + " parts on a team of " +
                                std::to_string(size()));
  if (parts == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    error_ = nullptr;
    pending_.store(parts - 1, std::memory_order_relaxed);
    const uint64_t next = ((generation_.load(std::memory_order_relaxed) >> kPartsBits) + 1)
                          << kPartsBits;
    generation_.store(next | static_cast<uint64_t>(parts), std::memory_order_release);
  }
  start_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(spin_, done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, done);
  }
  std::lock_guard<std::mutex> lock(mu_);
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

Team* current_team() { return t_current; }

// For FiberPool (fibers.cpp), which switches several devices on one thread:
// each takes its team with it.
void set_current_team(Team* team) { t_current = team; }

TeamScope::TeamScope(Team* team) : previous_(t_current) { t_current = team; }
TeamScope::~TeamScope() { t_current = previous_; }

}  // namespace sharc::rt
