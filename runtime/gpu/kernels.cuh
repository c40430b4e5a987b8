// sharc's GPU kernels for the transformer step, in the dialect of
// runtime/gpu/dialect.h: nvcc compiles them for the GPU (gpu_kernels.cu),
// the host compiler for the block simulator (sim_kernels.cpp). Generated
// CUDA programs instantiate them; runtime/gpu/kernel_set.h is the host API
// tests and benchmarks call.
//
// T is the activation type (float or bf16); arithmetic is f32 throughout,
// with one rounding on each bf16 store. Parameters, optimizer state, layer
// statistics and losses are f32. Every reduction runs in a fixed order, so a
// kernel gives the same bits on every run (no atomics).
#pragma once

#include <cstdint>

#include "runtime/gpu/dialect.h"
#include "runtime/gpu/kernel_args.h"
#include "runtime/gpu/kernel_limits.h"

namespace sharc::gpu {
#if defined(__CUDACC__)
inline namespace cuda_target {
#else
inline namespace sim_target {
#endif

// ---------------------------------------------------------------------------
// LayerNorm over the last axis of a [rows, cols] tensor, biased variance (as
// the DSL's layer_norm and jax.nn / flax LayerNorm).

constexpr int kLayerNormWarps = 8;  // rows per block of the row kernels

// out = (x - mean) * rstd * w + b, one warp per row; mean and rstd (nullable)
// keep the row statistics for the backward pass.
// With `add` (nullable), the residual connection is fused in: x + add is
// written to sum_out and normalised (each lane rereads only what it wrote).
template <class T>
SHARC_KERNEL void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x,
                                           const T* add, T* sum_out, const float* w,
                                           const float* b, int rows, int cols, float eps) {
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  const int lane = static_cast<int>(thread_x() % kWarpSize);
  const int row = static_cast<int>(block_x()) * kLayerNormWarps + warp;
  if (row >= rows) return;  // the whole warp: no block barrier follows
  const int64_t base = static_cast<int64_t>(row) * cols;
  float sum = 0.0f;
  if (add) {
    for (int c = lane; c < cols; c += kWarpSize) {
      const T v = from_f32<T>(to_f32(x[base + c]) + to_f32(add[base + c]));
      sum_out[base + c] = v;
      sum += to_f32(v);
    }
  } else {
    for (int c = lane; c < cols; c += kWarpSize) sum += to_f32(x[base + c]);
  }
  const T* xr = add ? sum_out + base : x + base;
  const float m = warp_sum(sum) / static_cast<float>(cols);
  float sq = 0.0f;
  for (int c = lane; c < cols; c += kWarpSize) {
    const float d = to_f32(xr[c]) - m;
    sq += d * d;
  }
  const float r = rsqrt_f(warp_sum(sq) / static_cast<float>(cols) + eps);
  T* outr = out + static_cast<int64_t>(row) * cols;
  for (int c = lane; c < cols; c += kWarpSize)
    outr[c] = from_f32<T>((to_f32(xr[c]) - m) * r * w[c] + b[c]);
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

// The layer norm's backward moves its rows kPer elements at a time: one,
// or kChunk<T> (16 bytes) where every row starts 16-byte aligned
// (layernorm_chunked); thread work is then a run of kPer columns.
template <class T>
constexpr int kChunk = 16 / static_cast<int>(sizeof(T));

template <int kPer, class T>
SHARC_DEVICE void load_run(float (&v)[kPer], const T* p) {
  if constexpr (kPer == 1) {
    v[0] = to_f32(p[0]);
  } else {
    alignas(16) T in[kPer];
    copy_16_bytes(in, p);
    for (int k = 0; k < kPer; ++k) v[k] = to_f32(in[k]);
  }
}
template <int kPer, class T>
SHARC_DEVICE void store_run(T* p, const float (&v)[kPer]) {
  if constexpr (kPer == 1) {
    p[0] = from_f32<T>(v[0]);
  } else {
    alignas(16) T out[kPer];
    for (int k = 0; k < kPer; ++k) out[k] = from_f32<T>(v[k]);
    copy_16_bytes(p, out);
  }
}

// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) with
// dxhat = dout * w; added to dx when `accumulate` (the residual stream's
// gradient), written otherwise. One warp per row, lane l taking the runs
// of kPer columns that start at l * kPer, (l + 32) * kPer, ...
template <class T, int kPer>
SHARC_KERNEL void layernorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const float* w,
                                               const float* mean, const float* rstd, int rows,
                                               int cols, bool accumulate) {
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  const int lane = static_cast<int>(thread_x() % kWarpSize);
  const int row = static_cast<int>(block_x()) * kLayerNormWarps + warp;
  if (row >= rows) return;
  const int64_t base = static_cast<int64_t>(row) * cols;
  const float m = mean[row], r = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int c = lane * kPer; c < cols; c += kWarpSize * kPer) {
    float d[kPer], xv[kPer];
    load_run(d, dout + base + c);
    load_run(xv, x + base + c);
    for (int k = 0; k < kPer; ++k) {
      const float g = d[k] * w[c + k];
      sum_g += g;
      sum_gx += g * (xv[k] - m) * r;
    }
  }
  const float mean_g = warp_sum(sum_g) / static_cast<float>(cols);
  const float mean_gx = warp_sum(sum_gx) / static_cast<float>(cols);
  for (int c = lane * kPer; c < cols; c += kWarpSize * kPer) {
    float d[kPer], xv[kPer], old[kPer];
    load_run(d, dout + base + c);
    load_run(xv, x + base + c);
    if (accumulate) load_run(old, dx + base + c);
    for (int k = 0; k < kPer; ++k) {
      const float xhat = (xv[k] - m) * r;
      d[k] = r * (d[k] * w[c + k] - mean_g - xhat * mean_gx) + (accumulate ? old[k] : 0.0f);
    }
    store_run(dx + base + c, d);
  }
}

// How the weight and bias gradients are split: blocks of 32 columns x 8
// warps; slice s of the rows is [s * rows_per_slice, (s + 1) *
// rows_per_slice).
SHARC_HOST_DEVICE int layernorm_slices(int rows) {
  return (rows + kLayerNormSliceRows - 1) / kLayerNormSliceRows;
}

// partial[s][0][c] = sum over slice s of dout * xhat, partial[s][1][c] = sum
// of dout. Grid (ceil(cols / (32 kPer)), slices), 256 threads: lane l takes
// the run of kPer columns at l * kPer, warp w rows w, w + 8, ... of the
// slice; the 8 warps' sums are added in warp order.
template <class T, int kPer>
SHARC_KERNEL void layernorm_backward_partial_kernel(float* partial, const T* dout, const T* x,
                                                    const float* mean, const float* rstd,
                                                    int rows, int cols) {
  constexpr int kCols = kWarpSize * kPer;  // columns per block
  float* scratch = shared_memory<float>();  // [2][kLayerNormWarps][kCols]
  const int lane = static_cast<int>(thread_x() % kWarpSize);
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  const int c0 = static_cast<int>(block_x()) * kCols + lane * kPer;
  const int slice = static_cast<int>(block_y());
  const int r0 = slice * kLayerNormSliceRows;
  const int r1 = r0 + kLayerNormSliceRows < rows ? r0 + kLayerNormSliceRows : rows;
  float dw[kPer], db[kPer];
  for (int k = 0; k < kPer; ++k) dw[k] = db[k] = 0.0f;
  if (c0 < cols)  // a run is whole: kPer > 1 only where kPer divides cols
    for (int r = r0 + warp; r < r1; r += kLayerNormWarps) {
      const int64_t i = static_cast<int64_t>(r) * cols + c0;
      float g[kPer], xv[kPer];
      load_run(g, dout + i);
      load_run(xv, x + i);
      const float m = mean[r], rs = rstd[r];
      for (int k = 0; k < kPer; ++k) {
        dw[k] += g[k] * (xv[k] - m) * rs;
        db[k] += g[k];
      }
    }
  for (int k = 0; k < kPer; ++k) {
    scratch[warp * kCols + lane * kPer + k] = dw[k];
    scratch[(kLayerNormWarps + warp) * kCols + lane * kPer + k] = db[k];
  }
  sync_block();
  for (int col = static_cast<int>(thread_x()); col < kCols; col += static_cast<int>(block_dim_x())) {
    const int c = static_cast<int>(block_x()) * kCols + col;
    if (c >= cols) break;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < kLayerNormWarps; ++k) {
      sw += scratch[k * kCols + col];
      sb += scratch[(kLayerNormWarps + k) * kCols + col];
    }
    partial[(static_cast<int64_t>(slice) * 2) * cols + c] = sw;
    partial[(static_cast<int64_t>(slice) * 2 + 1) * cols + c] = sb;
  }
}

