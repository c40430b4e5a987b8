// Modules and parameters. A Scope names parameters by their '/'-joined path
// ("dot1/kernel"), which keys their random initialisation and, later, the
// sharding rules applied from outside the model. Linear and LayerNorm are built
// from the primitive ops, like flax.nnx.Linear / nnx.LayerNorm.
#pragma once

#include <string>

#include "ir/initializers.h"
#include "dsl/ops.h"

namespace sharc {

class Scope {
 public:
  explicit Scope(Tracer* tracer, std::string path = "") : tracer_(tracer), path_(std::move(path)) {}
  Scope operator/(const std::string& child) const {
    return Scope(tracer_, path_.empty() ? child : path_ + "/" + child);
  }
  const std::string& path() const { return path_; }
  Tracer* tracer() const { return tracer_; }
  // A parameter at path()/name with the given global shape and initializer
  // (whose with_partitioning spec, if any, becomes the parameter's layout).
  Param param(const std::string& name, std::vector<int64_t> shape, Initializer init,
              SrcLoc loc = Here::current()) const;

 private:
  Tracer* tracer_;
  std::string path_;
};

struct Module {};

struct LinearOptions {
  Initializer kernel_init = lecun_normal();
  Initializer bias_init = zeros();
  bool use_bias = true;
};

// y = x @ kernel (+ bias); kernel is (in, out).
class Linear : public Module {
 public:
  Linear(Scope s, int64_t in_features, int64_t out_features, LinearOptions options = {},
         SrcLoc loc = Here::current());
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Param kernel, bias;

 private:
  std::string path_;
};

struct LayerNormOptions {
  double epsilon = 1e-6;
  Initializer scale_init = ones();
  Initializer bias_init = zeros();
};

class LayerNorm : public Module {
 public:
  LayerNorm(Scope s, int64_t features, LayerNormOptions options = {}, SrcLoc loc = Here::current());
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Param scale, bias;

 private:
  std::string path_;
  double epsilon_;
};

}  // namespace sharc
