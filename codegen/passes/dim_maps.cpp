// dim_links and reshape_groups; see dim_maps.h.
#include "codegen/passes/dim_maps.h"

#include <algorithm>

namespace sharc {

std::vector<ReshapeGroup> reshape_groups(const ir::Shape& in, const ir::Shape& out) {
  std::vector<ReshapeGroup> groups;
  int i = 0, j = 0;
  const int ni = static_cast<int>(in.size()), nj = static_cast<int>(out.size());
  while (i < ni || j < nj) {
    // Size-1 dimensions stand alone.
    if (i < ni && in[i] == 1) { groups.push_back({i, i + 1, j, j}); ++i; continue; }
    if (j < nj && out[j] == 1) { groups.push_back({i, i, j, j + 1}); ++j; continue; }
    if (i >= ni || j >= nj) internal_error("reshape element counts differ");
    int i0 = i, j0 = j;
    int64_t pi = in[i++], pj = out[j++];
    while (pi != pj) {
      if (pi < pj) pi *= in[i++];
      else pj *= out[j++];
    }
    groups.push_back({i0, i, j0, j});
  }
  return groups;
}

std::vector<DimLink> dim_links(const ir::Graph& g, const ir::Node& n) {
  std::vector<DimLink> links;
  const int rank = static_cast<int>(n.shape.size());
  if (ir::is_elementwise(n.op) || n.op == ir::Op::kShardingConstraint) {
    for (int a = 0; a < static_cast<int>(n.args.size()); ++a)
      for (int d = 0; d < rank; ++d) links.push_back({a, d, d});
    return links;
  }
  switch (n.op) {
    case ir::Op::kBroadcast: {
      const ir::Shape& in = g[n.args[0]].shape;
      for (int i = 0; i < static_cast<int>(in.size()); ++i)
        if (in[i] == n.shape[n.ints[i]]) links.push_back({0, i, n.ints[i]});
      break;
    }
    case ir::Op::kTranspose:
      for (int i = 0; i < rank; ++i) links.push_back({0, n.ints[i], i});
      break;
    case ir::Op::kSlice:
    case ir::Op::kPad:
      // Every dimension but the sliced/padded one keeps its layout.
      for (int i = 0; i < rank; ++i)
        if (i != n.ints[0]) links.push_back({0, i, i});
      break;
    case ir::Op::kAddSlice:
      for (int a = 0; a < 2; ++a)
        for (int i = 0; i < rank; ++i)
          if (i != n.ints[0]) links.push_back({a, i, i});
      break;
    case ir::Op::kReduce: {
      const int in_rank = static_cast<int>(g[n.args[0]].shape.size());
      int k = 0;
      for (int i = 0; i < in_rank; ++i)
        if (std::find(n.ints.begin(), n.ints.end(), i) == n.ints.end()) links.push_back({0, i, k++});
      break;
    }
    case ir::Op::kReshape:
      // A group's major dimension carries the sharding across (a block of the
      // major dimension is a contiguous block of the merged or split one).
      for (auto& gr : reshape_groups(g[n.args[0]].shape, n.shape))
        if (gr.in_end > gr.in_begin && gr.out_end > gr.out_begin)
          links.push_back({0, gr.in_begin, gr.out_begin});
      break;
    case ir::Op::kDot: {
      const ir::DotDims& d = n.dot;
      const ir::Shape &ls = g[n.args[0]].shape, &rs = g[n.args[1]].shape;
      auto in = [](const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); };
      int k = 0;
      for (size_t i = 0; i < d.lhs_batch.size(); ++i, ++k) {
        links.push_back({0, d.lhs_batch[i], k});
        links.push_back({1, d.rhs_batch[i], k});
      }
      for (int i = 0; i < static_cast<int>(ls.size()); ++i)
        if (!in(d.lhs_batch, i) && !in(d.lhs_contract, i)) links.push_back({0, i, k++});
      for (int i = 0; i < static_cast<int>(rs.size()); ++i)
        if (!in(d.rhs_batch, i) && !in(d.rhs_contract, i)) links.push_back({1, i, k++});
      for (size_t i = 0; i < d.lhs_contract.size(); ++i)
        links.push_back({0, d.lhs_contract[i], -1, 1, d.rhs_contract[i]});
      break;
    }
    default:
      break;
  }
  return links;
}

}  // namespace sharc
