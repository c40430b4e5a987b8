// A text picture of how an array is laid out over a mesh, in the spirit of
// jax.debug.visualize_array_sharding: one table cell per block of the array,
// labelled with every device holding that block. It is for logs, docs and
// golden tests, so the output is plain ASCII and fully deterministic; cells all
// have one width (the widest label plus padding) rather than a width
// proportional to the block, which would not survive small terminals.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/mesh.h"

namespace sharc::rt {

// spec[d] lists the mesh axes dim d is sharded over, major first; empty means
// replicated. 1-D arrays print one row; N-D arrays (N > 2) print one table per
// block of the leading dims, over the last two. Throws std::invalid_argument on
// an unknown or repeated axis or a spec of the wrong length.
std::string visualize_sharding(const std::vector<int64_t>& global_shape,
                               const std::vector<std::vector<std::string>>& spec,
                               const MeshShape& mesh, std::string_view device_label = "CPU");

}  // namespace sharc::rt
