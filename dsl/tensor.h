// Tensor: a handle to a value in the program being traced. DSL calls do not
// compute anything; each appends one IR node (recording the caller's
// source_location) to the Tracer that is current on this thread, which is how
// the generator turns the user's C++ model into a global IR graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace sharc {

class Tracer;

// Element types as the DSL spells them: DType::kF32, kBF16, kI32.
using DType = ir::DType;

// A value of the program being traced: a handle on one node of the
// tracer's graph, with its global shape. Ops (ops.h) take and return them.
class Tensor {
 public:
  Tensor() = default;  // empty (valid() is false)
  // The value of node `id` in `tracer`'s graph (what Tracer::add returns).
  Tensor(Tracer* tracer, int id) : tracer_(tracer), id_(id) {}

  // Whether it holds a value.
  bool valid() const { return tracer_ != nullptr; }
  // Its node's index in the graph.
  int id() const { return id_; }
  // The tracer whose graph holds it.
  Tracer* tracer() const { return tracer_; }
  // A copy: the node list it lives in grows as the program is traced.
  ir::Shape shape() const;
  int64_t dim(int i) const;  // negative i counts from the end
  // The number of dimensions.
  size_t rank() const { return shape().size(); }
  ir::DType dtype() const;  // f32 unless made otherwise (astype, a typed input)
  // How diagnostics name this value: 'dot1/kernel' f32[1024,1024].
  std::string describe() const;

 private:
  Tracer* tracer_ = nullptr;
  int id_ = -1;
};

// A parameter is a tensor whose node is an ir::Op::kParameter.
using Param = Tensor;

// Owns the graph being traced. Exactly one is current per thread while a
// program function runs (see program.h).
class Tracer {
 public:
  // Starts tracing program `program_name`, current until destroyed.
  explicit Tracer(std::string program_name);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  static Tracer& current(const SrcLoc& loc);  // user error if none is active
  // The graph traced so far.
  ir::Graph& graph() { return graph_; }
  // Appends node `n` (stamped with the label, layer, repeat and composite
  // being traced) and returns its value.
  Tensor add(ir::Node n);

  // Label stack: ops traced inside a module's call are labelled with its path.
  //@{
  const std::string& label() const { return label_; }
  void set_label(std::string l) { label_ = std::move(l); }
  //@}
  // The pipelined layer being traced (PipelineLayer), -1 outside one; add()
  // stamps it on every node.
  //@{
  int layer() const { return layer_; }
  void set_layer(int layer) { layer_ = layer; }
  //@}
  // The repeated layer being traced (dsl/layers.h): its Graph::repeats index
  // and the layer's index, or -1 (iteration -1 inside a repeat: a scanned
  // one's stacked parameters are being made); add() stamps both on every
  // node.
  //@{
  int repeat() const { return repeat_; }
  int iteration() const { return iteration_; }
  void set_repeat(int repeat, int iteration) {
    repeat_ = repeat;
    iteration_ = iteration;
  }
  //@}
  // The composite region being traced (CompositeScope), -1 outside one;
  // add() stamps it on every node.
  //@{
  int composite() const { return composite_; }
  void set_composite(int composite) { composite_ = composite; }
  //@}
  // The number of random_uniform calls traced before this one (their key).
  int next_random() { return randoms_++; }

 private:
  ir::Graph graph_;
  std::string label_;
  int layer_ = -1;
  int composite_ = -1;
  int repeat_ = -1, iteration_ = -1, randoms_ = 0;
  Tracer* previous_ = nullptr;
};

// RAII: the nodes traced in its lifetime form one composite region
// (ir::Composite, Graph::composites), labelled with the current module path.
// Inside another region it does nothing: regions do not nest, the outermost
// one holds all.
class CompositeScope {
 public:
  // Opens region `c` in `t` (labelled with t's label when c has none).
  CompositeScope(Tracer& t, ir::Composite c) : t_(t), saved_(t.composite()) {
    if (saved_ >= 0) return;
    if (c.label.empty()) c.label = t.label();
    t.graph().composites.push_back(std::move(c));
    t.set_composite(static_cast<int>(t.graph().composites.size()) - 1);
  }
  ~CompositeScope() { t_.set_composite(saved_); }
  CompositeScope(const CompositeScope&) = delete;
  CompositeScope& operator=(const CompositeScope&) = delete;

 private:
  Tracer& t_;
  int saved_;
};

// RAII: labels nodes created in its lifetime with a module path ("dot1").
class LabelScope {
 public:
  // Sets t's label to `label` until destroyed.
  LabelScope(Tracer& t, const std::string& label) : t_(t), saved_(t.label()) { t.set_label(label); }
  ~LabelScope() { t_.set_label(saved_); }

 private:
  Tracer& t_;
  std::string saved_;
};

}  // namespace sharc
