// train_step: micro-batching, gradients, clipping and optimizer updates as IR;
// see train.h. Compiled into sharc_codegen because it calls autodiff.
#include "dsl/train.h"

#include <cmath>
#include <optional>
#include <sstream>

#include "ir/autodiff.h"

namespace sharc {

namespace {

// Micro-batch j of k of x (B, ...): examples j, j+k, ... as (B/k, ...).
Tensor micro_batch(Tensor x, int k, int j, const SrcLoc& loc) {
  if (k == 1) return x;
  const ir::Shape s = x.shape();
  ir::Shape split = s, out = s;
  split[0] = out[0] = s[0] / k;
  split.insert(split.begin() + 1, k);
  return reshape(slice(reshape(x, split, loc), 1, j, 1, loc), out, loc);
}

Tensor scalar(double v, const SrcLoc& loc) { return full({}, v, loc); }

// A persistent zeros-initialised Parameter laid out like `like`.
Tensor state_like(Tracer& t, const std::string& path, const ir::Node& like, int like_id, const SrcLoc& loc) {
  ir::Node n;
  n.op = ir::Op::kParameter;
  n.name = path;
  n.shape = like.shape;
  n.loc = loc;
  n.init = zeros();
  n.layout_of = like_id;
  return t.add(std::move(n));
}

Tensor learning_rate(const Schedule& s, Tensor step, const SrcLoc& loc) {
  if (s.kind == Schedule::Kind::kConstant) return scalar(s.peak, loc);
  const double warmup = static_cast<double>(std::max<int64_t>(s.warmup_steps, 1));
  Tensor linear = mul(step, s.peak / warmup, loc);
  const double span = static_cast<double>(std::max<int64_t>(s.decay_steps - s.warmup_steps, 1));
  Tensor frac = minimum(mul(add(step, -static_cast<double>(s.warmup_steps), loc), 1.0 / span, loc),
                        scalar(1.0, loc), loc);
  Tensor cosine = add(mul(add(cos(mul(frac, M_PI, loc), loc), 1.0, loc), 0.5 * (s.peak - s.end), loc), s.end, loc);
  // in_warmup = 1 while step < warmup_steps.
  Tensor in_warmup = greater(scalar(static_cast<double>(s.warmup_steps), loc), step, loc);
  return add(mul(in_warmup, linear, loc), mul(sub(scalar(1.0, loc), in_warmup, loc), cosine, loc), loc);
}

Tensor tensor_of(Tracer& t, int id) { return Tensor(&t, id); }

// Whether `path` matches `pattern`, in which '*' stands for any run of
// characters (none included).
bool glob_match(const std::string& pattern, const std::string& path) {
  size_t p = 0, s = 0, star = std::string::npos, resume = 0;
  while (s < path.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = s;
    } else if (p < pattern.size() && pattern[p] == path[s]) {
      ++p;
      ++s;
    } else if (star != std::string::npos) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// The parameters' paths, for an error message: the first 12 and the count.
std::string parameter_list(const ir::Graph& g, const std::vector<int>& params) {
  std::string names;
  for (size_t p = 0; p < params.size() && p < 12; ++p) names += (p ? ", " : "") + g.nodes[params[p]].name;
  if (params.size() > 12) names += ", ... (" + std::to_string(params.size()) + " in all)";
  return names;
}

// Which of `params` AdamW decays under `mask`; a pattern that matches no
// parameter is an error at `loc`.
std::vector<bool> decayed(const ir::Graph& g, const std::vector<int>& params, const DecayMask& mask,
                          const SrcLoc& loc) {
  std::vector<bool> decays(params.size());
  std::vector<bool> used(mask.exclude.size(), false);
  for (size_t p = 0; p < params.size(); ++p) {
    const ir::Node& n = g.nodes[params[p]];
    bool excluded = false;
    for (size_t k = 0; k < mask.exclude.size(); ++k)
      if (glob_match(mask.exclude[k], n.name)) used[k] = excluded = true;
    // A scanned layer's parameter counts as one layer's: its stacked layer
    // axis is not a dimension of the layer's weight.
    int rank = static_cast<int>(n.shape.size());
    for (const ir::Repeat& r : g.repeats)
      if (r.scan && n.name.rfind(r.name + "/", 0) == 0) --rank;
    decays[p] = !excluded && rank >= mask.min_rank;
  }
  for (size_t k = 0; k < mask.exclude.size(); ++k)
    if (!used[k])
      user_error(loc, "train_step: the weight decay mask's pattern '" + mask.exclude[k] +
                          "' matches no parameter; the parameters are " + parameter_list(g, params));
  return decays;
}

// Each of `params`' learning-rate group (an index into `groups`, or -1 for
// the schedule's own); a pattern that matches no parameter, or a scale that
// is not positive and finite, is an error at `loc`.
std::vector<int> lr_groups_of(const ir::Graph& g, const std::vector<int>& params, const std::vector<LrGroup>& groups,
                              const SrcLoc& loc) {
  std::vector<int> group(params.size(), -1);
  for (size_t k = 0; k < groups.size(); ++k) {
    const LrGroup& lg = groups[k];
    if (!(lg.scale > 0.0) || !std::isfinite(lg.scale)) {
      std::ostringstream scale;
      scale << lg.scale;
      user_error(loc, "train_step: learning-rate group " + std::to_string(k) + "'s scale must be positive and finite, got " +
                          scale.str());
    }
    if (lg.patterns.empty())
      user_error(loc, "train_step: learning-rate group " + std::to_string(k) + " has no pattern");
    for (const std::string& pattern : lg.patterns) {
      bool used = false;
      for (size_t p = 0; p < params.size(); ++p) {
        if (!glob_match(pattern, g.nodes[params[p]].name)) continue;
        used = true;
        if (group[p] < 0) group[p] = static_cast<int>(k);
      }
      if (!used)
        user_error(loc, "train_step: learning-rate group " + std::to_string(k) + "'s pattern '" + pattern +
                            "' matches no parameter; the parameters are " + parameter_list(g, params));
    }
  }
  return group;
}

}  // namespace

void train_step(ProgramBuilder& b, const std::vector<Tensor>& batch, const LossFn& loss_fn,
                const Optimizer& opt, const TrainOptions& o, SrcLoc loc) {
  Tracer& t = Tracer::current(loc);
  ir::Graph& g = t.graph();
  int k = o.accumulate_steps;
  if (k < 1) user_error(loc, "train_step: accumulate_steps must be at least 1, got " + std::to_string(k));
  // A pipeline sets the micro-batch count.
  std::string whose;
  if (g.pipeline) {
    if (k != 1 && k != g.pipeline->microbatches)
      user_error(loc, "train_step: accumulate_steps = " + std::to_string(k) + " differs from the pipeline's " +
                          std::to_string(g.pipeline->microbatches) + " micro-batches (set_pipeline at " +
                          g.pipeline->loc.str() + "); leave it out");
    k = g.pipeline->microbatches;
    whose = " (the pipeline's, set at " + g.pipeline->loc.str() + ")";
  }
  if (batch.empty()) user_error(loc, "train_step: the batch has no tensors");
  for (const Tensor& x : batch) {
    if (x.rank() == 0) user_error(loc, "train_step: batch tensor " + x.describe() + " has no batch dimension");
    if (x.dim(0) % k != 0)
      user_error(loc, "train_step: batch dimension of " + x.describe() + " does not divide into " +
                          std::to_string(k) + " micro-batches" + whose);
  }
  g.remat = o.remat;  // applied when the program is lowered (codegen/passes/rematerialize.h)
  // Every parameter traced so far is trained.
  std::vector<int> params;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == ir::Op::kParameter && g.nodes[i].layout_of < 0) params.push_back(static_cast<int>(i));
  if (params.empty()) user_error(loc, "train_step: the program has no parameters to train");

