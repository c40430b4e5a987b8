// Hugging Face interop (runtime/interop.h) against transformers, through
// the fixtures make_fixtures.py wrote with it (a GPT2LMHeadModel with
// random weights, its float64 logits and five AdamW steps' losses):
//  - imported into programs generated from its config.json, on
//    data=1,model=4 (blocks unrolled) and fsdp=2,model=2 (scanned), the
//    logits are transformers' within 1e-5 of the largest;
//  - a process reads each byte its devices' blocks need once, and only
//    those (all four devices: the whole file; device 0 alone: its blocks);
//  - exported from either mesh, the folder is byte for byte the committed
//    one, which make_fixtures.py showed transformers loads with every tensor
//    the original's;
//  - five AdamW steps with nanoGPT's decay groups give torch.optim.AdamW's
//    losses within 1e-4 relative, on data=2,model=2 and fsdp=2,model=2;
//  - bad folders and configs fail naming the file and the tensor or key,
//    and leave the program's parameters as they were.
#include "runtime/interop.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <filesystem>
#include <fstream>
#include <functional>
#include <tuple>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dsl/llama.h"
#include "dsl/sharc.h"
#include "interop_gpt2_fsdp2_model2.h"
#include "interop_gpt2_model4.h"
#include "interop_gpt2_train_data2_model2.h"
#include "interop_gpt2_train_fsdp2_model2.h"
#include "interop_llama_fsdp2_model2.h"
#include "interop_llama_model4.h"
#include "runtime/dtype.h"
#include "runtime/safetensors.h"
#include "runtime/thread_world.h"
#include "tests/common/error_log.h"

namespace sharc::interop {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = SHARC_INTEROP_FIXTURES;
const fs::path kGpt2 = kFixtures / "gpt2_tiny";
const fs::path kLlama = kFixtures / "llama_tiny";

// This process's scratch folder.
fs::path out_root() { return fs::path(SHARC_INTEROP_OUT) / std::to_string(::getpid()); }

// `expr` throws `Type` whose message contains `text`; the message is logged
// for docs/guide/troubleshooting.md with the folders shown as DIR/.
std::vector<std::pair<std::string, std::string>> log_replacements() {
  return {{out_root().string() + "/", "DIR/"}, {kFixtures.string() + "/", "DIR/"}};
}
#define EXPECT_ERROR_CONTAINS(expr, Type, text) SHARC_EXPECT_ERROR_CONTAINS(expr, Type, text, log_replacements())

json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fixture model's reference.json (kGpt2's by default).
const json& reference(const fs::path& model = kGpt2) {
  static std::map<fs::path, json> cache;
  auto it = cache.find(model);
  if (it == cache.end()) it = cache.emplace(model, read_json(model / "reference.json")).first;
  return it->second;
}

// The reference's token ids (2 x context) as the floats programs take.
std::vector<float> tokens_of(const json& rows) {
  std::vector<float> t;
  for (const json& row : rows)
    for (const json& id : row) t.push_back(id.get<float>());
  return t;
}

// A program with fixture `model`'s weights, imported from `folder`
// (default: the fixture's own).
template <class Program>
struct Loaded {
  rt::ThreadWorld world{Program::mesh_shape()};
  Program program{world};
  ImportResult result;

  explicit Loaded(const fs::path& folder = {}, const fs::path& model = kGpt2) {
    program.init(1);
    result = import_hf(program, folder.empty() ? model / "hf" : folder, read_hf_config(model / "hf"));
  }

  std::map<std::string, std::vector<float>> parameters() const {
    std::map<std::string, std::vector<float>> p;
    for (const rt::TensorInfo& t : Program::parameters()) {
      std::vector<float> v(static_cast<size_t>(t.elements()));
      program.get_parameter(t.name, v);
      p[std::string(t.name)] = std::move(v);
    }
    return p;
  }
};

