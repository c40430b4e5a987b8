// The SHARC_ELEMENTWISE functions the lift suite lowers (their lifted IR is
// the golden tests/golden/lift/lift_test.lifted.ir). Together they cover
// nested if/else, the ternary, locals reassigned in branches, early returns,
// a constant loop, a call of one lifted function from another, integer loop
// arithmetic, logical operators, and every <cmath> call sharc-lift maps.
// Ordinary C++ too: the tests call them on floats to check the lifted forms.
#pragma once

#include <algorithm>
#include <cmath>

#include "dsl/lift.h"

namespace lifted {

// Huber loss of a residual: an early return under a condition.
SHARC_ELEMENTWISE inline float huber(float x, float delta) {
  const float a = std::abs(x);
  if (a <= delta) return 0.5f * x * x;
  return delta * (a - 0.5f * delta);
}

// Nested if/else, with a local reassigned in the branches.
SHARC_ELEMENTWISE inline float leaky_clip(float x, float slope, float limit) {
  float y = x;
  if (x < 0.0f) {
    y = slope * x;
    if (y < -limit) {
      y = -limit;
    }
  } else if (x > limit) {
    y = limit + slope * (x - limit);
  }
  return y;
}

// The ternary, and || of two conditions.
SHARC_ELEMENTWISE inline float soft_sign_gate(float x, float gate) {
  const bool outside = x > gate || x < -gate;
  return outside ? x / (1.0f + std::fabs(x)) : (x >= 0.0f ? x : 0.5f * x);
}

// A constant loop: the first four terms of sin's Taylor series.
SHARC_ELEMENTWISE inline float taylor_sin(float x) {
  float term = x, sum = x;
  for (int k = 1; k < 4; ++k) {
    term *= -x * x / static_cast<float>((2 * k) * (2 * k + 1));
    sum += term;
  }
  return sum;
}

// softplus with the usual guard, called by smooth_relu below.
SHARC_ELEMENTWISE inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// A lifted function calling another (inlined into the caller's IR).
SHARC_ELEMENTWISE inline float smooth_relu(float x, float beta) {
  return softplus(beta * x) / beta;
}

// ELU with a pow branch, and expm1.
SHARC_ELEMENTWISE inline float pow_elu(float x, float alpha) {
  if (x > 0.0f) return std::pow(x, 1.5f);
  return alpha * std::expm1(x);
}

// erf-based GELU, sigmoid, clamp, min and max.
SHARC_ELEMENTWISE inline float gated_mix(float x, float lo, float hi) {
  const float g = 0.5f * x * (1.0f + std::erf(x * 0.70710678f));
  const float s = x * sharc::scalar::sigmoid(1.702f * x);
  const float c = std::clamp(x, lo, hi);
  return std::max(g, s) + std::min(c, 0.25f * x) + std::fmax(std::tanh(x), std::log(1.0f + x * x));
}

// A while loop of constant trip count and && with a negation.
SHARC_ELEMENTWISE inline float halving(float x) {
  int n = 0;
  float y = x;
  while (n < 3) {
    if (!(y < 1.0f) && y < 8.0f) y = y * 0.5f + std::sqrt(std::cos(0.0f) + y * y) * 0.25f;
    ++n;
  }
  return y - std::sin(x) * 0.125f;
}

// <cmath> functions sharc composes from its ops: exp2, log2, log10, fma, hypot.
SHARC_ELEMENTWISE inline float log_mix(float x) {
  const float q = x * x;
  return std::log2(1.0f + q) + std::exp2(-q) + std::fma(x, 0.5f, 1.0f) -
         std::hypot(x, 1.0f) * 0.1f + std::log10(2.0f + q);
}

// Compile-time integers made floats (k / 4 is 0, float(k) / 4 is not), an
// int changed in a branch that returns, a static constant, bools added as
// 0/1.
SHARC_ELEMENTWISE inline float ramp_sum(float x) {
  static constexpr float kScale = 0.5f;
  int n = 2;
  if (x > 4.0f) {
    n = 3;
    return kScale * x;
  }
  float s = 0.0f;
  for (int k = 0; k <= n; ++k) s += x * (static_cast<float>(k) / 4);
  return s + (x > 0.0f) + (x > 1.0f);
}

// Assignments inside ?: and && arms (each runs only where C++ runs it), and
// an && whose left side keeps its right side from dividing by zero.
SHARC_ELEMENTWISE inline float side_effects(float x) {
  float y = 0.0f;
  (x > 0.0f) ? (y = x) : (y = -2.0f * x);
  float z = 1.0f;
  const bool big = x > 2.0f && (z = x * 0.5f) > 1.2f;
  float r = 0.0f;
  for (int i = 0; i < 3; ++i)
    if (i != 0 && 6 / i > 2) r += y;
  return big ? y + z + r : y - z + r;
}

// A loop that ends by returning.
SHARC_ELEMENTWISE inline float cube_by_loop(float x) {
  float y = 1.0f;
  for (int i = 0;; ++i) {
    if (i == 3) return y;
    y *= x;
  }
}

}  // namespace lifted
