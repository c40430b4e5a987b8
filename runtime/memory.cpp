// DeviceMemory counters and Buffer ownership. The peak is maintained with a
// compare-exchange loop so that concurrent charges can never lose a maximum.
#include "runtime/memory.h"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace sharc::rt {

namespace {
constexpr std::align_val_t kAlignment{64};
}  // namespace

void DeviceMemory::charge(size_t bytes) {
  const size_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t seen = peak_.load(std::memory_order_relaxed);
  while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void DeviceMemory::release(size_t bytes) {
  size_t seen = current_.load(std::memory_order_relaxed);
  do {
    if (bytes > seen) {
      throw std::logic_error("DeviceMemory::release(" + std::to_string(bytes) + ") with only " +
                             std::to_string(seen) + " bytes charged");
    }
  } while (!current_.compare_exchange_weak(seen, seen - bytes, std::memory_order_relaxed));
}

Buffer::Buffer(size_t size, DeviceMemory* memory) : size_(size), memory_(memory) {
  if (size_ == 0) return;
  data_ = static_cast<float*>(::operator new(size_ * sizeof(float), kAlignment));
  std::memset(data_, 0, size_ * sizeof(float));
  if (memory_) memory_->charge(bytes());
}

Buffer::~Buffer() {
  free();
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      memory_(std::exchange(other.memory_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    free();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    memory_ = std::exchange(other.memory_, nullptr);
  }
  return *this;
}

void Buffer::free() {
  if (data_) {
    ::operator delete(data_, kAlignment);
    if (memory_) memory_->release(bytes());
  }
  data_ = nullptr;
  size_ = 0;
  memory_ = nullptr;
}

}  // namespace sharc::rt
