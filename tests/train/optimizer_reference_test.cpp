// train_step's optimizers, clipping and learning-rate schedule (dsl/train.h)
// against an independent reference: optax's sgd (with momentum), adam, adamw,
// clip_by_global_norm and warmup_cosine_decay_schedule, written out below as
// plain loops over doubles. Not a test of autodiff: the loss
// 0.5 * sum((w - t)^2) has the analytic gradient w - t, so the reference needs
// none. The traced step runs 10 times in the fp64 oracle (interpret() with
// state), each step on new targets, and every step's parameters, optimizer
// state and outputs (loss, grad_norm, lr) are compared with the reference's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "dsl/sharc.h"
#include "dsl/train.h"

namespace sharc {
namespace {

using Vec = std::vector<double>;

// ---- The reference: optax's definitions, one tensor at a time. -------------

// optax.warmup_cosine_decay_schedule(init_value=0, peak_value, warmup_steps,
// decay_steps, end_value): join_schedules of linear_schedule(0, peak,
// warmup_steps) and cosine_decay_schedule(peak, decay_steps - warmup_steps,
// alpha=end/peak), the latter evaluated at step - warmup_steps.
double warmup_cosine_decay(double peak, int64_t warmup, int64_t decay_steps, double end,
                           int64_t step) {
  if (step < warmup) return peak * static_cast<double>(step) / static_cast<double>(warmup);
  const double span = static_cast<double>(decay_steps - warmup);
  const double count = std::min(static_cast<double>(step - warmup), span);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * count / span));
  const double alpha = end / peak;
  return peak * ((1.0 - alpha) * cosine + alpha);
}

struct Reference {
  Optimizer opt;
  std::optional<double> clip;
  std::function<double(int64_t)> lr;  // the schedule
  std::vector<Vec> mu, nu;            // sgd: mu is the momentum trace
  int64_t count = 0;                  // steps taken
  std::vector<bool> decays = {true, true};  // adamw's mask, per tensor
  ClipForm clip_form = ClipForm::kOptax;
  std::vector<double> lr_scales = {1.0, 1.0};  // each tensor's group's scale (PyTorch's param groups)

  struct Step {
    double grad_norm, lr;
  };

  // One optax update of `params` with `grads`.
  Step step(std::vector<Vec>& params, std::vector<Vec> grads) {
    if (mu.empty())
      for (const Vec& p : params) {
        mu.emplace_back(p.size(), 0.0);
        nu.emplace_back(p.size(), 0.0);
      }
    double sq = 0;
    for (const Vec& g : grads)
      for (double x : g) sq += x * x;
    const double norm = std::sqrt(sq);
    // clip_by_global_norm: where(norm < max_norm, g, g / norm * max_norm).
    if (clip && clip_form == ClipForm::kOptax && !(norm < *clip))
      for (Vec& g : grads)
        for (double& x : g) x = x / norm * *clip;
    // torch.nn.utils.clip_grad_norm_: g * clamp(max_norm / (norm + 1e-6), max=1).
    if (clip && clip_form == ClipForm::kTorch)
      for (Vec& g : grads)
        for (double& x : g) x *= std::min(*clip / (norm + 1e-6), 1.0);
    const double rate = lr(count);
    const double b1c = 1.0 - std::pow(opt.b1, static_cast<double>(count + 1));
    const double b2c = 1.0 - std::pow(opt.b2, static_cast<double>(count + 1));
    for (size_t t = 0; t < params.size(); ++t)
      for (size_t i = 0; i < params[t].size(); ++i) {
        const double g = grads[t][i];
        double u;
        if (opt.kind == Optimizer::Kind::kSgd) {
          // optax.sgd: trace(decay=momentum) then scale by -lr.
          if (opt.momentum != 0.0) mu[t][i] = g + opt.momentum * mu[t][i];
          u = opt.momentum != 0.0 ? mu[t][i] : g;
        } else {
          // optax.scale_by_adam (eps outside the sqrt, eps_root = 0).
          mu[t][i] = opt.b1 * mu[t][i] + (1.0 - opt.b1) * g;
          nu[t][i] = opt.b2 * nu[t][i] + (1.0 - opt.b2) * g * g;
          u = (mu[t][i] / b1c) / (std::sqrt(nu[t][i] / b2c) + opt.eps);
          // optax.adamw: add_decayed_weights before the learning rate.
          // optax.adamw's mask: only where it is true.
          if (opt.kind == Optimizer::Kind::kAdamW && decays[t]) u += opt.weight_decay * params[t][i];
        }
        params[t][i] -= rate * lr_scales[t] * u;
      }
    ++count;
    return {norm, rate};
  }
};