// The second pass over per-slice partial sums, shared by the layer norm's
// parameter gradients and the column sums: column c's total is the sum of
// partial[s * stride + c] over s = 0 .. slices - 1, made by a block of
// kLayerNormWarps warps per 32 columns (lane = column, warp w adding slices
// w, w + 8, ...), the warps' sums added in warp order in `scratch`
// ([kLayerNormWarps][32] floats of shared memory). Every thread of the
// block calls it; lane c of warp 0 gets the total (the others get 0).
SHARC_DEVICE float sum_slices(const float* partial, int64_t stride, int slices, int c, int cols, float* scratch) {
  const int lane = static_cast<int>(thread_x() % kWarpSize);
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  float s = 0.0f;
  if (c < cols)
    for (int k = warp; k < slices; k += kLayerNormWarps) s += partial[static_cast<int64_t>(k) * stride + c];
  scratch[warp * kWarpSize + lane] = s;
  sync_block();
  float total = 0.0f;
  if (warp == 0)
    for (int k = 0; k < kLayerNormWarps; ++k) total += scratch[k * kWarpSize + lane];
  sync_block();  // scratch may be written again by the caller
  return total;
}

// dw[c] (+)= sum over slices of partial[s][0][c], db likewise, in slice
// order (sum_slices). Grid ceil(cols / 32), kLayerNormWarps warps.
SHARC_KERNEL inline void layernorm_backward_finish_kernel(float* dw, float* db,
                                                          const float* partial, int slices,
                                                          int cols, bool accumulate) {
  float* scratch = shared_memory<float>();  // [8][32]
  const int c = static_cast<int>(block_x()) * kWarpSize + static_cast<int>(thread_x() % kWarpSize);
  const float sw = sum_slices(partial, 2 * static_cast<int64_t>(cols), slices, c, cols, scratch);
  const float sb = sum_slices(partial + cols, 2 * static_cast<int64_t>(cols), slices, c, cols, scratch);
  if (thread_x() >= kWarpSize || c >= cols) return;
  dw[c] = accumulate ? dw[c] + sw : sw;
  db[c] = accumulate ? db[c] + sb : sb;
}

// ---------------------------------------------------------------------------
// Column sums of a [rows, cols] tensor into f32 (the bias gradient of a
// linear layer: the sum of dout over its rows), in a fixed order: per slice
// of kLayerNormSliceRows rows (grid (ceil(cols / 32), slices), 256 threads),
// then over slices.

template <class T>
SHARC_KERNEL void column_sum_partial_kernel(float* partial, const T* x, int rows, int cols) {
  float* scratch = shared_memory<float>();  // [8][32]
  const int lane = static_cast<int>(thread_x() % kWarpSize);
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  const int c = static_cast<int>(block_x()) * kWarpSize + lane;
  const int slice = static_cast<int>(block_y());
  const int r0 = slice * kLayerNormSliceRows;
  const int r1 = r0 + kLayerNormSliceRows < rows ? r0 + kLayerNormSliceRows : rows;
  float s = 0.0f;
  if (c < cols)
    for (int r = r0 + warp; r < r1; r += kLayerNormWarps) s += to_f32(x[static_cast<int64_t>(r) * cols + c]);
  scratch[warp * kWarpSize + lane] = s;
  sync_block();
  if (warp == 0 && c < cols) {
    float sum = 0.0f;
    for (int k = 0; k < kLayerNormWarps; ++k) sum += scratch[k * kWarpSize + lane];
    partial[static_cast<int64_t>(slice) * cols + c] = sum;
  }
}

SHARC_KERNEL inline void column_sum_finish_kernel(float* out, const float* partial, int slices,
                                                  int cols, bool accumulate) {
  float* scratch = shared_memory<float>();  // [8][32]
  const int c = static_cast<int>(block_x()) * kWarpSize + static_cast<int>(thread_x() % kWarpSize);
  const float s = sum_slices(partial, cols, slices, c, cols, scratch);
  if (thread_x() >= kWarpSize || c >= cols) return;
  out[c] = accumulate ? out[c] + s : s;
}

// ---------------------------------------------------------------------------
// Softmax cross-entropy over a [rows, vocab] tensor of logits with integer
// targets, forward and backward in one kernel: no probabilities are kept.

constexpr int kCrossEntropyThreads = 512;

// A running softmax denominator: sum of exp(x - max) over the values seen.
struct MaxSum {
  float max;
  float sum;
};
SHARC_DEVICE MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.sum * exp_f(a.max - m) + b.sum * exp_f(b.max - m)};
}

// loss[row] = logsumexp(logits[row]) - logits[row][target]; when dlogits is
// not null, dlogits[row] = (softmax(logits[row]) - onehot(target)) * dloss
// (dloss_rows[row] where that is set), which may overwrite logits in place.
// A target outside [0, vocab) gives a NaN loss (and NaN gradients). Targets
// may instead be floats (float_targets, the DSL's labels), with the DSL's
// one_hot meaning: a label that is no class index picks no logit, so its
// loss is the logsumexp and its gradient the softmax. One block per row.
template <class T>
SHARC_KERNEL void cross_entropy_kernel(float* loss, T* dlogits, const T* logits,
                                       const int32_t* targets, const float* float_targets,
                                       const float* dloss_rows, int vocab, float dloss) {
  float* scratch = shared_memory<float>();  // [2][32]
  const int row = static_cast<int>(block_x());
  const int tid = static_cast<int>(thread_x());
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int64_t base = static_cast<int64_t>(row) * vocab;
  int target = -1;
  bool valid = true;  // the row has a loss: a class index, or a float label
  if (float_targets) {
    const float t = float_targets[row];
    if (t >= 0.0f && t < static_cast<float>(vocab) && static_cast<float>(static_cast<int>(t)) == t)
      target = static_cast<int>(t);
  } else {
    target = targets[row];
    valid = target >= 0 && target < vocab;
  }
  if (dloss_rows) dloss = dloss_rows[row];
  // Read before any thread may overwrite the row with gradients.
  const float target_logit = !valid ? NAN : target >= 0 ? to_f32(logits[base + target]) : 0.0f;
  // 16 bytes at a time (8 bf16 or 4 f32 logits) where every row starts
  // 16-byte aligned, else one logit at a time: thread tid takes chunks tid,
  // tid + threads, ... of kPer logits.
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  const bool chunks = vocab % kPer == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(dlogits) % 16 == 0;
  const int per = chunks ? kPer : 1, step = per * static_cast<int>(block_dim_x());
  // Each loop loads its logits itself: with the load shared as a lambda
  // taking x by reference, nvcc kept x in local memory (a 16-byte stack
  // frame for bf16), and the kernel took 2.63 ms instead of 1.66 on an H100
  // (bench_gpu_kernels, batch 16).
  MaxSum acc{-INFINITY, 0.0f};
  for (int c0 = tid * per; c0 < vocab; c0 += step) {
    alignas(16) T x[kPer];
    if (chunks)
      copy_16_bytes(x, logits + base + c0);
    else
      x[0] = logits[base + c0];
    float mx = acc.max;
    for (int k = 0; k < per; ++k) mx = fmaxf(mx, to_f32(x[k]));
    float sum = mx == -INFINITY ? 0.0f : acc.sum * exp_f(acc.max - mx);
    for (int k = 0; k < per; ++k) sum += mx == -INFINITY ? 0.0f : exp_f(to_f32(x[k]) - mx);
    acc = {mx, sum};
  }
  for (int m = kWarpSize / 2; m > 0; m /= 2)
    acc = combine(acc, MaxSum{shfl_xor(acc.max, m), shfl_xor(acc.sum, m)});
  if (lane == 0) {
    scratch[warp] = acc.max;
    scratch[kWarpSize + warp] = acc.sum;
  }
  sync_block();
  const int warps = static_cast<int>(block_dim_x()) / kWarpSize;
  acc = lane < warps ? MaxSum{scratch[lane], scratch[kWarpSize + lane]} : MaxSum{-INFINITY, 0.0f};
  for (int m = kWarpSize / 2; m > 0; m /= 2)
    acc = combine(acc, MaxSum{shfl_xor(acc.max, m), shfl_xor(acc.sum, m)});
  const float lse = acc.max + log_f(acc.sum);
  if (tid == 0) loss[row] = valid ? lse - target_logit : NAN;
  if (!dlogits) return;
  for (int c0 = tid * per; c0 < vocab; c0 += step) {
    alignas(16) T x[kPer];
    if (chunks)
      copy_16_bytes(x, logits + base + c0);
    else
      x[0] = logits[base + c0];
    for (int k = 0; k < per; ++k) {
      const float p = exp_f(to_f32(x[k]) - lse);
      x[k] = from_f32<T>(valid ? (p - (c0 + k == target ? 1.0f : 0.0f)) * dloss : NAN);
    }
    if (chunks)
      copy_16_bytes(dlogits + base + c0, x);
    else
      dlogits[base + c0] = x[0];
  }
}

