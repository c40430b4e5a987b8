// DistJax's tensor-parallel and pipeline examples in sharc, for
// docs/guide/from-jax.md. tests/docs/jax_layouts.py runs the same models in
// JAX the way DistJax writes them (shard_map, all_gather / ppermute /
// psum_scatter, micro-batches passed between stages with ppermute) and
// from_jax_test.cpp holds the generated programs to JAX's layouts.
#include "dsl/sharc.h"
#include "dsl/train.h"

namespace {

using namespace sharc;

// DistJax's tensor-parallel MLP block on its mesh ('data', 'tensor') = (4, 2):
// the up projection is TPAsyncDense (x's feature blocks travel the ring
// while each device multiplies the block it holds), the down projection is
// TPDense in scatter mode (a partial product per device, psum_scatter).
// x and y stay split on their features over 'tensor'.
constexpr int64_t kTpBatch = 16, kTpFeatures = 64, kTpHidden = 256;

SHARC_PROGRAM(distjax_tp_mlp_block, b) {
  TPDenseOptions up{.axis = "tensor", .batch_axis = "data"};
  TPDenseOptions down = up;
  down.mode = TPMode::kScatter;
  Tensor x = b.input("x", {kTpBatch, kTpFeatures}, TPDense::x_spec(up, 2));
  Tensor h = relu(TPAsyncDense(b.scope() / "up", kTpFeatures, kTpHidden, up)(x));
  Tensor y = TPDense(b.scope() / "down", kTpHidden, kTpFeatures, down)(h);
  b.output("y", y, TPDense::y_spec(down, 2));
}

// DistJax's pipeline classifier on ('data', 'pipe') = (2, 4): an input
// layer, kPpLayers dense layers cut into 4 stages of 2 (set_pipeline), a
// classifier head; GPipe over 4 micro-batches, trained with Adam. DistJax
// stacks each stage's layers along a 'pipe' dimension; sharc keeps one path
// per layer and places it on its stage's devices.
constexpr int64_t kPpBatch = 32, kPpFeatures = 32, kPpHidden = 64, kPpClasses = 10, kPpLayers = 8;

SHARC_PROGRAM(distjax_pp_classifier, b) {
  b.set_pipeline({.axis = "pipe", .microbatches = 4, .schedule = "gpipe"});
  const Scope s = b.scope();
  const Linear input(s / "input_dense", kPpFeatures, kPpHidden);
  std::vector<Linear> layers;
  // push_back, not emplace_back: Linear records the line that constructs it.
  for (int64_t l = 0; l < kPpLayers; ++l)
    layers.push_back(Linear(s / ("layers_" + std::to_string(l)), kPpHidden, kPpHidden));
  const Linear head(s / "output_dense", kPpHidden, kPpClasses);
  Tensor images = b.input("images", {kPpBatch, kPpFeatures}, P("data", None));
  Tensor labels = b.input("labels", {kPpBatch}, P("data"));
  train_step(
      b, {images, labels},
      [&](const std::vector<Tensor>& mb) {
        Tensor x = relu(input(mb[0]));
        for (int64_t l = 0; l < kPpLayers; ++l) {
          PipelineLayer layer(static_cast<int>(l));
          x = relu(layers[l](x));
        }
        return softmax_cross_entropy(head(x), mb[1]);
      },
      adam(Schedule::constant(1e-3)));
}

}  // namespace
