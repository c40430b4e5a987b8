// Modules and parameters. A Scope names parameters by their '/'-joined path
// ("dot1/kernel"), which keys their random initialisation and, later, the
// sharding rules applied from outside the model. Linear and LayerNorm are built
// from the primitive ops, like flax.nnx.Linear / nnx.LayerNorm.
#pragma once

#include <string>

#include "ir/initializers.h"
#include "dsl/ops.h"

namespace sharc {

// Where a module makes its parameters: a path in the program's parameter
// tree. ProgramBuilder::scope() is the root; `scope / "dense1"` a child.
class Scope {
 public:
  // The scope at `path` of the program `tracer` traces.
  explicit Scope(Tracer* tracer, std::string path = "") : tracer_(tracer), path_(std::move(path)) {}
  // The child scope path()/child.
  Scope operator/(const std::string& child) const {
    return Scope(tracer_, path_.empty() ? child : path_ + "/" + child);
  }
  // The '/'-joined path ("" at the root).
  const std::string& path() const { return path_; }
  // The tracer the scope records into.
  Tracer* tracer() const { return tracer_; }
  // A parameter at path()/name with the given global shape and initializer
  // (whose with_partitioning spec, if any, becomes the parameter's layout).
  Param param(const std::string& name, std::vector<int64_t> shape, Initializer init,
              SrcLoc loc = Here::current()) const;

 private:
  Tracer* tracer_;
  std::string path_;
};

// The base of the DSL's layers (a marker: a module is ordinary C++ that makes
// its parameters in its constructor and traces ops in operator()).
struct Module {};

// A Linear's initializers (with_partitioning specs lay the parameters out).
struct LinearOptions {
  Initializer kernel_init = lecun_normal();  // the kernel's, (in, out)
  Initializer bias_init = zeros();           // the bias's, (out)
  bool use_bias = true;                      // false: no bias parameter
};

// y = x @ kernel (+ bias); kernel is (in, out).
class Linear : public Module {
 public:
  // The parameters `kernel` and `bias` under scope `s`.
  Linear(Scope s, int64_t in_features, int64_t out_features, LinearOptions options = {},
         SrcLoc loc = Here::current());
  // (..., in) -> (..., out).
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Param kernel;  // (in, out)
  Param bias;    // (out); empty without use_bias

 private:
  std::string path_;
};

// A LayerNorm's epsilon and initializers.
struct LayerNormOptions {
  double epsilon = 1e-6;            // added to the variance
  Initializer scale_init = ones();  // the scale's, (features)
  Initializer bias_init = zeros();  // the bias's, (features)
};

// Layer normalization over the last axis with a learned scale and bias
// (flax.nnx.LayerNorm; the op is layer_norm in ops.h).
class LayerNorm : public Module {
 public:
  // The parameters `scale` and `bias` (features) under scope `s`.
  LayerNorm(Scope s, int64_t features, LayerNormOptions options = {}, SrcLoc loc = Here::current());
  // (..., features) -> (..., features), in x's dtype (statistics in f32).
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Param scale;  // (features)
  Param bias;   // (features)

 private:
  std::string path_;
  double epsilon_;
};

}  // namespace sharc
