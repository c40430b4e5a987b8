// FiberPool: see fibers.h. The switches use Boost.Context's fcontext
// primitives directly (make_fcontext, jump_fcontext: a stack and a saved
// register set, nothing else), so that every switch is one this file makes
// and can announce to the sanitizers.
#include "runtime/fibers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime/spin.h"
#include "runtime/team.h"

#if SHARC_HAVE_BOOST_CONTEXT
#include <boost/context/detail/fcontext.hpp>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define SHARC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARC_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SHARC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHARC_TSAN 1
#endif
#endif
#if SHARC_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if SHARC_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace sharc::rt {

// team.cpp: the current team of this thread, set without a scope (a fiber
// takes its device's team with it when it is switched out and back in).
void set_current_team(Team* team);

#if SHARC_HAVE_BOOST_CONTEXT
namespace fc = boost::context::detail;
using Context = fc::fcontext_t;
#else
using Context = void*;
#endif

struct FiberPool::Fiber {
  int index = 0;
  Worker* home = nullptr;  // the thread whose round it is in
  Context context = nullptr;  // where it resumes, while switched out
  // Set by the thread that runs it, for as long as it does (the only
  // claim on a fiber that may migrate: FiberPool::run_fiber).
  std::atomic<bool> claimed{false};
  std::atomic<bool> done{true};
  // Bumped by notify() for it; `seen` is its value when the fiber was last
  // entered, so signal != seen means something it may wait for happened
  // since it last looked.
  std::atomic<unsigned long long> signal{0};
  std::atomic<unsigned long long> seen{0};
  // The deadline of its current wait (Clock ticks), for its home thread.
  std::atomic<Clock::rep> deadline{Clock::time_point::max().time_since_epoch().count()};
  void* map = nullptr;  // the mapping: guard page, then the stack
  size_t map_bytes = 0;
  std::byte* stack_bottom = nullptr;  // just above the guard page
  size_t stack_bytes = 0;
  Team* team = nullptr;  // its current team while switched out
#if SHARC_ASAN
  void* fake_stack = nullptr;
#endif
#if SHARC_TSAN
  void* tsan = nullptr;
#endif
  std::byte* stack_top() const { return stack_bottom + stack_bytes; }
  ~Fiber() {
    if (!map) return;
#if SHARC_ASAN
    // The stack's shadow still holds the redzones of the frames that ran on
    // it, and munmap does not clear it: memory mapped at this address later
    // (another pool's stacks, a library's buffers) would read as a stack
    // overflow.
    __asan_unpoison_memory_region(stack_bottom, stack_bytes);
#endif
    munmap(map, map_bytes);
  }
};

struct FiberPool::Worker {
  FiberPool* pool = nullptr;
  std::vector<Fiber*> fibers;  // those whose home it is
  Context scheduler = nullptr;  // the thread's own context, while a fiber runs
  Fiber* current = nullptr;
  // Bumped by notify() for any of this thread's fibers (and, with
  // migration, for a fiber whose home is busy); a pass during which
  // it moved is followed by another before the thread may sleep.
  std::atomic<unsigned long long> signal{0};
  std::atomic<bool> parked{false};
  std::mutex mu;
  std::condition_variable cv;
#if SHARC_ASAN
  const void* stack_bottom = nullptr;  // the thread's own stack
  size_t stack_size = 0;
  void* fake_stack = nullptr;
#endif
#if SHARC_TSAN
  void* tsan = nullptr;
#endif
};

namespace {

thread_local void* t_worker = nullptr;  // FiberPool::Worker* of the run on this thread

// This thread's worker. A fiber that migrates resumes on another thread
// inside the same function call, so code that may run before and after a
// switch reads it through here: not inlined, and opaque to the optimiser
// (the memory clobber), so the thread-local's address is never one
// computed on the thread before.
[[gnu::noinline]] FiberPool::Worker* current_worker() {
  asm volatile("" ::: "memory");
  return static_cast<FiberPool::Worker*>(t_worker);
}

[[maybe_unused]] FiberPool::Clock::rep ticks(FiberPool::Clock::time_point t) { return t.time_since_epoch().count(); }

size_t page_bytes() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

}  // namespace

bool fibers_available() { return SHARC_HAVE_BOOST_CONTEXT != 0; }

