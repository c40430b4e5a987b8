// Pack / unpack around the flat collectives. A tensor viewed along `dim` is
// (outer, dim, inner): with outer == 1 the group-order chunks of the flat
// collective coincide with the blocks along dim, so no copy is made; otherwise
// the blocks are interleaved per outer index and are gathered with one strided
// copy each way.
#include "runtime/tensor_collectives.h"

#include <stdexcept>
#include <string>

#include "runtime/kernels.h"

namespace sharc::rt {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

void check_dim(const char* what, const std::vector<int64_t>& shape, int dim) {
  if (dim < 0 || dim >= static_cast<int>(shape.size())) {
    throw std::invalid_argument(std::string(what) + ": dim " + std::to_string(dim) +
                                " out of range for shape " + shape_str(shape));
  }
}

void check_divisible(const char* what, const std::vector<int64_t>& shape, int dim, int parts) {
  check_dim(what, shape, dim);
  if (parts < 1 || shape[dim] % parts != 0) {
    throw std::invalid_argument(std::string(what) + ": dim " + std::to_string(dim) + " of " +
                                shape_str(shape) + " does not split into " + std::to_string(parts) +
                                " equal blocks");
  }
}

// `count` elements of the device's reusable scratch (Communicator::scratch,
// or the mover's where it packs).
template <class T>
T* scratch(Communicator& comm, BlockMover* mover, int slot, size_t count) {
  if (mover) return static_cast<T*>(mover->scratch(slot, count * sizeof(T)));
  return reinterpret_cast<T*>(comm.scratch(slot, count * sizeof(T)));
}

// rt::strided_copy of a 3-d view, or the mover's.
template <class T>
void copy3(BlockMover* mover, const T* in, const int64_t (&shape)[3], const int64_t (&strides)[3], T* out) {
  if (mover) return mover->strided_copy(in, shape, strides, sizeof(T), out);
  strided_copy(in, {shape[0], shape[1], shape[2]}, {strides[0], strides[1], strides[2]}, out);
}

// On the virtual clock, a copy through the temporary: each element read
// and written once (codegen/plan.cpp's pack_seconds costs it alike). It is
// busy time of the collective's statement, recorded as a "pack" event of
// that statement (charge() is computation inside a communication call,
// which this event stands in for), so a device's busy and communication
// times still add up to its clock.
template <class T>
void charge_copy(Communicator& comm, size_t elements) {
  Timeline* tl = comm.timeline();
  if (!tl || tl->mode() != ClockMode::kVirtual) return;
  const double start = tl->begin_comm();
  tl->charge(OpCost{0, 2.0 * static_cast<double>(elements * sizeof(T))});
  tl->end_comm("pack", start, -1, 0, 0);
}

int64_t product(const std::vector<int64_t>& shape, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to; ++d) n *= shape[d];
  return n;
}

// `blocks` holds n contiguous blocks of `block_shape` back to back (block j at
// j * block_count); writes their concatenation along dim into out.
template <class T>
void concat_blocks(const T* blocks, const std::vector<int64_t>& block_shape, int dim, int n,
                   T* out, BlockMover* mover) {
  // Output viewed as (outer, n, dim * inner): the n axis steps from one source
  // block to the next in `blocks`, the other two walk inside a block.
  const int64_t outer = product(block_shape, 0, dim);
  const int64_t row = product(block_shape, dim, static_cast<int>(block_shape.size()));
  copy3(mover, blocks, {outer, n, row}, {row, outer * row, 1}, out);
}

}  // namespace

template <class T>
void slice_block(const T* in, const std::vector<int64_t>& shape, int dim, int parts, int index,
                 T* out) {
  check_divisible("slice_block", shape, dim, parts);
  if (index < 0 || index >= parts) {
    throw std::invalid_argument("slice_block: block " + std::to_string(index) + " of " +
                                std::to_string(parts));
  }
  // View as (outer, parts, block_row) and take one plane of the middle axis.
  const int64_t outer = product(shape, 0, dim);
  const int64_t row = product(shape, dim, static_cast<int>(shape.size()));
  const int64_t block_row = row / parts;
  strided_copy(in + index * block_row, {outer, block_row}, {row, 1}, out);
}

template <class T>
void place_block(const T* in, const std::vector<int64_t>& shape, int dim, int parts, int index,
                 T* out) {
  check_divisible("place_block", shape, dim, parts);
  if (index < 0 || index >= parts) {
    throw std::invalid_argument("place_block: block " + std::to_string(index) + " of " +
                                std::to_string(parts));
  }
  // View `out` as (outer, parts, block_row): each outer row of `in` is one
  // contiguous run of block_row floats in plane `index`.
  const int64_t outer = product(shape, 0, dim);
  const int64_t row = product(shape, dim, static_cast<int>(shape.size()));
  const int64_t block_row = row / parts;
  for (int64_t i = 0; i < outer; ++i)
    copy(in + i * block_row, out + i * row + index * block_row, block_row);
}

