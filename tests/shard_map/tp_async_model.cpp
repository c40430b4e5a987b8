// A TPAsyncDense layer followed by TPDense (scatter), for the emitted-code
// test: ppermute, axis_index and the body's collectives in generated C++.
#include "dsl/sharc.h"

namespace {

SHARC_PROGRAM(tp_async_model, b) {
  using namespace sharc;
  TPDenseOptions o;
  o.batch_axis = "data";
  o.bias_init = normal(0.5);
  Tensor x = b.input("x", {8, 32}, TPDense::x_spec(o, 2));
  Tensor h = relu(TPAsyncDense(b.scope() / "up", 32, 16, o)(x));
  TPDenseOptions s = o;
  s.mode = TPMode::kScatter;
  Tensor y = TPDense(b.scope() / "down", 16, 16, s)(h);
  b.output("y", y, TPDense::y_spec(o, 2));
}

}  // namespace
