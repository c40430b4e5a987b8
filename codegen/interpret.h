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

#include "ir/ir.h"
#include "runtime/init.h"

namespace sharc {

using HostValues = std::map<std::string, std::vector<double>>;

// Evaluates a global graph. `inputs` maps input names to row-major values of
// their global shapes; parameters are initialised from `seed` exactly as the
// devices do (float values, promoted). Returns every output by name.
//
// Training steps: when `state` is given, parameters found in it (by path) take
// those values instead of their initialiser, and after the step `state` holds
// every parameter's value with the graph's updates applied, ready for the next
// step.
HostValues interpret(const ir::Graph& g, const HostValues& inputs, uint64_t seed,
                     HostValues* state = nullptr);

// The key a random_uniform node draws with for a given seed operand value:
// rt::random_stream_key (runtime/philox.h), which generated code calls too.
uint64_t random_stream_key(uint64_t node_key, double seed_value);

// The initialiser of a parameter (path, global shape) in runtime form. A
// stacked parameter's spec points into `path` (InitSpec::row_path), which
// must outlive it.
rt::InitSpec init_spec(const Initializer& init, const std::string& path, const ir::Shape& global_shape);

// The full global value of a parameter (what the devices' shards tile).
std::vector<float> init_global(const ir::Node& parameter, uint64_t seed);

}  // namespace sharc
