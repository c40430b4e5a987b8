@SHARC_BANNER@
//
// The typed API of one generated SPMD program (see the .cpp for its body).
// Program owns every simulated device's parameter shards; init() fills them
// shard by shard on the devices themselves; forward() hands each device its
// block of the global inputs, runs the per-device function on all of them,
// assembles the global outputs from their blocks and, in a training program,
// gives every updated parameter its new value. Shapes below are global
// and arrays row-major; a Spec lists, per dimension, the mesh axes it is split
// over (major first), in the form rt::visualize_sharding takes.
//
// The fixed text comes from templates/program.h; codegen/emit_cpu.cpp fills in
// the program-specific parts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/mesh.h"
#include "runtime/thread_world.h"

namespace @SHARC_NAMESPACE@ {

inline constexpr int kNumDevices = @SHARC_NUM_DEVICES@;
inline constexpr std::string_view kMesh = @SHARC_MESH_LITERAL@;
// The mesh as the runtime spells it, e.g. to build a matching ThreadWorld.
inline sharc::rt::MeshShape mesh_shape() { return @SHARC_MESH_SHAPE@; }

using Spec = std::vector<std::vector<std::string>>;

@SHARC_TENSOR_INFO@

class Program {
 public:
  // Allocates every device's parameter shards (charged to world.memory(rank))
  // and its collective groups. Throws std::invalid_argument when the world's
  // mesh is not kMesh.
  explicit Program(sharc::rt::ThreadWorld& world);
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Global row-major arrays, one per program input, named after it.
  struct Inputs {
@SHARC_INPUT_FIELDS@
  };
  // Global row-major arrays the caller owns, filled by forward().
  struct Outputs {
@SHARC_OUTPUT_FIELDS@
  };

  // Every device initialises its own parameter shards, in parallel; the values
  // depend on (seed, parameter path, global index) only, not on the mesh.
  void init(uint64_t seed);
  // Runs the whole program once on every device. In a training program (one
  // whose parameters have updates) that is one training step: the outputs
  // are computed from the parameters as the call found them, and then every
  // updated parameter (optimizer state included) takes its new value.
  void forward(const Inputs& in, Outputs& out);
  // The same call, under the name a training loop reads best with.
  void step(const Inputs& in, Outputs& out) { forward(in, out); }

  // Whole parameters in and out (tests, checkpoints), as global row-major
  // arrays: set_parameter hands every device its block, get_parameter
  // assembles the array from the devices' blocks. Throw std::out_of_range on
  // an unknown path.
  void set_parameter(std::string_view path, const float* global);
  void get_parameter(std::string_view path, float* global) const;

  // The shard of parameter `path` ("dot1/kernel") that device `rank` holds, and
  // its size in floats (the same on every device). Throw std::out_of_range on
  // an unknown path or rank.
  const float* parameter_shard(int rank, std::string_view path) const;
  size_t parameter_shard_size(std::string_view path) const;

 private:
  struct Device;  // per-device state: mesh coordinates, groups, parameter shards
  void init_device(int rank, uint64_t seed);
  void forward_device(int rank, const Inputs& in, Outputs& out);

  sharc::rt::ThreadWorld& world_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace @SHARC_NAMESPACE@
