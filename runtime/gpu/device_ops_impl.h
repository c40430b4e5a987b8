// The definitions behind device_ops.h, in the dialect: device_ops_sim.cpp
// (host compiler, block simulator) and device_ops_cuda.cu (nvcc) include
// this file and nothing else does.
//
// Layout kernels are one strided copy: an out element's flat index is taken
// apart over the out shape and put together again with the input's strides
// (transpose, broadcast and slice_block are strided copies; place_block is
// the same with the strides on the write side). A short reduction gives
// each result one thread, which adds its reduced elements (in row-major
// order) in f32 into eight partial sums, element r into partial r % 8, and
// adds the partials pairwise: the CPU runtime's sum_row order for a
// contiguous run, so a short reduction over the innermost dimensions matches
// the CPU bit for bit, and any other is as accurate (error growing with n / 8,
// not n). A long one (kLongReduction elements or more per result) spreads
// each result over many threads, in a fixed order (deterministic, as
// accurate, not the CPU's bits): over the innermost contiguous run, a warp
// per result, lane l adding elements l, l + 32, ... and the lanes combined by
// shuffles (coalesced reads: a layer norm's statistics); otherwise 32
// consecutive results share a block, rows of threads each adding every
// rows-th reduced element, combined row by row in shared memory (coalesced
// when the results are contiguous: a bias gradient, summing [rows, features]
// over the rows). Where the KernelSet lends scratch (reduce_scratch), the
// reduced elements are also cut into slices of kReduceSliceRows, a block per
// (32 results, slice), and a second pass adds the slices' partials in
// order: a bias gradient of 768 features is 24 tiles, too few blocks to
// fill a GPU. On an H100 a single thread summing 32768 rows of a bias
// gradient took 22 ms, a block per tile 0.8 ms.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/gpu/device_ops.h"
#include "runtime/kernels.h"

namespace sharc::gpu {
#if defined(__CUDACC__)
inline namespace cuda_target {
#else
inline namespace sim_target {
#endif

namespace device_ops_detail {

// The most dimensions a layout kernel takes (the IR's tensors have fewer).
constexpr int kMaxRank = 8;

// A shape and one stride per dimension, by value into a kernel.
struct Strided {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};

inline Strided strided(const char* what, const std::vector<int64_t>& shape,
                       const std::vector<int64_t>& strides) {
  if (shape.size() > static_cast<size_t>(kMaxRank) || strides.size() != shape.size())
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(shape.size()) +
                                " dimensions with " + std::to_string(strides.size()) +
                                " strides (at most " + std::to_string(kMaxRank) + ")");
  Strided s;
  s.rank = static_cast<int>(shape.size());
  for (int d = 0; d < s.rank; ++d) {
    s.size[d] = shape[d];
    s.stride[d] = strides[d];
  }
  return s;
}

inline std::vector<int64_t> contiguous(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1];
  return st;
}

// The offset, under s's strides, of the element at flat index i of s's shape.
SHARC_DEVICE int64_t offset_of(const Strided& s, int64_t i) {
  int64_t off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t e = s.size[d];
    off += (i % e) * s.stride[d];
    i /= e;
  }
  return off;
}

SHARC_HOST_DEVICE float load(float x) { return x; }
SHARC_HOST_DEVICE float load(rt::bf16 x) { return static_cast<float>(x); }
SHARC_HOST_DEVICE float load(int32_t x) { return static_cast<float>(x); }
template <class T>
SHARC_HOST_DEVICE T store(float v);
template <>
SHARC_HOST_DEVICE float store<float>(float v) {
  return v;
}
template <>
SHARC_HOST_DEVICE rt::bf16 store<rt::bf16>(float v) {
  return rt::bf16(v);
}
template <>
SHARC_HOST_DEVICE int32_t store<int32_t>(float v) {
  return static_cast<int32_t>(v);
}

template <class T>
SHARC_KERNEL void fill_kernel(T* out, int64_t n, T value) {
  for (int64_t i = element_index(); i < n; i += element_stride()) out[i] = value;
}

template <class T>
SHARC_KERNEL void copy_kernel(const T* in, T* out, int64_t n) {
  for (int64_t i = element_index(); i < n; i += element_stride()) out[i] = in[i];
}

template <class T>
SHARC_KERNEL void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = element_index(); i < n; i += element_stride()) out[i] = store<T>(load(a[i]) + load(b[i]));
}

