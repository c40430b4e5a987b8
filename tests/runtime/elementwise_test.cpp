// rt::exp and rt::tanh (runtime/elementwise.h), the library-call-free
// versions fused loops use, against the correctly rounded result (std::exp
// and std::tanh in double, rounded once), in ulp, over every 97th float of
// the range that matters, and at the edges: overflow, underflow, NaN, signed
// zero.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/elementwise.h"

namespace sharc::rt {
namespace {

// Distance in representable floats (both finite, same sign or zero).
int64_t ulps(float a, float b) {
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

template <class F, class Ref>
int64_t worst_ulps(F f, Ref ref, float lo, float hi, float* at) {
  int64_t worst = 0;
  for (float x = lo; x < hi; x = std::bit_cast<float>(std::bit_cast<int32_t>(x) + (x < 0 ? -97 : 97))) {
    const float want = static_cast<float>(ref(static_cast<double>(x)));
    const float got = f(x);
    if (!std::isfinite(want) || want == 0.0f) {
      EXPECT_EQ(got, want) << "x = " << x;
      continue;
    }
    const int64_t u = ulps(got, want);
    if (u > worst) worst = u, *at = x;
    if (x < 0 && x > -1e-30f) x = 1e-30f;  // step over the subnormals around 0
  }
  return worst;
}

TEST(Elementwise, ExpIsWithinTwoUlp) {
  float at = 0;
  const int64_t worst =
      worst_ulps([](float x) { return rt::exp(x); }, [](double x) { return std::exp(x); }, -103.0f, 88.7f, &at);
  EXPECT_LE(worst, 2) << "at x = " << at;
  std::printf("rt::exp: worst %lld ulp (x = %g)\n", static_cast<long long>(worst), at);
}

TEST(Elementwise, TanhIsWithinTwoUlp) {
  float at = 0;
  const int64_t worst =
      worst_ulps([](float x) { return rt::tanh(x); }, [](double x) { return std::tanh(x); }, -20.0f, 20.0f, &at);
  EXPECT_LE(worst, 2) << "at x = " << at;
  std::printf("rt::tanh: worst %lld ulp (x = %g)\n", static_cast<long long>(worst), at);
}

TEST(Elementwise, EdgesOfExpAndTanh) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(rt::exp(89.0f), inf);
  EXPECT_EQ(rt::exp(1000.0f), inf);
  EXPECT_EQ(rt::exp(inf), inf);
  EXPECT_EQ(rt::exp(-1000.0f), 0.0f);
  EXPECT_EQ(rt::exp(-inf), 0.0f);
  EXPECT_EQ(rt::exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(rt::exp(std::nanf(""))));
  EXPECT_EQ(rt::exp(-100.0f), static_cast<float>(std::exp(-100.0)))  // subnormal, rounded once
      << rt::exp(-100.0f);
  EXPECT_EQ(rt::tanh(100.0f), 1.0f);
  EXPECT_EQ(rt::tanh(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(rt::tanh(-0.0f)));
  EXPECT_EQ(rt::tanh(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(rt::tanh(std::nanf(""))));
  EXPECT_EQ(rt::tanh(1e-20f), 1e-20f);
}

}  // namespace
}  // namespace sharc::rt
