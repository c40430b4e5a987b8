// The fine-tuning sample's programs, generated for the GPT-2 folder that
// sharc_add_program's HF_CONFIG names (model.h has the recipe; the options
// batch, context, steps and lr_millionths are CMakeLists.txt's cache
// variables).
#include "samples/finetune/model.h"

namespace {

finetune::Recipe recipe(sharc::ProgramBuilder& b) {
  finetune::Recipe r;
  r.batch = b.option("batch", r.batch);
  r.context = b.option("context", r.context);
  r.steps = b.option("steps", r.steps);
  r.peak_lr = static_cast<double>(b.option("lr_millionths", 1000)) * 1e-6;
  return r;
}

}  // namespace

SHARC_PROGRAM(finetune_train, b) {
  finetune::build_train(b, sharc::GPTConfig::from_hf(b.hf_config()), recipe(b));
}

SHARC_PROGRAM(finetune_logits, b) {
  finetune::build_logits(b, sharc::GPTConfig::from_hf(b.hf_config()), recipe(b));
}
