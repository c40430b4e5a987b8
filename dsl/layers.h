// Repeated layers: `length` instances of one module applied in sequence,
// x_{i+1} = body(layer i, x_i), as a transformer's blocks. Two forms, chosen
// by one option, that compute the same numbers:
//
//   unrolled (the default): layer i is its own module under scope "<name><i>"
//     ("h0", "h1", ...), with its own parameters;
//   scanned (LayersOptions::scan, as flax.nnx.scan / MaxText's scan_layers):
//     every parameter is made once, stacked over a leading layer axis of size
//     `length` under scope "<name>" ("h/attn/qkv/kernel" f32[L, 64, 192]),
//     and layer i reads row i of each. The layer axis is laid out by
//     LayersOptions::layer_axis (replicated by default; a logical or mesh
//     axis name splits it), the other dimensions by the module's own
//     with_partitioning specs, so a layer's weights have the layout they
//     would have unrolled.
//
// Row i of a stacked parameter is initialised exactly as layer i's unrolled
// parameter, and random_uniform inside layer i draws the same stream in both
// forms, so switching forms changes no number. The scanned form is what lets
// the generator write a layer's code once and loop over it (its parameters'
// rows are the only thing that differs between layers).
//
//   Layers<TransformerBlock> blocks(s / "h", c.layers,
//                                   [c](Scope s) { return TransformerBlock(s, c); },
//                                   {.scan = true});
//   x = blocks(x, [&](const TransformerBlock& b, Tensor x) { return b(x, seed); });
//
// In the scanned form the module is constructed again for every layer (its
// parameters then resolve to that layer's rows), so its constructor must
// make the same parameters each time and do nothing else that traces ops.
// Each layer must return a value of its input's shape and element type (the
// carry). The unrolled form also marks each layer a PipelineLayer, so a
// pipelined program places whole layers on stages.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dsl/module.h"
#include "dsl/program.h"

namespace sharc {

// How a Layers stack keeps its parameters.
struct LayersOptions {
  bool scan = false;            // stack the parameters (see the file comment)
  std::string layer_axis = {};  // scanned: the stacked layer axis's layout; "" replicated
};

namespace detail {

// Registers the repeat in the traced graph (Graph::repeats) after checking
// its arguments at `loc`; returns its index.
int begin_repeat(const Scope& s, int64_t length, const LayersOptions& o, const SrcLoc& loc);
// Scope of unrolled layer i: "<path><i>".
Scope layer_scope(const Scope& s, int64_t i);
// User error at `loc` unless layer i's output has its input's shape and type.
void check_carry(const Scope& s, int repeat, int64_t i, const Tensor& in, const Tensor& out,
                 const SrcLoc& loc);

// While it lives, the ops traced belong to layer `iteration` of repeat
// `repeat` (iteration -1: a scanned repeat's parameters are being made).
class RepeatIteration {
 public:
  RepeatIteration(const Scope& s, int repeat, int64_t iteration);
  ~RepeatIteration();
  RepeatIteration(const RepeatIteration&) = delete;
  RepeatIteration& operator=(const RepeatIteration&) = delete;

 private:
  Tracer& tracer_;
  int saved_repeat_, saved_iteration_;
};

}  // namespace detail

// `length` layers of module M, unrolled or scanned (the file comment says
// how each lays out its parameters); nnx.scan / a Python loop over layers.
template <class M>
class Layers {
 public:
  using Make = std::function<M(Scope)>;                // makes one layer under a scope
  using Body = std::function<Tensor(const M&, Tensor)>;  // one layer's call on the carry

  // `length` layers made by make(scope) under s (see the file comment).
  Layers(Scope s, int64_t length, Make make, LayersOptions options = {}, SrcLoc loc = Here::current())
      : scope_(s), make_(std::move(make)), options_(std::move(options)), length_(length),
        repeat_(detail::begin_repeat(s, length, options_, loc)) {
    if (options_.scan) {
      detail::RepeatIteration stacking(scope_, repeat_, -1);
      stacked_.emplace(make_(scope_));
      return;
    }
    layers_.reserve(static_cast<size_t>(length_));
    for (int64_t i = 0; i < length_; ++i) {
      detail::RepeatIteration layer(scope_, repeat_, i);
      layers_.push_back(make_(detail::layer_scope(scope_, i)));
    }
  }

  // x after every layer in turn: x = body(layer i, x) for i = 0..length-1.
  Tensor operator()(Tensor x, const Body& body, SrcLoc loc = Here::current()) const {
    for (int64_t i = 0; i < length_; ++i) {
      detail::RepeatIteration layer(scope_, repeat_, i);
      std::optional<PipelineLayer> stage;
      if (!options_.scan) stage.emplace(static_cast<int>(i), loc);
      Tensor y = options_.scan ? body(make_(scope_), x) : body(layers_[static_cast<size_t>(i)], x);
      detail::check_carry(scope_, repeat_, i, x, y, loc);
      x = y;
    }
    return x;
  }

  // The number of layers.
  int64_t size() const { return length_; }
  // Whether the parameters are stacked (LayersOptions::scan).
  bool scanned() const { return options_.scan; }
  // Unrolled: layer i's module. Scanned: the module whose parameters are the
  // stacked ones, [length, ...] (for reading their paths and shapes).
  const M& layer(int64_t i) const { return options_.scan ? *stacked_ : layers_.at(static_cast<size_t>(i)); }

 private:
  Scope scope_;
  Make make_;
  LayersOptions options_;
  int64_t length_;
  int repeat_;
  std::vector<M> layers_;      // unrolled
  std::optional<M> stacked_;   // scanned
};

}  // namespace sharc
