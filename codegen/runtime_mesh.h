// The runtime's spelling of a mesh (rt::MeshShape: names and sizes, the
// same row-major ranks) for the generator's executors and predictions, so
// rank arithmetic (coordinates, peers, groups) has one implementation.
#pragma once

#include "ir/mesh.h"
#include "runtime/mesh.h"

namespace sharc {

inline rt::MeshShape mesh_shape(const Mesh& m) {
  rt::MeshShape s;
  for (const MeshAxis& a : m.axes()) {
    s.axis_names.push_back(a.name);
    s.axis_sizes.push_back(a.size);
  }
  return s;
}

}  // namespace sharc
