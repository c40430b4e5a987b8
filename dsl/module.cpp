// Parameters and the Linear / LayerNorm modules.
#include "dsl/module.h"

namespace sharc {

Param Scope::param(const std::string& name, std::vector<int64_t> shape, Initializer init,
                   SrcLoc loc) const {
  if (!tracer_) user_error(loc, "parameter \"" + name + "\" created from an empty Scope");
  const std::string path = path_.empty() ? name : path_ + "/" + name;
  for (auto& n : tracer_->graph().nodes)
    if (n.op == ir::Op::kParameter && n.name == path)
      user_error(loc, "parameter \"" + path + "\" is created twice (first at " + n.loc.str() + ")");
  for (auto d : shape)
    if (d <= 0) user_error(loc, "parameter \"" + path + "\" has a non-positive dimension " + ir::shape_str(shape));
  ir::Node n;
  n.op = ir::Op::kParameter;
  n.name = path;
  n.shape = std::move(shape);
  n.loc = loc;
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
