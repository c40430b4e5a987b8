// ProgramBuilder, trace() and the program registry.
#include "dsl/program.h"

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

ir::Graph trace(const std::string& name, const ProgramFn& fn) {
  Tracer tracer(name);
  ProgramBuilder b(tracer);
  fn(b);
  if (tracer.graph().outputs.empty())
    user_error(SrcLoc(), "program \"" + name + "\" declares no outputs");
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
