// The runtime calls of a generated CUDA program (BACKEND cuda, codegen's CUDA
// statements in emit_cuda_stmt.cpp): what a generated CPU program gets from
// runtime/kernels.h and runtime/tensor_collectives.h (layout copies,
// reductions, GEMMs), with the same arguments after the device they run on,
// plus the transfers between the caller's host arrays and device buffers.
//
// Written once in the dialect (device_ops_impl.h) and compiled twice, as the
// kernels are: by the host compiler for the block simulator (device_ops_sim.cpp)
// and by nvcc (device_ops_cuda.cu, with SHARC_ENABLE_CUDA). A generated .cu
// compiled by either calls the matching one: the declarations below are in
// the dialect's inline namespace, so each compilation links its own.
//
// Every call is asynchronous on the device's stream (the simulator runs it at
// once). Pointers are device pointers, except the host side of upload and
// download. Element types: float, rt::bf16 and int32_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/dtype.h"
#include "runtime/gpu/dialect.h"
#include "runtime/gpu/kernel_set.h"
#include "runtime/philox.h"

namespace sharc::rt {
class BlockMover;  // runtime/tensor_collectives.h
}

namespace sharc::gpu {

// One device as a generated program's step sees it: its kernels, GEMMs and
// transfers (the world's KernelSet for the device) and the stream its
// kernels run on.
// A communicator that enqueues its operations on a device stream
// (gpu::NcclWorld's): the collectives of device_collectives.h point it at
// the stream of the DeviceContext they are called with.
class StreamedCommunicator {
 public:
  virtual ~StreamedCommunicator() = default;
  virtual void use_stream(Stream s) = 0;
};

struct DeviceContext {
  KernelSet* kernels = nullptr;
  // Where this context's work goes: the device's compute stream, or its
  // comm stream in the context on_comm_stream() gives (a ring's transfers).
  Stream stream = nullptr;
  // Whether the host may read and write the device's buffers (the
  // simulator): collectives then run on them as they are
  // (device_collectives.h), else through host copies.
  bool host_memory = true;
  // Non-null where the world's communicator takes device buffers as they
  // are (gpu::NcclWorld): collectives hand them over unstaged, packing
  // interleaved blocks on the device through this.
  rt::BlockMover* device_comm = nullptr;
  // The device's two streams (KernelSet::compute_stream, comm_stream).
  Stream compute_stream = nullptr, comm_stream = nullptr;
  // Non-null where the communicator enqueues on a device stream.
  StreamedCommunicator* streamed_comm = nullptr;
};

// d with its work on the device's comm stream.
inline DeviceContext on_comm_stream(DeviceContext d) {
  d.stream = d.comm_stream;
  return d;
}
// What `waiter`'s stream is given from now on waits for everything given
// to `on`'s so far (the plan's waits between the two streams).
inline void stream_wait(const DeviceContext& waiter, const DeviceContext& on) {
  if (waiter.stream != on.stream) waiter.kernels->wait_stream(waiter.stream, on.stream);
}

#if defined(__CUDACC__)
inline namespace cuda_target {
#else
inline namespace sim_target {
#endif

// Which compilation this is: a generated program's host-compiler build runs
// its kernels on the block simulator, its nvcc build on a GPU, and
// device_context() refuses the other kind of world.
#if defined(__CUDACC__)
inline constexpr bool kSimulatorBuild = false;
#else
inline constexpr bool kSimulatorBuild = true;
#endif

// The grid of a one-dimensional launch over `count` elements in blocks of
// kElementwiseThreads threads, each thread looping with the grid's stride.
// The simulator runs every thread as a fiber, so it is given few blocks; a
// GPU gets enough to fill it.
inline constexpr unsigned kElementwiseThreads = 256;
unsigned elementwise_blocks(int64_t count);
// Inside such a kernel: the calling thread's first element, and the step to
// its next one.
SHARC_DEVICE int64_t element_index() {
  return static_cast<int64_t>(block_x()) * block_dim_x() + thread_x();
}
SHARC_DEVICE int64_t element_stride() { return static_cast<int64_t>(grid_dim_x()) * block_dim_x(); }

// out[0 .. count) = value (converted to T: bf16 to nearest even, i32 truncated).
template <class T>
void fill(const DeviceContext& d, T* out, size_t count, float value);
// A step buffer that starts as zeros, written on the device's stream in
// order with its other work (rt::Buffer's own zeros are the host's, at once,
// which a stream's earlier work could still be reading):
//   x = gpu::zeroed(gpu_dev, rt::Buffer(n, &mem, rt::uninitialized));
template <class B>
B zeroed(const DeviceContext& d, B buffer) {
  fill(d, buffer.data(), buffer.size(), 0.0f);
  return buffer;
}
template <class T>
void copy(const DeviceContext& d, const T* in, T* out, size_t count);
// out = a + b elementwise, in f32, rounded once (a ring's running sum).
template <class T>
void add(const DeviceContext& d, const T* a, const T* b, T* out, size_t count);
// As rt::strided_copy: out (contiguous, of `shape`) [i0, .., ik] =
// in[sum_d i_d * in_strides[d]]; strides may be 0.
template <class T>
void strided_copy(const DeviceContext& d, const T* in, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& in_strides, T* out);
// As rt::transpose: out dim i = in dim perm[i].
template <class T>
void transpose(const DeviceContext& d, const T* in, const std::vector<int64_t>& in_shape,
               const std::vector<int>& perm, T* out);
// As rt::broadcast, with in_shape of out_shape's rank (size 1 where repeated).
template <class T>
void broadcast(const DeviceContext& d, const T* in, const std::vector<int64_t>& in_shape,
               const std::vector<int64_t>& out_shape, T* out);
// As rt::reduce: sum or max over `axes`, in f32, each result rounded once;
// one thread per result, summing into eight partials as rt::reduce sums a
// contiguous run (device_ops_impl.h).
template <class T>
void reduce(const DeviceContext& d, const T* in, const std::vector<int64_t>& in_shape,
            const std::vector<int>& axes, rt::ReduceOp op, T* out);
// As rt::slice_block and rt::place_block: block `index` of `parts` equal
// blocks along dim, read from `in` of `shape` / written into `out` of `shape`.
template <class T>
void slice_block(const DeviceContext& d, const T* in, const std::vector<int64_t>& shape, int dim,
                 int parts, int index, T* out);
template <class T>
void place_block(const DeviceContext& d, const T* in, const std::vector<int64_t>& shape, int dim,
                 int parts, int index, T* out);
// Row r of `in` (rows of `run` elements) written (copy_rows) or added
// (add_rows, in f32, rounded once) at out[r * out_run + offset ..]: a pad
// and an add_slice along one dimension.
template <class T>
void copy_rows(const DeviceContext& d, const T* in, T* out, int64_t rows, int64_t run,
               int64_t out_run, int64_t offset);
template <class T>
void add_rows(const DeviceContext& d, const T* in, T* out, int64_t rows, int64_t run,
              int64_t out_run, int64_t offset);
// out[i] = start + (i / inner) % extent: an iota's block, its global index
// along one dimension.
template <class T>
void iota(const DeviceContext& d, T* out, int64_t count, int64_t inner, int64_t extent,
          int64_t start);

// A random_uniform's contiguous run: out[k] = rt::uniform_at(key, first + k)
// for k < count, key = rt::random_stream_key(node_key, seed[0]), the seed
// operand read on the device (a step counter, say), so nothing waits for it.
template <class S>
void uniform_fill(const DeviceContext& d, uint64_t node_key, const S* seed, uint64_t first,
                  int64_t count, float* out);

// As rt::gemm: C[b] = A[b] B[b] for b < batch, row major, A MxK (KxM when
// trans_a), B KxN (NxK when trans_b); through the device's KernelSet::gemm
// (cuBLASLt on a GPU), f32 accumulation, C rounded once.
void gemm(const DeviceContext& d, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
          bool trans_a, const float* B, bool trans_b, float* C);
void gemm(const DeviceContext& d, int64_t batch, int64_t M, int64_t N, int64_t K,
          const rt::bf16* A, bool trans_a, const rt::bf16* B, bool trans_b, rt::bf16* C);

// Host <-> device. upload_strided gathers a block of a host array (as
// rt::strided_copy reads it) into a staging array and uploads that.
template <class T>
void upload(const DeviceContext& d, T* device, const T* host, size_t count);
template <class T>
void download(const DeviceContext& d, T* host, const T* device, size_t count);
template <class T>
void upload_strided(const DeviceContext& d, const T* host, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& host_strides, T* device);

}  // inline namespace cuda_target / sim_target
}  // namespace sharc::gpu
