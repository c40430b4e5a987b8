// Scalar elementwise functions in float, shared by the per-device interpreter
// (codegen/execute.cpp) and generated code, whose fused loops call them by
// name. Header-only so the loops inline them.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "runtime/host_device.h"

// Put before a generated fused loop: its iterations are independent and its
// buffers do not overlap (each output is a fresh block, live beside its
// inputs). Without it GCC checks every pair of buffers for overlap at run
// time, and gives up beyond ten checks, so a loop reading four buffers and
// writing three (AdamW's update) stayed scalar.
#if defined(__clang__)
#define SHARC_INDEPENDENT_ITERATIONS _Pragma("clang loop vectorize(assume_safety)")
// The mark also asks clang to vectorise, and clang warns where it cannot (a
// loop calling std::log); that loop is still correct, so no warning.
#pragma clang diagnostic ignored "-Wpass-failed"
#elif defined(__GNUC__)
#define SHARC_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define SHARC_INDEPENDENT_ITERATIONS
#endif

namespace sharc::rt {

SHARC_HD inline float relu(float x) { return x > 0.0f ? x : 0.0f; }

// e^x without a library call, so that a fused loop using it still
// vectorises (GCC vectorises std::exp only under -ffast-math): x = n ln2 + r
// with |r| <= ln2/2, e^r by its Taylor series to r^7 (the rest is < 6e-9
// relative), times 2^n applied in two halves so that subnormal results round
// once. Within 2 ulp of the correctly rounded value over the whole float
// range (tests/runtime/elementwise_test.cpp); inf above 88.72, 0 far below,
// NaN stays NaN. No branch or select on the result: GCC then vectorises it
// (generated code compiles with -fno-trapping-math, cmake/sharc.cmake).
SHARC_HD inline float exp(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  // n = round(x / ln2), ties away from zero.
  const float t = xc * 1.44269504088896341f;
  const int n = static_cast<int>(t + std::copysign(0.5f, t));  // in [-150, 128]
  const float fn = static_cast<float>(n);
  // ln2 in two parts: fn * 0.693359375 is exact (9 significant bits).
  const float r = (xc - fn * 0.693359375f) - fn * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int n1 = n / 2, n2 = n - n1;   // each in [-75, 64]: normal powers of two
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  // NaN in, NaN out: r, hence p, is NaN, whatever n came out as (the
  // conversion of a NaN t is formally undefined; x86 gives INT_MIN, and the
  // select that would avoid it stops GCC vectorising the loop).
  return p * s1 * s2;
}

// tanh without a library call (see exp), on |x| with x's sign put back:
// the odd Taylor series to x^19 below |x| = 0.625 (the first term left out
// is < 1e-8 relative there), else 1 - 2 / (e^2|x| + 1). Both are computed
// and one is picked by a bit mask, not a branch, so GCC vectorises it.
// Within 2 ulp of the correctly rounded value
// (tests/runtime/elementwise_test.cpp).
SHARC_HD inline float tanh(float x) {
  const float a = std::fabs(x), z = a * a;
  float p = -2.39129114e-4f;
  p = p * z + 5.90027441e-4f;
  p = p * z + -1.45583439e-3f;
  p = p * z + 3.59212804e-3f;
  p = p * z + -8.86323553e-3f;
  p = p * z + 2.18694885e-2f;
  p = p * z + -5.39682540e-2f;
  p = p * z + 1.33333333e-1f;
  p = p * z + -3.33333333e-1f;
  const float small = a + a * z * p;
  const float large = 1.0f - 2.0f / (rt::exp(2.0f * a) + 1.0f);
  const uint32_t pick_small = 0u - static_cast<uint32_t>(a < 0.625f);  // all ones or zero
  const float t = std::bit_cast<float>((std::bit_cast<uint32_t>(small) & pick_small) |
                                       (std::bit_cast<uint32_t>(large) & ~pick_small));
  return std::copysign(t, x);
}

// tanh approximation, as jax.nn.gelu(approximate=True).
SHARC_HD inline float gelu(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + rt::tanh(kC * (x + 0.044715f * x * x * x)));
}

// 1 / (1 + e^-x): 0 for very negative x (e^-x overflows to inf), 1 for large x.
SHARC_HD inline float sigmoid(float x) { return 1.0f / (1.0f + rt::exp(-x)); }
// select: on_true where the predicate (a comparison's 0/1 mask) is non-zero.
SHARC_HD inline float select(float pred, float on_true, float on_false) {
  return pred != 0.0f ? on_true : on_false;
}

}  // namespace sharc::rt
