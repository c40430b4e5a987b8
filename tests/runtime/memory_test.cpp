// DeviceMemory current/peak accounting driven through Buffer lifetimes, and
// Buffer's ownership rules (zeroed, aligned, move-only, optional tracker).
#include "runtime/memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <utility>

namespace sharc::rt {
namespace {

TEST(Memory, BuffersChargeAndReleaseTheirTracker) {
  DeviceMemory mem;
  {
    Buffer a(100, &mem);
    EXPECT_EQ(mem.current(), 400u);
    {
      Buffer b(50, &mem);
      EXPECT_EQ(mem.current(), 600u);
    }
    EXPECT_EQ(mem.current(), 400u);
    EXPECT_EQ(mem.peak(), 600u);
    Buffer c(25, &mem);
    EXPECT_EQ(mem.current(), 500u);
    EXPECT_EQ(mem.peak(), 600u);
  }
  EXPECT_EQ(mem.current(), 0u);
  EXPECT_EQ(mem.peak(), 600u);
  mem.reset_peak();
  EXPECT_EQ(mem.peak(), 0u);
  Buffer d(10, &mem);
  EXPECT_EQ(mem.peak(), 40u);
}

TEST(Memory, ResetPeakStartsFromCurrentUsage) {
  DeviceMemory mem;
  Buffer a(10, &mem);
  { Buffer b(90, &mem); }
  EXPECT_EQ(mem.peak(), 400u);
  mem.reset_peak();
  EXPECT_EQ(mem.peak(), 40u);
}

TEST(Memory, MoveTransfersOwnershipWithoutDoubleCounting) {
  DeviceMemory mem;
  Buffer a(16, &mem);
  a[3] = 7.0f;
  Buffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.size(), 16u);
  EXPECT_EQ(b[3], 7.0f);
  EXPECT_EQ(mem.current(), 64u);
  Buffer c(4, &mem);
  c = std::move(b);  // frees c's old 16 bytes, takes b's 64
  EXPECT_EQ(mem.current(), 64u);
  EXPECT_EQ(c.bytes(), 64u);
}

TEST(Memory, BuffersAreZeroedAndAligned) {
  Buffer host(1000);  // no tracker
  ASSERT_NE(host.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(host.data()) % 64, 0u);
  for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(host[i], 0.0f) << i;
  Buffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(Memory, OverReleaseIsALogicError) {
  DeviceMemory mem;
  mem.charge(8);
  EXPECT_THROW(mem.release(9), std::logic_error);
  mem.release(8);
  EXPECT_EQ(mem.current(), 0u);
}

}  // namespace
}  // namespace sharc::rt
