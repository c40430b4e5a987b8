// Trains the character-level GPT-2 of model.h on a real text on 8 simulated
// devices, then samples from it. The text is the GNU GPL (every Debian
// machine has /usr/share/common-licenses/GPL-3); its characters, sorted by
// byte value, are the vocabulary. Each step trains on random windows of the
// text (a fixed-seed generator, so a run is reproducible) and prints its loss;
// the trained parameters are then copied, whole, from the training program
// into the sampling program (get_parameter / set_parameter: the two programs
// may lay them out differently) and the model writes --sample characters.
//
//   gpt2_main --mesh data=2,model=4 --steps 600 --sample 300 [--temperature 0.8]
//             [--seed 0] [--check] [--text FILE] [--prompt "The "]
//   gpt2_main --mesh pipe=2,data=2,model=2 --schedule 1f1b --microbatches 8
//   gpt2_main ... --trace step.json [--virtual-clock]
//   mpirun -np 4 gpt2_main --mesh data=4,model=2 --local-devices 2 ...
//
// --local-devices L runs on an MpiWorld (built when MPI is found): P
// processes under mpirun with L devices each, P x L the mesh's devices. Every
// process draws the same windows; the run is bit for bit the one-process
// run, and process 0 prints.
//
// --trace writes the last training step's timeline as a Chrome trace (open
// it in ui.perfetto.dev): one track per device, every statement, collective,
// send and recv named after its model.cpp line. It is timed on the wall
// clock, or with --virtual-clock on the runtime's virtual clock (each
// statement charged its modelled cost, each message its time on a 20 us +
// 2 GB/s link; deterministic), which also prints the step's modelled time
// and the devices' idle share (the pipeline's bubble and every wait).
//
// The pipelined mesh runs one block per stage; its schedule and micro-batch
// count are compiled in (model.h, gpt2::pipeline), so the flags only confirm
// them.
//
// --check also runs the first step through the fp64 oracle (the global
// program interpreted in double precision) and fails unless the losses agree.
//
//   gpt2_main --config gpt2-124m (--synthetic | --tokens FILE) [--steps N] [--seed S]
//
// trains GPT-2 124M (model.h's config_124m, scanned blocks; the program
// gpt2_124m_train built for data=1, its batch and context the CMake cache
// variables SHARC_GPT2_124M_BATCH and SHARC_GPT2_124M_CONTEXT) on random
// windows of a token file (uint16 ids, little-endian, as llm.c's data
// scripts write them: a file that starts with llm.c's 1024-byte header has it
// skipped) or, with --synthetic, on uniformly random tokens. Each step prints
// its loss, time and tokens/s; there is no sampling (the ids are BPE tokens,
// and sharc has no tokenizer).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "gpt2_124m_train_data1.h"
#include "gpt2_logits_data2_model4.h"
#include "gpt2_logits_data4_model2.h"
#include "gpt2_logits_data8.h"
#include "gpt2_logits_fsdp4_model2.h"
#include "gpt2_logits_model8.h"
#include "gpt2_logits_pipe2_data2_model2.h"
#if SHARC_SAMPLES_CUDA
#include "gpt2_train_cuda_data2_model4.h"
#include "gpt2_train_cuda_fsdp4_model2.h"
#include "gpt2_train_cuda_pipe2_data2_model2.h"
#endif
#include "gpt2_train_auto.h"
#include "gpt2_train_data2_model4.h"
#include "gpt2_train_data4_model2.h"
#include "gpt2_train_data8.h"
#include "gpt2_train_fsdp4_model2.h"
#include "gpt2_train_model8.h"
#include "gpt2_train_pipe2_data2_model2.h"
#include "runtime/trace.h"
#include "codegen/cli.h"
#include "samples/common/worlds.h"
#include "samples/gpt2/model.h"
#include "samples/gpt2/train_step.h"
#ifdef SHARC_HAVE_MPI
#include "runtime/mpi_world.h"
#endif

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string mesh = "data=2,model=4";
  int steps = 600;  // the schedule's length (model.h)
  int sample = 300;
  double temperature = 0.8;  // 0: greedy
  uint64_t seed = 0;
  bool check = false;
  std::string text;  // empty: the GPL
  std::string prompt = "The ";
  // Pipelined meshes: the schedule and micro-batch count asked for (they are
  // compiled into the program, so they must be the built ones).
  std::string schedule;
  int microbatches = 0;
  std::string trace;  // Chrome trace of the last step
  bool virtual_clock = false;
  int local_devices = 0;  // > 0: an MpiWorld with this many devices per process
  std::string config = "char";  // or "gpt2-124m"
  std::string tokens;           // gpt2-124m: a file of uint16 token ids
  bool synthetic = false;       // gpt2-124m: random tokens
  samples::WorldChoice world;   // --backend cuda [--world sim|gpu|nccl]
};

