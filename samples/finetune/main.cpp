// Fine-tunes a Hugging Face GPT-2 on a text file on the mesh you pick, and
// exports the result as a folder transformers loads:
//
//   finetune_main --model DIR --text FILE --mesh data=2,model=2 --out DIR
//                 [--steps N] [--seed S] [--sample N] [--prompt TEXT]
//                 [--temperature T] [--check]
//
//  1. Tokenizes the text with the model's own tokenizer (DIR/vocab.json and
//     merges.txt; runtime/tokenizer.h) and cuts it into windows of the
//     programs' context: window w is tokens [wT, wT + T) and their next
//     tokens as labels; after the end of the text the tokens are
//     <|endoftext|> and the labels -100, which the loss ignores. The last
//     tenth of the windows (at least one) is held out.
//  2. Imports DIR (runtime/interop.h) into the training program generated
//     for --mesh (model.h has the recipe) and into a one-device logits
//     program, which measures the held-out loss before training.
//  3. Trains --steps steps on batches of the other windows, reshuffled every
//     pass, printing the loss and learning rate; --check runs the first step
//     through the fp64 oracle too (the global program interpreted on the
//     imported weights) and fails unless the losses agree.
//  4. Copies the weights into the logits program: the held-out loss after
//     training, and --sample tokens of text after --prompt.
//  5. Exports to --out (config.json, model.safetensors) with the tokenizer's
//     files beside them, then imports --out again and checks it gives the
//     same held-out loss.
//
// The programs are generated at build time for one config.json
// (SHARC_FINETUNE_MODEL) and a list of meshes (SHARC_FINETUNE_MESHES); a
// --model whose config differs is refused, naming both values.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "codegen/interpret.h"
#include "finetune_logits.h"
#include "finetune_programs.h"
#include "runtime/interop.h"
#include "runtime/thread_world.h"
#include "runtime/tokenizer.h"
#include "samples/finetune/model.h"

namespace {

namespace fs = std::filesystem;
using sharc::interop::Gpt2Tokenizer;
using sharc::interop::HfConfig;
using Logits = sharc_gen::finetune_logits::Program;

struct Options {
  std::string model = FINETUNE_MODEL;
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string mesh = "data=2,model=2";
  std::string out = "finetuned";
  int steps = FINETUNE_STEPS;
  uint64_t seed = 0;
  int sample = 60;  // tokens
  std::string prompt = "This License";
  double temperature = 0.8;
  bool check = false;
};

std::string built_meshes() {
  std::string s;
#define FINETUNE_MESH_NAME(spelling, Program) s += std::string(s.empty() ? "" : ", ") + spelling;
  FINETUNE_TRAIN_PROGRAMS(FINETUNE_MESH_NAME)
#undef FINETUNE_MESH_NAME
  return s;
}

int parse(int argc, char** argv, Options& o) {
  CLI::App app{"Fine-tunes a Hugging Face GPT-2 on a text file on a mesh, and exports it for transformers.",
               "finetune_main"};
  app.add_option("--model", o.model, "the GPT-2 folder (config.json, model.safetensors, vocab.json, merges.txt)")
      ->capture_default_str();
  app.add_option("--text", o.text, "the text to fine-tune on")->capture_default_str();
  sharc::cli::add_mesh(app, o.mesh, "the training program's mesh: " + built_meshes());
  app.add_option("--out", o.out, "the folder to export the fine-tuned model to")->capture_default_str();
  app.add_option("--steps", o.steps, "training steps")->check(sharc::cli::at_least(0))->capture_default_str();
  app.add_option("--seed", o.seed, "data order, dropout and sampling")->capture_default_str();
  app.add_option("--sample", o.sample, "tokens sampled after training")
      ->check(sharc::cli::at_least(0))
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "the start of the sample")->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")
      ->check(sharc::cli::non_negative())
      ->capture_default_str();
  app.add_flag("--check", o.check, "check the first step against the fp64 oracle");
  return sharc::cli::parse(app, argc, argv);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text cut into windows of `context` tokens (step 1 above).
struct Windows {
  int64_t count = 0, context = 0;
  std::vector<float> tokens, labels;  // count x context each
};

Windows cut(const std::vector<int32_t>& ids, int64_t context, int32_t pad) {
  Windows w;
  w.context = context;
  w.count = (static_cast<int64_t>(ids.size()) - 1 + context - 1) / context;
  w.tokens.assign(w.count * context, static_cast<float>(pad));
  w.labels.assign(w.count * context, static_cast<float>(finetune::kIgnoredLabel));
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(ids.size()); ++i) {
    w.tokens[i] = static_cast<float>(ids[i]);
    w.labels[i] = static_cast<float>(ids[i + 1]);
  }
  return w;
}

