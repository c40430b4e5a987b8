// The KernelSet of the block simulator: sharc's kernels run on host memory
// (kernel_launches.h, compiled here by the host compiler), and GEMMs run as
// a plain reference loop with cuBLASLt's semantics (f32 accumulation, then
// alpha, beta, bias and the GELU epilogue, one rounding on store).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "runtime/elementwise.h"
#include "runtime/gpu/kernel_launches.h"
#include "runtime/gpu/kernel_limits.h"

namespace sharc::gpu {

size_t layernorm_backward_scratch(int rows, int cols) { return layernorm_backward_scratch_floats(rows, cols); }

size_t bias_grad_scratch(int rows, int cols) {
  return static_cast<size_t>(layernorm_slices(rows)) * static_cast<size_t>(cols);
}

bool attention_supports_head_dim(int head_dim) { return attention_head_dim_supported(head_dim); }

std::vector<TensorChunk> tensor_chunks(const std::vector<int64_t>& sizes) {
  std::vector<TensorChunk> chunks;
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int64_t b = 0; b < sizes[t]; b += kTensorChunk)
      chunks.push_back({static_cast<int32_t>(t), b,
                        b + kTensorChunk < sizes[t] ? b + kTensorChunk : sizes[t]});
  return chunks;
}

EmbeddingBuckets embedding_buckets(const int32_t* ids, int64_t n) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  EmbeddingBuckets out;
  out.positions = order;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || ids[order[i]] != ids[order[i - 1]]) {
      out.starts.push_back(static_cast<int32_t>(i));
      out.tokens.push_back(ids[order[i]]);
    }
  out.starts.push_back(static_cast<int32_t>(n));
  return out;
}

namespace {

float load(DType t, const void* p, int64_t i) {
  return t == DType::kBF16 ? static_cast<float>(static_cast<const rt::bf16*>(p)[i])
                           : static_cast<const float*>(p)[i];
}
void store(DType t, void* p, int64_t i, float v) {
  if (t == DType::kBF16)
    static_cast<rt::bf16*>(p)[i] = rt::bf16(v);
  else
    static_cast<float*>(p)[i] = v;
}

// d/dx of the tanh-approximated GELU.
float gelu_derivative(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  const float u = kC * (x + 0.044715f * x * x * x);
  const float t = std::tanh(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kC * (1.0f + 3.0f * 0.044715f * x * x);
}

class SimKernels final : public LaunchingKernels {
 public:
  std::string name() const override { return "simulator"; }

  void* alloc(size_t bytes) override {
    return ::operator new(bytes > 0 ? bytes : 1, std::align_val_t{256});
  }
  void release(void* p) override { ::operator delete(p, std::align_val_t{256}); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  void gemm(const Gemm& g) override {
    if (g.epilogue == Gemm::Epilogue::kGeluBackward && (!g.pre_gelu || g.bias))
      throw std::invalid_argument("gemm: the GELU backward epilogue reads pre_gelu and takes no bias");
    if (g.ab_dtype == DType::kI32 || g.c_dtype == DType::kI32)
      throw std::invalid_argument("gemm: operands are f32 or bf16");
    // The operands widened to f32 once, op(B) as [k, n]; each row of C
    // accumulates over p in order (the reference order), a row at a time.
    std::vector<float> b(static_cast<size_t>(g.k) * g.n), acc(static_cast<size_t>(g.n));
    for (int p = 0; p < g.k; ++p)
      for (int j = 0; j < g.n; ++j)
        b[static_cast<size_t>(p) * g.n + j] =
            load(g.ab_dtype, g.b, g.trans_b ? int64_t{j} * g.ldb + p : int64_t{p} * g.ldb + j);
    for (int i = 0; i < g.m; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int p = 0; p < g.k; ++p) {
        const float a = load(g.ab_dtype, g.a, g.trans_a ? int64_t{p} * g.lda + i : int64_t{i} * g.lda + p);
        const float* brow = b.data() + static_cast<size_t>(p) * g.n;
        for (int j = 0; j < g.n; ++j) acc[j] += a * brow[j];
      }
      for (int j = 0; j < g.n; ++j) {
        const int64_t c = int64_t{i} * g.ldc + j;
        float v = g.alpha * acc[j];
        if (g.beta != 0.0f) v += g.beta * load(g.c_dtype, g.c, c);
        if (g.epilogue == Gemm::Epilogue::kGeluBackward) {
          v *= gelu_derivative(load(g.c_dtype, g.pre_gelu, c));
          store(g.c_dtype, g.c, c, v);
          continue;
        }
        if (g.bias) v += load(g.c_dtype, g.bias, j);
        if (g.epilogue == Gemm::Epilogue::kGelu) {
          if (g.pre_gelu) store(g.c_dtype, g.pre_gelu, c, v);
          v = rt::gelu(v);
        }
        store(g.c_dtype, g.c, c, v);
      }
    }
  }
};

}  // namespace

KernelSet& simulated_kernels() {
  static SimKernels kernels;
  return kernels;
}

}  // namespace sharc::gpu
