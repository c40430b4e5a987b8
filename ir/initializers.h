// Parameter initializers, as in flax.nnx.initializers, and the sharding
// metadata wrappers with_partitioning / with_metadata. An Initializer is data,
// not a function: it travels into the IR and into generated code, where each
// device evaluates it for its own shard only. Values come from a counter-based
// RNG keyed by (seed, parameter path, global element index), so the same seed
// gives bitwise identical weights on every mesh (runtime/init.h).
#pragma once

#include <optional>
#include <string>

#include "ir/partition_spec.h"

namespace sharc {

// The initializers sharc draws (the functions below make them).
enum class InitKind { kZeros, kOnes, kConstant, kNormal, kUniform, kLecunNormal, kXavierUniform };

// How a parameter starts, and its layout annotation (jax.nn.initializers plus
// Flax's with_partitioning metadata). Values depend on the seed, the
// parameter's path and the element's global index only, not on the mesh.
struct Initializer {
  InitKind kind = InitKind::kZeros;  // the distribution
  double a = 0.0;  // normal: stddev; uniform: scale (U[0, scale)); constant: value
  std::optional<P> sharding;                // with_partitioning / with_metadata
  std::optional<LogicalRules> rules;        // with_metadata(..., sharding_rules)
  // A scanned layer's stacked parameter (dsl/layers.h): the scope path of
  // its Layers ("h"), whose row r initialises as the unrolled layer r's
  // parameter under scope "h<r>" would; empty otherwise.
  std::string stack_scope;
  std::string str() const;                  // lecun_normal(), normal(0.02), ...
};

// An initializer of `kind` with parameter `a` (see Initializer::a).
inline Initializer make_initializer(InitKind kind, double a = 0.0) {
  Initializer i;
  i.kind = kind;
  i.a = a;
  return i;
}
// jax.nn.initializers' zeros, ones, constant(v), normal(stddev) and
// uniform(scale) (U[0, scale)).
//@{
inline Initializer zeros() { return make_initializer(InitKind::kZeros); }
inline Initializer ones() { return make_initializer(InitKind::kOnes); }
inline Initializer constant(double v) { return make_initializer(InitKind::kConstant, v); }
inline Initializer normal(double stddev = 1e-2) { return make_initializer(InitKind::kNormal, stddev); }
inline Initializer uniform(double scale = 1e-2) { return make_initializer(InitKind::kUniform, scale); }
//@}
// Truncated normal (at 2 sigma) with variance 1/fan_in, like Flax's lecun_normal.
inline Initializer lecun_normal() { return make_initializer(InitKind::kLecunNormal); }
// Uniform with variance 2/(fan_in + fan_out), like Flax's xavier_uniform.
inline Initializer xavier_uniform() { return make_initializer(InitKind::kXavierUniform); }

// `init` with the layout `spec` (nnx.with_partitioning): mesh axes, or
// logical names the program's rules map to them.
inline Initializer with_partitioning(Initializer init, P spec) {
  init.sharding = std::move(spec);
  return init;
}
// `init` with a logical `sharding` and, optionally, the rules that resolve
// it (nnx.with_metadata(init, sharding=..., sharding_rules=...)).
inline Initializer with_metadata(Initializer init, P sharding,
                                 std::optional<LogicalRules> sharding_rules = std::nullopt) {
  init.sharding = std::move(sharding);
  init.rules = std::move(sharding_rules);
  return init;
}

}  // namespace sharc
