// use_gpu_kernels: composite region parts -> KernelSet kernels; see the header.
#include "codegen/passes/use_gpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "codegen/buffer_plan.h"
#include "codegen/passes/drop_nodes.h"
#include "ir/autodiff.h"

namespace sharc {

namespace {

using ir::Node;
using ir::Op;

// An operand of a new node: a node of the old graph, or new node `index`
// of replacement `replacement`.
struct Arg {
  int old = -1;
  int replacement = -1, index = -1;
};

// One new node of a replacement: a copy of its old node's place in the
// program (label, line, layer, micro-batch, layout) as a kernel or a
// further result of one.
struct NewNode {
  Node node;              // args are filled by the rewrite from `args`
  std::vector<Arg> args;
  int replaces = -1;      // the old node whose readers now read this one (-1: a new value)
};

// A part replaced by one kernel: the nodes it removes and what it adds, in
// order (the Kernel first).
struct Replacement {
  std::vector<int> removed;
  std::vector<NewNode> nodes;
};

class Mapper {
 public:
  explicit Mapper(const ir::Graph& g) : g_(g), users_(users_of(g)) {
    outside_.assign(g.nodes.size(), false);
    for (auto& o : g.outputs) outside_[o.value] = true;
    for (auto& u : g.updates) outside_[u.value] = true;
    for (auto& gr : g.gradients) outside_[gr.value] = true;
  }

  // The part's nodes that compute (its collectives stay where they are).
  std::vector<int> computing(const std::vector<int>& part) const {
    std::vector<int> out;
    for (int id : part)
      if (!ir::is_collective(g_[id].op)) out.push_back(id);
    return out;
  }

  // Operands of `nodes` computed elsewhere, in first-read order, constants
  // aside.
  std::vector<int> operands(const std::vector<int>& nodes) const {
    const std::set<int> in(nodes.begin(), nodes.end());
    std::vector<int> out;
    for (int id : nodes)
      for (int a : g_[id].args)
        if (!in.count(a) && g_[a].op != Op::kConstant && std::find(out.begin(), out.end(), a) == out.end())
          out.push_back(a);
    return out;
  }

  // Nodes of `nodes` read by a node outside `region` (or an output, update
  // or gradient).
  std::vector<int> results(const std::vector<int>& nodes, const std::set<int>& region) const {
    std::vector<int> out;
    for (int id : nodes) {
      bool read = outside_[id];
      for (int u : users_[id]) read = read || !region.count(u);
      if (read) out.push_back(id);
    }
    return out;
  }

  // The first node reading `v` through converts, broadcasts and reshapes,
  // within `in`.
  int reader_through_layout(int v, const std::set<int>& in) const {
    for (int u : users_[v]) {
      if (!in.count(u)) continue;
      const Op op = g_[u].op;
      if (op == Op::kConvert || op == Op::kBroadcast || op == Op::kReshape) return reader_through_layout(u, in);
      return u;
    }
    return -1;
  }

