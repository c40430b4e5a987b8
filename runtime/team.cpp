// Team: see team.h.
#include "runtime/team.h"

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
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void Team::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= parts_) continue;
      job = job_;
    }
    std::exception_ptr error;
    try {
      (*job)(index);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_.notify_one();
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
    pending_ = parts - 1;
    error_ = nullptr;
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

Team* current_team() { return t_current; }

TeamScope::TeamScope(Team* team) : previous_(t_current) { t_current = team; }
TeamScope::~TeamScope() { t_current = previous_; }

}  // namespace sharc::rt
