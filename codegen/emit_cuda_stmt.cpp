// The CUDA renderer's own spellings (emit_cpu_impl.h, "the CUDA renderer"):
// a fusion group as a kernel in sharc's dialect (runtime/gpu/dialect.h), and
// a composite region's part as one of sharc's kernels (KernelSet).
// Everything else it prints is the CPU
// renderer's statements with the runtime calls of runtime/gpu/device_ops.h
// (CpuEmitter::call), so the two renderers share one plan and one text.
#include "codegen/emit_cpu_impl.h"
#include "runtime/gpu/kernel_args.h"

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
  if (v.kernel.rfind("gemm", 0) == 0) return emit_gemm(w, s, out("pre_gelu"));
  const ir::Composite& region = g_.composites.at(v.composite);
  if (v.kernel == "adamw") return emit_adamw(w, s);
  if (v.kernel == "global_norm") return emit_global_norm(w, s);
  w.line("// " + loc_prefix(v) + ir::composite_name(region.kind) + (v.backward ? " backward" : " forward") +
         " as one kernel, KernelSet::" + v.kernel + " (" + shape_comment(v) + ")");
  for (const auto& [name, id] : result) w.line(declare(id, /*writes_all=*/true));
  auto launch = [&](const std::vector<std::string>& fields) { emit_launch(w, v.kernel, fields); };
  // A launch's activation type, that of value `id`.
  auto dtype_field = [&](int id) { return ".dtype = " + dtype_literal(g_[id].dtype); };
  // One name for every launch's scratch, each in a block of its own, so
  // that a scanned layer's statements read alike and fold into one loop.
  auto scratch = [&](const std::string& what) {
    if (kernel_scratch_.empty()) kernel_scratch_ = locals_.user("kernel_scratch");
    w.open("");
    w.line(buf_type(ir::DType::kF32) + " " + kernel_scratch_ + "(" +
           std::to_string(kernel_scratch_bytes(g_, v) / sizeof(float)) + ", &mem, rt::uninitialized);  // " + what);
    return kernel_scratch_;
  };
  if (v.kernel == "attention_forward" || v.kernel == "attention_backward") {
    // q, k and v are views into the packed projection [B, T, H, 3D] (each
    // head's q | k | v); y and dy are [B, T, H, D].
    const int qkv_arg = v.kernel == "attention_forward" ? 0 : 1;
    const Shape& p = g_[v.args[qkv_arg]].shape;
    const int64_t d = p[3] / 3;
    auto strides = [&](int64_t last) {
      return "{" + std::to_string(p[1] * p[2] * last) + ", " + std::to_string(p[2] * last) + ", " +
             std::to_string(last) + "}";
    };
    const std::string dtype = dtype_field(v.args[qkv_arg]);
    const std::string packed = strides(3 * d), plain = strides(d);
    auto view = [&](int id, int64_t part) { return ptr(id) + (part == 0 ? "" : " + " + std::to_string(part * d)); };
    const std::string dims[] = {".batch = " + std::to_string(p[0]), ".heads = " + std::to_string(p[2]),
                                ".seq = " + std::to_string(p[1]), ".head_dim = " + std::to_string(d),
                                ".scale = " + float_literal(v.scalar), ".causal = true"};
    if (v.kernel == "attention_forward") {
      launch({dtype, ".q = " + view(v.args[0], 0), ".k = " + view(v.args[0], 1), ".v = " + view(v.args[0], 2),
              ".o = " + ptr(s.node), ".lse = " + out("lse"), ".sq = " + packed, ".sk = " + packed,
              ".sv = " + packed, ".so = " + plain, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]});
      return;
    }
    const std::string delta = scratch("each query row's sum of dy * y");
    launch({dtype, ".q = " + view(v.args[1], 0), ".k = " + view(v.args[1], 1), ".v = " + view(v.args[1], 2),
            ".o = " + ptr(v.args[2]), ".dout = " + ptr(v.args[0]), ".lse = " + ptr(v.args[3]),
            ".delta = " + delta + ".data()", ".dq = " + view(s.node, 0), ".dk = " + view(s.node, 1),
            ".dv = " + view(s.node, 2), ".sq = " + packed, ".sk = " + packed, ".sv = " + packed, ".so = " + plain,
            ".sdo = " + plain, ".sdq = " + packed, ".sdk = " + packed, ".sdv = " + packed, dims[0], dims[1],
            dims[2], dims[3], dims[4], dims[5]});
    w.close(delta + " released");
    return;
  }
  if (v.kernel == "cross_entropy") {
    // Logits [rows, V] and the DSL's float labels; the backward launch (a
    // third operand, each row's loss gradient) writes dlogits, its losses
    // going to the scratch.
    const Shape& l = g_[v.args[0]].shape;
    const int64_t vocab = l.back(), rows = ir::num_elements(l) / vocab;
    const std::string dtype = dtype_field(v.args[0]);
    const std::string shape[] = {".rows = " + std::to_string(rows), ".vocab = " + std::to_string(vocab)};
    if (v.args.size() == 2) {
      launch({dtype, ".loss = " + ptr(s.node), ".logits = " + ptr(v.args[0]), shape[0], shape[1],
              ".float_targets = " + ptr(v.args[1])});
      return;
    }
    const std::string losses = scratch("the losses, computed again");
    launch({dtype, ".loss = " + losses + ".data()", ".dlogits = " + ptr(s.node), ".logits = " + ptr(v.args[0]),
            shape[0], shape[1], ".float_targets = " + ptr(v.args[1]), ".dloss_rows = " + ptr(v.args[2])});
    w.close(losses + " released");
    return;
  }
  if (v.kernel == "embedding_lookup" || v.kernel == "embedding_grad") {
    // The table's rows here are [first, first + vocab) of the whole: the
    // block start along the axes that split the classes (use_gpu_kernels).
    const bool lookup = v.kernel == "embedding_lookup";
    const Shape& table = lookup ? g_[v.args[0]].shape : v.shape;
    ir::Sharding classes;
    classes.dims = {v.axes};
    const std::string b = block_index_expr(classes, 0);
    const std::string first =
        b.empty() ? "0" : (b.find(' ') == std::string::npos ? b : "(" + b + ")") + " * " + std::to_string(table[0]);
    const int ids = v.args[1];
    const std::string id_field = std::string(g_[ids].dtype == ir::DType::kI32 ? ".ids = " : ".float_ids = ") + ptr(ids);
    const std::string sizes[] = {".tokens = " + std::to_string(ir::num_elements(g_[ids].shape)),
                                 ".first = " + first, ".vocab = " + std::to_string(table[0]),
                                 ".cols = " + std::to_string(table[1])};
    if (lookup) {
      launch({dtype_field(s.node), ".out = " + ptr(s.node), ".table = " + ptr(v.args[0]), id_field, sizes[0],
              sizes[1], sizes[2], sizes[3]});
      return;
    }
    const bool prior = v.ints.at(0) != 0;
    if (prior)  // the gradient the table's other uses gave it, added to
      w.line(call("copy") + ptr(v.args[2]) + ", " + ptr(s.node) + ", " + std::to_string(table[0] * table[1]) + ");");
    std::vector<std::string> fields = {dtype_field(v.args[0]), ".dtable = " + ptr(s.node), ".dout = " + ptr(v.args[0]),
                                       id_field, sizes[0], sizes[1], sizes[2], sizes[3]};
    if (v.ints.at(1) != 0) fields.push_back(".round_bf16 = true");
    if (prior) fields.push_back(".accumulate = true");
    launch(fields);
    return;
  }
  const Shape& x = g_[v.kernel == "layernorm_forward" ? v.args[0] : v.args[1]].shape;
  const int64_t cols = x.back(), rows = ir::num_elements(x) / cols;
  const std::string rows_cols[] = {".rows = " + std::to_string(rows), ".cols = " + std::to_string(cols)};
  if (v.kernel == "layernorm_forward") {
    launch({dtype_field(v.args[0]), ".out = " + ptr(s.node), ".mean = " + out("mean"), ".rstd = " + out("rstd"),
            ".x = " + ptr(v.args[0]), ".w = " + ptr(v.args[1]), ".b = " + ptr(v.args[2]), rows_cols[0], rows_cols[1],
            ".eps = " + float_literal(v.scalar)});  // the region's epsilon (use_gpu_kernels)
    return;
  }
  if (v.kernel == "layernorm_backward") {
    const bool prior = v.ints.at(0) != 0;
    const std::string sums = scratch("the parameter gradients' partial sums");
    if (prior)  // dx = the gradient x had from its other readers + the layer norm's
      w.line(call("copy") + ptr(v.args[5]) + ", " + ptr(s.node) + ", " + std::to_string(rows * cols) + ");");
    launch({dtype_field(v.args[1]), ".dx = " + ptr(s.node), ".dw = " + out("dscale"), ".db = " + out("dbias"),
            ".scratch = " + sums + ".data()", ".dout = " + ptr(v.args[0]), ".x = " + ptr(v.args[1]),
            ".w = " + ptr(v.args[2]), ".mean = " + ptr(v.args[3]), ".rstd = " + ptr(v.args[4]), rows_cols[0],
            rows_cols[1], std::string(".accumulate = ") + (prior ? "true" : "false")});
    w.close(sums + " released");
    return;
  }
  internal_error("the CUDA renderer has no launch for kernel " + v.kernel);
}

