// The oracle: an interpreter of the global, unpartitioned IR in double
// precision. It is the reference every partitioned program is checked against
// (never the generator's own one-device output). It is deliberately naive:
// index arithmetic per element, no BLAS, no fusion, nothing shared with the
// partitioner, so a partitioning bug cannot hide in both.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/ir.h"
#include "runtime/init.h"

namespace sharc {

using HostValues = std::map<std::string, std::vector<double>>;

// Evaluates a global graph. `inputs` maps input names to row-major values of
// their global shapes; parameters are initialised from `seed` exactly as the
// devices do (float values, promoted). Returns every output by name.
HostValues interpret(const ir::Graph& g, const HostValues& inputs, uint64_t seed);

// The initialiser of a parameter (path, global shape) in runtime form.
rt::InitSpec init_spec(const Initializer& init, const std::string& path, const ir::Shape& global_shape);

// The full global value of a parameter (what the devices' shards tile).
std::vector<float> init_global(const ir::Node& parameter, uint64_t seed);

}  // namespace sharc
