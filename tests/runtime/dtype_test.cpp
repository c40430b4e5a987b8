// Element types in the runtime (runtime/dtype.h): the bf16 format's rounding
// (to nearest, ties to even; NaN, infinities and overflow) checked against a
// reference computed in double, exhaustively over every bf16 bit pattern
// and on a million random floats; typed buffers' byte accounting; and the
// ThreadWorld collectives on bf16 and i32 elements: values, per-hop bf16
// rounding, and bytes sent (a bf16 collective sends exactly half the bytes
// of the same one in f32). A type mismatch between members is an error
// naming the types, not garbage.
#include "runtime/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/memory.h"
#include "runtime/thread_world.h"

namespace sharc::rt {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The bf16 nearest to a finite f, ties to even, chosen in double between the
// two bf16 neighbours that bracket it: the definition, not the bit trick.
uint16_t reference_bf16(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // truncation: toward zero
  if ((u & 0xffffu) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next away from zero
  const double x = f, a = float_from_bf16_bits(lo);
  // The neighbour away from zero may be infinity: round as if the exponent
  // went on (its magnitude is then 2^128).
  const double b = (hi & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), x)
                                             : static_cast<double>(float_from_bf16_bits(hi));
  const double da = std::fabs(x - a), db = std::fabs(x - b);
  if (da < db) return lo;
  if (db < da) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(BF16, KnownValues) {
  EXPECT_EQ(bf16_bits_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits_from_float(-2.0f), 0xc000);
  EXPECT_EQ(bf16_bits_from_float(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits_from_float(-0.0f), 0x8000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: the even one (1) wins.
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  // Just above halfway rounds up.
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  // pi: 3.140625 in bf16.
  EXPECT_EQ(round_to_bf16(3.14159265f), 3.140625f);
}

TEST(BF16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_to_bf16(inf), inf);
  EXPECT_EQ(round_to_bf16(-inf), -inf);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  // A signalling NaN whose payload lives only in the low bits must not
  // become infinity when they are dropped.
  float snan;
  const uint32_t snan_bits = 0xff800001u;
  std::memcpy(&snan, &snan_bits, sizeof snan);
  const uint16_t b = bf16_bits_from_float(snan);
  EXPECT_TRUE(std::isnan(float_from_bf16_bits(b)));
  EXPECT_EQ(b & 0x8000, 0x8000) << "the sign survives";
  // The largest float rounds past the largest bf16 (0x7f7f) to infinity;
  // the largest bf16 itself stays.
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(bf16_bits_from_float(float_from_bf16_bits(0x7f7f)), 0x7f7f);
  // Subnormals round like everything else.
  EXPECT_EQ(bf16_bits_from_float(float_from_bf16_bits(0x0001)), 0x0001);
}

TEST(BF16, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = float_from_bf16_bits(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_bits_from_float(f), b) << std::hex << b;
  }
}

TEST(BF16, RoundsToNearestEvenLikeTheReference) {
  // Every tie and its neighbours around each bf16 value, then random floats.
  for (uint32_t b = 0; b < 0x7f80; b += 7) {
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u, 0x0001u, 0xffffu}) {
      const uint32_t u = (b << 16) | low;
      float f;
      std::memcpy(&f, &u, sizeof f);
      ASSERT_EQ(bf16_bits_from_float(f), reference_bf16(f)) << std::hex << u;
      ASSERT_EQ(bf16_bits_from_float(-f), reference_bf16(-f)) << std::hex << u;
    }
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> dist(0, 0x7f7fffffu);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = dist(gen);
    float f;
    std::memcpy(&f, &u, sizeof f);
    ASSERT_EQ(bf16_bits_from_float(f), reference_bf16(f)) << std::hex << u;
  }
}

TEST(TypedBuffer, ChargesItsRealBytes) {
  DeviceMemory mem;
  {
    BufferBF16 h(1000, &mem);
    BufferI32 i(10, &mem);
    Buffer f(10, &mem);
    EXPECT_EQ(h.bytes(), 2000u);
    EXPECT_EQ(mem.current(), 2000u + 40u + 40u);
    EXPECT_EQ(static_cast<float>(h[999]), 0.0f) << "zeroed";
    h[3] = bf16(1.5f);
    EXPECT_EQ(static_cast<float>(h[3]), 1.5f);
    static_assert(BufferBF16::kDType == DType::kBF16);
  }
  EXPECT_EQ(mem.current(), 0u);
  EXPECT_EQ(mem.peak(), 2080u);
}

MeshShape line(int n) {
  return MeshShape{{"x"}, {n}};
}

// Small integers: exact in bf16 (up to 256) and in any summation order.
float small(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((rank * 7 + i * 3) % 17) - 8);
}

