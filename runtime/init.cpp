// Counter-based initialisers; see init.h. Normal samples use Box-Muller on two
// Philox words; truncated normals (lecun_normal) redraw with the next counter
// until |z| < 2, so the result depends only on the element's global index.
#include "runtime/init.h"

#include <cmath>
#include <string>
#include <vector>

#include "runtime/philox.h"

namespace sharc::rt {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
// Stddev of a standard normal truncated to (-2, 2); dividing by it restores
// unit variance (the constant flax.nnx.initializers.variance_scaling uses).
constexpr double kTruncStd = 0.87962566103423978;

std::array<uint32_t, 4> draw(const InitSpec& s, uint64_t seed, uint64_t index, uint32_t attempt) {
  const uint64_t k = seed * 0x9E3779B97F4A7C15ull ^ s.key;
  return philox4x32(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), attempt, 0x5348u},
      {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)});
}

double std_normal(const InitSpec& s, uint64_t seed, uint64_t index, uint32_t attempt) {
  auto r = draw(s, seed, index, attempt);
  const double u1 = uniform01(r[0]), u2 = uniform01(r[1]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

void compute_fans(const int64_t* shape, int rank, int64_t* fan_in, int64_t* fan_out) {
  if (rank == 0) {
    *fan_in = *fan_out = 1;
  } else if (rank == 1) {
    *fan_in = *fan_out = shape[0];
  } else {
    int64_t receptive = 1;
    for (int i = 0; i < rank - 2; ++i) receptive *= shape[i];
    *fan_in = shape[rank - 2] * receptive;
    *fan_out = shape[rank - 1] * receptive;
  }
}

float init_element(const InitSpec& s, uint64_t seed, uint64_t index) {
  switch (s.kind) {
    case InitKind::kZeros:
      return 0.0f;
    case InitKind::kOnes:
      return 1.0f;
    case InitKind::kConstant:
      return static_cast<float>(s.a);
    case InitKind::kNormal:
      return static_cast<float>(s.a * std_normal(s, seed, index, 0));
    case InitKind::kUniform:
      return static_cast<float>(s.a * uniform01(draw(s, seed, index, 0)[0]));
    case InitKind::kLecunNormal: {
      double z = 0.0;
      for (uint32_t attempt = 0;; ++attempt) {
        z = std_normal(s, seed, index, attempt);
        if (std::fabs(z) < 2.0) break;
      }
      return static_cast<float>(z * std::sqrt(1.0 / static_cast<double>(s.fan_in)) / kTruncStd);
    }
    case InitKind::kXavierUniform: {
      const double limit = std::sqrt(6.0 / static_cast<double>(s.fan_in + s.fan_out));
      return static_cast<float>((2.0 * uniform01(draw(s, seed, index, 0)[0]) - 1.0) * limit);
    }
  }
  return 0.0f;
}

void init_block(const InitSpec& spec, uint64_t seed, const int64_t* global_shape,
                const int64_t* offset, const int64_t* local_shape, int rank, float* out) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= local_shape[i];
  std::vector<int64_t> idx(rank, 0);
  InitSpec row = spec;  // a stacked parameter's current row, keyed as its layer's
  int64_t row_index = -1;
  for (int64_t e = 0; e < n; ++e) {
    uint64_t g = 0;
    for (int d = 0; d < rank; ++d) g = g * global_shape[d] + (offset[d] + idx[d]);
    if (spec.row_elems > 0) {
      const int64_t r = static_cast<int64_t>(g / static_cast<uint64_t>(spec.row_elems));
      if (r != row_index) row.key = row_init_key(spec, row_index = r);
      out[e] = init_element(row, seed, g % static_cast<uint64_t>(spec.row_elems));
    } else {
      out[e] = init_element(spec, seed, g);
    }
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < local_shape[d]) break;
      idx[d] = 0;
    }
  }
}

uint64_t init_key(std::string_view path) {
  return hash_name(path);
}

uint64_t row_init_key(const InitSpec& spec, int64_t row) {
  const std::string_view path(spec.row_path);
  const size_t split = static_cast<size_t>(spec.row_split);
  return init_key(std::string(path.substr(0, split)) + std::to_string(row) + std::string(path.substr(split)));
}

}  // namespace sharc::rt
