// Per-device compute kernels for float32 row-major tensors, called by generated
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

namespace sharc::rt {

// C[b] = A[b]·B[b] + beta*C[b] for b < batch, with the batch matrices stored
// back to back. A is MxK (KxM when trans_a), B is KxN (NxK when trans_b), C is
// MxN. A weight shared across the batch is better passed as batch=1 with the
// batch folded into M.
void gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, bool trans_a,
          const float* B, bool trans_b, float* C, float beta = 0.0f);

// out has shape `shape` (contiguous); out[i0, .., ik] = in[sum_d i_d * in_strides[d]].
// Strides are in elements and may be 0 (broadcast). The building block below.
void strided_copy(const float* in, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& in_strides, float* out);

// out dim i = in dim perm[i] (numpy / XLA semantics). Throws std::invalid_argument
// if perm is not a permutation of the input's dimensions.
void transpose(const float* in, const std::vector<int64_t>& in_shape, const std::vector<int>& perm,
               float* out);

// numpy broadcasting: in_shape is right-aligned against out_shape and its
// size-1 (or missing) dimensions are repeated. Throws std::invalid_argument.
void broadcast(const float* in, const std::vector<int64_t>& in_shape,
               const std::vector<int64_t>& out_shape, float* out);

// Sum or max over `axes` (any order, no repeats); the output shape is in_shape
// with those axes removed. A max over an empty extent gives -inf; max does not
// promise to propagate NaN the way jnp.max does. A mean is a sum followed by
// scale() with 1/extent.
void reduce(const float* in, const std::vector<int64_t>& in_shape, const std::vector<int>& axes,
            ReduceOp op, float* out);

void copy(const float* in, float* out, size_t count);
void fill(float* out, size_t count, float value);
void scale(float* data, size_t count, float factor);

// Number of elements of a shape (1 for a scalar).
int64_t num_elements(const std::vector<int64_t>& shape);

}  // namespace sharc::rt