  // Nodes are stamped with the micro-batch they belong to (ir::Node::micro_batch),
  // which places them in a pipeline's schedule.
  struct Stamp {
    ir::Graph& g;
    ~Stamp() { g.tracing_micro_batch = -1; }
  } stamp{g};
  // Forward and backward per micro-batch; gradients summed, then averaged.
  std::vector<Tensor> grads(params.size());
  std::vector<std::vector<Tensor>> parts(params.size());  // pipelined: per use, over micro-batches
  Tensor loss_sum;
  for (int j = 0; j < k; ++j) {
    g.tracing_micro_batch = j;
    std::vector<Tensor> mb;
    for (const Tensor& x : batch) mb.push_back(micro_batch(x, k, j, loc));
    Tensor loss = loss_fn(mb);
    if (!loss.valid()) user_error(loc, "train_step: the loss function returned an empty tensor");
    if (loss.rank() != 0)
      user_error(loc, "train_step: the loss must be a scalar, got " + loss.describe());
    if (g.pipeline) {
      // Per use: a parameter read on two stages (a tied embedding) sums its
      // two halves once, after the micro-batches, not once per micro-batch
      // (which would make the last stage wait for the first in every one).
      const std::vector<std::vector<int>> gid = append_gradient_parts(g, loss.id(), params, loc);
      for (size_t p = 0; p < params.size(); ++p) {
        if (j == 0) parts[p].resize(gid[p].size());
        if (gid[p].size() != parts[p].size())
          internal_error("train_step: parameter %" + std::to_string(params[p]) + " has " +
                         std::to_string(gid[p].size()) + " uses in micro-batch " + std::to_string(j) + ", " +
                         std::to_string(parts[p].size()) + " in the first");
        for (size_t u = 0; u < gid[p].size(); ++u) {
          Tensor part = tensor_of(t, gid[p][u]);
          parts[p][u] = j == 0 ? part : add(parts[p][u], part, loc);
        }
      }
    } else {
      std::vector<int> gid = append_gradients(g, loss.id(), params, loc);
      for (size_t p = 0; p < params.size(); ++p) {
        Tensor gp = tensor_of(t, gid[p]);
        grads[p] = j == 0 ? gp : add(grads[p], gp, loc);
      }
    }
    loss_sum = j == 0 ? loss : add(loss_sum, loss, loc);
  }
  g.tracing_micro_batch = ir::kAfterMicroBatches;
  if (g.pipeline)
    for (size_t p = 0; p < params.size(); ++p) {
      if (parts[p].empty()) {  // does not reach the loss
        grads[p] = full(g.nodes[params[p]].shape, 0.0, loc);
        continue;
      }
      grads[p] = parts[p][0];
      for (size_t u = 1; u < parts[p].size(); ++u) grads[p] = add(grads[p], parts[p][u], loc);
    }
  if (k > 1) {
    for (auto& gp : grads) gp = mul(gp, 1.0 / k, loc);
    loss_sum = mul(loss_sum, 1.0 / k, loc);
  }