std::string CpuEmitter::dtype_literal(ir::DType t) {
  return std::string("rt::DType::") + (t == ir::DType::kBF16 ? "kBF16" : t == ir::DType::kI32 ? "kI32" : "kF32");
}

void CpuEmitter::emit_launch(CodeWriter& w, const std::string& kernel, const std::vector<std::string>& fields) {
  std::string line = "gpu_dev.kernels->" + kernel + "({";
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
}

void CpuEmitter::emit_gemm(CodeWriter& w, const Stmt& s, const std::string& pre_gelu) {
  const Node& v = g_[s.node];
  const int a = v.args[0], b = v.args[1];
  const LocalDotLayout l = local_dot_layout(v.dot, g_[a].shape, g_[b].shape);
  const bool bias = v.kernel.find("_bias") != std::string::npos;
  const bool backward = v.kernel == "gemm_dgelu", gelu = !backward && v.kernel.find("_gelu") != std::string::npos;
  std::string what = backward ? " multiplied by gelu'(" + var_[v.args[2]] + ")" : "";
  if (bias) what = gelu ? ", the bias added, then gelu" : " with the bias added";
  else if (gelu) what = " then gelu";
  if (gelu && pre_gelu != "nullptr") what += " (its argument kept for the backward)";
  w.line("// " + loc_prefix(v) + "dot " + ir::dot_dims_str(v.dot) + what +
         " as one cuBLASLt GEMM and its epilogue, KernelSet::gemm (" + std::to_string(l.M) + "x" +
         std::to_string(l.K) + " . " + std::to_string(l.K) + "x" + std::to_string(l.N) + ")");
  w.line(declare(s.node, /*writes_all=*/true));
  for (int o : s.stores) w.line(declare(o, /*writes_all=*/true));
  const std::string epilogue = backward ? "kGeluBackward" : gelu ? "kGelu" : "kNone";
  std::vector<std::string> fields;
  if (l.trans_lhs) fields.push_back(".trans_a = true");
  if (l.trans_rhs) fields.push_back(".trans_b = true");
  for (const std::string& f :
       {".m = " + std::to_string(l.M), ".n = " + std::to_string(l.N), ".k = " + std::to_string(l.K),
        ".ab_dtype = " + dtype_literal(g_[a].dtype), ".a = " + ptr(a),
        ".lda = " + std::to_string(l.trans_lhs ? l.M : l.K), ".b = " + ptr(b),
        ".ldb = " + std::to_string(l.trans_rhs ? l.K : l.N), ".c_dtype = " + dtype_literal(v.dtype),
        ".c = " + ptr(s.node), ".ldc = " + std::to_string(l.N)})
    fields.push_back(f);
  if (bias) fields.push_back(".bias = " + ptr(v.args[2]));
  if (epilogue != "kNone") fields.push_back(".epilogue = gpu::Gemm::Epilogue::" + epilogue);
  if (backward) fields.push_back(".pre_gelu = " + ptr(v.args[2]));
  else if (pre_gelu != "nullptr") fields.push_back(".pre_gelu = " + pre_gelu);
  emit_launch(w, "gemm", fields);
}

