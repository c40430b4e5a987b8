// The runtime side of lifted functions: what a sharc-lift header calls.
#include "dsl/lift.h"

namespace sharc::lift {

Call::Call(const char* function, const SrcLoc& loc, std::initializer_list<Arg> args)
    : function_(function), loc_(loc), args_(args) {
  for (const Arg& a : args_) {
    if (!a.is_tensor()) continue;
    const Tensor& t = a.tensor();
    if (!tracer_) {
      tracer_ = t.tracer();
      dtype_ = t.dtype();
      shape_ = t.shape();
      continue;
    }
    shape_ = broadcast_shape(shape_, function_ + "'s arguments before " + ir::shape_str(shape_),
                             t.shape(), t.describe(), loc_);
  }
  if (!tracer_)
    user_error(loc_,
               function_ + ": no argument is a Tensor; on numbers, call the C++ function itself");
  saved_label_ = tracer_->label();
  tracer_->set_label(saved_label_.empty() ? function_ : saved_label_ + "/" + function_);
}

Call::~Call() {
  tracer_->set_label(saved_label_);
}

Tensor Call::arg(int i) const {
  const Arg& a = args_.at(static_cast<size_t>(i));
  return a.is_tensor() ? a.tensor() : constant(a.value());
}

// Of the call's full shape: a constant of the result's shape is a literal in
// the fused loop, where a scalar would need a broadcast.
Tensor Call::constant(double v) const {
  return astype(full(shape_, v, loc_), dtype_, loc_);
}

Tensor Call::result(Tensor r) const {
  return r.shape() == shape_ ? r : broadcast_to(r, shape_, loc_);
}

}  // namespace sharc::lift