// out[i] = in[offset_of(src, i)]: out is contiguous of src's shape.
template <class T>
SHARC_KERNEL void gather_kernel(const T* in, Strided src, T* out, int64_t n) {
  for (int64_t i = element_index(); i < n; i += element_stride()) out[i] = in[offset_of(src, i)];
}

// out[offset_of(dst, i)] = in[i]: in is contiguous of dst's shape.
template <class T>
SHARC_KERNEL void scatter_kernel(const T* in, Strided dst, T* out, int64_t n) {
  for (int64_t i = element_index(); i < n; i += element_stride()) out[offset_of(dst, i)] = in[i];
}

// Result i: its kept coordinates (over `kept`, with the input's strides)
// and every reduced element (over `reduced`), in row-major order.
template <class T>
SHARC_KERNEL void reduce_kernel(const T* in, Strided kept, Strided reduced, int64_t n_out,
                                int64_t n_reduced, bool max, T* out) {
  for (int64_t i = element_index(); i < n_out; i += element_stride()) {
    const int64_t base = offset_of(kept, i);
    if (max) {
      float acc = -INFINITY;
      for (int64_t r = 0; r < n_reduced; ++r) {
        const float x = load(in[base + offset_of(reduced, r)]);
        acc = x > acc ? x : acc;
      }
      out[i] = store<T>(acc);
      continue;
    }
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t r = 0; r < n_reduced; ++r) s[r % 8] += load(in[base + offset_of(reduced, r)]);
    out[i] = store<T>(((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
  }
}

// A long reduction's running value after x: the larger of the two, or their sum.
SHARC_DEVICE float fold(float acc, float x, bool max) { return max ? (x > acc ? x : acc) : acc + x; }

// Per result, kLongReduction reduced elements or more go to the parallel
// kernels below; with the KernelSet's scratch, in slices of
// kReduceSliceRows.
constexpr int64_t kLongReduction = 256;
constexpr int64_t kReduceSliceRows = 256;

// The reduced elements of result i are in[i * n_red .. (i + 1) * n_red): a
// warp per result (the warp's lanes agree on i, so the shuffles see all 32).
template <class T>
SHARC_KERNEL void reduce_rows_kernel(const T* in, int64_t n_out, int64_t n_red, bool max, T* out) {
  const unsigned lane = thread_x() % kWarpSize;
  const int64_t warps = static_cast<int64_t>(grid_dim_x()) * (block_dim_x() / kWarpSize);
  for (int64_t i = (static_cast<int64_t>(block_x()) * block_dim_x() + thread_x()) / kWarpSize; i < n_out;
       i += warps) {
    const T* row = in + i * n_red;
    float acc = max ? -INFINITY : 0.0f;
    for (int64_t r = lane; r < n_red; r += kWarpSize) acc = fold(acc, load(row[r]), max);
    acc = max ? warp_max(acc) : warp_sum(acc);
    if (lane == 0) out[i] = store<T>(acc);
  }
}

// Each row g of 32 threads (a warp) holds a partial for the 32 results of
// the block's tile, lane c for result c: combined in row order through
// `sums` ([rows][32] floats of shared memory); row 0's threads get the
// totals. Every thread of the block calls it.
SHARC_DEVICE float combine_rows(float acc, float* sums, bool max) {
  const unsigned c = thread_x() % kWarpSize, g = thread_x() / kWarpSize, rows = block_dim_x() / kWarpSize;
  sums[g * kWarpSize + c] = acc;
  sync_block();
  float total = sums[c];
  if (g == 0)
    for (unsigned k = 1; k < rows; ++k) total = fold(total, sums[k * kWarpSize + c], max);
  sync_block();  // sums is written again by the next call
  return total;
}

// Reduced element r of the result whose elements start at `base`: at r *
// red_stride where red_stride > 0 (one reduced dimension, or several that
// run as one), else at offset_of(reduced, r).
template <class T>
SHARC_DEVICE float reduced_element(const T* base, const Strided& reduced, int64_t red_stride, int64_t r) {
  return load(base[red_stride > 0 ? r * red_stride : offset_of(reduced, r)]);
}

// The calling thread's share of result i (lane c of the block's tile,
// c = i % 32) over reduced elements [first, end): row g of threads folds
// elements first + g, first + g + rows, ...; the identity where i is past
// the results.
template <class T>
SHARC_DEVICE float row_partial(const T* in, const Strided& kept, const Strided& reduced, int64_t red_stride,
                               int64_t i, int64_t n_out, int64_t first, int64_t end, bool max) {
  const unsigned g = thread_x() / kWarpSize, rows = block_dim_x() / kWarpSize;
  float acc = max ? -INFINITY : 0.0f;
  if (i >= n_out) return acc;
  const T* base = in + offset_of(kept, i);
  for (int64_t r = first + g; r < end; r += rows) acc = fold(acc, reduced_element(base, reduced, red_stride, r), max);
  return acc;
}

// Results in tiles of 32 (thread c of each row of 32 threads takes result
// tile * 32 + c), each row of threads g adding reduced elements g, g + rows,
// ...; the rows' sums combined in order (combine_rows).
template <class T>
SHARC_KERNEL void reduce_tiles_kernel(const T* in, Strided kept, Strided reduced, int64_t red_stride,
                                      int64_t n_out, int64_t n_red, bool max, T* out) {
  float* sums = shared_memory<float>();
  const unsigned c = thread_x() % kWarpSize, g = thread_x() / kWarpSize;
  for (int64_t tile = block_x(); tile * kWarpSize < n_out; tile += grid_dim_x()) {  // the same for the block
    const int64_t i = tile * kWarpSize + c;
    const float acc = row_partial(in, kept, reduced, red_stride, i, n_out, 0, n_red, max);
    const float total = combine_rows(acc, sums, max);
    if (g == 0 && i < n_out) out[i] = store<T>(total);
  }
}

// The first of two passes: grid (tiles of 32 results, slices of per_slice
// reduced elements), each block as reduce_tiles_kernel's over its slice,
// writing partial[slice * n_out + i].
template <class T>
SHARC_KERNEL void reduce_slices_kernel(const T* in, Strided kept, Strided reduced, int64_t red_stride,
                                       int64_t n_out, int64_t n_red, int64_t per_slice, bool max,
                                       float* partial) {
  float* sums = shared_memory<float>();
  const unsigned c = thread_x() % kWarpSize, g = thread_x() / kWarpSize;
  const int64_t i = static_cast<int64_t>(block_x()) * kWarpSize + c;
  const int64_t first = static_cast<int64_t>(block_y()) * per_slice;
  const int64_t end = first + per_slice < n_red ? first + per_slice : n_red;
  const float acc = row_partial(in, kept, reduced, red_stride, i, n_out, first, end, max);
  const float total = combine_rows(acc, sums, max);
  if (g == 0 && i < n_out) partial[static_cast<int64_t>(block_y()) * n_out + i] = total;
}

// The second pass: result i combines partial[s * n_out + i] over the
// slices, row g of threads taking slices g, g + rows, ..., the rows
// combined in order.
template <class T>
SHARC_KERNEL void reduce_partials_kernel(const float* partial, int64_t slices, int64_t n_out, bool max, T* out) {
  float* sums = shared_memory<float>();
  const unsigned c = thread_x() % kWarpSize, g = thread_x() / kWarpSize, rows = block_dim_x() / kWarpSize;
  const int64_t i = static_cast<int64_t>(block_x()) * kWarpSize + c;
  float acc = max ? -INFINITY : 0.0f;
  if (i < n_out)
    for (int64_t s = g; s < slices; s += rows) acc = fold(acc, partial[s * n_out + i], max);
  const float total = combine_rows(acc, sums, max);
  if (g == 0 && i < n_out) out[i] = store<T>(total);
}

template <class T>
SHARC_KERNEL void rows_kernel(const T* in, T* out, int64_t n, int64_t run, int64_t out_run,
                              int64_t offset, bool add) {
  for (int64_t i = element_index(); i < n; i += element_stride()) {
    const int64_t o = i / run * out_run + offset + i % run;
    out[o] = add ? store<T>(load(out[o]) + load(in[i])) : in[i];
  }
}

template <class T>
SHARC_KERNEL void iota_kernel(T* out, int64_t n, int64_t inner, int64_t extent, int64_t start) {
  for (int64_t i = element_index(); i < n; i += element_stride())
    out[i] = store<T>(static_cast<float>(start + (i / inner) % extent));
}

// The seed's value as random_stream_key takes it (exact for f32 and i32).
SHARC_HOST_DEVICE double seed_value(float x) { return x; }
SHARC_HOST_DEVICE double seed_value(int32_t x) { return x; }
SHARC_HOST_DEVICE double seed_value(rt::bf16 x) { return static_cast<float>(x); }

template <class S>
SHARC_KERNEL void uniform_kernel(uint64_t node_key, const S* seed, uint64_t first, int64_t n,
                                 float* out) {
  const uint64_t key = rt::random_stream_key(node_key, seed_value(seed[0]));
  for (int64_t i = element_index(); i < n; i += element_stride())
    out[i] = rt::uniform_at(key, first + static_cast<uint64_t>(i));
}

template <class T>
void gather(const DeviceContext& d, const char* what, const T* in,
            const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, T* out) {
  const int64_t n = rt::num_elements(shape);
  if (n == 0) return;
  launch_independent(what, gather_kernel<T>, Dim3{elementwise_blocks(n)}, Dim3{kElementwiseThreads}, 0,
         d.stream, in, strided(what, shape, strides), out, n);
}

// The strides and offset of block `index` of `parts` along dim of `shape`.
inline std::pair<std::vector<int64_t>, int64_t> block_of(const char* what,
                                                         const std::vector<int64_t>& shape,
                                                         int dim, int parts, int index,
                                                         std::vector<int64_t>* block_shape) {
  if (dim < 0 || dim >= static_cast<int>(shape.size()) || parts <= 0 ||
      shape[dim] % parts != 0 || index < 0 || index >= parts)
    throw std::invalid_argument(std::string(what) + ": block " + std::to_string(index) + " of " +
                                std::to_string(parts) + " along dim " + std::to_string(dim) +
                                " does not fit the shape");
  const std::vector<int64_t> st = contiguous(shape);
  *block_shape = shape;
  (*block_shape)[dim] /= parts;
  return {st, index * (*block_shape)[dim] * st[dim]};
}

}  // namespace device_ops_detail

unsigned elementwise_blocks(int64_t count) {
#if defined(__CUDACC__)
  constexpr int64_t kMaxBlocks = 4096;
#else
  constexpr int64_t kMaxBlocks = 4;  // the simulator runs the threads one by one anyway
#endif
  const int64_t b = (count + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, kMaxBlocks));
}

