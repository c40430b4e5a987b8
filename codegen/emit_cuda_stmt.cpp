// The CUDA renderer's own spellings (emit_cpu_impl.h, "the CUDA renderer"):
// a fusion group as a kernel in sharc's dialect (runtime/gpu/dialect.h), and
// a composite region's part as one of sharc's kernels (KernelSet).
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

void CpuEmitter::emit_kernel(CodeWriter& w, const Stmt& s) {
  const Node& v = g_[s.node];
  if (!cuda()) internal_error("kernel " + v.kernel + " in a CPU program: use_gpu_kernels runs for GPU programs only");
  // The results by name: the node itself, then its KernelOutputs.
  std::map<std::string, int> result = {{"", s.node}};
  for (int o : s.stores) result[g_[o].kernel.substr(v.kernel.size() + 1)] = o;
  auto out = [&](const std::string& name) {
    const auto it = result.find(name);
    return it == result.end() ? std::string("nullptr") : ptr(it->second);
  };
  const ir::Composite& region = g_.composites.at(v.composite);
  w.line("// " + loc_prefix(v) + ir::composite_name(region.kind) + (v.backward ? " backward" : " forward") +
         " as one kernel, KernelSet::" + v.kernel + " (" + shape_comment(v) + ")");
  for (const auto& [name, id] : result) w.line(declare(id, /*writes_all=*/true));
  const Shape& x = g_[v.kernel == "layernorm_forward" ? v.args[0] : v.args[1]].shape;
  const int64_t cols = x.back(), rows = ir::num_elements(x) / cols;
  // KernelSet::NAME({.field = value, ...}): the fields packed into lines.
  auto launch = [&](const std::vector<std::string>& fields) {
    std::string line = "gpu_dev.kernels->" + v.kernel + "({";
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string f = fields[i] + (i + 1 < fields.size() ? "," : "});");
      if (line.size() + 1 + f.size() > 100 && line.back() != '{') {
        w.line(line);
        line = "    " + f;
      } else {
        line += (line.back() == '{' ? "" : " ") + f;
      }
    }
    w.line(line);
  };
  const std::string rows_cols[] = {".rows = " + std::to_string(rows), ".cols = " + std::to_string(cols)};
  if (v.kernel == "layernorm_forward") {
    launch({".dtype = rt::DType::kF32", ".out = " + ptr(s.node), ".mean = " + out("mean"), ".rstd = " + out("rstd"),
            ".x = " + ptr(v.args[0]), ".w = " + ptr(v.args[1]), ".b = " + ptr(v.args[2]), rows_cols[0], rows_cols[1],
            ".eps = " + float_literal(region.eps)});
    return;
  }
  if (v.kernel == "layernorm_backward") {
    const bool prior = v.ints.at(0) != 0;
    // One name for every launch's scratch, each in a block of its own, so
    // that a scanned layer's statements read alike and fold into one loop.
    if (kernel_scratch_.empty()) kernel_scratch_ = locals_.user("kernel_scratch");
    const std::string& scratch = kernel_scratch_;
    w.open("");
    w.line(buf_type(ir::DType::kF32) + " " + scratch + "(" +
           std::to_string(kernel_scratch_bytes(g_, v) / sizeof(float)) +
           ", &mem, rt::uninitialized);  // the parameter gradients' partial sums");
    if (prior)  // dx = the gradient x had from its other readers + the layer norm's
      w.line(call("copy") + ptr(v.args[5]) + ", " + ptr(s.node) + ", " + std::to_string(rows * cols) + ");");
    launch({".dtype = rt::DType::kF32", ".dx = " + ptr(s.node), ".dw = " + out("dscale"), ".db = " + out("dbias"),
            ".scratch = " + scratch + ".data()", ".dout = " + ptr(v.args[0]), ".x = " + ptr(v.args[1]),
            ".w = " + ptr(v.args[2]), ".mean = " + ptr(v.args[3]), ".rstd = " + ptr(v.args[4]), rows_cols[0],
            rows_cols[1], std::string(".accumulate = ") + (prior ? "true" : "false")});
    w.close(scratch + " released");
    return;
  }
  internal_error("the CUDA renderer has no launch for kernel " + v.kernel);
}

}  // namespace sharc::emit_cpu_detail
