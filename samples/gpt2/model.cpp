// The GPT-2 sample's programs, registered for the generator: one training
// step and the sampling forward pass. Which strategy they run is decided by
// the MESH each sharc_add_program call gives (see model.h); the depth, by
// the generation-time option "layers" (default kLayers); "scan" (default 1)
// scans the blocks (stacked parameters, their code written once; 0 unrolls
// them, model.h's config); training programs also read "remat" (model.h's
// train_options; default 0, save everything) and "attention_dropout"
// (default 1; 0 in the BACKEND cuda programs, model.h's config);
// gpt2_train also "bf16" (default 0; 1: bf16 mixed precision) and "ring"
// (default 0, the size threshold decides; 1: every tensor-parallel dot that
// can runs as a ring, its transfers beside its GEMMs). The pipelined step
// keeps its blocks unrolled: its stages are whole blocks.
#include "samples/gpt2/model.h"

SHARC_PROGRAM(gpt2_train, b) {
  if (b.option("bf16", 0) != 0) b.set_dtype(sharc::DType::kBF16);  // bf16 compute, f32 master weights
  if (b.option("ring", 0) != 0) b.set_collective_matmul(sharc::CollectiveMatmul::kAlways);
  const gpt2::GPTConfig c =
      gpt2::config(b.option("layers", gpt2::kLayers), b.option("scan", 1), b.option("attention_dropout", 1));
  gpt2::build_train(b, c, gpt2::kTrainBatch, gpt2::default_optimizer(), gpt2::train_options(c, b.option("remat", 0)));
}

// The same step pipelined (--mesh pipe=2,data=2,model=2): the blocks are the
// pipelined layers (GPT marks them), set_pipeline says how.
SHARC_PROGRAM(gpt2_train_pipelined, b) {
  b.set_pipeline(gpt2::pipeline());
  const gpt2::GPTConfig c = gpt2::config(b.option("layers", gpt2::kLayers), 0, b.option("attention_dropout", 1));
  gpt2::build_train(b, c, gpt2::kTrainBatch, gpt2::default_optimizer(), gpt2::train_options(c, b.option("remat", 0)));
}

// GPT-2 124M (model.h's config_124m; gpt2_main --config gpt2-124m): one
// training step on "batch" windows (default 4) of "context" tokens (default
// 1024), scanned blocks; "layers" (default 12) and "context" shrink it for
// tests; "bf16" (default 0; 1: bf16 compute on f32 master weights).
SHARC_PROGRAM(gpt2_124m_train, b) {
  if (b.option("bf16", 0) != 0) b.set_dtype(sharc::DType::kBF16);
  const gpt2::GPTConfig c = gpt2::config_124m(b.option("layers", 12), b.option("context", 1024));
  gpt2::build_train(b, c, b.option("batch", 4), gpt2::optimizer_124m(), {.clip_global_norm = 1.0});
}

SHARC_PROGRAM(gpt2_logits, b) {
  gpt2::build_logits(b, gpt2::config(b.option("layers", gpt2::kLayers), b.option("scan", 1)), gpt2::kSampleBatch);
}

// A GPT of any size, for the planner (MESH auto; docs/guide/planning.md plans
// GPT-2 124M, 1.3B and 7B with it on 8 to 512 H100s). Options: "layers",
// "embed", "heads", "context" (default GPT-2 124M's 12, 768, 12, 1024),
// "vocab" (default 50304), "batch" (windows per step, default 512),
// "microbatches" (gradient accumulation, or the pipeline's micro-batches;
// default 1), "bf16" (default 1: bf16 compute on f32 master weights) and
// "pipelined" (default 0; 1: the blocks unrolled and pipelined over 'pipe').
// Blocks scanned unless pipelined; no dropout.
SHARC_PROGRAM(gpt_sized_train, b) {
  if (b.option("bf16", 1) != 0) b.set_dtype(sharc::DType::kBF16);
  const int64_t microbatches = b.option("microbatches", 1);
  const bool pipelined = b.option("pipelined", 0) != 0;
  gpt2::GPTConfig c = gpt2::config_124m(b.option("layers", 12), 1);
  c.context = b.option("context", 1024);
  c.embed = b.option("embed", 768);
  c.heads = b.option("heads", 12);
  c.vocab = b.option("vocab", gpt2::k124MVocab);
  c.scan = !pipelined;
  sharc::TrainOptions o{.clip_global_norm = 1.0};
  if (pipelined)
    b.set_pipeline({.axis = "pipe", .microbatches = static_cast<int>(microbatches), .schedule = "1f1b"});
  else
    o.accumulate_steps = static_cast<int>(microbatches);
  gpt2::build_train(b, c, b.option("batch", 512), gpt2::optimizer_124m(), o);
}