FiberPool::FiberPool(int fibers, int threads, size_t stack_bytes) {
  if (!fibers_available())
    throw std::runtime_error(
        "FiberPool: sharc was built without Boost.Context (apt-get install libboost-context-dev)");
  if (fibers < 1 || threads < 1 || threads > fibers)
    throw std::invalid_argument("FiberPool: " + std::to_string(fibers) + " fibers on " +
                                std::to_string(threads) + " threads");
  const size_t page = page_bytes();
  const size_t usable = (std::max(stack_bytes, size_t{64} << 10) + page - 1) / page * page;
  for (int w = 0; w < threads; ++w) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->pool = this;
  }
  for (int i = 0; i < fibers; ++i) {
    auto f = std::make_unique<Fiber>();
    f->index = i;
    // Contiguous blocks of devices per thread: ring neighbours (r, r + 1)
    // mostly share a thread, so a block posted in a pass is taken in the
    // same pass. Against round-robin placement, where every ring edge
    // crossed threads: MLP model=8 1.89 -> 1.50 ms, GPT model=8 13.5 ->
    // 11.3 ms per step on 2 cores.
    f->home = workers_[static_cast<size_t>(static_cast<int64_t>(i) * threads / fibers)].get();
    f->map_bytes = usable + page;
    f->map = mmap(nullptr, f->map_bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (f->map == MAP_FAILED) {
      f->map = nullptr;
      throw std::runtime_error("FiberPool: cannot map a " + std::to_string(f->map_bytes) +
                               "-byte fiber stack: " + std::strerror(errno));
    }
    // The lowest page is the guard: a fiber that overflows its stack faults
    // there instead of writing over its neighbour's.
    mprotect(f->map, page, PROT_NONE);
    f->stack_bottom = static_cast<std::byte*>(f->map) + page;
    f->stack_bytes = usable;
    f->home->fibers.push_back(f.get());
    fibers_.push_back(std::move(f));
  }
  // Spinning (the team's between runs, idle()'s between messages) pays only
  // when every thread has a core of its own.
  spin_ = threads <= static_cast<int>(std::thread::hardware_concurrency());
  threads_ = std::make_unique<Team>(threads, spin_);
}

FiberPool::~FiberPool() = default;

void FiberPool::set_migration(bool on) {
  if (job_) throw std::logic_error("FiberPool::set_migration while running");
  migrate_ = on;
}

void FiberPool::notify(int fiber) {
  Fiber& f = *fibers_.at(static_cast<size_t>(fiber));
  f.signal.fetch_add(1, std::memory_order_seq_cst);
  wake(*f.home);
  // Its home thread may be busy with another of its fibers for a long while:
  // a thread that sleeps for want of work may take it meanwhile.
  if (migrate_ && !f.home->parked.load(std::memory_order_seq_cst))
    for (auto& w : workers_)
      if (w.get() != f.home && w->parked.load(std::memory_order_relaxed)) {
        wake(*w);
        break;
      }
}

void FiberPool::notify_all() {
  for (auto& f : fibers_) f->signal.fetch_add(1, std::memory_order_seq_cst);
  for (auto& w : workers_) wake(*w);
}

void FiberPool::wake(Worker& w) {
  w.signal.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with idle(): it sets parked, then reads signal; here signal is
  // bumped, then parked read. One of the two sees the other's write.
  if (w.parked.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(w.mu);
    w.cv.notify_one();
  }
}

struct FiberAccess {
  // Runs the pool's job for fiber `index`, keeping its first exception.
  static void call(FiberPool& pool, int index) noexcept {
    try {
      (*pool.job_)(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(pool.error_mu_);
      if (!pool.error_) pool.error_ = std::current_exception();
    }
  }
};

#if SHARC_HAVE_BOOST_CONTEXT

namespace {

// The switches, with what the sanitizers must be told around each:
// leave() from a fiber to the scheduler of the thread it runs on, enter()
// into it from a thread's scheduler (which passes its Worker: with
// migration the thread that resumes a fiber need not be the one it left),
// and fiber_main() where a fiber starts.

void leave(FiberPool::Worker& w, FiberPool::Fiber& f, bool finished) {
  f.team = current_team();
#if SHARC_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.fake_stack, w.stack_bottom,
                                 w.stack_size);
#endif
#if SHARC_TSAN
  __tsan_switch_to_fiber(w.tsan, 0);
#endif
  const fc::transfer_t t = fc::jump_fcontext(w.scheduler, nullptr);
  // Resumed (never after finished) by enter(), on the thread of the Worker
  // it passes: `w` may be another thread's.
  FiberPool::Worker& now = *static_cast<FiberPool::Worker*>(t.data);
  now.scheduler = t.fctx;
#if SHARC_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &now.stack_bottom, &now.stack_size);
#endif
  set_current_team(f.team);
}

[[noreturn]] void fiber_main(fc::transfer_t t) {
  FiberPool::Worker& w = *static_cast<FiberPool::Worker*>(t.data);
  FiberPool::Fiber& f = *w.current;
  w.scheduler = t.fctx;
#if SHARC_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w.stack_bottom, &w.stack_size);
#endif
  set_current_team(nullptr);
  FiberAccess::call(*w.pool, f.index);
  // The call may have ended on another thread than it began.
  FiberPool::Worker& last = *current_worker();
  f.done.store(true, std::memory_order_release);
  leave(last, f, /*finished=*/true);
  __builtin_unreachable();
}

void enter(FiberPool::Worker& w, FiberPool::Fiber& f) {
  w.current = &f;
  Team* const mine = current_team();
#if SHARC_ASAN
  __sanitizer_start_switch_fiber(&w.fake_stack, f.stack_bottom, f.stack_bytes);
#endif
#if SHARC_TSAN
  __tsan_switch_to_fiber(f.tsan, 0);
#endif
  const fc::transfer_t t = fc::jump_fcontext(f.context, &w);
#if SHARC_ASAN
  __sanitizer_finish_switch_fiber(w.fake_stack, nullptr, nullptr);
#endif
  f.context = t.fctx;
  w.current = nullptr;
  set_current_team(mine);
}

}  // namespace