// The largest difference from transformers' float64 logits, relative to
// the largest logit.
template <class Program>
double logits_error(const fs::path& model = kGpt2) {
  Loaded<Program> l({}, model);
  const std::vector<float> tokens = tokens_of(reference(model)["tokens"]);
  std::vector<float> logits(static_cast<size_t>(Program::output_info("logits").elements()));
  typename Program::Inputs in;
  in.tokens = tokens.data();
  typename Program::Outputs out;
  out.logits = logits.data();
  l.program.forward(in, out);
  std::vector<double> want;
  for (const json& b : reference(model)["logits"])
    for (const json& t : b)
      for (const json& v : t) want.push_back(v.get<double>());
  EXPECT_EQ(want.size(), logits.size());
  double largest = 0, worst = 0;
  for (size_t i = 0; i < want.size() && i < logits.size(); ++i) {
    largest = std::max(largest, std::abs(want[i]));
    worst = std::max(worst, std::abs(want[i] - static_cast<double>(logits[i])));
  }
  return worst / largest;
}

TEST(HfInterop, Gpt2LogitsOnData1Model4AreTransformers) {
  const double e = logits_error<sharc_gen::interop_gpt2_model4::Program>();
  std::printf("data=1,model=4 (unrolled): largest difference %.3g of the largest logit\n", e);
  EXPECT_LT(e, 1e-5);
}

TEST(HfInterop, Gpt2LogitsOnFsdp2Model2ScannedAreTransformers) {
  const double e = logits_error<sharc_gen::interop_gpt2_fsdp2_model2::Program>();
  std::printf("fsdp=2,model=2 (scanned): largest difference %.3g of the largest logit\n", e);
  EXPECT_LT(e, 1e-5);
}

TEST(HfInterop, LlamaLogitsOnData1Model4AreTransformers) {
  const double e = logits_error<sharc_gen::interop_llama_model4::Program>(kLlama);
  std::printf("Llama on data=1,model=4 (unrolled): largest difference %.3g of the largest logit\n", e);
  EXPECT_LT(e, 1e-5);
}

TEST(HfInterop, LlamaLogitsOnFsdp2Model2ScannedAreTransformers) {
  const double e = logits_error<sharc_gen::interop_llama_fsdp2_model2::Program>(kLlama);
  std::printf("Llama on fsdp=2,model=2 (scanned): largest difference %.3g of the largest logit\n", e);
  EXPECT_LT(e, 1e-5);
}

TEST(HfInterop, TheLlamaExportIsTheCommittedFolderFromEitherMesh) {
  Loaded<sharc_gen::interop_llama_model4::Program> model4({}, kLlama);
  Loaded<sharc_gen::interop_llama_fsdp2_model2::Program> fsdp2({}, kLlama);
  const HfConfig config = read_hf_config(kLlama / "hf");
  const fs::path a = out_root() / "export" / "llama_tiny", b = out_root() / "export_fsdp" / "llama_tiny";
  export_hf(model4.program, a, config);
  export_hf(fsdp2.program, b, config);
  for (const char* file : {"config.json", "model.safetensors"}) {
    const std::string committed = read_bytes(kLlama / "export" / file);
    EXPECT_FALSE(committed.empty()) << file;
    EXPECT_TRUE(read_bytes(a / file) == committed) << file << " differs from " << (kLlama / "export" / file);
    EXPECT_TRUE(read_bytes(b / file) == committed) << file << " (from fsdp=2,model=2) differs";
  }
  Loaded<sharc_gen::interop_llama_fsdp2_model2::Program> again(b, kLlama);
  EXPECT_EQ(again.parameters(), fsdp2.parameters());
}

