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

namespace detail {

void* allocate_zeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = ::operator new(bytes, kAlignment);
  std::memset(p, 0, bytes);
  return p;
}

void deallocate(void* p) {
  if (p) ::operator delete(p, kAlignment);
}

}  // namespace detail

}  // namespace sharc::rt
