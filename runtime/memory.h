// Per-device memory accounting and the typed buffers charged to it. This is
// bookkeeping, not an allocator: DeviceMemory only counts bytes (current and
// peak) so tests and benchmarks can check a partitioned program's footprint per
// device against the planner's estimate. Counters are atomic because a device's
// tracker may be read by the driver thread while the device's own thread runs.
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

#include "runtime/dtype.h"

namespace sharc::rt {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

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
  explicit BasicBuffer(size_t size, DeviceMemory* memory = nullptr)
      : data_(static_cast<T*>(detail::allocate_zeroed(size * sizeof(T)))),
        size_(size),
        memory_(memory) {
    if (memory_ && size_) memory_->charge(bytes());
  }
  ~BasicBuffer() { free(); }
  BasicBuffer(BasicBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        memory_(std::exchange(other.memory_, nullptr)) {}
  BasicBuffer& operator=(BasicBuffer&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      memory_ = std::exchange(other.memory_, nullptr);
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
      detail::deallocate(data_);
      if (memory_) memory_->release(bytes());
    }
    data_ = nullptr;
    size_ = 0;
    memory_ = nullptr;
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  DeviceMemory* memory_ = nullptr;
};

using Buffer = BasicBuffer<float>;
using BufferBF16 = BasicBuffer<bf16>;
using BufferI32 = BasicBuffer<int32_t>;

}  // namespace sharc::rt
