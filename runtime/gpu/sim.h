// The block simulator: runs kernels written in sharc's CUDA dialect
// (runtime/gpu/dialect.h) on the host, so that tests without a GPU check
// what the kernels compute. Only dialect.h includes this header.
//
// A launch runs the grid's blocks one after another. Inside a block every
// CUDA thread is a fiber (runtime/fibers.h) on the calling thread, or an OS
// thread of its own where fibers are not built in or the caller is itself a
// fiber; sync_block() is a barrier over the block, and the warp functions
// (warp_exchange, mma_16x8x16) are barriers over the 32 lanes of a warp.
// Shared memory starts filled with 0xff bytes (NaN as floats), so a read
// before any write shows in the results.
//
// Errors a GPU would hang on or silently get wrong are thrown from run(),
// naming the kernel: a block size that is not a whole number of warps, or a
// thread that returns while others wait for it at a barrier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

namespace sharc::gpu::sim {

struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

struct Block;

// The simulated thread that is running now.
struct Thread {
  unsigned thread = 0;   // threadIdx.x (blocks are one-dimensional)
  Block* block = nullptr;
};
Thread& current();

// What every thread of the running block sees.
struct Block {
  Dim index;               // blockIdx
  Dim grid;                // gridDim
  unsigned threads = 0;    // blockDim.x
  unsigned char* shared = nullptr;  // the dynamic shared memory
};

// __syncthreads().
void sync_block();
// The value `v` of lane `src_lane` of the calling warp (all 32 lanes call).
float warp_exchange(float v, int src_lane);
// The tensor-core instruction mma.sync.m16n8k16 (bf16 in, f32 accumulate),
// with the fragment layout of the PTX ISA (see dialect.h).
void mma_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
// The warp instruction ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16
// (dialect.h, ldmatrix_x4): `row` is this lane's row address, which must
// lie in the block's shared memory, 16-byte aligned (anything else throws,
// naming the kernel: on a GPU, undefined behaviour).
void ldmatrix_x4(uint32_t r[4], const void* row, bool trans);

// Runs `body` (a kernel call) on every thread of every block of `grid`,
// blocks of `threads` threads with `shared_bytes` of shared memory; returns
// when all are done. `what` names the kernel in errors.
void run(const char* what, Dim grid, unsigned threads, size_t shared_bytes,
         const std::function<void()>& body);

// run() for a kernel whose threads never wait for each other (no
// sync_block, no warp function): each block's threads run one after
// another on the calling thread, without fibers, which is what makes the
// simulator fast enough for whole generated programs. A kernel that does
// call a barrier throws std::logic_error naming it.
void run_independent(const char* what, Dim grid, unsigned threads, size_t shared_bytes,
                     const std::function<void()>& body);

// A simulated stream that runs its work late (make_deferred_simulated_kernels):
// work given to it waits in order until run_until or run_all runs it, on
// the calling thread. A wait on another queue is work too: it runs that
// queue up to where it stood when the wait was given.
class StreamQueue {
 public:
  explicit StreamQueue(std::string name) : name_(std::move(name)) {}
  void give(std::function<void()> work) {
    work_.push_back(std::move(work));
    ++given_;
  }
  // `work` given to the queue `stream` points at, or run now where it is
  // null (a stream that runs everything when it is given).
  static void give_or_run(void* stream, std::function<void()> work) {
    if (stream)
      static_cast<StreamQueue*>(stream)->give(std::move(work));
    else
      work();
  }
  // How much work has been given so far: a mark for run_until.
  size_t given() const { return given_; }
  // Runs the work given before `mark` that has not run yet, in order.
  void run_until(size_t mark);
  void run_all() { run_until(given_); }
  bool idle() const { return done_ == given_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::deque<std::function<void()>> work_;
  size_t given_ = 0, done_ = 0;
  bool running_ = false;
};

}  // namespace sharc::gpu::sim
