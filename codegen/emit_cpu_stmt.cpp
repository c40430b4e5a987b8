// The CPU renderer: each statement of the step as C++ for a device thread
// (emit_cpu_impl.h says what is where). Every statement it prints for a
// node mirrors the corresponding case of execute_partitioned()
// (codegen/execute.cpp).
#include "codegen/emit_cpu_impl.h"

namespace sharc::emit_cpu_detail {

Node CpuEmitter::anchor(const Stmt& s) const {
  Node a = g_[s.node];
  if (a.loc.known()) return a;
  for (int t : s.tree)
    if (g_[t].loc.known()) {
      a.loc = g_[t].loc;
      a.name = g_[t].name;
      break;
    }
  return a;
}

std::pair<std::string, std::string> CpuEmitter::section(const Node& v) const {
  if (v.op == Op::kInput) return {"\x01inputs", "inputs"};
  const std::string where = v.loc.known() ? v.loc.str() : "";
  if (!v.name.empty()) return {v.name, where.empty() ? v.name : v.name + " (" + where + ")"};
  return {where, std::string(ir::op_name(v.op)) + (where.empty() ? "" : " (" + where + ")")};
}

std::string CpuEmitter::rule(const std::string& title) {
  const int width = 69 - static_cast<int>(title.size());  // 80 columns at indent 1
  return "// ---- " + title + " " + std::string(std::max(4, width), '-');
}

std::string CpuEmitter::buf_type(ir::DType t) {
  return t == ir::DType::kF32 ? "rt::Buffer" : t == ir::DType::kBF16 ? "rt::BufferBF16" : "rt::BufferI32";
}

std::string CpuEmitter::elem_type(ir::DType t) {
  return t == ir::DType::kF32 ? "float" : t == ir::DType::kBF16 ? "rt::bf16" : "int32_t";
}

std::string CpuEmitter::stored(ir::DType t, const std::string& e) {
  if (t == ir::DType::kBF16) return "rt::bf16(" + e + ")";
  if (t == ir::DType::kI32) return "static_cast<int32_t>(" + e + ")";
  return e;
}

std::string CpuEmitter::declare(int v, bool writes_all) {
  declared_.push_back(v);
  if (const int param = plan_.in_place_of[v]; param >= 0)
    return "// " + var_[v] + " is dev." + var_[param] + " (a reference member): " + shape_comment(g_[v]) +
           ", the new \"" + g_[param].name + "\" computed in place";
  std::string how;
  // CUDA: zeros on the device's stream (gpu::zeroed), not the host's.
  const bool zero_on_stream = cuda() && !writes_all;
  if (writes_all || zero_on_stream) how += ", rt::uninitialized";
  if (plan_.is_update_value[v]) how += ", rt::persistent";
  const std::string buffer =
      buf_type(g_[v].dtype) + "(" + std::to_string(ir::num_elements(g_[v].shape)) + ", &mem" + how + ")";
  return var_[v] + " = " + (zero_on_stream ? "gpu::zeroed(gpu_dev, " + buffer + ")" : buffer) + ";  // " +
         shape_comment(g_[v]);
}

std::string CpuEmitter::unary_expr(Op op, const std::string& x) {
  switch (op) {
    case Op::kNeg:
      return "-" + x;
    case Op::kRelu:
      return "rt::relu(" + x + ")";
    case Op::kGelu:
      return "rt::gelu(" + x + ")";
    case Op::kTanh:
      return "rt::tanh(" + x + ")";
    case Op::kExp:
      return "rt::exp(" + x + ")";
    case Op::kLog:
      return "std::log(" + x + ")";
    case Op::kSqrt:
      return "std::sqrt(" + x + ")";
    case Op::kSin:
      return "std::sin(" + x + ")";
    case Op::kCos:
      return "std::cos(" + x + ")";
    case Op::kAbs:
      return "std::abs(" + x + ")";
    case Op::kSigmoid:
      return "rt::sigmoid(" + x + ")";
    case Op::kErf:
      return "std::erf(" + x + ")";
    case Op::kLog1p:
      return "std::log1p(" + x + ")";
    case Op::kExpm1:
      return "std::expm1(" + x + ")";
    case Op::kConvert:
      return x;  // the store (or the scalar's rounding) gives the node's type
    default:
      internal_error(std::string("not a unary op: ") + ir::op_name(op));
  }
}

std::string CpuEmitter::binary_expr(Op op, const std::string& a, const std::string& b) {
  switch (op) {
    case Op::kAdd:
      return a + " + " + b;
    case Op::kSub:
      return a + " - " + b;
    case Op::kMul:
      return a + " * " + b;
    case Op::kDiv:
      return a + " / " + b;
    case Op::kPow:
      return "std::pow(" + a + ", " + b + ")";
    case Op::kMax:
      return "std::max(" + a + ", " + b + ")";
    case Op::kMin:
      return "std::min(" + a + ", " + b + ")";
    case Op::kGreater:
      return "(" + a + " > " + b + " ? 1.0f : 0.0f)";
    case Op::kEqual:
      return "(" + a + " == " + b + " ? 1.0f : 0.0f)";
    default:
      internal_error(std::string("not a binary op: ") + ir::op_name(op));
  }
}

void CpuEmitter::emit_fused(CodeWriter& w, const Stmt& s) {
  const Node& root = g_[s.node];
  std::vector<std::string> ops;
  for (int t : s.tree) ops.push_back(ir::op_name(g_[t].op));
  std::string what = (s.tree.size() > 1 ? "fused " : "") + join(ops, ", ");
  if (!s.stores.empty()) {
    std::vector<std::string> kept;
    for (int t : s.stores) kept.push_back(var_[t]);
    what += "; also keeps " + join(kept, ", ");
  }
  w.line(describe(anchor(s), s.reads, what));
  w.line(declare(s.node, /*writes_all=*/true));
  for (int t : s.stores) w.line(declare(t, /*writes_all=*/true));
  // CUDA: the loop is the body of a kernel, written to kw, whose parameters
  // elem_at() names; the statement launches it.
  std::optional<FusedKernel> kernel;
  CodeWriter kw(1);
  if (cuda()) {
    kernel = fused_kernel(s);
    in_kernel_ = &*kernel;
  }
  CodeWriter& lw = cuda() ? kw : w;
  std::map<int, std::string> scalar;
  auto operand = [&](int a) {
    if (scalar.count(a)) return scalar[a];
    const Node& x = g_[a];
    // A bf16 constant holds its value rounded to bf16.
    if (x.op == Op::kConstant)
      return float_literal(x.dtype == ir::DType::kBF16
                               ? rt::round_to_bf16(static_cast<float>(x.scalar))
                               : x.scalar);
    return x.dtype == ir::DType::kBF16 ? "static_cast<float>(" + elem(a) + ")" : elem(a);
  };
  // Broadcasts inlined into the loop (BufferPlan): a one-element operand
  // is read once before the loop; any other is read at the element of the
  // operand that output element i repeats.
  int hoisted = 0;
  std::vector<std::string> before;
  for (int t : s.tree) {
    const Node& v = g_[t];
    if (v.op != Op::kBroadcast) continue;
    const int a = v.args[0];
    const Node& x = g_[a];
    if (x.op == Op::kConstant) {
      scalar[t] = operand(a);
    } else if (ir::num_elements(x.shape) == 1) {
      const std::string name = var_[s.node] + "_b" + std::to_string(hoisted++);
      const std::string e = elem0(a);
      before.push_back("const float " + name + " = " +
                       (x.dtype == ir::DType::kBF16 ? "static_cast<float>(" + e + ")" : e) +
                       ";  // broadcast" + (v.loc.known() ? " at " + v.loc.str() : ""));
      scalar[t] = name;
    }
  }
  // A broadcast read in the loop: per operand dimension (not of size 1)
  // the output dimension it runs along; runs of operand dimensions that
  // follow consecutive output dimensions read as one index term
  // ((i / inner) % extent) * scale.
  struct Term {
    int64_t inner, extent, scale;
    bool wraps;  // the run does not start at output dimension 0
  };
  auto broadcast_terms = [&](const Node& v) {
    const Node& x = g_[v.args[0]];
    const std::vector<int64_t> ostride = strides_of(v.shape), istride = strides_of(x.shape);
    std::vector<Term> terms;
    for (size_t d = 0; d < x.shape.size();) {
      if (x.shape[d] == 1) {
        ++d;
        continue;
      }
      // Extend the run over operand dims that follow consecutive output
      // dims, stepping over size-1 dims on both sides: they index nothing
      // ([16,1,64,1] over [16,1,64,64] is one run of 1024 rows).
      size_t last = d;
      for (size_t e = d + 1; e < x.shape.size(); ++e) {
        if (x.shape[e] == 1) continue;
        bool gap_is_ones = v.ints[e] > v.ints[last];
        for (int o = v.ints[last] + 1; o < v.ints[e] && gap_is_ones; ++o)
          gap_is_ones = v.shape[o] == 1;
        if (!gap_is_ones) break;
        last = e;
      }
      // Operand dims [d, last] (size-1 ones aside) follow output dims
      // ints[d] .. ints[last].
      int64_t extent = 1;
      for (size_t k = d; k <= last; ++k) extent *= x.shape[k];
      bool wraps = false;  // an output dim of more than one element comes first
      for (int o = 0; o < v.ints[d]; ++o) wraps = wraps || v.shape[o] > 1;
      terms.push_back({ostride[v.ints[last]], extent, istride[last], wraps});
      d = last + 1;
    }
    return terms;
  };
  // The loop runs as `o` blocks of `split` elements when every broadcast it
  // reads either repeats a row of `split` (bias[i % split] -> bias[j]) or
  // holds one value per block (mean[i / split] -> mean[o]): then the inner
  // loop reads only unit-stride or invariant operands and vectorises.
  int64_t split = 0;
  bool splittable = true;
  for (int t : s.tree) {
    const Node& v = g_[t];
    if (v.op != Op::kBroadcast || scalar.count(t)) continue;
    const std::vector<Term> terms = broadcast_terms(v);
    int64_t n = 0;
    if (terms.size() == 1 && terms[0].scale == 1 && terms[0].inner == 1 && terms[0].wraps)
      n = terms[0].extent;  // a row repeated
    else if (terms.size() == 1 && terms[0].scale == 1 && terms[0].inner > 1 && !terms[0].wraps)
      n = terms[0].inner;  // one value per block
    if (n <= 1 || (split != 0 && n != split)) splittable = false;
    split = n;
  }
  if (s.tree.size() == 1 || split == 0 || ir::num_elements(root.shape) % split != 0 || cuda())
    splittable = false;
  auto broadcast_read = [&](const Node& v) {
    const Node& x = g_[v.args[0]];
    const std::vector<Term> terms = broadcast_terms(v);
    std::vector<std::string> parts;
    for (const Term& t : terms) {
      std::string idx;
      if (splittable) {
        idx = t.wraps ? "j" : "o";
      } else {
        idx = t.inner == 1 ? "i" : "i / " + std::to_string(t.inner);
        if (t.wraps) idx = "(" + idx + ") % " + std::to_string(t.extent);
      }
      parts.push_back(t.scale == 1 ? idx : "(" + idx + ") * " + std::to_string(t.scale));
    }
    const std::string e = elem_at(v.args[0], parts.empty() ? "0" : join(parts, " + "));
    return x.dtype == ir::DType::kBF16 ? "static_cast<float>(" + e + ")" : e;
  };
  // An iota inlined into the loop (its dimension unsplit, BufferPlan): the
  // index of element i along that dimension.
  auto iota_read = [&](const Node& v) {
    const int d = v.ints[0];
    int64_t inner = 1;
    for (size_t k = d + 1; k < v.shape.size(); ++k) inner *= v.shape[k];
    std::string index = inner == 1 ? "i" : "i / " + std::to_string(inner);
    if (ir::num_elements(v.shape) / inner != v.shape[d])
      index = (inner == 1 ? index : "(" + index + ")") + " % " + std::to_string(v.shape[d]);
    return "static_cast<float>(" + index + ")";
  };
  auto expr = [&](int t) {
    const Node& v = g_[t];
    if (v.op == Op::kBroadcast) return broadcast_read(v);
    if (v.op == Op::kIota) return iota_read(v);
    if (ir::is_ternary(v.op))
      return "rt::select(" + operand(v.args[0]) + ", " + operand(v.args[1]) + ", " +
             operand(v.args[2]) + ")";
    return ir::is_unary(v.op) ? unary_expr(v.op, operand(v.args[0]))
                              : binary_expr(v.op, operand(v.args[0]), operand(v.args[1]));
  };
  const int64_t count = ir::num_elements(root.shape);
  // A loop of rt::kParallelMin elements or more runs over the device's
  // team (rt::parallel_for, runtime/team.h): the loop becomes a lambda
  // over [lo, hi) of its outer index.
  const bool parallel = count >= rt::kParallelMin && !cuda();
  const int64_t outer = splittable ? count / split : count;
  const std::string lo = parallel ? "lo" : "0", hi = parallel ? "hi" : std::to_string(outer);
  const std::string head = cuda() ? "for (int64_t i = gpu::element_index(); i < n; i += gpu::element_stride())"
                                  : "for (int64_t i = " + lo + "; i < " + hi + "; ++i)";
  for (const std::string& line : before) lw.line(line);
  if (parallel)
    w.open("rt::parallel_for(" + std::to_string(outer) + ", /*grain=*/" + (splittable ? "1" : "64") +
           ", [&](int64_t lo, int64_t hi)");
  if (s.tree.size() == 1) {
    lw.line(head + " " + elem_at(s.node, "i") + " = " + stored(root.dtype, expr(s.node)) + ";");
    if (parallel) (--w).line("});");
    if (cuda()) finish_fused_kernel(w, s, *kernel, kw.str());
    return;
  }
  // The vectorised loop says its buffers do not overlap (runtime/elementwise.h).
  const bool independent = count > 1 && !cuda();
  if (splittable) {
    const std::string sp = std::to_string(split);
    w.open("for (int64_t o = " + lo + "; o < " + hi + "; ++o)");
    if (independent) w.line("SHARC_INDEPENDENT_ITERATIONS");
    w.open("for (int64_t j = 0; j < " + sp + "; ++j)");
    w.line("const int64_t i = o * " + sp + " + j;");
  } else {
    if (independent) w.line("SHARC_INDEPENDENT_ITERATIONS");
    lw.open(head);
  }
  int k = 0;
  for (int t : s.tree) {
    const Node& v = g_[t];
    if (scalar.count(t)) continue;  // a hoisted broadcast
    const std::string where = v.loc.known() ? "  // " + v.loc.str() + " " + ir::op_name(v.op)
                                            : "  // " + std::string(ir::op_name(v.op));
    if (t == s.node) {
      lw.line(elem_at(s.node, "i") + " = " + stored(root.dtype, expr(t)) + ";" + where);
    } else {
      // A bf16 op's result is rounded where it is made, as if stored.
      const std::string name = "v" + std::to_string(k++);
      // An i32 op's result is truncated to an integer: what a store does.
      const std::string e =
          v.dtype == ir::DType::kBF16 ? "rt::round_to_bf16(" + expr(t) + ")"
          : v.dtype == ir::DType::kI32 ? "static_cast<float>(static_cast<int32_t>(" + expr(t) + "))"
                                       : expr(t);
      lw.line("const float " + name + " = " + e + ";" + where);
      scalar[t] = name;
      // A kept value is also stored, for the readers after this loop.
      if (plan_.kept[t])
        lw.line(elem_at(t, "i") + " = " + stored(v.dtype, name) + ";");
    }
  }
  if (splittable) w.close("");
  lw.close("fused loop of " + var_[s.node]);
  if (parallel) (--w).line("});");
  if (cuda()) finish_fused_kernel(w, s, *kernel, kw.str());
}

void CpuEmitter::emit_dot(CodeWriter& w, const Stmt& s) {
  const Node& v = g_[s.node];
  const int l = v.args[0], r = v.args[1];
  w.line(describe(v, s.reads, "dot " + ir::dot_dims_str(v.dot)));
  w.line(declare(s.node, /*writes_all=*/true));
  emit_local_dot(w, v.dot, g_[l].shape, ptr(l), g_[r].shape, ptr(r), ptr(s.node), var_[s.node],
                 v.dtype);
}

void CpuEmitter::emit_ring_dot(CodeWriter& w, const Stmt& s) {
  const Node& v = g_[s.node];
  const int id = s.node;
  const RingPlan plan = ring_plan(v, g_[v.args[0]].shape, g_[v.args[1]].shape,
                                  static_cast<int>(mesh_.size(v.axes)));
  const int H = plan.halves;
  const std::string n = std::to_string(plan.n);
  const std::string axis = v.axes[0];
  const std::string label = quoted(statement_label(v));
  const RingStepCost cost = ring_step_cost(g_, v, plan.n);
  const char* role[2] = {"lhs", "rhs"};
  std::string what = "ring_dot " + ir::dot_dims_str(v.dot) + " ";
  what += plan.gather ? std::string("gather=") + role[plan.moving] : std::string("scatter");
  what += " dim=" + std::to_string(v.dim) + " over (" + axis + "), " +
          ir::ring_direction_name(v.ring.direction);
  w.line(describe(v, s.reads, what));
  w.line(declare(id, /*writes_all=*/cuda()));  // the steps write every block (the CPU's zeros are cheap)
  w.open("");
  const std::string grp = group(v);
  const std::string p = locals_.user("p"), k = locals_.user("k");
  const std::string piece = std::to_string(plan.step_result_count());
  const std::string operand[2] = {ptr(v.args[0]), ptr(v.args[1])};
  if (plan.gather) {
    w.line("// " + std::string(role[plan.moving]) + " is gathered along dim " +
           std::to_string(v.dim) + " over \"" + axis +
           "\" by passing its blocks around the ring of " + n + ":");
    w.line("// at step k this device multiplies the block it holds while the block travels on.");
  } else {
    w.line("// The result is reduce-scattered along dim " + std::to_string(v.dim) + " over \"" +
           axis + "\" around the ring of " + n + ": at step k this");
    w.line("// device adds its partial of a block to the sum arriving for it, and passes it on.");
  }
  w.line("const int " + p + " = " + grp + ".position;  // this device's place in the ring");
  // CUDA: the transfers run on the device's comm stream, beside the GEMMs on
  // its compute stream, with the plan's waits between the two
  // (emission_plan.h): each transfer waits for the compute stream's work so
  // far, each GEMM or add after a transfer landed for the comm stream's.
  // Every ring buffer is written whole before it is read: on a GPU it gets
  // no zeros (the CPU's are the host's, and cheap).
  const std::string ring_fill = cuda() ? ", rt::uninitialized" : "";
  std::string gpu_comm;
  if (cuda()) {
    gpu_comm = locals_.user("gpu_comm");
    w.line("const gpu::DeviceContext " + gpu_comm + " = gpu::on_comm_stream(gpu_dev);  // the transfers' stream");
  }
  auto ring_call = [&](const std::string& fn) {
    return cuda() ? "gpu::" + fn + "(" + gpu_comm + ", comm, " : comm_call(fn);
  };
  std::string perm[2];
  perm[0] = locals_.user("to_right");
  w.line("const rt::Permutation " + perm[0] + " = rt::ring_shift(" + n + ", +1);  // send to " +
         p + " + 1, receive from " + p + " - 1");
  if (H == 2) {
    perm[1] = locals_.user("to_left");
    w.line("const rt::Permutation " + perm[1] + " = rt::ring_shift(" + n + ", -1);  // send to " +
           p + " - 1, receive from " + p + " + 1");
  }
  // The sliced operand's piece for piece index `i`: a pointer, or a copy.
  std::string slice_buf;
  if (plan.sliced >= 0 && !plan.slice_contiguous) {
    slice_buf = locals_.user(std::string(role[plan.sliced]) + "_piece");
    w.line(buf_type(v.dtype) + " " + slice_buf + "(" +
           std::to_string(plan.step_operand_count(plan.sliced)) + ", &mem" + ring_fill + ");  // " +
           ir::shape_str(plan.step_operand[plan.sliced], v.dtype) + ": a piece of " + role[plan.sliced]);
  }
  auto sliced_piece = [&](const std::string& i) {
    const std::string x = operand[plan.sliced];
    if (plan.slice_contiguous)
      return x + " + " + (H == 1 ? i : "(" + i + ")") + " * " +
             std::to_string(plan.step_operand_count(plan.sliced));
    w.line(call("slice_block") + x + ", " + braced(plan.operand[plan.sliced]) + ", /*dim=*/" +
           std::to_string(plan.slice_dim) + ", " + std::to_string(plan.pieces()) + ", " + i +
           ", " + slice_buf + ".data());");
    return slice_buf + ".data()";
  };
  std::string piece_buf;
  if (plan.gather && !plan.out_contiguous) {
    piece_buf = locals_.user("result_piece");
    w.line(buf_type(v.dtype) + " " + piece_buf + "(" + piece + ", &mem" + ring_fill + ");  // " +
           ir::shape_str(plan.step_result, v.dtype) + ": one step's piece of the result");
  }
  // "b0" at half 0, "b1 * 2 + 1" at half 1: the piece index of block b.
  auto piece_index = [&](const std::string& b, int h) {
    return H == 1 ? b : b + " * 2" + (h ? " + 1" : "");
  };
  // Names of the halves' variables: cur0, cur1; just cur one way.
  auto suffix = [&](int h) { return H == 2 ? std::to_string(h) : std::string(); };
  const char* way[2] = {"right", "left"};
  std::vector<std::string> blk(H), recv(H);
  for (int h = 0; h < H; ++h) recv[h] = locals_.user("recv" + suffix(h));

  if (plan.gather) {
    const int m = plan.moving;
    const std::string count = std::to_string(plan.step_operand_count(m));
    std::vector<std::string> cur(H), next(H);
    for (int h = 0; h < H; ++h) {
      cur[h] = locals_.user("cur" + suffix(h));
      next[h] = locals_.user("next" + suffix(h));
      w.line(buf_type(v.dtype) + " " + cur[h] + "(" + count + ", &mem" + ring_fill + "), " + next[h] + "(" +
             count + ", &mem" + ring_fill + ");  // " + ir::shape_str(plan.step_operand[m], v.dtype) + ": the " + role[m] +
             " piece held / arriving" +
             (H == 2 ? std::string(", half ") + std::to_string(h) + " (travels " + way[h] + ")"
                     : ""));
      if (H == 1)
        w.line(call("copy") + operand[m] + ", " + cur[h] + ".data(), " + count +
               ");  // this device's block");
      else
        w.line(call("slice_block") + operand[m] + ", " + braced(plan.operand[m]) + ", /*dim=*/" +
               std::to_string(plan.move_dim) + ", 2, " + std::to_string(h) + ", " + cur[h] +
               ".data());  // half " + std::to_string(h) + " of this device's block");
    }
    w.open("for (int " + k + " = 0; " + k + " < " + n + "; ++" + k + ")");
    for (int h = 0; h < H; ++h) {
      blk[h] = locals_.user("b" + suffix(h));
      const std::string expr = h == 0 ? "(" + p + " - " + k + " + " + n + ") % " + n
                                      : "(" + p + " + " + k + ") % " + n;
      w.line("const int " + blk[h] + " = " + expr + ";  // block held" +
             (H == 2 ? " by half " + std::to_string(h) : "") + ": device " + blk[h] +
             "'s, passed along from the " + way[1 - h]);
    }
    w.line((cuda() ? "gpu::PendingTransfer " : "rt::PendingRecv ") + join(recv, ", ") + ";");
    w.open("if (" + k + " + 1 < " + n + ")");
    w.line("// the last step sends nothing: n - 1 transfers, the all_gather's bytes");
    if (cuda())
      w.line("gpu::stream_wait(" + gpu_comm + ", gpu_dev);  // it receives into the block the last step's GEMM read");
    for (int h = 0; h < H; ++h)
      w.line(recv[h] + " = " + ring_call("ppermute_start") + cur[h] + ".data(), " + next[h] + ".data(), " +
             count + ", " + grp + ", " + perm[h] + ");  // block " + blk[h] + " on to the " +
             way[h]);
    w.close();
    w.line("timeline.op(" + label + ", " + cost_literal(cost.gemm) + ");");
    record_mark(EmittedMark::Kind::kRingGemm, id, cost.gemm);
    for (int h = 0; h < H; ++h) {
      const std::string i = piece_index(blk[h], h);
      std::string step[2];
      step[m] = cur[h] + ".data()";
      step[1 - m] = plan.sliced >= 0 ? sliced_piece(i) : operand[1 - m];
      const std::string dst = plan.out_contiguous
                                  ? ptr(id) + " + " + (H == 1 ? i : "(" + i + ")") + " * " + piece
                                  : piece_buf + ".data()";
      emit_local_dot(w, v.dot, plan.step_operand[0], step[0], plan.step_operand[1], step[1], dst,
                     var_[id], v.dtype);
      if (!plan.out_contiguous)
        w.line(call("place_block") + piece_buf + ".data(), " + braced(plan.result) + ", /*dim=*/" +
               std::to_string(plan.out_dim) + ", " + std::to_string(plan.out_parts) + ", " + i +
               ", " + ptr(id) + ");");
    }
    w.open("if (" + k + " + 1 < " + n + ")");
    for (int h = 0; h < H; ++h) {
      w.line(ring_call("ppermute_wait") + recv[h] + ");");
      w.line("std::swap(" + cur[h] + ", " + next[h] + ");");
    }
    if (cuda()) w.line("gpu::stream_wait(gpu_dev, " + gpu_comm + ");  // the next GEMM reads the block that arrived");
    w.close();
    w.close("ring step");
    w.close("ring_dot " + var_[id]);
    return;
  }

  // kScatter: acc_h is the running sum of half h, in place in the result
  // when its block is a contiguous run of it.
  const int sl = plan.sliced;
  std::vector<std::string> acc(H), part(H), incoming(H);
  for (int h = 0; h < H; ++h) {
    const std::string hs = std::to_string(h);
    part[h] = locals_.user("part" + suffix(h));
    incoming[h] = locals_.user("incoming" + suffix(h));
    w.line(buf_type(v.dtype) + " " + part[h] + "(" + piece + ", &mem" + ring_fill + "), " + incoming[h] + "(" +
           piece + ", &mem" + ring_fill + ");  // " + ir::shape_str(plan.step_result, v.dtype) +
           ": this device's partial / the sum so far from the " + way[1 - h] +
           (H == 2 ? ", half " + hs : ""));
    acc[h] = locals_.user("acc" + suffix(h));
    if (plan.out_contiguous) {
      w.line(elem_type(v.dtype) + "* " + acc[h] + " = " + ptr(id) + (h ? " + " + piece : "") +
             ";  // the running sum" + (H == 2 ? " of half " + hs : "") + ", in place");
    } else {
      const std::string buf = locals_.user("sum" + suffix(h));
      w.line(buf_type(v.dtype) + " " + buf + "(" + piece + ", &mem" + ring_fill + ");");
      w.line(elem_type(v.dtype) + "* " + acc[h] + " = " + buf + ".data();  // the running sum of half " + hs);
    }
  }
  w.open("for (int " + k + " = 0; " + k + " < " + n + "; ++" + k + ")");
  for (int h = 0; h < H; ++h) {
    blk[h] = locals_.user("c" + suffix(h));
    const std::string expr = h == 0 ? "(" + p + " - " + k + " - 1 + " + n + ") % " + n
                                    : "(" + p + " + " + k + " + 1) % " + n;
    w.line("const int " + blk[h] + " = " + expr + ";  // block summed" +
           (H == 2 ? " by half " + std::to_string(h) : "") + " this step (" + p +
           "'s own at the last)");
  }
  w.line((cuda() ? "gpu::PendingTransfer " : "rt::PendingRecv ") + join(recv, ", ") + ";");
  w.open("if (" + k + " > 0)");
  w.line("// last step's sum on, while this step's block's sum so far arrives");
  if (cuda())
    w.line("gpu::stream_wait(" + gpu_comm + ", gpu_dev);  // it sends the last step's sum, into what its add read");
  for (int h = 0; h < H; ++h)
    w.line(recv[h] + " = " + ring_call("ppermute_start") + acc[h] + ", " + incoming[h] + ".data(), " +
           piece + ", " + grp + ", " + perm[h] + ");  // to the " + way[h]);
  w.close();
  w.line("timeline.op(" + label + ", " + cost_literal(cost.gemm) + ");");
  record_mark(EmittedMark::Kind::kRingGemm, id, cost.gemm);
  for (int h = 0; h < H; ++h) {
    std::string step[2];
    step[sl] = sliced_piece(piece_index(blk[h], h));
    step[1 - sl] = operand[1 - sl];
    emit_local_dot(w, v.dot, plan.step_operand[0], step[0], plan.step_operand[1], step[1],
                   "(" + k + " == 0 ? " + acc[h] + " : " + part[h] + ".data())", var_[id],
                   v.dtype);
  }
  w.open("if (" + k + " > 0)");
  for (int h = 0; h < H; ++h) {
    w.line(ring_call("ppermute_wait") + recv[h] + ");");
    if (cuda()) w.line("gpu::stream_wait(gpu_dev, " + gpu_comm + ");  // the add reads the sum that arrived");
    w.line("timeline.op(" + label + ", " + cost_literal(cost.add) + ");");
    record_mark(EmittedMark::Kind::kRingAdd, id, cost.add);
    const std::string sum =
        v.dtype == ir::DType::kBF16
            ? "rt::bf16(static_cast<float>(" + part[h] + "[i]) + static_cast<float>(" +
                  incoming[h] + "[i]))"
            : part[h] + "[i] + " + incoming[h] + "[i]";
    if (cuda())
      w.line("gpu::add(gpu_dev, " + part[h] + ".data(), " + incoming[h] + ".data(), " + acc[h] + ", " + piece + ");");
    else
      w.line("for (int64_t i = 0; i < " + piece + "; ++i) " + acc[h] + "[i] = " + sum + ";");
  }
  w.close();
  w.close("ring step");
  if (!plan.out_contiguous)
    for (int h = 0; h < H; ++h)
      w.line(call("place_block") + acc[h] + ", " + braced(plan.result) + ", /*dim=*/" +
             std::to_string(plan.out_dim) + ", " + std::to_string(plan.out_parts) + ", " +
             std::to_string(h) + ", " + ptr(id) + ");");
  w.close("ring_dot " + var_[id]);
}

void CpuEmitter::emit_random_uniform(CodeWriter& w, const Stmt& s) {
  const Node& v = g_[s.node];
  const int id = s.node;
  const Shape gs = global_shape(v);
  const auto gst = strides_of(gs), lst = strides_of(v.shape);
  char key[32];
  std::snprintf(key, sizeof key, "0x%016" PRIx64 "ull", v.key);
  std::string site = key;
  if (scanned(v)) {
    // Each layer draws its own stream: its key from a table by layer.
    const std::string table = "kLayerKeys_" + base_name(var_[id]);
    auto& keys = layer_keys_[table];
    keys.resize(static_cast<size_t>(g_.repeats[v.repeat].length));
    keys[static_cast<size_t>(v.iteration)] = key;
    site = table + "[" + iter_int(v, v.iteration) + "]";
  }
  w.line(describe(v, s.reads, "random_uniform over the global " + ir::shape_str(gs)));
  w.line(declare(id, /*writes_all=*/true));
  w.open("");
  if (!cuda())
    w.line("const uint64_t key = rt::random_stream_key(" + site + ", " + elem0(v.args[0]) + ");  // (site, seed)");
  std::vector<std::string> local, global;
  int loops = 0;
  const size_t rank = v.shape.size();
  size_t c = rank ? rank - 1 : 0;
  while (c > 0 && v.shape[c] == gs[c]) --c;
  int64_t run_count = 1;
  for (size_t d = c; d < rank; ++d) run_count *= v.shape[d];
  for (size_t d = 0; d <= c && d < rank; ++d) {
    std::string idx;
    if (v.shape[d] > 1 && d < c) {
      idx = "i" + std::to_string(d);
      w.open("for (int64_t " + idx + " = 0; " + idx + " < " + std::to_string(v.shape[d]) +
             "; ++" + idx + ")");
      ++loops;
      local.push_back(lst[d] == 1 ? idx : idx + " * " + std::to_string(lst[d]));
    }
    const std::string start = block_start_expr(v, d);
    std::string at = start == "0" ? idx : idx.empty() ? start : "(" + start + " + " + idx + ")";
    if (!at.empty()) global.push_back(gst[d] == 1 ? at : at + " * " + std::to_string(gst[d]));
  }
  const std::string l = local.empty() ? "0" : join(local, " + ");
  const std::string g = global.empty() ? "0" : join(global, " + ");
  const std::string first = g == "0" ? g : "static_cast<uint64_t>(" + g + ")";
  if (cuda())  // the key is made on the device, from the seed in device memory
    w.line("gpu::uniform_fill(gpu_dev, " + site + ", " + ptr(v.args[0]) + ", " + first + ", " +
           std::to_string(run_count) + ", " + ptr(id) + (l == "0" ? "" : " + " + l) + ");");
  else
    w.line("rt::uniform_fill(key, " + first + ", " + std::to_string(run_count) + ", " + ptr(id) +
           (l == "0" ? "" : " + " + l) + ");");
  for (int k = 0; k < loops; ++k) w.close();
  w.close("random_uniform " + var_[id]);
}

bool CpuEmitter::scanned(const Node& v) const {
  return v.repeat >= 0 && v.iteration >= 0 && g_.repeats[v.repeat].scan;
}

bool CpuEmitter::layer_row(const Node& v) const {
  return scanned(v) && (v.op == Op::kSlice || v.op == Op::kAddSlice) && v.ints[0] == 0 &&
         v.ints[1] == v.iteration && g_[v.args[0]].shape[0] == g_.repeats[v.repeat].length;
}

std::string CpuEmitter::iter_int(const Node& v, int64_t value, int64_t k) const {
  if (!(layer_row(v) || (scanned(v) && v.op == Op::kRandomUniform)) || value - k != v.iteration)
    return std::to_string(value);
  return layer_ref(v, k);
}

std::string CpuEmitter::layer_ref(const Node& v, int64_t k) {
  return "\x03" + std::to_string(v.iteration) + ":" + std::to_string(k) + "\x04";
}

std::string CpuEmitter::spell_layers(const std::string& text, int at, bool relative) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\x05') {
      const size_t end = text.find('\n', i);
      if (relative) {  // the whole line: its indentation, and the newline before it
        while (!out.empty() && out.back() == ' ') out.pop_back();
        if (!out.empty() && out.back() == '\n') out.pop_back();
        i = end == std::string::npos ? text.size() : end;
      } else {
        ++i;
      }
      continue;
    }
    if (c != '\x01' && c != '\x03') {
      out += c;
      ++i;
      continue;
    }
    const size_t end = text.find(c == '\x01' ? '\x02' : '\x04', i);
    const std::string inner = text.substr(i + 1, end - i - 1);
    i = end + 1;
    const size_t colon = inner.find(':');
    const int j = std::stoi(inner.substr(0, colon));
    const int k = colon == std::string::npos ? 0 : std::stoi(inner.substr(colon + 1));
    const int off = relative ? j - at + k : j + k;
    std::string e = relative ? (off == 0 ? "l" : off > 0 ? "l + " + std::to_string(off) : "l - " + std::to_string(-off))
                             : std::to_string(off);
    out += c == '\x01' ? "[" + e + "]" : e;
  }
  return out;
}

