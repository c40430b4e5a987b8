// Mesh: the named device axes a program is partitioned over, e.g.
// <["data"=2, "model"=4]>. Devices are numbered row-major with the last axis
// fastest, so on data=2,model=4 the 'model' groups are {0,1,2,3},{4,5,6,7} and
// the 'data' groups {0,4},{1,5},{2,6},{3,7}, exactly as jax.sharding.Mesh over
// np.arange(8).reshape(2, 4). One axis may be -1, meaning "the rest".
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/error.h"

namespace sharc {

// One named axis of a device mesh.
struct MeshAxis {
  std::string name;  // "data", "model", ...
  int size = 1;      // the devices along it
};

// A named device mesh (jax.sharding.Mesh): axes major to minor, devices
// numbered row-major (the last axis fastest).
class Mesh {
 public:
  Mesh() = default;
  // axes in major-to-minor order; at most one size may be -1, resolved from
  // num_devices. The product must equal num_devices (when num_devices > 0).
  Mesh(std::vector<std::pair<std::string, int>> axes, int num_devices = 0,
       SrcLoc loc = Here::current());

  // Parses "data=2,model=4" (the CMake MESH spelling).
  static Mesh parse(std::string_view text, int num_devices = 0, SrcLoc loc = Here::current());

  // The axes, major first.
  const std::vector<MeshAxis>& axes() const { return axes_; }
  // The product of the axis sizes.
  int num_devices() const;
  // Whether the mesh has an axis of that name.
  bool has(std::string_view axis) const { return index(axis) >= 0; }
  int index(std::string_view axis) const;  // -1 when absent
  int size(std::string_view axis) const;   // internal error when absent
  // Product of the sizes of the given axes.
  int size(const std::vector<std::string>& axes) const;
  // Device `rank`'s position along each axis.
  std::vector<int> coords(int rank) const;
  std::string str() const;  // <["data"=2, "model"=4]>
  std::string names() const;  // 'data', 'model' (for diagnostics)
  // The same axes, names and sizes, in the same order.
  bool operator==(const Mesh& o) const;

 private:
  std::vector<MeshAxis> axes_;
};

}  // namespace sharc
