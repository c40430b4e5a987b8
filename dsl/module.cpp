// Parameters and the Linear / LayerNorm modules.
#include "dsl/module.h"

namespace sharc {

Param Scope::param(const std::string& name, std::vector<int64_t> shape, Initializer init,
                   SrcLoc loc) const {
  if (!tracer_) user_error(loc, "parameter \"" + name + "\" created from an empty Scope");
  const std::string path = path_.empty() ? name : path_ + "/" + name;
  const int r = tracer_->repeat();
  if (r >= 0 && tracer_->graph().repeats[r].scan && tracer_->iteration() >= 0) {
    // A scanned layer's parameter: its row of the stacked parameter made
    // when the Layers was constructed (dsl/layers.h).
    const ir::Node* stacked = tracer_->graph().find(path, ir::Op::kParameter);
    const ir::Repeat& rep = tracer_->graph().repeats[r];
    std::vector<int64_t> expect = {rep.length};
    expect.insert(expect.end(), shape.begin(), shape.end());
    if (!stacked || stacked->repeat != r || stacked->shape != expect)
      user_error(loc, "scanned Layers '" + rep.name + "': layer " + std::to_string(tracer_->iteration()) +
                          " asks for parameter \"" + path + "\" " + ir::shape_str(shape) +
                          (stacked ? ", but the stacked one is " + ir::shape_str(stacked->shape)
                                   : ", which the Layers' first construction did not make") +
                          "; a scanned layer's module must make the same parameters every time");
    const int id = static_cast<int>(stacked - tracer_->graph().nodes.data());
    LabelScope label(*tracer_, path_);
    const int64_t i = tracer_->iteration();
    return reshape(slice(Tensor(tracer_, id), 0, i, 1, loc), shape, loc);
  }
  for (auto& n : tracer_->graph().nodes)
    if (n.op == ir::Op::kParameter && n.name == path)
      user_error(loc, "parameter \"" + path + "\" is created twice (first at " + n.loc.str() + ")");
  for (auto d : shape)
    if (d <= 0) user_error(loc, "parameter \"" + path + "\" has a non-positive dimension " + ir::shape_str(shape));
  ir::Node n;
  n.op = ir::Op::kParameter;
  n.name = path;
  n.loc = loc;
  if (r >= 0 && tracer_->graph().repeats[r].scan) {
    // Made once for a scanned Layers: stacked over a leading layer axis laid
    // out as the Layers' layer_axis says, each row initialised as that
    // layer's parameter would be unrolled.
    const ir::Repeat& rep = tracer_->graph().repeats[r];
    shape.insert(shape.begin(), rep.length);
    const DimSpec layer_axis = rep.layer_axis.empty() ? DimSpec(None) : DimSpec(rep.layer_axis);
    if (init.sharding || !rep.layer_axis.empty()) {
      std::vector<DimSpec> dims = {layer_axis};
      if (init.sharding) dims.insert(dims.end(), init.sharding->dims().begin(), init.sharding->dims().end());
      else dims.resize(shape.size());
      init.sharding = P(std::move(dims));
    }
    init.stack_scope = rep.name;
  }
  n.shape = std::move(shape);
  n.spec = init.sharding;
  n.rules = init.rules;
  n.init = std::move(init);
  return tracer_->add(std::move(n));
}

Linear::Linear(Scope s, int64_t in_features, int64_t out_features, LinearOptions o, SrcLoc loc)
    : path_(s.path()) {
  kernel = s.param("kernel", {in_features, out_features}, o.kernel_init, loc);
  if (o.use_bias) bias = s.param("bias", {out_features}, o.bias_init, loc);
}

Tensor Linear::operator()(Tensor x, SrcLoc loc) const {
  LabelScope label(*kernel.tracer(), path_);
  const DType dt = kernel.tracer()->graph().dtype;
  Tensor y = matmul(astype(x, dt, loc), astype(kernel, dt, loc), loc);
  return bias.valid() ? add(y, astype(bias, dt, loc), loc) : y;
}

LayerNorm::LayerNorm(Scope s, int64_t features, LayerNormOptions o, SrcLoc loc)
    : path_(s.path()), epsilon_(o.epsilon) {
  scale = s.param("scale", {features}, o.scale_init, loc);
  bias = s.param("bias", {features}, o.bias_init, loc);
}

Tensor LayerNorm::operator()(Tensor x, SrcLoc loc) const {
  LabelScope label(*scale.tracer(), path_);
  // In f32 (layer_norm upcasts), the result in the program's dtype.
  return astype(layer_norm(x, scale, bias, epsilon_, loc), scale.tracer()->graph().dtype, loc);
}

}  // namespace sharc
