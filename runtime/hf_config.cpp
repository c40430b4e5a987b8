// config.json reading and writing; see hf_config.h.
#include "runtime/hf_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace sharc::interop {

namespace {

using nlohmann::json;

// Reads keys of one config.json, each error naming the file and the key.
class Keys {
 public:
  Keys(const json& j, std::string file) : j_(j), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw InteropError(file_ + ": \"" + key + "\" " + why);
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  // A positive integer (an integral float like 16.0 too, as some exporters write).
  int64_t positive(const std::string& key) const {
    if (!has(key)) fail(key, "is missing");
    const json& v = j_.at(key);
    if (v.is_number_integer() && v.get<int64_t>() > 0) return v.get<int64_t>();
    if (v.is_number_float() && v.get<double>() >= 1 && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
      return static_cast<int64_t>(v.get<double>());
    fail(key, "is " + v.dump() + ", not a positive integer");
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_number()) fail(key, "is " + j_.at(key).dump() + ", not a number");
    return j_.at(key).get<double>();
  }
  double rate(const std::string& key, double fallback) const {
    const double r = number(key, fallback);
    if (!(r >= 0 && r < 1)) fail(key, "is " + j_.at(key).dump() + ", not a dropout rate in [0, 1)");
    return r;
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(key, "is " + j_.at(key).dump() + ", not true or false");
    return j_.at(key).get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) fail(key, "is " + j_.at(key).dump() + ", not a string");
    return j_.at(key).get<std::string>();
  }
  // A key whose value sharc computes one way only: it must be absent or `want`.
  void require(const std::string& key, const json& want, const std::string& why) const {
    if (has(key) && j_.at(key) != want) fail(key, "is " + j_.at(key).dump() + ", but " + why);
  }
  const json& at(const std::string& key) const { return j_.at(key); }

 private:
  const json& j_;
  std::string file_;
};

// `file` parsed; `missing` says what a file that cannot be read should be.
json parse_json_file(const std::filesystem::path& file, const std::string& missing) {
  std::ifstream in(file);
  if (!in) throw InteropError(file.string() + ": cannot be read (" + missing + ")");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw InteropError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
}

void read_gpt2(const Keys& k, HfConfig& c) {
  c.architecture = Architecture::kGpt2;
  c.vocab = k.positive("vocab_size");
  c.context = k.positive("n_positions");
  c.embed = k.positive("n_embd");
  c.heads = k.positive("n_head");
  c.kv_heads = c.heads;
  c.layers = k.positive("n_layer");
  c.mlp_hidden = k.has("n_inner") ? k.positive("n_inner") : 4 * c.embed;
  c.epsilon = k.number("layer_norm_epsilon", 1e-5);
  c.tie_embeddings = k.flag("tie_word_embeddings", true);
  c.resid_dropout = k.rate("resid_pdrop", 0.1);
  c.embed_dropout = k.rate("embd_pdrop", 0.1);
  c.attention_dropout = k.rate("attn_pdrop", 0.1);
  const std::string act = k.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    k.fail("activation_function", "is \"" + act + "\", but sharc's GPT computes GELU's tanh form "
                                   "(\"gelu_new\", \"gelu_pytorch_tanh\")");
  k.require("scale_attn_weights", true, "sharc's attention always divides by sqrt(head_dim)");
  k.require("scale_attn_by_inverse_layer_idx", false, "sharc's attention does not scale by layer");
  k.require("add_cross_attention", false, "sharc's GPT is a decoder without cross-attention");
}

void read_llama(const Keys& k, HfConfig& c) {
  c.architecture = Architecture::kLlama;
  c.vocab = k.positive("vocab_size");
  c.context = k.positive("max_position_embeddings");
  c.embed = k.positive("hidden_size");
  c.heads = k.positive("num_attention_heads");
  c.kv_heads = k.has("num_key_value_heads") ? k.positive("num_key_value_heads") : c.heads;
  c.layers = k.positive("num_hidden_layers");
  c.mlp_hidden = k.positive("intermediate_size");
  c.epsilon = k.number("rms_norm_eps", 1e-6);
  c.tie_embeddings = k.flag("tie_word_embeddings", false);
  c.attention_dropout = k.rate("attention_dropout", 0.0);
  // transformers 5 nests the rotary base in rope_parameters; 4 had rope_theta.
  if (k.has("rope_parameters")) {
    const json& r = k.at("rope_parameters");
    if (!r.is_object()) k.fail("rope_parameters", "is " + r.dump() + ", not an object");
    if (r.contains("rope_type") && r.at("rope_type") != "default")
      k.fail("rope_parameters", "has rope_type " + r.at("rope_type").dump() +
                                    ", but sharc's rotary embedding is the default one (no scaling)");
    if (r.contains("rope_theta") && r.at("rope_theta").is_number()) c.rope_theta = r.at("rope_theta").get<double>();
  } else {
    c.rope_theta = k.number("rope_theta", 10000.0);
  }
  if (k.has("rope_scaling"))
    k.fail("rope_scaling", "is " + k.at("rope_scaling").dump() + ", but sharc's rotary embedding has no scaling");
  const std::string act = k.text("hidden_act", "silu");
  if (act != "silu") k.fail("hidden_act", "is \"" + act + "\", but sharc's Llama MLP is SwiGLU (\"silu\")");
  k.require("attention_bias", false, "sharc's Llama projections have no bias");
  k.require("mlp_bias", false, "sharc's Llama MLP has no bias");
  if (k.has("head_dim") && k.positive("head_dim") * c.heads != c.embed)
    k.fail("head_dim", "is " + std::to_string(k.positive("head_dim")) + ", but sharc needs hidden_size / "
                           "num_attention_heads = " + std::to_string(c.embed) + " / " + std::to_string(c.heads));
  if (c.heads % c.kv_heads != 0)
    k.fail("num_key_value_heads", "is " + std::to_string(c.kv_heads) + ", which does not divide num_attention_heads " +
                                      std::to_string(c.heads));
}

}  // namespace