void CpuEmitter::emit_tensor_table(CodeWriter& w, const Node& v, const std::string& type,
                                   const std::vector<std::string>& rows, const std::vector<std::string>& sizes,
                                   const std::string& what) {
  w.line("const " + type + " tensors[] = {");
  for (const std::string& r : rows) w.line("    " + r);
  w.line("};");
  w.line("const std::vector<gpu::TensorChunk> chunks = gpu::tensor_chunks({" + join(sizes, ", ") + "});  // " +
         std::to_string(multi_tensor_chunks(g_, v)) + " blocks");
  if (kernel_scratch_.empty()) kernel_scratch_ = locals_.user("kernel_scratch");
  w.line("rt::BufferI32 " + kernel_scratch_ + "(" + std::to_string(kernel_scratch_bytes(g_, v) / 4) +
         ", &mem, rt::uninitialized);  // " + what + ", on the device");
  w.line("auto* device_tensors = reinterpret_cast<" + type + "*>(" + kernel_scratch_ + ".data());");
  w.line("auto* device_chunks = reinterpret_cast<gpu::TensorChunk*>(device_tensors + " + std::to_string(rows.size()) +
         ");");
  w.line("gpu_dev.kernels->upload(device_tensors, tensors, sizeof tensors);");
  w.line("gpu_dev.kernels->upload(device_chunks, chunks.data(), chunks.size() * sizeof(gpu::TensorChunk));");
}

