// Scalar elementwise functions in float, shared by the per-device interpreter
// (codegen/execute.cpp) and generated code, whose fused loops call them by
// name. Header-only so the loops inline them.
#pragma once

#include <cmath>

namespace sharc::rt {

inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
// tanh approximation, as jax.nn.gelu(approximate=True).
inline float gelu(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
}

// 1 / (1 + e^-x): 0 for very negative x (e^-x overflows to inf), 1 for large x.
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// select: on_true where the predicate (a comparison's 0/1 mask) is non-zero.
inline float select(float pred, float on_true, float on_false) {
  return pred != 0.0f ? on_true : on_false;
}

}  // namespace sharc::rt
