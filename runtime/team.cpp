// Team: see team.h.
#include "runtime/team.h"

#include <chrono>
#include <stdexcept>
#include <string>

namespace sharc::rt {

namespace {
thread_local Team* t_current = nullptr;
}  // namespace

Team::Team(int threads) {
  if (threads < 1) throw std::invalid_argument("Team: " + std::to_string(threads) + " threads");
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

// Spins until pred() holds or kSpin has passed; returns pred().
template <class Pred>
bool spin_until(Pred pred) {
  constexpr auto kSpin = std::chrono::microseconds(100);
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (pred()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
  }
}

}  // namespace

void Team::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto started = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, started);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    if (index >= parts_) continue;
    const std::function<void(int)>* job = job_;
    std::exception_ptr error;
    try {
      (*job)(index);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = error;
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
    parts_ = parts;
    error_ = nullptr;
    pending_.store(parts - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, done);
  }
  std::lock_guard<std::mutex> lock(mu_);
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

Team* current_team() { return t_current; }

TeamScope::TeamScope(Team* team) : previous_(t_current) { t_current = team; }
TeamScope::~TeamScope() { t_current = previous_; }

}  // namespace sharc::rt