// A mistake on the command line, found after parsing: printed as CLI11's are.
[[noreturn]] void usage(const std::string& why) { std::exit(sharc::cli::fail("gpt2_main", why)); }

// The command line (codegen/cli.h). Returns -1 to go on with `o` filled, or
// the status main() returns (0 after --help, 2 after a mistake).
int parse(int argc, char** argv, Options& o) {
  CLI::App app{"Trains the GPT-2 sample (a character model on a text, or GPT-2 124M on tokens) on the "
               "strategy a mesh picks, then samples from it.",
               "gpt2_main"};
  sharc::cli::add_mesh(app, o.mesh,
                       "the strategy's mesh: data=8, model=8, data=2,model=4, data=4,model=2, fsdp=4,model=2, "
                       "pipe=2,data=2,model=2 (1f1b, 8 micro-batches), auto (the planner's choice for 8 "
                       "devices, MESH auto); --backend cuda: data=2,model=4, fsdp=4,model=2, pipe=2,data=2,model=2");
  app.add_option("--steps", o.steps, "training steps")->check(sharc::cli::at_least(0))->capture_default_str();
  app.add_option("--sample", o.sample, "characters sampled after training")
      ->check(sharc::cli::at_least(0))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")
      ->check(sharc::cli::non_negative())
      ->capture_default_str();
  app.add_option("--seed", o.seed, "parameter initialisation, data order and sampling")->capture_default_str();
  app.add_flag("--check", o.check, "check every step against the fp64 oracle");
  app.add_option("--text", o.text, "the text to train on (default: the GPL in /usr/share/common-licenses)");
  app.add_option("--prompt", o.prompt, "the start of the sample")->capture_default_str();
  app.add_option("--schedule", o.schedule, "with a pipe axis: the schedule the program was built for");
  app.add_option("--microbatches", o.microbatches, "with a pipe axis: the micro-batch count it was built for")
      ->check(sharc::cli::at_least(1));
  app.add_option("--trace", o.trace, "write the last step's timeline here (Chrome trace JSON)");
  app.add_flag("--virtual-clock", o.virtual_clock, "time the trace on the cost model's virtual clock");
  app.add_option("--local-devices", o.local_devices, "under mpirun: the devices each process drives")
      ->check(sharc::cli::at_least(1));
  app.add_option("--config", o.config, "char: the character model; gpt2-124m: GPT-2 124M on tokens")
      ->check(CLI::IsMember({"char", "gpt2-124m"}))
      ->capture_default_str();
  app.add_option("--tokens", o.tokens, "gpt2-124m: a file of uint16 token ids");
  app.add_flag("--synthetic", o.synthetic, "gpt2-124m: random tokens");
  o.world.add_to(app);
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (const std::string error = o.world.check(); !error.empty()) usage(error);
  if (o.world.cuda() && (o.local_devices || o.config != "char"))
    usage("--backend cuda runs the character model on one process (no --local-devices, no --config)");
#ifndef SHARC_HAVE_MPI
  if (o.local_devices) usage("--local-devices needs MPI, and this gpt2_main was built without it");
#endif
  if (o.local_devices && (!o.trace.empty() || o.virtual_clock))
    usage("--trace and --virtual-clock need the one-process thread world (no --local-devices)");
  if (o.config == "gpt2-124m") {
    if (o.synthetic == !o.tokens.empty())
      usage("--config gpt2-124m trains on --synthetic tokens or on a --tokens FILE: give one");
    if (o.check || !o.text.empty() || o.local_devices || !o.trace.empty() ||
        (o.mesh != "data=2,model=4" && o.mesh != "data=1"))
      usage("--config gpt2-124m runs the data=1 program on one process: --check, --text, --mesh, "
            "--trace and --local-devices are for the character model");
  } else if (o.synthetic || !o.tokens.empty()) {
    usage("--synthetic and --tokens are for --config gpt2-124m");
  }
  return -1;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The GPL-3, else GPL-2, else the first readable file (by name) in the
// licenses folder, saying which; "" when there is none.
std::string load_text(const Options& o, std::string* source) {
  if (!o.text.empty()) {
    *source = o.text;
    return read_file(o.text);
  }
  const fs::path dir = "/usr/share/common-licenses";
  for (const char* name : {"GPL-3", "GPL-2"}) {
    std::error_code ec;
    if (fs::is_regular_file(dir / name, ec)) {
      if (std::string(name) != "GPL-3")
        std::printf("note: %s not found, training on %s instead\n", (dir / "GPL-3").c_str(),
                    (dir / name).c_str());
      *source = (dir / name).string();
      return read_file(dir / name);
    }
  }
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    std::string t = read_file(p);
    if (t.size() > 1000) {
      std::printf("note: neither GPL-3 nor GPL-2 is in %s, training on %s instead\n", dir.c_str(),
                  p.c_str());
      *source = p.string();
      return t;
    }
  }
  return "";
}