  const ir::Graph& g_;
  std::vector<std::vector<int>> users_;
  std::vector<bool> outside_;
};

// A new node in `like`'s place in the program: kernel `kernel`, or, for a
// name with a dot, its further result.
Node kernel_node(const Node& like, const std::string& kernel) {
  Node n = like;
  n.op = kernel.find('.') == std::string::npos ? Op::kKernel : Op::kKernelOutput;
  n.args.clear();
  n.kernel = kernel;
  n.ints.clear();
  n.axes.clear();
  n.dim = n.dim2 = -1;
  n.scalar = 0.0;
  n.remat = false;
  n.origin_rank = -1;  // named by the kernel (emission_plan.cpp)
  return n;
}

// The same shape and the same dtype, f32 or bf16.
bool same_shape_and_float(const Node& a, const Node& b) {
  return a.shape == b.shape && a.dtype == b.dtype && (a.dtype == ir::DType::kF32 || a.dtype == ir::DType::kBF16);
}

constexpr const char* kNotTheKernel = "its nodes are not the computation the kernel does";

// A region's forward part and, when the program trains, its backward part,
// as one set; `why` says why not when a remat policy computes any of it
// twice (the kernels run a region computed once).
std::set<int> region_of(const ir::Graph& g, const std::vector<int>& fwd, const std::vector<int>* bwd,
                        const char* what, std::string& why) {
  std::set<int> region(fwd.begin(), fwd.end());
  if (bwd) region.insert(bwd->begin(), bwd->end());
  for (int id : region)
    if (g[id].remat) why = std::string("a remat policy computes it twice: sharc runs the kernel for ") + what +
                           " computed once";
  return region;
}

// Operands of `nodes` from elsewhere, constants and iotas aside: values
// computed, inputs, parameters.
std::vector<int> computed_operands(const Mapper& m, const std::vector<int>& nodes) {
  std::vector<int> out;
  for (int a : m.operands(nodes))
    if (m.g_[a].op != Op::kIota) out.push_back(a);
  return out;
}

// The backward part's operands from outside the region, those in `known`
// (forward operands) aside.
std::vector<int> from_outside(const Mapper& m, const std::vector<int>& fwd, const std::vector<int>& bwd,
                              const std::set<int>& known) {
  const std::set<int> in(fwd.begin(), fwd.end());
  std::vector<int> out;
  for (int a : computed_operands(m, bwd))
    if (!in.count(a) && !known.count(a)) out.push_back(a);
  return out;
}

// Layer norm. Forward: operands x, scale, bias; one result read outside
// the region, y. Returns the reason it cannot run as the kernel, or "".
struct LayerNormRoles {
  int x = -1, scale = -1, bias = -1, y = -1;
  int dy = -1, prior = -1, dx = -1, dscale = -1, dbias = -1;
};

std::string map_layer_norm(const Mapper& m, const std::vector<int>& fwd, const std::vector<int>* bwd,
                           LayerNormRoles& r) {
  const ir::Graph& g = m.g_;
  std::string why;
  const std::set<int> region = region_of(g, fwd, bwd, "a layer norm", why);
  if (!why.empty()) return why;
  const std::vector<int> ops = m.operands(fwd);
  const std::vector<int> outs = m.results(fwd, region);
  if (ops.size() != 3 || outs.size() != 1) return kNotTheKernel;
  r.y = outs[0];
  const std::set<int> in(fwd.begin(), fwd.end());
  for (int a : ops) {
    const Node& v = g[a];
    if (v.shape == g[r.y].shape) {
      r.x = a;
      continue;
    }
    const int reader = m.reader_through_layout(a, in);
    if (v.shape.size() != 1 || reader < 0) return kNotTheKernel;
    (g[reader].op == Op::kMul ? r.scale : g[reader].op == Op::kAdd ? r.bias : r.y) = a;
  }
  // y is the last add, or (x in bf16) that add converted back to x's dtype.
  const int last = g[r.y].op == Op::kConvert ? g[r.y].args[0] : r.y;
  if (r.x < 0 || r.scale < 0 || r.bias < 0 || g[last].op != Op::kAdd) return kNotTheKernel;
  if (!same_shape_and_float(g[r.x], g[r.y]))
    return std::string("its input is ") + ir::dtype_name(g[r.x].dtype).data() + " and its result " +
           ir::dtype_name(g[r.y].dtype).data() + ": the layer norm kernels read and write one dtype, f32 or bf16";
  if (g[r.scale].dtype != ir::DType::kF32 || g[r.bias].dtype != ir::DType::kF32) return kNotTheKernel;
  if (!bwd) return "";

  // Backward: operands dy (and prior), besides forward values; results dx,
  // dscale, dbias.
  const std::vector<int> outside = from_outside(m, fwd, *bwd, {r.x, r.scale, r.bias});
  const std::vector<int> bouts = m.results(*bwd, region);
  for (int o : bouts) {
    const Node& v = g[o];
    if (v.op == Op::kConvert && v.dtype == ir::DType::kF32 && g[r.x].dtype != ir::DType::kF32)
      return "its result's gradient leaves it in f32 (partial sums the partitioner adds after converting them): "
             "the bf16 kernel reads the whole gradient in bf16";
    if (v.shape == g[r.x].shape && r.dx < 0) {
      r.dx = o;
    } else if (v.shape == g[r.scale].shape && v.op == Op::kReduce) {
      // dbias sums dy itself; dscale sums dy * the normalised x.
      int arg = v.args[0];
      while (g[arg].op == Op::kConvert && std::find(bwd->begin(), bwd->end(), arg) != bwd->end()) arg = g[arg].args[0];
      (std::find(outside.begin(), outside.end(), arg) != outside.end() ? r.dbias : r.dscale) = o;
      if (r.dbias == o) r.dy = arg;
    } else {
      return kNotTheKernel;
    }
  }
  if (r.dx < 0) return kNotTheKernel;
  if (r.dscale < 0 || r.dbias < 0)
    return "its scale or bias gets no gradient here: the backward kernel computes both";
  for (int a : outside)
    if (a != r.dy) {
      if (r.prior >= 0) return kNotTheKernel;
      r.prior = a;
    }
  if (outside.size() > 2 || !same_shape_and_float(g[r.dy], g[r.x]) || g[r.dx].dtype != g[r.x].dtype)
    return kNotTheKernel;
  // dx sums the layer norm's parts, and, when other readers of x gave it a
  // gradient first (the residual stream), that gradient: the operands from
  // outside of the adds that end at dx. That gradient may be dy itself
  // (y + x: autodiff hands both the same gradient).
  const std::set<int> in_bwd(bwd->begin(), bwd->end());
  std::set<int> summed;
  std::vector<int> adds = {r.dx};
  while (!adds.empty()) {
    const Node& v = g[adds.back()];
    adds.pop_back();
    if (v.op != Op::kAdd) continue;
    for (int a : v.args) {
      if (in_bwd.count(a))
        adds.push_back(a);
      else
        summed.insert(a);
    }
  }
  if (r.prior < 0 && summed == std::set<int>{r.dy}) r.prior = r.dy;
  if (summed != (r.prior < 0 ? std::set<int>{} : std::set<int>{r.prior})) return kNotTheKernel;
  return "";
}

// Causal self-attention (dsl/transformer.cpp, CausalSelfAttention).
// Forward: one operand, the packed projection [B, T, H, 3D] (q, k, v of a
// head side by side), read by three slices; one result read outside, the
// heads' outputs [B, T, H, D]. Backward: one operand from outside, dy (y's
// gradient), besides forward values; one result, the packed projection's
// gradient.
struct AttentionRoles {
  int qkv = -1, y = -1;
  int dy = -1, dqkv = -1;
};


std::string map_attention(const Mapper& m, const ir::Composite& c, const std::vector<int>& fwd,
                          const std::vector<int>* bwd, AttentionRoles& r) {
  const ir::Graph& g = m.g_;
  std::string why;
  const std::set<int> region = region_of(g, fwd, bwd, "attention", why);
  if (!why.empty()) return why;
  const std::vector<int> ops = computed_operands(m, fwd);
  const std::vector<int> outs = m.results(fwd, region);
  if (ops.size() != 1 || outs.size() != 1) return kNotTheKernel;
  r.qkv = ops[0];
  r.y = outs[0];
  const Node& qkv = g[r.qkv];
  const Node& y = g[r.y];
  const int64_t d = c.head_dim;
  if (qkv.shape.size() != 4 || qkv.shape[3] != 3 * d || y.op != Op::kTranspose ||
      y.shape != ir::Shape{qkv.shape[0], qkv.shape[1], qkv.shape[2], d} || y.dtype != qkv.dtype)
    return kNotTheKernel;
  if (qkv.dtype != ir::DType::kF32 && qkv.dtype != ir::DType::kBF16)
    return std::string("its input is ") + ir::dtype_name(qkv.dtype).data() + ": the attention kernels read f32 or bf16";
  // q, k and v: the projection's three slices of D along its last dimension.
  std::set<int64_t> starts;
  int dots = 0;
  for (int id : fwd) {
    const Node& v = g[id];
    dots += v.op == Op::kDot;
    if (v.op == Op::kSlice && v.args[0] == r.qkv && v.ints.size() == 3 && v.ints[0] == 3 && v.ints[2] == d)
      starts.insert(v.ints[1]);
  }
  if (starts != std::set<int64_t>{0, d, 2 * d} || dots != 2) return kNotTheKernel;
  if (!bwd) return "";
  const std::vector<int> outside = from_outside(m, fwd, *bwd, {r.qkv});
  const std::vector<int> bouts = m.results(*bwd, region);
  if (outside.size() != 1 || bouts.size() != 1) return kNotTheKernel;
  r.dy = outside[0];
  r.dqkv = bouts[0];
  if (g[r.dy].shape != y.shape || g[r.dy].dtype != y.dtype || g[r.dqkv].shape != qkv.shape ||
      g[r.dqkv].dtype != qkv.dtype)
    return kNotTheKernel;
  return "";
}

// Softmax cross-entropy (dsl/ops.cpp, softmax_cross_entropy): per-example
// losses, the mean over the batch left outside. Forward: operands the
// logits [..., V] and the f32 labels [...]; one result, the losses [...].
// Backward: one operand from outside, the losses' gradient [...], besides
// forward values; one result, the logits' gradient.
struct CrossEntropyRoles {
  int logits = -1, labels = -1, loss = -1;
  int dloss = -1, dlogits = -1;
};

std::string map_cross_entropy(const Mapper& m, const std::vector<int>& fwd, const std::vector<int>* bwd,
                              CrossEntropyRoles& r) {
  const ir::Graph& g = m.g_;
  std::string why;
  const std::set<int> region = region_of(g, fwd, bwd, "a loss", why);
  if (!why.empty()) return why;
  const std::vector<int> ops = computed_operands(m, fwd);
  const std::vector<int> outs = m.results(fwd, region);
  if (ops.size() != 2 || outs.size() != 1) return kNotTheKernel;
  r.loss = outs[0];
  const ir::Shape& rows = g[r.loss].shape;
  for (int a : ops) {
    ir::Shape batch = g[a].shape;
    if (!batch.empty()) batch.pop_back();
    (g[a].shape == rows ? r.labels : batch == rows ? r.logits : r.loss) = a;
  }
  if (r.logits < 0 || r.labels < 0 || r.loss != outs[0] || g[r.loss].dtype != ir::DType::kF32) return kNotTheKernel;
  if (g[r.labels].dtype != ir::DType::kF32)
    return std::string("its labels are ") + ir::dtype_name(g[r.labels].dtype).data() +
           ": the cross_entropy kernel reads the DSL's float labels";
  if (g[r.logits].dtype != ir::DType::kF32 && g[r.logits].dtype != ir::DType::kBF16)
    return std::string("its logits are ") + ir::dtype_name(g[r.logits].dtype).data() +
           ": the cross_entropy kernel reads f32 or bf16";
  // logsumexp (one exp, one log) less the logit one_hot picks (an equal).
  int exps = 0, logs = 0, equals = 0;
  for (int id : fwd) {
    exps += g[id].op == Op::kExp;
    logs += g[id].op == Op::kLog;
    equals += g[id].op == Op::kEqual;
  }
  if (exps != 1 || logs != 1 || equals != 1) return kNotTheKernel;
  if (!bwd) return "";
  const std::vector<int> outside = from_outside(m, fwd, *bwd, {r.logits, r.labels});
  const std::vector<int> bouts = m.results(*bwd, region);
  if (outside.size() != 1 || bouts.size() != 1) return kNotTheKernel;
  r.dloss = outside[0];
  r.dlogits = bouts[0];
  if (g[r.dloss].shape != rows || g[r.dloss].dtype != ir::DType::kF32 ||
      g[r.dlogits].shape != g[r.logits].shape || g[r.dlogits].dtype != g[r.logits].dtype)
    return kNotTheKernel;
  return "";
}

// Embedding (dsl/transformer.cpp, Embedding::operator()): dot(dt(one_hot(ids)),
// dt(table)), one_hot(ids) = equal(broadcast(f32(ids)), iota over the
// classes). Forward: operands the ids (f32 labels or i32) and the f32 table
// [V, E] (this device's rows); one result, the dot [..., E]. Backward: one
// operand from outside, the dot's gradient dy, and, when another use of the
// table gave it a gradient first (GPT-2's tied head), that gradient
// (prior); one result, the table's gradient: dot(one_hot, dy) [V, E], in f32
// (converted from dt), plus prior.
struct EmbeddingRoles {
  int ids = -1, table = -1, out = -1;
  std::vector<std::string> vocab_axes;  // the mesh axes that split the classes, major first
  int dy = -1, prior = -1, dtable = -1;
  bool round_bf16 = false;              // the gradient's dot is bf16, converted to f32
  std::vector<int> kernel_nodes;        // the backward nodes the kernel computes
};

std::string map_embedding(const Mapper& m, const std::vector<int>& fwd, const std::vector<int>* bwd,
                          EmbeddingRoles& r) {
  const ir::Graph& g = m.g_;
  std::string why;
  const std::set<int> region = region_of(g, fwd, bwd, "an embedding", why);
  if (!why.empty()) return why;
  const std::set<int> in(fwd.begin(), fwd.end());
  auto through_converts = [&](int x, const std::set<int>& within) {
    while (g[x].op == Op::kConvert && within.count(x)) x = g[x].args[0];
    return x;
  };
  const std::vector<int> outs = m.results(fwd, region);
  if (outs.size() != 1 || g[outs[0]].op != Op::kDot) return kNotTheKernel;
  r.out = outs[0];
  const Node& dot = g[r.out];
  const int hot = through_converts(dot.args[0], in);
  r.table = through_converts(dot.args[1], in);
  const int rows = static_cast<int>(g[hot].shape.size()) - 1;
  if (g[hot].op != Op::kEqual || g[r.table].shape.size() != 2 || rows < 0 ||
      dot.dot != ir::DotDims{{}, {}, {rows}, {0}} || g[r.out].shape.back() != g[r.table].shape[1])
    return kNotTheKernel;
  if (g[r.table].dtype != ir::DType::kF32)
    return std::string("its table is ") + ir::dtype_name(g[r.table].dtype).data() +
           ": the embedding kernels read an f32 table";
  if (g[r.out].dtype != ir::DType::kF32 && g[r.out].dtype != ir::DType::kBF16) return kNotTheKernel;
  // equal(broadcast(labels), iota over the last dim), in either order.
  int labels = -1, iota = -1;
  for (int a : g[hot].args) (g[a].op == Op::kIota ? iota : labels) = a;
  if (iota < 0 || labels < 0 || g[labels].op != Op::kBroadcast || !in.count(labels) ||
      g[iota].ints.at(0) != rows || g[iota].shape.back() != g[r.table].shape[0])
    return kNotTheKernel;
  r.ids = through_converts(g[labels].args[0], in);
  ir::Shape tokens = g[hot].shape;
  tokens.pop_back();
  if (g[r.ids].shape != tokens || (g[r.ids].dtype != ir::DType::kF32 && g[r.ids].dtype != ir::DType::kI32))
    return kNotTheKernel;
  if (g[iota].sharding) r.vocab_axes = g[iota].sharding->dims.at(rows);
  // Nothing else computes: the forward is the lookup alone.
  for (int id : fwd)
    if (id != r.out && id != hot && id != labels && g[id].op != Op::kConvert) return kNotTheKernel;
  if (!bwd) return "";

  // The gradient: dot(one_hot, dy) [V, E], converted to f32 when it ran in
  // bf16; then, when the table had a gradient before (prior), an add. The
  // kernel computes up to the add, or up to the first collective (partial
  // sums over a split batch, all-reduced before the add, which then stays).
  const std::set<int> bin(bwd->begin(), bwd->end());
  int grad = -1;
  for (int id : *bwd)
    if (g[id].op == Op::kDot) grad = grad < 0 ? id : -2;
  if (grad < 0 || through_converts(g[grad].args[0], in) != hot) return kNotTheKernel;
  r.dy = g[grad].args[1];
  std::vector<int> token_dims(rows);
  for (int d = 0; d < rows; ++d) token_dims[d] = d;
  if (g[grad].dot != ir::DotDims{{}, {}, token_dims, token_dims} || g[r.dy].shape != g[r.out].shape ||
      g[r.dy].dtype != g[r.out].dtype || bin.count(r.dy))
    return kNotTheKernel;
  r.dtable = grad;
  r.kernel_nodes = {grad};
  auto only_reader = [&](int x) {
    return m.users_[x].size() == 1 && bin.count(m.users_[x][0]) ? m.users_[x][0] : -1;
  };
  if (const int c = only_reader(r.dtable); c >= 0 && g[c].op == Op::kConvert) {
    r.round_bf16 = g[r.dtable].dtype == ir::DType::kBF16;
    r.dtable = c;
    r.kernel_nodes.push_back(c);
  }
  if (const int a = only_reader(r.dtable); a >= 0 && g[a].op == Op::kAdd) {
    r.prior = g[a].args[0] == r.dtable ? g[a].args[1] : g[a].args[0];
    if (bin.count(r.prior)) return kNotTheKernel;
    r.dtable = a;
    r.kernel_nodes.push_back(a);
  }
  // What the kernel does not compute stays: an add after the collectives.
  for (int id : *bwd)
    if (std::find(r.kernel_nodes.begin(), r.kernel_nodes.end(), id) == r.kernel_nodes.end() &&
        !(g[id].op == Op::kAdd && r.prior < 0))
      return kNotTheKernel;
  if (g[r.dtable].dtype != ir::DType::kF32 || g[r.dtable].shape != g[r.table].shape)
    return std::string("its table's gradient leaves it as ") + ir::dtype_name(g[r.dtable].dtype).data() +
           " (before a collective): the embedding_grad kernel writes it in f32";
  if (r.prior >= 0 && (g[r.prior].dtype != ir::DType::kF32 || g[r.prior].shape != g[r.table].shape))
    return kNotTheKernel;
  return "";
}

// The gradients' global norm and clip factor (dsl/train.cpp, train_step;
// optax.clip_by_global_norm). Operands: the gradients, each squared and
// summed. Results: the norm (an output), and with clipping each gradient
// scaled by the factor min(1, max_norm / max(norm, 1e-30)). The kernel
// computes the norm and the factor; the scaling stays (it reads the
// factor the kernel writes).
struct GlobalNormRoles {
  std::vector<int> grads;   // in first-read order
  int norm = -1, factor = -1;
  double max_norm = 0;      // 0: no clipping
  std::set<int> kept;       // the scaling and the factor's broadcasts
};

// The constant `x` is, through broadcasts, or NaN.
double constant_value(const ir::Graph& g, int x) {
  while (g[x].op == Op::kBroadcast) x = g[x].args[0];
  return g[x].op == Op::kConstant ? g[x].scalar : std::nan("");
}

std::string map_global_norm(const Mapper& m, const std::vector<int>& part, GlobalNormRoles& r) {
  const ir::Graph& g = m.g_;
  const std::set<int> in(part.begin(), part.end());
  for (int id : part) {
    if (g[id].remat) return kNotTheKernel;
    if (g[id].op == Op::kSqrt) r.norm = r.norm < 0 ? id : -2;
    if (g[id].op == Op::kMin) r.factor = r.factor < 0 ? id : -2;
  }
  if (r.norm < 0 || r.factor == -2) return kNotTheKernel;
  r.grads = computed_operands(m, part);
  for (int x : r.grads)
    if (g[x].dtype != ir::DType::kF32) return "a gradient is not f32: the global_norm kernel reads f32";
  if (r.factor >= 0) {
    // factor = min(1, max_norm / max(norm, 1e-30)).
    const Node& f = g[r.factor];
    const int ratio = constant_value(g, f.args[0]) == 1.0 ? f.args[1] : f.args[0];
    if (g[ratio].op != Op::kDiv) return kNotTheKernel;
    r.max_norm = constant_value(g, g[ratio].args[0]);
    if (!(r.max_norm > 0)) return kNotTheKernel;
    // The kernel's factor is optax's: the denominator max(norm, 1e-30).
    const Node& d = g[g[ratio].args[1]];
    const bool optax = d.op == Op::kMax && d.args.size() == 2 &&
                       ((d.args[0] == r.norm && constant_value(g, d.args[1]) == 1e-30) ||
                        (d.args[1] == r.norm && constant_value(g, d.args[0]) == 1e-30));
    if (!optax)
      return "its clip factor is not optax's min(1, max_norm / norm) (TrainOptions::clip_form): the kernel "
             "computes only that one";
    // What reads the factor inside: broadcasts, and the muls that scale.
    std::vector<int> readers = {r.factor};
    while (!readers.empty()) {
      const int x = readers.back();
      readers.pop_back();
      for (int u : m.users_[x]) {
        if (!in.count(u)) continue;
        if (g[u].op == Op::kBroadcast) {
          r.kept.insert(u);
          readers.push_back(u);
        } else if (g[u].op == Op::kMul && g[u].args.size() == 2) {
          const int other = g[u].args[0] == x ? g[u].args[1] : g[u].args[0];
          if (std::find(r.grads.begin(), r.grads.end(), other) == r.grads.end()) return kNotTheKernel;
          r.kept.insert(u);
        } else if (u != r.factor && g[u].op != Op::kMin) {
          return kNotTheKernel;
        }
      }
    }
  }
  // Read outside the region: the norm, and the scaled gradients only.
  std::set<int> region(part.begin(), part.end());
  for (int o : m.results(part, region))
    if (o != r.norm && !(r.kept.count(o) && g[o].op == Op::kMul)) return kNotTheKernel;
  return "";
}

// The global norm's replacement: a kernel node for the norm, operands the
// gradients, ints = {tensors}, scalar = max_norm (0: no clipping), and a
// kernel_output for the clip factor; the scaling is kept.
// `base`: the index the replacement will have.
Replacement replace_global_norm(const ir::Graph& g, const GlobalNormRoles& r, const std::vector<int>& part,
                                int base) {
  auto old = [](int id) { return Arg{id, -1, -1}; };
  Replacement rep;
  for (int id : part)
    if (!r.kept.count(id)) rep.removed.push_back(id);
  NewNode k{kernel_node(g[r.norm], "global_norm"), {}, r.norm};
  for (int x : r.grads) k.args.push_back(old(x));
  k.node.ints = {static_cast<int>(r.grads.size())};
  k.node.scalar = r.max_norm;
  rep.nodes.push_back(std::move(k));
  if (r.factor >= 0)
    rep.nodes.push_back({kernel_node(g[r.factor], "global_norm.clip_factor"), {Arg{-1, base, 0}}, r.factor});
  return rep;
}

// One parameter's Adam(W) update (dsl/train.cpp): operands the parameter
// w, its moments m and v, its gradient g, the learning rate and the step
// count t; results the three new values, each the update of its old one.
struct AdamRoles {
  int w = -1, g = -1, m = -1, v = -1, lr = -1, count = -1;
  int new_w = -1, new_m = -1, new_v = -1;
};

// The scalar operand `node` reads, through broadcasts: one of `ops`, or a
// constant (a constant learning rate), or -1.
int scalar_operand(const ir::Graph& g, int node, const std::vector<int>& ops) {
  for (int a : g[node].args) {
    int x = a;
    while (g[x].op == Op::kBroadcast) x = g[x].args[0];
    if (g[x].shape.empty() && (g[x].op == Op::kConstant || std::find(ops.begin(), ops.end(), x) != ops.end()))
      return x;
  }
  return -1;
}

std::string map_adam(const Mapper& m, const std::vector<int>& part, AdamRoles& r) {
  const ir::Graph& g = m.g_;
  for (int id : part)
    if (g[id].remat) return kNotTheKernel;
  const std::set<int> in(part.begin(), part.end());
  for (const ir::Update& u : g.updates) {
    if (!in.count(u.value)) continue;
    const std::string& target = g[u.target].name;
    const std::string& name = g.composites[g[part.front()].composite].label;
    const bool is_m = target == "opt/m/" + name, is_v = target == "opt/v/" + name;
    (is_m ? r.m : is_v ? r.v : r.w) = u.target;
    (is_m ? r.new_m : is_v ? r.new_v : r.new_w) = u.value;
  }
  if (r.w < 0 || r.m < 0 || r.v < 0 || g[r.w].op != Op::kParameter) return kNotTheKernel;
  const std::vector<int> ops = m.operands(part);
  const std::vector<int> outs = m.results(part, in);
  if (std::set<int>(outs.begin(), outs.end()) != std::set<int>{r.new_w, r.new_m, r.new_v}) return kNotTheKernel;
  // new_w = w - update * lr: lr is the scalar of the last mul; the step
  // count is the other scalar.
  const Node& nw = g[r.new_w];
  if (nw.op != Op::kSub || nw.args[0] != r.w || g[nw.args[1]].op != Op::kMul) return kNotTheKernel;
  r.lr = scalar_operand(g, nw.args[1], ops);
  for (int a : ops) {
    if (a == r.w || a == r.m || a == r.v || a == r.lr) continue;
    if (g[a].shape.empty() && r.count < 0) {
      r.count = a;
    } else if (g[a].shape == g[r.w].shape && r.g < 0) {
      r.g = a;
    } else {
      return kNotTheKernel;
    }
  }
  if (r.lr < 0 || r.count < 0 || r.g < 0) return kNotTheKernel;
  for (int x : {r.w, r.g, r.m, r.v, r.lr, r.count, r.new_w, r.new_m, r.new_v})
    if (g[x].dtype != ir::DType::kF32) return "its parameter or gradient is not f32: the AdamW kernel updates f32 values";
  return "";
}

// One multi-tensor AdamW launch for the updates in `group` (each a part's
// roles): a kernel node whose value is the first parameter's new value,
// operands (lr, t, then per tensor w, g, m, v), ints = {tensors}, and a
// kernel_output per further new value, ints = {its tensor}.
// `base`: the index the replacement will have.
Replacement replace_adams(const ir::Graph& g, const std::vector<AdamRoles>& group,
                          const std::vector<std::vector<int>>& parts, int base) {
  auto old = [](int id) { return Arg{id, -1, -1}; };
  Replacement r;
  for (const std::vector<int>& p : parts) r.removed.insert(r.removed.end(), p.begin(), p.end());
  NewNode k{kernel_node(g[group[0].new_w], "adamw"), {old(group[0].lr), old(group[0].count)}, group[0].new_w};
  k.node.ints = {static_cast<int>(group.size())};
  for (const AdamRoles& a : group)
    for (int x : {a.w, a.g, a.m, a.v}) k.args.push_back(old(x));
  r.nodes.push_back(std::move(k));
  for (size_t t = 0; t < group.size(); ++t) {
    const AdamRoles& a = group[t];
    for (auto [role, value] : {std::pair<const char*, int>{"param", a.new_w}, {"m", a.new_m}, {"v", a.new_v}}) {
      if (t == 0 && value == a.new_w) continue;  // the kernel node itself
      NewNode o{kernel_node(g[value], std::string("adamw.") + role), {Arg{-1, base, 0}}, value};
      o.node.ints = {static_cast<int>(t)};
      r.nodes.push_back(std::move(o));
    }
  }
  return r;
}

// The replacements of one layer norm region: forward, then backward.
// `base`: the index the forward's replacement will have.
void replace_layer_norm(const ir::Graph& g, const ir::Composite& c, const LayerNormRoles& r,
                        const std::vector<int>& fwd, const std::vector<int>* bwd, int base,
                        std::vector<Replacement>& out) {
  auto old = [](int id) { return Arg{id, -1, -1}; };
  auto made = [](int rep, int index) { return Arg{-1, rep, index}; };
  Replacement f;
  f.removed = fwd;
  NewNode k{kernel_node(g[r.y], "layernorm_forward"), {old(r.x), old(r.scale), old(r.bias)}, r.y};
  k.node.scalar = c.eps;
  f.nodes.push_back(std::move(k));
  if (bwd)  // the statistics: one per row, [..., 1] f32, laid out like y's rows
    for (const char* stat : {"mean", "rstd"}) {
      NewNode s{kernel_node(g[r.y], std::string("layernorm_forward.") + stat), {made(base, 0)}, -1};
      s.node.shape.back() = 1;
      s.node.dtype = ir::DType::kF32;  // whatever y's dtype
      f.nodes.push_back(std::move(s));
    }
  out.push_back(std::move(f));
  if (!bwd) return;
  Replacement b;
  b.removed = *bwd;
  NewNode kb{kernel_node(g[r.dx], "layernorm_backward"),
             {old(r.dy), old(r.x), old(r.scale), made(base, 1), made(base, 2)},
             r.dx};
  if (r.prior >= 0) kb.args.push_back(old(r.prior));
  kb.node.ints = {r.prior >= 0 ? 1 : 0};
  b.nodes.push_back(std::move(kb));
  b.nodes.push_back({kernel_node(g[r.dscale], "layernorm_backward.dscale"), {made(base + 1, 0)}, r.dscale});
  b.nodes.push_back({kernel_node(g[r.dbias], "layernorm_backward.dbias"), {made(base + 1, 0)}, r.dbias});
  out.push_back(std::move(b));
}

// The replacements of one attention region: forward (y and the rows'
// log-sum-exp, lse [B, H, T] f32, which the forward kernel always writes),
// then backward (dqkv from dy, qkv, y and lse). The kernel's scale is the
// DSL's 1/sqrt(D) on q; the mask is causal (kernel_select.cpp checks).
void replace_attention(const ir::Graph& g, const ir::Composite& c, const AttentionRoles& r,
                       const std::vector<int>& fwd, const std::vector<int>* bwd, int base,
                       std::vector<Replacement>& out) {
  auto old = [](int id) { return Arg{id, -1, -1}; };
  auto made = [](int rep, int index) { return Arg{-1, rep, index}; };
  Replacement f;
  f.removed = fwd;
  NewNode k{kernel_node(g[r.y], "attention_forward"), {old(r.qkv)}, r.y};
  k.node.scalar = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  f.nodes.push_back(std::move(k));
  const ir::Shape& s = g[r.qkv].shape;
  NewNode lse{kernel_node(g[r.y], "attention_forward.lse"), {made(base, 0)}, -1};
  lse.node.shape = {s[0], s[2], s[1]};
  lse.node.dtype = ir::DType::kF32;
  if (const auto& sh = g[r.y].sharding; sh && sh->rank() == 4)  // y's (B, T, H, D) layout as (B, H, T)
    lse.node.sharding = ir::Sharding{{sh->dims[0], sh->dims[2], sh->dims[1]}, sh->partial, sh->partial_kind};
  f.nodes.push_back(std::move(lse));
  out.push_back(std::move(f));
  if (!bwd) return;
  Replacement b;
  b.removed = *bwd;
  NewNode kb{kernel_node(g[r.dqkv], "attention_backward"),
             {old(r.dy), old(r.qkv), made(base, 0), made(base, 1)},
             r.dqkv};
  kb.node.scalar = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  b.nodes.push_back(std::move(kb));
  out.push_back(std::move(b));
}

// The replacements of one cross-entropy region: the forward launch writes
// the losses; the backward's writes the logits' gradient (and the losses
// again, into its scratch).
void replace_cross_entropy(const ir::Graph& g, const CrossEntropyRoles& r, const std::vector<int>& fwd,
                           const std::vector<int>* bwd, std::vector<Replacement>& out) {
  auto old = [](int id) { return Arg{id, -1, -1}; };
  Replacement f;
  f.removed = fwd;
  f.nodes.push_back({kernel_node(g[r.loss], "cross_entropy"), {old(r.logits), old(r.labels)}, r.loss});
  out.push_back(std::move(f));
  if (!bwd) return;
  Replacement b;
  b.removed = *bwd;
  b.nodes.push_back(
      {kernel_node(g[r.dlogits], "cross_entropy"), {old(r.logits), old(r.labels), old(r.dloss)}, r.dlogits});
  out.push_back(std::move(b));
}

// The replacements of one embedding region: the lookup, and the scatter-add
// of its gradient (ints = {prior given, bf16 rounding}). Both carry the mesh
// axes that split the vocabulary (the table's first row is this device's
// block start along them).
void replace_embedding(const ir::Graph& g, const EmbeddingRoles& r, const std::vector<int>& fwd,
                       const std::vector<int>* bwd, std::vector<Replacement>& out) {
  auto old = [](int id) { return Arg{id, -1, -1}; };
  Replacement f;
  f.removed = fwd;
  NewNode kf{kernel_node(g[r.out], "embedding_lookup"), {old(r.table), old(r.ids)}, r.out};
  kf.node.axes = r.vocab_axes;
  f.nodes.push_back(std::move(kf));
  out.push_back(std::move(f));
  if (!bwd) return;
  Replacement b;
  b.removed = r.kernel_nodes;
  std::sort(b.removed.begin(), b.removed.end());
  NewNode kb{kernel_node(g[r.dtable], "embedding_grad"), {old(r.dy), old(r.ids)}, r.dtable};
  if (r.prior >= 0) kb.args.push_back(old(r.prior));
  kb.node.ints = {r.prior >= 0, r.round_bf16};
  kb.node.axes = r.vocab_axes;
  b.nodes.push_back(std::move(kb));
  out.push_back(std::move(b));
}

// The rewrite, or the index of a replacement that cannot be placed: one
// whose results an old node reads before its operands all exist. A
// replacement is placed at its first removed node, or as soon as its
// operands exist after that.
struct Rewrite {
  ir::Graph graph;
  int failed = -1;
};

Rewrite rewrite(const ir::Graph& g, const std::vector<Replacement>& reps) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> removed_by(n, -1), first(reps.size(), n);
  for (size_t k = 0; k < reps.size(); ++k)
    for (int id : reps[k].removed) {
      removed_by[id] = static_cast<int>(k);
      first[k] = std::min(first[k], id);
    }
  Rewrite r;
  r.graph = g;
  r.graph.nodes.clear();
  std::vector<int> remap(n, -1);
  std::vector<std::vector<int>> made(reps.size());
  std::vector<bool> placed(reps.size(), false);
  auto resolve = [&](const Arg& a) {
    if (a.old >= 0) return remap[a.old];
    return a.index < static_cast<int>(made[a.replacement].size()) ? made[a.replacement][a.index] : -1;
  };
  // The replacements not placed whose first removed node has been reached,
  // in index order (a set: a large graph has thousands of replacements,
  // and every node visits only these).
  std::vector<size_t> by_first(reps.size());
  std::iota(by_first.begin(), by_first.end(), size_t{0});
  std::stable_sort(by_first.begin(), by_first.end(), [&](size_t a, size_t b) { return first[a] < first[b]; });
  size_t next = 0;
  std::set<size_t> pending;
  auto place_ready = [&](int reached) {
    while (next < by_first.size() && first[by_first[next]] <= reached) pending.insert(by_first[next++]);
    for (auto it = pending.begin(); it != pending.end();) {
      const size_t k = *it;
      bool ready = true;
      for (const NewNode& nn : reps[k].nodes)
        for (const Arg& a : nn.args)
          ready = ready && (resolve(a) >= 0 || (a.replacement == static_cast<int>(k)));
      if (!ready) {
        ++it;
        continue;
      }
      for (const NewNode& nn : reps[k].nodes) {
        Node node = nn.node;
        for (const Arg& a : nn.args) node.args.push_back(resolve(a));
        if (node.layout_of >= 0) node.layout_of = remap[node.layout_of];
        const int id = r.graph.add(std::move(node));
        made[k].push_back(id);
        if (nn.replaces >= 0) remap[nn.replaces] = id;
      }
      placed[k] = true;
      it = pending.erase(it);
    }
  };
  for (int id = 0; id < n; ++id) {
    place_ready(id);
    if (removed_by[id] >= 0) continue;
    Node node = g.nodes[id];
    for (int& a : node.args) {
      if (remap[a] < 0) {
        r.failed = removed_by[a];
        return r;
      }
      a = remap[a];
    }
    if (node.layout_of >= 0) node.layout_of = remap[node.layout_of];
    remap[id] = r.graph.add(std::move(node));
    place_ready(id);
  }
  for (size_t k = 0; k < reps.size(); ++k)
    if (!placed[k]) {
      r.failed = static_cast<int>(k);
      return r;
    }
  remap_roots(r.graph, remap);
  // What only the removed nodes read goes too (a constant, an iota, a
  // broadcast): inputs and parameters stay.
  std::vector<bool> had_users(n, false);
  for (const Node& v : g.nodes)
    for (int a : v.args) had_users[a] = true;
  std::vector<bool> was_read(r.graph.nodes.size(), false);
  for (int id = 0; id < n; ++id)
    if (remap[id] >= 0 && removed_by[id] < 0) was_read[remap[id]] = had_users[id];
  std::vector<int> uses = count_uses(r.graph);
  for (auto& gr : r.graph.gradients) ++uses[gr.value];
  std::vector<bool> dead(r.graph.nodes.size(), false);
  for (size_t i = r.graph.nodes.size(); i-- > 0;) {
    const Node& v = r.graph.nodes[i];
    if (!was_read[i] || uses[i] > 0 || v.op == Op::kParameter || v.op == Op::kInput || v.op == Op::kSend ||
        v.op == Op::kRecv)
      continue;
    dead[i] = true;
    for (int a : v.args) --uses[a];
  }
  r.graph = drop_nodes(r.graph, dead, "use_gpu_kernels");
  return r;
}

// ---- GEMM epilogues ---------------------------------------------------------

// `d` runs as one plain cuBLASLt GEMM whose result only the epilogue reads:
// a dot outside every region and every replacement, one GEMM of its local
// shapes (no batch, no operand copied first, its free rhs dimension last),
// all of one float type, with a width that cuBLASLt's epilogue buffers
// allow (a multiple of 8), read once and by nothing outside the program.
bool epilogue_gemm(const Mapper& m, int d, const std::set<int>& taken) {
  const ir::Graph& g = m.g_;
  const Node& v = g[d];
  if (v.op != Op::kDot || v.composite >= 0 || taken.count(d) || m.outside_[d] || m.users_[d].size() != 1)
    return false;
  const Node &l = g[v.args[0]], &r = g[v.args[1]];
  if ((v.dtype != ir::DType::kF32 && v.dtype != ir::DType::kBF16) || l.dtype != v.dtype || r.dtype != v.dtype)
    return false;
  const LocalDotLayout lay = local_dot_layout(v.dot, l.shape, r.shape);
  return lay.B == 1 && !lay.transpose_lhs && !lay.transpose_rhs && !v.shape.empty() && v.shape.back() == lay.N &&
         lay.N % 8 == 0 && lay.M < (int64_t{1} << 31) && lay.N < (int64_t{1} << 31) && lay.K < (int64_t{1} << 31);
}

// The kernel node of an epilogue GEMM in `like`'s place: the dot's line and
// label (the GEMM is the work), the dot dims.
Node gemm_node(const Node& like, const Node& dot, const std::string& kernel) {
  Node n = kernel_node(like, kernel);
  n.loc = dot.loc;
  n.name = dot.name;
  n.dot = dot.dot;
  return n;
}

// Every GEMM whose elementwise reader cuBLASLt can apply as it writes the
// result (KernelSet::gemm's epilogues), each one replacement:
//   forward:  z = dot + broadcast(bias) [, y = gelu(z)], or y = gelu(dot):
//             c [, pre_gelu] = gemm_bias | gemm_gelu | gemm_bias_gelu(a, b[, bias])
//             pre_gelu (a kernel_output) is z, written when the program
//             reads z elsewhere (the gelu's gradient does);
//   backward: gy * gelu'(x) as autodiff writes it (match_gelu_gradient),
//             gy a GEMM's result: dx = gemm_dgelu(a, b, x).
// The dot dims ride on the kernel node. Nodes of `taken` (the regions'
// replacements) are left alone; the first is replacement `base`.
std::vector<Replacement> gemm_epilogues(const Mapper& m, const std::set<int>& taken, int base) {
  const ir::Graph& g = m.g_;
  auto old = [](int id) { return Arg{id, -1, -1}; };
  auto only_user = [&](int id) { return m.users_[id].size() == 1 ? *m.users_[id].begin() : -1; };
  std::vector<Replacement> out;
  for (int d = 0; d < static_cast<int>(g.nodes.size()); ++d) {
    if (!epilogue_gemm(m, d, taken)) continue;
    const Node& dot = g[d];
    const int reader = only_user(d);
    if (taken.count(reader)) continue;
    // The backward: the dot is gy of a gelu's gradient.
    if (const auto grad = match_gelu_gradient(g, reader); grad && grad->gy == d) {
      if (g[grad->x].dtype != dot.dtype || g[grad->x].shape != dot.shape) continue;
      Replacement r;
      r.removed = {d, reader};
      r.nodes.push_back({gemm_node(g[reader], dot, "gemm_dgelu"), {old(dot.args[0]), old(dot.args[1]), old(grad->x)},
                         reader});
      out.push_back(std::move(r));
      continue;
    }
    // The forward: the bias add, then gelu, each where it is there.
    int bias = -1, z = -1;
    const Node& rd = g[reader];
    if (rd.op == Op::kAdd) {
      const int other = rd.args[0] == d ? rd.args[1] : rd.args[0];
      const Node& b = g[other];
      if (other == d || b.op != Op::kBroadcast || b.ints != std::vector<int>{static_cast<int>(dot.shape.size()) - 1})
        continue;
      const Node& vec = g[b.args[0]];
      if (vec.shape != ir::Shape{dot.shape.back()} || vec.dtype != dot.dtype || taken.count(b.args[0])) continue;
      bias = b.args[0];
      z = reader;
    }
    // The gelu of the sum, or of the dot itself.
    int y = -1;
    for (int u : m.users_[z >= 0 ? z : d])
      if (g[u].op == Op::kGelu && !taken.count(u)) y = u;
    if (bias < 0 && y < 0) continue;
    // z is written as pre_gelu when anything besides the gelu reads it.
    const bool keep_z = z >= 0 && y >= 0 && (m.outside_[z] || m.users_[z].size() > 1);
    const std::string kernel = std::string("gemm") + (bias >= 0 ? "_bias" : "") + (y >= 0 ? "_gelu" : "");
    const int result = y >= 0 ? y : z;
    Replacement r;
    r.removed = {d};
    if (z >= 0) r.removed.push_back(z);
    if (y >= 0) r.removed.push_back(y);
    std::vector<Arg> args = {old(dot.args[0]), old(dot.args[1])};
    if (bias >= 0) args.push_back(old(bias));
    r.nodes.push_back({gemm_node(g[result], dot, kernel), args, result});
    if (keep_z) r.nodes.push_back({gemm_node(g[z], dot, kernel + ".pre_gelu"), {Arg{-1, base + static_cast<int>(out.size()), 0}}, z});
    out.push_back(std::move(r));
  }
  return out;
}

// A removed node that something other than the replacements reads, or -1.
int read_elsewhere(const Mapper& m, const std::vector<Replacement>& reps) {
  std::set<int> removed, replaced;
  for (const Replacement& r : reps) {
    removed.insert(r.removed.begin(), r.removed.end());
    for (const NewNode& nn : r.nodes)
      if (nn.replaces >= 0) replaced.insert(nn.replaces);
  }
  for (int id : removed) {
    if (replaced.count(id)) continue;
    if (m.outside_[id]) return id;
    for (int u : m.users_[id])
      if (!removed.count(u)) return id;
  }
  return -1;
}

}  // namespace

