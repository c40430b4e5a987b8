// Shard-by-shard parameter initialisation. Every element's value is a pure
// function of (seed, parameter path, global element index) through the
// counter-based Philox generator, so each device computes only the block it
// owns, no device ever materialises a full parameter, and the same seed gives
// bitwise identical global weights on every mesh. The oracle calls the same
// function for whole tensors.
#pragma once

#include <cstdint>
#include <string_view>

namespace sharc::rt {

// Mirrors sharc::InitKind (ir/initializers.h); the values must stay equal.
enum class InitKind : int {
  kZeros,
  kOnes,
  kConstant,
  kNormal,
  kUniform,
  kLecunNormal,
  kXavierUniform
};

struct InitSpec {
  InitKind kind = InitKind::kZeros;
  double a = 0.0;       // normal: stddev; uniform: scale; constant: value
  int64_t fan_in = 1;   // shape[-2] * receptive field (Flax convention)
  int64_t fan_out = 1;  // shape[-1] * receptive field
  uint64_t key = 0;     // hash of the parameter path
  // A stacked parameter (a scanned layer's, dsl/layers.h): row r of its
  // leading layer axis holds `row_elems` elements drawn exactly as the
  // unrolled layer r's parameter would be, whose path is row_path with r
  // inserted after its first row_split characters ("h/fc/kernel", 1 ->
  // "h3/fc/kernel"); fan_in/fan_out are the row's. row_elems 0: not stacked.
  const char* row_path = nullptr;
  int64_t row_split = 0;
  int64_t row_elems = 0;
};

// init_key of a stacked parameter's row r (see InitSpec::row_path).
uint64_t row_init_key(const InitSpec& spec, int64_t row);

// Fan-in/out of a parameter of the given global shape, as flax's variance_scaling.
void compute_fans(const int64_t* shape, int rank, int64_t* fan_in, int64_t* fan_out);

// The value of global element `index`.
float init_element(const InitSpec& spec, uint64_t seed, uint64_t index);

// Fills `out` (row-major, local_shape) with the block of a global tensor whose
// first element is at global coordinates `offset`.
void init_block(const InitSpec& spec, uint64_t seed, const int64_t* global_shape,
                const int64_t* offset, const int64_t* local_shape, int rank, float* out);

uint64_t init_key(std::string_view parameter_path);

}  // namespace sharc::rt
