// Op tables derived from SHARC_OP_KINDS, and the small value types of ir.h.
#include "ir/ir.h"

#include <algorithm>

namespace sharc::ir {

const char* op_name(Op op) {
  switch (op) {
#define SHARC_X(e, n, a) \
  case Op::k##e:         \
    return n;
    SHARC_OP_KINDS(SHARC_X)
#undef SHARC_X
  }
  return "?";
}

const char* composite_name(CompositeKind kind) {
  switch (kind) {
    case CompositeKind::kLayerNorm:
      return "layer_norm";
    case CompositeKind::kAttention:
      return "attention";
    case CompositeKind::kSoftmaxCrossEntropy:
      return "softmax_cross_entropy";
    case CompositeKind::kAdam:
      return "adam";
    case CompositeKind::kGlobalNorm:
      return "global_norm";
    case CompositeKind::kEmbedding:
      return "embedding";
  }
  return "?";
}

int op_arity(Op op) {
  switch (op) {
#define SHARC_X(e, n, a) \
  case Op::k##e:         \
    return a;
    SHARC_OP_KINDS(SHARC_X)
#undef SHARC_X
  }
  return -1;
}

bool is_unary(Op op) { return op >= Op::kNeg && op <= Op::kConvert; }

bool dtype_follows_operand(Op op) {
  return !is_source(op) && op != Op::kConvert && op != Op::kRandomUniform &&
         op != Op::kAxisIndex && op != Op::kShardMap && op != Op::kKernel && op != Op::kKernelOutput;
}
bool is_binary(Op op) { return op >= Op::kAdd && op <= Op::kEqual; }
bool is_ternary(Op op) { return op == Op::kSelect; }
bool is_elementwise(Op op) { return is_unary(op) || is_binary(op) || is_ternary(op); }
bool is_collective(Op op) { return op >= Op::kAllGather && op <= Op::kAllToAll; }
bool is_source(Op op) { return op <= Op::kIota; }

const char* reduce_name(ReduceKind k) { return k == ReduceKind::kSum ? "sum" : "max"; }

const char* collective_matmul_name(CollectiveMatmul m) {
  switch (m) {
    case CollectiveMatmul::kAuto:
      return "auto";
    case CollectiveMatmul::kAlways:
      return "always";
    case CollectiveMatmul::kNever:
      return "never";
  }
  return "?";
}

const char* ring_direction_name(RingDirection d) {
  return d == RingDirection::kUnidirectional ? "unidirectional" : "bidirectional";
}

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGPipe: return "gpipe";
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
  }
  return "?";
}

const char* remat_policy_name(RematPolicy p) {
  switch (p) {
    case RematPolicy::kSaveAll: return "save_all";
    case RematPolicy::kRecomputeAll: return "recompute_all";
    case RematPolicy::kSaveDots: return "save_dots";
  }
  return "?";
}

std::optional<PipelineSchedule> parse_schedule(std::string_view name) {
  for (PipelineSchedule s : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved})
    if (name == schedule_name(s)) return s;
  return std::nullopt;
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s, DType t) {
  std::string r = std::string(dtype_name(t)) + "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

std::string describe_value(const Node& n) {
  const std::string shape = shape_str(n.shape, n.dtype);
  if (n.op == Op::kParameter) return "parameter '" + n.name + "' " + shape;
  if (n.op == Op::kInput) return "input '" + n.name + "' " + shape;
  std::string s = std::string(op_name(n.op)) + " result " + shape;
  if (!n.name.empty()) s += " from '" + n.name + "'";
  if (n.loc.known()) s += " at " + n.loc.str();
  return s;
}

bool Sharding::is_replicated() const {
  if (!partial.empty()) return false;
  for (auto& d : dims)
    if (!d.empty()) return false;
  return true;
}

bool Sharding::uses(const std::string& axis) const {
  for (auto& d : dims)
    if (std::find(d.begin(), d.end(), axis) != d.end()) return true;
  return std::find(partial.begin(), partial.end(), axis) != partial.end();
}

std::vector<std::string> Sharding::used_axes() const {
  std::vector<std::string> r;
  for (auto& d : dims) r.insert(r.end(), d.begin(), d.end());
  r.insert(r.end(), partial.begin(), partial.end());
  return r;
}

int64_t Sharding::parts(const Mesh& mesh, size_t d) const { return mesh.size(dims[d]); }

Shape Sharding::local_shape(const Shape& global, const Mesh& mesh) const {
  Shape s = global;
  for (size_t d = 0; d < s.size() && d < dims.size(); ++d) s[d] /= parts(mesh, d);
  return s;
}

static std::string axes_braces(const std::vector<std::string>& axes) {
  std::string s = "{";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", \"" : "\"") + axes[i] + "\"";
  return s + "}";
}

std::string Sharding::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + axes_braces(dims[i]);
  s += "]";
  if (!partial.empty()) {
    s += " partial";
    if (partial_kind == ReduceKind::kMax) s += "_max";
    s += "=" + axes_braces(partial);
  }
  return s;
}

std::vector<int> Graph::users(int id) const {
  std::vector<int> r;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int a : nodes[i].args)
      if (a == id) {
        r.push_back(static_cast<int>(i));
        break;
      }
  return r;
}

const Node* Graph::find(std::string_view name, Op op) const {
  for (auto& n : nodes)
    if (n.op == op && n.name == name) return &n;
  return nullptr;
}

Shape dot_shape(const Shape& lhs, const Shape& rhs, const DotDims& d) {
  Shape out;
  for (int b : d.lhs_batch) out.push_back(lhs[b]);
  auto is_in = [](const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  for (int i = 0; i < static_cast<int>(lhs.size()); ++i)
    if (!is_in(d.lhs_batch, i) && !is_in(d.lhs_contract, i)) out.push_back(lhs[i]);
  for (int i = 0; i < static_cast<int>(rhs.size()); ++i)
    if (!is_in(d.rhs_batch, i) && !is_in(d.rhs_contract, i)) out.push_back(rhs[i]);
  return out;
}

}  // namespace sharc::ir
