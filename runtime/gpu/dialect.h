// The CUDA dialect sharc's GPU kernels are written in, so that one kernel
// source compiles two ways:
//
//  - with nvcc (__CUDACC__ defined) it is plain CUDA: thread_x() is
//    threadIdx.x, sync_block() is __syncthreads(), launch() is <<<...>>>,
//    mma_16x8x16() is one mma.sync tensor-core instruction;
//  - with a host compiler it runs on the block simulator (runtime/gpu/sim.h):
//    every CUDA thread of a block is a fiber, sync_block() and the warp
//    shuffles are barriers between them, and launch() runs the grid's blocks
//    one after another, synchronously, on host memory.
//
// The simulator is how CI, which has no GPU, tests the kernels' indexing,
// their shared-memory tiling, their warp reductions and their tensor-core
// fragment layouts against the fp64 oracle. It does not model timing, memory
// coalescing, bank conflicts or races between threads that do not
// synchronise: a kernel correct here can still be slow or racy on a GPU, and
// only a GPU run proves it (tests/gpu, label `cuda`).
//
// Kernels use only what this header offers (plus arithmetic and the math
// functions below): no raw threadIdx, no static __shared__ arrays (shared
// memory is the launch's dynamic buffer, from shared_memory<T>()), no
// atomics, and every warp function is called by all 32 lanes of the warp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/gpu/kernel_args.h"  // Stream

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define SHARC_KERNEL __global__
#define SHARC_DEVICE __device__ __forceinline__
#define SHARC_HOST_DEVICE __host__ __device__ __forceinline__
// Before a loop over a register array's indices: unrolled, so the array
// stays in registers (a run-time index would put it in local memory).
#define SHARC_UNROLL _Pragma("unroll")
#else
#include <cmath>
#include <cstring>

#include "runtime/dtype.h"
#include "runtime/gpu/sim.h"
#define SHARC_KERNEL
#define SHARC_DEVICE inline
#define SHARC_HOST_DEVICE inline
#define SHARC_UNROLL
#endif

namespace sharc::gpu {

constexpr int kWarpSize = 32;

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Everything below is compiled differently by nvcc and by the host compiler,
// and a program may link both (a test comparing the device with the
// simulator): the inline namespace gives each its own symbols.
#if defined(__CUDACC__)
inline namespace cuda_target {
#else
inline namespace sim_target {
#endif

#if defined(__CUDACC__)

using bf16 = __nv_bfloat16;

SHARC_DEVICE unsigned thread_x() { return threadIdx.x; }
SHARC_DEVICE unsigned block_dim_x() { return blockDim.x; }
SHARC_DEVICE unsigned block_x() { return blockIdx.x; }
SHARC_DEVICE unsigned block_y() { return blockIdx.y; }
SHARC_DEVICE unsigned block_z() { return blockIdx.z; }
SHARC_DEVICE unsigned grid_dim_x() { return gridDim.x; }
SHARC_DEVICE void sync_block() { __syncthreads(); }

// The launch's dynamic shared memory (the smem argument of launch()).
template <class T>
SHARC_DEVICE T* shared_memory() {
  extern __shared__ __align__(16) unsigned char sharc_shared[];
  return reinterpret_cast<T*>(sharc_shared);
}

SHARC_DEVICE float shfl_xor(float v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
SHARC_DEVICE float shfl(float v, int src_lane) { return __shfl_sync(0xffffffffu, v, src_lane); }

SHARC_DEVICE float to_f32(float x) { return x; }
SHARC_DEVICE float to_f32(bf16 x) { return __bfloat162float(x); }
template <class T>
SHARC_DEVICE T from_f32(float x);
template <>
SHARC_DEVICE float from_f32<float>(float x) {
  return x;
}
template <>
SHARC_DEVICE bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
// Two bf16 values in one 32-bit word, `lo` in the low half: the operand
// format of the tensor-core instructions.
SHARC_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&p);
}

// The bits of two bf16 values in one word, `lo` in the low half.
SHARC_DEVICE uint32_t pack_bits(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}
// pack_bits(p[0], p[1]) as one 4-byte load (p 4-byte aligned).
SHARC_DEVICE uint32_t load_bf16x2(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }
// 16 bytes from src to dst in one load and one store (both 16-byte aligned).
SHARC_DEVICE void copy_16_bytes(void* dst, const void* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

// Copies from global to shared memory that bypass registers (cp.async):
// copy_async_16 moves 16 bytes (both addresses 16-byte aligned), copy_async_4
// one word; the copies a thread issued since its last async_copies_commit()
// form a group, and async_copies_wait<N>() returns once at most N of the
// thread's groups are still in flight. Other threads see the bytes only
// after a sync_block() that follows the wait. A kernel issues the next
// tile's copies, computes on the current tile, then waits: the loads' latency
// hides behind the compute without holding the tile in registers.
SHARC_DEVICE void copy_async_16(void* shared_dst, const void* global_src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(global_src) : "memory");
}
SHARC_DEVICE void copy_async_4(void* shared_dst, const void* global_src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(global_src) : "memory");
}
SHARC_DEVICE void async_copies_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
SHARC_DEVICE void async_copies_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
SHARC_DEVICE float exp_f(float x) { return expf(x); }
SHARC_DEVICE float exp2_f(float x) { return exp2f(x); }
SHARC_DEVICE float log_f(float x) { return logf(x); }
SHARC_DEVICE float sqrt_f(float x) { return sqrtf(x); }
SHARC_DEVICE float rsqrt_f(float x) { return rsqrtf(x); }
SHARC_DEVICE float tanh_f(float x) { return tanhf(x); }

// d = a * b + c on the tensor cores, for one warp: a 16x16 bf16 tile (row
// major) times a 16x8 bf16 tile (column major) plus a 16x8 f32 tile. Each
// lane holds the fragment elements the PTX ISA assigns it (lane l, group
// g = l / 4, t = l % 4):
//   a[r]: row g + 8 * (r % 2), columns 2 * (t + 4 * (r / 2)) and the next one;
//   b[r]: column g, rows 2 * (t + 4 * r) and the next one;
//   c[r], d[r]: row g + 8 * (r / 2), column 2 * t + r % 2;
// a pair's first element in the low 16 bits of its word.
SHARC_DEVICE void mma_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2],
                              const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
        "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// ldmatrix_x4: the warp loads four 8x8 matrices of bf16 from shared memory