TEST(HfInterop, AProcessReadsItsDevicesBlocksOnce) {
  namespace gen = sharc_gen::interop_gpt2_fsdp2_model2;
  // All four devices: every tensor byte of the file, once.
  Loaded<gen::Program> all;
  rt::SafetensorsFile file(kGpt2 / "hf" / "model.safetensors");
  uint64_t tensor_bytes = 0;
  for (const rt::SafetensorsTensor& t : file.tensors()) tensor_bytes += t.end - t.begin;
  EXPECT_EQ(all.result.bytes_read, tensor_bytes);
  EXPECT_EQ(all.result.tensors, 28);  // 12 per layer, 2 embeddings, ln_f's 2; the head is tied

  // A process driving device 0 alone (of fsdp=2,model=2): the bytes of its
  // blocks, and they are the values its block holds in the full import.
  rt::CheckpointTarget one = rt::checkpoint_target(all.program);
  one.local_ranks = {0};
  std::map<std::string, std::vector<float>> before;
  uint64_t block_bytes = 0;
  for (const rt::TensorInfo& t : gen::Program::parameters()) {
    if (std::string(t.name).rfind("opt/", 0) == 0) continue;
    block_bytes += t.local_bytes();
    const float* b = all.program.parameter_shard(0, t.name);
    before[std::string(t.name)].assign(b, b + t.local_elements());
    std::fill(all.program.parameter_shard(0, t.name), all.program.parameter_shard(0, t.name) + t.local_elements(), 0.f);
  }
  const ImportResult r = import_hf(one, kGpt2 / "hf", read_hf_config(kGpt2 / "hf"));
  EXPECT_EQ(r.bytes_read, block_bytes);
  EXPECT_LT(block_bytes, tensor_bytes);
  for (const auto& [name, values] : before) {
    const float* b = all.program.parameter_shard(0, name);
    EXPECT_TRUE(std::equal(values.begin(), values.end(), b)) << name;
  }
  std::printf("device 0 of fsdp=2,model=2 read %llu of the file's %llu tensor bytes\n",
              static_cast<unsigned long long>(block_bytes), static_cast<unsigned long long>(tensor_bytes));
}

TEST(HfInterop, TheExportIsTheCommittedFolderFromEitherMesh) {
  Loaded<sharc_gen::interop_gpt2_model4::Program> model4;
  Loaded<sharc_gen::interop_gpt2_fsdp2_model2::Program> fsdp2;
  const HfConfig config = read_hf_config(kGpt2 / "hf");
  const fs::path a = out_root() / "export" / "gpt2_tiny", b = out_root() / "export_fsdp" / "gpt2_tiny";
  export_hf(model4.program, a, config);
  export_hf(fsdp2.program, b, config);
  export_hf(fsdp2.program, b, config);  // over an earlier export
  for (const char* file : {"config.json", "model.safetensors"}) {
    const std::string committed = read_bytes(kGpt2 / "export" / file);
    EXPECT_FALSE(committed.empty()) << file;
    EXPECT_TRUE(read_bytes(a / file) == committed) << file << " differs from " << (kGpt2 / "export" / file);
    EXPECT_TRUE(read_bytes(b / file) == committed) << file << " (from fsdp=2,model=2) differs";
  }
  // Nothing else left beside it (the Llama test's export may be there too).
  for (const auto& e : fs::directory_iterator(b.parent_path()))
    EXPECT_TRUE(e.path().filename() == "gpt2_tiny" || e.path().filename() == "llama_tiny") << e.path();
  // And it imports again to the same parameters.
  Loaded<sharc_gen::interop_gpt2_fsdp2_model2::Program> again(b);
  EXPECT_EQ(again.parameters(), fsdp2.parameters());
}

