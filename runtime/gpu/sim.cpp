// The block simulator (sim.h). One BlockRun per block: its barriers, the
// per-lane slots the warp functions exchange values through, and the shared
// memory. In fiber mode all of a block's threads are fibers on one OS thread,
// so the barriers need no lock: a thread that must wait yields
// (fiber_wait) until the barrier's generation moves. In thread mode the same
// barriers wait on a condition variable.
#include "runtime/gpu/sim.h"

#include <array>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/fibers.h"

namespace sharc::gpu::sim {
namespace {

constexpr unsigned kLanes = 32;

struct Barrier {
  unsigned members = 0;
  unsigned arrived = 0;
  unsigned gone = 0;  // members that returned: they never arrive again
  uint64_t generation = 0;
  bool broken = false;
};

struct BlockRun : Block {
  const char* what = "";
  bool fibers = false;
  bool independent = false;  // run_independent: the threads run one after another
  rt::FiberPool* pool = nullptr;
  std::mutex mu;  // thread mode
  std::condition_variable cv;
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<Thread> thread_states;
  std::vector<float> lane_values;                  // warp_exchange
  std::vector<std::array<uint32_t, 6>> mma_words;  // mma_16x8x16: a[4], b[2]
  std::vector<const unsigned char*> lane_rows;     // ldmatrix_x4
  size_t shared_bytes = 0;
};

thread_local Thread* t_current = nullptr;

BlockRun& block_of(Thread& t) { return *static_cast<BlockRun*>(t.block); }

[[noreturn]] void throw_broken(const BlockRun& b, const Thread& t, const char* kind) {
  throw std::runtime_error(
      std::string("gpu simulator: kernel ") + b.what + ": thread " + std::to_string(t.thread) +
      " of block (" + std::to_string(b.index.x) + "," + std::to_string(b.index.y) + "," +
      std::to_string(b.index.z) + ") waits at a " + kind +
      " that a thread which already returned never reaches (on a GPU: a hang or undefined "
      "behaviour)");
}

void wake_all(BlockRun& b) {
  if (b.fibers)
    b.pool->notify_all();
  else
    b.cv.notify_all();
}

void arrive_and_wait(Barrier& bar, const char* kind) {
  Thread* me = t_current;
  BlockRun& b = block_of(*me);
  if (b.independent)
    throw std::logic_error(std::string("gpu simulator: kernel ") + b.what +
                           " was launched as one whose threads never wait for each other "
                           "(launch_independent), but it calls a " + kind);
  std::unique_lock<std::mutex> lock(b.mu, std::defer_lock);
  if (!b.fibers) lock.lock();
  if (bar.broken || bar.gone > 0) {
    bar.broken = true;
    wake_all(b);
    throw_broken(b, *me, kind);
  }
  const uint64_t generation = bar.generation;
  if (++bar.arrived == bar.members) {
    bar.arrived = 0;
    ++bar.generation;
    wake_all(b);
    return;
  }
  if (b.fibers) {
    while (bar.generation == generation && !bar.broken) rt::fiber_wait();
    t_current = me;
  } else {
    b.cv.wait(lock, [&] { return bar.generation != generation || bar.broken; });
  }
  if (bar.generation == generation) throw_broken(b, *me, kind);
}

// A thread returned (or threw): the barriers it belongs to can no longer
// complete for whoever waits there now.
void leave(Thread& t) {
  BlockRun& b = block_of(t);
  std::unique_lock<std::mutex> lock(b.mu, std::defer_lock);
  if (!b.fibers) lock.lock();
  for (Barrier* bar : {&b.block_barrier, &b.warp_barriers[t.thread / kLanes]}) {
    ++bar->gone;
    if (bar->arrived > 0) bar->broken = true;
  }
  wake_all(b);
}

void run_thread(BlockRun& b, unsigned i, const std::function<void()>& body) {
  Thread& t = b.thread_states[i];
  t_current = &t;
  try {
    body();
  } catch (...) {
    leave(t);
    t_current = nullptr;
    throw;
  }
  leave(t);
  t_current = nullptr;
}

rt::FiberPool& pool_for(unsigned threads) {
  thread_local std::map<unsigned, std::unique_ptr<rt::FiberPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<rt::FiberPool>(static_cast<int>(threads), 1, size_t{512} << 10);
  return *p;
}

}  // namespace

Thread& current() {
  if (!t_current)
    throw std::logic_error("gpu simulator: a device function was called outside a launch");
  return *t_current;
}

void sync_block() { arrive_and_wait(block_of(current()).block_barrier, "sync_block"); }

float warp_exchange(float v, int src_lane) {
  Thread& me = current();
  BlockRun& b = block_of(me);
  const unsigned warp = me.thread / kLanes;
  Barrier& bar = b.warp_barriers[warp];
  b.lane_values[me.thread] = v;
  arrive_and_wait(bar, "warp shuffle");
  const float got = b.lane_values[warp * kLanes + (static_cast<unsigned>(src_lane) % kLanes)];
  arrive_and_wait(bar, "warp shuffle");  // nobody overwrites a slot before all have read
  return got;
}

void mma_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  Thread& me = current();
  BlockRun& blk = block_of(me);
  const unsigned warp = me.thread / kLanes, lane = me.thread % kLanes;
  Barrier& bar = blk.warp_barriers[warp];
  blk.mma_words[me.thread] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  arrive_and_wait(bar, "mma_16x8x16");
  const auto* words = &blk.mma_words[warp * kLanes];
  auto half = [](uint32_t w, unsigned k) {
    return rt::float_from_bf16_bits(static_cast<uint16_t>(k % 2 ? w >> 16 : w & 0xffffu));
  };
  // A(row, k): lane (row % 8) * 4 + (k / 2) % 4, register row / 8 + 2 * (k / 8).
  auto A = [&](unsigned row, unsigned k) {
    return half(words[(row % 8) * 4 + (k / 2) % 4][row / 8 + 2 * (k / 8)], k);
  };
  // B(k, n): lane n * 4 + (k / 2) % 4, register 4 + k / 8.
  auto B = [&](unsigned k, unsigned n) { return half(words[n * 4 + (k / 2) % 4][4 + k / 8], k); };
  float out[4];
  for (unsigned r = 0; r < 4; ++r) {
    const unsigned row = lane / 4 + 8 * (r / 2), col = 2 * (lane % 4) + r % 2;
    float acc = c[r];
    for (unsigned k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    out[r] = acc;
  }
  arrive_and_wait(bar, "mma_16x8x16");
  for (unsigned r = 0; r < 4; ++r) d[r] = out[r];
}

void ldmatrix_x4(uint32_t r[4], const void* row, bool trans) {
  Thread& me = current();
  BlockRun& blk = block_of(me);
  const unsigned warp = me.thread / kLanes, lane = me.thread % kLanes;
  const auto* p = static_cast<const unsigned char*>(row);
  if (p < blk.shared || p + 16 > blk.shared + blk.shared_bytes || (p - blk.shared) % 16 != 0)
    throw std::runtime_error(std::string("gpu simulator: kernel ") + blk.what + ": thread " +
                             std::to_string(me.thread) + " gives ldmatrix a row " +
                             (p < blk.shared || p + 16 > blk.shared + blk.shared_bytes
                                  ? "outside the block's shared memory"
                                  : "that is not 16-byte aligned"));
  Barrier& bar = blk.warp_barriers[warp];
  blk.lane_rows[me.thread] = p;
  arrive_and_wait(bar, "ldmatrix");
  // Element c of row i of matrix j: the bits of the bf16 at that row's address + 2c.
  auto element = [&](unsigned j, unsigned i, unsigned c) {
    uint16_t bits;
    std::memcpy(&bits, blk.lane_rows[warp * kLanes + j * 8 + i] + 2 * c, 2);
    return static_cast<uint32_t>(bits);
  };
  const unsigned g = lane / 4, t = lane % 4;
  uint32_t out[4];
  for (unsigned j = 0; j < 4; ++j)
    out[j] = trans ? element(j, 2 * t, g) | element(j, 2 * t + 1, g) << 16
                   : element(j, g, 2 * t) | element(j, g, 2 * t + 1) << 16;
  arrive_and_wait(bar, "ldmatrix");  // nobody overwrites a slot before all have read
  for (unsigned j = 0; j < 4; ++j) r[j] = out[j];
}

void run_independent(const char* what, Dim grid, unsigned threads, size_t shared_bytes,
                     const std::function<void()>& body) {
  if (threads == 0 || threads % kLanes != 0 || threads > 1024)
    throw std::invalid_argument(std::string("gpu simulator: kernel ") + what + ": a block of " +
                                std::to_string(threads) +
                                " threads; sharc's kernels use whole warps, 32 to 1024 threads");
  const size_t words = (shared_bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  std::unique_ptr<std::max_align_t[]> shared(new std::max_align_t[words > 0 ? words : 1]);
  BlockRun b;
  b.grid = grid;
  b.threads = threads;
  b.shared = reinterpret_cast<unsigned char*>(shared.get());
  b.what = what;
  b.independent = true;
  Thread t{0, &b};
  Thread* const outer = t_current;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        b.index = {x, y, z};
        std::memset(b.shared, 0xff, words * sizeof(std::max_align_t));
        for (unsigned i = 0; i < threads; ++i) {
          t.thread = i;
          t_current = &t;
          try {
            body();
          } catch (...) {
            t_current = outer;
            throw;
          }
        }
      }
  t_current = outer;
}

void run(const char* what, Dim grid, unsigned threads, size_t shared_bytes,
         const std::function<void()>& body) {
  if (threads == 0 || threads % kLanes != 0 || threads > 1024)
    throw std::invalid_argument(std::string("gpu simulator: kernel ") + what + ": a block of " +
                                std::to_string(threads) +
                                " threads; sharc's kernels use whole warps, 32 to 1024 threads");
  const bool fibers = rt::fibers_available() && !rt::in_fiber();
  const size_t words = (shared_bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  std::unique_ptr<std::max_align_t[]> shared(new std::max_align_t[words > 0 ? words : 1]);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        BlockRun b;
        b.index = {x, y, z};
        b.grid = grid;
        b.threads = threads;
        b.shared = reinterpret_cast<unsigned char*>(shared.get());
        std::memset(b.shared, 0xff, words * sizeof(std::max_align_t));
        b.what = what;
        b.fibers = fibers;
        b.block_barrier.members = threads;
        b.warp_barriers.resize(threads / kLanes);
        for (Barrier& w : b.warp_barriers) w.members = kLanes;
        b.thread_states.resize(threads);
        for (unsigned i = 0; i < threads; ++i) b.thread_states[i] = {i, &b};
        b.lane_values.assign(threads, 0.0f);
        b.mma_words.resize(threads);
        b.lane_rows.assign(threads, nullptr);
        b.shared_bytes = shared_bytes;
        if (fibers) {
          rt::FiberPool& pool = pool_for(threads);
          b.pool = &pool;
          pool.run([&](int i) { run_thread(b, static_cast<unsigned>(i), body); });
        } else {
          std::vector<std::exception_ptr> errors(threads);
          std::vector<std::thread> team;
          team.reserve(threads);
          for (unsigned i = 0; i < threads; ++i)
            team.emplace_back([&, i] {
              try {
                run_thread(b, i, body);
              } catch (...) {
                errors[i] = std::current_exception();
              }
            });
          for (auto& t : team) t.join();
          for (auto& e : errors)
            if (e) std::rethrow_exception(e);
        }
      }
}

void StreamQueue::run_until(size_t mark) {
  while (done_ < mark) {
    // A queue's work that, through the waits, needs later work of its own
    // queue: the streams would deadlock on a GPU.
    if (running_)
      throw std::logic_error("simulated stream " + name_ +
                             " waits for its own later work (two streams wait for each other)");
    std::function<void()> work = std::move(work_.front());
    work_.pop_front();
    running_ = true;
    try {
      work();
    } catch (...) {
      running_ = false;
      ++done_;
      throw;
    }
    running_ = false;
    ++done_;
  }
}

}  // namespace sharc::gpu::sim
