// The virtual clock's statement costs; see op_cost.h.
#include "codegen/op_cost.h"

#include <algorithm>

#include "codegen/ring_plan.h"
#include "runtime/gpu/kernel_args.h"

namespace sharc {

using ir::Node;
using ir::Op;

namespace {

double bytes_of(const Node& n) {
  return static_cast<double>(ir::num_elements(n.shape)) * static_cast<double>(ir::dtype_size(n.dtype));
}

double elements(const ir::Shape& s) {
  return static_cast<double>(ir::num_elements(s));
}

// A local GEMM of operands with shapes `lhs` and `rhs` (dot_general `d`).
rt::OpCost gemm_cost(const ir::DotDims& d, const ir::Shape& lhs, const ir::Shape& rhs, const ir::Shape& out,
                     double element_bytes) {
  const LocalDotLayout l = local_dot_layout(d, lhs, rhs);
  rt::OpCost c;
  c.flops = 2.0 * static_cast<double>(l.B) * static_cast<double>(l.M) * static_cast<double>(l.N) *
            static_cast<double>(l.K);
  c.bytes = (elements(lhs) + elements(rhs) + elements(out)) * element_bytes;
  // A transposed operand is copied first: read once more and written once.
  if (l.transpose_lhs) c.bytes += 2 * elements(lhs) * element_bytes;
  if (l.transpose_rhs) c.bytes += 2 * elements(rhs) * element_bytes;
  return c;
}

}  // namespace

bool is_gemm_kernel(const Node& n) {
  return n.op == Op::kKernel && n.kernel.rfind("gemm", 0) == 0;
}

bool is_comm_statement(const ir::Graph& g, const BufferPlan::Stmt& stmt) {
  if (!stmt.bucket.empty()) return true;
  const Op op = g.nodes[stmt.node].op;
  return ir::is_collective(op) || op == Op::kPPermute || op == Op::kSend || op == Op::kRecv ||
         op == Op::kRingDot;
}

rt::OpCost statement_cost(const ir::Graph& g, const BufferPlan::Stmt& stmt) {
  const Node& n = g.nodes[stmt.node];
  if (is_comm_statement(g, stmt)) return {};
  if (n.op == Op::kDot)
    return gemm_cost(n.dot, g.nodes[n.args[0]].shape, g.nodes[n.args[1]].shape, n.shape,
                     static_cast<double>(ir::dtype_size(n.dtype)));
  if (is_gemm_kernel(n)) {
    // A GEMM with its epilogue: the GEMM, then the bias or gelu's argument
    // read, gelu's argument written where it is kept, and a few flops per
    // element of the result (gelu's tanh: about eight).
    rt::OpCost c = gemm_cost(n.dot, g.nodes[n.args[0]].shape, g.nodes[n.args[1]].shape, n.shape,
                             static_cast<double>(ir::dtype_size(n.dtype)));
    if (n.args.size() > 2) c.bytes += bytes_of(g.nodes[n.args[2]]);
    for (int k : stmt.stores) c.bytes += bytes_of(g.nodes[k]);
    c.flops += elements(n.shape) * (n.kernel == "gemm_bias" ? 1 : 8);
    return c;
  }
  rt::OpCost c;
  c.bytes = bytes_of(n);
  for (int k : stmt.stores) c.bytes += bytes_of(g.nodes[k]);
  for (int r : stmt.reads) c.bytes += bytes_of(g.nodes[r]);
  if (n.op == Op::kInput) c.bytes *= 2;  // read from the caller's array, written to the block
  if (n.op == Op::kReduce) {
    c.flops = elements(g.nodes[n.args[0]].shape);
  } else if (ir::is_elementwise(n.op)) {
    int ops = 0;
    for (int t : stmt.tree)
      if (ir::is_elementwise(g.nodes[t].op)) ++ops;
    c.flops = elements(n.shape) * std::max(ops, 1);
  } else if (n.op == Op::kKernel && n.kernel.rfind("attention_", 0) == 0) {
    // The packed projection [B, T, H, 3D]: the forward's two [T, T] x D
    // products per head (scores, then weights x v), 2 B H T^2 D flops each;
    // the backward's four, and the scores once more.
    const ir::Shape& p = g.nodes[n.args[n.kernel == "attention_forward" ? 0 : 1]].shape;
    const double per_product = 2.0 * static_cast<double>(p[0]) * static_cast<double>(p[2]) *
                               static_cast<double>(p[1]) * static_cast<double>(p[1]) *
                               static_cast<double>(p[3] / 3);
    c.flops = per_product * (n.kernel == "attention_forward" ? 2 : 5);
  } else if (n.op == Op::kKernel && n.kernel == "global_norm") {
    c.flops = 0;  // a square and an add per gradient element
    for (int x : n.args) c.flops += 2 * elements(g.nodes[x].shape);
  } else if (n.op == Op::kKernel && n.kernel == "embedding_lookup") {
    // A gather: the picked rows read, the result written, the ids read; the
    // rest of the table is not touched.
    c.bytes = 2 * bytes_of(n) + bytes_of(g.nodes[n.args[1]]);
    c.flops = 0;
  } else if (n.op == Op::kKernel && n.kernel == "embedding_grad") {
    // dy read once, an add per element of it; the table's gradient written
    // (and the prior read); every block reads all the ids.
    const double blocks = static_cast<double>((n.shape[0] + gpu::kEmbeddingGradRows - 1) / gpu::kEmbeddingGradRows);
    c.bytes = bytes_of(g.nodes[n.args[0]]) + bytes_of(n) * (n.args.size() > 2 ? 3 : 1) +
              blocks * bytes_of(g.nodes[n.args[1]]);
    c.flops = elements(g.nodes[n.args[0]].shape);
  } else if (n.op == Op::kKernel && n.kernel == "cross_entropy") {
    // Over the logits: max, exp and sum; the gradient's exp, sub and mul.
    c.flops = (n.args.size() == 2 ? 4 : 8) * elements(g.nodes[n.args[0]].shape);
  } else if (n.op == Op::kKernel) {
    // A layer norm's statistics, normalisation and affine map: about eight
    // flops per element, reading and writing each buffer once.
    c.flops = 8 * elements(n.shape);
  } else {
    c.flops = elements(n.shape);
  }
  return c;
}

namespace {

bool is_transcendental(Op op) {
  switch (op) {
    case Op::kExp:
    case Op::kLog:
    case Op::kTanh:
    case Op::kGelu:
    case Op::kSigmoid:
    case Op::kErf:
    case Op::kLog1p:
    case Op::kExpm1:
    case Op::kSin:
    case Op::kCos:
    case Op::kPow:
      return true;
    default:
      return false;
  }
}

}  // namespace

double statement_transcendentals(const ir::Graph& g, const BufferPlan::Stmt& stmt) {
  const Node& n = g.nodes[stmt.node];
  if (is_comm_statement(g, stmt)) return 0;
  if (n.op == Op::kRandomUniform) return elements(n.shape);
  if (ir::is_elementwise(n.op)) {
    int ops = 0;
    for (int t : stmt.tree) ops += is_transcendental(g.nodes[t].op);
    if (stmt.tree.empty()) ops = is_transcendental(n.op);
    return elements(n.shape) * ops;
  }
  if (n.op != Op::kKernel) return 0;
  if (n.kernel.find("gelu") != std::string::npos) return elements(n.shape);  // gemm_gelu, gemm_dgelu
  if (n.kernel == "cross_entropy") return (n.args.size() == 2 ? 1 : 2) * elements(g.nodes[n.args[0]].shape);
  if (n.kernel.rfind("attention_", 0) == 0) {
    // An exp per score [B, H, T, T]; the backward recomputes them.
    const ir::Shape& p = g.nodes[n.args[n.kernel == "attention_forward" ? 0 : 1]].shape;
    return static_cast<double>(p[0]) * static_cast<double>(p[2]) * static_cast<double>(p[1]) *
           static_cast<double>(p[1]);
  }
  return 0;
}

RingStepCost ring_step_cost(const ir::Graph& g, const Node& n, int ring) {
  const RingPlan plan = ring_plan(n, g.nodes[n.args[0]].shape, g.nodes[n.args[1]].shape, ring);
  const double es = static_cast<double>(ir::dtype_size(n.dtype));
  const double H = plan.halves;
  const rt::OpCost half = gemm_cost(n.dot, plan.step_operand[0], plan.step_operand[1], plan.step_result, es);
  RingStepCost c;
  c.gemm = {half.flops * H, half.bytes * H};
  if (!plan.gather) c.add = {elements(plan.step_result), 3 * elements(plan.step_result) * es};
  return c;
}

std::vector<double> statement_seconds(const ir::Graph& g, const rt::MachineModel& machine) {
  std::vector<double> seconds(g.nodes.size(), 0.0);
  for (const BufferPlan::Stmt& st : plan_buffers(g).stmts)
    if (!is_comm_statement(g, st)) seconds[st.node] = machine.seconds(statement_cost(g, st));
  return seconds;
}

std::string statement_label(const Node& n) {
  std::string s = n.op == Op::kKernel ? n.kernel : ir::op_name(n.op);
  if (n.loc.known()) s += "  " + n.loc.str();
  if (!n.name.empty() && n.op != Op::kParameter && n.op != Op::kInput) s += " " + n.name;
  return s;
}

}  // namespace sharc