template <class Program>
void expect_torch_adamw_losses() {
  Loaded<Program> l;
  const json& training = reference()["training"];
  int step = 0;
  for (const json& batch : training["batches"]) {
    const std::vector<float> tokens = tokens_of(batch["tokens"]), targets = tokens_of(batch["targets"]);
    float loss = 0, grad_norm = 0, lr = 0;
    typename Program::Inputs in;
    in.tokens = tokens.data();
    in.targets = targets.data();
    typename Program::Outputs out;
    out.loss = &loss;
    out.grad_norm = &grad_norm;
    out.lr = &lr;
    l.program.step(in, out);
    const double want = training["losses"][static_cast<size_t>(step)].get<double>();
    std::printf("%s step %d: loss %.7f, torch %.7f, relative difference %.2g\n",
                std::string(Program::mesh_shape().to_string()).c_str(), step, loss, want,
                std::abs(loss - want) / want);
    EXPECT_NEAR(loss, want, 1e-4 * want) << "step " << step;
    ++step;
  }
  EXPECT_EQ(step, 5);
}

TEST(HfInterop, FiveAdamWStepsWithTwoDecayGroupsAreTorchsOnData2Model2) {
  expect_torch_adamw_losses<sharc_gen::interop_gpt2_train_data2_model2::Program>();
}

TEST(HfInterop, FiveAdamWStepsWithTwoDecayGroupsAreTorchsOnFsdp2Model2Scanned) {
  expect_torch_adamw_losses<sharc_gen::interop_gpt2_train_fsdp2_model2::Program>();
}

// ---- bad input --------------------------------------------------------------

// A copy of the fixture's folder under `name`, its config edited by `edit`.
fs::path folder_copy(const std::string& name, const std::function<void(json&)>& edit = {}) {
  const fs::path d = out_root() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy_file(kGpt2 / "hf" / "model.safetensors", d / "model.safetensors");
  json config = read_json(kGpt2 / "hf" / "config.json");
  if (edit) edit(config);
  std::ofstream(d / "config.json") << config.dump(2);
  return d;
}

// Rewrites `d`/model.safetensors through `edit` (name, shape, values) ->
// keep it or not, adding `extra`.
using Tensors = std::vector<std::tuple<std::string, std::vector<int64_t>, std::vector<std::byte>>>;
void rewrite_tensors(const fs::path& d,
                     const std::function<bool(std::string&, std::vector<int64_t>&, std::vector<std::byte>&)>& edit,
                     Tensors extra = {}) {
  Tensors tensors = std::move(extra);
  {
    rt::SafetensorsFile f(d / "model.safetensors");
    for (const rt::SafetensorsTensor& t : f.tensors()) {
      std::string name = t.name;
      std::vector<int64_t> shape = t.shape;
      std::vector<std::byte> bytes = f.read_tensor(t.name);
      if (edit(name, shape, bytes)) tensors.emplace_back(name, shape, std::move(bytes));
    }
  }
  rt::SafetensorsWriter w;
  for (const auto& [name, shape, bytes] : tensors) w.add(name, "F32", shape, bytes);
  w.set_metadata("format", "pt");
  w.write(d / "model.safetensors");
}

using Model4 = Loaded<sharc_gen::interop_gpt2_model4::Program>;

// import_hf of `folder` into a loaded program throws and changes nothing.
#define EXPECT_IMPORT_FAILS(folder, text)                                                          \
  do {                                                                                             \
    Model4 l_;                                                                                     \
    const auto before_ = l_.parameters();                                                          \
    EXPECT_ERROR_CONTAINS(import_hf(l_.program, folder, read_hf_config(kGpt2 / "hf")), std::runtime_error, text); \
    EXPECT_EQ(l_.parameters(), before_) << "a failed import changed parameters";                  \
  } while (0)

