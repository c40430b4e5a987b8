// Kernel selection; see kernel_select.h.
#include "codegen/kernel_select.h"

#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "runtime/gpu/kernel_limits.h"

namespace sharc {

namespace {

using ir::CompositeKind;

// KernelSet's kernel for a region part whose shapes fit.
std::string kernel_for(CompositeKind kind, bool backward) {
  switch (kind) {
    case CompositeKind::kLayerNorm:
      return backward ? "layernorm_backward" : "layernorm_forward";
    case CompositeKind::kAttention:
      return backward ? "attention_backward" : "attention_forward";
    case CompositeKind::kSoftmaxCrossEntropy:
      return "cross_entropy";  // the loss and, in the same launch, its gradient
    case CompositeKind::kAdam:
      return "adamw";  // every parameter's update in one multi-tensor launch
    case CompositeKind::kGlobalNorm:
      return "global_norm";
    case CompositeKind::kEmbedding:
      return backward ? "embedding_grad" : "embedding_lookup";  // a gather, and its deterministic scatter-add
  }
  return "";
}

// Why a part cannot run as its kernel, or "" when it can. A collective
// between two of the part's own nodes splits its computation; one that only
// feeds the part (an input gathered first) or only leaves it (a parameter
// gradient all-reduced after) runs before or after the kernel.
std::string misfit(const ir::Graph& g, const ir::Composite& c, const std::vector<int>& nodes) {
  const std::set<int> in(nodes.begin(), nodes.end());
  // An embedding's collectives sum its dots' partial results (a split
  // vocabulary, a split batch): they run after its kernels, which
  // use_gpu_kernels checks as it maps the region.
  for (int id : nodes) {
    const ir::Node& n = g.nodes[id];
    if (c.kind == CompositeKind::kEmbedding) break;
    if (!ir::is_collective(n.op) && n.op != ir::Op::kRingDot) continue;
    bool from_inside = false, to_inside = false;
    for (int a : n.args) from_inside = from_inside || in.count(a);
    for (int other : nodes)
      for (int a : g.nodes[other].args) to_inside = to_inside || a == id;
    if (from_inside && to_inside) {
      std::string axes;
      for (const std::string& a : n.axes) axes += (axes.empty() ? "'" : ", '") + a + "'";
      const std::string op = ir::op_name(n.op);
      return std::string("the partitioner put ") + (std::string("aeiou").find(op[0]) != std::string::npos ? "an " : "a ") +
             op + (axes.empty() ? "" : " over " + axes) +
             " inside it: the mesh splits a dimension the kernel needs whole";
    }
  }
  if (c.kind == CompositeKind::kAttention) {
    if (!gpu::attention_head_dim_supported(static_cast<int>(c.head_dim))) {
      std::string sizes;
      for (int d : gpu::kAttentionHeadDims) sizes += (sizes.empty() ? "" : ", ") + std::to_string(d);
      return "head size " + std::to_string(c.head_dim) + ": the attention kernels are built for " + sizes;
    }
    if (c.dropout > 0.0) {
      char rate[32];
      std::snprintf(rate, sizeof rate, "%g", c.dropout);
      return std::string("dropout ") + rate + " on the attention weights: the attention kernels have none";
    }
    if (!c.causal) return "a mask other than causal: the attention kernels are causal or full, not masked";
  }
  return "";
}

}  // namespace

std::vector<KernelChoice> select_kernels(const ir::Graph& g) {
  // (region, backward) -> its nodes, in graph order.
  std::map<std::pair<int, bool>, std::vector<int>> parts;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.composite < 0 || ir::is_source(n.op)) continue;
    if (n.composite >= static_cast<int>(g.composites.size()))
      internal_error("select_kernels: node %" + std::to_string(i) + " names composite region " +
                     std::to_string(n.composite) + " of " + std::to_string(g.composites.size()));
    parts[{n.composite, n.backward}].push_back(static_cast<int>(i));
  }
  std::vector<KernelChoice> out;
  for (auto& [key, nodes] : parts) {
    const ir::Composite& c = g.composites[key.first];
    KernelChoice k;
    k.composite = key.first;
    k.backward = key.second;
    k.reason = misfit(g, c, nodes);
    if (k.reason.empty()) k.kernel = kernel_for(c.kind, k.backward);
    k.nodes = std::move(nodes);
    out.push_back(std::move(k));
  }
  return out;
}

std::string format_kernel_choices(const ir::Graph& g, const std::vector<KernelChoice>& choices) {
  std::string out;
  for (const KernelChoice& k : choices) {
    const ir::Composite& c = g.composites[k.composite];
    out += c.loc.str() + " " + (c.label.empty() ? "" : c.label + " ") + ir::composite_name(c.kind) +
           (k.backward ? " backward" : " forward") +
           ": " + (k.kernel.empty() ? "falls back: " + k.reason : k.kernel) + "\n";
  }
  return out;
}

}  // namespace sharc