template <class T>
void fill(const DeviceContext& d, T* out, size_t count, float value) {
  using namespace device_ops_detail;
  if (count == 0) return;
  const int64_t n = static_cast<int64_t>(count);
  launch_independent("fill", fill_kernel<T>, Dim3{elementwise_blocks(n)}, Dim3{kElementwiseThreads}, 0,
         d.stream, out, n, store<T>(value));
}

template <class T>
void copy(const DeviceContext& d, const T* in, T* out, size_t count) {
  using namespace device_ops_detail;
  if (count == 0) return;
  const int64_t n = static_cast<int64_t>(count);
  launch_independent("copy", copy_kernel<T>, Dim3{elementwise_blocks(n)}, Dim3{kElementwiseThreads}, 0,
         d.stream, in, out, n);
}

template <class T>
void add(const DeviceContext& d, const T* a, const T* b, T* out, size_t count) {
  using namespace device_ops_detail;
  if (count == 0) return;
  const int64_t n = static_cast<int64_t>(count);
  launch_independent("add", add_kernel<T>, Dim3{elementwise_blocks(n)}, Dim3{kElementwiseThreads}, 0,
                     d.stream, a, b, out, n);
}

template <class T>
void strided_copy(const DeviceContext& d, const T* in, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& in_strides, T* out) {
  device_ops_detail::gather(d, "strided_copy", in, shape, in_strides, out);
}