// A sharded checkpoint (model.safetensors.index.json and two files, as
// save_pretrained writes large models): the same parameters as the single
// file; an index naming a file that is not there, or a tensor a file does
// not hold, is an error naming it.
TEST(HfInterop, AShardedCheckpointImportsAsTheSingleFile) {
  const fs::path d = out_root() / "sharded";
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy_file(kGpt2 / "hf" / "config.json", d / "config.json");
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  {
    rt::SafetensorsFile f(kGpt2 / "hf" / "model.safetensors");
    rt::SafetensorsWriter first, second;
    std::vector<std::vector<std::byte>> keep;
    for (const rt::SafetensorsTensor& t : f.tensors()) {
      keep.push_back(f.read_tensor(t.name));
      const bool layer1 = t.name.find(".h.1.") != std::string::npos;
      (layer1 ? second : first).add(t.name, t.dtype, t.shape, keep.back());
      index["weight_map"][t.name] = layer1 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    }
    first.set_metadata("format", "pt");
    second.set_metadata("format", "pt");
    first.write(d / "model-00001-of-00002.safetensors");
    second.write(d / "model-00002-of-00002.safetensors");
  }
  std::ofstream(d / "model.safetensors.index.json") << index.dump(2);
  Model4 single;
  Loaded<sharc_gen::interop_gpt2_model4::Program> sharded(d);
  EXPECT_EQ(sharded.parameters(), single.parameters());
  EXPECT_EQ(sharded.result.files.size(), 2u);
  EXPECT_EQ(sharded.result.bytes_read, single.result.bytes_read);

  index["weight_map"]["transformer.ln_f.bias"] = "model-00003-of-00002.safetensors";
  std::ofstream(d / "model.safetensors.index.json") << index.dump(2);
  EXPECT_IMPORT_FAILS(d, "model.safetensors.index.json: tensor \"transformer.ln_f.bias\" is in "
                         "model-00003-of-00002.safetensors, which is not in the folder");
  index["weight_map"]["transformer.ln_f.bias"] = "model-00002-of-00002.safetensors";
  std::ofstream(d / "model.safetensors.index.json") << index.dump(2);
  EXPECT_IMPORT_FAILS(d, "model-00002-of-00002.safetensors: no tensor \"transformer.ln_f.bias\", which the index puts "
                         "there");
  index["weight_map"]["transformer.ln_f.bias"] = "../model.safetensors";
  std::ofstream(d / "model.safetensors.index.json") << index.dump(2);
  EXPECT_IMPORT_FAILS(d, "model.safetensors.index.json: tensor \"transformer.ln_f.bias\" maps to "
                         "\"../model.safetensors\", not a file in the folder");
}

// A BF16 checkpoint (as Llama checkpoints usually are): each value read as
// the float it is.
TEST(HfInterop, ABf16CheckpointImportsItsValues) {
  const fs::path d = out_root() / "bf16";
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy_file(kGpt2 / "hf" / "config.json", d / "config.json");
  {
    rt::SafetensorsFile f(kGpt2 / "hf" / "model.safetensors");
    rt::SafetensorsWriter w;
    std::vector<std::vector<uint16_t>> keep;
    for (const rt::SafetensorsTensor& t : f.tensors()) {
      const std::vector<std::byte> bytes = f.read_tensor(t.name);
      std::vector<float> values(bytes.size() / 4);
      std::memcpy(values.data(), bytes.data(), bytes.size());
      keep.emplace_back();
      for (float v : values) keep.back().push_back(rt::bf16_bits_from_float(v));
      w.add(t.name, "BF16", t.shape, std::as_bytes(std::span<const uint16_t>(keep.back())));
    }
    w.write(d / "model.safetensors");
  }
  Model4 f32;
  Loaded<sharc_gen::interop_gpt2_model4::Program> bf16(d);
  int64_t rounded = 0;
  const auto all = bf16.parameters();
  for (const auto& [name, values] : f32.parameters()) {
    if (name.rfind("opt/", 0) == 0) continue;
    const std::vector<float>& got = all.at(name);
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(got[i], rt::round_to_bf16(values[i])) << name << "[" << i << "]";
      rounded += got[i] != values[i];
    }
  }
  EXPECT_GT(rounded, 1000) << "the BF16 values must differ from the F32 ones";
  EXPECT_EQ(bf16.result.bytes_read * 2, f32.result.bytes_read);
}

