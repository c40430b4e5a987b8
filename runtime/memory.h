// Per-device memory: the accounting (current and peak bytes charged, which
// tests and benchmarks check against the planner's prediction) and where a
// buffer's bytes come from.
//
// Outside a step a buffer is a zeroed heap allocation of its own. Inside one
// (a StepArena scope, which generated code opens for each step), buffers are
// placed in the device's step arena, one allocation reserved for the whole
// run, at offsets an ArenaPlan gives (the same every step; the generator
// predicts its size); buffers that outlive the step (a parameter's new value,
// rt::kPersistent) reuse the blocks that the parameters they replace gave
// back. Once the arena has its size, a step allocates nothing from the
// system. Counters are atomic because a device's tracker may be read by the
// driver thread while the device's own thread runs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/arena.h"
#include "runtime/dtype.h"

namespace sharc::rt {

// How a buffer starts (kZeroed unless the code writes every element before
// reading any) and how long it lives (kPersistent: it may outlive the step,
// e.g. moved into a parameter).
enum class Fill : uint8_t { kZeroed, kUninitialized };
enum class Lifetime : uint8_t { kStep, kPersistent };
inline constexpr Fill uninitialized = Fill::kUninitialized;
inline constexpr Lifetime persistent = Lifetime::kPersistent;

// Where a block came from, so it goes back there.
enum class Source : uint8_t { kNone, kHeap, kArena, kOverflow };

// Where a DeviceMemory's bytes come from when they are not host memory: a
// GPU's (gpu::CudaWorld gives each of its devices one over cudaMalloc).
// Blocks are at least 256-byte aligned.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // Throws (std::bad_alloc, or an error naming the device) when out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
};

class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();

  // From now on the bytes come from `source` (not owned; it outlives this),
  // not from the host. Throws std::logic_error once anything was allocated.
  void set_source(MemorySource* source);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Bytes for a buffer of `bytes` (null for 0); see the header comment.
  void* allocate(size_t bytes, Fill fill, Lifetime lifetime, Source* source);
  void deallocate(void* p, size_t bytes, Source source);

  // Makes the step arena at least `bytes` (a program's constructor passes
  // its predicted size). Grows only while no step is running.
  void reserve_arena(size_t bytes);
  // A step's start and end (StepArena). At the end the arena grows to the
  // size the step's placements reached if that was more. end_step returns
  // the arena blocks still live, which must be none: a buffer of the step
  // that outlived it (the arena is then left as it is).
  void begin_step();
  size_t end_step();

  size_t arena_bytes() const { return arena_bytes_.load(std::memory_order_relaxed); }
  // The arena size every step so far needed (ArenaPlan::high_water).
  size_t arena_needed() const { return arena_needed_.load(std::memory_order_relaxed); }
  // Allocations from the system made inside steps (blocks the arena could
  // not hold yet, persistent buffers with no block to reuse) since the last
  // reset_step_allocations(): 0 once the arena has its size.
  uint64_t step_allocations() const { return step_allocations_.load(std::memory_order_relaxed); }
  void reset_step_allocations() { step_allocations_.store(0, std::memory_order_relaxed); }

  void charge(size_t bytes);
  // Throws std::logic_error when releasing more than is charged: that is a
  // double free in the caller's bookkeeping and would otherwise wrap around.
  void release(size_t bytes);
  size_t current() const { return current_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  // Restarts peak tracking from the current usage (e.g. per training step).
  void reset_peak() { peak_.store(current(), std::memory_order_relaxed); }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};

  // Host or source_ memory: the arena, heap blocks, zeroing.
  void* raw_allocate(size_t bytes, bool zeroed);
  void raw_release(void* p);

  MemorySource* source_ = nullptr;  // null: host memory
  std::atomic<bool> used_{false};   // anything allocated yet (set_source is refused then)
  std::mutex mu_;  // the arena and the spare blocks
  char* arena_ = nullptr;
  std::atomic<size_t> arena_bytes_{0};
  std::atomic<size_t> arena_needed_{0};
  ArenaPlan plan_;
  bool in_step_ = false;
  // Heap blocks given back inside a step, by size, for the persistent
  // buffers of the next steps (a parameter's old value becomes its next one).
  std::multimap<size_t, void*> spare_;
  // Step blocks the arena could not hold yet: their heap memory -> their
  // place in the plan.
  std::map<void*, size_t> overflow_;
  std::atomic<uint64_t> step_allocations_{0};
};

// Opens a step on a device's memory for its scope (DeviceMemory::begin_step
// / end_step). Generated code declares one before any buffer of the step.
class StepArena {
 public:
  explicit StepArena(DeviceMemory& memory) : memory_(memory) { memory_.begin_step(); }
  // Throws std::logic_error when a buffer placed in the arena outlived the
  // step (unless an exception is already on its way out).
  ~StepArena() noexcept(false);
  StepArena(const StepArena&) = delete;
  StepArena& operator=(const StepArena&) = delete;

 private:
  DeviceMemory& memory_;
};

namespace detail {
// 64-byte aligned (a cache line and an AVX-512 vector), zeroed; null for 0 bytes.
void* allocate_zeroed(size_t bytes);
void deallocate(void* p);
}  // namespace detail

// RAII owner of `size` zero-initialised elements of T (float, bf16 or
// int32_t), 64-byte aligned, charged to `memory` for its lifetime.
// Move-only. A null tracker means a host-side buffer that nothing accounts
// for. Buffer is the f32 one.
template <class T>
class BasicBuffer {
 public:
  using value_type = T;
  static constexpr DType kDType = dtype_of<T>();

  BasicBuffer() = default;
  explicit BasicBuffer(size_t size, DeviceMemory* memory = nullptr, Fill fill = Fill::kZeroed,
                       Lifetime lifetime = Lifetime::kStep)
      : size_(size), memory_(memory) {
    if (memory_) {
      data_ = static_cast<T*>(memory_->allocate(bytes(), fill, lifetime, &source_));
      if (size_) memory_->charge(bytes());
    } else {
      data_ = static_cast<T*>(detail::allocate_zeroed(bytes()));
    }
  }
  BasicBuffer(size_t size, DeviceMemory* memory, Lifetime lifetime)
      : BasicBuffer(size, memory, Fill::kZeroed, lifetime) {}
  ~BasicBuffer() { free(); }
  BasicBuffer(BasicBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        memory_(std::exchange(other.memory_, nullptr)),
        source_(std::exchange(other.source_, Source::kNone)) {}
  BasicBuffer& operator=(BasicBuffer&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      memory_ = std::exchange(other.memory_, nullptr);
      source_ = std::exchange(other.source_, Source::kNone);
    }
    return *this;
  }
  BasicBuffer(const BasicBuffer&) = delete;
  BasicBuffer& operator=(const BasicBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  void free() {
    if (data_) {
      if (memory_) {
        memory_->deallocate(data_, bytes(), source_);
        memory_->release(bytes());
      } else {
        detail::deallocate(data_);
      }
    }
    data_ = nullptr;
    size_ = 0;
    memory_ = nullptr;
    source_ = Source::kNone;
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  DeviceMemory* memory_ = nullptr;
  Source source_ = Source::kNone;
};

using Buffer = BasicBuffer<float>;
using BufferBF16 = BasicBuffer<bf16>;
using BufferI32 = BasicBuffer<int32_t>;

}  // namespace sharc::rt