  // Global norm and clipping (optax.clip_by_global_norm): one composite
  // region, the global_norm kernel's work on a GPU (its clip factor scales
  // the gradients inside the optimizer's kernel).
  std::optional<CompositeScope> norm_region(
      std::in_place, t, ir::make_composite(ir::CompositeKind::kGlobalNorm, loc, "opt"));
  Tensor sq;
  for (size_t p = 0; p < params.size(); ++p) {
    const Tensor& gp = grads[p];
    std::vector<int> all;
    for (int d = 0; d < static_cast<int>(gp.rank()); ++d) all.push_back(d);
    Tensor s = all.empty() ? mul(gp, gp, loc) : sum(mul(gp, gp, loc), all, false, loc);
    sq = p == 0 ? s : add(sq, s, loc);
  }
  Tensor norm = sqrt(sq, loc);
  if (o.clip_global_norm) {
    if (*o.clip_global_norm <= 0) user_error(loc, "train_step: clip_global_norm must be positive");
    // optax: max_norm / max(norm, tiny); torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6).
    Tensor denominator = o.clip_form == ClipForm::kTorch ? add(norm, 1e-6, loc) : maximum(norm, scalar(1e-30, loc), loc);
    Tensor factor = minimum(scalar(1.0, loc), div(scalar(*o.clip_global_norm, loc), denominator, loc), loc);
    for (auto& gp : grads) gp = mul(gp, factor, loc);
  }
  norm_region.reset();
  for (size_t p = 0; p < params.size(); ++p) g.gradients.push_back({params[p], grads[p].id()});

