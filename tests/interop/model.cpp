// The programs tests/interop generates for Hugging Face checkpoints, sized
// by their config.json (sharc_add_program's HF_CONFIG, read by
// GPTConfig::from_hf and LlamaConfig::from_hf): a GPT-2's logits of a batch
// of 2 windows and its AdamW step with nanoGPT's decay mask, and a Llama's
// logits. "scan" (default 0) stacks the blocks.
#include "dsl/llama.h"
#include "dsl/sharc.h"
#include "dsl/train.h"

namespace {

using namespace sharc;

GPTConfig config(ProgramBuilder& b) {
  GPTConfig c = GPTConfig::from_hf(b.hf_config());
  c.scan = b.option("scan", 0) != 0;
  return c;
}

}  // namespace

SHARC_PROGRAM(hf_gpt2_logits, b) {
  const GPTConfig c = config(b);
  b.set_logical_rules(transformer_logical_rules(/*shard_batch=*/false));
  b.set_sharding_rules(transformer_sharding_rules());
  GPT model(b.scope(), c);
  b.output("logits", model(b.input("tokens", {2, c.context}, P("batch", "seq"))));
}

// torch.optim.AdamW with two parameter groups: decay on the matrices, none
// on biases, LayerNorm and the embeddings (make_fixtures.py's recipe).
SHARC_PROGRAM(hf_gpt2_train, b) {
  const GPTConfig c = config(b);
  b.set_logical_rules(transformer_logical_rules());
  b.set_sharding_rules(transformer_sharding_rules());
  GPT model(b.scope(), c);
  Tensor tokens = b.input("tokens", {2, c.context}, P("batch", "seq"));
  Tensor targets = b.input("targets", {2, c.context}, P("batch", "seq"));
  const Optimizer adamw_groups = adamw(Schedule::constant(1e-3), /*weight_decay=*/0.1, decay_mask(2, {"wte/*", "wpe/*"}),
                                       /*b1=*/0.9, /*b2=*/0.95, /*eps=*/1e-8);
  train_step(
      b, {tokens, targets},
      [&](const std::vector<Tensor>& mb) { return softmax_cross_entropy(model(mb[0]), mb[1]); }, adamw_groups);
}

SHARC_PROGRAM(hf_llama_logits, b) {
  LlamaConfig c = LlamaConfig::from_hf(b.hf_config());
  c.scan = b.option("scan", 0) != 0;
  b.set_logical_rules(transformer_logical_rules(/*shard_batch=*/false));
  b.set_sharding_rules(transformer_sharding_rules());
  Llama model(b.scope(), c);
  b.output("logits", model(b.input("tokens", {2, c.context}, P("batch", "seq"))));
}