bool CpuEmitter::take_operand_buffer(CodeWriter& w, int v) {
  const int a = plan_.takes_buffer_of[v];
  if (a < 0) return false;
  declared_.push_back(v);
  w.line(var_[v] + " = std::move(" + var_[a] + ");  // " + shape_comment(g_[v]) + ", in " + var_[a] +
         "'s buffer (its last use)");
  return true;
}

void CpuEmitter::emit_bucket(CodeWriter& w, const Stmt& s) {
  const Node& head = g_[s.node];
  std::vector<int64_t> at;
  int64_t total = 0;
  for (int m : s.bucket) {
    at.push_back(total);
    total += ir::num_elements(g_[m].shape);
  }
  const std::string axes = "(" + join(head.axes, ", ") + ")";
  std::string id = std::to_string(head.dim2);
  if (scanned(head)) {
    // Numbered within its layer: each layer's buckets are the same.
    std::set<int> before;
    for (const Node& n : g_.nodes)
      if (n.op == Op::kAllReduce && n.repeat == head.repeat && n.iteration == head.iteration && n.dim2 >= 0 &&
          n.dim2 < head.dim2)
        before.insert(n.dim2);
    id = std::to_string(before.size()) + " of layer " + layer_ref(head);
  }
  w.line("// all_reduce bucket " + id + ": " + std::to_string(s.bucket.size()) + " values over " +
         axes + " as ONE collective of " + std::to_string(total) + " " +
         elem_type(head.dtype) + "s, in the values' own buffers");
  for (size_t k = 0; k < s.bucket.size(); ++k) {
    const int m = s.bucket[k];
    const int a = g_[m].args[0];
    const int64_t n = ir::num_elements(g_[m].shape);
    w.line(describe(g_[m], {a},
                    "all_reduce" + axes + ", bucket " + id + " [" + std::to_string(at[k]) + ", " +
                        std::to_string(at[k] + n) + ")"));
    if (!take_operand_buffer(w, m)) {
      w.line(declare(m, /*writes_all=*/true));
      w.line(call("copy") + ptr(a) + ", " + ptr(m) + ", " + std::to_string(n) + ");");
    }
  }
  w.line(comm_call("all_reduce") + "std::vector<rt::Segment<" + elem_type(head.dtype) + ">>{");
  for (size_t k = 0; k < s.bucket.size(); ++k)
    w.line("                    {" + ptr(s.bucket[k]) + ", " +
           std::to_string(ir::num_elements(g_[s.bucket[k]].shape)) + "},");
  w.line("                },");
  w.line("                " + group(head) + ", " + reduce_op(head.reduce) + ");");
}