// Makes the calling thread the one that runs `f`, unless another does or it
// has returned (with migration, possibly on another thread since the caller
// looked).
static bool claim(FiberPool::Fiber& f) {
  if (f.claimed.exchange(true, std::memory_order_acquire)) return false;
  if (!f.done.load(std::memory_order_acquire)) return true;
  f.claimed.store(false, std::memory_order_release);
  return false;
}

void FiberPool::schedule(Worker& w) {
  t_worker = &w;
#if SHARC_TSAN
  w.tsan = __tsan_get_current_fiber();
#endif
  while (live_.load(std::memory_order_acquire) > 0) {
    const unsigned long long seen = w.signal.load(std::memory_order_seq_cst);
    bool mine = false;  // some fiber of this thread's round has not returned
    Clock::rep wake_by = ticks(Clock::time_point::max());
    for (Fiber* f : w.fibers) {
      if (f->done.load(std::memory_order_acquire)) continue;
      // Not claimed: another thread runs it, or ran it to its end meanwhile.
      if (claim(*f)) run_fiber(w, *f);
      if (!f->done.load(std::memory_order_acquire)) {
        mine = true;
        wake_by = std::min(wake_by, f->deadline.load(std::memory_order_relaxed));
      }
    }
    // Without migration a thread is done with its own fibers; with it, it
    // helps the others until every fiber has returned.
    if (!mine && !migrate_) break;
    // Every fiber left waits. A notify during the pass may concern one
    // that had already looked: look again before idling.
    if (w.signal.load(std::memory_order_seq_cst) == seen &&
        live_.load(std::memory_order_acquire) > 0 &&
        idle(w, seen, Clock::time_point(Clock::duration(wake_by))))
      steal(w);
  }
  t_worker = nullptr;
}

void FiberPool::run_fiber(Worker& w, Fiber& f) {
  f.seen.store(f.signal.load(std::memory_order_seq_cst), std::memory_order_relaxed);
  f.deadline.store(ticks(Clock::time_point::max()), std::memory_order_relaxed);
  enter(w, f);
  const bool finished = f.done.load(std::memory_order_relaxed);
#if SHARC_TSAN
  if (finished) {
    __tsan_destroy_fiber(f.tsan);
    f.tsan = nullptr;
  }
#endif
  f.claimed.store(false, std::memory_order_release);
  if (finished) {
    // The last fiber of the run: threads that help others may be asleep.
    if (live_.fetch_sub(1, std::memory_order_acq_rel) == 1)
      for (auto& other : workers_) wake(*other);
  } else if (f.home != &w &&
             (f.signal.load(std::memory_order_seq_cst) != f.seen.load(std::memory_order_relaxed) ||
              f.deadline.load(std::memory_order_relaxed) != ticks(Clock::time_point::max()))) {
    // Ran here, and a notify for it came while it did (its home thread
    // found it claimed), or it waits for a deadline its home must keep.
    wake(*f.home);
  }
}

// Another thread's fiber that is not running, not done, and was notified
// since it was last entered (or never was this run).
static bool ready_elsewhere(const FiberPool::Fiber& f) {
  return !f.claimed.load(std::memory_order_relaxed) && !f.done.load(std::memory_order_relaxed) &&
         f.signal.load(std::memory_order_seq_cst) != f.seen.load(std::memory_order_relaxed);
}

