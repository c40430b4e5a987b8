// The non-template half of Layers (dsl/layers.h): registering a repeat,
// stamping the layer being traced, checking the carry.
#include "dsl/layers.h"

namespace sharc::detail {

int begin_repeat(const Scope& s, int64_t length, const LayersOptions& o, const SrcLoc& loc) {
  if (!s.tracer()) user_error(loc, "Layers: made from an empty Scope");
  if (s.path().empty()) user_error(loc, "Layers: the scope has no name; give it one, e.g. Layers<Block>(s / \"h\", ...)");
  if (length <= 0) user_error(loc, "Layers '" + s.path() + "': the layer count must be positive, got " + std::to_string(length));
  if (!o.scan && !o.layer_axis.empty())
    user_error(loc, "Layers '" + s.path() + "': layer_axis \"" + o.layer_axis +
                        "\" lays out the stacked parameters of a scanned Layers, but scan is off");
  Tracer& t = *s.tracer();
  if (t.repeat() >= 0)
    user_error(loc, "Layers '" + s.path() + "' is made inside layer " + std::to_string(t.iteration()) + " of Layers '" +
                        t.graph().repeats[t.repeat()].name + "'; repeated layers do not nest");
  for (const ir::Repeat& r : t.graph().repeats)
    if (r.name == s.path())
      user_error(loc, "Layers '" + s.path() + "' is made twice (first at " + r.loc.str() + ")");
  ir::Repeat r;
  r.name = s.path();
  r.length = static_cast<int>(length);
  r.scan = o.scan;
  r.layer_axis = o.layer_axis;
  r.loc = loc;
  t.graph().repeats.push_back(std::move(r));
  return static_cast<int>(t.graph().repeats.size()) - 1;
}

Scope layer_scope(const Scope& s, int64_t i) { return Scope(s.tracer(), s.path() + std::to_string(i)); }

void check_carry(const Scope& s, int repeat, int64_t i, const Tensor& in, const Tensor& out, const SrcLoc& loc) {
  const ir::Repeat& r = s.tracer()->graph().repeats[repeat];
  if (!out.valid())
    user_error(loc, "Layers '" + r.name + "': layer " + std::to_string(i) + " returned an empty tensor");
  if (out.shape() != in.shape() || out.dtype() != in.dtype())
    user_error(loc, "Layers '" + r.name + "': layer " + std::to_string(i) + " maps " +
                        ir::shape_str(in.shape(), in.dtype()) + " to " + ir::shape_str(out.shape(), out.dtype()) +
                        "; every layer must return its input's shape and element type (the carry from one "
                        "layer to the next)");
}

RepeatIteration::RepeatIteration(const Scope& s, int repeat, int64_t iteration)
    : tracer_(*s.tracer()), saved_repeat_(tracer_.repeat()), saved_iteration_(tracer_.iteration()) {
  tracer_.set_repeat(repeat, static_cast<int>(iteration));
}

RepeatIteration::~RepeatIteration() { tracer_.set_repeat(saved_repeat_, saved_iteration_); }

}  // namespace sharc::detail
