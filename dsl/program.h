// Programs: what a model file declares and the generator lowers. A program is
// a function that receives a ProgramBuilder, declares inputs (with their
// shardings), builds the model, and names its outputs:
//
//   SHARC_PROGRAM(dot_relu_dot, b) {
//     DotReluDot model(b.scope(), 1024);
//     b.output("y", model(b.input("x", {8, 1024}, P("data", None))));
//   }
//
// SHARC_PROGRAM registers the function in a process-wide registry that the
// generator's main (codegen/generator_main.cpp) looks programs up in.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "dsl/module.h"
#include "dsl/sharding_rules.h"

namespace sharc {

// Pipeline parallelism (ProgramBuilder::set_pipeline): the layers traced
// inside PipelineLayer scopes are cut into consecutive stages over mesh axis
// `axis`, one stage per position on it (with `virtual_stages` chunks per
// stage under the interleaved schedule), and each train_step runs
// `microbatches` micro-batches through them. Layers outside the scopes
// (embedding, head, loss) run on the first or the last stage, where their
// inputs come from. The schedule is one of "gpipe", "1f1b", "interleaved";
// PipelineOptions::schedule, given to lower(), takes precedence. The stage
// count is the axis size, so the model code does not change with the mesh.
struct Pipeline {
  std::string axis = "pipe";      // the mesh axis the stages sit on
  int microbatches = 1;           // per train_step
  std::string schedule = "1f1b";  // "gpipe", "1f1b" or "interleaved"
  int virtual_stages = 1;         // chunks per stage (the interleaved schedule)
};

// What a SHARC_PROGRAM receives: it declares the program's inputs and
// outputs, its program-wide rules and options, and makes the model under
// scope().
class ProgramBuilder {
 public:
  // The builder of the program `tracer` traces (trace() makes both).
  explicit ProgramBuilder(Tracer& tracer) : tracer_(tracer) {}
  // The root scope: the model's parameters are made under it.
  Scope scope() { return Scope(&tracer_); }
  // A program input with its global shape and layout (like jax.device_put with
  // a NamedSharding), f32 or of the given dtype (token ids and labels as i32,
  // activations as bf16). The default spec replicates it.
  //@{
  Tensor input(const std::string& name, std::vector<int64_t> shape, P spec, ir::DType dtype,
               SrcLoc loc = Here::current());
  Tensor input(const std::string& name, std::vector<int64_t> shape, P spec = P(),
               SrcLoc loc = Here::current());
  //@}
  // A program output; `spec` pins its layout, otherwise propagation picks it.
  void output(const std::string& name, Tensor value, std::optional<P> spec = std::nullopt,
              SrcLoc loc = Here::current());
  // Program-wide logical axis rules (Flax `sharding_rules`), used for every
  // annotation that carries no rules of its own. PipelineOptions::rules, when
  // given to lower(), takes precedence.
  void set_logical_rules(LogicalRules rules) { tracer_.graph().rules = std::move(rules); }
  // Program-wide sharding rules applied from outside the model to every
  // parameter, in order (dsl/sharding_rules.h: Replicated, FSDPRule,
  // PathRule). PipelineOptions::sharding_rules, when given to lower(), takes
  // precedence.
  void set_sharding_rules(ShardingRules rules) {
    tracer_.graph().sharding_rules = std::make_shared<const ShardingRules>(std::move(rules));
  }
  // Mixed precision, as Flax's module `dtype` with `param_dtype` f32: the
  // modules (Linear, Embedding, attention, the GPT blocks) compute in `dtype`
  // while parameters and optimizer state stay f32 master weights; layer norm,
  // softmax and the losses compute in f32 whatever comes in. Gradients are
  // reduced in f32 (PipelineOptions::gradient_reduce_bf16 to change it).
  // Model code does not change: call it before building the model.
  void set_dtype(DType dtype) { tracer_.graph().dtype = dtype; }
  // Pipeline parallelism; call it before train_step (which takes the
  // micro-batch count from it). See Pipeline.
  void set_pipeline(const Pipeline& pipeline, SrcLoc loc = Here::current());
  // The ring collective matmul for every dot of the program (see
  // codegen/passes/ring_collective_matmul.h): kAlways, kNever, or kAuto (by
  // the size threshold); a dot's with_collective_matmul wins, and
  // PipelineOptions::collective_matmul / ring_direction, when given to lower(),
  // take precedence.
  void set_collective_matmul(CollectiveMatmul mode,
                             RingDirection direction = RingDirection::kBidirectional) {
    tracer_.graph().collective_matmul = mode;
    tracer_.graph().ring_direction = direction;
  }
  // The graph traced so far.
  ir::Graph& graph() { return tracer_.graph(); }
  // A generation-time option: the integer given as `name=value` to trace()
  // (the generator's --option, sharc_add_program's OPTIONS), else `fallback`.
  // A model reads its depth this way, so one model file builds at any size:
  //   const int64_t layers = b.option("layers", 2);
  // A value that is not an integer is an error at this line.
  int64_t option(const std::string& name, int64_t fallback, SrcLoc loc = Here::current());
  // The Hugging Face config.json that sharc_add_program's HF_CONFIG names
  // (the option "hf_config"), for GPTConfig::from_hf; an error at this
  // line when the call gave none.
  //   const GPTConfig c = GPTConfig::from_hf(b.hf_config());
  std::string hf_config(SrcLoc loc = Here::current());
  // The options given, and the names option() was asked for (trace() checks
  // that every option given was read).
  //@{
  void set_options(std::map<std::string, std::string> options) { options_ = std::move(options); }
  const std::set<std::string>& options_read() const { return options_read_; }
  //@}

