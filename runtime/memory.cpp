// DeviceMemory counters and Buffer ownership. The peak is maintained with a
// compare-exchange loop so that concurrent charges can never lose a maximum.
#include "runtime/memory.h"

#include <cstring>
#include <exception>
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

DeviceMemory::~DeviceMemory() {
  for (auto& [bytes, p] : spare_) raw_release(p);
  for (auto& [p, offset] : overflow_) raw_release(p);
  raw_release(arena_);
}

void DeviceMemory::set_source(MemorySource* source) {
  std::lock_guard<std::mutex> lock(mu_);
  if (used_) throw std::logic_error("DeviceMemory::set_source: memory was already allocated from the host");
  source_ = source;
}

void* DeviceMemory::raw_allocate(size_t bytes, bool zeroed) {
  used_.store(true, std::memory_order_relaxed);
  if (!source_) return zeroed ? detail::allocate_zeroed(bytes) : ::operator new(bytes, kAlignment);
  void* p = source_->allocate(bytes);
  if (zeroed) source_->zero(p, bytes);
  return p;
}

void DeviceMemory::raw_release(void* p) {
  if (!p) return;
  if (source_)
    source_->release(p);
  else
    detail::deallocate(p);
}

void* DeviceMemory::allocate(size_t bytes, Fill fill, Lifetime lifetime, Source* source) {
  *source = Source::kNone;
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  size_t overflow_offset = 0;
  bool overflow = false, in_step = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_step = in_step_;
    if (in_step && lifetime == Lifetime::kStep) {
      // Every step block gets its place in the plan, held by the arena or
      // not, so offsets do not depend on how large the arena is yet.
      const size_t offset = plan_.take(bytes);
      if (offset + ArenaPlan::rounded(bytes) <= arena_bytes()) {
        p = arena_ + offset;
        *source = Source::kArena;
      } else {
        overflow = true;
        overflow_offset = offset;
      }
    } else if (in_step) {
      auto it = spare_.find(bytes);
      if (it != spare_.end()) {
        p = it->second;
        spare_.erase(it);
        *source = Source::kHeap;
      }
    }
  }
  if (p) {
    if (fill == Fill::kZeroed) {
      if (source_)
        source_->zero(p, bytes);
      else
        std::memset(p, 0, bytes);
    }
    return p;
  }
  if (in_step) step_allocations_.fetch_add(1, std::memory_order_relaxed);
  p = raw_allocate(bytes, fill == Fill::kZeroed);
  *source = Source::kHeap;
  if (overflow) {
    std::lock_guard<std::mutex> lock(mu_);
    overflow_.emplace(p, overflow_offset);
    *source = Source::kOverflow;
  }
  return p;
}

void DeviceMemory::deallocate(void* p, size_t bytes, Source source) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  switch (source) {
    case Source::kArena:
      plan_.give(static_cast<size_t>(static_cast<char*>(p) - arena_), bytes);
      return;
    case Source::kOverflow: {
      auto it = overflow_.find(p);
      if (it == overflow_.end()) throw std::logic_error("DeviceMemory::deallocate: unknown overflow block");
      plan_.give(it->second, bytes);
      overflow_.erase(it);
      raw_release(p);
      return;
    }
    default:
      if (in_step_) {
        spare_.emplace(bytes, p);  // for the next persistent buffer of its size
        return;
      }
      raw_release(p);
  }
}

void DeviceMemory::reserve_arena(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes <= arena_bytes() || in_step_ || plan_.live_blocks() > 0) return;
  raw_release(arena_);
  arena_ = nullptr;  // if the allocation throws, no arena (and no size claimed for it)
  arena_bytes_.store(0, std::memory_order_relaxed);
  arena_ = static_cast<char*>(raw_allocate(bytes, /*zeroed=*/false));
  arena_bytes_.store(bytes, std::memory_order_relaxed);
}

void DeviceMemory::begin_step() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_step_) throw std::logic_error("DeviceMemory::begin_step: a step is already running");
  in_step_ = true;
}

size_t DeviceMemory::end_step() {
  size_t live = 0, needed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_step_ = false;
    live = plan_.live_blocks();
    needed = plan_.high_water();
    arena_needed_.store(needed, std::memory_order_relaxed);
  }
  if (live == 0) reserve_arena(needed);
  return live;
}

StepArena::~StepArena() noexcept(false) {
  const size_t live = memory_.end_step();
  if (live > 0 && std::uncaught_exceptions() == 0)
    throw std::logic_error("StepArena: " + std::to_string(live) +
                           " buffer(s) placed in the step arena outlived the step");
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