template <class T>
void transpose(const DeviceContext& d, const T* in, const std::vector<int64_t>& in_shape,
               const std::vector<int>& perm, T* out) {
  using namespace device_ops_detail;
  const std::vector<int64_t> st = contiguous(in_shape);
  std::vector<bool> seen(in_shape.size(), false);
  std::vector<int64_t> shape, strides;
  for (int p : perm) {
    if (p < 0 || p >= static_cast<int>(in_shape.size()) || seen[p])
      throw std::invalid_argument("transpose: the permutation does not fit the shape");
    seen[p] = true;
    shape.push_back(in_shape[p]);
    strides.push_back(st[p]);
  }
  if (perm.size() != in_shape.size())
    throw std::invalid_argument("transpose: the permutation does not fit the shape");
  gather(d, "transpose", in, shape, strides, out);
}

template <class T>
void broadcast(const DeviceContext& d, const T* in, const std::vector<int64_t>& in_shape,
               const std::vector<int64_t>& out_shape, T* out) {
  using namespace device_ops_detail;
  if (in_shape.size() != out_shape.size())
    throw std::invalid_argument("broadcast: the operand's shape has another rank than the result's");
  std::vector<int64_t> st = contiguous(in_shape);
  for (size_t k = 0; k < in_shape.size(); ++k) {
    if (in_shape[k] == out_shape[k]) continue;
    if (in_shape[k] != 1) throw std::invalid_argument("broadcast: the shapes do not broadcast");
    st[k] = 0;
  }
  gather(d, "broadcast", in, out_shape, st, out);
}

