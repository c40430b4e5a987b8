// Training steps in the DSL: optimizers and learning-rate schedules as IR,
// and train_step(), which traces forward, loss, reverse-mode gradients
// (ir/autodiff.h), global-norm clipping and the optimizer update into the
// program being built. The result is one program whose every call is one
// training step: parameters and optimizer state are persistent Parameters
// updated in place (ir::Graph::updates), metrics are outputs. Optimizer state
// is created per parameter with layout_of set, so it is laid out like its
// parameter on every mesh (sharded with it under FSDP).
//
// Semantics follow optax: sgd (trace = g + momentum * trace; p -= lr * trace),
// adam (bias-corrected, eps outside the sqrt), adamw (decoupled weight decay
// scaled by lr, of all parameters or those a DecayMask selects), clip_by_global_norm, and
// warmup_cosine_decay_schedule with init_value 0, all evaluated at the step
// count before the update (the first step uses schedule(0)).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dsl/program.h"

namespace sharc {

// A learning-rate schedule (optax's constant_schedule and
// warmup_cosine_decay_schedule).
struct Schedule {
  // Constant, or linear warmup then cosine decay.
  enum class Kind { kConstant, kWarmupCosine };
  Kind kind = Kind::kConstant;  // which of the two
  double peak = 1e-3;        // the constant value, or the peak after warmup
  int64_t warmup_steps = 0;  // linear 0 -> peak over [0, warmup_steps)
  int64_t decay_steps = 1;   // cosine peak -> end over [warmup_steps, decay_steps)
  double end = 0.0;          // the value after decay_steps

