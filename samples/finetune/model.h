// The fine-tuning sample's programs (model.cpp registers them; main.cpp
// traces the same step for its oracle check): a GPT-2 sized by a Hugging
// Face config.json, and the recipe people fine-tune it with.
//
// The recipe (Hugging Face Trainer's and nanoGPT's): AdamW, b2 0.95, weight
// decay 0.1 on the matrices but not on biases, LayerNorm or the embeddings
// (decay_mask); the global gradient norm clipped at 1; the learning rate
// warmed up linearly over the first tenth of `steps`, then decayed along a
// cosine to a tenth of its peak. Labels of -100 (the padding after the end
// of the text) count for nothing (IgnoreLabel). Dropout as the config says.
#pragma once

#include <algorithm>
#include <cstdint>

#include "dsl/sharc.h"
#include "dsl/train.h"

namespace finetune {

using namespace sharc;

// The generation-time options (samples/finetune/CMakeLists.txt's cache
// variables): windows per step, tokens per window (0: the model's
// n_positions), the schedule's length and its peak learning rate; and the
// size of the mesh's 'model' axis (1 without one), which CMakeLists.txt
// reads off the mesh.
struct Recipe {
  int64_t batch = 8;
  int64_t context = 0;
  int64_t steps = 100;
  double peak_lr = 1e-3;
  int64_t model_axis = 1;
};

// transformer_logical_rules, except that a vocabulary the 'model' axis does
// not divide is replicated: GPT-2's 50257 tokens on model=2. Each device
// then holds the whole embedding and computes every logit; the blocks are
// still split.
inline LogicalRules logical_rules(const GPTConfig& c, const Recipe& r) {
  LogicalRules rules = transformer_logical_rules();
  if (c.vocab % r.model_axis != 0)
    for (LogicalRule& rule : rules)
      if (rule.logical == "vocab") rule.mesh_axis = std::nullopt;
  return rules;
}

// The label that counts for nothing: the padding of the last window.
constexpr int64_t kIgnoredLabel = -100;

inline Optimizer optimizer(const Recipe& r) {
  const int64_t warmup = std::max<int64_t>(1, r.steps / 10);
  return adamw(Schedule::warmup_cosine(r.peak_lr, warmup, std::max<int64_t>(1, r.steps - warmup), r.peak_lr / 10),
               /*weight_decay=*/0.1, decay_mask(2, {"wte/*", "wpe/*"}), /*b1=*/0.9, /*b2=*/0.95, /*eps=*/1e-8);
}

// One AdamW step on "tokens" and their next tokens "labels" (batch, context),
// "dropout_seed" drawing the dropout masks.
inline void build_train(ProgramBuilder& b, const GPTConfig& c, const Recipe& r) {
  b.set_logical_rules(logical_rules(c, r));
  b.set_sharding_rules(transformer_sharding_rules());
  GPT model(b.scope(), c);
  const int64_t context = r.context > 0 ? r.context : c.context;
  Tensor tokens = b.input("tokens", {r.batch, context}, P("batch", "seq"));
  Tensor labels = b.input("labels", {r.batch, context}, P("batch", "seq"));
  Tensor seed = b.input("dropout_seed", {});
  train_step(
      b, {tokens, labels},
      [&](const std::vector<Tensor>& mb) {
        return softmax_cross_entropy(model(mb[0], seed), mb[1], IgnoreLabel{kIgnoredLabel});
      },
      optimizer(r), {.clip_global_norm = 1.0});
}

// The logits (batch, context, vocab) of token windows, dropout off: the
// held-out loss and sampling.
inline void build_logits(ProgramBuilder& b, const GPTConfig& c, const Recipe& r) {
  b.set_logical_rules(transformer_logical_rules(/*shard_batch=*/false));
  b.set_sharding_rules(transformer_sharding_rules());
  GPT model(b.scope(), c);
  const int64_t context = r.context > 0 ? r.context : c.context;
  b.output("logits", model(b.input("tokens", {r.batch, context}, P("batch", "seq"))));
}

}  // namespace finetune
