// The one printer of the IR. Logs, numbered pass dumps, golden files,
// diagnostics and the comments in generated code all use this spelling, so a
// line in a golden diff reads the same as the comment above its kernel.
#include <cstdio>
#include <sstream>

#include "ir/ir.h"

namespace sharc::ir {

namespace {

std::string ints_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string axes_str(const std::vector<std::string>& axes) {
  std::string s = "{";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", \"" : "\"") + axes[i] + "\"";
  return s + "}";
}

std::string scalar_str(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

std::string dot_dims_str(const DotDims& d) {
  std::string s;
  if (!d.lhs_batch.empty()) s += "batch=" + ints_str(d.lhs_batch) + "x" + ints_str(d.rhs_batch) + " ";
  return s + "contract=" + ints_str(d.lhs_contract) + "x" + ints_str(d.rhs_contract);
}

std::ostream& operator<<(std::ostream& os, const Node& n) {
  os << op_name(n.op) << "(";
  for (size_t i = 0; i < n.args.size(); ++i) os << (i ? ", %" : "%") << n.args[i];
  os << ")";
  switch (n.op) {
    case Op::kParameter:
      os << " \"" << n.name << "\" init=" << n.init.str();
      if (n.spec) os << " spec=" << n.spec->str();
      if (n.layout_of >= 0) os << " layout_of=%" << n.layout_of;
      break;
    case Op::kInput:
      os << " \"" << n.name << "\"";
      if (n.spec) os << " spec=" << n.spec->str();
      break;
    case Op::kConstant:
      os << " " << scalar_str(n.scalar);
      break;
    case Op::kBroadcast:
      os << " dims=" << ints_str(n.ints);
      break;
    case Op::kIota:
      os << " dim=" << (n.ints.empty() ? -1 : n.ints[0]);
      break;
    case Op::kSlice:
      if (n.ints.size() == 3) os << " dim=" << n.ints[0] << " start=" << n.ints[1] << " size=" << n.ints[2];
      break;
    case Op::kAddSlice:
      if (n.ints.size() == 2) os << " dim=" << n.ints[0] << " start=" << n.ints[1];
      break;
    case Op::kPad:
      if (n.ints.size() == 3) os << " dim=" << n.ints[0] << " before=" << n.ints[1] << " after=" << n.ints[2];
      break;
    case Op::kRandomUniform: {
      char buf[32];
      std::snprintf(buf, sizeof buf, " key=0x%016llx", static_cast<unsigned long long>(n.key));
      os << buf;
      break;
    }
    case Op::kTranspose:
      os << " perm=" << ints_str(n.ints);
      break;
    case Op::kReduce:
      os << " " << reduce_name(n.reduce) << " axes=" << ints_str(n.ints);
      break;
    case Op::kDot:
      os << " " << dot_dims_str(n.dot);
      if (n.collective_matmul != CollectiveMatmul::kAuto)
        os << " collective_matmul=" << collective_matmul_name(n.collective_matmul);
      break;
    case Op::kRingDot:
      os << " " << dot_dims_str(n.dot);
      if (n.ring.kind == RingKind::kGather)
        os << " gather=" << (n.ring.operand == 0 ? "lhs" : n.ring.operand == 1 ? "rhs" : "?");
      else
        os << " scatter";
      os << " dim=" << n.dim << " axes=" << axes_str(n.axes) << " "
         << ring_direction_name(n.ring.direction);
      break;
    case Op::kShardingConstraint:
      if (n.spec) os << " spec=" << n.spec->str();
      break;
    case Op::kAllGather:
    case Op::kLocalSlice:
      os << " dim=" << n.dim << " axes=" << axes_str(n.axes);
      break;
    case Op::kReduceScatter:
      os << " " << reduce_name(n.reduce) << " dim=" << n.dim << " axes=" << axes_str(n.axes);
      break;
    case Op::kAllReduce:
      os << " " << reduce_name(n.reduce) << " axes=" << axes_str(n.axes);
      if (n.dim2 >= 0) os << " bucket=" << n.dim2;
      break;
    case Op::kShardMap:
      if (n.ints.size() == 2) os << " body=" << n.ints[0] << " result=" << n.ints[1];
      if (n.spec) os << " out_spec=" << n.spec->str();
      break;
    case Op::kPPermute:
      os << " axes=" << axes_str(n.axes) << " perm=[";
      for (size_t i = 0; i + 1 < n.ints.size(); i += 2)
        os << (i ? ", (" : "(") << n.ints[i] << ", " << n.ints[i + 1] << ")";
      os << "]";
      break;
    case Op::kAxisIndex:
      os << " axes=" << axes_str(n.axes);
      break;
    case Op::kSend:
    case Op::kRecv:
      if (n.ints.size() == 2) os << (n.op == Op::kSend ? " to=" : " from=") << n.ints[0] << " tag=" << n.ints[1];
      os << " axes=" << axes_str(n.axes);
      break;
    case Op::kAllToAll:
      os << " split=" << n.dim << " concat=" << n.dim2 << " axes=" << axes_str(n.axes);
      break;
    case Op::kKernel:
    case Op::kKernelOutput:
      os << " " << n.kernel;
      for (size_t i = 0; i < n.ints.size(); ++i) os << (i ? "," : " flags=") << n.ints[i];
      break;
    default:
      break;
  }
  os << " : " << shape_str(n.shape, n.dtype);
  if (n.sharding) os << " " << n.sharding->str();
  if (n.fixed) os << " fixed";
  if (n.backward) os << " backward";
  if (n.remat) os << " remat";
  if (n.loc.known() || (!n.name.empty() && n.op != Op::kParameter && n.op != Op::kInput)) {
    os << "  //";
    if (n.loc.known()) os << " " << n.loc.str();
    if (!n.name.empty() && n.op != Op::kParameter && n.op != Op::kInput) os << " " << n.name;
  }
  return os;
}

std::string node_str(const Graph& g, int id) {
  std::ostringstream os;
  os << "%" << id << " = " << g.nodes[id];
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Graph& g) {
  os << "program @" << g.name;
  if (!g.mesh.axes().empty()) os << " mesh=" << g.mesh.str();
  if (g.partitioned) os << " per-device";
  os << " {\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) os << "  " << node_str(g, static_cast<int>(i)) << "\n";
  for (auto& o : g.outputs) {
    os << "  return \"" << o.name << "\" %" << o.value;
    if (o.sharding) os << " " << o.sharding->str();
    else if (o.spec) os << " spec=" << o.spec->str();
    os << "\n";
  }
  for (auto& u : g.updates) os << "  update %" << u.target << " = %" << u.value << "\n";
  for (auto& gr : g.gradients) os << "  gradient %" << gr.parameter << " = %" << gr.value << "\n";
  return os << "}\n";
}

std::string to_string(const Graph& g) {
  std::ostringstream os;
  os << g;
  return os.str();
}

}  // namespace sharc::ir
