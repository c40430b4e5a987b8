// The step arena: ArenaPlan's first-fit placement (reuse, coalescing, no two
// live blocks overlapping, errors) and DeviceMemory's use of it (a step's
// buffers come from one reserved range, the same offsets every step, no
// system allocation once it has its size, persistent buffers recycling the
// blocks their parameters gave back, buffers that outlive a step reported).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/arena.h"
#include "runtime/memory.h"

namespace sharc::rt {
namespace {

TEST(ArenaPlan, FirstFitReusesAndCoalescesHoles) {
  ArenaPlan a;
  const size_t x = a.take(100), y = a.take(64), z = a.take(1);
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, 128u);  // 100 rounds up to 128
  EXPECT_EQ(z, 192u);
  EXPECT_EQ(a.high_water(), 256u);
  a.give(x, 100);
  a.give(y, 64);  // coalesces with x's hole: [0, 192)
  EXPECT_EQ(a.take(192), 0u);
  a.give(0, 192);
  a.give(z, 1);  // everything free: the used range is empty again
  EXPECT_EQ(a.live_blocks(), 0u);
  EXPECT_EQ(a.take(64), 0u);
  EXPECT_EQ(a.high_water(), 256u) << "the high-water mark stays";
}

TEST(ArenaPlan, LiveBlocksNeverOverlap) {
  ArenaPlan a;
  std::mt19937 rng(7);
  struct Block {
    size_t offset, bytes;
  };
  std::vector<Block> live;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      a.give(live[k].offset, live[k].bytes);
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    const size_t bytes = 1 + rng() % 5000;
    const size_t offset = a.take(bytes);
    EXPECT_EQ(offset % ArenaPlan::kAlignment, 0u);
    EXPECT_LE(offset + bytes, a.high_water());
    for (const Block& b : live)
      ASSERT_TRUE(offset + bytes <= b.offset || b.offset + b.bytes <= offset)
          << "[" << offset << ", +" << bytes << ") overlaps [" << b.offset << ", +" << b.bytes << ")";
    live.push_back({offset, bytes});
  }
  EXPECT_EQ(a.live_blocks(), live.size());
}

TEST(ArenaPlan, GivingBackWhatWasNotTakenThrows) {
  ArenaPlan a;
  const size_t x = a.take(64);
  try {
    a.give(x + 64, 64);
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "ArenaPlan::give(64, 64): no live block of that size starts there");
  }
  EXPECT_THROW(a.give(x, 128), std::logic_error);
  EXPECT_THROW(a.take(0), std::logic_error);
}

// One "step": a few buffers with overlapping lifetimes, and a persistent
// value that replaces a parameter.
void step(DeviceMemory& mem, Buffer& param, std::vector<const void*>* where) {
  StepArena scope(mem);
  Buffer a(1000, &mem), b(300, &mem, uninitialized);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], 0.0f) << "zeroed, even in a reused block";
  for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f;
  Buffer c(50, &mem);
  a = Buffer();
  Buffer d(700, &mem);  // fits where a was
  Buffer next(param.size(), &mem, uninitialized, persistent);
  for (size_t i = 0; i < next.size(); ++i) next[i] = param[i] + 1.0f;
  if (where) *where = {b.data(), c.data(), d.data()};
  param = std::move(next);
}

TEST(StepArena, AStepAllocatesNothingOnceTheArenaHasItsSize) {
  DeviceMemory mem;
  Buffer param(256, &mem);
  std::vector<const void*> first, second, third;
  step(mem, param, &first);  // learns the size: its blocks come from the heap
  EXPECT_GT(mem.step_allocations(), 0u);
  EXPECT_EQ(mem.arena_bytes(), mem.arena_needed());
  // 1000, 300 and 50 floats (4000, 1200 and 200 bytes, in 64-byte blocks of
  // 4032, 1216 and 256) live together; then 1000 is freed and 700 fits there.
  EXPECT_EQ(mem.arena_needed(), 4032u + 1216u + 256u);
  mem.reset_step_allocations();
  step(mem, param, &second);
  step(mem, param, &third);
  EXPECT_EQ(mem.step_allocations(), 0u) << "arena blocks and recycled parameter blocks only";
  EXPECT_EQ(second, third) << "the same offsets every step";
  EXPECT_EQ(static_cast<const char*>(second[2]), static_cast<const char*>(second[0]) - 4032)
      << "the 700-float buffer takes the freed 1000-float block";
  for (size_t i = 0; i < param.size(); ++i) ASSERT_EQ(param[i], 3.0f);
  EXPECT_EQ(mem.current(), param.bytes());
}

TEST(StepArena, ReservedUpFrontTheFirstStepAllocatesNothingEither) {
  DeviceMemory mem;
  Buffer param(256, &mem);
  mem.reserve_arena(4032 + 1216 + 256);
  step(mem, param, nullptr);
  // Only the persistent value: no parameter block has been given back yet.
  EXPECT_EQ(mem.step_allocations(), 1u);
}

TEST(StepArena, ABufferThatOutlivesTheStepIsReported) {
  DeviceMemory mem;
  Buffer escaped;
  try {
    StepArena scope(mem);
    escaped = Buffer(10, &mem);
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "StepArena: 1 buffer(s) placed in the step arena outlived the step");
    return;
  }
  FAIL() << "expected std::logic_error";
}

TEST(StepArena, StepsDoNotNest) {
  DeviceMemory mem;
  StepArena scope(mem);
  try {
    StepArena inner(mem);
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "DeviceMemory::begin_step: a step is already running");
  }
}

}  // namespace
}  // namespace sharc::rt
