// GPTConfig::from_hf and LlamaConfig::from_hf: models sized and configured
// as Hugging Face checkpoints (runtime/hf_config.h reads and checks the
// file; its errors become errors at the user's line).
#include "dsl/llama.h"
#include "dsl/transformer.h"
#include "runtime/hf_config.h"

namespace sharc {

namespace {

interop::HfConfig read_at(const std::string& path, const SrcLoc& loc) {
  try {
    return interop::read_hf_config(path);
  } catch (const interop::InteropError& e) {
    user_error(loc, e.what());
  }
}

}  // namespace

GPTConfig GPTConfig::from_hf(const std::string& path, SrcLoc loc) {
  const interop::HfConfig hf = read_at(path, loc);
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

LlamaConfig LlamaConfig::from_hf(const std::string& path, SrcLoc loc) {
  const interop::HfConfig hf = read_at(path, loc);
  if (hf.architecture != interop::Architecture::kLlama)
    user_error(loc, hf.file.string() + ": the model is " + interop::architecture_name(hf.architecture) +
                        ", but LlamaConfig::from_hf reads Llama configs (model_type \"llama\")");
  if (hf.attention_dropout != 0.0)
    user_error(loc, hf.file.string() + ": \"attention_dropout\" is " + std::to_string(hf.attention_dropout) +
                        ", but sharc's Llama has no dropout");
  LlamaConfig c;
  c.vocab = hf.vocab;
  c.context = hf.context;
  c.embed = hf.embed;
  c.heads = hf.heads;
  c.kv_heads = hf.kv_heads;
  c.layers = hf.layers;
  c.mlp_hidden = hf.mlp_hidden;
  c.epsilon = hf.epsilon;
  c.rope_theta = hf.rope_theta;
  c.tie_embeddings = hf.tie_embeddings;
  return c;
}

}  // namespace sharc
