// ArenaPlan: first-fit placement with coalescing; see the header.
#include "runtime/arena.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sharc::rt {

size_t ArenaPlan::take(size_t bytes) {
  if (bytes == 0) throw std::logic_error("ArenaPlan::take(0)");
  const size_t size = rounded(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const size_t offset = it->first, left = it->second - size;
    free_.erase(it);
    if (left > 0) free_.emplace(offset + size, left);
    live_.emplace(offset, size);
    return offset;
  }
  // No hole holds it: it goes at the end of the used range (a free range
  // that reached the end was folded into it by give()).
  const size_t offset = end_;
  end_ = offset + size;
  high_water_ = std::max(high_water_, end_);
  live_.emplace(offset, size);
  return offset;
}

void ArenaPlan::give(size_t offset, size_t bytes) {
  auto it = live_.find(offset);
  if (it == live_.end() || it->second != rounded(bytes))
    throw std::logic_error("ArenaPlan::give(" + std::to_string(offset) + ", " + std::to_string(bytes) +
                           "): no live block of that size starts there");
  size_t start = offset, size = it->second;
  live_.erase(it);
  // Coalesce with the holes on either side.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (start + size == end_)
    end_ = start;  // the top of the used range is free again
  else
    free_.emplace(start, size);
}

}  // namespace sharc::rt