const char* architecture_name(Architecture a) { return a == Architecture::kGpt2 ? "gpt2" : "llama"; }

HfConfig read_hf_config(const std::filesystem::path& path) {
  // A folder, or anything not named *.json, is a model folder.
  const std::filesystem::path file =
      std::filesystem::is_directory(path) || path.extension() != ".json" ? path / "config.json" : path;
  const json j = parse_json_file(file, "a Hugging Face model folder holds config.json");
  if (!j.is_object()) throw InteropError(file.string() + ": not a JSON object");
  const Keys k(j, file.string());
  std::string type = k.text("model_type", "");
  if (type.empty() && j.contains("architectures") && j.at("architectures").is_array() &&
      !j.at("architectures").empty() && j.at("architectures")[0].is_string()) {
    const std::string arch = j.at("architectures")[0].get<std::string>();
    type = arch == "GPT2LMHeadModel" ? "gpt2" : arch == "LlamaForCausalLM" ? "llama" : arch;
  }
  HfConfig c;
  if (type == "gpt2") {
    read_gpt2(k, c);
  } else if (type == "llama") {
    read_llama(k, c);
  } else {
    throw InteropError(file.string() + ": unknown architecture " + (type.empty() ? "(no \"model_type\")" : "\"" + type + "\"") +
                       "; sharc reads \"gpt2\" (GPT2LMHeadModel) and \"llama\" (LlamaForCausalLM)");
  }
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (k.has(key)) c.token_ids[key] = j.at(key).dump();
  if (c.embed % c.heads != 0)
    throw InteropError(file.string() + ": the width " + std::to_string(c.embed) + " is not divisible by the " +
                       std::to_string(c.heads) + " heads");
  c.file = file;
  return c;
}

std::map<std::string, std::string> read_weight_map(const std::filesystem::path& index) {
  const json j = parse_json_file(index, "a sharded checkpoint's index");
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    throw InteropError(index.string() + ": no \"weight_map\" object (tensor name -> file)");
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    if (!file.is_string() || file.get<std::string>().empty() || file.get<std::string>().find('/') != std::string::npos)
      throw InteropError(index.string() + ": tensor \"" + name + "\" maps to " + file.dump() +
                         ", not a file in the folder");
    map[name] = file.get<std::string>();
  }
  return map;
}

std::string hf_config_json(const HfConfig& c) {
  json j;  // an object: keys come out sorted
  for (const auto& [key, text] : c.token_ids) j[key] = json::parse(text);
  j["vocab_size"] = c.vocab;
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (c.architecture == Architecture::kGpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["activation_function"] = "gelu_new";
    j["n_positions"] = c.context;
    j["n_embd"] = c.embed;
    j["n_head"] = c.heads;
    j["n_layer"] = c.layers;
    j["n_inner"] = c.mlp_hidden;
    j["layer_norm_epsilon"] = c.epsilon;
    j["resid_pdrop"] = c.resid_dropout;
    j["embd_pdrop"] = c.embed_dropout;
    j["attn_pdrop"] = c.attention_dropout;
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = c.context;
    j["hidden_size"] = c.embed;
    j["num_attention_heads"] = c.heads;
    j["num_key_value_heads"] = c.kv_heads;
    j["num_hidden_layers"] = c.layers;
    j["intermediate_size"] = c.mlp_hidden;
    j["head_dim"] = c.embed / c.heads;
    j["rms_norm_eps"] = c.epsilon;
    j["rope_theta"] = c.rope_theta;
    j["attention_dropout"] = c.attention_dropout;
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  return j.dump(2) + "\n";
}

}  // namespace sharc::interop