void CpuEmitter::emit_mark(CodeWriter& w, const Stmt& s) {
  const std::string label = quoted(statement_label(g_[s.node]));
  if (is_comm_statement(g_, s)) {
    w.line("timeline.comm_op(" + label + ");");
    record_mark(EmittedMark::Kind::kCollective, s.node, {});
  } else {
    const rt::OpCost cost = statement_cost(g_, s);
    w.line("timeline.op(" + label + ", " + cost_literal(cost) + ");");
    EmittedMark& m = record_mark(EmittedMark::Kind::kKernel, s.node, cost);
    if (ir::is_elementwise(g_[s.node].op))
      for (int t : s.tree) m.fused.emplace_back(g_[t].loc, ir::op_name(g_[t].op));
  }
}

EmittedMark& CpuEmitter::record_mark(EmittedMark::Kind kind, int node, const rt::OpCost& cost) {
  const Node& v = g_[node];
  EmittedMark m;
  m.kind = kind;
  m.stage = stage_;
  m.node = node;
  m.label = statement_label(v);
  m.op = v.op == Op::kKernel ? v.kernel : ir::op_name(v.op);
  m.layer = v.name;
  m.loc = v.loc;
  m.flops = cost.flops;
  m.bytes = cost.bytes;
  if (kind == EmittedMark::Kind::kCollective || (kind == EmittedMark::Kind::kKernel && v.op == Op::kRingDot)) {
    if (!report_) report_ = predict(g_);
    for (const CollectiveReport& c : report_->collectives)
      if (c.node == node) {
        m.what = c.what;
        m.sent = c.bytes;
      }
  }
  marks_->push_back(std::move(m));
  return marks_->back();
}