// ---------------------------------------------------------------------------
// A 3-d strided view copied out contiguously, elements moved as bits (W is
// uint16_t or uint32_t): how a collective's interleaved blocks are packed on
// the device (rt::BlockMover, gpu::NcclWorld). Grid-stride over the output.
template <class W>
SHARC_KERNEL void strided_copy3_kernel(W* out, const W* in, int64_t n1, int64_t n2, int64_t s0, int64_t s1,
                                       int64_t s2, int64_t total) {
  const int64_t step = static_cast<int64_t>(grid_dim_x()) * block_dim_x();
  for (int64_t i = static_cast<int64_t>(block_x()) * block_dim_x() + thread_x(); i < total; i += step) {
    const int64_t i2 = i % n2, i1 = (i / n2) % n1, i0 = i / (n1 * n2);
    out[i] = in[i0 * s0 + i1 * s1 + i2 * s2];
  }
}

// ---------------------------------------------------------------------------
// AdamW over many tensors in one launch (optax semantics, as dsl/train.cpp):
//   g = grad * grad_scale            (global-norm clipping's factor)
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
// lr, t and grad_scale are read from device memory, so the schedule and the
// clipping computed on the device never cost a host synchronisation.

constexpr int kAdamWThreads = 256;

SHARC_KERNEL inline void adamw_kernel(const AdamWTensor* tensors, const TensorChunk* chunks,
                                      AdamWHyper h) {
  const TensorChunk ch = chunks[block_x()];
  const AdamWTensor t = tensors[ch.tensor];
  const float lr = *h.lr, count = *h.count;
  const float scale = h.grad_scale ? *h.grad_scale : 1.0f;
  const float bc1 = 1.0f - exp_f(count * log_f(h.b1));
  const float bc2 = 1.0f - exp_f(count * log_f(h.b2));
  for (int64_t i = ch.begin + thread_x(); i < ch.end; i += block_dim_x()) {
    const float g = t.grad[i] * scale;
    const float m = h.b1 * t.m[i] + (1.0f - h.b1) * g;
    const float v = h.b2 * t.v[i] + (1.0f - h.b2) * (g * g);
    t.m[i] = m;
    t.v[i] = v;
    const float update = (m / bc1) / (sqrt_f(v / bc2) + h.eps) + t.weight_decay * t.param[i];
    const float p = t.param[i] - lr * update;
    t.param[i] = p;
    if (t.param_bf16) static_cast<bf16*>(t.param_bf16)[i] = from_f32<bf16>(p);
  }
}

// ---------------------------------------------------------------------------
// Token and position embeddings: out[n] = wte[ids[n]] + wpe[n % seq]. The
// backward is deterministic without atomics: the host, which loads the
// tokens, groups the positions by token (embedding_buckets in
// kernel_set.h), and one block sums each token's rows in position order.

// One block per row; an id outside [0, vocab) gives a NaN row.
template <class T>
SHARC_KERNEL void embedding_forward_kernel(T* out, const int32_t* ids, const float* wte,
                                           const float* wpe, int cols, int seq, int vocab) {
  const int64_t row = block_x();
  const int id = ids[row];
  const bool valid = id >= 0 && id < vocab;
  const int64_t pos = row % seq;
  for (int c = static_cast<int>(thread_x()); c < cols; c += static_cast<int>(block_dim_x())) {
    float v = valid ? wte[static_cast<int64_t>(id) * cols + c] : NAN;
    if (wpe) v += wpe[pos * cols + c];
    out[row * cols + c] = from_f32<T>(v);
  }
}

// dwte[tokens[k]] += sum of dout over positions[starts[k] .. starts[k + 1]),
// one block per bucket k (each token has one bucket, so no two blocks write
// the same row); tokens outside [0, vocab) are skipped.
template <class T>
SHARC_KERNEL void embedding_backward_wte_kernel(float* dwte, const T* dout,
                                                const int32_t* positions, const int32_t* starts,
                                                const int32_t* tokens, int cols, int vocab) {
  const int k = static_cast<int>(block_x());
  const int64_t row = tokens[k];
  if (row < 0 || row >= vocab) return;  // the forward gave NaN; nothing to add to
  for (int c = static_cast<int>(thread_x()); c < cols; c += static_cast<int>(block_dim_x())) {
    float s = 0.0f;
    for (int i = starts[k]; i < starts[k + 1]; ++i)
      s += to_f32(dout[static_cast<int64_t>(positions[i]) * cols + c]);
    dwte[row * cols + c] += s;
  }
}

// dwpe[t] += sum over the batch of dout[b, t], one block per position t.
template <class T>
SHARC_KERNEL void embedding_backward_wpe_kernel(float* dwpe, const T* dout, int batch, int seq,
                                                int cols) {
  const int64_t t = block_x();
  for (int c = static_cast<int>(thread_x()); c < cols; c += static_cast<int>(block_dim_x())) {
    float s = 0.0f;
    for (int b = 0; b < batch; ++b) s += to_f32(dout[(b * static_cast<int64_t>(seq) + t) * cols + c]);
    dwpe[t * cols + c] += s;
  }
}

// ---------------------------------------------------------------------------
// The embedding as generated programs trace it (dsl/transformer.h,
// Embedding: one_hot(ids) @ table), without the one-hot: a device's rows of
// the table are [first, first + vocab) of the whole (the mesh may split the
// vocabulary), and a token outside them, or a float label that is no class
// index, picks nothing (a zero row), as one_hot's equality does. Token ids
// are the DSL's float labels or int32.

// The row of `first`'s table that token n picks, or -1.
SHARC_DEVICE int64_t table_row(const float* float_ids, const int32_t* ids, int64_t n, int64_t first,
                               int64_t vocab) {
  int64_t id = -1;
  if (float_ids) {
    const float f = float_ids[n];
    if (f >= 0.0f && f < 16777216.0f && static_cast<float>(static_cast<int64_t>(f)) == f)
      id = static_cast<int64_t>(f);  // exact: an f32 holds every integer below 2^24
  } else {
    id = ids[n];
  }
  const int64_t row = id - first;
  return id >= 0 && row >= 0 && row < vocab ? row : -1;
}

// out[n] = T(table[row(n)]) or zeros; one block per token.
template <class T>
SHARC_KERNEL void embedding_lookup_kernel(T* out, const float* table, const float* float_ids,
                                          const int32_t* ids, int cols, int64_t first,
                                          int64_t vocab) {
  const int64_t n = block_x();
  const int64_t row = table_row(float_ids, ids, n, first, vocab);
  for (int c = static_cast<int>(thread_x()); c < cols; c += static_cast<int>(block_dim_x()))
    out[n * cols + c] = from_f32<T>(row >= 0 ? table[row * cols + c] : 0.0f);
}

// The table's gradient, dtable[v] (+)= the sum of dout over the tokens that
// pick row v, added in token order, so the result is the same on every run
// without atomics (and with none of the host's help that
// embedding_backward_wte_kernel needs). A block owns kEmbeddingGradRows rows
// of the table and kEmbeddingGradThreads of its columns (one per thread),
// keeping their sums in shared memory while it reads every token's id once,
// kEmbeddingGradThreads at a time: the tokens of its rows in a chunk are
// compacted in order by a prefix sum, then each thread adds their dout
// values in its column (kEmbeddingGradRows and kEmbeddingGradThreads are in
// kernel_args.h, for the cost model). round_bf16: the sum is rounded through bf16 before
// it is stored (or added), as a bf16 GEMM's result would be.
constexpr size_t kEmbeddingGradShared =
    (kEmbeddingGradRows + 2) * kEmbeddingGradThreads * sizeof(float);