// Character vocabulary: the distinct bytes of the text in byte order. When
// there are more than the model's vocabulary, the most frequent vocab - 1
// (ties to the lower byte) keep an id and the rest share the last id, shown
// as '?'.
struct Vocab {
  std::vector<int> id_of = std::vector<int>(256, -1);
  std::vector<char> chars;
};

Vocab build_vocab(const std::string& text, int64_t capacity) {
  std::vector<int64_t> count(256, 0);
  for (unsigned char ch : text) ++count[ch];
  std::vector<int> used;
  for (int ch = 0; ch < 256; ++ch)
    if (count[ch] > 0) used.push_back(ch);
  const bool overflow = static_cast<int64_t>(used.size()) > capacity;
  if (overflow) {
    std::stable_sort(used.begin(), used.end(), [&](int a, int b) { return count[a] > count[b]; });
    used.resize(capacity - 1);
    std::sort(used.begin(), used.end());
  }
  Vocab v;
  for (int ch : used) {
    v.id_of[ch] = static_cast<int>(v.chars.size());
    v.chars.push_back(static_cast<char>(ch));
  }
  if (overflow) {
    for (int ch = 0; ch < 256; ++ch)
      if (v.id_of[ch] < 0) v.id_of[ch] = static_cast<int>(v.chars.size());
    v.chars.push_back('?');
  }
  return v;
}

// A uniform double in [0, 1) from the generator's raw bits (std::
// uniform_real_distribution is not the same on every standard library).
double uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// One training step of a GPT-2 program (train_step.h).
template <class TrainProgram>
gpt2::StepResult train_step(TrainProgram& train, const std::vector<float>& tokens, const std::vector<float>& targets,
                            float seed) {
  return gpt2::train_step(train, tokens.data(), targets.data(), seed);
}

