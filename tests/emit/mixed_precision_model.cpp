// Mixed-precision programs for the dtype tests (tests/dsl/dtype_test.cpp, the
// IR and the interpreter) and the generated-code test
// (tests/emit/mixed_precision_test.cpp): a two-layer MLP in Flax's mixed
// precision (f32 parameters as master weights, bf16 matmul inputs and
// activations, the loss in f32), the same with its dots on rings, and the
// MLP in f32 for comparison.
#include "dsl/sharc.h"
#include "dsl/train.h"
#include "samples/dot_relu_dot/train_model.h"
#include "samples/gpt2/model.h"

namespace {

using namespace sharc;

// The mixed-precision MLP.
void mixed_mlp(ProgramBuilder& b) {
  Tensor x = b.input("x", {8, 16}, P("data", None));
  Tensor y = b.input("y", {8, 4}, P("data", None));
  Param w1 = b.scope().param("w1", {16, 32}, with_partitioning(lecun_normal(), P(None, "model")));
  Param w2 = b.scope().param("w2", {32, 4}, with_partitioning(lecun_normal(), P("model", None)));
  train_step(
      b, {x, y},
      [&](const std::vector<Tensor>& mb) {
        Tensor h = relu(matmul(astype(mb[0], DType::kBF16), astype(w1, DType::kBF16)));
        Tensor out = astype(matmul(h, astype(w2, DType::kBF16)), DType::kF32);
        Tensor d = sub(out, mb[1]);
        return mean(mul(d, d), {0, 1});
      },
      sgd(Schedule::constant(0.1)));
}

// The same program in f32.
void f32_mlp(ProgramBuilder& b) {
  Tensor x = b.input("x", {8, 16}, P("data", None));
  Tensor y = b.input("y", {8, 4}, P("data", None));
  Param w1 = b.scope().param("w1", {16, 32}, with_partitioning(lecun_normal(), P(None, "model")));
  Param w2 = b.scope().param("w2", {32, 4}, with_partitioning(lecun_normal(), P("model", None)));
  train_step(
      b, {x, y},
      [&](const std::vector<Tensor>& mb) {
        Tensor d = sub(matmul(relu(matmul(mb[0], w1)), w2), mb[1]);
        return mean(mul(d, d), {0, 1});
      },
      sgd(Schedule::constant(0.1)));
}

// A linear classifier whose labels come in as i32, as a data loader hands
// them over (one_hot compares them as f32, exact below 2^24).
void classifier_i32(ProgramBuilder& b) {
  Tensor x = b.input("x", {8, 16}, P("data", None));
  Tensor labels = b.input("labels", {8}, P("data"), DType::kI32);
  Param w = b.scope().param("w", {16, 4}, with_partitioning(lecun_normal(), P(None, "model")));
  train_step(
      b, {x, labels},
      [&](const std::vector<Tensor>& mb) { return softmax_cross_entropy(matmul(mb[0], w), mb[1]); },
      sgd(Schedule::constant(0.5)));
}

}  // namespace

SHARC_PROGRAM(classifier_i32, b) {
  classifier_i32(b);
}

SHARC_PROGRAM(mixed_mlp, b) {
  mixed_mlp(b);
}

SHARC_PROGRAM(mixed_mlp_ring, b) {
  b.set_collective_matmul(CollectiveMatmul::kAlways);
  mixed_mlp(b);
}

SHARC_PROGRAM(f32_mlp, b) {
  f32_mlp(b);
}

SHARC_PROGRAM(dot_relu_dot_train_bf16, b) {
  b.set_dtype(sharc::DType::kBF16);
  dot_relu_dot::build_dot_relu_dot_train(b);
}

SHARC_PROGRAM(gpt2_train_bf16, b) {
  b.set_dtype(sharc::DType::kBF16);
  gpt2::build_train(b, gpt2::config(), gpt2::kTrainBatch, gpt2::default_optimizer());
}