// in one instruction (ldmatrix.sync.aligned.m8n8.x4.shared.b16). Lane l
// gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte
// aligned); register j of lane (g, t) = (l / 4, l % 4) gets matrix j's
// row g, elements 2t and 2t + 1 (the first in the low half). With _trans,
// its column g, rows 2t and 2t + 1: a B fragment of mma_16x8x16 from a
// tile stored [k][n].
SHARC_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const bf16* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
SHARC_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Launches kernel k on `grid` blocks of `block` threads with `smem` bytes of
// dynamic shared memory, on `stream`; returns at once. A launch the device
// refuses (bad configuration, too much shared memory) throws, naming `what`.
void throw_launch_error(const char* what, cudaError_t err);

template <class... P, class... A>
void launch(const char* what, void (*k)(P...), Dim3 grid, Dim3 block, size_t smem,
            Stream stream, A... args) {
  k<<<dim3(grid.x, grid.y, grid.z), dim3(block.x, block.y, block.z), smem,
      static_cast<cudaStream_t>(stream)>>>(static_cast<P>(args)...);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_launch_error(what, err);
}

// launch() of a kernel whose threads never wait for each other (no
// sync_block, no warp function, no shared memory exchange): the same launch
// on a GPU; the simulator runs its threads one after another.
template <class... P, class... A>
void launch_independent(const char* what, void (*k)(P...), Dim3 grid, Dim3 block, size_t smem,
                        Stream stream, A... args) {
  launch(what, k, grid, block, smem, stream, args...);
}

#else  // the block simulator

using bf16 = rt::bf16;

SHARC_DEVICE unsigned thread_x() { return sim::current().thread; }
SHARC_DEVICE unsigned block_dim_x() { return sim::current().block->threads; }
SHARC_DEVICE unsigned block_x() { return sim::current().block->index.x; }
SHARC_DEVICE unsigned block_y() { return sim::current().block->index.y; }
SHARC_DEVICE unsigned block_z() { return sim::current().block->index.z; }
SHARC_DEVICE unsigned grid_dim_x() { return sim::current().block->grid.x; }
SHARC_DEVICE void sync_block() { sim::sync_block(); }

template <class T>
SHARC_DEVICE T* shared_memory() {
  return reinterpret_cast<T*>(sim::current().block->shared);
}