// ---- The program under test. ------------------------------------------------

// Two parameters, so that the global norm spans tensors: w1 (4, 3) and w2 (5),
// each pulled towards its target; the targets are the step's batch.
const ir::Shape kShapes[] = {{4, 3}, {5}};

ir::Graph program(const Optimizer& opt, const TrainOptions& options = {}) {
  return trace("quadratic", [&](ProgramBuilder& b) {
    Tensor w1 = b.scope().param("w1", {4, 3}, zeros());
    Tensor w2 = b.scope().param("w2", {5}, zeros());
    Tensor t1 = b.input("t1", {4, 3});
    Tensor t2 = b.input("t2", {5});
    train_step(
        b, {t1, t2},
        [&](const std::vector<Tensor>& mb) {
          Tensor d1 = sub(w1, mb[0]), d2 = sub(w2, mb[1]);
          return mul(add(sum(mul(d1, d1), {0, 1}), sum(mul(d2, d2), {0})), 0.5);
        },
        opt, options);
  });
}

// Targets of step s, and the initial parameters: smooth, distinct per element,
// of magnitude ~1-2 so gradients are far from zero.
std::vector<Vec> targets(int step) {
  std::vector<Vec> t;
  for (size_t k = 0; k < 2; ++k) {
    Vec v(ir::num_elements(kShapes[k]));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = 2.0 * std::sin(0.7 * static_cast<double>(i) + 1.3 * step + k);
    t.push_back(v);
  }
  return t;
}

std::vector<Vec> initial_params() {
  std::vector<Vec> w;
  for (size_t k = 0; k < 2; ++k) {
    Vec v(ir::num_elements(kShapes[k]));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = 1.5 * std::cos(0.9 * static_cast<double>(i) + 2.0 * k);
    w.push_back(v);
  }
  return w;
}

// |got - want| <= rel * (largest |want|), elementwise; on failure the first
// mismatches and the max abs / rel error.
::testing::AssertionResult near(const Vec& got, const Vec& want, double rel) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  std::ostringstream bad;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    worst = std::max(worst, err);
    if (err > rel * scale && shown++ < 5)
      bad << "\n  [" << i << "] got " << got[i] << " want " << want[i];
  }
  if (worst <= rel * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max abs error " << worst << ", max rel error "
                                       << worst / scale << " > " << rel << bad.str();
}

// The oracle computes the same formulas in fp64 in another order (1 - b^t as
// 1 - exp(t ln b), clipping as g * min(1, max / norm), sums in IR order), so
// it differs from the reference by a few ulps per step: at most 7e-16
// relative over these runs (measured). 1e-9 leaves that a wide margin while a
// formula slip (a missing bias correction, weight decay not scaled by lr, the
// schedule one step off, no clipping) changes values by 1e-3 or more; even a
// stray 1e-6 * lr per step fails it.
constexpr double kRel = 1e-9;

// What a run checks, besides parameters and state.
struct Expect {
  bool clipped_some = false, clipped_all = false;  // of the reference's steps
};