template <class T>
SHARC_KERNEL void embedding_grad_kernel(float* dtable, const T* dout, const float* float_ids,
                                        const int32_t* ids, int64_t tokens, int cols, int64_t first,
                                        int64_t vocab, bool round_bf16, bool accumulate) {
  constexpr int kThreads = kEmbeddingGradThreads, kRows = kEmbeddingGradRows;
  float* sums = shared_memory<float>();                           // [kRows][kThreads]
  int* scan = reinterpret_cast<int*>(sums + kRows * kThreads);    // [kThreads]
  int* picked = scan + kThreads;                                  // [kThreads]: t * kRows + row
  const int t = static_cast<int>(thread_x());
  const int64_t r0 = static_cast<int64_t>(block_x()) * kRows;
  const int c = static_cast<int>(block_y()) * kThreads + t;
  for (int r = 0; r < kRows; ++r) sums[r * kThreads + t] = 0.0f;
  for (int64_t n0 = 0; n0 < tokens; n0 += kThreads) {
    int64_t row = n0 + t < tokens ? table_row(float_ids, ids, n0 + t, first, vocab) - r0 : -1;
    if (row >= kRows) row = -1;
    scan[t] = row >= 0;
    sync_block();
    for (int off = 1; off < kThreads; off *= 2) {  // inclusive prefix sum of the flags
      const int before = t >= off ? scan[t - off] : 0;
      sync_block();
      scan[t] += before;
      sync_block();
    }
    const int count = scan[kThreads - 1];
    if (row >= 0) picked[scan[t] - 1] = t * kRows + static_cast<int>(row);
    sync_block();
    if (c < cols)
      for (int i = 0; i < count; ++i) {
        const int p = picked[i];
        sums[(p % kRows) * kThreads + t] += to_f32(dout[(n0 + p / kRows) * cols + c]);
      }
    sync_block();  // scan and picked are rewritten next
  }
  if (c >= cols) return;
  for (int r = 0; r < kRows && r0 + r < vocab; ++r) {
    float s = sums[r * kThreads + t];
    if (round_bf16) s = to_f32(from_f32<bf16>(s));
    float& d = dtable[(r0 + r) * cols + c];
    d = accumulate ? d + s : s;
  }
}

// ---------------------------------------------------------------------------
// The global norm of many tensors (the gradients), and optax's
// clip_by_global_norm factor min(1, max_norm / max(norm, 1e-30)), without a
// host synchronisation: per-chunk sums of squares, then one block adds them
// in chunk order.

constexpr int kNormThreads = 256;

SHARC_KERNEL inline void sum_squares_kernel(float* partial, const NormTensor* tensors,
                                            const TensorChunk* chunks) {
  float* scratch = shared_memory<float>();
  const TensorChunk ch = chunks[block_x()];
  const float* x = tensors[ch.tensor].x;
  float s = 0.0f;
  for (int64_t i = ch.begin + thread_x(); i < ch.end; i += block_dim_x()) s += x[i] * x[i];
  s = block_sum(s, scratch);
  if (thread_x() == 0) partial[block_x()] = s;
}

SHARC_KERNEL inline void global_norm_finish_kernel(float* norm, float* clip_factor,
                                                   const float* partial, int num_chunks,
                                                   float max_norm) {
  float* scratch = shared_memory<float>();
  float s = 0.0f;
  for (int i = static_cast<int>(thread_x()); i < num_chunks; i += static_cast<int>(block_dim_x()))
    s += partial[i];
  s = block_sum(s, scratch);
  if (thread_x() == 0) {
    const float n = sqrt_f(s);
    *norm = n;
    if (clip_factor) *clip_factor = fminf(1.0f, max_norm / fmaxf(n, 1e-30f));
  }
}

// ---------------------------------------------------------------------------
// Causal (or full) attention, flash-attention style: tiled over keys with an
// online softmax, so no [seq, seq] matrix is ever stored; the forward keeps
// only the log-sum-exp of each query row for the backward, which recomputes
// the probabilities. q, k, v, o are [batch, seq, heads, D] views with element
// strides per axis (D contiguous), so a packed [batch, seq, 3, heads, D]
// projection is read in place.
//
// This first version computes with scalar f32 FMAs, one query (or key) row
// per thread; the tensor-core version replaces it once it has been measured
// on a GPU.

template <class T>
struct AttentionArgs {
  const T* q;
  const T* k;
  const T* v;
  T* o;
  float* lse;  // [batch, heads, seq]
  AttentionStrides sq, sk, sv, so;
  int batch, heads, seq;
  float scale;  // usually 1 / sqrt(D)
  bool causal;
};

template <class T>
struct AttentionGradArgs {
  const T* q;
  const T* k;
  const T* v;
  const T* o;
  const T* dout;
  const float* lse;
  float* delta;  // [batch, heads, seq] scratch: rowsum(dout * o)
  T* dq;
  T* dk;
  T* dv;
  AttentionStrides sq, sk, sv, so, sdo, sdq, sdk, sdv;
  int batch, heads, seq;
  float scale;
  bool causal;
};

constexpr int kAttentionRows = 64;  // query (or key) rows per block, one per thread
constexpr int kAttentionTile = 32;  // key (or query) rows per shared-memory tile

SHARC_HOST_DEVICE int64_t attention_offset(AttentionStrides s, int b, int t, int h) {
  return b * s.batch + t * s.token + h * s.head;
}

// Loads rows [r0, r0 + kAttentionTile) of one head of x into tile (f32,
// [kAttentionTile][D]); rows past seq are zero.
template <int D, class T>
SHARC_DEVICE void load_attention_tile(float* tile, const T* x, AttentionStrides s, int b, int h,
                                      int r0, int seq) {
  for (int i = static_cast<int>(thread_x()); i < kAttentionTile * D;
       i += static_cast<int>(block_dim_x())) {
    const int r = i / D, d = i % D;
    tile[i] = r0 + r < seq ? to_f32(x[attention_offset(s, b, r0 + r, h) + d]) : 0.0f;
  }
}

