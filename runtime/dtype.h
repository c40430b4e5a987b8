// Element types of device buffers: f32, bf16 and i32, and the bf16 number
// format the CPU runtime stores (1 sign bit, 8 exponent bits, 7 mantissa
// bits: the top half of an IEEE float). Converting f32 to bf16 rounds to
// nearest, ties to even, as CUDA's __float2bfloat16_rn and XLA do; NaN stays
// a (quiet) NaN, infinities stay infinite, and a finite value that rounds
// past the largest bf16 becomes infinity. bf16 to f32 is exact. Arithmetic on
// bf16 values is done in f32: load, compute, round on store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "runtime/host_device.h"

namespace sharc::rt {

enum class DType : uint8_t { kF32, kBF16, kI32 };

constexpr size_t dtype_size(DType t) {
  return t == DType::kBF16 ? 2 : 4;
}
// "f32", "bf16", "i32": the IR's spelling too.
constexpr std::string_view dtype_name(DType t) {
  return t == DType::kF32 ? "f32" : t == DType::kBF16 ? "bf16" : "i32";
}

// The bf16 bit pattern nearest to f (ties to even).
SHARC_HD inline uint16_t bf16_bits_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep the sign, make it quiet
  // Add half an ulp of bf16, minus one when the kept part is even, so that an
  // exact tie rounds to the even neighbour; the carry may reach the exponent
  // (and infinity), which is the correct rounding.
  const uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + bias) >> 16);
}

SHARC_HD inline float float_from_bf16_bits(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// f rounded to the nearest bf16, as a float: what a bf16 store then load gives.
SHARC_HD inline float round_to_bf16(float f) {
  return float_from_bf16_bits(bf16_bits_from_float(f));
}

// A bf16 value in memory: two bytes, converted to and from float.
struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  SHARC_HD explicit bf16(float f) : bits(bf16_bits_from_float(f)) {}
  SHARC_HD operator float() const { return float_from_bf16_bits(bits); }
  SHARC_HD static bf16 from_bits(uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes");

// The C++ type of a DType's elements.
template <DType T>
struct dtype_traits;
template <>
struct dtype_traits<DType::kF32> {
  using type = float;
};
template <>
struct dtype_traits<DType::kBF16> {
  using type = bf16;
};
template <>
struct dtype_traits<DType::kI32> {
  using type = int32_t;
};

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::kBF16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}

}  // namespace sharc::rt
