// bucket_all_reduces: group backward all-reduces; see the header.
#include "codegen/passes/bucket_all_reduces.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "codegen/passes/drop_nodes.h"

namespace sharc {

ir::Graph bucket_all_reduces(const ir::Graph& g, size_t bucket_bytes) {
  if (!g.partitioned) internal_error("bucket_all_reduces needs a partitioned graph");
  const int count = static_cast<int>(g.nodes.size());
  // First user position of every node (outputs and updates read at the end).
  std::vector<int> first_user(count, std::numeric_limits<int>::max());
  for (int i = 0; i < count; ++i)
    for (int a : g.nodes[i].args) first_user[a] = std::min(first_user[a], i);
  for (auto& o : g.outputs) first_user[o.value] = std::min(first_user[o.value], count);
  for (auto& u : g.updates) first_user[u.value] = std::min(first_user[u.value], count);

  struct Bucket {
    std::vector<int> members;
    size_t bytes = 0;
    int earliest_user = std::numeric_limits<int>::max();
  };
  std::vector<Bucket> buckets;
  // (axes, kind, element type, layer) -> bucket: one packed buffer has one
  // type, and a bucket never spans two layers of a scanned Layers (whose
  // code is written once for every layer).
  std::map<std::tuple<std::vector<std::string>, int, int, int>, int> open;
  std::vector<int> bucket_of(count, -1);
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.op != ir::Op::kAllReduce || !n.backward) continue;
    const size_t bytes = static_cast<size_t>(ir::num_elements(n.shape)) * ir::dtype_size(n.dtype);
    const bool scanned = n.repeat >= 0 && n.iteration >= 0 && g.repeats[n.repeat].scan;
    const auto key =
        std::make_tuple(n.axes, static_cast<int>(n.reduce), static_cast<int>(n.dtype), scanned ? n.iteration : -1);
    auto it = open.find(key);
    if (it != open.end()) {
      Bucket& b = buckets[it->second];
      // Joining moves every member down to i: all their users must come later.
      const bool fits = b.bytes + bytes <= bucket_bytes;
      if (fits && b.earliest_user > i) {
        b.members.push_back(i);
        b.bytes += bytes;
        b.earliest_user = std::min(b.earliest_user, first_user[i]);
        bucket_of[i] = it->second;
        continue;
      }
    }
    buckets.push_back({{i}, bytes, first_user[i]});
    open[key] = static_cast<int>(buckets.size()) - 1;
    bucket_of[i] = open[key];
  }

  // Re-emit: members wait for their bucket's last member.
  ir::Graph out = g;
  out.nodes.clear();
  std::vector<int> remap(count, -1);
  auto place = [&](int i, int bucket_id) {
    ir::Node n = g.nodes[i];
    for (int& a : n.args) a = remap[a];
    if (n.layout_of >= 0) n.layout_of = remap[n.layout_of];
    n.dim2 = bucket_id;
    remap[i] = out.add(std::move(n));
  };
  for (int i = 0; i < count; ++i) {
    const int b = bucket_of[i];
    if (b < 0) {
      place(i, g.nodes[i].dim2);
      continue;
    }
    if (buckets[b].members.back() != i) continue;  // deferred
    for (int m : buckets[b].members) place(m, b);
  }
  remap_roots(out, remap);
  for (auto& n : out.nodes)
    for (int a : n.args)
      if (a < 0) internal_error("bucket_all_reduces moved a value past its user");
  return out;
}

}  // namespace sharc
