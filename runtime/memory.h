// Per-device memory accounting and the float buffers charged to it. This is
// bookkeeping, not an allocator: DeviceMemory only counts bytes (current and
// peak) so tests and benchmarks can check a partitioned program's footprint per
// device against the planner's estimate. Counters are atomic because a device's
// tracker may be read by the driver thread while the device's own thread runs.
#pragma once

#include <atomic>
#include <cstddef>

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

// RAII owner of `size` zero-initialised floats, 64-byte aligned (a cache line and
// an AVX-512 vector), charged to `memory` for its lifetime. Move-only. A null
// tracker means a host-side buffer that nothing accounts for.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t size, DeviceMemory* memory = nullptr);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }

 private:
  void free();

  float* data_ = nullptr;
  size_t size_ = 0;
  DeviceMemory* memory_ = nullptr;
};

}  // namespace sharc::rt
