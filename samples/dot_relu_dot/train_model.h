// DotReluDot trained with the Flax guide's loop (optax.adam(1e-3) on the mean
// squared error) on any strategy's mesh: the sample's --train mode and its
// generator programs dot_relu_dot_train_<mesh>. It lives beside model.h, not
// in it, so the forward models' source lines, which the golden files quote,
// never move.
//
// DotReluDot names the mesh axes 'data' and 'model' directly, which is an
// error on a mesh that lacks one of them (data=8, fsdp=8, model=8), and
// LogicalDotReluDot still pins its activation to P("data", None). The trained
// variant below is the same computation with logical names everywhere
// (kernel ("embed", "hidden"), w2 ("hidden", "embed"), activation ("batch",
// "hidden"), input and label ("batch", None)); kTrainRules maps 'batch' to
// 'data' or 'fsdp', whichever the mesh has, and 'hidden' to 'model', and
// FSDPRule adds 'fsdp' to each 1024x1024 weight on a mesh with that axis. So
// data=2,model=4 gives exactly the seed's layouts, and data=8 / fsdp=8 /
// model=8 / data=4,model=2 / fsdp=4,model=2 give DP / FSDP / TP and the mixes.
#pragma once

#include "dsl/sharc.h"
#include "dsl/train.h"
#include "samples/dot_relu_dot/model.h"

namespace dot_relu_dot {

inline const LogicalRules kTrainRules = {
    {"batch", "data"}, {"batch", "fsdp"}, {"hidden", "model"}, {"embed", std::nullopt}};

// Every 1024x1024 weight (2^20 elements, FSDPRule's default threshold).
inline ShardingRules train_sharding_rules() {
  return {FSDPRule("fsdp", int64_t{1} << 20)};
}

struct PortableDotReluDot : Module {
  Linear dot1;
  Param w2;
  PortableDotReluDot(Scope s, int64_t depth)
      : dot1(s / "dot1", depth, depth,
             {.kernel_init = with_partitioning(lecun_normal(), P("embed", "hidden")),
              .use_bias = false}),
        w2(s.param("w2", {depth, depth}, with_partitioning(lecun_normal(), P("hidden", "embed")))) {
  }

  Tensor operator()(Tensor x) const {
    Tensor y = relu(dot1(x));
    y = with_sharding_constraint(y, P("batch", "hidden"));
    return matmul(y, astype(w2, y.dtype()));  // w2 in the activations' type
  }
};

// One Adam step (optax.adam(1e-3)) on loss = mean((model(x) - label)^2).
// Inputs x and label (batch, depth) sharded ("batch", None); outputs loss,
// grad_norm and lr (train_step's).
inline void build_dot_relu_dot_train(ProgramBuilder& b, int64_t depth = kDepth,
                                     int64_t batch = kBatch) {
  b.set_logical_rules(kTrainRules);
  b.set_sharding_rules(train_sharding_rules());
  PortableDotReluDot model(b.scope(), depth);
  Tensor x = b.input("x", {batch, depth}, P("batch", None));
  Tensor label = b.input("label", {batch, depth}, P("batch", None));
  train_step(
      b, {x, label},
      [&](const std::vector<Tensor>& mb) { return mean_squared_error(model(mb[0]), mb[1]); },
      adam(Schedule::constant(1e-3)));
}

}  // namespace dot_relu_dot
