// ArenaPlan: where each block of a step lives in one device's arena.
//
// A training step allocates and frees its buffers in the same order every
// time (the generated code is straight-line), so placing them first-fit in
// one range of offsets gives the same offsets every step. The runtime
// (DeviceMemory's step arena) and the generator (simulate_memory in
// codegen/buffer_plan.cpp, which replays a program's allocations) run this
// one class over the same sequence, so the arena size a report predicts is
// the size the device reserves. It only computes offsets; it owns no memory.
#pragma once

#include <cstddef>
#include <map>

namespace sharc::rt {

class ArenaPlan {
 public:
  // Blocks start on 64-byte boundaries (a cache line, an AVX-512 vector).
  static constexpr size_t kAlignment = 64;

  // The offset of a new block of `bytes` (> 0, rounded up to kAlignment):
  // the lowest free range that holds it, else the end of the used range.
  size_t take(size_t bytes);
  // Frees the block at `offset`; throws std::logic_error when no live block
  // starts there or its size differs.
  void give(size_t offset, size_t bytes);

  // The end of the highest block ever placed: the arena size that holds
  // every step replayed so far.
  size_t high_water() const { return high_water_; }
  size_t live_blocks() const { return live_.size(); }

  static size_t rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  std::map<size_t, size_t> free_;  // holes below end_: offset -> size, coalesced
  std::map<size_t, size_t> live_;  // offset -> rounded size
  size_t end_ = 0;                 // every offset from here on is free
  size_t high_water_ = 0;
};

}  // namespace sharc::rt