// Grid (ceil(seq / kAttentionRows), heads, batch), kAttentionRows threads;
// shared memory 2 * kAttentionTile * D floats.
template <int D, class T>
SHARC_KERNEL void attention_forward_kernel(AttentionArgs<T> a) {
  float* ktile = shared_memory<float>();
  float* vtile = ktile + kAttentionTile * D;
  const int h = static_cast<int>(block_y()), b = static_cast<int>(block_z());
  const int q0 = static_cast<int>(block_x()) * kAttentionRows;
  const int i = q0 + static_cast<int>(thread_x());
  const bool active = i < a.seq;
  float q[D], acc[D];
  for (int d = 0; d < D; ++d) {
    q[d] = active ? to_f32(a.q[attention_offset(a.sq, b, i, h) + d]) * a.scale : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = a.causal ? (q0 + kAttentionRows < a.seq ? q0 + kAttentionRows : a.seq) : a.seq;
  for (int j0 = 0; j0 < last; j0 += kAttentionTile) {
    load_attention_tile<D>(ktile, a.k, a.sk, b, h, j0, a.seq);
    load_attention_tile<D>(vtile, a.v, a.sv, b, h, j0, a.seq);
    sync_block();
    int jn = a.seq - j0 < kAttentionTile ? a.seq - j0 : kAttentionTile;
    if (a.causal && i - j0 + 1 < jn) jn = i - j0 + 1;
    for (int j = 0; active && j < jn; ++j) {
      float s = 0.0f;
      for (int d = 0; d < D; ++d) s += q[d] * ktile[j * D + d];
      const float m_new = fmaxf(m, s);
      const float correction = exp_f(m - m_new), p = exp_f(s - m_new);
      l = l * correction + p;
      for (int d = 0; d < D; ++d) acc[d] = acc[d] * correction + p * vtile[j * D + d];
      m = m_new;
    }
    sync_block();  // before the next tile overwrites these
  }
  if (!active) return;
  const float inv = 1.0f / l;
  T* o = a.o + attention_offset(a.so, b, i, h);
  for (int d = 0; d < D; ++d) o[d] = from_f32<T>(acc[d] * inv);
  a.lse[(static_cast<int64_t>(b) * a.heads + h) * a.seq + i] = m + log_f(l);
}

// delta[b, h, i] = sum_d dout[b, i, h, d] * o[b, i, h, d]: one warp per row;
// grid ceil(batch * heads * seq / 8), 256 threads.
template <int D, class T>
SHARC_KERNEL void attention_delta_kernel(AttentionGradArgs<T> a) {
  const int64_t row = static_cast<int64_t>(block_x()) * 8 + thread_x() / kWarpSize;
  const int lane = static_cast<int>(thread_x() % kWarpSize);
  if (row >= static_cast<int64_t>(a.batch) * a.heads * a.seq) return;
  const int i = static_cast<int>(row % a.seq);
  const int h = static_cast<int>((row / a.seq) % a.heads);
  const int b = static_cast<int>(row / (static_cast<int64_t>(a.seq) * a.heads));
  const T* o = a.o + attention_offset(a.so, b, i, h);
  const T* g = a.dout + attention_offset(a.sdo, b, i, h);
  float s = 0.0f;
  for (int d = lane; d < D; d += kWarpSize) s += to_f32(o[d]) * to_f32(g[d]);
  s = warp_sum(s);
  if (lane == 0) a.delta[row] = s;
}

// dk and dv of kAttentionRows keys per block, one key per thread, over tiles
// of queries: dv_j = sum_i p_ij dout_i, dk_j = scale * sum_i ds_ij q_i with
// ds_ij = p_ij (dout_i . v_j - delta_i). Grid (ceil(seq / kAttentionRows),
// heads, batch); shared memory 2 * kAttentionTile * D + 2 * kAttentionTile
// floats.
template <int D, class T>
SHARC_KERNEL void attention_backward_dkv_kernel(AttentionGradArgs<T> a) {
  float* qtile = shared_memory<float>();
  float* gtile = qtile + kAttentionTile * D;
  float* lse_tile = gtile + kAttentionTile * D;
  float* delta_tile = lse_tile + kAttentionTile;
  const int h = static_cast<int>(block_y()), b = static_cast<int>(block_z());
  const int k0 = static_cast<int>(block_x()) * kAttentionRows;
  const int j = k0 + static_cast<int>(thread_x());
  const bool active = j < a.seq;
  const int64_t stat = (static_cast<int64_t>(b) * a.heads + h) * a.seq;
  float k[D], v[D], dk[D], dv[D];
  for (int d = 0; d < D; ++d) {
    k[d] = active ? to_f32(a.k[attention_offset(a.sk, b, j, h) + d]) : 0.0f;
    v[d] = active ? to_f32(a.v[attention_offset(a.sv, b, j, h) + d]) : 0.0f;
    dk[d] = dv[d] = 0.0f;
  }
  const int first = a.causal ? k0 - k0 % kAttentionTile : 0;
  for (int i0 = first; i0 < a.seq; i0 += kAttentionTile) {
    load_attention_tile<D>(qtile, a.q, a.sq, b, h, i0, a.seq);
    load_attention_tile<D>(gtile, a.dout, a.sdo, b, h, i0, a.seq);
    for (int r = static_cast<int>(thread_x()); r < kAttentionTile;
         r += static_cast<int>(block_dim_x())) {
      lse_tile[r] = i0 + r < a.seq ? a.lse[stat + i0 + r] : 0.0f;
      delta_tile[r] = i0 + r < a.seq ? a.delta[stat + i0 + r] : 0.0f;
    }
    sync_block();
    const int in = a.seq - i0 < kAttentionTile ? a.seq - i0 : kAttentionTile;
    for (int r = 0; active && r < in; ++r) {
      if (a.causal && i0 + r < j) continue;
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += qtile[r * D + d] * k[d];
        dp += gtile[r * D + d] * v[d];
      }
      const float p = exp_f(s * a.scale - lse_tile[r]);
      const float ds = p * (dp - delta_tile[r]);
      for (int d = 0; d < D; ++d) {
        dv[d] += p * gtile[r * D + d];
        dk[d] += ds * qtile[r * D + d];
      }
    }
    sync_block();
  }
  if (!active) return;
  T* dkp = a.dk + attention_offset(a.sdk, b, j, h);
  T* dvp = a.dv + attention_offset(a.sdv, b, j, h);
  for (int d = 0; d < D; ++d) {
    dkp[d] = from_f32<T>(dk[d] * a.scale);
    dvp[d] = from_f32<T>(dv[d]);
  }
}

// dq of kAttentionRows queries per block, one query per thread, over tiles of
// keys: dq_i = scale * sum_j ds_ij k_j. Grid as the forward's; shared memory
// 2 * kAttentionTile * D floats.
template <int D, class T>
SHARC_KERNEL void attention_backward_dq_kernel(AttentionGradArgs<T> a) {
  float* ktile = shared_memory<float>();
  float* vtile = ktile + kAttentionTile * D;
  const int h = static_cast<int>(block_y()), b = static_cast<int>(block_z());
  const int q0 = static_cast<int>(block_x()) * kAttentionRows;
  const int i = q0 + static_cast<int>(thread_x());
  const bool active = i < a.seq;
  const int64_t stat = (static_cast<int64_t>(b) * a.heads + h) * a.seq;
  const float lse = active ? a.lse[stat + i] : 0.0f;
  const float delta = active ? a.delta[stat + i] : 0.0f;
  float q[D], g[D], dq[D];
  for (int d = 0; d < D; ++d) {
    q[d] = active ? to_f32(a.q[attention_offset(a.sq, b, i, h) + d]) : 0.0f;
    g[d] = active ? to_f32(a.dout[attention_offset(a.sdo, b, i, h) + d]) : 0.0f;
    dq[d] = 0.0f;
  }
  const int last = a.causal ? (q0 + kAttentionRows < a.seq ? q0 + kAttentionRows : a.seq) : a.seq;
  for (int j0 = 0; j0 < last; j0 += kAttentionTile) {
    load_attention_tile<D>(ktile, a.k, a.sk, b, h, j0, a.seq);
    load_attention_tile<D>(vtile, a.v, a.sv, b, h, j0, a.seq);
    sync_block();
    int jn = a.seq - j0 < kAttentionTile ? a.seq - j0 : kAttentionTile;
    if (a.causal && i - j0 + 1 < jn) jn = i - j0 + 1;
    for (int j = 0; active && j < jn; ++j) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += q[d] * ktile[j * D + d];
        dp += g[d] * vtile[j * D + d];
      }
      const float ds = exp_f(s * a.scale - lse) * (dp - delta);
      for (int d = 0; d < D; ++d) dq[d] += ds * ktile[j * D + d];
    }
    sync_block();
  }
  if (!active) return;
  T* dqp = a.dq + attention_offset(a.sdq, b, i, h);
  for (int d = 0; d < D; ++d) dqp[d] = from_f32<T>(dq[d] * a.scale);
}

// ---------------------------------------------------------------------------
// Attention on the tensor cores (bf16 activations), flash-attention-2 style:
// each warp owns M blocks of 16 query rows (16 * M consecutive rows); per
// tile of KT keys it computes S = Q K^T with mma_16x8x16, keeps the online
// softmax in registers, and adds P V with P taken straight from S's
// accumulator registers (an accumulator tile's layout is an A fragment's,
// pair for pair). K and V tiles are staged in shared memory as bf16, two
// tiles deep: the copy engine (copy_async_16) fetches the next tile while
// the warps compute on this one.
//
// M = 2 (32 rows a warp) reads each B fragment from shared memory once for
// four mma instead of two; on an H100 it measured slower than M = 1 (GPT-2
// 124M's shapes, bench_gpu_kernels, 2026-11-27: forward 0.338 ms against
// 0.286, backward 0.971 against 0.900), since its 245 registers a thread
// leave 8 warps a multiprocessor where M = 1's 127 to 136 leave 12 to 16:
// these kernels wait on latency (mma, then softmax, then mma), not on
// shared memory. M = 1 is the default; M = 2 stays selectable
// (KernelSet::set_attention_rows_per_warp) for the next tiling to beat.

constexpr int kTcWarps = 4;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
// Keys per shared tile in the forward, in dq, and queries per tile in dk/dv.
// The dq kernel holds twice the accumulators the forward does (dS and dP),
// so its tiles are half as long; dk/dv keeps 16 rows a warp (its K and V
// fragments and the dK, dV accumulators already fill the registers).
constexpr int kTcForwardKeys = 64, kTcDqKeys = 32, kTcDkvQueries = 64;
// Rows of each warp in the forward and dq kernels: 16 by default
// (set_attention_rows_per_warp); dk/dv always 16.
constexpr int kTcDefaultRowsPerWarp = 16;
// Query (or key) rows per block for M blocks of 16 rows per warp.
template <int M>
constexpr int kTcRows = 16 * M * kTcWarps;
// A shared tile's rows are D + kTcPad bf16 apart: 16 bytes more than a row,
// so the 8 rows a fragment load reads at once (lanes g = 0..7) start in
// different banks and the 32 lanes hit 32 banks for D = 16, 32 and 64
// (unpadded, at D = 64 every row started in bank 0: 8-way conflicts on
// every load of the inner loops).
constexpr int kTcPad = 8;
template <int D>
constexpr int kTcStride = D + kTcPad;
// bf16 elements of one [KT][kTcStride] tile; launches size their shared
// memory by it (kernel_launches.h: two stages of two tiles).
template <int D, int KT>
constexpr int kTcTile = KT * kTcStride<D>;
template <int D, int KT>
constexpr size_t kTcTileBytes = 4 * kTcTile<D, KT> * sizeof(bf16);

