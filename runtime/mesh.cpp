// Rank <-> coordinate arithmetic and group construction for MeshShape. Kept
// out of the header because generated code calls make_group() once per group
// at startup, never in a hot loop, so there is nothing to gain from inlining.
#include "runtime/mesh.h"

#include <stdexcept>

namespace sharc::rt {

int MeshShape::num_devices() const {
  int n = 1;
  for (int s : axis_sizes) n *= s;
  return n;
}

int MeshShape::axis_index(std::string_view name) const {
  for (size_t i = 0; i < axis_names.size(); ++i) {
    if (axis_names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> MeshShape::coords(int rank) const {
  if (rank < 0 || rank >= num_devices()) {
    throw std::out_of_range("rank " + std::to_string(rank) + " is outside mesh " + to_string());
  }
  std::vector<int> c(axis_sizes.size());
  // Last axis fastest: peel coordinates off from the minor end.
  for (size_t i = axis_sizes.size(); i-- > 0;) {
    c[i] = rank % axis_sizes[i];
    rank /= axis_sizes[i];
  }
  return c;
}

int MeshShape::rank_of(const std::vector<int>& coords) const {
  if (coords.size() != axis_sizes.size()) {
    throw std::out_of_range("rank_of: " + std::to_string(coords.size()) + " coordinates for mesh " +
                            to_string());
  }
  int rank = 0;
  for (size_t i = 0; i < coords.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= axis_sizes[i]) {
      throw std::out_of_range("rank_of: coordinate " + std::to_string(coords[i]) + " on axis \"" +
                              axis_names[i] + "\" is outside mesh " + to_string());
    }
    rank = rank * axis_sizes[i] + coords[i];
  }
  return rank;
}

int MeshShape::peer_on_axis(int rank, int axis, int position) const {
  std::vector<int> c = coords(rank);
  if (axis < 0 || axis >= static_cast<int>(c.size()))
    throw std::out_of_range("peer_on_axis: axis " + std::to_string(axis) + " of mesh " + to_string());
  c[axis] = position;
  return rank_of(c);
}

std::string MeshShape::describe(int rank) const {
  const std::vector<int> c = coords(rank);
  std::string where;
  for (size_t a = 0; a < c.size(); ++a)
    where += (a ? ", " : "") + axis_names[a] + "=" + std::to_string(c[a]);
  return "device " + std::to_string(rank) + " (" + where + ")";
}

std::string MeshShape::to_string() const {
  std::string s = "<[";
  for (size_t i = 0; i < axis_names.size(); ++i) {
    if (i) s += ", ";
    s += "\"" + axis_names[i] + "\"=" + std::to_string(axis_sizes[i]);
  }
  return s + "]>";
}

Group make_group(const MeshShape& mesh, int rank, const std::vector<int>& axes) {
  const int num_axes = static_cast<int>(mesh.axis_sizes.size());
  std::vector<bool> seen(num_axes, false);
  int group_size = 1;
  for (int a : axes) {
    if (a < 0 || a >= num_axes || seen[a]) {
      throw std::invalid_argument("make_group: axis index " + std::to_string(a) +
                                  (a >= 0 && a < num_axes ? " repeated" : " out of range") +
                                  " for mesh " + mesh.to_string());
    }
    seen[a] = true;
    group_size *= mesh.axis_sizes[a];
  }

  const std::vector<int> mine = mesh.coords(rank);
  Group g;
  g.ranks.reserve(group_size);
  // Enumerate group members by a row-major counter over `axes` (in the order
  // given, not mesh order); the other coordinates stay at the caller's.
  std::vector<int> c = mine;
  for (int a : axes) c[a] = 0;
  for (int i = 0; i < group_size; ++i) {
    g.ranks.push_back(mesh.rank_of(c));
    for (size_t k = axes.size(); k-- > 0;) {
      if (++c[axes[k]] < mesh.axis_sizes[axes[k]]) break;
      c[axes[k]] = 0;
    }
  }
  g.position = 0;
  for (int a : axes) g.position = g.position * mesh.axis_sizes[a] + mine[a];
  return g;
}

}  // namespace sharc::rt