bool FiberPool::stealable(const Worker& w) const {
  for (const auto& v : workers_)
    if (v.get() != &w)
      for (const Fiber* f : v->fibers)
        if (ready_elsewhere(*f)) return true;
  return false;
}

bool FiberPool::steal(Worker& w) {
  for (auto& v : workers_) {
    if (v.get() == &w) continue;
    // From the back of its home's round: the home goes from the front.
    for (auto it = v->fibers.rbegin(); it != v->fibers.rend(); ++it) {
      Fiber& f = **it;
      if (!ready_elsewhere(f) || !claim(f)) continue;
      run_fiber(w, f);
      return true;
    }
  }
  return false;
}

#else  // !SHARC_HAVE_BOOST_CONTEXT

void FiberPool::schedule(Worker&) {}
void FiberPool::run_fiber(Worker&, Fiber&) {}
bool FiberPool::steal(Worker&) { return false; }
bool FiberPool::stealable(const Worker&) const { return false; }

#endif

bool FiberPool::idle(Worker& w, unsigned long long seen, Clock::time_point wake_by) {
  // With a core per thread, spin a little: a message usually follows within
  // a kernel's time. With migration, after the first 10 us take another
  // thread's ready fiber if there is one: not at once, so that a ring's
  // steps, whose blocks come microseconds apart, mostly stay on their
  // threads. Else sleep until a notify, the earliest deadline of a waiting
  // fiber, or 1 ms (a fiber that waits with no notify to come, e.g. for the
  // poison flag or a timeout, looks again then). Returns whether the caller
  // should look for a fiber to take.
  //
  // Measured (bench_plan --rounds 2, 2 cores; the chosen plan against the
  // best hand-written mesh, MLP and GPT, in a run): taking at once -0.7%
  // and +7.3%, -3.2% and +2.1%; after 10 us -3.4% and -14.5%, +1.0% and
  // -0.4%, +2.8% and -3.8%; after 50 us +2.0% and +4.5%, +10.5% and +2.3%.
  const auto notified = [&] { return w.signal.load(std::memory_order_seq_cst) != seen; };
  const auto takable = [&] { return migrate_ && stealable(w); };
  if (spin_ && spin_for(std::chrono::microseconds(10), notified)) return false;
  if (takable()) return true;
  if (spin_ && spin_for(std::chrono::microseconds(40), [&] { return notified() || takable(); }))
    return !notified();
  const Clock::time_point until = std::min(wake_by, Clock::now() + std::chrono::milliseconds(1));
  // Pairs with notify(): parked is set before looking at the signals, and
  // notify bumps a signal before reading parked; one sees the other.
  w.parked.store(true, std::memory_order_seq_cst);
  if (!notified() && !takable()) {
    std::unique_lock<std::mutex> lock(w.mu);
    w.cv.wait_until(lock, until, notified);
  }
  w.parked.store(false, std::memory_order_seq_cst);
  return migrate_;
}

void FiberPool::run(const std::function<void(int)>& fn) {
  if (job_) throw std::logic_error("FiberPool::run is not reentrant");
  job_ = &fn;
  error_ = nullptr;
  struct Clear {
    FiberPool* pool;
    ~Clear() { pool->job_ = nullptr; }
  } clear{this};
#if SHARC_HAVE_BOOST_CONTEXT
  // Every fiber is ready before any thread starts: with migration a thread
  // may start another's.
  for (auto& f : fibers_) {
    f->context = fc::make_fcontext(f->stack_top(), f->stack_bytes, &fiber_main);
    f->team = nullptr;
    f->claimed.store(false, std::memory_order_relaxed);
    f->done.store(false, std::memory_order_relaxed);
    f->deadline.store(ticks(Clock::time_point::max()), std::memory_order_relaxed);
    // Never entered this run: counts as notified.
    f->seen.store(f->signal.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
#if SHARC_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
  }
  live_.store(fibers(), std::memory_order_release);
#endif
  threads_->run(threads(), [&](int w) { schedule(*workers_[static_cast<size_t>(w)]); });
  if (error_) std::rethrow_exception(error_);
}

bool in_fiber() {
  const FiberPool::Worker* w = current_worker();
  return w && w->current;
}

bool fiber_wait(FiberPool::Clock::time_point until) {
#if SHARC_HAVE_BOOST_CONTEXT
  FiberPool::Worker* w = current_worker();
  if (!w || !w->current) return false;
  FiberPool::Fiber& f = *w->current;
  f.deadline.store(ticks(until), std::memory_order_relaxed);
  leave(*w, f, /*finished=*/false);
  return true;
#else
  (void)until;
  return false;
#endif
}

}  // namespace sharc::rt