// The mean cross entropy, in double, of the labels that count in windows
// [first, last), from the logits program (batch windows at a time).
double held_out_loss(Logits& logits, const Windows& w, int64_t first, int64_t last, int64_t vocab) {
  const int64_t batch = Logits::input_info("tokens").shape[0], t = w.context;
  std::vector<float> tokens(batch * t), out(batch * t * vocab);
  double total = 0;
  int64_t counted = 0;
  for (int64_t start = first; start < last; start += batch) {
    const int64_t rows = std::min(batch, last - start);
    std::fill(tokens.begin(), tokens.end(), 0.0f);
    std::copy_n(w.tokens.begin() + start * t, rows * t, tokens.begin());
    Logits::Inputs in;
    in.tokens = tokens.data();
    Logits::Outputs o;
    o.logits = out.data();
    logits.forward(in, o);
    for (int64_t p = 0; p < rows * t; ++p) {
      const float label = w.labels[start * t + p];
      if (label == finetune::kIgnoredLabel) continue;
      const float* row = out.data() + p * vocab;
      const double top = *std::max_element(row, row + vocab);
      double sum = 0;
      for (int64_t k = 0; k < vocab; ++k) sum += std::exp(row[k] - top);
      total += std::log(sum) + top - row[static_cast<int64_t>(label)];
      ++counted;
    }
  }
  return total / static_cast<double>(counted);
}

// A uniform double in [0, 1) from the generator's raw bits.
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// --sample tokens after the prompt, each from the logits at the last
// position of the window holding the most recent tokens; stops at
// <|endoftext|>.
std::string sample(Logits& logits, const Gpt2Tokenizer& tok, const Options& o, int64_t vocab) {
  const int64_t batch = Logits::input_info("tokens").shape[0], t = Logits::input_info("tokens").shape[1];
  std::vector<int32_t> ids = tok.encode(o.prompt);
  if (ids.empty()) ids.push_back(tok.end_of_text().value_or(0));
  const size_t prompt_size = ids.size();
  std::vector<float> window(batch * t), out(batch * t * vocab);
  std::mt19937_64 rng(o.seed + 1);
  for (int i = 0; i < o.sample; ++i) {
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(ids.size()), t);
    std::fill(window.begin(), window.end(), 0.0f);
    for (int64_t k = 0; k < len; ++k) window[k] = static_cast<float>(ids[ids.size() - len + k]);
    Logits::Inputs in;
    in.tokens = window.data();
    Logits::Outputs res;
    res.logits = out.data();
    logits.forward(in, res);
    // Only ids the tokenizer has (a model's vocab_size may be larger).
    const int64_t n = std::min(vocab, tok.vocab_size());
    const float* row = out.data() + (len - 1) * vocab;
    int64_t next = std::max_element(row, row + n) - row;
    if (o.temperature > 0) {
      std::vector<double> p(n);
      double total = 0;
      for (int64_t k = 0; k < n; ++k) total += p[k] = std::exp((row[k] - row[next]) / o.temperature);
      double u = uniform(rng) * total;
      for (next = 0; next < n - 1 && u >= p[next]; ++next) u -= p[next];
    }
    if (tok.end_of_text() && next == *tok.end_of_text()) break;
    ids.push_back(static_cast<int32_t>(next));
  }
  return tok.decode(std::span<const int32_t>(ids).subspan(0, prompt_size)) + "|" +
         tok.decode(std::span<const int32_t>(ids).subspan(prompt_size));
}

// Every parameter of a program, as the oracle's state.
template <class Program>
sharc::HostValues parameters_of(Program& p) {
  sharc::HostValues state;
  for (const sharc::rt::TensorInfo& info : Program::parameters()) {
    std::vector<float> v(info.elements());
    p.get_parameter(info.name, v);
    state[std::string(info.name)] = std::vector<double>(v.begin(), v.end());
  }
  return state;
}

