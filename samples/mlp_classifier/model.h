// DistJax's SimpleClassifier in the sharc DSL: dense layers of width 512 with
// ReLU, trained with softmax cross-entropy. The model names its dimensions
// with logical axes only ("batch", "embed", "hidden", "classes"); the strategy
// (data parallel, FSDP, tensor parallel, or a mix) comes from the mesh alone,
// through kLogicalRules and kShardingRules below, exactly as Scalax does it:
//
//   --mesh data=8        data parallel: batch on 'data', weights replicated
//   --mesh fsdp=8        FSDP / ZeRO-3: batch and every large weight on 'fsdp'
//   --mesh model=8       tensor parallel: 'hidden' on 'model' (Megatron MLP)
//   --mesh data=4,model=2 / fsdp=4,model=2   the mixes
//   --mesh pipe=2        pipeline parallel: the two hidden layers on two
//                        stages, 1F1B over 4 micro-batches (mlp_train_pipelined)
//
// Rules that name an axis the mesh lacks are inactive on that mesh.
#pragma once

#include "dsl/sharc.h"
#include "dsl/train.h"

namespace mlp_classifier {

using namespace sharc;

struct Config {
  int64_t features = 784;  // 28x28 Fashion-MNIST images
  int64_t hidden = 512;
  int64_t classes = 10;
  int64_t batch = 128;
};

inline const LogicalRules kLogicalRules = {
    {"batch", "data"}, {"batch", "fsdp"}, {"hidden", "model"}, {"embed", std::nullopt}, {"classes", std::nullopt}};

// FSDP shards every weight of at least 1024 elements (Scalax's default of
// 2^20 would leave this small model replicated); biases stay replicated.
inline ShardingRules sharding_rules() { return {FSDPRule("fsdp", 1024)}; }

// Scalax's TreePathShardingRule: every parameter's layout from its path, the
// first pattern found (std::regex_search) winning. Here Megatron's MLP split
// on 'model' (dense1 by columns, dense2 by rows) with the other dimension of
// each kernel on 'fsdp'; strict: a parameter no pattern matches is an error.
inline ShardingRules path_rules() {
  return {PathRule({{"dense1/kernel", P("fsdp", "model")},
                    {"dense1/bias", P("model")},
                    {"dense2/kernel", P("model", "fsdp")},
                    {"dense3/kernel", P("fsdp", None)},
                    {"bias", P()}},
                   /*strict=*/true)};
}

struct MLP : Module {
  Linear dense1, dense2, dense3;
  MLP(Scope s, const Config& c)
      : dense1(s / "dense1", c.features, c.hidden,
               {.kernel_init = with_partitioning(lecun_normal(), P("embed", "hidden")),
                .bias_init = with_partitioning(zeros(), P("hidden"))}),
        dense2(s / "dense2", c.hidden, c.hidden,
               {.kernel_init = with_partitioning(lecun_normal(), P("hidden", "embed")),
                .bias_init = with_partitioning(zeros(), P("embed"))}),
        dense3(s / "dense3", c.hidden, c.classes,
               {.kernel_init = with_partitioning(lecun_normal(), P("embed", "classes")),
                .bias_init = with_partitioning(zeros(), P("classes"))}) {}

  // The two hidden layers are the pipelined stack (PipelineLayer: no effect
  // unless the program calls set_pipeline); the classifier head runs on the
  // last stage.
  Tensor operator()(Tensor x) const {
    {
      PipelineLayer layer(0);
      x = relu(dense1(x));
    }
    {
      PipelineLayer layer(1);
      x = relu(dense2(x));
    }
    return dense3(x);
  }
};

// Fraction of rows whose largest logit is the label's.
inline Tensor accuracy(Tensor logits, Tensor labels) {
  logits = astype(logits, DType::kF32);  // bf16 logits (mixed precision) compared in f32
  Tensor best = equal(logits, max(logits, {-1}, /*keepdims=*/true));
  Tensor hit = sum(mul(best, one_hot(labels, logits.dim(-1))), {-1});
  return mean(minimum(hit, full({}, 1.0)), {0});
}

// One AdamW training step on a batch of images and labels. Outputs: loss,
// grad_norm, lr, accuracy (of this batch, before the update). `rules` replace
// the sample's sharding rules (mlp_train_path_rules passes path rules).
inline void build_train(ProgramBuilder& b, const Config& c, const Optimizer& opt, const TrainOptions& o = {},
                        ShardingRules rules = sharding_rules()) {
  b.set_logical_rules(kLogicalRules);
  b.set_sharding_rules(std::move(rules));
  MLP model(b.scope(), c);
  Tensor images = b.input("images", {c.batch, c.features}, P("batch", None));
  Tensor labels = b.input("labels", {c.batch}, P("batch"));
  bool first = true;
  train_step(
      b, {images, labels},
      [&](const std::vector<Tensor>& mb) {
        Tensor logits = model(mb[0]);
        if (first) b.output("accuracy", accuracy(logits, mb[1]));
        first = false;
        return softmax_cross_entropy(logits, mb[1]);
      },
      opt, o);
}

// Evaluation: logits for a batch (the parameters are copied in from training).
inline void build_eval(ProgramBuilder& b, const Config& c) {
  b.set_logical_rules(kLogicalRules);
  b.set_sharding_rules(sharding_rules());
  MLP model(b.scope(), c);
  Tensor images = b.input("images", {c.batch, c.features}, P("batch", None));
  b.output("logits", model(images));
}

// The pipelined training step's schedule (mlp_train_pipelined): the batch of
// 128 in 4 micro-batches of 32, 1F1B.
inline Pipeline pipeline() { return {.axis = "pipe", .microbatches = 4, .schedule = "1f1b"}; }

// The sample's default run (samples/mlp_classifier/main.cpp) is kDefaultSteps
// steps of 128 examples, about 1.3 epochs of Fashion-MNIST: 20 steps of
// warmup to 2e-3, then cosine decay to 1e-4 at exactly the last step.
inline constexpr int64_t kDefaultSteps = 600;
inline Optimizer default_optimizer() {
  return adamw(Schedule::warmup_cosine(2e-3, 20, kDefaultSteps, 1e-4), 1e-4);
}

}  // namespace mlp_classifier