  // Step count and learning rate.
  const ir::Node* existing = g.find("opt/step", ir::Op::kParameter);
  if (existing) user_error(loc, "train_step: called twice in one program");
  ir::Node step_node;
  step_node.op = ir::Op::kParameter;
  step_node.name = "opt/step";
  step_node.loc = loc;
  step_node.init = zeros();
  Tensor step = t.add(std::move(step_node));
  Tensor lr = learning_rate(opt.lr, step, loc);
  Tensor count = add(step, 1.0, loc);  // t in Adam's bias correction
  const bool adamw = opt.kind == Optimizer::Kind::kAdamW && opt.weight_decay != 0.0;
  const std::vector<bool> decays = adamw ? decayed(g, params, opt.decay_mask, loc) : std::vector<bool>(params.size());
  // Each learning-rate group's rate, once per step (outside the update
  // regions, so a GPU's AdamW kernel reads it as it reads the schedule's).
  const std::vector<int> group_of = lr_groups_of(g, params, opt.lr_groups, loc);
  std::vector<Tensor> group_lr;
  for (const LrGroup& lg : opt.lr_groups) group_lr.push_back(mul(lr, lg.scale, loc));

  for (size_t p = 0; p < params.size(); ++p) {
    const int pid = params[p];
    const ir::Node pn = g.nodes[pid];  // copy: the node list grows below
    Tensor w = tensor_of(t, pid);
    Tensor gp = grads[p];
    Tensor update;  // the step to subtract from w, before lr
    std::optional<CompositeScope> adam_region;
    if (opt.kind == Optimizer::Kind::kSgd) {
      if (opt.momentum != 0.0) {
        Tensor trace = state_like(t, "opt/trace/" + pn.name, pn, pid, loc);
        Tensor new_trace = add(gp, mul(trace, opt.momentum, loc), loc);
        g.updates.push_back({trace.id(), new_trace.id()});
        update = new_trace;
      } else {
        update = gp;
      }
    } else {
      Tensor m = state_like(t, "opt/m/" + pn.name, pn, pid, loc);
      Tensor v = state_like(t, "opt/v/" + pn.name, pn, pid, loc);
      // This parameter's update: one composite region, a share of the
      // multi-tensor AdamW kernel's work on a GPU.
      ir::Composite adam = ir::make_composite(ir::CompositeKind::kAdam, loc, pn.name);
      adam.b1 = opt.b1;
      adam.b2 = opt.b2;
      adam.eps = opt.eps;
      adam.weight_decay = decays[p] ? opt.weight_decay : 0.0;
      adam_region.emplace(t, std::move(adam));
      Tensor new_m = add(mul(m, opt.b1, loc), mul(gp, 1.0 - opt.b1, loc), loc);
      Tensor new_v = add(mul(v, opt.b2, loc), mul(mul(gp, gp, loc), 1.0 - opt.b2, loc), loc);
      g.updates.push_back({m.id(), new_m.id()});
      g.updates.push_back({v.id(), new_v.id()});
      // 1 - b^t = 1 - exp(t ln b).
      Tensor bc1 = sub(scalar(1.0, loc), exp(mul(count, std::log(opt.b1), loc), loc), loc);
      Tensor bc2 = sub(scalar(1.0, loc), exp(mul(count, std::log(opt.b2), loc), loc), loc);
      Tensor mhat = div(new_m, bc1, loc);
      Tensor vhat = div(new_v, bc2, loc);
      update = div(mhat, add(sqrt(vhat, loc), opt.eps, loc), loc);
      if (decays[p]) update = add(update, mul(w, opt.weight_decay, loc), loc);
    }
    Tensor new_w = sub(w, mul(update, group_of[p] < 0 ? lr : group_lr[group_of[p]], loc), loc);
    adam_region.reset();
    g.updates.push_back({pid, new_w.id()});
  }
  g.updates.push_back({step.id(), count.id()});

  b.output("loss", loss_sum, std::nullopt, loc);
  b.output("grad_norm", norm, std::nullopt, loc);
  b.output("lr", lr, std::nullopt, loc);
}

}  // namespace sharc