template <class T>
void reduce(const DeviceContext& d, const T* in, const std::vector<int64_t>& in_shape,
            const std::vector<int>& axes, rt::ReduceOp op, T* out) {
  using namespace device_ops_detail;
  const std::vector<int64_t> st = contiguous(in_shape);
  std::vector<bool> reduced(in_shape.size(), false);
  for (int a : axes) {
    if (a < 0 || a >= static_cast<int>(in_shape.size()) || reduced[a])
      throw std::invalid_argument("reduce: axis " + std::to_string(a) + " out of range or repeated");
    reduced[a] = true;
  }
  std::vector<int64_t> kept_shape, kept_st, red_shape, red_st;
  for (size_t k = 0; k < in_shape.size(); ++k) {
    (reduced[k] ? red_shape : kept_shape).push_back(in_shape[k]);
    (reduced[k] ? red_st : kept_st).push_back(st[k]);
  }
  const int64_t n_out = rt::num_elements(kept_shape), n_red = rt::num_elements(red_shape);
  if (n_out == 0) return;
  const bool max = op == rt::ReduceOp::kMax;
  if (n_red >= kLongReduction) {
    // The innermost contiguous run: the reduced axes are the last ones.
    bool suffix = true;
    for (size_t k = 0; k < in_shape.size(); ++k)
      suffix = suffix && reduced[k] == (k >= in_shape.size() - red_shape.size());
    if (suffix) {
      constexpr int kThreads = 256, kWarpsPerBlock = kThreads / kWarpSize;
      const int64_t blocks = std::min<int64_t>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock, 65535);
      launch("reduce", reduce_rows_kernel<T>, Dim3{static_cast<unsigned>(blocks)}, Dim3{kThreads}, 0, d.stream,
             in, n_out, n_red, max, out);
      return;
    }
    // One stride for every reduced element where the reduced dimensions,
    // size-1 ones aside, run as one (each stride the next one's times its size).
    int64_t red_stride = 0, expect = 0;
    for (int k = static_cast<int>(red_shape.size()) - 1; k >= 0; --k) {
      if (red_shape[k] == 1) continue;
      if (red_stride == 0) {
        red_stride = red_st[k];
      } else if (red_st[k] != expect) {
        red_stride = 0;
        break;
      }
      expect = red_st[k] * red_shape[k];
    }
    const int64_t tiles = (n_out + kWarpSize - 1) / kWarpSize;
    float* scratch = d.kernels ? d.kernels->reduce_scratch(d.stream) : nullptr;
    int64_t slices = std::min<int64_t>((n_red + kReduceSliceRows - 1) / kReduceSliceRows,
                                       static_cast<int64_t>(kReduceScratchFloats) / n_out);
    if (scratch && slices >= 2 && tiles <= 65535) {
      constexpr int kThreads = 256;
      const int64_t per_slice = (n_red + slices - 1) / slices;
      slices = (n_red + per_slice - 1) / per_slice;  // none empty
      const Strided kept = strided("reduce", kept_shape, kept_st), red = strided("reduce", red_shape, red_st);
      launch("reduce", reduce_slices_kernel<T>, Dim3{static_cast<unsigned>(tiles), static_cast<unsigned>(slices)},
             Dim3{kThreads}, kThreads * sizeof(float), d.stream, in, kept, red, red_stride, n_out, n_red, per_slice,
             max, scratch);
      launch("reduce", reduce_partials_kernel<T>, Dim3{static_cast<unsigned>(tiles)}, Dim3{kThreads},
             kThreads * sizeof(float), d.stream, static_cast<const float*>(scratch), slices, n_out, max, out);
      return;
    }
    constexpr int kThreads = 512;
    const int64_t blocks = std::min<int64_t>(tiles, 65535);
    launch("reduce", reduce_tiles_kernel<T>, Dim3{static_cast<unsigned>(blocks)}, Dim3{kThreads},
           kThreads * sizeof(float), d.stream, in, strided("reduce", kept_shape, kept_st),
           strided("reduce", red_shape, red_st), red_stride, n_out, n_red, max, out);
    return;
  }
  launch_independent("reduce", reduce_kernel<T>, Dim3{elementwise_blocks(n_out)}, Dim3{kElementwiseThreads}, 0,
         d.stream, in, strided("reduce", kept_shape, kept_st), strided("reduce", red_shape, red_st),
         n_out, n_red, max, out);
}