// Whether every row of one head of x starts 16-byte aligned (the usual
// case: a packed qkv projection), so that its tiles move 16 bytes a copy.
SHARC_DEVICE bool tc_rows_aligned(const bf16* x, AttentionStrides s, int b, int h) {
  return reinterpret_cast<uintptr_t>(x + attention_offset(s, b, 0, h)) % 16 == 0 && s.token % 8 == 0;
}

// Starts loading rows [r0, r0 + KT) of one head of x into a bf16 tile
// ([KT][kTcStride]); rows past seq are zero. With aligned rows the copy
// engine moves them (complete at the caller's async_copies_wait); else
// the threads copy one element at a time, complete when they return.
template <int D, int KT>
SHARC_DEVICE void start_tc_tile(bf16* tile, const bf16* x, AttentionStrides s, int b, int h, int r0,
                                int seq, bool aligned) {
  static_assert(D % 8 == 0, "a row is whole 16-byte chunks");
  const bf16 zero = from_f32<bf16>(0.0f);
  const bf16* head = x + attention_offset(s, b, 0, h);
  if (aligned) {  // the same for every thread of the block
    constexpr int kChunks = D / 8;
    for (int i = static_cast<int>(thread_x()); i < KT * kChunks; i += static_cast<int>(block_dim_x())) {
      const int r = i / kChunks, c = i % kChunks;
      bf16* dst = tile + r * kTcStride<D> + c * 8;
      if (r0 + r < seq) {
        copy_async_16(dst, head + (r0 + r) * s.token + c * 8);
      } else {
        SHARC_UNROLL
        for (int e = 0; e < 8; ++e) dst[e] = zero;
      }
    }
    return;
  }
  for (int i = static_cast<int>(thread_x()); i < KT * D; i += static_cast<int>(block_dim_x())) {
    const int r = i / D, d = i % D;
    tile[r * kTcStride<D> + d] = r0 + r < seq ? x[attention_offset(s, b, r0 + r, h) + d] : zero;
  }
}

// Two tiles of one head (K and V, or Q and dO), walked KT rows at a time,
// two stages deep in shared memory ([stage][x, y][KT][kTcStride]): fetch()
// starts a stage's copies as one group; the walk is
//   fetch(first, 0);
//   for each tile r0 (stage = i % 2):
//     if a next tile: fetch(r0 + KT, stage ^ 1), async_copies_wait<1>()
//     else async_copies_wait<0>()
//     sync_block(); compute on x(stage), y(stage); sync_block();
// The second sync keeps the stage from being refilled while it is read.
template <int D, int KT>
struct TcTileStages {
  const bf16 *xg, *yg;
  AttentionStrides sx, sy;
  int b, h, seq;
  bool x_aligned, y_aligned;
  bf16* tiles;

  SHARC_DEVICE TcTileStages(bf16* shared, const bf16* x_, AttentionStrides sx_, const bf16* y_,
                            AttentionStrides sy_, int b_, int h_, int seq_)
      : xg(x_), yg(y_), sx(sx_), sy(sy_), b(b_), h(h_), seq(seq_),
        x_aligned(tc_rows_aligned(x_, sx_, b_, h_)), y_aligned(tc_rows_aligned(y_, sy_, b_, h_)),
        tiles(shared) {}
  SHARC_DEVICE bf16* x(int stage) const { return tiles + (2 * stage) * kTcTile<D, KT>; }
  SHARC_DEVICE bf16* y(int stage) const { return tiles + (2 * stage + 1) * kTcTile<D, KT>; }
  SHARC_DEVICE void fetch(int r0, int stage) const {
    start_tc_tile<D, KT>(x(stage), xg, sx, b, h, r0, seq, x_aligned);
    start_tc_tile<D, KT>(y(stage), yg, sy, b, h, r0, seq, y_aligned);
    async_copies_commit();
  }
};

// A fragments of 16 rows of x starting at row0 (rows past seq are zero).
template <int D>
SHARC_DEVICE void load_tc_rows(uint32_t (&f)[D / 16][4], const bf16* x, AttentionStrides s, int b,
                               int h, int row0, int seq) {
  const int lane = static_cast<int>(thread_x() % kWarpSize), g = lane / 4, t = lane % 4;
  SHARC_UNROLL
  for (int kk = 0; kk < D / 16; ++kk)
    SHARC_UNROLL
    for (int r = 0; r < 4; ++r) {
      const int row = row0 + g + 8 * (r % 2), col = kk * 16 + 2 * (t + 4 * (r / 2));
      const bf16* p = x + attention_offset(s, b, row, h) + col;
      f[kk][r] = row < seq ? pack_bits(p[0], p[1]) : 0u;
    }
}

// acc[m][nt] = A[m] (16 x D, fragments a[m]) times tile^T (D x KT): the
// tile's rows are the product's columns. One ldmatrix_x4 loads the B
// fragments of two column blocks, nt and nt + 1, for one step kk, and feeds
// all M row blocks: its matrix j is tile rows (nt + j / 2) * 8 .. + 8,
// columns kk * 16 + (j % 2) * 8 .. + 8.
template <int D, int M, int KT>
SHARC_DEVICE void mma_rows_by_tile_t(float (&acc)[M][KT / 8][4], const uint32_t (&a)[M][D / 16][4],
                                     const bf16* tile) {
  const int lane = static_cast<int>(thread_x() % kWarpSize), i = lane % 8, j = lane / 8;
  SHARC_UNROLL
  for (int m = 0; m < M; ++m)
    SHARC_UNROLL
    for (int nt = 0; nt < KT / 8; ++nt) acc[m][nt][0] = acc[m][nt][1] = acc[m][nt][2] = acc[m][nt][3] = 0.0f;
  SHARC_UNROLL
  for (int nt = 0; nt < KT / 8; nt += 2)
    SHARC_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t bm[4];
      ldmatrix_x4(bm, tile + ((nt + j / 2) * 8 + i) * kTcStride<D> + kk * 16 + (j % 2) * 8);
      const uint32_t b0[2] = {bm[0], bm[1]}, b1[2] = {bm[2], bm[3]};
      SHARC_UNROLL
      for (int m = 0; m < M; ++m) {
        mma_16x8x16(acc[m][nt], a[m][kk], b0, acc[m][nt]);
        mma_16x8x16(acc[m][nt + 1], a[m][kk], b1, acc[m][nt + 1]);
      }
    }
}

