// visualize_sharding: computes, for every device, the block index it holds
// along each dim (row-major over that dim's axes in spec order, the same rule
// make_group() uses), groups devices by block, and draws the tables.
#include "runtime/visualize.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace sharc::rt {
namespace {

std::string spec_str(const std::vector<std::vector<std::string>>& spec) {
  std::string s = "[";
  for (size_t d = 0; d < spec.size(); ++d) {
    s += d ? ", {" : "{";
    for (size_t i = 0; i < spec[d].size(); ++i) s += (i ? ", \"" : "\"") + spec[d][i] + "\"";
    s += "}";
  }
  return s + "]";
}

std::string tuple_str(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

std::string center(const std::string& text, size_t width) {
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

// rows x cols grid of labels (row-major) as an ASCII table.
std::string draw_table(const std::vector<std::string>& labels, int64_t rows, int64_t cols,
                       size_t width) {
  std::string rule = "+";
  for (int64_t c = 0; c < cols; ++c) rule += std::string(width, '-') + "+";
  rule += "\n";
  std::string s = rule;
  for (int64_t r = 0; r < rows; ++r) {
    s += "|";
    for (int64_t c = 0; c < cols; ++c) s += center(labels[r * cols + c], width) + "|";
    s += "\n" + rule;
  }
  return s;
}

}  // namespace

std::string visualize_sharding(const std::vector<int64_t>& global_shape,
                               const std::vector<std::vector<std::string>>& spec,
                               const MeshShape& mesh, std::string_view device_label) {
  const int rank = static_cast<int>(global_shape.size());
  if (static_cast<int>(spec.size()) != rank) {
    throw std::invalid_argument("visualize_sharding: spec " + spec_str(spec) + " has " +
                                std::to_string(spec.size()) + " entries for a rank-" +
                                std::to_string(rank) + " array");
  }
  // Blocks per dim, and the axis indices behind each dim.
  std::vector<int64_t> blocks(rank, 1);
  std::vector<std::vector<int>> dim_axes(rank);
  std::vector<bool> used(mesh.axis_names.size(), false);
  for (int d = 0; d < rank; ++d) {
    for (const std::string& name : spec[d]) {
      const int a = mesh.axis_index(name);
      if (a < 0 || used[a]) {
        throw std::invalid_argument("visualize_sharding: axis \"" + name + "\" in " +
                                    spec_str(spec) + (a < 0 ? " is not in mesh " : " repeats in ") +
                                    mesh.to_string());
      }
      used[a] = true;
      dim_axes[d].push_back(a);
      blocks[d] *= mesh.axis_sizes[a];
    }
  }

  // Block coordinates -> devices holding it (ascending, since ranks ascend).
  std::map<std::vector<int64_t>, std::vector<int>> holders;
  for (int r = 0; r < mesh.num_devices(); ++r) {
    const std::vector<int> c = mesh.coords(r);
    std::vector<int64_t> b(rank, 0);
    for (int d = 0; d < rank; ++d) {
      for (int a : dim_axes[d]) b[d] = b[d] * mesh.axis_sizes[a] + c[a];
    }
    holders[b].push_back(r);
  }
  std::map<std::vector<int64_t>, std::string> label;
  size_t width = 0;
  for (const auto& [b, ranks] : holders) {
    std::string s(device_label);
    for (size_t i = 0; i < ranks.size(); ++i) {
      s += i ? ',' : ' ';  // not `"," + std::to_string()`: g++ 12 -Wrestrict bug 105329
      s += std::to_string(ranks[i]);
    }
    width = std::max(width, s.size());
    label[b] = std::move(s);
  }
  width += 4;  // two spaces of padding each side

  std::vector<int64_t> local = global_shape;
  bool even = true;
  for (int d = 0; d < rank; ++d) {
    even = even && global_shape[d] % blocks[d] == 0;
    local[d] = global_shape[d] / blocks[d];
  }
  std::string out = "shape " + tuple_str(global_shape) + " sharding " + spec_str(spec) +
                    " on mesh " + mesh.to_string() + ", per device " +
                    (even ? tuple_str(local) : std::string("uneven")) + "\n";

  // The table's row and column dims; leading dims pick the slice.
  const int row_dim = rank >= 2 ? rank - 2 : -1;
  const int col_dim = rank >= 1 ? rank - 1 : -1;
  const int64_t rows = row_dim >= 0 ? blocks[row_dim] : 1;
  const int64_t cols = col_dim >= 0 ? blocks[col_dim] : 1;
  const int lead = std::max(rank - 2, 0);
  // A copy cut to size, not the iterator-range constructor, which trips g++
  // 12's -Wfree-nonheap-object false positive at -O3.
  std::vector<int64_t> lead_blocks = blocks;
  lead_blocks.resize(static_cast<size_t>(lead));
  int64_t slices = 1;
  for (int64_t b : lead_blocks) slices *= b;

  std::vector<int64_t> idx(lead, 0);
  for (int64_t s = 0; s < slices; ++s) {
    if (lead > 0) {
      out += "[block ";
      for (int d = 0; d < lead; ++d) out += std::to_string(idx[d]) + ", ";
      out += ":, :]\n";
    }
    std::vector<std::string> cells;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        std::vector<int64_t> b = idx;
        if (row_dim >= 0) b.push_back(r);
        if (col_dim >= 0) b.push_back(c);
        cells.push_back(label.at(b));
      }
    }
    out += draw_table(cells, rows, cols, width);
    for (int d = lead - 1; d >= 0; --d) {
      if (++idx[d] < lead_blocks[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace sharc::rt