TEST(HfInteropErrors, AMissingTensorIsNamedWithTheParameterThatNeedsIt) {
  const fs::path d = folder_copy("missing");
  rewrite_tensors(d, [](std::string& name, auto&, auto&) { return name != "transformer.h.1.mlp.c_fc.weight"; });
  EXPECT_IMPORT_FAILS(d, "model.safetensors: no tensor \"transformer.h.1.mlp.c_fc.weight\", which the program's "
                         "\"h1/mlp/fc/kernel\" needs");
}

TEST(HfInteropErrors, AWrongShapeNamesBothShapes) {
  const fs::path d = folder_copy("shape");
  rewrite_tensors(d, [](std::string& name, std::vector<int64_t>& shape, std::vector<std::byte>& bytes) {
    if (name == "transformer.h.0.attn.c_attn.weight") {
      shape = {32, 40};
      bytes.resize(32 * 40 * 4);
    }
    return true;
  });
  EXPECT_IMPORT_FAILS(d, "model.safetensors: tensor \"transformer.h.0.attn.c_attn.weight\" is [32,40], but the "
                         "program's \"h0/attn/qkv/kernel\" needs [32,96]");
}

TEST(HfInteropErrors, ATensorNoParameterTakesIsRefused) {
  const fs::path d = folder_copy("extra");
  rewrite_tensors(d, [](auto&, auto&, auto&) { return true; },
                  {{"transformer.h.0.attn.rotary.weight", {32}, std::vector<std::byte>(32 * 4)}});
  EXPECT_IMPORT_FAILS(d, "model.safetensors: tensor \"transformer.h.0.attn.rotary.weight\" is not part of a gpt2 "
                         "model sharc knows; no parameter of the program takes it");
}

TEST(HfInteropErrors, ATruncatedFileIsNamed) {
  const fs::path d = folder_copy("truncated");
  fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 100);
  EXPECT_IMPORT_FAILS(d, "model.safetensors");
}

TEST(HfInteropErrors, AConfigTheProgramWasNotGeneratedForNamesBothValues) {
  EXPECT_IMPORT_FAILS(folder_copy("layers", [](json& c) { c["n_layer"] = 3; }),
                      "config.json: n_layer is 3, but the program was generated for 2");
  EXPECT_IMPORT_FAILS(folder_copy("vocab", [](json& c) { c["vocab_size"] = 50257; }),
                      "config.json: vocab_size is 50257, but the program was generated for 64");
  EXPECT_IMPORT_FAILS(folder_copy("heads", [](json& c) { c["n_head"] = 8; }),
                      "config.json: n_head is 8, but the program was generated for 4");
}

TEST(HfInteropErrors, HeadsTheTensorParallelAxisDoesNotDivideAreRefused) {
  // A checkpoint of 2 heads, and a program said to be generated for it, on model=4.
  const fs::path d = folder_copy("two_heads", [](json& c) { c["n_head"] = 2; });
  Model4 l;
  EXPECT_ERROR_CONTAINS(import_hf(l.program, d, read_hf_config(d)), InteropError,
                        "config.json: n_head is 2, which the mesh's 'model' (4 devices) does not divide: each "
                        "device must hold whole heads");
  // A Llama of 2 key/value heads for 8 query heads, on model=4.
  const fs::path kv = out_root() / "two_kv_heads";
  fs::remove_all(kv);
  fs::create_directories(kv);
  fs::copy_file(kLlama / "hf" / "model.safetensors", kv / "model.safetensors");
  json config = read_json(kLlama / "hf" / "config.json");
  config["num_key_value_heads"] = 2;
  std::ofstream(kv / "config.json") << config.dump(2);
  Loaded<sharc_gen::interop_llama_model4::Program> llama({}, kLlama);
  EXPECT_ERROR_CONTAINS(import_hf(llama.program, kv, read_hf_config(kv)), InteropError,
                        "config.json: num_key_value_heads is 2, which the mesh's 'model' (4 devices) does not "
                        "divide: each device must hold whole heads");
}

