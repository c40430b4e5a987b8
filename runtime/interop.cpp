// Hugging Face import and export; see interop.h.
#include "runtime/interop.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <sstream>

#include "runtime/dtype.h"
#include "runtime/safetensors.h"

namespace sharc::interop {

namespace fs = std::filesystem;
using rt::CheckpointTarget;
using rt::SafetensorsFile;
using rt::SafetensorsTensor;
using rt::TensorInfo;

namespace {

// ---- the tables ------------------------------------------------------------

// GPT2LMHeadModel. Conv1D weights are (in, out) like sharc's kernels; only
// c_attn's columns move. lm_head exists when the embeddings are not tied.
constexpr TensorRule kGpt2Rules[] = {
    {"wte.weight", "wte/embedding", "V,E"},
    {"wpe.weight", "wpe/embedding", "T,E"},
    {"h.{i}.ln_1.weight", "h{i}/ln1/scale", "E"},
    {"h.{i}.ln_1.bias", "h{i}/ln1/bias", "E"},
    {"h.{i}.attn.c_attn.weight", "h{i}/attn/qkv/kernel", "E,3E", Layout::kQkvByHead},
    {"h.{i}.attn.c_attn.bias", "h{i}/attn/qkv/bias", "3E", Layout::kQkvByHead},
    {"h.{i}.attn.c_proj.weight", "h{i}/attn/proj/kernel", "E,E"},
    {"h.{i}.attn.c_proj.bias", "h{i}/attn/proj/bias", "E"},
    {"h.{i}.ln_2.weight", "h{i}/ln2/scale", "E"},
    {"h.{i}.ln_2.bias", "h{i}/ln2/bias", "E"},
    {"h.{i}.mlp.c_fc.weight", "h{i}/mlp/fc/kernel", "E,M"},
    {"h.{i}.mlp.c_fc.bias", "h{i}/mlp/fc/bias", "M"},
    {"h.{i}.mlp.c_proj.weight", "h{i}/mlp/proj/kernel", "M,E"},
    {"h.{i}.mlp.c_proj.bias", "h{i}/mlp/proj/bias", "E"},
    {"ln_f.weight", "ln_f/scale", "E"},
    {"ln_f.bias", "ln_f/bias", "E"},
    {"lm_head.weight", "lm_head/kernel", "V,E", Layout::kTransposed},
};
// Tensors a GPT-2 file may hold that are no weights: the causal-mask
// buffers older transformers saved.
constexpr const char* kGpt2Ignored[] = {"h.{i}.attn.bias", "h.{i}.attn.masked_bias"};

// LlamaForCausalLM: every projection an nn.Linear, stored (out, in).
constexpr TensorRule kLlamaRules[] = {
    {"embed_tokens.weight", "embed/embedding", "V,E"},
    {"layers.{i}.input_layernorm.weight", "h{i}/attn_norm/scale", "E"},
    {"layers.{i}.self_attn.q_proj.weight", "h{i}/attn/q/kernel", "E,E", Layout::kTransposed},
    {"layers.{i}.self_attn.k_proj.weight", "h{i}/attn/k/kernel", "K,E", Layout::kTransposed},
    {"layers.{i}.self_attn.v_proj.weight", "h{i}/attn/v/kernel", "K,E", Layout::kTransposed},
    {"layers.{i}.self_attn.o_proj.weight", "h{i}/attn/o/kernel", "E,E", Layout::kTransposed},
    {"layers.{i}.post_attention_layernorm.weight", "h{i}/mlp_norm/scale", "E"},
    {"layers.{i}.mlp.gate_proj.weight", "h{i}/mlp/gate/kernel", "M,E", Layout::kTransposed},
    {"layers.{i}.mlp.up_proj.weight", "h{i}/mlp/up/kernel", "M,E", Layout::kTransposed},
    {"layers.{i}.mlp.down_proj.weight", "h{i}/mlp/down/kernel", "E,M", Layout::kTransposed},
    {"norm.weight", "norm/scale", "E"},
    {"lm_head.weight", "lm_head/kernel", "V,E", Layout::kTransposed},
};
// The rotary frequencies older transformers saved.
constexpr const char* kLlamaIgnored[] = {"layers.{i}.self_attn.rotary_emb.inv_freq"};

// The prefix transformers' save_pretrained puts before the base model's
// tensors (hub files of the base model have none).
const char* prefix_of(Architecture a) { return a == Architecture::kGpt2 ? "transformer." : "model."; }

[[noreturn]] void fail(const std::string& why) { throw InteropError(why); }

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

// A row's shape ("E,3E") with the config's sizes: V vocab, T context,
// E width, M the MLP's hidden width, K the key/value heads' width.
std::vector<int64_t> shape_from(const char* symbols, const HfConfig& c) {
  std::vector<int64_t> shape;
  std::stringstream in(symbols);
  for (std::string dim; std::getline(in, dim, ',');) {
    size_t digits = 0;
    while (digits < dim.size() && std::isdigit(static_cast<unsigned char>(dim[digits]))) ++digits;
    const int64_t times = digits ? std::stoll(dim.substr(0, digits)) : 1;
    const std::string symbol = dim.substr(digits);
    const int64_t size = symbol == "V" ? c.vocab : symbol == "T" ? c.context : symbol == "E" ? c.embed
                       : symbol == "M" ? c.mlp_hidden : symbol == "K" ? c.kv_heads * (c.embed / c.heads)
                       : symbol.empty() ? 1 : -1;
    if (size < 0) fail(std::string("interop table: unknown size \"") + symbol + "\" in \"" + symbols + "\"");
    shape.push_back(times * size);
  }
  return shape;
}

// "h.{i}.ln_1.weight" with layer 3 -> "h.3.ln_1.weight".
std::string with_layer(const std::string& pattern, int64_t layer) {
  const size_t at = pattern.find("{i}");
  return at == std::string::npos ? pattern : pattern.substr(0, at) + std::to_string(layer) + pattern.substr(at + 3);
}

// Matches `name` against `pattern` ("h{i}/ln1/scale"): nullopt when it does
// not match; else the layer (-1 when the pattern has no "{i}"; -2 for the
// stacked form "h/ln1/scale", every layer on a leading axis).
std::optional<int64_t> match(const std::string& pattern, const std::string& name, bool allow_stacked) {
  const size_t at = pattern.find("{i}");
  if (at == std::string::npos) return pattern == name ? std::optional<int64_t>(-1) : std::nullopt;
  const std::string head = pattern.substr(0, at), tail = pattern.substr(at + 3);
  if (name.size() < head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return std::nullopt;
  const std::string middle = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (middle.empty()) return allow_stacked ? std::optional<int64_t>(-2) : std::nullopt;
  if (middle.size() > 6 || !std::all_of(middle.begin(), middle.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(middle);
}

// ---- one parameter and the checkpoint tensors behind it -------------------

struct Mapping {
  const TensorInfo* param = nullptr;
  TensorRule rule;
  bool stacked = false;
  std::vector<int64_t> layers;         // the checkpoint layers, in the parameter's order
  std::vector<int64_t> layer_shape;    // one layer's sharc shape
  std::vector<int64_t> hf_shape;       // one layer's checkpoint shape
};

std::vector<int64_t> hf_shape_of(const std::vector<int64_t>& sharc_shape, Layout layout) {
  if (layout != Layout::kTransposed) return sharc_shape;
  return {sharc_shape.rbegin(), sharc_shape.rend()};
}

// The program's parameters (optimizer state aside) matched to rows of
// `a`'s table; a parameter that no row names is an error.
std::vector<Mapping> map_parameters(const CheckpointTarget& target, Architecture a) {
  std::vector<Mapping> out;
  for (const TensorInfo& t : target.parameters) {
    const std::string name(t.name);
    if (name.rfind("opt/", 0) == 0) continue;
    std::optional<Mapping> found;
    for (const TensorRule& rule : tensor_rules(a)) {
      const std::optional<int64_t> layer = match(rule.sharc, name, /*allow_stacked=*/true);
      if (!layer) continue;
      Mapping m{&t, rule, *layer == -2, {}, t.shape, {}};
      if (m.stacked) {
        m.layer_shape.erase(m.layer_shape.begin());
        for (int64_t i = 0; i < t.shape[0]; ++i) m.layers.push_back(i);
      } else {
        m.layers.push_back(*layer);
      }
      if (rule.layout == Layout::kTransposed && m.layer_shape.size() != 2)
        fail("the program's parameter \"" + name + "\" is " + shape_text(t.shape) + ", not a matrix");
      m.hf_shape = hf_shape_of(m.layer_shape, rule.layout);
      found = m;
      break;
    }
    if (!found) {
      std::string known;
      for (const TensorRule& rule : tensor_rules(a)) known += (known.empty() ? "" : ", ") + std::string(rule.sharc);
      fail("the program's parameter \"" + name + "\" is not part of a " + architecture_name(a) +
           " model (the " + architecture_name(a) + " parameters sharc maps are " + known + ")");
    }
    out.push_back(*found);
  }
  return out;
}

// The program against `config`: every parameter's shape as the table's
// row says, the layer count, the head tied or not.
void check_program(const std::vector<Mapping>& maps, const HfConfig& config, const std::string& what) {
  for (const Mapping& m : maps) {
    const std::vector<int64_t> want = shape_from(m.rule.shape, config);
    if (m.hf_shape != want)
      fail("the program's \"" + std::string(m.param->name) + "\" is " + shape_text(m.layer_shape) +
           (m.stacked ? " per layer" : "") + ", but " + what + " makes " + m.rule.hf + " " + shape_text(want) +
           " (" + m.rule.shape + " with V=" + std::to_string(config.vocab) + ", T=" + std::to_string(config.context) +
           ", E=" + std::to_string(config.embed) + ", M=" + std::to_string(config.mlp_hidden) + ")");
  }
  std::set<int64_t> layers;
  for (const Mapping& m : maps)
    if (std::string(m.rule.hf).find("{i}") != std::string::npos) layers.insert(m.layers.begin(), m.layers.end());
  if (static_cast<int64_t>(layers.size()) != config.layers || (!layers.empty() && *layers.rbegin() != config.layers - 1))
    fail("the program has " + std::to_string(layers.size()) + " layers, but " + what + " says " +
         std::to_string(config.layers));
  bool has_head = false;
  for (const Mapping& m : maps) has_head = has_head || std::string(m.rule.hf) == "lm_head.weight";
  if (has_head == config.tie_embeddings)
    fail(std::string("the program ") + (has_head ? "has" : "has no") + " separate output head (lm_head/kernel), but " +
         what + " has tie_word_embeddings " + (config.tie_embeddings ? "true" : "false"));
  // Every row of the table there, for every layer (the head only untied).
  std::set<std::pair<std::string, int64_t>> have;
  for (const Mapping& m : maps)
    for (int64_t layer : m.layers) have.emplace(m.rule.sharc, layer);
  for (const TensorRule& rule : tensor_rules(config.architecture)) {
    if (std::string(rule.hf) == "lm_head.weight") continue;
    const bool per_layer = std::string(rule.hf).find("{i}") != std::string::npos;
    for (int64_t layer = per_layer ? 0 : -1; layer < (per_layer ? config.layers : 0); ++layer)
      if (!have.count({rule.sharc, layer}))
        fail("the program has no parameter \"" + with_layer(rule.sharc, layer) + "\", which every " +
             architecture_name(config.architecture) + " model has (" + rule.hf + ")");
  }
}

// The folder's config against the one the program was generated for.
void check_config(const HfConfig& have, const HfConfig& want) {
  const std::string where = have.file.string();
  const std::string generated = want.file.empty() ? "" : " (" + want.file.string() + ")";
  if (have.architecture != want.architecture)
    fail(where + ": the model is " + architecture_name(have.architecture) + ", but the program was generated for " +
         architecture_name(want.architecture) + generated);
  const bool gpt2 = have.architecture == Architecture::kGpt2;
  const std::pair<const char*, std::pair<int64_t, int64_t>> sizes[] = {
      {gpt2 ? "n_layer" : "num_hidden_layers", {have.layers, want.layers}},
      {gpt2 ? "n_embd" : "hidden_size", {have.embed, want.embed}},
      {gpt2 ? "n_head" : "num_attention_heads", {have.heads, want.heads}},
      {"num_key_value_heads", {have.kv_heads, want.kv_heads}},
      {"vocab_size", {have.vocab, want.vocab}},
      {gpt2 ? "n_positions" : "max_position_embeddings", {have.context, want.context}},
      {gpt2 ? "n_inner" : "intermediate_size", {have.mlp_hidden, want.mlp_hidden}},
  };
  for (const auto& [key, values] : sizes)
    if (values.first != values.second)
      fail(where + ": " + key + " is " + std::to_string(values.first) + ", but the program was generated for " +
           std::to_string(values.second) + generated);
  if (have.tie_embeddings != want.tie_embeddings)
    fail(where + ": tie_word_embeddings is " + (have.tie_embeddings ? "true" : "false") +
         ", but the program was generated for " + (want.tie_embeddings ? "true" : "false") + generated);
}

// The heads against the mesh axes that split the fused QKV columns.
void check_heads(const CheckpointTarget& target, const std::vector<Mapping>& maps, const HfConfig& c) {
  const bool gpt2 = c.architecture == Architecture::kGpt2;
  for (const Mapping& m : maps) {
    const std::string sharc = m.rule.sharc;
    auto ends_with = [&](const std::string& tail) {
      return sharc.size() >= tail.size() && sharc.compare(sharc.size() - tail.size(), tail.size(), tail) == 0;
    };
    // The projections whose output columns are whole heads, and how many.
    int64_t heads = 0;
    std::string key;
    if (m.rule.layout == Layout::kQkvByHead || ends_with("/attn/q/kernel")) {
      heads = c.heads;
      key = gpt2 ? "n_head" : "num_attention_heads";
    } else if (ends_with("/attn/k/kernel") || ends_with("/attn/v/kernel")) {
      heads = c.kv_heads;
      key = "num_key_value_heads";
    } else {
      continue;
    }
    int64_t split = 1;
    std::string axes;
    for (const std::string& axis : m.param->spec.back()) {
      const int at = target.mesh.axis_index(axis);
      split *= at < 0 ? 1 : target.mesh.axis_sizes[static_cast<size_t>(at)];
      axes += (axes.empty() ? "'" : " x '") + axis + "'";
    }
    if (heads % split != 0)
      fail(c.file.string() + ": " + key + " is " + std::to_string(heads) + ", which the mesh's " + axes + " (" +
           std::to_string(split) + " devices) does not divide: each device must hold whole heads");
  }
}

// ---- runs: where a block's elements are in a checkpoint tensor ------------

// `length` elements of the checkpoint tensor from element `src`, landing in
// the block at `dst`, `dst + stride`, ...
struct Run {
  int64_t src = 0, dst = 0, length = 0, stride = 1;
};

// One layer's block (sharc offset `o`, shape `s`, within `layer_shape`) as
// runs of the checkpoint tensor (shape `hf_shape`); `dst0` is where the
// layer's part starts in the block.
void block_runs(const Mapping& m, const HfConfig& c, const std::vector<int64_t>& o, const std::vector<int64_t>& s,
                int64_t dst0, std::vector<Run>& runs) {
  const std::vector<int64_t>& full = m.layer_shape;
  const size_t rank = full.size();
  if (rank == 0) {
    runs.push_back({0, dst0, 1, 1});
    return;
  }
  if (m.rule.layout == Layout::kTransposed) {
    // The checkpoint's row r is sharc's column r: block columns [o1, o1+s1)
    // are checkpoint rows, each a run of s0 elements from column o0.
    for (int64_t col = 0; col < s[1]; ++col)
      runs.push_back({(o[1] + col) * full[0] + o[0], dst0 + col, s[0], s[1]});
    return;
  }
  // Row by row of the block (every index but the last).
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= s[d];
  std::vector<int64_t> index(rank, 0);
  const int64_t cols = s[rank - 1];
  const int64_t head_dim = c.embed / c.heads;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t src_row = 0;  // the row's first element in the full tensor
    for (size_t d = 0; d + 1 < rank; ++d) src_row = src_row * full[d] + o[d] + index[d];
    src_row *= full[rank - 1];
    const int64_t dst_row = dst0 + row * cols;
    if (m.rule.layout == Layout::kSame) {
      runs.push_back({src_row + o[rank - 1], dst_row, cols, 1});
    } else {  // kQkvByHead: sharc column j is (head, part, d); the checkpoint's part * embed + head * head_dim + d
      for (int64_t j = 0; j < cols;) {
        const int64_t col = o[rank - 1] + j;
        const int64_t head = col / (3 * head_dim), part = col % (3 * head_dim) / head_dim, d = col % head_dim;
        const int64_t length = std::min(head_dim - d, cols - j);
        runs.push_back({src_row + part * c.embed + head * head_dim + d, dst_row + j, length, 1});
        j += length;
      }
    }
    for (size_t d = rank - 1; d-- > 0;)
      if (++index[d] < s[d]) break;
      else index[d] = 0;
  }
}

// ---- the checkpoint's files ---------------------------------------------

struct Source {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensor* tensor = nullptr;
};

class Checkpoint {
 public:
  Checkpoint(const fs::path& folder, Architecture a) : prefix_(prefix_of(a)) {
    const fs::path single = folder / "model.safetensors", index = folder / "model.safetensors.index.json";
    if (fs::exists(single)) {
      files_.push_back(std::make_unique<SafetensorsFile>(single));
    } else if (fs::exists(index)) {
      std::map<std::string, size_t> opened;
      for (const auto& [name, file] : read_weight_map(index)) {
        if (!opened.count(file) && !fs::exists(folder / file))
          fail(index.string() + ": tensor \"" + name + "\" is in " + file + ", which is not in the folder");
        if (!opened.count(file)) {
          opened[file] = files_.size();
          files_.push_back(std::make_unique<SafetensorsFile>(folder / file));
        }
        indexed_[name] = opened[file];
      }
    } else {
      fail(folder.string() + ": no model.safetensors or model.safetensors.index.json (sharc reads safetensors; "
                             "transformers' save_pretrained writes them)");
    }
    // Every tensor by its name without the prefix; a sharded file's tensors
    // only where the index puts them.
    for (size_t f = 0; f < files_.size(); ++f)
      for (const SafetensorsTensor& t : files_[f]->tensors()) {
        if (!indexed_.empty()) {
          auto it = indexed_.find(t.name);
          if (it == indexed_.end() || it->second != f) continue;
        }
        std::string key = t.name;
        if (key.rfind(prefix_, 0) == 0) key = key.substr(prefix_.size());
        if (!by_name_.emplace(key, Source{files_[f].get(), &t}).second)
          fail(files_[f]->path().string() + ": tensor \"" + t.name + "\" is in the checkpoint twice");
      }
    for (const auto& [name, file] : indexed_)
      if (!by_name_.count(name.rfind(prefix_, 0) == 0 ? name.substr(prefix_.size()) : name))
        fail(files_[file]->path().string() + ": no tensor \"" + name + "\", which the index puts there");
  }

  const Source* find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Source>& tensors() const { return by_name_; }
  // Where a missing tensor should have been: the file, or the folder of a sharded one.
  std::string where() const {
    return files_.size() == 1 ? files_[0]->path().string() : files_[0]->path().parent_path().string();
  }
  std::vector<std::string> paths() const {
    std::vector<std::string> p;
    for (const auto& f : files_) p.push_back(f->path().string());
    return p;
  }
  uint64_t bytes_read() const {
    uint64_t b = 0;
    for (const auto& f : files_) b += f->bytes_read();
    return b;
  }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> indexed_;
  std::map<std::string, Source> by_name_;
};

// Reads `runs` of `src` (F32 or BF16) into `block`: runs sorted by their
// place in the file, neighbours read with one pread (up to 16 MiB).
void read_runs(const Source& src, std::vector<Run>& runs, std::span<float> block) {
  const size_t esize = src.tensor->dtype == "BF16" ? 2 : 4;
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.src < b.src; });
  std::vector<std::byte> bytes;
  for (size_t first = 0; first < runs.size();) {
    size_t last = first + 1;
    int64_t end = runs[first].src + runs[first].length;
    while (last < runs.size() && runs[last].src == end && (end - runs[first].src) * esize < (16u << 20))
      end += runs[last++].length;
    bytes.resize(static_cast<size_t>(end - runs[first].src) * esize);
    src.file->read(src.tensor->begin + static_cast<uint64_t>(runs[first].src) * esize, bytes);
    for (size_t r = first; r < last; ++r) {
      const std::byte* at = bytes.data() + static_cast<size_t>(runs[r].src - runs[first].src) * esize;
      for (int64_t k = 0; k < runs[r].length; ++k) {
        float v;
        if (esize == 4) {
          std::memcpy(&v, at + k * 4, 4);
        } else {
          uint16_t b;
          std::memcpy(&b, at + k * 2, 2);
          v = rt::float_from_bf16_bits(b);
        }
        block[static_cast<size_t>(runs[r].dst + k * runs[r].stride)] = v;
      }
    }
    first = last;
  }
}

// Whether checkpoint tensor `name` (without the prefix) is no weight sharc
// needs: a buffer older files saved, or the head tied to the embedding.
bool ignored_tensor(const std::string& name, const HfConfig& c) {
  if (c.tie_embeddings && name == "lm_head.weight") return true;
  const std::span<const char* const> patterns =
      c.architecture == Architecture::kGpt2 ? std::span<const char* const>(kGpt2Ignored) : kLlamaIgnored;
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const char* pattern) { return match(pattern, name, false).has_value(); });
}