template <class Train>
int run(const Options& o) {
  const auto fail = [](const std::string& why) {
    std::fprintf(stderr, "finetune_main: %s\n", why.c_str());
    return 1;
  };
  try {
    // The programs were generated for FINETUNE_MODEL's config; import_hf
    // refuses a --model whose config differs, naming both values.
    const HfConfig generated_for = sharc::interop::read_hf_config(FINETUNE_MODEL);
    const Gpt2Tokenizer tok = Gpt2Tokenizer::load(o.model);
    const sharc::rt::TensorInfo& in = Train::input_info("tokens");
    const int64_t batch = in.shape[0], context = in.shape[1], vocab = generated_for.vocab;
    if (tok.vocab_size() > vocab)
      return fail((fs::path(o.model) / "vocab.json").string() + " has " + std::to_string(tok.vocab_size()) +
                  " ids, more than the model's vocab_size " + std::to_string(vocab));

    // 1. The text, tokenized and cut into windows.
    std::error_code ec;
    if (!fs::is_regular_file(o.text, ec)) return fail(o.text + ": not a readable file");
    const std::string text = read_file(o.text);
    const std::vector<int32_t> ids = tok.encode(text);
    const Windows w = cut(ids, context, tok.end_of_text().value_or(0));
    if (w.count < 2)
      return fail(o.text + " is " + std::to_string(ids.size()) + " tokens, fewer than two windows of " +
                  std::to_string(context) + " (one to train on, one held out)");
    const int64_t held_out = std::max<int64_t>(1, w.count / 10), train_windows = w.count - held_out;
    std::printf("text: %s, %zu bytes, %zu tokens: %lld windows of %lld, %lld held out\n", o.text.c_str(),
                text.size(), ids.size(), static_cast<long long>(w.count), static_cast<long long>(context),
                static_cast<long long>(held_out));

    // 2. The model, imported into both programs.
    sharc::rt::ThreadWorld train_world(Train::mesh_shape()), one_device(Logits::mesh_shape());
    Train train(train_world);
    train.init(o.seed);  // the optimizer state; the weights come from the folder
    const sharc::interop::ImportResult imported = sharc::interop::import_hf(train, o.model, generated_for);
    Logits logits(one_device);
    sharc::interop::import_hf(logits, o.model, generated_for);
    std::printf("model: %s, GPT-2 of %lld layers, %lld heads, width %lld, vocab %lld: %lld tensors, %llu bytes "
                "read\n",
                o.model.c_str(), static_cast<long long>(generated_for.layers),
                static_cast<long long>(generated_for.heads), static_cast<long long>(generated_for.embed),
                static_cast<long long>(vocab), static_cast<long long>(imported.tensors),
                static_cast<unsigned long long>(imported.bytes_read));
    std::printf("training: mesh %s, batch %lld x %lld tokens, AdamW (peak lr %g, %d steps of schedule)\n",
                o.mesh.c_str(), static_cast<long long>(batch), static_cast<long long>(context),
                FINETUNE_LR_MILLIONTHS * 1e-6, FINETUNE_STEPS);
    const double before = held_out_loss(logits, w, train_windows, w.count, vocab);

    // 3. Training.
    std::mt19937_64 rng(o.seed);
    std::vector<int64_t> order;
    size_t next_window = 0;
    std::vector<float> tokens(batch * context), labels(batch * context);
    const auto t0 = std::chrono::steady_clock::now();
    float first_loss = 0, last_loss = 0;
    for (int step = 0; step < o.steps; ++step) {
      for (int64_t r = 0; r < batch; ++r) {
        if (next_window == order.size()) {  // a new pass over the training windows
          order.resize(train_windows);
          for (int64_t k = 0; k < train_windows; ++k) order[k] = k;
          std::shuffle(order.begin(), order.end(), rng);
          next_window = 0;
        }
        const int64_t win = order[next_window++];
        std::copy_n(w.tokens.begin() + win * context, context, tokens.begin() + r * context);
        std::copy_n(w.labels.begin() + win * context, context, labels.begin() + r * context);
      }
      const float seed = static_cast<float>((o.seed * 100003 + step) % (1 << 24));
      double want = 0;
      if (o.check && step == 0) {
        const sharc::ir::Graph global = sharc::trace("finetune_train", [&](sharc::ProgramBuilder& b) {
          sharc::GPTConfig c = sharc::GPTConfig::from_hf(FINETUNE_MODEL);
          c.scan = true;  // as model.cpp generates it (the same numbers either way)
          finetune::build_train(b, c,
                                {.batch = batch, .context = context, .steps = FINETUNE_STEPS,
                                 .peak_lr = FINETUNE_LR_MILLIONTHS * 1e-6});
        });
        sharc::HostValues state = parameters_of(train);
        want = sharc::interpret(global,
                                {{"tokens", {tokens.begin(), tokens.end()}},
                                 {"labels", {labels.begin(), labels.end()}},
                                 {"dropout_seed", {seed}}},
                                o.seed, &state)
                   .at("loss")[0];
      }
      typename Train::Inputs step_in;
      step_in.tokens = tokens.data();
      step_in.labels = labels.data();
      step_in.dropout_seed = &seed;
      float loss = 0, grad_norm = 0, lr = 0;
      typename Train::Outputs step_out;
      step_out.loss = &loss;
      step_out.grad_norm = &grad_norm;
      step_out.lr = &lr;
      train.step(step_in, step_out);
      if (o.check && step == 0) {
        // fp32 devices against the fp64 oracle: a mean of batch x context
        // cross entropies; 1e-5 relative is ~100x the rounding.
        const bool ok = std::fabs(loss - want) <= 1e-5 * std::fabs(want);
        std::printf("check: step 1 loss %.7f, oracle %.7f: %s\n", loss, want, ok ? "PASS" : "FAIL");
        if (!ok) return 1;
      }
      if (!std::isfinite(loss)) return fail("the loss is " + std::to_string(loss) + " at step " + std::to_string(step + 1));
      if (step == 0) first_loss = loss;
      last_loss = loss;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %4d/%d  loss %.4f  lr %.2e  grad_norm %6.3f  [%5.1f s]\n", step + 1, o.steps, loss, lr,
                  grad_norm, elapsed);
      std::fflush(stdout);
    }
    if (o.steps > 0)
      std::printf("trained %d step%s: loss %.4f at the first, %.4f at the last\n", o.steps, o.steps == 1 ? "" : "s",
                  first_loss, last_loss);

    // 4. The fine-tuned weights in the logits program: held-out loss, sample.
    for (const sharc::rt::TensorInfo& p : Logits::parameters()) {
      std::vector<float> value(p.elements());
      train.get_parameter(p.name, value);
      logits.set_parameter(p.name, value);
    }
    const double after = held_out_loss(logits, w, train_windows, w.count, vocab);
    std::printf("held-out loss %.6f before, %.6f after: %s\n", before, after, after < before ? "lower" : "NOT LOWER");
    if (o.sample > 0) {
      char how[64] = "greedy";
      if (o.temperature > 0) std::snprintf(how, sizeof how, "temperature %g", o.temperature);
      std::printf("sample (%d tokens, %s; the prompt, then |):\n%s\n", o.sample, how,
                  sample(logits, tok, o, vocab).c_str());
    }

    // 5. The export, with its tokenizer, and the same loss from it.
    sharc::interop::export_hf(train, o.out, imported.config);
    for (const fs::path& f : tok.files())
      fs::copy_file(f, fs::path(o.out) / f.filename(), fs::copy_options::overwrite_existing);
    std::printf("exported to %s (config.json, model.safetensors, vocab.json, merges.txt)\n", o.out.c_str());
    sharc::interop::import_hf(logits, o.out, generated_for);
    const double reloaded = held_out_loss(logits, w, train_windows, w.count, vocab);
    std::printf("reloaded: held-out loss %.6f, %s\n", reloaded,
                reloaded == after ? "the same" : "NOT THE SAME as before the export");
    return reloaded == after ? 0 : 1;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int code = parse(argc, argv, o); code >= 0) return code;
#define FINETUNE_RUN(spelling, Program) \
  if (o.mesh == spelling) return run<Program>(o);
  FINETUNE_TRAIN_PROGRAMS(FINETUNE_RUN)
#undef FINETUNE_RUN
  return sharc::cli::fail("finetune_main", "no program was generated for --mesh " + o.mesh +
                                               "; the meshes built are " + built_meshes() +
                                               " (SHARC_FINETUNE_MESHES)");
}
