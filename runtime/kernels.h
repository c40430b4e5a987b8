// Per-device compute kernels for row-major tensors of f32, bf16 and i32
// (T = float, bf16, int32_t; data movement is the same for all three, and
// bf16 arithmetic runs in f32, rounded once on the way out), called by generated
// per-device code and by the per-device interpreter. They are plain CPU loops
// plus OpenBLAS for gemm, not a tensor library: shapes are std::vector<int64_t>,
// outputs are caller-allocated and must not overlap inputs. The data-movement
// kernels (transpose, broadcast, slices) all reduce to one strided copy that
// first collapses dimensions which stay contiguous, so their hot loops run over
// whole rows (memcpy / fill) or 16x16 tiles, never per-element index vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/communicator.h"  // ReduceOp
#include "runtime/dtype.h"

namespace sharc::rt {

// Which kernels rt::gemm runs: "libxsmm" (JIT-compiled small-GEMM kernels,
// BLAS where none can be made) or "blas" (the CBLAS sgemm), as configured
// (SHARC_USE_LIBXSMM).
const char* gemm_kernels();
// True when the GEMMs of a one-device world run on OpenBLAS's own thread
// pool ("blas"); libxsmm's kernels run on the calling thread, so a device
// splits them over its team (runtime/team.h) instead.
bool gemm_on_blas_threads();

// C[b] = A[b]·B[b] + beta*C[b] for b < batch, with the batch matrices stored
// back to back. A is MxK (KxM when trans_a), B is KxN (NxK when trans_b), C is
// MxN. A weight shared across the batch is better passed as batch=1 with the
// batch folded into M.
void gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, bool trans_a,
          const float* B, bool trans_b, float* C, float beta = 0.0f);
// bf16 operands, f32 accumulation (the operands are widened exactly, one
// sgemm runs, and C is rounded to bf16 once): what a bf16 tensor-core GEMM
// with an f32 accumulator computes, up to summation order.
void gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const bf16* A, bool trans_a,
          const bf16* B, bool trans_b, bf16* C);

// out has shape `shape` (contiguous); out[i0, .., ik] = in[sum_d i_d * in_strides[d]].
// Strides are in elements and may be 0 (broadcast). The building block below.
template <class T>
void strided_copy(const T* in, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& in_strides, T* out);

// out dim i = in dim perm[i] (numpy / XLA semantics). Throws std::invalid_argument
// if perm is not a permutation of the input's dimensions.
template <class T>
void transpose(const T* in, const std::vector<int64_t>& in_shape, const std::vector<int>& perm,
               T* out);

// numpy broadcasting: in_shape is right-aligned against out_shape and its
// size-1 (or missing) dimensions are repeated. Throws std::invalid_argument.
template <class T>
void broadcast(const T* in, const std::vector<int64_t>& in_shape,
               const std::vector<int64_t>& out_shape, T* out);

// Sum or max over `axes` (any order, no repeats); the output shape is in_shape
// with those axes removed. A max over an empty extent gives -inf; max does not
// promise to propagate NaN the way jnp.max does. A mean is a sum followed by
// scale() with 1/extent. bf16 sums in f32 and rounds each result once.
template <class T>
void reduce(const T* in, const std::vector<int64_t>& in_shape, const std::vector<int>& axes,
            ReduceOp op, T* out);

template <class T>
void copy(const T* in, T* out, size_t count);
// value converted to T (bf16: to nearest even; i32: truncated).
template <class T>
void fill(T* out, size_t count, float value);
void scale(float* data, size_t count, float factor);

// Number of elements of a shape (1 for a scalar).
int64_t num_elements(const std::vector<int64_t>& shape);

}  // namespace sharc::rt