// The checkpoint tensor name of `m`'s layer `layer` (without the prefix).
std::string hf_name(const Mapping& m, int64_t layer) { return with_layer(m.rule.hf, layer); }

}  // namespace

std::vector<TensorRule> tensor_rules(Architecture a) {
  if (a == Architecture::kGpt2) return {std::begin(kGpt2Rules), std::end(kGpt2Rules)};
  return {std::begin(kLlamaRules), std::end(kLlamaRules)};
}

ImportResult import_hf(const CheckpointTarget& target, const fs::path& folder, const HfConfig& generated_for) {
  ImportResult result;
  // Staged blocks: parameter, the ranks holding the block, its values.
  struct Staged {
    const TensorInfo* param;
    std::vector<int> ranks;
    std::vector<float> values;
  };
  std::vector<Staged> staged;
  std::unique_ptr<Checkpoint> ck;
  rt::exchange_or_fail(target, [&]() -> std::string {
    result.config = read_hf_config(folder);
    check_config(result.config, generated_for);
    const std::vector<Mapping> maps = map_parameters(target, generated_for.architecture);
    check_heads(target, maps, result.config);
    check_program(maps, generated_for, "the config it was generated for" +
                                           (generated_for.file.empty() ? "" : " (" + generated_for.file.string() + ")"));
    ck = std::make_unique<Checkpoint>(folder, result.config.architecture);
    // 1. Every tensor there, with the shape the program needs, and none left over.
    std::set<std::string> used;
    for (const Mapping& m : maps)
      for (int64_t layer : m.layers) {
        const std::string name = hf_name(m, layer);
        const Source* s = ck->find(name);
        const std::string layer_text = m.stacked ? ", layer " + std::to_string(layer) : "";
        if (!s)
          fail(ck->where() + ": no tensor \"" + ck->prefix() + name + "\", which the program's \"" +
               std::string(m.param->name) + "\"" + layer_text + " needs");
        if (s->tensor->dtype != "F32" && s->tensor->dtype != "BF16")
          fail(s->file->path().string() + ": tensor \"" + s->tensor->name + "\" is " + s->tensor->dtype +
               "; sharc imports F32 and BF16");
        if (s->tensor->shape != m.hf_shape)
          fail(s->file->path().string() + ": tensor \"" + s->tensor->name + "\" is " + shape_text(s->tensor->shape) +
               ", but the program's \"" + std::string(m.param->name) + "\"" + layer_text + " needs " +
               shape_text(m.hf_shape));
        used.insert(name);
      }
    for (const auto& [name, s] : ck->tensors()) {
      if (used.count(name)) continue;
      if (!ignored_tensor(name, result.config))
        fail(s.file->path().string() + ": tensor \"" + s.tensor->name + "\" is not part of a " +
             architecture_name(result.config.architecture) + " model sharc knows; no parameter of the program takes it");
    }
    // 2. This process's distinct blocks, read into staging.
    for (const Mapping& m : maps) {
      const TensorInfo& t = *m.param;
      for (const auto& [offset, ranks] : rt::distinct_blocks(target, t, target.local_ranks)) {
        Staged st{&t, ranks, std::vector<float>(static_cast<size_t>(t.local_elements()))};
        std::vector<int64_t> o = offset, s = t.local_shape;
        int64_t first_layer = 0, layer_count = 1, layer_elements = static_cast<int64_t>(st.values.size());
        if (m.stacked) {
          first_layer = o[0];
          layer_count = s[0];
          o.erase(o.begin());
          s.erase(s.begin());
          layer_elements /= std::max<int64_t>(layer_count, 1);
        }
        for (int64_t l = 0; l < layer_count; ++l) {
          const int64_t layer = m.stacked ? m.layers[static_cast<size_t>(first_layer + l)] : m.layers[0];
          std::vector<Run> runs;
          block_runs(m, result.config, o, s, l * layer_elements, runs);
          read_runs(*ck->find(hf_name(m, layer)), runs, st.values);
        }
        staged.push_back(std::move(st));
      }
      result.tensors += static_cast<int64_t>(m.layers.size());
    }
    return "";
  });
  // 3. Every process has read everything it needs: only now do parameters change.
  for (const Staged& st : staged)
    for (int r : st.ranks) {
      float* dst = target.mutable_shard(r, st.param->name);
      if (!dst) fail("device " + std::to_string(r) + " holds no block of \"" + std::string(st.param->name) + "\"");
      std::copy(st.values.begin(), st.values.end(), dst);
    }
  result.files = ck->paths();
  result.bytes_read = ck->bytes_read();
  return result;
}