template <class T>
void slice_block(const DeviceContext& d, const T* in, const std::vector<int64_t>& shape, int dim,
                 int parts, int index, T* out) {
  using namespace device_ops_detail;
  std::vector<int64_t> block;
  const auto [st, offset] = block_of("slice_block", shape, dim, parts, index, &block);
  gather(d, "slice_block", in + offset, block, st, out);
}

template <class T>
void place_block(const DeviceContext& d, const T* in, const std::vector<int64_t>& shape, int dim,
                 int parts, int index, T* out) {
  using namespace device_ops_detail;
  std::vector<int64_t> block;
  const auto [st, offset] = block_of("place_block", shape, dim, parts, index, &block);
  const int64_t n = rt::num_elements(block);
  if (n == 0) return;
  launch_independent("place_block", scatter_kernel<T>, Dim3{elementwise_blocks(n)}, Dim3{kElementwiseThreads},
         0, d.stream, in, strided("place_block", block, st), out + offset, n);
}

template <class T>
void copy_rows(const DeviceContext& d, const T* in, T* out, int64_t rows, int64_t run,
               int64_t out_run, int64_t offset) {
  using namespace device_ops_detail;
  const int64_t n = rows * run;
  if (n == 0) return;
  launch_independent("copy_rows", rows_kernel<T>, Dim3{elementwise_blocks(n)}, Dim3{kElementwiseThreads}, 0,
         d.stream, in, out, n, run, out_run, offset, false);
}

template <class T>
void add_rows(const DeviceContext& d, const T* in, T* out, int64_t rows, int64_t run,
              int64_t out_run, int64_t offset) {
  using namespace device_ops_detail;
  const int64_t n = rows * run;
  if (n == 0) return;
  launch_independent("add_rows", rows_kernel<T>, Dim3{elementwise_blocks(n)}, Dim3{kElementwiseThreads}, 0,
         d.stream, in, out, n, run, out_run, offset, true);
}

template <class T>
void iota(const DeviceContext& d, T* out, int64_t count, int64_t inner, int64_t extent,
          int64_t start) {
  using namespace device_ops_detail;
  if (count == 0) return;
  launch_independent("iota", iota_kernel<T>, Dim3{elementwise_blocks(count)}, Dim3{kElementwiseThreads}, 0,
         d.stream, out, count, inner, extent, start);
}

template <class S>
void uniform_fill(const DeviceContext& d, uint64_t node_key, const S* seed, uint64_t first,
                  int64_t count, float* out) {
  using namespace device_ops_detail;
  if (count <= 0) return;
  launch_independent("uniform_fill", uniform_kernel<S>, Dim3{elementwise_blocks(count)},
                     Dim3{kElementwiseThreads}, 0, d.stream, node_key, seed, first, count, out);
}

namespace device_ops_detail {

inline void batched_gemm(const DeviceContext& d, DType t, size_t elem, int64_t batch, int64_t M,
                         int64_t N, int64_t K, const void* A, bool trans_a, const void* B,
                         bool trans_b, void* C) {
  for (int64_t b = 0; b < batch; ++b) {
    Gemm g;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.m = static_cast<int>(M);
    g.n = static_cast<int>(N);
    g.k = static_cast<int>(K);
    g.ab_dtype = t;
    g.c_dtype = t;
    g.a = static_cast<const char*>(A) + b * M * K * elem;
    g.lda = trans_a ? M : K;
    g.b = static_cast<const char*>(B) + b * K * N * elem;
    g.ldb = trans_b ? K : N;
    g.c = static_cast<char*>(C) + b * M * N * elem;
    g.ldc = N;
    d.kernels->gemm(g);
  }
}

}  // namespace device_ops_detail

