@SHARC_BANNER@
//
// The typed API of one generated SPMD program (see the .cpp for its body).
// Program runs on an rt::World and owns the parameter shards of the world's
// local devices (every device for a ThreadWorld; this process's for an
// MpiWorld); init() fills them shard by shard on the devices themselves;
// forward() hands each local device its block of the inputs, runs the
// per-device function on all of them, puts their blocks of the outputs
// together and, in a training program, gives every updated parameter its new
// value. Shapes below are global
// and arrays row-major; a Spec lists, per dimension, the mesh axes it is split
// over (major first), in the form rt::visualize_sharding takes. kParameters,
// kInputs and kOutputs list every tensor with its shapes and layout, for
// drivers that iterate them (runtime/program_info.h).
//
// The fixed text comes from templates/program.h; codegen/emit_cpu.cpp fills in
// the program-specific parts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/mesh.h"
#include "runtime/program_info.h"
#include "runtime/thread_world.h"  // the one-process World, so a driver needs only this header
#include "runtime/world.h"

namespace @SHARC_NAMESPACE@ {

inline constexpr std::string_view kProgram = @SHARC_PROGRAM@;  // the SHARC_PROGRAM generated
inline constexpr int kNumDevices = @SHARC_NUM_DEVICES@;  // the mesh's devices
inline constexpr std::string_view kMesh = @SHARC_MESH_LITERAL@;  // the mesh, as sharc_add_program's MESH
// The mesh as the runtime spells it, e.g. to build a matching ThreadWorld.
inline sharc::rt::MeshShape mesh_shape() { return @SHARC_MESH_SHAPE@; }

using Spec = sharc::rt::Spec;  // a layout: per dimension, the mesh axes it is split over

@SHARC_TENSOR_INFO@

// The generated program on a World: init() its parameters, then forward()
// (or step()) once per batch; parameters stay on the devices between calls.
class Program {
 public:
  // Allocates the local devices' parameter shards (charged to
  // world.memory(rank)) and their collective groups. Throws
  // std::invalid_argument when the world's mesh is not kMesh.
  explicit Program(sharc::rt::World& world);
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // The namespace's constants and tables, reachable from the class, for
  // drivers written as templates over several generated programs.
  //@{
  static sharc::rt::MeshShape mesh_shape() { return @SHARC_NAMESPACE@::mesh_shape(); }
  static std::span<const sharc::rt::TensorInfo> parameters() { return kParameters; }
  static std::span<const sharc::rt::TensorInfo> inputs() { return kInputs; }
  static std::span<const sharc::rt::TensorInfo> outputs() { return kOutputs; }
  static const sharc::rt::TensorInfo& parameter_info(std::string_view path) {
    return @SHARC_NAMESPACE@::parameter_info(path);
  }
  static const sharc::rt::TensorInfo& input_info(std::string_view name) {
    return @SHARC_NAMESPACE@::input_info(name);
  }
  static const sharc::rt::TensorInfo& output_info(std::string_view name) {
    return @SHARC_NAMESPACE@::output_info(name);
  }
  //@}

  // The program's inputs, one field per input, named after it: each is a
  // global row-major array. set() binds a field by the input's name,
  // checking the span's size against kInputs; it throws std::out_of_range
  // for an unknown name and std::invalid_argument for a wrong size.
  //
  // Per-process loading: instead of the global array, set_block() binds the
  // block one local device needs (block_offset(input_info(name), rank) and
  // local_shape say which); a device reads its block when it has one. With
  // several processes each feeds only its own devices this way.
  struct Inputs {
@SHARC_INPUT_FIELDS@
    // Bind input `name` to its global array, or device `rank`'s block to
    // its block; f32, or i32 for token ids and labels.
    //@{
    Inputs& set(std::string_view name, std::span<const float> values);
    Inputs& set(std::string_view name, std::span<const int32_t> values);
    Inputs& set_block(std::string_view name, int rank, std::span<const float> values);
    Inputs& set_block(std::string_view name, int rank, std::span<const int32_t> values);
    //@}
    sharc::rt::BlockTable blocks;  // what set_block() bound
  };
  // Where forward() puts the outputs; set() and set_block() as for Inputs,
  // against kOutputs. A global array is filled whole on every process (with
  // several processes, blocks computed elsewhere are sent over, so every
  // process must bind the same global arrays). A bound block receives the
  // device's own block of the output, as that device computed it (a
  // pipeline's output is computed on one stage only).
  struct Outputs {
@SHARC_OUTPUT_FIELDS@
    // Bind output `name` to its global array, or device `rank`'s block.
    //@{
    Outputs& set(std::string_view name, std::span<float> values);
    Outputs& set_block(std::string_view name, int rank, std::span<float> values);
    //@}
    sharc::rt::BlockTable blocks;  // set_block()'s, and who wrote what during forward()
  };

