// Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3", SC'11), written from the published algorithm.
// Header-only so generated code can inline it into initialisation loops. The
// point of a counter-based generator here is sharding invariance: the value of
// global element i of tensor "w" is a pure function of (hash_name("w"), seed, i),
// so every device generates exactly its own shard and the partitioned model is
// initialised bit-for-bit like the unpartitioned one.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>

#include "runtime/host_device.h"

namespace sharc::rt {

namespace philox_detail {
inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

SHARC_HD inline void mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}
}  // namespace philox_detail

// Ten rounds of the Philox 4x32 bijection of `counter` under `key`.
SHARC_HD inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter,
                                          std::array<uint32_t, 2> key) {
  using namespace philox_detail;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule bumps the key before every round but the first
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, counter[0], &hi0, &lo0);
    mulhilo(kMul1, counter[2], &hi1, &lo1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
  }
  return counter;
}

// FNV-1a, 64 bit: a stable name -> key mapping (no std::hash, which may differ
// between standard libraries and would break reproducibility across builds).
inline uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Maps 32 random bits to the open interval (0, 1): (x + 0.5) / 2^32 is never 0
// or 1, so log(u) in Box-Muller is always finite.
inline double uniform01(uint32_t x) {
  return (static_cast<double>(x) + 0.5) * 0x1p-32;
}

// Four random words for element `index` of stream `key`: the counter is
// (index, stream), so distinct streams under one key never overlap.
SHARC_HD inline std::array<uint32_t, 4> random_block(uint64_t key, uint64_t index, uint64_t stream = 0) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                     static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                    {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
}

// A random word's top 24 bits as a float in (0, 1): exact, and never rounds
// up to 1.
SHARC_HD inline float unit_from_bits(uint32_t x) {
  return (static_cast<float>(x >> 8) + 0.5f) * 0x1p-24f;
}

// Uniform in (0, 1) for global element `index` of the stream named by `key`:
// word index % 4 of block index / 4, so that one Philox evaluation serves four
// consecutive elements (uniform_fill draws them that way).
SHARC_HD inline float uniform_at(uint64_t key, uint64_t index) {
  return unit_from_bits(random_block(key, index >> 2)[index & 3]);
}

// out[k] = uniform_at(key, first + k) for k < count, one block per four
// elements (the loop over whole blocks vectorises): what a tensor's
// contiguous run of elements draws, in a dropout mask or the oracle.
inline void uniform_fill(uint64_t key, uint64_t first, int64_t count, float* out) {
  uint64_t i = first;
  const uint64_t end = first + static_cast<uint64_t>(count > 0 ? count : 0);
  for (; i < end && (i & 3); ++i) *out++ = uniform_at(key, i);
  const uint64_t blocks = (end - i) / 4;
  for (uint64_t b = 0; b < blocks; ++b) {
    const std::array<uint32_t, 4> r = random_block(key, (i >> 2) + b);
    for (int w = 0; w < 4; ++w) out[4 * b + w] = unit_from_bits(r[w]);
  }
  out += 4 * blocks;
  for (i += 4 * blocks; i < end; ++i) *out++ = uniform_at(key, i);
}

// The stream a random_uniform node draws from: the node's call-site key mixed
// with the integer value of its seed operand (e.g. the step number) by a Weyl
// multiple, so consecutive seeds give unrelated streams. The one definition
// the oracle, the per-device interpreter and generated code all call, so
// dropout masks agree bit for bit.
SHARC_HD inline uint64_t random_stream_key(uint64_t node_key, double seed_value) {
  return node_key ^
         (static_cast<uint64_t>(static_cast<int64_t>(seed_value)) * 0x9E3779B97F4A7C15ull);
}

// Standard normal for global element `index` (Box-Muller on two words of the
// element's own block, so each element is independent of how many were drawn).
inline float normal_at(uint64_t key, uint64_t index) {
  const std::array<uint32_t, 4> r = random_block(key, index);
  const double u1 = uniform01(r[0]), u2 = uniform01(r[1]);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

}  // namespace sharc::rt