Inspection inspect_hf(const fs::path& folder) {
  Inspection r;
  r.config = read_hf_config(folder);
  const HfConfig& c = r.config;
  const Checkpoint ck(folder, c.architecture);
  std::ostringstream text;
  text << folder.string() << ": " << architecture_name(c.architecture) << ", " << c.layers << " layers, width "
       << c.embed << ", " << c.heads << " heads, MLP " << c.mlp_hidden << ", vocabulary " << c.vocab << ", context "
       << c.context << ", embeddings " << (c.tie_embeddings ? "tied" : "untied") << "\n";
  text << "files: ";
  for (const std::string& p : ck.paths()) text << p << " ";
  text << "\n\n";
  std::set<std::string> used;
  auto layout_text = [](Layout l) {
    return l == Layout::kSame ? "" : l == Layout::kTransposed ? "  (transposed)" : "  (q|k|v columns to head-major)";
  };
  // Layer by layer, in the table's order: the rows before the layers, each
  // layer's, the rows after.
  const std::vector<TensorRule> rules = tensor_rules(c.architecture);
  auto per_layer = [](const TensorRule& rule) { return std::string(rule.hf).find("{i}") != std::string::npos; };
  const auto first_layer_row = std::find_if(rules.begin(), rules.end(), per_layer);
  std::vector<std::pair<const TensorRule*, int64_t>> order;
  for (auto it = rules.begin(); it != first_layer_row; ++it) order.emplace_back(&*it, 0);
  for (int64_t layer = 0; layer < c.layers; ++layer)
    for (const TensorRule& rule : rules)
      if (per_layer(rule)) order.emplace_back(&rule, layer);
  for (auto it = first_layer_row; it != rules.end(); ++it)
    if (!per_layer(*it)) order.emplace_back(&*it, 0);
  for (const auto& [rule, layer] : order) {
    if (std::string(rule->hf) == "lm_head.weight" && c.tie_embeddings) continue;
    const std::string name = with_layer(rule->hf, layer);
    const Source* s = ck.find(name);
    used.insert(name);
    if (!s) {
      r.problems.push_back(ck.where() + ": no tensor \"" + ck.prefix() + name + "\"");
      continue;
    }
    text << s->tensor->name << "  " << s->tensor->dtype << shape_text(s->tensor->shape) << "  -> "
         << with_layer(rule->sharc, layer) << layout_text(rule->layout) << "\n";
    const std::vector<int64_t> want = shape_from(rule->shape, c);
    if (s->tensor->shape != want)
      r.problems.push_back(s->file->path().string() + ": tensor \"" + s->tensor->name + "\" is " +
                           shape_text(s->tensor->shape) + ", but the config makes it " + shape_text(want));
    if (s->tensor->dtype != "F32" && s->tensor->dtype != "BF16")
      r.problems.push_back(s->file->path().string() + ": tensor \"" + s->tensor->name + "\" is " + s->tensor->dtype +
                           "; sharc imports F32 and BF16");
  }
  for (const auto& [name, s] : ck.tensors())
    if (!used.count(name)) {
      if (ignored_tensor(name, c))
        text << s.tensor->name << "  (not a weight: ignored)\n";
      else
        r.problems.push_back(s.file->path().string() + ": tensor \"" + s.tensor->name + "\" is not part of a " +
                             architecture_name(c.architecture) + " model sharc knows");
    }
  text << "\nA scanned program (GPTConfig::scan) stacks each h{i}/... over the layers as h/...\n";
  r.text = text.str();
  return r;
}