 private:
  Tracer& tracer_;
  std::map<std::string, std::string> options_;
  std::set<std::string> options_read_;
};

// Options for trace(): name -> value as written ("layers" -> "12").
using ProgramOptions = std::map<std::string, std::string>;
// "layers=12,heads=8" -> {{"layers", "12"}, {"heads", "8"}}; throws
// sharc::Error for an entry without '=' or with an empty or repeated name.
ProgramOptions parse_program_options(const std::string& text);

// RAII: the ops traced while it lives belong to layer `index` of the
// program's pipelined stack (0, 1, ... in model order). Without
// set_pipeline it has no effect, so a model can mark its layers once:
//
//   for (int l = 0; l < n_layers; ++l) {
//     PipelineLayer layer(l);
//     h = blocks[l](h);
//   }
class PipelineLayer {
 public:
  // Opens layer `index` (nested layers are an error at `loc`).
  explicit PipelineLayer(int index, SrcLoc loc = Here::current());
  ~PipelineLayer();
  PipelineLayer(const PipelineLayer&) = delete;
  PipelineLayer& operator=(const PipelineLayer&) = delete;

 private:
  Tracer& tracer_;
};

// A program's body: what SHARC_PROGRAM(name, b) { ... } defines.
using ProgramFn = std::function<void(ProgramBuilder&)>;

// Runs fn under a fresh Tracer and returns the traced global graph. Every
// option given must be read by the program (ProgramBuilder::option): one it
// never asks for is an error naming the options it does read, since a
// misspelt option would otherwise build the default silently.
ir::Graph trace(const std::string& name, const ProgramFn& fn, const ProgramOptions& options = {});

// The programs of a model file, by name: SHARC_PROGRAM adds each, and the
// generator (codegen/generator_main.cpp) looks up the one --program names.
class ProgramRegistry {
 public:
  // Every registered program's body, by name.
  static std::map<std::string, ProgramFn>& all();
  // Where each program was declared (its SHARC_PROGRAM line), for the banner
  // of generated files.
  static std::map<std::string, SrcLoc>& locations();
  // Registers (or replaces) program `name`, declared at `loc`.
  static void add(const std::string& name, ProgramFn fn, SrcLoc loc = SrcLoc()) {
    all()[name] = std::move(fn);
    locations()[name] = std::move(loc);
  }
};

// A static object whose construction registers a program (what
// SHARC_PROGRAM expands to).
struct ProgramRegistration {
  // Registers `fn` as program `name`, declared at the caller's line.
  ProgramRegistration(const char* name, ProgramFn fn, SrcLoc loc = Here::current()) {
    ProgramRegistry::add(name, std::move(fn), std::move(loc));
  }
};

// Defines and registers a program of the model file: the body receives a
// ProgramBuilder& named `builder`.
//   SHARC_PROGRAM(dot_relu_dot, b) { ... }
#define SHARC_PROGRAM(name, builder)                                                   \
  static void sharc_program_##name(::sharc::ProgramBuilder& builder);                 \
  static const ::sharc::ProgramRegistration sharc_registration_##name(#name,          \
                                                                      sharc_program_##name); \
  static void sharc_program_##name(::sharc::ProgramBuilder& builder)

}  // namespace sharc
