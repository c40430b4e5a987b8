// GPTConfig::from_hf: a GPT sized and configured as a Hugging Face GPT-2
// checkpoint (runtime/hf_config.h reads and checks the file).
#include "dsl/transformer.h"
#include "runtime/hf_config.h"

namespace sharc {

GPTConfig GPTConfig::from_hf(const std::string& path, SrcLoc loc) {
  interop::HfConfig hf;
  try {
    hf = interop::read_hf_config(path);
  } catch (const interop::InteropError& e) {
    user_error(loc, e.what());
  }
  const std::string file = hf.file.string();
  if (hf.architecture != interop::Architecture::kGpt2)
    user_error(loc, file + ": the model is " + interop::architecture_name(hf.architecture) +
                        ", but GPTConfig::from_hf reads GPT-2 configs (model_type \"gpt2\")");
  if (hf.mlp_hidden % hf.embed != 0)
    user_error(loc, file + ": \"n_inner\" is " + std::to_string(hf.mlp_hidden) +
                        ", not a multiple of n_embd " + std::to_string(hf.embed) + " (sharc's MLP is mlp_ratio * embed wide)");
  if (hf.embed_dropout != hf.resid_dropout)
    user_error(loc, file + ": \"embd_pdrop\" is " + std::to_string(hf.embed_dropout) + " and \"resid_pdrop\" " +
                        std::to_string(hf.resid_dropout) + ", but sharc's GPT has one rate for both");
  GPTConfig c;
  c.vocab = hf.vocab;
  c.context = hf.context;
  c.embed = hf.embed;
  c.heads = hf.heads;
  c.layers = hf.layers;
  c.mlp_ratio = hf.mlp_hidden / hf.embed;
  c.dropout = hf.resid_dropout;
  c.attention_dropout = hf.attention_dropout;
  c.epsilon = hf.epsilon;
  c.tie_embeddings = hf.tie_embeddings;
  return c;
}

}  // namespace sharc
