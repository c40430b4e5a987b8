// A character-level GPT-2 in the sharc DSL (dsl/transformer.h), small enough
// to train on a laptop CPU: 2 layers, 8 heads, width 64, context 64. The model
// names its dimensions with logical axes only; the strategy comes from the
// mesh each sharc_add_program call gives, through transformer_logical_rules()
// and transformer_sharding_rules():
//
//   data=8            data parallel: batch on 'data', weights replicated
//   model=8           Megatron tensor parallel: heads, MLP units, vocab on 'model'
//   data=2,model=4 / data=4,model=2   the mixes
//   fsdp=4,model=2    FSDP (batch and large weights on 'fsdp') x TP
//   pipe=2,data=2,model=2   pipeline (one block per stage, 1F1B over 8
//                     micro-batches) x data x tensor parallel (gpt2_train_pipelined)
//
// Two programs: gpt2_train (one AdamW step with warmup + cosine decay, dropout
// on) and gpt2_logits (the forward pass without dropout, for sampling; the
// batch of 1 is replicated, so every mesh that can train can also sample).
#pragma once

#include "dsl/sharc.h"
#include "dsl/train.h"

namespace gpt2 {

using namespace sharc;

// The sample's dimensions: change them here. kHeads and kVocab must divide by
// the 'model' axis of every mesh the sample is built for (8); the GPL's
// character vocabulary is 76 symbols, and 96 leaves room for other texts.
constexpr int64_t kLayers = 2;
constexpr int64_t kHeads = 8;
constexpr int64_t kEmbed = 64;  // 8 per head
constexpr int64_t kContext = 64;
constexpr int64_t kVocab = 96;
constexpr double kDropout = 0.1;
constexpr int64_t kTrainBatch = 16;
constexpr int64_t kSampleBatch = 1;

// The pipelined training step's schedule (gpt2_train_pipelined): the batch of
// 16 windows in 8 micro-batches of 2, 1F1B, over the 'pipe' axis.
constexpr int kPipelineMicrobatches = 8;
constexpr const char* kPipelineSchedule = "1f1b";
inline Pipeline pipeline() {
  return {.axis = "pipe", .microbatches = kPipelineMicrobatches, .schedule = kPipelineSchedule};
}

// `layers`: the programs read it from the generation-time option "layers"
// (sharc_add_program's OPTIONS; the CMake cache variable SHARC_GPT2_LAYERS).
// `scan` (option "scan"): 1 scans the blocks, whose parameters are then
// stacked under "h/..." with a replicated layer axis (dsl/layers.h); the
// same numbers as the unrolled default, 0.
// `attention_dropout` (option "attention_dropout"): 1 puts kDropout on the
// attention weights as on the residual stream; 0 none there, as in the
// BACKEND cuda programs, whose attention runs as the GPU kernel, which has
// no dropout (codegen/kernel_select.h).
inline GPTConfig config(int64_t layers = kLayers, int64_t scan = 0, int64_t attention_dropout = 1,
                        SrcLoc loc = Here::current()) {
  if (scan != 0 && scan != 1)
    user_error(loc, "gpt2: option scan=" + std::to_string(scan) + " is not 0 (unrolled blocks) or 1 (scanned)");
  if (attention_dropout != 0 && attention_dropout != 1)
    user_error(loc, "gpt2: option attention_dropout=" + std::to_string(attention_dropout) +
                        " is not 1 (dropout on the attention weights) or 0 (none there)");
  GPTConfig c;
  c.scan = scan == 1;
  c.vocab = kVocab;
  c.context = kContext;
  c.embed = kEmbed;
  c.heads = kHeads;
  c.layers = layers;
  c.dropout = kDropout;
  if (attention_dropout == 0) c.attention_dropout = 0.0;
  return c;
}

// GPT-2 124M (the GPU-speed issue's configuration, and llm.c's): 12 layers,
// 12 heads, width 768, context 1024, the GPT-2 BPE vocabulary of 50257 padded
// to 50304 (a multiple of 128, as llm.c and nanoGPT pad it), tied
// embeddings, no dropout (the peers' speed runs train without it). Its 124M
// parameters (124,475,904 with the padded vocabulary) are made once, stacked
// under "h/..." by a scan (dsl/layers.h): the generated step is the same
// size at any depth. `layers` and `context` are generation-time options so
// that a test can build the same model smaller.
inline constexpr int64_t k124MVocab = 50304;
inline GPTConfig config_124m(int64_t layers = 12, int64_t context = 1024, SrcLoc loc = Here::current()) {
  if (layers < 1 || context < 1 || context > 1024)
    user_error(loc, "gpt2-124m: layers=" + std::to_string(layers) + ", context=" + std::to_string(context) +
                        ": layers must be at least 1 and context from 1 to 1024");
  GPTConfig c;
  c.scan = true;
  c.vocab = k124MVocab;
  c.context = context;
  c.embed = 768;
  c.heads = 12;
  c.layers = layers;
  c.dropout = 0.0;
  return c;
}

// The optimizer of llm.c's GPT-2 124M runs (AdamW at a peak of 6e-4, weight
// decay 0.1, betas 0.9 and 0.95, clipping at 1), with a short warmup (10
// steps, not its 700) so that a short run already moves the loss, and a
// cosine decay to 6e-5 at step 5000.
inline Optimizer optimizer_124m() {
  return adamw(Schedule::warmup_cosine(/*peak=*/6e-4, /*warmup_steps=*/10, /*decay_steps=*/5000,
                                       /*end=*/6e-5),
               /*weight_decay=*/0.1, /*b1=*/0.9, /*b2=*/0.95);
}

// AdamW, learning rate warmed up over 20 steps to 3e-3 and cosine-decayed to
// 3e-4 at step 600 (gpt2_main's default run), global-norm clipping at 1.
inline Optimizer default_optimizer() {
  return adamw(Schedule::warmup_cosine(/*peak=*/3e-3, /*warmup_steps=*/20, /*decay_steps=*/600,
                                       /*end=*/3e-4),
               /*weight_decay=*/1e-2);
}

// The training options: clipping at 1, and rematerialization of every block
// ("h0", "h1", ..., or the scanned "h") by `remat`, the generation-time
// option "remat": 0 saves every activation the backward pass reads, 1
// recomputes each block from its input before its backward pass
// (ir::RematPolicy::kRecomputeAll), 2 saves only the blocks' matmul outputs
// (kSaveDots).
inline TrainOptions train_options(const GPTConfig& c, int64_t remat = 0, SrcLoc loc = Here::current()) {
  TrainOptions o{.clip_global_norm = 1.0};
  if (remat < 0 || remat > 2)
    user_error(loc, "gpt2: option remat=" + std::to_string(remat) +
                        " is not 0 (save all), 1 (recompute each block) or 2 (save matmul outputs)");
  if (remat == 0) return o;
  const RematPolicy policy = remat == 1 ? RematPolicy::kRecomputeAll : RematPolicy::kSaveDots;
  if (c.scan) {
    o.remat.push_back(sharc::remat("h", policy, loc));
    return o;
  }
  for (int64_t i = 0; i < c.layers; ++i) o.remat.push_back(sharc::remat("h" + std::to_string(i), policy, loc));
  return o;
}

// One training step on (batch, context) token windows and their next tokens.
// Inputs: tokens, targets (float ids), dropout_seed (a scalar that draws the dropout
// masks). Outputs: loss, grad_norm, lr.
inline void build_train(ProgramBuilder& b, const GPTConfig& c, int64_t batch, const Optimizer& opt,
                        const TrainOptions& o = {.clip_global_norm = 1.0}) {
  b.set_logical_rules(transformer_logical_rules());
  b.set_sharding_rules(transformer_sharding_rules());
  GPT model(b.scope(), c);
  Tensor tokens = b.input("tokens", {batch, c.context}, P("batch", "seq"));
  Tensor targets = b.input("targets", {batch, c.context}, P("batch", "seq"));
  Tensor seed = b.input("dropout_seed", {});
  train_step(
      b, {tokens, targets},
      [&](const std::vector<Tensor>& mb) {
        return softmax_cross_entropy(model(mb[0], seed), mb[1]);
      },
      opt, o);
}

// Logits (batch, context, vocab) for token windows, dropout off; the
// parameters are copied in from a training program.
inline void build_logits(ProgramBuilder& b, const GPTConfig& c, int64_t batch) {
  b.set_logical_rules(transformer_logical_rules(/*shard_batch=*/false));
  b.set_sharding_rules(transformer_sharding_rules());
  GPT model(b.scope(), c);
  b.output("logits", model(b.input("tokens", {batch, c.context}, P("batch", "seq"))));
}

}  // namespace gpt2