// Runs 10 steps of the program in the oracle and of the reference side by
// side; returns the oracle's final state.
HostValues run_and_compare(const Optimizer& opt, const TrainOptions& options,
                           const std::function<double(int64_t)>& schedule, Expect expect = {},
                           std::vector<bool> decays = {true, true}, std::vector<double> lr_scales = {1.0, 1.0}) {
  const ir::Graph g = program(opt, options);
  Reference ref{opt, options.clip_global_norm, schedule, {}, {}, 0, decays, options.clip_form, lr_scales};
  std::vector<Vec> w = initial_params();
  HostValues state = {{"w1", w[0]}, {"w2", w[1]}};
  int clipped = 0;
  for (int s = 0; s < 10; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const std::vector<Vec> t = targets(s);
    HostValues out = interpret(g, {{"t1", t[0]}, {"t2", t[1]}}, 0, &state);
    // The reference's loss and gradient at the parameters before the update.
    double loss = 0;
    std::vector<Vec> grads = w;
    for (size_t k = 0; k < 2; ++k)
      for (size_t i = 0; i < w[k].size(); ++i) {
        grads[k][i] = w[k][i] - t[k][i];
        loss += 0.5 * grads[k][i] * grads[k][i];
      }
    const Reference::Step r = ref.step(w, grads);
    if (options.clip_global_norm && r.grad_norm > *options.clip_global_norm) ++clipped;
    EXPECT_NEAR(out.at("loss")[0], loss, kRel * loss);
    EXPECT_NEAR(out.at("grad_norm")[0], r.grad_norm, kRel * r.grad_norm)
        << "the norm before clipping";
    EXPECT_NEAR(out.at("lr")[0], r.lr, kRel * r.lr);
    EXPECT_NEAR(out.at("lr")[0], schedule(s), kRel * schedule(s));
    EXPECT_TRUE(near(state.at("w1"), w[0], kRel)) << "w1";
    EXPECT_TRUE(near(state.at("w2"), w[1], kRel)) << "w2";
    const char* first = opt.kind == Optimizer::Kind::kSgd ? "opt/trace/" : "opt/m/";
    if (opt.kind != Optimizer::Kind::kSgd || opt.momentum != 0.0)
      for (size_t k = 0; k < 2; ++k) {
        const std::string name = k == 0 ? "w1" : "w2";
        EXPECT_TRUE(near(state.at(first + name), ref.mu[k], kRel)) << first << name;
        if (opt.kind != Optimizer::Kind::kSgd) {
          EXPECT_TRUE(near(state.at("opt/v/" + name), ref.nu[k], kRel)) << "opt/v/" << name;
        }
      }
    EXPECT_EQ(state.at("opt/step")[0], s + 1);
  }
  if (expect.clipped_all) {
    EXPECT_EQ(clipped, 10) << "clipping must be active at every step";
  }
  if (expect.clipped_some) {
    EXPECT_GT(clipped, 0) << "clipping must be active at some step";
  }
  return state;
}

std::function<double(int64_t)> constant(double lr) {
  return [lr](int64_t) { return lr; };
}

// warmup 3, decay over steps 3..8, then end: 10 steps see every piece,
// including steps past decay_steps.
std::function<double(int64_t)> warmup_cosine(double peak, double end) {
  return [=](int64_t s) { return warmup_cosine_decay(peak, 3, 8, end, s); };
}

TEST(OptimizerReference, PlainSgdWithWarmupCosine) {
  run_and_compare(sgd(Schedule::warmup_cosine(0.3, 3, 8, 0.02)), {}, warmup_cosine(0.3, 0.02));
}

TEST(OptimizerReference, SgdWithMomentum) {
  run_and_compare(sgd(Schedule::constant(0.1), 0.9), {}, constant(0.1));
}

TEST(OptimizerReference, AdamWithWarmupCosine) {
  run_and_compare(adam(Schedule::warmup_cosine(0.05, 3, 8, 0.005)), {}, warmup_cosine(0.05, 0.005));
}

TEST(OptimizerReference, AdamWithOwnBetasAndEps) {
  // eps of 0.1 is comparable to sqrt(v): a misplaced eps (inside the sqrt,
  // or before bias correction) shows.
  run_and_compare(adam(Schedule::constant(0.05), 0.8, 0.95, 0.1), {}, constant(0.05));
}

TEST(OptimizerReference, AdamWDecoupledWeightDecayScaledByLr) {
  run_and_compare(adamw(Schedule::warmup_cosine(0.05, 3, 8, 0.005), 0.1), {},
                  warmup_cosine(0.05, 0.005));
}