Permutation ring_shift(int n, int shift) {
  Permutation perm;
  for (int q = 0; q < n; ++q) perm.emplace_back(q, ((q + shift) % n + n) % n);
  return perm;
}

template <class T>
void all_gather_dim(Communicator& comm, const Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int dim, T* out, BlockMover* mover) {
  check_dim("all_gather_dim", local_shape, dim);
  const int n = group.size();
  const size_t count = num_elements(local_shape);
  if (product(local_shape, 0, dim) == 1) {
    comm.all_gather(in, out, count, group);
    return;
  }
  T* blocks = scratch<T>(comm, mover, 0, count * n);
  comm.all_gather(in, blocks, count, group);
  concat_blocks(blocks, local_shape, dim, n, out, mover);
  charge_copy<T>(comm, count * n);
}

template <class T>
void reduce_scatter_dim(Communicator& comm, const Group& group, const T* in,
                        const std::vector<int64_t>& full_shape, int dim, T* out, ReduceOp op,
                        BlockMover* mover) {
  const int n = group.size();
  check_divisible("reduce_scatter_dim", full_shape, dim, n);
  const size_t block = num_elements(full_shape) / n;
  if (product(full_shape, 0, dim) == 1) {
    comm.reduce_scatter(in, out, block, group, op);
    return;
  }
  // Pack block j of every outer index into flat chunk j: view `in` as
  // (outer, n, block_row) and copy it out as (n, outer, block_row).
  const int64_t outer = product(full_shape, 0, dim);
  const int64_t row = product(full_shape, dim, static_cast<int>(full_shape.size()));
  const int64_t block_row = row / n;
  T* packed = scratch<T>(comm, mover, 0, num_elements(full_shape));
  copy3(mover, in, {n, outer, block_row}, {block_row, row, 1}, packed);
  charge_copy<T>(comm, num_elements(full_shape));
  comm.reduce_scatter(packed, out, block, group, op);
}

template <class T>
void all_to_all_dim(Communicator& comm, const Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int split_dim, int concat_dim,
                    T* out, BlockMover* mover) {
  const int n = group.size();
  check_divisible("all_to_all_dim", local_shape, split_dim, n);
  check_dim("all_to_all_dim", local_shape, concat_dim);
  std::vector<int64_t> block_shape = local_shape;
  block_shape[split_dim] /= n;
  const size_t block = num_elements(block_shape);

  const bool split_outer = product(local_shape, 0, split_dim) == 1;
  const bool concat_outer = product(block_shape, 0, concat_dim) == 1;
  const T* send = in;
  if (!split_outer) {
    const int64_t outer = product(local_shape, 0, split_dim);
    const int64_t row = product(local_shape, split_dim, static_cast<int>(local_shape.size()));
    T* packed = scratch<T>(comm, mover, 0, block * n);
    copy3(mover, in, {n, outer, row / n}, {row / n, row, 1}, packed);
    charge_copy<T>(comm, block * n);
    send = packed;
  }
  T* recv = concat_outer ? out : scratch<T>(comm, mover, 1, block * n);
  comm.all_to_all(send, recv, block, group);
  if (!concat_outer) {
    concat_blocks(recv, block_shape, concat_dim, n, out, mover);
    charge_copy<T>(comm, block * n);
  }
}

#define SHARC_TENSOR_COLLECTIVES_FOR(T)                                                   \
  template void all_gather_dim<T>(Communicator&, const Group&, const T*,                  \
                                  const std::vector<int64_t>&, int, T*, BlockMover*);     \
  template void reduce_scatter_dim<T>(Communicator&, const Group&, const T*,              \
                                      const std::vector<int64_t>&, int, T*, ReduceOp,     \
                                      BlockMover*);                                       \
  template void all_to_all_dim<T>(Communicator&, const Group&, const T*,                  \
                                  const std::vector<int64_t>&, int, int, T*, BlockMover*); \
  template void slice_block<T>(const T*, const std::vector<int64_t>&, int, int, int, T*); \
  template void place_block<T>(const T*, const std::vector<int64_t>&, int, int, int, T*);
SHARC_TENSOR_COLLECTIVES_FOR(float)
SHARC_TENSOR_COLLECTIVES_FOR(bf16)
SHARC_TENSOR_COLLECTIVES_FOR(int32_t)
#undef SHARC_TENSOR_COLLECTIVES_FOR

}  // namespace sharc::rt