void export_hf(const CheckpointTarget& target, const fs::path& folder, const HfConfig& config) {
  const std::vector<Mapping> maps = map_parameters(target, config.architecture);
  check_program(maps, config, "the config given to export_hf");
  // Every process takes part in gathering each parameter whole.
  struct Out {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::vector<Out> outs;
  for (const Mapping& m : maps) {
    std::vector<float> whole(static_cast<size_t>(m.param->elements()));
    target.get(m.param->name, whole);
    if (std::string(m.rule.hf) == "lm_head.weight" && config.tie_embeddings) continue;
    const int64_t layer_elements = static_cast<int64_t>(whole.size() / m.layers.size());
    const std::vector<int64_t> zero(m.layer_shape.size(), 0);
    for (size_t l = 0; l < m.layers.size(); ++l) {
      std::vector<Run> runs;
      block_runs(m, config, zero, m.layer_shape, 0, runs);
      Out o{std::string(m.rule.hf == std::string("lm_head.weight") ? "" : prefix_of(config.architecture)) +
                hf_name(m, m.layers[l]),
            m.hf_shape, std::vector<float>(static_cast<size_t>(layer_elements))};
      const float* layer = whole.data() + static_cast<int64_t>(l) * layer_elements;
      for (const Run& r : runs)
        for (int64_t k = 0; k < r.length; ++k) o.values[static_cast<size_t>(r.src + k)] = layer[r.dst + k * r.stride];
      outs.push_back(std::move(o));
    }
  }
  std::sort(outs.begin(), outs.end(), [](const Out& a, const Out& b) { return a.name < b.name; });
  rt::exchange_or_fail(target, [&]() -> std::string {
    if (target.process != 0) return "";
    // Written beside the folder, then renamed into place.
    const fs::path parent = folder.parent_path().empty() ? fs::path(".") : folder.parent_path();
    fs::create_directories(parent);
    const fs::path tmp = parent / (".tmp-" + folder.filename().string() + "-" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    rt::SafetensorsWriter w;
    for (const Out& o : outs) w.add(o.name, "F32", o.shape, std::as_bytes(std::span<const float>(o.values)));
    w.set_metadata("format", "pt");
    w.write(tmp / "model.safetensors");
    const std::string text = hf_config_json(config);
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(text.data()), text.size());
    const std::span<const std::byte> pieces[] = {bytes};
    rt::write_file(tmp / "config.json", pieces);
    std::error_code ec;
    if (fs::exists(folder)) {
      const fs::path old = parent / (".old-" + folder.filename().string() + "-" + std::to_string(::getpid()));
      fs::rename(folder, old, ec);
      if (ec) fail(folder.string() + ": cannot be replaced (" + ec.message() + ")");
      fs::rename(tmp, folder, ec);
      if (ec) {
        fs::rename(old, folder);
        fail(folder.string() + ": cannot be written (" + ec.message() + ")");
      }
      fs::remove_all(old);
    } else {
      fs::rename(tmp, folder, ec);
      if (ec) fail(folder.string() + ": cannot be written (" + ec.message() + ")");
    }
    return "";
  });
}

}  // namespace sharc::interop
