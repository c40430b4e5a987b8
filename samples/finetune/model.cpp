// The fine-tuning sample's programs, generated for the GPT-2 folder that
// sharc_add_program's HF_CONFIG names (model.h has the recipe; the options
// batch, context, steps and lr_millionths are CMakeLists.txt's cache
// variables; model_axis is the mesh's 'model' size).
#include "samples/finetune/model.h"

namespace {

finetune::Recipe recipe(sharc::ProgramBuilder& b) {
  finetune::Recipe r;
  r.batch = b.option("batch", r.batch);
  r.context = b.option("context", r.context);
  r.steps = b.option("steps", r.steps);
  r.peak_lr = static_cast<double>(b.option("lr_millionths", 1000)) * 1e-6;
  r.model_axis = b.option("model_axis", 1);
  return r;
}

// The checkpoint's GPT with its blocks scanned (stacked parameters, the
// block's code written once: compile time does not grow with the depth).
sharc::GPTConfig config(sharc::ProgramBuilder& b) {
  sharc::GPTConfig c = sharc::GPTConfig::from_hf(b.hf_config());
  c.scan = true;
  return c;
}

}  // namespace

SHARC_PROGRAM(finetune_train, b) { finetune::build_train(b, config(b), recipe(b)); }

SHARC_PROGRAM(finetune_logits, b) { finetune::build_logits(b, config(b), recipe(b)); }
