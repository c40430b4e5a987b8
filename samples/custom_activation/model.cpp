// A classifier whose activation is the user's own C++ function: swish_knee
// below is plain C++ on floats, with a branch; SHARC_ELEMENTWISE makes
// sharc-lift (run by sharc_add_program) lower it to sharc IR and write
// model.lifted.h, whose Tensor form the model calls like any DSL op. It is
// then differentiated (the branch becomes a select, which routes the
// gradient), partitioned with its neighbours and fused into their loops.
//
// The model: features -> hidden -> hidden -> classes, batch 64, AdamW, with
// logical axes as in samples/mlp_classifier (batch on 'data' or 'fsdp',
// hidden on 'model', large weights FSDP-sharded on 'fsdp').
#include "samples/custom_activation/model.h"

#include <cmath>

#include "dsl/sharc.h"
#include "dsl/train.h"
#include "model.lifted.h"

namespace custom_activation {

// Swish up to the knee, then a straight line of slope `tail` from the value
// swish has there: bounded growth for large inputs, smooth below.
SHARC_ELEMENTWISE inline float swish_knee(float x, float knee, float tail) {
  if (x <= knee) return x * sharc::scalar::sigmoid(x);
  const float at_knee = knee * sharc::scalar::sigmoid(knee);
  return at_knee + tail * (x - knee);
}

namespace {

using namespace sharc;

const LogicalRules kRules = {{"batch", "data"},
                             {"batch", "fsdp"},
                             {"hidden", "model"},
                             {"embed", std::nullopt},
                             {"classes", std::nullopt}};

struct Net : Module {
  Linear dense1, dense2, head;
  Net(Scope s, const Config& c)
      : dense1(s / "dense1", c.features, c.hidden,
               {.kernel_init = with_partitioning(lecun_normal(), P("embed", "hidden")),
                .bias_init = with_partitioning(zeros(), P("hidden"))}),
        dense2(s / "dense2", c.hidden, c.hidden,
               {.kernel_init = with_partitioning(lecun_normal(), P("hidden", "embed")),
                .bias_init = with_partitioning(zeros(), P("embed"))}),
        head(s / "head", c.hidden, c.classes,
             {.kernel_init = with_partitioning(lecun_normal(), P("embed", "classes")),
              .bias_init = with_partitioning(zeros(), P("classes"))}) {}
  Tensor operator()(Tensor x) const {
    x = swish_knee(dense1(x), kKnee, kTail);
    x = swish_knee(dense2(x), kKnee, kTail);
    return head(x);
  }
};

}  // namespace

void build_train(ProgramBuilder& b, const Config& c) {
  b.set_logical_rules(kRules);
  b.set_sharding_rules({FSDPRule("fsdp", 1024)});
  Net net(b.scope(), c);
  Tensor x = b.input("x", {c.batch, c.features}, P("batch", None));
  Tensor labels = b.input("labels", {c.batch}, P("batch"));
  train_step(
      b, {x, labels},
      [&](const std::vector<Tensor>& mb) { return softmax_cross_entropy(net(mb[0]), mb[1]); },
      adamw(Schedule::constant(kLearningRate), 1e-4));
}

}  // namespace custom_activation

SHARC_PROGRAM(act_train, b) {
  custom_activation::build_train(b, custom_activation::Config{});
}
