// rematerialize: see the header.
#include "codegen/passes/rematerialize.h"

#include <set>
#include <string>
#include <vector>

#include "codegen/passes/drop_nodes.h"

namespace sharc {

namespace {

// Whether layer label `name` is block `block` or inside it ("h0/attn" is in
// "h0", "h01" is not).
bool in_block(const std::string& name, const std::string& block) {
  return name.size() >= block.size() && name.compare(0, block.size(), block) == 0 &&
         (name.size() == block.size() || name[block.size()] == '/');
}

bool forward_op(const ir::Node& n) {
  return !n.backward && n.micro_batch != ir::kAfterMicroBatches && !n.name.empty() &&
         n.op != ir::Op::kParameter && n.op != ir::Op::kInput;
}

// The rule that decides for node n, or null.
const ir::RematRule* rule_of(const ir::Graph& g, const ir::Node& n) {
  if (!forward_op(n)) return nullptr;
  for (const ir::RematRule& r : g.remat)
    if (in_block(n.name, r.block)) return &r;
  return nullptr;
}

void check_rules(const ir::Graph& g) {
  std::set<std::string> blocks;  // every label path of a forward op, and its prefixes
  for (const ir::Node& n : g.nodes) {
    if (!forward_op(n)) continue;
    for (size_t at = n.name.find('/'); at != std::string::npos; at = n.name.find('/', at + 1))
      blocks.insert(n.name.substr(0, at));
    blocks.insert(n.name);
  }
  for (size_t i = 0; i < g.remat.size(); ++i) {
    const ir::RematRule& r = g.remat[i];
    for (size_t j = 0; j < i; ++j)
      if (g.remat[j].block == r.block)
        user_error(r.loc, "remat: block \"" + r.block + "\" already has a policy (" +
                              ir::remat_policy_name(g.remat[j].policy) + ", at " + g.remat[j].loc.str() + ")");
    if (blocks.count(r.block)) continue;
    std::string top;
    int shown = 0;
    for (const std::string& b : blocks) {
      if (b.find('/') != std::string::npos) continue;
      if (shown++ == 12) {
        top += ", ...";
        break;
      }
      top += (top.empty() ? "" : ", ") + b;
    }
    user_error(r.loc, "remat: no block named \"" + r.block + "\" in the program (its blocks are layer labels: " +
                          (top.empty() ? "none" : top) + ")");
  }
}

}  // namespace

ir::Graph rematerialize(const ir::Graph& g) {
  check_rules(g);
  // Which forward values the backward pass gets again instead of keeping.
  std::vector<bool> recompute(g.nodes.size(), false);
  bool any = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    const ir::RematRule* r = rule_of(g, n);
    if (!r || r->policy == ir::RematPolicy::kSaveAll || n.op == ir::Op::kShardMap) continue;
    if (r->policy == ir::RematPolicy::kSaveDots && n.op == ir::Op::kDot) continue;
    recompute[i] = true;
    any = true;
  }
  if (!any) return g;

  ir::Graph out = g;
  out.nodes.clear();
  std::vector<int> remap(g.nodes.size(), -1);  // old id -> its value in out
  std::vector<int> copy(g.nodes.size(), -1);   // old id -> its recomputed copy in out
  // Each layer of a scanned Layers is a block of its own: its copies start
  // from what the previous layer passed it, which is kept (else the first
  // backward layer would recompute every layer before it at once).
  auto layer = [&](int v) {
    const ir::Node& n = g.nodes[v];
    return n.repeat >= 0 && n.iteration >= 0 && g.repeats[n.repeat].scan ? std::make_pair(n.repeat, n.iteration)
                                                                          : std::make_pair(-1, -1);
  };
  // The copy of old node v, made (with the copies it reads) where first needed.
  auto recomputed = [&](auto&& self, int v) -> int {
    if (!recompute[v]) return remap[v];
    if (copy[v] >= 0) return copy[v];
    ir::Node n = g.nodes[v];
    for (int& a : n.args) a = layer(a) == layer(v) ? self(self, a) : remap[a];
    n.remat = true;
    copy[v] = out.add(std::move(n));
    return copy[v];
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    ir::Node n = g.nodes[i];
    for (int& a : n.args) a = n.backward ? recomputed(recomputed, a) : remap[a];
    if (n.layout_of >= 0) n.layout_of = remap[n.layout_of];
    remap[i] = out.add(std::move(n));
  }
  remap_roots(out, remap);
  return out;
}

}  // namespace sharc
