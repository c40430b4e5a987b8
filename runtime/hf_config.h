// A Hugging Face model's config.json, read and checked: what sharc needs of
// it to generate a program for that checkpoint (GPTConfig::from_hf, the
// generation-time option HF_CONFIG) and to move weights between the two
// (runtime/interop.h). Two architectures are known: GPT-2
// (model_type "gpt2", GPT2LMHeadModel) and Llama-style decoders
// (model_type "llama", LlamaForCausalLM).
//
// Reading refuses what sharc would compute differently rather than guess:
// an activation other than GPT-2's tanh GELU ("gelu_new"), attention
// scaled by layer index, a width the heads do not divide. Every error names
// the file and the key. Writing gives the keys transformers reads, in a
// fixed order, so an export's config.json is the same bytes every time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

namespace sharc::interop {

// A checkpoint folder, config or tensor file that sharc cannot read or
// write as asked; the message names the file and, where one is at fault,
// the key or tensor.
class InteropError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The architectures sharc maps onto its own modules.
enum class Architecture { kGpt2, kLlama };
// "gpt2", "llama": config.json's model_type.
const char* architecture_name(Architecture a);

// The sizes and options of a checkpoint, in sharc's words (config.json's
// key in each comment: GPT-2's, then Llama's).
struct HfConfig {
  Architecture architecture = Architecture::kGpt2;
  int64_t vocab = 0;       // vocab_size
  int64_t context = 0;     // n_positions / max_position_embeddings
  int64_t embed = 0;       // n_embd / hidden_size
  int64_t heads = 0;       // n_head / num_attention_heads
  int64_t kv_heads = 0;    // = heads / num_key_value_heads (fewer: grouped-query attention)
  int64_t layers = 0;      // n_layer / num_hidden_layers
  int64_t mlp_hidden = 0;  // n_inner (null: 4 * n_embd) / intermediate_size
  double epsilon = 1e-5;   // layer_norm_epsilon / rms_norm_eps
  bool tie_embeddings = true;  // tie_word_embeddings
  // GPT-2's dropout rates (resid_pdrop, embd_pdrop, attn_pdrop); Llama's
  // attention_dropout in attention_dropout, 0 elsewhere.
  double resid_dropout = 0.0, embed_dropout = 0.0, attention_dropout = 0.0;
  double rope_theta = 10000.0;  // Llama's rotary base
  // Keys that do not change what the model computes but that generation
  // reads (bos_token_id, eos_token_id, pad_token_id), as their JSON text,
  // when given: an export writes them back, so a fine-tuned model stops
  // where the original did.
  std::map<std::string, std::string> token_ids;
  std::filesystem::path file;   // the config.json read (empty when made in code)
};

// Reads `path`: a config.json, or a folder holding one. Throws InteropError
// naming the file and the key for a missing or malformed key, an unknown
// model_type, or a configuration sharc does not compute.
HfConfig read_hf_config(const std::filesystem::path& path);

// The weight map of a sharded checkpoint's model.safetensors.index.json:
// tensor name -> file (in the index's folder). Throws InteropError naming
// the file, and the tensor whose entry is not a file name.
std::map<std::string, std::string> read_weight_map(const std::filesystem::path& index);

// config.json's text for `c`: the keys transformers needs to build the
// model, sorted, two-space indented; the same text for the same config.
std::string hf_config_json(const HfConfig& c);

}  // namespace sharc::interop
