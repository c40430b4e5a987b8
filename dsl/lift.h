// Elementwise functions written in plain C++ and lifted into sharc IR.
//
// A model marks a scalar function SHARC_ELEMENTWISE:
//
//   SHARC_ELEMENTWISE inline float huber(float x, float delta) {
//     const float a = std::abs(x);
//     if (a <= delta) return 0.5f * x * x;
//     return delta * (a - 0.5f * delta);
//   }
//
// and includes the header sharc-lift writes for it (`<model>.lifted.h`, next
// to the generated program; sharc_add_program runs the tool), which declares
//
//   sharc::Tensor huber(sharc::lift::Arg x, sharc::lift::Arg delta, SrcLoc = ...);
//
// so the model calls huber(h, 1.0) on Tensors like any DSL op: each argument
// is a Tensor or a number (a number becomes a scalar constant, broadcast),
// and the result has the arguments' broadcast shape. The function itself
// stays an ordinary C++ function on floats.
//
// sharc-lift (lift/) reads the function's body with Clang and lowers it to
// IR: arithmetic, comparisons, if/else and ?: (to select), locals and their
// reassignment, loops of constant trip count (unrolled), early returns, calls
// of other SHARC_ELEMENTWISE functions (inlined) and <cmath> calls (exp, log,
// sqrt, tanh, sin, cos, pow, abs/fabs, erf, log1p, expm1, fmin/fmax,
// std::min/max/clamp; exp2, log2, log10, fma, hypot composed of those) plus
// sharc::scalar::sigmoid. What it cannot lower
// (pointers, references, calls of other functions, data-dependent loops,
// recursion, static or global state, I/O, other types) is an error in
// clang's form, at the construct.
//
// Semantics: the IR computes in the argument tensors' element type (f32, or
// bf16 rounded per op), whatever float/double the C++ spells. Comparisons
// are 0/1 masks; a condition's negation swaps the select's branches, so a
// NaN compared with >=, <= or != takes the other branch than C++ does.
#pragma once

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "dsl/ops.h"
#include "dsl/tensor.h"
#include "runtime/elementwise.h"

// Marks a scalar function for sharc-lift. Only the Clang front end reads the
// annotation; to every other compiler the function is plain C++.
#if defined(__clang__)
#define SHARC_ELEMENTWISE __attribute__((annotate("sharc_elementwise")))
#else
#define SHARC_ELEMENTWISE
#endif

namespace sharc::scalar {

// Scalar functions sharc-lift knows besides <cmath>'s, for use on floats.
inline float sigmoid(float x) {
  return rt::sigmoid(x);
}  // what generated code computes
inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace sharc::scalar

namespace sharc::lift {

// An argument of a lifted function: a Tensor, or a number (a constant of the
// tensors' element type and broadcast shape).
class Arg {
 public:
  // A tensor or a number, implicitly, so a lifted function is called as the
  // C++ one is.
  //@{
  Arg(Tensor t) : tensor_(t) {}  // NOLINT: implicit by design
  Arg(double v) : value_(v) {}   // NOLINT: implicit by design
  //@}
  // Whether it is a tensor; the tensor, or the number.
  //@{
  bool is_tensor() const { return tensor_.valid(); }
  const Tensor& tensor() const { return tensor_; }
  double value() const { return value_; }
  //@}

 private:
  Tensor tensor_;
  double value_ = 0.0;
};

// One call of a lifted function while a program is traced: checks the
// arguments, labels the nodes the body adds with the function's name, and
// makes the constants of the body.
class Call {
 public:
  // `function`: the C++ name, for labels and errors; `loc`: the caller.
  Call(const char* function, const SrcLoc& loc, std::initializer_list<Arg> args);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Argument i as a Tensor (a number becomes a constant, as constant()).
  Tensor arg(int i) const;
  // A constant of the arguments' element type and broadcast shape.
  Tensor constant(double v) const;
  // The result, broadcast to the arguments' broadcast shape (a body may
  // ignore an argument, or return a constant).
  Tensor result(Tensor r) const;

 private:
  std::string function_;
  SrcLoc loc_;
  std::vector<Arg> args_;
  Tracer* tracer_ = nullptr;
  ir::DType dtype_ = ir::DType::kF32;
  std::vector<int64_t> shape_;
  std::string saved_label_;
};

}  // namespace sharc::lift
