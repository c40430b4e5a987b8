// Dimension-aware collectives for row-major tensors of f32, bf16 or i32 (T =
// float, bf16, int32_t): the reshards the
// partitioner emits (gather a sharded dim, scatter a reduced one, move a mesh
// axis from one dim to another) expressed over flat Communicator calls. When
// the dim is the outermost non-trivial one the pieces are already contiguous
// and the collective runs directly on the caller's buffers; otherwise blocks are
// packed into / unpacked from a temporary, which is host memory not charged to
// any DeviceMemory. Byte counts are those of the underlying flat collective.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/mesh.h"

namespace sharc::rt {

// Where a dimension-aware collective packs and unpacks its blocks when they
// are interleaved. Null (the default): host memory, with rt::strided_copy
// and the communicator's scratch. A world whose communicator moves device
// buffers (gpu::NcclWorld) passes one that copies on the device.
class BlockMover {
 public:
  virtual ~BlockMover() = default;
  // out (contiguous, of `shape`)[i0][i1][i2] = in[i0 * strides[0] + i1 *
  // strides[1] + i2 * strides[2]], elements of `elem_bytes` bytes.
  virtual void strided_copy(const void* in, const int64_t (&shape)[3], const int64_t (&strides)[3],
                            size_t elem_bytes, void* out) = 0;
  // At least `bytes` bytes where the buffers live, slot 0 or 1, kept from
  // call to call (as Communicator::scratch).
  virtual void* scratch(int slot, size_t bytes) = 0;
};

// out has local_shape with dim multiplied by group.size(); member p's piece is
// block p along dim.
template <class T>
void all_gather_dim(Communicator& comm, const Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int dim, T* out, BlockMover* mover = nullptr);

// `in` has full_shape; dim is split into group.size() blocks and member p gets
// block p reduced over the group. full_shape[dim] must divide evenly.
template <class T>
void reduce_scatter_dim(Communicator& comm, const Group& group, const T* in,
                        const std::vector<int64_t>& full_shape, int dim, T* out, ReduceOp op,
                        BlockMover* mover = nullptr);

// split_dim is cut into group.size() blocks, block j goes to member j, and the
// received blocks are concatenated along concat_dim in source order. Output
// shape: local_shape with split_dim divided and concat_dim multiplied by n.
template <class T>
void all_to_all_dim(Communicator& comm, const Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int split_dim, int concat_dim, T* out,
                    BlockMover* mover = nullptr);

// No communication: out = block `index` of `parts` equal blocks of `in` along dim.
template <class T>
void slice_block(const T* in, const std::vector<int64_t>& shape, int dim, int parts, int index,
                 T* out);

// No communication, the inverse of slice_block: writes `in` as block `index` of
// `parts` equal blocks of `out` (of `shape`) along dim; the rest of `out` is
// left alone. Ring schedules use it to put one step's result in its place.
template <class T>
void place_block(const T* in, const std::vector<int64_t>& shape, int dim, int parts, int index,
                 T* out);

// The ring permutation of a group of n: position q sends to (q + shift) mod n.
// shift +1 passes blocks to the right neighbour, -1 to the left.
Permutation ring_shift(int n, int shift);

}  // namespace sharc::rt
