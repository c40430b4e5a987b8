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
  Worker* worker = nullptr;
  Context context = nullptr;  // where it resumes, while switched out
  bool done = true;
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
  std::vector<Fiber*> fibers;
  Context scheduler = nullptr;  // the thread's own context, while a fiber runs
  Fiber* current = nullptr;
  Clock::time_point wake_by;  // the earliest deadline a waiting fiber gave this pass
  // Bumped by notify() for any of this thread's fibers; a pass during which
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
    f->worker = workers_[static_cast<size_t>(static_cast<int64_t>(i) * threads / fibers)].get();
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
    f->worker->fibers.push_back(f.get());
    fibers_.push_back(std::move(f));
  }
  // Spinning (the team's between runs, idle()'s between messages) pays only
  // when every thread has a core of its own.
  spin_ = threads <= static_cast<int>(std::thread::hardware_concurrency());
  threads_ = std::make_unique<Team>(threads, spin_);
}

FiberPool::~FiberPool() = default;

void FiberPool::notify(int fiber) { wake(*fibers_.at(static_cast<size_t>(fiber))->worker); }

void FiberPool::notify_all() {
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
// leave() from a fiber to its thread's scheduler, enter() back, and
// fiber_main() where a fiber starts.

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
  // Resumed (never after finished): on the same thread, by enter().
  w.scheduler = t.fctx;
#if SHARC_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &w.stack_bottom, &w.stack_size);
#endif
  set_current_team(f.team);
}

[[noreturn]] void fiber_main(fc::transfer_t t) {
  auto* f = static_cast<FiberPool::Fiber*>(t.data);
  FiberPool::Worker& w = *f->worker;
  w.scheduler = t.fctx;
#if SHARC_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w.stack_bottom, &w.stack_size);
#endif
  set_current_team(nullptr);
  FiberAccess::call(*w.pool, f->index);
  f->done = true;
  leave(w, *f, /*finished=*/true);
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
  const fc::transfer_t t = fc::jump_fcontext(f.context, &f);
#if SHARC_ASAN
  __sanitizer_finish_switch_fiber(w.fake_stack, nullptr, nullptr);
#endif
  f.context = t.fctx;
  w.current = nullptr;
  set_current_team(mine);
}

}  // namespace

void FiberPool::schedule(Worker& w) {
  t_worker = &w;
#if SHARC_TSAN
  w.tsan = __tsan_get_current_fiber();
#endif
  size_t live = 0;
  for (Fiber* f : w.fibers) {
    f->context = fc::make_fcontext(f->stack_top(), f->stack_bytes, &fiber_main);
    f->done = false;
    f->team = nullptr;
#if SHARC_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    ++live;
  }
  while (live > 0) {
    const unsigned long long seen = w.signal.load(std::memory_order_seq_cst);
    w.wake_by = Clock::time_point::max();
    for (Fiber* f : w.fibers) {
      if (f->done) continue;
      enter(w, *f);
      if (f->done) {
        --live;
#if SHARC_TSAN
        __tsan_destroy_fiber(f->tsan);
        f->tsan = nullptr;
#endif
      }
    }
    // Every fiber left waits. A notify during the pass may concern one
    // that had already looked: look again before idling.
    if (live > 0 && w.signal.load(std::memory_order_seq_cst) == seen) idle(w, seen);
  }
  t_worker = nullptr;
}

#else  // !SHARC_HAVE_BOOST_CONTEXT

void FiberPool::schedule(Worker&) {}

#endif

void FiberPool::idle(Worker& w, unsigned long long seen) {
  // With a core per thread, spin a little: a message usually follows within
  // a kernel's time. Then sleep until a notify, the earliest deadline of a
  // waiting fiber, or 1 ms (a fiber that waits with no notify to come, e.g.
  // for the poison flag or a timeout, looks again then).
  if (w.pool->spin_ && spin_for(std::chrono::microseconds(50), [&] {
        return w.signal.load(std::memory_order_acquire) != seen;
      }))
    return;
  const Clock::time_point until = std::min(w.wake_by, Clock::now() + std::chrono::milliseconds(1));
  w.parked.store(true, std::memory_order_seq_cst);
  if (w.signal.load(std::memory_order_seq_cst) == seen) {
    std::unique_lock<std::mutex> lock(w.mu);
    w.cv.wait_until(lock, until, [&] { return w.signal.load(std::memory_order_seq_cst) != seen; });
  }
  w.parked.store(false, std::memory_order_seq_cst);
}

void FiberPool::run(const std::function<void(int)>& fn) {
  if (job_) throw std::logic_error("FiberPool::run is not reentrant");
  job_ = &fn;
  error_ = nullptr;
  struct Clear {
    FiberPool* pool;
    ~Clear() { pool->job_ = nullptr; }
  } clear{this};
  threads_->run(threads(), [&](int w) { schedule(*workers_[static_cast<size_t>(w)]); });
  if (error_) std::rethrow_exception(error_);
}

bool in_fiber() {
  auto* w = static_cast<FiberPool::Worker*>(t_worker);
  return w && w->current;
}

bool fiber_wait(FiberPool::Clock::time_point until) {
#if SHARC_HAVE_BOOST_CONTEXT
  auto* w = static_cast<FiberPool::Worker*>(t_worker);
  if (!w || !w->current) return false;
  if (until < w->wake_by) w->wake_by = until;
  leave(*w, *w->current, /*finished=*/false);
  return true;
#else
  (void)until;
  return false;
#endif
}

}  // namespace sharc::rt