TEST(HfInteropErrors, AnUnknownArchitectureIsNamed) {
  const fs::path d = folder_copy("bert", [](json& c) { c["model_type"] = "bert"; });
  EXPECT_ERROR_CONTAINS(read_hf_config(d), InteropError,
                        "config.json: unknown architecture \"bert\"; sharc reads \"gpt2\" (GPT2LMHeadModel) and "
                        "\"llama\" (LlamaForCausalLM)");
  EXPECT_IMPORT_FAILS(d, "unknown architecture \"bert\"");
  EXPECT_ERROR_CONTAINS(read_hf_config(folder_copy("relu", [](json& c) { c["activation_function"] = "relu"; })),
                        InteropError, "\"activation_function\" is \"relu\", but sharc's GPT computes GELU's tanh form");
  EXPECT_ERROR_CONTAINS(read_hf_config(out_root() / "nowhere"), InteropError,
                        "nowhere/config.json: cannot be read (a Hugging Face model folder holds config.json)");
}

// `f` throws a sharc::Error at this file's `line`; returns its message,
// logged with the test's folders shown as DIR/ (expect_error.h's error_at
// logs them whole, and they hold this process's id).
std::string error_at_line(int line, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.loc().file, std::string(__FILE__));
    EXPECT_EQ(e.loc().line, line);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(std::string(__FILE__) + ":" + std::to_string(line) + ": error: ", 0), 0u) << what;
    return sharc::testing::log_error_message(what, log_replacements());
  }
  ADD_FAILURE() << "expected sharc::Error, nothing was thrown";
  return "";
}

TEST(HfInteropErrors, GptConfigFromHfErrorsAreAtTheCallersLine) {
  const fs::path d = folder_copy("from_hf_llama", [](json& c) {
    c = json{{"model_type", "llama"}, {"vocab_size", 64}, {"max_position_embeddings", 16}, {"hidden_size", 32},
             {"num_attention_heads", 4}, {"num_hidden_layers", 2}, {"intermediate_size", 80}};
  });
  const int line = __LINE__ + 1;
  const std::string what = error_at_line(line, [&] { GPTConfig::from_hf(d.string()); });
  EXPECT_NE(what.find("config.json: the model is llama, but GPTConfig::from_hf reads GPT-2 configs"), std::string::npos)
      << what;
  const fs::path inner = folder_copy("from_hf_inner", [](json& c) { c["n_inner"] = 100; });
  const int line2 = __LINE__ + 1;
  const std::string what2 = error_at_line(line2, [&] { GPTConfig::from_hf(inner.string()); });
  EXPECT_NE(what2.find("\"n_inner\" is 100, not a multiple of n_embd 32"), std::string::npos) << what2;
  const int line3 = __LINE__ + 1;
  const std::string what3 = error_at_line(line3, [&] { LlamaConfig::from_hf((kGpt2 / "hf").string()); });
  EXPECT_NE(what3.find("the model is gpt2, but LlamaConfig::from_hf reads Llama configs"), std::string::npos) << what3;
  const LlamaConfig l = LlamaConfig::from_hf((kLlama / "hf").string());
  EXPECT_EQ(l.heads, 8);
  EXPECT_EQ(l.kv_heads, 4);
  EXPECT_EQ(l.mlp_hidden, 96);
  EXPECT_FALSE(l.tie_embeddings);
  // And a good one: the fixture's sizes.
  const GPTConfig c = GPTConfig::from_hf((kGpt2 / "hf").string());
  EXPECT_EQ(c.vocab, 64);
  EXPECT_EQ(c.context, 16);
  EXPECT_EQ(c.embed, 32);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.mlp_ratio, 4);
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_TRUE(c.tie_embeddings);
}

}  // namespace
}  // namespace sharc::interop
