// The launches behind KernelSet's kernel calls, written once for both
// targets: sim_kernels.cpp (host compiler, block simulator) and
// cuda_kernels.cu (nvcc) each include this file and derive their KernelSet
// from LaunchingKernels, adding memory, the GEMM and a name. Include it from
// those two files only.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/gpu/kernel_set.h"
#include "runtime/gpu/kernels.cuh"

namespace sharc::gpu {
#if defined(__CUDACC__)
inline namespace cuda_target {
#else
inline namespace sim_target {
#endif

inline unsigned blocks_for(int64_t n, int64_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// Calls f with a value of the C++ type of activation type t.
template <class F>
void with_activation_type(DType t, const char* what, F&& f) {
  if (t == DType::kF32)
    f(float{});
  else if (t == DType::kBF16)
    f(bf16{});
  else
    throw std::invalid_argument(std::string(what) + ": activations are f32 or bf16, not " +
                                std::string(rt::dtype_name(t)));
}

// Calls f with std::integral_constant<int, head_dim>.
template <class F>
void with_head_dim(int head_dim, const char* what, F&& f) {
  switch (head_dim) {
    case 8: f(std::integral_constant<int, 8>{}); return;
    case 16: f(std::integral_constant<int, 16>{}); return;
    case 32: f(std::integral_constant<int, 32>{}); return;
    case 64: f(std::integral_constant<int, 64>{}); return;
    default:
      throw std::invalid_argument(std::string(what) + ": head_dim " + std::to_string(head_dim) +
                                  " has no kernel; the attention kernels are built for 8, 16, "
                                  "32 and 64");
  }
}

class LaunchingKernels : public KernelSet {
 public:
  void layernorm_forward(const LayerNormForward& a) override {
    if (a.rows == 0) return;
    with_activation_type(a.dtype, "layernorm_forward", [&](auto tag) {
      using T = decltype(tag);
      launch("layernorm_forward", layernorm_forward_kernel<T>,
             Dim3{blocks_for(a.rows, kLayerNormWarps)}, Dim3{kLayerNormWarps * kWarpSize}, 0,
             stream(), static_cast<T*>(a.out), a.mean, a.rstd, static_cast<const T*>(a.x),
             static_cast<const T*>(a.add), static_cast<T*>(a.sum_out), a.w, a.b, a.rows, a.cols,
             a.eps);
    });
  }

  void layernorm_backward(const LayerNormBackward& a) override {
    if (a.rows == 0 || a.cols == 0) return;
    with_activation_type(a.dtype, "layernorm_backward", [&](auto tag) {
      using T = decltype(tag);
      // 16 bytes at a time where every row starts 16-byte aligned.
      const bool chunked = a.cols % kChunk<T> == 0 && reinterpret_cast<uintptr_t>(a.dx) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(a.dout) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
      auto run = [&](auto per) {
        constexpr int kPer = decltype(per)::value;
        launch("layernorm_backward_dx", layernorm_backward_dx_kernel<T, kPer>,
               Dim3{blocks_for(a.rows, kLayerNormWarps)}, Dim3{kLayerNormWarps * kWarpSize}, 0,
               stream(), static_cast<T*>(a.dx), static_cast<const T*>(a.dout),
               static_cast<const T*>(a.x), a.w, a.mean, a.rstd, a.rows, a.cols, a.accumulate);
        launch("layernorm_backward_partial", layernorm_backward_partial_kernel<T, kPer>,
               Dim3{blocks_for(a.cols, kWarpSize * kPer), static_cast<unsigned>(layernorm_slices(a.rows))},
               Dim3{kLayerNormWarps * kWarpSize}, 2 * kLayerNormWarps * kWarpSize * kPer * sizeof(float),
               stream(), a.scratch, static_cast<const T*>(a.dout), static_cast<const T*>(a.x),
               a.mean, a.rstd, a.rows, a.cols);
      };
      if (chunked)
        run(std::integral_constant<int, kChunk<T>>{});
      else
        run(std::integral_constant<int, 1>{});
      const int slices = layernorm_slices(a.rows);
      launch("layernorm_backward_finish", layernorm_backward_finish_kernel,
             Dim3{blocks_for(a.cols, kWarpSize)}, Dim3{kLayerNormWarps * kWarpSize},
             kLayerNormWarps * kWarpSize * sizeof(float), stream(), a.dw, a.db,
             static_cast<const float*>(a.scratch), slices, a.cols, a.accumulate_params);
    });
  }

  void cross_entropy(const CrossEntropy& a) override {
    if (a.rows == 0) return;
    with_activation_type(a.dtype, "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      launch("cross_entropy", cross_entropy_kernel<T>, Dim3{static_cast<unsigned>(a.rows)},
             Dim3{kCrossEntropyThreads}, 2 * kWarpSize * sizeof(float), stream(), a.loss,
             static_cast<T*>(a.dlogits), static_cast<const T*>(a.logits), a.targets,
             a.float_targets, a.dloss_rows, a.vocab, a.dloss);
    });
  }

  void attention_forward(const Attention& a) override {
    if (a.batch == 0 || a.heads == 0 || a.seq == 0) return;
    with_activation_type(a.dtype, "attention_forward", [&](auto tag) {
      using T = decltype(tag);
      with_head_dim(a.head_dim, "attention_forward", [&](auto dim) {
        constexpr int D = decltype(dim)::value;
        AttentionArgs<T> k{static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                           static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse, a.sq, a.sk,
                           a.sv, a.so, a.batch, a.heads, a.seq, a.scale, a.causal};
        if constexpr (std::is_same_v<T, bf16> && D % 16 == 0) {  // the mma's k is 16
          if (tensor_cores_) {
            with_rows_per_warp([&](auto rows) {
              constexpr int M = decltype(rows)::value;
              launch("attention_forward_tc", attention_forward_tc_kernel<D, M>,
                     Dim3{blocks_for(a.seq, kTcRows<M>), static_cast<unsigned>(a.heads),
                          static_cast<unsigned>(a.batch)},
                     Dim3{kTcWarps * kWarpSize}, kTcTileBytes<D, kTcForwardKeys>, stream(), k);
            });
            return;
          }
        }
        launch("attention_forward", attention_forward_kernel<D, T>,
               Dim3{blocks_for(a.seq, kAttentionRows), static_cast<unsigned>(a.heads),
                    static_cast<unsigned>(a.batch)},
               Dim3{kAttentionRows}, 2 * kAttentionTile * D * sizeof(float), stream(), k);
      });
    });
  }

  void attention_backward(const AttentionBackward& a) override {
    if (a.batch == 0 || a.heads == 0 || a.seq == 0) return;
    with_activation_type(a.dtype, "attention_backward", [&](auto tag) {
      using T = decltype(tag);
      with_head_dim(a.head_dim, "attention_backward", [&](auto dim) {
        constexpr int D = decltype(dim)::value;
        AttentionGradArgs<T> k{static_cast<const T*>(a.q),    static_cast<const T*>(a.k),
                               static_cast<const T*>(a.v),    static_cast<const T*>(a.o),
                               static_cast<const T*>(a.dout), a.lse,
                               a.delta,                       static_cast<T*>(a.dq),
                               static_cast<T*>(a.dk),         static_cast<T*>(a.dv),
                               a.sq,                          a.sk,
                               a.sv,                          a.so,
                               a.sdo,                         a.sdq,
                               a.sdk,                         a.sdv,
                               a.batch,                       a.heads,
                               a.seq,                         a.scale,
                               a.causal};
        const int64_t rows = static_cast<int64_t>(a.batch) * a.heads * a.seq;
        launch("attention_delta", attention_delta_kernel<D, T>, Dim3{blocks_for(rows, 8)},
               Dim3{8 * kWarpSize}, 0, stream(), k);
        if constexpr (std::is_same_v<T, bf16> && D % 16 == 0) {  // the mma's k is 16
          if (tensor_cores_) {
            const auto heads = static_cast<unsigned>(a.heads), batch = static_cast<unsigned>(a.batch);
            launch("attention_backward_dkv_tc", attention_backward_dkv_tc_kernel<D>,
                   Dim3{blocks_for(a.seq, kTcRows<1>), heads, batch}, Dim3{kTcWarps * kWarpSize},
                   kTcDkvBytes<D>, stream(), k);
            with_rows_per_warp([&](auto rows) {
              constexpr int M = decltype(rows)::value;
              launch("attention_backward_dq_tc", attention_backward_dq_tc_kernel<D, M>,
                     Dim3{blocks_for(a.seq, kTcRows<M>), heads, batch}, Dim3{kTcWarps * kWarpSize},
                     kTcTileBytes<D, kTcDqKeys>, stream(), k);
            });
            return;
          }
        }
        const Dim3 grid{blocks_for(a.seq, kAttentionRows), static_cast<unsigned>(a.heads),
                        static_cast<unsigned>(a.batch)};
        launch("attention_backward_dkv", attention_backward_dkv_kernel<D, T>, grid,
               Dim3{kAttentionRows}, (2 * kAttentionTile * D + 2 * kAttentionTile) * sizeof(float),
               stream(), k);
        launch("attention_backward_dq", attention_backward_dq_kernel<D, T>, grid,
               Dim3{kAttentionRows}, 2 * kAttentionTile * D * sizeof(float), stream(), k);
      });
    });
  }

  void mma_16x8x16_check(float* d, const float* a, const float* b) override {
    launch("mma_16x8x16_check", mma_16x8x16_check_kernel, Dim3{1}, Dim3{kWarpSize}, 0, stream(),
           d, a, b);
  }

  void embedding_forward(const Embedding& a) override {
    if (a.rows == 0) return;
    with_activation_type(a.dtype, "embedding_forward", [&](auto tag) {
      using T = decltype(tag);
      launch("embedding_forward", embedding_forward_kernel<T>,
             Dim3{static_cast<unsigned>(a.rows)}, Dim3{256}, 0, stream(), static_cast<T*>(a.out),
             a.ids, a.wte, a.wpe, a.cols, a.seq, a.vocab);
    });
  }

  void embedding_backward(const EmbeddingBackward& a) override {
    with_activation_type(a.dtype, "embedding_backward", [&](auto tag) {
      using T = decltype(tag);
      if (a.buckets > 0)
        launch("embedding_backward_wte", embedding_backward_wte_kernel<T>,
               Dim3{static_cast<unsigned>(a.buckets)}, Dim3{256}, 0, stream(), a.dwte,
               static_cast<const T*>(a.dout), a.positions, a.starts, a.tokens, a.cols,
               a.vocab);
      if (a.dwpe && a.seq > 0)
        launch("embedding_backward_wpe", embedding_backward_wpe_kernel<T>,
               Dim3{static_cast<unsigned>(a.seq)}, Dim3{256}, 0, stream(), a.dwpe,
               static_cast<const T*>(a.dout), a.batch, a.seq, a.cols);
    });
  }

  void embedding_lookup(const EmbeddingLookup& a) override {
    if (a.tokens == 0 || a.cols == 0) return;
    with_activation_type(a.dtype, "embedding_lookup", [&](auto tag) {
      using T = decltype(tag);
      launch("embedding_lookup", embedding_lookup_kernel<T>, Dim3{static_cast<unsigned>(a.tokens)},
             Dim3{std::min(blocks_for(a.cols, kWarpSize), 8u) * kWarpSize}, 0, stream(), static_cast<T*>(a.out),
             a.table, a.float_ids, a.ids, a.cols, a.first, a.vocab);
    });
  }

  void embedding_grad(const EmbeddingGrad& a) override {
    if (a.vocab == 0 || a.cols == 0) return;
    with_activation_type(a.dtype, "embedding_grad", [&](auto tag) {
      using T = decltype(tag);
      launch("embedding_grad", embedding_grad_kernel<T>,
             Dim3{blocks_for(a.vocab, kEmbeddingGradRows), blocks_for(a.cols, kEmbeddingGradThreads)},
             Dim3{kEmbeddingGradThreads}, kEmbeddingGradShared, stream(), a.dtable,
             static_cast<const T*>(a.dout), a.float_ids, a.ids, a.tokens, a.cols, a.first, a.vocab,
             a.round_bf16, a.accumulate);
    });
  }

  void global_norm(const GlobalNorm& a) override {
    if (a.num_chunks > 0)
      launch("sum_squares", sum_squares_kernel, Dim3{static_cast<unsigned>(a.num_chunks)},
             Dim3{kNormThreads}, kWarpSize * sizeof(float), stream(), a.partial, a.tensors,
             a.chunks);
    launch("global_norm_finish", global_norm_finish_kernel, Dim3{1}, Dim3{kNormThreads},
           kWarpSize * sizeof(float), stream(), a.norm, a.clip_factor,
           static_cast<const float*>(a.partial), a.num_chunks, a.max_norm);
  }

  void strided_copy(const void* in, const int64_t (&shape)[3], const int64_t (&strides)[3], size_t elem_bytes,
                    void* out) override {
    const int64_t total = shape[0] * shape[1] * shape[2];
    if (total == 0) return;
    const unsigned blocks = std::min(blocks_for(total, 256), 1024u);
    auto go = [&](auto word) {
      using W = decltype(word);
      launch("strided_copy3", strided_copy3_kernel<W>, Dim3{blocks}, Dim3{256}, 0, stream(), static_cast<W*>(out),
             static_cast<const W*>(in), shape[1], shape[2], strides[0], strides[1], strides[2], total);
    };
    if (elem_bytes == 4)
      go(uint32_t{});
    else if (elem_bytes == 2)
      go(uint16_t{});
    else
      throw std::invalid_argument("strided_copy: elements of " + std::to_string(elem_bytes) +
                                  " bytes; the kernel moves 2 or 4");
  }

  void bias_grad(const BiasGrad& a) override {
    if (a.cols == 0) return;
    with_activation_type(a.dtype, "bias_grad", [&](auto tag) {
      using T = decltype(tag);
      const int slices = layernorm_slices(a.rows);
      if (slices > 0)
        launch("column_sum_partial", column_sum_partial_kernel<T>,
               Dim3{blocks_for(a.cols, kWarpSize), static_cast<unsigned>(slices)},
               Dim3{kLayerNormWarps * kWarpSize}, kLayerNormWarps * kWarpSize * sizeof(float),
               stream(), a.scratch, static_cast<const T*>(a.dout), a.rows, a.cols);
      launch("column_sum_finish", column_sum_finish_kernel, Dim3{blocks_for(a.cols, kWarpSize)},
             Dim3{kLayerNormWarps * kWarpSize}, kLayerNormWarps * kWarpSize * sizeof(float), stream(), a.db,
             static_cast<const float*>(a.scratch), slices, a.cols, a.accumulate);
    });
  }

  void set_tensor_cores(bool on) override { tensor_cores_ = on; }
  void set_attention_rows_per_warp(int rows) override {
    if (rows != 16 && rows != 32)
      throw std::invalid_argument("set_attention_rows_per_warp: " + std::to_string(rows) +
                                  " rows; the tensor-core attention kernels are built for 16 and 32");
    rows_per_warp_ = rows;
  }
  Stream current_stream() override { return current_; }
  void use_stream(Stream s) override { current_ = s; }

  void adamw(const AdamWTensor* tensors, const TensorChunk* chunks, int num_chunks,
             const AdamWHyper& h) override {
    if (num_chunks == 0) return;
    launch("adamw", adamw_kernel, Dim3{static_cast<unsigned>(num_chunks)}, Dim3{kAdamWThreads}, 0,
           stream(), tensors, chunks, h);
  }

 protected:
  // The stream its launches go on.
  virtual Stream stream() const { return current_; }
  Stream current_ = nullptr;
  // bf16 attention on the tensor cores (the default), or on the scalar
  // kernels that f32 uses (set_tensor_cores(false), to compare the two).
  bool tensor_cores_ = true;
  // Query rows per warp of the tensor-core forward and dq kernels.
  int rows_per_warp_ = kTcDefaultRowsPerWarp;

 private:
  // f(std::integral_constant<int, M>) for the M blocks of 16 rows a warp
  // owns (rows_per_warp_ / 16).
  template <class F>
  void with_rows_per_warp(F&& f) {
    if (rows_per_warp_ == 16)
      f(std::integral_constant<int, 1>{});
    else
      f(std::integral_constant<int, 2>{});
  }
};

}  // inline namespace cuda_target / sim_target
}  // namespace sharc::gpu
