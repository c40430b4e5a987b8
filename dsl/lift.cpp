// The runtime side of lifted functions: what a sharc-lift header calls.
#include "dsl/lift.h"

#include <algorithm>

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
    // numpy broadcasting of every tensor argument's shape.
    const std::vector<int64_t> s = t.shape();
    const size_t r = std::max(shape_.size(), s.size());
    std::vector<int64_t> out(r);
    for (size_t i = 0; i < r; ++i) {
      const int64_t a_dim = i < r - shape_.size() ? 1 : shape_[i - (r - shape_.size())];
      const int64_t b_dim = i < r - s.size() ? 1 : s[i - (r - s.size())];
      if (a_dim != b_dim && a_dim != 1 && b_dim != 1)
        user_error(loc_, function_ + ": the arguments do not broadcast: " + t.describe() +
                             " against " + ir::shape_str(shape_) + " (dimension " +
                             std::to_string(i) + ")");
      out[i] = std::max(a_dim, b_dim);
    }
    shape_ = std::move(out);
  }
  if (!tracer_)
    user_error(loc_, function_ +
                         ": no argument is a Tensor; on numbers, call the C++ function itself");
  saved_label_ = tracer_->label();
  tracer_->set_label(saved_label_.empty() ? function_ : saved_label_ + "/" + function_);
}

Call::~Call() { tracer_->set_label(saved_label_); }

Tensor Call::arg(int i) const {
  const Arg& a = args_.at(static_cast<size_t>(i));
  return a.is_tensor() ? a.tensor() : constant(a.value());
}

// Of the call's full shape: a constant of the result's shape is a literal in
// the fused loop, where a scalar would need a broadcast.
Tensor Call::constant(double v) const { return astype(full(shape_, v, loc_), dtype_, loc_); }

Tensor Call::result(Tensor r) const {
  return r.shape() == shape_ ? r : broadcast_to(r, shape_, loc_);
}

}  // namespace sharc::lift