std::string CpuEmitter::cost_literal(const rt::OpCost& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "{.flops = %.17g, .bytes = %.17g}", c.flops, c.bytes);
  return buf;
}

CpuEmitter::Window CpuEmitter::window(const Shape& in, const Shape& out, int d) {
  Window w;
  for (size_t k = d + 1; k < in.size(); ++k) w.inner *= in[k];
  for (int k = 0; k < d; ++k) w.outer *= in[k];
  w.run = in[d] * w.inner;
  w.out_run = out[d] * w.inner;
  return w;
}

void CpuEmitter::emit_stmt(CodeWriter& w, const Stmt& s) {
  const Node& v = g_[s.node];
  const int id = s.node;
  const std::string count = std::to_string(ir::num_elements(v.shape));
  auto a0 = [&] { return ptr(v.args[0]); };
  auto shape0 = [&] { return braced(g_[v.args[0]].shape); };
  std::vector<std::string> q;
  for (auto& a : v.axes) q.push_back(a);
  const std::string axes = "(" + join(q, ", ") + ")";
  if (!s.bucket.empty()) return emit_bucket(w, s);
  if (ir::is_elementwise(v.op)) return emit_fused(w, s);
  if (v.op == Op::kDot) return emit_dot(w, s);
  if (v.op == Op::kRingDot) return emit_ring_dot(w, s);
  if (v.op == Op::kRandomUniform) return emit_random_uniform(w, s);
  if (v.op == Op::kKernel) return emit_kernel(w, s);
  switch (v.op) {
    case Op::kInput: {
      w.line("// " + (v.loc.known() ? v.loc.str() + ": " : "") + "input \"" + v.name + "\" " +
             ir::shape_str(global_shape(v)) + " " + v.sharding->str() +
             " => this device's block");
      w.line(declare(id, /*writes_all=*/true));
      const std::string k = std::to_string(ep_.input_index.at(v.name));
      w.line("if (const auto* block = in.blocks.get<" + elem_type(v.dtype) + ">(" + k + ", rank))  // set_block()");
      if (cuda()) {  // from the caller's host arrays to the device
        const std::string off = block_offset_expr(v), src = "in." + field_.at(v.name);
        w.line("  gpu::upload(gpu_dev, " + var_[id] + ".data(), block, " + count + ");");
        w.line("else");
        w.line("  gpu::upload_strided(gpu_dev, " + (off == "0" ? src : src + " + " + off) + ", " +
               braced(v.shape) + ", " + braced(strides_of(global_shape(v))) + ", " + var_[id] + ".data());");
        return;
      }
      w.line("  std::copy_n(block, " + std::to_string(ir::num_elements(v.shape)) + ", " + var_[id] + ".data());");
      w.line("else");
      w.line("  " + block_from_global(v, "in." + field_.at(v.name), var_[id] + ".data()"));
      return;
    }
    case Op::kConstant:
      w.line(describe(v, {}, "constant"));
      w.line(declare(id, /*writes_all=*/true));
      w.line(call("fill") + ptr(id) + ", " + count + ", " + float_literal(v.scalar) + ");");
      return;
    case Op::kIota: {
      // value = global index along d: this block's start + the local index.
      const int d = v.ints[0];
      int64_t inner = 1;
      for (size_t k = d + 1; k < v.shape.size(); ++k) inner *= v.shape[k];
      std::string local = inner == 1 ? "i" : "(i / " + std::to_string(inner) + ")";
      if (ir::num_elements(v.shape) / inner != v.shape[d])
        local += " % " + std::to_string(v.shape[d]);
      const std::string start = block_start_expr(v, d);
      const std::string index = start == "0" ? local : start + " + " + local;
      w.line(describe(v, {}, "iota dim=" + std::to_string(d) + " (global index)"));
      w.line(declare(id));
      if (cuda()) {
        w.line("gpu::iota(gpu_dev, " + ptr(id) + ", " + count + ", /*inner=*/" + std::to_string(inner) +
               ", /*extent=*/" + std::to_string(v.shape[d]) + ", /*start=*/" + start + ");");
        return;
      }
      w.line("for (int64_t i = 0; i < " + count + "; ++i) " + var_[id] +
             "[i] = " + stored(v.dtype, "static_cast<float>(" + index + ")") + ";");
      return;
    }
    case Op::kSlice: {
      // Local: the sliced dimension is whole on every device.
      const auto st = strides_of(g_[v.args[0]].shape);
      const int64_t start = v.ints[1] * st[v.ints[0]];
      // A scanned layer's row of a stacked parameter: at the layer's index.
      const bool row = layer_row(v);
      w.line(describe(v, s.reads,
                      "slice dim=" + std::to_string(v.ints[0]) + " [" + iter_int(v, v.ints[1]) + ", " +
                          iter_int(v, v.ints[1] + v.ints[2], 1) + ")"));
      w.line(declare(id, /*writes_all=*/true));
      const std::string at = row ? a0() + " + " + iter_int(v, v.ints[1]) + " * " + std::to_string(st[0])
                             : start == 0 ? a0() : a0() + " + " + std::to_string(start);
      w.line(call("strided_copy") + at + ", " + braced(v.shape) + ", " + braced(st) + ", " + ptr(id) + ");");
      return;
    }
    case Op::kPad: {
      // Local: the padded dimension is whole on every device. The buffer
      // starts zeroed; each outer row of the operand lands `before` rows in.
      const int d = v.ints[0];
      const Window win = window(g_[v.args[0]].shape, v.shape, d);
      const int64_t outer = win.outer;
      const std::string run = std::to_string(win.run), out_run = std::to_string(win.out_run);
      const int64_t before = v.ints[1] * win.inner;
      const std::string at = before == 0 ? "" : " + " + std::to_string(before);
      w.line(describe(v, s.reads,
                      "pad dim=" + std::to_string(d) + " before=" + std::to_string(v.ints[1]) +
                          " after=" + std::to_string(v.ints[2])));
      w.line(declare(id) + ", zeroed");
      if (cuda()) {
        w.line("gpu::copy_rows(gpu_dev, " + a0() + ", " + ptr(id) + ", /*rows=*/" + std::to_string(outer) +
               ", /*run=*/" + run + ", /*out_run=*/" + out_run + ", /*offset=*/" + std::to_string(before) + ");");
        return;
      }
      if (outer == 1) {
        w.line(call("copy") + a0() + ", " + ptr(id) + at + ", " + run + ");");
      } else {
        w.line("for (int64_t i = 0; i < " + std::to_string(outer) + "; ++i)");
        w.line("  rt::copy(" + a0() + " + i * " + run + ", " + ptr(id) + " + i * " + out_run +
               at + ", " + run + ");");
      }
      return;
    }
    case Op::kAddSlice: {
      // Local: the dimension added into is whole on every device. In the
      // target's buffer where this is its last reader, else in a copy of it.
      const Shape& in = g_[v.args[1]].shape;
      const int d = v.ints[0];
      const auto [inner, outer, run, out_run] = window(in, v.shape, d);
      const int64_t before = v.ints[1] * inner;
      const bool row = layer_row(v);  // a scanned layer's row of a stacked gradient
      const std::string before_expr =
          row ? iter_int(v, v.ints[1]) + " * " + std::to_string(inner) : std::to_string(before);
      w.line(describe(v, s.reads, "add_slice dim=" + std::to_string(d) + " [" + iter_int(v, v.ints[1]) + ", " +
                                      iter_int(v, v.ints[1] + in[d], 1) + ")"));
      if (!take_operand_buffer(w, id)) {
        w.line(declare(id, /*writes_all=*/true));
        w.line(call("copy") + a0() + ", " + ptr(id) + ", " + count + ");");
      }
      if (cuda()) {
        w.line("gpu::add_rows(gpu_dev, " + ptr(v.args[1]) + ", " + ptr(id) + ", /*rows=*/" + std::to_string(outer) +
               ", /*run=*/" + std::to_string(run) + ", /*out_run=*/" + std::to_string(out_run) +
               ", /*offset=*/" + before_expr + ");");
        return;
      }
      const std::string x = var_[id], y = var_[v.args[1]];
      const std::string sum = stored(v.dtype, "static_cast<float>(" + x + "[o]) + static_cast<float>(" + y + "[i])");
      if (outer == 1) {
        w.line("for (int64_t i = 0; i < " + std::to_string(run) + "; ++i) {");
        w.line("  const int64_t o = " + (before == 0 && !row ? std::string("i") : before_expr + " + i") + ";");
      } else {
        w.line("for (int64_t i = 0; i < " + std::to_string(outer * run) + "; ++i) {");
        w.line("  const int64_t o = i / " + std::to_string(run) + " * " + std::to_string(out_run) +
               (before == 0 && !row ? "" : " + " + before_expr) + " + i % " + std::to_string(run) + ";");
      }
      w.line("  " + x + "[o] = " + sum + ";");
      w.line("}");
      return;
    }
    case Op::kReshape:
    case Op::kShardingConstraint:
      w.line(describe(v, s.reads, ir::op_name(v.op)));
      if (!take_operand_buffer(w, id)) {
        w.line(declare(id, /*writes_all=*/true));
        w.line(call("copy") + a0() + ", " + ptr(id) + ", " + count + ");");
      }
      return;
    case Op::kBroadcast: {
      Shape expanded(v.shape.size(), 1);
      for (size_t i = 0; i < v.ints.size(); ++i) expanded[v.ints[i]] = g_[v.args[0]].shape[i];
      w.line(describe(v, s.reads, "broadcast"));
      w.line(declare(id, /*writes_all=*/true));
      w.line(call("broadcast") + a0() + ", " + braced(expanded) + ", " + braced(v.shape) + ", " +
             ptr(id) + ");");
      return;
    }
    case Op::kTranspose:
      w.line(describe(v, s.reads, "transpose"));
      w.line(declare(id, /*writes_all=*/true));
      w.line(call("transpose") + a0() + ", " + shape0() + ", " + braced(v.ints) + ", " + ptr(id) +
             ");");
      return;
    case Op::kReduce:
      w.line(describe(v, s.reads, std::string("reduce ") + ir::reduce_name(v.reduce)));
      w.line(declare(id, /*writes_all=*/true));
      w.line(call("reduce") + a0() + ", " + shape0() + ", " + braced(v.ints) + ", " +
             reduce_op(v.reduce) + ", " + ptr(id) + ");");
      return;
    case Op::kAllGather:
      w.line(describe(v, s.reads, "all_gather" + axes));
      w.line(declare(id, /*writes_all=*/true));
      w.line(collective_call("all_gather_dim") + group(v) + ", " + a0() + ", " + shape0() +
             ", /*dim=*/" + std::to_string(v.dim) + ", " + ptr(id) + ");");
      return;
    case Op::kReduceScatter:
      w.line(describe(v, s.reads, "reduce_scatter" + axes));
      w.line(declare(id, /*writes_all=*/true));
      w.line(collective_call("reduce_scatter_dim") + group(v) + ", " + a0() + ", " + shape0() +
             ", /*dim=*/" + std::to_string(v.dim) + ", " + ptr(id) + ", " + reduce_op(v.reduce) +
             ");");
      return;
    case Op::kAllReduce:
      w.line(describe(v, s.reads, "all_reduce" + axes));
      if (!take_operand_buffer(w, id)) {
        w.line(declare(id, /*writes_all=*/true));
        w.line(call("copy") + a0() + ", " + ptr(id) + ", " + count + ");");
      }
      w.line(comm_call("all_reduce") + ptr(id) + ", " + count + ", " + group(v) + ", " +
             reduce_op(v.reduce) + ");");
      return;
    case Op::kAllToAll:
      w.line(describe(v, s.reads, "all_to_all" + axes));
      w.line(declare(id, /*writes_all=*/true));
      w.line(collective_call("all_to_all_dim") + group(v) + ", " + a0() + ", " + shape0() +
             ", /*split_dim=*/" + std::to_string(v.dim) + ", /*concat_dim=*/" +
             std::to_string(v.dim2) + ", " + ptr(id) + ");");
      return;
    case Op::kPPermute: {
      // shard_map's ppermute (dsl/shard_map.h): receivers of nothing get zeros.
      std::vector<std::string> pairs;
      for (size_t i = 0; i + 1 < v.ints.size(); i += 2)
        pairs.push_back("{" + std::to_string(v.ints[i]) + ", " + std::to_string(v.ints[i + 1]) +
                        "}");
      w.line(describe(v, s.reads, "ppermute" + axes));
      w.line(declare(id));
      w.line(comm_call("ppermute") + a0() + ", " + ptr(id) + ", " + count + ", " + group(v) +
             ", rt::Permutation{" + join(pairs, ", ") + "});");
      return;
    }
    case Op::kSend:
    case Op::kRecv: {
      // A pipeline stage boundary (split_stages): the device at stage ints[0]
      // with this device's other coordinates; the value's id is the tag.
      const std::string peer = "world_.mesh().peer_on_axis(rank, " +
                               std::to_string(mesh_.index(v.axes[0])) + ", " + std::to_string(v.ints[0]) + ")";
      const std::string tag = std::to_string(v.ints[1]);
      if (v.op == Op::kSend) {
        w.line(describe(v, s.reads, "send to stage " + std::to_string(v.ints[0]) + " (message " + tag + ")"));
        w.line(comm_call("send") + a0() + ", " + count + ", " + peer + ", " + tag + ");");
      } else {
        w.line(describe(v, {}, "receive from stage " + std::to_string(v.ints[0]) + " (message " + tag + ")"));
        w.line(declare(id, /*writes_all=*/true));
        w.line(comm_call("recv") + ptr(id) + ", " + count + ", " + peer + ", " + tag + ");");
      }
      return;
    }
    case Op::kAxisIndex:
      w.line(describe(v, s.reads, "axis_index" + axes));
      w.line(declare(id));
      if (cuda())
        w.line("gpu::fill(gpu_dev, " + ptr(id) + ", 1, static_cast<float>(" + group(v) + ".position));");
      else
        w.line(ptr(id) + "[0] = static_cast<float>(" + group(v) + ".position);");
      return;
    case Op::kLocalSlice:
      w.line(describe(v, s.reads, "local_slice" + axes));
      w.line(declare(id, /*writes_all=*/true));
      w.line(call("slice_block") + a0() + ", " + shape0() + ", /*dim=*/" + std::to_string(v.dim) +
             ", " + group(v) + ".size(), " + group(v) + ".position, " + ptr(id) + ");");
      return;
    default:
      break;
  }
  internal_error(std::string("emit_cpu cannot emit ") + ir::op_name(v.op) + " " +
                 ir::shape_str(v.shape) + " at " + v.loc.str());
}

void CpuEmitter::emit_output(CodeWriter& w, const ir::Output& o) {
  const Node& v = g_[o.value];
  const std::string k = std::to_string(ep_.output_index.at(o.name));
  const std::string field = "out." + out_field_.at(o.name);
  w.line("// \"" + o.name + "\" (" + o.loc.str() + "): block " + shape_comment(v) +
         " of the global " + ir::shape_str(global_shape(v)) + replicated_note(v));
  const std::string n = std::to_string(ir::num_elements(v.shape));
  std::string data = ptr(o.value);
  if (cuda()) {  // from the device to the caller's host arrays, through host memory
    w.open("");
    w.line("std::vector<float> host(" + n + ");");
    w.line("gpu::download(gpu_dev, host.data(), " + data + ", " + n + ");");
    data = "host.data()";
  }
  w.line("if (float* block = out.blocks.get_mutable<float>(" + k + ", rank))  // set_block()");
  w.line("  std::copy_n(" + data + ", " + n + ", block);");
  emit_block_to_global(w, v, data, field, quoted(o.name), field, "out.blocks.mark(" + k + ", rank);");
  if (cuda()) w.close("\"" + o.name + "\" on the host");
}

}  // namespace sharc::emit_cpu_detail
