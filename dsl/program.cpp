// ProgramBuilder, trace() and the program registry.
#include "dsl/program.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace sharc {

Tensor ProgramBuilder::input(const std::string& name, std::vector<int64_t> shape, P spec, SrcLoc loc) {
  for (auto& n : tracer_.graph().nodes)
    if (n.op == ir::Op::kInput && n.name == name)
      user_error(loc, "program input \"" + name + "\" is declared twice (first at " + n.loc.str() + ")");
  for (auto d : shape)
    if (d <= 0) user_error(loc, "program input \"" + name + "\" has a non-positive dimension " + ir::shape_str(shape));
  ir::Node n;
  n.op = ir::Op::kInput;
  n.name = name;
  n.shape = std::move(shape);
  n.loc = loc;
  // The default P() means "replicated" whatever the rank (not a rank-0 spec,
  // which resolve_logical_axes would reject as a rank mismatch).
  if (spec.rank() == 0) spec = P(std::vector<DimSpec>(n.shape.size()));
  n.spec = std::move(spec);
  return tracer_.add(std::move(n));
}

Tensor ProgramBuilder::input(const std::string& name, std::vector<int64_t> shape, P spec,
                             ir::DType dtype, SrcLoc loc) {
  Tensor t = input(name, std::move(shape), std::move(spec), loc);
  tracer_.graph().nodes[t.id()].dtype = dtype;
  return t;
}

void ProgramBuilder::output(const std::string& name, Tensor value, std::optional<P> spec, SrcLoc loc) {
  if (!value.valid()) user_error(loc, "program output \"" + name + "\" is an empty tensor");
  for (auto& o : tracer_.graph().outputs)
    if (o.name == name) user_error(loc, "program output \"" + name + "\" is declared twice");
  tracer_.graph().outputs.push_back({name, value.id(), loc, std::move(spec), std::nullopt});
}

void ProgramBuilder::set_pipeline(const Pipeline& p, SrcLoc loc) {
  ir::Graph& g = tracer_.graph();
  if (g.pipeline) user_error(loc, "set_pipeline: called twice (first at " + g.pipeline->loc.str() + ")");
  if (g.find("opt/step", ir::Op::kParameter))
    user_error(loc, "set_pipeline: call it before train_step, which takes the micro-batch count from it");
  if (p.axis.empty()) user_error(loc, "set_pipeline: the pipeline needs a mesh axis name");
  if (p.microbatches < 1)
    user_error(loc, "set_pipeline: microbatches must be at least 1, got " + std::to_string(p.microbatches));
  const std::optional<ir::PipelineSchedule> schedule = ir::parse_schedule(p.schedule);
  if (!schedule)
    user_error(loc, "set_pipeline: unknown pipeline schedule '" + p.schedule +
                        "'; the schedules are 'gpipe', '1f1b' and 'interleaved'");
  if (p.virtual_stages < 1)
    user_error(loc, "set_pipeline: virtual_stages must be at least 1, got " + std::to_string(p.virtual_stages));
  if (p.virtual_stages > 1 && *schedule != ir::PipelineSchedule::kInterleaved)
    user_error(loc, "set_pipeline: virtual_stages = " + std::to_string(p.virtual_stages) +
                        " needs the 'interleaved' schedule, not '" + p.schedule + "'");
  g.pipeline = ir::PipelineConfig{p.axis, p.microbatches, *schedule, p.virtual_stages, loc};
}

PipelineLayer::PipelineLayer(int index, SrcLoc loc) : tracer_(Tracer::current(loc)) {
  if (index < 0) user_error(loc, "PipelineLayer: the layer index must not be negative, got " + std::to_string(index));
  if (tracer_.layer() >= 0)
    user_error(loc, "PipelineLayer " + std::to_string(index) + " is opened inside pipeline layer " +
                        std::to_string(tracer_.layer()) + "; layers do not nest");
  tracer_.set_layer(index);
}

PipelineLayer::~PipelineLayer() { tracer_.set_layer(-1); }

int64_t ProgramBuilder::option(const std::string& name, int64_t fallback, SrcLoc loc) {
  options_read_.insert(name);
  auto it = options_.find(name);
  if (it == options_.end()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    user_error(loc, "option '" + name + "' is '" + text + "', which is not an integer");
  return static_cast<int64_t>(v);
}

std::string ProgramBuilder::hf_config(SrcLoc loc) {
  options_read_.insert("hf_config");
  auto it = options_.find("hf_config");
  if (it == options_.end() || it->second.empty())
    user_error(loc, "this program reads a Hugging Face config.json, but none was given: "
                    "sharc_add_program(... HF_CONFIG path/to/config.json)");
  return it->second;
}

ProgramOptions parse_program_options(const std::string& text) {
  ProgramOptions options;
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string entry = text.substr(at, comma - at);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      user_error(SrcLoc(), "option '" + entry + "' is not name=value (options look like layers=12,heads=8)");
    const std::string name = entry.substr(0, eq);
    if (!options.emplace(name, entry.substr(eq + 1)).second)
      user_error(SrcLoc(), "option '" + name + "' is given twice");
    at = comma + 1;
  }
  return options;
}

ir::Graph trace(const std::string& name, const ProgramFn& fn, const ProgramOptions& options) {
  Tracer tracer(name);
  ProgramBuilder b(tracer);
  b.set_options(options);
  fn(b);
  if (tracer.graph().outputs.empty())
    user_error(SrcLoc(), "program \"" + name + "\" declares no outputs");
  for (const auto& [option, value] : options)
    if (!b.options_read().count(option)) {
      std::string read;
      for (const std::string& r : b.options_read()) read += (read.empty() ? "" : ", ") + r;
      // At the program's SHARC_PROGRAM line, where the options it reads are.
      const auto at = ProgramRegistry::locations().find(name);
      user_error(at == ProgramRegistry::locations().end() ? SrcLoc() : at->second,
                 "option '" + option + "' is given, but program \"" + name + "\" does not read it (" +
                     (read.empty() ? std::string("it reads no options") : "it reads: " + read) + ")");
    }
  return std::move(tracer.graph());
}

std::map<std::string, ProgramFn>& ProgramRegistry::all() {
  static std::map<std::string, ProgramFn> programs;
  return programs;
}

std::map<std::string, SrcLoc>& ProgramRegistry::locations() {
  static std::map<std::string, SrcLoc> locations;
  return locations;
}

}  // namespace sharc
