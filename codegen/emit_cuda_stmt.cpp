// The CUDA renderer's own spellings (emit_cpu_impl.h, "the CUDA renderer"):
// a fusion group as a kernel in sharc's dialect (runtime/gpu/dialect.h).
// Everything else it prints is the CPU
// renderer's statements with the runtime calls of runtime/gpu/device_ops.h
// (CpuEmitter::call), so the two renderers share one plan and one text.
#include "codegen/emit_cpu_impl.h"

namespace sharc::emit_cpu_detail {

CpuEmitter::FusedKernel CpuEmitter::fused_kernel(const Stmt& s) const {
  FusedKernel k;
  k.name = (stage_ >= 0 ? "stage" + std::to_string(stage_) + "_" : "") + base_name(var_[s.node]) + "_kernel";
  const std::set<int> tree(s.tree.begin(), s.tree.end());
  auto add = [&](int v, std::vector<int>& to) {
    if (k.param.count(v)) return;
    k.param[v] = base_name(var_[v]);
    to.push_back(v);
  };
  // What the loop reads: the operands from outside the group (a constant is
  // a literal in the loop), in the group's order.
  for (int t : s.tree)
    for (int a : g_[t].args)
      if (!tree.count(a) && g_[a].op != Op::kConstant) add(a, k.reads);
  add(s.node, k.writes);
  for (int t : s.tree)
    if (t != s.node && plan_.kept[t]) add(t, k.writes);
  return k;
}

void CpuEmitter::finish_fused_kernel(CodeWriter& w, const Stmt& s, const FusedKernel& k,
                                     const std::string& body) {
  in_kernel_ = nullptr;
  const Node a = anchor(s);
  std::vector<std::string> params = {"int64_t n"}, args;
  for (int v : k.reads) {
    params.push_back("const " + elem_type(g_[v].dtype) + "* __restrict__ " + k.param.at(v));
    args.push_back(ptr(v));
  }
  for (int v : k.writes) {
    params.push_back(elem_type(g_[v].dtype) + "* __restrict__ " + k.param.at(v));
    args.push_back(ptr(v));
  }
  std::vector<std::string> ops;
  for (int t : s.tree) ops.push_back(ir::op_name(g_[t].op));
  auto text = [&](const std::string& name) {
    CodeWriter kw(0);
    kw.line("// " + loc_prefix(a) + (s.tree.size() > 1 ? "fused " : "") + join(ops, ", ") + ": one thread per element");
    kw.line("// of " + shape_comment(g_[s.node]) + ", the grid striding over the rest.");
    kw.line("static SHARC_KERNEL void " + name + "(" + join(params, ", ") + ") {");
    kw.text(body);
    kw.line("}");
    return kw.str();
  };
  // One name per kernel text: a scanned layer's statements share their
  // kernel, but a layer run written apart (the first, reading values from
  // before the layers) gets its own, name_2.
  const std::string key = text("@");
  std::string name = k.name;
  if (const auto it = kernel_names_.find(key); it != kernel_names_.end()) {
    name = it->second;
  } else {
    for (int v = 2; kernel_taken_.count(name); ++v) name = k.name + "_" + std::to_string(v);
    kernel_taken_.insert(name);
    kernel_names_[key] = name;
  }
  pending_kernels_.emplace_back(name, text(name));
  const std::string n = std::to_string(ir::num_elements(g_[s.node].shape));
  w.line("gpu::launch_independent(" + quoted(name) + ", " + name + ", gpu::Dim3{gpu::elementwise_blocks(" + n +
         ")}, gpu::Dim3{gpu::kElementwiseThreads}, 0,");
  w.line("                        gpu_dev.stream, int64_t{" + n + "}, " + join(args, ", ") + ");");
}

}  // namespace sharc::emit_cpu_detail