template <class TrainProgram, class LogitsProgram>
int run(const Options& o, const sharc::rt::MeshShape& mesh, bool pipelined) {
  // The world first: under mpirun it starts MPI, and only process 0 prints.
  std::unique_ptr<sharc::rt::ThreadWorld> threads;
  std::unique_ptr<sharc::rt::World> mpi, gpu;
#ifdef SHARC_HAVE_MPI
  if (o.local_devices) {
    mpi = std::make_unique<sharc::rt::MpiWorld>(mesh, o.local_devices);
    if (mpi->process() != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  }
#endif
  if (o.world.cuda()) {  // a GPU world for the BACKEND cuda program
    std::string error;
    gpu = o.world.make(mesh, &error);
    if (!gpu) {
      std::fprintf(stderr, "gpt2_main: %s\n", error.c_str());
      return 1;
    }
  } else if (!mpi) {
    threads = std::make_unique<sharc::rt::ThreadWorld>(mesh);
  }
  sharc::rt::World& world = mpi ? *mpi : gpu ? *gpu : *threads;
  // The device threads (their clocks and traces), where there are any.
  sharc::rt::ThreadWorld* device_threads =
      gpu ? &dynamic_cast<sharc::gpu::SimGpuWorld&>(*gpu).threads() : threads.get();
  const sharc::GPTConfig cfg = gpt2::config(GPT2_LAYERS);
  const int64_t batch = gpt2::kTrainBatch, context = cfg.context;

  std::string source;
  const std::string text = load_text(o, &source);
  if (static_cast<int64_t>(text.size()) < context + 2) {
    std::fprintf(stderr, "gpt2_main: no usable text (%s has %zu bytes)\n",
                 source.empty() ? "/usr/share/common-licenses" : source.c_str(), text.size());
    return 1;
  }
  const Vocab vocab = build_vocab(text, cfg.vocab);
  std::vector<float> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    ids[i] = static_cast<float>(vocab.id_of[static_cast<unsigned char>(text[i])]);
  std::printf("text: %s, %zu characters, %zu distinct (model vocabulary %lld)\n", source.c_str(),
              text.size(), vocab.chars.size(), static_cast<long long>(cfg.vocab));
  std::printf("model: %lld layers, %lld heads, width %lld, context %lld; batch %lld; mesh %s\n",
              static_cast<long long>(cfg.layers), static_cast<long long>(cfg.heads),
              static_cast<long long>(cfg.embed), static_cast<long long>(context),
              static_cast<long long>(batch), mesh.to_string().c_str());
  if (mpi)
    std::printf("world: %d MPI processes x %d devices\n", world.processes(), o.local_devices);
  if (pipelined)
    std::printf("pipeline: %d stages, schedule %s, %d micro-batches of %lld windows\n",
                mesh.axis_sizes[mesh.axis_index("pipe")], gpt2::kPipelineSchedule, gpt2::kPipelineMicrobatches,
                static_cast<long long>(batch / gpt2::kPipelineMicrobatches));

  TrainProgram train(world);
  train.init(o.seed);

  // Random windows of the text: tokens[t] predicts targets[t] = tokens[t + 1].
  std::mt19937_64 rng(o.seed);
  std::vector<float> tokens(batch * context), targets(batch * context);
  auto fill_batch = [&] {
    for (int64_t b = 0; b < batch; ++b) {
      const size_t start = rng() % (text.size() - context - 1);
      std::copy_n(ids.begin() + start, context, tokens.begin() + b * context);
      std::copy_n(ids.begin() + start + 1, context, targets.begin() + b * context);
    }
  };

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> losses;
  for (int step = 0; step < o.steps; ++step) {
    fill_batch();
    if (step == o.steps - 1 && (!o.trace.empty() || o.virtual_clock)) {
      // The last step's timeline (set_clock clears what came before).
      if (o.virtual_clock) device_threads->set_link({.latency_s = 20e-6, .bytes_per_s = 2e9});
      device_threads->set_clock(o.virtual_clock ? sharc::rt::ClockMode::kVirtual : sharc::rt::ClockMode::kWall);
    }
    // Dropout masks: a new stream per step (floats are exact below 2^24).
    const float seed = static_cast<float>((o.seed * 100003 + step) % (1 << 24));
    gpt2::StepResult r;
    if (o.check && step == 0) {
      // The oracle sees the parameters as init() made them, before the step.
      // The BACKEND cuda programs have no dropout on the attention weights (model.h).
      const int64_t attention_dropout = o.world.cuda() ? 0 : 1;
      const sharc::ir::Graph global = sharc::trace("gpt2_train", [&](sharc::ProgramBuilder& b) {
        if (pipelined) b.set_pipeline(gpt2::pipeline());  // micro-batches change the dropout draws
        gpt2::build_train(b, gpt2::config(GPT2_LAYERS, 0, attention_dropout), gpt2::kTrainBatch,
                          gpt2::default_optimizer());
      });
      const double want = sharc::interpret(global,
                                           {{"tokens", {tokens.begin(), tokens.end()}},
                                            {"targets", {targets.begin(), targets.end()}},
                                            {"dropout_seed", {seed}}},
                                           o.seed)
                              .at("loss")[0];
      t0 = std::chrono::steady_clock::now();  // the timings leave the oracle out
      r = train_step(train, tokens, targets, seed);
      // fp32 on the devices against fp64: a mean of 1024 cross entropies over
      // 96 logits after two blocks; 1e-5 relative is ~100x the rounding.
      const bool ok = std::fabs(r.loss - want) <= 1e-5 * std::fabs(want);
      std::printf("check: step 0 loss %.7f, oracle %.7f: %s\n", r.loss, want, ok ? "PASS" : "FAIL");
      if (!ok) return 1;
    } else {
      r = train_step(train, tokens, targets, seed);
    }
    const float loss = r.loss, grad_norm = r.grad_norm, lr = r.lr;
    losses.push_back(loss);
    if (!std::isfinite(loss)) {
      std::fprintf(stderr, "gpt2_main: loss is %f at step %d\n", loss, step);
      return 1;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = elapsed / (step + 1) * (o.steps - step - 1);
    std::printf(
        "step %4d/%d  loss %.4f  lr %.2e  grad_norm %6.3f  [%5.1f s, %4.0f ms/step, eta %.0f s]\n",
        step + 1, o.steps, loss, lr, grad_norm, elapsed, 1e3 * elapsed / (step + 1), eta);
    std::fflush(stdout);
  }
  if (device_threads && device_threads->clock() != sharc::rt::ClockMode::kOff) {
    device_threads->set_link({});
    if (o.virtual_clock) {
      double busy = 0, end = 0;
      for (const sharc::rt::DeviceTime& t : device_threads->device_times()) {
        busy += t.busy_s;
        end = std::max(end, t.now_s);
      }
      std::printf("virtual clock (%.0f GFLOP/s, %.0f GB/s per device; link 20 us + 2 GB/s): last step %.3f ms, "
                  "devices idle %.1f%% of it\n",
                  sharc::rt::MachineModel{}.flops_per_s / 1e9, sharc::rt::MachineModel{}.bytes_per_s / 1e9,
                  1e3 * end, 100 * (1 - busy / (device_threads->size() * end)));
    }
    if (!o.trace.empty()) {
      std::ofstream f(o.trace);
      f << sharc::rt::chrome_trace_json(device_threads->trace());
      if (!f) {
        std::fprintf(stderr, "gpt2_main: cannot write %s\n", o.trace.c_str());
        return 1;
      }
      std::printf("trace of the last step (%s clock): %s\n", sharc::rt::clock_mode_name(device_threads->clock()),
                  o.trace.c_str());
    }
    device_threads->set_clock(sharc::rt::ClockMode::kOff);
  }
  if (!losses.empty()) {
    const size_t tail = std::min<size_t>(50, losses.size());
    double mean = 0;
    for (size_t i = losses.size() - tail; i < losses.size(); ++i) mean += losses[i] / tail;
    std::printf(
        "trained %d steps: loss %.4f at the first step, %.4f on average over the last %zu\n",
        o.steps, losses.front(), mean, tail);
  }
  if (o.sample == 0) return 0;

  // Sampling: the logits program on the same world, parameters copied whole.
  // The logits program's table lists exactly the parameters it needs (the
  // training program also holds optimizer state).
  // A logits program for another mesh than training's (the planner's choice,
  // --mesh auto) samples on device threads of its own.
  const sharc::rt::MeshShape logits_mesh = LogitsProgram::mesh_shape();
  std::unique_ptr<sharc::rt::ThreadWorld> logits_threads;
  if (logits_mesh.axis_names != mesh.axis_names || logits_mesh.axis_sizes != mesh.axis_sizes)
    logits_threads = std::make_unique<sharc::rt::ThreadWorld>(logits_mesh);
  LogitsProgram logits(logits_threads ? *logits_threads : world);
  for (const sharc::rt::TensorInfo& p : LogitsProgram::parameters()) {
    std::vector<float> value(p.elements());
    train.get_parameter(p.name, value);
    logits.set_parameter(p.name, value);
  }
  // The window holds the last `context` characters; causal attention makes
  // the logits at position len-1 independent of the padding after it.
  std::string prompt;
  std::vector<float> context_ids;
  for (unsigned char ch : o.prompt.empty() ? text.substr(0, 1) : o.prompt) {
    if (vocab.id_of[ch] < 0) continue;  // not in the text: skipped
    prompt += static_cast<char>(ch);
    context_ids.push_back(static_cast<float>(vocab.id_of[ch]));
  }
  if (context_ids.empty()) context_ids.push_back(ids[0]), prompt = text.substr(0, 1);
  std::mt19937_64 sample_rng(o.seed + 1);
  std::vector<float> window(context), out_logits(context * cfg.vocab);
  std::string generated;
  for (int i = 0; i < o.sample; ++i) {
    const size_t len = std::min<size_t>(context_ids.size(), context);
    std::fill(window.begin(), window.end(), 0.0f);
    std::copy(context_ids.end() - len, context_ids.end(), window.begin());
    typename LogitsProgram::Inputs in;
    in.tokens = window.data();
    typename LogitsProgram::Outputs out;
    out.logits = out_logits.data();
    logits.forward(in, out);
    const float* row = out_logits.data() + (len - 1) * cfg.vocab;
    const int n_chars = static_cast<int>(vocab.chars.size());  // ids beyond are never targets
    int next = static_cast<int>(std::max_element(row, row + n_chars) - row);
    if (o.temperature > 0) {
      std::vector<double> p(n_chars);
      double total = 0;
      for (int k = 0; k < n_chars; ++k)
        total += p[k] = std::exp((row[k] - row[next]) / o.temperature);
      double u = uniform(sample_rng) * total;
      for (next = 0; next < n_chars - 1 && u >= p[next]; ++next) u -= p[next];
    }
    context_ids.push_back(static_cast<float>(next));
    generated += vocab.chars[next];
  }
  char how[64] = "greedy";
  if (o.temperature > 0) std::snprintf(how, sizeof how, "temperature %g", o.temperature);
  std::printf("\nsample (%d characters, %s, after the prompt \"%s\"):\n%s%s\n", o.sample, how,
              prompt.c_str(), prompt.c_str(), generated.c_str());
  return 0;
}

// The token ids of a file of uint16 (llm.c's format: a 256 x int32 header
// whose first word is 20240520, then the ids; a file without it is all ids).
std::vector<uint16_t> load_tokens(const std::string& path, int64_t vocab) {
  const std::string bytes = read_file(path);
  size_t start = 0;
  if (bytes.size() >= 1024) {
    int32_t magic = 0;
    std::memcpy(&magic, bytes.data(), sizeof magic);
    if (magic == 20240520) start = 1024;
  }
  if (bytes.empty() || (bytes.size() - start) % 2 != 0) {
    std::fprintf(stderr, "gpt2_main: %s is %s, not a file of uint16 token ids\n", path.c_str(),
                 bytes.empty() ? "empty or unreadable" : "an odd number of bytes");
    std::exit(1);
  }
  std::vector<uint16_t> ids((bytes.size() - start) / 2);
  std::memcpy(ids.data(), bytes.data() + start, ids.size() * 2);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab) {
      std::fprintf(stderr, "gpt2_main: %s: token %zu is %u, outside the vocabulary of %lld\n", path.c_str(), i,
                   ids[i], static_cast<long long>(vocab));
      std::exit(1);
    }
  return ids;
}

// GPT-2 124M training steps (--config gpt2-124m).
template <class TrainProgram>
int run_124m(const Options& o) {
  sharc::rt::ThreadWorld world(TrainProgram::mesh_shape());
  const sharc::rt::TensorInfo& in_info = TrainProgram::input_info("tokens");
  const int64_t batch = in_info.shape[0], context = in_info.shape[1], vocab = gpt2::k124MVocab;
  std::vector<uint16_t> stream;
  if (!o.tokens.empty()) {
    stream = load_tokens(o.tokens, vocab);
    if (static_cast<int64_t>(stream.size()) < context + 2) {
      std::fprintf(stderr, "gpt2_main: %s holds %zu tokens, fewer than a window of %lld\n", o.tokens.c_str(),
                   stream.size(), static_cast<long long>(context + 1));
      return 1;
    }
  }
  int64_t parameters = 0;
  for (const sharc::rt::TensorInfo& p : TrainProgram::parameters())
    if (p.name.rfind("opt/", 0) != 0) parameters += p.elements();
  const int64_t layers = TrainProgram::parameter_info("h/ln1/scale").shape[0];
  std::printf("model: GPT-2 124M configuration, %lld layers (scanned), %lld parameters; batch %lld x context %lld; "
              "mesh %s\n",
              static_cast<long long>(layers), static_cast<long long>(parameters), static_cast<long long>(batch),
              static_cast<long long>(context), TrainProgram::mesh_shape().to_string().c_str());
  std::printf("data: %s\n", o.synthetic ? "random tokens (--synthetic)"
                                        : (o.tokens + ", " + std::to_string(stream.size()) + " tokens").c_str());
  TrainProgram train(world);
  train.init(o.seed);
  std::mt19937_64 rng(o.seed);
  std::vector<float> tokens(batch * context), targets(batch * context);
  // The FLOPs of a step as the GPU-speed issue counts them: 6N per token for
  // the matmuls of the parameters, and 12 L d T for attention.
  const double flops_per_token = 6.0 * parameters + 12.0 * layers * 768 * context;
  double total_s = 0;
  float first = 0, loss = 0;
  for (int step = 0; step < o.steps; ++step) {
    for (int64_t b = 0; b < batch; ++b) {
      if (o.synthetic) {
        for (int64_t t = 0; t <= context; ++t) {
          const float id = static_cast<float>(rng() % 50257);  // GPT-2's real vocabulary
          if (t < context) tokens[b * context + t] = id;
          if (t > 0) targets[b * context + t - 1] = id;
        }
      } else {
        const size_t at = rng() % (stream.size() - context - 1);
        for (int64_t t = 0; t < context; ++t) {
          tokens[b * context + t] = stream[at + t];
          targets[b * context + t] = stream[at + t + 1];
        }
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    const gpt2::StepResult r = train_step(train, tokens, targets, /*seed=*/0.0f);  // no dropout in this configuration
    loss = r.loss;
    const float lr = r.lr, grad_norm = r.grad_norm;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_s += s;
    if (step == 0) first = loss;
    if (!std::isfinite(loss)) {
      std::fprintf(stderr, "gpt2_main: loss is %f at step %d\n", loss, step);
      return 1;
    }
    const double tokens_per_s = batch * context / s;
    std::printf("step %4d/%d  loss %.4f  lr %.2e  grad_norm %7.3f  [%7.0f ms, %6.0f tokens/s, %.1f GFLOP/s]\n",
                step + 1, o.steps, loss, lr, grad_norm, 1e3 * s, tokens_per_s, flops_per_token * tokens_per_s / 1e9);
    std::fflush(stdout);
  }
  if (o.steps > 0)
    std::printf("trained %d step%s: loss %.4f at the first, %.4f at the last (ln %lld = %.4f); %.0f ms/step\n",
                o.steps, o.steps == 1 ? "" : "s", first, loss, static_cast<long long>(vocab), std::log(static_cast<double>(vocab)),
                1e3 * total_s / o.steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int code = parse(argc, argv, o); code >= 0) return code;
  if (o.config == "gpt2-124m") return run_124m<sharc_gen::gpt2_124m_train_data1::Program>(o);
  const bool pipe_mesh = o.mesh.find("pipe=") != std::string::npos;
  if (!pipe_mesh && (!o.schedule.empty() || o.microbatches))
    usage("--schedule and --microbatches need a mesh with a pipe axis");
  if (pipe_mesh && ((!o.schedule.empty() && o.schedule != gpt2::kPipelineSchedule) ||
                    (o.microbatches && o.microbatches != gpt2::kPipelineMicrobatches)))
    usage("the pipelined program was built for --schedule " + std::string(gpt2::kPipelineSchedule) +
           " --microbatches " + std::to_string(gpt2::kPipelineMicrobatches) +
          "; change them in samples/gpt2/model.h (gpt2::pipeline) and rebuild");
#define GPT2_MESH(spelling, suffix, pipelined)                                                     \
  if (o.mesh == spelling && !o.world.cuda())                                                       \
    return run<sharc_gen::gpt2_train_##suffix::Program, sharc_gen::gpt2_logits_##suffix::Program>( \
        o, sharc_gen::gpt2_train_##suffix::mesh_shape(), pipelined);                               \
// BACKEND cuda: the training step as CUDA (samples/gpt2/CMakeLists.txt), on
// a GPU world; sampling runs the CPU logits program on the same world.
#define GPT2_CUDA_MESH(spelling, suffix, pipelined)                                                     \
  if (o.mesh == spelling && o.world.cuda())                                                             \
    return run<sharc_gen::gpt2_train_cuda_##suffix::Program, sharc_gen::gpt2_logits_##suffix::Program>( \
        o, sharc_gen::gpt2_train_cuda_##suffix::mesh_shape(), pipelined);
  GPT2_MESH("data=8", data8, false)
  GPT2_MESH("model=8", model8, false)
  GPT2_MESH("data=2,model=4", data2_model4, false)
  GPT2_MESH("data=4,model=2", data4_model2, false)
  GPT2_MESH("fsdp=4,model=2", fsdp4_model2, false)
  GPT2_MESH("pipe=2,data=2,model=2", pipe2_data2_model2, true)
  // MESH auto: the planner's choice for 8 devices; sampling on data=8.
  if (o.mesh == "auto") {
    if (o.world.cuda() || o.local_devices)
      usage("--mesh auto (the planner's choice) runs on this process's device threads: not with --backend cuda "
            "or --local-devices");
    return run<sharc_gen::gpt2_train_auto::Program, sharc_gen::gpt2_logits_data8::Program>(
        o, sharc_gen::gpt2_train_auto::mesh_shape(), false);
  }
#if SHARC_SAMPLES_CUDA
  GPT2_CUDA_MESH("data=2,model=4", data2_model4, false)
  GPT2_CUDA_MESH("fsdp=4,model=2", fsdp4_model2, false)
  GPT2_CUDA_MESH("pipe=2,data=2,model=2", pipe2_data2_model2, true)
#endif
#undef GPT2_MESH
#undef GPT2_CUDA_MESH
  usage("no " + std::string(o.world.cuda() ? "BACKEND cuda " : "") + "program was built for mesh " + o.mesh);
}
