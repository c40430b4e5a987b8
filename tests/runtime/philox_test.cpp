// Philox-4x32-10 against the Random123 known-answer vectors, FNV-1a against
// its published test vectors, and the (0, 1) / moment properties of the
// uniform and normal helpers.
#include "runtime/philox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace sharc::rt {
namespace {

using Words = std::array<uint32_t, 4>;

TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  // Digits of pi, from the same kat_vectors file.
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, HashNameIsFnv1a64) {
  EXPECT_EQ(hash_name(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(hash_name("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(hash_name("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(hash_name("w_qkv"), hash_name("w_out"));
}

TEST(Philox, UniformIsStrictlyInsideTheUnitInterval) {
  EXPECT_GT(uniform01(0), 0.0);
  EXPECT_LT(uniform01(0xffffffffu), 1.0);
  EXPECT_DOUBLE_EQ(uniform01(0x80000000u), 0.5 + 0.5 / 4294967296.0);
}

TEST(Philox, StreamsHaveTheRightMoments) {
  // 20000 samples: the standard error of the mean is ~0.002 (uniform) and
  // ~0.007 (normal), so these bounds are > 5 sigma.
  const uint64_t key = hash_name("w_qkv");
  const int n = 20000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const float u = uniform_at(key, i);
    ASSERT_GT(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    const double z = normal_at(key, i);
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.012);
  EXPECT_NEAR(sn / n, 0.0, 0.04);
  EXPECT_NEAR(sn2 / n, 1.0, 0.06);
}

TEST(Philox, UniformFillDrawsWhatUniformAtDraws) {
  // Runs starting and ending anywhere within a four-element block, and runs
  // shorter than one block, element for element as uniform_at.
  const uint64_t key = hash_name("dropout");
  std::vector<float> out(40);
  for (uint64_t first : {0ull, 1ull, 2ull, 3ull, 4ull, 5ull, 1ull << 33}) {
    for (int64_t count : {0, 1, 2, 3, 4, 5, 7, 8, 9, 31}) {
      std::fill(out.begin(), out.end(), -1.0f);
      uniform_fill(key, first, count, out.data());
      for (int64_t k = 0; k < count; ++k)
        ASSERT_EQ(out[k], uniform_at(key, first + k)) << "first " << first << " count " << count;
      EXPECT_EQ(out[count], -1.0f) << "wrote past the run";
    }
  }
  // The four words of one block are four distinct elements.
  EXPECT_NE(uniform_at(key, 8), uniform_at(key, 9));
  EXPECT_EQ(uniform_at(key, 9), unit_from_bits(random_block(key, 2)[1]));
}

TEST(Philox, ValuesDependOnlyOnKeyAndIndex) {
  // What sharded initialisation relies on: element 1000 is the same whether a
  // device generates it alone or as part of a longer run.
  const uint64_t key = hash_name("w_out");
  EXPECT_EQ(normal_at(key, 1000), normal_at(key, 1000));
  EXPECT_NE(normal_at(key, 1000), normal_at(key, 1001));
  EXPECT_NE(normal_at(key, 1000), normal_at(hash_name("w_in"), 1000));
  EXPECT_NE(random_block(key, 7, 0), random_block(key, 7, 1));
}

}  // namespace
}  // namespace sharc::rt
