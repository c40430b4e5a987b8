// Plain argument structs shared by the kernels (kernels.cuh, compiled by nvcc
// or for the simulator) and the host API (kernel_set.h): no member depends on
// which compiler reads them, so both agree on their layout.
#pragma once

#include <cstdint>

namespace sharc::gpu {

// A stream: cudaStream_t under nvcc (nullptr is the default stream); on the
// simulator nullptr (run at once) or a sim::StreamQueue (run late).
using Stream = void*;

// One tensor of a multi-tensor AdamW launch (kernels.cuh, adamw_kernel).
struct AdamWTensor {
  float* param;
  const float* grad;
  float* m;
  float* v;
  void* param_bf16;  // nullable: where a bf16 copy of the updated parameter goes
  int64_t size;
  float weight_decay;
};

// Block k of a multi-tensor launch (adamw, global_norm) works on elements
// [begin, end) of tensors[tensor].
struct TensorChunk {
  int32_t tensor;
  int64_t begin;
  int64_t end;
};

constexpr int64_t kTensorChunk = 65536;  // elements per block at most

// An embedding_grad block (kernels.cuh): the table rows it owns, and its
// threads, one per column.
constexpr int kEmbeddingGradRows = 32;
constexpr int kEmbeddingGradThreads = 256;

struct AdamWHyper {
  float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const float* lr = nullptr;          // device scalar: this step's learning rate
  const float* count = nullptr;       // device scalar: t of the bias correction (1 first)
  const float* grad_scale = nullptr;  // device scalar, nullable (1): the clipping factor
};

// One tensor of a global-norm launch.
struct NormTensor {
  const float* x;
  int64_t size;
};

// Element strides of a [batch, seq, heads, D] view (D contiguous).
struct AttentionStrides {
  int64_t batch, token, head;
};

}  // namespace sharc::gpu
