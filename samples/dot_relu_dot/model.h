// The seed's DotReluDot and LogicalDotReluDot (Flax NNX "Scale up on multiple
// devices" guide), written in the sharc DSL. Shared by the sample, the tests
// and the golden files.
#pragma once

#include "dsl/sharc.h"

namespace dot_relu_dot {

using namespace sharc;

struct DotReluDot : Module {
  Linear dot1;
  Param w2;
  DotReluDot(Scope s, int64_t depth)
      : dot1(s / "dot1", depth, depth,
             {.kernel_init = with_partitioning(lecun_normal(), P(None, "model")), .use_bias = false}),
        w2(s.param("w2", {depth, depth}, with_partitioning(lecun_normal(), P("model", None)))) {}

  Tensor operator()(Tensor x) const {
    Tensor y = relu(dot1(x));
    // In data parallelism the batch dimension is sharded on 'data'.
    y = with_sharding_constraint(y, P("data", "model"));
    return matmul(y, astype(w2, y.dtype()));  // w2 in the activations' type
  }
};

inline const LogicalRules kShardingRules = {{"batch", "data"}, {"hidden", "model"}, {"embed", std::nullopt}};

struct LogicalDotReluDot : Module {
  Linear dot1;
  Param w2;
  LogicalDotReluDot(Scope s, int64_t depth)
      : dot1(s / "dot1", depth, depth,
             {.kernel_init = with_metadata(lecun_normal(), P("embed", "hidden"), kShardingRules),
              .use_bias = false}),
        // No rules here: the program-wide rules apply (the seed adds them later).
        w2(s.param("w2", {depth, depth}, with_metadata(lecun_normal(), P("hidden", "embed")))) {}

  Tensor operator()(Tensor x) const {
    Tensor y = relu(dot1(x));
    y = with_sharding_constraint(y, P("data", None));
    return matmul(y, astype(w2, y.dtype()));  // w2 in the activations' type
  }
};

inline constexpr int64_t kDepth = 1024;
inline constexpr int64_t kBatch = 8;

// The programs: input x (batch, depth) sharded ('data', None), output y.
inline void build_dot_relu_dot(ProgramBuilder& b, int64_t depth = kDepth, int64_t batch = kBatch) {
  DotReluDot model(b.scope(), depth);
  b.output("y", model(b.input("x", {batch, depth}, P("data", None))));
}

inline void build_logical_dot_relu_dot(ProgramBuilder& b, int64_t depth = kDepth, int64_t batch = kBatch) {
  LogicalDotReluDot model(b.scope(), depth);
  b.output("y", model(b.input("x", {batch, depth}, P("data", None))));
}

}  // namespace dot_relu_dot