  // lr at every step.
  static Schedule constant(double lr) { return {Kind::kConstant, lr, 0, 1, lr}; }
  // 0 -> peak over warmup_steps, then cosine down to `end` at decay_steps.
  static Schedule warmup_cosine(double peak, int64_t warmup_steps, int64_t decay_steps, double end = 0.0) {
    return {Kind::kWarmupCosine, peak, warmup_steps, decay_steps, end};
  }
};

// Which parameters adamw decays (optax.adamw's `mask`): those of rank
// min_rank or more whose path matches none of `exclude`. The rank of a
// scanned layer's parameter is one layer's (its stacked layer axis aside),
// so a mask means the same for a model scanned or unrolled. A pattern is a
// parameter path ("h/ln1/scale") in which '*' stands for any run of
// characters ("*/bias", "*ln*", "wte/*"). A pattern that matches no
// parameter is an error at the train_step call (a typo would otherwise
// decay everything). Made by decay_mask().
struct DecayMask {
  int min_rank = 0;                  // parameters of lower rank are not decayed
  std::vector<std::string> exclude = {};  // nor those whose path matches one of these
};
// GPT-2's usual recipe (nanoGPT, the Hugging Face Trainer) decays matrices
// only: decay_mask(2); leaving out embeddings too:
// decay_mask(2, {"wte/*", "wpe/*"}).
inline DecayMask decay_mask(int min_rank, std::vector<std::string> exclude = {}) {
  return DecayMask{min_rank, std::move(exclude)};
}

// Parameters with a learning rate of their own: the schedule's times
// `scale` at every step (PyTorch's parameter groups, each with its own lr,
// under one scheduler that scales them all alike; optax.multi_transform
// with scaled schedules). Patterns are parameter paths with '*' as in a
// DecayMask. A parameter takes the first group one of whose patterns it
// matches; a parameter in no group, the schedule's lr. A pattern that
// matches no parameter, or a scale that is not positive and finite, is an
// error at the train_step call. Made by lr_group():
//   Optimizer o = adamw(Schedule::constant(6e-4), 0.1);
//   o.lr_groups = {lr_group({"wte/*", "wpe/*"}, 0.1)};  // embeddings at 6e-5
struct LrGroup {
  std::vector<std::string> patterns;  // the parameters' paths
  double scale = 1.0;                 // times the schedule's lr
};
// The parameters matching `patterns` at `scale` times the schedule's lr.
inline LrGroup lr_group(std::vector<std::string> patterns, double scale) {
  return LrGroup{std::move(patterns), scale};
}

// An optimizer and its hyperparameters; made by sgd(), adam() or adamw().
struct Optimizer {
  // The update rule (optax.sgd, optax.adam, optax.adamw).
  enum class Kind { kSgd, kAdam, kAdamW };
  Kind kind = Kind::kAdam;                 // the update rule
  Schedule lr = Schedule::constant(1e-3);  // the learning rate per step
  double momentum = 0.0;  // sgd
  double b1 = 0.9;        // adam: the first moment's decay
  double b2 = 0.999;      // adam: the second moment's decay
  double eps = 1e-8;      // adam: added to the second moment's root
  double weight_decay = 0.0;  // adamw
  DecayMask decay_mask = {};  // adamw: which parameters weight_decay applies to (all by default)
  std::vector<LrGroup> lr_groups = {};  // learning rates of their own (none: the schedule's for all)
};

// optax.sgd(lr, momentum).
inline Optimizer sgd(Schedule lr, double momentum = 0.0) {
  Optimizer o;
  o.kind = Optimizer::Kind::kSgd;
  o.lr = lr;
  o.momentum = momentum;
  return o;
}
// optax.adam(lr, b1, b2, eps).
inline Optimizer adam(Schedule lr, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8) {
  Optimizer o;
  o.kind = Optimizer::Kind::kAdam;
  o.lr = lr;
  o.b1 = b1;
  o.b2 = b2;
  o.eps = eps;
  return o;
}
// optax.adamw(lr, b1, b2, eps, weight_decay): decoupled decay of every parameter.
inline Optimizer adamw(Schedule lr, double weight_decay = 1e-4, double b1 = 0.9, double b2 = 0.999,
                       double eps = 1e-8) {
  Optimizer o = adam(lr, b1, b2, eps);
  o.kind = Optimizer::Kind::kAdamW;
  o.weight_decay = weight_decay;
  return o;
}
// optax.adamw(lr, b1, b2, eps, weight_decay, mask): decoupled decay of the
// parameters `mask` selects.
inline Optimizer adamw(Schedule lr, double weight_decay, DecayMask mask, double b1 = 0.9, double b2 = 0.999,
                       double eps = 1e-8) {
  Optimizer o = adamw(lr, weight_decay, b1, b2, eps);
  o.decay_mask = std::move(mask);
  return o;
}

using ir::RematPolicy;
// Rematerialization of a named block (activation checkpointing): see
// ir::RematPolicy. `block` is a layer label path, e.g. "h3" for a transformer's
// fourth block or "h3/mlp" for its MLP only; lowering fails at this call's
// line when no op of the model has that label.
//   TrainOptions o;
//   for (int i = 0; i < layers; ++i) o.remat.push_back(remat("h" + std::to_string(i), RematPolicy::kRecomputeAll));
inline ir::RematRule remat(std::string block, RematPolicy policy, SrcLoc loc = Here::current()) {
  return {std::move(block), policy, loc};
}

// How clip_global_norm scales the gradients by their global norm: optax's
// clip_by_global_norm, min(1, max_norm / norm), or PyTorch's
// clip_grad_norm_, min(1, max_norm / (norm + 1e-6)).
enum class ClipForm { kOptax, kTorch };

// What train_step does besides the optimizer: clipping, gradient
// accumulation, rematerialization.
struct TrainOptions {
  std::optional<double> clip_global_norm = {};  // optax.clip_by_global_norm(max_norm)
  ClipForm clip_form = ClipForm::kOptax;         // the clip factor's formula
  int accumulate_steps = 1;                // micro-batches per step (gradients averaged)
  std::vector<ir::RematRule> remat = {};   // per block; blocks without one save everything
};

// The loss of one micro-batch: receives the micro-batch slices of `batch`, in
// order, and returns a scalar.
using LossFn = std::function<Tensor(const std::vector<Tensor>& micro_batch)>;

// Traces one training step over every parameter created so far: for each of
// the accumulate_steps micro-batches (micro-batch j holds examples j, j+k,
// j+2k, ... of the batch, so a batch sharded over devices stays local), the
// loss and its gradients; then clipping and the optimizer update. Adds the
// outputs "loss" (mean over micro-batches), "grad_norm" (global norm before
// clipping) and "lr" (the schedule's learning rate; an LrGroup's parameters
// use it times the group's scale), and records each parameter's
// gradient (as the optimizer reads it) in ir::Graph::gradients.
void train_step(ProgramBuilder& b, const std::vector<Tensor>& batch, const LossFn& loss_fn,
                const Optimizer& optimizer, const TrainOptions& options = {},
                SrcLoc loc = Here::current());

}  // namespace sharc