  // Where device `rank`'s block of a tensor of this program starts in the
  // global array; its shape is info.local_shape. A data loader reads that
  // much of each input for each local device.
  static std::vector<int64_t> block_offset(const sharc::rt::TensorInfo& info, int rank) {
    return sharc::rt::block_offset(info, mesh_shape(), rank);
  }
  // Whether device `rank` holds a shard of parameter `path` (in a pipeline,
  // only the stages that read it do). Throws std::out_of_range on an
  // unknown path.
  static bool holds_parameter(int rank, std::string_view path);

  // The world, and the ranks of the devices this process drives.
  //@{
  sharc::rt::World& world() const { return world_; }
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  //@}

  // Every device initialises its own parameter shards, in parallel; the values
  // depend on (seed, parameter path, global index) only, not on the mesh.
  void init(uint64_t seed);
  // Runs the whole program once on every local device. In a training program (one
  // whose parameters have updates) that is one training step: the outputs
  // are computed from the parameters as the call found them, and then every
  // updated parameter (optimizer state included) takes its new value.
  // Optimizer updates are written over the old values where nothing reads
  // those later (BufferPlan::in_place_of), so a step that throws after its
  // update loops began may leave some parameters stepped and others not:
  // restore a checkpoint before training on. Throws
  // std::invalid_argument, before any device runs, if an input or output
  // has neither a global array nor a block for every local device. With
  // several processes it is collective: every process calls it.
  void forward(const Inputs& in, Outputs& out);
  // The same call, under the name a training loop reads best with.
  void step(const Inputs& in, Outputs& out) { forward(in, out); }

  // Whole parameters in and out (tests, checkpoints), as global row-major
  // arrays: set_parameter hands every local device its block, get_parameter
  // assembles the array from the devices' blocks (with several processes,
  // from every process's: then it is collective). Throw std::out_of_range on
  // an unknown path, and std::invalid_argument, naming the path and both
  // sizes, unless the span holds exactly the parameter's elements
  // (parameter_info(path).elements()).
  //@{
  void set_parameter(std::string_view path, std::span<const float> values);
  void get_parameter(std::string_view path, std::span<float> values) const;
  //@}

  // The shard of parameter `path` ("dot1/kernel") that local device `rank`
  // holds (nullptr where holds_parameter() is false), and its size in floats
  // (the same on every device). Throw std::out_of_range on an unknown path,
  // or a rank that is not one of this process's devices.
  //@{
  const float* parameter_shard(int rank, std::string_view path) const;
  size_t parameter_shard_size(std::string_view path) const;
  //@}
  // The same block, writable (a checkpoint restore fills each device's own).
  float* parameter_shard(int rank, std::string_view path) {
    return const_cast<float*>(std::as_const(*this).parameter_shard(rank, path));
  }

 private:
  struct Device;  // per-device state: mesh coordinates, groups, parameter shards
  struct Step;    // one step on one device: its buffers and its parts (the .cpp)
  void init_device(int rank, uint64_t seed);
  void forward_device(int rank, const Inputs& in, Outputs& out);
  const Device& device(int rank, std::string_view call) const;

  sharc::rt::World& world_;
  std::vector<int> local_ranks_;
  std::vector<std::unique_ptr<Device>> devices_;  // by rank; null where not local
};

}  // namespace @SHARC_NAMESPACE@
