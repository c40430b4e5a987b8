// Element types in the runtime (runtime/dtype.h): the bf16 format's rounding
// (to nearest, ties to even; NaN, infinities and overflow) checked against a
// reference computed in double, exhaustively over every bf16 bit pattern
// and on a million random floats; typed buffers' byte accounting; and the
// ThreadWorld collectives on bf16 and i32 elements: values, per-hop bf16
// rounding, and bytes sent (a bf16 collective sends exactly half the bytes
// of the same one in f32). A type mismatch between members is an error
// naming the types, not garbage. The typed kernels: data movement is the
// f32 kernels' bit for bit on bf16 and i32; bf16 reductions and GEMMs run in
// f32 and round once, equal to the f32 kernel followed by one rounding.
#include "runtime/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/kernels.h"
#include "runtime/memory.h"
#include "runtime/tensor_collectives.h"
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

// Values exactly representable in bf16 (8 significant bits), varied.
std::vector<float> bf16_values(size_t n, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = round_to_bf16(std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt)) * 3.0f);
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16(v[i]);
  return r;
}

std::vector<float> to_float(const std::vector<bf16>& v) {
  return std::vector<float>(v.begin(), v.end());
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

TEST(TypedKernels, DataMovementIsTheSameOnEveryType) {
  const std::vector<int64_t> shape = {3, 4, 5};
  const std::vector<float> f = bf16_values(60, 1);
  const std::vector<bf16> h = to_bf16(f);
  std::vector<int32_t> i(60);
  for (size_t k = 0; k < i.size(); ++k) i[k] = static_cast<int32_t>(k * 7919) - 200000;
  for (const std::vector<int>& perm : {std::vector<int>{2, 0, 1}, {1, 2, 0}, {0, 2, 1}}) {
    std::vector<float> tf(60);
    std::vector<bf16> th(60);
    std::vector<int32_t> ti(60);
    transpose(f.data(), shape, perm, tf.data());
    transpose(h.data(), shape, perm, th.data());
    transpose(i.data(), shape, perm, ti.data());
    EXPECT_EQ(to_float(th), tf);
    // i32 moves like f32 does: element k came from where an f32 index array
    // says it did.
    std::vector<float> index(60), moved(60);
    std::iota(index.begin(), index.end(), 0.0f);
    transpose(index.data(), shape, perm, moved.data());
    for (size_t k = 0; k < 60; ++k) EXPECT_EQ(ti[k], i[static_cast<size_t>(moved[k])]) << k;
  }
  std::vector<float> bf(2 * 60);
  std::vector<bf16> bh(2 * 60);
  broadcast(f.data(), shape, {2, 3, 4, 5}, bf.data());
  broadcast(h.data(), shape, {2, 3, 4, 5}, bh.data());
  EXPECT_EQ(to_float(bh), bf);
  std::vector<bf16> piece(30), back(60);  // block 1 of 2 along dim 1: 3x2x5
  slice_block(h.data(), shape, 1, 2, 1, piece.data());
  place_block(piece.data(), shape, 1, 2, 1, back.data());
  for (int a = 0; a < 3; ++a)
    for (int b = 2; b < 4; ++b)
      for (int c = 0; c < 5; ++c) {
        const size_t k = (a * 4 + b) * 5 + c;
        EXPECT_EQ(static_cast<float>(back[k]), f[k]);
      }
  std::vector<bf16> filled(5);
  fill(filled.data(), 5, 1.0f + 0x1p-8f);
  EXPECT_EQ(static_cast<float>(filled[4]), 1.0f) << "the fill value rounds to nearest even";
  std::vector<int32_t> ints(3);
  fill(ints.data(), 3, 7.9f);
  EXPECT_EQ(ints[0], 7);
}

TEST(TypedKernels, BF16ReduceRunsInF32AndRoundsOnce) {
  const std::vector<int64_t> shape = {4, 300};
  const std::vector<float> f = bf16_values(1200, 2);
  const std::vector<bf16> h = to_bf16(f);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    for (const std::vector<int>& axes : {std::vector<int>{1}, {0}, {0, 1}}) {
      const size_t n = axes.size() == 2 ? 1 : axes[0] == 1 ? 4 : 300;
      std::vector<float> want(n);
      std::vector<bf16> got(n);
      reduce(f.data(), shape, axes, op, want.data());
      reduce(h.data(), shape, axes, op, got.data());
      EXPECT_EQ(to_float(got), rounded(want));
    }
  }
  std::vector<int32_t> i = {1 << 24, 1, -5, 7};
  int32_t s = 0, m = 0;
  reduce(i.data(), {4}, {0}, ReduceOp::kSum, &s);
  reduce(i.data(), {4}, {0}, ReduceOp::kMax, &m);
  EXPECT_EQ(s, (1 << 24) + 3) << "integer arithmetic, not f32";
  EXPECT_EQ(m, 1 << 24);
}

TEST(TypedKernels, BF16GemmAccumulatesInF32) {
  const int64_t B = 2, M = 5, N = 7, K = 64;
  const std::vector<float> a = bf16_values(B * M * K, 3), b = bf16_values(B * K * N, 4);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> want(B * M * N);
      std::vector<bf16> got(B * M * N);
      gemm(B, M, N, K, a.data(), ta, b.data(), tb, want.data());
      const std::vector<bf16> ha = to_bf16(a), hb = to_bf16(b);
      gemm(B, M, N, K, ha.data(), ta, hb.data(), tb, got.data());
      EXPECT_EQ(to_float(got), rounded(want)) << ta << tb;
    }
}

TEST(TypedKernels, BF16TensorCollectivesMoveBlocks) {
  // all_gather along a non-leading dim (packed path) and reduce_scatter.
  const int n = 2;
  ThreadWorld world(line(n));
  world.run([&](int r) {
    const Group g = make_group(world.mesh(), r, {0});
    std::vector<bf16> mine(3 * 2), all(3 * 4);
    for (int k = 0; k < 6; ++k) mine[k] = bf16(static_cast<float>(10 * r + k));
    all_gather_dim(world.comm(r), g, mine.data(), {3, 2}, 1, all.data());
    for (int row = 0; row < 3; ++row)
      for (int p = 0; p < n; ++p)
        for (int c = 0; c < 2; ++c)
          EXPECT_EQ(static_cast<float>(all[row * 4 + p * 2 + c]),
                    static_cast<float>(10 * p + row * 2 + c));
    std::vector<bf16> part(3 * 2);
    reduce_scatter_dim(world.comm(r), g, all.data(), {3, 4}, 1, part.data(), ReduceOp::kSum);
    for (int row = 0; row < 3; ++row)
      for (int c = 0; c < 2; ++c)
        EXPECT_EQ(static_cast<float>(part[row * 2 + c]),
                  2.0f * static_cast<float>(10 * r + row * 2 + c));
  });
  const CommStats s = world.total_stats();
  EXPECT_EQ(s.bytes(CollectiveKind::kAllGather), 2u * 6 * 2);
  EXPECT_EQ(s.bytes(CollectiveKind::kReduceScatter), 2u * 6 * 2);
}

}  // namespace
}  // namespace sharc::rt
