// Functions sharc-lift must refuse, one unsupported construct each, and a
// float/double twin; lift_test runs the tool on this file and asserts every
// diagnostic (line, column, message, source line, caret). Valid C++: only the
// lifting fails. Keep the line numbers in lift_test.cpp in step.
#include <cstdio>
#include <iostream>

#include "dsl/lift.h"

float g_scale = 2.0f;
inline float helper(float x) { return x + 1.0f; }

SHARC_ELEMENTWISE inline float by_pointer(const float* x) { return *x; }

SHARC_ELEMENTWISE inline float by_reference(float& x) { return x; }

SHARC_ELEMENTWISE inline float calls_helper(float x) { return helper(x) * 2.0f; }

SHARC_ELEMENTWISE inline float halve_until_small(float x) {
  while (x > 1.0f) x *= 0.5f;
  return x;
}

SHARC_ELEMENTWISE inline float factorial(float x) {
  return x <= 1.0f ? 1.0f : x * factorial(x - 1.0f);
}

SHARC_ELEMENTWISE inline float counter(float x) {
  static float calls = 0.0f;
  calls += 1.0f;
  return x * calls;
}

SHARC_ELEMENTWISE inline float scaled(float x) { return x * g_scale; }

SHARC_ELEMENTWISE inline float printed(float x) {
  std::printf("%f\n", x);
  return x;
}

SHARC_ELEMENTWISE inline float streamed(float x) {
  std::cout << x;
  return x;
}

SHARC_ELEMENTWISE inline float with_count(float x, int n) { return x * n; }

SHARC_ELEMENTWISE inline float as_array(float x) {
  float v[2] = {x, x};
  return v[0];
}

SHARC_ELEMENTWISE inline float twin(float x) { return x; }
SHARC_ELEMENTWISE inline double twin(double x) { return x; }