SHARC_DEVICE float shfl_xor(float v, int lane_mask) {
  return sim::warp_exchange(v, static_cast<int>(sim::current().thread % kWarpSize) ^ lane_mask);
}
SHARC_DEVICE float shfl(float v, int src_lane) { return sim::warp_exchange(v, src_lane); }

SHARC_DEVICE float to_f32(float x) { return x; }
SHARC_DEVICE float to_f32(bf16 x) { return static_cast<float>(x); }
template <class T>
SHARC_DEVICE T from_f32(float x);
template <>
SHARC_DEVICE float from_f32<float>(float x) {
  return x;
}
template <>
SHARC_DEVICE bf16 from_f32<bf16>(float x) {
  return bf16(x);
}
SHARC_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(rt::bf16_bits_from_float(lo)) |
         (static_cast<uint32_t>(rt::bf16_bits_from_float(hi)) << 16);
}

SHARC_DEVICE uint32_t pack_bits(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
}
SHARC_DEVICE uint32_t load_bf16x2(const bf16* p) { return pack_bits(p[0], p[1]); }
SHARC_DEVICE void copy_16_bytes(void* dst, const void* src) { std::memcpy(dst, src, 16); }

// The simulator copies at once: a kernel that reads a tile before its
// wait and sync_block() is wrong on the device, not here.
SHARC_DEVICE void copy_async_16(void* shared_dst, const void* global_src) { std::memcpy(shared_dst, global_src, 16); }
SHARC_DEVICE void copy_async_4(void* shared_dst, const void* global_src) { std::memcpy(shared_dst, global_src, 4); }
SHARC_DEVICE void async_copies_commit() {}
template <int N>
SHARC_DEVICE void async_copies_wait() {}
SHARC_DEVICE float exp_f(float x) { return std::exp(x); }
SHARC_DEVICE float exp2_f(float x) { return std::exp2(x); }
SHARC_DEVICE float log_f(float x) { return std::log(x); }
SHARC_DEVICE float sqrt_f(float x) { return std::sqrt(x); }
SHARC_DEVICE float rsqrt_f(float x) { return 1.0f / std::sqrt(x); }
SHARC_DEVICE float tanh_f(float x) { return std::tanh(x); }

SHARC_DEVICE void mma_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2],
                              const float c[4]) {
  sim::mma_16x8x16(d, a, b, c);
}
SHARC_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const bf16* row) { sim::ldmatrix_x4(r, row, false); }
SHARC_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* row) { sim::ldmatrix_x4(r, row, true); }

// On a stream queue the launch waits there, its arguments copied, until
// the queue runs it (sim::StreamQueue).
template <class... P, class... A>
void launch(const char* what, void (*k)(P...), Dim3 grid, Dim3 block, size_t smem,
            Stream stream, A... args) {
  auto run = [=] {
    sim::run(what, {grid.x, grid.y, grid.z}, block.x * block.y * block.z, smem,
             [&] { k(static_cast<P>(args)...); });
  };
  sim::StreamQueue::give_or_run(stream, run);
}

template <class... P, class... A>
void launch_independent(const char* what, void (*k)(P...), Dim3 grid, Dim3 block, size_t smem,
                        Stream stream, A... args) {
  auto run = [=] {
    sim::run_independent(what, {grid.x, grid.y, grid.z}, block.x * block.y * block.z, smem,
                         [&] { k(static_cast<P>(args)...); });
  };
  sim::StreamQueue::give_or_run(stream, run);
}

#endif

// Sum and maximum over the 32 lanes of a warp: every lane gets the result.
SHARC_DEVICE float warp_sum(float v) {
  for (int m = kWarpSize / 2; m > 0; m /= 2) v += shfl_xor(v, m);
  return v;
}
SHARC_DEVICE float warp_max(float v) {
  for (int m = kWarpSize / 2; m > 0; m /= 2) v = fmaxf(v, shfl_xor(v, m));
  return v;
}

// Sum over the block (blockDim a multiple of 32, at most 1024 threads):
// every thread gets the result. `scratch` is 32 floats of shared memory the
// caller does not otherwise use during the call.
SHARC_DEVICE float block_sum(float v, float* scratch) {
  const unsigned lane = thread_x() % kWarpSize, warp = thread_x() / kWarpSize;
  const unsigned warps = block_dim_x() / kWarpSize;
  v = warp_sum(v);
  sync_block();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  sync_block();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

}  // inline namespace cuda_target / sim_target
}  // namespace sharc::gpu