void gemm(const DeviceContext& d, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
          bool trans_a, const float* B, bool trans_b, float* C) {
  device_ops_detail::batched_gemm(d, DType::kF32, sizeof(float), batch, M, N, K, A, trans_a, B,
                                  trans_b, C);
}

void gemm(const DeviceContext& d, int64_t batch, int64_t M, int64_t N, int64_t K,
          const rt::bf16* A, bool trans_a, const rt::bf16* B, bool trans_b, rt::bf16* C) {
  device_ops_detail::batched_gemm(d, DType::kBF16, sizeof(rt::bf16), batch, M, N, K, A, trans_a,
                                  B, trans_b, C);
}

template <class T>
void upload(const DeviceContext& d, T* device, const T* host, size_t count) {
  if (count > 0) d.kernels->upload(device, host, count * sizeof(T));
}

template <class T>
void download(const DeviceContext& d, T* host, const T* device, size_t count) {
  if (count > 0) d.kernels->download(host, device, count * sizeof(T));
}

template <class T>
void upload_strided(const DeviceContext& d, const T* host, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& host_strides, T* device) {
  using namespace device_ops_detail;
  const int64_t n = rt::num_elements(shape);
  if (n == 0) return;
  std::vector<T> staging(static_cast<size_t>(n));
  rt::strided_copy(host, shape, host_strides, staging.data());
  d.kernels->upload(device, staging.data(), static_cast<size_t>(n) * sizeof(T));
}

#define SHARC_DEVICE_OPS_FOR(T)                                                                  \
  template void fill<T>(const DeviceContext&, T*, size_t, float);                                \
  template void copy<T>(const DeviceContext&, const T*, T*, size_t);                             \
  template void add<T>(const DeviceContext&, const T*, const T*, T*, size_t);                    \
  template void strided_copy<T>(const DeviceContext&, const T*, const std::vector<int64_t>&,     \
                                const std::vector<int64_t>&, T*);                                \
  template void transpose<T>(const DeviceContext&, const T*, const std::vector<int64_t>&,        \
                             const std::vector<int>&, T*);                                       \
  template void broadcast<T>(const DeviceContext&, const T*, const std::vector<int64_t>&,        \
                             const std::vector<int64_t>&, T*);                                   \
  template void reduce<T>(const DeviceContext&, const T*, const std::vector<int64_t>&,           \
                          const std::vector<int>&, rt::ReduceOp, T*);                            \
  template void slice_block<T>(const DeviceContext&, const T*, const std::vector<int64_t>&, int, \
                               int, int, T*);                                                    \
  template void place_block<T>(const DeviceContext&, const T*, const std::vector<int64_t>&, int, \
                               int, int, T*);                                                    \
  template void copy_rows<T>(const DeviceContext&, const T*, T*, int64_t, int64_t, int64_t,      \
                             int64_t);                                                           \
  template void add_rows<T>(const DeviceContext&, const T*, T*, int64_t, int64_t, int64_t,       \
                            int64_t);                                                            \
  template void iota<T>(const DeviceContext&, T*, int64_t, int64_t, int64_t, int64_t);           \
  template void upload<T>(const DeviceContext&, T*, const T*, size_t);                           \
  template void download<T>(const DeviceContext&, T*, const T*, size_t);                         \
  template void upload_strided<T>(const DeviceContext&, const T*, const std::vector<int64_t>&,   \
                                  const std::vector<int64_t>&, T*);
SHARC_DEVICE_OPS_FOR(float)
SHARC_DEVICE_OPS_FOR(rt::bf16)
SHARC_DEVICE_OPS_FOR(int32_t)
#undef SHARC_DEVICE_OPS_FOR
template void uniform_fill<float>(const DeviceContext&, uint64_t, const float*, uint64_t, int64_t, float*);
template void uniform_fill<int32_t>(const DeviceContext&, uint64_t, const int32_t*, uint64_t, int64_t, float*);
template void uniform_fill<rt::bf16>(const DeviceContext&, uint64_t, const rt::bf16*, uint64_t, int64_t, float*);

}  // inline namespace cuda_target / sim_target
}  // namespace sharc::gpu