// optax.adamw's mask: the decay of 0.1 moves a parameter by 5e-3 of itself
// per step, so decaying the wrong tensor fails by far more than kRel.
// By rank: w1 (4, 3) is decayed, w2 (5) is not (GPT-2's recipe: matrices only).
TEST(OptimizerReference, AdamWDecaysOnlyWhatItsMaskSelectsByRank) {
  run_and_compare(adamw(Schedule::constant(0.05), 0.1, decay_mask(2)), {}, constant(0.05), {},
                  {true, false});
}

// By path: "w*1" (a glob) leaves w1 out; w2 is decayed.
TEST(OptimizerReference, AdamWDecaysOnlyWhatItsMaskSelectsByPath) {
  run_and_compare(adamw(Schedule::constant(0.05), 0.1, decay_mask(0, {"w*1"})), {}, constant(0.05), {},
                  {false, true});
}

// PyTorch's parameter groups with their own lr under one scheduler: w2 at
// a quarter of the schedule's rate, w1 at the rate itself; "lr" is still the
// schedule's. Adam's update is ~lr per step whatever the gradient, so a
// group at the wrong rate is off by far more than kRel.
TEST(OptimizerReference, LearningRateGroupsScaleTheSchedule) {
  Optimizer o = adamw(Schedule::warmup_cosine(0.05, 3, 8, 0.005), 0.1, decay_mask(2));
  o.lr_groups = {lr_group({"w2"}, 0.25)};
  run_and_compare(o, {}, warmup_cosine(0.05, 0.005), {}, {true, false}, {1.0, 0.25});
}

// A parameter takes the first group that matches it: w2 matches both.
TEST(OptimizerReference, AParameterTakesTheFirstLearningRateGroupItMatches) {
  Optimizer o = sgd(Schedule::constant(0.1), 0.9);
  o.lr_groups = {lr_group({"w*"}, 3.0), lr_group({"w2"}, 0.5)};
  run_and_compare(o, {}, constant(0.1), {}, {true, true}, {3.0, 3.0});
}

// The gradients have norm ~4-6 (17 elements of magnitude ~1-2): a max norm of
// 0.5 scales every step's gradients; SGD makes the scale visible in the update
// itself (Adam would mostly cancel it).
TEST(OptimizerReference, ClipByGlobalNormActive) {
  TrainOptions o;
  o.clip_global_norm = 0.5;
  run_and_compare(sgd(Schedule::constant(0.1), 0.5), o, constant(0.1), {.clipped_all = true});
}

// PyTorch's form, max_norm / (norm + 1e-6): with norms of ~4-6 it scales by
// ~2e-7 relative less than optax's, which kRel tells apart.
TEST(OptimizerReference, ClipGradNormInPyTorchsForm) {
  TrainOptions o;
  o.clip_global_norm = 0.5;
  o.clip_form = ClipForm::kTorch;
  run_and_compare(sgd(Schedule::constant(0.1), 0.5), o, constant(0.1), {.clipped_all = true});
}

TEST(OptimizerReference, ClipByGlobalNormActiveWithAdamW) {
  TrainOptions o;
  o.clip_global_norm = 2.0;
  run_and_compare(adamw(Schedule::constant(0.05), 0.1), o, constant(0.05), {.clipped_some = true});
}

// A max norm above every gradient's norm changes nothing: the step is
// bitwise the unclipped one (the factor is exactly 1).
TEST(OptimizerReference, ClipByGlobalNormInactive) {
  TrainOptions o;
  o.clip_global_norm = 100.0;
  const Optimizer opt = sgd(Schedule::constant(0.1), 0.5);
  const HostValues clipped = run_and_compare(opt, o, constant(0.1));
  const HostValues unclipped = run_and_compare(opt, {}, constant(0.1));
  for (const auto& [name, v] : unclipped) EXPECT_EQ(clipped.at(name), v) << name;
}

}  // namespace
}  // namespace sharc
