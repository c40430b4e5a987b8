// The pipeline suites' model: an input projection, `layers` residual MLP
// blocks (Megatron's pair: up on 'hidden', down back to 'embed'), each in
// its PipelineLayer, and a classifier head with softmax cross-entropy. Like
// the MLP sample it names only logical axes, so one program runs on every
// mesh: 'batch' on 'data' and 'fsdp', 'hidden' on 'model', large weights on
// 'fsdp'. The pipeline comes from set_pipeline; the model code does not
// change with the mesh or the schedule.
#pragma once

#include <string>
#include <vector>

#include "dsl/sharc.h"
#include "dsl/train.h"

namespace sharc::pipeline_test {

struct StackConfig {
  int layers = 8;
  int64_t features = 12, embed = 16, hidden = 32, classes = 5;
  int64_t microbatch = 4;  // examples per micro-batch
  Pipeline pipeline{.axis = "pipe", .microbatches = 4, .schedule = "1f1b"};
  int64_t batch() const { return microbatch * pipeline.microbatches; }
};

inline const LogicalRules kStackRules = {{"batch", "data"},   {"batch", "fsdp"},     {"hidden", "model"},
                                         {"embed", std::nullopt}, {"classes", std::nullopt}};

struct Stack : Module {
  Linear in, head;
  std::vector<Linear> up, down;

  Stack(Scope s, const StackConfig& c)
      : in(s / "in", c.features, c.embed,
           {.kernel_init = with_partitioning(lecun_normal(), P(None, "embed")),
            .bias_init = with_partitioning(zeros(), P("embed"))}),
        head(s / "head", c.embed, c.classes,
             {.kernel_init = with_partitioning(lecun_normal(), P("embed", "classes")),
              .bias_init = with_partitioning(zeros(), P("classes"))}) {
    for (int l = 0; l < c.layers; ++l) {
      const std::string name = "block" + std::to_string(l);
      up.emplace_back(s / name / "up", c.embed, c.hidden,
                      LinearOptions{.kernel_init = with_partitioning(lecun_normal(), P("embed", "hidden")),
                                    .bias_init = with_partitioning(zeros(), P("hidden"))});
      down.emplace_back(s / name / "down", c.hidden, c.embed,
                        LinearOptions{.kernel_init = with_partitioning(lecun_normal(), P("hidden", "embed")),
                                      .bias_init = with_partitioning(zeros(), P("embed"))});
    }
  }

  Tensor operator()(Tensor x) const {
    Tensor h = tanh(in(x));
    for (size_t l = 0; l < up.size(); ++l) {
      PipelineLayer layer(static_cast<int>(l));
      h = add(h, down[l](relu(up[l](h))));
    }
    return head(h);
  }
};

// One AdamW step over the pipelined stack. Outputs: loss, grad_norm, lr.
inline void build_stack_train(ProgramBuilder& b, const StackConfig& c) {
  b.set_logical_rules(kStackRules);
  b.set_sharding_rules({FSDPRule("fsdp", 64)});
  b.set_pipeline(c.pipeline);
  Stack model(b.scope(), c);
  Tensor x = b.input("x", {c.batch(), c.features}, P("batch", None));
  Tensor labels = b.input("labels", {c.batch()}, P("batch"));
  train_step(
      b, {x, labels},
      [&](const std::vector<Tensor>& mb) { return softmax_cross_entropy(model(mb[0]), mb[1]); },
      adamw(Schedule::constant(1e-2), 1e-2), {.clip_global_norm = 1.0});
}

}  // namespace sharc::pipeline_test
