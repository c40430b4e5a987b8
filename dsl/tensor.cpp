// Tracer bookkeeping and Tensor accessors.
#include "dsl/tensor.h"

namespace sharc {

namespace {
thread_local Tracer* g_current = nullptr;
}

Tracer::Tracer(std::string program_name) : previous_(g_current) {
  graph_.name = std::move(program_name);
  g_current = this;
}

Tracer::~Tracer() { g_current = previous_; }

Tracer& Tracer::current(const SrcLoc& loc) {
  if (!g_current)
    user_error(loc, "no program is being traced: DSL calls must run inside a SHARC_PROGRAM body");
  return *g_current;
}

Tensor Tracer::add(ir::Node n) {
  if (n.op != ir::Op::kParameter && n.op != ir::Op::kInput && n.name.empty()) n.name = label_;
  if (n.layer < 0) n.layer = layer_;
  if (n.composite < 0) n.composite = composite_;
  if (n.repeat < 0 && repeat_ >= 0) {
    n.repeat = repeat_;
    n.iteration = iteration_;
  }
  return Tensor(this, graph_.add(std::move(n)));
}

ir::Shape Tensor::shape() const {
  if (!tracer_) internal_error("use of an empty Tensor");
  return tracer_->graph().nodes[id_].shape;
}

int64_t Tensor::dim(int i) const {
  const auto& s = shape();
  if (i < 0) i += static_cast<int>(s.size());
  return s.at(i);
}

ir::DType Tensor::dtype() const { return tracer_->graph().nodes[id_].dtype; }

std::string Tensor::describe() const {
  if (!tracer_) return "<empty tensor>";
  return ir::describe_value(tracer_->graph().nodes[id_]);
}

}  // namespace sharc