void CpuEmitter::emit_adamw(CodeWriter& w, const Stmt& s) {
  const Node& v = g_[s.node];
  const ir::Composite& region = g_.composites.at(v.composite);
  const int tensors = v.ints.at(0);
  // Per tensor: its new param, m and v (the kernel node is tensor 0's param).
  std::vector<std::array<int, 3>> made(tensors, {-1, -1, -1});
  made[0][0] = s.node;
  for (int o : s.stores) {
    const std::string role = g_[o].kernel.substr(v.kernel.size() + 1);
    made[g_[o].ints.at(0)][role == "param" ? 0 : role == "m" ? 1 : 2] = o;
  }
  w.line("// " + loc_prefix(v) + "the Adam" + (region.weight_decay != 0 ? "W" : "") + " updates of " +
         std::to_string(tensors) + (tensors == 1 ? " parameter" : " parameters") +
         " as one multi-tensor kernel, KernelSet::adamw");
  w.open("");
  std::vector<std::string> rows, sizes;
  const int64_t chunks = multi_tensor_chunks(g_, v);
  for (int t = 0; t < tensors; ++t) {
    const int* old = &v.args[2 + 4 * t];  // w, g, m, v
    const int64_t n = ir::num_elements(g_[old[0]].shape);
    sizes.push_back(std::to_string(n));
    for (int k = 0; k < 3; ++k) {
      const int was = old[k == 0 ? 0 : k + 1], now = made[t][k];
      w.line(declare(now, /*writes_all=*/true));
      if (plan_.in_place_of[now] != was)  // the kernel updates in place: a copy of the old value first
        w.line(call("copy") + ptr(was) + ", " + ptr(now) + ", " + std::to_string(n) + ");");
    }
    rows.push_back("{" + ptr(made[t][0]) + ", " + ptr(old[1]) + ", " + ptr(made[t][1]) + ", " + ptr(made[t][2]) +
                   ", nullptr, " + std::to_string(n) + ", " + float_literal(region.weight_decay) + "},  // \"" +
                   g_[old[0]].name + "\"");
  }
  emit_tensor_table(w, v, "gpu::AdamWTensor", rows, sizes, "the tensors and chunks");
  w.line("gpu_dev.kernels->adamw(device_tensors, device_chunks, " + std::to_string(chunks) + ", {.b1 = " +
         float_literal(region.b1) + ", .b2 = " + float_literal(region.b2) + ", .eps = " +
         float_literal(region.eps) + ",");
  w.line("                       .lr = " + ptr(v.args[0]) + ", .count = " + ptr(v.args[1]) + "});");
  w.close(kernel_scratch_ + " released");
}

void CpuEmitter::emit_global_norm(CodeWriter& w, const Stmt& s) {
  const Node& v = g_[s.node];
  const int tensors = v.ints.at(0);
  const int factor = s.stores.empty() ? -1 : s.stores[0];
  w.line("// " + loc_prefix(v) + "the global norm of " + std::to_string(tensors) + " gradients" +
         (factor >= 0 ? " and the clip factor" : "") + " as one kernel, KernelSet::global_norm");
  w.line(declare(s.node, /*writes_all=*/true));
  if (factor >= 0) w.line(declare(factor, /*writes_all=*/true));
  w.open("");
  std::vector<std::string> rows, sizes;
  for (int t = 0; t < tensors; ++t) {
    const int x = v.args[static_cast<size_t>(t)];
    const std::string n = std::to_string(ir::num_elements(g_[x].shape));
    sizes.push_back(n);
    rows.push_back("{" + ptr(x) + ", " + n + "},");
  }
  const int64_t chunks = multi_tensor_chunks(g_, v);
  emit_tensor_table(w, v, "gpu::NormTensor", rows, sizes, "the tensors, chunks and partial sums");
  w.line("gpu_dev.kernels->global_norm({.tensors = device_tensors, .chunks = device_chunks, .num_chunks = " +
         std::to_string(chunks) + ",");
  w.line("                             .partial = reinterpret_cast<float*>(device_chunks + " +
         std::to_string(chunks) + "), .norm = " + ptr(s.node) + ",");
  w.line("                             .clip_factor = " + (factor >= 0 ? ptr(factor) : std::string("nullptr")) +
         ", .max_norm = " + float_literal(v.scalar > 0 ? v.scalar : 1.0) + "});");
  w.close(kernel_scratch_ + " released");
}

}  // namespace sharc::emit_cpu_detail