ir::Graph use_gpu_kernels(const ir::Graph& g, std::vector<KernelChoice>* choices_out) {
  if (!g.partitioned) internal_error("use_gpu_kernels needs a partitioned graph");
  std::vector<KernelChoice> choices = select_kernels(g);
  const Mapper m(g);
  std::map<std::pair<int, bool>, size_t> part;  // (region, backward) -> choice
  for (size_t i = 0; i < choices.size(); ++i) part[{choices[i].composite, choices[i].backward}] = i;
  auto fall_back = [](KernelChoice* c, const std::string& why) {
    if (c && !c->kernel.empty()) {
      c->kernel.clear();
      c->reason = why;
    }
  };
  std::vector<Replacement> reps;
  std::vector<std::vector<size_t>> reps_of;  // per region replaced: its choices
  // The Adam(W) updates, grouped into multi-tensor launches.
  // (b1, b2, eps, weight decay, micro-batch, pipeline region, learning rate):
  // one launch per key.
  using AdamKey = std::tuple<double, double, double, double, int, int, int>;
  struct AdamPart {
    AdamRoles roles;
    std::vector<int> nodes;
    size_t choice;
  };
  std::map<AdamKey, std::vector<AdamPart>> adams;
  for (auto& [key, i] : part) {
    if (key.second) continue;  // a backward part goes with its forward part
    KernelChoice* f = &choices[i];
    auto b_at = part.find({key.first, true});
    KernelChoice* b = b_at == part.end() ? nullptr : &choices[b_at->second];
    const ir::Composite& c = g.composites[key.first];
    if (c.kind == ir::CompositeKind::kAdam && !f->kernel.empty()) {
      AdamRoles roles;
      const std::vector<int> nodes = m.computing(f->nodes);
      if (const std::string why = map_adam(m, nodes, roles); !why.empty()) {
        fall_back(f, why);
        continue;
      }
      // One launch for the updates of one hyper-parameter set (an LrGroup
      // has a learning rate of its own, so a launch of its own); in a
      // pipeline, one per parameter, since each stage updates its own.
      const Node& first = g[nodes.front()];
      AdamKey k{c.b1, c.b2, c.eps, c.weight_decay, first.micro_batch, g.pipeline ? key.first : -1, roles.lr};
      adams[k].push_back({roles, nodes, i});
      continue;
    }
    if (c.kind == ir::CompositeKind::kGlobalNorm && !f->kernel.empty()) {
      GlobalNormRoles roles;
      const std::vector<int> nodes = m.computing(f->nodes);
      std::string why = map_global_norm(m, nodes, roles);
      Replacement r;
      if (why.empty()) {
        r = replace_global_norm(g, roles, nodes, static_cast<int>(reps.size()));
        if (const int id = read_elsewhere(m, {r}); id >= 0)
          why = "the program reads " + ir::describe_value(g[id]) + " from inside it";
      }
      if (!why.empty()) {
        fall_back(f, why);
        continue;
      }
      reps.push_back(std::move(r));
      reps_of.push_back({i});
      continue;
    }
    if (f->kernel.empty() || (b && b->kernel.empty())) {
      const KernelChoice* other = f->kernel.empty() ? f : b;
      const std::string why = std::string("its ") + (other == f ? "forward" : "backward") +
                              " part falls back (" + other->reason + "), and the two kernels go together";
      fall_back(f, why);
      fall_back(b, why);
      continue;
    }
    const std::vector<int> fwd = m.computing(f->nodes);
    const std::vector<int> bwd = b ? m.computing(b->nodes) : std::vector<int>{};
    std::string why;
    std::vector<Replacement> mine;
    const int base = static_cast<int>(reps.size());
    if (c.kind == ir::CompositeKind::kLayerNorm) {
      LayerNormRoles roles;
      why = map_layer_norm(m, fwd, b ? &bwd : nullptr, roles);
      if (why.empty()) replace_layer_norm(g, c, roles, fwd, b ? &bwd : nullptr, base, mine);
    } else if (c.kind == ir::CompositeKind::kAttention) {
      AttentionRoles roles;
      why = map_attention(m, c, fwd, b ? &bwd : nullptr, roles);
      if (why.empty()) replace_attention(g, c, roles, fwd, b ? &bwd : nullptr, base, mine);
    } else if (c.kind == ir::CompositeKind::kEmbedding) {
      EmbeddingRoles roles;
      why = map_embedding(m, fwd, b ? &bwd : nullptr, roles);
      if (why.empty()) replace_embedding(g, roles, fwd, b ? &bwd : nullptr, mine);
    } else {
      CrossEntropyRoles roles;
      why = map_cross_entropy(m, fwd, b ? &bwd : nullptr, roles);
      if (why.empty()) replace_cross_entropy(g, roles, fwd, b ? &bwd : nullptr, mine);
    }
    if (why.empty()) {
      if (const int id = read_elsewhere(m, mine); id >= 0)
        why = "the program reads " + ir::describe_value(g[id]) + " from inside it";
    }
    if (!why.empty()) {
      fall_back(f, why);
      fall_back(b, why);
      continue;
    }
    std::vector<size_t> ks = {i};
    if (b) ks.push_back(b_at->second);
    for (Replacement& r : mine) {
      reps.push_back(std::move(r));
      reps_of.push_back(ks);
    }
  }
  for (auto& [k, members] : adams) {
    std::vector<AdamRoles> group;
    std::vector<std::vector<int>> parts;
    std::vector<size_t> ks;
    for (const AdamPart& a : members) {
      group.push_back(a.roles);
      parts.push_back(a.nodes);
      ks.push_back(a.choice);
    }
    Replacement r = replace_adams(g, group, parts, static_cast<int>(reps.size()));
    if (const int id = read_elsewhere(m, {r}); id >= 0) {
      for (size_t c : ks) fall_back(&choices[c], "the program reads " + ir::describe_value(g[id]) + " from inside it");
      continue;
    }
    reps.push_back(std::move(r));
    reps_of.push_back(ks);
  }
  // The GEMM epilogues, last: each is a replacement of its own, with no
  // region's choice (reps_of empty).
  std::set<int> taken;
  for (const Replacement& r : reps) taken.insert(r.removed.begin(), r.removed.end());
  for (Replacement& r : gemm_epilogues(m, taken, static_cast<int>(reps.size()))) {
    reps.push_back(std::move(r));
    reps_of.emplace_back();
  }
  // Place them; a replacement that cannot be placed falls back with its
  // region's others (an epilogue alone), and the rest are placed again.
  for (;;) {
    Rewrite r = rewrite(g, reps);
    if (r.failed < 0) {
      if (choices_out) *choices_out = std::move(choices);
      return std::move(r.graph);
    }
    const std::vector<size_t> region = reps_of[r.failed];
    for (size_t k : region)
      fall_back(&choices[k], "the program reads its results before all its operands are computed");
    auto dropped_now = [&](size_t k) {
      return region.empty() ? k == static_cast<size_t>(r.failed) : reps_of[k] == region;
    };
    std::vector<Replacement> kept;
    std::vector<std::vector<size_t>> kept_of;
    for (size_t k = 0; k < reps.size(); ++k)
      if (!dropped_now(k)) {
        kept.push_back(std::move(reps[k]));
        kept_of.push_back(reps_of[k]);
      }
    // Operand references into later replacements shift down with them.
    std::vector<int> shift(reps.size(), 0);
    for (size_t k = 0, dropped = 0; k < reps.size(); ++k) {
      if (dropped_now(k)) ++dropped;
      shift[k] = static_cast<int>(dropped);
    }
    for (Replacement& rep : kept)
      for (NewNode& nn : rep.nodes)
        for (Arg& a : nn.args)
          if (a.replacement >= 0) a.replacement -= shift[a.replacement];
    reps = std::move(kept);
    reps_of = std::move(kept_of);
  }
}

}  // namespace sharc