TEST(TypedCollectives, BF16AllReduceSendsHalfTheBytes) {
  const int n = 4;
  const size_t count = 1001;
  ThreadWorld world(line(n));
  std::vector<float> want(count, 0.0f);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) want[i] += small(r, i);
  world.run([&](int r) {
    std::vector<bf16> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = bf16(small(r, i));
    world.comm(r).all_reduce(x.data(), count, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(static_cast<float>(x[i]), want[i]) << i;
  });
  const uint64_t bf16_bytes = world.total_stats().bytes(CollectiveKind::kAllReduce);
  world.reset_stats();
  world.run([&](int r) {
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = small(r, i);
    world.comm(r).all_reduce(x.data(), count, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
  });
  const uint64_t f32_bytes = world.total_stats().bytes(CollectiveKind::kAllReduce);
  EXPECT_GT(bf16_bytes, 0u);
  EXPECT_EQ(2 * bf16_bytes, f32_bytes);
}

TEST(TypedCollectives, BF16SumsRoundAtEveryHop) {
  // Two members: 1 + 2^-8 is a tie that rounds to 1 in bf16, on both.
  ThreadWorld world(line(2));
  world.run([&](int r) {
    bf16 x(r == 0 ? 1.0f : 0x1p-8f);
    world.comm(r).all_reduce(&x, 1, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    EXPECT_EQ(static_cast<float>(x), 1.0f);
  });
}

TEST(TypedCollectives, I32IsIntegerArithmetic) {
  // 2^24 + 1 has no float: an i32 sum that went through f32 would lose it.
  const int n = 3;
  ThreadWorld world(line(n));
  world.run([&](int r) {
    const Group g = make_group(world.mesh(), r, {0});
    std::vector<int32_t> x = {r == 0 ? (1 << 24) : 0, r == 1 ? 1 : 0, -r};
    world.comm(r).all_reduce(x.data(), x.size(), g, ReduceOp::kSum);
    EXPECT_EQ(x, (std::vector<int32_t>{(1 << 24), 1, -3}));
    std::vector<int32_t> mine = {(1 << 24) + r, r}, all(2 * n);
    world.comm(r).all_gather(mine.data(), all.data(), 2, g);
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(all[2 * p], (1 << 24) + p);
      EXPECT_EQ(all[2 * p + 1], p);
    }
  });
  EXPECT_EQ(world.total_stats().bytes(CollectiveKind::kAllGather), 3u * 2 * 2 * 4);
}

TEST(TypedCollectives, BF16MovesByPermuteScatterAndAllToAll) {
  const int n = 4;
  ThreadWorld world(line(n));
  world.run([&](int r) {
    const Group g = make_group(world.mesh(), r, {0});
    Communicator& c = world.comm(r);
    // ppermute to the right: receive the left neighbour's value.
    bf16 in(static_cast<float>(r)), out;
    c.ppermute(&in, &out, 1, g, Permutation{{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    EXPECT_EQ(static_cast<float>(out), static_cast<float>((r + n - 1) % n));
    // reduce_scatter: chunk p summed over members.
    std::vector<bf16> x(n), y(1);
    for (int p = 0; p < n; ++p) x[p] = bf16(static_cast<float>(p + r));
    c.reduce_scatter(x.data(), y.data(), 1, g, ReduceOp::kSum);
    EXPECT_EQ(static_cast<float>(y[0]), static_cast<float>(n * r + 0 + 1 + 2 + 3));
    // all_to_all: chunk j to member j.
    std::vector<bf16> z(n);
    c.all_to_all(x.data(), z.data(), 1, g);
    for (int p = 0; p < n; ++p) EXPECT_EQ(static_cast<float>(z[p]), static_cast<float>(r + p));
  });
  const CommStats s = world.total_stats();
  EXPECT_EQ(s.bytes(CollectiveKind::kPPermute), 4u * 2);
  EXPECT_EQ(s.bytes(CollectiveKind::kReduceScatter), 4u * 3 * 2);
  EXPECT_EQ(s.bytes(CollectiveKind::kAllToAll), 4u * 3 * 2);
}

TEST(TypedCollectives, MembersDisagreeingOnTheTypeIsAnError) {
  ThreadWorld world(line(2));
  world.set_recv_timeout(10);
  try {
    world.run([&](int r) {
      const Group g = make_group(world.mesh(), r, {0});
      if (r == 0) {
        std::vector<float> x(4, 1.0f), all(8);
        world.comm(r).all_gather(x.data(), all.data(), 4, g);
      } else {
        std::vector<bf16> x(4), all(8);
        world.comm(r).all_gather(x.data(), all.data(), 4, g);
      }
    });
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("elements from rank"), std::string::npos) << m;
    EXPECT_NE(m.find("different counts or types"), std::string::npos) << m;
    // Either side may notice first: the receiver of f32 bytes counts 8 bf16,
    // the receiver of bf16 bytes counts 2 f32.
    EXPECT_TRUE(m.find("received 8 bf16 elements from rank 0 but expected 4") !=
                    std::string::npos ||
                m.find("received 2 f32 elements from rank 1 but expected 4") != std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace sharc::rt
