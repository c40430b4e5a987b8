// The tables a generated program publishes about its parameters, inputs and
// outputs, so a driver can iterate them, look them up by name and size its
// buffers without hard-coding shapes:
//
//   for (const sharc::rt::TensorInfo& p : gen::kParameters) {
//     std::vector<float> value(p.elements());
//     program.get_parameter(p.name, value);   // size-checked against p
//     std::printf("%s %s %s\n", p.name.data(), p.type_str().c_str(), p.spec_str().c_str());
//   }
//   const sharc::rt::TensorInfo& w = gen::parameter("dot1/kernel");  // or throws
//
// One row per tensor: its name (a parameter's '/'-joined path, or the name
// given to b.input / b.output), dtype, global shape, layout, the block each
// device holds, and the DSL line that declared it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/mesh.h"

namespace sharc::rt {

// A layout: per dimension, the mesh axes it is split over (major first); an
// empty list is a replicated dimension. The form rt::visualize_sharding takes.
using Spec = std::vector<std::vector<std::string>>;

struct TensorInfo {
  std::string_view name;              // "dot1/kernel", "x"
  std::string_view dtype;             // "f32"
  std::vector<int64_t> shape;         // global shape
  Spec spec;                          // layout over the mesh
  std::vector<int64_t> local_shape;   // the block each device holds
  std::string_view declared_at;       // "samples/dot_relu_dot/model.h:16"

  int64_t elements() const;           // of the global tensor
  int64_t local_elements() const;     // of one device's block
  size_t bytes() const;               // of the global tensor
  size_t local_bytes() const;         // of one device's block
  std::string type_str() const;       // "f32[1024,1024]"
  std::string local_type_str() const; // "f32[1024,256]"
  std::string spec_str() const;       // "P(None, 'model')"; "P(('data', 'model'),)" for two axes
};

// The row named `name` in `table`, or nullptr.
const TensorInfo* find_tensor(std::span<const TensorInfo> table, std::string_view name) noexcept;

// The row named `name`; throws std::out_of_range that lists the names there
// are, e.g. `no parameter "w3" in program dot_relu_dot; its parameters are
// "dot1/kernel", "w2"`. `kind` is "parameter", "input" or "output".
const TensorInfo& lookup_tensor(std::span<const TensorInfo> table, std::string_view name,
                                std::string_view kind, std::string_view program);

// Throws std::invalid_argument unless `size` (the number of elements a caller
// passed) is the tensor's global element count: `set_parameter("dot1/kernel"):
// got 1000 floats, but the parameter f32[1024,1024] has 1048576`.
void check_elements(const TensorInfo& t, size_t size, std::string_view call,
                    std::string_view kind);

// ---- blocks: what one device holds of a global tensor ---------------------

// The first global coordinate of device `rank`'s block of `t` on `mesh` (its
// shape is t.local_shape). Throws std::invalid_argument when t's spec names
// an axis that is not in the mesh.
std::vector<int64_t> block_offset(const TensorInfo& t, const MeshShape& mesh, int rank);

// The block of `t` at `offset` as contiguous runs of the global row-major
// array, in the block's row-major order: what a data loader reads (pread)
// to fetch one device's block of an input from a file holding the whole.
struct BlockRun {
  int64_t global = 0;  // first element, in the global array
  int64_t block = 0;   // first element, in the block
  int64_t elements = 0;
};
std::vector<BlockRun> block_runs(const TensorInfo& t, const std::vector<int64_t>& offset);

// Copies the block of `t` at `offset` between the global row-major array
// and a block-sized row-major buffer (element size: t's dtype).
void copy_block_from_global(const TensorInfo& t, const std::vector<int64_t>& offset, const void* global,
                            void* block);
void copy_block_to_global(const TensorInfo& t, const std::vector<int64_t>& offset, const void* block,
                          void* global);

// Per-device blocks of a program's inputs or outputs, bound by the caller
// (Program::Inputs::set_block, Outputs::set_block): with several processes
// each feeds only its own devices (a data loader reads just those blocks)
// and gets back only their output blocks. Also records which devices wrote
// their block of each output into the global arrays during a forward(), so
// complete_global() knows what each process contributes.
class BlockTable {
 public:
  // Binds device `rank`'s block of tensor `name`, checking the rank (of
  // `devices`), the
  // dtype and that `elements` is the block's size; errors name `call`.
  void bind(std::span<const TensorInfo> table, std::string_view name, int rank, int devices, const void* data,
            size_t elements, std::string_view dtype, std::string_view call, std::string_view program);
  // Device `rank`'s block of tensor `index`, or nullptr.
  const void* find(size_t index, int rank) const;
  template <class T>
  const T* get(size_t index, int rank) const {
    return static_cast<const T*>(find(index, rank));
  }
  template <class T>
  T* get_mutable(size_t index, int rank) const {
    return const_cast<T*>(static_cast<const T*>(find(index, rank)));
  }
  // Whether every rank in `ranks` has a block of tensor `index`.
  bool covers(size_t index, std::span<const int> ranks) const;

  // Written-to-global marks, cleared for `tensors` x `devices` at the start
  // of each forward(); devices set their own, so no two threads share one.
  void clear_marks(size_t tensors, int devices);
  void mark(size_t index, int rank) { marks_[index * devices_ + static_cast<size_t>(rank)] = 1; }
  std::span<const uint8_t> marks(size_t index) const {
    return std::span<const uint8_t>(marks_).subspan(index * devices_, devices_);
  }

 private:
  struct Entry {
    size_t index;
    int rank;
    const void* data;
  };
  std::vector<Entry> entries_;  // few: one per (tensor, local device)
  std::vector<uint8_t> marks_;
  size_t devices_ = 0;
};

// Throws std::invalid_argument unless input or output `t` (row `index`) has
// a global array or a block for every local device: `forward: input "x"
// f32[8,1024] has no global array (Inputs::x) and no block for device 3
// (Inputs::set_block)`.
void check_bound(const TensorInfo& t, size_t index, const void* global, const BlockTable& blocks,
                 std::span<const int> local_ranks, std::string_view kind, std::string_view field);

}  // namespace sharc::rt