// acc[m] (16 x D) += P[m] (16 x KT, accumulator registers, rounded to bf16)
// times tile (KT x D): a B fragment is the tile's columns, so it is loaded
// transposed; one ldmatrix_x4_trans gives two column blocks, dn and dn + 1,
// for all M row blocks, its matrix j being tile rows kk * 16 + (j % 2) * 8
// .. + 8, columns (dn + j / 2) * 8 .. + 8.
template <int D, int M, int KT>
SHARC_DEVICE void mma_acc_by_tile(float (&acc)[M][D / 8][4], const float (&p)[M][KT / 8][4],
                                  const bf16* tile) {
  const int lane = static_cast<int>(thread_x() % kWarpSize), i = lane % 8, j = lane / 8;
  SHARC_UNROLL
  for (int kk = 0; kk < KT / 16; ++kk) {
    uint32_t pf[M][4];
    SHARC_UNROLL
    for (int m = 0; m < M; ++m) {
      pf[m][0] = pack_bf16x2(p[m][2 * kk][0], p[m][2 * kk][1]);
      pf[m][1] = pack_bf16x2(p[m][2 * kk][2], p[m][2 * kk][3]);
      pf[m][2] = pack_bf16x2(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
      pf[m][3] = pack_bf16x2(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
    }
    SHARC_UNROLL
    for (int dn = 0; dn < D / 8; dn += 2) {
      uint32_t bm[4];
      ldmatrix_x4_trans(bm, tile + (kk * 16 + (j % 2) * 8 + i) * kTcStride<D> + (dn + j / 2) * 8);
      const uint32_t b0[2] = {bm[0], bm[1]}, b1[2] = {bm[2], bm[3]};
      SHARC_UNROLL
      for (int m = 0; m < M; ++m) {
        mma_16x8x16(acc[m][dn], pf[m], b0, acc[m][dn]);
        mma_16x8x16(acc[m][dn + 1], pf[m], b1, acc[m][dn + 1]);
      }
    }
  }
}

// Writes 16 rows (row0 + g, row0 + g + 8) of acc * scale to x.
template <int D>
SHARC_DEVICE void store_tc_rows(bf16* x, AttentionStrides s, int b, int h, int row0, int seq,
                                const float (&acc)[D / 8][4], float scale) {
  const int lane = static_cast<int>(thread_x() % kWarpSize), g = lane / 4, t = lane % 4;
  SHARC_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    if (row >= seq) continue;
    bf16* out = x + attention_offset(s, b, row, h);
    SHARC_UNROLL
    for (int dn = 0; dn < D / 8; ++dn)
      SHARC_UNROLL
      for (int e = 0; e < 2; ++e)
        out[dn * 8 + 2 * t + e] = from_f32<bf16>(acc[dn][half * 2 + e] * scale);
  }
}

// The block of query rows a forward or dq block owns: with a causal mask
// the last rows see the most keys, so the grid starts them first (the
// short blocks then fill the tail of the launch instead of the long ones).
SHARC_DEVICE int tc_query_block(bool causal) {
  const int x = static_cast<int>(block_x());
  return causal ? static_cast<int>(grid_dim_x()) - 1 - x : x;
}

// Grid (ceil(seq / kTcRows<M>), heads, batch), kTcWarps warps; shared
// memory kTcTileBytes<D, kTcForwardKeys>.
template <int D, int M>
SHARC_KERNEL void attention_forward_tc_kernel(AttentionArgs<bf16> a) {
  static_assert(D % 16 == 0, "head_dim is a multiple of 16");
  constexpr int KT = kTcForwardKeys, kRows = 16 * M;  // rows per warp
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  const int lane = static_cast<int>(thread_x() % kWarpSize), g = lane / 4, t = lane % 4;
  const int h = static_cast<int>(block_y()), b = static_cast<int>(block_z());
  const int block_q0 = tc_query_block(a.causal) * kTcRows<M>;
  const int q0 = block_q0 + warp * kRows;  // this warp's first row
  uint32_t qf[M][D / 16][4];  // this warp's Q as A fragments
  SHARC_UNROLL
  for (int m = 0; m < M; ++m) load_tc_rows<D>(qf[m], a.q, a.sq, b, h, q0 + 16 * m, a.seq);
  float o[M][D / 8][4];
  SHARC_UNROLL
  for (int m = 0; m < M; ++m)
    SHARC_UNROLL
    for (int dn = 0; dn < D / 8; ++dn) o[m][dn][0] = o[m][dn][1] = o[m][dn][2] = o[m][dn][3] = 0.0f;
  // The running maximum mx of row block m's rows g and g + 8 is of the
  // scores times log2(e), so that each exponential is one exp2.
  float mx[M][2], l[M][2];
  SHARC_UNROLL
  for (int m = 0; m < M; ++m) mx[m][0] = mx[m][1] = -INFINITY, l[m][0] = l[m][1] = 0.0f;
  const float scale_log2 = a.scale * kLog2e;

  const int block_end = block_q0 + kTcRows<M> < a.seq ? block_q0 + kTcRows<M> : a.seq;
  const int key_end = a.causal ? block_end : a.seq;
  const TcTileStages<D, KT> kv(shared_memory<bf16>(), a.k, a.sk, a.v, a.sv, b, h, a.seq);
  kv.fetch(0, 0);
  for (int j0 = 0, it = 0; j0 < key_end; j0 += KT, ++it) {
    const int stage = it % 2;
    if (j0 + KT < key_end) {
      kv.fetch(j0 + KT, stage ^ 1);
      async_copies_wait<1>();
    } else {
      async_copies_wait<0>();
    }
    sync_block();
    // Warp-uniform: a warp past the sequence, or whose rows all precede
    // the tile (causal), has nothing to add.
    if (q0 < a.seq && !(a.causal && j0 > q0 + kRows - 1)) {
      float s[M][KT / 8][4];
      mma_rows_by_tile_t<D, M, KT>(s, qf, kv.x(stage));  // S = Q K^T
      // Warp-uniform: whether some key of the tile is hidden from some row
      // of the warp (past the sequence, or after the row); only then is
      // each score checked.
      const bool edge = j0 + KT > a.seq || (a.causal && j0 + KT - 1 > q0);
      SHARC_UNROLL
      for (int m = 0; m < M; ++m)
        SHARC_UNROLL
        for (int half = 0; half < 2; ++half) {
          const int row = q0 + 16 * m + g + 8 * half;
          float top = -INFINITY;
          SHARC_UNROLL
          for (int nt = 0; nt < KT / 8; ++nt)
            SHARC_UNROLL
            for (int e = 0; e < 2; ++e) {
              const int key = j0 + nt * 8 + 2 * t + e;
              float& v = s[m][nt][half * 2 + e];
              v = edge && (key >= a.seq || (a.causal && key > row)) ? -INFINITY : v * scale_log2;
              top = fmaxf(top, v);
            }
          top = fmaxf(top, shfl_xor(top, 1));
          top = fmaxf(top, shfl_xor(top, 2));
          const float m_new = fmaxf(mx[m][half], top);
          const float correction = m_new == -INFINITY ? 1.0f : exp2_f(mx[m][half] - m_new);
          float sum = 0.0f;
          SHARC_UNROLL
          for (int nt = 0; nt < KT / 8; ++nt)
            SHARC_UNROLL
            for (int e = 0; e < 2; ++e) {
              float& v = s[m][nt][half * 2 + e];
              v = edge && v == -INFINITY ? 0.0f : exp2_f(v - m_new);
              sum += v;
            }
          sum += shfl_xor(sum, 1);
          sum += shfl_xor(sum, 2);
          l[m][half] = l[m][half] * correction + sum;
          mx[m][half] = m_new;
          SHARC_UNROLL
          for (int dn = 0; dn < D / 8; ++dn) {
            o[m][dn][half * 2] *= correction;
            o[m][dn][half * 2 + 1] *= correction;
          }
        }
      mma_acc_by_tile<D, M, KT>(o, s, kv.y(stage));  // O += P V
    }
    sync_block();  // before the next fetch refills this stage
  }
  SHARC_UNROLL
  for (int m = 0; m < M; ++m)
    SHARC_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int row = q0 + 16 * m + g + 8 * half;
      if (row >= a.seq) continue;
      const float inv = 1.0f / l[m][half];
      bf16* out = a.o + attention_offset(a.so, b, row, h);
      SHARC_UNROLL
      for (int dn = 0; dn < D / 8; ++dn)
        SHARC_UNROLL
        for (int e = 0; e < 2; ++e)
          out[dn * 8 + 2 * t + e] = from_f32<bf16>(o[m][dn][half * 2 + e] * inv);
      if (t == 0)
        a.lse[(static_cast<int64_t>(b) * a.heads + h) * a.seq + row] = mx[m][half] * kLn2 + log_f(l[m][half]);
    }
}

// dk and dv on the tensor cores: each warp owns 16 keys and walks the query
// tiles that can see them. Per tile, with queries as columns:
//   P^T = exp(scale K Q^T - lse),  dP^T = V dO^T,  dS^T = P^T (dP^T - delta)
//   dV += P^T dO,  dK += dS^T Q   (times scale at the end).
// The lse and delta of a tile's queries are staged beside its Q and dO
// tiles (one word per thread, copied asynchronously too). Grid
// (ceil(seq / kTcRows<1>), heads, batch), kTcWarps warps; shared memory
// kTcDkvBytes<D>.
template <int D>
constexpr size_t kTcDkvBytes = kTcTileBytes<D, kTcDkvQueries> + 4 * kTcDkvQueries * sizeof(float);
template <int D>
SHARC_KERNEL void attention_backward_dkv_tc_kernel(AttentionGradArgs<bf16> a) {
  constexpr int KT = kTcDkvQueries;
  static_assert(KT <= kTcWarps * kWarpSize, "a thread per row of the statistics");
  bf16* shared = shared_memory<bf16>();
  float* stats = reinterpret_cast<float*>(shared + 4 * kTcTile<D, KT>);  // [stage][lse, delta][KT]
  const float scale_log2 = a.scale * kLog2e;
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  const int lane = static_cast<int>(thread_x() % kWarpSize), g = lane / 4, t = lane % 4;
  const int h = static_cast<int>(block_y()), b = static_cast<int>(block_z());
  const int block_k0 = static_cast<int>(block_x()) * kTcRows<1>;
  const int k0 = block_k0 + warp * 16;
  const int64_t stat = (static_cast<int64_t>(b) * a.heads + h) * a.seq;
  uint32_t kf[1][D / 16][4], vf[1][D / 16][4];
  load_tc_rows<D>(kf[0], a.k, a.sk, b, h, k0, a.seq);
  load_tc_rows<D>(vf[0], a.v, a.sv, b, h, k0, a.seq);
  float dk[1][D / 8][4], dv[1][D / 8][4];
  SHARC_UNROLL
  for (int dn = 0; dn < D / 8; ++dn)
    SHARC_UNROLL
    for (int r = 0; r < 4; ++r) dk[0][dn][r] = dv[0][dn][r] = 0.0f;
  const int first = a.causal ? block_k0 - block_k0 % KT : 0;
  const TcTileStages<D, KT> qg(shared, a.q, a.sq, a.dout, a.sdo, b, h, a.seq);
  const int tr = static_cast<int>(thread_x());
  // Q, dO and their rows' statistics for the tile at i0 into `stage`.
  auto fetch = [&](int i0, int stage) {
    if (tr < KT) {
      float* lse_s = stats + stage * 2 * KT;
      if (i0 + tr < a.seq) {
        copy_async_4(lse_s + tr, a.lse + stat + i0 + tr);
        copy_async_4(lse_s + KT + tr, a.delta + stat + i0 + tr);
      } else {
        lse_s[tr] = lse_s[KT + tr] = 0.0f;
      }
    }
    qg.fetch(i0, stage);  // commits the group, statistics included
  };
  fetch(first, 0);
  for (int i0 = first, it = 0; i0 < a.seq; i0 += KT, ++it) {
    const int stage = it % 2;
    if (i0 + KT < a.seq) {
      fetch(i0 + KT, stage ^ 1);
      async_copies_wait<1>();
    } else {
      async_copies_wait<0>();
    }
    sync_block();
    if (k0 < a.seq && !(a.causal && i0 + KT <= k0)) {
      const float* lse_s = stats + stage * 2 * KT;
      const float* delta_s = lse_s + KT;
      float p[1][KT / 8][4], ds[1][KT / 8][4];
      mma_rows_by_tile_t<D, 1, KT>(p, kf, qg.x(stage));
      mma_rows_by_tile_t<D, 1, KT>(ds, vf, qg.y(stage));
      // Warp-uniform: some query of the tile is past the sequence or
      // precedes some key of the warp.
      const bool edge = i0 + KT > a.seq || (a.causal && i0 < k0 + 15);
      SHARC_UNROLL
      for (int nt = 0; nt < KT / 8; ++nt)
        SHARC_UNROLL
        for (int r = 0; r < 4; ++r) {
          const int key = k0 + g + 8 * (r / 2), c = nt * 8 + 2 * t + r % 2, query = i0 + c;
          const bool masked = edge && (query >= a.seq || (a.causal && query < key));
          const float pv = masked ? 0.0f : exp2_f(p[0][nt][r] * scale_log2 - lse_s[c] * kLog2e);
          p[0][nt][r] = pv;
          ds[0][nt][r] = pv * (ds[0][nt][r] - delta_s[c]);
        }
      mma_acc_by_tile<D, 1, KT>(dv, p, qg.y(stage));
      mma_acc_by_tile<D, 1, KT>(dk, ds, qg.x(stage));
    }
    sync_block();
  }
  store_tc_rows<D>(a.dk, a.sdk, b, h, k0, a.seq, dk[0], a.scale);
  store_tc_rows<D>(a.dv, a.sdv, b, h, k0, a.seq, dv[0], 1.0f);
}

// dq on the tensor cores: each warp owns 16 * M queries and walks the key
// tiles they see: P = exp(scale Q K^T - lse), dP = dO V^T, dS = P (dP -
// delta), dQ += dS K (times scale at the end). Grid (ceil(seq /
// kTcRows<M>), heads, batch), kTcWarps warps; shared memory
// kTcTileBytes<D, kTcDqKeys>.
template <int D, int M>
SHARC_KERNEL void attention_backward_dq_tc_kernel(AttentionGradArgs<bf16> a) {
  constexpr int KT = kTcDqKeys, kRows = 16 * M;
  const int warp = static_cast<int>(thread_x() / kWarpSize);
  const int lane = static_cast<int>(thread_x() % kWarpSize), g = lane / 4, t = lane % 4;
  const int h = static_cast<int>(block_y()), b = static_cast<int>(block_z());
  const int block_q0 = tc_query_block(a.causal) * kTcRows<M>;
  const int q0 = block_q0 + warp * kRows;
  const int64_t stat = (static_cast<int64_t>(b) * a.heads + h) * a.seq;
  uint32_t qf[M][D / 16][4], gf[M][D / 16][4];
  float lse[M][2], delta[M][2];
  SHARC_UNROLL
  for (int m = 0; m < M; ++m) {
    load_tc_rows<D>(qf[m], a.q, a.sq, b, h, q0 + 16 * m, a.seq);
    load_tc_rows<D>(gf[m], a.dout, a.sdo, b, h, q0 + 16 * m, a.seq);
    SHARC_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int row = q0 + 16 * m + g + 8 * half;
      lse[m][half] = row < a.seq ? a.lse[stat + row] * kLog2e : 0.0f;  // for exp2
      delta[m][half] = row < a.seq ? a.delta[stat + row] : 0.0f;
    }
  }
  const float scale_log2 = a.scale * kLog2e;
  float dq[M][D / 8][4];
  SHARC_UNROLL
  for (int m = 0; m < M; ++m)
    SHARC_UNROLL
    for (int dn = 0; dn < D / 8; ++dn) dq[m][dn][0] = dq[m][dn][1] = dq[m][dn][2] = dq[m][dn][3] = 0.0f;
  const int block_end = block_q0 + kTcRows<M> < a.seq ? block_q0 + kTcRows<M> : a.seq;
  const int key_end = a.causal ? block_end : a.seq;
  const TcTileStages<D, KT> kv(shared_memory<bf16>(), a.k, a.sk, a.v, a.sv, b, h, a.seq);
  kv.fetch(0, 0);
  for (int j0 = 0, it = 0; j0 < key_end; j0 += KT, ++it) {
    const int stage = it % 2;
    if (j0 + KT < key_end) {
      kv.fetch(j0 + KT, stage ^ 1);
      async_copies_wait<1>();
    } else {
      async_copies_wait<0>();
    }
    sync_block();
    if (q0 < a.seq && !(a.causal && j0 > q0 + kRows - 1)) {
      float ds[M][KT / 8][4], dp[M][KT / 8][4];
      mma_rows_by_tile_t<D, M, KT>(ds, qf, kv.x(stage));
      mma_rows_by_tile_t<D, M, KT>(dp, gf, kv.y(stage));
      const bool edge = j0 + KT > a.seq || (a.causal && j0 + KT - 1 > q0);  // as the forward's
      SHARC_UNROLL
      for (int m = 0; m < M; ++m)
        SHARC_UNROLL
        for (int nt = 0; nt < KT / 8; ++nt)
          SHARC_UNROLL
          for (int r = 0; r < 4; ++r) {
            const int row = q0 + 16 * m + g + 8 * (r / 2), key = j0 + nt * 8 + 2 * t + r % 2;
            const bool masked = edge && (key >= a.seq || (a.causal && key > row));
            const float p = masked ? 0.0f : exp2_f(ds[m][nt][r] * scale_log2 - lse[m][r / 2]);
            ds[m][nt][r] = p * (dp[m][nt][r] - delta[m][r / 2]);
          }
      mma_acc_by_tile<D, M, KT>(dq, ds, kv.x(stage));
    }
    sync_block();
  }
  SHARC_UNROLL
  for (int m = 0; m < M; ++m) store_tc_rows<D>(a.dq, a.sdq, b, h, q0 + 16 * m, a.seq, dq[m], a.scale);
}

// ---------------------------------------------------------------------------
// One warp, one tensor-core instruction: d[16x8] = a[16x16] b[16x8], all row
// major in memory, each lane loading exactly the fragment elements
// mma_16x8x16 documents (dialect.h). The tensor-core kernels build on this
// layout, so tests run it on the device and on the simulator.
SHARC_KERNEL inline void mma_16x8x16_check_kernel(float* d, const float* a, const float* b) {
  const int lane = static_cast<int>(thread_x() % kWarpSize);
  const int g = lane / 4, t = lane % 4;
  uint32_t af[4], bf[2];
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r % 2), col = 2 * (t + 4 * (r / 2));
    af[r] = pack_bf16x2(a[row * 16 + col], a[row * 16 + col + 1]);
  }
  for (int r = 0; r < 2; ++r) {
    const int k = 2 * (t + 4 * r);
    bf[r] = pack_bf16x2(b[k * 8 + g], b[(k + 1) * 8 + g]);
  }
  const float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float out[4];
  mma_16x8x16(out, af, bf, c);
  for (int r = 0; r < 4; ++r) d[(g + 8 * (r / 2)) * 8 + 2 * t + r % 2] = out[r];
}

}  // inline namespace cuda_target / sim_target
}  // namespace sharc::gpu
